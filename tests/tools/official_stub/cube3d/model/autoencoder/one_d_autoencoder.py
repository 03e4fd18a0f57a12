"""Test stand-in (not the official code): a shape model with the official config's field names,
our writer's tensor names plus one encoder-only tensor and one shared module, and a sphere for
its occupancy field."""
import logging

import numpy as np
import torch
import torch.nn.functional as F
from skimage import measure
from torch import nn

from cube3d.model.autoencoder.grid import marching_cubes_with_warp
from cube3d.model.stub_params import WrittenModule, config_class, find


class OneDAutoEncoder(WrittenModule):
    SPEC = "shape_tokenizer_spec"
    Config = config_class(
        checkpoint_path="", num_encoder_latents=16, num_decoder_latents=0, embed_dim=8, width=32,
        num_heads=2, out_dim=1, eps=1e-6, num_freqs=4, point_feats=0, embed_point_feats=False,
        num_encoder_layers=1, encoder_cross_attention_levels=[], num_decoder_layers=1,
        encoder_with_cls_token=True, num_codes=32)

    def __init__(self, cfg):
        super().__init__(cfg)
        # An encoder-only tensor (inference never reads it) and the Fourier embedder shared
        # under a second name, as a module used by two parts is.
        self.encoder = nn.Module()
        self.encoder.register_parameter("query", nn.Parameter(torch.ones(2, cfg.width),
                                                              requires_grad=False))
        self.embedder = self.occupancy_decoder.embedder

    @torch.no_grad()
    def decode_indices(self, shape_ids):
        codes = F.embedding(shape_ids, find(self, "bottleneck.block.codebook.weight"))
        out = find(self, "bottleneck.block.c_out")
        return F.linear(codes, out.weight, out.bias)

    def query(self, queries, latents):
        radius = 0.6 + 0.01 * torch.tanh(latents.float().mean())
        return (radius - queries.float().norm(dim=-1)).to(queries.dtype)

    @torch.no_grad()
    def extract_geometry(self, latents, bounds=(-1.05, -1.05, -1.05, 1.05, 1.05, 1.05),
                         resolution_base=9.0, chunk_size=2_000_000, use_warp=False):
        lo, hi = np.array(bounds[:3]), np.array(bounds[3:])
        n = int(np.exp2(resolution_base)) + 1
        axes = [np.linspace(lo[i], hi[i], n, dtype=np.float32) for i in range(3)]
        xyz = torch.from_numpy(np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3))
        logits = []
        for start in range(0, xyz.shape[0], chunk_size):
            queries = xyz[start:start + chunk_size].unsqueeze(0).expand(latents.shape[0], -1, -1)
            logits.append(self.query(queries.to(latents), latents))
        grid = torch.cat(logits, 1).view(latents.shape[0], n, n, n).float()
        out = []
        has_surface = np.zeros(latents.shape[0], dtype=bool)
        for i in range(latents.shape[0]):
            try:
                done = False
                if use_warp:
                    try:
                        vertices, faces = marching_cubes_with_warp(grid[i], 0.0, grid.device)
                        done = True
                    except Exception as e:  # the fallback the interface promises
                        logging.warning("stub: warp marching cubes failed: %s", e)
                if not done:
                    vertices, faces, _, _ = measure.marching_cubes(grid[i].cpu().numpy(), 0)
                vertices = vertices / (n - 1) * (hi - lo) + lo
                out.append((vertices.astype(np.float32), np.ascontiguousarray(faces[:, ::-1])))
                has_surface[i] = True
            except Exception as e:
                logging.error("stub: extract_geometry failed: %s", e)
                out.append((None, None))
        return out, has_surface
