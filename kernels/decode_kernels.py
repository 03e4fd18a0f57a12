"""The shape GPT's decode step as a few fused Triton kernels (docs/architecture.md, "The model").

One decode step feeds one new token per row (R rows: B requests, 2B with guidance, [cond ; uncond])
through every block and ends in the guided logits that sampling reads. Per block:

  linear_kernel (LN=1)        h = LN(x); qkv = h @ [c_qk ; c_v]^T + b        (layer 0 also gathers
                                                                             x = wte[token])
  attention_kernel            q, k = RoPE(RMSNorm(q)), RoPE(RMSNorm(k)); k, v into the KV cache;
                              split-K (flash-decoding) softmax(q K^T / sqrt(hd)) V over the
                              visible slots
  attention_reduce_kernel     the splits combined (only when a row's keys are split)
  linear_kernel (RESIDUAL=1)  x = x + a @ c_proj^T + b
  gate_up_kernel              u = silu(LN(x) @ gate^T + bg) * (LN(x) @ up^T + bu)
  linear_kernel (RESIDUAL=1)  x = x + u @ down^T + b

and once per step logits_kernel: the final LN, lm_head over the code columns and the
classifier-free guidance mix, so the sampler gets [B, C] float32 as Generator's guided_logits
would give it.

The roundings are the libtorch path's on CUDA in bfloat16 (model/layers.cpp): every op's output
is rounded to the activation dtype where that path rounds it, while norms, RoPE, softmax and
every accumulation run in float32; in float32 the roundings are no-ops and the math is the CPU
path's. Matrix products use tl.dot with the rows padded to BLOCK_R >= 16 (the tensor cores'
smallest M) and input_precision "ieee" (float32 operands exact, not tf32; a bf16 product is
exact either way): a decode step's GEMVs are bound by reading the weights, which each program
reads once, whatever the row count. (Helpers inside the K loops are written out, not called:
the interpreter pays milliseconds for every call of a jit function.)

These kernels know nothing of libtorch (docs/architecture.md's layers; scripts/check_layering.py
refuses a torch import here). Under TRITON_INTERPRET=1 they run on the CPU
(tests/kernels/test_decode_kernels.py); kernels/build_cubins.py compiles them ahead of time for
the CUDA build, and kernels/decode_plan.cpp launches them.
"""
import triton
import triton.language as tl

# The largest number of key splits attention_reduce_kernel combines (a power of two).
MAX_SPLITS = 32


@triton.jit
def _row_stats(x_ptr, row_offset, row_mask, K, eps, BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    """LayerNorm's mean and 1/std of each row (float32, two passes, biased variance)."""
    total = tl.zeros([BLOCK_R], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + row_offset[:, None] + k[None, :],
                    mask=row_mask[:, None] & (k[None, :] < K), other=0.0).to(tl.float32)
        total += tl.sum(x, axis=1)
    mean = total / K
    squares = tl.zeros([BLOCK_R], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        valid = row_mask[:, None] & (k[None, :] < K)
        x = tl.load(x_ptr + row_offset[:, None] + k[None, :], mask=valid, other=0.0)
        centred = tl.where(valid, x.to(tl.float32) - mean[:, None], 0.0)
        squares += tl.sum(centred * centred, axis=1)
    return mean, 1.0 / tl.sqrt(squares / K + eps)


@triton.jit
def linear_kernel(x_ptr, tokens_ptr, w_ptr, b_ptr, res_ptr, out_ptr, x_out_ptr,
                  R, B, N, K, stride_x, stride_w, stride_res, stride_out, eps,
                  LN: tl.constexpr, GATHER: tl.constexpr, RESIDUAL: tl.constexpr,
                  BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """out[:, n] = round(LN?(x) @ w[n]^T + b[n]) (+ res[:, n], rounded again) for this program's
    BLOCK_N columns n of every row.

    LN: x goes through LayerNorm (no affine, eps) first. GATHER: x is the embedding table and row
    r reads its row tokens[r % B] (the fed token, the same for a request's cond and uncond rows);
    program 0 also writes those rows to x_out (the residual stream's first value). RESIDUAL:
    res (which may be out itself: each program reads and writes only its own columns) is added.
    """
    pid = tl.program_id(0)
    rows = tl.arange(0, BLOCK_R)
    row_mask = rows < R
    if GATHER:
        token = tl.load(tokens_ptr + rows % B, mask=row_mask, other=0)
        row_offset = token.to(tl.int64) * stride_x
    else:
        row_offset = rows.to(tl.int64) * stride_x
    if GATHER:
        if pid == 0:
            for k0 in range(0, K, BLOCK_K):
                k = k0 + tl.arange(0, BLOCK_K)
                valid = row_mask[:, None] & (k[None, :] < K)
                x = tl.load(x_ptr + row_offset[:, None] + k[None, :], mask=valid, other=0.0)
                tl.store(x_out_ptr + rows[:, None].to(tl.int64) * stride_res + k[None, :], x,
                         mask=valid)
    mean = tl.zeros([BLOCK_R], dtype=tl.float32)
    rstd = tl.zeros([BLOCK_R], dtype=tl.float32)
    if LN:
        mean, rstd = _row_stats(x_ptr, row_offset, row_mask, K, eps, BLOCK_R, BLOCK_K)
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = n < N
    acc = tl.zeros([BLOCK_R, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + row_offset[:, None] + k[None, :],
                    mask=row_mask[:, None] & (k[None, :] < K), other=0.0)
        if LN:
            x = ((x.to(tl.float32) - mean[:, None]) * rstd[:, None]).to(x_ptr.dtype.element_ty)
        w = tl.load(w_ptr + n[:, None].to(tl.int64) * stride_w + k[None, :],
                    mask=n_mask[:, None] & (k[None, :] < K), other=0.0)
        acc = tl.dot(x, tl.trans(w), acc, input_precision="ieee")
    bias = tl.load(b_ptr + n, mask=n_mask, other=0.0).to(tl.float32)
    y = (acc + bias[None, :]).to(out_ptr.dtype.element_ty)
    out_mask = row_mask[:, None] & n_mask[None, :]
    if RESIDUAL:
        # (GATHER's rows are not readable here: program 0 may still be writing them.)
        res = tl.load(res_ptr + rows[:, None].to(tl.int64) * stride_res + n[None, :],
                      mask=out_mask, other=0.0)
        y = (res.to(tl.float32) + y.to(tl.float32)).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + rows[:, None].to(tl.int64) * stride_out + n[None, :], y, mask=out_mask)


@triton.jit
def gate_up_kernel(x_ptr, w_ptr, b_ptr, out_ptr, R, N, K, stride_x, stride_w, stride_out, eps,
                   BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The SwiGLU MLP's first half on LN(x): w is [gate ; up] ([2N, K], packed at load), so this
    program's columns n read gate rows n and up rows N + n; out[:, n] = silu(g) * u, with g, u,
    silu(g) and the product each rounded to the dtype as the libtorch ops round them."""
    pid = tl.program_id(0)
    rows = tl.arange(0, BLOCK_R)
    row_mask = rows < R
    row_offset = rows.to(tl.int64) * stride_x
    mean, rstd = _row_stats(x_ptr, row_offset, row_mask, K, eps, BLOCK_R, BLOCK_K)
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = n < N
    gate = tl.zeros([BLOCK_R, BLOCK_N], dtype=tl.float32)
    up = tl.zeros([BLOCK_R, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + row_offset[:, None] + k[None, :],
                    mask=row_mask[:, None] & (k[None, :] < K), other=0.0)
        x = ((x.to(tl.float32) - mean[:, None]) * rstd[:, None]).to(x_ptr.dtype.element_ty)
        w_mask = n_mask[:, None] & (k[None, :] < K)
        wg = tl.load(w_ptr + n[:, None].to(tl.int64) * stride_w + k[None, :], mask=w_mask,
                     other=0.0)
        wu = tl.load(w_ptr + (n[:, None] + N).to(tl.int64) * stride_w + k[None, :], mask=w_mask,
                     other=0.0)
        gate = tl.dot(x, tl.trans(wg), gate, input_precision="ieee")
        up = tl.dot(x, tl.trans(wu), up, input_precision="ieee")
    dtype = out_ptr.dtype.element_ty
    g = (gate + tl.load(b_ptr + n, mask=n_mask, other=0.0).to(tl.float32)[None, :]).to(dtype)
    u = (up + tl.load(b_ptr + N + n, mask=n_mask, other=0.0).to(tl.float32)[None, :]).to(dtype)
    gf = g.to(tl.float32)
    silu = (gf / (1.0 + tl.exp(-gf))).to(dtype)
    y = (silu.to(tl.float32) * u.to(tl.float32)).to(dtype)
    tl.store(out_ptr + rows[:, None].to(tl.int64) * stride_out + n[None, :], y,
             mask=row_mask[:, None] & n_mask[None, :])


@triton.jit
def logits_kernel(x_ptr, w_ptr, out_ptr, guidance_ptr, steps_ptr, B, N, K, stride_x, stride_w,
                  stride_out, eps, total_tokens, CFG: tl.constexpr, BLOCK_B: tl.constexpr,
                  BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The guided code logits [B, N] float32 of the final LayerNorm and lm_head (N = C columns;
    the special tokens' are never candidates). Without CFG the rounded logits themselves; with
    it rows [0, B) are cond and [B, 2B) uncond, mixed per request b as the sampler does:
    gamma = g_b (T - i_b) / T in float64, rounded once, (1 + gamma) l_cond - gamma l_uncond."""
    pid = tl.program_id(0)
    rows = tl.arange(0, BLOCK_B)
    row_mask = rows < B
    cond_offset = rows.to(tl.int64) * stride_x
    mean_c, rstd_c = _row_stats(x_ptr, cond_offset, row_mask, K, eps, BLOCK_B, BLOCK_K)
    uncond_offset = (rows + B).to(tl.int64) * stride_x
    mean_u = tl.zeros([BLOCK_B], dtype=tl.float32)
    rstd_u = tl.zeros([BLOCK_B], dtype=tl.float32)
    if CFG:
        mean_u, rstd_u = _row_stats(x_ptr, uncond_offset, row_mask, K, eps, BLOCK_B, BLOCK_K)
    # The schedule first, while few registers are live: ptxas calls a subroutine for a float64
    # division, and around a loop's accumulators that call spilled.
    gamma = tl.zeros([BLOCK_B], dtype=tl.float32)
    one_plus_gamma = tl.zeros([BLOCK_B], dtype=tl.float32)
    if CFG:
        g = tl.load(guidance_ptr + rows, mask=row_mask, other=0.0).to(tl.float64)
        step = tl.load(steps_ptr + rows, mask=row_mask, other=0).to(tl.float64)
        t = total_tokens.to(tl.float64)
        gamma64 = g * (t - step) / t
        gamma = gamma64.to(tl.float32)
        one_plus_gamma = (gamma64 + 1.0).to(tl.float32)
    n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = n < N
    cond = tl.zeros([BLOCK_B, BLOCK_N], dtype=tl.float32)
    uncond = tl.zeros([BLOCK_B, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + tl.arange(0, BLOCK_K)
        w = tl.load(w_ptr + n[:, None].to(tl.int64) * stride_w + k[None, :],
                    mask=n_mask[:, None] & (k[None, :] < K), other=0.0)
        wt = tl.trans(w)
        x_mask = row_mask[:, None] & (k[None, :] < K)
        x = tl.load(x_ptr + cond_offset[:, None] + k[None, :], mask=x_mask, other=0.0)
        x = ((x.to(tl.float32) - mean_c[:, None]) * rstd_c[:, None]).to(x_ptr.dtype.element_ty)
        cond = tl.dot(x, wt, cond, input_precision="ieee")
        if CFG:
            x = tl.load(x_ptr + uncond_offset[:, None] + k[None, :], mask=x_mask, other=0.0)
            x = ((x.to(tl.float32) - mean_u[:, None]) * rstd_u[:, None]).to(x_ptr.dtype.element_ty)
            uncond = tl.dot(x, wt, uncond, input_precision="ieee")
    dtype = x_ptr.dtype.element_ty
    y = cond.to(dtype).to(tl.float32)
    if CFG:
        y = one_plus_gamma[:, None] * y - gamma[:, None] * uncond.to(dtype).to(tl.float32)
    tl.store(out_ptr + rows[:, None].to(tl.int64) * stride_out + n[None, :], y,
             mask=row_mask[:, None] & n_mask[None, :])


@triton.jit
def _norm_rope(base_ptr, weight_ptr, cos, sin, eps, HD: tl.constexpr):
    """One head's RMSNorm (weight, eps), rounded, then RoPE of its interleaved pairs, rounded:
    [HD] in the input's dtype, as model/layers.cpp and kernels/qk_norm_rope.cu compute it."""
    dtype = base_ptr.dtype.element_ty
    pairs = tl.arange(0, HD // 2)[:, None] * 2 + tl.arange(0, 2)[None, :]
    x = tl.load(base_ptr + pairs).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(tl.sum(x * x, axis=1), axis=0) / HD + eps)
    x = (x * rstd * tl.load(weight_ptr + pairs).to(tl.float32)).to(dtype).to(tl.float32)
    even, odd = tl.split(x)
    rotated = tl.join(even * cos - odd * sin, even * sin + odd * cos)
    return tl.reshape(rotated, (HD,)).to(dtype)


@triton.jit
def attention_kernel(qkv_ptr, q_norm_ptr, k_norm_ptr, cos_ptr, sin_ptr, positions_ptr,
                     keys_ptr, values_ptr, out_ptr, part_o_ptr, part_ml_ptr,
                     B, H, slot_base, first_key_only, cache_len, splits,
                     stride_qkv, stride_cache_row, stride_cache_head, stride_out, eps, sm_scale,
                     HD: tl.constexpr, BLOCK_KV: tl.constexpr, ONE_SPLIT: tl.constexpr):
    """One (row, head) of one block's attention, over one split of its visible keys.

    qkv [R, 3D] is the block's projection (q heads, k heads, v heads). The new token of row r
    sits at shape position p = positions[r % B] and cache slot slot_base + p (dual blocks: after
    the S condition tokens; single blocks: at p). Its q and k get the q/k RMSNorm (eps) and the
    rotation at p (cos / sin tables [*, HD/2] float32); split 0 writes k and v into the cache
    ([R, H, cache_len, HD] each, rows stride_cache_row apart, heads stride_cache_head apart).
    Visible: slots 0..slot_base + p, or slot 0 alone with first_key_only (the single block's
    `reference` decode). The visible slots are cut into `splits` runs of whole BLOCK_KV blocks,
    one per program along grid axis 1; a program whose run includes the new slot takes its key
    and value from registers (another program may still be writing them). ONE_SPLIT: the program
    writes the normalised output [R, D] itself; otherwise its unnormalised output, maximum and
    sum go to part_o [R, H, splits, HD] / part_ml [R, H, splits, 2] (float32) for
    attention_reduce_kernel."""
    pid = tl.program_id(0)
    split = tl.program_id(1)
    row = pid // H
    head = pid % H
    dtype = qkv_ptr.dtype.element_ty
    position = tl.load(positions_ptr + row % B)
    slot = slot_base + position
    half = tl.arange(0, HD // 2)
    cos = tl.load(cos_ptr + position * (HD // 2) + half)
    sin = tl.load(sin_ptr + position * (HD // 2) + half)
    d = H * HD
    q_base = qkv_ptr + row.to(tl.int64) * stride_qkv + head * HD
    q = _norm_rope(q_base, q_norm_ptr, cos, sin, eps, HD).to(tl.float32)
    k_new = _norm_rope(q_base + d, k_norm_ptr, cos, sin, eps, HD)
    dims = tl.arange(0, HD)
    v_new = tl.load(q_base + 2 * d + dims)
    cache_offset = row.to(tl.int64) * stride_cache_row + head.to(tl.int64) * stride_cache_head
    if split == 0:
        tl.store(keys_ptr + cache_offset + slot.to(tl.int64) * HD + dims, k_new)
        tl.store(values_ptr + cache_offset + slot.to(tl.int64) * HD + dims, v_new)

    last = tl.minimum(slot, cache_len - 1)
    if first_key_only != 0:
        last = last * 0
    visible = last + 1
    run = tl.cdiv(tl.cdiv(visible, splits), BLOCK_KV) * BLOCK_KV
    start = split * run
    end = tl.minimum(start + run, visible)
    m = tl.full([1], float("-inf"), dtype=tl.float32)
    total = tl.zeros([1], dtype=tl.float32)
    acc = tl.zeros([HD], dtype=tl.float32)
    for block in range(start, end, BLOCK_KV):
        offs = block + tl.arange(0, BLOCK_KV)
        valid = offs < end
        where = cache_offset + offs[:, None].to(tl.int64) * HD + dims[None, :]
        is_new = (offs == slot)[:, None]
        k = tl.load(keys_ptr + where, mask=valid[:, None], other=0.0)
        k = tl.where(is_new, k_new[None, :], k).to(tl.float32)
        scores = tl.sum(q[None, :] * k, axis=1) * sm_scale
        scores = tl.where(valid, scores, float("-inf"))
        # Every block starts at a visible slot, so its maximum is finite.
        m_new = tl.maximum(m, tl.max(scores, axis=0))
        alpha = tl.exp(m - m_new)
        p = tl.exp(scores - m_new)
        v = tl.load(values_ptr + where, mask=valid[:, None], other=0.0)
        v = tl.where(is_new, v_new[None, :], v).to(tl.float32)
        # P in the dtype for P V, as the fused attention kernels round it.
        acc = acc * alpha + tl.sum(p.to(dtype).to(tl.float32)[:, None] * v, axis=0)
        total = total * alpha + tl.sum(p, axis=0)
        m = m_new
    if ONE_SPLIT:
        tl.store(out_ptr + row.to(tl.int64) * stride_out + head * HD + dims,
                 (acc / total).to(out_ptr.dtype.element_ty))
    else:
        part = (row.to(tl.int64) * H + head) * splits + split
        tl.store(part_o_ptr + part * HD + dims, acc)
        two = tl.arange(0, 2)
        tl.store(part_ml_ptr + part * 2 + two, tl.where(two == 0, m, total))


@triton.jit
def attention_reduce_kernel(part_o_ptr, part_ml_ptr, out_ptr, H, splits, stride_out,
                            HD: tl.constexpr, MAX_SPLITS: tl.constexpr):
    """out[r, head] = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s over the splits of one
    (row, head) (a split with no visible key has m = -inf and adds nothing)."""
    pid = tl.program_id(0)
    row = pid // H
    head = pid % H
    s = tl.arange(0, MAX_SPLITS)
    s_mask = s < splits
    part = pid.to(tl.int64) * splits + s
    m = tl.load(part_ml_ptr + part * 2, mask=s_mask, other=float("-inf"))
    total = tl.load(part_ml_ptr + part * 2 + 1, mask=s_mask, other=0.0)
    weight = tl.where(s_mask & (m > float("-inf")), tl.exp(m - tl.max(m, axis=0)), 0.0)
    dims = tl.arange(0, HD)
    o = tl.load(part_o_ptr + part[:, None] * HD + dims[None, :], mask=s_mask[:, None], other=0.0)
    out = tl.sum(weight[:, None] * o, axis=0) / tl.sum(weight * total, axis=0)
    tl.store(out_ptr + row.to(tl.int64) * stride_out + head * HD + dims,
             out.to(out_ptr.dtype.element_ty))
