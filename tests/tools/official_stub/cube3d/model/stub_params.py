"""Test stand-in (not the official code): builds a module tree whose parameters carry the names
and shapes of our own checkpoint writer, scripts/make_random_checkpoint.py."""
import dataclasses
import importlib.util
import os

import torch
from torch import nn

WRITER = os.path.join(os.path.dirname(__file__), *[os.pardir] * 5, "scripts",
                      "make_random_checkpoint.py")


def writer():
    spec = importlib.util.spec_from_file_location("make_random_checkpoint", WRITER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def add_parameters(root, spec):
    """Registers a zero parameter per (dotted name, shape, role), making submodules on the way."""
    for name, shape, _ in spec:
        *path, leaf = name.split(".")
        module = root
        for part in path:
            if not hasattr(module, part):
                module.add_module(part, nn.Module())
            module = getattr(module, part)
        module.register_parameter(leaf, nn.Parameter(torch.zeros(shape), requires_grad=False))


def find(root, name):
    for part in name.split("."):
        root = getattr(root, part)
    return root


def config_class(**defaults):
    """A dataclass Config with these fields and their defaults (a list default: a fresh copy for
    each config)."""
    def field(value):
        if isinstance(value, list):
            return dataclasses.field(default_factory=lambda: list(value))
        return dataclasses.field(default=value)

    return dataclasses.make_dataclass(
        "Config", [(name, type(value), field(value)) for name, value in defaults.items()])


class WrittenModule(nn.Module):
    """A module with the parameters our writer gives a model of its config (cfg, a Config):
    SPEC names the writer's function (gpt_spec, shape_tokenizer_spec)."""

    SPEC = None

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        add_parameters(self, getattr(writer(), self.SPEC)(dataclasses.asdict(cfg)))
