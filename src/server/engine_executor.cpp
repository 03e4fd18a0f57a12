#include "cube3d/server/engine_executor.h"

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "cube3d/core/error.h"
#include "cube3d/mesh/mesh_io.h"

namespace cube3d {
namespace {

bool all_cancelled(const std::vector<std::shared_ptr<Job>>& jobs) {
  return std::all_of(jobs.begin(), jobs.end(),
                     [](const auto& j) { return j->cancelled() || j->finished(); });
}

}  // namespace

EngineExecutor::EngineExecutor(Engine& engine, ExecutorOptions options)
    : engine_(engine), options_(std::move(options)) {
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
    tasks_.push_back(std::move(task));
  }
  changed_.notify_one();
}

void EngineExecutor::mesh_worker() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
      ++busy_;
    }
    task();
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

void EngineExecutor::execute(const std::vector<std::shared_ptr<Job>>& jobs, int64_t bucket) {
  const auto batch_start = SteadyClock::now();
  const TextEncoder* text = engine_.text_encoder();
  if (!text) {
    throw failed_precondition(
        "this server's model has no CLIP text encoder configured "
        "(model.clip_model), so it cannot take text prompts");
  }
  for (const auto& job : jobs) job->progress({JobStage::kTextEncoding, 0, 0});
  std::vector<std::string> prompts;
  for (const auto& job : jobs) prompts.push_back(job->request().prompt);
  const std::vector<EncodedPrompt> encoded = text->encode(prompts);
  const double text_ms = ms_between(batch_start, SteadyClock::now());

  std::vector<GenerationRequest> requests;
  std::vector<JobResult> results(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const JobRequest& r = jobs[i]->request();
    GenerationRequest g;
    g.text_hidden = encoded[i].hidden;
    g.uncond_hidden = text->empty_prompt();
    if (r.bounding_box) {
      g.bbox = at::tensor({(*r.bounding_box)[0], (*r.bounding_box)[1], (*r.bounding_box)[2]},
                          at::kFloat);
    }
    g.guidance_scale = r.guidance_scale;
    g.top_p = r.top_p;
    g.seed = r.seed;
    requests.push_back(std::move(g));
    results[i].request_id = r.request_id;
    results[i].format = r.format;
    results[i].batch_bucket = bucket;
    results[i].timings.queue_ms = ms_between(jobs[i]->enqueued(), batch_start);
    results[i].timings.text_encoding_ms = text_ms;
    if (encoded[i].truncated) {
      results[i].warnings.push_back("prompt truncated: " + std::to_string(encoded[i].token_count) +
                                    " CLIP tokens, only the first " +
                                    std::to_string(kClipMaxPromptTokens) + " are used");
    }
  }

  const int64_t total = engine_.tokens_per_shape();
  GenerationOptions options;
  options.single_stream_decode = options_.single_stream_decode;
  options.bucket = bucket;
  options.progress_interval = options_.progress_interval_tokens;
  options.on_progress = [&](int64_t done) {
    for (const auto& job : jobs) job->progress({JobStage::kDecoding, done, total});
    return !all_cancelled(jobs);
  };
  const GenerationResult generated = engine_.generate(requests, options);
  if (generated.stopped) {
    for (const auto& job : jobs) job->fail(cancelled("request cancelled during decoding"));
    return;
  }
  const double ttft_ms = text_ms + generated.prefill_ms;
  if (options_.on_generated) {
    options_.on_generated(ttft_ms, generated.tpot_ms(),
                          generated.tokens * static_cast<int64_t>(jobs.size()));
  }

  for (size_t i = 0; i < jobs.size(); ++i) {
    JobResult& result = results[i];
    result.timings.prefill_ms = generated.prefill_ms;
    result.timings.decode_ms = generated.decode_ms;
    result.timings.tpot_ms = generated.tpot_ms();
    const at::Tensor ids = generated.ids.narrow(0, static_cast<int64_t>(i), 1).clone();
    if (jobs[i]->request().return_shape_tokens) {
      const int64_t* data = ids.data_ptr<int64_t>();
      result.shape_tokens.assign(data, data + ids.numel());
    }
    auto job = jobs[i];
    post([this, job, ids, result = std::move(result)]() mutable {
      finish_job(job, ids, std::move(result), SteadyClock::now());
    });
  }
}

void EngineExecutor::finish_job(const std::shared_ptr<Job>& job, const at::Tensor& ids,
                                JobResult result, SteadyClock::time_point mesh_start) {
  // A job that was cancelled, timed out or already failed (draining) is not meshed; the checks
  // between stages keep a cancelled job from holding a mesh thread (and shutdown) for long.
  const auto stop = [&job] { return job->cancelled() || job->finished(); };
  if (stop()) {
    job->fail(cancelled("request cancelled before meshing"));
    return;
  }
  try {
    const JobRequest& r = job->request();
    job->progress({JobStage::kMeshing, ids.size(1), ids.size(1)});
    // One request's latents at a time: the shape decoder's numbers then never depend on which
    // other requests shared the batch, so equal tokens give byte-identical meshes.
    const at::Tensor latents = engine_.decode_latents(ids);
    const at::Tensor grid =
        engine_.occupancy_grid(latents, r.resolution_base, /*chunk_points=*/0, stop).contiguous();
    if (stop()) throw cancelled("request cancelled while meshing");
    const GridView view{
        std::span<const float>(grid.data_ptr<float>(), static_cast<size_t>(grid.numel())),
        {grid.size(0), grid.size(1), grid.size(2)}};
    MeshPipelineOptions mesh_options = options_.mesh;
    if (r.target_face_count) {
      mesh_options.simplification.target_faces = static_cast<size_t>(*r.target_face_count);
    }
    // A field without a surface at 0 (all inside or all outside) gives an empty mesh; say so.
    if (!has_level_crossing(view, mesh_options.marching_cubes.level)) {
      static const std::string kNoSurface =
          "the occupancy field has no surface at level 0: empty mesh";
      result.warnings.push_back(kNoSurface);
    }
    Mesh mesh = grid_to_mesh(view, mesh_options);
    result.vertex_count = static_cast<int64_t>(mesh.vertex_count());
    result.face_count = static_cast<int64_t>(mesh.face_count());
    if (r.format == MeshFormat::kRaw) {
      result.vertices = std::move(mesh.vertices);
      result.indices = std::move(mesh.indices);
    } else {
      result.encoded = encode_mesh(mesh, r.format);
    }
    const auto now = SteadyClock::now();
    result.timings.mesh_ms = ms_between(mesh_start, now);
    result.timings.total_ms = ms_between(job->enqueued(), now);
    job->progress({JobStage::kDone, ids.size(1), ids.size(1)});
    job->succeed(result);
  } catch (const Error& e) {
    job->fail(e);
  } catch (const std::exception& e) {
    job->fail(internal_error(std::string("mesh stage failed: ") + e.what()));
  }
}

void EngineExecutor::warm_up(const std::vector<int64_t>& buckets) {
  // The decode runners (and their graphs) were made at load (EngineOptions.capture): one whole
  // generation in the serving mode replays a graph end to end before the first request.
  const auto start = SteadyClock::now();
  if (const TextEncoder* text = engine_.text_encoder()) {
    GenerationRequest request;
    request.text_hidden = text->empty_prompt();
    request.uncond_hidden = text->empty_prompt();
    GenerationOptions options;
    options.bucket = buckets.front();
    options.single_stream_decode = options_.single_stream_decode;
    const GenerationResult r = engine_.generate({request}, options);
    (void)engine_.occupancy_grid(engine_.decode_latents(r.ids), 3);
  }
  std::string names;
  for (const int64_t b : buckets) names += (names.empty() ? "" : ", ") + std::to_string(b);
  spdlog::info("warm-up of buckets [{}] took {:.0f} ms", names,
               ms_between(start, SteadyClock::now()));
}

}  // namespace cube3d
