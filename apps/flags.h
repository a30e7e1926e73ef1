// The command line of the `ringpipe` subcommands: flags as data, one grammar per flag.
//
// A flag is a FlagSpec: its name, its grammar (how its text reads), the effective default `--help`
// shows and a help line. Each subcommand lists the flags it accepts (apps/subcommands.h); a flag that
// several subcommands share (`--codec`, `--segment_bytes`, `--link`, `--seed`, `--predict_only`,
// `--title`, every config field) is defined once (apps/config_fields.h, apps/shared_flags.h) and so
// has one grammar everywhere: `--segment_bytes=64K` reads the same in `run` and in `allreduce`.
// There is no global flag state: ParseFlags returns the values it read, as text that already
// passed the flag's grammar, and the typed getters read them back.
//
//   ringpipe <subcommand> [--flag=value | --flag value | --bool_flag | --nobool_flag]...
//
// Errors are InvalidArgument with one line that starts with the flag ("--dp: expected an integer,
// got 'x'"); the binary prints it and exits 2. Help wins: an argument that is exactly a help word
// (IsHelpArgument: -h, --help, -help, --helpfull) anywhere among the arguments makes ParseFlags return
// help = true and nothing else, whatever the other arguments are (`run --dp=abc --help`, `run --bogus
// -h` print the help and exit 0), even where it follows a flag that wanted a value (`--title -h` is
// the help; `--title=-h` is the title "-h"). A stray positional argument (`ringpipe predict
// steps=0`) is an error too: no subcommand takes one.
//
// Thread safety: plain data and pure functions.
//
// Example:
//   const std::vector<FlagSpec> specs = {{"ranks", Grammar::kInt, "4", "Number of ranks."}};
//   RP_ASSIGN_OR_RETURN(ParsedArgs args, ParseFlags("allreduce", {"--ranks=8"}, specs));
//   int64_t ranks = args.Int("ranks", 4);  // 8
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace rp::apps {

// How a flag's text reads. The same words name the grammar in `--help`.
enum class Grammar {
  kInt,         // a decimal integer, e.g. -3, 4096
  kNumber,      // a finite decimal number, e.g. 0.5, 1e-3 (not hexadecimal: 0x10 is refused)
  kBool,        // true|false|1|0|yes|no; a bare --flag is true, --noflag false
  kString,      // any text (UTF-8)
  kBytes,       // a byte count with an optional K, M or G suffix (KiB, MiB, GiB), e.g. 64K
  kByteList,    // one or more byte counts, comma separated, e.g. 16K,64K,1M
  kNumberList,  // one or more numbers, comma separated, e.g. 50,60
  kWidthList,   // positive integers, comma separated; WIDTHxCOUNT repeats, e.g. 128,64x3
  kNumberOrAuto,  // a number as kNumber, or the word auto (the program chooses)
};
// "integer", "number", "true|false", "text", "bytes (e.g. 64K)", ... for `--help`.
const char* GrammarName(Grammar g);

struct FlagSpec {
  std::string name;
  Grammar grammar = Grammar::kString;
  std::string default_text;  // the effective default `--help` shows ("" shows as "none")
  std::string help;
  // Every occurrence counts (sweep --axis reads ParsedArgs::occurrences; --help says so); the other
  // flags may be given once.
  bool repeatable = false;
  // A file or directory path: given, it may not be empty ("--out=" is an error, not "no output").
  bool path = false;
};

// Checks `text` against `grammar`. InvalidArgument "<what>: <reason>" otherwise (e.g. "--dp: expected
// an integer, got 'x'"). Text that is not UTF-8 or has control characters is shown escaped.
[[nodiscard]] absl::Status CheckGrammar(absl::string_view what, Grammar grammar, absl::string_view text);

// True when `text` (surrounding spaces aside) is written in decimal — digits, signs, '.', 'e' — as the
// number grammars require: absl::SimpleAtod alone also reads hexadecimal floats ("0x10" = 16,
// "0x1p3" = 8), "inf" and "nan".
bool IsDecimalText(absl::string_view text);

// The grammar readers (each also used by the config file's string values). A list's empty text is
// the empty list (e.g. `--weight_grad_ms=`: unset); whoever reads it decides whether that is valid.
absl::StatusOr<int64_t> ParseInt(absl::string_view what, absl::string_view text);
// `word`, when not empty, is the one word the flag takes besides a number ("auto"): the message
// names it ("expected a finite number or auto, got 'x'").
absl::StatusOr<double> ParseNumber(absl::string_view what, absl::string_view text, absl::string_view word = "");
absl::StatusOr<bool> ParseBool(absl::string_view what, absl::string_view text);
// At most 2^40 before the suffix (1 TiB..1 PiB): large enough for any size, far from overflow.
absl::StatusOr<uint64_t> ParseBytes(absl::string_view what, absl::string_view text);
absl::StatusOr<std::vector<uint64_t>> ParseByteList(absl::string_view what, absl::string_view text);
absl::StatusOr<std::vector<double>> ParseNumberList(absl::string_view what, absl::string_view text);
// At most kMaxListItems items in all (a list is a per-stage or per-layer value).
absl::StatusOr<std::vector<int>> ParseWidthList(absl::string_view what, absl::string_view text);
inline constexpr size_t kMaxListItems = 4096;

struct ParsedArgs {
  std::string subcommand;
  // Every flag occurrence in command-line order (name, text), each text valid for its grammar.
  std::vector<std::pair<std::string, std::string>> occurrences;
  absl::flat_hash_set<std::string> specified;  // names of the flags given
  bool help = false;                           // --help / -h among the arguments

  bool Has(absl::string_view name) const { return specified.contains(absl::string_view(name.data(), name.size())); }
  // The last value given, else `fallback`. The typed getters return `fallback` when the flag was
  // not given (its text already passed the grammar, so they cannot fail otherwise).
  std::string Text(absl::string_view name, absl::string_view fallback = "") const;
  int64_t Int(absl::string_view name, int64_t fallback) const;
  double Number(absl::string_view name, double fallback) const;
  bool Bool(absl::string_view name, bool fallback) const;
};

// True for the arguments that ask for help: -h, --help, -help, --helpfull.
bool IsHelpArgument(absl::string_view arg);

// Parses the arguments after the subcommand (`args`) against the subcommand's flags. If any argument
// asks for help (IsHelpArgument) the result is help = true with no flags read, and no error. Errors
// (InvalidArgument, one line naming the flag or the argument): an unknown flag, a flag without its
// value, a value its grammar rejects, a flag given twice (not repeatable; --x and --nox count as the
// same flag), an empty path, a positional argument.
absl::StatusOr<ParsedArgs> ParseFlags(absl::string_view subcommand, const std::vector<std::string>& args,
                                      const std::vector<FlagSpec>& specs);

// `--help` text for the flags: name, grammar, effective default, help (wrapped at ~96 columns).
std::string FlagsHelp(const std::vector<FlagSpec>& specs);

// `text` as one line of printable UTF-8: control bytes and bytes that are not UTF-8 become \xNN.
std::string OneLine(absl::string_view text);

}  // namespace rp::apps
