// The fault flags of `run` and `timeline` (apps/fault_flags.h).
#include "apps/fault_flags.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "apps/flags.h"
#include "runtime/status_macros.h"
#include "schedule/plan.h"

namespace rp::apps {
namespace {

absl::Status BadFault(const std::string& flag, const std::string& text, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", text, "': ", why));
}

// A factor or fraction of the fault flags: decimal text, or inf / nan (their ranges are checked
// later, naming them) — never a hexadecimal float, which absl::SimpleAtod alone reads
// (--straggler=1:0x2 was a factor of 2).
bool ReadReal(absl::string_view text, double* out) {
  const std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  const bool word = t == "inf" || t == "+inf" || t == "-inf" || t == "infinity" || t == "nan";
  return (word || IsDecimalText(t)) && absl::SimpleAtod(t, out);
}

// One item of --fault ("KIND:KEY=VALUE,..."): its kind, keys and ranges checked.
absl::StatusOr<OpFault> ParseOpFault(absl::string_view item, int world_size, int steps) {
  // Spaces around items, kinds, keys and values are the writer's layout ("a; b", "rank = 1").
  const std::string text(absl::StripAsciiWhitespace(item));
  std::vector<std::string> kind_args = absl::StrSplit(text, absl::MaxSplits(':', 1));
  absl::StripAsciiWhitespace(&kind_args[0]);
  OpFault f;
  if (kind_args[0] == "throw") {
    f.kind = OpFaultKind::kThrow;
  } else if (kind_args[0] == "stall") {
    f.kind = OpFaultKind::kStall;
  } else if (kind_args[0] == "slow_link") {
    f.kind = OpFaultKind::kSlowLink;
  } else {
    return BadFault("fault", text, "kind must be throw, stall or slow_link");
  }
  std::map<std::string, std::string> kv;
  if (kind_args.size() > 1) {
    for (absl::string_view p : absl::StrSplit(kind_args[1], ',', absl::SkipWhitespace())) {
      std::vector<std::string> pair = absl::StrSplit(p, absl::MaxSplits('=', 1));
      if (pair.size() != 2) return BadFault("fault", text, absl::StrCat("'", p, "' is not key=value"));
      for (std::string& part : pair) absl::StripAsciiWhitespace(&part);
      if (!kv.emplace(pair[0], pair[1]).second) {
        return BadFault("fault", text, absl::StrCat(pair[0], " given twice"));
      }
    }
  }
  const bool link = f.kind == OpFaultKind::kSlowLink;
  const std::vector<std::string> keys =
      link ? std::vector<std::string>{"src", "dst", "factor", "step"}
           : std::vector<std::string>{"rank", "step", "op"};
  for (const auto& [k, v] : kv) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
      return BadFault("fault", text, absl::StrCat("unknown key '", k, "' (", absl::StrJoin(keys, ", "), ")"));
    }
  }
  auto get_int = [&](const std::string& k, int& out, bool required) -> absl::Status {
    auto it = kv.find(k);
    if (it == kv.end()) {
      return required ? BadFault("fault", text, absl::StrCat("needs ", k, "=")) : absl::OkStatus();
    }
    if (!absl::SimpleAtoi(it->second, &out)) {
      return BadFault("fault", text, absl::StrCat(k, " must be an integer"));
    }
    return absl::OkStatus();
  };
  auto check_rank = [&](const char* k, int r) -> absl::Status {
    if (r >= 0 && r < world_size) return absl::OkStatus();
    return BadFault("fault", text, absl::StrCat(k, "=", r, " is not a rank of the ", world_size, " devices"));
  };
  if (link) {
    RP_RETURN_IF_ERROR(get_int("src", f.rank, true));
    RP_RETURN_IF_ERROR(get_int("dst", f.dst, true));
    RP_RETURN_IF_ERROR(get_int("step", f.step, false));
    auto it = kv.find("factor");
    if (it == kv.end() || !ReadReal(it->second, &f.factor)) {
      return BadFault("fault", text, "needs factor=F (a number >= 1)");
    }
    // +inf is left to CheckFaultFactors, which says what it does to the modeled times.
    if (!(f.factor >= 1)) return BadFault("fault", text, "factor must be a number >= 1");
    RP_RETURN_IF_ERROR(check_rank("src", f.rank));
    RP_RETURN_IF_ERROR(check_rank("dst", f.dst));
    if (f.dst == f.rank) return BadFault("fault", text, "src and dst must differ (a link joins two devices)");
  } else {
    RP_RETURN_IF_ERROR(get_int("rank", f.rank, true));
    RP_RETURN_IF_ERROR(get_int("step", f.step, true));
    RP_RETURN_IF_ERROR(get_int("op", f.op, true));
    RP_RETURN_IF_ERROR(check_rank("rank", f.rank));
    if (f.op < 0) return BadFault("fault", text, absl::StrCat("op=", f.op, " is not an op index (>= 0)"));
  }
  if (f.step < 0 || f.step >= steps) {
    return BadFault("fault", text, absl::StrCat("step=", f.step, " is not a step of the ", steps, " (--steps)"));
  }
  return f;
}

}  // namespace

// Parses --fault / --straggler / --jitter into `plan` (InvalidArgument naming the flag).
absl::Status ParseFaultFlags(const ParsedArgs& args, int world_size, int steps, FaultPlan& plan) {
  const std::string fault = args.Text("fault");
  for (absl::string_view item : absl::StrSplit(fault, ';', absl::SkipWhitespace())) {
    RP_ASSIGN_OR_RETURN(OpFault f, ParseOpFault(item, world_size, steps));
    plan.op_faults.push_back(f);
  }
  const std::string straggler = args.Text("straggler");
  // The config's straggler (--straggler_rank / --straggler_factor), if it has one, is already in the
  // plan (BuildPlan). A rank named twice would reach the executor, whose refusal names no flag.
  const size_t from_config = plan.stragglers.size();
  for (absl::string_view item : absl::StrSplit(straggler, ',', absl::SkipWhitespace())) {
    const std::vector<std::string> rf = absl::StrSplit(item, ':');
    Straggler s;
    if (rf.size() != 2 || !absl::SimpleAtoi(rf[0], &s.rank) || !ReadReal(rf[1], &s.factor)) {
      return BadFault("straggler", std::string(item), "expected RANK:FACTOR");
    }
    if (s.rank < 0 || s.rank >= world_size) {
      return BadFault("straggler", std::string(item),
                      absl::StrCat("rank ", s.rank, " is not a rank of the ", world_size, " devices"));
    }
    // +inf is left to CheckFaultFactors, which says what it does to the modeled times.
    if (!(s.factor >= 1)) return BadFault("straggler", std::string(item), "FACTOR must be a number >= 1");
    for (size_t i = 0; i < plan.stragglers.size(); ++i) {
      const Straggler& other = plan.stragglers[i];
      if (other.rank != s.rank) continue;
      if (i < from_config) {
        return BadFault("straggler", std::string(item),
                        absl::StrCat("rank ", s.rank, " is also the config's straggler (straggler_rank ", s.rank,
                                     ", straggler_factor ", other.factor, "); name each rank once"));
      }
      return BadFault("straggler", std::string(item), absl::StrCat("rank ", s.rank, " named twice"));
    }
    plan.stragglers.push_back(s);
  }
  const std::string jitter = args.Text("jitter");
  if (!jitter.empty()) {
    const std::vector<std::string> fs = absl::StrSplit(jitter, ':');
    if (fs.size() > 2 || !ReadReal(fs[0], &plan.jitter.max_fraction) ||
        (fs.size() == 2 && !absl::SimpleAtoi(fs[1], &plan.jitter.seed))) {
      return BadFault("jitter", jitter, "expected FRACTION[:SEED]");
    }
    if (!(plan.jitter.max_fraction >= 0 && plan.jitter.max_fraction <= 10)) {
      return BadFault("jitter", jitter, "FRACTION must be in [0, 10]");
    }
  }
  // Every range is checked here, naming the flag, but whether an op index exists in the rank's
  // program: Executor::Create's "executor: faults: op fault ...", which Run names --fault.
  return absl::OkStatus();
}

// What the fault flags add to the slowest op beyond the config's own straggler (which the config's
// checks count already), checked against the config's limits: the slowest rank's straggler factor
// (the config's or --straggler's: ParseFaultFlags refuses a rank both name, as the executor would)
// over the config's, times the largest --jitter draw (*op_factor). Values out of range are left to
// the executor's validation.
absl::Status CheckFaultFlagFactors(const RunConfig& cfg, const ParsedArgs& args, const FaultPlan& faults,
                                   double* op_factor) {
  const char* op_field = "straggler";
  double slowest = 1;
  for (double f : schedule::StragglerFactors(faults, cfg.world_size())) {
    if (f > slowest) slowest = f;  // NaN never is
  }
  *op_factor = std::max(1.0, slowest / cfg.straggler_factor);
  const double jitter = faults.jitter.max_fraction;
  if (jitter > 0 && jitter <= 10) {
    *op_factor *= 1 + jitter;
    if (args.Text("straggler").empty()) op_field = "jitter";
  }
  double link_factor = 1;
  for (const OpFault& f : faults.op_faults) {
    if (f.kind == OpFaultKind::kSlowLink) link_factor = std::max(link_factor, f.factor);
  }
  return CheckFaultFactors(cfg, *op_factor, link_factor, op_field);
}

// The slow links the run saw, and a --fault slow link that no message crossed: it slowed nothing (the
// layout sends nothing that way).
void ReportSlowLinks(const char* command, const FaultPlan& faults, const schedule::RunResult& result) {
  for (const schedule::RunResult::SlowLink& l : result.slow_links) {
    std::fprintf(stderr, "ringpipe %s: slow link: rank %d -> rank %d took %gx its link class's time from step %d\n",
                 command, l.src, l.dst, l.factor, l.first_step);
  }
  for (const OpFault& f : faults.op_faults) {
    if (f.kind != OpFaultKind::kSlowLink) continue;
    const bool crossed = std::any_of(result.slow_links.begin(), result.slow_links.end(),
                                     [&](const schedule::RunResult::SlowLink& l) {
                                       return l.src == f.rank && l.dst == f.dst && l.factor == f.factor;
                                     });
    if (!crossed) {
      std::fprintf(stderr, "ringpipe %s: slow link: rank %d -> rank %d (x%g from step %d) carried no message: this "
                   "layout sends nothing from rank %d to rank %d\n", command, f.rank, f.dst, f.factor, f.step, f.rank, f.dst);
    }
  }
}

absl::Status FaultFlagStatus(const absl::Status& st) {
  constexpr absl::string_view kFaults = "executor: faults: ";
  if (st.code() == absl::StatusCode::kInvalidArgument && absl::StartsWith(st.message(), kFaults) &&
      absl::StartsWith(st.message().substr(kFaults.size()), "op fault ")) {
    return absl::InvalidArgumentError(absl::StrCat("--fault: ", st.message().substr(kFaults.size())));
  }
  return st;
}

std::vector<FlagSpec> FaultFlags() {
  std::vector<FlagSpec> flags;
  flags.push_back({"fault", Grammar::kString, "",
                   "Inject faults: 'throw:rank=R,step=S,op=I', 'stall:rank=R,step=S,op=I' or "
                   "'slow_link:src=A,dst=B,factor=F[,step=S]', several separated by ';'."});
  flags.push_back({"straggler", Grammar::kString, "",
                   "Slow devices: RANK:FACTOR[,RANK:FACTOR] multiplies their compute time."});
  flags.push_back({"jitter", Grammar::kString, "",
                   "Compute jitter: FRACTION[:SEED], each compute op takes (1 + u) x, u in [0, FRACTION) drawn from SEED "
                   "(default 0, independent of --seed)."});
  return flags;
}

}  // namespace rp::apps
