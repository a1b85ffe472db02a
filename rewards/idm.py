"""Inverse dynamics model (IDM): from a short window of frames, predict the action between two frames.

For the transition ``t -> t+1`` the network sees frames ``t-context .. t+1+future`` (edge frames
replicated at the clip borders) and regresses the normalised 7-D action ``a_t``.
``IDM.predict(frames (B,T,H,W,3)) -> (B,T-1,7)``. Two architectures (``IDMConfig.arch``):

* ``keypoints`` (default): a shared per-frame CNN ends in a spatial soft-argmax, K sub-pixel
  keypoints per frame (plus their peak strengths and pooled appearance features); an MLP reads the
  window's keypoints and their per-step displacements. Frames are encoded once per clip.
* ``stack``: the window's frames and consecutive differences stacked on channels, one CNN.

In the built-in suite's oblique 64x64 agent view, depth (y) and height (z) both move the gripper
vertically in the image (about 1.7 and 2.4 px per 2 cm at the workspace centre, x about 2.9 px
horizontally), so y and z are only separable through small perspective (size) changes; see
``benchmarks/reward_models.py`` for the ceiling this puts on the IDM's R^2.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from policies.vla.modeling_vla import ConvEncoder
from rewards._common import check_frames, load_model, save_model
from wmrl.errors import ConfigError, WmrlError


@dataclass
class IDMConfig:
    """Args:
    image_size: frame side in pixels.
    action_dim: action size (7).
    context: frames before ``t`` in the window.
    future: frames after ``t+1`` in the window.
    channels: conv channels per stage.
    hidden_dim: MLP width.
    arch: ``"stack"`` (frames and consecutive differences stacked on channels, one CNN) or
        ``"keypoints"`` (a shared per-frame CNN ending in a spatial soft-argmax: K sub-pixel
        keypoints per frame; an MLP reads the keypoint tracks of the window and their steps).
    strides: per-stage conv strides (``stack``: 2,2,2,1,...; ``keypoints``: default 2,2,1,...).
    keypoints: number of soft-argmax keypoints per frame (``keypoints`` arch).
    """

    image_size: int = 64
    action_dim: int = 7
    context: int = 0
    future: int = 0
    channels: tuple[int, ...] = (16, 32, 32)
    hidden_dim: int = 256
    arch: str = "keypoints"
    strides: tuple[int, ...] | None = None
    keypoints: int = 32

    def __post_init__(self) -> None:
        self.channels = tuple(int(c) for c in self.channels)
        if not 16 <= self.image_size <= 256 or self.image_size % 8:
            raise ConfigError(f"{self.image_size=} must be a multiple of 8 in [16, 256]")
        if self.action_dim < 1:
            raise ConfigError(f"{self.action_dim=} must be >= 1")
        if not 0 <= self.context <= 4 or not 0 <= self.future <= 4:
            raise ConfigError(f"{self.context=} and {self.future=} must be in [0, 4]")
        if self.arch not in ("stack", "keypoints"):
            raise ConfigError(f"{self.arch=}; expected 'stack' or 'keypoints'")
        min_stages = 3 if self.arch == "stack" else 2
        if len(self.channels) < min_stages:
            raise ConfigError(f"{self.channels=} needs at least {min_stages} stages for arch={self.arch!r}")
        if self.strides is None:
            base = (2, 2, 2) if self.arch == "stack" else (2, 2)
            self.strides = tuple(base[i] if i < len(base) else 1 for i in range(len(self.channels)))
        self.strides = tuple(int(s) for s in self.strides)
        if len(self.strides) != len(self.channels) or any(s not in (1, 2) for s in self.strides):
            raise ConfigError(f"{self.strides=} must give stride 1 or 2 for each of the {len(self.channels)} stages")
        if self.arch == "stack" and self.strides != (2, 2, 2) + (1,) * (len(self.channels) - 3):
            raise ConfigError(f"arch='stack' uses strides 2,2,2,1,...; got {self.strides=}")
        if self.keypoints < 1:
            raise ConfigError(f"{self.keypoints=} must be >= 1")

    @property
    def window(self) -> int:
        return self.context + 2 + self.future


def _conv_stack(c_in: int, channels: tuple[int, ...], strides: tuple[int, ...]) -> tuple[nn.Sequential, int]:
    """3x3 conv + GroupNorm + ReLU per stage -> (module, total stride)."""
    layers: list[nn.Module] = []
    total = 1
    for c, s in zip(channels, strides):
        layers += [nn.Conv2d(c_in, c, 3, stride=s, padding=1), nn.GroupNorm(min(8, c), c), nn.ReLU()]
        c_in, total = c, total * s
    return nn.Sequential(*layers), total


def _coords(size: int) -> Tensor:
    """(2, size, size) x/y pixel-centre coordinates in [-1, 1]."""
    ys, xs = torch.meshgrid(torch.linspace(-1, 1, size), torch.linspace(-1, 1, size), indexing="ij")
    return torch.stack([xs, ys])


class _KeypointEncoder(nn.Module):
    """Frames (N, 3, H, W) in [-1, 1] -> (N, 3K + C): K soft-argmax (x, y) in [-1, 1], K peak
    strengths (max of the spatial softmax, how sure the keypoint is) and the C channels of the last
    conv stage averaged over space (appearance, e.g. how open the fingers are)."""

    def __init__(self, c: IDMConfig):
        super().__init__()
        self.body, stride = _conv_stack(5, c.channels, c.strides)
        self.head = nn.Conv2d(c.channels[-1], c.keypoints, 1)
        self.log_temp = nn.Parameter(torch.zeros(()))
        size = (c.image_size + stride - 1) // stride
        self.register_buffer("grid", _coords(size).flatten(1), persistent=False)  # (2, S)
        self.register_buffer("in_coords", _coords(c.image_size)[None], persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        x = torch.cat([x, self.in_coords.expand(x.shape[0], -1, -1, -1)], dim=1)
        f = self.body(x)
        h = self.head(f).flatten(2)  # (N, K, S)
        p = torch.softmax(h * self.log_temp.exp() * 10.0, dim=-1)
        xy = torch.einsum("nks,ds->nkd", p, self.grid)  # (N, K, 2)
        return torch.cat([xy.flatten(1), p.amax(-1), f.mean((2, 3))], dim=1)


class IDM(nn.Module):
    """Inverse dynamics model. Normalisation statistics of the actions travel as buffers."""

    config_class = IDMConfig
    model_type = "idm"

    def __init__(self, config: IDMConfig):
        super().__init__()
        self.config = config
        c = config
        w = c.window
        if c.arch == "stack":
            self.encoder = ConvEncoder(c.image_size, c.channels, c.hidden_dim, in_channels=3 * (2 * w - 1))
            feat = c.hidden_dim
        else:
            self.encoder = _KeypointEncoder(c)
            k = c.keypoints
            feat = w * (3 * k + c.channels[-1]) + (w - 1) * 2 * k
        self.mlp = nn.Sequential(nn.Linear(feat, c.hidden_dim), nn.ReLU(), nn.Linear(c.hidden_dim, c.hidden_dim),
                                 nn.ReLU(), nn.Linear(c.hidden_dim, c.action_dim))
        self.register_buffer("action_mean", torch.zeros(c.action_dim))
        self.register_buffer("action_std", torch.ones(c.action_dim))

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def set_normalization(self, mean: Any, std: Any) -> None:
        self.action_mean.copy_(torch.as_tensor(mean, dtype=torch.float32))
        self.action_std.copy_(torch.as_tensor(std, dtype=torch.float32).clamp_min(1e-2))

    def window_input(self, windows: Tensor) -> Tensor:
        """uint8 windows (N, W, H, W, 3) -> float (N, W, 3, H, W) in [-1, 1]."""
        return windows.permute(0, 1, 4, 2, 3).float().div(127.5).sub(1.0)

    def forward_windows(self, windows: Tensor) -> Tensor:
        """uint8 (N, W, H, W, 3) -> normalised action predictions (N, A).

        ``stack``: the W frames and the W-1 consecutive differences (x4) stacked on channels -> CNN.
        ``keypoints``: every frame -> K soft-argmax keypoints (shared CNN); the MLP reads the
        window's keypoints, strengths, pooled features and per-step keypoint displacements (x10)."""
        x = self.window_input(windows)
        n, w = x.shape[:2]
        if self.config.arch == "stack":
            diff = (x[:, 1:] - x[:, :-1]) * 4.0
            feat = self.encoder(torch.cat([x.flatten(1, 2), diff.flatten(1, 2)], dim=1))
        else:
            return self._keypoint_head(self.encoder(x.flatten(0, 1)).view(n, w, -1))
        return self.mlp(feat)

    def _keypoint_head(self, kp: Tensor) -> Tensor:
        """Per-frame keypoint features of windows (N, W, F) -> normalised actions (N, A)."""
        xy = kp[..., : 2 * self.config.keypoints]
        return self.mlp(torch.cat([kp.flatten(1), ((xy[:, 1:] - xy[:, :-1]) * 10.0).flatten(1)], dim=1))

    def loss(self, windows: Tensor, actions: Tensor, weights: Tensor | None = None) -> Tensor:
        """MSE in normalised action space. windows (N, W, H, W, 3) uint8, actions (N, A)."""
        target = (actions - self.action_mean) / self.action_std
        err = (self.forward_windows(windows) - target).pow(2).mean(-1)
        if weights is None:
            return err.mean()
        return (err * weights).sum() / weights.sum().clamp_min(1e-8)

    def clip_windows(self, frames: Tensor) -> Tensor:
        """(B, T, ...) (uint8 frames or per-frame features) -> windows (B*(T-1), W, ...), border frames replicated."""
        _b, t = frames.shape[:2]
        c, f = self.config.context, self.config.future
        offs = torch.arange(-c, 2 + f)
        idx = (torch.arange(t - 1)[:, None] + offs[None]).clamp(0, t - 1)  # (T-1, W)
        return frames[:, idx].flatten(0, 1)

    def predict(self, frames: Any, batch_size: int = 256, grad: bool = False) -> Tensor:
        """frames uint8 (B, T, H, W, 3), T >= 2 -> decoded actions float32 (B, T-1, A) (de-normalised)."""
        x = check_frames(frames, self.config.image_size, 5).to(self.device)
        b, t = x.shape[:2]
        if t < 2:
            raise WmrlError(f"frames have T={t}; the IDM needs at least 2 frames per clip")
        with torch.set_grad_enabled(grad):
            if self.config.arch == "keypoints":  # encode every frame once, then gather the windows
                flat = x.flatten(0, 1)
                kp = torch.cat([self.encoder(self.window_input(flat[i : i + batch_size, None])[:, 0])
                                for i in range(0, len(flat), batch_size)]).view(b, t, -1)
                out = self._keypoint_head(self.clip_windows(kp))
            else:
                windows = self.clip_windows(x)
                out = torch.cat([self.forward_windows(windows[i : i + batch_size])
                                 for i in range(0, len(windows), batch_size)])
        return (out * self.action_std + self.action_mean).view(b, t - 1, -1)

    def save_pretrained(self, path: str | os.PathLike):
        return save_model(self, self.config, self.model_type, path)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, map_location: str = "cpu") -> IDM:
        return load_model(cls, cls.model_type, path, map_location)


# --------------------------------------------------------------------------- data
def transition_windows(traj: Any, config: IDMConfig) -> tuple[np.ndarray, np.ndarray]:
    """Window frame indices and targets for every transition in ``traj`` (wmrl.data.Trajectories).

    Returns ``idx`` int64 (M, W) (frame indices, clamped to the episode) and ``t`` int64 (M,) the
    transition's frame (its action is ``traj.actions[t]``, between frames t and t+1)."""
    rows, ts = [], []
    offs = np.arange(-config.context, 2 + config.future)
    for s, e in np.asarray(traj.episode_bounds):
        t = np.arange(s, e - 1)  # the last frame has no successor frame in the data
        if len(t) == 0:
            continue
        rows.append(np.clip(t[:, None] + offs[None], s, e - 1))
        ts.append(t)
    if not rows:
        raise WmrlError("no transitions: every episode has fewer than 2 frames")
    return np.concatenate(rows), np.concatenate(ts)


def train_idm(
    traj: Any,
    config: IDMConfig | None = None,
    steps: int = 2000,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    model: IDM | None = None,
    weights: np.ndarray | None = None,
    augment_shift: int = 0,
    log: Any = None,
    progress: bool = False,
    device: str | torch.device | None = None,
) -> IDM:
    """Train (or continue training ``model``) an IDM on real trajectories.

    Args:
        traj: :class:`wmrl.data.Trajectories`.
        weights: optional per-episode weights (E,) (e.g. to up-weight new data when fine-tuning).
        augment_shift: random shift in pixels, the same for every frame of a window (motion kept).
            0 by default: the camera is fixed, and absolute image position carries depth cues.
        log: optional callable ``log(step, metrics)`` (e.g. ``RunDir.log``).
        device: where the IDM trains (``wmrl.devices`` names); None: where ``model`` is (a new
            model: the CPU). The frames stay on the CPU and each batch moves there.
    """
    from tqdm import tqdm

    from wmrl.devices import resolve_device
    from wmrl.runs import check_finite

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    if model is None:
        model = IDM(config or IDMConfig(image_size=int(traj.images.shape[1])))
        acts = np.asarray(traj.actions, dtype=np.float32)
        model.set_normalization(acts.mean(0), acts.std(0))
    if device is not None:
        model.to(resolve_device(device))
    dev = model.device
    cfg = model.config
    idx, ts = transition_windows(traj, cfg)
    images = torch.from_numpy(np.ascontiguousarray(traj.images))
    actions = torch.from_numpy(np.asarray(traj.actions, dtype=np.float32))
    w = None
    if weights is not None:
        ep_of = np.asarray(traj.episode_index)[ts]
        uniq = np.unique(np.asarray(traj.episode_index))
        wmap = {e: float(weights[i]) for i, e in enumerate(uniq)}
        w = torch.tensor([wmap[e] for e in ep_of], dtype=torch.float32)
    idx_t, ts_t = torch.from_numpy(idx), torch.from_numpy(ts)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps, eta_min=lr * 0.05)
    model.train()
    for step in tqdm(range(steps), desc="train-idm", disable=not progress):
        b = torch.randint(0, len(ts_t), (batch_size,), generator=gen)
        win = shift_windows(images[idx_t[b]], augment_shift, gen)
        loss = model.loss(win.to(dev), actions[ts_t[b]].to(dev), None if w is None else w[b].to(dev))
        check_finite("IDM loss", loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if log is not None and ((step + 1) % 100 == 0 or step + 1 == steps):
            log(step + 1, {"idm_loss": loss.item()})
    model.eval()
    return model


def shift_windows(windows: Tensor, shift: int, gen: torch.Generator | None = None) -> Tensor:
    """Random-shift augmentation of uint8 windows (N, W, H, W, 3), one offset per window (edge pixels repeat)."""
    if shift <= 0:
        return windows
    n, w, h, wd, _ = windows.shape
    oy = torch.randint(-shift, shift + 1, (n, 1), generator=gen)
    ox = torch.randint(-shift, shift + 1, (n, 1), generator=gen)
    rows = (oy + torch.arange(h)[None]).clamp(0, h - 1)
    cols = (ox + torch.arange(wd)[None]).clamp(0, wd - 1)
    return windows[torch.arange(n)[:, None, None, None], torch.arange(w)[None, :, None, None],
                   rows[:, None, :, None], cols[:, None, None, :]]


@torch.no_grad()
def idm_r2(model: IDM, traj: Any, max_transitions: int = 4000) -> dict[str, Any]:
    """Held-out R^2 of the IDM per action dimension (None where the target has no variance) and their mean."""
    idx, ts = transition_windows(traj, model.config)
    if len(ts) > max_transitions:
        sel = np.linspace(0, len(ts) - 1, max_transitions).astype(int)
        idx, ts = idx[sel], ts[sel]
    images = torch.from_numpy(np.ascontiguousarray(traj.images))
    preds = []
    for i in range(0, len(ts), 256):
        out = model.forward_windows(images[torch.from_numpy(idx[i : i + 256])].to(model.device))
        preds.append((out * model.action_std + model.action_mean).cpu())
    pred = torch.cat(preds).numpy()
    true = np.asarray(traj.actions, dtype=np.float32)[ts]
    per_dim = []
    for d in range(true.shape[1]):
        var = true[:, d].var()
        per_dim.append(None if var < 1e-8 else float(1 - ((pred[:, d] - true[:, d]) ** 2).mean() / var))
    valid = [r for r in per_dim if r is not None]
    return {"per_dim": per_dim, "mean": float(np.mean(valid)) if valid else None, "transitions": len(ts)}
