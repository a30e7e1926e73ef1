#include "schedule/validator.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
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

// The direction mismatch of micro-batch `mb` on chunk `chunk` of rank `s`, or "" when they agree.
std::string DirectionMismatch(const Program& prog, int s, int chunk, int mb) {
  const int want = prog.DirectionOf(s, chunk), got = prog.DirectionOfMicroBatch(mb);
  if (want == got) return "";
  return absl::StrCat(": micro-batch ", mb, " flows in direction ", got, " but chunk ", chunk,
                      " holds a stage of direction ", want);
}

absl::Status CheckSizes(const Program& prog) {
  const int p = prog.num_ranks, v = prog.num_chunks, m = prog.num_micro_batches;
  if (p < 1 || v < 1 || m < 1) {
    return absl::InvalidArgumentError(absl::StrCat("program: num_ranks=", p, ", num_chunks=", v,
                                                   ", num_micro_batches=", m, " must all be >= 1"));
  }
  if (static_cast<int>(prog.ranks.size()) != p) {
    return absl::InvalidArgumentError(absl::StrCat("program: ", prog.ranks.size(),
                                                   " op lists for num_ranks=", p));
  }
  if (!prog.placement.empty() &&
      (prog.placement.num_ranks() != p || prog.placement.num_chunks() != v)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "program: placement is for ", prog.placement.num_ranks(), " ranks x ",
        prog.placement.num_chunks(), " chunks, the program has num_ranks=", p, ", num_chunks=", v));
  }
  if (prog.num_directions() == 2 && m < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "program: two directions need num_micro_batches >= 2 (one per direction), got ", m));
  }
  return absl::OkStatus();
}

// A send or receive names the rank of the neighbouring stage's holder, which is another rank.
absl::Status CheckPeer(const Program& prog, int s, size_t i) {
  const Op& op = prog.ranks[s][i];
  const bool toward_next = op.kind == OpKind::kSendAct || op.kind == OpKind::kRecvGrad;
  const std::optional<ChunkRef> other =
      toward_next ? prog.NextHolder(s, op.chunk) : prog.PrevHolder(s, op.chunk);
  const int k = prog.ModelStage(s, op.chunk);
  if (!other.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(Where(prog, s, i), ": model stage ", k, " has no ",
                                                   toward_next ? "next" : "previous",
                                                   " stage to talk to"));
  }
  if (op.peer != other->rank || other->rank == s) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(prog, s, i), ": peer must be rank ", other->rank, " (model stage ",
        toward_next ? k + 1 : k - 1, ")",
        other->rank == s ? ", which is this rank: a local hand-off needs no message" : ""));
  }
  return absl::OkStatus();
}

absl::Status CheckStructure(const Program& prog) {
  RP_RETURN_IF_ERROR(CheckSizes(prog));
  const int p = prog.num_ranks, v = prog.num_chunks, m = prog.num_micro_batches;
  for (int s = 0; s < p; ++s) {
    const auto& ops = prog.ranks[s];
    int next_bucket = 0;
    int optimizer = 0;
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      auto bad = [&](const auto&... what) {
        return absl::InvalidArgumentError(absl::StrCat(Where(prog, s, i), what...));
      };
      const bool step_level = op.kind == OpKind::kAllReduce || op.kind == OpKind::kOptimizerStep;
      if (!step_level && (op.micro_batch < 0 || op.micro_batch >= m)) {
        return bad(": micro_batch out of range [0, ", m, ")");
      }
      if (op.chunk < 0 || op.chunk >= v) return bad(": chunk out of range [0, ", v, ")");
      if (optimizer > 0) return bad(": op after the optimizer step (it must be last)");
      if (!step_level) {
        if (std::string e = DirectionMismatch(prog, s, op.chunk, op.micro_batch); !e.empty()) {
          return bad(e);
        }
      }
      const bool fused = op.kind == OpKind::kForwardBackward;
      if (!fused && (op.backward_micro_batch != -1 || op.backward_chunk != -1)) {
        return bad(": backward_micro_batch/backward_chunk are for F&B ops only");
      }
      switch (op.kind) {
        case OpKind::kForwardBackward:
          if (op.backward_micro_batch < 0 || op.backward_micro_batch >= m ||
              op.backward_chunk < 0 || op.backward_chunk >= v) {
            return bad(": backward part out of range (micro-batch [0, ", m, "), chunk [0, ", v, "))");
          }
          if (std::string e = DirectionMismatch(prog, s, op.backward_chunk, op.backward_micro_batch);
              !e.empty()) {
            return bad(" (backward part)", e);
          }
          break;
        case OpKind::kBackwardInput:
        case OpKind::kWeightGrad:
          if (!prog.split_backward) return bad(": Bi/W op in a program without split_backward");
          break;
        case OpKind::kSendAct:
        case OpKind::kRecvGrad:
        case OpKind::kSendGrad:
        case OpKind::kRecvAct:
          RP_RETURN_IF_ERROR(CheckPeer(prog, s, i));
          break;
        case OpKind::kAllReduce:
          if (op.bucket != next_bucket) {
            return bad(": bucket ", op.bucket, " out of order, expected ", next_bucket);
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
  // Counts per (model stage, micro-batch): the micro-batch fixes the direction.
  const size_t n = static_cast<size_t>(K) * m;
  std::vector<int> nf(n, 0), nb(n, 0), nbi(n, 0), nw(n, 0);
  for (int s = 0; s < p; ++s) {
    for (const Op& op : prog.ranks[s]) {
      const int idx = prog.ModelStage(s, op.chunk) * m + op.micro_batch;
      switch (op.kind) {
        case OpKind::kForward: ++nf[idx]; break;
        case OpKind::kBackward: ++nb[idx]; break;
        case OpKind::kBackwardInput: ++nbi[idx]; break;
        case OpKind::kWeightGrad: ++nw[idx]; break;
        case OpKind::kForwardBackward:
          ++nf[idx];
          ++nb[prog.ModelStage(s, op.backward_chunk) * m + op.backward_micro_batch];
          break;
        default: break;
      }
    }
  }
  for (int d = 0; d < prog.num_directions(); ++d) {
    for (int k = 0; k < K; ++k) {
      const ChunkRef at = prog.HolderOf({d, k});
      for (int j = prog.FirstMicroBatch(d); j < prog.FirstMicroBatch(d) + prog.NumMicroBatches(d);
           ++j) {
        const int idx = k * m + j;
        auto bad = [&](const char* what, int count) {
          return absl::InvalidArgumentError(absl::StrCat(
              what, " of model stage ", k,
              prog.num_directions() > 1 ? absl::StrCat(" of direction ", d) : "",
              " (rank ", at.rank, " chunk ", at.chunk, "), micro-batch ", j, " appears ", count,
              " times, expected once"));
        };
        if (nf[idx] != 1) return bad("F", nf[idx]);
        if (nb[idx] + nbi[idx] != 1) {
          return bad(prog.split_backward ? "B or Bi" : "B", nb[idx] + nbi[idx]);
        }
        if (nbi[idx] == 1 && nw[idx] != 1) return bad("W", nw[idx]);
        if (nbi[idx] == 0 && nw[idx] != 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "W of model stage ", k, " micro-batch ", j, " appears ", nw[idx],
              " times, but its backward is a whole B (no W expected)"));
        }
      }
    }
  }
  return absl::OkStatus();
}

struct Message {
  int mb;
  int stage;  // consumer model stage (the micro-batch fixes the direction)
};

class DryRun {
 public:
  DryRun(const Program& prog, const ValidateOptions& opts) : prog_(prog), opts_(opts) {
    const int p = prog.num_ranks, m = prog.num_micro_batches, K = prog.num_model_stages();
    const size_t n = static_cast<size_t>(K) * m;
    f_.assign(n, 0);
    b_.assign(n, 0);
    w_.assign(n, 0);
    act_in_.assign(n, 0);
    grad_in_.assign(n, 0);
    grads_final_.assign(static_cast<size_t>(p) * prog.num_chunks, 0);
    pc_.assign(p, 0);
    blocked_.assign(p, 0);
    report_.peak_in_flight.assign(p, 0);
    report_.peak_awaiting_backward.assign(p, 0);
    awaiting_.assign(p, 0);
    report_.num_buckets.assign(p, 0);
    held_.assign(p, 0);
    if (!opts.stage_stored.empty()) {
      report_.peak_stored_bytes.assign(p, 0);
      held_bytes_.assign(p, 0);
    }
  }

  absl::StatusOr<ValidationReport> Run() {
    const int p = prog_.num_ranks;
    std::vector<int> work;
    for (int s = p - 1; s >= 0; --s) work.push_back(s);
    while (!work.empty()) {
      const int s = work.back();
      work.pop_back();
      blocked_[s] = 0;
      RP_RETURN_IF_ERROR(Advance(s, work));
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
  // Created at first use: a pipeline uses O(p) of the 2p² (src, dst, kind) channels, and a deque
  // each for all of them was 1.4 GB at p = 1024.
  std::deque<Message>& Channel(int src, int dst, bool grad) {
    return channels_[(static_cast<uint64_t>(src) * static_cast<uint64_t>(prog_.num_ranks) +
                      static_cast<uint64_t>(dst)) * 2 + (grad ? 1 : 0)];
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
  // The inputs of F(mb) on chunk `chunk` of rank s: the previous stage's F (local) or its message.
  absl::Status ForwardInputs(int s, int chunk, int mb) {
    const std::optional<ChunkRef> prev = prog_.PrevHolder(s, chunk);
    if (!prev.has_value()) return absl::OkStatus();
    const int k = prog_.ModelStage(s, chunk);
    const bool local = prev->rank == s;
    return Dep(local ? f_[Idx(k - 1, mb)] : act_in_[Idx(k, mb)], s,
               local ? "F of the previous model stage" : "receiving its input");
  }
  // The inputs of B/Bi(mb): its own F and the next stage's B (local) or its gradient message.
  absl::Status BackwardInputs(int s, int chunk, int mb) {
    const int k = prog_.ModelStage(s, chunk);
    RP_RETURN_IF_ERROR(Dep(f_[Idx(k, mb)], s, "its own F"));
    const std::optional<ChunkRef> next = prog_.NextHolder(s, chunk);
    if (!next.has_value()) return absl::OkStatus();
    const bool local = next->rank == s;
    return Dep(local ? b_[Idx(k + 1, mb)] : grad_in_[Idx(k, mb)], s,
               local ? "B of the next model stage" : "receiving its gradient");
  }
  // Stored activations of one micro-batch of rank s's chunk `chunk` change: `from` → `to` of
  // kNone (not held), kForward (after F) and kInputGrad (after Bi).
  enum Held { kNone, kForward, kInputGrad };
  void Hold(int s, int chunk, Held from, Held to) {
    held_[s] += (to != kNone) - (from != kNone);
    if (held_bytes_.empty()) return;
    const StageStored& st = opts_.stage_stored[static_cast<size_t>(prog_.ModelStage(s, chunk))];
    const auto bytes = [&](Held h) {
      return h == kNone ? uint64_t{0} : h == kForward ? st.after_forward : st.after_input_grad;
    };
    held_bytes_[s] = held_bytes_[s] - bytes(from) + bytes(to);
    report_.peak_stored_bytes[s] = std::max(report_.peak_stored_bytes[s], held_bytes_[s]);
  }
  void DoForward(int s, int chunk, int mb) {
    f_[Idx(prog_.ModelStage(s, chunk), mb)] = 1;
    Hold(s, chunk, kNone, kForward);
    report_.peak_in_flight[s] = std::max(report_.peak_in_flight[s], held_[s]);
    report_.peak_awaiting_backward[s] = std::max(report_.peak_awaiting_backward[s], ++awaiting_[s]);
  }
  // A backward's gradient is final for its chunk: count it (−1 once every micro-batch is in).
  void GradientFinal(int s, int chunk) {
    int& n = grads_final_[static_cast<size_t>(s) * prog_.num_chunks + chunk];
    if (++n == prog_.NumMicroBatches(prog_.DirectionOf(s, chunk))) n = -1;
  }
  void DoBackward(int s, int chunk, int mb, bool whole) {
    b_[Idx(prog_.ModelStage(s, chunk), mb)] = 1;
    --awaiting_[s];
    if (whole) {
      Hold(s, chunk, kForward, kNone);
      GradientFinal(s, chunk);
    } else {
      Hold(s, chunk, kForward, kInputGrad);
    }
  }

  // Rank s's send `op` (model stage k); false: s blocks (a rendezvous send until its receiver is there).
  absl::StatusOr<bool> Send(int s, const Op& op, int k, std::vector<int>& work) {
    const int mb = op.micro_batch;
    const bool grad = op.kind == OpKind::kSendGrad;
    RP_RETURN_IF_ERROR(Dep(grad ? b_[Idx(k, mb)] : f_[Idx(k, mb)], s,
                           grad ? "the B it sends" : "the F it sends"));
    if (opts_.rendezvous_sends) {
      const int q = op.peer;
      if (!(blocked_[q] && pc_[q] < prog_.ranks[q].size() &&
            Matches(op, s, prog_.ranks[q][pc_[q]], q))) {
        blocked_[s] = 1;  // the receiver completes us when it reaches the receive
        return false;
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
    return true;
  }

  // Rank s's receive `op` (model stage k); false: s blocks until the message (or its sender) is there.
  absl::StatusOr<bool> Receive(int s, const Op& op, int k, std::vector<int>& work) {
    const int mb = op.micro_batch;
    const bool grad = op.kind == OpKind::kRecvGrad;
    const int q = op.peer;
    if (opts_.rendezvous_sends) {
      if (!(blocked_[q] && pc_[q] < prog_.ranks[q].size() &&
            Matches(prog_.ranks[q][pc_[q]], q, op, s))) {
        blocked_[s] = 1;
        return false;
      }
      ++pc_[q];
      work.push_back(q);
    } else {
      auto& ch = Channel(q, s, grad);
      if (ch.empty()) {
        blocked_[s] = 1;
        return false;
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
    return true;
  }

  // Runs rank s until it blocks or finishes; wakes the ranks it unblocks.
  absl::Status Advance(int s, std::vector<int>& work) {
    const auto& ops = prog_.ranks[s];
    while (pc_[s] < ops.size()) {
      const Op& op = ops[pc_[s]];
      const int k = prog_.ModelStage(s, op.chunk);
      const int mb = op.micro_batch;
      switch (op.kind) {
        case OpKind::kForward:
          RP_RETURN_IF_ERROR(ForwardInputs(s, op.chunk, mb));
          DoForward(s, op.chunk, mb);
          break;
        case OpKind::kBackward:
        case OpKind::kBackwardInput:
          RP_RETURN_IF_ERROR(BackwardInputs(s, op.chunk, mb));
          DoBackward(s, op.chunk, mb, op.kind == OpKind::kBackward);
          break;
        case OpKind::kForwardBackward:
          // Both parts' inputs must be there before the op starts; F's activations are stored before
          // B frees its own (both are live during the op).
          RP_RETURN_IF_ERROR(ForwardInputs(s, op.chunk, mb));
          RP_RETURN_IF_ERROR(BackwardInputs(s, op.backward_chunk, op.backward_micro_batch));
          DoForward(s, op.chunk, mb);
          DoBackward(s, op.backward_chunk, op.backward_micro_batch, true);
          break;
        case OpKind::kWeightGrad:
          RP_RETURN_IF_ERROR(Dep(b_[Idx(k, mb)], s, "its Bi"));
          w_[Idx(k, mb)] = 1;
          Hold(s, op.chunk, kInputGrad, kNone);
          GradientFinal(s, op.chunk);
          break;
        case OpKind::kSendAct:
        case OpKind::kSendGrad: {
          RP_ASSIGN_OR_RETURN(const bool sent, Send(s, op, k, work));
          if (!sent) return absl::OkStatus();
          break;
        }
        case OpKind::kRecvAct:
        case OpKind::kRecvGrad: {
          RP_ASSIGN_OR_RETURN(const bool received, Receive(s, op, k, work));
          if (!received) return absl::OkStatus();
          break;
        }
        case OpKind::kAllReduce:
          if (grads_final_[static_cast<size_t>(s) * prog_.num_chunks + op.chunk] != -1) {
            return absl::InvalidArgumentError(absl::StrCat(
                "dependency violated: ", Where(prog_, s, pc_[s]),
                " starts before every backward of chunk ", op.chunk, " has produced its gradients"));
          }
          ++report_.num_buckets[s];
          break;
        case OpKind::kTpAllReduce:
        case OpKind::kOptimizerStep:
          break;
      }
      ++pc_[s];
    }
    return absl::OkStatus();
  }

  void Deliver(const Op& recv, int at) {
    const int k = prog_.ModelStage(at, recv.chunk);
    (recv.kind == OpKind::kRecvGrad ? grad_in_ : act_in_)[Idx(k, recv.micro_batch)] = 1;
  }

  const Program& prog_;
  const ValidateOptions& opts_;
  std::vector<char> f_, b_, w_, act_in_, grad_in_;  // per (model stage, micro-batch)
  std::vector<int> grads_final_;  // per (rank, chunk): gradient-final backwards, −1 once all are
  std::vector<size_t> pc_;
  std::vector<char> blocked_;
  std::vector<int> held_;      // F done, last backward op not done
  std::vector<uint64_t> held_bytes_;  // their stored bytes (with stage_stored)
  std::vector<int> awaiting_;  // F done, B/Bi not done
  std::unordered_map<uint64_t, std::deque<Message>> channels_;  // stable references
  ValidationReport report_;
};

}  // namespace

absl::StatusOr<ValidationReport> Validate(const Program& prog, const ValidateOptions& opts) {
  RP_RETURN_IF_ERROR(CheckStructure(prog));
  RP_RETURN_IF_ERROR(CheckExactlyOnce(prog));
  if (!opts.stage_stored.empty() && opts.stage_stored.size() != static_cast<size_t>(prog.num_model_stages())) {
    return absl::InvalidArgumentError(absl::StrCat("stage_stored has ", opts.stage_stored.size(),
                                                   " entries, not one per model stage (", prog.num_model_stages(), ")"));
  }
  DryRun run(prog, opts);
  return run.Run();
}

}  // namespace rp::schedule
