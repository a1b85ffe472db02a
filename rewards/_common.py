"""Shared pieces of the reward models: save/load of config + safetensors weights, checks."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from wmrl.errors import CheckpointError, WmrlError
from wmrl.io import atomic_save_safetensors, atomic_write_json

FORMAT_VERSION = 1


def check_frames(frames: Any, image_size: int, ndim: int, what: str = "frames") -> Tensor:
    """uint8 frames ``(B, T, H, W, 3)`` (ndim 5) or ``(B, H, W, 3)`` (ndim 4) as a tensor; one-line error otherwise."""
    t = frames if isinstance(frames, Tensor) else torch.as_tensor(np.asarray(frames))
    want = ("(B, T, " if ndim == 5 else "(B, ") + f"{image_size}, {image_size}, 3)"
    if t.ndim != ndim or tuple(t.shape[-3:]) != (image_size, image_size, 3):
        raise WmrlError(f"{what} have shape {tuple(t.shape)}; expected {want} uint8")
    if t.dtype != torch.uint8:
        raise WmrlError(f"{what} have dtype {t.dtype}; expected uint8 {want}")
    return t


def save_model(module: nn.Module, config: Any, model_type: str, path: str | os.PathLike, extra: dict | None = None) -> Path:
    """Write ``config.json`` (``reward_model_type``, format version, config) and ``model.safetensors``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    atomic_save_safetensors(path / "model.safetensors", module.state_dict())
    atomic_write_json(
        path / "config.json",
        {"reward_model_type": model_type, "format_version": FORMAT_VERSION, "config": asdict(config), **(extra or {})},
    )
    return path


def load_model(cls: Any, model_type: str, path: str | os.PathLike, map_location: str = "cpu") -> Any:
    """Inverse of :func:`save_model`; a checkpoint of another model type or shape is a CheckpointError."""
    from safetensors.torch import load_file

    from wmrl.config import to_dataclass

    path = Path(path)
    cfg = path / "config.json"
    if not cfg.exists():
        raise CheckpointError(f"{path} has no config.json; expected a folder written by save_pretrained")
    meta = json.loads(cfg.read_text())
    if meta.get("reward_model_type") != model_type:
        got = meta.get("reward_model_type") or meta.get("policy_type") or "unknown"
        raise CheckpointError(f"{path} holds a model of type {got!r}; expected {model_type!r}")
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path} has format_version={meta.get('format_version')}; expected {FORMAT_VERSION}")
    model = cls(to_dataclass(meta["config"], cls.config_class))
    weights = path / "model.safetensors"
    if not weights.exists():
        raise CheckpointError(f"{path} has no model.safetensors")
    state = load_file(str(weights), device=map_location)
    own = model.state_dict()
    bad = [k for k in own if k not in state or state[k].shape != own[k].shape]
    if bad or set(state) - set(own):
        raise CheckpointError(f"{weights} does not match the {model_type} config (mismatched {bad[:3]})")
    model.load_state_dict(state)
    return model.to(map_location)
