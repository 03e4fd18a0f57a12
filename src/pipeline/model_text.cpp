#include "cube3d/pipeline/model_text.h"

#include "cube3d/model/clip_text_normalizer.h"

namespace cube3d {

std::string text_the_model_reads(std::string_view prompt) { return normalize_clip_text(prompt); }

}  // namespace cube3d
