"""The policy contract shared by every policy family (see docs/interfaces.md, "Policies").

A :class:`Policy` is an ``nn.Module`` with ``chunk_size`` K, ``action_dim`` (7) and ``image_size``:

* ``act(obs, instructions, deterministic=False) -> PolicyOutput`` samples an action chunk
  ``(B, K, 7)`` in [-1, 1] with its exact log-probability ``(B,)``, entropy ``(B,)`` and an
  optional value ``(B,)``;
* ``evaluate_actions(obs, instructions, actions) -> PolicyEval`` gives the differentiable
  log-probability of a given chunk (the same number ``act`` returned for a chunk it sampled);
* ``save_pretrained(dir)`` / ``from_pretrained(dir)``: ``config.json`` + ``model.safetensors``
  (normalisation statistics are buffers inside the weights).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from wmrl.errors import CheckpointError, WmrlError
from wmrl.io import atomic_save_safetensors, atomic_write_json

FORMAT_VERSION = 1


@dataclass
class PolicyOutput:
    """Result of :meth:`Policy.act`.

    Attributes:
        actions: float32 ``(B, K, A)`` in [-1, 1].
        log_prob: float32 ``(B,)`` log-probability of the whole chunk.
        entropy: float32 ``(B,)`` entropy of the chunk distribution (exact or a documented estimate).
        value: float32 ``(B,)`` state value, or None without a value head.
    """

    actions: Tensor
    log_prob: Tensor
    entropy: Tensor
    value: Tensor | None = None


@dataclass
class PolicyEval:
    """Result of :meth:`Policy.evaluate_actions`: ``log_prob`` ``(B,)``, ``entropy`` ``(B,)``, ``value`` ``(B,)|None``.

    Policies whose log-probability factorises over action dimensions also give ``log_prob_dims``
    ``(B, K, A)`` (the terms ``log_prob`` sums, zero on inactive dims) and ``dim_mask`` ``(A,)``
    (1.0 on the dims that are sampled and scored), for per-dimension (token-level) RL ratios."""

    log_prob: Tensor
    entropy: Tensor
    value: Tensor | None = None
    log_prob_dims: Tensor | None = None
    dim_mask: Tensor | None = None


def to_tensor_obs(
    obs: dict[str, Any],
    image_size: int,
    state_dim: int,
    use_wrist: bool,
    device: torch.device | str = "cpu",
) -> dict[str, Tensor]:
    """Check and convert an env observation dict to tensors.

    Args:
        obs: ``image`` uint8 ``(B, H, W, 3)``, ``state`` float ``(B, D)``, ``wrist_image`` uint8
            ``(B, H, W, 3)`` when ``use_wrist``; numpy arrays or tensors.
    Returns:
        dict with ``image`` uint8 ``(B, H, W, 3)``, ``state`` float32 ``(B, D)`` and maybe
        ``wrist_image``, all tensors on ``device``.
    """
    if not isinstance(obs, dict):
        raise WmrlError(f"observation has type {type(obs).__name__}; expected a dict with keys 'image' and 'state'")
    keys = ["image", "state"] + (["wrist_image"] if use_wrist else [])
    missing = [k for k in keys if k not in obs]
    if missing:
        raise WmrlError(f"observation lacks key(s) {missing}; expected keys {keys}, got {sorted(obs)}")
    out: dict[str, Tensor] = {}
    batch = None
    for k in keys:
        v = obs[k]
        t = torch.as_tensor(np.asarray(v) if not isinstance(v, Tensor) else v)
        if k == "state":
            if t.ndim != 2 or t.shape[1] != state_dim:
                raise WmrlError(f"observation['state'] has shape {tuple(t.shape)}; expected (B, {state_dim})")
            t = t.float()
        else:
            if t.ndim != 4 or tuple(t.shape[1:]) != (image_size, image_size, 3):
                raise WmrlError(
                    f"observation[{k!r}] has shape {tuple(t.shape)}; expected (B, {image_size}, {image_size}, 3) uint8"
                )
            if t.dtype != torch.uint8:
                raise WmrlError(f"observation[{k!r}] has dtype {t.dtype}; expected uint8 images")
        if batch is None:
            batch = t.shape[0]
        elif t.shape[0] != batch:
            raise WmrlError(f"observation[{k!r}] has batch {t.shape[0]}; expected {batch} like observation['image']")
        out[k] = t.to(device)
    if not torch.isfinite(out["state"]).all():
        raise WmrlError("observation['state'] holds NaN or Inf; expected finite values")
    return out


def images_to_float(images: Tensor) -> Tensor:
    """uint8 ``(B, H, W, 3)`` -> float32 ``(B, 3, H, W)`` in [-1, 1]."""
    return images.permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


class Policy(nn.Module):
    """Base class of every policy family (thin lerobot-style surface over an inner network).

    Subclasses set ``config_class`` and ``name`` and implement :meth:`act` and
    :meth:`evaluate_actions`. ``select_action`` executes a chunk one step at a time.
    """

    config_class: ClassVar[type]
    name: ClassVar[str]

    def __init__(self, config: Any):
        super().__init__()
        self.config = config
        self._queue: list[np.ndarray] = []

    # -- contract attributes
    @property
    def chunk_size(self) -> int:
        return int(self.config.chunk_size)

    @property
    def action_dim(self) -> int:
        return int(self.config.action_dim)

    @property
    def image_size(self) -> int:
        return int(self.config.image_size)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    # -- to implement
    def act(self, obs: dict, instructions: list[str], deterministic: bool = False) -> PolicyOutput:
        raise NotImplementedError

    def evaluate_actions(self, obs: dict, instructions: list[str], actions: Tensor) -> PolicyEval:
        raise NotImplementedError

    # -- lerobot-style helpers
    def reset(self) -> None:
        """Forget queued actions (call at episode start)."""
        self._queue = []

    @torch.no_grad()
    def predict_action_chunk(self, obs: dict, instructions: list[str], deterministic: bool = True) -> np.ndarray:
        """float32 ``(B, K, A)`` numpy chunk."""
        return self.act(obs, instructions, deterministic=deterministic).actions.cpu().numpy()

    def check_chunk(self, actions: Any, batch: int) -> Tensor:
        """Validate a chunk ``(B, K, A)``; raise a one-line error on a shape mismatch."""
        a = torch.as_tensor(actions)
        want = (batch, self.chunk_size, self.action_dim)
        if tuple(a.shape) != want:
            raise WmrlError(f"actions have shape {tuple(a.shape)}; expected chunks of shape {want} (B, K, A)")
        if not torch.isfinite(a).all():
            raise WmrlError("actions hold NaN or Inf; expected finite values in [-1, 1]")
        return a.float().to(self.device)

    # -- save / load
    def save_pretrained(self, path: str | os.PathLike) -> Path:
        """Write ``config.json`` and ``model.safetensors`` (weights + normalisation buffers) to ``path``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        atomic_save_safetensors(path / "model.safetensors", self.state_dict(), metadata={"format": "pt"})
        atomic_write_json(
            path / "config.json",
            {"policy_type": self.name, "format_version": FORMAT_VERSION, "config": asdict(self.config)},
        )
        self._save_extra(path)
        return path

    def _save_extra(self, path: Path) -> None:
        """Hook for subclasses (e.g. the instruction embedding cache)."""

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, map_location: str = "cpu") -> Policy:
        """Load a policy saved by :meth:`save_pretrained`; a checkpoint of another architecture is an error."""
        from safetensors.torch import load_file

        from wmrl.config import to_dataclass

        path = Path(path)
        cfg_file = path / "config.json"
        if not cfg_file.exists():
            raise CheckpointError(f"{path} has no config.json; expected a folder written by save_pretrained")
        meta = json.loads(cfg_file.read_text())
        if meta.get("policy_type") != cls.name:
            raise CheckpointError(
                f"{path} holds a policy of type {meta.get('policy_type')!r}; expected {cls.name!r}"
            )
        if meta.get("format_version") != FORMAT_VERSION:
            raise CheckpointError(f"{path} has format_version={meta.get('format_version')}; expected {FORMAT_VERSION}")
        config = to_dataclass(meta["config"], cls.config_class)
        policy = cls(config)
        weights = path / "model.safetensors"
        if not weights.exists():
            raise CheckpointError(f"{path} has no model.safetensors")
        state = load_file(str(weights), device=map_location)
        own = policy.state_dict()
        bad = [k for k in own if k not in state or state[k].shape != own[k].shape]
        extra = [k for k in state if k not in own]
        if bad or extra:
            raise CheckpointError(
                f"{weights} does not match {cls.name} config (mismatched {bad[:3]}, unexpected {extra[:3]}); "
                "checkpoint of another architecture?"
            )
        policy.load_state_dict(state)
        policy._load_extra(path)
        return policy.to(map_location)

    def _load_extra(self, path: Path) -> None:
        """Hook for subclasses."""
