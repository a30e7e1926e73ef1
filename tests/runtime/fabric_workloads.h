// Workloads of rp::Fabric's tests (fabric_test.cc): scripted LPs (compute, post, await) over random
// channels, and three ways to run one — a single-threaded reference committing in key order (or a
// per-port order), threads, and a mix of threads and event-driven LPs — each giving every message's
// timing.
#pragma once

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

namespace rp::fabric_testing {

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
inline LinkSpec TestLinks(int devices_per_node) {
  LinkSpec spec;
  spec.intra_node = {.alpha = Nanos(700), .bandwidth_gbps = 50, .overhead = Nanos(300)};
  spec.inter_node = {.alpha = Nanos(3000), .bandwidth_gbps = 5, .overhead = Nanos(900)};
  spec.devices_per_node = devices_per_node;
  spec.nics_per_node = 1;
  return spec;
}

inline Workload RandomWorkload(uint64_t seed, int lps, int rounds) {
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
inline Workload RandomEventWorkload(uint64_t seed, int lps, int events) {
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

inline FabricMessage MessageOf(const Workload& w, const Op& op, Nanos ready) {
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
inline Timings Reference(const Workload& w, PortRule* port_rule = nullptr) {
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
inline Timings Threaded(const Workload& w, uint64_t seed, bool advance_after_compute) {
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
inline Timings Mixed(const Workload& w, uint64_t seed, const std::vector<bool>& event) {
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

}  // namespace rp::fabric_testing
