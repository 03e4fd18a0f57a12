#!/usr/bin/env python3
"""Writes the reference data of the ClipTextModel tests: small random CLIP text models saved by
transformers, and their last_hidden_state for a dozen CLIP-style inputs.

Usage: make_clip_fixture.py OUT_DIR

OUT_DIR/
  text_model/       CLIPTextModel.save_pretrained: config.json (clip_text_model) + model.safetensors
  full_clip/        CLIPModel.save_pretrained holding the same text model and a tiny vision tower:
                    config.json with a text_config object, text_model.* + vision_model.* tensors
  text_model_gelu/  another text model with hidden_act "gelu"
  reference.safetensors
    input_ids [12, 77] int64, attention_mask [12, 77] int64,
    last_hidden_state [12, 77, 64] (text_model), last_hidden_state_gelu [12, 77, 64]

No tokenizer vocabulary is available offline, so the ids are built the way CLIP's tokenizer
lays them out: BOS 49406, the prompt's ids, EOS 49407, padded with EOS to 77, mask 1 on the
real tokens (BOS and EOS included).
"""

import os
import sys

# Everything is built from configs: never reach for the hub, and keep the ctest log short.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import CLIPConfig, CLIPModel, CLIPTextConfig, CLIPTextModel  # noqa: E402


def tower(width, layers, heads, **more):
    """A transformer's sizes as CLIP's text and vision configs name them: `width` wide, its MLP
    twice as wide, `layers` deep, with `heads` attention heads; `more` adds the other fields."""
    return dict(
        hidden_size=width,
        intermediate_size=2 * width,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        **more,
    )


BOS, EOS, LENGTH = 49406, 49407, 77
TEXT = tower(64, 3, 4, vocab_size=49408, max_position_embeddings=LENGTH, layer_norm_eps=1e-5)


def clip_inputs(generator):
    """Twelve prompts as CLIP tokenizes them: their lengths in ids between BOS and EOS."""
    prompt_lengths = [0, 1, 3, 7, 12, 20, 33, 48, 60, 74, 75, 5]
    ids = torch.full((len(prompt_lengths), LENGTH), EOS, dtype=torch.int64)
    mask = torch.zeros((len(prompt_lengths), LENGTH), dtype=torch.int64)
    for row, n in enumerate(prompt_lengths):
        # Ordinary BPE ids (below the special tokens), including both ends of the range.
        prompt = torch.randint(0, BOS, (n,), generator=generator)
        if n >= 3:
            prompt[0], prompt[-1] = 0, BOS - 1
        ids[row, 0] = BOS
        ids[row, 1 : n + 1] = prompt
        ids[row, n + 1] = EOS
        mask[row, : n + 2] = 1
    # The last prompt repeats the fourth: rows of a batch must not influence each other.
    ids[-1], mask[-1] = ids[3], mask[3]
    assert mask[10].all(), "the 75-id prompt fills all 77 positions"
    return ids, mask


def perturb(model, generator):
    """transformers initialises norms to ones/zeros and biases to zeros, which would hide a
    missing affine or bias term; give every one of them random values."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if "layer_norm" in name and name.endswith(".weight"):
                p.copy_(1.0 + 0.3 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.1 * noise)
            elif "embedding" in name:
                # Larger than the 0.02 default so that position and token errors show.
                p.copy_(0.5 * noise)


def text_model(hidden_act, seed):
    torch.manual_seed(seed)
    model = CLIPTextModel(CLIPTextConfig(hidden_act=hidden_act, **TEXT))
    perturb(model, torch.Generator().manual_seed(seed + 1))
    return model.eval()


@torch.no_grad()
def last_hidden_state(model, ids, mask):
    return model(input_ids=ids, attention_mask=mask).last_hidden_state.float().contiguous()


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    ids, mask = clip_inputs(torch.Generator().manual_seed(7))

    model = text_model("quick_gelu", seed=11)
    model.save_pretrained(os.path.join(out, "text_model"), safe_serialization=True)
    reference = last_hidden_state(model, ids, mask)

    # The default attention implementation (sdpa) and the eager one must agree: the test
    # matches both, not an accident of one kernel.
    model.config._attn_implementation = "eager"
    eager = last_hidden_state(model, ids, mask)
    assert torch.allclose(reference, eager, atol=1e-5), (reference - eager).abs().max()

    gelu_model = text_model("gelu", seed=23)
    gelu_model.save_pretrained(os.path.join(out, "text_model_gelu"), safe_serialization=True)
    reference_gelu = last_hidden_state(gelu_model, ids, mask)

    # A full CLIPModel (like openai/clip-vit-large-patch14) around the same text weights.
    vision = tower(32, 1, 2, image_size=32, patch_size=16)
    full = CLIPModel(
        CLIPConfig(text_config=dict(hidden_act="quick_gelu", **TEXT), vision_config=vision)
    )
    full.text_model.load_state_dict(model.state_dict())
    full.eval()
    full.save_pretrained(os.path.join(out, "full_clip"), safe_serialization=True)
    full_reference = last_hidden_state(full.text_model, ids, mask)
    assert torch.allclose(full_reference, reference, atol=1e-6)

    save_file(
        {
            "input_ids": ids,
            "attention_mask": mask,
            "last_hidden_state": reference,
            "last_hidden_state_gelu": reference_gelu,
        },
        os.path.join(out, "reference.safetensors"),
    )
    print(f"wrote the CLIP text fixture to {out}")


if __name__ == "__main__":
    main()
