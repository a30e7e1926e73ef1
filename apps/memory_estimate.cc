#include "apps/memory_estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <numeric>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "apps/config.h"
#include "apps/malloc_tunables.h"
#include "apps/report.h"
#include "runtime/model/dataset.h"
#include "runtime/tracer.h"
#include "schedule/executor.h"
#include "schedule/metrics.h"

namespace rp::apps {
namespace {

// Resident bytes per device thread beyond its tensors (stack pages touched, channels, bookkeeping),
// and per device of the run's result (schedule::DeviceReport, its report object while it is made).
constexpr double kPerDeviceBytes = 256.0 * 1024;
constexpr double kReportBytesPerDevice = 8.0 * 1024;
// `predict`: per device (predictor state, the wire-bytes table; the report's device objects are made
// one at a time, apps/lazy_json.h), per (pipeline rank, chunk, micro-batch) slot of the schedule
// program (its ops, the plan's copies), and per interval of a played device's timeline (compute pieces
// between TP all-reduces, the all-reduces, p2p receives and sends): the predictor's record, and for
// the report's timeline rows its JSON entry (one device's rows at a time).
// Measured (peak RSS, release build): 1F1B pp=64 x m=2048 423 MB (786K intervals), pp=1024 x m=128
// 243 MB, tp=2 pp=64 x m=2048 on 4096 layers 14.2 GB. Per device, 2026-11-27: 2^18 and 2^20 devices
// (dp x pp 8 x tp 4, --hidden=64x16) 66 and 236 MB, 221 B a device (2.9 GB, 2.7 kB a device, while
// the report was one document). The report's rows, peak with --report_json minus without, 2026-11-26
// on 8x255 layers: 513 B per interval at pp=64 x m=512, 770 B at tp=2 pp=16 x m=256, when every row
// was held at once.
constexpr double kPredictBytesPerDevice = 512;
constexpr double kProgramBytesPerSlot = 512;
constexpr double kPredictBytesPerInterval = 448;
constexpr double kReportBytesPerTimelineInterval = 1024;
// Resident memory an allocator arena keeps (see EstimateRunMemory).
constexpr double kArenaBytes = 512.0 * 1024;
constexpr double kHugePageBytes = 2.0 * 1024 * 1024;
// Exporting a trace: per event, its JSON document while it is written (one at a time) and the
// allocator's slack; once, the piece of text handed to the file (rp::Tracer::StreamChromeJson: the
// text is not held whole). bench/outputs.sh, 2026-11-27: a 1024-device 40-step virtual run (a 155 MB
// trace of 952 962 JSON events) peaks 114 MB above the same run untraced; 1.68 GB before it streamed.
constexpr double kChromeBytesPerEvent = 64;
constexpr double kChromePieceBytes = 4.0 * 1024 * 1024;

std::string Gb(double bytes) { return absl::StrFormat("%.3g GB", bytes / 1e9); }

}  // namespace

double MemoryEstimate::total() const {
  double t = 0;
  for (const Part& p : parts) t += p.bytes;
  return t;
}

namespace {

// Micro-batches whose activations a pipeline rank holds at once, at most (the peak over ranks).
double MicroBatchesInFlight(const RunConfig& cfg) {
  const bool gpipe = cfg.schedule == schedule::ScheduleKind::kGPipe;
  double in_flight =
      gpipe ? cfg.microbatches : std::min<double>(cfg.microbatches, static_cast<double>(cfg.pp) * cfg.chunks());
  // Schedules whose ranks hold more than pp micro-batches of their layers (../shared/SCHEDULES.md): ZB-H2
  // 2p - 1 on every rank; interleaved rank 0 its warm-up + 1 chunks, 2(p - 1) + (v - 1)N + 1 (v = 1: 2p - 1).
  const double m = cfg.microbatches, p = cfg.pp, v = cfg.chunks();
  if (cfg.schedule == schedule::ScheduleKind::kZeroBubbleH2) in_flight = std::max(in_flight, std::min(m, 2 * p - 1));
  if (cfg.schedule == schedule::ScheduleKind::kInterleaved) {
    const double n = cfg.pytorch_rounds      ? std::floor(m / std::max(1.0, std::floor(m / p)))
                     : cfg.microbatch_group ? cfg.microbatch_group
                                             : p;
    in_flight = std::max(in_flight, std::min(m * v, 2 * (p - 1) + (v - 1) * n + 1) / v);
  }
  return in_flight;
}

// Mixture of experts (docs/model.md): a block's router (d × E) and experts (d → h → d each) are not in
// the dense count above. Every TP rank holds the router and its EP rank's E/ep experts (a block is
// never TP-sharded), so a replica holds tp copies; the reference trainer the router per EP rank of a
// group and every expert once (sharded as the run's EP group), on every TP rank; the evaluation copy
// one EP group's shards (all experts per TP rank). Stored per micro-batch in flight, on every device
// of a block's stage: the input, the router's probabilities and the combined rows, and on the
// experts' side the rows it received, of d + 2h (input, pre-activation, activation) — doubled for
// the exchange buffers and backward's temporaries; the evaluation's 512-row batches likewise,
// once. One device may receive up to ep × top_k × T rows of a micro-batch (a skewed router), but
// not all at once: an EP group's devices hold the same micro-batches in flight (one pipeline
// stage, one schedule) and together receive exactly what its ep sources send of each, ep × top_k
// × T rows (fewer with drops), whatever the routing. So the world holds top_k × T expert rows per
// device and micro-batch in flight; counting the one-device worst case on every device
// overstated MoE runs ep-fold (1024 devices at ep 64 were refused at 32.9 GB).
void AddExpertParts(const RunConfig& cfg, const MlpConfig& mlp, double per_replica, double states, double in_flight,
                    double eval_copies, MemoryEstimate& est) {
  const double E = mlp.moe.experts, k = mlp.moe.top_k, h = mlp.moe.expert_hidden, ep = cfg.ep;
  const double tp = std::max(1, cfg.tp), T = cfg.microbatch_size;
  constexpr double kEvalRows = 512;
  double router = 0, expert_floats = 0, stored = 0, eval_stored = 0;
  for (const int l : mlp.moe.layers) {
    const double d = mlp.out_dim(l);
    router += d * E;
    expert_floats += E * (2 * d * h + h + d);
    stored += T * (d + E) + k * T * d + k * T * (d + 2 * h);
    eval_stored = std::max(eval_stored, kEvalRows * (d + E) + k * kEvalRows * (2 * d + 2 * h));
  }
  const double shard = router + expert_floats / ep;  // one device's share of the blocks
  // DualPipe holds every stage twice (as the dense weights: `copies` in EstimateRunMemory).
  const double copies = cfg.schedule == schedule::ScheduleKind::kDualPipe ? 2 : 1;
  double experts = cfg.dp * copies * tp * shard * 4 * per_replica;
  if (cfg.reference) experts += tp * (ep * router + expert_floats) * 4 * (3 + states);
  experts += eval_copies * ep * tp * shard * 4;  // the evaluation's copies (virtual clock; weights only)
  // Blame the factor furthest above its default (4 experts of hidden 64).
  est.parts.push_back({"experts", E / 4 >= h / 64 ? "experts" : "expert_hidden", experts});
  // The reference trainer runs one micro-batch of each EP group at a time, its replicas in lockstep.
  const double reference_stored = cfg.reference ? tp * ep * stored : 0;
  est.parts.push_back({"expert activations", "microbatch_size",
                       (cfg.dp * tp * in_flight * stored + reference_stored + std::max(1.0, eval_copies) * tp * ep * eval_stored) * 4 * 2});
}

// What a run keeps of every step until its end (schedule/step_book.cc; the median step, whose figures
// the report shows, is known only then): each device's figures on two timelines and, with EP, its
// EP byte counters; the step's record; with MoE the step's routing (kept slots per block, replica,
// micro-batch and expert, which the step's own prediction replays) and each expert's tokens. And the
// events a traced run records.
void AddRecordParts(const RunConfig& cfg, const MlpConfig& mlp, MemoryEstimate& est) {
  const double world = cfg.world_size();
  double per_step = sizeof(schedule::StepRecord) + world * 2 * sizeof(schedule::DeviceMetrics);
  if (mlp.moe.enabled()) {
    const double blocks = static_cast<double>(mlp.moe.layers.size()), E = mlp.moe.experts;
    per_step += world * 2 * sizeof(uint64_t) +
                8 * blocks * (static_cast<double>(cfg.dp) * cfg.microbatches * E + E);
  }
  est.parts.push_back({"step records", "steps", static_cast<double>(cfg.steps) * per_step});

  // Events a traced run records: a few per op, bounded by the tracer's cap (no --trace: none).
  if (!cfg.trace.empty()) {
    const double ops = static_cast<double>(cfg.world_size()) * cfg.microbatches * cfg.chunks() * 12.0 * cfg.steps;
    const double events = std::min(ops, static_cast<double>(kMaxTraceEvents));
    // The buffers, Events()' sorted copy and the export's text (streamed: one piece at a time).
    est.parts.push_back(
        {"trace", "steps", events * (sizeof(TraceEvent) * 2 + kChromeBytesPerEvent) + kChromePieceBytes});
  }
}

}  // namespace

MemoryEstimate EstimateRunMemory(const RunConfig& cfg) {
  MemoryEstimate est;
  const DatasetConfig data{.input_dim = cfg.input_dim, .classes = cfg.classes, .train_size = cfg.train_size,
                           .test_size = cfg.test_size};
  // The data set is samples x bytes per sample: blame the factor furthest above the default preset's
  // (32768 + 4096 samples of 16 inputs and 10 classes).
  const double samples = static_cast<double>(cfg.train_size) + static_cast<double>(cfg.test_size);
  const double inputs = 4.0 * cfg.input_dim, labels = 8.0 * cfg.classes;
  const char* data_field = samples / (32768 + 4096) >= (inputs + labels) / (4.0 * 16 + 8.0 * 10)
                               ? (cfg.test_size > cfg.train_size ? "test_size" : "train_size")
                               : (inputs >= labels ? "input_dim" : "classes");
  est.parts.push_back({"data set", data_field, DatasetPeakBytes(data)});

  const MlpConfig mlp = cfg.Mlp();
  double weights = 0, widths = mlp.input_dim;
  for (int l = 0; l < mlp.num_layers(); ++l) {
    weights += static_cast<double>(mlp.in_dim(l)) * mlp.out_dim(l) + mlp.out_dim(l);
    widths += mlp.out_dim(l);
  }
  const double states = cfg.optimizer.kind == OptimizerKind::kAdam ? 2 : 1;
  // Weights + gradients + optimizer state + 3 × gradients of all-reduce buffers + the optimizer's
  // commit backup of weights and state (a step's update is committed or rolled back whole), per
  // replica.
  const double per_replica = 2 + states + 3 + 1 + states;
  // DualPipe holds every stage's weights on two ranks (stage r of one direction and of the other):
  // two copies per replica (measured: a 1024x8 MLP over pp = 2 peaks at 427 MB against 1F1B's 218 MB).
  const double copies = cfg.schedule == schedule::ScheduleKind::kDualPipe ? 2 : 1;
  double model = cfg.dp * copies * weights * 4 * per_replica;
  // The reference trainer: weights, gradients, optimizer state and its gradient totals — with EP,
  // once per EP rank of a group (its replicas run in lockstep, each holding the dense layers; they
  // were counted once: 0.485 GB grown against 0.511 GB estimated at dp 4, ep 4, 512x8).
  const bool moe = mlp.moe.enabled();
  const double ep_replicas = moe ? std::max(1, cfg.ep) : 1;
  if (cfg.reference) model += ep_replicas * weights * 4 * (3 + states);
  // Virtual clock: the held-out evaluation's copies of replica 0 (weights only), one per EP
  // rank, one per evaluation thread (schedule::EvaluationThreads; a real-clock run evaluates the
  // devices' own shards).
  const int64_t eval_samples = cfg.eval_samples > 0 ? std::min(cfg.eval_samples, cfg.test_size) : cfg.test_size;
  const double eval_copies =
      cfg.virtual_time ? schedule::EvaluationThreads(ep_replicas * weights * 4, eval_samples) : 0;
  model += eval_copies * ep_replicas * weights * 4;
  est.parts.push_back({"model", cfg.dp > 64 ? "dp" : "hidden", model});

  const double in_flight = MicroBatchesInFlight(cfg);
  // Each pipeline rank stores its layers' share; over a replica the widths add up once per micro-batch.
  const double activations = static_cast<double>(cfg.dp) * in_flight * 3 * cfg.microbatch_size * widths * 4 *
                             std::max(1, cfg.tp);
  est.parts.push_back({"activations", "microbatch_size", activations});

  if (moe) AddExpertParts(cfg, mlp, per_replica, states, in_flight, eval_copies, est);
  AddRecordParts(cfg, mlp, est);
  est.parts.push_back({"devices", "dp", cfg.world_size() * (kPerDeviceBytes + kReportBytesPerDevice)});
  // glibc's malloc arenas (one per thread up to 8 per core), each with memory it keeps once freed
  // (apps/main.cc keeps freed heap memory): measured 2026-11-26 on 2 cores, peak RSS above the other
  // parts by 2.3 MB at 8 devices and 5.3 MB at 32, under this bound of 16 × 512 KiB.
  const double threads = static_cast<double>(cfg.world_size()) * (cfg.virtual_time ? 1 : 2) + 1;  // + main
  const double arenas = std::min(threads, 8.0 * std::max(1u, std::thread::hardware_concurrency()));
  // On transparent huge pages (apps/malloc_tunables.h) an arena's resident memory rounds up to
  // whole 2 MiB ranges: at its top, and where a block glibc maps apart (main arena: its sbrk'd
  // start) begins or ends — bounded here by two huge pages an arena. Measured 2026-11-29: a
  // 2 × 2 × 2 run grew 32.5 MB against 15 MB before this term, 32 devices 38.7 MB against 29.7.
  const double per_arena = kArenaBytes + (HeapOnHugePages() ? 2 * kHugePageBytes : 0);
  est.parts.push_back({"allocator arenas", "dp", arenas * per_arena});
  return est;
}

double ModelBufferBytes(const RunConfig& cfg) {
  double bytes = 0;
  for (const MemoryEstimate::Part& p : EstimateRunMemory(cfg).parts) {
    if (p.what == "data set" || p.what == "model" || p.what == "experts") bytes += p.bytes;
  }
  return bytes;
}

MemoryEstimate EstimatePredictMemory(const RunConfig& cfg) {
  using schedule::ScheduleKind;
  MemoryEstimate est;
  est.subject = "the prediction";
  est.parts.push_back({"devices", "dp", static_cast<double>(cfg.world_size()) * kPredictBytesPerDevice});
  const double m = cfg.microbatches, chunks = cfg.chunks();
  est.parts.push_back({"schedule program", "microbatches", cfg.pp * chunks * m * kProgramBytesPerSlot});
  // The intervals of one replica a step (an upper bound): each pass — F, B (or Bi and W) of a
  // micro-batch on a model stage — is one, plus two per TP all-reduce that cuts it (one per column- and
  // row-parallel pair of the stage's layers, runtime/model/mlp.h: over the stages at most (L + S) / 2;
  // MoE blocks break pairs and add EP all-to-alls: up to four per layer), and 4 p2p ones per
  // micro-batch and stage, on each of the tp shards.
  const bool split = cfg.schedule != ScheduleKind::kGPipe && cfg.schedule != ScheduleKind::kOneFOneB &&
                     cfg.schedule != ScheduleKind::kInterleaved;
  const bool moe = !cfg.moe_layers.empty() && cfg.moe_layers != "none";
  const double stages = cfg.num_model_stages(), layers = std::max(1, cfg.Mlp().num_layers());
  const double cuts = moe ? 4 * layers : cfg.tp > 1 ? layers + stages : 0;
  const double replica = cfg.tp * m * ((split ? 3 : 2) * (stages + cuts) + 4 * stages);
  // The replicas played when they fold: one, one EP group, or as many as it takes the node pattern to
  // repeat — at most lcm(ep, devices_per_node) (schedule::ReplicasPlayed) — (replicas that do not fold
  // are bounded by the predictor's message budget, CheckPredictable, which says why they do not), and
  // with --report_json the report's timeline rows of one device at a time (apps/lazy_json.h), counted
  // as twice a device's mean share of the replica's intervals (without --report_json the timeline
  // section is not made, apps/predict_cmd.cc).
  const double played =
      std::min<double>(cfg.dp, std::lcm(moe && cfg.ep > 1 ? cfg.ep : 1, std::max(1, cfg.devices_per_node)));
  const double replica_devices = static_cast<double>(cfg.pp) * cfg.tp;
  const double rows = cfg.report_json.empty() ? 0 : std::min(1.0, 2 / (replica_devices * played));
  est.parts.push_back({"predicted timelines", "microbatches",
                       played * replica * (kPredictBytesPerInterval + rows * kReportBytesPerTimelineInterval)});
  return est;
}

double AvailableMemoryBytes() {
  if (const char* limit = std::getenv("RINGPIPE_MEMORY_LIMIT_BYTES"); limit != nullptr) {
    double v;
    if (absl::SimpleAtod(limit, &v) && v > 0) return v;
  }
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double value;
  while (in >> key >> value) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return value * 1024;
  }
  return std::numeric_limits<double>::infinity();
}

absl::Status CheckMemory(const MemoryEstimate& estimate, double available) {
  const double total = estimate.total();
  if (total <= available) return absl::OkStatus();
  const MemoryEstimate::Part* largest = &estimate.parts.front();
  std::vector<std::string> parts;
  for (const MemoryEstimate::Part& p : estimate.parts) {
    if (p.bytes > largest->bytes) largest = &p;
    if (p.bytes >= 1e6) parts.push_back(absl::StrCat(p.what, " ", Gb(p.bytes)));
  }
  return FieldError(largest->field, absl::StrCat(estimate.subject, " would allocate about ", Gb(total), " (",
                                                 absl::StrJoin(parts, ", "), "); this machine has ", Gb(available),
                                                 " available (MemAvailable)"));
}

}  // namespace rp::apps
