// cube3d-loadgen: drives a cube3d-server with an open-loop (Poisson arrivals at --rate) or a
// closed-loop (--concurrency workers) load of streaming GenerateMesh requests, and reports the
// time to first token, end-to-end latency, the server's queue time, throughput and errors by
// gRPC status code. Everything but the RPCs lives in load_report.cpp.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cube3d/cli/cli_args.h"
#include "cube3d/core/error.h"
#include "cube3d/server/grpc_status.h"
#include "cube3d/server/load_report.h"
#include "cube3d/v1/mesh_service.grpc.pb.h"

namespace cube3d {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kDefaultServer = "127.0.0.1:50051";  // cube3d-client's default
constexpr int64_t kDefaultDeadlineMs = 600000;             // cube3d-client's default

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
               "Load-test a running cube3d-server with streaming GenerateMesh requests.\n"
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
               "status; queue = the server's Timings.queue_ms. Latencies cover OK requests;\n"
               "percentiles interpolate linearly between closest ranks (numpy's default).\n"
               "Request i (warm-up first, from 0) uses prompt i mod the prompt count and seed\n"
               "--seed + i.\n"
               "\n"
               "Exit status: 0 when the run completed (even with failed requests), 2 on a usage\n"
               "error, 1 when every measured request failed with UNAVAILABLE (no server).");
  args.option("--server", 1, std::string("server address (default ") + kDefaultServer + ")",
              "HOST:PORT")
      .option("--rate", 1, "open loop: mean arrival rate in requests per second", "R")
      .option("--arrival-seed", 1, "open loop: seed of the arrival times (default 1)", "N")
      .option("--concurrency", 1, "closed loop: number of workers", "N")
      .option("--requests", 1, "measured requests to send (after the warm-up)", "N")
      .option("--duration", 1, "stop sending after this many seconds of measuring", "S")
      .option("--warmup", 1, "requests sent first and left out of the report (default 0)", "N")
      .option("--prompts", 1, "prompts, one per line (blank lines skipped); default: built-in",
              "FILE")
      .option("--resolution-base", 1, "occupancy grid resolution (default: the server's)", "R")
      .option("--format", 1, "mesh format: glb, obj, ply or raw (default: the server's)", "F")
      .option("--guidance-scale", 1, "classifier-free guidance scale (default: the server's)", "G")
      .option("--top-p", 1, "nucleus sampling mass in (0, 1] (default: greedy)", "P")
      .option("--seed", 1, "base sampling seed; request i gets seed + i (default 0)", "N")
      .option("--deadline-ms", 1, "gRPC deadline of each request (default 600000)", "MS")
      .option("--api-key", 1, "API key, sent as 'authorization: Bearer <key>'", "KEY")
      .env("CUBE3D_API_KEY")
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

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// Sends requests and measures them; shared by every sending thread (the stub is thread-safe).
class Driver {
 public:
  Driver(const std::string& server, LoadConfig config, std::vector<std::string> prompts,
         v1::GenerateMeshRequest request_template, std::string api_key)
      : config_(std::move(config)),
        prompts_(std::move(prompts)),
        template_(std::move(request_template)),
        authorization_(api_key.empty() ? "" : "Bearer " + api_key) {
    grpc::ChannelArguments channel_args;
    channel_args.SetMaxReceiveMessageSize(-1);  // a large mesh is a large reply
    stub_ = v1::MeshService::NewStub(
        grpc::CreateCustomChannel(server, grpc::InsecureChannelCredentials(), channel_args));
  }

  // Runs one phase in the configured shape: request `first + i` for i = 0, 1, ... until
  // max_requests (0: no limit) or max_duration_s (0: none); waits for all of them. Returns the
  // records in index order and the phase's wall time.
  std::vector<RequestRecord> run_phase(uint64_t first, uint64_t max_requests, double max_duration_s,
                                       uint64_t arrival_seed, double& wall_s) const {
    const auto start = Clock::now();
    std::vector<RequestRecord> records =
        config_.open_loop ? open_loop(first, max_requests, max_duration_s, arrival_seed, start)
                          : closed_loop(first, max_requests, max_duration_s, start);
    wall_s = seconds_between(start, Clock::now());
    return records;
  }

 private:
  std::vector<RequestRecord> open_loop(uint64_t first, uint64_t max_requests, double max_duration_s,
                                       uint64_t arrival_seed, Clock::time_point start) const {
    const std::vector<double> schedule =
        poisson_schedule(config_.rate_rps, arrival_seed, max_requests, max_duration_s);
    std::vector<RequestRecord> records(schedule.size());
    const auto done = std::make_unique<std::atomic<bool>[]>(schedule.size());  // all false
    {
      // A thread per request: the sender only sleeps until the next arrival, whatever the
      // server does. The jthreads join when the vector goes, also if a later spawn throws.
      std::vector<std::jthread> in_flight;
      in_flight.reserve(schedule.size());
      size_t joined = 0;
      for (size_t i = 0; i < schedule.size(); ++i) {
        std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(schedule[i])));
        in_flight.emplace_back([this, &records, &done, i, first, start] {
          records[i] = send(first + i, start);
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

  std::vector<RequestRecord> closed_loop(uint64_t first, uint64_t max_requests,
                                         double max_duration_s, Clock::time_point start) const {
    const auto stop_sending = start + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(max_duration_s));
    std::atomic<uint64_t> next{0};
    std::mutex mutex;
    std::vector<RequestRecord> records;
    {
      std::vector<std::jthread> workers;
      for (uint64_t w = 0; w < config_.concurrency; ++w) {
        workers.emplace_back([&] {
          for (;;) {
            // The time check comes before taking an index, so the indices stay contiguous.
            if (max_duration_s > 0 && Clock::now() >= stop_sending) return;
            const uint64_t i = next.fetch_add(1);
            if (max_requests > 0 && i >= max_requests) return;
            RequestRecord record = send(first + i, start);
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

  // One streaming request, request number `global` of the run (warm-up included).
  RequestRecord send(uint64_t global, Clock::time_point phase_start) const {
    v1::GenerateMeshRequest request = template_;
    request.set_prompt(prompts_[global % prompts_.size()]);
    request.set_seed(config_.base_seed + global);

    RequestRecord record;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(config_.deadline_ms));
    if (!authorization_.empty()) context.AddMetadata("authorization", authorization_);
    const auto sent = Clock::now();
    record.send_offset_s = seconds_between(phase_start, sent);
    const auto reader = stub_->GenerateMeshStream(&context, request);
    v1::GenerateMeshEvent event;
    bool have_result = false;
    double queue_ms = 0;
    while (reader->Read(&event)) {
      if (event.has_progress() && !record.ttft_ms &&
          event.progress().stage() == v1::STAGE_DECODING) {
        record.ttft_ms = seconds_between(sent, Clock::now()) * 1000.0;
      }
      if (event.has_result()) {
        have_result = true;
        queue_ms = event.result().timings().queue_ms();
      }
    }
    const grpc::Status status = reader->Finish();
    record.e2e_ms = seconds_between(sent, Clock::now()) * 1000.0;
    record.status = grpc_code_name(status.error_code());
    // A stream that ends OK without a result is a server bug; it must not count as served.
    if (status.ok() && !have_result) record.status = "NO_RESULT";
    if (record.status == "OK") record.queue_ms = queue_ms;
    return record;
  }

  LoadConfig config_;
  std::vector<std::string> prompts_;
  v1::GenerateMeshRequest template_;
  std::string authorization_;  // "Bearer <key>" or empty
  std::unique_ptr<v1::MeshService::Stub> stub_;
};

void write_file(const std::string& flag, const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
  if (!file) throw invalid_argument(flag + " " + path + ": cannot write the file");
}

int run(int argc, char** argv) {
  CliArgs args = make_args();
  args.parse(argc, argv);
  if (args.help_requested()) {
    std::fputs(args.help().c_str(), stdout);
    return 0;
  }

  LoadConfig config;
  config.server = args.get("--server", kDefaultServer);
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

  std::vector<std::string> prompts = kBuiltinPrompts;
  config.prompts_source = "built-in";
  if (args.has("--prompts")) {
    prompts = read_prompts(args.get("--prompts"));
    config.prompts_source = args.get("--prompts");
  }
  config.prompt_count = prompts.size();

  v1::GenerateMeshRequest request_template;
  if (args.has("--resolution-base")) {
    config.resolution_base = args.get_int("--resolution-base", 0);
    request_template.set_resolution_base(static_cast<int32_t>(*config.resolution_base));
  }
  if (args.has("--format")) {
    config.format = args.get("--format");
    request_template.set_format(parse_format(*config.format));
  }
  if (args.has("--guidance-scale")) {
    config.guidance_scale = args.get_double("--guidance-scale", 0);
    request_template.set_guidance_scale(static_cast<float>(*config.guidance_scale));
  }
  if (args.has("--top-p")) {
    config.top_p = args.get_double("--top-p", 1);
    request_template.set_top_p(static_cast<float>(*config.top_p));
  }
  config.base_seed = args.get_uint("--seed", 0);

  const Driver driver(config.server, config, prompts, request_template, args.get("--api-key"));
  if (config.warmup > 0) {
    std::fprintf(stderr, "cube3d-loadgen: warm-up: %llu request(s)\n",
                 static_cast<unsigned long long>(config.warmup));
    double wall_s = 0;
    // The warm-up draws its arrivals from the next seed, so the measured schedule is the same
    // with or without it.
    const auto warm = driver.run_phase(0, config.warmup, 0, config.arrival_seed + 1, wall_s);
    if (server_unreachable(summarize_run(config, warm, wall_s))) {
      std::fprintf(stderr,
                   "cube3d-loadgen: %s is unreachable: every warm-up request failed "
                   "with UNAVAILABLE\n",
                   config.server.c_str());
      return 1;
    }
  }
  std::fprintf(stderr, "cube3d-loadgen: measuring\n");
  double wall_s = 0;
  const std::vector<RequestRecord> records = driver.run_phase(
      config.warmup, config.max_requests, config.max_duration_s, config.arrival_seed, wall_s);
  const LoadReport report = summarize_run(config, records, wall_s);

  std::fputs(format_report_table(config, report).c_str(), stdout);
  std::fflush(stdout);
  if (args.has("--json")) write_file("--json", args.get("--json"), report_json(config, report));
  if (args.has("--per-request-csv")) {
    write_file("--per-request-csv", args.get("--per-request-csv"), records_csv(records));
  }
  if (server_unreachable(report)) {
    std::fprintf(stderr,
                 "cube3d-loadgen: %s is unreachable: every request failed with "
                 "UNAVAILABLE\n",
                 config.server.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace cube3d

int main(int argc, char** argv) {
  return cube3d::run_tool("cube3d-loadgen", cube3d::run, argc, argv);
}
