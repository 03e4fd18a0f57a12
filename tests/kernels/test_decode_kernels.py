"""The Triton decode kernels (kernels/decode_kernels.py) run by Triton's CPU interpreter
(TRITON_INTERPRET=1) against the same math in torch (tests/kernels/torch_reference.py, the libtorch
path's ops): every kernel at the demo model's sizes and at the v0.1 sizes for a slice of rows
(the full K, a few output columns or heads), in float32 and bfloat16, with the edge cases (bucket 1
and 16, sequence lengths 1 and the maximum, a KV length that is no multiple of the key block);
then one dual and one single block with the logits, composed of the kernels as the C++ plan
composes them (tests/kernels/triton_step.py), against the torch layers.

Outputs and the KV cache's unwritten slots are poisoned with NaN first: a kernel that leaves an
element unwritten, or reads a slot it must not, fails. Float32 results match to float32 rounding;
bfloat16 ones within one unit in the last place of the reference, or, through whole blocks, no
less accurate than the torch path itself (both against a float32 evaluation of the same weights).
With CUBE3D_KERNEL_TEST_DEVICE=cuda the same tests run the compiled kernels on a GPU
(scripts/gpu_check.sh; tests/kernels/triton_step.py says how).
"""
import math
import os
import sys
import unittest
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import torch_reference as ref  # noqa: E402
import triton_step as ts  # noqa: E402  (before triton: it sets TRITON_INTERPRET on the CPU)
from triton_step import dk  # noqa: E402

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

DTYPES = (torch.float32, torch.bfloat16)
NAN = float("nan")


def sms_for(dtype):
    """The launch policy's multiprocessor count: an H100's in float32 (the GPU's block sizes),
    4 in bfloat16 (wider blocks, fewer programs: the interpreter runs one at a time, and bf16
    costs it more), so that both block shapes of each kernel are checked."""
    return ts.MULTIPROCESSORS if dtype == torch.float32 else 4


def setUpModule():
    # numpy 2.4 breaks the interpreter's loops over run-time bounds (scripts/setup_python.sh).
    major, minor = (int(v) for v in np.__version__.split(".")[:2])
    if ts.DEVICE == "cpu" and (major, minor) >= (2, 4):
        raise RuntimeError(f"numpy {np.__version__}: Triton 3.6's interpreter needs numpy < 2.4 "
                           "(scripts/setup_python.sh pins 2.3.5)")


def bf16_ulp(x):
    """One unit in the last place of bfloat16 at the magnitude of x (float32 tensor)."""
    magnitude = x.abs().clamp_min(2.0 ** -100)
    return torch.exp2(torch.floor(torch.log2(magnitude)) - 7)


class Case(unittest.TestCase):
    def assertMatches(self, got, want, what, ulps=1, atol=1e-6):
        """float32: equal to float32 rounding; bfloat16: within `ulps` of the reference, or
        `atol`."""
        self.assertEqual(got.dtype, want.dtype, what)
        self.assertFalse(torch.isnan(got).any().item(), f"{what}: NaN (an element not written?)")
        g, w = got.float(), want.float()
        if got.dtype == torch.float32:
            tol = 1e-5 * w.abs().max().clamp_min(1.0) + 1e-5 * w.abs()
        else:
            tol = ulps * bf16_ulp(w) + atol
        worst = ((g - w).abs() - tol).max().item()
        self.assertLessEqual(worst, 0.0, f"{what}: off by more than the tolerance "
                             f"(max |error| {(g - w).abs().max().item():.3g})")


# --- the interpreter itself -------------------------------------------------------------------

@triton.jit
def _dot_probe(x_ptr, w_ptr, y_ptr):
    r = tl.arange(0, 16)
    x = tl.load(x_ptr + r[:, None] * 16 + r[None, :])
    w = tl.load(w_ptr + r[:, None] * 16 + r[None, :])
    tl.store(y_ptr + r[:, None] * 16 + r[None, :], tl.dot(x, w))


@triton.jit
def _cast_probe(x_ptr, y_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(y_ptr + i, tl.load(x_ptr + i).to(tl.bfloat16))


@unittest.skipUnless(ts.DEVICE == "cpu", "the interpreter's fixes (compiled kernels here)")
class InterpreterFixesTest(Case):
    """tests/kernels/interpreter_fixes.py: what the compiled kernels compute, the interpreter
    computes too."""

    def test_bfloat16_dot_multiplies_values(self):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(16, 16, generator=g).bfloat16()
        w = torch.randn(16, 16, generator=g).bfloat16()
        y = torch.full((16, 16), NAN)
        _dot_probe[(1,)](x, w, y)
        torch.testing.assert_close(y, x.float() @ w.float(), rtol=1e-6, atol=1e-6)

    def test_float32_to_bfloat16_rounds_to_nearest_even(self):
        # Halfway and just-above-halfway cases, where truncation and round-to-nearest differ.
        bits = torch.tensor([0x3F808000, 0x3F818000, 0x3F808001, 0xBF80C000, 0x3F80FFFF,
                             0x7F7FFFFF], dtype=torch.int64).to(torch.int32)
        x = torch.cat([bits.view(torch.float32), torch.randn(58)])
        y = torch.empty(64, dtype=torch.bfloat16)
        _cast_probe[(1,)](x, y, 64)
        self.assertTrue(torch.equal(y.view(torch.int16), x.to(torch.bfloat16).view(torch.int16)))


# --- one kernel at a time ---------------------------------------------------------------------

def randn(*shape, dtype, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


class LinearKernelTest(Case):
    def check(self, rows, n, k, dtype, ln=False, residual=False, seed=0):
        x = randn(rows, k, dtype=dtype, seed=seed)
        w = randn(n, k, dtype=dtype, seed=seed + 1) / math.sqrt(k)
        b = randn(n, dtype=dtype, seed=seed + 2) * 0.1
        h = ref.layer_norm(x, 1e-6) if ln else x
        want = ref.linear(h, w.to(dtype), b)
        if residual:
            out = randn(rows, n, dtype=dtype, seed=seed + 3)
            want = out + want
            ts.launch_linear(x, w.to(dtype), b, out, ln=ln, eps=1e-6, residual=out,
                             sms=sms_for(dtype))
        else:
            out = torch.full((rows, n), NAN, dtype=dtype)
            ts.launch_linear(x, w.to(dtype), b, out, ln=ln, eps=1e-6, sms=sms_for(dtype))
        self.assertMatches(out, want, f"linear rows {rows} n {n} k {k} {dtype} ln {ln} "
                           f"residual {residual}")

    def test_demo_sizes(self):
        # qkv of bucket 1 with guidance (2 rows) and 16 (32 rows), c_proj, and down (K = 4D) of
        # bucket 1 without guidance (1 row).
        for dtype in DTYPES:
            self.check(2, 384, 128, dtype, ln=True)
            self.check(2, 128, 128, dtype, residual=True)
            self.check(1, 128, 512, dtype, residual=True)
        self.check(32, 384, 128, torch.bfloat16, ln=True)

    def test_v01_sizes_a_slice_of_rows(self):
        # The full K of qkv (D = 1536) and of down (4D = 6144) for a few output columns; 33 rows
        # take the 64-row block.
        for dtype in DTYPES:
            self.check(2, 48, 1536, dtype, ln=True)
            self.check(33, 16, 1536, dtype, ln=True)
            self.check(2, 16, 6144, dtype, residual=True)

    def test_gather_embeds_the_fed_tokens(self):
        # Layer 0: each row's input is the embedding of its request's token (rows b and B + b
        # share it), and program 0 writes those rows out as the residual stream.
        for dtype in DTYPES:
            wte = randn(259, 128, dtype=dtype, seed=4)
            w = randn(384, 128, dtype=dtype, seed=5) / math.sqrt(128)
            b = randn(384, dtype=dtype, seed=6)
            tokens = torch.tensor([258, 0, 17])
            x_rows = torch.cat([wte[tokens], wte[tokens]])
            out = torch.full((6, 384), NAN, dtype=dtype)
            x_out = torch.full((6, 128), NAN, dtype=dtype)
            ts.launch_linear(wte, w, b, out, ln=True, eps=1e-6, tokens=tokens, batch=3,
                             x_out=x_out, sms=sms_for(dtype))
            self.assertTrue(torch.equal(x_out, x_rows))
            self.assertMatches(out, ref.linear(ref.layer_norm(x_rows, 1e-6), w, b),
                               f"gathered qkv {dtype}")


class GateUpKernelTest(Case):
    def check(self, rows, hidden, k, dtype):
        x = randn(rows, k, dtype=dtype, seed=7)
        w = randn(2 * hidden, k, dtype=dtype, seed=8) / math.sqrt(k)
        b = randn(2 * hidden, dtype=dtype, seed=9) * 0.1
        out = torch.full((rows, hidden), NAN, dtype=dtype)
        ts.launch_gate_up(x, w, b, out, 1e-6, sms=sms_for(dtype))
        want = ref.silu_mul(ref.linear(ref.layer_norm(x, 1e-6), w, b))
        # silu(g) * u rounds twice after the GEMM's rounding: a one-ulp difference in g can
        # become two in the product.
        self.assertMatches(out, want, f"gate_up rows {rows} hidden {hidden} {dtype}", ulps=2)

    def test_demo_and_v01_slice(self):
        for dtype in DTYPES:
            self.check(2, 512, 128, dtype)
            self.check(2, 16, 1536, dtype)  # v0.1: 16 of the 6144 hidden columns
        self.check(32, 512, 128, torch.bfloat16)


class LogitsKernelTest(Case):
    def check(self, batch, codes, k, dtype, cfg, total_tokens=64):
        rows = 2 * batch if cfg else batch
        x = randn(rows, k, dtype=dtype, seed=10)
        w = randn(codes + 3, k, dtype=dtype, seed=11) / math.sqrt(k)
        steps = torch.arange(batch) * (total_tokens - 1) // max(batch - 1, 1)  # 0 .. T - 1
        guidance = torch.linspace(0.0, 7.5, batch, dtype=torch.float64) if cfg else None
        out = torch.full((batch, codes), NAN)
        ts.launch_logits(x, w, out, guidance, steps, codes, 1e-6, total_tokens,
                         sms=sms_for(dtype))
        raw = ref.linear(ref.layer_norm(x, 1e-6), w)
        want = ref.guided_logits(raw, guidance, steps, codes, total_tokens, cfg)
        if dtype == torch.float32:
            self.assertMatches(out, want, f"logits {batch} {dtype} cfg {cfg}")
        else:
            # The mix of two rounded logits: one ulp of either, scaled by (1 + gamma) or gamma.
            scale = 1.0 if guidance is None else (1.0 + 2.0 * guidance.float())[:, None]
            tol = scale * bf16_ulp(raw[:batch].float()[:, :codes]) * 2 + 1e-5
            self.assertFalse(torch.isnan(out).any().item())
            self.assertLessEqual(((out - want).abs() - tol).max().item(), 0.0,
                                 f"logits {batch} {dtype} cfg {cfg}")

    def test_demo_sizes_with_and_without_guidance(self):
        for dtype in DTYPES:
            self.check(1, 256, 128, dtype, cfg=True)
            self.check(1, 256, 128, dtype, cfg=False)
        self.check(16, 256, 128, torch.bfloat16, cfg=True)

    def test_v01_sizes_a_slice_of_codes(self):
        for dtype in DTYPES:
            self.check(2, 64, 1536, dtype, cfg=True, total_tokens=512)


class AttentionKernelTest(Case):
    """attention_kernel (+ attention_reduce_kernel): q/k norm and RoPE, the cache write, split
    softmax over the visible slots, against SDPA with the additive mask."""

    def check(self, dims, positions, cfg, dtype, dual=True, first_key_only=False, splits=None,
              heads=None):
        heads = heads or dims.heads
        d, hd = heads * dims.head_dim, dims.head_dim
        batch = positions.shape[0]
        rows = 2 * batch if cfg else batch
        pos = ref.row_positions(positions, cfg)
        slot_base = dims.cond_len if dual else 0
        cache_len = dims.dual_len if dual else dims.single_len
        cos, sin = ref.rope_tables(hd, dims.tokens + 1)
        q_norm = 1 + 0.1 * randn(hd, dtype=torch.float32, seed=12)
        k_norm = 1 + 0.1 * randn(hd, dtype=torch.float32, seed=13)
        q_norm, k_norm = q_norm.to(dtype), k_norm.to(dtype)
        qkv = randn(rows, 3 * d, dtype=dtype, seed=14)
        keys = randn(rows, heads, cache_len, hd, dtype=dtype, seed=15)
        values = randn(rows, heads, cache_len, hd, dtype=dtype, seed=16)
        slots = slot_base + pos
        # What a kernel may not read is NaN: every slot past a row's new one, and the new slot
        # itself (its key and value come from qkv).
        invisible = torch.arange(cache_len)[None, :] >= slots[:, None]
        keys.masked_fill_(invisible[:, None, :, None], NAN)
        values.masked_fill_(invisible[:, None, :, None], NAN)
        want_keys, want_values = keys.clone(), values.clone()
        r = torch.arange(rows)
        angles = cos[pos][:, None], sin[pos][:, None]
        q = ref.rope(ref.rms_norm(qkv[:, :d].view(rows, heads, hd), q_norm), *angles)
        want_keys[r, :, slots] = ref.rope(
            ref.rms_norm(qkv[:, d:2 * d].view(rows, heads, hd), k_norm), *angles)
        want_values[r, :, slots] = qkv[:, 2 * d:].view(rows, heads, hd)
        index = torch.arange(cache_len)[None, :]
        visible = index.eq(0).expand(rows, -1) if first_key_only else index.le(slots[:, None])
        want = ref.attention(q[:, :, None, :], want_keys.nan_to_num(), want_values.nan_to_num(),
                             visible).flatten(1)
        ws = ts.Workspace.make(ref.Dims(d=d, heads=heads, codes=1, cond_len=dims.cond_len,
                                        tokens=dims.tokens), batch, cfg, dtype)
        used = ts.launch_attention(qkv, q_norm, k_norm, cos, sin, positions, keys, values, ws.a,
                                   ws, batch=batch, heads=heads, slot_base=slot_base,
                                   first_key_only=first_key_only, splits=splits)
        what = (f"attention {dtype} rows {rows} heads {heads} hd {hd} positions "
                f"{positions.tolist()} dual {dual} first_key_only {first_key_only} splits {used}")
        # bf16: a weighted mean of values of about 1, so one ulp at 1 (2^-8) absolute: P is
        # rounded before P V here, the CPU reference rounds elsewhere.
        self.assertMatches(ws.a, want, what, atol=2.0 ** -8)
        # The new slot holds the normalised, rotated key and the value; no other slot changed.
        self.assertMatches(keys.nan_to_num(), want_keys.nan_to_num(), what + ": keys")
        self.assertTrue(torch.equal(values.nan_to_num(), want_values.nan_to_num()),
                        what + ": values")
        return used

    def test_dual_block_first_and_last_positions(self):
        # Sequence length 1 (position 0: the condition and BOS) and the maximum (T - 1); the
        # demo's 142 slots are no multiple of the 64-key block. One split and three.
        demo = ref.DEMO
        for dtype, splits in ((torch.float32, 1), (torch.bfloat16, 3)):
            self.check(demo, torch.tensor([0, demo.tokens - 1]), True, dtype, splits=splits)

    def test_single_block_causal_and_reference(self):
        demo = ref.DEMO
        for dtype in DTYPES:
            positions = torch.tensor([demo.tokens - 1, 1, 0])
            self.check(demo, positions, False, dtype, dual=False, splits=2)
            self.check(demo, positions, False, dtype, dual=False, first_key_only=True, splits=2)

    def test_bucket_16_with_guidance(self):
        # 32 rows (one of the demo's heads), split as the launch policy splits them.
        demo = ref.DEMO
        positions = torch.arange(16) * 4
        splits = self.check(demo, positions, True, torch.bfloat16, heads=1)
        self.assertEqual(splits, ts.attention_splits(32, 1, demo.dual_len, demo.head_dim))

    def test_scratch_position(self):
        # Done rows and idle slots step at position T, the cache's last slot.
        demo = ref.DEMO
        self.check(demo, torch.tensor([demo.tokens]), True, torch.float32, splits=2)
        self.check(demo, torch.tensor([demo.tokens]), False, torch.float32, dual=False)

    def test_v01_sizes_a_slice_of_heads(self):
        # hd 128 with 2 of the 12 heads; 590 slots (77 + 1 + 512) are no multiple of 32 keys.
        v01 = ref.V01
        for dtype in DTYPES:
            self.check(v01, torch.tensor([v01.tokens - 1]), True, dtype, heads=2, splits=6)
        self.check(v01, torch.tensor([0]), True, torch.bfloat16, heads=2)


# --- whole blocks -----------------------------------------------------------------------------

# Two blocks of the demo model: one dual, one single (its last), and the logits.
TWO_BLOCKS = ref.Dims(d=128, heads=4, codes=256, cond_len=77, tokens=64, dual_blocks=1,
                      single_blocks=1)


class DecoderLayerTest(Case):
    """One dual and one single block and the logits, composed of the kernels as the C++ plan
    launches them (fewer, larger programs: the interpreter runs one at a time), against the
    torch layers."""

    def step(self, dtype, batch, cfg, first_key_only=False):
        dims = TWO_BLOCKS
        model = ref.random_model(dims, dtype, seed=20)
        rows = 2 * batch if cfg else batch
        keys, values = ref.random_cache(dims, rows, dtype, seed=21)
        tokens = torch.randint(0, dims.codes + 3, (batch,),
                               generator=torch.Generator().manual_seed(22))
        # Mid-sequence positions: position 0's rotation is the identity.
        positions = (torch.arange(batch) * 7 + 37) % dims.tokens
        guidance = torch.full((batch,), 3.0, dtype=torch.float64) if cfg else None
        k_ts, v_ts = [k.clone() for k in keys], [v.clone() for v in values]
        ws = ts.Workspace.make(dims, batch, cfg, dtype)
        got = ts.decode_step(model, ws, tokens, positions, k_ts, v_ts, guidance,
                             first_key_only=first_key_only, sms=4).clone()
        want = ref.decode_step(model, tokens, positions, keys, values, guidance,
                               first_key_only=first_key_only)
        return model, (keys, values), (k_ts, v_ts), got, want, (tokens, positions, guidance)

    def test_float32_bucket_1_with_guidance(self):
        _, (k_ref, v_ref), (k_ts, v_ts), got, want, _ = self.step(torch.float32, 1, True)
        self.assertMatches(got, want, "guided logits")
        for i in range(2):
            torch.testing.assert_close(k_ts[i], k_ref[i], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(v_ts[i], v_ref[i], rtol=1e-5, atol=1e-5)

    def test_float32_bucket_1_reference_single_stream(self):
        _, _, _, got, want, _ = self.step(torch.float32, 1, False, first_key_only=True)
        self.assertMatches(got, want, "logits (single-stream reference decode)")

    def test_bfloat16_bucket_4_with_guidance_no_worse_than_torch(self):
        model, _, _, got, want, (tokens, positions, guidance) = self.step(torch.bfloat16, 4,
                                                                          True)
        # The same bf16 weights and cache evaluated in float32: the truth both are measured by.
        truth_model = ref.random_model(TWO_BLOCKS, torch.bfloat16, seed=20)
        for name in ("wte", "lm_head"):
            setattr(truth_model, name, getattr(truth_model, name).float())
        for block in truth_model.blocks:
            for field in block.__dataclass_fields__:
                setattr(block, field, getattr(block, field).float())
        keys, values = ref.random_cache(TWO_BLOCKS, 8, torch.bfloat16, seed=21)
        truth = ref.decode_step(truth_model, tokens, positions, [k.float() for k in keys],
                                [v.float() for v in values], guidance)
        self.assertFalse(torch.isnan(got).any().item())
        err_triton = ((got - truth).norm() / truth.norm()).item()
        err_torch = ((want - truth).norm() / truth.norm()).item()
        print(f"bf16 logits, relative error against float32: kernels {err_triton:.3g}, torch "
              f"{err_torch:.3g}", file=sys.stderr)
        self.assertLess(err_triton, 3e-2)
        self.assertLessEqual(err_triton, 1.5 * err_torch + 1e-4,
                             f"kernels {err_triton:.3g} against torch's own {err_torch:.3g}")
        # The same greedy choice wherever torch's own choice is clear of the rounding.
        top2 = truth.topk(2, dim=-1).values
        clear = (top2[:, 0] - top2[:, 1]) > 4 * err_torch * truth.abs().max()
        self.assertTrue(torch.equal(got.argmax(-1)[clear], truth.argmax(-1)[clear]))


if __name__ == "__main__":
    unittest.main()
