"""kernels/decode_plan.cpp's plan of a whole decode step, replayed under Triton's CPU interpreter
on real tensors: cube3d_decode_plan_tool prints the C++ plan with made-up addresses, each address
is mapped back to its buffer (a torch tensor of the size the plan gives it), and every launch runs
with the plan's kernel, variant, grid and arguments. The guided logits and the KV cache must then
be the torch reference step's (tests/kernels/torch_reference.py): so the C++ plan passes the
kernels' parameters in their order with the right values, sizes its workspace right, and picks
the block shapes of the Python composition (tests/kernels/triton_step.py) that the kernel tests
check. Two blocks (one dual, one single) of the demo model's width, few programs (a GPU of 8
multiprocessors): the interpreter runs one program at a time."""
import json
import os
import subprocess
import sys
import unittest
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import torch_reference as ref  # noqa: E402
import triton_step as ts  # noqa: E402
from triton_step import dk  # noqa: E402

SOURCE = Path(os.environ.get("CUBE3D_SOURCE_DIR", HERE.parents[1]))
BIN = Path(os.environ.get("CUBE3D_BIN_DIR", SOURCE / "build" / "bin"))
TOOL = BIN / "cube3d_decode_plan_tool"

DIMS = ref.Dims(d=128, heads=4, codes=256, cond_len=77, tokens=64, dual_blocks=1,
                single_blocks=1)
MULTIPROCESSORS = 8

BLOCK_FIELDS = {"qkv_weight": "qkv_w", "qkv_bias": "qkv_b", "q_norm": "q_norm",
                "k_norm": "k_norm", "proj_weight": "proj_w", "proj_bias": "proj_b",
                "gate_up_weight": "gate_up_w", "gate_up_bias": "gate_up_b",
                "down_weight": "down_w", "down_bias": "down_b"}


def plan(batch, cfg, first_key_only, dtype):
    args = [f"embed={DIMS.d}", f"heads={DIMS.heads}", f"codes={DIMS.codes}",
            f"cond_len={DIMS.cond_len}", f"tokens={DIMS.tokens}",
            f"dual_blocks={DIMS.dual_blocks}", f"single_blocks={DIMS.single_blocks}",
            f"batch={batch}", f"cfg={int(cfg)}", f"first_key_only={int(first_key_only)}",
            f"multiprocessors={MULTIPROCESSORS}",
            f"dtype={'bf16' if dtype == torch.bfloat16 else 'fp32'}", f"eps={DIMS.eps}"]
    proc = subprocess.run([str(TOOL), *args], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise AssertionError(f"{TOOL} {' '.join(args)}: {proc.stderr}")
    return json.loads(proc.stdout)


class PlanReplayTest(unittest.TestCase):
    def replay(self, batch, cfg, first_key_only, dtype):
        rows = 2 * batch if cfg else batch
        model = ref.random_model(DIMS, dtype, seed=30)
        keys, values = ref.random_cache(DIMS, rows, dtype, seed=31)
        g = torch.Generator().manual_seed(32)
        tokens = torch.randint(0, DIMS.codes + 3, (batch,), generator=g)
        positions = torch.randint(0, DIMS.tokens, (batch,), generator=g)
        guidance = torch.rand(batch, generator=g, dtype=torch.float64) * 5 if cfg else None
        ws = ts.Workspace.make(DIMS, batch, cfg, dtype)

        # Each buffer the plan names, as the tensor the engine would bind there.
        buffers = {"wte": model.wte, "lm_head": model.lm_head, "rope_cos": model.cos,
                   "rope_sin": model.sin, "token_ids": tokens, "positions": positions,
                   "guidance": guidance if cfg else torch.zeros(batch, dtype=torch.float64),
                   "x": ws.x, "qkv": ws.qkv, "attention": ws.a, "hidden": ws.h,
                   "partial_out": ws.part_o, "partial_stats": ws.part_ml, "logits": ws.mixed}
        run_keys, run_values = [k.clone() for k in keys], [v.clone() for v in values]
        for i, block in enumerate(model.blocks):
            for field, attr in BLOCK_FIELDS.items():
                buffers[f"blocks[{i}].{field}"] = getattr(block, attr)
            buffers[f"blocks[{i}].keys"] = run_keys[i]
            buffers[f"blocks[{i}].values"] = run_values[i]

        p = plan(batch, cfg, first_key_only, dtype)
        by_address = {}
        for b in p["buffers"]:
            tensor = buffers[b["name"]]
            self.assertEqual(tensor.numel() * tensor.element_size(), b["bytes"],
                             f"{b['name']}: the plan's size")
            by_address[b["begin"]] = tensor
        dtype_name = "bf16" if dtype == torch.bfloat16 else "fp32"
        for launch in p["launches"]:
            fn = getattr(dk, launch["kernel"])
            constexprs = dict(item.split("=") for item in launch["variant"].split(","))
            self.assertEqual(constexprs.pop("DTYPE"), dtype_name, launch["label"])
            constexprs = {k: int(v) for k, v in constexprs.items()}
            names = [a["name"] for a in launch["args"]]
            self.assertEqual(names, [n for n in fn.arg_names if n not in constexprs],
                             f"{launch['label']}: the arguments, in the kernel's order")
            args = []
            for a in launch["args"]:
                if "pointer" in a:
                    self.assertIn(a["pointer"], by_address, f"{launch['label']}: {a['name']}")
                    args.append(by_address[a["pointer"]])
                else:
                    args.append(a["int"] if "int" in a else a["float"])
            self.check_policy(launch, constexprs, dict(zip(names, args)))
            ts.launch(fn, tuple(launch["grid"]), *args, **constexprs)

        want = ref.decode_step(model, tokens, positions, keys, values, guidance,
                               first_key_only=first_key_only)
        self.assertFalse(torch.isnan(ws.mixed).any().item(), "logits: an element not written")
        if dtype == torch.float32:
            torch.testing.assert_close(ws.mixed, want, rtol=1e-4, atol=1e-4)
            for i in range(len(keys)):
                torch.testing.assert_close(run_keys[i], keys[i], rtol=1e-5, atol=1e-5)
                torch.testing.assert_close(run_values[i], values[i], rtol=1e-5, atol=1e-5)
        else:
            err = ((ws.mixed - want).norm() / want.norm()).item()
            self.assertLess(err, 3e-2)
        return p

    def check_policy(self, launch, constexprs, args):
        """The C++ plan's block shapes are the Python composition's."""
        if launch["kernel"] in ("linear_kernel", "gate_up_kernel"):
            self.assertEqual(constexprs["BLOCK_R"], ts.block_r(args["R"]), launch["label"])
            self.assertEqual(constexprs["BLOCK_N"], ts.block_n(args["N"], MULTIPROCESSORS),
                             launch["label"])
        if launch["kernel"] == "attention_kernel":
            rows = launch["grid"][0] // args["H"]
            self.assertEqual(launch["grid"][1],
                             ts.attention_splits(rows, args["H"], args["cache_len"],
                                                 constexprs["HD"], MULTIPROCESSORS),
                             launch["label"])
            self.assertEqual(constexprs["BLOCK_KV"], ts.block_kv(constexprs["HD"]))

    def test_float32_bucket_1_with_guidance(self):
        p = self.replay(1, True, False, torch.float32)
        self.assertEqual(len(p["launches"]), 2 * 6 + 1)  # 2 rows x 4 heads: the keys split

    def test_bfloat16_bucket_4_single_stream_reference(self):
        p = self.replay(4, True, True, torch.bfloat16)
        # 8 rows x 4 heads fill the 8 multiprocessors twice: one split, no reduction launch.
        self.assertEqual(len(p["launches"]), 2 * 5 + 1)


if __name__ == "__main__":
    unittest.main()
