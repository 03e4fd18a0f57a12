// cube3d-client: asks a cube3d-server for a mesh and writes it to a file whose extension picks
// the format (.glb, .obj, .ply; mesh.glb by default). Shows progress on stderr (a bar on a
// terminal, a line every few seconds otherwise); exits non-zero with the gRPC status on failure.
// --health instead asks grpc.health.v1.Health/Check about cube3d.v1.MeshService and exits 0 only
// when it is SERVING (a container's HEALTHCHECK: docker/Dockerfile). --wait-ready-ms first waits
// for a server that is still loading its model to serve (before a call, or before --health
// answers).
#include <google/protobuf/wrappers.pb.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <random>
#include <string>
#include <thread>

#include "cube3d/api/grpc_status.h"
#include "cube3d/cli/cli_args.h"
#include "cube3d/cli/sampling_flags.h"
#include "cube3d/clients/call_flags.h"
#include "cube3d/clients/call_retry.h"
#include "cube3d/clients/grpc_channel.h"
#include "cube3d/clients/request_sender.h"
#include "cube3d/clients/server_flags.h"
#include "cube3d/core/error.h"
#include "cube3d/core/files.h"
#include "cube3d/v1/mesh_service.grpc.pb.h"

namespace cube3d {
namespace {

constexpr const char* kDefaultOut = "mesh.glb";
// Without a terminal (a log, a CI job) a line per progress event would flood the output: one
// line per stage change, and at most one per this many seconds within a stage.
constexpr double kPlainProgressSeconds = 5.0;
// --health: the service asked about (the server reports it and "" alike), and the deadline when
// --timeout-ms gives none: a probe must answer well within its orchestrator's own timeout.
constexpr const char* kHealthService = v1::MeshService::service_full_name();
constexpr int64_t kHealthTimeoutMs = 3000;
// --wait-ready-ms: at most a day (far past any model's load; a larger value would overflow the
// clock's arithmetic), and no word on stderr for a server that serves within the first moment.
constexpr uint64_t kMaxWaitReadyMs = 86'400'000;
constexpr std::chrono::milliseconds kQuietWait(250);

CliArgs make_args() {
  CliArgs args("cube3d-client", "Generate a mesh with a running cube3d-server.");
  add_server_flags(
      args,
      {.server = std::string("server address: HOST:PORT, [IPV6]:PORT or unix:PATH (not a URL; "
                             "default ") +
                 kDefaultServer +
                 "); several replicas as A:P,B:Q or a name with several addresses, balanced "
                 "round robin",
       .server_metavar = "ADDR",
       .tls = "connect with TLS, checking the server against the system's roots"})
      .option("--health", 0,
              std::string("only check the server's health (grpc.health.v1.Health/Check for ") +
                  kHealthService +
                  ") and exit: 0 when SERVING, 1 otherwise (not serving, unreachable, no answer "
                  "within --timeout-ms, default " +
                  std::to_string(kHealthTimeoutMs) + ")")
      .option("--prompt", 1, "text prompt (required unless --health)", "S")
      .option("--out", 1,
              std::string("output file (default ") + kDefaultOut +
                  " in the current folder); the extension picks the format: .glb .obj .ply",
              "F");
  add_sampling_flags(args,
                     {.guidance_scale = "classifier-free guidance scale", .seed = "sampling seed"});
  args.option("--bbox", 3, "bounding box proportions (v0.5 models)", "X")
      .option("--resolution-base", 1, "occupancy grid resolution (2^R + 1 per axis)", "R")
      .option("--target-faces", 1, "decimation target", "N")
      .option("--request-id", 1,
              "request id for the server's logs (default: a random one, so that a retry is the "
              "same request)",
              "ID");
  add_call_flags(args, {.max_attempts = "attempts when the server is UNAVAILABLE (a replica gone)"})
      .option("--timeout-ms", 1, "deadline (default 600000; with --health 3000)", "MS")
      .option("--wait-ready-ms", 1,
              "first wait up to MS for a replica to report SERVING (a server just started loads "
              "its model before it serves), then call within --timeout-ms; with --health, answer "
              "as soon as it serves within MS (default 0: no wait)",
              "MS")
      .option("--end-user", 1,
              "the end user (player) this call is for, sent as 'end-user-id' metadata: the "
              "key's per_user limits and fair turns apply to it",
              "ID")
      .option("--priority", 1, "interactive (default) or batch: batch work waits behind players",
              "P")
      .option("--tokens-out", 1, "also write the shape tokens", "F")
      .option("--no-progress", 0, "no progress on stderr");
  return args;
}

v1::MeshFormat format_for(const std::string& path) {
  const auto dot = path.rfind('.');
  const std::string ext = dot == std::string::npos ? "" : path.substr(dot);
  if (ext == ".glb") return v1::MESH_FORMAT_GLB;
  if (ext == ".obj") return v1::MESH_FORMAT_OBJ;
  if (ext == ".ply") return v1::MESH_FORMAT_PLY;
  throw invalid_argument("--out " + path + ": the extension must be .glb, .obj or .ply");
}

// 32 random hex digits, like the ids the server makes.
std::string random_request_id() {
  std::random_device entropy;
  char id[40];
  std::snprintf(id, sizeof(id), "%08x%08x%08x%08x", static_cast<unsigned>(entropy()),
                static_cast<unsigned>(entropy()), static_cast<unsigned>(entropy()),
                static_cast<unsigned>(entropy()));
  return id;
}

std::string current_folder() {
  char buffer[4096];
  return ::getcwd(buffer, sizeof buffer) != nullptr ? std::string(buffer) : std::string(".");
}

// The path as the user should look for it: relative paths are shown from the current folder.
std::string absolute(const std::string& path) {
  return !path.empty() && path[0] == '/' ? path : current_folder() + "/" + path;
}

// Fails before the (possibly minutes long) generation when `path` cannot be written: its folder
// is missing or not writable, or the path is a folder. The write itself still reports its own
// failure (a full disk), with the reason.
void check_writable(const std::string& option, const std::string& path) {
  const auto slash = path.rfind('/');
  const std::string folder =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    throw invalid_argument(option + " " + path + ": cannot write in " + folder + ": " +
                           std::strerror(errno));
  }
  if (path_kind(path) == PathKind::kDirectory) {
    throw invalid_argument(option + " " + path + ": cannot write: " + std::strerror(EISDIR));
  }
}

float bbox_value(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const float value = std::strtof(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE) {
    throw invalid_argument("--bbox: expected a number, got '" + text + "'");
  }
  return value;
}

const char* stage_name(const v1::Progress& p) {
  static const char* const stages[] = {"?", "queued", "text", "decoding", "meshing", "done"};
  return stages[p.stage() >= 0 && p.stage() <= 5 ? p.stage() : 0];
}

// Progress on stderr: a bar redrawn in place (\r) on a terminal; plain lines elsewhere, where \r
// would pile up in a log.
class ProgressView {
 public:
  explicit ProgressView(bool enabled)
      : enabled_(enabled), terminal_(enabled && ::isatty(::fileno(stderr)) == 1) {}

  void show(const v1::Progress& p) {
    if (!enabled_) return;
    if (terminal_) {
      draw_bar(p);
    } else {
      const auto now = std::chrono::steady_clock::now();
      if (p.stage() != last_stage_ ||
          std::chrono::duration<double>(now - last_line_).count() >= kPlainProgressSeconds) {
        std::fprintf(stderr, "progress: %s, %u/%u tokens\n", stage_name(p), p.tokens_done(),
                     p.tokens_total());
        last_line_ = now;
        last_stage_ = p.stage();
      }
    }
  }

  // Ends the bar's line, so that what follows starts on its own.
  void finish() {
    if (drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }

 private:
  void draw_bar(const v1::Progress& p) {
    const int width = 30;
    const double frac =
        p.tokens_total() ? static_cast<double>(p.tokens_done()) / p.tokens_total() : 0.0;
    const int filled = static_cast<int>(frac * width);
    std::fprintf(stderr, "\r[%-*s] %4u/%-4u %-9s", width,
                 std::string(static_cast<size_t>(filled), '#').c_str(), p.tokens_done(),
                 p.tokens_total(), stage_name(p));
    std::fflush(stderr);
    drawn_ = true;
  }

  const bool enabled_;
  const bool terminal_;
  bool drawn_ = false;
  int last_stage_ = -1;
  std::chrono::steady_clock::time_point last_line_;
};

// HealthCheckRequest {string service = 1;} and HealthCheckResponse {ServingStatus status = 1;}
// have the wire format of google.protobuf.StringValue and Int32Value (field 1, a string; field
// 1, a varint), so libprotobuf's well-known types stand in for grpc/health/v1/health.proto,
// which Debian's gRPC does not install.
// ServingStatus values are those names' indexes; SERVING is 1.
const char* serving_status_name(int32_t status) {
  static const char* const names[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
  return status >= 0 && status <= 3 ? names[status] : "UNRECOGNIZED";
}

// --api-key's credentials on a call, when there is a key.
void add_authorization(grpc::ClientContext& context, const CliArgs& args) {
  const std::string authorization = bearer_authorization(api_key_from_args(args));
  if (!authorization.empty()) context.AddMetadata("authorization", authorization);
}

// What grpc.health.v1.Health/Check answers about the mesh service, through a probe channel
// (one that reaches a replica whatever its state): the call's status and, when it is OK, the
// serving status.
struct HealthAnswer {
  static constexpr int32_t kServing = 1;  // ServingStatus SERVING
  grpc::Status status;
  int32_t serving_status = 0;
  bool serving() const { return status.ok() && serving_status == kServing; }
};

HealthAnswer ask_health(const CliArgs& args, std::chrono::milliseconds timeout) {
  const auto channel = open_grpc_channel(server_from_args(args), client_tls_from_args(args),
                                         ChannelPurpose::kHealthProbe);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  add_authorization(context, args);

  google::protobuf::StringValue request;  // HealthCheckRequest
  request.set_value(kHealthService);
  google::protobuf::Int32Value response;  // HealthCheckResponse
  std::promise<grpc::Status> done;
  grpc::TemplatedGenericStub<google::protobuf::StringValue, google::protobuf::Int32Value> stub(
      channel);
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status status) { done.set_value(std::move(status)); });
  HealthAnswer answer;
  answer.status = done.get_future().get();
  answer.serving_status = response.value();
  return answer;
}

// --wait-ready-ms, checked: 0 when not given.
std::chrono::milliseconds wait_ready_from_args(const CliArgs& args) {
  const uint64_t ms = args.get_uint("--wait-ready-ms", 0);
  if (ms > kMaxWaitReadyMs) {
    throw invalid_argument("--wait-ready-ms " + std::to_string(ms) + ": at most " +
                           std::to_string(kMaxWaitReadyMs) + " (a day)");
  }
  return std::chrono::milliseconds(ms);
}

// Waits up to `wait` until a replica of `calls` (a kCalls channel) serves; says so on stderr
// when that takes more than a moment. False when none served in time.
bool wait_until_serving(grpc::Channel& calls, const CliArgs& args, std::chrono::milliseconds wait) {
  const auto start = std::chrono::system_clock::now();
  const auto until = start + wait;
  if (wait_for_a_serving_replica(calls, std::min(until, start + kQuietWait))) return true;
  if (std::chrono::system_clock::now() >= until) return false;
  std::fprintf(stderr, "cube3d-client: waiting up to %lld ms for %s to serve %s\n",
               static_cast<long long>(wait.count()), server_from_args(args).c_str(),
               kHealthService);
  return wait_for_a_serving_replica(calls, until);
}

// --health: 0 when the server reports SERVING for the mesh service, 1 for anything else (the
// exit codes a Docker HEALTHCHECK or an exec probe expects); the reason goes to stderr.
int check_health(const CliArgs& args) {
  const std::string address = server_from_args(args);
  if (const auto wait = wait_ready_from_args(args); wait.count() > 0) {
    // The calls' channel is READY only once a replica serves; then the probe says what it is.
    wait_until_serving(*open_grpc_channel(address, client_tls_from_args(args)), args, wait);
  }
  const HealthAnswer answer =
      ask_health(args, std::chrono::milliseconds(args.get_int("--timeout-ms", kHealthTimeoutMs)));
  if (!answer.status.ok()) {
    std::fprintf(stderr, "cube3d-client: health of %s at %s: %s: %s\n", kHealthService,
                 address.c_str(), grpc_code_name(answer.status.error_code()),
                 answer.status.error_message().c_str());
    return 1;
  }
  const char* name = serving_status_name(answer.serving_status);
  if (!answer.serving()) {
    std::fprintf(stderr, "cube3d-client: health of %s at %s: %s\n", kHealthService, address.c_str(),
                 name);
    return 1;
  }
  std::printf("%s at %s: %s\n", kHealthService, address.c_str(), name);
  return 0;
}

// After a call that ended UNAVAILABLE: the calls' channel sends nothing to a replica whose
// health is not SERVING, so gRPC's own words ("backend unhealthy") would be all the user saw of
// a server that is still loading its model. A quick probe says what the server reports, and
// what to do. When the probe gets no answer either, a failed call's UNAVAILABLE already says why
// (kSilent); after --wait-ready-ms nothing has, so the probe's failure is shown (kSay).
enum class WhenUnanswered { kSilent, kSay };

void explain_unavailable(const CliArgs& args, WhenUnanswered when_unanswered) {
  const HealthAnswer answer = ask_health(args, std::chrono::milliseconds(kHealthTimeoutMs));
  const std::string address = server_from_args(args);
  if (!answer.status.ok()) {
    if (when_unanswered == WhenUnanswered::kSay) {
      std::fprintf(stderr, "cube3d-client: %s does not answer: %s: %s\n", address.c_str(),
                   grpc_code_name(answer.status.error_code()),
                   answer.status.error_message().c_str());
    }
    return;
  }
  if (answer.serving()) {
    std::fprintf(stderr, "cube3d-client: %s now reports SERVING: try again\n", address.c_str());
    return;
  }
  std::fprintf(stderr,
               "cube3d-client: %s reports %s for %s: it is still loading its model, draining, or "
               "out after a device fault; cube3d-client --health exits 0 once it serves\n",
               address.c_str(), serving_status_name(answer.serving_status), kHealthService);
}

int run(int argc, char** argv) {
  CliArgs args = make_args();
  args.parse_answering_help(argc, argv);
  if (args.has("--health")) return check_health(args);
  if (!args.has("--prompt")) throw invalid_argument("--prompt is required");
  const std::string out = args.get("--out", kDefaultOut);
  // A --server or --ca at fault fails here, before anything is written.
  const auto channel = open_grpc_channel(server_from_args(args), client_tls_from_args(args));

  v1::GenerateMeshRequest request;
  request.set_prompt(args.get("--prompt"));
  request.set_format(format_for(out));
  if (args.has("--guidance-scale")) {
    request.set_guidance_scale(static_cast<float>(args.get_double("--guidance-scale", 3.0)));
  }
  if (args.has("--top-p")) request.set_top_p(static_cast<float>(args.get_double("--top-p", 1)));
  if (args.has("--seed")) request.set_seed(args.get_uint("--seed", 0));
  if (args.has("--resolution-base")) {
    request.set_resolution_base(static_cast<int32_t>(args.get_int("--resolution-base", 8)));
  }
  if (args.has("--target-faces")) {
    request.set_target_face_count(static_cast<uint32_t>(args.get_uint("--target-faces", 0)));
  }
  if (args.has("--bbox")) {
    const auto v = args.get_all("--bbox");
    request.mutable_bounding_box()->set_x(bbox_value(v[0]));
    request.mutable_bounding_box()->set_y(bbox_value(v[1]));
    request.mutable_bounding_box()->set_z(bbox_value(v[2]));
  }
  // An id of its own when none is given: a retry after UNAVAILABLE is then the same request
  // (a server still running the first attempt joins the retry to it).
  request.set_request_id(args.has("--request-id") ? args.get("--request-id") : random_request_id());
  request.set_return_shape_tokens(args.has("--tokens-out"));
  if (args.has("--priority")) {
    const std::string priority = args.get("--priority");
    if (priority == "batch") {
      request.set_priority(v1::PRIORITY_BATCH);
    } else if (priority == "interactive") {
      request.set_priority(v1::PRIORITY_INTERACTIVE);
    } else {
      throw invalid_argument("--priority " + priority + ": expected interactive or batch");
    }
  }
  check_writable("--out", out);
  if (args.has("--tokens-out")) check_writable("--tokens-out", args.get("--tokens-out"));
  if (const auto wait = wait_ready_from_args(args);
      wait.count() > 0 && !wait_until_serving(*channel, args, wait)) {
    std::fprintf(stderr,
                 "cube3d-client: UNAVAILABLE: no replica of %s reported SERVING within "
                 "--wait-ready-ms %lld\n",
                 server_from_args(args).c_str(), static_cast<long long>(wait.count()));
    explain_unavailable(args, WhenUnanswered::kSay);
    return 3;
  }

  const auto stub = v1::MeshService::NewStub(channel);
  const RetryPolicy retry = retry_policy_from_args(args);
  const auto deadline = std::chrono::system_clock::now() +
                        std::chrono::milliseconds(args.get_int("--timeout-ms", 600000));
  std::mt19937_64 jitter(std::random_device{}());
  ProgressView progress(!args.has("--no-progress"));

  v1::GenerateMeshResponse response;
  bool have_result = false;
  grpc::Status status;
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext context;
    context.set_deadline(deadline);
    add_authorization(context, args);
    if (args.has("--end-user")) context.AddMetadata("end-user-id", args.get("--end-user"));
    auto reader = stub->GenerateMeshStream(&context, request);
    v1::GenerateMeshEvent event;
    bool reached_decoding = false;
    while (reader->Read(&event)) {
      if (event.has_progress()) {
        progress.show(event.progress());
        reached_decoding = reached_decoding || event.progress().stage() == v1::STAGE_DECODING;
      }
      if (event.has_result()) {
        response = event.result();
        have_result = true;
      }
    }
    status = reader->Finish();
    // The request carries an id, so it is idempotent: tried again even past decoding.
    if (!should_retry(retry, attempt, status.error_code(), reached_decoding, true)) break;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::system_clock::now());
    if (left.count() <= 0) break;
    const auto wait = std::min(retry_backoff(retry, attempt, jitter), left);
    progress.finish();
    std::fprintf(stderr,
                 "cube3d-client: UNAVAILABLE: %s; trying again in %lld ms (attempt %d of %d)\n",
                 status.error_message().c_str(), static_cast<long long>(wait.count()), attempt + 1,
                 retry.max_attempts);
    std::this_thread::sleep_for(wait);
  }
  progress.finish();
  if (!status.ok()) {
    std::fprintf(stderr, "cube3d-client: %s: %s\n", grpc_code_name(status.error_code()),
                 status.error_message().c_str());
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      explain_unavailable(args, WhenUnanswered::kSilent);
    }
    return 3;
  }
  if (!have_result) throw internal_error("the server closed the stream without a result");

  // write_file says why a write failed ("cannot write F: No space left on device").
  write_file(out, response.encoded());
  if (args.has("--tokens-out")) {
    std::string tokens;
    for (int i = 0; i < response.shape_tokens_size(); ++i) {
      if (i > 0) tokens += ' ';
      tokens += std::to_string(response.shape_tokens(i));
    }
    write_file(args.get("--tokens-out"), tokens + "\n");
  }
  for (const auto& w : response.warnings()) std::fprintf(stderr, "warning: %s\n", w.c_str());
  const auto& t = response.timings();
  std::printf("wrote %s (%zu bytes): %u vertices, %u faces (request %s, bucket %u)\n",
              absolute(out).c_str(), response.encoded().size(), response.vertex_count(),
              response.face_count(), response.request_id().c_str(), response.batch_bucket());
  if (args.has("--tokens-out")) {
    std::printf("wrote %s: %d shape tokens\n", absolute(args.get("--tokens-out")).c_str(),
                response.shape_tokens_size());
  }
  std::printf(
      "queue %.1f ms | text %.1f ms | prefill %.1f ms | decode %.1f ms (TPOT %.3f ms) | "
      "mesh %.1f ms | total %.1f ms\n",
      t.queue_ms(), t.text_encoding_ms(), t.prefill_ms(), t.decode_ms(), t.tpot_ms(), t.mesh_ms(),
      t.total_ms());
  return 0;
}

}  // namespace
}  // namespace cube3d

int main(int argc, char** argv) {
  return cube3d::run_tool("cube3d-client", cube3d::run, argc, argv);
}
