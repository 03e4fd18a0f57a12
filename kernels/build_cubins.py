#!/usr/bin/env python3
"""Compiles the Triton decode kernels (kernels/decode_kernels.py) ahead of time, with no GPU: one
cubin per kernel variant and architecture, embedded in the CUDA build and launched from C++
through the driver API (kernels/triton_launcher.cpp).

  kernels/build_cubins.py --out-dir DIR --archs 90a,80 [--report FILE] [--cache DIR]

Writes into DIR: one .cubin per (variant, architecture) and triton_cubins.cpp, which embeds them
(.incbin) with the table kernels/triton_cubins.h declares: each variant's name, its constexprs,
its parameters in launch order with their types, warps and shared memory. --report gets the
compile report (registers, spills, stack and shared memory per kernel and architecture, from
ptxas -v), a JSON file that is only rewritten when it changes. Variants already compiled from
the same sources sit in --cache.

The variants are every block shape the launch policy of kernels/decode_plan.cpp can choose
(decode_plan.h lists the same sets), in bfloat16, the dtype the engine runs on a GPU. CMake runs
this for the CUDA build (CUBE3D_TRITON_ARCHITECTURES); the CPU build does not. Fails, naming the
variant, on a compile error or a parameter this table does not type.
"""
import argparse
import contextlib
import hashlib
import io
import json
import os
import re
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "decode_kernels.py"

# The C++ argument type of each parameter type (kernels/triton_cubins.h ArgType).
ARG_TYPES = {"ptr": "kPointer", "i32": "kI32", "i64": "kI64", "fp32": "kF32"}
ACT = "bf16"  # the activation and weight dtype of every compiled variant

# Each kernel's run-time parameters: Triton type ("*bf16" a pointer) and whether the value is a
# multiple of 16 (pointers: 16-byte aligned), which lets Triton issue 16-byte loads;
# decode_plan.cpp checks every such promise before it launches.
SIGNATURES = {
    "linear_kernel": {
        "x_ptr": ("*bf16", 16), "tokens_ptr": ("*i64", 16), "w_ptr": ("*bf16", 16),
        "b_ptr": ("*bf16", 16), "res_ptr": ("*bf16", 16), "out_ptr": ("*bf16", 16),
        "x_out_ptr": ("*bf16", 16), "R": ("i32", 0), "B": ("i32", 0), "N": ("i32", 0),
        "K": ("i32", 16), "stride_x": ("i64", 16), "stride_w": ("i64", 16),
        "stride_res": ("i64", 16), "stride_out": ("i64", 16), "eps": ("fp32", 0)},
    "gate_up_kernel": {
        "x_ptr": ("*bf16", 16), "w_ptr": ("*bf16", 16), "b_ptr": ("*bf16", 16),
        "out_ptr": ("*bf16", 16), "R": ("i32", 0), "N": ("i32", 16), "K": ("i32", 16),
        "stride_x": ("i64", 16), "stride_w": ("i64", 16), "stride_out": ("i64", 16),
        "eps": ("fp32", 0)},
    "logits_kernel": {
        "x_ptr": ("*bf16", 16), "w_ptr": ("*bf16", 16), "out_ptr": ("*fp32", 16),
        "guidance_ptr": ("*fp64", 16), "steps_ptr": ("*i64", 16), "B": ("i32", 0),
        "N": ("i32", 0), "K": ("i32", 16), "stride_x": ("i64", 16), "stride_w": ("i64", 16),
        "stride_out": ("i64", 16), "eps": ("fp32", 0), "total_tokens": ("i32", 0)},
    "attention_kernel": {
        "qkv_ptr": ("*bf16", 16), "q_norm_ptr": ("*bf16", 16), "k_norm_ptr": ("*bf16", 16),
        "cos_ptr": ("*fp32", 16), "sin_ptr": ("*fp32", 16), "positions_ptr": ("*i64", 16),
        "keys_ptr": ("*bf16", 16), "values_ptr": ("*bf16", 16), "out_ptr": ("*bf16", 16),
        "part_o_ptr": ("*fp32", 16), "part_ml_ptr": ("*fp32", 16), "B": ("i32", 0),
        "H": ("i32", 0), "slot_base": ("i32", 0), "first_key_only": ("i32", 0),
        "cache_len": ("i32", 0), "splits": ("i32", 0), "stride_qkv": ("i64", 16),
        "stride_cache_row": ("i64", 16), "stride_cache_head": ("i64", 16),
        "stride_out": ("i64", 16), "eps": ("fp32", 0), "sm_scale": ("fp32", 0)},
    "attention_reduce_kernel": {
        "part_o_ptr": ("*fp32", 16), "part_ml_ptr": ("*fp32", 16), "out_ptr": ("*bf16", 16),
        "H": ("i32", 0), "splits": ("i32", 0), "stride_out": ("i64", 16)},
}

# The block shapes decode_plan.cpp chooses from (its kBlockRows, kBlockColumns, kHeadDims).
BLOCK_ROWS = (16, 32, 64)
BLOCK_COLUMNS = (16, 32, 64)
HEAD_DIMS = (32, 64, 128)
BLOCK_K = 64
MAX_SPLITS = 32
NUM_WARPS = 4
NUM_STAGES = 3
KERNEL_STAGES = {}  # kernel -> num_stages, where NUM_STAGES does not suit one


def num_stages(kernel):
    return KERNEL_STAGES.get(kernel, NUM_STAGES)


def block_kv(head_dim):
    return 64 if head_dim <= 64 else 32


def variants():
    """(kernel, constexprs) of every variant, in a fixed order."""
    out = []
    for ln, gather, residual in ((1, 1, 0), (1, 0, 0), (0, 0, 1)):
        for r in BLOCK_ROWS:
            for n in BLOCK_COLUMNS:
                out.append(("linear_kernel", {"LN": ln, "GATHER": gather, "RESIDUAL": residual,
                                              "BLOCK_R": r, "BLOCK_N": n, "BLOCK_K": BLOCK_K}))
    for r in BLOCK_ROWS:
        for n in BLOCK_COLUMNS:
            out.append(("gate_up_kernel", {"BLOCK_R": r, "BLOCK_N": n, "BLOCK_K": BLOCK_K}))
    for cfg in (0, 1):
        for r in BLOCK_ROWS:
            for n in BLOCK_COLUMNS:
                out.append(("logits_kernel", {"CFG": cfg, "BLOCK_B": r, "BLOCK_N": n,
                                              "BLOCK_K": BLOCK_K}))
    for hd in HEAD_DIMS:
        for one in (0, 1):
            out.append(("attention_kernel", {"HD": hd, "BLOCK_KV": block_kv(hd),
                                             "ONE_SPLIT": one}))
        out.append(("attention_reduce_kernel", {"HD": hd, "MAX_SPLITS": MAX_SPLITS}))
    return out


def variant_key(constexprs):
    """The name decode_plan.cpp gives a variant: its constexprs sorted, and the dtype."""
    return ",".join(f"{k}={v}" for k, v in sorted(constexprs.items())) + f",DTYPE={ACT}"


def compile_one(job):
    """(kernel, constexprs, arch) -> dict with the cubin and ptxas's figures (in a worker)."""
    kernel, constexprs, arch = job
    sys.path.insert(0, str(HERE))
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import decode_kernels

    fn = getattr(decode_kernels, kernel)
    types = SIGNATURES[kernel]
    signature, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs:
            signature[name] = "constexpr"
            continue
        if name not in types:
            raise SystemExit(f"build_cubins.py: {kernel} parameter {name} has no type in "
                             "SIGNATURES")
        signature[name], multiple = types[name]
        if multiple:
            attrs[(i,)] = [["tt.divisibility", multiple]]
    extra = set(types) - set(fn.arg_names)
    if extra:
        raise SystemExit(f"build_cubins.py: SIGNATURES[{kernel}] names {sorted(extra)}, which "
                         "the kernel does not take")
    knobs.nvidia.dump_ptxas_log = True
    knobs.compilation.always_compile = True
    log = io.StringIO()
    capability = int(arch.rstrip("a"))
    with contextlib.redirect_stdout(log):
        compiled = triton.compile(
            ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
            target=GPUTarget("cuda", capability, 32),
            options={"num_warps": NUM_WARPS, "num_stages": num_stages(kernel)})
    text = log.getvalue()

    def figure(pattern):
        m = re.search(pattern, text)
        return int(m.group(1)) if m else None

    meta = compiled.metadata
    if meta.global_scratch_size or meta.profile_scratch_size:
        raise SystemExit(f"build_cubins.py: {kernel} {variant_key(constexprs)} needs scratch "
                         "memory, which the launcher does not provide")
    params = [(name, "ptr" if signature[name].startswith("*") else signature[name])
              for name in fn.arg_names if signature[name] != "constexpr"]
    return {
        "kernel": kernel, "variant": variant_key(constexprs), "arch": f"sm_{arch}",
        "capability": capability, "cubin": compiled.asm["cubin"], "params": params,
        "num_warps": meta.num_warps, "num_stages": meta.num_stages, "shared_bytes": meta.shared,
        "registers": figure(r"Used (\d+) registers"),
        "spill_stores_bytes": figure(r"(\d+) bytes spill stores"),
        "spill_loads_bytes": figure(r"(\d+) bytes spill loads"),
        "stack_bytes": figure(r"(\d+) bytes stack frame"),
        "triton": triton.__version__,
    }


def cache_key(job, sources_digest):
    kernel, constexprs, arch = job
    return hashlib.sha256(json.dumps([sources_digest, kernel, sorted(constexprs.items()), arch,
                                      NUM_WARPS, num_stages(kernel)]).encode()).hexdigest()[:32]


def compile_all(jobs, cache, workers):
    digest = hashlib.sha256(SOURCE.read_bytes() + Path(__file__).read_bytes()).hexdigest()
    results, todo = {}, []
    for job in jobs:
        key = cache_key(job, digest)
        meta, cubin = cache / f"{key}.json", cache / f"{key}.cubin"
        if meta.is_file() and cubin.is_file():
            entry = json.loads(meta.read_text())
            entry["cubin"] = cubin.read_bytes()
            entry["params"] = [tuple(p) for p in entry["params"]]
            results[key] = entry
        else:
            todo.append((key, job))
    if todo:
        print(f"build_cubins.py: compiling {len(todo)} of {len(jobs)} kernel variants",
              flush=True)
        with ProcessPoolExecutor(max_workers=workers) as pool:
            for (key, _), entry in zip(todo, pool.map(compile_one, [job for _, job in todo])):
                cache.mkdir(parents=True, exist_ok=True)
                (cache / f"{key}.cubin").write_bytes(entry["cubin"])
                (cache / f"{key}.json").write_text(
                    json.dumps({k: v for k, v in entry.items() if k != "cubin"}))
                results[key] = entry
    return [results[cache_key(job, digest)] for job in jobs]


def c_string(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_sources(entries, out_dir):
    """The cubins, and triton_cubins.cpp embedding them with kernels/triton_cubins.h's table."""
    lines = [
        "// Generated by kernels/build_cubins.py: the Triton decode kernels' cubins and their",
        "// interfaces (kernels/triton_cubins.h). Do not edit.",
        '#include "triton_cubins.h"',
        "",
        "namespace cube3d::kernels {",
        "namespace {",
        "",
    ]
    table = []
    for i, e in enumerate(entries):
        cubin = out_dir / f"{e['kernel']}_{i}_{e['arch']}.cubin"
        if not cubin.is_file() or cubin.read_bytes() != e["cubin"]:
            cubin.write_bytes(e["cubin"])
        symbol = f"cube3d_triton_cubin_{i}"
        # The digest makes this text change whenever a cubin does (ccache hashes the text, not
        # what .incbin reads).
        lines += [
            f"// {e['kernel']} [{e['variant']}] {e['arch']}: sha256 "
            f"{hashlib.sha256(e['cubin']).hexdigest()}",
            f'asm(".section .rodata\\n.balign 16\\n{symbol}:\\n.incbin \\"'
            f'{c_string(str(cubin))[1:-1]}\\"\\n{symbol}_end:\\n.previous\\n");',
            f'extern "C" const unsigned char {symbol}[];',
            f'extern "C" const unsigned char {symbol}_end[];',
            f"const KernelParam params_{i}[] = {{"
            + ", ".join(f"{{{c_string(n)}, ArgType::{ARG_TYPES[t]}}}" for n, t in e["params"])
            + "};",
            "",
        ]
        table.append(
            f"    {{{c_string(e['kernel'])}, {c_string(e['variant'])}, {e['capability']}, "
            f"{symbol}, {symbol}_end, params_{i}, {len(e['params'])}, {e['num_warps']}, "
            f"{e['shared_bytes']}, {e['registers'] or 0}, "
            f"{(e['spill_stores_bytes'] or 0) + (e['spill_loads_bytes'] or 0)}}},")
    lines += ["const CompiledKernel kCompiled[] = {"] + table + ["};", "", "}  // namespace", ""]
    lines += [
        "std::span<const CompiledKernel> compiled_kernels() { return kCompiled; }",
        "",
        "}  // namespace cube3d::kernels",
        "",
    ]
    text = "\n".join(lines)
    target = out_dir / "triton_cubins.cpp"
    if not target.is_file() or target.read_text() != text:
        target.write_text(text)


def write_report(entries, path):
    rows = [{k: e[k] for k in ("kernel", "variant", "arch", "registers", "spill_stores_bytes",
                               "spill_loads_bytes", "stack_bytes", "shared_bytes", "num_warps",
                               "num_stages")} | {"cubin_bytes": len(e["cubin"])}
            for e in entries]
    spilling = [f"{r['kernel']} [{r['variant']}] {r['arch']}" for r in rows
                if r["spill_stores_bytes"] or r["spill_loads_bytes"]]
    report = {
        "what": "the Triton decode kernels (kernels/decode_kernels.py) compiled ahead of time by "
                "kernels/build_cubins.py: ptxas's registers, spills and stack per thread, and "
                "the shared memory per program, of every variant and architecture",
        "triton": entries[0]["triton"] if entries else None,
        "archs": sorted({r["arch"] for r in rows}),
        "variants": len({(r["kernel"], r["variant"]) for r in rows}),
        "max_registers": {arch: max(r["registers"] or 0 for r in rows if r["arch"] == arch)
                          for arch in sorted({r["arch"] for r in rows})},
        "spilling": spilling,
        "kernels": rows,
    }
    text = json.dumps(report, indent=1) + "\n"
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return spilling


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--archs", default="90a,80",
                        help="comma-separated: 90a (Hopper), 80 (Ampere and later 8.x)")
    parser.add_argument("--report", type=Path)
    parser.add_argument("--cache", type=Path)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    archs = [a.strip().removeprefix("sm_") for a in args.archs.replace(";", ",").split(",")
             if a.strip()]
    for arch in archs:
        if not re.fullmatch(r"\d+a?", arch) or int(arch.rstrip("a")) < 80:
            raise SystemExit(f"build_cubins.py: --archs {arch}: an architecture of 80 or more "
                             "(sm_80, sm_90a, ...)")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(kernel, constexprs, arch) for arch in archs for kernel, constexprs in variants()]
    # Triton's own cache (every IR of every variant) in a folder that goes away: it would only
    # keep ptxas from running, and so from reporting; ours (--cache) keeps cubins and figures.
    with tempfile.TemporaryDirectory(prefix="cube3d-triton-") as scratch:
        os.environ["TRITON_CACHE_DIR"] = scratch
        entries = compile_all(jobs, args.cache or args.out_dir / "cache", args.jobs)
    write_sources(entries, args.out_dir)
    if args.report:
        spilling = write_report(entries, args.report)
        for line in spilling:
            print(f"build_cubins.py: warning: {line} spills registers", file=sys.stderr)
    print(f"build_cubins.py: {len(entries)} cubins for {', '.join('sm_' + a for a in archs)} "
          f"in {args.out_dir}", flush=True)


if __name__ == "__main__":
    main()
