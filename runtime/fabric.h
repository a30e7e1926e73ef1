// rp::Fabric: the emulated network shared by every device thread, and the time engine's only
// synchronization (DESIGN.md "The fabric", "The time engine").
//
// Words.
//   LP        a logical process: a thread that posts messages in modeled time (a device's compute
//             stream, its comm stream). Identified by an LpId in [0, num_lps).
//   channel   a FIFO of messages from one LP to one LP (a p2p pipe, a ring link).
//   bound     an LP's promise: every message it posts from now on is ready at or after `bound`.
//   key       a message's place in modeled time: (ready, tie rank of its LP, the LP's post count).
//             An LP's key is (bound, tie rank, its next post count): a lower bound of its future
//             messages' keys.
//   commit    the fabric decides a message's timing (rp::FabricModel::Commit: ports, contention).
//
// The rule (conservative synchronization). Messages are committed in increasing key order, so
// every port serves its messages in modeled ready-time order whatever order the host threads run
// in: the emulated timeline is deterministic and equals the predictor's, which commits in the same
// order single-threaded. A pending message commits once its key is below the key of every LP that
// could still post: every LP counts except those that provably post nothing before they are given
// a later time by someone who counts —
//   * an LP awaiting a channel whose next message is not committed yet (Await): it resumes at that
//     message's arrival, which the commit hands to it (its bound becomes >= the arrival);
//   * a parked LP (no work: AddWork hands it a bound with its next work item);
//   * an LP awaiting a gate (Signal hands it the signaller's time) or a rendezvous (the last
//     arriver hands everyone the release time);
//   * a finished LP.
// Everything else — computing, sleeping on a real clock, blocked on the host (a full queue, a
// mutex) — counts with its bound. So an LP must never block on the host for something that needs
// another LP's messages committed past its own bound (callers size their queues accordingly; see
// comm/communicator.h), and should Advance its bound as soon as it knows its next post is later
// (before sleeping on a real clock) so receivers are not held back.
// There is no global "everyone blocked" barrier and no polling: an LP is woken only by the commit,
// signal or release it waits for (or by Abort). The interface is narrow on purpose (post, await,
// advance, park, signal, rendezvous) so the same rule can later span processes.
//
// Event-driven LPs. An LP may instead be a state machine that no thread runs (SetHandler): every
// message on a channel it receives is handed to its handler the moment the message commits, in
// commit (key) order, under the fabric's lock, in whichever thread commits it; the handler reacts
// through a Scope (posts as that LP, signals gates). Such an LP never holds back commits: what it
// posts follows from a message it was handed (ready >= that message's arrival, later than every
// key committed so far) or is posted through Run by a running LP whose key precedes it. A comm
// stream run this way costs no thread and no context switch per message (DESIGN.md "The time
// engine"); the commit order, and so the timeline, is the same as with a thread awaiting the
// channel.
//
// Errors. Post fails (InvalidArgument, a caller bug) if a message is ready before its LP's bound,
// and (Internal) if it is ready before a message already committed (a broken conservative rule).
// Waits return Cancelled once Abort was called (a failed run). Waits have no timeout of their
// own: stalls are detected centrally from progress() (rp::FabricMonitor in the executor), which
// sees every LP's wait site (Waits()). A handler that throws aborts the fabric at that commit with
// Internal naming its receiver (the receiving LP's wait site, e.g. "rank 3 in op 'dp all-reduce'
// ...") and the exception; the thread that happened to commit the message returns normally (the
// exception does not leave the fabric through its call).
//
// Thread safety: every method may be called from any thread; one mutex guards the state (posting,
// committing and waking are short critical sections). An LP's own methods (Post, Advance, Await,
// AwaitGate, Arrive, FinishWork) are called by the thread that runs it, one at a time.
//
// Example (two LPs, one channel):
//   RP_ASSIGN_OR_RETURN(auto fabric, Fabric::Create({.links = DgxA100(), .num_devices = 2,
//                                                     .tie_rank = {0, 1}}));
//   ChannelId ch = fabric->AddChannel(/*src=*/0, /*dst=*/1);
//   // thread of LP 0:
//   RP_RETURN_IF_ERROR(fabric->Post(0, ch, {.src = 0, .dst = 1, .bytes = 4096, .ready = t}).status());
//   fabric->Finish(0);
//   // thread of LP 1:
//   RP_ASSIGN_OR_RETURN(Delivery d, fabric->Await(1, ch, {.rank = 1, .op = "recv", .peer = 0}));
//   d.timing.arrival;  // t + o + 4096/β + α
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "absl/functional/function_ref.h"
#include "boost/circular_buffer.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/fabric_model.h"
#include "runtime/mutex.h"
#include "runtime/radix_queue.h"
#include "runtime/time.h"
#include "runtime/watchdog.h"

namespace rp {

using LpId = int32_t;
using ChannelId = int32_t;
using GateId = int32_t;
using RendezvousId = int32_t;

struct FabricOptions {
  LinkSpec links;
  int num_devices = 1;
  std::vector<LinkFault> faults;
  // One entry per LP: its tie-break rank (distinct values; see "key"). The number of LPs.
  std::vector<uint64_t> tie_rank;
  // Optional: called under the fabric's lock for every committed message (e.g. to trace port
  // occupancy). Must be quick and must not call back into the fabric.
  std::function<void(const FabricMessage&, const MessageTiming&)> on_commit = {};
  // Whether a commit fetches the first two lines of a payload it hands to a handler. False when
  // the handlers leave their payloads to another thread (comm/data_lane.h): fetching them here
  // would pull them away from that thread's cache.
  bool prefetch_payload = true;
  // Optional: called under the fabric's lock when a handler throws, with its receiver, the wait
  // site the receiver last named and the status the fabric then aborts with — before the abort
  // releases anyone, so that a caller can attribute the failure to the receiver in commit order
  // (the released threads' own reports arrive in host order). Must not call back into the fabric.
  std::function<void(LpId receiver, const WaitSite& site, const absl::Status& status)>
      on_handler_failure = {};
};

// A message's real data, carried with it from Post to its receiver (e.g. a ring segment's wire
// bytes). Derive from it; the fabric owns it in between and never looks inside.
struct FabricPayload {
  virtual ~FabricPayload() = default;
};

// A message as its receiver gets it.
struct Delivery {
  FabricMessage message;
  MessageTiming timing;
  uint64_t ticket = 0;  // the sender's post count at posting (per LP, from 0)
  std::unique_ptr<FabricPayload> payload;  // as posted (may be null)
};

// What an LP is doing, for stall reports.
struct LpWait {
  enum class State : uint8_t { kRunning, kAwaitChannel, kParked, kAwaitGate, kRendezvous, kDone };
  LpId lp = 0;
  State state = State::kRunning;
  LpId peer = -1;  // kAwaitChannel: the channel's sender
  WaitSite site;   // as given to the wait (kRunning: the last one)
  Nanos bound{0};
};
const char* LpStateName(LpWait::State s);

class Fabric {
 public:
  class Scope;
  // An event-driven LP's reaction to a message on `channel` (see "Event-driven LPs").
  using Handler = std::function<void(Scope&, ChannelId channel, Delivery delivery)>;

  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Fabric>> Create(const FabricOptions& options);
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  int num_lps() const { return static_cast<int>(lps_.size()); }
  const FabricModel& model() const { return model_; }  // read only while nothing posts

  // --- Setup (thread-safe; normally before the LPs start) ---
  ChannelId AddChannel(LpId src, LpId dst);
  GateId AddGate();
  RendezvousId AddRendezvous(int members);
  // An LP that starts parked (e.g. a comm stream with no work yet). Call before it runs.
  void StartParked(LpId lp);
  // Makes `lp` event-driven (see "Event-driven LPs"): parked, never run by a thread, and every
  // message on a channel it receives goes to `handler` at commit. Its posts must come in
  // nondecreasing ready order (its bound is its last post's ready time; a message handed to it
  // does not raise it, since the handler may keep it for later). Before any message is posted.
  // Each channel into `lp` keeps its own copy of `handler` (so a commit reads one line less):
  // state the handler changes belongs outside it (e.g. behind a captured pointer).
  void SetHandler(LpId lp, Handler handler);
  // Hands every message on `channel` to `handler` at commit instead of queueing it for Await —
  // for a thread-run receiver that has handed the channel to a state machine (e.g. a compute
  // stream whose TP all-reduces run as handlers while it awaits their end on a gate). Before any
  // message is posted on the channel.
  void SetChannelHandler(ChannelId channel, Handler handler);
  // Runs fn under the fabric's lock (then commits what became committable), e.g. a compute stream
  // starting its event-driven comm stream's next collective. Posts made through the scope must
  // not precede the calling LP's own key (ready >= its bound, and a later tie rank at equal
  // times), so nothing already committed could have been ordered after them.
  void Run(absl::FunctionRef<void(Scope&)> fn);

  // --- Senders ---
  // Posts `m` from `lp` on `channel` (lp must be the channel's sender; m.ready >= lp's bound).
  // Raises the bound to m.ready. Never blocks. Returns the ticket (lp's post count).
  // `payload` travels with the message to its receiver (Delivery::payload).
  [[nodiscard]] absl::StatusOr<uint64_t> Post(LpId lp, ChannelId channel, const FabricMessage& m,
                                              std::unique_ptr<FabricPayload> payload = nullptr);
  // lp promises that its future posts are ready at or after t (monotone: lower values ignored).
  void Advance(LpId lp, Nanos t);
  // lp posts nothing more until it is given work again (AddWork) — for the end of a run.
  void Finish(LpId lp);

  // --- Receivers ---
  // The next message on `channel` (FIFO), once committed; lp must be its receiver. While it
  // waits, lp does not hold back commits; on return lp's bound is >= the arrival.
  // `timeout` (wall time) bounds the wait: DeadlineExceeded naming `site` (the default, none,
  // leaves stall detection to a monitor of progress()).
  [[nodiscard]] absl::StatusOr<Delivery> Await(
      LpId lp, ChannelId channel, const WaitSite& site,
      std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max());

  // --- Work hand-off (a compute stream feeding its comm stream) ---
  // One more work item for `lp`, ready at `ready`; a parked lp resumes with bound >= ready.
  void AddWork(LpId lp, Nanos ready);
  // lp finished one work item; with none left it parks.
  void FinishWork(LpId lp);

  // --- Gates (one signaller, one waiter, e.g. "bucket done") ---
  // Marks `gate` done at modeled time t and releases its waiter (bound >= t).
  void Signal(GateId gate, Nanos t);
  // Waits until `gate` is signalled; returns its time; lp's bound becomes >= it. Stall reports
  // name `site`, or the gate's own once set (Scope::SetGateSite).
  [[nodiscard]] absl::StatusOr<Nanos> AwaitGate(LpId lp, GateId gate, const WaitSite& site);
  // Makes `gate` reusable (not signalled). Only when nobody waits on it.
  void ResetGate(GateId gate);

  // --- Rendezvous (a group meets; the last arriver decides the release time) ---
  // lp arrives with modeled time t. The last of the `members` arrivers calls on_last(max of the
  // arrivers' t) without the fabric's lock held (every other member waits meanwhile) and its
  // result becomes every member's release time (their bounds are raised to it); an error from
  // on_last is returned to every member. Members call rounds of the same rendezvous in the same
  // order.
  [[nodiscard]] absl::StatusOr<Nanos> Arrive(LpId lp, RendezvousId rv, Nanos t, const WaitSite& site,
                                             absl::FunctionRef<absl::StatusOr<Nanos>(Nanos)> on_last);

  // --- Failure and observation ---
  // Fails every current and future wait with `status` (first call wins).
  void Abort(const absl::Status& status);
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // What every wait fails with once aborted (OK before).
  absl::Status abort_status() const;
  // Counts commits, posts, bound raises, hand-offs: unchanged for long while LPs wait = a stall.
  uint64_t progress() const { return progress_.load(std::memory_order_relaxed); }
  // Every LP's state and wait site (a consistent snapshot).
  std::vector<LpWait> Waits() const;
  // lp's bound (see "bound"): its next post may be ready no earlier.
  Nanos bound(LpId lp) const;
  // Messages posted and not yet committed, and committed in all.
  uint64_t pending() const;
  uint64_t committed() const { return committed_.load(std::memory_order_relaxed); }

 private:
  struct Key {
    int64_t time = 0;
    uint64_t tie = 0;
    uint64_t seq = 0;
    friend bool operator<(const Key& a, const Key& b) {
      if (a.time != b.time) return a.time < b.time;
      if (a.tie != b.tie) return a.tie < b.tie;
      return a.seq < b.seq;
    }
  };
  struct Lp;
  // A posted message until its receiver takes it. Tickets live in fixed blocks (tickets_) and are
  // reused last-freed-first: the post a handler makes reuses the ticket of the message it was just
  // handed, whose lines are still in cache (a ticket per channel slot was a cache miss per post at
  // thousands of channels). One cache line: a commit reads a ticket posted long ago, cold; its
  // timing, needed later only by an Await, is kept beside the block (TicketBlock::timing).
  struct alignas(64) Ticket {
    FabricMessage message;
    uint64_t seq = 0;
    uint64_t index = 0;  // absolute position in its channel
    std::unique_ptr<FabricPayload> payload;
    bool committed = false;
  };
  static_assert(sizeof(Ticket) == 64);
  using TicketId = uint32_t;
  // What every post and commit reads comes first, on one cache line (a channel is cold at a
  // commit at thousands of channels).
  struct alignas(64) Channel {
    // Who takes its messages, resolved at its first post (handlers are set before any message):
    // `handler` (SetChannelHandler's, else a copy of the receiver LP's, resolved at the first
    // post: dispatching then reads no other line) or, when empty, the receiver's Await.
    Handler handler;
    LpId src = 0, dst = 0;
    uint64_t posted = 0;    // tickets posted so far
    uint64_t consumed = 0;  // tickets taken by the receiver so far
    bool resolved = false;
    // Awaited channels only: posted, not yet consumed; front = next. A ring that keeps its room
    // (a std::deque would allocate and free a block every few messages); grown by PostLocked.
    boost::circular_buffer<TicketId> queue;
  };
  // Pending messages in key order (rp::RadixQueue): a 4-ary heap's sift-down, each level a cold
  // line at thousands of LPs, was the commit loop's largest cost at 4096 devices. Times are never
  // negative, as the queue needs: bounds start at 0 and a post before its LP's bound is refused.
  struct Pending {
    Key key;
    TicketId ticket = 0;
    ChannelId channel = 0;
  };
  struct PendingTime {
    int64_t operator()(const Pending& p) const { return p.key.time; }
  };
  struct PendingBefore {
    bool operator()(const Pending& a, const Pending& b) const { return a.key < b.key; }
  };
  struct Gate {
    bool signalled = false;
    bool has_site = false;  // Scope::SetGateSite was called since the last reset
    Nanos time{0};
    LpId waiter = -1;
    WaitSite site;
  };
  struct Rendezvous {
    int members = 0;
    int arrived = 0;
    Nanos max{0};
    uint64_t generation = 0;
    absl::Status status;
    Nanos release{0};
    std::vector<LpId> waiting;
  };

  class Unlocker;
  explicit Fabric(const FabricOptions& options, FabricModel model);
  // Unlocks, then wakes the LPs resumed meanwhile (wake_): a woken thread does not find the lock
  // still held by its waker.
  void UnlockAndWake() ABSL_UNLOCK_FUNCTION(mu_);
  void SetState(LpId lp, LpWait::State s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Resume(LpId lp, Nanos at_least) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RaiseBound(LpId lp, Nanos t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateTree(LpId lp) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CommitReady() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Internal "<receiver's wait site>: exception in the handler of a message on channel C from
  // device D: <what>" (the receiver named by its LP id while it has no site).
  absl::Status HandlerFailure(LpId receiver, ChannelId channel, int src_device, const char* what) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells FabricOptions::on_handler_failure, then aborts with `failure`.
  void AbortOnHandlerFailure(const absl::Status& failure, LpId receiver) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<uint64_t> PostLocked(LpId lp, ChannelId channel, const FabricMessage& m,
                                      std::unique_ptr<FabricPayload> payload)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SignalLocked(GateId gate, Nanos t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Key LpKey(LpId lp) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Ticket& TicketAt(TicketId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return tickets_[id >> kTicketShift]->ticket[id & (kTicketBlock - 1)];
  }
  // The timing of an awaited channel's committed ticket (written at commit, read by Await).
  MessageTiming& TimingAt(TicketId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return tickets_[id >> kTicketShift]->timing[id & (kTicketBlock - 1)];
  }
  TicketId NewTicket() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counters written only under mu_ (read anywhere): a plain store, not a locked read-modify-write.
  static void Bump(std::atomic<uint64_t>& counter) {
    counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  absl::Status WaitWhile(LpId lp, const std::function<bool()>& blocked,
                         std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max())
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const FabricOptions options_;
  mutable Mutex mu_{MutexWait::kSpinThenSleep};
  FabricModel model_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Lp>> lps_;  // fixed after Create; fields guarded by mu_
  // A deque: channels are added while LPs wait on others (references must stay valid).
  std::deque<Channel> channels_ ABSL_GUARDED_BY(mu_);
  std::vector<Gate> gates_ ABSL_GUARDED_BY(mu_);
  std::vector<Rendezvous> rendezvous_ ABSL_GUARDED_BY(mu_);
  RadixQueue<Pending, PendingTime, PendingBefore> pending_ ABSL_GUARDED_BY(mu_);
  // Ticket storage: blocks of kTicketBlock (addresses stay put), free ids reused LIFO.
  static constexpr uint32_t kTicketShift = 9, kTicketBlock = 1u << kTicketShift;
  struct TicketBlock {
    Ticket ticket[kTicketBlock];
    MessageTiming timing[kTicketBlock];
  };
  std::vector<std::unique_ptr<TicketBlock>> tickets_ ABSL_GUARDED_BY(mu_);
  std::vector<TicketId> free_tickets_ ABSL_GUARDED_BY(mu_);
  Key last_committed_ ABSL_GUARDED_BY(mu_){-1, 0, 0};  // the key of the latest commit
  std::vector<Handler> handlers_ ABSL_GUARDED_BY(mu_);  // per LP; empty = run by a thread
  std::vector<Lp*> wake_ ABSL_GUARDED_BY(mu_);  // resumed, to be signalled after unlocking
  // Min-tree over the LPs' keys (an excluded LP holds the maximal key): tree_[1] is the minimum.
  size_t leaves_ = 1;
  std::vector<Key> tree_ ABSL_GUARDED_BY(mu_);
  absl::Status abort_status_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> aborted_{false};
  std::atomic<uint64_t> progress_{0};
  std::atomic<uint64_t> committed_{0};
};

// What an event-driven LP's handler (and Fabric::Run's function) may do, under the fabric's lock.
// Valid only during the call it is passed to.
class Fabric::Scope {
 public:
  // Post as `lp` (see Fabric::Post).
  [[nodiscard]] absl::StatusOr<uint64_t> Post(LpId lp, ChannelId channel, const FabricMessage& m,
                                              std::unique_ptr<FabricPayload> payload = nullptr);
  // See Fabric::Signal.
  void Signal(GateId gate, Nanos t);
  // See Fabric::Abort.
  void Abort(const absl::Status& status);
  bool aborted() const { return fabric_.aborted(); }
  // For stall reports (Waits): event-driven `lp` now waits for the next message on `channel`
  // (from its sender) at `site`, or is idle.
  void Awaiting(LpId lp, ChannelId channel, const WaitSite& site);
  void Idle(LpId lp);
  // For stall reports: whoever awaits `gate` (now or later, until ResetGate) waits at `site` —
  // e.g. handlers that run a thread's collective name the peer it awaits as they go.
  void SetGateSite(GateId gate, const WaitSite& site);

 private:
  friend class Fabric;
  explicit Scope(Fabric& fabric) : fabric_(fabric) {}
  Fabric& fabric_;
};

}  // namespace rp
