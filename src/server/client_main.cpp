// cube3d-client: asks a cube3d-server for a mesh and writes it to a file whose extension picks
// the format (.glb, .obj, .ply). Streams progress to stderr; exits non-zero with the gRPC
// status on failure.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "cube3d/cli/cli_args.h"
#include "cube3d/core/error.h"
#include "cube3d/server/grpc_status.h"
#include "cube3d/v1/mesh_service.grpc.pb.h"

namespace cube3d {
namespace {

CliArgs make_args() {
  CliArgs args("cube3d-client", "Generate a mesh with a running cube3d-server.");
  args.option("--server", 1, "server address (default 127.0.0.1:50051)", "HOST:PORT")
      .option("--prompt", 1, "text prompt (required)", "S")
      .option("--out", 1, "output file; the extension picks the format: .glb .obj .ply", "F")
      .option("--guidance-scale", 1, "classifier-free guidance scale", "G")
      .option("--top-p", 1, "nucleus sampling mass in (0, 1] (default: greedy)", "P")
      .option("--seed", 1, "sampling seed", "N")
      .option("--bbox", 3, "bounding box proportions (v0.5 models)", "X")
      .option("--resolution-base", 1, "occupancy grid resolution (2^R + 1 per axis)", "R")
      .option("--target-faces", 1, "decimation target", "N")
      .option("--request-id", 1, "request id for the server's logs", "ID")
      .option("--timeout-ms", 1, "deadline (default 600000)", "MS")
      .option("--tokens-out", 1, "also write the shape tokens", "F")
      .option("--no-progress", 0, "no progress bar");
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

void draw_progress(const v1::Progress& p) {
  static const char* stages[] = {"?", "queued", "text", "decoding", "meshing", "done"};
  const int stage = p.stage() >= 0 && p.stage() <= 5 ? p.stage() : 0;
  const int width = 30;
  const double frac =
      p.tokens_total() ? static_cast<double>(p.tokens_done()) / p.tokens_total() : 0.0;
  const int filled = static_cast<int>(frac * width);
  std::fprintf(stderr, "\r[%-*s] %4u/%-4u %-9s", width,
               std::string(static_cast<size_t>(filled), '#').c_str(), p.tokens_done(),
               p.tokens_total(), stages[stage]);
  std::fflush(stderr);
}

int run(int argc, char** argv) {
  CliArgs args = make_args();
  args.parse(argc, argv);
  if (args.help_requested()) {
    std::fputs(args.help().c_str(), stdout);
    return 0;
  }
  if (!args.has("--prompt")) throw invalid_argument("--prompt is required");
  const std::string out = args.get("--out", "mesh.glb");

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
    request.mutable_bounding_box()->set_x(std::stof(v[0]));
    request.mutable_bounding_box()->set_y(std::stof(v[1]));
    request.mutable_bounding_box()->set_z(std::stof(v[2]));
  }
  request.set_request_id(args.get("--request-id"));
  request.set_return_shape_tokens(args.has("--tokens-out"));

  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(-1);
  const auto channel = grpc::CreateCustomChannel(args.get("--server", "127.0.0.1:50051"),
                                                 grpc::InsecureChannelCredentials(), channel_args);
  const auto stub = v1::MeshService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(args.get_int("--timeout-ms", 600000)));
  const bool progress = !args.has("--no-progress");

  auto reader = stub->GenerateMeshStream(&context, request);
  v1::GenerateMeshEvent event;
  v1::GenerateMeshResponse response;
  bool have_result = false;
  while (reader->Read(&event)) {
    if (event.has_progress() && progress) draw_progress(event.progress());
    if (event.has_result()) {
      response = event.result();
      have_result = true;
    }
  }
  if (progress) std::fputc('\n', stderr);
  const grpc::Status status = reader->Finish();
  if (!status.ok()) {
    std::fprintf(stderr, "cube3d-client: %s: %s\n", grpc_code_name(status.error_code()),
                 status.error_message().c_str());
    return 3;
  }
  if (!have_result) throw internal_error("the server closed the stream without a result");

  std::ofstream file(out, std::ios::binary);
  file << response.encoded();
  if (!file) throw invalid_argument("cannot write " + out);
  if (args.has("--tokens-out")) {
    std::ofstream tokens(args.get("--tokens-out"));
    for (int i = 0; i < response.shape_tokens_size(); ++i) {
      tokens << (i ? " " : "") << response.shape_tokens(i);
    }
    tokens << "\n";
  }
  for (const auto& w : response.warnings()) std::fprintf(stderr, "warning: %s\n", w.c_str());
  const auto& t = response.timings();
  std::printf("%s: %u vertices, %u faces (request %s, bucket %u)\n", out.c_str(),
              response.vertex_count(), response.face_count(), response.request_id().c_str(),
              response.batch_bucket());
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
