"""Action-conditioned video world models (deterministic and diffusion families behind one interface).

``load_world_model(path)`` reads a checkpoint written by ``save_pretrained``; ``make_world_model``
builds one from a typed config; families register lazily (their modules import diffusers).
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

from wmrl.errors import CheckpointError, ConfigError

if TYPE_CHECKING:
    from worldmodels.configuration_common import WorldModelConfig
    from worldmodels.modeling_common import WorldModel

_FAMILIES: dict[str, tuple[str, str, str]] = {
    # family: (module, model class, config class)
    "deterministic": ("worldmodels.deterministic", "DeterministicWorldModel", "DeterministicWMConfig"),
    "diffusion": ("worldmodels.diffusion", "DiffusionWorldModel", "DiffusionWMConfig"),
}


def list_families() -> list[str]:
    """Names of the registered world-model families."""
    return sorted(_FAMILIES)


def get_family(name: str) -> type[WorldModel]:
    """The model class of family ``name`` (imported on first use)."""
    if name not in _FAMILIES:
        raise ConfigError(
            f"unknown world-model family {name!r}; valid families: {', '.join(list_families())}"
        )
    mod, cls, _ = _FAMILIES[name]
    return getattr(importlib.import_module(mod), cls)


def get_config_class(name: str) -> type[WorldModelConfig]:
    """The typed config class of family ``name``."""
    if name not in _FAMILIES:
        raise ConfigError(
            f"unknown world-model family {name!r}; valid families: {', '.join(list_families())}"
        )
    mod, _, cfg = _FAMILIES[name]
    return getattr(importlib.import_module(mod), cfg)


def make_world_model(family: str, **config: object) -> WorldModel:
    """Build a fresh (untrained) world model of ``family`` with config fields ``config``."""
    from wmrl.config import to_dataclass

    return get_family(family)(to_dataclass(dict(config), get_config_class(family)))


def load_world_model(path: str | os.PathLike, device: str = "cpu") -> WorldModel:
    """Load any family's checkpoint folder (``config.json`` + ``model.safetensors``)."""
    from pathlib import Path

    from worldmodels.modeling_common import WorldModel

    p = Path(path)
    if not p.exists():
        raise CheckpointError(f"world-model checkpoint {p} does not exist")
    return WorldModel.from_pretrained(p, device=device)


__all__ = ["get_config_class", "get_family", "list_families", "load_world_model", "make_world_model"]
