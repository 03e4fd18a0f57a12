// Tests of the safetensors reader and writer: round trips, zero-copy behaviour, a file written by
// Python, and one test per kind of malformed file the reader must refuse.
#include "cube3d/tensor_io/safetensors.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "cube3d/core/error.h"
#include "scratch_dir.h"

namespace cube3d {
namespace test_safetensors {

using testing::list_dir;

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string le64(uint64_t value) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

// A file laid out as safetensors: length prefix, header text as given, data bytes.
std::string safetensors_bytes(const std::string& header, const std::string& data = "") {
  return le64(header.size()) + header + data;
}

// The header of one tensor, `{"<name>":{"dtype":...,"shape":...,"data_offsets":...}}`; `shape`
// and `offsets` are JSON arrays, written out so that they can hold what no int64 holds.
std::string one_tensor_header(const std::string& name, const std::string& dtype,
                              const std::string& shape, const std::string& offsets) {
  return R"({")" + name + R"(":{"dtype":")" + dtype + R"(","shape":)" + shape +
         R"(,"data_offsets":)" + offsets + "}}";
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class SafetensorsTest : public ::testing::Test {
 protected:
  std::string path(const std::string& file) const { return scratch_.path(file); }

  // A file of this header (and data) is refused as expect_invalid says.
  void expect_invalid_header(const std::string& header, const std::vector<std::string>& parts,
                             const std::string& data = "") {
    expect_invalid(write_raw(safetensors_bytes(header, data)), parts);
  }

  std::string write_raw(const std::string& bytes, const std::string& file = "bad.safetensors") {
    const std::string p = path(file);
    std::ofstream out(p, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }

  // open() must fail with kInvalidArgument and a message naming the file and every `part`.
  static void expect_invalid(const std::string& file, const std::vector<std::string>& parts) {
    try {
      SafetensorsFile::open(file);
      ADD_FAILURE() << "open(" << file << ") succeeded";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << message;
      EXPECT_NE(message.find(file), std::string::npos) << message;
      for (const std::string& part : parts) {
        EXPECT_NE(message.find(part), std::string::npos) << "no '" << part << "' in: " << message;
      }
    }
  }

  // The tests only create plain files directly in it.
  const testing::ScratchDir scratch_{"cube3d_safetensors_"};
  const std::string& dir_ = scratch_.dir();
};

// --- round trips -------------------------------------------------------------------------------

TEST_F(SafetensorsTest, RoundTripEveryDtype) {
  at::manual_seed(0);
  const std::map<std::string, at::Tensor> tensors = {
      {"f32", at::randn({2, 3})},
      {"f16", at::randn({4, 5}).to(at::kHalf)},
      {"bf16", at::randn({3}).to(at::kBFloat16)},
      {"i64", at::arange(-5, 7, at::kLong).reshape({3, 4})},
      {"i32", at::arange(-3, 3, at::kInt)},
      {"u8", at::arange(0, 251, at::kLong).to(at::kByte)},  // odd size: next tensor unaligned
      {"scalar", at::scalar_tensor(3.5, at::kFloat)},
      {"empty", at::empty({0}, at::kFloat)},
      {"empty_2d", at::empty({3, 0}, at::kLong)},
      {"transposed", at::arange(6, at::kFloat).reshape({2, 3}).t()},  // not contiguous
  };
  const std::string file = path("all.safetensors");
  write_safetensors(file, tensors);

  const SafetensorsFile st = SafetensorsFile::open(file);
  EXPECT_EQ(st.path(), file);
  EXPECT_EQ(st.names().size(), tensors.size());
  for (const auto& [name, expected] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(st.contains(name));
    const at::Tensor actual = st.tensor(name);
    EXPECT_EQ(actual.scalar_type(), expected.scalar_type());
    EXPECT_EQ(actual.sizes(), expected.sizes());
    EXPECT_EQ(actual.device().type(), at::kCPU);
    EXPECT_TRUE(at::equal(actual, expected));
  }
  EXPECT_EQ(st.entry("scalar").shape, std::vector<int64_t>{});
  EXPECT_EQ(st.entry("empty").begin, st.entry("empty").end);
  EXPECT_EQ(st.entry("f16").dtype, SafetensorsDtype::kF16);
  EXPECT_EQ(st.entry("bf16").dtype, SafetensorsDtype::kBF16);
  EXPECT_FALSE(st.contains("missing"));
  EXPECT_TRUE(st.metadata().empty());
}

TEST_F(SafetensorsTest, RoundTripMetadata) {
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {"note", "unicode \xc3\xa9 \"quoted\""}};
  const std::string file = path("meta.safetensors");
  write_safetensors(file, {{"x", at::ones({2})}}, metadata);
  const SafetensorsFile st = SafetensorsFile::open(file);
  EXPECT_EQ(st.metadata(), metadata);
  EXPECT_EQ(st.names(), std::vector<std::string>{"x"});
}

TEST_F(SafetensorsTest, WriterAlignsDataSectionAndLeavesNoTempFile) {
  const std::string file = path("aligned.safetensors");
  write_safetensors(file, {{"a", at::ones({3}, at::kByte)}, {"b", at::ones({1})}});
  const std::string bytes = read_all(file);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  EXPECT_EQ((8 + header_size) % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + header_size + 3 + 4);
  // Only the final file: the temporary one was renamed, not copied.
  EXPECT_EQ(list_dir(dir_), std::vector<std::string>{"aligned.safetensors"});

  // Overwriting an existing file replaces it whole.
  write_safetensors(file, {{"c", at::zeros({2}, at::kLong)}});
  EXPECT_EQ(SafetensorsFile::open(file).names(), std::vector<std::string>{"c"});
}

TEST_F(SafetensorsTest, WriterRejectsUnsupportedDtypeNamingTheTensor) {
  const std::string file = path("double.safetensors");
  try {
    write_safetensors(file,
                      {{"ok", at::ones({1})}, {"weights.double", at::ones({2}, at::kDouble)}});
    ADD_FAILURE() << "write_safetensors accepted float64";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("weights.double"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
  EXPECT_FALSE(exists(file));
  EXPECT_TRUE(list_dir(dir_).empty());
}

TEST_F(SafetensorsTest, WriterReportsIoErrorWithPath) {
  const std::string file = path("no_such_dir/out.safetensors");
  try {
    write_safetensors(file, {{"x", at::ones({1})}});
    ADD_FAILURE() << "write_safetensors into a missing folder succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
}

// --- zero copy ---------------------------------------------------------------------------------

TEST_F(SafetensorsTest, ZeroCopyTensorsShareTheMappingAndOutliveTheFile) {
  const std::string file = path("zc.safetensors");
  const at::Tensor expected = at::arange(12, at::kFloat).reshape({3, 4});
  write_safetensors(file, {{"w", expected}});

  at::Tensor survivor;
  {
    const SafetensorsFile st = SafetensorsFile::open(file);
    const at::Tensor a = st.tensor("w");
    const at::Tensor b = st.tensor("w");
    EXPECT_EQ(a.data_ptr(), b.data_ptr());  // both views of the same mapped bytes
    survivor = a;
  }
  // The SafetensorsFile and the other tensor are gone; the mapping must not be.
  EXPECT_TRUE(at::equal(survivor, expected));
  EXPECT_FLOAT_EQ(survivor.sum().item<float>(), 66.0f);
}

TEST_F(SafetensorsTest, InPlaceWriteNeitherCrashesNorChangesTheFile) {
  const std::string file = path("cow.safetensors");
  write_safetensors(file, {{"w", at::ones({4})}});
  const std::string before = read_all(file);
  {
    const SafetensorsFile st = SafetensorsFile::open(file);
    at::Tensor w = st.tensor("w");
    w.add_(1);  // copy-on-write pages: allowed, but private to this process
    EXPECT_TRUE(at::equal(w, at::full({4}, 2.0f)));
  }
  EXPECT_EQ(read_all(file), before);
  EXPECT_TRUE(at::equal(SafetensorsFile::open(file).tensor("w"), at::ones({4})));
}

TEST_F(SafetensorsTest, ReleasePagesSparesLiveTensorsAndKeepsCopiesAndFileValues) {
  // "big" spans many pages; "small" lies inside one page, so it has no whole page to release.
  const std::string file = path("release.safetensors");
  const at::Tensor big = at::arange(64 * 1024, at::kFloat);
  write_safetensors(file, {{"big", big}, {"small", at::ones({3})}});
  const SafetensorsFile st = SafetensorsFile::open(file);
  st.prefetch("big");  // a hint only
  EXPECT_EQ(st.release_pages("small"), 0u);

  at::Tensor copy;
  {
    at::Tensor view = st.tensor("big");
    copy = view.to(at::kBFloat16);  // what a loader onto another device or dtype keeps
    view.add_(1);                   // private copy-on-write pages
    // A live zero-copy tensor (or any view of it) keeps its pages, written ones included.
    EXPECT_EQ(st.release_pages("big"), 0u);
    view = view.narrow(0, 10, 100);
    EXPECT_EQ(st.release_pages("big"), 0u);
    EXPECT_FLOAT_EQ(view[0].item<float>(), 11.0f);
  }
  // No tensor of "big" is left: its whole pages go, about all of its 256 KiB.
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t released = st.release_pages("big");
  EXPECT_GE(released, big.nbytes() - 2 * page);
  EXPECT_LE(released, big.nbytes());
  EXPECT_EQ(released % page, 0u);
  // The copy made before is untouched. The released pages read the file's bytes again (the
  // private writes went with them; the file never had them); the partial pages at the edges,
  // which a neighbouring tensor may share, were kept and still hold the writes.
  EXPECT_TRUE(at::equal(copy, big.to(at::kBFloat16)));
  const int64_t edge = 2 * static_cast<int64_t>(page / sizeof(float));
  const int64_t inner = big.numel() - 2 * edge;
  EXPECT_TRUE(at::equal(st.tensor("big").narrow(0, edge, inner), big.narrow(0, edge, inner)));
  EXPECT_TRUE(at::equal(st.tensor("small"), at::ones({3})));
  EXPECT_TRUE(at::equal(SafetensorsFile::open(file).tensor("big"), big));
}

TEST_F(SafetensorsTest, UnalignedTensorIsCopiedWithCorrectValues) {
  // A 9-byte header puts the data section at byte 17: no F32 there can be aligned.
  const float values[2] = {1.5f, -2.25f};
  std::string data(sizeof(values), '\0');
  std::memcpy(data.data(), values, sizeof(values));
  const std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string padded = header + std::string((header.size() % 2 == 0) ? 1 : 0, ' ');
  ASSERT_NE((8 + padded.size()) % 4, 0u);
  const std::string file = write_raw(safetensors_bytes(padded, data), "unaligned.safetensors");
  const at::Tensor x = SafetensorsFile::open(file).tensor("x");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x.data_ptr()) % 4, 0u);
  EXPECT_FLOAT_EQ(x[0].item<float>(), 1.5f);
  EXPECT_FLOAT_EQ(x[1].item<float>(), -2.25f);
}

TEST_F(SafetensorsTest, NamesAreInDataOffsetOrder) {
  const std::string header = R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                             R"("a":{"dtype":"U8","shape":[1],"data_offsets":[2,3]},)"
                             R"("c":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})";
  const std::string file = write_raw(safetensors_bytes(header, "xyz"), "order.safetensors");
  const SafetensorsFile st = SafetensorsFile::open(file);
  EXPECT_EQ(st.names(), (std::vector<std::string>{"c", "b", "a"}));
  EXPECT_EQ(st.tensor("a").item<uint8_t>(), 'z');
  EXPECT_EQ(st.tensor("c").numel(), 0);
}

// --- a real file written by Python -------------------------------------------------------------

TEST_F(SafetensorsTest, ReadsGoldenFileWrittenByPython) {
  const std::string file = CUBE3D_TEST_DATA_DIR "/golden/tiny_v01/inputs.safetensors";
  const SafetensorsFile st = SafetensorsFile::open(file);
  EXPECT_EQ(st.names(), (std::vector<std::string>{"clip_hidden_cond", "clip_hidden_uncond"}));

  const std::string bytes = read_all(file);
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes.data(), 8);
  for (const std::string& name : st.names()) {
    SCOPED_TRACE(name);
    const SafetensorsEntry& e = st.entry(name);
    EXPECT_EQ(e.dtype, SafetensorsDtype::kF32);
    EXPECT_EQ(e.shape, (std::vector<int64_t>{1, 77, 32}));
    const at::Tensor t = st.tensor(name);
    EXPECT_EQ(t.scalar_type(), at::kFloat);
    EXPECT_EQ(t.sizes(), (std::vector<int64_t>{1, 77, 32}));
    EXPECT_TRUE(at::isfinite(t).all().item<bool>());
    // Compare against the raw bytes read independently of the mapping.
    ASSERT_LE(8 + header_size + e.end, bytes.size());
    EXPECT_EQ(std::memcmp(t.data_ptr(), bytes.data() + 8 + header_size + e.begin, e.end - e.begin),
              0);
  }
  EXPECT_FALSE(at::equal(st.tensor("clip_hidden_cond"), st.tensor("clip_hidden_uncond")));
}

// --- missing things ----------------------------------------------------------------------------

TEST_F(SafetensorsTest, MissingFileIsNotFound) {
  const std::string file = path("does_not_exist.safetensors");
  try {
    SafetensorsFile::open(file);
    ADD_FAILURE() << "open of a missing file succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsTest, MissingTensorIsNotFoundNamingFileAndTensor) {
  const std::string file = path("one.safetensors");
  write_safetensors(file, {{"x", at::ones({1})}});
  const SafetensorsFile st = SafetensorsFile::open(file);
  for (int call = 0; call < 2; ++call) {
    try {
      if (call == 0) {
        st.tensor("model.missing.weight");
      } else {
        st.entry("model.missing.weight");
      }
      ADD_FAILURE() << "lookup of a missing tensor succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kNotFound);
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("model.missing.weight"), std::string::npos) << e.what();
    }
  }
}

// --- malformed files ---------------------------------------------------------------------------

TEST_F(SafetensorsTest, RejectsFileShorterThanLengthPrefix) {
  expect_invalid(write_raw(std::string("\x10\x00\x00", 3)), {"truncated"});
  expect_invalid(write_raw(""), {"truncated"});
}

TEST_F(SafetensorsTest, RejectsHeaderLengthOverLimitBeforeReadingIt) {
  // Claims 200 MB of header in a 12-byte file: must fail on the limit, not on truncation.
  expect_invalid(write_raw(le64(200ull * 1000 * 1000) + "{}  "), {"exceeds the limit"});
  expect_invalid(write_raw(le64(~0ull)), {"exceeds the limit"});
}

TEST_F(SafetensorsTest, RejectsHeaderPastEndOfFile) {
  expect_invalid(write_raw(le64(64) + "{}"), {"truncated", "extends past the end"});
}

TEST_F(SafetensorsTest, RejectsJsonSyntaxError) {
  expect_invalid_header(R"({"x":{"dtype":"F32",)", {"not valid JSON"});
}

TEST_F(SafetensorsTest, RejectsJsonThatIsNotAnObject) {
  expect_invalid_header("[1, 2]", {"not an object"});
}

TEST_F(SafetensorsTest, RejectsDeeplyNestedJson) {
  const std::string header = R"({"x":{"shape":[[[1]]]}})";
  expect_invalid_header(header, {"nested too deeply"});
  expect_invalid_header(std::string(100000, '['), {"nested too deeply"});
}

TEST_F(SafetensorsTest, RejectsEntryThatIsNotAnObject) {
  expect_invalid_header(R"({"layer.weight":[1,2]})", {"layer.weight", "not a JSON object"});
}

TEST_F(SafetensorsTest, RejectsEntryWithMissingField) {
  expect_invalid(
      write_raw(safetensors_bytes(R"({"layer.weight":{"dtype":"F32","data_offsets":[0,0]}})")),
      {"layer.weight", "\"shape\""});
  expect_invalid(
      write_raw(safetensors_bytes(R"({"layer.weight":{"shape":[0],"data_offsets":[0,0]}})")),
      {"layer.weight", "\"dtype\""});
  expect_invalid_header(R"({"layer.weight":{"dtype":"F32","shape":[0]}})",
                        {"layer.weight", "\"data_offsets\""});
}

TEST_F(SafetensorsTest, RejectsFieldsOfWrongType) {
  const std::string dtype_number = R"({"t":{"dtype":32,"shape":[0],"data_offsets":[0,0]}})";
  expect_invalid_header(dtype_number, {"'t'", "dtype"});
  const std::string shape_object = R"({"t":{"dtype":"F32","shape":{},"data_offsets":[0,0]}})";
  expect_invalid_header(shape_object, {"'t'", "shape"});
  const std::string float_dim = R"({"t":{"dtype":"U8","shape":[1.5],"data_offsets":[0,0]}})";
  expect_invalid_header(float_dim, {"'t'", "non-negative integer"});
  const std::string string_dim = R"({"t":{"dtype":"U8","shape":["2"],"data_offsets":[0,2]}})";
  expect_invalid_header(string_dim, {"'t'", "non-negative integer"}, "ab");
}

TEST_F(SafetensorsTest, RejectsNegativeDim) {
  const std::string header = R"({"neg":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,16]}})";
  expect_invalid_header(header, {"'neg'", "non-negative integer"}, std::string(16, '\0'));
}

TEST_F(SafetensorsTest, RejectsBadDataOffsets) {
  const std::string three = R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})";
  expect_invalid_header(three, {"'t'", "data_offsets"}, "ab");
  const std::string negative = R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})";
  expect_invalid_header(negative, {"'t'", "data_offsets"}, "ab");
  const std::string reversed = R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[2,1]}})";
  expect_invalid_header(reversed, {"'t'", "begin > end"}, "ab");
  const std::string too_big =
      R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,99999999999999999999999]}})";
  expect_invalid_header(too_big, {"'t'", "data_offsets"}, "ab");
}

TEST_F(SafetensorsTest, RejectsUnknownDtype) {
  const std::string header = R"({"w":{"dtype":"F64X","shape":[1],"data_offsets":[0,8]}})";
  expect_invalid_header(header, {"'w'", "F64X", "unsupported dtype"}, std::string(8, '\0'));
}

TEST_F(SafetensorsTest, RejectsShapeThatDisagreesWithOffsets) {
  // [2, 3] of F32 needs 24 bytes; the range holds 20.
  const std::string header = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})";
  expect_invalid_header(header, {"'w'", "needs 24 bytes"}, std::string(24, '\0'));
}

TEST_F(SafetensorsTest, RejectsShapeWhoseByteSizeOverflows) {
  expect_invalid_header(one_tensor_header("w", "F32", "[4294967296,4294967296]", "[0,0]"),
                        {"'w'", "overflow"});
}

TEST_F(SafetensorsTest, RejectsOffsetsBeyondEndOfFile) {
  // 16 bytes asked for, 12 there.
  expect_invalid_header(one_tensor_header("w", "F32", "[4]", "[0,16]"),
                        {"'w'", "outside the data section"}, std::string(12, '\0'));
}

TEST_F(SafetensorsTest, RejectsOverlappingRanges) {
  const std::string header = R"({"first":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("second":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_invalid_header(header, {"'first'", "'second'", "overlap"}, std::string(12, '\0'));
  // Contained in a larger range, and sorting after it by begin.
  const std::string contained = R"({"outer":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                                R"("inner":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},)"
                                R"("after":{"dtype":"U8","shape":[1],"data_offsets":[5,6]}})";
  expect_invalid_header(contained, {"'outer'", "'inner'", "overlap"}, std::string(8, '\0'));
}

TEST_F(SafetensorsTest, RejectsAnEmptyTensorWhoseStridesOverflow) {
  // Found by fuzz_safetensors: open() took it and tensor() threw c10's stride overflow.
  expect_invalid_header(one_tensor_header("e", "F32", "[0,9223372036854775807,3]", "[0,0]"),
                        {"'e'", "strides overflow"});
}

TEST_F(SafetensorsTest, RejectsBytesThatBelongToNoTensor) {
  // After the last tensor: accepted silently before (a truncated header, or garbage).
  const std::string header = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  expect_invalid_header(header, {"4 bytes after the last tensor"}, std::string(8, '\0') + "junk");
  // Between two tensors.
  const std::string gap = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                          R"("b":{"dtype":"U8","shape":[2],"data_offsets":[5,7]}})";
  expect_invalid_header(gap, {"bytes [2, 5)", "before 'b'"}, std::string(7, '\0'));
  // Exactly tiled (with an empty tensor at the end) is fine.
  const std::string tiled = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                            R"("e":{"dtype":"U8","shape":[0],"data_offsets":[2,2]}})";
  EXPECT_NO_THROW(SafetensorsFile::open(write_raw(safetensors_bytes(tiled, "ab"), "ok.st")));
}

TEST_F(SafetensorsTest, RejectsNonStringMetadata) {
  const std::string header = R"({"__metadata__":{"format":"pt","epoch":3},)"
                             R"("w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})";
  expect_invalid_header(header, {"__metadata__", "'epoch'"}, "a");
  expect_invalid_header(R"({"__metadata__":[]})", {"__metadata__", "not a JSON object"});
}

TEST_F(SafetensorsTest, RejectsDirectory) { expect_invalid(dir_, {"not a regular file"}); }

}  // namespace test_safetensors
}  // namespace cube3d
