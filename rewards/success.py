"""Success reward model: a per-frame success classifier conditioned on the instruction.

Like RLinf's ResNet reward model, but FiLM-conditioned on the frozen MiniLM embedding of the
instruction, so one model serves every task of a suite. ``predict(frames (B,H,W,3) uint8,
instructions list[str]) -> prob float32 (B,)``. :func:`train_success_model` trains it on real
episodes; :meth:`SuccessRewardModel.finetune` continues on new (e.g. imagined failure) episodes
with per-episode weights.

Frame labels (:func:`frame_success_labels`): frame ``t`` of an episode shows the scene after
action ``t-1``, so its label is ``successes[t-1]`` (``next.success`` of the previous step); the
first frame of an episode is labelled by nothing before it (negative). The frame table never
holds an episode's terminal observation (the one after its last action, which shows the success
of an env that terminates on success). Datasets recorded by ``wmrl collect`` keep it in a sidecar
(``Trajectories.terminal``): :func:`success_frames` then adds each terminal frame with its true
label (success of the last step) and labels the stored frames truthfully. Without the sidecar
(e.g. community datasets), the last stored frame of a successful episode stands in for the
missing success frame (``last_frame_positive``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from policies.text import InstructionEncoder, check_instructions
from policies.vla.modeling_vla import ConvEncoder
from rewards._common import check_frames, load_model, save_model
from wmrl.errors import ConfigError, WmrlError


@dataclass
class SuccessModelConfig:
    """Args:
    image_size: frame side in pixels.
    channels: conv channels per stage.
    hidden_dim: MLP width.
    text_dim: instruction embedding size (384).
    """

    image_size: int = 64
    channels: tuple[int, ...] = (32, 64, 64, 64)
    hidden_dim: int = 256
    text_dim: int = 384

    def __post_init__(self) -> None:
        self.channels = tuple(int(c) for c in self.channels)
        if not 16 <= self.image_size <= 256 or self.image_size % 8:
            raise ConfigError(f"{self.image_size=} must be a multiple of 8 in [16, 256]")
        if len(self.channels) < 3:
            raise ConfigError(f"{self.channels=} needs at least 3 stages")
        if self.hidden_dim < 8:
            raise ConfigError(f"{self.hidden_dim=} must be >= 8")


class SuccessRewardModel(nn.Module):
    """Instruction-conditioned per-frame success classifier (logit output)."""

    config_class = SuccessModelConfig
    model_type = "success"

    def __init__(self, config: SuccessModelConfig):
        super().__init__()
        self.config = config
        c = config
        self.encoder = ConvEncoder(c.image_size, c.channels, c.hidden_dim)
        self.text_proj = nn.Sequential(nn.Linear(c.text_dim, 128), nn.ReLU())
        self.film = nn.Linear(128, self.encoder.film_dim)
        nn.init.zeros_(self.film.weight)
        nn.init.zeros_(self.film.bias)
        self.head = nn.Sequential(nn.Linear(c.hidden_dim + 128, c.hidden_dim), nn.ReLU(), nn.Linear(c.hidden_dim, 1))
        self.text_encoder = InstructionEncoder()

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def logits(self, frames: Tensor, text: Tensor) -> Tensor:
        """frames uint8 (B,H,W,3), text (B,384) -> success logits (B,)."""
        x = frames.permute(0, 3, 1, 2).float().div(127.5).sub(1.0)
        t = self.text_proj(text)
        feat = self.encoder(x, self.film(t))
        return self.head(torch.cat([feat, t], dim=1)).squeeze(-1)

    @torch.no_grad()
    def predict(self, frames: Any, instructions: list[str], batch_size: int = 256) -> Tensor:
        """frames uint8 (B,H,W,3), B instructions -> success probability float32 (B,)."""
        x = check_frames(frames, self.config.image_size, 4).to(self.device)
        instructions = check_instructions(instructions, x.shape[0])
        text = self.text_encoder.encode(instructions).to(self.device)
        out = [torch.sigmoid(self.logits(x[i : i + batch_size], text[i : i + batch_size])) for i in range(0, len(x), batch_size)]
        return torch.cat(out) if out else torch.zeros(0)

    def finetune(self, trajectories: Any, steps: int = 500, weights: np.ndarray | None = None, **kwargs: Any) -> SuccessRewardModel:
        """Continue training on new episodes (e.g. imagined failures); ``weights`` (E,) per episode."""
        return train_success_model(trajectories, steps=steps, model=self, weights=weights, **kwargs)

    def save_pretrained(self, path: str | os.PathLike):
        return save_model(self, self.config, self.model_type, path)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, map_location: str = "cpu") -> SuccessRewardModel:
        return load_model(cls, cls.model_type, path, map_location)


def frame_success_labels(traj: Any, last_frame_positive: bool = True) -> np.ndarray:
    """Per-frame success labels bool (N,) (see module docstring)."""
    succ = np.asarray(traj.successes, dtype=bool)
    labels = np.zeros(len(succ), dtype=bool)
    for s, t in np.asarray(traj.episode_bounds):
        labels[s + 1 : t] = succ[s : t - 1]
        if last_frame_positive and succ[t - 1]:
            labels[t - 1] = True
    return labels


@dataclass
class SuccessFrames:
    """The labelled frame pool of a dataset: ``images`` uint8 (M,H,W,3), ``labels`` bool (M,),
    ``instructions`` (M strings), ``episode`` int64 (M,) episode position, ``terminal`` bool (M,)
    (the frame is an episode's terminal observation from the sidecar)."""

    images: np.ndarray
    labels: np.ndarray
    instructions: list[str]
    episode: np.ndarray
    terminal: np.ndarray


def success_frames(traj: Any, use_terminal: bool = True) -> SuccessFrames:
    """Stored frames plus (when ``traj.terminal`` exists and ``use_terminal``) each episode's
    terminal frame, with success labels (see module docstring)."""
    bounds = np.asarray(traj.episode_bounds)
    ep = np.asarray(traj.episode_index, dtype=np.int64)
    term = getattr(traj, "terminal", None) if use_terminal else None
    labels = frame_success_labels(traj, last_frame_positive=term is None)
    if term is None:
        return SuccessFrames(np.asarray(traj.images), labels, list(traj.instructions), ep, np.zeros(len(labels), bool))
    first = bounds[:, 0]
    return SuccessFrames(
        images=np.concatenate([np.asarray(traj.images), term.images]),
        labels=np.concatenate([labels, np.asarray(term.successes, bool)]),
        instructions=list(traj.instructions) + [traj.instructions[s] for s in first],
        episode=np.concatenate([ep, np.arange(len(bounds), dtype=np.int64)]),
        terminal=np.concatenate([np.zeros(len(labels), bool), np.ones(len(bounds), bool)]),
    )


def _class_probs(w: np.ndarray, is_extra: np.ndarray, extra_share: float) -> np.ndarray:
    """Sampling probabilities (M,) of one class's frames: weights ``w`` (M,) normalised within the
    base pool and within the extra pool, the extra pool getting ``extra_share`` of the mass when
    both pools have frames of the class."""
    p = np.zeros(len(w))
    parts = [(~is_extra, 1.0 - extra_share), (is_extra, extra_share)]
    if not is_extra.any() or is_extra.all():
        parts = [(np.ones(len(w), bool), 1.0)]
    for mask, share in parts:
        p[mask] = share * w[mask] / w[mask].sum()
    return p


def train_success_model(
    traj: Any,
    config: SuccessModelConfig | None = None,
    steps: int = 1500,
    batch_size: int = 64,
    lr: float = 1e-3,
    seed: int = 0,
    model: SuccessRewardModel | None = None,
    weights: np.ndarray | None = None,
    extra: SuccessFrames | None = None,
    extra_share: float = 0.5,
    mismatch_frac: float = 0.25,
    augment_shift: int = 2,
    log: Any = None,
    progress: bool = False,
    device: str | torch.device | None = None,
) -> SuccessRewardModel:
    """Train (or continue) the success model with class-balanced sampling.

    Args:
        traj: :class:`wmrl.data.Trajectories` with ``successes`` and per-frame ``instructions``;
            its terminal observations (``traj.terminal``) join the pool (:func:`success_frames`).
        weights: optional per-episode sampling weights (E,).
        extra: more labelled frames (e.g. imagined frames labelled by paired real outcomes,
            :func:`imagination.calibration.paired_success_frames`); its ``episode`` ids are its own.
        extra_share: the fraction of each class's draws taken from ``extra`` (where ``extra`` has
            frames of that class).
        mismatch_frac: fraction of positives re-paired with another task's instruction and
            labelled negative (teaches the model to read the instruction).
        device: where the model trains (``wmrl.devices`` names); None: where ``model`` is (a new
            model: the CPU). The frames stay on the CPU and each batch moves there.
    """
    from tqdm import tqdm

    from policies.train import random_shift
    from wmrl.devices import resolve_device
    from wmrl.runs import check_finite

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    if model is None:
        model = SuccessRewardModel(config or SuccessModelConfig(image_size=int(traj.images.shape[1])))
    if device is not None:
        model.to(resolve_device(device))
    dev = model.device
    pool = success_frames(traj)
    p_w = np.ones(len(pool.labels))
    if weights is not None:
        w = np.asarray(weights, dtype=float)
        if w.shape != (int(traj.num_episodes),):
            raise WmrlError(f"weights have shape {w.shape}; expected ({traj.num_episodes},) (one per episode)")
        p_w = w[pool.episode]
    is_extra = np.zeros(len(pool.labels), bool)
    if extra is not None and len(extra.labels):
        if not 0.0 < extra_share < 1.0:
            raise WmrlError(f"extra_share={extra_share} must be in (0, 1)")
        if extra.images.shape[1:] != pool.images.shape[1:]:
            raise WmrlError(f"extra frames have shape {extra.images.shape[1:]}; expected {pool.images.shape[1:]}")
        pool = SuccessFrames(
            images=np.concatenate([pool.images, extra.images]),
            labels=np.concatenate([pool.labels, np.asarray(extra.labels, bool)]),
            instructions=pool.instructions + list(extra.instructions),
            episode=np.concatenate([pool.episode, np.asarray(extra.episode) + int(pool.episode.max()) + 1]),
            terminal=np.concatenate([pool.terminal, np.asarray(extra.terminal, bool)]),
        )
        is_extra = np.concatenate([is_extra, np.ones(len(extra.labels), bool)])
        p_w = np.concatenate([p_w, np.ones(len(extra.labels))])
    labels = pool.labels
    pos, neg = np.flatnonzero(labels), np.flatnonzero(~labels)
    if len(pos) == 0 or len(neg) == 0:
        raise WmrlError(f"the success model needs positive and negative frames; got {len(pos)} and {len(neg)}")
    uniq = sorted(set(pool.instructions))
    text = model.text_encoder.encode(uniq).to(dev)
    pos_of = {s: i for i, s in enumerate(uniq)}
    tidx = np.array([pos_of[s] for s in pool.instructions])
    images = torch.from_numpy(np.ascontiguousarray(pool.images))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps, eta_min=lr * 0.05)
    pp, pn = _class_probs(p_w[pos], is_extra[pos], extra_share), _class_probs(p_w[neg], is_extra[neg], extra_share)
    model.train()
    half = batch_size // 2
    for step in tqdm(range(steps), desc="train-success", disable=not progress):
        ids = np.concatenate([rng.choice(pos, half, p=pp), rng.choice(neg, batch_size - half, p=pn)])
        y = np.concatenate([np.ones(half), np.zeros(batch_size - half)]).astype(np.float32)
        ti = tidx[ids].copy()
        if len(uniq) > 1 and mismatch_frac > 0:
            flip = np.flatnonzero((y == 1) & (rng.random(batch_size) < mismatch_frac))
            for i in flip:
                other = rng.integers(len(uniq) - 1)
                ti[i] = other + (other >= ti[i])
                y[i] = 0.0
        x = random_shift(images, augment_shift, gen, torch.from_numpy(ids))
        logits = model.logits(x.to(dev), text[torch.from_numpy(ti).to(dev)])
        loss = F.binary_cross_entropy_with_logits(logits, torch.from_numpy(y).to(dev))
        check_finite("success model loss", loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if log is not None and ((step + 1) % 100 == 0 or step + 1 == steps):
            log(step + 1, {"success_loss": loss.item()})
    model.eval()
    return model
