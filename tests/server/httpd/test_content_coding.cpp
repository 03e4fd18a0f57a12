// gzip on HTTP answers: Accept-Encoding as RFC 9110 reads it (weights, q=0, identity, "*",
// several fields), which answers are worth compressing, and apply_gzip's decisions (the size
// floor, Vary, a refused identity, ETags, answers already encoded).
#include "cube3d/server/httpd/content_coding.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "cube3d/core/error.h"
#include "server/httpd/field_lines.h"

namespace cube3d::http {
namespace test_content_coding {

Headers accept_encoding(std::initializer_list<std::string> values) {
  return testing::field_lines("Accept-Encoding", values);
}

// Whether a request with these Accept-Encoding field lines takes gzip.
bool takes_gzip(std::initializer_list<std::string> fields) {
  return parse_accept_encoding(accept_encoding(fields)).takes_gzip();
}

TEST(AcceptEncoding, GzipAndItsWeights) {
  EXPECT_FALSE(parse_accept_encoding(Headers()).takes_gzip());  // no header: identity
  for (const char* field : {"gzip", "gzip, deflate, br", " GZip ;q=0.5", "x-gzip", "*"}) {
    EXPECT_TRUE(takes_gzip({field})) << field;
  }
  for (const char* field : {"gzip;q=0", "gzip; q=0.000", "*;q=0", "deflate, br", "identity"}) {
    EXPECT_FALSE(takes_gzip({field})) << field;
  }
  // gzip named wins over "*".
  EXPECT_FALSE(takes_gzip({"*, gzip;q=0"}));
  EXPECT_TRUE(takes_gzip({"*;q=0, gzip"}));
  // Several fields are one list.
  EXPECT_TRUE(takes_gzip({"br", "gzip"}));
  // A weight that is not one drops its element (not a yes).
  for (const char* field : {"gzip;q=2", "gzip;q=abc", "gzip;level=1"}) {
    EXPECT_FALSE(takes_gzip({field})) << field;
  }
}

TEST(AcceptEncoding, IdentityPreferredOrRefused) {
  // The client prefers identity to gzip: identity.
  EXPECT_FALSE(takes_gzip({"gzip;q=0.5, identity"}));
  EXPECT_TRUE(takes_gzip({"gzip, identity;q=0.5"}));
  const AcceptedCodings refused = parse_accept_encoding(accept_encoding({"gzip, identity;q=0"}));
  EXPECT_TRUE(refused.takes_gzip());
  EXPECT_TRUE(refused.refuses_identity());
  EXPECT_TRUE(parse_accept_encoding(accept_encoding({"gzip, *;q=0"})).refuses_identity());
  EXPECT_FALSE(
      parse_accept_encoding(accept_encoding({"gzip, *;q=0, identity"})).refuses_identity());
  EXPECT_FALSE(parse_accept_encoding(accept_encoding({"gzip"})).refuses_identity());
}

TEST(ContentCoding, CompressibleTypes) {
  for (const char* type :
       {"application/json", "application/json; charset=utf-8", "text/plain", "text/event-stream",
        "text/javascript; charset=utf-8", "model/gltf-binary", "model/obj", "application/x-ply",
        "application/vnd.cube3d.mesh", "application/problem+json", "TEXT/HTML"}) {
    EXPECT_TRUE(compressible_type(type)) << type;
  }
  for (const char* type : {"image/png", "application/octet-stream", "", "application/gzip"}) {
    EXPECT_FALSE(compressible_type(type)) << type;
  }
}

TEST(ContentCoding, GzipRoundTripsAndRefusesDamage) {
  std::string text;
  for (int i = 0; i < 5000; ++i) text += std::to_string(i * 0.37) + ",";
  const std::string gz = gzip_compress(text);
  EXPECT_LT(gz.size(), text.size() / 2);
  EXPECT_EQ(static_cast<unsigned char>(gz[0]), 0x1f);  // the gzip magic
  EXPECT_EQ(static_cast<unsigned char>(gz[1]), 0x8b);
  EXPECT_EQ(gzip_decompress(gz), text);
  EXPECT_EQ(gzip_decompress(gzip_compress("")), "");
  EXPECT_THROW(gzip_decompress(gz.substr(0, gz.size() - 5)), Error);
  EXPECT_THROW(gzip_decompress("not gzip"), Error);
  EXPECT_THROW(gzip_decompress(gz, 100), Error);  // over the limit
}

Response json_answer(size_t bytes) {
  std::string body = "{\"v\":[";
  while (body.size() < bytes) body += "1.25,";
  body.back() = ']';
  body += "}";
  return make_response(200, body, "application/json");
}

TEST(ApplyGzip, CompressesAJsonAnswerForAClientThatTakesIt) {
  Response r = json_answer(5000);
  const std::string plain = r.body;
  apply_gzip(accept_encoding({"gzip"}), GzipOptions{}, r);
  EXPECT_EQ(r.headers.value_or("Content-Encoding"), "gzip");
  EXPECT_EQ(r.headers.value_or("Vary"), "Accept-Encoding");
  EXPECT_EQ(gzip_decompress(r.body), plain);
  EXPECT_LT(r.body.size(), plain.size());
}

// The identity form of an answer that another client gets gzipped varies too (issue 58: a shared
// cache that stored it without Vary could hand it, or a gzip form, to the wrong client).
TEST(ApplyGzip, EveryCompressibleAnswerVariesWhoeverAsked) {
  // A client that does not take gzip, none that says anything, identity only (Python's
  // http.client): the body as it was, Vary all the same.
  for (const Headers& plain :
       {accept_encoding({"gzip;q=0, br"}), Headers(), accept_encoding({"identity"})}) {
    Response r = json_answer(5000);
    const std::string body = r.body;
    apply_gzip(plain, GzipOptions{}, r);
    EXPECT_FALSE(r.headers.has("Content-Encoding"));
    EXPECT_EQ(r.headers.value_or("Vary"), "Accept-Encoding");
    EXPECT_EQ(r.body, body);
  }
  // A mesh file (GLB, the cacheable GET /v1/jobs/{id}/mesh's answer), below the floor too.
  Response glb = make_response(200, std::string(100, 'g'), "model/gltf-binary");
  apply_gzip(Headers(), GzipOptions{}, glb);
  EXPECT_EQ(glb.headers.value_or("Vary"), "Accept-Encoding");
}

TEST(ApplyGzip, LeavesAnswersAloneThatItShould) {
  const Headers gzip = accept_encoding({"gzip"});
  // Below the floor: not compressed, but Vary all the same.
  Response small = json_answer(500);
  const std::string small_body = small.body;
  apply_gzip(gzip, GzipOptions{}, small);
  EXPECT_EQ(small.body, small_body);
  EXPECT_FALSE(small.headers.has("Content-Encoding"));
  EXPECT_EQ(small.headers.value_or("Vary"), "Accept-Encoding");
  // Off.
  Response off = json_answer(5000);
  GzipOptions disabled;
  disabled.enabled = false;
  apply_gzip(gzip, disabled, off);
  EXPECT_FALSE(off.headers.has("Content-Encoding"));
  EXPECT_FALSE(off.headers.has("Vary"));
  // PNG: no Vary, no coding.
  Response png = make_response(200, std::string(5000, 'p'), "image/png");
  apply_gzip(gzip, GzipOptions{}, png);
  EXPECT_FALSE(png.headers.has("Content-Encoding"));
  EXPECT_FALSE(png.headers.has("Vary"));
  // Encoded already.
  Response encoded = json_answer(5000);
  encoded.headers.set("Content-Encoding", "br");
  const std::string encoded_body = encoded.body;
  apply_gzip(gzip, GzipOptions{}, encoded);
  EXPECT_EQ(encoded.body, encoded_body);
  EXPECT_EQ(encoded.headers.value_or("Content-Encoding"), "br");
  // Incompressible bytes that gzip would only grow.
  std::string noise;
  uint32_t x = 12345;
  for (int i = 0; i < 4000; ++i)
    noise.push_back(static_cast<char>((x = x * 1103515245 + 12345) >> 24));
  Response random = make_response(200, noise, "model/gltf-binary");
  apply_gzip(gzip, GzipOptions{}, random);
  EXPECT_FALSE(random.headers.has("Content-Encoding"));
  EXPECT_EQ(random.body, noise);
}

TEST(ApplyGzip, RefusedIdentityIsCompressedWhateverTheSize) {
  Response small = json_answer(100);
  const std::string plain = small.body;
  apply_gzip(accept_encoding({"gzip, identity;q=0"}), GzipOptions{}, small);
  EXPECT_EQ(small.headers.value_or("Content-Encoding"), "gzip");
  EXPECT_EQ(gzip_decompress(small.body), plain);
}

TEST(ApplyGzip, VaryIsAddedToAndEtagsWeakened) {
  Response r = json_answer(5000);
  r.headers.set("Vary", "Origin");
  r.headers.set("ETag", "\"abc\"");
  apply_gzip(accept_encoding({"gzip"}), GzipOptions{}, r);
  EXPECT_EQ(r.headers.value_or("Vary"), "Origin, Accept-Encoding");
  EXPECT_EQ(r.headers.value_or("ETag"), "W/\"abc\"");
  // Named already: not twice.
  Response again = json_answer(5000);
  again.headers.set("Vary", "accept-encoding");
  apply_gzip(accept_encoding({"gzip"}), GzipOptions{}, again);
  EXPECT_EQ(again.headers.count("Vary"), 1u);
  EXPECT_EQ(again.headers.value_or("Vary"), "accept-encoding");
  // A floor of 0 compresses everything worth it; a larger one keeps mid-sized bodies plain.
  GzipOptions high;
  high.min_bytes = 10'000;
  Response mid = json_answer(5000);
  apply_gzip(accept_encoding({"gzip"}), high, mid);
  EXPECT_FALSE(mid.headers.has("Content-Encoding"));
}

TEST(BodyCoding, WhatAContentEncodingSays) {
  EXPECT_EQ(body_coding("").kind, BodyCoding::Kind::kIdentity);
  EXPECT_EQ(body_coding("identity").kind, BodyCoding::Kind::kIdentity);
  EXPECT_EQ(body_coding(" GZIP ").kind, BodyCoding::Kind::kGzip);
  EXPECT_EQ(body_coding("x-gzip").kind, BodyCoding::Kind::kGzip);
  EXPECT_EQ(body_coding("identity, deflate").kind, BodyCoding::Kind::kDeflate);
  EXPECT_EQ(body_coding("br").refused, "br");
  EXPECT_EQ(body_coding("gzip, gzip").refused, "gzip, gzip");
  EXPECT_TRUE(body_coding("gzip").refused.empty());
}

// A decompression bomb costs the limit, not what it would inflate to: 20 MB of zeros in about
// 20 KB of gzip stop one chunk past a 256 KiB limit.
TEST(BodyDecoder, ABombStopsAtTheLimitAsItGrows) {
  const std::string bomb = gzip_compress(std::string(20'000'000, '\0'), 9);
  ASSERT_LT(bomb.size(), 40'000u);
  BodyDecoder decoder(BodyCoding::Kind::kGzip, 256 << 10);
  std::string out;
  bool ok = true;
  for (size_t at = 0; ok && at < bomb.size(); at += 4096) {
    ok = decoder.feed(std::string_view(bomb).substr(at, 4096), out);
  }
  EXPECT_FALSE(ok);
  EXPECT_EQ(decoder.status(), 413);
  EXPECT_LE(out.size(), (256u << 10) + 16384u);
}

}  // namespace test_content_coding
}  // namespace cube3d::http
