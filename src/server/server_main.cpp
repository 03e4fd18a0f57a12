// cube3d-server: the gRPC MeshService over the engine, configured by one YAML file.
//   cube3d-server --config models/demo-server.yaml [--listen HOST:PORT] [--print-config] ...
// Health is NOT_SERVING until the model is loaded and warmed up, and again while draining.
// SIGTERM/SIGINT: stop accepting (UNAVAILABLE), finish in-flight work within the grace period,
// exit 0.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "cube3d/core/error.h"
#include "cube3d/core/logging.h"
#include "cube3d/core/model_config.h"
#include "cube3d/engine/engine.h"
#include "cube3d/scheduler/scheduler.h"
#include "cube3d/server/engine_executor.h"
#include "cube3d/server/mesh_service.h"
#include "cube3d/server/metrics.h"
#include "cube3d/server/server_config.h"
#include "cube3d/tools/cli_args.h"

namespace cube3d {
namespace {

CliArgs make_args() {
  CliArgs args("cube3d-server", "Serve Cube 3D text-to-mesh generation over gRPC.");
  args.option("--config", 1, "server YAML (required), e.g. models/demo-server.yaml", "F")
      .option("--print-config", 0, "print the effective config (after overrides) and exit")
      .option("--listen", 1, "override listen", "HOST:PORT")
      .option("--metrics-listen", 1, "override metrics_listen ('' = off)", "HOST:PORT")
      .option("--log-level", 1, "override log_level", "L")
      .option("--device", 1, "override device", "D")
      .option("--dtype", 1, "override dtype", "T")
      .option("--batch-buckets", 1, "override batching.batch_buckets, e.g. 1,2,4,8", "LIST")
      .option("--max-queue-delay-ms", 1, "override batching.max_queue_delay_ms", "MS")
      .option("--set", 1, "override any key: dotted.key=value (repeatable)", "K=V",
              /*repeatable=*/true);
  return args;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw not_found("cannot read " + path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

RequestPolicy request_policy(const ServerConfig& c, bool model_has_bbox) {
  RequestPolicy p;
  p.max_prompt_bytes = c.limits.max_prompt_bytes;
  p.min_resolution_base = c.limits.min_resolution_base;
  p.max_resolution_base = c.limits.max_resolution_base;
  p.max_target_face_count = c.limits.max_target_face_count;
  p.default_guidance_scale = c.defaults.guidance_scale;
  p.default_top_p = c.defaults.top_p;
  p.default_resolution_base = c.defaults.resolution_base;
  p.default_format = c.defaults.format;
  p.model_has_bbox = model_has_bbox;
  return p;
}

int run(int argc, char** argv) {
  // Signals are taken by one thread with sigwait; block them before any thread exists.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  CliArgs args = make_args();
  args.parse(argc, argv);
  if (args.help_requested()) {
    std::fputs(args.help().c_str(), stdout);
    return 0;
  }
  if (!args.has("--config")) throw invalid_argument("--config is required");
  std::vector<ConfigOverride> overrides;
  const std::pair<const char*, const char*> flag_keys[] = {
      {"--listen", "listen"},
      {"--metrics-listen", "metrics_listen"},
      {"--log-level", "log_level"},
      {"--device", "device"},
      {"--dtype", "dtype"},
      {"--batch-buckets", "batching.batch_buckets"},
      {"--max-queue-delay-ms", "batching.max_queue_delay_ms"}};
  for (const auto& [flag, key] : flag_keys) {
    if (args.has(flag)) overrides.push_back({key, args.get(flag)});
  }
  for (const auto& text : args.get_all("--set")) overrides.push_back(parse_config_override(text));
  const ServerConfig config = load_server_config(args.get("--config"), overrides);
  if (args.has("--print-config")) {
    std::fputs(server_config_to_yaml(config).c_str(), stdout);
    return 0;
  }
  setup_logging(config.log_level);

  // gRPC first, with health NOT_SERVING, so orchestrators see the process while it loads; the
  // MeshService answers UNAVAILABLE until the scheduler is attached.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  Metrics metrics(config.metrics_listen, config.batching.batch_buckets);
  const auto load_start = std::chrono::steady_clock::now();
  const ModelConfig model_config = load_model_config(config.model.config);

  ServiceOptions service_options;
  service_options.policy = request_policy(config, model_config.gpt.use_bbox);
  service_options.default_deadline_ms = config.limits.default_deadline_ms;
  service_options.max_message_bytes = config.limits.max_message_bytes;
  service_options.log_prompts = config.log_prompts;
  service_options.tokens_per_shape = model_config.shape.num_encoder_latents;
  MeshServiceImpl service(service_options, metrics);

  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (config.tls.enabled()) {
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back(
        {read_file(config.tls.key_file), read_file(config.tls.cert_file)});
    credentials = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(config.listen, credentials, &bound_port);
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.limits.max_message_bytes));
  // Responses are checked against the limit by the service (with a helpful message); the
  // transport limit leaves room for the envelope.
  builder.SetMaxSendMessageSize(
      static_cast<int>(std::min<int64_t>(config.limits.max_message_bytes + (1 << 20), INT32_MAX)));
  const std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    throw invalid_argument("listen " + config.listen + ": cannot listen on this address");
  }
  // The default health service starts out SERVING; not yet.
  server->GetHealthCheckService()->SetServingStatus(false);
  spdlog::info("listening on {} (port {}); loading {}", config.listen, bound_port,
               model_config.source);

  EngineOptions engine_options;
  engine_options.gpt_weights = config.model.gpt_weights;
  engine_options.shape_weights = config.model.shape_weights;
  engine_options.clip_model = config.model.clip_model;
  engine_options.clip_vocab = config.model.clip_vocab;
  engine_options.device = config.device;
  engine_options.dtype = config.dtype;
  engine_options.cuda_graphs = parse_graph_mode(config.cuda_graphs);
  engine_options.max_batch = config.batching.batch_buckets.back();
  // Every variant a batch can use, captured at load before SERVING: each bucket, with and
  // without guidance rows (a batch whose requests all ask for guidance 0 has one row each), in
  // the configured single-stream mode.
  const SingleStreamDecode decode_mode = parse_single_stream_decode(config.single_stream_decode);
  engine_options.capture.buckets = config.batching.batch_buckets;
  engine_options.capture.guided = true;
  engine_options.capture.unguided = true;
  engine_options.capture.modes = {decode_mode};
  const std::unique_ptr<Engine> engine = Engine::load(model_config, engine_options);
  if (!engine->text_encoder()) {
    throw invalid_argument(config.source + ": model.clip_model is required for " +
                           model_config.source + " (it has real weights)");
  }

  ExecutorOptions executor_options;
  executor_options.single_stream_decode = decode_mode;
  executor_options.progress_interval_tokens = config.progress_interval_tokens;
  executor_options.mesh_threads = config.mesh.mesh_threads;
  executor_options.mesh.postprocess = config.mesh.postprocess;
  executor_options.mesh.simplify = config.mesh.simplify;
  executor_options.mesh.cleanup.remove_floaters = config.mesh.remove_floaters;
  executor_options.mesh.cleanup.floater_diagonal_ratio = config.mesh.floater_ratio;
  executor_options.on_generated = [&metrics](double ttft, double tpot, int64_t tokens) {
    metrics.observe_ttft_ms(ttft);
    metrics.observe_tpot_ms(tpot);
    metrics.tokens_generated(tokens);
  };
  EngineExecutor executor(*engine, executor_options);
  executor.warm_up(config.batching.batch_buckets);
  metrics.set_model_load_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count());

  SchedulerConfig scheduler_config;
  scheduler_config.batch_buckets = config.batching.batch_buckets;
  scheduler_config.max_queue_delay_ms = config.batching.max_queue_delay_ms;
  scheduler_config.max_queue_size = config.batching.max_queue_size;
  Scheduler scheduler(scheduler_config, executor, [&metrics](int64_t bucket, int64_t jobs) {
    metrics.batch_started(bucket, jobs);
  });
  service.attach(&scheduler);
  server->GetHealthCheckService()->SetServingStatus(true);
  spdlog::info("cube3d-server serving {} on {} (port {}), buckets up to {}, metrics {}",
               model_config.source, config.listen, bound_port, config.batching.batch_buckets.back(),
               config.metrics_listen.empty() ? "off" : config.metrics_listen);

  std::thread queue_gauge([&] {
    while (!scheduler.draining()) {
      metrics.set_queue_depth(scheduler.queue_depth());
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  spdlog::info("signal {}: draining (grace {} s)", signal_number, config.drain_grace_seconds);
  const auto drain_deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(config.drain_grace_seconds);
  server->GetHealthCheckService()->SetServingStatus(false);
  scheduler.begin_drain();
  // The scheduler cancels what is still running when the grace runs out; mesh work stops at
  // its next check (between occupancy chunks), so the wait after it is short.
  bool drained = scheduler.drain(std::chrono::seconds(config.drain_grace_seconds));
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      drain_deadline - std::chrono::steady_clock::now());
  drained = executor.wait_idle(std::max(left, std::chrono::milliseconds(2000))) && drained;
  // Handlers are done or answering now; give them a moment to send their last bytes.
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  queue_gauge.join();
  spdlog::info("stopped ({})", drained ? "all work finished" : "grace period ran out");
  return 0;
}

}  // namespace
}  // namespace cube3d

int main(int argc, char** argv) {
  return cube3d::run_tool("cube3d-server", cube3d::run, argc, argv);
}
