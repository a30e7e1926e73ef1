#include "schedule/validator.h"

#include <algorithm>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"

namespace rp::schedule {
namespace {

std::string Where(const Program& prog, int rank, size_t i) {
  return absl::StrCat("rank ", rank, " op #", i, " ", ToString(prog.ranks[rank][i], prog.num_chunks));
}

absl::Status CheckStructure(const Program& prog) {
  const int p = prog.num_ranks, v = prog.num_chunks, m = prog.num_micro_batches;
  if (p < 1 || v < 1 || m < 1) {
    return absl::InvalidArgumentError(absl::StrCat("program: num_ranks=", p, ", num_chunks=", v,
                                                   ", num_micro_batches=", m, " must all be >= 1"));
  }
  if (static_cast<int>(prog.ranks.size()) != p) {
    return absl::InvalidArgumentError(absl::StrCat("program: ", prog.ranks.size(),
                                                   " op lists for num_ranks=", p));
  }
  const int K = p * v;
  for (int s = 0; s < p; ++s) {
    const auto& ops = prog.ranks[s];
    int next_bucket = 0;
    int optimizer = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      const bool step_level = op.kind == OpKind::kAllReduce || op.kind == OpKind::kOptimizerStep;
      if (!step_level && (op.micro_batch < 0 || op.micro_batch >= m)) {
        return absl::InvalidArgumentError(
            absl::StrCat(Where(prog, s, i), ": micro_batch out of range [0, ", m, ")"));
      }
      if (op.chunk < 0 || op.chunk >= v) {
        return absl::InvalidArgumentError(
            absl::StrCat(Where(prog, s, i), ": chunk out of range [0, ", v, ")"));
      }
      if (optimizer > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(Where(prog, s, i), ": op after the optimizer step (it must be last)"));
      }
      const int k = prog.ModelStage(s, op.chunk);
      switch (op.kind) {
        case OpKind::kBackward:
          if (prog.split_backward) {
            return absl::InvalidArgumentError(absl::StrCat(
                Where(prog, s, i), ": whole backward in a split-backward (zero-bubble) program"));
          }
          break;
        case OpKind::kBackwardInput:
        case OpKind::kWeightGrad:
          if (!prog.split_backward) {
            return absl::InvalidArgumentError(absl::StrCat(
                Where(prog, s, i), ": Bi/W op in a program without split_backward"));
          }
          break;
        case OpKind::kSendAct:
        case OpKind::kRecvGrad:
        case OpKind::kSendGrad:
        case OpKind::kRecvAct: {
          const bool toward_next = op.kind == OpKind::kSendAct || op.kind == OpKind::kRecvGrad;
          const int other = toward_next ? k + 1 : k - 1;
          if (other < 0 || other >= K) {
            return absl::InvalidArgumentError(absl::StrCat(
                Where(prog, s, i), ": model stage ", k, " has no ", toward_next ? "next" : "previous",
                " stage to talk to"));
          }
          const int want = prog.RankOfModelStage(other);
          if (op.peer != want || want == s) {
            return absl::InvalidArgumentError(absl::StrCat(
                Where(prog, s, i), ": peer must be rank ", want, " (model stage ", other, ")",
                want == s ? ", which is this rank: no message needed" : ""));
          }
          break;
        }
        case OpKind::kAllReduce:
          if (op.bucket != next_bucket) {
            return absl::InvalidArgumentError(absl::StrCat(Where(prog, s, i), ": bucket ", op.bucket,
                                                           " out of order, expected ", next_bucket));
          }
          ++next_bucket;
          break;
        case OpKind::kOptimizerStep:
          ++optimizer;
          break;
        default:
          break;
      }
    }
    if (optimizer != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", s, ": needs exactly one optimizer step, has ", optimizer));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckExactlyOnce(const Program& prog) {
  const int p = prog.num_ranks, m = prog.num_micro_batches, K = prog.num_model_stages();
  // counts[kind][k * m + mb]
  std::vector<int> nf(K * m, 0), nb(K * m, 0), nw(K * m, 0);
  for (int s = 0; s < p; ++s) {
    for (const Op& op : prog.ranks[s]) {
      const int idx = prog.ModelStage(s, op.chunk) * m + op.micro_batch;
      if (op.kind == OpKind::kForward) ++nf[idx];
      if (op.kind == OpKind::kBackward || op.kind == OpKind::kBackwardInput) ++nb[idx];
      if (op.kind == OpKind::kWeightGrad) ++nw[idx];
    }
  }
  for (int k = 0; k < K; ++k) {
    for (int j = 0; j < m; ++j) {
      const int idx = k * m + j;
      auto bad = [&](const char* what, int n) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, " of model stage ", k, " (rank ", prog.RankOfModelStage(k), " chunk ",
            prog.ChunkOfModelStage(k), "), micro-batch ", j, " appears ", n, " times, expected once"));
      };
      if (nf[idx] != 1) return bad("F", nf[idx]);
      if (nb[idx] != 1) return bad(prog.split_backward ? "Bi" : "B", nb[idx]);
      if (prog.split_backward && nw[idx] != 1) return bad("W", nw[idx]);
    }
  }
  return absl::OkStatus();
}

struct Message {
  int mb;
  int stage;  // consumer model stage
};

class DryRun {
 public:
  DryRun(const Program& prog, const ValidateOptions& opts) : prog_(prog), opts_(opts) {
    const int p = prog.num_ranks, m = prog.num_micro_batches, K = prog.num_model_stages();
    f_.assign(K * m, 0);
    b_.assign(K * m, 0);
    w_.assign(K * m, 0);
    act_in_.assign(K * m, 0);
    grad_in_.assign(K * m, 0);
    grads_final_.assign(K, 0);
    pc_.assign(p, 0);
    blocked_.assign(p, 0);
    channels_.resize(static_cast<size_t>(p) * p * 2);
    report_.peak_in_flight.assign(p, 0);
    report_.peak_awaiting_backward.assign(p, 0);
    awaiting_.assign(p, 0);
    report_.num_buckets.assign(p, 0);
    held_.assign(p, 0);
  }

  absl::StatusOr<ValidationReport> Run() {
    const int p = prog_.num_ranks;
    std::vector<int> work;
    for (int s = p - 1; s >= 0; --s) work.push_back(s);
    while (!work.empty()) {
      const int s = work.back();
      work.pop_back();
      blocked_[s] = 0;
      auto st = Advance(s, work);
      if (!st.ok()) return st;
    }
    std::string stuck;
    for (int s = 0; s < p; ++s) {
      if (pc_[s] < prog_.ranks[s].size()) {
        const Op& op = prog_.ranks[s][pc_[s]];
        absl::StrAppend(&stuck, stuck.empty() ? "" : "; ", Where(prog_, s, pc_[s]), " waits for rank ",
                        op.peer);
      }
    }
    if (!stuck.empty()) {
      return absl::FailedPreconditionError(absl::StrCat("deadlock: ", stuck));
    }
    return std::move(report_);
  }

 private:
  int Idx(int k, int mb) const { return k * prog_.num_micro_batches + mb; }
  std::deque<Message>& Channel(int src, int dst, bool grad) {
    return channels_[(static_cast<size_t>(src) * prog_.num_ranks + dst) * 2 + (grad ? 1 : 0)];
  }
  // For rendezvous: is `op` (at `rank`) the receive matching send `send` from `from`?
  bool Matches(const Op& send, int from, const Op& recv, int at) const {
    const bool grad = send.kind == OpKind::kSendGrad;
    if (recv.kind != (grad ? OpKind::kRecvGrad : OpKind::kRecvAct) || recv.peer != from) return false;
    const int consumer = prog_.ModelStage(from, send.chunk) + (grad ? -1 : 1);
    return recv.micro_batch == send.micro_batch && prog_.ModelStage(at, recv.chunk) == consumer;
  }

  absl::Status Dep(bool ok, int s, const char* need) {
    if (ok) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("dependency violated: ", Where(prog_, s, pc_[s]),
                                                   " runs before ", need));
  }

  // Runs rank s until it blocks or finishes; wakes the ranks it unblocks.
  absl::Status Advance(int s, std::vector<int>& work) {
    const auto& ops = prog_.ranks[s];
    const int p = prog_.num_ranks, m = prog_.num_micro_batches, K = prog_.num_model_stages();
    while (pc_[s] < ops.size()) {
      const Op& op = ops[pc_[s]];
      const int k = prog_.ModelStage(s, op.chunk);
      const int mb = op.micro_batch;
      switch (op.kind) {
        case OpKind::kForward: {
          if (k > 0) {
            const bool local = prog_.RankOfModelStage(k - 1) == s;
            RP_RETURN_IF_ERROR(Dep(local ? f_[Idx(k - 1, mb)] : act_in_[Idx(k, mb)], s,
                                   local ? "F of the previous model stage" : "receiving its input"));
          }
          f_[Idx(k, mb)] = 1;
          report_.peak_in_flight[s] = std::max(report_.peak_in_flight[s], ++held_[s]);
          report_.peak_awaiting_backward[s] = std::max(report_.peak_awaiting_backward[s], ++awaiting_[s]);
          break;
        }
        case OpKind::kBackward:
        case OpKind::kBackwardInput: {
          RP_RETURN_IF_ERROR(Dep(f_[Idx(k, mb)], s, "its own F"));
          if (k < K - 1) {
            const bool local = prog_.RankOfModelStage(k + 1) == s;
            RP_RETURN_IF_ERROR(Dep(local ? b_[Idx(k + 1, mb)] : grad_in_[Idx(k, mb)], s,
                                   local ? "B of the next model stage" : "receiving its gradient"));
          }
          b_[Idx(k, mb)] = 1;
          --awaiting_[s];
          if (op.kind == OpKind::kBackward) {
            --held_[s];
            if (++grads_final_[k] == m) grads_final_[k] = -1;
          }
          break;
        }
        case OpKind::kWeightGrad:
          RP_RETURN_IF_ERROR(Dep(b_[Idx(k, mb)], s, "its Bi"));
          w_[Idx(k, mb)] = 1;
          --held_[s];
          if (++grads_final_[k] == m) grads_final_[k] = -1;
          break;
        case OpKind::kSendAct:
        case OpKind::kSendGrad: {
          const bool grad = op.kind == OpKind::kSendGrad;
          RP_RETURN_IF_ERROR(Dep(grad ? b_[Idx(k, mb)] : f_[Idx(k, mb)], s,
                                 grad ? "the B it sends" : "the F it sends"));
          if (opts_.rendezvous_sends) {
            const int q = op.peer;
            if (!(blocked_[q] && pc_[q] < prog_.ranks[q].size() &&
                  Matches(op, s, prog_.ranks[q][pc_[q]], q))) {
              blocked_[s] = 1;  // the receiver completes us when it reaches the receive
              return absl::OkStatus();
            }
            Deliver(prog_.ranks[q][pc_[q]], q);
            ++pc_[q];
            work.push_back(q);
          } else {
            Channel(s, op.peer, grad).push_back(Message{mb, k + (grad ? -1 : 1)});
            if (blocked_[op.peer]) {
              blocked_[op.peer] = 0;
              work.push_back(op.peer);
            }
          }
          break;
        }
        case OpKind::kRecvAct:
        case OpKind::kRecvGrad: {
          const bool grad = op.kind == OpKind::kRecvGrad;
          const int q = op.peer;
          if (opts_.rendezvous_sends) {
            if (!(blocked_[q] && pc_[q] < prog_.ranks[q].size() &&
                  Matches(prog_.ranks[q][pc_[q]], q, op, s))) {
              blocked_[s] = 1;
              return absl::OkStatus();
            }
            ++pc_[q];
            work.push_back(q);
          } else {
            auto& ch = Channel(q, s, grad);
            if (ch.empty()) {
              blocked_[s] = 1;
              return absl::OkStatus();
            }
            if (ch.front().mb != mb || ch.front().stage != k) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "channel order: ", Where(prog_, s, pc_[s]), " but the oldest ",
                  grad ? "gradient" : "activation", " from rank ", q, " is micro-batch ",
                  ch.front().mb, " for model stage ", ch.front().stage));
            }
            ch.pop_front();
          }
          Deliver(op, s);
          break;
        }
        case OpKind::kAllReduce:
          if (grads_final_[k] != -1) {
            return absl::InvalidArgumentError(absl::StrCat(
                "dependency violated: ", Where(prog_, s, pc_[s]), " starts before every backward of chunk ",
                op.chunk, " has produced its gradients"));
          }
          ++report_.num_buckets[s];
          break;
        case OpKind::kTpAllReduce:
        case OpKind::kOptimizerStep:
          break;
      }
      ++pc_[s];
    }
    (void)p;
    return absl::OkStatus();
  }

  void Deliver(const Op& recv, int at) {
    const int k = prog_.ModelStage(at, recv.chunk);
    (recv.kind == OpKind::kRecvGrad ? grad_in_ : act_in_)[Idx(k, recv.micro_batch)] = 1;
  }

  const Program& prog_;
  const ValidateOptions& opts_;
  std::vector<char> f_, b_, w_, act_in_, grad_in_;
  std::vector<int> grads_final_;  // per model stage: backwards done, −1 once all m are
  std::vector<size_t> pc_;
  std::vector<char> blocked_;
  std::vector<int> held_;      // F done, last backward op not done
  std::vector<int> awaiting_;  // F done, B/Bi not done
  std::vector<std::deque<Message>> channels_;
  ValidationReport report_;
};

}  // namespace

absl::StatusOr<ValidationReport> Validate(const Program& prog, const ValidateOptions& opts) {
  RP_RETURN_IF_ERROR(CheckStructure(prog));
  RP_RETURN_IF_ERROR(CheckExactlyOnce(prog));
  DryRun run(prog, opts);
  return run.Run();
}

}  // namespace rp::schedule
