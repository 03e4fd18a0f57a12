"""Test stand-in (not the official code): a GPT with the official config's field names and our
writer's tensor names, and toy math (logits of the embedding plus the condition's mean)."""
import torch.nn.functional as F

from cube3d.model.stub_params import WrittenModule, config_class, find


class DualStreamRoformer(WrittenModule):
    SPEC = "gpt_spec"
    Config = config_class(
        checkpoint_path="", n_layer=1, n_single_layer=0, rope_theta=10000, n_head=2, n_embd=32,
        bias=True, eps=1e-6, shape_model_vocab_size=32, shape_model_embed_dim=8,
        text_model_embed_dim=16, use_pooled_text_embed=False, encoder_with_cls_token=True,
        use_bbox=False)

    def __init__(self, cfg):
        super().__init__(cfg)
        self.vocab_size = cfg.shape_model_vocab_size + 3
        self.shape_bos_id = cfg.shape_model_vocab_size

    def encode_text(self, text_embed):
        return F.linear(text_embed, self.text_proj.weight, getattr(self.text_proj, "bias", None))

    def encode_token(self, tokens):
        return F.embedding(tokens, find(self, "transformer.wte.weight"))

    def forward(self, embed, cond, kv_cache=None, curr_pos_id=None, decode=False):
        if decode:
            embed = embed[:, curr_pos_id, :]
        h = F.layer_norm(embed + cond.mean(1, keepdim=True), (embed.shape[-1],))
        return F.linear(h, self.lm_head.weight)

