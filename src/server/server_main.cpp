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
#include <thread>

#include "cube3d/cli/cli_args.h"
#include "cube3d/core/clock.h"
#include "cube3d/core/error.h"
#include "cube3d/core/files.h"
#include "cube3d/core/logging.h"
#include "cube3d/core/model_config.h"
#include "cube3d/scheduler/scheduler.h"
#include "cube3d/server/engine_executor.h"
#include "cube3d/server/layer_options.h"
#include "cube3d/server/mesh_service.h"
#include "cube3d/server/metrics.h"
#include "cube3d/server/server_config.h"

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
  const auto load_start = SteadyClock::now();
  const ModelConfig model_config = load_model_config(config.model.config);

  MeshServiceImpl service(service_options(config, model_config), metrics);

  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (config.tls.enabled()) {
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({read_file(config.tls.key_file, "TLS key"),
                                      read_file(config.tls.cert_file, "TLS certificate")});
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

  const std::unique_ptr<Engine> engine = Engine::load(model_config, engine_options(config));
  if (!engine->text_encoder()) {
    throw invalid_argument(config.source + ": model.clip_model is required for " +
                           model_config.source + " (it has real weights)");
  }

  ExecutorOptions executor_setup = executor_options(config);
  executor_setup.on_generated = [&metrics](double ttft, double tpot, int64_t tokens) {
    metrics.observe_ttft_ms(ttft);
    metrics.observe_tpot_ms(tpot);
    metrics.tokens_generated(tokens);
  };
  EngineExecutor executor(*engine, std::move(executor_setup));
  executor.warm_up(config.batching.batch_buckets);
  metrics.set_model_load_seconds(ms_since(load_start) / 1000.0);

  Scheduler scheduler(scheduler_config(config), executor, [&metrics](int64_t bucket, int64_t jobs) {
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
