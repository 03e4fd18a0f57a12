// Prometheus metrics, served at /metrics by our MetricsHttpServer (metrics_http.h says why not
// prometheus-cpp's exposer) when an address is set.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cube3d/server/metrics_http.h"

namespace cube3d {

class Metrics {
 public:
  // listen: "host:port", or empty to keep the registry without serving it (tests).
  Metrics(const std::string& listen, const std::vector<int64_t>& buckets);

  void request_finished(const std::string& status_code);
  void set_queue_depth(int64_t depth);
  void batch_started(int64_t bucket, int64_t jobs);
  void observe_ttft_ms(double ms);
  void observe_tpot_ms(double ms);
  void observe_e2e_ms(double ms);
  void tokens_generated(int64_t tokens);
  void set_model_load_seconds(double seconds);
  // Continuous batching: jobs that joined the running batch and their text encoding + prefill
  // time; each decode step (a batch-size observation for its bucket); the active slots.
  void jobs_admitted(int64_t jobs, double prefill_ms);
  void decode_step(int64_t bucket, int64_t slots) { batch_started(bucket, slots); }
  void set_active_slots(int64_t slots);

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<MetricsHttpServer> http_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Gauge* queue_depth_;
  prometheus::Family<prometheus::Histogram>* batch_size_;
  std::map<int64_t, prometheus::Histogram*> batch_size_by_bucket_;
  prometheus::Histogram* ttft_;
  prometheus::Histogram* tpot_;
  prometheus::Histogram* e2e_;
  prometheus::Counter* tokens_;
  prometheus::Gauge* model_load_;
  prometheus::Gauge* active_slots_;
  prometheus::Counter* admissions_;
  prometheus::Histogram* prefill_;
  std::mutex mutex_;  // guards lazily created label children
};

}  // namespace cube3d
