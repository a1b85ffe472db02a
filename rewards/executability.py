"""Executability reward (EVA-style): decode actions from a frame sequence with the IDM and score how
physically plausible the decoded motion is.

Visual artifacts of a generated clip (objects jumping, frozen frames, teleports) show up as
unstable decoded actions. Per transition ``t`` the penalty is (Huber ``h`` with ``huber_delta``,
summed over the smoothness dims; ``d`` decoded actions, ``c`` commanded actions)::

    P_t = w_jerk h(d_t - 2 d_{t-1} + d_{t-2}) + w_acc h(d_t - d_{t-1}) + w_vel h(d_t)
          + w_vlim relu(|d_t| - vel_limit) + w_alim relu(|d_t - d_{t-1}| - acc_limit)
          + w_cons h_1((d_t - c_t) / r)    (only when commanded actions are known)

with RLinf's action_smoothness weights as defaults (0.5 jerk, 0.25 acc, 2 vlim, 1 alim); ``r`` is
the IDM's per-dim residual std on held-out real clips (set by ``calibrate``), so a dim the IDM
decodes well (x) counts more than one it decodes poorly (depth y, confounded with height z in
one oblique view), and ``h_1`` is a Huber with delta 1 (in residual-std units). The
clip reward is RLinf's bounded map ``reward = 10 (1 + sum_t P_t / scale)^(-1/2)`` in (0, 10],
and ``per_step_score_t = (1 + P_t / step_scale)^(-1/2)`` in (0, 1]. ``scale`` and ``step_scale``
are set by :meth:`ExecutabilityReward.calibrate` from real clips (median penalty of a real clip
maps to reward 10/sqrt(2)), since our actions are normalised, not in RLinf's physical units.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from rewards.idm import IDM
from wmrl.errors import CheckpointError, ConfigError, WmrlError
from wmrl.io import atomic_write_json


@dataclass
class ExecutabilityConfig:
    """Args:
    smooth_dims: action dims whose velocity/acc/jerk are penalised (built-in suite: position).
    consistency_dims: dims compared with commanded actions (position + gripper).
    w_jerk, w_acc, w_vel, w_vlim, w_alim, w_cons: penalty weights.
    huber_delta: Huber transition point (normalised action units).
    vel_limit, acc_limit: limits on |d| and |d_t - d_{t-1}|.
    scale: clip-penalty scale of the bounded reward (set by calibrate).
    step_scale: per-step penalty scale of ``per_step_score`` (set by calibrate).
    residual_std: per-action-dim std of (IDM decoded - commanded) on real clips (set by
        calibrate); None: the action std.
    """

    smooth_dims: tuple[int, ...] = (0, 1, 2)
    consistency_dims: tuple[int, ...] = (0, 1, 2, 6)
    w_jerk: float = 0.5
    w_acc: float = 0.25
    w_vel: float = 0.05
    w_vlim: float = 2.0
    w_alim: float = 1.0
    w_cons: float = 2.0
    huber_delta: float = 0.2
    vel_limit: float = 1.0
    acc_limit: float = 1.0
    scale: float = 1.0
    step_scale: float = 0.1
    residual_std: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.residual_std is not None:
            self.residual_std = tuple(float(x) for x in self.residual_std)
            if any(not x > 0 for x in self.residual_std):
                raise ConfigError(f"{self.residual_std=} must hold positive values")
        self.smooth_dims = tuple(int(d) for d in self.smooth_dims)
        self.consistency_dims = tuple(int(d) for d in self.consistency_dims)
        for k in ("w_jerk", "w_acc", "w_vel", "w_vlim", "w_alim", "w_cons"):
            if getattr(self, k) < 0:
                raise ConfigError(f"{k}={getattr(self, k)} must be >= 0")
        if self.huber_delta <= 0 or self.scale <= 0 or self.step_scale <= 0:
            raise ConfigError(f"{self.huber_delta=}, {self.scale=} and {self.step_scale=} must be > 0")
        if not self.smooth_dims:
            raise ConfigError(f"{self.smooth_dims=} must name at least one action dim")


@dataclass
class ExecOutput:
    """``reward`` (B,) in (0, 10]; ``per_step_score`` (B, T-1) in (0, 1]; ``decoded_actions`` (B, T-1, A);
    ``penalty`` (B, T-1) the raw per-step penalty P_t."""

    reward: Tensor
    per_step_score: Tensor
    decoded_actions: Tensor
    penalty: Tensor


def _huber(x: Tensor, delta: float) -> Tensor:
    return F.huber_loss(x, torch.zeros_like(x), reduction="none", delta=delta)


class ExecutabilityReward:
    """``ExecutabilityReward(idm, config)(frames (B,T,H,W,3), commanded_actions (B,T-1,A)|None) -> ExecOutput``."""

    def __init__(self, idm: IDM, config: ExecutabilityConfig | None = None):
        self.idm = idm
        self.config = config or ExecutabilityConfig()
        a = idm.config.action_dim
        bad = [d for d in self.config.smooth_dims + self.config.consistency_dims if not 0 <= d < a]
        if bad:
            raise ConfigError(f"action dims {bad} are out of range for the IDM's action_dim={a}")

    def penalties(self, decoded: Tensor, commanded: Tensor | None = None) -> Tensor:
        """decoded (B, T-1, A) [, commanded (B, T-1, A)] -> per-step penalty P (B, T-1) >= 0."""
        c = self.config
        std = self.idm.action_std
        d = decoded / std  # normalised units: every dim counts alike
        s = d[..., list(c.smooth_dims)]
        vel = s
        acc = torch.cat([torch.zeros_like(s[:, :1]), s[:, 1:] - s[:, :-1]], dim=1)
        jerk = torch.cat([torch.zeros_like(acc[:, :1]), acc[:, 1:] - acc[:, :-1]], dim=1)
        if s.shape[1] >= 1:
            jerk[:, :1] = 0
        p = (
            c.w_jerk * _huber(jerk, c.huber_delta).sum(-1)
            + c.w_acc * _huber(acc, c.huber_delta).sum(-1)
            + c.w_vel * _huber(vel, c.huber_delta).sum(-1)
        )
        raw = decoded[..., list(c.smooth_dims)]
        raw_acc = torch.cat([torch.zeros_like(raw[:, :1]), raw[:, 1:] - raw[:, :-1]], dim=1)
        p = p + c.w_vlim * F.relu(raw.abs() - c.vel_limit).sum(-1) + c.w_alim * F.relu(raw_acc.abs() - c.acc_limit).sum(-1)
        if commanded is not None and c.w_cons > 0:
            dims = list(c.consistency_dims)
            r = std if c.residual_std is None else torch.tensor(c.residual_std, device=decoded.device)
            diff = (decoded[..., dims] - commanded[..., dims]) / r[dims]
            p = p + c.w_cons * _huber(diff, 1.0).sum(-1)
        return p

    @torch.no_grad()
    def __call__(self, frames: Any, commanded_actions: Any | None = None) -> ExecOutput:
        decoded = self.idm.predict(frames)
        cmd = None
        if commanded_actions is not None:
            cmd = torch.as_tensor(np.asarray(commanded_actions) if not isinstance(commanded_actions, Tensor)
                                  else commanded_actions).float().to(decoded.device)
            if tuple(cmd.shape) != tuple(decoded.shape):
                raise WmrlError(
                    f"commanded_actions have shape {tuple(cmd.shape)}; expected {tuple(decoded.shape)} (B, T-1, A)"
                )
        p = self.penalties(decoded, cmd)
        c = self.config
        reward = 10.0 * (1.0 + p.sum(1) / c.scale).rsqrt()
        score = (1.0 + p / c.step_scale).rsqrt()
        return ExecOutput(reward, score, decoded, p)

    def calibrate(self, frames: Any, commanded_actions: Any | None = None) -> dict[str, Any]:
        """Calibrate on real clips (B, T, H, W, 3) (held out from the IDM's training data): with
        commanded actions, ``residual_std`` = per-dim std of decoded - commanded; then ``scale`` /
        ``step_scale`` so the median real clip (step) penalty maps to reward 10/sqrt(2) (score 1/sqrt(2))."""
        if commanded_actions is not None:
            decoded = self.idm.predict(frames)
            cmd = torch.as_tensor(np.asarray(commanded_actions)).float().to(decoded.device)
            if tuple(cmd.shape) != tuple(decoded.shape):
                raise WmrlError(
                    f"commanded_actions have shape {tuple(cmd.shape)}; expected {tuple(decoded.shape)} (B, T-1, A)"
                )
            res = (decoded - cmd).flatten(0, 1).std(0).clamp_min(1e-2)
            self.config.residual_std = tuple(float(x) for x in res)
        p = self(frames, commanded_actions).penalty
        self.config.scale = max(float(p.sum(1).median()), 1e-6)
        self.config.step_scale = max(float(p.median()), 1e-6)
        return {"scale": self.config.scale, "step_scale": self.config.step_scale,
                "residual_std": self.config.residual_std}

    def save_pretrained(self, path: str | os.PathLike) -> Path:
        """``path/executability.json`` + the IDM in ``path/idm``."""
        path = Path(path)
        self.idm.save_pretrained(path / "idm")
        atomic_write_json(path / "executability.json", {"reward_model_type": "executability", "config": asdict(self.config)})
        return path

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, map_location: str = "cpu") -> ExecutabilityReward:
        from wmrl.config import to_dataclass

        path = Path(path)
        f = path / "executability.json"
        if not f.exists():
            raise CheckpointError(f"{path} has no executability.json; expected a folder written by save_pretrained")
        meta = json.loads(f.read_text())
        return cls(IDM.from_pretrained(path / "idm", map_location), to_dataclass(meta["config"], ExecutabilityConfig))
