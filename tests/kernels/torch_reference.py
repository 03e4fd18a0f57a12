"""The decode step's math in torch ops, as src/model/shape_gpt.cpp (ShapeGpt::decode_step),
src/model/layers.cpp and src/engine/sampler.cpp (guided_logits) compute it: the reference the
Triton kernels are checked against (tests/kernels/test_decode_kernels.py).

Each function rounds to the activation dtype where the libtorch path rounds (an op's output);
norms, RoPE and softmax run in float32. Linear layers accumulate in float32 and round once, what
cuBLAS's bf16 GEMM with its bias epilogue computes (and, in float32, the CPU path)."""
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

QK_NORM_EPS = 1e-5  # model/layers.h kQkNormEps: the q/k RMSNorms' eps, not the config's


@dataclass
class Dims:
    """A model's sizes (docs/architecture.md's notation)."""
    d: int  # n_embd
    heads: int  # n_head
    codes: int  # C (vocabulary C + 3)
    cond_len: int  # S
    tokens: int  # T
    dual_blocks: int = 1
    single_blocks: int = 1
    eps: float = 1e-6
    rope_theta: float = 10000.0

    @property
    def head_dim(self):
        return self.d // self.heads

    @property
    def dual_len(self):  # KV slots of a dual block: S + 1 + T (slot S + T: the scratch position)
        return self.cond_len + 1 + self.tokens

    @property
    def single_len(self):
        return 1 + self.tokens


# models/demo.yaml and models/cube3d-v0.1.yaml / v0.5.yaml (S: 77 CLIP tokens, + 1 box token).
DEMO = Dims(d=128, heads=4, codes=256, cond_len=77, tokens=64, dual_blocks=4, single_blocks=1)
V01 = Dims(d=1536, heads=12, codes=16384, cond_len=77, tokens=512, dual_blocks=23,
           single_blocks=1)
V05 = Dims(d=1536, heads=12, codes=16384, cond_len=78, tokens=1024, dual_blocks=23,
           single_blocks=1)


def layer_norm(x, eps):
    return F.layer_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


def linear(x, w, b=None):
    y = x.float() @ w.float().t()
    if b is not None:
        y = y + b.float()
    return y.to(x.dtype)


def rms_norm(x, weight, eps=QK_NORM_EPS):
    xf = x.float()
    return (xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def rope(x, cos, sin):
    """Interleaved pairs (x_2j, x_2j+1) rotated by cos / sin [..., hd/2] (layers.cpp apply_rope)."""
    pairs = x.float().unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2).to(x.dtype)


def rope_tables(head_dim, positions, theta=10000.0):
    """cos, sin [positions, hd/2] float32, as model/layers.cpp make_rope_tables."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim
    freqs = torch.reciprocal(torch.pow(torch.tensor(theta, dtype=torch.float32), exponents))
    angles = torch.outer(torch.arange(positions, dtype=torch.float32), freqs)
    return angles.cos().contiguous(), angles.sin().contiguous()


def silu_mul(gate_up):
    g, u = gate_up.chunk(2, -1)
    return F.silu(g) * u


@dataclass
class Block:
    """One block's decode-side weights, packed as GptWeights packs them at load: qkv is
    [c_qk ; c_v] ([3D, D], its bias zero on the q and k columns), gate_up [gate ; up]."""
    qkv_w: torch.Tensor
    qkv_b: torch.Tensor
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    proj_w: torch.Tensor
    proj_b: torch.Tensor
    gate_up_w: torch.Tensor
    gate_up_b: torch.Tensor
    down_w: torch.Tensor
    down_b: torch.Tensor


@dataclass
class Model:
    dims: Dims
    wte: torch.Tensor  # [C + 3, D]
    lm_head: torch.Tensor  # [C + 3, D]
    blocks: list = field(default_factory=list)  # dual blocks, then single blocks
    cos: torch.Tensor = None  # [T + 1, hd / 2]
    sin: torch.Tensor = None


def random_model(dims, dtype, seed=0, vocab_rows=None):
    """Random weights of `dims`, scaled so activations stay near 1 through every block.
    vocab_rows: fewer wte / lm_head rows than C + 3 (a slice of a large vocabulary)."""
    g = torch.Generator().manual_seed(seed)
    d, hd = dims.d, dims.head_dim

    def w(rows, cols):
        return (torch.randn(rows, cols, generator=g) / cols ** 0.5).to(dtype)

    def bias(n, scale=0.1):
        return (torch.randn(n, generator=g) * scale).to(dtype)

    rows = vocab_rows or dims.codes + 3
    model = Model(dims, wte=torch.randn(rows, d, generator=g).to(dtype), lm_head=w(rows, d))
    for _ in range(dims.dual_blocks + dims.single_blocks):
        qkv_b = bias(3 * d)
        qkv_b[:2 * d] = 0  # c_qk has no bias; the packed bias is zero there
        model.blocks.append(Block(
            qkv_w=w(3 * d, d), qkv_b=qkv_b,
            q_norm=(1 + 0.1 * torch.randn(hd, generator=g)).to(dtype),
            k_norm=(1 + 0.1 * torch.randn(hd, generator=g)).to(dtype),
            proj_w=w(d, d), proj_b=bias(d), gate_up_w=w(8 * d, d), gate_up_b=bias(8 * d),
            down_w=w(d, 4 * d), down_b=bias(d)))
    model.cos, model.sin = rope_tables(hd, dims.tokens + 1, dims.rope_theta)
    return model


def random_cache(dims, rows, dtype, seed=1):
    """Keys and values [rows, H, len, hd] of every block, random where earlier steps wrote
    (keys as they are stored: after norm and RoPE, so any values will do)."""
    g = torch.Generator().manual_seed(seed)
    keys, values = [], []
    for i in range(dims.dual_blocks + dims.single_blocks):
        length = dims.dual_len if i < dims.dual_blocks else dims.single_len
        shape = (rows, dims.heads, length, dims.head_dim)
        keys.append(torch.randn(shape, generator=g).to(dtype))
        values.append(torch.randn(shape, generator=g).to(dtype))
    return keys, values


def row_positions(positions, cfg):
    return torch.cat([positions, positions]) if cfg else positions


def attention(q, keys, values, visible):
    """SDPA of q [R, H, 1, hd] over keys / values [R, H, L, hd]; visible [R, L] bool."""
    mask = torch.zeros(visible.shape, dtype=q.dtype).masked_fill(~visible, float("-inf"))
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask[:, None, None, :])


def block_step(model, block, x, positions, keys, values, slot_base, first_key_only=False):
    """One block of the decode step on x [R, D] (one token per row at shape positions [R]):
    writes the new key and value at slot_base + position and returns the new x. Dual blocks
    have slot_base S, single blocks 0 (docs/architecture.md, "Generation")."""
    dims = model.dims
    d, heads, hd = dims.d, dims.heads, dims.head_dim
    rows = x.shape[0]
    p = linear(layer_norm(x, dims.eps), block.qkv_w, block.qkv_b)
    cos, sin = model.cos[positions][:, None, :], model.sin[positions][:, None, :]
    q = rope(rms_norm(p[:, :d].view(rows, heads, hd), block.q_norm), cos, sin)
    k = rope(rms_norm(p[:, d:2 * d].view(rows, heads, hd), block.k_norm), cos, sin)
    v = p[:, 2 * d:].view(rows, heads, hd)
    slots = slot_base + positions
    r = torch.arange(rows)
    keys[r, :, slots] = k
    values[r, :, slots] = v
    index = torch.arange(keys.shape[2])[None, :]
    visible = index.eq(0).expand(rows, -1) if first_key_only else index.le(slots[:, None])
    a = attention(q[:, :, None, :], keys, values, visible).flatten(1)
    x = x + linear(a, block.proj_w, block.proj_b)
    h = silu_mul(linear(layer_norm(x, dims.eps), block.gate_up_w, block.gate_up_b))
    return x + linear(h, block.down_w, block.down_b)


def guided_logits(logits, guidance, steps, codes, total_tokens, cfg):
    """sampler.cpp guided_logits: [B, C] float32 from raw logits [R, >= C]."""
    c = logits[:, :codes].float()
    if not cfg:
        return c
    b = guidance.shape[0]
    gamma64 = guidance.double() * (total_tokens - steps.double()) / total_tokens
    gamma = gamma64.float()[:, None]
    return (gamma64 + 1.0).float()[:, None] * c[:b] - gamma * c[b:]


def decode_step(model, tokens, positions, keys, values, guidance=None, first_key_only=False):
    """ShapeGpt::decode_step plus guided_logits for B requests (tokens, positions [B] int64;
    guidance [B] float64 or None for no CFG rows): returns the guided logits [B, C] float32 and
    writes every block's new key and value."""
    dims = model.dims
    cfg = guidance is not None
    x = model.wte[tokens]
    x = torch.cat([x, x]) if cfg else x
    pos = row_positions(positions, cfg)
    for i, block in enumerate(model.blocks):
        dual = i < dims.dual_blocks
        x = block_step(model, block, x, pos, keys[i], values[i], dims.cond_len if dual else 0,
                       first_key_only=first_key_only and not dual)
    logits = linear(layer_norm(x, dims.eps), model.lm_head)
    return guided_logits(logits, guidance, positions, dims.codes, dims.tokens, cfg)
