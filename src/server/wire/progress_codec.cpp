#include "cube3d/server/wire/progress_codec.h"

#include "cube3d/core/enum_table.h"

namespace cube3d {
namespace {

constexpr EnumTable<TaskStage, v1::Stage, 5> kStages = {
    {{TaskStage::kQueued, v1::STAGE_QUEUED},
     {TaskStage::kTextEncoding, v1::STAGE_TEXT_ENCODING},
     {TaskStage::kDecoding, v1::STAGE_DECODING},
     {TaskStage::kMeshing, v1::STAGE_MESHING},
     {TaskStage::kDone, v1::STAGE_DONE}}};

}  // namespace

v1::Progress progress_message(const TaskProgress& p) {
  v1::Progress event;
  event.set_stage(lookup(kStages, p.stage).value_or(v1::STAGE_UNSPECIFIED));
  event.set_tokens_done(static_cast<uint32_t>(p.tokens_done));
  event.set_tokens_total(static_cast<uint32_t>(p.tokens_total));
  event.set_points_done(static_cast<uint64_t>(p.points_done));
  event.set_points_planned(static_cast<uint64_t>(p.points_planned));
  event.set_levels_done(static_cast<uint32_t>(p.levels_done));
  event.set_levels_total(static_cast<uint32_t>(p.levels_total));
  return event;
}

}  // namespace cube3d
