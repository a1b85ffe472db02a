"""Backbone, context, outputs, input checks, save/load and training loop shared by all families.

Tensor conventions inside the models: frames are float in [-1, 1], channels first,
``(B, T, 3, H, W)``; the public API takes and returns uint8 ``(B, T, H, W, 3)``.
States and actions are normalised with the statistics stored in the model (buffers saved in
``model.safetensors``, so normalisation travels with the checkpoint).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from wmrl.devices import adaptive_avg_pool2d
from wmrl.errors import CheckpointError, DatasetError, WmrlError
from wmrl.io import atomic_save_safetensors, atomic_write_json
from worldmodels.configuration_common import WorldModelConfig

FORMAT_VERSION = 1
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
OBJECT_DYNAMICS_DIR = "object_dynamics"  # an attached ObjectDynamics, saved beside the weights


class WorldModelInputError(WmrlError, ValueError):
    """A context, state, action or instruction tensor of the wrong shape, dtype or value."""


# ---------------------------------------------------------------------------------------------- context
@dataclass
class WMContext:
    """Opaque batched rollout state of a world model (on the model's device).

    Attributes:
        frames: float32 (B, T, 3, H, W) in [-1, 1], the last T frames.
        states: float32 (B, T, D) normalised proprio states (D may be 0).
        instruction: float32 (B, E) instruction embeddings, or None.
    """

    frames: Tensor
    states: Tensor
    instruction: Tensor | None = None

    @property
    def batch_size(self) -> int:
        return int(self.frames.shape[0])

    def index_select(self, idx: Tensor | np.ndarray | list[int]) -> WMContext:
        """The sub-batch ``idx`` (int indices (M,) or bool mask (B,))."""
        idx_t = torch.as_tensor(np.asarray(idx), device=self.frames.device)
        if idx_t.dtype == torch.bool:
            idx_t = idx_t.nonzero().flatten()
        return WMContext(
            self.frames.index_select(0, idx_t),
            self.states.index_select(0, idx_t),
            None if self.instruction is None else self.instruction.index_select(0, idx_t),
        )

    def assign(self, mask: Tensor | np.ndarray, other: WMContext) -> WMContext:
        """A new context whose rows where ``mask`` (bool (B,)) is true come from ``other``.

        ``other`` is either a full batch (B rows) or holds exactly ``mask.sum()`` rows."""
        m = torch.as_tensor(np.asarray(mask), device=self.frames.device)
        if m.dtype != torch.bool or m.shape != (self.batch_size,):
            raise WorldModelInputError(
                f"assign mask has shape {tuple(m.shape)} and dtype {m.dtype}; "
                f"expected bool ({self.batch_size},)"
            )
        n = int(m.sum())
        if other.batch_size not in (self.batch_size, n):
            raise WorldModelInputError(
                f"assign: other context has {other.batch_size} rows; expected {self.batch_size} or {n}"
            )
        if other.frames.shape[1:] != self.frames.shape[1:] or other.states.shape[1:] != self.states.shape[1:]:
            raise WorldModelInputError(
                f"assign: other context frames {tuple(other.frames.shape)} "
                f"do not match {tuple(self.frames.shape)}"
            )
        full = other.batch_size == self.batch_size

        def mix(a: Tensor | None, b: Tensor | None) -> Tensor | None:
            if a is None or b is None:
                return a if b is None else b
            out = a.clone()
            out[m] = b[m] if full else b.to(a.dtype)
            return out

        return WMContext(
            mix(self.frames, other.frames),
            mix(self.states, other.states),
            mix(self.instruction, other.instruction),
        )


@dataclass
class WMStepOutput:
    """Output of :meth:`WorldModel.step` / :meth:`WorldModel.rollout`.

    Attributes:
        frames: uint8 (B, K, H, W, 3) imagined frames (after each action).
        states: float32 (B, K, D) predicted proprio states.
        rewards: float32 (B, K) predicted per-step rewards.
        success_prob: float32 (B, K) predicted probability that the task is solved after each step.
        context: the context to continue from (None from ``rollout``).
    """

    frames: Tensor
    states: Tensor
    rewards: Tensor
    success_prob: Tensor
    context: WMContext | None


@functools.cache
def native_bf16(device_type: str) -> bool:
    """Whether ``device_type`` computes bfloat16 natively: a CUDA GPU that supports it, or a CPU
    with AVX512-BF16 or AMX. Elsewhere bf16 is emulated: on an AVX2-only EPYC a 1024x1024 bf16
    matmul ran at 0.8 GFLOP/s against 54 in fp32, and world-model training 20x slower."""
    if device_type == "cuda":
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if device_type == "cpu":
        probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
        return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)
    return False


# ---------------------------------------------------------------------------------------------- backbone
def fourier_features(x: Tensor, dim: int) -> Tensor:
    """Sinusoidal features of a scalar per sample. x: (B,) -> (B, dim)."""
    half = dim // 2
    freqs = torch.exp(torch.linspace(0.0, math.log(1000.0), half, device=x.device))
    ang = x.float()[:, None] * freqs[None]
    return torch.cat([ang.sin(), ang.cos()], dim=-1)


class ConditionedUNet(nn.Module):
    """Frame-stacked UNet (diffusers ``UNet2DModel``) conditioned through its class embedding.

    The conditioning vector (actions, states, noise levels, instruction) goes through an MLP to
    the UNet's time-embedding size and is *added* to the (constant) timestep embedding, which
    feeds every ResNet block's scale/shift (``class_embed_type="identity"``, DIAMOND-style).
    A forward hook keeps the mid-block features for the reward / success / state head.
    With ``patch_size`` p > 1 the frames are folded space-to-depth (``pixel_unshuffle``) so the
    UNet runs at (H/p, W/p) with 3p^2 channels per frame: p^2 times fewer conv FLOPs, no pixels lost.

    Args:
        in_channels: stacked input channels (3*T context [+ 3*K noisy target for diffusion]).
        out_channels: 3*K predicted channels.
        cond_in: size of the raw conditioning vector.
    """

    def __init__(self, cfg: WorldModelConfig, in_channels: int, out_channels: int, cond_in: int):
        super().__init__()
        from diffusers import UNet2DModel

        n = len(cfg.block_out_channels)
        self.patch = cfg.patch_size
        self.temb_dim = cfg.block_out_channels[0] * 4
        self.unet = UNet2DModel(
            sample_size=cfg.image_size // cfg.patch_size,
            in_channels=in_channels * cfg.patch_size**2,
            out_channels=out_channels * cfg.patch_size**2,
            block_out_channels=cfg.block_out_channels,
            layers_per_block=cfg.layers_per_block,
            down_block_types=("DownBlock2D",) * n,
            up_block_types=("UpBlock2D",) * n,
            norm_num_groups=cfg.norm_num_groups,
            class_embed_type="identity",
            add_attention=False,
        )
        self.cond_mlp = nn.Sequential(
            nn.Linear(cond_in, self.temb_dim), nn.SiLU(), nn.Linear(self.temb_dim, self.temb_dim)
        )
        self._mid: Tensor | None = None
        self.unet.mid_block.register_forward_hook(self._keep_mid)
        self.mid_channels = cfg.block_out_channels[-1]

    def _keep_mid(self, _module: nn.Module, _inp: Any, out: Tensor) -> None:
        self._mid = out

    def forward(self, x: Tensor, cond: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """x: (B, C_in, H, W); cond: (B, cond_in).

        Returns (output (B, C_out, H, W), mid features (B, C_mid, h, w), cond embedding (B, temb))."""
        emb = self.cond_mlp(cond)
        t = torch.zeros(x.shape[0], device=x.device, dtype=torch.long)
        if self.patch > 1:
            x = F.pixel_unshuffle(x, self.patch)
        out = self.unet(x, t, class_labels=emb).sample
        if self.patch > 1:
            out = F.pixel_shuffle(out, self.patch)
        mid, self._mid = self._mid, None
        assert mid is not None
        return out, mid, emb


class OutcomeHead(nn.Module):
    """Predicts K future states, rewards and success logits from the UNet mid features.

    mid: (B, C, h, w), emb: (B, temb), cond (B, cond_dim) when ``cond_dim`` > 0 (the raw
    conditioning vector, ``WorldModelConfig.head_reads_cond``) -> (states (B, K, D), rewards (B, K),
    success_logits (B, K))."""

    def __init__(self, cfg: WorldModelConfig, mid_channels: int, temb_dim: int, cond_dim: int = 0):
        super().__init__()
        self.k, self.d = cfg.chunk_size, cfg.full_state_dim
        self.cond_dim = cond_dim
        self.reduce = nn.Conv2d(mid_channels, 16, 1)
        self.pool = 8
        self.mlp = nn.Sequential(
            nn.Linear(16 * self.pool * self.pool + temb_dim + cond_dim, cfg.head_hidden),
            nn.SiLU(),
            nn.Linear(cfg.head_hidden, cfg.head_hidden),
            nn.SiLU(),
            nn.Linear(cfg.head_hidden, self.k * (self.d + 2)),
        )

    def forward(self, mid: Tensor, emb: Tensor, cond: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        h = adaptive_avg_pool2d(F.silu(self.reduce(mid)), self.pool).flatten(1)  # deterministic on CUDA too
        if self.cond_dim and (cond is None or cond.shape[-1] != self.cond_dim):
            got = None if cond is None else tuple(cond.shape)
            raise ValueError(f"OutcomeHead reads the raw conditioning: cond is {got}; expected (B, {self.cond_dim})")
        parts = [h, emb] if not self.cond_dim else [h, emb, cond.to(h.dtype)]
        y = self.mlp(torch.cat(parts, dim=1)).float().view(-1, self.k, self.d + 2)
        return y[..., : self.d], y[..., self.d], y[..., self.d + 1]


# ---------------------------------------------------------------------------------------------- helpers
def to_unit(frames_u8: Tensor) -> Tensor:
    """uint8 (..., H, W, 3) -> float32 (..., 3, H, W) in [-1, 1]."""
    x = frames_u8.float().div(127.5).sub(1.0)
    return x.movedim(-1, -3)


def to_uint8(x: Tensor) -> Tensor:
    """float (..., 3, H, W) in [-1, 1] -> uint8 (..., H, W, 3) (rounded, clamped)."""
    return x.float().add(1.0).mul(127.5).round().clamp(0, 255).to(torch.uint8).movedim(-3, -1)


def quantize(x: Tensor) -> Tensor:
    """Round float frames in [-1, 1] to the uint8 grid (what a consumer of the frames sees)."""
    return x.float().add(1.0).mul(127.5).round().clamp(0, 255).div(127.5).sub(1.0)


def object_masks(
    frames: Tensor, colors: tuple[tuple[float, float, float], ...], min_cos: float = 0.97
) -> Tensor:
    """Pixels of the given object colours (robust to shading: compares chroma directions).

    frames: float (..., 3, H, W) in [-1, 1]; colors: RGB in [0, 1]. A pixel belongs to colour c
    when its chroma (RGB minus the pixel's mean) has cosine >= ``min_cos`` with c's chroma and at
    least half its norm. Returns bool (..., 1, H, W) (union over colours; all False without colours).
    """
    x = (frames.float() + 1.0) * 0.5
    chroma = x - x.mean(dim=-3, keepdim=True)
    norm = chroma.norm(dim=-3, keepdim=True)
    out = torch.zeros_like(norm, dtype=torch.bool)
    for col in colors:
        cc = torch.tensor(col, dtype=x.dtype, device=x.device)
        cc = (cc - cc.mean()).view(3, 1, 1)
        cn = float(cc.norm())
        cos = (chroma * cc).sum(dim=-3, keepdim=True) / (norm * cn + 1e-6)
        out |= (cos >= min_cos) & (norm >= 0.5 * cn)
    return out


def object_motion_scores(images: np.ndarray, cfg: WorldModelConfig, chunk: int = 4096) -> np.ndarray:
    """Per frame i, the number of object pixels (``cfg.object_colors``) that differ between frame
    i and frame i-1 (0 for i = 0). images: uint8 (N, H, W, 3). Episode bounds are the caller's."""
    n = len(images)
    masks = np.zeros((n, images.shape[1], images.shape[2]), bool)
    for i in range(0, n, chunk):
        f = to_unit(torch.from_numpy(np.ascontiguousarray(images[i : i + chunk])))
        masks[i : i + chunk] = object_masks(f, cfg.object_colors, cfg.object_color_cos)[:, 0].numpy()
    out = np.zeros(n, np.float64)
    out[1:] = (masks[1:] ^ masks[:-1]).sum(axis=(1, 2))
    return out


def _as_tensor(x: Any, name: str, device: torch.device) -> Tensor:
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if not isinstance(x, Tensor):
        raise WorldModelInputError(f"{name} is a {type(x).__name__}; expected a torch.Tensor or numpy array")
    return x.to(device)


# ---------------------------------------------------------------------------------------------- base model
class WorldModel(nn.Module):
    """Action-conditioned video world model: the interface every family implements.

    Subclasses set ``family``, ``config_class`` and implement :meth:`_predict` (inference:
    context -> K frames + features) and :meth:`training_loss`.
    """

    family: ClassVar[str] = ""
    config_class: ClassVar[type[WorldModelConfig]] = WorldModelConfig
    # an attached ObjectDynamics (see attach_object_dynamics); kept out of the state dict
    object_dynamics: Any = None

    def __init__(self, config: WorldModelConfig):
        super().__init__()
        if not isinstance(config, self.config_class):
            raise WmrlError(
                f"{type(self).__name__} needs a {self.config_class.__name__}, got {type(config).__name__}"
            )
        self.config = config
        c = config
        self.register_buffer("state_mean", torch.zeros(max(c.full_state_dim, 1)))
        self.register_buffer("state_std", torch.ones(max(c.full_state_dim, 1)))
        self.register_buffer("action_mean", torch.zeros(c.action_dim))
        self.register_buffer("action_std", torch.ones(c.action_dim))
        self.register_buffer("reward_scale", torch.ones(()))
        self.register_buffer("stats_fitted", torch.zeros((), dtype=torch.bool))
        if c.state_heatmaps:  # where each object's (and the tcp's) xyz lands in the image (fit_stats fits it)
            self.register_buffer("object_projection", torch.zeros(self.heatmap_points, 10, 2))

    # ------------------------------------------------------------------ object dynamics
    def attach_object_dynamics(self, model: Any) -> None:
        """Let ``model`` (a :class:`worldmodels.object_dynamics.ObjectDynamics`, or None to detach)
        move the objects of every imagined chunk: it replaces the environment-state dims the state
        head predicts, stepping them on the predicted proprio. It is saved with the world model (in
        ``object_dynamics/``) but is not part of its weights."""
        if model is not None:
            c = self.config
            oc = model.config
            if oc.orientation:
                raise WorldModelInputError(
                    "object dynamics that read the objects' orientations (config.orientation) cannot move a world "
                    "model's environment state, which holds positions only"
                )
            if c.env_state_dim != 3 * oc.num_objects:
                raise WorldModelInputError(
                    f"object dynamics of {oc.num_objects} objects needs env_state_dim={3 * oc.num_objects}; "
                    f"this world model has env_state_dim={c.env_state_dim}"
                )
            dims = [*oc.tcp_dims, *oc.finger_dims]
            if (
                max(dims) >= c.state_dim
                or max(oc.action_dims) >= c.action_dim
                or (oc.arm and oc.proprio_dim != c.state_dim)
            ):
                raise WorldModelInputError(
                    f"object dynamics reads proprio dims {dims} (arm: {oc.arm}, proprio_dim={oc.proprio_dim}) and "
                    f"action dims {oc.action_dims}; this world "
                    f"model has state_dim={c.state_dim}, action_dim={c.action_dim}"
                )
            model = model.to(self.device).eval()
        self.__dict__["object_dynamics"] = model  # a plain attribute: not a submodule, not in state_dict

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> WorldModel:
        """``to`` / ``cuda`` / ``cpu`` move the attached object dynamics with the world model."""
        out = super()._apply(fn, *args, **kwargs)
        attached = self.__dict__.get("object_dynamics")
        if attached is not None:
            attached._apply(fn, *args, **kwargs)
        return out

    def _step_objects(self, ctx_states_n: Tensor, states_n: Tensor, actions: Tensor) -> Tensor:
        """Replace the environment-state dims of the normalised predicted states (B, K, D) (and, with
        an arm model, the proprio dims too) by the attached object dynamics' rollout over the chunk
        (actions (B, K, A), raw)."""
        c = self.config
        e, p = c.env_state_dim, c.state_dim
        ctx = self.denorm_states(ctx_states_n)
        pred = self.denorm_states(states_n)
        proprio = torch.cat([ctx[:, -1:, :p], pred[..., :p]], dim=1)  # (B, K+1, P)
        before = -2 if ctx.shape[1] > 1 else -1
        objs = ctx[:, -1, -e:].unflatten(-1, (e // 3, 3))
        prev = ctx[:, before, -e:].unflatten(-1, (e // 3, 3))
        prop, moved = self.object_dynamics.rollout(proprio, actions.float(), objs, prev, ctx[:, before, :p])
        return self.norm_states(torch.cat([prop, moved.flatten(2)], dim=-1))

    # ------------------------------------------------------------------ config attributes
    @property
    def context_frames(self) -> int:
        return self.config.context_frames

    @property
    def chunk_size(self) -> int:
        return self.config.chunk_size

    @property
    def image_size(self) -> int:
        return self.config.image_size

    @property
    def action_dim(self) -> int:
        return self.config.action_dim

    @property
    def state_dim(self) -> int:
        """Size of the states contexts take and steps return (proprio + ``env_state_dim``)."""
        return self.config.full_state_dim

    @property
    def env_state_dim(self) -> int:
        """How many trailing state dims are privileged environment state (0: none)."""
        return self.config.env_state_dim

    @property
    def device(self) -> torch.device:
        return self.state_mean.device

    def cond_size(self, extra: int) -> int:
        """Raw conditioning size: K actions, T states, context-noise features, instruction, the
        chunk's states (``state_conditioned_frames``: K*D + 1), ``extra``."""
        c = self.config
        future = c.chunk_size * c.full_state_dim + 1 if c.state_conditioned_frames else 0
        return (
            c.chunk_size * c.action_dim + c.context_frames * c.full_state_dim + 16 + c.instruction_dim + future + extra
        )

    def future_features(self, ctx_states_n: Tensor, future_n: Tensor | None, keep: Tensor | None = None) -> Tensor:
        """Conditioning on the chunk's states (``WorldModelConfig.state_conditioned_frames``).

        ctx_states_n (B, T, D) and future_n (B, K, D) normalised (None: not given) -> (B, K*D + 1):
        the change of each chunk state from the last context state (proprio dims in normalised units,
        environment-state dims in ``env_state_loss_scale`` units, clamped to +-10) and a flag (1:
        given). ``keep`` (B,) bool withholds the rows where it is False (zeros, flag 0)."""
        c = self.config
        b = ctx_states_n.shape[0]
        if future_n is None:
            return ctx_states_n.new_zeros(b, c.chunk_size * c.full_state_dim + 1).float()
        delta = future_n.float() - ctx_states_n[:, -1:].float()
        e = c.env_state_dim
        if e:
            scale = torch.ones_like(self.state_std)
            scale[-e:] = self.state_std[-e:] / c.env_state_loss_scale
            delta = delta * scale
        feats = torch.cat([delta.clamp(-10.0, 10.0).flatten(1), delta.new_ones(b, 1)], dim=1)
        if keep is not None:
            feats = feats * keep.float()[:, None]
        return feats

    @property
    def uses_bf16(self) -> bool:
        """Forward passes run under bf16 autocast: ``config.autocast_bf16`` and the device computes
        bf16 natively (:func:`native_bf16`); elsewhere they run in fp32."""
        return bool(self.config.autocast_bf16) and native_bf16(self.device.type)

    def autocast(self) -> contextlib.AbstractContextManager:
        if self.uses_bf16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    # ------------------------------------------------------------------ normalisation
    def fit_stats(
        self,
        states: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray | None = None,
        images: np.ndarray | None = None,
    ) -> None:
        """Set normalisation statistics from data. states: (N, D) (D = :attr:`state_dim`, see
        :func:`model_states`), actions: (N, A), rewards: (N,); images uint8 (N, H, W, 3), the frames
        of those states (``state_heatmaps``: the object projection is fitted on them)."""
        c = self.config
        if c.state_heatmaps:
            if images is None or len(images) != len(states):
                got = None if images is None else len(images)
                raise WmrlError(f"state_heatmaps=true fits the object projection on frames: images has {got} rows; expected {len(states)}")
            self.object_projection.copy_(torch.as_tensor(self._fit_projection(images, states), dtype=torch.float32))
        if c.full_state_dim:
            self.state_mean.copy_(torch.as_tensor(states.mean(0), dtype=torch.float32))
            self.state_std.copy_(torch.as_tensor(states.std(0), dtype=torch.float32).clamp_min(1e-3))
        self.action_mean.copy_(torch.as_tensor(actions.mean(0), dtype=torch.float32))
        self.action_std.copy_(torch.as_tensor(actions.std(0), dtype=torch.float32).clamp_min(1e-2))
        if rewards is not None and len(rewards):
            self.reward_scale.fill_(float(max(np.abs(rewards).max(), 1e-3)))
        self.stats_fitted.fill_(True)

    def _fit_projection(self, images: np.ndarray, states: np.ndarray, max_frames: int = 20000) -> np.ndarray:
        """Quadratic xyz -> pixel map per heatmap point (P, 10, 2) from up to ``max_frames`` frames
        (uint8 (N, H, W, 3)) and their states (N, D): centroids of each ``object_colors`` mask (an
        object never in view maps off the image: its heatmaps stay zero), then with ``tcp_heatmap``
        the centroid of the dark (gripper) pixels against the tcp xyz."""
        from worldmodels.object_projection import fit_scene_projection

        c = self.config
        rows = np.random.default_rng(0).permutation(len(images))[:max_frames]
        st = np.asarray(states, np.float64)[rows]
        xyz = st[:, -c.env_state_dim :].reshape(len(rows), -1, 3)
        if c.tcp_heatmap:
            xyz = np.concatenate([xyz, st[:, None, list(c.tcp_dims)]], 1)
        try:
            return fit_scene_projection(images, rows, xyz, c.object_colors, c.object_color_cos,
                                        c.tcp_dark_max if c.tcp_heatmap else None, c.heatmap_workspace_m)
        except np.linalg.LinAlgError as e:
            raise WmrlError(f"state_heatmaps: the object projection fit failed ({e})") from None

    @property
    def heatmap_points(self) -> int:
        """Points drawn as heatmaps: the objects, and the tcp with ``tcp_heatmap`` (0 without ``state_heatmaps``)."""
        c = self.config
        return (len(c.object_colors) + int(c.tcp_heatmap)) if c.state_heatmaps else 0

    @property
    def heatmap_channels(self) -> int:
        """Extra input channels of the frame generator: K x :attr:`heatmap_points`."""
        return self.config.chunk_size * self.heatmap_points

    def future_heatmaps(self, future_n: Tensor | None, keep: Tensor | None = None, batch: int = 0) -> Tensor | None:
        """``state_heatmaps``: the chunk's object (and with ``tcp_heatmap`` tcp) positions as images.
        future_n (B, K, D) normalised (None: not given, zeros for ``batch`` rows) -> (B, K*P, H, W)
        Gaussian blobs at the projected positions (chunk step major, point minor: the objects, then the
        tcp); rows where ``keep`` (B,) is False are zeros. None without ``state_heatmaps``."""
        c = self.config
        if not c.state_heatmaps:
            return None
        if future_n is None:
            return torch.zeros(batch, self.heatmap_channels, c.image_size, c.image_size, device=self.device)
        from worldmodels.object_projection import gaussian_heatmaps, project

        raw = self.denorm_states(future_n)
        xyz = raw[..., -c.env_state_dim :].unflatten(-1, (-1, 3))  # (B, K, O, 3)
        if c.tcp_heatmap:
            xyz = torch.cat([xyz, raw[..., None, list(c.tcp_dims)]], -2)  # (B, K, O+1, 3)
        heat = gaussian_heatmaps(project(self.object_projection, xyz), c.image_size, c.heatmap_sigma)
        in_view = (xyz[..., :2].abs() <= c.heatmap_workspace_m).all(-1)  # parked objects: no blob
        heat = (heat * in_view[..., None, None].to(heat.dtype)).flatten(1, 2)
        return heat if keep is None else heat * keep.float()[:, None, None, None]

    def norm_states(self, s: Tensor) -> Tensor:
        if not self.config.full_state_dim:
            return s.float()
        return (s.float() - self.state_mean) / self.state_std

    def denorm_states(self, s: Tensor) -> Tensor:
        if not self.config.full_state_dim:
            return s.float()
        return s.float() * self.state_std + self.state_mean

    def absolute_states(self, states_p: Tensor, ctx_states_n: Tensor) -> Tensor:
        """Head output (B, K, D) -> normalised states: the environment-state dims are predicted as a
        change from the last context state (objects mostly keep their pose; with a contact gate,
        only near the tcp), the proprio dims directly or, with ``residual_states``, as a change too."""
        c = self.config
        s = c.env_state_dim
        if not s and not c.residual_states:
            return states_p
        states_p, ctx_states_n = states_p.float(), ctx_states_n.float()
        last = ctx_states_n[:, -1:]
        proprio = states_p[..., : c.state_dim]
        if c.residual_states:
            proprio = proprio + last[..., : c.state_dim]
        if not s:
            return proprio
        delta = states_p[..., -s:]
        if c.env_state_contact_radius > 0:  # the gate reads the absolute predicted tcp
            delta = delta * self.contact_gate(proprio, ctx_states_n).repeat_interleave(3, dim=-1)[:, None]
        return torch.cat([proprio, delta + last[..., -s:]], dim=-1)

    def contact_gate(self, states_p: Tensor, ctx_states_n: Tensor) -> Tensor:
        """float (B, S/3): 1 for the objects whose pose may change over this chunk (see
        ``WorldModelConfig.env_state_contact_radius``), 0 for those that stay put.
        states_p (B, K, >=3) normalised predicted states (the absolute tcp at dims 0-2; only those
        are read), ctx_states_n (B, T, D)."""
        c = self.config
        s = c.env_state_dim
        mean, std = self.state_mean, self.state_std
        tcp = torch.cat([ctx_states_n[..., :3], states_p[..., :3]], dim=1) * std[:3] + mean[:3]  # (B, T+K, 3)
        objs = ctx_states_n[..., -s:] * std[-s:] + mean[-s:]  # (B, T, S)
        last = objs[:, -1].unflatten(-1, (s // 3, 3))  # (B, O, 3)
        near = (tcp[:, :, None] - last[:, None]).norm(dim=-1).amin(dim=1) < c.env_state_contact_radius
        if objs.shape[1] > 1:
            moving = (objs[:, -1] - objs[:, -2]).unflatten(-1, (s // 3, 3)).norm(dim=-1) > c.env_state_momentum
            near = near | moving
        return near.float()

    def norm_actions(self, a: Tensor) -> Tensor:
        """Normalised actions ``(..., A)``. Dims that never varied in the training data (their std
        was clamped to the 1e-2 floor, e.g. the rotation dims the built-in suite ignores) are
        zeroed: the model cannot know what they do, and without this a policy's exploration noise
        on them (0.2 -> 20 sigma) drives the model far out of distribution (imagined frames turn to
        garbage that a reward model may score as success)."""
        return (a.float() - self.action_mean) / self.action_std * self.action_dim_mask()

    def action_dim_mask(self) -> Tensor:
        """float32 (A,): 1 for the action dims that varied in the training data (std above the
        1e-2 floor ``fit_stats`` clamps to), 0 for the dims the model ignores."""
        return (self.action_std > 1.5e-2).to(torch.float32)

    # ------------------------------------------------------------------ input checks
    def _check_frames(self, frames: Any, name: str = "frames") -> Tensor:
        c = self.config
        f = _as_tensor(frames, name, self.device)
        exp = (c.context_frames, c.image_size, c.image_size, 3)
        if f.ndim != 5 or tuple(f.shape[1:]) != exp:
            raise WorldModelInputError(
                f"{name} has shape {tuple(f.shape)}; expected (B, {', '.join(map(str, exp))})"
            )
        if f.dtype != torch.uint8:
            raise WorldModelInputError(f"{name} has dtype {f.dtype}; expected torch.uint8 in [0, 255]")
        return f

    def _check_float(self, x: Any, name: str, shape: tuple[int, ...]) -> Tensor:
        t = _as_tensor(x, name, self.device)
        if tuple(t.shape) != shape:
            raise WorldModelInputError(f"{name} has shape {tuple(t.shape)}; expected {shape}")
        if not t.is_floating_point():
            raise WorldModelInputError(f"{name} has dtype {t.dtype}; expected float32")
        if not bool(torch.isfinite(t).all()):
            raise WorldModelInputError(f"{name} holds NaN or Inf; expected finite values")
        return t.float()

    def encode_instructions(self, instructions: Any, batch: int) -> Tensor | None:
        """Instruction embeddings (B, E) from a list of B strings (via ``policies.text``) or a
        float tensor (B, E); None when the model takes no instruction."""
        e = self.config.instruction_dim
        if e == 0:
            return None
        if instructions is None:
            raise WorldModelInputError(
                f"instructions is None; this model needs ({batch},) strings or ({batch}, {e}) floats"
            )
        if isinstance(instructions, (list, tuple)):
            if len(instructions) != batch or not all(isinstance(s, str) for s in instructions):
                raise WorldModelInputError(
                    f"instructions has {len(instructions)} entries; expected {batch} strings"
                )
            try:
                from policies.text import InstructionEncoder
            except ImportError as err:
                raise WmrlError(
                    f"string instructions need policies.text.InstructionEncoder ({err}); "
                    "pass a precomputed (B, E) embedding tensor instead"
                ) from None
            instructions = InstructionEncoder().encode(list(instructions))
        return self._check_float(instructions, "instructions", (batch, e))

    # ------------------------------------------------------------------ public API
    @torch.no_grad()
    def init_context(self, frames: Any, states: Any = None, instructions: Any = None) -> WMContext:
        """Start a batched rollout. frames: uint8 (B, T, H, W, 3); states: float32 (B, T, D)."""
        f = self._check_frames(frames)
        b, t = f.shape[:2]
        d = self.config.full_state_dim
        if d:
            if states is None:
                raise WorldModelInputError(f"states is None; expected float32 ({b}, {t}, {d})")
            s = self.norm_states(self._check_float(states, "states", (b, t, d)))
        else:
            s = torch.zeros(b, t, 0, device=self.device)
        return WMContext(to_unit(f), s, self.encode_instructions(instructions, b))

    @torch.no_grad()
    def step(self, ctx: WMContext, actions: Any, instructions: Any = None, states: Any = None) -> WMStepOutput:
        """Imagine K steps. actions: float32 (B, K, A) in [-1, 1]. Returns WMStepOutput with the
        new context (the last T frames; memory does not grow with the horizon).

        states: float32 (B, K, D), the chunk's states given from outside (e.g. the real ones): they
        replace the predicted states, and a ``state_conditioned_frames`` model draws its frames from
        them. Otherwise an attached state model with an arm gives them to such a model."""
        if not isinstance(ctx, WMContext):
            raise WorldModelInputError(
                f"ctx is a {type(ctx).__name__}; expected a WMContext from init_context"
            )
        c = self.config
        b = ctx.batch_size
        a = self._check_float(actions, "actions", (b, c.chunk_size, c.action_dim))
        instr = ctx.instruction
        if instructions is not None and c.instruction_dim:
            instr = self.encode_instructions(instructions, b)
            ctx = WMContext(ctx.frames, ctx.states, instr)
        od = self.object_dynamics
        given = None
        if states is not None:
            given = self.norm_states(self._check_float(states, "states", (b, c.chunk_size, c.full_state_dim)))
        elif c.state_conditioned_frames and od is not None and od.config.arm:
            # the state model moves arm and objects first; the frames are drawn where it put them
            last = ctx.states[:, -1:].expand(-1, c.chunk_size, -1)  # an arm model reads only the context
            given = self._step_objects(ctx.states, last, a)
        if given is not None:
            future = given if c.state_conditioned_frames else None
            frames, _, rew, succ_logit = self._predict(ctx, self.norm_actions(a), future)
            states_n = given
        else:
            frames, states_n, rew, succ_logit = self._predict(ctx, self.norm_actions(a))
            states_n = self.absolute_states(states_n, ctx.states)
            if od is not None:
                states_n = self._step_objects(ctx.states, states_n, a)
        frames = quantize(frames)
        new_frames = torch.cat([ctx.frames, frames], dim=1)[:, -c.context_frames :]
        new_states = torch.cat([ctx.states, states_n.float()], dim=1)[:, -c.context_frames :]
        return WMStepOutput(
            frames=to_uint8(frames),
            states=self.denorm_states(states_n),
            rewards=(rew.float() * self.reward_scale),
            success_prob=torch.sigmoid(succ_logit.float()),
            context=WMContext(new_frames.contiguous(), new_states.contiguous(), instr),
        )

    @torch.no_grad()
    def rollout(self, frames: Any, states: Any, actions: Any, instructions: Any = None) -> WMStepOutput:
        """Open-loop rollout over H steps in chunks of K (the last chunk is padded with zeros).

        frames uint8 (B, T, H, W, 3), states float32 (B, T, D), actions float32 (B, H, A).
        Returns frames uint8 (B, H, H_img, W_img, 3), states (B, H, D), rewards / success_prob (B, H)."""
        ctx = self.init_context(frames, states, instructions)
        c = self.config
        a = _as_tensor(actions, "actions", self.device)
        if a.ndim != 3 or a.shape[0] != ctx.batch_size or a.shape[2] != c.action_dim or a.shape[1] < 1:
            raise WorldModelInputError(
                f"actions has shape {tuple(a.shape)}; expected ({ctx.batch_size}, H>=1, {c.action_dim})"
            )
        h = a.shape[1]
        pad = (-h) % c.chunk_size
        if pad:
            a = torch.cat([a, a.new_zeros(a.shape[0], pad, a.shape[2])], dim=1)
        outs: list[WMStepOutput] = []
        for i in range(0, a.shape[1], c.chunk_size):
            o = self.step(ctx, a[:, i : i + c.chunk_size])
            ctx = o.context
            outs.append(WMStepOutput(o.frames, o.states, o.rewards, o.success_prob, None))
        return WMStepOutput(
            frames=torch.cat([o.frames for o in outs], 1)[:, :h],
            states=torch.cat([o.states for o in outs], 1)[:, :h],
            rewards=torch.cat([o.rewards for o in outs], 1)[:, :h],
            success_prob=torch.cat([o.success_prob for o in outs], 1)[:, :h],
            context=None,
        )

    def finetune(
        self,
        trajectories: Any,
        steps: int,
        weights: np.ndarray | None = None,
        batch_size: int = 16,
        lr: float = 1e-4,
        seed: int = 0,
        log_every: int = 0,
    ) -> list[float]:
        """Continue training on new trajectories (co-evolution). ``weights``: per-episode (E,)
        sampling weights (e.g. failure episodes up-weighted; default: ``trajectories.episode_weights``).
        Returns the per-step losses."""
        if weights is None:
            weights = getattr(trajectories, "episode_weights", None)
        sampler = WindowSampler(trajectories, self.config, episode_weights=weights, seed=seed)
        opt = torch.optim.AdamW(self.parameters(), lr=lr, weight_decay=0.0)
        losses = []
        for i in range(int(steps)):
            loss, _ = train_step(self, opt, sampler.sample(batch_size))
            losses.append(loss)
            if log_every and (i + 1) % log_every == 0:
                print(f"finetune step {i + 1}/{steps} loss {loss:.4f}")
        self.eval()
        return losses

    def prepare_batch(self, batch: dict[str, Tensor]) -> dict[str, Tensor]:
        """Self-forcing: given a two-chunk batch (frames (B, T+2K, ...), actions (B, 2K, A), ...),
        return a one-chunk batch whose targets are the second chunk and whose context is, for a
        ``self_forcing_prob`` share of rows, the model's own prediction of the first chunk (no
        gradient; quantised like rollout frames), otherwise the real frames. One-chunk batches pass
        through unchanged."""
        c = self.config
        t, k = c.context_frames, c.chunk_size
        if batch["frames"].shape[1] < t + 2 * k:
            return batch
        out = {
            "frames": batch["frames"][:, k : k + t + k].clone(),
            "states": batch["states"][:, k : k + t + k].clone(),
            "actions": batch["actions"][:, k : 2 * k],
            "rewards": batch["rewards"][:, k : 2 * k],
            "successes": batch["successes"][:, k : 2 * k],
            "weights": batch["weights"],
        }
        if "instruction" in batch:
            out["instruction"] = batch["instruction"]
        use = torch.rand(batch["frames"].shape[0], device=self.device) < c.self_forcing_prob
        if bool(use.any()):
            with torch.no_grad():
                sub = {key: v[use] for key, v in batch.items()}
                ctx = WMContext(
                    to_unit(sub["frames"][:, :t]),
                    self.norm_states(sub["states"][:, :t]),
                    sub.get("instruction"),
                )
                future_n = self.norm_states(sub["states"][:, t : t + k]) if c.state_conditioned_frames else None
                frames, states_n, _, _ = self._predict(ctx, self.norm_actions(sub["actions"][:, :k]), future_n)
                # the context states a state model would give are (close to) the real ones
                states_n = future_n if future_n is not None else self.absolute_states(states_n, ctx.states)
                imag = torch.cat([ctx.frames, quantize(frames)], dim=1)[:, -t:]
                imag_s = torch.cat([ctx.states, states_n.float()], dim=1)[:, -t:]
            out["frames"][use, :t] = to_uint8(imag)
            out["states"][use, :t] = self.denorm_states(imag_s)
        return out

    # ------------------------------------------------------------------ family hooks
    def _predict(
        self, ctx: WMContext, actions_n: Tensor, future_n: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Returns frames float (B, K, 3, H, W) in [-1, 1], normalised states (B, K, D), rewards
        (B, K) in reward_scale units, success logits (B, K). ``future_n`` (B, K, D): the chunk's
        normalised states the frames follow (``state_conditioned_frames``; None: not given)."""
        raise NotImplementedError

    def training_loss(self, batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        """batch: see :class:`WindowSampler`. Returns (scalar loss, logs)."""
        raise NotImplementedError

    def _training_future(self, batch: dict[str, Tensor], ctx_states_n: Tensor) -> tuple[Tensor | None, Tensor | None]:
        """(:meth:`future_features`, :meth:`future_heatmaps`) of a training batch's target chunk (its
        real states), both withheld for the same ``state_cond_dropout`` share of rows; (None, None)
        unless ``state_conditioned_frames``."""
        c = self.config
        if not c.state_conditioned_frames:
            return None, None
        t, k = c.context_frames, c.chunk_size
        future_n = self.norm_states(batch["states"][:, t : t + k])
        keep = torch.rand(ctx_states_n.shape[0], device=ctx_states_n.device) >= c.state_cond_dropout
        return self.future_features(ctx_states_n, future_n, keep), self.future_heatmaps(future_n, keep)

    # ------------------------------------------------------------------ shared pieces for families
    def _cond(
        self,
        ctx_noise: Tensor,
        states_n: Tensor,
        actions_n: Tensor,
        instr: Tensor | None,
        extra: Tensor | None = None,
        future: Tensor | None = None,
    ) -> Tensor:
        """Conditioning vector (B, cond_size). ctx_noise (B,), states_n (B, T, D), actions_n (B, K, A),
        future: :meth:`future_features` (B, K*D + 1) (``state_conditioned_frames``; None: not given)."""
        parts = [actions_n.flatten(1), states_n.flatten(1), fourier_features(ctx_noise * 10.0, 16)]
        if self.config.instruction_dim:
            parts.append(
                instr
                if instr is not None
                else actions_n.new_zeros(actions_n.shape[0], self.config.instruction_dim)
            )
        if self.config.state_conditioned_frames:
            parts.append(future if future is not None else self.future_features(states_n, None))
        if extra is not None:
            parts.append(extra)
        return torch.cat([p.float() for p in parts], dim=1)

    def _augment_context(self, ctx_frames: Tensor) -> tuple[Tensor, Tensor]:
        """Noise augmentation of context frames (B, T, 3, H, W). Returns (noisy frames, level (B,))."""
        b = ctx_frames.shape[0]
        level = torch.rand(b, device=ctx_frames.device) * self.config.context_noise_max
        # a fresh contiguous draw: randn_like would copy the frames' channels-last strides, and a
        # strided fill took about 30 ms of a 0.3 s training step on the CPU (benchmarks.train_speed)
        noise = torch.randn(ctx_frames.shape, device=ctx_frames.device, dtype=ctx_frames.dtype)
        noisy = ctx_frames + level[:, None, None, None, None] * noise
        return noisy, level

    def _head_losses(
        self, batch: dict[str, Tensor], states_p: Tensor, rew_p: Tensor, succ_logit: Tensor, w: Tensor
    ) -> tuple[Tensor, dict[str, float]]:
        c = self.config
        k = c.chunk_size
        t = c.context_frames
        logs = {}
        total = torch.zeros((), device=states_p.device)
        if c.full_state_dim:
            s_tgt = self.norm_states(batch["states"][:, t : t + k])
            states_p = self.absolute_states(states_p, self.norm_states(batch["states"][:, :t]))
            err = (states_p - s_tgt) ** 2
            e = c.env_state_dim
            if e:  # environment dims: squared error in env_state_loss_scale units (e.g. centimetres)
                scale = (self.state_std[-e:] / c.env_state_loss_scale) ** 2
                err = torch.cat([err[..., :-e], err[..., -e:] * scale], dim=-1)
                logs["loss_env_state"] = float(err[..., -e:].mean().detach())
            ls = (err.mean(dim=(1, 2)) * w).mean()
            total = total + c.state_loss_weight * ls
            logs["loss_state"] = float(ls.detach())
        lr_ = (((rew_p - batch["rewards"] / self.reward_scale) ** 2).mean(1) * w).mean()
        lsucc = (
            F.binary_cross_entropy_with_logits(succ_logit, batch["successes"].float(), reduction="none").mean(
                1
            )
            * w
        ).mean()
        total = total + c.reward_loss_weight * lr_ + c.success_loss_weight * lsucc
        logs["loss_reward"] = float(lr_.detach())
        logs["loss_success"] = float(lsucc.detach())
        return total, logs

    def _pixel_weights(self, target: Tensor, last: Tensor) -> Tensor:
        """Per-pixel loss weights (B, K, 1, H, W): 1 + moving_weight where the target differs from the
        last context frame, + object_weight on object pixels of the target or the last context frame."""
        c = self.config
        moving = ((target - last[:, None]).abs().amax(dim=2, keepdim=True) > 0.08).float()
        w = 1.0 + c.moving_weight * moving
        if c.object_weight > 0 and c.object_colors:
            obj = (
                object_masks(target, c.object_colors, c.object_color_cos)
                | object_masks(last, c.object_colors, c.object_color_cos)[:, None]
            )
            w = w + c.object_weight * obj.float()
        return w

    # ------------------------------------------------------------------ save / load
    def save_pretrained(self, directory: str | os.PathLike) -> Path:
        """Write ``config.json`` (family, format version, config) and ``model.safetensors`` (weights
        and normalisation statistics) atomically."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        cfg = dataclasses.asdict(self.config)
        cfg.pop("family", None)
        atomic_save_safetensors(
            d / WEIGHTS_NAME,
            dict(self.state_dict()),
            metadata={"family": self.family, "format_version": str(FORMAT_VERSION)},
        )
        atomic_write_json(
            d / CONFIG_NAME, {"family": self.family, "format_version": FORMAT_VERSION, "config": cfg}
        )
        if self.object_dynamics is not None:
            self.object_dynamics.save_pretrained(d / OBJECT_DYNAMICS_DIR)
        elif (d / OBJECT_DYNAMICS_DIR).is_dir():  # not this model's: it would be attached on loading
            import shutil

            shutil.rmtree(d / OBJECT_DYNAMICS_DIR)
        return d

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, device: str | torch.device = "cpu") -> WorldModel:
        """Load a model saved by :meth:`save_pretrained`. Raises CheckpointError on a missing,
        corrupt or partial checkpoint, or one from another family / config."""
        d = Path(directory)
        cfg_path, w_path = d / CONFIG_NAME, d / WEIGHTS_NAME
        if not cfg_path.is_file() or not w_path.is_file():
            raise CheckpointError(
                f"{d} is not a world-model checkpoint; expected {CONFIG_NAME} and {WEIGHTS_NAME}"
            )
        try:
            meta = json.loads(cfg_path.read_text())
            family, cfg_dict = meta["family"], meta["config"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise CheckpointError(
                f"{cfg_path} is corrupt ({type(e).__name__}: {e}); "
                "expected the JSON written by save_pretrained"
            ) from None
        if meta.get("format_version") != FORMAT_VERSION:
            raise CheckpointError(
                f"{cfg_path} has format_version={meta.get('format_version')!r}; expected {FORMAT_VERSION}"
            )
        if cls.family and family != cls.family:
            raise CheckpointError(f"{d} holds a {family!r} world model; {cls.__name__} loads {cls.family!r}")
        from wmrl.config import to_dataclass
        from worldmodels import get_family

        model_cls = get_family(family)
        config = to_dataclass(cfg_dict, model_cls.config_class)
        model = model_cls(config)
        try:
            from safetensors.torch import load_file

            state = load_file(str(w_path))
        except Exception as e:  # safetensors raises several types on truncated / garbage files
            raise CheckpointError(f"{w_path} is corrupt or partial ({type(e).__name__}: {e})") from None
        own = model.state_dict()
        missing = sorted(set(own) - set(state))
        unexpected = sorted(set(state) - set(own))
        if missing or unexpected:
            raise CheckpointError(
                f"{w_path} does not match its config: missing {missing[:3]}, unexpected {unexpected[:3]}"
            )
        bad = [k for k in own if tuple(own[k].shape) != tuple(state[k].shape)]
        if bad:
            raise CheckpointError(
                f"{w_path} was saved with another config: {bad[0]} has shape {tuple(state[bad[0]].shape)}, "
                f"expected {tuple(own[bad[0]].shape)}"
            )
        model.load_state_dict(state)
        model = model.to(device).eval()
        if (d / OBJECT_DYNAMICS_DIR).is_dir():
            from worldmodels.object_dynamics import ObjectDynamics

            model.attach_object_dynamics(ObjectDynamics.from_pretrained(d / OBJECT_DYNAMICS_DIR, device))
        return model


# ---------------------------------------------------------------------------------------------- data
def model_states(traj: Any, cfg: WorldModelConfig) -> np.ndarray:
    """The states a world model reads and predicts for every row of ``traj``: float32 (N,
    ``cfg.full_state_dim``) = the proprio ``states`` followed by the first ``cfg.env_state_dim``
    dims of ``env_states`` (raises :class:`DatasetError` when the dataset has too few)."""
    states = np.asarray(traj.states, np.float32)
    s = cfg.env_state_dim
    if not s:
        return states
    env = getattr(traj, "env_states", None)
    if env is None:
        raise DatasetError(
            f"world model env_state_dim={s} needs the dataset's observation.environment_state, which it "
            "lacks (re-collect it with `wmrl collect`; the built-in suite records it)"
        )
    if env.shape[1] < s:
        raise DatasetError(f"dataset environment states have {env.shape[1]} dims; env_state_dim={s} needs >= {s}")
    return np.concatenate([states, np.asarray(env[:, :s], np.float32)], axis=1)


class WindowSampler:
    """Random training windows from a ``wmrl.data.Trajectories``.

    ``sample(B)`` returns a dict of tensors: ``frames`` uint8 (B, T+K, H, W, 3), ``states`` float32
    (B, T+K, D), ``actions`` float32 (B, K, A) (actions T-1 .. T+K-2 of the window, which produce
    frames T .. T+K-1), ``rewards`` / ``successes`` (B, K), ``weights`` (B,) and optionally
    ``instruction`` (B, E) (from ``instruction_embeddings``, one row per frame).
    With ``cfg.episode_start_windows`` a window may start up to T-1 rows before its episode: its
    context rows before the episode start repeat the first frame and state (as a reset's context
    does); targets and actions are always real rows of the episode.
    """

    def __init__(
        self,
        traj: Any,
        cfg: WorldModelConfig,
        episode_weights: np.ndarray | None = None,
        seed: int = 0,
        instruction_embeddings: np.ndarray | None = None,
    ):
        for name in (
            "images",
            "states",
            "actions",
            "rewards",
            "successes",
            "episode_index",
            "episode_bounds",
        ):
            if getattr(traj, name, None) is None:
                raise DatasetError(f"dataset lacks the feature {name!r} that world-model training needs")
        if traj.images.ndim != 4 or traj.images.shape[1:] != (cfg.image_size, cfg.image_size, 3):
            raise DatasetError(
                f"dataset images have shape {traj.images.shape[1:]}; the world model expects "
                f"({cfg.image_size}, {cfg.image_size}, 3) (set image_size)"
            )
        if traj.actions.shape[1] != cfg.action_dim:
            raise DatasetError(
                f"dataset actions have {traj.actions.shape[1]} dims; expected {cfg.action_dim}"
            )
        if cfg.state_dim and traj.states.shape[1] != cfg.state_dim:
            raise DatasetError(
                f"dataset states have {traj.states.shape[1]} dims; expected state_dim={cfg.state_dim}"
            )
        states = model_states(traj, cfg)
        t, k = cfg.context_frames, cfg.chunk_size
        # window = frames s-1 .. s+T+K-1; index s-1 is used only for the action "before" (unused).
        if cfg.self_forcing_prob > 0:
            k = 2 * k  # two chunks: the first is imagined, the second is the target
        self.starts = np.asarray(traj.window_starts(t, k), dtype=np.int64)
        if len(self.starts) == 0:
            raise DatasetError(f"dataset has no episode with {t + k} frames (context_frames + chunk_size)")
        bounds = np.asarray(traj.episode_bounds, dtype=np.int64)
        long_enough = bounds[bounds[:, 1] - bounds[:, 0] >= t + k]
        # the row each window's frames may not reach before (its episode's first row)
        self.floor = np.asarray(long_enough[:, 0], np.int64)[
            np.searchsorted(long_enough[:, 0], self.starts, side="right") - 1
        ]
        if cfg.episode_start_windows and t > 1:
            # windows whose context starts 1 .. T-1 rows before the episode (left-padded)
            pad = np.arange(t - 1, 0, -1)
            early = (long_enough[:, :1] - pad[None]).ravel()
            self.starts = np.concatenate([self.starts, early])
            self.floor = np.concatenate([self.floor, np.repeat(long_enough[:, 0], len(pad))])
        self.padded_windows = int((self.starts < self.floor).sum())
        self.t, self.k = t, k
        self.images = torch.from_numpy(np.ascontiguousarray(traj.images))
        self.states = torch.from_numpy(states)
        self.actions = torch.from_numpy(np.asarray(traj.actions, np.float32))
        self.rewards = torch.from_numpy(np.asarray(traj.rewards, np.float32))
        self.successes = torch.from_numpy(np.asarray(traj.successes, bool))
        ep_of_start = np.asarray(traj.episode_index)[self.floor]
        self.instr = (
            None if instruction_embeddings is None else torch.as_tensor(instruction_embeddings).float()
        )
        p_obj = None
        if cfg.object_oversample > 0 and cfg.object_colors:
            # object pixels changing inside each window's target frames (from the last context frame)
            motion = object_motion_scores(traj.images, cfg)
            csum = np.concatenate([[0.0], np.cumsum(motion)])
            score = csum[self.starts + t + k] - csum[self.starts + t]
            if score.sum() > 0:
                p_obj = score / score.sum()
        self.object_windows = 0 if p_obj is None else int((p_obj > 0).sum())
        if episode_weights is not None:
            ew = np.asarray(episode_weights, np.float64)
            n_ep = len(traj.episode_bounds)
            if ew.shape != (n_ep,) or not np.isfinite(ew).all() or (ew < 0).any() or ew.sum() <= 0:
                raise WmrlError(
                    f"episode weights have shape {ew.shape}; expected ({n_ep},) finite, >= 0, not all 0"
                )
            ep_ids = np.unique(np.asarray(traj.episode_index))
            pos = np.searchsorted(ep_ids, ep_of_start)
            p = ew[pos]
            self.p = p / p.sum()
        else:
            self.p = None
        if p_obj is not None:
            base = self.p if self.p is not None else np.full(len(self.starts), 1.0 / len(self.starts))
            if self.p is not None:  # episode weights also gate the object windows
                p_obj = p_obj * (base > 0)
            if p_obj.sum() > 0:
                a = cfg.object_oversample
                p = (1 - a) * base + a * p_obj / p_obj.sum()
                self.p = p / p.sum()
        self.rng = np.random.default_rng(seed)

    def sample(self, batch_size: int) -> dict[str, Tensor]:
        j = self.rng.choice(len(self.starts), size=batch_size, p=self.p)
        s = self.starts[j]
        rows = np.maximum(s[:, None] + np.arange(self.t + self.k)[None], self.floor[j][:, None])
        idx = torch.from_numpy(rows)
        act_idx = idx[:, self.t - 1 : self.t + self.k - 1]
        out = {
            "frames": self.images[idx],
            "states": self.states[idx],
            "actions": self.actions[act_idx],
            "rewards": self.rewards[act_idx],
            "successes": self.successes[act_idx],
            "weights": torch.ones(batch_size),
        }
        if self.instr is not None:
            out["instruction"] = self.instr[torch.from_numpy(s + self.t - 1)]
        return out


def train_step(
    model: WorldModel, opt: torch.optim.Optimizer, batch: dict[str, Tensor], grad_clip: float = 1.0
) -> tuple[float, dict[str, float]]:
    """One optimisation step. Raises NonFiniteError on a NaN/Inf loss (nothing is updated)."""
    from wmrl.runs import check_finite

    model.train()
    batch = model.prepare_batch({k: v.to(model.device) for k, v in batch.items()})
    loss, logs = model.training_loss(batch)
    check_finite("world-model loss", loss.detach())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    logs = dict(logs)
    logs["grad_norm"] = float(gn)
    return float(loss.detach()), logs
