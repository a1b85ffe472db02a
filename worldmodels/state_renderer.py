"""A learned renderer anchored on a real frame: draws the scene at given states, without drift.

A state-space world model (:class:`worldmodels.object_dynamics.ObjectDynamics` with ``arm``) predicts
the proprio and the cubes' positions; the policy needs frames. The pixel world models draw each chunk
from their own last frames, so their drawing blurs and drifts, and that drawing costs most of what
imagination loses (``docs/rl_in_imagination.md``, "Where the closed loop loses it").
:class:`StateRenderer` redraws every frame from one real *anchor* frame (an episode's real first frame,
the keyframe imagination starts from) and two states: the anchor's and the one to draw. It cannot drift:
every frame is one step away from a real one.

The states enter as images. Each cube and the tcp is a Gaussian blob at the pixel its xyz projects to
(a quadratic map fitted on the training frames: colour-mask centroids for the cubes, the dark gripper
pixels for the tcp, :mod:`worldmodels.object_projection`), for the anchor state (where to erase) and the
target state (where to draw); the tcp blobs are also given scaled by the finger opening and by the tcp
height. A small UNet reads those, the anchor frame and two coordinate planes, and outputs colours and
a mask: the frame is ``mask * colours + (1 - mask) * anchor``, so the background and the layout (pads,
bowls, the cubes' colours and orientation) come from the real frame.

Usage::

    python -m worldmodels.state_renderer --data RUN/data --out RUN/renderer [--steps N] [--num-threads 1]
        [--device cuda] [--no-video]

fits one on a LeRobotDataset written by ``wmrl collect`` (it needs ``observation.environment_state``),
keeping the fit's run folder in ``OUT/fit`` (config, loss in ``metrics.jsonl``, checkpoints: the same
command run again goes on from the last one), and saves it (``config.json`` + ``model.safetensors``) with
its held-out PSNR, drawn from each held-out episode's first frame, beside the PSNR of that anchor frame
left as it is, and ``held_out.mp4``: held-out episodes, real | drawn.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from wmrl.errors import CheckpointError, ConfigError, DatasetError, WmrlError
from wmrl.io import atomic_save_safetensors, atomic_write_json

CONFIG_NAME, WEIGHTS_NAME = "config.json", "model.safetensors"
TRAINER_STATE_NAME = "trainer.pt"  # a fit's checkpoint: weights, optimizer, schedule, batch RNG, time so far
FORMAT_VERSION = 1
BUILTIN_CUBE_COLORS = ((0.85, 0.1, 0.1), (0.1, 0.75, 0.2), (0.15, 0.3, 0.9))  # red, green, blue


@dataclass
class StateRendererConfig:
    """Args:
    image_size: frame side (pixels); set from the data by :func:`fit_state_renderer`.
    object_colors: RGB (in [0, 1]) of the objects whose xyz start the environment state, in order
        (the built-in cubes); their colour masks fit the projection.
    object_color_cos: chroma cosine threshold of those masks (:func:`worldmodels.modeling_common.object_masks`).
    tcp_dims: proprio dims of the tcp xyz; finger_dim: the proprio dim of the finger opening.
    tcp_dark_max: a pixel with every channel at most this (in [0, 1]) is the gripper's (the tcp projection).
    workspace_m: an object whose x or y lies farther than this from the origin is parked: no blob.
    heatmap_sigma: blob width (pixels).
    channels: the UNet's widths at full, 1/2, 1/4 and 1/8 resolution.
    steps / batch_size / lr: AdamW with cosine decay.
    anchor_first_prob: share of training pairs whose anchor is the episode's first frame (imagination's
        keyframe); the others take any frame of the episode.
    changed_weight: L1 weight of pixels that differ from the anchor (the moved arm and cubes; most of
        the frame is copied).
    test_fraction: share of episodes held out for the reported PSNR.
    seed: seed of the split, the initialisation and the sampling (CPU runs are reproducible).
    """

    image_size: int = 64
    object_colors: list[list[float]] = field(default_factory=lambda: [list(c) for c in BUILTIN_CUBE_COLORS])
    object_color_cos: float = 0.97
    tcp_dims: list[int] = field(default_factory=lambda: [0, 1, 2])
    finger_dim: int = 6
    tcp_dark_max: float = 0.3
    workspace_m: float = 1.0
    heatmap_sigma: float = 1.5
    channels: list[int] = field(default_factory=lambda: [16, 32, 48, 64])
    steps: int = 2500
    batch_size: int = 32
    lr: float = 2e-3
    anchor_first_prob: float = 0.5
    changed_weight: float = 10.0
    test_fraction: float = 0.1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.image_size < 8 or self.image_size % 8:
            raise ConfigError(f"state_renderer image_size={self.image_size} must be a multiple of 8, >= 8")
        if not self.object_colors or any(len(c) != 3 for c in self.object_colors):
            raise ConfigError(f"state_renderer object_colors={self.object_colors!r}; expected RGB triples")
        if len(self.tcp_dims) != 3:
            raise ConfigError(f"state_renderer tcp_dims={self.tcp_dims} must name 3 proprio dims (x, y, z)")
        if len(self.channels) != 4 or min(self.channels) < 8 or any(c % 8 for c in self.channels):
            raise ConfigError(f"state_renderer channels={self.channels}; expected 4 widths, multiples of 8")
        if self.steps < 1 or self.batch_size < 1 or not self.lr > 0 or not self.heatmap_sigma > 0:
            raise ConfigError("state_renderer steps, batch_size, lr and heatmap_sigma must be > 0")
        if not 0.0 <= self.anchor_first_prob <= 1.0 or not 0.0 <= self.test_fraction < 1.0:
            raise ConfigError("state_renderer anchor_first_prob must be in [0, 1] and test_fraction in [0, 1)")

    @property
    def num_objects(self) -> int:
        return len(self.object_colors)

    @property
    def in_channels(self) -> int:
        """Anchor RGB 3, blobs of the objects and the tcp at both states 2 (O + 1), the tcp blob scaled
        by the finger opening and by the height at both states 4, coordinate planes 2."""
        return 3 + 2 * (self.num_objects + 1) + 4 + 2


def _block(i: int, o: int) -> nn.Sequential:
    """Two 3x3 convolutions with GroupNorm and SiLU: (B, i, H, W) -> (B, o, H, W)."""
    return nn.Sequential(
        nn.Conv2d(i, o, 3, padding=1), nn.GroupNorm(8, o), nn.SiLU(),
        nn.Conv2d(o, o, 3, padding=1), nn.GroupNorm(8, o), nn.SiLU(),
    )


class StateRenderer(nn.Module):
    """Draws frames at given states from a real anchor frame (see the module docstring)."""

    def __init__(self, config: StateRendererConfig):
        super().__init__()
        self.config = c = config
        w = c.channels
        self.enc = nn.ModuleList([_block(c.in_channels, w[0]), _block(w[0], w[1]), _block(w[1], w[2]), _block(w[2], w[3])])
        self.dec = nn.ModuleList([_block(w[3] + w[2], w[2]), _block(w[2] + w[1], w[1]), _block(w[1] + w[0], w[0])])
        self.head = nn.Conv2d(w[0], 4, 3, padding=1)  # RGB and the mask's logit
        p = c.num_objects + 1
        self.register_buffer("projection", torch.zeros(p, 10, 2))  # xyz -> (row, col) per object, then the tcp
        self.register_buffer("finger_stats", torch.tensor([0.0, 1.0]))  # mean, std of the finger opening
        self.register_buffer("height_stats", torch.tensor([0.0, 1.0]))  # mean, std of the tcp height
        s = c.image_size
        yy, xx = torch.meshgrid(torch.linspace(-1, 1, s), torch.linspace(-1, 1, s), indexing="ij")
        self.register_buffer("coords", torch.stack([yy, xx])[None], persistent=False)

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    def state_planes(self, proprio: Tensor, objs: Tensor) -> Tensor:
        """proprio (B, P), objs (B, O, 3) metres -> (B, O + 3, H, W): a blob per object (none where it is
        parked) and one at the tcp, then the tcp blob scaled by the normalised finger opening and height."""
        from worldmodels.object_projection import gaussian_heatmaps, project

        c = self.config
        tcp = proprio[:, c.tcp_dims].float()
        xyz = torch.cat([objs.float(), tcp[:, None]], 1)  # (B, O + 1, 3)
        heat = gaussian_heatmaps(project(self.projection, xyz), c.image_size, c.heatmap_sigma)
        in_view = (xyz[..., :2].abs() <= c.workspace_m).all(-1)
        heat = heat * in_view[..., None, None].to(heat.dtype)
        finger = (proprio[:, c.finger_dim].float() - self.finger_stats[0]) / self.finger_stats[1]
        height = (tcp[:, 2] - self.height_stats[0]) / self.height_stats[1]
        tcp_heat = heat[:, -1]
        return torch.cat([heat, (tcp_heat * finger[:, None, None])[:, None], (tcp_heat * height[:, None, None])[:, None]], 1)

    def forward(self, anchor: Tensor, anchor_proprio: Tensor, anchor_objs: Tensor, proprio: Tensor, objs: Tensor) -> Tensor:
        """anchor (B, 3, H, W) in [-1, 1]; anchor_proprio / proprio (B, P); anchor_objs / objs (B, O, 3)
        metres -> the frame at (proprio, objs), (B, 3, H, W) in [-1, 1]."""
        b = anchor.shape[0]
        x = torch.cat([anchor.float(), self.state_planes(anchor_proprio, anchor_objs),
                       self.state_planes(proprio, objs), self.coords.expand(b, -1, -1, -1)], 1)
        skips = []
        for i, blk in enumerate(self.enc):
            x = blk(x if i == 0 else F.avg_pool2d(x, 2))
            skips.append(x)
        for blk, skip in zip(self.dec, reversed(skips[:-1])):
            x = blk(torch.cat([F.interpolate(x, scale_factor=2.0, mode="nearest"), skip], 1))
        out = self.head(x)
        mask = torch.sigmoid(out[:, 3:])
        return mask * torch.tanh(out[:, :3]) + (1.0 - mask) * anchor.float()

    @torch.no_grad()
    def draw(self, anchor_frames: np.ndarray, anchor_proprio: np.ndarray, anchor_objs: np.ndarray,
             proprio: np.ndarray, objs: np.ndarray, batch: int = 256) -> np.ndarray:
        """uint8 anchor frames (N, H, W, 3), their proprio (N, P) and object positions (N, O, 3), and the
        states to draw (N, P), (N, O, 3) -> uint8 frames (N, H, W, 3)."""
        from worldmodels.modeling_common import to_uint8, to_unit

        c = self.config
        n = len(anchor_frames)
        if anchor_frames.shape[1:] != (c.image_size, c.image_size, 3):
            raise WmrlError(f"StateRenderer.draw got frames {anchor_frames.shape}; expected (N, {c.image_size}, "
                            f"{c.image_size}, 3)")
        for name, arr, shape in (("anchor_proprio", anchor_proprio, None), ("proprio", proprio, None),
                                 ("anchor_objs", anchor_objs, (c.num_objects, 3)), ("objs", objs, (c.num_objects, 3))):
            p_min = max(*c.tcp_dims, c.finger_dim) + 1
            if len(arr) != n or (shape is not None and arr.shape[1:] != shape) or (
                shape is None and (arr.ndim != 2 or arr.shape[1] < p_min)
            ):
                want = f"(N={n}, {c.num_objects}, 3)" if shape else f"(N={n}, P >= {p_min})"
                raise WmrlError(f"StateRenderer.draw got {name} {arr.shape}; expected {want}")
        out = []
        dev = self.device
        for i in range(0, n, batch):
            sl = slice(i, i + batch)
            t = [torch.as_tensor(np.asarray(v[sl], np.float32), device=dev)
                 for v in (anchor_proprio, anchor_objs, proprio, objs)]
            img = to_unit(torch.as_tensor(np.ascontiguousarray(anchor_frames[sl]), device=dev))
            out.append(to_uint8(self(img, *t)).cpu().numpy())
        return np.concatenate(out) if out else np.zeros_like(anchor_frames)

    def save_pretrained(self, directory: str | Path, metrics: dict[str, Any] | None = None) -> Path:
        """Write ``config.json`` (with ``metrics``) and ``model.safetensors`` atomically."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        atomic_save_safetensors(d / WEIGHTS_NAME, state, metadata={"format_version": str(FORMAT_VERSION)})
        atomic_write_json(d / CONFIG_NAME, {"format_version": FORMAT_VERSION, "kind": "state_renderer",
                                            "config": dataclasses.asdict(self.config), "metrics": metrics or {}})
        return d

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str | torch.device = "cpu") -> StateRenderer:
        """Load a renderer written by :meth:`save_pretrained`; CheckpointError on a missing or corrupt one."""
        d = Path(directory)
        if not (d / CONFIG_NAME).is_file() or not (d / WEIGHTS_NAME).is_file():
            raise CheckpointError(f"{d} is not a state-renderer checkpoint; expected {CONFIG_NAME} and {WEIGHTS_NAME}")
        try:
            meta = json.loads((d / CONFIG_NAME).read_text())
            kind, version = meta.get("kind"), meta.get("format_version")
        except (json.JSONDecodeError, AttributeError) as e:
            raise CheckpointError(f"{d / CONFIG_NAME} is corrupt ({type(e).__name__}: {e})") from None
        if kind != "state_renderer" or version != FORMAT_VERSION:
            raise CheckpointError(f"{d / CONFIG_NAME} has kind={kind!r}, format_version={version!r}; "
                                  f"expected 'state_renderer', {FORMAT_VERSION} (a state renderer's)")
        try:
            config = StateRendererConfig(**meta["config"])
        except (KeyError, TypeError, ConfigError) as e:
            raise CheckpointError(f"{d / CONFIG_NAME} is corrupt ({type(e).__name__}: {e})") from None
        model = cls(config)
        try:
            from safetensors.torch import load_file

            model.load_state_dict(load_file(str(d / WEIGHTS_NAME)))
        except Exception as e:  # truncated files, shape mismatches
            raise CheckpointError(f"{d / WEIGHTS_NAME} is corrupt or does not match its config ({type(e).__name__}: {e})") from None
        return model.to(device).eval()


# ---------------------------------------------------------------------------------------------- data
def scene_arrays(traj: Any, config: StateRendererConfig) -> tuple[np.ndarray, np.ndarray]:
    """The proprio (N, P) float32 and object positions (N, O, 3) float32 of a dataset's frames; a
    DatasetError where it lacks what the renderer reads."""
    env = getattr(traj, "env_states", None)
    o3 = 3 * config.num_objects
    if env is None:
        raise DatasetError("the state renderer needs the dataset's observation.environment_state; it has none")
    if env.shape[1] < o3:
        raise DatasetError(f"dataset environment states have {env.shape[1]} dims; {config.num_objects} objects need >= {o3}")
    p_dim = traj.states.shape[1]
    if max(*config.tcp_dims, config.finger_dim) >= p_dim:
        raise DatasetError(f"state_renderer tcp_dims={config.tcp_dims} / finger_dim={config.finger_dim} out of range "
                           f"for {p_dim} proprio dims")
    if traj.images.shape[1:] != (config.image_size, config.image_size, 3):
        raise DatasetError(f"dataset frames are {traj.images.shape[1:]}; the renderer draws "
                           f"({config.image_size}, {config.image_size}, 3)")
    objs = np.asarray(env[:, :o3], np.float32).reshape(-1, config.num_objects, 3)
    return np.asarray(traj.states, np.float32), objs


def fit_scene_projection(images: np.ndarray, proprio: np.ndarray, objs: np.ndarray, config: StateRendererConfig,
                         max_frames: int = 20000) -> np.ndarray:
    """The quadratic xyz -> pixel map of each object and the tcp (O + 1, 10, 2), fitted on up to
    ``max_frames`` frames uint8 (N, H, W, 3) with their proprio (N, P) and object positions (N, O, 3)."""
    from worldmodels.object_projection import fit_scene_projection as fit

    c = config
    rows = np.sort(np.random.default_rng(c.seed).permutation(len(images))[:max_frames])
    xyz = np.concatenate([objs[rows], proprio[rows][:, None, c.tcp_dims]], 1).astype(np.float64)
    names = tuple(f"object {j}" for j in range(c.num_objects)) + ("the gripper (dark pixels)",)
    try:
        return fit(images, rows, xyz, c.object_colors, c.object_color_cos, c.tcp_dark_max, c.workspace_m, names)
    except np.linalg.LinAlgError as e:
        raise DatasetError(f"the state renderer's projection fit failed ({e})") from None


def _psnr(pred: Tensor, target: Tensor) -> Tensor:
    """Per-frame PSNR (dB) of frames in [-1, 1]: (B, 3, H, W) -> (B,)."""
    mse = ((pred - target) * 0.5).pow(2).flatten(1).mean(1).clamp_min(1e-10)
    return -10.0 * torch.log10(mse)


@torch.no_grad()
def evaluate_state_renderer(model: StateRenderer, traj: Any, episodes: np.ndarray, max_frames: int = 4096) -> dict[str, Any]:
    """Held-out PSNR (dB) of frames drawn from each episode's first frame at the real states, against the
    real frames, overall and by steps from the anchor; ``anchor_psnr``: the first frame left as it is."""
    from worldmodels.modeling_common import to_unit

    proprio, objs = scene_arrays(traj, model.config)
    bounds = np.asarray(traj.episode_bounds, np.int64)[episodes]
    tgt = np.concatenate([np.arange(lo, hi) for lo, hi in bounds])
    anc = np.concatenate([np.full(hi - lo, lo) for lo, hi in bounds])
    if len(tgt) > max_frames:
        keep = np.sort(np.random.default_rng(0).choice(len(tgt), max_frames, replace=False))
        tgt, anc = tgt[keep], anc[keep]
    psnr, base = [], []
    dev = model.device
    for i in range(0, len(tgt), 256):
        t, a = tgt[i : i + 256], anc[i : i + 256]
        img_a = to_unit(torch.from_numpy(traj.images[a]).to(dev))
        img_t = to_unit(torch.from_numpy(traj.images[t]).to(dev))
        pred = model(img_a, *(torch.from_numpy(v).to(dev) for v in (proprio[a], objs[a], proprio[t], objs[t])))
        pred = pred.add(1).mul(127.5).round().div(127.5).sub(1)  # what a consumer of uint8 frames sees
        psnr.append(_psnr(pred, img_t).cpu())
        base.append(_psnr(img_a, img_t).cpu())
    psnr_t, base_t = torch.cat(psnr).numpy(), torch.cat(base).numpy()
    step = tgt - anc
    by_step = {}
    for lo, hi in ((1, 8), (8, 24), (24, 10**9)):
        m = (step >= lo) & (step < hi)
        if m.any():
            by_step[f"{lo}-{hi - 1 if hi < 10**9 else 'end'}"] = float(psnr_t[m].mean())
    moved = step > 0
    return {"test_frames": int(moved.sum()), "psnr_db": float(psnr_t[moved].mean()),
            "anchor_psnr_db": float(base_t[moved].mean()), "psnr_db_by_steps_from_anchor": by_step}


@torch.no_grad()
def held_out_video(model: StateRenderer, traj: Any, episodes: list[int] | np.ndarray, path: str | Path,
                   max_episodes: int = 6) -> Path:
    """An mp4 of up to ``max_episodes`` episodes, one tile each: the real frames | the renderer's drawing
    of the real states from the episode's first frame."""
    from wmrl.video import grid, side_by_side, write_video

    proprio, objs = scene_arrays(traj, model.config)
    bounds = np.asarray(traj.episode_bounds, np.int64)[np.asarray(episodes, np.int64)[:max_episodes]]
    tiles = []
    for lo, hi in bounds:
        a = np.full(hi - lo, lo)
        drawn = model.draw(traj.images[a], proprio[a], objs[a], proprio[lo:hi], objs[lo:hi])
        tiles.append(side_by_side(traj.images[lo:hi], drawn))
    return write_video(path, grid(tiles, ncols=2), fps=10, scale=3)


def _architecture(c: StateRendererConfig) -> dict[str, Any]:
    """What a renderer's weights and drawing depend on (a fine-tune keeps it): the config less the fit's knobs."""
    fit_knobs = {"steps", "batch_size", "lr", "anchor_first_prob", "changed_weight", "test_fraction", "seed"}
    return {k: v for k, v in dataclasses.asdict(c).items() if k not in fit_knobs}


def _weights_digest(model: StateRenderer) -> str:
    """A short hash of a renderer's weights and buffers (which renderer a fine-tune's checkpoint started from)."""
    import hashlib

    h = hashlib.sha256()
    for k, v in model.state_dict().items():
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _episode_probabilities(weights: np.ndarray | None, n_ep: int, train_eps: np.ndarray) -> np.ndarray | None:
    """The draw probability of each training episode (len(train_eps),) from per-episode ``weights`` (n_ep,);
    None for None (uniform draws, as a fit without weights always made)."""
    if weights is None:
        return None
    w = np.asarray(weights, np.float64)
    if w.shape != (n_ep,) or not np.isfinite(w).all() or (w < 0).any():
        raise ConfigError(f"state_renderer episode_weights of shape {w.shape}: expected ({n_ep},) finite, >= 0")
    w = w[train_eps]
    if not w.sum() > 0:
        raise ConfigError("state_renderer episode_weights: every training episode has weight 0")
    return w / w.sum()


def fit_state_renderer(traj: Any, config: StateRendererConfig | None = None, progress: bool = True,
                       device: str | torch.device | None = None, run_dir: str | Path | None = None,
                       checkpoint_every: int = 250, init: StateRenderer | None = None,
                       episode_weights: np.ndarray | None = None) -> tuple[StateRenderer, dict[str, Any]]:
    """Fit a :class:`StateRenderer` on ``traj`` (``wmrl.data.Trajectories`` with ``env_states``) on ``device``
    (None: the CPU; the batches are drawn on the CPU either way, so a seed draws the same ones). Returns
    (the model in eval mode, on ``device``; metrics: held-out PSNR and the anchor's, wall time). Raises
    NonFiniteError when the loss turns NaN/Inf. ``run_dir``: a run folder (:class:`wmrl.runs.RunDir`: the
    config, the loss in ``metrics.jsonl`` every 100 steps, a checkpoint every ``checkpoint_every`` steps);
    a fit started there before goes on from its last checkpoint, and gives the weights an uninterrupted fit
    gives on the CPU. CheckpointError when that checkpoint was written for another config (or init).
    ``init``: a fitted renderer to fine-tune (its weights, projection and normalisation kept; ``config``'s
    ``steps`` and ``lr`` are the fine-tune's, its architecture must be ``init``'s); None: a fit from scratch.
    ``episode_weights`` (E,) >= 0: how often each of ``traj``'s episodes is drawn for a batch, relative to the
    others (None: all alike), e.g. the policy's own rollouts weighted up beside the demos."""
    from tqdm.auto import tqdm

    from wmrl.devices import resolve_device
    from wmrl.runs import RunDir, check_finite
    from worldmodels.modeling_common import to_unit

    dev = resolve_device(device)
    c = config or (init.config if init is not None else StateRendererConfig(image_size=int(traj.images.shape[1])))
    if init is not None and _architecture(c) != _architecture(init.config):
        raise ConfigError(f"state_renderer fine-tune config {_architecture(c)} differs from the fitted renderer's "
                          f"{_architecture(init.config)}; only steps, batch_size, lr and the sampling may change")
    t0 = time.time()
    proprio, objs = scene_arrays(traj, c)
    rng = np.random.default_rng(c.seed)
    bounds = np.asarray(traj.episode_bounds, np.int64)
    n_ep = len(bounds)
    if n_ep < 2:
        raise DatasetError(f"the state renderer needs at least 2 episodes (one held out); the dataset has {n_ep}")
    perm = rng.permutation(n_ep)
    n_test = max(1, int(round(c.test_fraction * n_ep))) if c.test_fraction > 0 else 0
    test_eps, train_eps = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    p_train = _episode_probabilities(episode_weights, n_ep, train_eps)
    torch.manual_seed(c.seed)
    model = StateRenderer(c)
    tr_rows = np.concatenate([np.arange(lo, hi) for lo, hi in bounds[train_eps]])
    if init is not None:  # the fitted weights, projection and normalisation as they are
        model.load_state_dict(init.state_dict())
    else:
        coef = fit_scene_projection(traj.images[tr_rows], proprio[tr_rows], objs[tr_rows], c)
        model.projection.copy_(torch.as_tensor(coef, dtype=torch.float32))
        f = proprio[tr_rows, c.finger_dim]
        z = proprio[tr_rows, c.tcp_dims[2]]
        model.finger_stats.copy_(torch.tensor([f.mean(), max(f.std(), 1e-3)]))
        model.height_stats.copy_(torch.tensor([z.mean(), max(z.std(), 1e-3)]))
    model.to(dev)
    init_digest = None if init is None else _weights_digest(init)
    ep_lo, ep_len = bounds[train_eps, 0], bounds[train_eps, 1] - bounds[train_eps, 0]
    opt = torch.optim.AdamW(model.parameters(), lr=c.lr, weight_decay=1e-4)
    warm = max(1, c.steps // 20)  # linear warm-up, then cosine decay
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1.0 + math.cos(math.pi * s / c.steps))
    )
    if checkpoint_every < 1:
        raise ConfigError(f"state_renderer checkpoint_every={checkpoint_every} must be >= 1")
    run = None if run_dir is None else RunDir(run_dir, {"state_renderer": dataclasses.asdict(c)})
    start, elapsed_before, last_loss = 0, 0.0, float("nan")
    if run is not None and (ckpt := run.latest_checkpoint()) is not None:
        try:
            state = torch.load(ckpt / TRAINER_STATE_NAME, weights_only=False, map_location="cpu")
        except Exception as e:  # a missing, cut or foreign file: one line, the run folder left as it is
            raise CheckpointError(f"{ckpt / TRAINER_STATE_NAME} is missing or corrupt ({type(e).__name__}); "
                                  f"remove {ckpt} to go on from the checkpoint before it") from None
        if not isinstance(state, dict) or state.get("config") != dataclasses.asdict(c) or (
            state.get("init") != init_digest
        ):
            raise CheckpointError(f"{ckpt} was written for another state-renderer config or starting renderer; fit "
                                  f"this one in a new folder or remove {run.checkpoints}")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        rng.bit_generator.state = state["rng"]
        start, elapsed_before, last_loss = RunDir.step_of(ckpt), float(state["elapsed"]), float(state["loss"])

    def save(step: int) -> None:
        state = {"config": dataclasses.asdict(c), "init": init_digest, "model": model.state_dict(),
                 "opt": opt.state_dict(), "sched": sched.state_dict(), "rng": rng.bit_generator.state, "loss": loss_v,
                 "elapsed": elapsed_before + time.time() - t0}
        run.save_checkpoint(step, lambda tmp: torch.save(state, tmp / TRAINER_STATE_NAME))

    model.train()
    bar = tqdm(range(start, c.steps), initial=start, total=c.steps, desc="state renderer", disable=not progress)
    loss_v = last_loss  # the loss last logged (a resumed fit's: its checkpoint's)
    for step in bar:
        e = rng.integers(len(train_eps), size=c.batch_size) if p_train is None else rng.choice(
            len(train_eps), size=c.batch_size, p=p_train)
        tgt = ep_lo[e] + rng.integers(ep_len[e])
        anc = np.where(rng.random(c.batch_size) < c.anchor_first_prob, ep_lo[e], ep_lo[e] + rng.integers(ep_len[e]))
        img_a = to_unit(torch.from_numpy(traj.images[anc]).to(dev))
        img_t = to_unit(torch.from_numpy(traj.images[tgt]).to(dev))
        pred = model(img_a, *(torch.from_numpy(v).to(dev) for v in (proprio[anc], objs[anc], proprio[tgt], objs[tgt])))
        changed = ((img_t - img_a).abs().amax(1, keepdim=True) > 0.1).float()
        changed = F.max_pool2d(changed, 3, stride=1, padding=1)  # and the pixels around them
        loss = ((pred - img_t).abs() * (1.0 + (c.changed_weight - 1.0) * changed)).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == c.steps - 1:
            loss_v = float(loss.detach())
            if run is not None:
                run.log(step, {"loss": loss_v, "lr": sched.get_last_lr()[0]})
            check_finite(f"state-renderer loss at step {step}", loss_v)
            bar.set_postfix(l1=f"{loss_v:.4f}")
        if run is not None and ((step + 1) % checkpoint_every == 0 or step == c.steps - 1):
            save(step + 1)
    model.eval()
    metrics: dict[str, Any] = {"train_frames": int(len(tr_rows)), "train_episodes": int(len(train_eps)),
                               "test_episodes": int(len(test_eps)), "test_episode_indices": test_eps.tolist(),
                               "final_loss": loss_v,
                               **({"fine_tuned": True} if init is not None else {}),
                               "parameters": int(sum(p.numel() for p in model.parameters()))}
    if len(test_eps):
        metrics.update(evaluate_state_renderer(model, traj, test_eps))
    metrics["wall_time_s"] = elapsed_before + time.time() - t0
    if not math.isfinite(metrics.get("psnr_db", 0.0)):
        raise WmrlError(f"state renderer: held-out PSNR is {metrics['psnr_db']}")
    return model, metrics


def fine_tune_state_renderer(model: StateRenderer, demos: Any, rollouts: Any, steps: int, lr: float,
                             rollout_share: float = 0.5, batch_size: int | None = None,
                             skip_demo_episodes: list[int] | np.ndarray = (), progress: bool = False,
                             run_dir: str | Path | None = None) -> tuple[StateRenderer, dict[str, Any]]:
    """``model`` fine-tuned (:func:`fit_state_renderer` with ``init``) for ``steps`` steps from learning rate ``lr``
    (warm-up, cosine to 0) on the ``demos`` (less ``skip_demo_episodes``, e.g. those its fit held out) plus the
    policy's ``rollouts`` (``wmrl.data.Trajectories`` with frames and environment states), the rollouts drawn
    ``rollout_share`` of the time, each by its ``episode_weights`` (e.g. failures weighted up). Returns (the
    fine-tuned model, the fit's metrics: no held-out score, every episode trains)."""
    from wmrl.data import Trajectories

    if not 0.0 < rollout_share < 1.0:
        raise ConfigError(f"state_renderer rollout_share={rollout_share}: expected a share in (0, 1)")
    skip = np.asarray(skip_demo_episodes, np.int64)
    train_demos = demos.select_episodes(np.setdiff1d(np.arange(demos.num_episodes), skip)) if len(skip) else demos
    n_d = train_demos.num_episodes
    w_r = np.asarray(rollouts.episode_weights, np.float64)
    if n_d < 1 or rollouts.num_episodes < 1 or not w_r.sum() > 0:
        raise DatasetError(f"a renderer fine-tune needs demos and rollouts; got {n_d} demo and "
                           f"{rollouts.num_episodes} rollout episodes (rollout weights sum {w_r.sum():g})")
    weights = np.concatenate([np.full(n_d, (1.0 - rollout_share) / n_d), rollout_share * w_r / w_r.sum()])
    config = dataclasses.replace(model.config, steps=int(steps), lr=float(lr), test_fraction=0.0,
                                 batch_size=int(batch_size or model.config.batch_size))
    return fit_state_renderer(Trajectories.concat([train_demos, rollouts]), config, progress=progress,
                              device=model.device, run_dir=run_dir, init=model, episode_weights=weights)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m worldmodels.state_renderer", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="LeRobotDataset folder (e.g. RUN/data)")
    p.add_argument("--out", required=True, help="folder to write the renderer to (e.g. RUN/renderer)")
    p.add_argument("--steps", type=int, default=StateRendererConfig.steps)
    p.add_argument("--batch-size", type=int, default=StateRendererConfig.batch_size)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="torch device to fit on: cpu, cuda, cuda:N or auto (default cpu)")
    p.add_argument("--no-video", action="store_true", help="skip held_out.mp4 (real | drawn held-out episodes)")
    p.add_argument("--num-threads", type=int, default=None)
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    import sys

    from wmrl.data import load_trajectories
    from wmrl.devices import resolve_device

    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    try:
        resolve_device(args.device)  # a bad name fails before the data is read
        traj = load_trajectories(args.data)
        config = StateRendererConfig(image_size=int(traj.images.shape[1]), steps=args.steps,
                                     batch_size=args.batch_size, seed=args.seed)
        model, metrics = fit_state_renderer(traj, config, progress=not args.no_progress, device=args.device,
                                            run_dir=Path(args.out) / "fit")
    except WmrlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    metrics["data"] = str(args.data)
    metrics["device"] = str(model.device)
    model.save_pretrained(args.out, metrics)
    if metrics["test_episode_indices"] and not args.no_video:
        held_out_video(model, traj, metrics["test_episode_indices"], Path(args.out) / "held_out.mp4")
    print(json.dumps(metrics, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
