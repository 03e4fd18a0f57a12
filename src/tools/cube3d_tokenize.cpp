// cube3d-tokenize: CLIP input ids for prompts (docs/architecture.md contract). Reads one JSON
// string per line from stdin and prints, for each, the 77 padded input ids separated by single
// spaces. JSON lines keep prompts with newlines, tabs or any other character unambiguous.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cube3d/cli/cli_args.h"
#include "cube3d/core/constants.h"
#include "cube3d/core/error.h"
#include "cube3d/model/clip_tokenizer.h"
#include "cube3d/model/clip_vocab.h"

namespace cube3d {
namespace {

CliArgs make_args() {
  CliArgs args("cube3d-tokenize",
               "Read JSON strings, one per line, from stdin; print each one's 77 CLIP input ids.");
  args.option("--vocab", 1,
              "bpe_simple_vocab_16e6.txt.gz or a Hugging Face folder with vocab.json + "
              "merges.txt (default: $CUBE3D_CLIP_VOCAB, else the copy beside the executable: "
              "../share/cube3d/ or the repository's .cache/clip/)",
              "F");
  return args;
}

int run(int argc, char** argv) {
  CliArgs args = make_args();
  args.parse_answering_help(argc, argv);
  const ClipTokenizer tokenizer =
      ClipTokenizer::load(resolve_clip_vocab(args.has("--vocab") ? args.get("--vocab") : ""));

  std::string line;
  for (int64_t number = 1; std::getline(std::cin, line); ++number) {
    const std::string where = "stdin line " + std::to_string(number);
    nlohmann::json value;
    try {
      value = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      // nlohmann's message says what is wrong (syntax, ill-formed UTF-8, lone surrogate).
      throw invalid_argument(where + ": expected a JSON string (" + e.what() + ")");
    }
    if (!value.is_string()) {
      throw invalid_argument(where + ": expected a JSON string, got " + value.dump());
    }
    ClipTokens tokens;
    try {
      tokens = tokenizer.tokenize(value.get<std::string>());
    } catch (const Error& e) {
      throw Error(e.code(), where + ": " + e.what());
    }
    if (tokens.truncated) {
      std::fprintf(stderr,
                   "cube3d-tokenize: warning: %s: prompt truncated to %lld of %lld tokens\n",
                   where.c_str(), static_cast<long long>(kClipMaxPromptTokens),
                   static_cast<long long>(tokens.token_count));
    }
    std::string out;
    for (const int64_t id : tokens.input_ids) {
      if (!out.empty()) out += ' ';
      out += std::to_string(id);
    }
    // One flush per line, so that a process driving this one through pipes gets each answer
    // before it sends the next prompt.
    std::cout << out << std::endl;
  }
  if (std::cin.bad()) throw invalid_argument("stdin: read error");
  return 0;
}

}  // namespace
}  // namespace cube3d

int main(int argc, char** argv) {
  return cube3d::run_tool("cube3d-tokenize", cube3d::run, argc, argv);
}
