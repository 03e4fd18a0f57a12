"""Test stand-in (not the official code): the Engine / EngineFast interface that
bench/official_engine.py drives, with a per-token loop calling the GPT once per token."""
import torch

from cube3d.inference.utils import load_config, load_model_weights, parse_structured
from cube3d.model.autoencoder.one_d_autoencoder import OneDAutoEncoder
from cube3d.model.gpt.dual_stream_roformer import DualStreamRoformer


class CLIPTextModelWithProjection:
    """Must be replaced by the bench while it builds the engine: there is no CLIP in the test."""

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        raise RuntimeError("stub: CLIPTextModelWithProjection.from_pretrained was called "
                           "(the bench should have replaced it)")


class CLIPTokenizerFast(CLIPTextModelWithProjection):
    pass


class Engine:
    def __init__(self, config_path, gpt_ckpt_path, shape_ckpt_path, device):
        self.cfg = load_config(config_path)
        self.device = device
        self.gpt_model = DualStreamRoformer(
            parse_structured(DualStreamRoformer.Config, self.cfg.gpt_model))
        load_model_weights(self.gpt_model, gpt_ckpt_path)
        self.gpt_model = self.gpt_model.eval().to(device)
        self.shape_model = OneDAutoEncoder(
            parse_structured(OneDAutoEncoder.Config, self.cfg.shape_model))
        load_model_weights(self.shape_model, shape_ckpt_path)
        self.shape_model = self.shape_model.eval().to(device)
        name = self.cfg.text_model_pretrained_model_name_or_path
        self.text_model = CLIPTextModelWithProjection.from_pretrained(name).eval()
        self.text_tokenizer = CLIPTokenizerFast.from_pretrained(name)
        self.max_new_tokens = self.shape_model.cfg.num_encoder_latents
        self.max_id = self.shape_model.cfg.num_codes

    def run_clip(self, text_inputs):
        raise RuntimeError("stub: run_clip needs CLIP (the bench should have replaced it)")

    @torch.inference_mode()
    def run_gpt(self, prompts, use_kv_cache, guidance_scale=3.0, top_p=None,
                bounding_box_xyz=None):
        cond = self.run_clip(prompts)
        if guidance_scale > 0.0:
            cond = torch.cat([cond, self.run_clip([""] * len(prompts))])
        rows = cond.shape[0]
        bos = torch.full((rows, 1), self.gpt_model.shape_bos_id, device=cond.device)
        embed = torch.zeros(rows, 1 + self.max_new_tokens, cond.shape[-1], device=cond.device)
        embed[:, :1] = self.gpt_model.encode_token(bos)
        out = []
        for i in range(self.max_new_tokens):
            pos = torch.tensor([i], device=cond.device)
            logits = self.gpt_model(embed, cond, curr_pos_id=pos, decode=i > 0)[:, 0, :self.max_id]
            if guidance_scale > 0.0:
                logits, uncond = logits.float().chunk(2)
                logits = (1 + guidance_scale) * logits - guidance_scale * uncond
            next_id = logits.argmax(-1, keepdim=True)
            out.append(next_id)
            step = self.gpt_model.encode_token(next_id)
            embed[:, i + 1] = (torch.cat([step, step]) if guidance_scale > 0.0 else step)[:, 0]
        return torch.cat(out, 1)

    @torch.inference_mode()
    def run_shape_decode(self, output_ids, resolution_base=8.0, chunk_size=100_000):
        latents = self.shape_model.decode_indices(output_ids)
        mesh_v_f, _ = self.shape_model.extract_geometry(
            latents, resolution_base=resolution_base, chunk_size=chunk_size, use_warp=True)
        return mesh_v_f


class EngineFast(Engine):
    def __init__(self, config_path, gpt_ckpt_path, shape_ckpt_path, device):
        assert device.type == "cuda", "stub: EngineFast runs on cuda only"
        super().__init__(config_path, gpt_ckpt_path, shape_ckpt_path, device)
