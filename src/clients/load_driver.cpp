#include "cube3d/clients/load_driver.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <utility>

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

SteadyClock::time_point after(SteadyClock::time_point start, double seconds) {
  return start +
         std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

LoadDriver::LoadDriver(const LoadConfig& config, RequestPlan plan,
                       std::shared_ptr<const SenderFactory> senders)
    : open_loop_(config.open_loop),
      rate_rps_(config.rate_rps),
      concurrency_(config.concurrency),
      plan_(std::move(plan)),
      pool_(std::move(senders)) {
  if (plan_.prompts.empty()) throw invalid_argument("a load needs at least one prompt");
  if (!open_loop_ && concurrency_ == 0) {
    throw invalid_argument("a closed loop needs a concurrency of at least 1");
  }
}

PhaseResult LoadDriver::run_phase(uint64_t first, uint64_t max_requests, double max_duration_s,
                                  uint64_t arrival_seed) {
  if (max_requests == 0 && !(max_duration_s > 0)) {
    throw invalid_argument("a load phase needs a request limit or a duration limit");
  }
  PhaseResult result;
  const auto start = SteadyClock::now();
  result.records = open_loop_ ? open_loop(first, max_requests, max_duration_s, arrival_seed, start)
                              : closed_loop(first, max_requests, max_duration_s, start);
  result.wall_s = ms_since(start) / 1000.0;
  return result;
}

std::vector<RequestRecord> LoadDriver::open_loop(uint64_t first, uint64_t max_requests,
                                                 double max_duration_s, uint64_t arrival_seed,
                                                 SteadyClock::time_point start) {
  const std::vector<double> schedule =
      poisson_schedule(rate_rps_, arrival_seed, max_requests, max_duration_s);
  std::vector<RequestRecord> records(schedule.size());
  const auto done = std::make_unique<std::atomic<bool>[]>(schedule.size());  // all false
  {
    // A thread per request: the sender only sleeps until the next arrival, whatever the
    // server does. The jthreads join when the vector goes, also if a later spawn throws.
    std::vector<std::jthread> in_flight;
    in_flight.reserve(schedule.size());
    size_t joined = 0;
    for (size_t i = 0; i < schedule.size(); ++i) {
      std::this_thread::sleep_until(after(start, schedule[i]));
      in_flight.emplace_back([this, &records, &done, i, first, start] {
        const v1::GenerateMeshRequest request = plan_.request(first + i);
        records[i] = pool_.take()->send(request, start);
        records[i].index = i;
        done[i].store(true, std::memory_order_release);
      });
      // Join the finished front of the line as we go: an exited thread keeps its stack
      // mapped until joined, and a long run at a high rate would otherwise pile them up.
      while (joined < in_flight.size() && done[joined].load(std::memory_order_acquire)) {
        in_flight[joined++].join();
      }
    }
  }
  return records;
}

std::vector<RequestRecord> LoadDriver::closed_loop(uint64_t first, uint64_t max_requests,
                                                   double max_duration_s,
                                                   SteadyClock::time_point start) {
  const auto stop_sending = after(start, max_duration_s);
  std::atomic<uint64_t> next{0};
  std::mutex mutex;
  std::vector<RequestRecord> records;
  {
    std::vector<std::jthread> workers;
    for (uint64_t w = 0; w < concurrency_; ++w) {
      workers.emplace_back([&] {
        const SenderPool::Lease sender = pool_.take();  // this worker's, for the whole phase
        for (;;) {
          // The time check comes before taking an index, so the indices stay contiguous.
          if (max_duration_s > 0 && SteadyClock::now() >= stop_sending) return;
          const uint64_t i = next.fetch_add(1);
          if (max_requests > 0 && i >= max_requests) return;
          RequestRecord record = sender->send(plan_.request(first + i), start);
          record.index = i;
          const std::lock_guard lock(mutex);
          records.push_back(std::move(record));
        }
      });
    }
  }
  std::sort(records.begin(), records.end(),
            [](const RequestRecord& a, const RequestRecord& b) { return a.index < b.index; });
  return records;
}

}  // namespace cube3d
