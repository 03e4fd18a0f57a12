"""Test stand-in (not the official code): the config and weight helpers' interface."""
import yaml
from safetensors.torch import load_model


class Config(dict):
    """A YAML mapping readable as attributes (cfg.gpt_model), recursively."""

    def __getattr__(self, name):
        try:
            value = self[name]
        except KeyError:
            raise AttributeError(f"config has no key {name!r}") from None
        return Config(value) if isinstance(value, dict) else value


def load_config(cfg_path):
    with open(cfg_path) as f:
        return Config(yaml.safe_load(f))


def parse_structured(cfg_type, cfg):
    # Unknown keys fail (TypeError), as a dataclass built from them does.
    return cfg_type(**dict(cfg))


def load_model_weights(model, ckpt_path):
    assert ckpt_path.endswith(".safetensors"), ckpt_path
    load_model(model, ckpt_path)  # strict: every tensor of the model, nothing else

