// What an HTTP mesh call is answered with, by Accept and the body's format: JSON, the mesh file,
// or a PNG picture of the mesh; and the PNG's ?size=.
#include "cube3d/server/http/content_negotiation.h"

#include <gtest/gtest.h>

#include <string>

#include "cube3d/server/http/http_error.h"

namespace cube3d::http {
namespace test_content_negotiation {

using Kind = Negotiated::Kind;

struct Case {
  Negotiated answer;
  v1::MeshFormat generated;  // the request's format afterwards
};

Case negotiated(const std::string& accept, v1::MeshFormat body = v1::MESH_FORMAT_UNSPECIFIED) {
  v1::GenerateMeshRequest request;
  if (body != v1::MESH_FORMAT_UNSPECIFIED) request.set_format(body);
  const Negotiated answer = negotiate(accept, request);
  return {answer, request.format()};
}

TEST(ContentNegotiation, ImagePngIsAPictureOfARawMesh) {
  for (const char* accept : {"image/png", "image/*", "IMAGE/PNG;q=0.9",
                             "application/json;q=0.1, "
                             "image/png"}) {
    const Case c = negotiated(accept);
    EXPECT_EQ(c.answer.kind, Kind::kPng) << accept;
    EXPECT_EQ(c.generated, v1::MESH_FORMAT_RAW) << accept;
    EXPECT_FALSE(c.answer.ignored_format) << accept;
    EXPECT_FALSE(c.answer.file()) << accept;
  }
  // Not asked for: JSON, as before (*/* is JSON, not a picture).
  for (const char* accept : {"", "*/*", "application/json", "image/png;q=0", "image/jpeg"}) {
    const Case c = negotiated(accept);
    EXPECT_EQ(c.answer.kind, Kind::kJson) << accept;
    EXPECT_EQ(c.generated, v1::MESH_FORMAT_UNSPECIFIED) << accept;
  }
  // A RAW body drawn: nothing set aside.
  const Case raw = negotiated("image/png", v1::MESH_FORMAT_RAW);
  EXPECT_EQ(raw.answer.kind, Kind::kPng);
  EXPECT_FALSE(raw.answer.ignored_format);
}

TEST(ContentNegotiation, TheMostPreferredAnswerWins) {
  // No format in the body: the first of the named types.
  EXPECT_EQ(negotiated("image/png, model/obj").answer.kind, Kind::kPng);
  Case c = negotiated("model/obj, image/png");
  EXPECT_EQ(c.answer.kind, Kind::kFile);
  EXPECT_EQ(c.answer.file(), v1::MESH_FORMAT_OBJ);
  EXPECT_EQ(c.generated, v1::MESH_FORMAT_OBJ);
  c = negotiated("model/obj;q=0.5, image/png");
  EXPECT_EQ(c.answer.kind, Kind::kPng);
  EXPECT_EQ(c.generated, v1::MESH_FORMAT_RAW);
  // A named type beats JSON, whatever their weights (as the mesh types always did).
  EXPECT_EQ(negotiated("application/json, image/png;q=0.2").answer.kind, Kind::kPng);
}

TEST(ContentNegotiation, TheBodysFormatIsSetAsideOnlyForAPicture) {
  // The body's file among Accept's types, ranked above the picture: that file.
  Case c = negotiated("model/obj, image/png", v1::MESH_FORMAT_OBJ);
  EXPECT_EQ(c.answer.kind, Kind::kFile);
  EXPECT_EQ(c.generated, v1::MESH_FORMAT_OBJ);
  // Ranked below it, or not named (another mesh type is, or none): the picture, the format set
  // aside (and said so).
  for (const char* accept : {"image/png, model/obj", "image/png", "model/gltf-binary, image/png",
                             "model/gltf-binary, image/png, application/json"}) {
    c = negotiated(accept, v1::MESH_FORMAT_OBJ);
    EXPECT_EQ(c.answer.kind, Kind::kPng) << accept;
    EXPECT_EQ(c.answer.ignored_format, v1::MESH_FORMAT_OBJ) << accept;
    EXPECT_EQ(c.generated, v1::MESH_FORMAT_RAW) << accept;
  }
  // Without image/png the rules are the file types' own: JSON when it will do, else 406.
  c = negotiated("model/gltf-binary, application/json", v1::MESH_FORMAT_OBJ);
  EXPECT_EQ(c.answer.kind, Kind::kJson);
  EXPECT_EQ(c.generated, v1::MESH_FORMAT_OBJ);
  try {
    negotiated("model/gltf-binary", v1::MESH_FORMAT_OBJ);
    FAIL() << "no 406";
  } catch (const HttpError& e) {
    EXPECT_EQ(e.http_status, 406);
    EXPECT_NE(std::string(e.what()).find("MESH_FORMAT_OBJ"), std::string::npos) << e.what();
  }
}

TEST(ContentNegotiation, ParseAcceptRanksThePicture) {
  Accepted a = parse_accept("model/obj, application/x-ply;q=0.9, image/png;q=0.95");
  EXPECT_TRUE(a.png);
  EXPECT_EQ(a.png_rank, 1u);
  EXPECT_EQ(a.meshes, (std::vector<v1::MeshFormat>{v1::MESH_FORMAT_OBJ, v1::MESH_FORMAT_PLY}));
  EXPECT_FALSE(a.json);
  a = parse_accept("image/png, image/*");
  EXPECT_TRUE(a.png);
  EXPECT_EQ(a.png_rank, 0u);
  EXPECT_FALSE(parse_accept("*/*").png);
}

Request with_query(const std::string& query) {
  Request r;
  r.method = "POST";
  r.path = "/v1/meshes:generate";
  r.query = query;
  return r;
}

TEST(ContentNegotiation, PngSizeComesFromTheQuery) {
  EXPECT_EQ(png_size(with_query("")), kDefaultPngSize);
  EXPECT_EQ(png_size(with_query("size=16")), 16);
  EXPECT_EQ(png_size(with_query("timeout_ms=5&size=2048")), 2048);
  for (const char* bad :
       {"size=15", "size=2049", "size=abc", "size=", "size=-1", "size=64px", "size=1e3"}) {
    try {
      png_size(with_query(bad));
      ADD_FAILURE() << bad << " was taken";
    } catch (const HttpError& e) {
      EXPECT_EQ(e.http_status, 400) << bad;
      EXPECT_EQ(e.code, ErrorCode::kInvalidArgument) << bad;
      EXPECT_NE(std::string(e.what()).find("size"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("16..2048"), std::string::npos) << e.what();
    }
  }
}

}  // namespace test_content_negotiation
}  // namespace cube3d::http
