// cube3d-server: the gRPC MeshService over the engine, configured by one YAML file.
//   cube3d-server --config models/demo-server.yaml [--listen HOST:PORT] [--print-config] ...
// Health is NOT_SERVING until the model is loaded and warmed up, and again while draining.
// SIGTERM/SIGINT: stop accepting (UNAVAILABLE), finish in-flight work within the grace period,
// exit 0.
// A device fault (core/device_fault.h: the GPU failed during a step): the step's requests fail
// INTERNAL, health turns NOT_SERVING (both names) and /readyz 503 at once, queued and new
// requests are refused UNAVAILABLE (retryable elsewhere), what is past decoding (meshing) still
// answers within the grace period, then the process exits with kExitDeviceFault (70) for its
// orchestrator to restart it; cube3d_device_faults_total counts it. CUBE3D_FAULT_INJECTION
// (engine_executor.h, tests only) makes such faults on purpose.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/impl/server_builder_plugin.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <optional>
#include <string>
#include <thread>

#include "cube3d/cli/cli_args.h"
#include "cube3d/cli/version.h"
#include "cube3d/core/clock.h"
#include "cube3d/core/device_fault.h"
#include "cube3d/core/error.h"
#include "cube3d/core/listen_probe.h"
#include "cube3d/core/logging.h"
#include "cube3d/core/model_config.h"
#include "cube3d/core/net_address.h"
#include "cube3d/core/peer_log.h"
#include "cube3d/scheduler/scheduler.h"
#include "cube3d/server/admission/api_keys.h"
#include "cube3d/server/admission/prompt_policy.h"
#include "cube3d/server/app/file_limits.h"
#include "cube3d/server/app/model_identity_loader.h"
#include "cube3d/server/app/signal_watcher.h"
#include "cube3d/server/cache/redis_result_tier.h"
#include "cube3d/server/cache/result_cache.h"
#include "cube3d/server/config/layer_options.h"
#include "cube3d/server/config/server_config.h"
#include "cube3d/server/executor/engine_executor.h"
#include "cube3d/server/grpc/awaiting_calls.h"
#include "cube3d/server/grpc/grpc_log.h"
#include "cube3d/server/grpc/grpc_server_options.h"
#include "cube3d/server/grpc/inference_service.h"
#include "cube3d/server/grpc/mesh_service.h"
#include "cube3d/server/http/http_gateway.h"
#include "cube3d/server/httpd/tls_files.h"
#include "cube3d/server/httpd/tls_policy.h"
#include "cube3d/server/inference/inference_endpoint.h"
#include "cube3d/server/jobs/job_service.h"
#include "cube3d/server/jobs/job_store.h"
#include "cube3d/server/jobs/memory_job_store.h"
#include "cube3d/server/jobs/redis_job_store.h"
#include "cube3d/server/observability/metrics.h"
#include "cube3d/server/redis/redis_client.h"
#include "cube3d/server/redis/redis_subscriber.h"
#include "cube3d/server/redis/redis_url.h"
#include "cube3d/server/wire/answer_codec.h"

namespace cube3d {
namespace {

// Health answers for the whole server ("") and for the service by name, as probes configured
// either way expect.
void set_serving(grpc::Server& server, bool serving) {
  grpc::HealthCheckServiceInterface* health = server.GetHealthCheckService();
  health->SetServingStatus(serving);
  health->SetServingStatus(kMeshServiceName, serving);
  health->SetServingStatus(kInferenceServiceName, serving);
}

// Linking gRPC's reflection library registers its plugin with every ServerBuilder (a static
// initializer), so `reflection: false` has to take it out of the builder again.
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    std::erase_if(*plugins,
                  [](const auto& plugin) { return plugin->name() == "proto_server_reflection"; });
  }
};

CliArgs make_args() {
  CliArgs args("cube3d-server",
               "Serve Cube 3D text-to-mesh generation over gRPC.\nSettings: the config file, "
               "then CUBE3D_* variables, then flags (the last wins).");
  // The main keys also come from CUBE3D_* variables (containers, systemd units); precedence:
  // config file < environment < flags.
  args.option("--config", 1, "server YAML (required), e.g. models/demo-server.yaml", "F")
      .env("CUBE3D_CONFIG")
      .option("--print-config", 0, "print the effective config (after overrides) and exit")
      .option("--listen", 1, "override listen", "HOST:PORT")
      .env("CUBE3D_LISTEN")
      .option("--metrics-listen", 1, "override metrics_listen ('' = off)", "HOST:PORT")
      .env("CUBE3D_METRICS_LISTEN")
      .option("--http-listen", 1, "override http_listen ('' = off)", "HOST:PORT")
      .env("CUBE3D_HTTP_LISTEN")
      .option("--redis-url", 1, "override redis.url (a password stays out of the config file)",
              "URL")
      .env("CUBE3D_REDIS_URL")
      .option("--log-level", 1, "override logging.level", "L")
      .env("CUBE3D_LOG_LEVEL")
      .option("--log-format", 1, "override logging.format: text | json", "F")
      .env("CUBE3D_LOG_FORMAT")
      .option("--device", 1, "override device", "D")
      .option("--dtype", 1, "override dtype", "T")
      .option("--batch-buckets", 1, "override batching.batch_buckets, e.g. 1,2,4,8", "LIST")
      .option("--max-queue-delay-ms", 1, "override batching.max_queue_delay_ms", "MS")
      .option("--set", 1, "override any key: dotted.key=value (repeatable)", "K=V",
              /*repeatable=*/true);
  return args;
}

int run(int argc, char** argv) {
  // Signals are taken by one thread from here on, before any other thread exists: SIGTERM
  // during start-up exits at once, SIGHUP reloads the API keys.
  SignalWatcher signals;

  CliArgs args = make_args();
  args.parse_answering_help(argc, argv);
  if (!args.has("--config")) {
    throw invalid_argument("--config is required (or set CUBE3D_CONFIG)");
  }
  std::vector<ConfigOverride> overrides;
  const std::pair<const char*, const char*> flag_keys[] = {
      {"--listen", "listen"},
      {"--metrics-listen", "metrics_listen"},
      {"--http-listen", "http_listen"},
      {"--redis-url", "redis.url"},
      {"--log-level", "logging.level"},
      {"--log-format", "logging.format"},
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
  // The TLS policy's cipher list where gRPC reads it (httpd/tls_policy.h): set before any thread
  // that may read the environment exists (setenv is not thread-safe), logged once logging is.
  const std::optional<std::string> cipher_variable_replaced =
      config.tls.enabled() ? http::use_tls_policy_for_grpc() : std::nullopt;
  setup_logging(config.logging.level, parse_log_format(config.logging.format));
  if (cipher_variable_replaced) spdlog::warn("{}", *cipher_variable_replaced);
  // gRPC's own log lines go through the same logger (and format: a JSON log stays JSON); those a
  // peer causes (failed TLS handshakes), like the doors' own such lines, through the
  // rate-limited peer log, every one counted in cube3d_peer_errors_total (once Metrics exists).
  route_grpc_log_lines();
  // TEST ONLY: faults made on purpose (engine_executor.h), from the environment alone, so that
  // neither a config file nor a request can turn them on.
  FaultInjection fault_injection;
  if (const char* spec = std::getenv(kFaultInjectionEnv); spec != nullptr && *spec != '\0') {
#if CUBE3D_TEST_HOOKS
    fault_injection = parse_fault_injection(spec);
    spdlog::warn("{}={}: TEST-ONLY fault injection is on; never set it in production",
                 kFaultInjectionEnv, spec);
#else
    spdlog::warn("{} is ignored: this build has no test hooks (CUBE3D_TEST_HOOKS=OFF)",
                 kFaultInjectionEnv);
#endif
  }
  // Every connection is a descriptor (http.max_connections is 10,000 by default).
  const FileLimit files = raise_open_file_limit();
  if (files.now < static_cast<uint64_t>(config.http.max_connections) + 1024 &&
      (!config.http_listen.empty() || !config.metrics_listen.empty())) {
    spdlog::warn(
        "open-file limit {} (hard limit) is below http.max_connections {} + 1024: "
        "connections beyond it will wait in the kernel's backlog",
        files.now, config.http.max_connections);
  }

  // gRPC first, with health NOT_SERVING, so orchestrators see the process while it loads; the
  // MeshService answers UNAVAILABLE until the scheduler is attached.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  Metrics metrics(config.batching.batch_buckets,
                  BuildInfo{project_version(), git_revision(), config.device, config.dtype});
  peer_log().set_counter(
      [&metrics](std::string_view door, std::string_view kind) { metrics.peer_error(door, kind); });
  // The peer log is the process's and outlives `metrics`: it stops counting into it first.
  struct PeerCounterReset {
    PeerCounterReset() = default;
    PeerCounterReset(const PeerCounterReset&) = delete;
    PeerCounterReset& operator=(const PeerCounterReset&) = delete;
    ~PeerCounterReset() { peer_log().set_counter({}); }
  } const peer_counter_reset;
  const auto load_start = SteadyClock::now();
  const ModelConfig model_config = load_model_config(config.model.config);

  const ProtoAnswerCodec answer_codec;
  Service core(service_options(config, model_config), metrics, answer_codec);
  // Redis (redis.url): the shared job store and the shared cache tier, over one client (its own
  // threads; every call with its deadline) and one subscriber. jobs.store redis needs it at
  // start: a Redis that cannot be reached stops the start, saying why. The cache tier alone
  // does not: its lookups miss until Redis answers.
  const bool redis_jobs = config.jobs.store == "redis";
  const bool redis_cache = config.cache.enabled && config.cache.redis;
  // This process in the job records and cache claims it holds.
  const std::string replica_id = make_job_tag() + make_job_tag();
  std::unique_ptr<RedisClient> redis;
  std::unique_ptr<RedisSubscriber> redis_events;
  if (redis_jobs || redis_cache) {
    RedisObserver observer;
    observer.on_call = [&metrics](const std::string& command, double seconds, bool ok) {
      metrics.redis_call(command, seconds, ok);
    };
    observer.on_state = [&metrics](bool up) { metrics.set_redis_up(up); };
    redis = std::make_unique<RedisClient>(redis_client_options(config), observer);
    const Status reached = redis->check();
    if (!reached.ok() && redis_jobs) {
      throw unavailable(
          "redis.url " + redact_redis_url(config.redis.url) +
          ": cannot reach Redis, which jobs.store: redis needs: " + reached.message());
    }
    if (!reached.ok()) {
      spdlog::warn("redis.url {}: {}; the shared cache tier misses until Redis answers",
                   redact_redis_url(config.redis.url), reached.message());
    }
    redis_events = std::make_unique<RedisSubscriber>(redis_client_options(config));
    spdlog::info("redis: {} (replica {}; jobs {}, cache tier {})",
                 redact_redis_url(config.redis.url), replica_id, redis_jobs ? "shared" : "memory",
                 redis_cache ? "on" : "off");
  }
  std::unique_ptr<RedisResultTier> shared_tier;
  if (redis_cache) {
    RedisResultTierObserver observer;
    observer.on_lookup = [&metrics](const char* result) { metrics.cache_redis_lookup(result); };
    observer.on_waited = [&metrics](bool hit) { metrics.cache_redis_wait(hit); };
    shared_tier = std::make_unique<RedisResultTier>(*redis, *redis_events, core.timers(),
                                                    redis_result_tier_options(config, replica_id),
                                                    std::move(observer));
  }
  // The result cache's store (its dir is checked and indexed here: an unusable cache.dir turns
  // the disk tier off, logged and counted, and the server serves from memory). Declared after the
  // core: it goes first, joining its I/O thread while the core that
  // its lookups call back into still stands.
  std::unique_ptr<ResultCache> cache;
  if (config.cache.enabled) {
    ResultCacheObserver observer;
    observer.on_size = [&metrics](const char* tier, int64_t bytes, int64_t entries) {
      metrics.set_cache_size(tier, bytes, entries);
    };
    observer.on_eviction = [&metrics](const char* tier) { metrics.cache_eviction(tier); };
    observer.on_corrupt = [&metrics] { metrics.cache_corrupt_entry(); };
    observer.on_write_dropped = [&metrics] { metrics.cache_write_dropped(); };
    observer.on_disk_tier = [&metrics](bool up) { metrics.set_cache_disk_tier(up); };
    cache =
        std::make_unique<ResultCache>(config.cache.store, std::move(observer), shared_tier.get());
    core.use_cache(cache.get());
    const ResultCache::Stats stats = cache->stats();
    spdlog::info("result cache: {} MiB in memory{}", config.cache.store.max_bytes >> 20,
                 config.cache.store.dir.empty()
                     ? std::string()
                     : fmt::format(", {} entries ({} MiB) in {}", stats.disk_entries,
                                   stats.disk_bytes >> 20, config.cache.store.dir));
  }
  // Jobs: after the core (the store's timers are the core's), before everything that can end
  // a job (the scheduler, the executor) and the front doors that read them, which go first.
  std::unique_ptr<JobStore> job_store_owner;
  if (redis_jobs) {
    RedisJobStoreOptions options = redis_job_store_options(config);
    options.replica = replica_id;
    RedisJobStoreObserver observer;
    observer.on_takeover = [&metrics](const char* outcome) { metrics.job_takeover(outcome); };
    job_store_owner = std::make_unique<RedisJobStore>(*redis, *redis_events, core.timers(),
                                                      std::move(options), std::move(observer));
  } else {
    job_store_owner = std::make_unique<MemoryJobStore>(config.jobs.limits, core.timers());
  }
  JobStore& job_store = *job_store_owner;
  job_store.on_counts([&metrics](const JobStore::Counts& c) {
    metrics.set_jobs("queued", c.queued);
    metrics.set_jobs("running", c.running);
    metrics.set_jobs("succeeded", c.succeeded);
    metrics.set_jobs("failed", c.failed);
    metrics.set_jobs("cancelled", c.cancelled);
    metrics.set_job_result_bytes(c.result_bytes);
  });
  JobService jobs(core, job_store, job_service_options(config));
  // Every mesh call counted once with the code its client saw (call_outcome.h); calls to
  // unknown methods too.
  const auto count = [&metrics](const std::string& code) { metrics.request_finished(code); };
  // One bound on the calls and streams whose request has not arrived, across both services.
  AwaitingCalls awaiting(config.grpc.max_calls_awaiting_message);
  MeshServiceImpl service(core, awaiting, config.grpc, count, &jobs);
  // The Open Inference Protocol (KServe v2 / Triton) over the same core, on both doors.
  inference::InferenceEndpoint inference_endpoint(core, inference_options(config));
  InferenceServiceImpl inference_service(inference_endpoint, core.timers(), awaiting, config.grpc,
                                         count);
  // API keys and the prompt policy: loaded before the port opens (a bad file stops the start),
  // re-read on SIGHUP; a file broken since keeps what is in force.
  std::unique_ptr<ApiKeys> api_keys;
  if (!config.auth.api_keys_file.empty()) {
    api_keys = std::make_unique<ApiKeys>(load_api_keys(config.auth.api_keys_file));
    core.use_api_keys(api_keys.get());
    spdlog::info("API keys: {} from {}", api_keys->size(), config.auth.api_keys_file);
  }
  std::unique_ptr<PromptPolicy> prompt_policy;
  if (!config.policy.prompt_denylist_file.empty()) {
    prompt_policy = std::make_unique<PromptPolicy>(
        PromptDenylist::load(config.policy.prompt_denylist_file),
        PromptFolding{config.policy.fold_separators, config.policy.fold_digits});
    core.use_prompt_policy(prompt_policy.get());
    spdlog::info("prompt policy: {} denylist patterns from {}", prompt_policy->size(),
                 config.policy.prompt_denylist_file);
  }
  signals.on_reload([&api_keys, &prompt_policy, &config] {
    if (api_keys) {
      try {
        api_keys->replace(load_api_keys(config.auth.api_keys_file));
        spdlog::info("SIGHUP: API keys reloaded: {} from {}", api_keys->size(),
                     config.auth.api_keys_file);
      } catch (const std::exception& e) {
        spdlog::error("SIGHUP: kept the current API keys: {}", e.what());
      }
    }
    if (prompt_policy) {
      try {
        prompt_policy->replace(PromptDenylist::load(config.policy.prompt_denylist_file));
        spdlog::info("SIGHUP: prompt policy reloaded: {} denylist patterns from {}",
                     prompt_policy->size(), config.policy.prompt_denylist_file);
      } catch (const std::exception& e) {
        spdlog::error("SIGHUP: kept the current prompt policy ({} patterns): {}",
                      prompt_policy->size(), e.what());
      }
    }
  });

  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (config.tls.enabled()) {
    // The certificate, key and client CA checked here, before any listener starts (a bad file
    // stops the start naming its key and file, exit 2), and both doors serve these bytes under
    // the one TLS policy (httpd/tls_policy.h; gRPC's cipher list was set in the environment
    // above).
    const http::TlsOptions tls_files{config.tls.cert_file, config.tls.key_file,
                                     config.tls.client_ca_file,
                                     config.tls.client_certificates != "optional"};
    const http::TlsCredentials tls = http::load_tls_files(tls_files);
    const auto now = std::chrono::system_clock::now();
    metrics.set_tls_certificate_expiry_seconds(http::seconds_until_expiry(tls, now));
    if (const auto warning = http::expiry_warning(tls, tls_files, now)) {
      spdlog::warn("{}", *warning);
    } else {
      spdlog::info("TLS: {} ({}), valid for {:.0f} more days", config.tls.cert_file, tls.subject,
                   http::seconds_until_expiry(tls, now) / 86'400);
    }
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({tls.key_pem, tls.chain_pem});
    if (!config.tls.client_ca_file.empty()) {
      // mTLS: client certificates must chain to these roots.
      ssl.pem_root_certs = tls.client_ca_pem;
      ssl.client_certificate_request =
          config.tls.client_certificates == "optional"
              ? GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY
              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    credentials = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  int bound_port = 0;
  builder.AddListeningPort(config.listen, credentials, &bound_port);
  // gRPC sets SO_REUSEPORT by default: a second server on a busy port would start, say
  // "serving" and silently split the traffic with the first. One process per port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  if (!config.reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  builder.RegisterService(&service);
  builder.RegisterService(&inference_service);
  UnknownMethods unknown_methods(count);
  builder.RegisterCallbackGenericService(&unknown_methods);
  // Thread quota, streams per connection, keepalive enforcement, connection age, message sizes.
  apply_grpc_options(builder, config.grpc, config.limits.max_message_bytes);
  const std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    // gRPC gives no reason: the bind is tried again here to learn it ("in use" only when the
    // kernel says EADDRINUSE; the TLS files were checked above).
    const int error = probe_listen(parse_host_port(config.listen, "listen"));
    throw unavailable("listen " + config.listen + ": cannot listen on this address: " +
                      (error != 0 ? listen_failure_reason(error)
                                  : "gRPC could not start a listener there (its log lines above "
                                    "say why)"));
  }
  // The default health service starts out SERVING; not yet.
  set_serving(*server, false);
  spdlog::info("listening on {} (port {}); loading {}", config.listen, bound_port,
               model_config.source);
  // The HTTP/JSON front door over the same core, and the metrics endpoint, also before the
  // model loads: /healthz answers and /readyz says 503 until the scheduler is attached.
  std::unique_ptr<HttpGateway> http;
  if (!config.http_listen.empty() || !config.metrics_listen.empty()) {
    HttpGatewayOptions http_options = http_gateway_options(config);
    http_options.jobs = &jobs;
    http_options.inference = &inference_endpoint;
    if (redis_jobs) http_options.jobs_health = [&job_store] { return job_store.health(); };
    http = std::make_unique<HttpGateway>(core, metrics, http_options);
    spdlog::info("HTTP{} on {}, metrics on {} ({} I/O threads)", http_options.tls ? "S" : "",
                 config.http_listen.empty() ? "off" : config.http_listen,
                 config.metrics_listen.empty() ? "off" : config.metrics_listen,
                 http_options.server.io_threads);
    if (http_options.playground) {
      // The address a person opens (a wildcard host is this machine's loopback for them).
      const std::string host = config.http_listen.starts_with("0.0.0.0:")
                                   ? "127.0.0.1"
                                   : config.http_listen.substr(0, config.http_listen.rfind(':'));
      spdlog::info("playground at {}://{}:{}/ ({} files, {} KiB)",
                   http_options.tls ? "https" : "http", host, http->port(),
                   http_options.playground->paths().size(),
                   http_options.playground->total_bytes() / 1024);
    }
  }

  // The weights' digest (the cache's key, every mesh's provenance) is read beside the load.
  std::future<ModelIdentity> identity = std::async(std::launch::async, [&config, &model_config] {
    const auto start = SteadyClock::now();
    ModelIdentity id = load_model_identity(config, model_config);
    spdlog::info("model {}: weights digest {} ({:.0f} ms)", id.name, id.weights_digest,
                 ms_since(start));
    return id;
  });
  const std::unique_ptr<Engine> engine = Engine::load(model_config, engine_options(config));
  const ModelIdentity model_identity = identity.get();
  if (!engine->text_encoder()) {
    throw invalid_argument(config.source + ": model.clip_model is required for " +
                           model_config.source + " (it has real weights)");
  }

  ExecutorOptions executor_setup = executor_options(config);
  executor_setup.model_name = model_identity.name;
  executor_setup.weights_digest = model_identity.weights_digest;
  executor_setup.server_version = model_identity.server_version;
  executor_setup.on_generated = [&metrics](double ttft, double tpot, int64_t tokens) {
    metrics.observe_ttft_seconds(ttft / 1000.0);
    metrics.observe_tpot_seconds(tpot / 1000.0);
    metrics.tokens_generated(tokens);
  };
  executor_setup.on_admitted = [&metrics](int64_t jobs, double prefill_ms) {
    metrics.jobs_admitted(jobs, prefill_ms / 1000.0);
  };
  executor_setup.on_step = [&metrics](int64_t bucket, int64_t slots) {
    metrics.decode_step(bucket, slots);
  };
  executor_setup.on_active_slots = [&metrics](int64_t slots) { metrics.set_active_slots(slots); };
  executor_setup.on_mesh_wait = [&metrics](double seconds) {
    metrics.observe_mesh_wait_seconds(seconds);
  };
  executor_setup.on_mesh_budget_exceeded = [&metrics] { metrics.mesh_budget_exceeded(); };
  spdlog::info(
      "mesh stage: {} objects at once (mesh.mesh_threads {}), every core shared among them; "
      "budget {} marching-cubes faces (mesh.max_marching_cubes_faces{})",
      executor_setup.mesh_threads,
      config.mesh.mesh_threads == 0 ? std::string("0: auto, the machine's cores")
                                    : std::to_string(config.mesh.mesh_threads),
      config.mesh.pipeline.max_marching_cubes_faces,
      config.mesh.pipeline.max_marching_cubes_faces == 0 ? ": 0, none" : "");
  // A device fault met by a mesh thread goes to the scheduler like one met in a step (null until
  // the scheduler exists, and again once it has stopped).
  std::atomic<Scheduler*> fault_scheduler{nullptr};
  executor_setup.on_device_fault = [&fault_scheduler](const DeviceFault& fault,
                                                      const std::string& request_id) {
    if (Scheduler* const s = fault_scheduler.load()) {
      s->report_device_fault(fault, {request_id});
    } else {
      spdlog::error("request {}: {}", request_id, fault.what());
    }
  };
  executor_setup.faults = fault_injection;
  EngineExecutor executor(*engine, std::move(executor_setup));
  executor.warm_up(config.batching.batch_buckets);
  metrics.set_model_load_seconds(ms_since(load_start) / 1000.0);

  // The first device fault (the scheduler has logged it, stopped admitting and answered the
  // queue): not ready on both front doors at once, counted, then the drain below starts as for
  // SIGTERM, through the signal watcher (a SIGTERM to ourselves), and ends in kExitDeviceFault.
  std::atomic<bool> device_failed{false};
  const auto on_device_fault = [&](const DeviceFault& /*fault*/,
                                   const std::vector<std::string>& /*request_ids*/) {
    device_failed = true;
    metrics.device_fault();
    set_serving(*server, false);
    inference_endpoint.set_draining(true);
    if (http) http->set_device_failed();
    spdlog::warn("device fault: NOT_SERVING; draining what can still answer, then exiting with {}",
                 kExitDeviceFault);
    ::kill(::getpid(), SIGTERM);
  };
  Scheduler scheduler(
      scheduler_config(config), executor,
      [&metrics](int64_t bucket, int64_t jobs) { metrics.batch_started(bucket, jobs); },
      on_device_fault);
  fault_scheduler = &scheduler;
  signals.serving();  // a stop signal now drains (before: exits at once)
  core.attach(&scheduler, model_identity);
  set_serving(*server, true);
  spdlog::info(
      "cube3d-server serving {} on {} (port {}), {} batching, buckets up to {}, metrics {}",
      model_config.source, config.listen, bound_port, to_string(config.batching.mode),
      config.batching.batch_buckets.back(),
      config.metrics_listen.empty() ? "off" : config.metrics_listen);

  std::thread queue_gauge([&] {
    while (!scheduler.draining()) {
      metrics.set_queue_depth(scheduler.queue_depth());
      peer_log().flush();  // the count of a flood of peer-caused lines that has stopped
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });

  const int signal_number = signals.wait_for_stop();
  if (device_failed.load()) {
    spdlog::info("device fault: draining (grace {} s)", config.drain_grace_seconds);
  } else {
    spdlog::info("signal {}: draining (grace {} s)", signal_number, config.drain_grace_seconds);
  }
  const auto drain_deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(config.drain_grace_seconds);
  set_serving(*server, false);
  inference_endpoint.set_draining(true);
  if (http) http->set_draining(true);
  // Long-polls answer now, with their jobs as they are: gRPC's Shutdown waits for every call
  // to finish, and a long-poll would otherwise hold it for up to jobs.max_wait_ms.
  job_store.end_long_polls();
  jobs.set_draining(true);  // no more takeovers here
  scheduler.begin_drain();
  // The scheduler cancels what is still running when the grace runs out; mesh work stops at
  // its next check (between occupancy chunks), so the wait after it is short.
  bool drained = scheduler.drain(std::chrono::seconds(config.drain_grace_seconds));
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      drain_deadline - std::chrono::steady_clock::now());
  drained = executor.wait_idle(std::max(left, std::chrono::milliseconds(2000))) && drained;
  fault_scheduler = nullptr;
  // Calls are done or answering now; both front doors share 5 s to send their last bytes
  // (the HTTP gateway's stop() waits for its answers to finish writing; gRPC's Shutdown
  // cancels what is left at the deadline).
  const auto wind_down = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  if (http) {
    http->stop(std::chrono::duration_cast<std::chrono::milliseconds>(
        wind_down - std::chrono::steady_clock::now()));
  }
  server->Shutdown(std::chrono::system_clock::now() +
                   std::max<std::chrono::steady_clock::duration>(
                       wind_down - std::chrono::steady_clock::now(), std::chrono::seconds(0)));
  queue_gauge.join();
  signals.on_reload({});  // the keys and the policy go before the watcher does
  spdlog::info("stopped ({})", drained ? "all work finished" : "grace period ran out");
  if (device_failed.load()) {
    spdlog::warn("exiting with status {} (device fault) for a restart", kExitDeviceFault);
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    // Without the destructors: the engine's would free device memory on a context that the
    // fault broke (which can hang or abort, hiding the status); the driver reclaims it all.
    std::_Exit(kExitDeviceFault);
  }
  return 0;
}

}  // namespace
}  // namespace cube3d

int main(int argc, char** argv) {
  return cube3d::run_tool("cube3d-server", cube3d::run, argc, argv);
}
