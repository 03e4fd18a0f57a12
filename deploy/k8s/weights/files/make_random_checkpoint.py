#!/usr/bin/env python3
"""Writes random float32 checkpoints of a model config's size, for loading and memory tests.

    scripts/make_random_checkpoint.py models/cube3d-v0.1.yaml OUT_DIR [--seed N] [--dtype F32|BF16]

OUT_DIR gets shape_gpt.safetensors and shape_tokenizer.safetensors with the tensor names and
shapes the loader expects (src/model/weight_spec.cpp: the decoder side only, without the shape
encoder a real shape tokenizer checkpoint also holds, which the loader never reads), and
prompt.safetensors with clip_hidden_cond / clip_hidden_uncond [1, 77, text_model_embed_dim] for
`cube3d-generate --text-embeddings`. The values are plain normal noise with roughly the scales of
random_checkpoint() (src/model/weights.cpp); they are for measuring, not for meaningful shapes.

Each file is streamed: the header first (every shape is known up front), then one tensor at a
time, so memory stays at one tensor whatever the model size. Needs numpy and PyYAML only.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import yaml


def gpt_spec(c):
    """(name, shape, role) of every shape GPT tensor, as gpt_checkpoint_spec() lists them."""
    d = c["n_embd"]
    hd = d // c["n_head"]
    bias = c.get("bias", True)
    vocab = c["shape_model_vocab_size"] + 3
    out = []

    def linear(prefix, fan_in, fan_out, has_bias):
        out.append((prefix + ".weight", [fan_out, fan_in], "weight"))
        if has_bias:
            out.append((prefix + ".bias", [fan_out], "bias"))

    def norm(name, dim):
        out.append((name, [dim], "norm"))

    def post(p):
        linear(p + ".c_proj", d, d, bias)
        linear(p + ".mlp.gate_proj", d, 4 * d, bias)
        linear(p + ".mlp.up_proj", d, 4 * d, bias)
        linear(p + ".mlp.down_proj", 4 * d, d, bias)

    linear("text_proj", c["text_model_embed_dim"], d, bias)
    linear("shape_proj", c["shape_model_embed_dim"], d, True)
    if c.get("use_bbox", False):
        linear("bbox_proj", 3, d, True)
    out.append(("transformer.wte.weight", [vocab, d], "embedding"))
    n_layer = c["n_layer"]
    for i in range(n_layer):
        p = f"transformer.dual_blocks.{i}"
        last = i == n_layer - 1
        linear(p + ".attn.pre_x.c_qk", d, 2 * d, False)
        norm(p + ".attn.pre_x.q_norm.weight", hd)
        norm(p + ".attn.pre_x.k_norm.weight", hd)
        linear(p + ".attn.pre_x.c_v", d, d, bias)
        if last:
            linear(p + ".attn.pre_c.c_k", d, d, bias)
        else:
            linear(p + ".attn.pre_c.c_qk", d, 2 * d, False)
            norm(p + ".attn.pre_c.q_norm.weight", hd)
        norm(p + ".attn.pre_c.k_norm.weight", hd)
        linear(p + ".attn.pre_c.c_v", d, d, bias)
        post(p + ".post_1")
        if not last:
            post(p + ".post_2")
    for i in range(c["n_single_layer"]):
        p = f"transformer.single_blocks.{i}"
        linear(p + ".attn.c_qk", d, 2 * d, False)
        linear(p + ".attn.c_v", d, d, bias)
        linear(p + ".attn.c_proj", d, d, bias)
        norm(p + ".attn.q_norm.weight", hd)
        norm(p + ".attn.k_norm.weight", hd)
        linear(p + ".mlp.gate_proj", d, 4 * d, bias)
        linear(p + ".mlp.up_proj", d, 4 * d, bias)
        linear(p + ".mlp.down_proj", 4 * d, d, bias)
    linear("lm_head", d, vocab, False)
    return out


def shape_tokenizer_spec(c):
    """(name, shape, role) of the shape tokenizer tensors the loader reads."""
    w = c["width"]
    e = c["embed_dim"]
    hd = w // c["num_heads"]
    fourier_dim = 3 * (2 * c["num_freqs"] + 1)
    out = [("occupancy_decoder.embedder.weight", [3, c["num_freqs"]], "fourier")]

    def linear(prefix, fan_in, fan_out):
        out.append((prefix + ".weight", [fan_out, fan_in], "weight"))
        out.append((prefix + ".bias", [fan_out], "bias"))

    out.append(("bottleneck.block.codebook.weight", [c["num_codes"], e], "embedding"))
    out.append(("bottleneck.block.cb_weight", [e], "norm"))
    out.append(("bottleneck.block.cb_bias", [e], "bias"))
    out.append(("bottleneck.block.norm.weight", [e], "norm"))
    linear("bottleneck.block.c_out", e, w)
    out.append(("decoder.positional_encodings", [c["num_encoder_latents"], w], "embedding"))
    for i in range(c["num_decoder_layers"]):
        p = f"decoder.blocks.{i}"
        linear(p + ".attn.c_qk", w, 2 * w)
        linear(p + ".attn.c_v", w, w)
        linear(p + ".attn.c_proj", w, w)
        out.append((p + ".attn.q_norm.weight", [hd], "norm"))
        out.append((p + ".attn.k_norm.weight", [hd], "norm"))
        linear(p + ".mlp.up_proj", w, 4 * w)
        linear(p + ".mlp.down_proj", 4 * w, w)
    o = "occupancy_decoder"
    linear(o + ".query_in.in_layer", fourier_dim, w)
    linear(o + ".query_in.out_layer", w, w)
    for name in ("c_q", "c_k", "c_v", "c_proj"):
        linear(f"{o}.attn_out.attn.{name}", w, w)
    linear(o + ".attn_out.mlp.up_proj", w, 4 * w)
    linear(o + ".attn_out.mlp.down_proj", 4 * w, w)
    out.append((o + ".ln_f.weight", [w], "norm"))
    out.append((o + ".ln_f.bias", [w], "bias"))
    linear(o + ".c_head", w, c["out_dim"])
    return out


def random_values(rng, shape, role):
    x = rng.standard_normal(size=shape, dtype=np.float32)
    if role == "weight":
        x *= np.float32(1.0 / math.sqrt(shape[-1]))
    elif role == "bias":
        x *= np.float32(0.02)
    elif role == "norm":
        x *= np.float32(0.1)
        x += np.float32(1.0)
    elif role == "fourier":
        x *= np.float32(math.sqrt(0.5 * shape[-1]))
    return x


def to_bf16_bytes(x):
    """float32 -> bfloat16 bytes, rounding to nearest even."""
    bits = x.view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return bits.astype(np.uint16).tobytes()


def write_streamed(path, spec, seed, dtype):
    """Safetensors file: 8-byte header length, JSON header padded to 8 bytes, data."""
    itemsize = 4 if dtype == "F32" else 2
    header = {}
    offset = 0
    for name, shape, _ in spec:
        nbytes = itemsize * math.prod(shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    rng = np.random.default_rng(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape, role in spec:
            x = random_values(rng, shape, role)
            f.write(x.tobytes() if dtype == "F32" else to_bf16_bytes(x))
    return 8 + len(text) + offset


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("config", help="model YAML (official layout), e.g. models/cube3d-v0.1.yaml")
    parser.add_argument("out_dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=["F32", "BF16"], default="F32")
    args = parser.parse_args()

    with open(args.config) as f:
        config = yaml.safe_load(f)
    os.makedirs(args.out_dir, exist_ok=True)
    gpt = config["gpt_model"]
    total = 0
    for file, spec, seed in (
        ("shape_gpt.safetensors", gpt_spec(gpt), args.seed),
        ("shape_tokenizer.safetensors", shape_tokenizer_spec(config["shape_model"]), args.seed + 1),
    ):
        path = os.path.join(args.out_dir, file)
        size = write_streamed(path, spec, seed, args.dtype)
        total += size
        print(f"{path}: {len(spec)} tensors, {size / 1e9:.3f} GB", flush=True)

    text_dim = gpt["text_model_embed_dim"]
    prompt = [("clip_hidden_cond", [1, 77, text_dim], "embedding"),
              ("clip_hidden_uncond", [1, 77, text_dim], "embedding")]
    write_streamed(os.path.join(args.out_dir, "prompt.safetensors"), prompt, args.seed + 2, "F32")
    print(f"total {total / 1e9:.3f} GB of weights", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
