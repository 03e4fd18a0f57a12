"""The Triton kernels (kernels/decode_kernels.py) composed into one decode step, launch by launch
as kernels/decode_plan.cpp composes them: the same kernels, grids, block sizes and splits (the
policy functions below mirror decode_plan.cpp's; tests/kernels/test_plan_replay.py checks the C++
plan against them).

The tests hold their tensors on the CPU. Under TRITON_INTERPRET=1 (the default: CI) the kernels
run there; with CUBE3D_KERNEL_TEST_DEVICE=cuda (scripts/gpu_check.sh) each launch copies its
tensors to the GPU, runs the compiled kernel and copies them back, so the same tests check the
compiled kernels."""
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

DEVICE = os.environ.get("CUBE3D_KERNEL_TEST_DEVICE", "cpu")
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
else:
    os.environ.pop("TRITON_INTERPRET", None)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "kernels"))
import decode_kernels as dk  # noqa: E402

if DEVICE == "cpu":
    import interpreter_fixes

    interpreter_fixes.apply()


def launch(kernel, grid, *args, **constexprs):
    """kernel[grid](*args, **constexprs), on DEVICE: tensor arguments go there (one copy per
    tensor, however often it is passed) and come back, written, when the kernel is done."""
    if DEVICE == "cpu":
        kernel[grid](*args, **constexprs)
        return
    copies = {}
    moved = []
    for a in args:
        if isinstance(a, torch.Tensor):
            if id(a) not in copies:
                copies[id(a)] = (a, a.to(DEVICE))
            moved.append(copies[id(a)][1])
        else:
            moved.append(a)
    kernel[grid](*moved, **constexprs)
    torch.cuda.synchronize()
    for original, copy in copies.values():
        original.copy_(copy.cpu())

# The multiprocessors the launch policy fills (an H100 / H200 has 132): decode_plan.cpp's
# DecodeShape::multiprocessors. Each launch aims at about two programs per multiprocessor. The
# interpreter runs one program at a time, so the whole-step tests ask for fewer, larger ones.
MULTIPROCESSORS = 132


def block_r(rows):
    """Rows padded to the tensor cores' M: 16, 32 or 64."""
    for size in (16, 32, 64):
        if rows <= size:
            return size
    raise ValueError(f"{rows} rows: the kernels take at most 64")


def block_n(n, sms=MULTIPROCESSORS):
    """Output columns per GEMV program: a power of two in 16..64 giving about two programs per
    multiprocessor (16, the tensor cores' smallest N, for the D-wide projections)."""
    size = 16
    while size < 64 and n / (2 * size) >= 2 * sms:
        size *= 2
    return size


BLOCK_K = 64


def block_kv(head_dim):
    return 64 if head_dim <= 64 else 32


def attention_splits(rows, heads, cache_len, head_dim, sms=MULTIPROCESSORS):
    """Key splits per (row, head): about two programs per multiprocessor, at least one block of
    keys each."""
    wanted = math.ceil(2 * sms / (rows * heads))
    blocks = math.ceil(cache_len / block_kv(head_dim))
    return max(1, min(wanted, dk.MAX_SPLITS, blocks))


@dataclass
class Workspace:
    x: torch.Tensor  # [R, D] the residual stream
    qkv: torch.Tensor  # [R, 3D]
    a: torch.Tensor  # [R, D] attention output, heads merged
    h: torch.Tensor  # [R, 4D] the MLP's hidden activations
    part_o: torch.Tensor  # [R, H, MAX_SPLITS, hd] float32
    part_ml: torch.Tensor  # [R, H, MAX_SPLITS, 2] float32
    mixed: torch.Tensor  # [B, C] float32: the guided logits

    @staticmethod
    def make(dims, batch, cfg, dtype, device="cpu", poison=True):
        rows = 2 * batch if cfg else batch
        fill = float("nan") if poison else 0.0
        d, hd = dims.d, dims.head_dim

        def empty(*shape, dt=dtype):
            return torch.full(shape, fill, dtype=dt, device=device)

        return Workspace(x=empty(rows, d), qkv=empty(rows, 3 * d), a=empty(rows, d),
                         h=empty(rows, 4 * d),
                         part_o=empty(rows, dims.heads, dk.MAX_SPLITS, hd, dt=torch.float32),
                         part_ml=empty(rows, dims.heads, dk.MAX_SPLITS, 2, dt=torch.float32),
                         mixed=empty(batch, dims.codes, dt=torch.float32))


def launch_linear(x, w, b, out, *, ln=False, eps=0.0, tokens=None, batch=1, residual=None,
                  x_out=None, rows=None, sms=MULTIPROCESSORS):
    """linear_kernel over every column of w: out = LN?(x) @ w^T + b (+ residual). tokens: x is
    an embedding table gathered by tokens[r % batch], and x_out receives the gathered rows."""
    rows = rows if rows is not None else out.shape[0]
    n, k = w.shape
    gather = tokens is not None
    res = residual if residual is not None else (x_out if gather else out)
    bn = block_n(n, sms)
    launch(dk.linear_kernel, (math.ceil(n / bn),),
        x, tokens if gather else out, w, b, res, out, x_out if gather else out,
        rows, batch, n, k, x.stride(0), w.stride(0), res.stride(0), out.stride(0), eps,
        LN=ln, GATHER=gather, RESIDUAL=residual is not None,
        BLOCK_R=block_r(rows), BLOCK_N=bn, BLOCK_K=BLOCK_K)


def launch_gate_up(x, w, b, out, eps, sms=MULTIPROCESSORS):
    rows, k = x.shape
    n = w.shape[0] // 2
    bn = block_n(n, sms)
    launch(dk.gate_up_kernel, (math.ceil(n / bn),),
        x, w, b, out, rows, n, k, x.stride(0), w.stride(0), out.stride(0), eps,
        BLOCK_R=block_r(rows), BLOCK_N=bn, BLOCK_K=BLOCK_K)


def launch_logits(x, w, out, guidance, steps, codes, eps, total_tokens, sms=MULTIPROCESSORS):
    """logits_kernel: out [B, C] float32; guidance None: no CFG rows."""
    batch = out.shape[0]
    cfg = guidance is not None
    k = x.shape[1]
    bn = block_n(codes, sms)
    launch(dk.logits_kernel, (math.ceil(codes / bn),),
        x, w, out, guidance if cfg else out, steps, batch, codes, k, x.stride(0), w.stride(0),
        out.stride(0), eps, total_tokens, CFG=cfg, BLOCK_B=block_r(batch), BLOCK_N=bn,
        BLOCK_K=BLOCK_K)


def launch_attention(qkv, q_norm, k_norm, cos, sin, positions, keys, values, out, ws, *, batch,
                     heads, slot_base, first_key_only=False, splits=None, sms=MULTIPROCESSORS):
    """attention_kernel (+ attention_reduce_kernel when the keys are split) for every row and
    head; keys / values [R, H, L, hd] views of the cache."""
    rows, _, cache_len, hd = keys.shape
    splits = splits or attention_splits(rows, heads, cache_len, hd, sms)
    one = splits == 1
    launch(dk.attention_kernel, (rows * heads, splits),
        qkv, q_norm, k_norm, cos, sin, positions, keys, values, out, ws.part_o, ws.part_ml,
        batch, heads, slot_base, int(first_key_only), cache_len, splits,
        qkv.stride(0), keys.stride(0), keys.stride(1), out.stride(0), 1e-5,
        1.0 / math.sqrt(hd), HD=hd, BLOCK_KV=block_kv(hd), ONE_SPLIT=one)
    if not one:
        launch(dk.attention_reduce_kernel, (rows * heads,),
            ws.part_o, ws.part_ml, out, heads, splits, out.stride(0), HD=hd,
            MAX_SPLITS=dk.MAX_SPLITS)
    return splits


def block_step(model, block, ws, positions, keys, values, slot_base, *, batch, first=False,
               tokens=None, first_key_only=False, splits=None, sms=MULTIPROCESSORS):
    """One block through the kernels on ws.x (for the first block: gathered from the tokens)."""
    dims = model.dims
    eps = dims.eps
    if first:
        launch_linear(model.wte, block.qkv_w, block.qkv_b, ws.qkv, ln=True, eps=eps,
                      tokens=tokens, batch=batch, x_out=ws.x, sms=sms)
    else:
        launch_linear(ws.x, block.qkv_w, block.qkv_b, ws.qkv, ln=True, eps=eps, batch=batch,
                      sms=sms)
    launch_attention(ws.qkv, block.q_norm, block.k_norm, model.cos, model.sin, positions, keys,
                     values, ws.a, ws, batch=batch, heads=dims.heads, slot_base=slot_base,
                     first_key_only=first_key_only, splits=splits, sms=sms)
    launch_linear(ws.a, block.proj_w, block.proj_b, ws.x, residual=ws.x, batch=batch, sms=sms)
    launch_gate_up(ws.x, block.gate_up_w, block.gate_up_b, ws.h, eps, sms=sms)
    launch_linear(ws.h, block.down_w, block.down_b, ws.x, residual=ws.x, batch=batch, sms=sms)


def decode_step(model, ws, tokens, positions, keys, values, guidance=None, first_key_only=False,
                sms=MULTIPROCESSORS):
    """The whole step: ws.mixed gets the guided logits [B, C]; every block's new key and value
    go into keys / values. tokens, positions [B] int64; guidance [B] float64 or None."""
    dims = model.dims
    batch = tokens.shape[0]
    for i, block in enumerate(model.blocks):
        dual = i < dims.dual_blocks
        block_step(model, block, ws, positions, keys[i], values[i],
                   dims.cond_len if dual else 0, batch=batch, first=i == 0, tokens=tokens,
                   first_key_only=first_key_only and not dual, sms=sms)
    launch_logits(ws.x, model.lm_head, ws.mixed, guidance, positions, dims.codes, dims.eps,
                  dims.tokens, sms=sms)
    return ws.mixed
