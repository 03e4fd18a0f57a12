// Fuzzes admission, the server's first look at what a caller sends and what an operator writes:
// the API keys file, the prompt denylist file and end user ids. The first byte picks which:
//   0: the rest is a keys file. What loads must admit, charge, report and reload without a
//      crash: a few admissions with demands and end users made from the input, charges that
//      may put buckets in debt, standing(), then replace() with the same keys.
//   1: the rest is a denylist file. What loads must match without a crash, agree with itself
//      (matches() == matching_line() has a value) and refuse nothing on an empty prompt
//      (patterns that match the empty string are refused at load).
//   2: the rest is an end user id: accepted or refused with INVALID_ARGUMENT, and an accepted
//      one gets a pseudonym of "u" and 16 hex digits that never contains the id.
//   3: the rest, when valid UTF-8 (what the server gives it), is a prompt whose folded forms
//      (prompt_folding.h) are made: the first is the prompt itself, every form is valid UTF-8,
//      none repeats, and folding the fold changes nothing.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "cube3d/core/utf8.h"
#include "cube3d/server/admission/api_keys.h"
#include "cube3d/server/admission/end_user.h"
#include "cube3d/server/admission/prompt_folding.h"
#include "cube3d/server/admission/prompt_policy.h"
#include "fuzz_support.h"

namespace {

using cube3d::ApiKeys;

void keys_file(std::string_view text) {
  std::vector<cube3d::ApiKey> keys;
  if (!cube3d::fuzz::refusals_ok(
          [&] { keys = cube3d::parse_api_keys(std::string(text), "fuzz-keys.yaml"); })) {
    return;
  }
  ApiKeys admission(keys);
  const auto t0 = cube3d::SteadyClock::now();
  // The demands come from the text's own bytes, so that the fuzzer steers them too.
  for (size_t i = 0; i < 16; ++i) {
    const auto byte = static_cast<uint8_t>(text.empty() ? 0 : text[i % text.size()]);
    const cube3d::ApiKey& key = keys.empty() ? cube3d::ApiKey{} : keys[i % keys.size()];
    const std::string user = byte % 3 == 0 ? "" : "user" + std::to_string(byte % 5);
    ApiKeys::Demand demand;
    demand.end_user = user;
    demand.work = ApiKeys::Work{int64_t{byte} * 1000, int64_t{byte} << 20};
    const auto now = t0 + std::chrono::milliseconds(int64_t{byte} * 977 * static_cast<int64_t>(i));
    // The key's own secret is unknown (only its hash is in the file): an unknown key must be
    // UNAUTHENTICATED, never admitted.
    const auto admitted = admission.admit("Bearer fuzz-" + std::to_string(i), demand, now);
    const auto* refused = std::get_if<ApiKeys::Refusal>(&admitted);
    CUBE3D_FUZZ_CHECK(refused && refused->unauthenticated, "an unknown key was admitted");
    (void)admission.check_work(key.name, user, *demand.work, now);
    admission.charge(key.name, user, demand.work->shape_tokens, demand.work->occupancy_points, now);
    if (const auto standing = admission.standing(key.name, now)) {
      CUBE3D_FUZZ_CHECK(standing->key.name == key.name, "standing() of another key");
    }
  }
  admission.replace(keys);
  CUBE3D_FUZZ_CHECK(admission.size() == keys.size(), "replace() lost or made keys");
}

void denylist_file(std::string_view text) {
  cube3d::PromptDenylist rules;
  if (!cube3d::fuzz::refusals_ok(
          [&] { rules = cube3d::PromptDenylist::parse(text, "fuzz-denylist.txt"); })) {
    return;
  }
  const cube3d::PromptPolicy policy(rules);
  CUBE3D_FUZZ_CHECK(!policy.refuses(""), "a loaded rule matches the empty prompt");
  for (const std::string_view prompt :
       {std::string_view("a small wooden chair"), std::string_view("forbidden thing"),
        std::string_view("caf\xc3\xa9 \xf0\x9f\x8f\xb0"), text.substr(0, 64)}) {
    const bool matched = rules.matches(prompt);
    CUBE3D_FUZZ_CHECK(matched == rules.matching_line(prompt).has_value(),
                      "matches() and matching_line() disagree");
    // The policy matches the prompt's folded forms too (the prompt itself first): what the
    // rules match, it refuses, and it refuses nothing that no form of the prompt matches.
    bool any_form = false;
    for (const std::string& form : cube3d::prompt_forms(prompt)) any_form |= rules.matches(form);
    CUBE3D_FUZZ_CHECK(!matched || policy.refuses(prompt), "the policy let a matched prompt by");
    CUBE3D_FUZZ_CHECK(any_form == policy.refuses(prompt), "the policy and its rules disagree");
  }
}

void end_user_id(std::string_view id) {
  if (!cube3d::fuzz::refusals_ok([&] { cube3d::check_end_user_id(id); })) return;
  const std::string pseudonym = cube3d::end_user_pseudonym("fuzz-key", id);
  CUBE3D_FUZZ_CHECK(pseudonym.size() == 17 && pseudonym[0] == 'u', "a pseudonym's shape");
  CUBE3D_FUZZ_CHECK(pseudonym.find_first_not_of("0123456789abcdef", 1) == std::string::npos,
                    "a pseudonym's digits");
  CUBE3D_FUZZ_CHECK(id.size() < 4 || pseudonym.find(id) == std::string::npos,
                    "a pseudonym shows the id");
}

void prompt_forms(std::string_view prompt) {
  if (cube3d::find_invalid_utf8(prompt)) return;
  const std::vector<std::string> forms = cube3d::prompt_forms(prompt);
  CUBE3D_FUZZ_CHECK(!forms.empty() && forms.front() == prompt, "the first form is the prompt");
  for (size_t i = 0; i < forms.size(); ++i) {
    CUBE3D_FUZZ_CHECK(!cube3d::find_invalid_utf8(forms[i]), "a form is not valid UTF-8");
    for (size_t j = 0; j < i; ++j) CUBE3D_FUZZ_CHECK(forms[i] != forms[j], "a form repeats");
  }
  const std::string folded = cube3d::unicode_fold(prompt);
  CUBE3D_FUZZ_CHECK(cube3d::unicode_fold(folded) == folded, "folding the fold changed it");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
      keys_file(rest);
      break;
    case 1:
      denylist_file(rest);
      break;
    case 2:
      end_user_id(rest);
      break;
    default:
      prompt_forms(rest);
      break;
  }
  return 0;
}
