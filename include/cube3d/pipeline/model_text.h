// The prompt as the model reads it: CLIP's clean-up (HTML entities decoded twice, white-space
// runs folded to one space and stripped at the ends) and lower case, before its tokenizer.
//
// It exists for the server's prompt policy (server/admission/prompt_policy.h), which must match
// what the model reads rather than what the client sent, so that letter case, an entity such as
// `&amp;` or extra white space cannot slip a prompt past a rule; the server may not include
// model/ headers, so the pipeline offers the one function it needs.
#pragma once

#include <string>
#include <string_view>

namespace cube3d {

// CLIP's normalised text of `prompt` (model/clip_text_normalizer.h). Throws invalid_argument
// "prompt is not valid UTF-8 (byte offset N)".
std::string text_the_model_reads(std::string_view prompt);

}  // namespace cube3d
