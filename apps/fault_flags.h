// The fault flags of `ringpipe run` and `ringpipe timeline` (command line only, not config-file keys;
// docs/reliability.md):
//   --fault="KIND:key=value,...[;KIND:...]"  throw:rank=R,step=S,op=I   stall:rank=R,step=S,op=I
//                                           slow_link:src=A,dst=B,factor=F[,step=S]
//   --straggler=RANK:FACTOR[,RANK:FACTOR]     --jitter=FRACTION[:SEED]
// Ranks are global ranks; op is the index in the rank's op list (as `ringpipe predict` prints it).
//
// Thread safety: pure functions, but ReportSlowLinks, which prints to stderr (apps/ talks to the user).
//
// Example:
//   RP_RETURN_IF_ERROR(ParseFaultFlags(args, cfg.world_size(), cfg.steps, options.faults));
//   RP_RETURN_IF_ERROR(CheckFaultFlagFactors(cfg, args, options.faults, &op_factor));
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "apps/config.h"
#include "apps/flags.h"
#include "runtime/faults.h"
#include "schedule/executor.h"

namespace rp::apps {

// The three flags' specs (--fault, --straggler, --jitter), for a subcommand's flag list.
std::vector<FlagSpec> FaultFlags();

// Parses --fault / --straggler / --jitter into `plan` (InvalidArgument naming the flag and the item),
// whose stragglers on entry are the config's (straggler_rank / straggler_factor): a rank --straggler
// names twice, or that is also the config's straggler, is refused.
// Every range is checked here but whether an op index exists in the rank's program, which
// Executor::Create says ("executor: faults: op fault ..."; FaultFlagStatus names it --fault).
absl::Status ParseFaultFlags(const ParsedArgs& args, int world_size, int steps, FaultPlan& plan);

// What the fault flags add to the slowest op beyond the config's own straggler, checked against the
// config's limits (CheckFaultFactors); *op_factor: that factor, for WatchdogFitOf.
absl::Status CheckFaultFlagFactors(const RunConfig& cfg, const ParsedArgs& args, const FaultPlan& faults,
                                   double* op_factor);

// Executor::Create's refusal of an op index past a rank's program, as InvalidArgument "--fault: ...";
// any other status as it is.
absl::Status FaultFlagStatus(const absl::Status& st);

// Prints (stderr, "ringpipe <command>: slow link: ...") the slow links the run saw, and a --fault slow
// link that no message crossed: it slowed nothing (the layout sends nothing that way).
void ReportSlowLinks(const char* command, const FaultPlan& faults, const schedule::RunResult& result);

}  // namespace rp::apps
