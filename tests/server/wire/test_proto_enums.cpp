// Our values as the API's messages' enums (wire/proto_enums.h, over service/api_numbers.h): every
// value of ours maps to its message value and back, the names are the messages' own, and a
// number the API does not define is refused naming the field.
#include "cube3d/server/wire/proto_enums.h"

#include <gtest/gtest.h>

#include <array>
#include <string>
#include <utility>

#include "cube3d/core/error.h"
#include "cube3d/server/service/api_numbers.h"

namespace cube3d {
namespace {

constexpr std::array<std::pair<MeshFormat, v1::MeshFormat>, 5> kFormats = {{
    {MeshFormat::kRaw, v1::MESH_FORMAT_RAW},
    {MeshFormat::kObj, v1::MESH_FORMAT_OBJ},
    {MeshFormat::kPly, v1::MESH_FORMAT_PLY},
    {MeshFormat::kGlb, v1::MESH_FORMAT_GLB},
    {MeshFormat::kCompact, v1::MESH_FORMAT_COMPACT},
}};

TEST(ProtoEnumsTest, FormatConversionsRoundTripForAllFiveFormats) {
  for (const auto& [ours, theirs] : kFormats) {
    SCOPED_TRACE(v1::MeshFormat_Name(theirs));
    EXPECT_EQ(to_proto(ours), theirs);
    EXPECT_EQ(from_proto(theirs), ours);
    EXPECT_EQ(from_proto(to_proto(ours)), ours);
    EXPECT_EQ(to_proto(from_proto(theirs)), theirs);
    // The name validation and GET /v1/model write is the message's own.
    EXPECT_EQ(api_numbers::name(ours), v1::MeshFormat_Name(theirs));
    EXPECT_EQ(api_numbers::mesh_format(theirs), ours);
  }
}

TEST(ProtoEnumsTest, FromProtoRejectsUnknownValues) {
  for (const int value : {-1, 0, 6, 9}) {
    SCOPED_TRACE(value);
    try {
      from_proto(static_cast<v1::MeshFormat>(value));
      ADD_FAILURE() << "from_proto accepted " << value;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("format"), std::string::npos) << e.what();
    }
    EXPECT_FALSE(api_numbers::mesh_format(value).has_value());
  }
}

TEST(ProtoEnumsTest, ProfilesPivotsPositionsAndPrioritiesAreTheMessagesNumbers) {
  for (const auto& [ours, theirs] : {std::pair{MeshProfile::kNone, v1::MESH_PROFILE_NONE},
                                     std::pair{MeshProfile::kRoblox, v1::MESH_PROFILE_ROBLOX}}) {
    EXPECT_EQ(to_proto(ours), theirs);
    EXPECT_EQ(api_numbers::mesh_profile(theirs), ours);
    EXPECT_EQ(api_numbers::name(ours), v1::MeshProfile_Name(theirs));
  }
  for (const auto& [ours, theirs] :
       {std::pair{MeshPivot::kModelOrigin, v1::PIVOT_MODEL_ORIGIN},
        std::pair{MeshPivot::kCenter, v1::PIVOT_CENTER},
        std::pair{MeshPivot::kBottomCenter, v1::PIVOT_BOTTOM_CENTER}}) {
    EXPECT_EQ(to_proto(ours), theirs);
    EXPECT_EQ(api_numbers::pivot(theirs), ours);
  }
  for (const auto& [ours, theirs] :
       {std::pair{CompactPositions::kFloat32, v1::COMPACT_POSITIONS_FLOAT32},
        std::pair{CompactPositions::kQuantized16, v1::COMPACT_POSITIONS_QUANTIZED16}}) {
    EXPECT_EQ(to_proto(ours), theirs);
    EXPECT_EQ(api_numbers::compact_positions(theirs), ours);
  }
  for (const auto& [ours, theirs] :
       {std::pair{TaskPriority::kInteractive, v1::PRIORITY_INTERACTIVE},
        std::pair{TaskPriority::kBatch, v1::PRIORITY_BATCH}}) {
    EXPECT_EQ(api_numbers::of(ours), theirs);
    EXPECT_EQ(api_numbers::priority(theirs), ours);
  }
  // 0 is UNSPECIFIED: never one of ours (each field says what it stands for).
  EXPECT_FALSE(api_numbers::mesh_profile(0));
  EXPECT_FALSE(api_numbers::pivot(0));
  EXPECT_FALSE(api_numbers::compact_positions(0));
  EXPECT_FALSE(api_numbers::priority(0));
}

}  // namespace
}  // namespace cube3d
