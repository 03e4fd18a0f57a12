#include "decode_plan.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <stdexcept>

namespace cube3d::kernels {
namespace {

constexpr double kQkNormEps = 1e-5;  // model/layers.h kQkNormEps

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("decode plan: " + what);
}

// A launch under construction: the variant's constexprs, then its arguments in the kernel's
// order (kernels/decode_kernels.py), each checked as the compiled kernel assumes it.
class LaunchBuilder {
 public:
  LaunchBuilder(std::string kernel, std::string label, ElementType dtype) : dtype_(dtype) {
    launch_.kernel = std::move(kernel);
    launch_.label = std::move(label);
  }
  LaunchBuilder& constexpr_(const std::string& name, int64_t value) {
    constexprs_[name] = value;
    return *this;
  }
  LaunchBuilder& grid(int64_t x, int64_t y = 1) {
    launch_.grid = {static_cast<uint32_t>(x), static_cast<uint32_t>(y), 1};
    return *this;
  }
  // A pointer the kernel reads 16 bytes at a time (build_cubins.py's divisibility 16).
  LaunchBuilder& pointer(const std::string& name, const void* p) {
    require(p != nullptr, launch_.label + ": " + name + " has no address");
    require(reinterpret_cast<uintptr_t>(p) % 16 == 0,
            launch_.label + ": " + name + " is not 16-byte aligned");
    KernelArg a;
    a.name = name;
    a.pointer = p;
    launch_.args.push_back(a);
    return *this;
  }
  LaunchBuilder& i32(const std::string& name, int64_t v) {
    require(v >= 0 && v <= INT32_MAX, launch_.label + ": " + name + " out of int32 range");
    return integer(name, ArgType::kI32, v);
  }
  // An int32 the compiled kernel assumes a multiple of 16.
  LaunchBuilder& i32_16(const std::string& name, int64_t v) {
    require(v % 16 == 0,
            launch_.label + ": " + name + " = " + std::to_string(v) + " is not a multiple of 16");
    return i32(name, v);
  }
  // An int64 stride the compiled kernel assumes a multiple of 16.
  LaunchBuilder& stride(const std::string& name, int64_t v) {
    require(v > 0 && v % 16 == 0, launch_.label + ": " + name + " = " + std::to_string(v) +
                                      " is not a positive multiple of 16");
    return integer(name, ArgType::kI64, v);
  }
  LaunchBuilder& f32(const std::string& name, double v) {
    KernelArg a;
    a.name = name;
    a.type = ArgType::kF32;
    a.real = static_cast<float>(v);
    launch_.args.push_back(a);
    return *this;
  }
  LaunchBuilder& bytes(int64_t read, int64_t written) {
    launch_.bytes_read = read;
    launch_.bytes_written = written;
    return *this;
  }
  KernelLaunch done() {
    std::string variant;
    for (const auto& [name, value] : constexprs_) {
      variant += name + "=" + std::to_string(value) + ",";
    }
    launch_.variant = variant + "DTYPE=" + element_name(dtype_);
    return std::move(launch_);
  }

 private:
  LaunchBuilder& integer(const std::string& name, ArgType type, int64_t v) {
    KernelArg a;
    a.name = name;
    a.type = type;
    a.integer = v;
    launch_.args.push_back(a);
    return *this;
  }

  ElementType dtype_;
  KernelLaunch launch_;
  std::map<std::string, int64_t> constexprs_;  // sorted by name, as the variant key wants
};

// linear_kernel: out = LN?(x) @ w^T + b (+ res). With `tokens`, x is the embedding table read by
// the fed tokens and x_out receives those rows. The pointers a variant does not read are the
// output's, as tests/kernels/triton_step.py passes them.
struct Linear {
  const void* x;
  int64_t stride_x;
  const void* tokens = nullptr;
  const void* w;
  const void* b;
  int64_t n, k;
  void* out;
  int64_t stride_out;
  bool ln = false;
  bool residual = false;  // out += ... (in place)
  void* x_out = nullptr;  // with tokens
  int64_t stride_x_out = 0;
};

KernelLaunch linear(const DecodeShape& s, const std::string& label, const Linear& l) {
  const int64_t rows = s.rows();
  const int64_t es = element_bytes(s.dtype);
  const bool gather = l.tokens != nullptr;
  const int bn = block_columns(l.n, s.multiprocessors);
  const void* res = gather ? l.x_out : l.out;
  const int64_t stride_res = gather ? l.stride_x_out : l.stride_out;
  // Weights and bias once, the input rows (gathered rows: from the table), the residual.
  int64_t read = (l.n * l.k + l.n) * es + rows * l.k * es + (l.residual ? rows * l.n * es : 0);
  int64_t written = rows * l.n * es + (gather ? rows * l.k * es : 0);
  if (gather) read += s.batch * 8;
  return LaunchBuilder("linear_kernel", label, s.dtype)
      .constexpr_("LN", l.ln)
      .constexpr_("GATHER", gather)
      .constexpr_("RESIDUAL", l.residual)
      .constexpr_("BLOCK_R", block_rows(rows))
      .constexpr_("BLOCK_N", bn)
      .constexpr_("BLOCK_K", kBlockK)
      .grid(ceil_div(l.n, bn))
      .pointer("x_ptr", l.x)
      .pointer("tokens_ptr", gather ? l.tokens : l.out)
      .pointer("w_ptr", l.w)
      .pointer("b_ptr", l.b)
      .pointer("res_ptr", res)
      .pointer("out_ptr", l.out)
      .pointer("x_out_ptr", gather ? l.x_out : l.out)
      .i32("R", rows)
      .i32("B", s.batch)
      .i32("N", l.n)
      .i32_16("K", l.k)
      .stride("stride_x", l.stride_x)
      .stride("stride_w", l.k)
      .stride("stride_res", stride_res)
      .stride("stride_out", l.stride_out)
      .f32("eps", l.ln ? s.eps : 0.0)
      .bytes(read, written)
      .done();
}

void add_block(const DecodeShape& s, const DecodeBuffers& b, size_t index,
               std::vector<KernelLaunch>& out) {
  const BlockBuffers& block = b.blocks[index];
  const bool dual = static_cast<int64_t>(index) < s.dual_blocks;
  const std::string name = "block " + std::to_string(index) + (dual ? " (dual)" : " (single)");
  const int64_t d = s.embed, rows = s.rows(), heads = s.heads, hd = s.head_dim();
  const int64_t es = element_bytes(s.dtype);

  Linear qkv{b.x, d, nullptr, block.qkv_weight, block.qkv_bias, 3 * d, d, b.qkv, 3 * d};
  qkv.ln = true;
  if (index == 0) {
    qkv.x = b.wte;
    qkv.tokens = b.token_ids;
    qkv.x_out = b.x;
    qkv.stride_x_out = d;
  }
  out.push_back(linear(s, name + ": LN + qkv", qkv));

  const int64_t cache_len = dual ? s.dual_len() : s.single_len();
  const int splits = attention_splits(rows, heads, cache_len, hd, s.multiprocessors);
  const bool one = splits == 1;
  require(block.keys != nullptr && block.values != nullptr, name + ": no KV cache");
  const int64_t kv_read = 2 * rows * heads * cache_len * hd * es;
  const int64_t rope_read = 2 * rows * (hd / 2) * 4;
  out.push_back(LaunchBuilder("attention_kernel", name + ": attention", s.dtype)
                    .constexpr_("HD", hd)
                    .constexpr_("BLOCK_KV", block_keys(hd))
                    .constexpr_("ONE_SPLIT", one)
                    .grid(rows * heads, splits)
                    .pointer("qkv_ptr", b.qkv)
                    .pointer("q_norm_ptr", block.q_norm)
                    .pointer("k_norm_ptr", block.k_norm)
                    .pointer("cos_ptr", b.rope_cos)
                    .pointer("sin_ptr", b.rope_sin)
                    .pointer("positions_ptr", b.positions)
                    .pointer("keys_ptr", block.keys)
                    .pointer("values_ptr", block.values)
                    .pointer("out_ptr", b.attention)
                    .pointer("part_o_ptr", b.partial_out)
                    .pointer("part_ml_ptr", b.partial_stats)
                    .i32("B", s.batch)
                    .i32("H", heads)
                    .i32("slot_base", dual ? s.cond_len : 0)
                    .i32("first_key_only", !dual && s.first_key_only)
                    .i32("cache_len", cache_len)
                    .i32("splits", splits)
                    .stride("stride_qkv", 3 * d)
                    .stride("stride_cache_row", block.cache_row_stride)
                    .stride("stride_cache_head", block.cache_head_stride)
                    .stride("stride_out", d)
                    .f32("eps", kQkNormEps)
                    .f32("sm_scale", 1.0 / std::sqrt(static_cast<double>(hd)))
                    .bytes(rows * 3 * d * es + 2 * hd * es + rope_read + s.batch * 8 + kv_read,
                           2 * rows * heads * hd * es +
                               (one ? rows * d * es : rows * heads * splits * (hd + 2) * 4))
                    .done());
  if (!one) {
    out.push_back(LaunchBuilder("attention_reduce_kernel", name + ": attention splits", s.dtype)
                      .constexpr_("HD", hd)
                      .constexpr_("MAX_SPLITS", kMaxSplits)
                      .grid(rows * heads)
                      .pointer("part_o_ptr", b.partial_out)
                      .pointer("part_ml_ptr", b.partial_stats)
                      .pointer("out_ptr", b.attention)
                      .i32("H", heads)
                      .i32("splits", splits)
                      .stride("stride_out", d)
                      .bytes(rows * heads * splits * (hd + 2) * 4, rows * d * es)
                      .done());
  }

  Linear proj{b.attention, d, nullptr, block.proj_weight, block.proj_bias, d, d, b.x, d};
  proj.residual = true;
  out.push_back(linear(s, name + ": c_proj + residual", proj));

  const int64_t hidden = 4 * d;
  const int bn = block_columns(hidden, s.multiprocessors);
  out.push_back(LaunchBuilder("gate_up_kernel", name + ": LN + gate/up + SiLU", s.dtype)
                    .constexpr_("BLOCK_R", block_rows(rows))
                    .constexpr_("BLOCK_N", bn)
                    .constexpr_("BLOCK_K", kBlockK)
                    .grid(ceil_div(hidden, bn))
                    .pointer("x_ptr", b.x)
                    .pointer("w_ptr", block.gate_up_weight)
                    .pointer("b_ptr", block.gate_up_bias)
                    .pointer("out_ptr", b.hidden)
                    .i32("R", rows)
                    .i32_16("N", hidden)
                    .i32_16("K", d)
                    .stride("stride_x", d)
                    .stride("stride_w", d)
                    .stride("stride_out", hidden)
                    .f32("eps", s.eps)
                    .bytes((2 * hidden * d + 2 * hidden) * es + rows * d * es, rows * hidden * es)
                    .done());

  Linear down{b.hidden, hidden, nullptr, block.down_weight, block.down_bias, d, hidden, b.x, d};
  down.residual = true;
  out.push_back(linear(s, name + ": down + residual", down));
}

}  // namespace

int64_t element_bytes(ElementType type) { return type == ElementType::kBFloat16 ? 2 : 4; }

const char* element_name(ElementType type) {
  return type == ElementType::kBFloat16 ? "bf16" : "fp32";
}

int block_rows(int64_t rows) {
  for (const int size : {16, 32, 64}) {
    if (rows <= size) return size;
  }
  throw std::invalid_argument("decode plan: " + std::to_string(rows) +
                              " rows; the kernels take at most " + std::to_string(kMaxRows));
}

int block_columns(int64_t columns, int multiprocessors) {
  int size = 16;
  while (size < 64 && static_cast<double>(columns) / (2.0 * size) >=
                          2.0 * static_cast<double>(multiprocessors)) {
    size *= 2;
  }
  return size;
}

int block_keys(int64_t head_dim) { return head_dim <= 64 ? 64 : 32; }

int attention_splits(int64_t rows, int64_t heads, int64_t cache_len, int64_t head_dim,
                     int multiprocessors) {
  const int64_t wanted = ceil_div(2 * static_cast<int64_t>(multiprocessors), rows * heads);
  const int64_t blocks = ceil_div(cache_len, block_keys(head_dim));
  return static_cast<int>(std::max<int64_t>(1, std::min({wanted, int64_t{kMaxSplits}, blocks})));
}

std::string unsupported(const DecodeShape& s) {
  if (s.embed <= 0 || s.heads <= 0 || s.embed % s.heads != 0) {
    return "n_embd " + std::to_string(s.embed) + " is not a multiple of n_head " +
           std::to_string(s.heads);
  }
  const int64_t hd = s.head_dim();
  if (hd != 32 && hd != 64 && hd != 128) {
    return "head dim " + std::to_string(hd) + " (n_embd / n_head): the kernels take 32, 64, 128";
  }
  if (s.embed % 16 != 0) return "n_embd " + std::to_string(s.embed) + " is not a multiple of 16";
  if (s.batch < 1 || s.rows() > kMaxRows) {
    return std::to_string(s.rows()) + " rows (batch " + std::to_string(s.batch) +
           (s.cfg ? " with guidance" : "") + "): the kernels take 1.." + std::to_string(kMaxRows);
  }
  if (s.codes < 1 || s.cond_len < 1 || s.tokens < 1 || s.blocks() < 1) {
    return "codes, condition tokens, tokens and blocks must be positive";
  }
  return "";
}

WorkspaceBytes workspace_bytes(const DecodeShape& s) {
  const int64_t rows = s.rows(), d = s.embed, es = element_bytes(s.dtype);
  const int64_t parts = rows * s.heads * kMaxSplits;
  return {rows * d * es,        rows * 3 * d * es,        rows * d * es,
          rows * 4 * d * es,    parts * s.head_dim() * 4, parts * 2 * 4,
          s.batch * s.codes * 4};
}

std::vector<KernelLaunch> plan_decode_step(const DecodeShape& s, const DecodeBuffers& b) {
  const std::string why = unsupported(s);
  require(why.empty(), why);
  require(static_cast<int64_t>(b.blocks.size()) == s.blocks(),
          std::to_string(b.blocks.size()) + " blocks of buffers for " + std::to_string(s.blocks()) +
              " blocks");
  require(!s.cfg || b.guidance != nullptr, "guidance has no address (cfg)");
  std::vector<KernelLaunch> out;
  for (size_t i = 0; i < b.blocks.size(); ++i) add_block(s, b, i, out);

  const int64_t d = s.embed, es = element_bytes(s.dtype);
  const int bn = block_columns(s.codes, s.multiprocessors);
  out.push_back(LaunchBuilder("logits_kernel", "LN + lm_head + guidance", s.dtype)
                    .constexpr_("CFG", s.cfg)
                    .constexpr_("BLOCK_B", block_rows(s.batch))
                    .constexpr_("BLOCK_N", bn)
                    .constexpr_("BLOCK_K", kBlockK)
                    .grid(ceil_div(s.codes, bn))
                    .pointer("x_ptr", b.x)
                    .pointer("w_ptr", b.lm_head)
                    .pointer("out_ptr", b.logits)
                    .pointer("guidance_ptr", s.cfg ? b.guidance : b.logits)
                    .pointer("steps_ptr", b.positions)
                    .i32("B", s.batch)
                    .i32("N", s.codes)
                    .i32_16("K", d)
                    .stride("stride_x", d)
                    .stride("stride_w", d)
                    .stride("stride_out", s.codes)
                    .f32("eps", s.eps)
                    .i32("total_tokens", s.tokens)
                    .bytes(s.codes * d * es + s.rows() * d * es + s.batch * (s.cfg ? 16 : 8),
                           s.batch * s.codes * 4)
                    .done());
  return out;
}

VirtualBuffers virtual_buffers(const DecodeShape& s) {
  const std::string why = unsupported(s);
  require(why.empty(), why);
  VirtualBuffers v;
  uint64_t next = uint64_t{1} << 40;  // far from anything real, and never dereferenced
  const auto take = [&](const std::string& name, int64_t bytes) {
    const uint64_t begin = next;
    v.ranges.push_back({name, begin, static_cast<uint64_t>(bytes)});
    next += (static_cast<uint64_t>(bytes) + 4095) / 4096 * 4096 + 4096;
    return reinterpret_cast<void*>(begin);
  };
  const int64_t d = s.embed, es = element_bytes(s.dtype), hd = s.head_dim();
  const int64_t vocab = s.codes + 3;
  DecodeBuffers& b = v.buffers;
  b.wte = take("wte", vocab * d * es);
  b.lm_head = take("lm_head", vocab * d * es);
  b.rope_cos = take("rope_cos", (s.tokens + 1) * (hd / 2) * 4);
  b.rope_sin = take("rope_sin", (s.tokens + 1) * (hd / 2) * 4);
  b.token_ids = take("token_ids", s.batch * 8);
  b.positions = take("positions", s.batch * 8);
  b.guidance = take("guidance", s.batch * 8);
  for (int64_t i = 0; i < s.blocks(); ++i) {
    const std::string p = "blocks[" + std::to_string(i) + "].";
    const int64_t len = i < s.dual_blocks ? s.dual_len() : s.single_len();
    BlockBuffers block;
    block.qkv_weight = take(p + "qkv_weight", 3 * d * d * es);
    block.qkv_bias = take(p + "qkv_bias", 3 * d * es);
    block.q_norm = take(p + "q_norm", hd * es);
    block.k_norm = take(p + "k_norm", hd * es);
    block.proj_weight = take(p + "proj_weight", d * d * es);
    block.proj_bias = take(p + "proj_bias", d * es);
    block.gate_up_weight = take(p + "gate_up_weight", 8 * d * d * es);
    block.gate_up_bias = take(p + "gate_up_bias", 8 * d * es);
    block.down_weight = take(p + "down_weight", 4 * d * d * es);
    block.down_bias = take(p + "down_bias", d * es);
    block.keys = take(p + "keys", s.rows() * s.heads * len * hd * es);
    block.values = take(p + "values", s.rows() * s.heads * len * hd * es);
    block.cache_head_stride = len * hd;
    block.cache_row_stride = s.heads * len * hd;
    b.blocks.push_back(block);
  }
  const WorkspaceBytes w = workspace_bytes(s);
  b.x = take("x", w.x);
  b.qkv = take("qkv", w.qkv);
  b.attention = take("attention", w.attention);
  b.hidden = take("hidden", w.hidden);
  b.partial_out = take("partial_out", w.partial_out);
  b.partial_stats = take("partial_stats", w.partial_stats);
  b.logits = take("logits", w.logits);
  return v;
}

}  // namespace cube3d::kernels
