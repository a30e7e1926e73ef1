#include "apps/cli.h"

#include <cstdio>
#include <fstream>
#include "absl/strings/string_view.h"
#include <system_error>
#include <filesystem>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace rp::apps {

absl::StatusOr<ParsedArgs> ParseArgs(int argc, char** argv) {
  ParsedArgs out;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help" || arg == "-help" || arg == "--helpfull") {
      out.help = true;
      continue;
    }
    if (arg == "--") {
      for (++i; i < argc; ++i) out.positional.emplace_back(argv[i]);
      break;
    }
    if (!absl::StartsWith(arg, "-") || arg == "-") {
      if (out.subcommand.empty() && out.positional.empty()) {
        out.subcommand = std::string(arg);
      } else {
        out.positional.emplace_back(arg);
      }
      continue;
    }
    arg.remove_prefix(absl::StartsWith(arg, "--") ? 2 : 1);
    std::string name(arg);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && !has_value && absl::StartsWith(name, "no")) {
      absl::CommandLineFlag* neg = absl::FindCommandLineFlag(name.substr(2));
      if (neg != nullptr && neg->IsOfType<bool>()) {
        flag = neg;
        name = name.substr(2);
        value = "false";
        has_value = true;
      }
    }
    if (flag == nullptr || flag->IsRetired()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": unknown flag (see `ringpipe ", out.subcommand,
                       " --help`)"));
    }
    if (!has_value) {
      const bool next_is_flag =
          i + 1 >= argc || (argv[i + 1][0] == '-' && argv[i + 1][1] == '-');
      if (flag->IsOfType<bool>()) {
        value = "true";
      } else if (flag->IsOfType<std::string>() && next_is_flag) {
        // Config fields are string flags (so a config file can tell "unset" apart); a bare
        // `--virtual_time` means "true" like a bool flag; a field that is not a bool then fails
        // its own validation naming the field.
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", name, ": missing value"));
      }
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": cannot parse '", value, "': ", error));
    }
    out.specified.insert(name);
    out.occurrences.emplace_back(name, value);
  }
  if (out.subcommand == "help") {
    out.help = true;
    out.subcommand = out.positional.empty() ? "" : out.positional.front();
  }
  return out;
}

absl::Status CheckAllowed(const ParsedArgs& args, const std::vector<std::string>& allowed) {
  for (const std::string& name : args.specified) {
    bool ok = false;
    for (const std::string& a : allowed) ok = ok || a == name;
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, ": not a flag of `ringpipe ", args.subcommand, "` (see --help)"));
    }
  }
  return absl::OkStatus();
}

std::string FlagsHelp(const std::vector<std::string>& flag_names) {
  std::string out;
  for (const std::string& name : flag_names) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;
    absl::StrAppend(&out, "  --", name, "  (default: ",
                    flag->DefaultValue().empty() ? "\"\"" : flag->DefaultValue(), ")\n");
    // Wrap the help text at ~96 columns, indented.
    std::string line = "      ";
    for (absl::string_view word : absl::StrSplit(flag->Help(), ' ')) {
      if (line.size() + word.size() > 96 && line.size() > 6) {
        absl::StrAppend(&out, line, "\n");
        line = "      ";
      }
      absl::StrAppend(&line, word, " ");
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  fs::path tmp = target;
  tmp += ".tmp-ringpipe";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": cannot open for writing"));
    }
    f.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    f.close();
    if (!f) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return absl::DataLossError(absl::StrCat(path, ": write failed"));
    }
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot rename into place: ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace rp::apps
