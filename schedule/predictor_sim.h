// The predictor's discrete-event simulation (internal to schedule/predictor.cc): the devices of
// an ExecutionPlan — all of them, or the first replica or EP group when replicas fold — each a compute LP and a comm
// LP following the emulator's rules (schedule/runner.h), messages committed on a FabricModel in
// key order. See schedule/predictor.h for the model and the folding argument.
//
// Thread safety: none (single-threaded by design).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "comm/alltoall_timing.h"
#include "comm/ring_timing.h"
#include "runtime/fabric_model.h"
#include "runtime/radix_queue.h"
#include "schedule/metrics.h"
#include "schedule/plan.h"
#include "schedule/predictor.h"
#include "schedule/transit_stats.h"

namespace rp::schedule::internal {

class Simulation {
 public:
  // Simulates `ranks` (global ranks: every rank, or when replicas fold every `fold_period`
  // replicas, those of replicas 0 .. fold_period − 1; 0: no folding). EP exchanges are sized by
  // opts.routing, or by balanced routing when it is null (balanced_routing_assumed()).
  Simulation(const ExecutionPlan& plan, const PredictOptions& opts, std::vector<int> ranks,
             int fold_period);
  bool balanced_routing_assumed() const { return routing_ == &balanced_; }
  [[nodiscard]] absl::Status Run();

  // Results, per simulated device (index into `ranks`).
  const std::vector<OpInterval>& intervals(int i) const { return devs_[static_cast<size_t>(i)].intervals; }
  // Moves simulated device i's intervals out (intervals(i) is empty afterwards).
  std::vector<OpInterval> TakeIntervals(int i) { return std::move(devs_[static_cast<size_t>(i)].intervals); }
  Nanos end(int i) const { return devs_[static_cast<size_t>(i)].cursor; }
  uint64_t modeled_bytes(int i) const { return devs_[static_cast<size_t>(i)].modeled_bytes; }
  // The committed messages' transits (the longest: the first of equals).
  const TransitStats& transits() const { return transits_; }

 private:
  struct Arrived {
    MessageTiming timing;
  };
  // A channel's committed, not yet consumed messages, in order: a vector and a read index that
  // rewinds once it is emptied. (A std::deque allocated its map and a 512-byte block per channel,
  // and an EP layout has a channel per ordered pair of EP ranks: 258 048 at 4096 devices, ep 64.)
  struct TimingFifo {
    std::vector<MessageTiming> items;
    size_t head = 0;
    bool empty() const { return head == items.size(); }
    const MessageTiming& front() const { return items[head]; }
    void push_back(const MessageTiming& t) { items.push_back(t); }
    void pop_front() {
      if (++head == items.size()) {
        items.clear();
        head = 0;
      }
    }
  };
  struct Channel {
    TimingFifo committed;
    int waiter = -1;  // LP blocked on it
  };
  // A posted message's key and where its message waits (messages_): 24 bytes an entry of
  // pending_ (rp::RadixQueue: a heap's sift-down over tens of thousands of pending messages, each
  // level a cache miss, was the largest cost of a full play such as a straggler's). Keys are
  // distinct (tie ranks are, and an LP's posts count up).
  struct Pending {
    int64_t time = 0;
    uint64_t tie = 0;
    uint32_t seq = 0;
    uint32_t slot = 0;  // in messages_
  };
  struct PendingTime {
    int64_t operator()(const Pending& p) const { return p.time; }
  };
  struct PendingBefore {
    bool operator()(const Pending& a, const Pending& b) const {
      if (a.time != b.time) return a.time < b.time;
      if (a.tie != b.tie) return a.tie < b.tie;
      return a.seq < b.seq;
    }
  };
  struct PendingMessage {
    FabricMessage msg;
    int channel = 0;
    int ingress_device = -1;  // folding: the stand-in ingress (-1: msg.dst's)
  };
  struct Bucket {
    int order = 0, chunk = 0, index = 0;
    Nanos ready{0};
  };
  struct BucketDone {
    Nanos start{0}, end{0}, transfer{0}, reduce{0};
    std::vector<WaitSpan> spans;
    bool done = false;
  };
  // An EP all-to-all in progress on a compute LP: the counts round, then the blocks round
  // (predictor_ep.cc).
  struct EpExchangeSim {
    std::vector<int> group;  // the EP group's global ranks, by EP rank
    int index = 0;           // this rank's EP rank
    int bins = 1;            // count entries per peer
    int round = 0;           // 0 counts, 1 blocks
    std::vector<std::vector<uint64_t>> block_bytes;  // blocks round: per step, message bytes
    std::vector<int> block_messages;                 // blocks round: per step, receives
    std::optional<comm::a2a::PairwiseTimer> timer;
    Nanos start{0};
    Nanos transfer{0}, peer{0};
  };
  // One ring collective in progress on an LP.
  struct Ring {
    comm::ring::RingTimer timer;
    int send_channel = 0, recv_channel = 0;
    int src_device = 0, dst_device = 0, ingress_device = -1;
    Nanos start{0};
  };
  struct Device {
    int rank = 0;
    Coord coord;
    // Compute stream.
    size_t pc = 0;
    Nanos cursor{0};
    int compute_ops = 0;
    bool in_pass = false;
    struct Part {
      int pass = 0, chunk = 0;
      int32_t detail = -1;
      std::vector<Nanos> durations;
      int micro_batch = 0;
    };
    std::vector<Part> parts;  // the current compute op's passes (an F&B has two)
    size_t part_index = 0;
    size_t step_index = 0;
    Nanos segment_start{0};
    int tp_calls = 0;
    std::optional<Ring> tp_ring;
    int ep_calls = 0;
    std::optional<EpExchangeSim> ep;
    // The EP channels to and from each rank of its EP group, by EP rank (looked up once: a
    // ChannelFor per message was a fifth of an EP layout's prediction).
    std::vector<int> ep_to, ep_from;
    std::map<std::pair<int, int>, Nanos> act_ready, grad_ready;  // (mb, model stage)
    std::vector<bool> final, launched;  // per bucket order (runner.h's final_, launched_)
    size_t next_launch = 0;
    bool at_optimizer = false;
    bool finished = false;
    // Comm stream.
    std::deque<Bucket> queue;
    std::optional<Ring> dp_ring;
    Bucket current;
    Nanos comm_prev_end{0};
    std::vector<BucketDone> buckets;
    // Results.
    std::vector<OpInterval> intervals;
    uint64_t modeled_bytes = 0;
  };

  int LpOf(int dev, int stream) const { return 2 * dev + stream; }
  double FactorOf(const Device& d, int compute_op) const;
  void MakeRunnable(int lp);
  void Post(int lp, int channel, const FabricMessage& m, int ingress_device);
  void PostRing(int lp, Ring& ring, const comm::ring::RingTimer::Post& p);
  // Receives what has arrived for `ring`; false if it must wait (the LP is then blocked).
  bool PumpRing(int lp, Ring& ring);
  absl::Status AdvanceCompute(int dev);
  absl::Status AdvanceComm(int dev);
  // Compute-op pass: BeginPass starts it; StepPass runs it, false if blocked on a TP ring receive.
  void BeginPass(Device& d, const Op& op);
  bool StepPass(int dev, const Op& op);
  void StartTpRing(int dev, const Device::Part& part, const ChunkPlan& chunk);
  void LaunchBucket(int dev, int chunk, int bucket, Nanos ready);
  void StartBucket(int dev, int order, Nanos ready);
  // The EP all-to-all at step `s` of the current part (predictor_ep.cc): false while it waits.
  bool EpStep(int dev, const Device::Part& part, const PassStep& s);
  void BeginEpRound(int dev);
  void PostEp(int lp, const Device& d, const comm::a2a::PairwiseTimer::Post& p);
  bool Optimizer(int dev);
  int ChannelFor(int kind, int a, int b);  // kind: 0 act, 1 grad, 2 TP ring, 3 DP ring, 4 EP
  void Record(Device& d, OpInterval iv);

  const ExecutionPlan& plan_;
  const PredictOptions& opts_;
  const StepRouting* routing_;  // the step's (opts_.routing, or balanced_)
  StepRouting balanced_;
  const std::vector<int> ranks_;
  const int fold_period_;  // 0: every replica is simulated
  FabricModel fabric_;
  std::vector<Device> devs_;
  std::vector<int> dev_of_rank_;  // global rank → simulated index, -1 if not simulated
  std::vector<uint32_t> lp_seq_;  // posts per LP in a step
  std::vector<Channel> channels_;
  // (kind, src rank, dst rank) packed into 64 bits → index in channels_ (ChannelFor).
  absl::flat_hash_map<uint64_t, int> channel_ids_;
  RadixQueue<Pending, PendingTime, PendingBefore> pending_;
  std::vector<PendingMessage> messages_;  // by Pending::slot; free slots in free_slots_
  std::vector<uint32_t> free_slots_;
  std::vector<int> runnable_;
  std::vector<bool> queued_;
  TransitStats transits_;
};

}  // namespace rp::schedule::internal
