// Prints the launch plan of one decode step (kernels/decode_plan.h) as JSON, laid out in
// virtual_buffers' made-up address space: tests/kernels/test_decode_plan.py maps each address
// back to its buffer and replays the plan under Triton's interpreter against torch.
//
//   cube3d_decode_plan_tool embed=128 heads=4 codes=256 cond_len=77 tokens=64 dual_blocks=1
//     single_blocks=1 batch=2 cfg=1 first_key_only=0 multiprocessors=4 dtype=fp32 eps=1e-6
#include <nlohmann/json.hpp>

#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include "decode_plan.h"

int main(int argc, char** argv) {
  using namespace cube3d::kernels;
  try {
    std::map<std::string, std::string> opts;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      const size_t eq = arg.find('=');
      if (eq == std::string::npos) throw std::invalid_argument("not key=value: " + arg);
      opts[arg.substr(0, eq)] = arg.substr(eq + 1);
    }
    const auto take = [&](const std::string& key) -> std::string {
      const auto it = opts.find(key);
      if (it == opts.end()) throw std::invalid_argument("missing " + key + "=");
      std::string value = it->second;
      opts.erase(it);
      return value;
    };
    DecodeShape s;
    s.embed = std::stoll(take("embed"));
    s.heads = std::stoll(take("heads"));
    s.codes = std::stoll(take("codes"));
    s.cond_len = std::stoll(take("cond_len"));
    s.tokens = std::stoll(take("tokens"));
    s.dual_blocks = std::stoll(take("dual_blocks"));
    s.single_blocks = std::stoll(take("single_blocks"));
    s.batch = std::stoll(take("batch"));
    s.cfg = take("cfg") == "1";
    s.first_key_only = take("first_key_only") == "1";
    s.multiprocessors = std::stoi(take("multiprocessors"));
    s.dtype = take("dtype") == "bf16" ? ElementType::kBFloat16 : ElementType::kFloat32;
    s.eps = std::stod(take("eps"));
    if (!opts.empty()) throw std::invalid_argument("unknown option " + opts.begin()->first);

    const VirtualBuffers v = virtual_buffers(s);
    nlohmann::json out = {{"buffers", nlohmann::json::array()},
                          {"launches", nlohmann::json::array()}};
    for (const auto& r : v.ranges) {
      out["buffers"].push_back({{"name", r.name}, {"begin", r.begin}, {"bytes", r.bytes}});
    }
    for (const KernelLaunch& launch : plan_decode_step(s, v.buffers)) {
      nlohmann::json args = nlohmann::json::array();
      for (const KernelArg& a : launch.args) {
        nlohmann::json arg = {{"name", a.name}};
        switch (a.type) {
          case ArgType::kPointer:
            arg["pointer"] = reinterpret_cast<uint64_t>(a.pointer);
            break;
          case ArgType::kI32:
          case ArgType::kI64:
            arg["int"] = a.integer;
            break;
          case ArgType::kF32:
            arg["float"] = a.real;
            break;
        }
        args.push_back(arg);
      }
      out["launches"].push_back({{"kernel", launch.kernel},
                                 {"variant", launch.variant},
                                 {"label", launch.label},
                                 {"grid", launch.grid},
                                 {"args", args},
                                 {"bytes_read", launch.bytes_read},
                                 {"bytes_written", launch.bytes_written}});
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cube3d_decode_plan_tool: %s\n", e.what());
    return 2;
  }
}
