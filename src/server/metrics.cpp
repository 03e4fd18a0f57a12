#include "cube3d/server/metrics.h"

#include "cube3d/core/error.h"

namespace cube3d {
namespace {

prometheus::Histogram::BucketBoundaries latency_buckets_ms() {
  return {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000, 120000};
}

}  // namespace

Metrics::Metrics(const std::string& listen, const std::vector<int64_t>& buckets)
    : registry_(std::make_shared<prometheus::Registry>()) {
  requests_ = &prometheus::BuildCounter()
                   .Name("cube3d_requests_total")
                   .Help("GenerateMesh requests by final gRPC status")
                   .Register(*registry_);
  queue_depth_ = &prometheus::BuildGauge()
                      .Name("cube3d_queue_depth")
                      .Help("Requests waiting for a batch")
                      .Register(*registry_)
                      .Add({});
  batch_size_ = &prometheus::BuildHistogram()
                     .Name("cube3d_batch_size")
                     .Help(
                         "Requests per batch (static batching) or per decode step "
                         "(continuous batching), by batch bucket")
                     .Register(*registry_);
  prometheus::Histogram::BucketBoundaries sizes;
  for (int64_t b : buckets) sizes.push_back(static_cast<double>(b));
  for (int64_t b : buckets) {
    batch_size_by_bucket_[b] = &batch_size_->Add({{"bucket", std::to_string(b)}}, sizes);
  }
  ttft_ = &prometheus::BuildHistogram()
               .Name("cube3d_ttft_ms")
               .Help("Time to first shape token (queue + text encoding + prefill), ms")
               .Register(*registry_)
               .Add({}, latency_buckets_ms());
  tpot_ = &prometheus::BuildHistogram()
               .Name("cube3d_tpot_ms")
               .Help("Time per output token after the first, ms")
               .Register(*registry_)
               .Add({}, prometheus::Histogram::BucketBoundaries{0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50,
                                                                100, 200, 500});
  e2e_ = &prometheus::BuildHistogram()
              .Name("cube3d_request_duration_ms")
              .Help("End-to-end request time, ms")
              .Register(*registry_)
              .Add({}, latency_buckets_ms());
  tokens_ = &prometheus::BuildCounter()
                 .Name("cube3d_tokens_generated_total")
                 .Help("Shape tokens generated for requests")
                 .Register(*registry_)
                 .Add({});
  model_load_ = &prometheus::BuildGauge()
                     .Name("cube3d_model_load_seconds")
                     .Help("Time to load and warm up the model")
                     .Register(*registry_)
                     .Add({});
  active_slots_ = &prometheus::BuildGauge()
                       .Name("cube3d_active_slots")
                       .Help(
                           "Requests holding a decode slot at the last step (continuous "
                           "batching)")
                       .Register(*registry_)
                       .Add({});
  admissions_ = &prometheus::BuildCounter()
                     .Name("cube3d_admissions_total")
                     .Help("Requests that joined the running batch (continuous batching)")
                     .Register(*registry_)
                     .Add({});
  prefill_ = &prometheus::BuildHistogram()
                  .Name("cube3d_prefill_duration_seconds")
                  .Help(
                      "Text encoding and prefill of the requests joining at one step, "
                      "during which the running requests wait (continuous batching)")
                  .Register(*registry_)
                  .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.002, 0.005, 0.01, 0.02,
                                                                   0.05, 0.1, 0.2, 0.5, 1, 2, 5});
  if (!listen.empty()) http_ = std::make_unique<MetricsHttpServer>(listen, registry_);
}

void Metrics::request_finished(const std::string& status_code) {
  const std::lock_guard lock(mutex_);
  requests_->Add({{"status", status_code}}).Increment();
}

void Metrics::set_queue_depth(int64_t depth) { queue_depth_->Set(static_cast<double>(depth)); }

void Metrics::batch_started(int64_t bucket, int64_t jobs) {
  const std::lock_guard lock(mutex_);
  const auto it = batch_size_by_bucket_.find(bucket);
  if (it != batch_size_by_bucket_.end()) it->second->Observe(static_cast<double>(jobs));
}

void Metrics::observe_ttft_ms(double ms) { ttft_->Observe(ms); }
void Metrics::observe_tpot_ms(double ms) { tpot_->Observe(ms); }
void Metrics::observe_e2e_ms(double ms) { e2e_->Observe(ms); }
void Metrics::tokens_generated(int64_t tokens) { tokens_->Increment(static_cast<double>(tokens)); }
void Metrics::set_model_load_seconds(double seconds) { model_load_->Set(seconds); }

void Metrics::jobs_admitted(int64_t jobs, double prefill_ms) {
  admissions_->Increment(static_cast<double>(jobs));
  prefill_->Observe(prefill_ms / 1000.0);
}

void Metrics::set_active_slots(int64_t slots) { active_slots_->Set(static_cast<double>(slots)); }

}  // namespace cube3d
