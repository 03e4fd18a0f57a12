#include "cube3d/server/executor/engine_executor.h"

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <utility>

#include "cube3d/core/device_fault.h"
#include "cube3d/core/error.h"
#include "cube3d/mesh/mesh_profile.h"
#include "cube3d/pipeline/provenance.h"

namespace cube3d {
namespace {

bool all_cancelled(const std::vector<std::shared_ptr<Task>>& tasks) {
  return std::all_of(tasks.begin(), tasks.end(),
                     [](const auto& j) { return j->cancelled() || j->finished(); });
}

std::vector<PromptRequest> prompts_of(const std::vector<std::shared_ptr<Task>>& tasks) {
  std::vector<PromptRequest> prompts;
  prompts.reserve(tasks.size());
  for (const auto& task : tasks) {
    const WorkRequest& r = task->payload<WorkRequest>();
    prompts.push_back({r.prompt, r.guidance_scale, r.top_p, r.seed, r.bounding_box});
  }
  return prompts;
}

// The thin check around the engine's device work: on a CUDA device, an exception whose text says
// that the device failed becomes a DeviceFault for `stage` (the rule of core/device_fault.h);
// everything else, and everything on the CPU, passes unchanged (a per-request error).
template <typename Fn>
decltype(auto) device_work(bool on_accelerator, const char* stage, Fn&& fn) {
  try {
    return std::forward<Fn>(fn)();
  } catch (const DeviceFault&) {
    throw;
  } catch (const std::exception& e) {
    if (on_accelerator && is_device_error_text(e.what())) {
      throw DeviceFault(stage, device_error_summary(e.what()));
    }
    throw;
  }
}

WorkMeshBounds bounds_of(const Mesh& mesh) {
  const BoundingBox box = bounding_box(mesh);
  return {{box.min[0], box.min[1], box.min[2]}, {box.max[0], box.max[1], box.max[2]}};
}

// What an injected device fault says (the words of a real one, and that it was injected).
DeviceFault injected_device_fault(const char* stage, const std::string& spec) {
  return DeviceFault(stage, "CUDA error: an illegal memory access was encountered [injected by " +
                                std::string(kFaultInjectionEnv) + " " + spec + "]");
}

}  // namespace

FaultInjection parse_fault_injection(std::string_view spec) {
  FaultInjection faults;
  const auto fail = [](std::string_view part, const std::string& why) {
    return invalid_argument(std::string(kFaultInjectionEnv) + ": '" + std::string(part) + "' " +
                            why +
                            " (expected device_fault_at_step:N, device_fault_at_mesh:N or "
                            "mesh_error_at_request:N, comma-separated, N >= 1)");
  };
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string_view part = spec.substr(start, comma - start);
    start = comma + 1;
    if (part.empty()) continue;
    const size_t colon = part.find(':');
    if (colon == std::string_view::npos) throw fail(part, "has no ':N'");
    const std::string_view name = part.substr(0, colon);
    const std::string_view number = part.substr(colon + 1);
    int64_t* field = name == "device_fault_at_step"    ? &faults.device_fault_at_step
                     : name == "device_fault_at_mesh"  ? &faults.device_fault_at_mesh
                     : name == "mesh_error_at_request" ? &faults.mesh_error_at_request
                                                       : nullptr;
    if (field == nullptr) throw fail(part, "names no fault");
    int64_t value = 0;
    if (number.empty() || number.size() > 12 ||
        !std::all_of(number.begin(), number.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      throw fail(part, "has no whole number after ':'");
    }
    for (const char c : number) value = value * 10 + (c - '0');
    if (value < 1) throw fail(part, "counts from 1");
    *field = value;
  }
  return faults;
}

EngineExecutor::EngineExecutor(Engine& engine, ExecutorOptions options)
    : options_(std::move(options)),
      engine_(engine),
      on_accelerator_(engine.device().is_cuda()),
      pipeline_(engine, options_.shape) {
  const int64_t threads = std::max<int64_t>(1, options_.mesh_threads);
  for (int64_t i = 0; i < threads; ++i) threads_.emplace_back([this] { mesh_worker(); });
}

EngineExecutor::~EngineExecutor() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& t : threads_) t.join();
}

void EngineExecutor::post(std::function<void()> task) {
  {
    const std::lock_guard lock(mutex_);
    tasks_.push_back({std::move(task), SteadyClock::now()});
  }
  changed_.notify_one();
}

void EngineExecutor::mesh_worker() {
  for (;;) {
    MeshTask task;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
      ++busy_;
    }
    if (options_.on_mesh_wait) {
      options_.on_mesh_wait(ms_between(task.posted, SteadyClock::now()) / 1000.0);
    }
    task.run();
    {
      const std::lock_guard lock(mutex_);
      --busy_;
    }
    changed_.notify_all();
  }
}

bool EngineExecutor::wait_idle(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return tasks_.empty() && busy_ == 0; });
}

void EngineExecutor::execute(const std::vector<std::shared_ptr<Task>>& tasks, int64_t bucket) {
  const auto batch_start = SteadyClock::now();
  for (const auto& task : tasks) task->progress({TaskStage::kTextEncoding});
  const std::vector<PromptRequest> prompts = prompts_of(tasks);
  const int64_t total = pipeline_.engine().tokens_per_shape();
  GenerationOptions options;
  options.single_stream_decode = options_.single_stream_decode;
  options.bucket = bucket;
  options.progress_interval = options_.progress_interval_tokens;
  options.on_progress = [&](int64_t done) {
    for (const auto& task : tasks) task->progress({TaskStage::kDecoding, done, total});
    return !all_cancelled(tasks);
  };
  ++steps_;
  if (steps_ == options_.faults.device_fault_at_step) {
    throw injected_device_fault("decoding", "device_fault_at_step:" + std::to_string(steps_));
  }
  const TokenBatch tokens = device_work(
      on_accelerator_, "decoding", [&] { return pipeline_.generate_tokens(prompts, options); });
  const GenerationResult& generated = tokens.generation;
  if (generated.stopped) {
    for (const auto& task : tasks) task->fail(cancelled("request cancelled during decoding"));
    return;
  }
  if (options_.on_generated) {
    options_.on_generated(tokens.text_encoding_ms + generated.prefill_ms, generated.tpot_ms(),
                          generated.tokens * static_cast<int64_t>(tasks.size()));
  }

  for (size_t i = 0; i < tasks.size(); ++i) {
    const WorkRequest& r = tasks[i]->payload<WorkRequest>();
    WorkResult result;
    result.request_id = r.request_id;
    result.format = r.format;
    result.batch_bucket = bucket;
    result.warnings = tokens.warnings[i];
    result.timings.queue_ms = ms_between(tasks[i]->enqueued(), batch_start);
    result.timings.text_encoding_ms = tokens.text_encoding_ms;
    result.timings.prefill_ms = generated.prefill_ms;
    result.timings.decode_ms = generated.decode_ms;
    result.timings.tpot_ms = generated.tpot_ms();
    const at::Tensor ids = generated.ids.narrow(0, static_cast<int64_t>(i), 1).clone();
    if (r.return_shape_tokens) {
      const int64_t* data = ids.data_ptr<int64_t>();
      result.shape_tokens.assign(data, data + ids.numel());
    }
    auto task = tasks[i];
    post([this, task, ids, result = std::move(result)]() mutable {
      finish_task(task, ids, std::move(result));
    });
  }
}

ContinuousDecoder& EngineExecutor::continuous_decoder() {
  if (!decoder_) {
    decoder_ = engine_.continuous_decoder(
        {options_.batch_buckets, options_.single_stream_decode, /*record_logits=*/false});
  }
  return *decoder_;
}

int64_t EngineExecutor::active_slots() const { return static_cast<int64_t>(slot_tasks_.size()); }

void EngineExecutor::report_active_slots() const {
  if (options_.on_active_slots) options_.on_active_slots(active_slots());
}

void EngineExecutor::admit(const std::vector<std::shared_ptr<Task>>& tasks) {
  device_work(on_accelerator_, "prefill", [&] { admit_on_device(tasks); });
}

void EngineExecutor::admit_on_device(const std::vector<std::shared_ptr<Task>>& tasks) {
  const auto admitted = SteadyClock::now();
  for (const auto& task : tasks) task->progress({TaskStage::kTextEncoding});
  const std::vector<PromptRequest> prompts = prompts_of(tasks);
  EncodedPrompts encoded = pipeline_.encode_prompts(prompts);
  ContinuousDecoder& decoder = continuous_decoder();
  const auto prefill_start = SteadyClock::now();
  const std::vector<ContinuousDecoder::SlotId> ids = decoder.admit(encoded.requests);
  decoder.synchronize();  // the first tokens are out: the prefill's end
  const auto first_token = SteadyClock::now();
  const double prefill_ms = ms_between(prefill_start, first_token);
  const int64_t total = decoder.total_tokens();
  for (size_t i = 0; i < tasks.size(); ++i) {
    SlotTask& slot = slot_tasks_[ids[i]];
    slot.task = tasks[i];
    slot.admitted = admitted;
    slot.first_token = first_token;
    slot.text_encoding_ms = encoded.text_encoding_ms;
    slot.prefill_ms = prefill_ms;
    slot.largest_bucket = decoder.bucket();
    slot.warnings = std::move(encoded.warnings[i]);
  }
  report_active_slots();
  for (const auto& task : tasks) task->progress({TaskStage::kDecoding, 1, total});
  if (options_.on_admitted) {
    options_.on_admitted(static_cast<int64_t>(tasks.size()), encoded.text_encoding_ms + prefill_ms);
  }
  spdlog::debug("continuous: {} joined ({} active, bucket {}), text {:.1f} ms, prefill {:.1f} ms",
                tasks.size(), decoder.active(), decoder.bucket(), encoded.text_encoding_ms,
                prefill_ms);
  // A request with a single token is done at its first.
  for (const auto id : ids) {
    if (decoder.done(id)) retire(id);
  }
  report_active_slots();
}

void EngineExecutor::step() {
  device_work(on_accelerator_, "decoding", [&] { step_on_device(); });
}

void EngineExecutor::step_on_device() {
  if (!decoder_) return;
  // Cancelled (client gone, deadline, shutdown) or already answered: the slot is freed now.
  std::vector<ContinuousDecoder::SlotId> dropped;
  for (const auto& [id, slot] : slot_tasks_) {
    if (slot.task->cancelled() || slot.task->finished()) dropped.push_back(id);
  }
  for (const auto id : dropped) {
    const std::shared_ptr<Task> task = slot_tasks_.at(id).task;
    decoder_->release(id);
    slot_tasks_.erase(id);
    task->fail(cancelled("request cancelled during decoding"));
  }
  if (!dropped.empty()) report_active_slots();
  if (slot_tasks_.empty()) return;

  const int64_t bucket = decoder_->bucket();
  const int64_t active = decoder_->active();
  ++steps_;
  if (steps_ == options_.faults.device_fault_at_step) {
    throw injected_device_fault("decoding", "device_fault_at_step:" + std::to_string(steps_));
  }
  decoder_->step();
  if (options_.on_step) options_.on_step(bucket, active);
  const int64_t total = decoder_->total_tokens();
  const int64_t interval = options_.progress_interval_tokens;
  const bool report = interval > 0 && decoder_->steps() % interval == 0;
  if (report) decoder_->synchronize();
  std::vector<ContinuousDecoder::SlotId> done;
  for (auto& [id, slot] : slot_tasks_) {
    slot.largest_bucket = std::max(slot.largest_bucket, bucket);
    const int64_t tokens = decoder_->tokens_done(id);
    if (tokens >= total) {
      done.push_back(id);
    } else if (report) {
      slot.task->progress({TaskStage::kDecoding, tokens, total});
    }
  }
  for (const auto id : done) retire(id);
  if (!done.empty()) report_active_slots();
}

void EngineExecutor::retire(ContinuousDecoder::SlotId id) {
  SlotTask slot = std::move(slot_tasks_.at(id));
  slot_tasks_.erase(id);
  const at::Tensor ids = decoder_->ids(id).unsqueeze(0);  // waits for the last step
  decoder_->release(id);
  const auto now = SteadyClock::now();
  const int64_t total = ids.size(1);
  const WorkRequest& r = slot.task->payload<WorkRequest>();
  WorkResult result;
  result.request_id = r.request_id;
  result.format = r.format;
  result.batch_bucket = slot.largest_bucket;
  result.warnings = std::move(slot.warnings);
  result.timings.queue_ms = ms_between(slot.task->enqueued(), slot.admitted);
  result.timings.text_encoding_ms = slot.text_encoding_ms;
  result.timings.prefill_ms = slot.prefill_ms;
  result.timings.decode_ms = ms_between(slot.first_token, now);
  result.timings.tpot_ms =
      total > 1 ? result.timings.decode_ms / static_cast<double>(total - 1) : 0.0;
  if (r.return_shape_tokens) {
    const int64_t* data = ids.data_ptr<int64_t>();
    result.shape_tokens.assign(data, data + ids.numel());
  }
  if (options_.on_generated) {
    options_.on_generated(slot.text_encoding_ms + slot.prefill_ms, result.timings.tpot_ms, total);
  }
  slot.task->progress({TaskStage::kDecoding, total, total});
  auto task = slot.task;
  post([this, task, ids, result = std::move(result)]() mutable {
    finish_task(task, ids, std::move(result));
  });
}

std::vector<std::shared_ptr<Task>> EngineExecutor::clear_slots() {
  std::vector<std::shared_ptr<Task>> tasks;
  for (auto& [id, slot] : slot_tasks_) tasks.push_back(std::move(slot.task));
  slot_tasks_.clear();
  if (decoder_) decoder_->release_all();
  report_active_slots();
  return tasks;
}

void EngineExecutor::finish_task(const std::shared_ptr<Task>& task, const at::Tensor& ids,
                                 WorkResult result) {
  const auto mesh_start = SteadyClock::now();
  // A task that was cancelled, timed out or already failed (draining) is not meshed; the checks
  // between chunks keep a cancelled task from holding a mesh thread (and shutdown) for long.
  const auto stop = [&task] { return task->cancelled() || task->finished(); };
  if (stop()) {
    task->fail(cancelled("request cancelled before meshing"));
    return;
  }
  try {
    const WorkRequest& r = task->payload<WorkRequest>();
    const int64_t tokens = ids.size(1);
    task->progress({TaskStage::kMeshing, tokens, tokens});
    const int64_t nth = ++meshed_;
    if (nth == options_.faults.mesh_error_at_request) {
      throw std::runtime_error("injected by " + std::string(kFaultInjectionEnv) +
                               " mesh_error_at_request:" + std::to_string(nth));
    }
    if (nth == options_.faults.device_fault_at_mesh) {
      throw injected_device_fault("meshing", "device_fault_at_mesh:" + std::to_string(nth));
    }
    // Progress at most every quarter second (a chunk can be much shorter on a GPU), and always
    // for the last chunk of a level.
    auto last_report = SteadyClock::now();
    const auto on_progress = [&](const OccupancyProgress& p) {
      const auto now = SteadyClock::now();
      if (p.points_done < p.points_planned && now - last_report < std::chrono::milliseconds(250)) {
        return;
      }
      last_report = now;
      task->progress({TaskStage::kMeshing, tokens, tokens, p.points_done, p.points_planned,
                      p.levels_done, p.levels_total});
    };
    ShapeRequest shape_request;
    shape_request.resolution_base = r.resolution_base;
    shape_request.format = r.format;
    if (r.target_face_count) {
      shape_request.target_faces = static_cast<size_t>(*r.target_face_count);
    }
    shape_request.limits = mesh_limits(r.mesh_profile);
    shape_request.compact = r.compact;
    shape_request.pivot = r.pivot;
    for (const int64_t faces : r.lod_face_counts) {
      shape_request.lod_targets.push_back(static_cast<size_t>(faces));
    }
    // What made it, in the file itself (the request's id: the computation's first caller).
    shape_request.metadata = provenance_metadata(
        {r.prompt, r.seed, r.top_p, r.guidance_scale, r.resolution_base, r.bounding_box,
         r.mesh_profile, r.target_face_count, options_.model_name, options_.weights_digest,
         options_.server_version, r.request_id, r.pivot, r.lod_face_counts});
    // One request's latents at a time: the shape's numbers then never depend on which other
    // requests shared the batch, so equal tokens give byte-identical meshes.
    Shape shape = device_work(on_accelerator_, "meshing", [&] {
      return pipeline_.make_shape(ids, shape_request, on_progress, stop);
    });
    if (shape.report.mesh.over_budget && options_.on_mesh_budget_exceeded) {
      options_.on_mesh_budget_exceeded();
    }
    for (std::string& w : shape.warnings) result.warnings.push_back(std::move(w));
    result.vertex_count = static_cast<int64_t>(shape.mesh.vertex_count());
    result.face_count = static_cast<int64_t>(shape.mesh.face_count());
    result.occupancy_points = shape.report.occupancy.points_evaluated;
    result.timings.occupancy_ms = shape.report.occupancy_ms;
    result.bounds = bounds_of(shape.mesh);
    for (ShapeLevel& level : shape.lods) {
      WorkLevel out;
      out.target_face_count = static_cast<int64_t>(level.target_faces);
      out.vertex_count = static_cast<int64_t>(level.mesh.vertex_count());
      out.face_count = static_cast<int64_t>(level.mesh.face_count());
      out.bounds = bounds_of(level.mesh);
      if (r.format == MeshFormat::kRaw) {
        out.vertices = std::move(level.mesh.vertices);
        out.indices = std::move(level.mesh.indices);
      } else {
        out.encoded = std::move(level.encoded);
      }
      result.lods.push_back(std::move(out));
    }
    if (r.format == MeshFormat::kRaw || r.return_raw_mesh) {
      result.vertices = std::move(shape.mesh.vertices);
      result.indices = std::move(shape.mesh.indices);
    }
    if (r.format != MeshFormat::kRaw) result.encoded = std::move(shape.encoded);
    const auto now = SteadyClock::now();
    result.timings.mesh_ms = ms_between(mesh_start, now);
    result.timings.total_ms = ms_between(task->enqueued(), now);
    task->progress({TaskStage::kDone, tokens, tokens});
    task->succeed(std::move(result));
  } catch (const DeviceFault& fault) {
    mesh_device_fault(task, fault);
  } catch (const Error& e) {
    task->fail(e.code() == ErrorCode::kCancelled ? cancelled("request cancelled while meshing")
                                                 : e);
  } catch (const std::exception& e) {
    task->fail(internal_error(std::string("mesh stage failed: ") + e.what()));
  }
}

void EngineExecutor::mesh_device_fault(const std::shared_ptr<Task>& task,
                                       const DeviceFault& fault) {
  // Reported before the task answers, so that a client retrying at once finds the scheduler
  // refusing work rather than the broken device.
  if (!options_.on_device_fault) {
    spdlog::error("executor: request {}: {}", task->ticket().request_id, fault.what());
  } else {
    try {
      options_.on_device_fault(fault, task->ticket().request_id);
    } catch (const std::exception& e) {
      spdlog::error("executor: the device-fault hook threw: {}", e.what());
    }
  }
  task->fail(fault);
}

void EngineExecutor::warm_up(const std::vector<int64_t>& buckets) {
  // The decode runners (and their graphs) were made at load (EngineOptions.capture): one whole
  // generation in the serving mode replays a graph end to end before the first request.
  const auto start = SteadyClock::now();
  if (pipeline_.engine().text_encoder()) {
    GenerationOptions options;
    options.bucket = buckets.front();
    options.single_stream_decode = options_.single_stream_decode;
    const TokenBatch tokens = pipeline_.generate_tokens({PromptRequest{}}, options);
    ShapeRequest small;
    small.resolution_base = 3;
    small.format = MeshFormat::kRaw;
    (void)pipeline_.make_shape(tokens.generation.ids, small);
    // Continuous batching's shared unconditional prefix, computed once here rather than in
    // the first request's admission (static batching never uses it; it costs one prefill).
    (void)continuous_decoder();
  }
  std::string names;
  for (const int64_t b : buckets) names += (names.empty() ? "" : ", ") + std::to_string(b);
  spdlog::info("warm-up of buckets [{}] took {:.0f} ms", names,
               ms_between(start, SteadyClock::now()));
}

}  // namespace cube3d
