// The step boundary (executor_impl.h): the last device to finish a step records it — loss,
// accuracy, replica divergence, each device's metrics on the measured and emulated timelines —
// while every other device waits at the rendezvous, then picks the next step's modeled start.
// Everyone waits meanwhile, so the boundary's serial work is wall time on both cores: the
// divergence and the metrics are computed on up to 4 threads (rp::ForSlices; the results do not
// depend on the split), and on the virtual clock a step's held-out evaluation — all but the
// last step's — runs on a thread of its own over a copy of replica 0's weights while the next
// step trains (StartEvaluation; joined at the next boundary). On the virtual clock an evaluation
// takes up to one thread per core (EvaluationThreads), each over its own copy.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/model/kernels.h"
#include "runtime/model/stage_group.h"
#include "runtime/status_macros.h"
#include "runtime/thread.h"
#include "schedule/executor_impl.h"
#include "schedule/time_scale.h"

namespace rp::schedule {
namespace {

// Interval lists are kept for every step while world × steps stays below this, else for the last
// step only (bounded memory for thousands of devices; see RunResult::timeline_step).
constexpr int64_t kKeepAllIntervals = 8192;

// Host time to leave every device thread to wake before a real-clock step starts, in modeled time
// (StepStartWallMargin, schedule/time_scale.h).
Nanos WakeMargin(int world, double time_scale) {
  return Nanos(static_cast<int64_t>(static_cast<double>(StepStartWallMargin(world).count()) / time_scale));
}

// The process's thread count from /proc/self/status ("Threads:"), 0 if unreadable.
int ProcessThreads() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  }
  return 0;
}

}  // namespace

absl::StatusOr<Nanos> Executor::Impl::OnStepBoundary(Nanos max_end) {
  // The stall monitor sees no progress while this runs (every device waits here): it is host
  // work of ours that ends, so it holds the monitor's timeout off (Monitor, executor.cc).
  const HostWork work(&ctx.host_work);
  const int round = boundary_round++;
  // Every device thread waits at this boundary: a measured thread count no short run can miss.
  if (round == 0) threads_at_first_step = ProcessThreads();
  if (round > 0) RP_RETURN_IF_ERROR(Bookkeep(round - 1));
  Nanos release = max_end;
  if (ctx.real_clock != nullptr) {
    release = std::max(release, ctx.clock->Now() + WakeMargin(plan->grid.world_size(), o.time_scale));
  }
  step_start = release;
  committed = round;  // every device passed the boundary after step round − 1
  return release;
}

// Loss and training accuracy of the step: Σ_d Σ_j loss_sum(d, j) in (d, j) order, from the TP rank
// 0 of the last model stage's holder of micro-batch j's direction.
void Executor::Impl::RecordLoss(StepRecord& rec) const {
  const ParallelGrid& g = plan->grid;
  const int K = o.program.num_model_stages();
  double loss = 0;
  int64_t correct = 0;
  for (int dp = 0; dp < g.shape().dp; ++dp) {
    for (int j = 0; j < layout.microbatches; ++j) {
      const int last_pp = o.program.RankOfModelStage(K - 1, o.program.DirectionOfMicroBatch(j));
      const DeviceRunner& x = *runners[static_cast<size_t>(g.RankOf({dp, last_pp, 0}))];
      loss += x.loss_sum()[static_cast<size_t>(j)];
      correct += x.correct()[static_cast<size_t>(j)];
    }
  }
  const double B = static_cast<double>(layout.global_batch());
  rec.loss = loss / B;
  rec.train_accuracy = static_cast<double>(correct) / B;
}

// Divergence: max |w_r − w_0| over replicas, per shard; a MoE block's experts against the first
// replica with the same EP rank (EP ranks hold different experts).
double Executor::Impl::ReplicaDivergence() const {
  const ParallelGrid& g = plan->grid;
  const GridShape s = g.shape();
  // A maximum (NaN counts as +inf), so the replicas may be compared on several threads.
  const auto raise = [](double& div, double diff) {
    if (!(diff <= div)) div = std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff;
  };
  const int ep = plan->ep();
  std::vector<double> replica_div(static_cast<size_t>(s.dp), 0.0);
  constexpr int64_t kMinReplicasPerSlice = 4;
  ForSlices(s.dp - 1, /*threads=*/0, kMinReplicasPerSlice, [&](int64_t begin, int64_t end) {
    for (int dp = static_cast<int>(begin) + 1; dp <= static_cast<int>(end); ++dp) {
      double div = 0;
      for (int pp = 0; pp < s.pp; ++pp) {
        for (int tp = 0; tp < s.tp; ++tp) {
          const auto& b = runners[static_cast<size_t>(g.RankOf({dp, pp, tp}))]->stages();
          for (size_t ch = 0; ch < b.size(); ++ch) {
            const std::span<const float> wb = std::as_const(*b[ch]).params();
            for (const ParamRange& range : b[ch]->param_ranges()) {
              const int ref = range.group == ReduceGroup::kExpertDataParallel ? dp % ep : 0;
              if (ref == dp) continue;
              const std::span<const float> wa =
                  std::as_const(*runners[static_cast<size_t>(g.RankOf({ref, pp, tp}))]->stages()[ch])
                      .params();
              for (int64_t i = range.offset; i < range.offset + range.size; ++i) {
                const size_t u = static_cast<size_t>(i);
                raise(div, std::fabs(static_cast<double>(wa[u]) - static_cast<double>(wb[u])));
              }
            }
          }
        }
      }
      replica_div[static_cast<size_t>(dp)] = div;
    }
  });
  double div = 0;
  for (double d : replica_div) raise(div, d);
  return div;
}

absl::Status Executor::Impl::Bookkeep(int step) {
  // The previous step's evaluation, if one runs: its record is final before this one is pushed,
  // and its copy of the weights is free for this step's.
  RP_RETURN_IF_ERROR(JoinEvaluation());
  const ParallelGrid& g = plan->grid;
  StepRecord rec;
  rec.step = step;
  RecordLoss(rec);
  rec.replica_divergence = ReplicaDivergence();
  RecordRouting(rec);
  // Step windows: emulated from the modeled start to the last op end; measured from the step's
  // start mapped to wall time to the last wall stamp (virtual clock: equal).
  Nanos emulated_end{0}, measured{0};
  for (const auto& r : runners) {
    const DeviceStep& ds = r->last_step();
    emulated_end = std::max(emulated_end, ds.emulated_end);
    measured = std::max(measured, ds.measured_end);
  }
  const Nanos emulated = emulated_end - step_start;
  if (o.virtual_time) measured = emulated;
  rec.emulated_ms = ToMillis(emulated);
  rec.measured_ms = ToMillis(measured);
  std::vector<StepMetrics> m(runners.size());
  constexpr int64_t kMinDevicesPerSlice = 256;
  ForSlices(std::ssize(runners), /*threads=*/0, kMinDevicesPerSlice, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const std::vector<OpInterval>& iv = runners[static_cast<size_t>(r)]->last_step().intervals;
      m[static_cast<size_t>(r)].emulated = ComputeDeviceMetrics(iv, emulated, Timeline::kEmulated);
      m[static_cast<size_t>(r)].measured = ComputeDeviceMetrics(iv, measured, Timeline::kMeasured);
    }
  });
  const bool keep = int64_t{g.world_size()} * o.steps <= kKeepAllIntervals || step == o.steps - 1;
  std::vector<std::vector<OpInterval>> intervals;
  if (keep) {
    intervals.reserve(runners.size());
    for (const auto& r : runners) intervals.push_back(r->TakeIntervals());
  }
  if (plan->has_ep_exchanges()) {
    std::vector<std::pair<uint64_t, uint64_t>> ep_bytes(runners.size());
    for (size_t r = 0; r < runners.size(); ++r) ep_bytes[r] = EpBytes(static_cast<int>(r));
    ep_bytes_after.push_back(std::move(ep_bytes));
  }
  metrics.push_back(std::move(m));
  kept.push_back(std::move(intervals));
  records.push_back(std::move(rec));
  const bool last = step == o.steps - 1;
  if (last || (o.eval_every > 0 && (step + 1) % o.eval_every == 0)) {
    // The last step's evaluation is the run's final figure: nothing left to overlap it with.
    if (o.virtual_time && !last) return StartEvaluation(records.size() - 1);
    RP_RETURN_IF_ERROR(Evaluate(records.back(), last));
  }
  return absl::OkStatus();
}

// MoE routing of the step: every source replica's kept slots per block and micro-batch (from its
// TP rank 0: TP ranks route identically), per-expert tokens and drops.
void Executor::Impl::RecordRouting(StepRecord& rec) {
  const MoeConfig& moe = o.model.moe;
  if (!moe.enabled()) return;
  const ParallelGrid& g = plan->grid;
  const GridShape s = g.shape();
  const int blocks = static_cast<int>(moe.layers.size());
  rec.routing = StepRouting::Zero(blocks, s.dp, layout.microbatches, moe.experts);
  rec.moe.resize(static_cast<size_t>(blocks));
  for (int b = 0; b < blocks; ++b) rec.moe[static_cast<size_t>(b)].layer = moe.layers[static_cast<size_t>(b)];
  for (int dp = 0; dp < s.dp; ++dp) {
    for (int pp = 0; pp < s.pp; ++pp) {
      const auto& stages = runners[static_cast<size_t>(g.RankOf({dp, pp, 0}))]->stages();
      for (const auto& st : stages) {
        for (size_t l = 0; l < st->layers().size(); ++l) {
          const MoeBlock* block = st->moe(static_cast<int>(l));
          if (block == nullptr) continue;
          const int b = MoeBlockIndex(o.model, st->layers()[l].layer);
          rec.moe[static_cast<size_t>(b)].dropped += block->stats().dropped;
          for (const auto& [mb, by_expert] : block->stats().kept_by_key) {
            for (int e = 0; e < moe.experts; ++e) {
              rec.routing.at(b, dp, mb, e) = by_expert[static_cast<size_t>(e)];
            }
          }
        }
      }
    }
  }
  for (int b = 0; b < blocks; ++b) {
    for (int e = 0; e < moe.experts; ++e) {
      rec.moe[static_cast<size_t>(b)].expert_tokens.push_back(rec.routing.ExpertTokens(b, e));
    }
  }
}

std::pair<uint64_t, uint64_t> Executor::Impl::EpBytes(int r) const {
  int index = 0;
  plan->EpGroup(r, &index);
  const comm::WireStats& w = ctx.Ep(r).rank(index).stats();
  return {w.total_bytes(), w.modeled_bytes};
}

MlpStage* Executor::Impl::RunnerShard(int k, int q, int t) const {
  const int pp = o.program.RankOfModelStage(k), ch = o.program.ChunkOfModelStage(k);
  return runners[static_cast<size_t>(plan->grid.RankOf({q, pp, t}))]
      ->stages()[static_cast<size_t>(ch)]
      .get();
}

namespace {
constexpr int64_t kEvalRows = 512;  // rows per evaluation batch
}  // namespace

int EvaluationThreads(double replica_weight_bytes, int64_t samples) {
  const int64_t batches = (std::max<int64_t>(samples, 0) + kEvalRows - 1) / kEvalRows;
  const int64_t cores = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 4);
  const int64_t by_memory =
      replica_weight_bytes > 0
          ? 1 + static_cast<int64_t>(kMaxExtraEvaluationBytes / replica_weight_bytes)
          : cores;
  return static_cast<int>(std::max<int64_t>(1, std::min({cores, batches, by_memory})));
}

int64_t AutoEvalSamples(int64_t global_batch) {
  return std::max<int64_t>(global_batch, 1024);
}

int Executor::Impl::EvaluationWorkers(int64_t samples) const {
  if (!o.virtual_time) return 1;
  if (o.eval_threads > 0) return o.eval_threads;
  double bytes = 0;
  for (int k = 0; k < o.program.num_model_stages(); ++k) {
    for (int q = 0; q < plan->ep(); ++q) {
      for (int t = 0; t < plan->grid.shape().tp; ++t) {
        bytes += static_cast<double>(std::as_const(*RunnerShard(k, q, t)).params().size()) * 4;
      }
    }
  }
  return EvaluationThreads(bytes, samples);
}

int64_t Executor::Impl::EvaluationSamples(bool last) const {
  const int64_t split = data->size(Split::kTest);
  if (o.eval_samples > 0) return std::min(o.eval_samples, split);
  return last ? split : std::min(AutoEvalSamples(layout.global_batch()), split);
}

MlpStage* Executor::Impl::EvalShard(int set, int k, int q, int t) const {
  return eval_sets[static_cast<size_t>(set)][static_cast<size_t>(k)]
                  [static_cast<size_t>(q * plan->grid.shape().tp + t)]
                      .get();
}

absl::Status Executor::Impl::Evaluate(StepRecord& rec, bool last) {
  // Worker 0 reads the devices' own shards (nothing trains meanwhile), the others copies.
  const int64_t samples = EvaluationSamples(last);
  const int workers = EvaluationWorkers(samples);
  RP_RETURN_IF_ERROR(CopyReplicaZero(workers - 1));
  RP_RETURN_IF_ERROR(EvaluateModel(
      [this](int w, int k, int q, int t) {
        return w == 0 ? RunnerShard(k, q, t) : EvalShard(w - 1, k, q, t);
      },
      workers, samples, &rec.accuracy, &rec.test_loss));
  rec.test_samples = samples;
  return absl::OkStatus();
}

absl::Status Executor::Impl::EvaluateModel(absl::FunctionRef<MlpStage*(int, int, int, int)> shard,
                                           int workers, int64_t total, double* accuracy,
                                           double* test_loss) const {
  constexpr int kEvalMicroBatch = 1 << 30;  // an id no training micro-batch uses
  const int64_t batches = (total + kEvalRows - 1) / kEvalRows;
  std::vector<LossStats> stats(static_cast<size_t>(batches));
  std::vector<absl::Status> status(static_cast<size_t>(batches));
  const auto batch = [&](int w, int64_t i) -> absl::Status {
    const int64_t begin = i * kEvalRows, n = std::min(kEvalRows, total - begin);
    RP_ASSIGN_OR_RETURN(Batch b, data->Slice(Split::kTest, begin, n));
    // Replica 0's model: its EP group's shards (EP ranks 0..ep-1, each TP rank) in lockstep, the
    // other sources passing one zero row each (as rp::ReferenceTrainer::Evaluate).
    const int ep = plan->ep(), tp_size = plan->grid.shape().tp;
    std::vector<Tensor> act(static_cast<size_t>(ep), Tensor(1, b.inputs.cols()));
    act[0] = std::move(b.inputs);
    for (int k = 0; k < o.program.num_model_stages(); ++k) {
      std::vector<MlpStage*> shards;
      for (int q = 0; q < ep; ++q) {
        for (int tp = 0; tp < tp_size; ++tp) shards.push_back(shard(w, k, q, tp));
      }
      const std::vector<ConstMatrixView> in(act.begin(), act.end());
      RP_ASSIGN_OR_RETURN(act, RunStageGroupSerial(shards, tp_size, MlpStage::Pass::kInfer,
                                                   kEvalMicroBatch, in));
    }
    RP_ASSIGN_OR_RETURN(stats[static_cast<size_t>(i)],
                        SoftmaxCrossEntropy(act[0], b.labels, 1.0f, MatrixView{}));
    return absl::OkStatus();
  };
  // The batches in turn, to whichever worker is free; after an error, no new batch starts.
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  const auto work = [&](int w) {
    for (int64_t i; !failed.load(std::memory_order_relaxed) &&
                    (i = next.fetch_add(1, std::memory_order_relaxed)) < batches;) {
      status[static_cast<size_t>(i)] = batch(w, i);
      if (!status[static_cast<size_t>(i)].ok()) failed.store(true, std::memory_order_relaxed);
    }
  };
  std::vector<Thread> helpers;
  for (int w = 1; w < workers; ++w) {
    absl::StatusOr<Thread> t = Thread::Start(kDeviceStackBytes, [&work, w] { work(w); });
    if (!t.ok()) break;  // no thread to spare: the others take its batches
    helpers.push_back(*std::move(t));
  }
  work(0);
  for (Thread& t : helpers) t.Join();
  double loss = 0;
  int64_t correct = 0;
  for (int64_t i = 0; i < batches; ++i) {  // batch order: the sums of one thread
    RP_RETURN_IF_ERROR(status[static_cast<size_t>(i)]);
    loss += stats[static_cast<size_t>(i)].loss_sum;
    correct += stats[static_cast<size_t>(i)].correct;
  }
  *accuracy = total > 0 ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
  *test_loss = total > 0 ? loss / static_cast<double>(total) : 0.0;
  return absl::OkStatus();
}

absl::Status Executor::Impl::CopyReplicaZero(int count) {
  const int K = o.program.num_model_stages(), ep = plan->ep(), tp = plan->grid.shape().tp;
  while (std::ssize(eval_sets) < count) {  // built once, as the runners build replica 0's shards
    auto& set = eval_sets.emplace_back(static_cast<size_t>(K));
    for (int k = 0; k < K; ++k) {
      const int pp = o.program.RankOfModelStage(k), ch = o.program.ChunkOfModelStage(k);
      for (int q = 0; q < ep; ++q) {
        for (int t = 0; t < tp; ++t) {
          RP_ASSIGN_OR_RETURN(auto st, MlpStage::Create(o.model, plan->partition,
                                                        plan->Chunk(pp, ch).model_stage, t, q,
                                                        MlpStage::Buffers::kParamsOnly));
          set[static_cast<size_t>(k)].push_back(std::move(st));
        }
      }
    }
  }
  for (int s = 0; s < count; ++s) {
    for (int k = 0; k < K; ++k) {
      for (int q = 0; q < ep; ++q) {
        for (int t = 0; t < tp; ++t) {
          const std::span<const float> from = std::as_const(*RunnerShard(k, q, t)).params();
          const std::span<float> to = EvalShard(s, k, q, t)->params();
          if (from.size() != to.size()) {
            return absl::InternalError(absl::StrCat("evaluation copy of model stage ", k,
                                                    " has ", to.size(), " weights, the device ",
                                                    from.size()));
          }
          std::copy(from.begin(), from.end(), to.begin());
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Executor::Impl::StartEvaluation(size_t record) {
  const int64_t samples = EvaluationSamples(/*last=*/false);
  const int workers = EvaluationWorkers(samples);
  RP_RETURN_IF_ERROR(CopyReplicaZero(workers));
  eval_record = record;
  eval_record_samples = samples;
  absl::StatusOr<Thread> thread = Thread::Start(kDeviceStackBytes, [this, workers, samples] {
    eval_status = EvaluateModel(
        [this](int w, int k, int q, int t) { return EvalShard(w, k, q, t); }, workers, samples,
        &eval_accuracy, &eval_loss);
  });
  if (!thread.ok()) return Evaluate(records[record], /*last=*/false);  // no thread to spare
  eval_thread = std::move(*thread);
  return absl::OkStatus();
}

absl::Status Executor::Impl::JoinEvaluation() {
  if (!eval_thread.joinable()) return absl::OkStatus();
  eval_thread.Join();
  if (!eval_status.ok()) {
    return absl::Status(eval_status.code(),
                        absl::StrCat("held-out evaluation after step ",
                                     records[eval_record].step, ": ", eval_status.message()));
  }
  records[eval_record].accuracy = eval_accuracy;
  records[eval_record].test_loss = eval_loss;
  records[eval_record].test_samples = eval_record_samples;
  return absl::OkStatus();
}

}  // namespace rp::schedule
