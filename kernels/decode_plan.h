// One decode step of the shape GPT as launches of the Triton kernels (kernels/decode_kernels.py):
// for each block, LN + qkv, attention (q/k norm, RoPE, the cache write, split softmax), the
// splits' reduction when there are several, c_proj + residual, LN + gate/up + SiLU product,
// down + residual; then LN + lm_head + the guidance mix (docs/architecture.md, "The model").
// Which variant (block shapes), which grid and which arguments follow from the model's sizes,
// the bucket and the buffers' addresses alone; tests/kernels/triton_step.py composes the same
// launches in Python, and tests/kernels/test_decode_plan.py replays this plan against it.
// Raw addresses, no libtorch and no CUDA: the engine binds it to its tensors
// (src/engine/triton_decode.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernel_launch.h"

namespace cube3d::kernels {

enum class ElementType { kBFloat16, kFloat32 };
int64_t element_bytes(ElementType type);
const char* element_name(ElementType type);  // "bf16" | "fp32", as build_cubins.py names them

// The sizes of one decode step.
struct DecodeShape {
  int64_t embed = 0;     // D (n_embd), a multiple of 16
  int64_t heads = 0;     // H; the head dim D / H is 32, 64 or 128
  int64_t codes = 0;     // C: the candidate logits (lm_head's first C rows)
  int64_t cond_len = 0;  // S: condition tokens before the shape tokens in a dual block's cache
  int64_t tokens = 0;    // T: caches hold S + 1 + T (dual) and 1 + T (single) slots
  int64_t dual_blocks = 0;
  int64_t single_blocks = 0;
  double eps = 1e-6;            // the config's LayerNorm eps
  int64_t batch = 1;            // B requests
  bool cfg = true;              // with guidance: rows [cond (B) ; uncond (B)]
  bool first_key_only = false;  // single blocks attend to slot 0 alone (single_stream_decode:
                                // reference); their new key and value are still written
  ElementType dtype = ElementType::kBFloat16;
  int multiprocessors = 132;  // the policy aims at about two programs per multiprocessor

  int64_t rows() const { return cfg ? 2 * batch : batch; }
  int64_t head_dim() const { return heads > 0 ? embed / heads : 0; }
  int64_t dual_len() const { return cond_len + 1 + tokens; }
  int64_t single_len() const { return 1 + tokens; }
  int64_t blocks() const { return dual_blocks + single_blocks; }
};

// Where one block's tensors are (weights packed as GptWeights packs them, in the dtype).
struct BlockBuffers {
  const void* qkv_weight = nullptr;      // [3D, D]: [c_qk ; c_v]
  const void* qkv_bias = nullptr;        // [3D] (zeros on the q and k columns)
  const void* q_norm = nullptr;          // [hd]
  const void* k_norm = nullptr;          // [hd]
  const void* proj_weight = nullptr;     // [D, D]
  const void* proj_bias = nullptr;       // [D]
  const void* gate_up_weight = nullptr;  // [8D, D]: [gate ; up]
  const void* gate_up_bias = nullptr;    // [8D]
  const void* down_weight = nullptr;     // [D, 4D]
  const void* down_bias = nullptr;       // [D]
  void* keys = nullptr;    // [R, H, len, hd], slots hd apart; rows and heads as below (elements)
  void* values = nullptr;  // the same layout
  int64_t cache_row_stride = 0;
  int64_t cache_head_stride = 0;
};

// Every address a step reads or writes.
struct DecodeBuffers {
  const void* wte = nullptr;       // [C + 3, D]
  const void* lm_head = nullptr;   // [C + 3, D]
  const void* rope_cos = nullptr;  // [T + 1, hd / 2] float32
  const void* rope_sin = nullptr;
  const void* token_ids = nullptr;   // [B] int64: the token fed to each request
  const void* positions = nullptr;   // [B] int64: its shape position
  const void* guidance = nullptr;    // [B] float64 (with cfg)
  std::vector<BlockBuffers> blocks;  // the dual blocks, then the single blocks
  // The workspace (workspace_bytes): the residual stream [R, D], qkv [R, 3D], attention output
  // [R, D], MLP hidden [R, 4D] (all in the dtype), the splits' outputs [R, H, kMaxSplits, hd]
  // and maxima and sums [R, H, kMaxSplits, 2] (float32), and the guided logits [B, C]
  // (float32, the step's result).
  void* x = nullptr;
  void* qkv = nullptr;
  void* attention = nullptr;
  void* hidden = nullptr;
  void* partial_out = nullptr;
  void* partial_stats = nullptr;
  void* logits = nullptr;
};

struct WorkspaceBytes {
  int64_t x, qkv, attention, hidden, partial_out, partial_stats, logits;
};
WorkspaceBytes workspace_bytes(const DecodeShape& shape);

// The launch policy (tests/kernels/triton_step.py mirrors it). The compiled variants
// (kernels/build_cubins.py) cover every choice it makes.
inline constexpr int kMaxSplits = 32;  // decode_kernels.py MAX_SPLITS
inline constexpr int kBlockK = 64;
inline constexpr int64_t kMaxRows = 64;
int block_rows(int64_t rows);                             // 16, 32 or 64
int block_columns(int64_t columns, int multiprocessors);  // 16, 32 or 64
int block_keys(int64_t head_dim);                         // 64 up to hd 64, else 32
int attention_splits(int64_t rows, int64_t heads, int64_t cache_len, int64_t head_dim,
                     int multiprocessors);

// Why `shape` cannot run through the kernels (empty when it can): a head dim, width, row count
// or dtype the compiled variants do not cover.
std::string unsupported(const DecodeShape& shape);

// The step's launches, in order. Throws std::invalid_argument naming the field when the shape
// is unsupported, an address is missing, or one is not 16-byte aligned (the compiled kernels
// load 16 bytes at a time), or a stride is not a multiple of 16 elements.
std::vector<KernelLaunch> plan_decode_step(const DecodeShape& shape, const DecodeBuffers& buffers);

// Addresses for counting without memory: every buffer of `shape` gets its own range of a
// made-up address space (no two overlap, every one 256-byte aligned), named as in
// DecodeBuffers ("blocks[3].keys"). The recording mode needs nothing more; the addresses must
// never be dereferenced.
struct VirtualBuffers {
  DecodeBuffers buffers;
  struct Range {
    std::string name;
    uint64_t begin = 0;
    uint64_t bytes = 0;
  };
  std::vector<Range> ranges;
};
VirtualBuffers virtual_buffers(const DecodeShape& shape);

}  // namespace cube3d::kernels
