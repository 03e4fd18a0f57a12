// cube3d-loadgen's load shapes, over any transport (request_sender.h):
//   open loop (config.open_loop): Poisson arrivals at config.rate_rps (poisson_schedule), each
//     request on its own thread with a sender borrowed from the pool, so that slow answers
//     never delay the next send;
//   closed loop: config.concurrency workers, each with one sender for the whole phase, sending
//     its next request when the previous one finished.
// Senders go back to the pool after each phase, so the warm-up's connections carry on into
// the measured phase.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cube3d/clients/load_report.h"
#include "cube3d/clients/request_plan.h"
#include "cube3d/clients/request_sender.h"
#include "cube3d/clients/sender_pool.h"

namespace cube3d {

struct PhaseResult {
  std::vector<RequestRecord> records;  // in index order; record i is request first + i
  double wall_s = 0;                   // the phase's start -> the last request's final status
};

class LoadDriver {
 public:
  // Reads open_loop, rate_rps and concurrency from `config`.
  LoadDriver(const LoadConfig& config, RequestPlan plan,
             std::shared_ptr<const SenderFactory> senders);

  // Sends request first + i (of the plan) for i = 0, 1, ... until max_requests (0: no limit)
  // or max_duration_s (0: none; at least one bound), then waits for every one of them.
  // arrival_seed: the open loop's schedule.
  PhaseResult run_phase(uint64_t first, uint64_t max_requests, double max_duration_s,
                        uint64_t arrival_seed);

  const SenderPool& pool() const { return pool_; }

 private:
  std::vector<RequestRecord> open_loop(uint64_t first, uint64_t max_requests, double max_duration_s,
                                       uint64_t arrival_seed, SteadyClock::time_point start);
  std::vector<RequestRecord> closed_loop(uint64_t first, uint64_t max_requests,
                                         double max_duration_s, SteadyClock::time_point start);

  const bool open_loop_;
  const double rate_rps_;
  const uint64_t concurrency_;
  const RequestPlan plan_;
  SenderPool pool_;
};

}  // namespace cube3d
