#!/usr/bin/env python3
"""Writes the repositories a stand-in Hugging Face Hub serves to tests/tools/test_fetch_models.py:
small checkpoints in the layout of the real ones, so that scripts/fetch_models.py checks them
and cube3d-server serves them exactly as it would the real Cube 3D v0.5.

    make_hub_fixture.py OUT_DIR

OUT_DIR/
  model.yaml      the tiny model, v0.5's structure (bounding box, a shape encoder in the
                  checkpoint) at toy size: tests/golden/tiny_v05/model.yaml
  repos/Roblox/cube3d-v0.5/
    shape_gpt.safetensors, shape_tokenizer.safetensors
                  tests/golden/tiny_v05's, which the official Cube code wrote from its own
                  modules: the real tensor names (the shape encoder's too), random values;
                  the shape tokenizer's occupancy head is set so that every shape has a
                  surface (below), since random weights often give none, an empty mesh
    README.md     a file of the repository that the server does not read (never fetched)
  repos/openai/clip-vit-large-patch14/
    config.json, model.safetensors
                  a transformers CLIPModel (text and vision towers, like the real one) with a
                  32-wide text tower (the tiny model's text_model_embed_dim), random weights
    vocab.json, merges.txt
                  a CLIP BPE vocabulary of the byte symbols, a few merges and the two special
                  tokens (the real one's layout, 534 tokens instead of 49,408)
    tokenizer.json, tokenizer_config.json
                  transformers' other tokenizer files: not read by the server, never fetched

Deterministic: the same files every run (fixed seeds), so a test's meshes are the same too.
"""
import json
import os
import shutil
import sys

# Everything is built from configs: never reach for the hub, and keep the ctest log short.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(os.path.dirname(HERE), "golden", "tiny_v05")
CUBE_REPO = "Roblox/cube3d-v0.5"
CLIP_REPO = "openai/clip-vit-large-patch14"
# Merges in CLIP's order: each joins two symbols already in the vocabulary.
MERGES = [("a", "i"), ("ai", "r</w>"), ("c", "h"), ("ch", "air</w>"), ("o", "o"),
          ("w", "oo"), ("d", "e"), ("de", "n</w>"), ("woo", "den</w>"), ("t", "h"),
          ("th", "e</w>"), ("l", "l</w>"), ("a", "ll</w>"), ("t", "all</w>"), ("d", "a</w>"),
          ("g", "o"), ("go", "da</w>"), ("p", "a"), ("pa", "go"), ("pago", "da</w>")]


def bytes_to_unicode():
    """CLIP's byte -> symbol table (the printable bytes as themselves, the others above 255)."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1))
                 + list(range(0xAE, 0xFF + 1)))
    symbols = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in symbols:
            symbols[b] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in printable] + [symbols[b] for b in range(256) if b not in printable]


def write_vocabulary(folder):
    """vocab.json and merges.txt as CLIP's tokenizer files lay them out; returns the size."""
    tokens = bytes_to_unicode()
    tokens += [t + "</w>" for t in tokens]
    tokens += ["".join(m) for m in MERGES]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    assert len(set(tokens)) == len(tokens), "a merge makes a token the vocabulary already has"
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump({t: i for i, t in enumerate(tokens)}, f, ensure_ascii=False)
    with open(os.path.join(folder, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in MERGES))
    return len(tokens)


def write_clip(folder, vocab_size, text_dim):
    import torch
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(29)
    text = dict(vocab_size=vocab_size, hidden_size=text_dim, intermediate_size=2 * text_dim,
                num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=77,
                hidden_act="quick_gelu", layer_norm_eps=1e-5, bos_token_id=vocab_size - 2,
                eos_token_id=vocab_size - 1)
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                  num_attention_heads=2, image_size=32, patch_size=16)
    model = CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=16))
    model.save_pretrained(folder, safe_serialization=True)
    # The rest of the real repository's tokenizer files, which the server never reads.
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"model_max_length": 77, "do_lower_case": True}, f)
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump({"version": "1.0", "model": {"type": "BPE"}}, f)


def write_shape_tokenizer(source, path):
    """The golden shape tokenizer, its occupancy decoder made to answer the plane x = 0.3
    whatever the shape tokens: the query is silu(x - 0.3) times one vector, the latents' and
    the MLP's contributions are zero, so the final LayerNorm leaves the sign of x - 0.3 alone
    and the head reads it. Every mesh is then that plane cut by the grid: a mesh, never empty."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    tensors = load_file(source)
    o = "occupancy_decoder."
    rng = np.random.default_rng(29)
    width = tensors[o + "query_in.out_layer.weight"].shape[0]
    weight_in = np.zeros_like(tensors[o + "query_in.in_layer.weight"])
    weight_in[0, 0] = 1.0  # the embedding starts with the point itself: column 0 is x
    bias_in = np.zeros_like(tensors[o + "query_in.in_layer.bias"])
    bias_in[0] = -0.3  # off the grid's points, where the field would be exactly 0
    direction = rng.standard_normal(width).astype(np.float32)
    weight_out = np.zeros_like(tensors[o + "query_in.out_layer.weight"])
    weight_out[:, 0] = direction
    normalized = (direction - direction.mean()) / direction.std()
    tensors.update({
        o + "query_in.in_layer.weight": weight_in,
        o + "query_in.in_layer.bias": bias_in,
        o + "query_in.out_layer.weight": weight_out,
        o + "query_in.out_layer.bias": np.zeros(width, np.float32),
        o + "attn_out.attn.c_proj.weight": np.zeros((width, width), np.float32),
        o + "attn_out.attn.c_proj.bias": np.zeros(width, np.float32),
        o + "attn_out.mlp.down_proj.weight":
            np.zeros_like(tensors[o + "attn_out.mlp.down_proj.weight"]),
        o + "attn_out.mlp.down_proj.bias": np.zeros(width, np.float32),
        o + "ln_f.weight": np.ones(width, np.float32),
        o + "ln_f.bias": np.zeros(width, np.float32),
        o + "c_head.weight": (normalized / width)[None, :].astype(np.float32),
        o + "c_head.bias": np.zeros(1, np.float32),
    })
    save_file(tensors, path)


def main():
    import yaml

    out = sys.argv[1]
    cube = os.path.join(out, "repos", *CUBE_REPO.split("/"))
    clip = os.path.join(out, "repos", *CLIP_REPO.split("/"))
    os.makedirs(cube, exist_ok=True)
    os.makedirs(clip, exist_ok=True)
    shutil.copyfile(os.path.join(GOLDEN, "model.yaml"), os.path.join(out, "model.yaml"))
    shutil.copyfile(os.path.join(GOLDEN, "shape_gpt.safetensors"),
                    os.path.join(cube, "shape_gpt.safetensors"))
    write_shape_tokenizer(os.path.join(GOLDEN, "shape_tokenizer.safetensors"),
                          os.path.join(cube, "shape_tokenizer.safetensors"))
    with open(os.path.join(cube, "README.md"), "w") as f:
        f.write("# a stand-in for Roblox/cube3d-v0.5\n")
    with open(os.path.join(GOLDEN, "model.yaml")) as f:
        text_dim = yaml.safe_load(f)["gpt_model"]["text_model_embed_dim"]
    write_clip(clip, write_vocabulary(clip), text_dim)
    return 0


if __name__ == "__main__":
    sys.exit(main())
