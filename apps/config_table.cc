// The config field table (apps/config_fields.h): one entry per field of RunConfig, in help order.
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "apps/config_entries.h"

namespace rp::apps::entries {
namespace {

#define RP_MEMBER(expr) [](RunConfig & c) -> auto& { return c.expr; }

// Every schedule a generator builds (schedule/generators.h), in ScheduleKind order.
constexpr schedule::ScheduleKind kSchedules[] = {
    schedule::ScheduleKind::kGPipe,        schedule::ScheduleKind::kOneFOneB,
    schedule::ScheduleKind::kInterleaved,  schedule::ScheduleKind::kZeroBubbleH1,
    schedule::ScheduleKind::kZeroBubbleH2, schedule::ScheduleKind::kZeroBubbleV,
    schedule::ScheduleKind::kDualPipeV,    schedule::ScheduleKind::kDualPipe};

std::string ScheduleNames() {
  std::vector<std::string> names;
  for (auto k : kSchedules) names.emplace_back(schedule::ScheduleName(k));
  return absl::StrJoin(names, ", ");
}

absl::StatusOr<schedule::ScheduleKind> ParseSchedule(const std::string& s) {
  for (auto k : kSchedules) {
    if (s == schedule::ScheduleName(k)) return k;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown schedule '", OneLine(s), "' (", ScheduleNames(), ")"));
}

absl::StatusOr<CostModelKind> ParseCostModel(const std::string& s) {
  if (s == "fixed") return CostModelKind::kFixed;
  if (s == "flops") return CostModelKind::kFlops;
  return absl::InvalidArgumentError(absl::StrCat("unknown cost model '", OneLine(s), "' (fixed, flops)"));
}

absl::StatusOr<Activation> ParseActivation(const std::string& s) {
  if (s == "relu") return Activation::kRelu;
  if (s == "gelu") return Activation::kGelu;
  return absl::InvalidArgumentError(absl::StrCat("unknown activation '", OneLine(s), "' (relu, gelu)"));
}

absl::StatusOr<MoeInit> ParseMoeInit(const std::string& s) {
  if (s == "he") return MoeInit::kHe;
  if (s == "scaled") return MoeInit::kScaled;
  return absl::InvalidArgumentError(absl::StrCat("unknown MoE init '", OneLine(s), "' (he, scaled)"));
}

absl::StatusOr<OptimizerKind> ParseOptimizer(const std::string& s) {
  if (s == "sgd") return OptimizerKind::kSgdMomentum;
  if (s == "adam") return OptimizerKind::kAdam;
  return absl::InvalidArgumentError(absl::StrCat("unknown optimizer '", OneLine(s), "' (sgd, adam)"));
}

absl::StatusOr<std::string> ParseDevice(const std::string& s) {
  // Checked by ValidateConfig (only the FLOPs cost model uses it); stored lower-case.
  return absl::AsciiStrToLower(s);
}

}  // namespace

std::vector<ConfigField>* BuildFieldTable() {
  constexpr int64_t kMaxDevices = kMaxPredictDevices;
  auto* f = new std::vector<ConfigField>;
  f->push_back(StringF("preset", RP_MEMBER(preset),
                       "Named starting configuration: default, s1, s2, s3-0d, s3-1d, s3-2d, s3-3d, s3-4d (docs/config.md). "
                       "Unset: the config file's \"preset\", else default."));
  f->push_back(StringF("config", RP_MEMBER(config_file),
                       "JSON config file: an object whose keys are these flag names (// comments allowed). "
                       "Overrides the preset; flags override it.",
                       kEveryRun, "none"));
  f->push_back(IntF("dp", RP_MEMBER(dp), 1, kMaxDevices, "Data-parallel replicas."));
  f->push_back(IntF("pp", RP_MEMBER(pp), 1, kMaxDevices, "Pipeline stages (devices per pipeline)."));
  f->push_back(IntF("tp", RP_MEMBER(tp), 1, kMaxDevices, "Tensor-parallel shards per stage."));
  f->push_back(IntF("microbatches", RP_MEMBER(microbatches), 1, 1 << 20, "Micro-batches per replica per step."));
  f->push_back(EnumF("schedule", RP_MEMBER(schedule), ParseSchedule, schedule::ScheduleName,
                     "Pipeline schedule: gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v, dualpipev or dualpipe "
                     "(docs/schedules.md)."));
  f->push_back(IntF("virtual_stages", RP_MEMBER(virtual_stages), 1, 1024,
                    "Virtual stages (model chunks) per device; > 1 needs --schedule=interleaved, which needs >= 2 (zb-v, dualpipev "
                    "and dualpipe always hold 2 chunks: 1 or 2 here)."));
  f->push_back(IntF("microbatch_group", RP_MEMBER(microbatch_group), 0, 1 << 20,
                    "Interleaved: Megatron's micro-batch group size N (pp <= N <= microbatches, microbatches mod N "
                    "0 or >= pp); 0: pp."));
  f->push_back(BoolF("pytorch_rounds", RP_MEMBER(pytorch_rounds),
                     "Interleaved: PyTorch's rule N = m / max(1, m / pp) instead of Megatron's groups (microbatches "
                     "a multiple of the rounds; microbatch_group must be 0)."));
  f->push_back(BoolF("fused_fb", RP_MEMBER(fused_fb),
                     "dualpipev, dualpipe: run each overlapped pair as one F&B op that starts when both inputs are "
                     "there (DeepSeek's code); false: two independent ops. Other schedules: must stay true."));
  f->push_back(EnumF("cost_model", RP_MEMBER(cost_model), ParseCostModel, CostModelName,
                     "fixed: --forward_ms/--backward_ms/--weight_grad_ms per stage; flops: FLOPs of the model "
                     "described by --flops_* on --flops_device."));
  f->push_back(MsListF("forward_ms", RP_MEMBER(forward_ms),
                       "Forward time of one micro-batch on one device (fixed cost model), ms: one value, or a "
                       "comma list with one value per pipeline stage."));
  f->push_back(MsListF("backward_ms", RP_MEMBER(backward_ms),
                       "Whole backward (input + weight gradients) time per micro-batch, ms: one value or one "
                       "per stage."));
  f->push_back(MsListF("weight_grad_ms", RP_MEMBER(weight_grad_ms),
                       "Weight-gradient part of the backward (zb-h1's W), ms: one value or one per stage.",
                       "half the backward"));
  f->push_back(NumberF("optimizer_ms", RP_MEMBER(optimizer_ms), "Optimizer step time per device, ms."));
  f->push_back(IntF("straggler_rank", RP_MEMBER(straggler_rank), 0, kMaxDevices - 1,
                    "Global rank of a straggler device (with --straggler_factor)."));
  f->push_back(NumberF("straggler_factor", RP_MEMBER(straggler_factor),
                       "Every compute op of --straggler_rank takes this many times longer, >= 1 (1: no "
                       "straggler). Emulated and predicted; sweepable."));
  f->push_back(EnumF("flops_device", RP_MEMBER(flops.device), ParseDevice, [](const std::string& s) { return s; },
                     "FLOPs cost model: device preset a100 (312 TFLOPS dense bf16) or h100 (989)."));
  f->push_back(NumberF("flops_efficiency", RP_MEMBER(flops.efficiency),
                       "FLOPs cost model: fraction of the dense peak reached, (0, 1]."));
  f->push_back(IntF("flops_layers", RP_MEMBER(flops.layers), 1, 1 << 20,
                    "FLOPs cost model: transformer layers of the described model."));
  f->push_back(IntF("flops_hidden", RP_MEMBER(flops.hidden), 1, 1 << 24, "FLOPs cost model: hidden size."));
  f->push_back(IntF("flops_seq_len", RP_MEMBER(flops.seq_len), 1, 1 << 24, "FLOPs cost model: sequence length."));
  f->push_back(IntF("flops_microbatch_size", RP_MEMBER(flops.microbatch_size), 1, 1 << 20,
                    "FLOPs cost model: sequences per micro-batch."));
  f->push_back(EnumF("codec", RP_MEMBER(codec), comm::ParseCodec, comm::CodecName,
                     "Wire format of the DP gradient all-reduces: fp32, fp16, bf16 or int8 (the TP all-reduces "
                     "stay fp32; the EP token rows: ep_codec)."));
  f->push_back({"segment_bytes", Grammar::kByteList, kEveryRun, 1, 0,
                "Modeled bytes per ring message of the TP and DP all-reduces (FP32 bytes of the modeled gradients, "
                "a multiple of 4 up to 1G; suffixes K, M, G = KiB, MiB, GiB), and per message of the EP "
                "all-to-alls' token blocks: each message pays the link's overhead o. One size; 0: one message "
                "per chunk or block (a modeled chunk over 1 GiB: 1 GiB messages).",
                "0 (one message per chunk)",
                [](RunConfig& c, const json& v) -> absl::Status {
                  RP_ASSIGN_OR_RETURN(c.segment_bytes, AsBytes("segment_bytes", v, kSegmentBytesRange));
                  return absl::OkStatus();
                },
                [](const RunConfig& c) { return json(c.segment_bytes); }});
  f->push_back(NumberF("bucket_mb", RP_MEMBER(bucket_mb),
                       "DDP gradient bucket cap, MiB of modeled gradients (PyTorch's bucket_cap_mb), in (0, 1048576]: buckets "
                       "form in reverse layer order and each starts its all-reduce when its last gradient is final."));
  f->push_back(BoolF("overlap", RP_MEMBER(overlap),
                     "DDP overlap: true starts each gradient bucket's all-reduce inside the last backward; false "
                     "starts them all at the optimizer step."));
  f->push_back(NumberF("reduce_gbps", RP_MEMBER(reduce_gbps),
                       "Modeled reduction throughput of a ring all-reduce, GB/s of FP32 data: 0 (free) or at least 1e-6."));
  f->push_back(StringF("link", RP_MEMBER(link),
                       "Link model: ideal (free links) or a preset: dgx-a100, dgx-h100 (docs/runtime.md)."));
  f->push_back(IntF("devices_per_node", RP_MEMBER(devices_per_node), 1, kMaxDevices,
                    "Devices per node: decides which links are intra- or inter-node."));
  f->push_back({"nics_per_node", Grammar::kInt, kEveryRun, 0, kMaxDevices,
                "NICs per node for inter-node traffic: 0 = one per device (rail-optimized, as in DGX); 1 = one "
                "shared NIC; else a divisor of devices_per_node.",
                "one per device",
                [](RunConfig& c, const json& v) -> absl::Status {
                  RP_ASSIGN_OR_RETURN(c.nics_per_node, AsIntIn<int>("nics_per_node", v, 0, kMaxDevices));
                  return absl::OkStatus();
                },
                [](const RunConfig& c) { return json(c.nics_per_node); }});
  constexpr const char* kKeep = "the link preset's";
  f->push_back(OptionalNumberF("alpha_us", RP_MEMBER(alpha_us), "Override the latency of both link classes, us.", kKeep));
  f->push_back(OptionalNumberF("bandwidth_gbps", RP_MEMBER(bandwidth_gbps),
                       "Override the bandwidth of both link classes, GB/s (0: infinite).", kKeep));
  f->push_back(OptionalNumberF("overhead_us", RP_MEMBER(overhead_us),
                       "Override the per-message overhead o of both link classes, us (it occupies the ports).", kKeep));
  f->push_back(OptionalNumberF("intra_alpha_us", RP_MEMBER(intra_alpha_us), "Override the intra-node latency, us.", kKeep));
  f->push_back(OptionalNumberF("intra_bandwidth_gbps", RP_MEMBER(intra_bandwidth_gbps),
                       "Override the intra-node bandwidth, GB/s (0: infinite).", kKeep));
  f->push_back(OptionalNumberF("intra_overhead_us", RP_MEMBER(intra_overhead_us),
                       "Override the intra-node per-message overhead, us (dgx presets: 0.4, from NCCL).", kKeep));
  f->push_back(OptionalNumberF("inter_alpha_us", RP_MEMBER(inter_alpha_us), "Override the inter-node latency, us.", kKeep));
  f->push_back(OptionalNumberF("inter_bandwidth_gbps", RP_MEMBER(inter_bandwidth_gbps),
                       "Override the inter-node bandwidth, GB/s (0: infinite).", kKeep));
  f->push_back(OptionalNumberF("inter_overhead_us", RP_MEMBER(inter_overhead_us),
                       "Override the inter-node per-message overhead, us (dgx presets: 3, from NCCL).", kKeep));
  f->push_back(NumberOrAutoF("time_scale", RP_MEMBER(time_scale), RunConfig::kAutoTimeScale, "[0.0001, 1000]",
                             "Real clock: wall seconds per modeled second, [0.0001, 1000] (0.1 runs ten times faster "
                             "than modeled), or auto: the smallest scale this host keeps within 1 % (short trial "
                             "runs first)."));
  f->push_back(IntF("steps", RP_MEMBER(steps), 1, 1 << 24, "Training steps."));
  f->push_back(BoolF("virtual_time", RP_MEMBER(virtual_time),
                     "true: run on a virtual clock (as fast as the host allows, deterministic modeled times); "
                     "false: real time at --time_scale.",
                     kEmulationOnly));
  f->push_back(NumberF("watchdog_timeout", RP_MEMBER(watchdog_timeout),
                       "Seconds without progress before a run fails as stalled, (0, 86400] (virtual clock: no device "
                       "advanced; real clock: wall time).",
                       nullptr, kEmulationOnly));
  f->push_back(IntF("eval_every", RP_MEMBER(eval_every), 0, 1 << 24,
                    "Evaluate held-out accuracy every N steps and after the last (0: about 10 evaluations).",
                    kEmulationOnly));
  f->push_back(IntF("eval_samples", RP_MEMBER(eval_samples), 0, int64_t{1} << 30,
                    "Held-out samples per evaluation (0: the whole held-out split after the last step, max(global "
                    "batch, 1024) after the others).",
                    kEmulationOnly));
  f->push_back(BoolF("reference", RP_MEMBER(reference),
                     "true: also train the single-device FP32 reference and report the loss gap.", kEmulationOnly));
  f->push_back(IntF("seed", RP_MEMBER(seed), 0, std::numeric_limits<int64_t>::max(),
                    "Seed of the weights and the data set."));
  f->push_back(IntF("input_dim", RP_MEMBER(input_dim), 1, 1 << 20, "Real model: input features."));
  f->push_back(WidthsF("hidden", RP_MEMBER(hidden),
                       "Real model: hidden layer widths, e.g. 64,64,32 or 64x5 (64x5: 6 layers).", "no hidden layer"));
  f->push_back(IntF("classes", RP_MEMBER(classes), 2, 1 << 20, "Real model: output classes."));
  f->push_back(EnumF("activation", RP_MEMBER(activation), ParseActivation,
                     [](Activation a) { return std::string(ActivationName(a)); }, "Real model: relu or gelu."));
  f->push_back(WidthsF("layers_per_stage", RP_MEMBER(layers_per_stage),
                       "Real model: layers of each model stage (pp x virtual_stages counts; zb-v and dualpipev: 2 x pp; "
                       "dualpipe: pp), e.g. 4,2.",
                       "balanced"));
  f->push_back(IntF("microbatch_size", RP_MEMBER(microbatch_size), 1, 1 << 20, "Real model: samples per micro-batch."));
  f->push_back(IntF("train_size", RP_MEMBER(train_size), 1, int64_t{1} << 30, "Real data set: training samples."));
  f->push_back(IntF("test_size", RP_MEMBER(test_size), 1, int64_t{1} << 30, "Real data set: held-out samples."));
  f->push_back(EnumF("optimizer", RP_MEMBER(optimizer.kind), ParseOptimizer,
                     [](OptimizerKind k) { return k == OptimizerKind::kAdam ? "adam" : "sgd"; },
                     "sgd (with momentum) or adam."));
  f->push_back(NumberF("lr", RP_MEMBER(optimizer.lr), "Learning rate, > 0."));
  f->push_back(NumberF("momentum", RP_MEMBER(optimizer.momentum), "SGD momentum, [0, 1)."));
  f->push_back(NumberF("weight_decay", RP_MEMBER(optimizer.weight_decay), "Weight decay, >= 0."));
  f->push_back({"moe_layers", Grammar::kString, kEveryRun, 1, 0,
                "Mixture of experts: which layers' blocks become MoE blocks (d -> d; a hidden layer between two "
                "equal widths): none, all, every:N (those with an index multiple of N) or a comma list of layer "
                "indices, e.g. 2,4 (docs/config.md).",
                "none",
                [](RunConfig& c, const json& v) -> absl::Status {
                  RP_ASSIGN_OR_RETURN(c.moe_layers, AsMoeLayers("moe_layers", v));
                  return absl::OkStatus();
                },
                [](const RunConfig& c) { return json(c.moe_layers); }});
  f->push_back(IntF("experts", RP_MEMBER(experts), 1, 1 << 16, "MoE: experts per MoE block (E)."));
  f->push_back(IntF("top_k", RP_MEMBER(top_k), 1, 2, "MoE: experts each token is routed to, 1 or 2 (<= experts)."));
  f->push_back(IntF("expert_hidden", RP_MEMBER(expert_hidden), 1, 1 << 20,
                    "MoE: hidden width h of each expert MLP (d -> h -> d)."));
  f->push_back(NumberF("capacity_factor", RP_MEMBER(capacity_factor),
                       "MoE: capacity factor C >= 0: each expert keeps at most ceil(C x top_k x tokens / experts) "
                       "token slots per source, dropping the rest by token order; 0: dropless."));
  f->push_back(NumberF("aux_loss", RP_MEMBER(aux_loss),
                       "MoE: coefficient of the load-balancing auxiliary loss (Switch style), in [0, 1000]; 0: none."));
  f->push_back(NumberF("router_skew", RP_MEMBER(router_skew),
                       "MoE: a fixed router preference for low expert indices, in [0, 10000] (0: none): a reproducible load "
                       "imbalance whose busiest expert owner becomes the EP straggler."));
  f->push_back(EnumF("moe_init", RP_MEMBER(moe_init), ParseMoeInit,
                     [](MoeInit i) { return std::string(MoeInitName(i)); },
                     "MoE: init of the experts' output weights W2: he (He-uniform, like every layer) or scaled "
                     "(He-uniform x 1/sqrt(MoE blocks), GPT-2's residual scaling: a deep stack of blocks does not "
                     "grow its activations at init; docs/model.md)."));
  f->push_back(IntF("ep", RP_MEMBER(ep), 1, kMaxDevices,
                    "Expert parallelism: EP degree, carved out of DP (dp a multiple of ep), dividing experts; > 1 "
                    "needs moe_layers."));
  f->push_back({"ep_row_bytes", Grammar::kBytes, kEveryRun, 1, 0,
                "Modeled bytes one real token row stands for in the EP all-to-all (a multiple of 4 up to 1G; "
                "suffixes K, M, G). 0: derived (fixed cost model: the real row; flops: the described model's tokens per real row, "
                "bf16).",
                "0 (derived)",
                [](RunConfig& c, const json& v) -> absl::Status {
                  RP_ASSIGN_OR_RETURN(c.ep_row_bytes, AsBytes("ep_row_bytes", v, kEpRowBytesRange));
                  return absl::OkStatus();
                },
                [](const RunConfig& c) { return json(c.ep_row_bytes); }});
  f->push_back(EnumF("ep_codec", RP_MEMBER(ep_codec), comm::ParseCodec, comm::CodecName,
                     "Wire format of the EP all-to-alls' token rows (dispatch and combine, forward and backward): "
                     "fp32 (exact), fp16, bf16 or int8 (a 4-byte scale per message); the counts stay 8-byte "
                     "metadata. Separate from codec (the DP gradients'). No effect with ep 1."));
  f->push_back(StringF("report_json", RP_MEMBER(report_json),
                       "Write the report as JSON to this path (schema: docs/report.md).", kOutputFile, "none"));
  f->push_back(StringF("trace", RP_MEMBER(trace),
                       "Write the Chrome/Perfetto trace of the run to this path (run only).",
                       kOutputFile | kEmulationOnly, "none"));
  return f;
}

#undef RP_MEMBER

}  // namespace rp::apps::entries
