// SHA-256 against the FIPS 180-2 test vectors, whole and in pieces; the canonical fields'
// encoding.
#include "cube3d/core/sha256.h"

#include <gtest/gtest.h>

#include <string>

#include "cube3d/core/canonical_fields.h"

namespace cube3d {
namespace test_sha256 {

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(hex_of(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex_of(sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex_of(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, AStreamInPiecesIsTheWholeDigest) {
  const std::string million(1000000, 'a');
  Sha256Stream stream;
  for (size_t at = 0; at < million.size(); at += 4093) {
    stream.add(std::string_view(million).substr(at, 4093));
  }
  EXPECT_EQ(hex_of(stream.finish()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_EQ(Sha256Stream().finish(), sha256(""));
}

TEST(CanonicalFields, FieldsAreSelfDelimiting) {
  CanonicalFields a;
  a.field("prompt", "a;b=1:");
  a.number("seed", 7);
  EXPECT_EQ(a.text(), "prompt=6:a;b=1:;seed=1:7;");
  // A prompt that tries to forge the next field encodes differently from the real one.
  CanonicalFields forged;
  forged.field("prompt", "a;seed=1:7;");
  CanonicalFields real;
  real.field("prompt", "a");
  real.number("seed", 7);
  EXPECT_NE(forged.text(), real.text());
  CanonicalFields reals;
  reals.real("top_p", 0.1);
  reals.real32("g", 1.0f);
  // Named, not a literal in the macro: at -O1 GCC 12 misreads the inlined compare of the
  // taken string with a char array (a false -Wstringop-overread).
  const std::string expected = "top_p=19:4591870180066957722;g=10:1065353216;";
  EXPECT_EQ(reals.take(), expected);
}

}  // namespace test_sha256
}  // namespace cube3d
