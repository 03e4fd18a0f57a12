// A call's progress as the API's message (wire/progress_codec.h): every stage by its own name,
// the counts as they are; and what the service makes of the executor's news before any door sees
// it (service/service.h's progress_as_seen): the model's T before decoding knows a total, and
// the meshing counts only while meshing.
#include "cube3d/server/wire/progress_codec.h"

#include <gtest/gtest.h>

#include <utility>

#include "cube3d/server/service/service.h"

namespace cube3d {
namespace {

TEST(ProgressCodecTest, EachStageHasItsOwnMessageValue) {
  for (const auto& [ours, theirs] : {std::pair{TaskStage::kQueued, v1::STAGE_QUEUED},
                                     std::pair{TaskStage::kTextEncoding, v1::STAGE_TEXT_ENCODING},
                                     std::pair{TaskStage::kDecoding, v1::STAGE_DECODING},
                                     std::pair{TaskStage::kMeshing, v1::STAGE_MESHING},
                                     std::pair{TaskStage::kDone, v1::STAGE_DONE}}) {
    TaskProgress p;
    p.stage = ours;
    EXPECT_EQ(progress_message(p).stage(), theirs) << v1::Stage_Name(theirs);
  }
}

TEST(ProgressCodecTest, CountsAreCopied) {
  TaskProgress p;
  p.stage = TaskStage::kMeshing;
  p.tokens_done = 1024;
  p.tokens_total = 1024;
  p.points_done = 5'000'000'000;  // past 32 bits: the message's fields are 64-bit
  p.points_planned = 6'000'000'000;
  p.levels_done = 2;
  p.levels_total = 4;
  const v1::Progress m = progress_message(p);
  EXPECT_EQ(m.tokens_done(), 1024u);
  EXPECT_EQ(m.tokens_total(), 1024u);
  EXPECT_EQ(m.points_done(), 5'000'000'000u);
  EXPECT_EQ(m.points_planned(), 6'000'000'000u);
  EXPECT_EQ(m.levels_done(), 2u);
  EXPECT_EQ(m.levels_total(), 4u);
}

TEST(ProgressCodecTest, TheServiceFillsTheTotalAndKeepsMeshingCountsToMeshing) {
  TaskProgress queued;  // no token counts yet
  EXPECT_EQ(progress_as_seen(queued, 512).tokens_total, 512);
  TaskProgress decoding;
  decoding.stage = TaskStage::kDecoding;
  decoding.tokens_done = 10;
  decoding.tokens_total = 256;
  decoding.points_done = 7;  // stale news of another stage: not shown
  const TaskProgress seen = progress_as_seen(decoding, 512);
  EXPECT_EQ(seen.tokens_done, 10);
  EXPECT_EQ(seen.tokens_total, 256);
  EXPECT_EQ(seen.points_done, 0);
  TaskProgress meshing;
  meshing.stage = TaskStage::kMeshing;
  meshing.points_done = 7;
  meshing.points_planned = 9;
  meshing.levels_done = 1;
  EXPECT_EQ(progress_as_seen(meshing, 512).points_done, 0);  // no levels planned yet
  meshing.levels_total = 3;
  const TaskProgress mesh_seen = progress_as_seen(meshing, 512);
  EXPECT_EQ(mesh_seen.points_done, 7);
  EXPECT_EQ(mesh_seen.points_planned, 9);
  EXPECT_EQ(mesh_seen.levels_done, 1);
  EXPECT_EQ(mesh_seen.levels_total, 3);
}

}  // namespace
}  // namespace cube3d
