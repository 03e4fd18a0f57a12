"""Test stand-in (not the official code): imports warp unconditionally, like the module whose
interface it copies, so that bench/official_engine.py's warp placeholder is exercised."""
import warp as wp


def marching_cubes_with_warp(grid_logits, level, device="cuda"):
    if "cuda" not in str(device):
        raise ValueError(f"Device {device} is not supported for marching_cubes_with_warp")
    assert wp.is_cuda_available()
    raise NotImplementedError("the test stand-in has no warp marching cubes")
