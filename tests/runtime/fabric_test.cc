// rp::Fabric: threads posting and awaiting in any host interleaving get exactly the timings of a
// single-threaded reference that commits messages in key order (the determinism the emulator and
// the predictor rely on); parking, gates, rendezvous and abort.
#include "runtime/fabric.h"

#include <algorithm>
#include <deque>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <map>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace rp {
namespace {

// A scripted LP: compute for a while, post, await.
struct Op {
  enum Kind { kCompute, kSend, kRecv } kind;
  Nanos duration{0};  // kCompute
  int channel = -1;   // kSend / kRecv
  uint64_t bytes = 0;
};
struct Workload {
  LinkSpec spec;
  int num_devices = 0;
  std::vector<int> device_of;  // per LP
  std::vector<uint64_t> tie;   // per LP
  std::vector<std::pair<int, int>> channels;  // (src LP, dst LP)
  std::vector<std::vector<Op>> scripts;       // per LP
};

// Rounds: every LP computes, sends its messages of the round, then receives the round's messages
// addressed to it (in a shuffled order) — deadlock-free by construction.
// Links of the random workloads: α + o > 0 on both classes, one NIC shared per node (contention).
LinkSpec TestLinks(int devices_per_node) {
  LinkSpec spec;
  spec.intra_node = {.alpha = Nanos(700), .bandwidth_gbps = 50, .overhead = Nanos(300)};
  spec.inter_node = {.alpha = Nanos(3000), .bandwidth_gbps = 5, .overhead = Nanos(900)};
  spec.devices_per_node = devices_per_node;
  spec.nics_per_node = 1;
  return spec;
}

Workload RandomWorkload(uint64_t seed, int lps, int rounds) {
  std::mt19937_64 rng(seed);
  Workload w;
  w.spec = TestLinks(4);
  w.num_devices = lps;
  for (int i = 0; i < lps; ++i) w.device_of.push_back(i);
  for (int i = 0; i < lps; ++i) w.tie.push_back(static_cast<uint64_t>(i));
  std::shuffle(w.tie.begin(), w.tie.end(), rng);
  std::map<std::pair<int, int>, int> channel_of;
  w.scripts.assign(static_cast<size_t>(lps), {});
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::vector<int>> incoming(static_cast<size_t>(lps));
    for (int a = 0; a < lps; ++a) {
      auto& s = w.scripts[static_cast<size_t>(a)];
      s.push_back({Op::kCompute, Nanos(static_cast<int64_t>(rng() % 20000)), -1, 0});
      for (int b = 0; b < lps; ++b) {
        if (a == b || rng() % 3 != 0) continue;
        auto [it, inserted] = channel_of.emplace(std::make_pair(a, b), static_cast<int>(w.channels.size()));
        if (inserted) w.channels.push_back({a, b});
        s.push_back({Op::kSend, Nanos(0), it->second, 1000 * (rng() % 200)});
        incoming[static_cast<size_t>(b)].push_back(it->second);
        if (rng() % 4 == 0) s.push_back({Op::kCompute, Nanos(static_cast<int64_t>(rng() % 3000)), -1, 0});
      }
    }
    for (int b = 0; b < lps; ++b) {
      auto& in = incoming[static_cast<size_t>(b)];
      std::shuffle(in.begin(), in.end(), rng);
      for (int ch : in) w.scripts[static_cast<size_t>(b)].push_back({Op::kRecv, Nanos(0), ch, 0});
    }
  }
  return w;
}

// Two LPs per device (as a device's compute and comm streams share its ports), two devices per node,
// one NIC per node. Events in one global order: each picks a channel between LPs of different
// devices and appends its send to the sender's script and its receive to the receiver's, with
// compute in between. So LPs wait in different phases, on messages whose senders themselves wait;
// none waits for ever (the blocked receive of least event has its send before any later receive).
Workload RandomEventWorkload(uint64_t seed, int lps, int events) {
  std::mt19937_64 rng(seed);
  Workload w;
  w.spec = TestLinks(2);
  w.num_devices = (lps + 1) / 2;
  for (int i = 0; i < lps; ++i) w.device_of.push_back(i / 2);
  for (int i = 0; i < lps; ++i) w.tie.push_back(static_cast<uint64_t>(i));
  std::shuffle(w.tie.begin(), w.tie.end(), rng);
  std::map<std::pair<int, int>, int> channel_of;
  w.scripts.assign(static_cast<size_t>(lps), {});
  for (int e = 0; e < events; ++e) {
    int a = 0, b = 0;
    do {
      a = static_cast<int>(rng() % static_cast<uint64_t>(lps));
      b = static_cast<int>(rng() % static_cast<uint64_t>(lps));
    } while (a / 2 == b / 2);
    auto [it, inserted] = channel_of.emplace(std::make_pair(a, b), static_cast<int>(w.channels.size()));
    if (inserted) w.channels.push_back({a, b});
    auto& sa = w.scripts[static_cast<size_t>(a)];
    if (rng() % 2 == 0) sa.push_back({Op::kCompute, Nanos(static_cast<int64_t>(rng() % 8000)), -1, 0});
    sa.push_back({Op::kSend, Nanos(0), it->second, 1000 * (rng() % 100)});
    w.scripts[static_cast<size_t>(b)].push_back({Op::kRecv, Nanos(0), it->second, 0});
  }
  return w;
}

// Per (LP, op index) of every receive: the message's timing.
using Timings = std::map<std::pair<int, int>, std::tuple<int64_t, int64_t, int64_t>>;

FabricMessage MessageOf(const Workload& w, const Op& op, Nanos ready) {
  const auto& [src, dst] = w.channels[static_cast<size_t>(op.channel)];
  return {.src = w.device_of[static_cast<size_t>(src)], .dst = w.device_of[static_cast<size_t>(dst)],
          .bytes = op.bytes, .ready = ready};
}

// A per-port commit rule for the reference (docs/fabric.md "What is known towards the proof", (E)):
// instead of the pending message of least key, commit any pending message M, picked at random, that
//   * has the least key of the pending messages on each of its two ports, and
//   * (check_bounds) no LP can still post onto those ports a message of smaller key: an LP's future
//     posts have keys >= (its lower bound, its tie, its next post count), where a finished LP has
//     none and an LP blocked on a receive resumes no earlier than that message's arrival — at least
//     its ready time (pending) or its sender's lower bound (not yet posted), plus the link's α + o.
// With check_bounds false it is the broken rule of the negative control (port order alone).
struct PortRule {
  std::mt19937_64 rng;
  bool check_bounds = true;
  int early = 0;  // commits that were not the least pending key
};

// The single-threaded reference: run every LP until it blocks, then commit the pending message of
// least key (ready, tie, LP's post count), or the one `port_rule` picks; repeat.
Timings Reference(const Workload& w, PortRule* port_rule = nullptr) {
  auto model = FabricModel::Create(w.spec, w.num_devices);
  EXPECT_TRUE(model.ok());
  const size_t n = w.scripts.size();
  std::vector<size_t> pc(n, 0);
  std::vector<Nanos> cursor(n, Nanos(0));
  std::vector<uint64_t> seq(n, 0);
  struct Msg {
    std::tuple<int64_t, uint64_t, uint64_t> key;
    int channel;
    FabricMessage m;
  };
  std::vector<Msg> pending;
  // For the per-port rule: each channel's two ports and α + o (the least arrival − ready on it),
  // and the ports each LP posts onto.
  struct ChannelPorts {
    int egress = -1, ingress = -1;
    int64_t lookahead = 0;
  };
  std::vector<ChannelPorts> ports;
  std::vector<std::set<int>> posts_on(n);
  for (const auto& [src, dst] : w.channels) {
    const int a = w.device_of[static_cast<size_t>(src)], b = w.device_of[static_cast<size_t>(dst)];
    const MessageTiming t = model->Uncontended({.src = a, .dst = b});
    const LinkParams p = w.spec.ParamsOf(a, b);
    ports.push_back({t.egress_port, t.ingress_port, (p.overhead + p.alpha).count()});
    posts_on[static_cast<size_t>(src)].insert({t.egress_port, t.ingress_port});
  }
  constexpr int64_t kUnknown = std::numeric_limits<int64_t>::min();
  constexpr int64_t kVisiting = kUnknown + 1;
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<MessageTiming>> committed(w.channels.size());
  std::vector<size_t> consumed(w.channels.size(), 0);
  Timings out;
  while (true) {
    bool moved = true;
    while (moved) {
      moved = false;
      for (size_t l = 0; l < n; ++l) {
        while (pc[l] < w.scripts[l].size()) {
          const Op& op = w.scripts[l][pc[l]];
          if (op.kind == Op::kCompute) {
            cursor[l] += op.duration;
          } else if (op.kind == Op::kSend) {
            pending.push_back({{cursor[l].count(), w.tie[l], seq[l]++}, op.channel,
                               MessageOf(w, op, cursor[l])});
          } else {
            auto& c = committed[static_cast<size_t>(op.channel)];
            size_t& k = consumed[static_cast<size_t>(op.channel)];
            if (k >= c.size()) break;
            const MessageTiming t = c[k++];
            cursor[l] = std::max(cursor[l], t.arrival);
            out[{static_cast<int>(l), static_cast<int>(pc[l])}] = {t.start.count(),
                                                                   t.last_byte.count(),
                                                                   t.arrival.count()};
          }
          ++pc[l];
          moved = true;
        }
      }
    }
    if (pending.empty()) break;
    auto it = std::min_element(pending.begin(), pending.end(),
                               [](const Msg& a, const Msg& b) { return a.key < b.key; });
    if (port_rule != nullptr) {
      // Every LP is blocked on a receive or finished here.
      std::vector<int64_t> bound(n, kUnknown);
      std::function<int64_t(size_t)> lower = [&](size_t l) -> int64_t {
        if (bound[l] == kVisiting) return cursor[l].count();  // (acyclic; the raw bound is sound)
        if (bound[l] != kUnknown) return bound[l];
        if (pc[l] >= w.scripts[l].size()) return bound[l] = kNever;
        bound[l] = kVisiting;
        const int c = w.scripts[l][pc[l]].channel;
        const auto first = std::min_element(pending.begin(), pending.end(), [&](const Msg& a, const Msg& b) {
          return (a.channel == c) != (b.channel == c) ? a.channel == c : a.key < b.key;
        });
        const int64_t from =
            first->channel == c ? std::get<0>(first->key)
                                : lower(static_cast<size_t>(w.channels[static_cast<size_t>(c)].first));
        const int64_t at = from == kNever ? kNever : from + ports[static_cast<size_t>(c)].lookahead;
        return bound[l] = std::max(cursor[l].count(), at);
      };
      std::vector<std::vector<Msg>::iterator> candidates;
      for (auto m = pending.begin(); m != pending.end(); ++m) {
        const ChannelPorts& mp = ports[static_cast<size_t>(m->channel)];
        bool ok = true;
        for (int port : {mp.egress, mp.ingress}) {
          for (const Msg& o : pending) {
            const ChannelPorts& op = ports[static_cast<size_t>(o.channel)];
            ok = ok && !((op.egress == port || op.ingress == port) && o.key < m->key);
          }
          for (size_t x = 0; x < n && port_rule->check_bounds; ++x) {
            if (!posts_on[x].contains(port)) continue;
            const int64_t b = lower(x);
            ok = ok && (b == kNever || m->key < std::make_tuple(b, w.tie[x], seq[x]));
          }
        }
        if (ok) candidates.push_back(m);
      }
      if (candidates.empty()) {
        ADD_FAILURE() << "the per-port rule found nothing to commit";
      } else {
        auto pick = candidates[port_rule->rng() % candidates.size()];
        port_rule->early += pick != it;
        it = pick;
      }
    }
    committed[static_cast<size_t>(it->channel)].push_back(model->Commit(it->m));
    pending.erase(it);
  }
  for (size_t l = 0; l < n; ++l) EXPECT_EQ(pc[l], w.scripts[l].size()) << "reference stalled";
  return out;
}

// The threaded run: one thread per LP; random host-level yields vary the interleaving.
Timings Threaded(const Workload& w, uint64_t seed, bool advance_after_compute) {
  auto fabric = Fabric::Create({.links = w.spec, .num_devices = w.num_devices, .tie_rank = w.tie});
  EXPECT_TRUE(fabric.ok()) << fabric.status();
  std::vector<ChannelId> ids;
  for (const auto& [a, b] : w.channels) ids.push_back((*fabric)->AddChannel(a, b));
  Mutex mu;
  Timings out;
  std::vector<std::thread> threads;
  for (size_t l = 0; l < w.scripts.size(); ++l) {
    threads.emplace_back([&, l] {
      std::mt19937_64 rng(seed * 1000 + l);
      const LpId lp = static_cast<LpId>(l);
      Nanos cursor(0);
      for (size_t i = 0; i < w.scripts[l].size(); ++i) {
        const Op& op = w.scripts[l][i];
        if (rng() % 3 == 0) std::this_thread::yield();
        if (op.kind == Op::kCompute) {
          cursor += op.duration;
          if (advance_after_compute) (*fabric)->Advance(lp, cursor);
        } else if (op.kind == Op::kSend) {
          auto t = (*fabric)->Post(lp, ids[static_cast<size_t>(op.channel)], MessageOf(w, op, cursor));
          ASSERT_TRUE(t.ok()) << t.status();
        } else {
          auto d = (*fabric)->Await(lp, ids[static_cast<size_t>(op.channel)],
                                    {.rank = static_cast<int>(l), .op = "recv"});
          ASSERT_TRUE(d.ok()) << d.status();
          cursor = std::max(cursor, d->timing.arrival);
          MutexLock lock(&mu);
          out[{static_cast<int>(l), static_cast<int>(i)}] = {d->timing.start.count(),
                                                             d->timing.last_byte.count(),
                                                             d->timing.arrival.count()};
        }
      }
      (*fabric)->Finish(lp);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ((*fabric)->pending(), 0u);
  return out;
}

// The same scripts with the LPs in `event` run as event-driven state machines (Fabric::SetHandler):
// each runs its script as far as it can at the start (one Fabric::Run for all) and then in its
// handler whenever a message commits; the others are threads as above.
Timings Mixed(const Workload& w, uint64_t seed, const std::vector<bool>& event) {
  auto fabric = Fabric::Create({.links = w.spec, .num_devices = w.num_devices, .tie_rank = w.tie});
  EXPECT_TRUE(fabric.ok()) << fabric.status();
  Fabric& f = **fabric;
  std::vector<ChannelId> ids;
  for (const auto& [a, b] : w.channels) ids.push_back(f.AddChannel(a, b));
  Mutex mu;
  Timings out;
  struct Machine {
    size_t pc = 0;
    Nanos cursor{0};
    std::map<ChannelId, std::deque<Delivery>> inbox;
  };
  std::vector<Machine> machines(w.scripts.size());
  auto pump = [&](Fabric::Scope& scope, size_t l) {
    Machine& m = machines[l];
    while (m.pc < w.scripts[l].size()) {
      const Op& op = w.scripts[l][m.pc];
      if (op.kind == Op::kCompute) {
        m.cursor += op.duration;
      } else if (op.kind == Op::kSend) {
        auto t = scope.Post(static_cast<LpId>(l), ids[static_cast<size_t>(op.channel)],
                            MessageOf(w, op, m.cursor));
        ASSERT_TRUE(t.ok()) << t.status();
      } else {
        auto& box = m.inbox[ids[static_cast<size_t>(op.channel)]];
        if (box.empty()) return;
        const MessageTiming t = box.front().timing;
        box.pop_front();
        m.cursor = std::max(m.cursor, t.arrival);
        MutexLock lock(&mu);
        out[{static_cast<int>(l), static_cast<int>(m.pc)}] = {t.start.count(), t.last_byte.count(),
                                                               t.arrival.count()};
      }
      ++m.pc;
    }
  };
  for (size_t l = 0; l < w.scripts.size(); ++l) {
    if (!event[l]) continue;
    f.SetHandler(static_cast<LpId>(l), [&, l](Fabric::Scope& scope, ChannelId ch, Delivery d) {
      machines[l].inbox[ch].push_back(std::move(d));
      pump(scope, l);
    });
  }
  f.Run([&](Fabric::Scope& scope) {
    for (size_t l = 0; l < w.scripts.size(); ++l) {
      if (event[l]) pump(scope, l);
    }
  });
  std::vector<std::thread> threads;
  for (size_t l = 0; l < w.scripts.size(); ++l) {
    if (event[l]) continue;
    threads.emplace_back([&, l] {
      std::mt19937_64 rng(seed * 1000 + l);
      const LpId lp = static_cast<LpId>(l);
      Nanos cursor(0);
      for (size_t i = 0; i < w.scripts[l].size(); ++i) {
        const Op& op = w.scripts[l][i];
        if (rng() % 3 == 0) std::this_thread::yield();
        if (op.kind == Op::kCompute) {
          cursor += op.duration;
          f.Advance(lp, cursor);
        } else if (op.kind == Op::kSend) {
          auto t = f.Post(lp, ids[static_cast<size_t>(op.channel)], MessageOf(w, op, cursor));
          ASSERT_TRUE(t.ok()) << t.status();
        } else {
          auto d = f.Await(lp, ids[static_cast<size_t>(op.channel)],
                           {.rank = static_cast<int>(l), .op = "recv"});
          ASSERT_TRUE(d.ok()) << d.status();
          cursor = std::max(cursor, d->timing.arrival);
          MutexLock lock(&mu);
          out[{static_cast<int>(l), static_cast<int>(i)}] = {d->timing.start.count(),
                                                             d->timing.last_byte.count(),
                                                             d->timing.arrival.count()};
        }
      }
      f.Finish(lp);
    });
  }
  for (auto& t : threads) t.join();
  for (size_t l = 0; l < w.scripts.size(); ++l) {
    if (event[l]) {
      EXPECT_EQ(machines[l].pc, w.scripts[l].size()) << "event LP " << l << " stalled";
    }
  }
  EXPECT_EQ(f.pending(), 0u);
  return out;
}

TEST(Fabric, EventDrivenLpsGiveTheSameTimingsAsThreads) {
  for (uint64_t seed : {1, 2, 3}) {
    const Workload w = RandomWorkload(seed, /*lps=*/10, /*rounds=*/6);
    const Timings ref = Reference(w);
    for (uint64_t run = 0; run < 3; ++run) {
      std::vector<bool> event(w.scripts.size());
      std::mt19937_64 rng(seed * 77 + run);
      for (size_t l = 0; l < event.size(); ++l) event[l] = run == 2 || rng() % 2 == 0;
      EXPECT_EQ(Mixed(w, run, event), ref) << "seed " << seed << " run " << run;
    }
  }
}

TEST(Fabric, PayloadsTravelWithTheirMessagesAndChannelHandlersTakeThem) {
  struct Text : FabricPayload {
    std::string text;
  };
  auto f = Fabric::Create({.links = {}, .num_devices = 2, .tie_rank = {0, 1}});
  ASSERT_TRUE(f.ok());
  const ChannelId to_thread = (*f)->AddChannel(0, 1);
  const ChannelId to_handler = (*f)->AddChannel(0, 1);
  std::vector<std::string> handled;
  (*f)->SetChannelHandler(to_handler, [&](Fabric::Scope&, ChannelId ch, Delivery d) {
    EXPECT_EQ(ch, to_handler);
    handled.push_back(static_cast<Text&>(*d.payload).text);
  });
  auto text = [](std::string s) {
    auto p = std::make_unique<Text>();
    p->text = std::move(s);
    return p;
  };
  ASSERT_TRUE((*f)->Post(0, to_thread, {.src = 0, .dst = 1, .bytes = 8}, text("a")).ok());
  ASSERT_TRUE((*f)->Post(0, to_handler, {.src = 0, .dst = 1, .bytes = 8}, text("b")).ok());
  ASSERT_TRUE((*f)->Post(0, to_handler, {.src = 0, .dst = 1, .bytes = 8}, text("c")).ok());
  (*f)->Finish(0);
  auto d = (*f)->Await(1, to_thread, {.rank = 1});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(static_cast<Text&>(*d->payload).text, "a");
  EXPECT_EQ(handled, (std::vector<std::string>{"b", "c"}));
}

// Thousands of messages pending at once (more than one block of tickets), on an awaited channel
// and a handler's channel interleaved, then again on reused tickets: every message reaches its
// receiver once, with its own payload, in channel order and key order.
TEST(Fabric, ManyPendingMessagesKeepTheirPayloadsAndOrderAcrossReusedTickets) {
  struct Number : FabricPayload {
    int value = 0;
  };
  // LP 2 (tie 0) runs at bound 0 and holds back every message of LP 0 (tie 1) until it finishes.
  auto f = Fabric::Create({.links = {}, .num_devices = 2, .tie_rank = {1, 2, 0}});
  ASSERT_TRUE(f.ok());
  const ChannelId to_thread = (*f)->AddChannel(0, 1);
  const ChannelId to_handler = (*f)->AddChannel(0, 1);
  std::vector<int> handled;
  (*f)->SetChannelHandler(to_handler, [&](Fabric::Scope&, ChannelId, Delivery d) {
    handled.push_back(static_cast<Number&>(*d.payload).value);
  });
  constexpr int kMessages = 1500;  // per round, over both channels
  int next = 0;
  for (int round = 0; round < 2; ++round) {
    handled.clear();
    const int first = next;
    for (int i = 0; i < kMessages; ++i, ++next) {
      auto p = std::make_unique<Number>();
      p->value = next;
      const ChannelId ch = next % 2 == 0 ? to_thread : to_handler;
      ASSERT_TRUE((*f)->Post(0, ch, {.src = 0, .dst = 1, .bytes = 8, .ready = Nanos(10 * next)},
                             std::move(p))
                      .ok());
    }
    if (round == 0) {
      EXPECT_EQ((*f)->pending(), static_cast<uint64_t>(kMessages));  // all held back by LP 2
      (*f)->Finish(2);
    }
    Nanos last{0};
    for (int v = first; v < next; v += 2) {
      auto d = (*f)->Await(1, to_thread, {.rank = 1});
      ASSERT_TRUE(d.ok()) << d.status();
      EXPECT_EQ(static_cast<Number&>(*d->payload).value, v);
      EXPECT_EQ(d->ticket, static_cast<uint64_t>(v));
      EXPECT_GE(d->timing.arrival, last);
      last = d->timing.arrival;
    }
    (*f)->Advance(1, Nanos(10 * next));  // the receiver, running, no longer holds back the last
    std::vector<int> want;
    for (int v = first + 1; v < next; v += 2) want.push_back(v);
    EXPECT_EQ(handled, want);
    EXPECT_EQ((*f)->pending(), 0u);
  }
  EXPECT_EQ((*f)->committed(), static_cast<uint64_t>(2 * kMessages));
}

TEST(Fabric, APostBeforeACommittedMessageIsABrokenRule) {
  auto f = Fabric::Create({.links = {}, .num_devices = 2, .tie_rank = {0, 1}});
  ASSERT_TRUE(f.ok());
  const ChannelId ch = (*f)->AddChannel(0, 1);
  (*f)->SetHandler(1, [](Fabric::Scope&, ChannelId, Delivery) {});
  ASSERT_TRUE((*f)->Post(0, ch, {.src = 0, .dst = 1, .ready = Nanos(500)}).ok());
  (*f)->Finish(0);  // nothing holds the message back: it commits
  EXPECT_EQ((*f)->committed(), 1u);
  // An event-driven LP posting (through Run) before what was committed breaks the rule.
  const ChannelId back = (*f)->AddChannel(1, 0);
  absl::Status s;
  (*f)->Run([&](Fabric::Scope& scope) {
    s = scope.Post(1, back, {.src = 1, .dst = 0, .ready = Nanos(100)}).status();
  });
  EXPECT_TRUE(absl::IsInternal(s)) << s;
}

TEST(Fabric, ThreadedCommitsEqualTheKeyOrderReferenceInAnyInterleaving) {
  for (uint64_t seed : {1, 2, 3}) {
    const Workload w = RandomWorkload(seed, /*lps=*/10, /*rounds=*/6);
    const Timings ref = Reference(w);
    ASSERT_FALSE(ref.empty());
    for (uint64_t run = 0; run < 4; ++run) {
      EXPECT_EQ(Threaded(w, run, /*advance_after_compute=*/run % 2 == 0), ref)
          << "seed " << seed << " run " << run;
    }
  }
}

// (E) in docs/fabric.md, checked: with α + o > 0 on every link and no self-messages, committing
// each port's messages in key order, a message only once nothing of smaller key can still be posted
// onto its ports, gives every message the global rule's timing, whatever order it picks across
// ports — the equivalence a per-port (or per-group) commit rule in Fabric would rest on.
TEST(Fabric, APerPortCommitOrderGivesTheKeyOrderTimings) {
  int early = 0;
  for (uint64_t seed = 1; seed <= 80; ++seed) {
    const Workload w = seed % 2 == 0 ? RandomWorkload(seed, /*lps=*/8, /*rounds=*/5)
                                     : RandomEventWorkload(seed, /*lps=*/10, /*events=*/150);
    const Timings ref = Reference(w);
    for (uint64_t pick = 0; pick < 3; ++pick) {
      PortRule rule{.rng = std::mt19937_64(seed * 10 + pick)};
      EXPECT_EQ(Reference(w, &rule), ref) << "seed " << seed << " pick " << pick;
      early += rule.early;
    }
  }
  // The rule did reorder: many commits were not the least pending key.
  EXPECT_GT(early, 1000);
}

// The negative control: port order alone (without the lower bounds of LPs that can still post) is
// not enough — some workload then gets different timings, so the comparison above can fail.
TEST(Fabric, PortOrderWithoutLowerBoundsChangesTimings) {
  int differ = 0;
  for (uint64_t seed = 1; seed <= 80; ++seed) {
    const Workload w = seed % 2 == 0 ? RandomWorkload(seed, /*lps=*/8, /*rounds=*/5)
                                     : RandomEventWorkload(seed, /*lps=*/10, /*events=*/150);
    PortRule rule{.rng = std::mt19937_64(seed), .check_bounds = false};
    differ += Reference(w, &rule) != Reference(w);
  }
  EXPECT_GT(differ, 0);
}

TEST(Fabric, ContentionAppearsInTheReference) {
  // A sanity check that the workload exercises queueing (else the test above proves little).
  const Workload w = RandomWorkload(7, 10, 6);
  auto model = FabricModel::Create(w.spec, w.num_devices);
  ASSERT_TRUE(model.ok());
  const Timings ref = Reference(w);
  int queued = 0;
  for (const auto& [where, t] : ref) {
    const Op& op = w.scripts[static_cast<size_t>(where.first)][static_cast<size_t>(where.second)];
    const auto& [src, dst] = w.channels[static_cast<size_t>(op.channel)];
    (void)src;
    (void)dst;
    queued += std::get<2>(t) > std::get<0>(t) && std::get<0>(t) > 0;
  }
  EXPECT_GT(queued, 10);
}

TEST(Fabric, ParkedLpDoesNotHoldBackCommitsUntilGivenWork) {
  LinkSpec spec;
  spec.intra_node = {.alpha = Nanos(10), .bandwidth_gbps = 0, .overhead = Nanos(5)};
  auto f = Fabric::Create({.links = spec, .num_devices = 2, .tie_rank = {0, 1, 2}});
  ASSERT_TRUE(f.ok());
  Fabric& fabric = **f;
  const ChannelId ch = fabric.AddChannel(0, 1);
  fabric.StartParked(2);  // LP 2: a comm stream with no work
  ASSERT_TRUE(fabric.Post(0, ch, {.src = 0, .dst = 1, .bytes = 8, .ready = Nanos(100)}).ok());
  // LP 0 and 1 (running, bound 0) hold the message back: LP 1 has not said it waits.
  EXPECT_EQ(fabric.pending(), 1u);
  auto d = fabric.Await(1, ch, {.rank = 1, .op = "recv"});  // LP 1 excluded; LP 0 bound 100
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->timing.arrival, Nanos(115));
  EXPECT_EQ(fabric.pending(), 0u);
  // LP 2 given work at 50: it now holds commits back from 50.
  fabric.AddWork(2, Nanos(50));
  fabric.Advance(0, Nanos(1000));
  fabric.Advance(1, Nanos(1000));
  ASSERT_TRUE(fabric.Post(0, ch, {.src = 0, .dst = 1, .bytes = 8, .ready = Nanos(1000)}).ok());
  EXPECT_EQ(fabric.pending(), 1u);
  fabric.FinishWork(2);  // parked again
  EXPECT_EQ(fabric.pending(), 0u);
}

TEST(Fabric, GateHandsTheSignallersTimeToItsWaiter) {
  auto f = Fabric::Create({.links = {}, .num_devices = 1, .tie_rank = {0, 1}});
  ASSERT_TRUE(f.ok());
  Fabric& fabric = **f;
  const GateId g = fabric.AddGate();
  std::thread waiter([&] {
    auto t = fabric.AwaitGate(0, g, {.rank = 0, .op = "await comm"});
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(*t, Nanos(4242));
  });
  fabric.Signal(g, Nanos(4242));
  waiter.join();
  auto again = fabric.AwaitGate(0, g, {.rank = 0, .op = "await comm"});  // already signalled
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, Nanos(4242));
}

TEST(Fabric, RendezvousReleasesEveryoneAtTheLastArriversTime) {
  constexpr int kMembers = 6;
  std::vector<uint64_t> tie(kMembers);
  for (int i = 0; i < kMembers; ++i) tie[static_cast<size_t>(i)] = static_cast<uint64_t>(i);
  auto f = Fabric::Create({.links = {}, .num_devices = 1, .tie_rank = tie});
  ASSERT_TRUE(f.ok());
  Fabric& fabric = **f;
  const RendezvousId rv = fabric.AddRendezvous(kMembers);
  std::atomic<int> last_calls{0};
  std::vector<std::thread> threads;
  std::vector<Nanos> released(kMembers);
  for (int round = 0; round < 3; ++round) {
    threads.clear();
    for (int i = 0; i < kMembers; ++i) {
      threads.emplace_back([&, i, round] {
        auto r = fabric.Arrive(i, rv, Nanos(100 * i + round), {.rank = i, .op = "barrier"},
                               [&](Nanos max) -> absl::StatusOr<Nanos> {
                                 ++last_calls;
                                 return max + Nanos(7);
                               });
        ASSERT_TRUE(r.ok());
        released[static_cast<size_t>(i)] = *r;
      });
    }
    for (auto& t : threads) t.join();
    for (Nanos r : released) EXPECT_EQ(r, Nanos(100 * (kMembers - 1) + round + 7));
  }
  EXPECT_EQ(last_calls.load(), 3);
}

TEST(Fabric, AbortReleasesADeadlockAndWaitsNameTheirPeers) {
  auto f = Fabric::Create({.links = {}, .num_devices = 2, .tie_rank = {0, 1}});
  ASSERT_TRUE(f.ok());
  Fabric& fabric = **f;
  const ChannelId ab = fabric.AddChannel(0, 1), ba = fabric.AddChannel(1, 0);
  std::vector<absl::Status> got(2);
  std::thread a([&] { got[0] = fabric.Await(0, ba, {.rank = 0, .op = "recv", .peer = 1}).status(); });
  std::thread b([&] { got[1] = fabric.Await(1, ab, {.rank = 1, .op = "recv", .peer = 0}).status(); });
  // Both end up awaiting each other: no LP running, nothing pending — a true stall.
  while (true) {
    const std::vector<LpWait> w = fabric.Waits();
    if (w[0].state == LpWait::State::kAwaitChannel && w[1].state == LpWait::State::kAwaitChannel) {
      EXPECT_EQ(w[0].peer, 1);
      EXPECT_EQ(w[1].peer, 0);
      break;
    }
    std::this_thread::yield();
  }
  const uint64_t progress = fabric.progress();
  fabric.Abort(absl::DeadlineExceededError("stall"));
  a.join();
  b.join();
  EXPECT_TRUE(absl::IsDeadlineExceeded(got[0])) << got[0];
  EXPECT_TRUE(absl::IsDeadlineExceeded(got[1])) << got[1];
  EXPECT_EQ(fabric.progress(), progress);
}

// Regression: channels made while an LP waits on another (lazily created p2p channels) must not
// move the channel it waits on.
TEST(Fabric, ChannelsAddedWhileAnLpWaitsKeepItsChannel) {
  auto f = Fabric::Create({.links = {}, .num_devices = 2, .tie_rank = {0, 1}});
  ASSERT_TRUE(f.ok());
  Fabric& fabric = **f;
  const ChannelId ch = fabric.AddChannel(0, 1);
  absl::StatusOr<Delivery> got;
  std::thread receiver([&] { got = fabric.Await(1, ch, {.rank = 1, .op = "recv"}); });
  while (fabric.Waits()[1].state != LpWait::State::kAwaitChannel) std::this_thread::yield();
  for (int i = 0; i < 4096; ++i) fabric.AddChannel(0, 1);
  ASSERT_TRUE(fabric.Post(0, ch, {.src = 0, .dst = 1, .bytes = 8, .ready = Nanos(5)}).ok());
  fabric.Finish(0);
  receiver.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->timing.arrival, Nanos(5));
}

TEST(Fabric, PostBeforeTheBoundIsRefused) {
  auto f = Fabric::Create({.links = {}, .num_devices = 2, .tie_rank = {0, 1}});
  ASSERT_TRUE(f.ok());
  const ChannelId ch = (*f)->AddChannel(0, 1);
  (*f)->Advance(0, Nanos(100));
  EXPECT_TRUE(absl::IsInvalidArgument(
      (*f)->Post(0, ch, {.src = 0, .dst = 1, .ready = Nanos(99)}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      (*f)->Post(1, ch, {.src = 0, .dst = 1, .ready = Nanos(200)}).status()));  // not its channel
}

}  // namespace
}  // namespace rp
