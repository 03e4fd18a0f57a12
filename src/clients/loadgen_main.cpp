// cube3d-loadgen: drives a cube3d-server with an open-loop (Poisson arrivals at --rate) or a
// closed-loop (--concurrency workers) load of streaming GenerateMesh requests, over gRPC or
// HTTP (--protocol), and reports the time to first token, end-to-end latency, the server's
// queue time, throughput and errors by gRPC status code. This file reads the flags and prints;
// the load shapes are load_driver.h, the protocols grpc_sender.h and http_sender.h, the report
// load_report.h.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cube3d/cli/cli_args.h"
#include "cube3d/cli/sampling_flags.h"
#include "cube3d/clients/call_flags.h"
#include "cube3d/clients/load_driver.h"
#include "cube3d/clients/load_report.h"
#include "cube3d/clients/prompt_mix.h"
#include "cube3d/clients/request_plan.h"
#include "cube3d/clients/request_sender.h"
#include "cube3d/clients/server_flags.h"
#include "cube3d/core/error.h"
#include "cube3d/core/logging.h"

namespace cube3d {
namespace {

constexpr int64_t kDefaultDeadlineMs = 600000;  // cube3d-client's default

// Small game objects, so that a default run looks like the traffic the server is meant for.
const std::vector<std::string> kBuiltinPrompts = {
    "a wooden treasure chest with iron bands",
    "a medieval longsword with a leather grip",
    "a red health potion in a round glass bottle",
    "a low-poly pine tree",
    "a stone well with a wooden roof",
    "a sci-fi supply crate",
    "a round wooden shield with a metal rim",
    "a wizard's staff topped with a crystal",
    "an oak barrel with two hoops",
    "a small cartoon mushroom house",
};

CliArgs make_args() {
  CliArgs args("cube3d-loadgen",
               "Load-test a running cube3d-server with streaming GenerateMesh requests, over\n"
               "gRPC or HTTP.\n"
               "\n"
               "Protocol (--protocol, default grpc; same flags, same report either way):\n"
               "  grpc   MeshService.GenerateMeshStream; --server is the gRPC listen address,\n"
               "         or several (a:P,b:Q; or a name with several addresses, such as a\n"
               "         headless Service), balanced round robin. All requests share one\n"
               "         channel (calls multiplexed on one HTTP/2 connection per server). A\n"
               "         request that fails UNAVAILABLE (a replica gone) is tried again, on\n"
               "         another replica when there is one, with backoff, within its deadline,\n"
               "         up to --max-attempts; each request carries a request_id of its own\n"
               "         (lg-<run>-<i>), so a retry of one that reached decoding is the same\n"
               "         request. The report counts the retried requests.\n"
               "  http   POST /v1/meshes:generateStream (the request as JSON, the answer as\n"
               "         text/event-stream); --server is the http_listen address. The deadline\n"
               "         goes in X-Request-Timeout-Ms, the key in 'Authorization: Bearer'.\n"
               "         Each closed-loop worker keeps one keep-alive connection; the open loop\n"
               "         reuses idle connections and opens one more whenever all are busy.\n"
               "TLS (--tls, --ca, --server-name; as cube3d-client's): gRPC over TLS, or HTTPS.\n"
               "Over HTTPS a failed handshake (an unknown CA, a certificate for another name)\n"
               "fails its request UNAVAILABLE; the first one's reason is logged on stderr.\n"
               "\n"
               "Load shape (exactly one):\n"
               "  --rate R          open loop: Poisson arrivals, R requests/s on average\n"
               "                    (exponential gaps, seeded by --arrival-seed); every request\n"
               "                    runs on its own thread, so slow answers never delay sending\n"
               "  --concurrency N   closed loop: N workers, each sending its next request when\n"
               "                    the previous one finished\n"
               "Bounds (at least one): --requests N and/or --duration S; sending stops at the\n"
               "first reached, then every sent request is awaited (bounded by its deadline).\n"
               "--warmup N requests run first, in the same shape, and are left out of the report.\n"
               "\n"
               "Per request: ttft = send -> first DECODING progress event; e2e = send -> final\n"
               "status (HTTP: the end of the answer); queue = the server's Timings.queue_ms.\n"
               "Latencies cover OK requests; percentiles interpolate linearly between closest\n"
               "ranks (numpy's default). Failures count by gRPC code name (HTTP: the error\n"
               "body's status; no connection UNAVAILABLE, the deadline passing on the client\n"
               "DEADLINE_EXCEEDED); a stream that ends without a result is NO_RESULT.\n"
               "Prompts (--prompt-mix):\n"
               "  fixed        request i (warm-up first, from 0) uses prompt i mod the prompt\n"
               "               count and seed --seed + i (the default)\n"
               "  zipf:N[:S]   N distinct prompts, '<prompt> #k' for k = 1..N over the prompts\n"
               "               (built-in or --prompts) in turn; each request draws prompt k with\n"
               "               probability proportional to 1/k^S (S default 1), seeded by --seed,\n"
               "               and gets seed --seed + k - 1, so a repeated prompt is an identical\n"
               "               request (one a result cache can answer)\n"
               "The report counts OK answers by the server's cache status: hit, miss, coalesced,\n"
               "bypass, or unknown when the answer says none.\n"
               "\n"
               "Exit status: 0 when the run completed (even with failed requests), 2 on a usage\n"
               "error, 1 when every measured request failed with UNAVAILABLE (no server).");
  args.option("--protocol", 1, "grpc or http (default grpc)", "P");
  add_server_flags(
      args, {.server = std::string("server address: the gRPC or the HTTP listener (default ") +
                       kDefaultServer + ")",
             .server_metavar = "HOST:PORT",
             .tls = "connect with TLS (gRPC over TLS; HTTP: HTTPS), checking the server "
                    "against the system's roots"})
      .option("--rate", 1, "open loop: mean arrival rate in requests per second", "R")
      .option("--arrival-seed", 1, "open loop: seed of the arrival times (default 1)", "N")
      .option("--concurrency", 1, "closed loop: number of workers", "N")
      .option("--requests", 1, "measured requests to send (after the warm-up)", "N")
      .option("--duration", 1, "stop sending after this many seconds of measuring", "S")
      .option("--warmup", 1, "requests sent first and left out of the report (default 0)", "N")
      .option("--prompts", 1, "prompts, one per line (blank lines skipped); default: built-in",
              "FILE")
      .option("--resolution-base", 1, "occupancy grid resolution (default: the server's)", "R")
      .option("--format", 1, "mesh format: glb, obj, ply or raw (default: the server's)", "F");
  add_sampling_flags(args,
                     {.guidance_scale = "classifier-free guidance scale (default: the server's)",
                      .seed = "base sampling seed (default 0); fixed mix: request i gets seed + i; "
                              "zipf: also the draw's seed"});
  args.option("--prompt-mix", 1, "fixed (default), zipf:N or zipf:N:S (see above)", "MIX")
      .option("--bypass-cache", 0,
              "ask the server to compute every answer afresh (bypass_cache): no cache hits")
      .option("--deadline-ms", 1, "deadline of each request, from its send (default 600000)", "MS");
  add_call_flags(args, {.max_attempts = "gRPC: attempts per request when it fails UNAVAILABLE"})
      .option("--json", 1, "also write the report as JSON", "FILE")
      .option("--per-request-csv", 1,
              "also write a CSV line per measured request (index, send offset, status, "
              "ttft, e2e, queue)",
              "FILE");
  return args;
}

std::vector<std::string> read_prompts(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw not_found("--prompts " + path + ": cannot read the file");
  std::vector<std::string> prompts;
  for (std::string line; std::getline(file, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // files written on Windows
    if (line.find_first_not_of(" \t") != std::string::npos) prompts.push_back(line);
  }
  if (file.bad()) throw invalid_argument("--prompts " + path + ": read error");
  if (prompts.empty()) throw invalid_argument("--prompts " + path + ": no prompts in the file");
  return prompts;
}

v1::MeshFormat parse_format(const std::string& name) {
  if (name == "glb") return v1::MESH_FORMAT_GLB;
  if (name == "obj") return v1::MESH_FORMAT_OBJ;
  if (name == "ply") return v1::MESH_FORMAT_PLY;
  if (name == "raw") return v1::MESH_FORMAT_RAW;
  throw invalid_argument("--format: expected glb, obj, ply or raw, got '" + name + "'");
}

double positive_double(const CliArgs& args, const std::string& name) {
  const double v = args.get_double(name, 0);
  if (!(v > 0) || !std::isfinite(v)) {
    throw invalid_argument(name + ": expected a positive number, got '" + args.get(name) + "'");
  }
  return v;
}

uint64_t positive_uint(const CliArgs& args, const std::string& name) {
  const uint64_t v = args.get_uint(name, 0);
  if (v == 0) throw invalid_argument(name + ": expected a positive integer, got 0");
  return v;
}

void write_file(const std::string& flag, const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
  if (!file) throw invalid_argument(flag + " " + path + ": cannot write the file");
}

// What the flags ask for.
struct Settings {
  Protocol protocol = Protocol::kGrpc;
  LoadConfig config;
  RequestPlan plan;
  SenderOptions sender;
};

void read_load_shape(const CliArgs& args, LoadConfig& config) {
  if (args.has("--rate") == args.has("--concurrency")) {
    throw invalid_argument(
        "give exactly one of --rate (open loop) and --concurrency (closed loop)");
  }
  config.open_loop = args.has("--rate");
  if (config.open_loop) {
    config.rate_rps = positive_double(args, "--rate");
    config.arrival_seed = args.get_uint("--arrival-seed", 1);
  } else {
    if (args.has("--arrival-seed")) throw invalid_argument("--arrival-seed needs --rate");
    config.concurrency = positive_uint(args, "--concurrency");
  }
  if (!args.has("--requests") && !args.has("--duration")) {
    throw invalid_argument("give --requests and/or --duration (the run needs a bound)");
  }
  if (args.has("--requests")) config.max_requests = positive_uint(args, "--requests");
  if (args.has("--duration")) config.max_duration_s = positive_double(args, "--duration");
  config.warmup = args.get_uint("--warmup", 0);
  config.deadline_ms = args.get_int("--deadline-ms", kDefaultDeadlineMs);
  if (config.deadline_ms <= 0) throw invalid_argument("--deadline-ms: expected a positive number");
}

void read_prompt_mix(const CliArgs& args, LoadConfig& config, RequestPlan& plan) {
  plan.prompts = kBuiltinPrompts;
  config.prompts_source = "built-in";
  if (args.has("--prompts")) {
    plan.prompts = read_prompts(args.get("--prompts"));
    config.prompts_source = args.get("--prompts");
  }
  config.base_seed = args.get_uint("--seed", 0);
  plan.base_seed = config.base_seed;
  config.prompt_mix = parse_prompt_mix(args.get("--prompt-mix", "fixed"));
  if (config.prompt_mix.kind == PromptMix::Kind::kZipf) {
    plan.zipf.emplace(config.prompt_mix.distinct, config.prompt_mix.exponent);
    plan.prompts = zipf_prompts(plan.prompts, config.prompt_mix.distinct);
    plan.mix_seed = config.base_seed;
  }
  config.prompt_count = plan.prompts.size();
}

void read_request_fields(const CliArgs& args, LoadConfig& config, RequestPlan& plan) {
  read_prompt_mix(args, config, plan);
  v1::GenerateMeshRequest& request = plan.request_template;
  if (args.has("--resolution-base")) {
    config.resolution_base = args.get_int("--resolution-base", 0);
    request.set_resolution_base(static_cast<int32_t>(*config.resolution_base));
  }
  if (args.has("--format")) {
    config.format = args.get("--format");
    request.set_format(parse_format(*config.format));
  }
  if (args.has("--guidance-scale")) {
    config.guidance_scale = args.get_double("--guidance-scale", 0);
    request.set_guidance_scale(static_cast<float>(*config.guidance_scale));
  }
  if (args.has("--top-p")) {
    config.top_p = args.get_double("--top-p", 1);
    request.set_top_p(static_cast<float>(*config.top_p));
  }
  config.bypass_cache = args.has("--bypass-cache");
  request.set_bypass_cache(config.bypass_cache);
}

Settings read_settings(const CliArgs& args) {
  Settings s;
  s.protocol = parse_protocol(args.get("--protocol", "grpc"));
  s.config.protocol = protocol_name(s.protocol);
  s.config.server = server_from_args(args);
  read_load_shape(args, s.config);
  read_request_fields(args, s.config, s.plan);
  s.sender.server = s.config.server;
  s.sender.deadline_ms = s.config.deadline_ms;
  s.sender.api_key = api_key_from_args(args);
  s.sender.tls = client_tls_from_args(args);
  s.sender.retry = retry_policy_from_args(args);
  // Every request's own id: a retry is then the same request (the server joins it to the first
  // attempt when that still runs), and the server's log names the run.
  std::random_device entropy;
  char run[16];
  std::snprintf(run, sizeof(run), "%08x", static_cast<unsigned>(entropy()));
  s.plan.request_id_prefix = std::string("lg-") + run + "-";
  return s;
}

void report_unreachable(const LoadConfig& config, const char* which) {
  // A server that listens but still loads its model, or drains, fails every call UNAVAILABLE
  // too (over gRPC the health-checked channel sends it none): say so rather than only
  // "unreachable", and where to look.
  const char* where =
      config.protocol == "http" ? "its /readyz says why" : "cube3d-client --health shows it";
  std::fprintf(stderr,
               "cube3d-loadgen: %s is unreachable over %s, or not serving (still loading its "
               "model, or draining: %s): every %srequest failed with UNAVAILABLE\n",
               config.server.c_str(), config.protocol.c_str(), where, which);
}

int run(int argc, char** argv) {
  CliArgs args = make_args();
  args.parse_answering_help(argc, argv);
  setup_logging("warn");  // the senders' warnings (a failed TLS handshake) on stderr
  const Settings settings = read_settings(args);
  const LoadConfig& config = settings.config;
  LoadDriver driver(config, settings.plan, make_sender_factory(settings.protocol, settings.sender));
  if (config.warmup > 0) {
    std::fprintf(stderr, "cube3d-loadgen: warm-up: %llu request(s) over %s\n",
                 static_cast<unsigned long long>(config.warmup), config.protocol.c_str());
    // The warm-up draws its arrivals from the next seed, so the measured schedule is the same
    // with or without it.
    const PhaseResult warm = driver.run_phase(0, config.warmup, 0, config.arrival_seed + 1);
    if (server_unreachable(summarize_run(config, warm.records, warm.wall_s))) {
      report_unreachable(config, "warm-up ");
      return 1;
    }
  }
  std::fprintf(stderr, "cube3d-loadgen: measuring\n");
  const PhaseResult measured = driver.run_phase(config.warmup, config.max_requests,
                                                config.max_duration_s, config.arrival_seed);
  const LoadReport report = summarize_run(config, measured.records, measured.wall_s);

  std::fputs(format_report_table(config, report).c_str(), stdout);
  std::fflush(stdout);
  if (args.has("--json")) write_file("--json", args.get("--json"), report_json(config, report));
  if (args.has("--per-request-csv")) {
    write_file("--per-request-csv", args.get("--per-request-csv"), records_csv(measured.records));
  }
  if (server_unreachable(report)) {
    report_unreachable(config, "");
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace cube3d

int main(int argc, char** argv) {
  return cube3d::run_tool("cube3d-loadgen", cube3d::run, argc, argv);
}
