// rp::schedule::internal::TransitStats: what the predictor's committed messages say about how long
// a receiver may wait for one (Prediction::longest_transit, transit_bound). Fed every committed
// message in commit order by the simulation (predictor_sim.cc).
//
// Thread safety: plain data, one thread.
#pragma once

#include <algorithm>
#include <vector>

#include "runtime/fabric_model.h"
#include "runtime/time.h"

namespace rp::schedule::internal {

class TransitStats {
 public:
  void Add(const FabricMessage& m, const MessageTiming& t) {
    for (int port : {t.egress_port, t.ingress_port}) {
      if (port < 0) continue;
      if (port_busy_.size() <= static_cast<size_t>(port)) port_busy_.resize(static_cast<size_t>(port) + 1, Nanos(0));
      port_busy_[static_cast<size_t>(port)] += t.last_byte - t.start;
    }
    longest_service_ = std::max(longest_service_, t.arrival - t.start);
    if (t.arrival - t.ready > longest_transit_) {
      longest_transit_ = t.arrival - t.ready;
      longest_message_ = m;
    }
  }
  // The message with the longest arrival − ready (devices -1 without messages), and that time.
  const FabricMessage& longest_message() const { return longest_message_; }
  Nanos longest_transit() const { return longest_transit_; }
  // Prediction::transit_bound: the busiest port's time serving messages (FIFO, one at a time: no
  // message waits for its ports longer) plus the longest service (first byte to arrival).
  Nanos transit_bound() const {
    const Nanos busiest = port_busy_.empty() ? Nanos(0) : *std::max_element(port_busy_.begin(), port_busy_.end());
    return busiest + longest_service_;
  }

 private:
  FabricMessage longest_message_{.src = -1, .dst = -1};
  Nanos longest_transit_{0};
  std::vector<Nanos> port_busy_;  // per fabric port: Σ of its messages' last byte − start
  Nanos longest_service_{0};      // max arrival − start
};

}  // namespace rp::schedule::internal
