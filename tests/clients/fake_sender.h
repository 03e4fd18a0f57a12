// A transport for the load shapes' tests: senders that answer OK after `service_time`, and
// remember what they were asked and on which sender and thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cube3d/clients/request_sender.h"

namespace cube3d::testing {

struct SentRequest {
  int sender = 0;  // which sender (0, 1, ... in the order they were made)
  std::thread::id thread;
  std::string prompt;
  uint64_t seed = 0;
};

class FakeSenderFactory final : public SenderFactory {
 public:
  explicit FakeSenderFactory(std::chrono::milliseconds service_time = {})
      : service_time_(service_time) {}

  std::unique_ptr<RequestSender> make_sender() const override {
    return std::make_unique<Sender>(*this, made_.fetch_add(1));
  }

  int made() const { return made_.load(); }
  std::vector<SentRequest> sent() const {
    const std::lock_guard lock(mutex_);
    return sent_;
  }
  int in_flight_peak() const { return peak_.load(); }

 private:
  class Sender final : public RequestSender {
   public:
    Sender(const FakeSenderFactory& factory, int id) : factory_(factory), id_(id) {}
    RequestRecord send(const v1::GenerateMeshRequest& request,
                       SteadyClock::time_point phase_start) override {
      const auto sent = SteadyClock::now();
      const int now = factory_.in_flight_.fetch_add(1) + 1;
      for (int peak = factory_.peak_.load();
           now > peak && !factory_.peak_.compare_exchange_weak(peak, now);) {
      }
      {
        const std::lock_guard lock(factory_.mutex_);
        factory_.sent_.push_back(
            {id_, std::this_thread::get_id(), request.prompt(), request.seed()});
      }
      std::this_thread::sleep_for(factory_.service_time_);
      factory_.in_flight_.fetch_sub(1);
      RequestRecord record;
      record.send_offset_s = ms_between(phase_start, sent) / 1000.0;
      record.status = "OK";
      record.ttft_ms = 0.5;
      record.e2e_ms = ms_since(sent);
      record.queue_ms = 0.0;
      return record;
    }

   private:
    const FakeSenderFactory& factory_;
    const int id_;
  };

  const std::chrono::milliseconds service_time_;
  mutable std::atomic<int> made_{0};
  mutable std::atomic<int> in_flight_{0};
  mutable std::atomic<int> peak_{0};
  mutable std::mutex mutex_;
  mutable std::vector<SentRequest> sent_;
};

}  // namespace cube3d::testing
