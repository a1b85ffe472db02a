"""A state-space model of how objects move, for world models that predict the environment state.

The pixel world model's state head reads the UNet's pooled features. It follows the arm well, but it
barely tells apart the samples of a GRPO group by what happens to the cube (see
``benchmarks.rl_headroom --imagined``). :class:`ObjectDynamics` learns the cubes' motion from the
dataset's proprio and environment states alone: one small MLP, shared by every object, maps an
object's situation at step ``t`` (its offset from the tcp, the tcp's move over the step, the fingers,
the action, its height and last velocity, the other objects' offsets) to its displacement over the
step. Attached to a world model (:meth:`WorldModel.attach_object_dynamics`), it replaces the
environment-state dims of each imagined chunk: it steps every object through the chunk on the world
model's predicted proprio. The imagined frames still come from the pixel model, so the policy sees
the world model's own picture of the objects; success read from the state (``success_source=state``)
comes from this model.

Usage::

    python -m worldmodels.object_dynamics --data RUN/data --out RUN/object_dynamics [--steps N] [--device cuda]

fits one on a LeRobotDataset written by ``wmrl collect`` (it needs ``observation.environment_state``)
and saves it (``config.json`` + ``model.safetensors``) with its held-out one-step and open-loop errors.
``--policy RUN/sft/policy --policy-episodes N [--policy-std 0.1]`` also fits on N fresh episodes of
that policy in the real simulator (the dataset's tasks, sampling noise ``--policy-std``): the
contacts a policy makes, which demos rarely show. Their real env steps are in the metrics
(``policy_rollout_real_env_steps``), to be counted against any real-step budget.
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
from torch import Tensor, nn

from wmrl.errors import CheckpointError, ConfigError, DatasetError
from wmrl.io import atomic_save_safetensors, atomic_write_json
from worldmodels.orientation import CUBE_FEATURE_DIM, cube_orientation_features, rotation_increment, step_quat

CONFIG_NAME, WEIGHTS_NAME = "config.json", "model.safetensors"
FORMAT_VERSION = 1
CM = 100.0  # displacements are learned in centimetres per step
DEG = math.pi / 180.0  # rotations are learned in degrees per step
MOVING_TURN_DEG = 0.5  # an object turning more than this over a step is a moving one (orientation models)
#: the peak learning rate of a fine-tune from a fitted model (:func:`fine_tune_object_dynamics`; cosine to 0, where a
#: fit from scratch starts at 1e-3): session 54's warm refits, the main job's co-evolution rounds' default
WARM_REFIT_LR = 3e-4


@dataclass
class ObjectDynamicsConfig:
    """Args:
    num_objects: object xyz triples at the start of the environment state (3 cubes: dims 0-8).
    tcp_dims: proprio dims of the tcp xyz.
    finger_dims: proprio dims of the gripper (finger opening, gripper command).
    action_dims: action dims the model reads (the built-in suite's translation and gripper; it
        ignores rotation).
    reach: offsets between the tcp and the objects are clipped at this many metres (contacts are near).
    active_bound: an object with a coordinate beyond this (metres) is parked out of the scene and
        stays put.
    hidden / layers: the MLP's width and number of hidden layers.
    steps / batch_size / lr / weight_decay: AdamW with cosine decay over ``steps``.
    moving_weight / moving_eps: steps where the object moves more than ``moving_eps`` metres are
        sampled ``moving_weight`` times as often (most steps of most objects are at rest); every
        transition is also drawn in proportion to its episode's ``episode_weights`` (1 unless set).
    test_fraction: share of episodes held out for the reported errors.
    arm: also learn the proprio's next step (a second MLP reading the proprio, its last change, the
        action and the offsets to the objects) and, attached to a world model, replace the pixel
        model's predicted proprio by it as well (the objects then move on this model's tcp).
    proprio_dim: size of the proprio state the arm model reads and predicts (``arm`` only).
    bootstrap: fit on a bootstrap resample of the training episodes (as many, drawn with
        replacement by ``seed``; the held-out split is unchanged), so ensemble members differ in
        their data and not only in their initialisation and sampling.
    seed: seed of the split, the initialisation and the sampling (CPU runs are reproducible).
    orientation: also read and predict each object's orientation: the environment state carries the
        objects' unit quaternions (w, x, y, z) from column ``quat_column`` on (4 per object; the built-in
        suite's ``benchmarks.cube_turns.states_with_orientations``); every object's features gain how it is
        tipped, its yaw modulo a quarter turn and the tcp's offset and motion in its own frame
        (:func:`worldmodels.orientation.cube_orientation_features`), and the MLP also predicts its rotation
        over the step (a world-frame rotation vector, learned in degrees, weighted ``rotation_weight``).
    quat_column: the environment state's first quaternion column (``orientation`` only).
    rotation_weight: weight of the rotation's squared error (degrees^2) against the displacement's (cm^2).
    rollout_steps: 0 fits one-step displacements only. K >= 2 also unrolls the object model K steps
        through windows of K consecutive training transitions (each window from the real objects at its
        start, on the real proprio and actions, the model's own positions fed back) and adds the mean
        squared position error (cm^2) of the scene's objects over the window, so errors that compound
        over a push are trained against (multi-step loss).
    rollout_batch: windows per step of the multi-step loss (drawn by their first row's episode weight,
        ``moving_weight`` times as often where an object moves in the window).
    rollout_weight: weight of the multi-step loss against the one-step one.
    rollout_arm: the multi-step loss unrolls the arm model too (needs ``arm``), as the state model's world
        steps it: each window starts from the real proprio, the arm model's own proprio is fed back and moves
        the objects, and the tcp's mean squared error (cm^2) over the window is added; false: the objects
        move on the real proprio.
    """

    num_objects: int = 3
    tcp_dims: list[int] = field(default_factory=lambda: [0, 1, 2])
    finger_dims: list[int] = field(default_factory=lambda: [6, 7])
    action_dims: list[int] = field(default_factory=lambda: [0, 1, 2, 6])
    reach: float = 0.15
    active_bound: float = 1.0
    hidden: int = 256
    layers: int = 3
    steps: int = 8000
    batch_size: int = 1024
    lr: float = 1e-3
    weight_decay: float = 1e-4
    moving_weight: float = 5.0
    moving_eps: float = 5e-4
    test_fraction: float = 0.1
    arm: bool = False
    proprio_dim: int = 8
    bootstrap: bool = False
    seed: int = 0
    orientation: bool = False
    quat_column: int = 13
    rotation_weight: float = 1.0
    rollout_steps: int = 0
    rollout_batch: int = 128
    rollout_weight: float = 1.0
    rollout_arm: bool = False

    def __post_init__(self) -> None:
        if self.num_objects < 1:
            raise ConfigError(f"object_dynamics num_objects={self.num_objects} must be >= 1")
        if len(self.tcp_dims) != 3:
            raise ConfigError(f"object_dynamics tcp_dims={self.tcp_dims} must name 3 proprio dims (x, y, z)")
        for name in ("reach", "active_bound", "lr"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"object_dynamics {name}={getattr(self, name)!r} must be > 0")
        if self.steps < 1 or self.batch_size < 1 or self.hidden < 1 or self.layers < 1:
            raise ConfigError("object_dynamics steps, batch_size, hidden and layers must be >= 1")
        if self.quat_column < 3 * self.num_objects:
            raise ConfigError(
                f"object_dynamics quat_column={self.quat_column} overlaps the object positions (columns "
                f"0-{3 * self.num_objects - 1})"
            )
        if self.rollout_steps < 0 or self.rollout_steps == 1 or self.rollout_batch < 1:
            raise ConfigError(
                f"object_dynamics rollout_steps={self.rollout_steps} must be 0 (one-step loss only) or >= 2, and "
                f"rollout_batch={self.rollout_batch} >= 1"
            )
        if not self.rollout_weight >= 0:
            raise ConfigError(f"object_dynamics rollout_weight={self.rollout_weight!r} must be >= 0")
        if self.rollout_arm and not (self.arm and self.rollout_steps >= 2):
            raise ConfigError(f"object_dynamics rollout_arm=true unrolls the arm model in the multi-step loss; it needs "
                              f"arm=true and rollout_steps >= 2 (got arm={self.arm}, rollout_steps={self.rollout_steps})")
        if not self.rotation_weight >= 0:
            raise ConfigError(f"object_dynamics rotation_weight={self.rotation_weight!r} must be >= 0")
        if not 0.0 <= self.test_fraction < 1.0:
            raise ConfigError(f"object_dynamics test_fraction={self.test_fraction!r} must be in [0, 1)")

    @property
    def arm_feature_dim(self) -> int:
        """Arm features: proprio, its last change, the action, the offsets to every object."""
        return 2 * self.proprio_dim + len(self.action_dims) + 3 * self.num_objects

    @property
    def feature_dim(self) -> int:
        """Features per object: tcp offset 3, tcp move 3, fingers 2x, action, height 1, velocity 3,
        the other objects' offsets 3 each; with ``orientation`` its orientation features."""
        base = 3 + 3 + 2 * len(self.finger_dims) + len(self.action_dims) + 1 + 3 + 3 * (self.num_objects - 1)
        return base + (CUBE_FEATURE_DIM if self.orientation else 0)

    @property
    def env_state_min_dim(self) -> int:
        """Environment-state dims the model reads: the objects' xyz (and with ``orientation`` their quaternions)."""
        return self.quat_column + 4 * self.num_objects if self.orientation else 3 * self.num_objects


def _mlp(inp: int, hidden: int, layers: int, out: int) -> nn.Sequential:
    """``layers`` hidden SiLU layers of width ``hidden``: (..., inp) -> (..., out)."""
    mods: list[nn.Module] = [nn.Linear(inp, hidden), nn.SiLU()]
    for _ in range(layers - 1):
        mods += [nn.Linear(hidden, hidden), nn.SiLU()]
    mods.append(nn.Linear(hidden, out))
    return nn.Sequential(*mods)


class ObjectDynamics(nn.Module):
    """One step of every object's motion (and with ``config.arm``, of the proprio). Inputs in metres
    and raw proprio / action units."""

    def __init__(self, config: ObjectDynamicsConfig):
        super().__init__()
        self.config = config
        f = config.feature_dim
        self.mlp = _mlp(f, config.hidden, config.layers, 6 if config.orientation else 3)
        self.register_buffer("feat_mean", torch.zeros(f))
        self.register_buffer("feat_std", torch.ones(f))
        if config.arm:
            fa, p = config.arm_feature_dim, config.proprio_dim
            self.arm = _mlp(fa, config.hidden, config.layers, p)
            self.register_buffer("arm_mean", torch.zeros(fa))
            self.register_buffer("arm_std", torch.ones(fa))
            self.register_buffer("arm_out_std", torch.ones(p))

    @property
    def device(self) -> torch.device:
        return self.feat_mean.device

    def features(
        self, proprio0: Tensor, proprio1: Tensor, actions: Tensor, objs: Tensor, objs_prev: Tensor,
        quats: Tensor | None = None,
    ) -> Tensor:
        """proprio0 / proprio1 (B, P) before / after the step, actions (B, A), objs / objs_prev (B, O, 3)
        now / one step earlier, quats (B, O, 4) the objects' orientations now (``config.orientation`` only)
        -> raw features (B, O, F)."""
        c = self.config
        self._check_quats(quats, objs)
        o = c.num_objects
        r = c.reach
        tcp0, tcp1 = proprio0[:, c.tcp_dims], proprio1[:, c.tcp_dims]
        rel = (tcp0[:, None] - objs).clamp(-r, r) / r
        move = ((tcp1 - tcp0) * CM)[:, None].expand(-1, o, -1)
        fingers = torch.cat([proprio0[:, c.finger_dims], proprio1[:, c.finger_dims]], 1)[:, None].expand(
            -1, o, -1
        )
        act = actions[:, c.action_dims][:, None].expand(-1, o, -1)
        height = objs[..., 2:3] / r
        vel = (objs - objs_prev) * CM
        others = [(torch.roll(objs, -j, dims=1) - objs).clamp(-r, r) / r for j in range(1, o)]
        parts = [rel, move, fingers, act, height, vel, *others]
        if c.orientation:
            parts.append(cube_orientation_features(quats.float(), rel, move, vel))
        return torch.cat(parts, dim=-1)

    def _check_quats(self, quats: Tensor | None, objs: Tensor) -> None:
        """A one-line ConfigError unless an orientation model gets (B, O, 4) orientations (and others none)."""
        if not self.config.orientation:
            if quats is not None:
                raise ConfigError("this object-dynamics model reads no orientations (config.orientation=false)")
            return
        if quats is None or tuple(quats.shape) != (*objs.shape[:-1], 4):
            got = None if quats is None else tuple(quats.shape)
            raise ConfigError(
                f"this object-dynamics model reads the objects' orientations: quats of shape {(*objs.shape[:-1], 4)} "
                f"(w, x, y, z), got {got}"
            )

    def motion(self, feats: Tensor) -> tuple[Tensor, Tensor | None]:
        """Raw features (..., F) -> (the object's displacement over the step (..., 3), metres; with
        ``config.orientation`` its world-frame rotation vector over the step (..., 3), radians, else None)."""
        out = self.mlp((feats - self.feat_mean) / self.feat_std)
        rot = out[..., 3:] * DEG if self.config.orientation else None
        return out[..., :3] / CM, rot

    def displacement(self, feats: Tensor) -> Tensor:
        """Raw features (..., F) -> the object's displacement over the step (..., 3), metres."""
        return self.motion(feats)[0]

    def step_objects(
        self, proprio0: Tensor, proprio1: Tensor, actions: Tensor, objs: Tensor, objs_prev: Tensor,
        quats: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """(Next object positions (B, O, 3), next orientations (B, O, 4) or None without ``config.orientation``);
        see :meth:`features` for the inputs. Parked objects (beyond ``active_bound``) keep their pose."""
        quats = None if quats is None else quats.float()
        feats = self.features(proprio0.float(), proprio1.float(), actions.float(), objs.float(), objs_prev.float(), quats)
        delta, rot = self.motion(feats)
        active = (objs.abs() < self.config.active_bound).all(dim=-1, keepdim=True)
        nxt = objs.float() + delta * active
        if rot is None:
            return nxt, None
        return nxt, torch.where(active, step_quat(quats, rot), quats)

    def forward(
        self, proprio0: Tensor, proprio1: Tensor, actions: Tensor, objs: Tensor, objs_prev: Tensor,
        quats: Tensor | None = None,
    ) -> Tensor:
        """Next object positions (B, O, 3) (:meth:`step_objects` without the orientations)."""
        return self.step_objects(proprio0, proprio1, actions, objs, objs_prev, quats)[0]

    def arm_features(self, proprio: Tensor, proprio_prev: Tensor, actions: Tensor, objs: Tensor) -> Tensor:
        """proprio / proprio_prev (B, P) now / one step earlier, actions (B, A), objs (B, O, 3) -> (B, Fa)."""
        c = self.config
        r = c.reach
        rel = ((proprio[:, c.tcp_dims][:, None] - objs).clamp(-r, r) / r).flatten(1)
        return torch.cat([proprio, (proprio - proprio_prev) * CM, actions[:, c.action_dims], rel], dim=1)

    def step_arm(self, proprio: Tensor, proprio_prev: Tensor, actions: Tensor, objs: Tensor) -> Tensor:
        """The proprio after one step (B, P) (needs ``config.arm``)."""
        feats = self.arm_features(proprio.float(), proprio_prev.float(), actions.float(), objs.float())
        return proprio.float() + self.arm((feats - self.arm_mean) / self.arm_std) * self.arm_out_std

    def rollout(
        self,
        proprio: Tensor,
        actions: Tensor,
        objs: Tensor,
        objs_prev: Tensor,
        proprio_prev: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Step through a chunk. proprio (B, K+1, P): the state before the chunk, then the (predicted)
        state after each step; with ``config.arm`` only ``proprio[:, 0]`` is read and the arm model
        steps the rest (``proprio_prev`` (B, P): the state one step before the chunk, default
        ``proprio[:, 0]``). actions (B, K, A), objs / objs_prev (B, O, 3). Returns (proprio after each
        step (B, K, P), object positions after each step (B, K, O, 3)). A model with ``config.orientation``
        needs the orientations too: :meth:`rollout_with_orientations`."""
        if self.config.orientation:
            raise ConfigError(
                "this object-dynamics model reads the objects' orientations; step it with rollout_with_orientations"
            )
        props, out, _ = self._rollout(proprio, actions, objs, objs_prev, proprio_prev, None)
        return props, out

    def rollout_with_orientations(
        self,
        proprio: Tensor,
        actions: Tensor,
        objs: Tensor,
        objs_prev: Tensor,
        quats: Tensor,
        proprio_prev: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """:meth:`rollout` of a model with ``config.orientation`` from orientations ``quats`` (B, O, 4) (w, x, y, z):
        (proprio (B, K, P), object positions (B, K, O, 3), object orientations (B, K, O, 4) after each step)."""
        return self._rollout(proprio, actions, objs, objs_prev, proprio_prev, quats)

    def _rollout(
        self, proprio: Tensor, actions: Tensor, objs: Tensor, objs_prev: Tensor, proprio_prev: Tensor | None,
        quats: Tensor | None,
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        props, out, turns = [], [], []
        now = proprio[:, 0].float()
        prev = now if proprio_prev is None else proprio_prev.float()
        for k in range(actions.shape[1]):
            nxt_p = (
                self.step_arm(now, prev, actions[:, k], objs)
                if self.config.arm
                else proprio[:, k + 1].float()
            )
            nxt, quats = self.step_objects(now, nxt_p, actions[:, k], objs, objs_prev, quats)
            prev, now = now, nxt_p
            objs_prev, objs = objs, nxt
            props.append(nxt_p)
            out.append(nxt)
            turns.append(quats)
        return (torch.stack(props, dim=1), torch.stack(out, dim=1),
                None if quats is None else torch.stack(turns, dim=1))

    # ------------------------------------------------------------------ persistence
    def save_pretrained(self, directory: str | Path, metrics: dict[str, Any] | None = None) -> Path:
        """Write ``config.json`` (with ``metrics``) and ``model.safetensors`` atomically."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        atomic_save_safetensors(d / WEIGHTS_NAME, state, metadata={"format_version": str(FORMAT_VERSION)})
        atomic_write_json(
            d / CONFIG_NAME,
            {
                "format_version": FORMAT_VERSION,
                "config": dataclasses.asdict(self.config),
                "metrics": metrics or {},
            },
        )
        return d

    @classmethod
    def from_pretrained(cls, directory: str | Path, device: str | torch.device = "cpu") -> ObjectDynamics:
        """Load a model written by :meth:`save_pretrained`; CheckpointError on a missing or corrupt one."""
        d = Path(directory)
        if not (d / CONFIG_NAME).is_file() or not (d / WEIGHTS_NAME).is_file():
            raise CheckpointError(
                f"{d} is not an object-dynamics checkpoint; expected {CONFIG_NAME} and {WEIGHTS_NAME}"
            )
        try:
            meta = json.loads((d / CONFIG_NAME).read_text())
            config = ObjectDynamicsConfig(**meta["config"])
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise CheckpointError(f"{d / CONFIG_NAME} is corrupt ({type(e).__name__}: {e})") from None
        if meta.get("format_version") != FORMAT_VERSION:
            raise CheckpointError(
                f"{d / CONFIG_NAME} has format_version={meta.get('format_version')!r}; expected {FORMAT_VERSION}"
            )
        model = cls(config)
        try:
            from safetensors.torch import load_file

            state = load_file(str(d / WEIGHTS_NAME))
            model.load_state_dict(state)
        except Exception as e:  # truncated files, shape mismatches
            raise CheckpointError(
                f"{d / WEIGHTS_NAME} is corrupt or does not match its config ({type(e).__name__}: {e})"
            ) from None
        return model.to(device).eval()


# ---------------------------------------------------------------------------------------------- data
def transitions(traj: Any, config: ObjectDynamicsConfig, episodes: np.ndarray) -> dict[str, np.ndarray]:
    """One-step transitions of ``episodes`` (indices into ``traj.episode_bounds``): ``proprio0`` /
    ``proprio1`` (N, P), ``proprio_prev`` (N, P), ``actions`` (N, A), ``objs`` / ``objs_prev`` / ``objs_next`` (N, O, 3),
    ``weights`` (N,) float32: each row's episode's ``episode_weights`` (sampling weight when fitting); with
    ``config.orientation`` also ``quats`` / ``quats_next`` (N, O, 4) and ``rotation`` (N, O, 3), the world-frame
    rotation vector (radians) from one to the other.
    Row ``i``'s action produces row ``i + 1``; an episode's first row has itself as previous row."""
    env = getattr(traj, "env_states", None)
    o3 = 3 * config.num_objects
    if env is None:
        raise DatasetError("object dynamics needs the dataset's observation.environment_state; it has none")
    if env.shape[1] < config.env_state_min_dim:
        what = (f"{config.num_objects} objects' xyz and quaternions (columns {config.quat_column}-"
                f"{config.env_state_min_dim - 1}) need >= {config.env_state_min_dim}" if config.orientation
                else f"{config.num_objects} objects need >= {o3}")
        raise DatasetError(f"dataset environment states have {env.shape[1]} dims; {what}")
    p_dim = traj.states.shape[1]
    for name, dims, size in (
        ("tcp_dims", config.tcp_dims, p_dim),
        ("finger_dims", config.finger_dims, p_dim),
        ("action_dims", config.action_dims, traj.actions.shape[1]),
    ):
        if dims and max(dims) >= size:
            raise DatasetError(f"object_dynamics {name}={dims} out of range for {size} dataset dims")
    bounds = np.asarray(traj.episode_bounds, np.int64)[np.asarray(episodes, np.int64)]
    rows = np.concatenate(
        [np.arange(lo, hi - 1) for lo, hi in bounds if hi - lo >= 2] or [np.zeros(0, np.int64)]
    )
    first = np.concatenate([np.full(max(hi - lo - 1, 0), lo) for lo, hi in bounds] or [np.zeros(0, np.int64)])
    prev = np.maximum(rows - 1, first)
    episode_w = np.asarray(traj.episode_weights, np.float32)[np.asarray(episodes, np.int64)]
    weights = np.repeat(episode_w, np.maximum(bounds[:, 1] - bounds[:, 0] - 1, 0))  # one per row
    objs = np.asarray(env[:, :o3], np.float32).reshape(-1, config.num_objects, 3)
    out = {
        "weights": weights,
        "proprio_prev": np.asarray(traj.states[prev], np.float32),
        "proprio0": np.asarray(traj.states[rows], np.float32),
        "proprio1": np.asarray(traj.states[rows + 1], np.float32),
        "actions": np.asarray(traj.actions[rows], np.float32),
        "objs": objs[rows],
        "objs_prev": objs[prev],
        "objs_next": objs[rows + 1],
    }
    if config.orientation:
        quats = episode_quats(traj, config)
        out["quats"], out["quats_next"] = quats[rows], quats[rows + 1]
        out["rotation"] = rotation_increment(torch.from_numpy(out["quats"]).double(),
                                             torch.from_numpy(out["quats_next"]).double()).float().numpy()
    return out


def episode_quats(traj: Any, config: ObjectDynamicsConfig) -> np.ndarray:
    """float32 (N, O, 4): the objects' unit quaternions (w, x, y, z) in ``traj.env_states`` (from
    ``config.quat_column``), normalised (q and -q are one orientation: ``rotation_increment`` takes the short way
    round either way). DatasetError on a quaternion of zero length or a non-finite one."""
    o = config.num_objects
    q = np.asarray(traj.env_states[:, config.quat_column:config.quat_column + 4 * o], np.float64).reshape(-1, o, 4)
    norm = np.linalg.norm(q, axis=-1, keepdims=True)
    if not (np.isfinite(norm).all() and (norm > 1e-6).all()):
        raise DatasetError(
            f"environment-state columns {config.quat_column}-{config.quat_column + 4 * o - 1} are not unit "
            "quaternions (a zero or non-finite one); expected the objects' (w, x, y, z)"
        )
    return (q / norm).astype(np.float32)


def _tensors(tr: dict[str, np.ndarray], device: torch.device | str = "cpu") -> dict[str, Tensor]:
    return {k: torch.from_numpy(np.ascontiguousarray(v)).to(device) for k, v in tr.items()}


@torch.no_grad()
def one_step_error(model: ObjectDynamics, tr: dict[str, Tensor]) -> dict[str, float | None]:
    """Mean one-step position error (metres) of the active objects, overall and where they move (None
    where there are none), and of "they stay put"; with an arm model, its tcp error and constant velocity's."""
    pred, pred_q = model.step_objects(
        tr["proprio0"], tr["proprio1"], tr["actions"], tr["objs"], tr["objs_prev"], tr.get("quats")
    )
    err = (pred - tr["objs_next"]).norm(dim=-1)
    active = (tr["objs"].abs() < model.config.active_bound).all(-1)
    moving = active & ((tr["objs_next"] - tr["objs"]).norm(dim=-1) > model.config.moving_eps)
    stay = (tr["objs_next"] - tr["objs"]).norm(dim=-1)
    out = {
        "one_step_error_mean_m": float(err[active].mean()) if active.any() else None,
        "one_step_error_moving_mean_m": float(err[moving].mean()) if moving.any() else None,
        "stay_put_error_moving_mean_m": float(stay[moving].mean()) if moving.any() else None,
    }
    if pred_q is not None:  # the rotation left over: predicted against real, and "it does not turn"
        left = rotation_increment(pred_q, tr["quats_next"]).norm(dim=-1) / DEG
        turn = tr["rotation"].norm(dim=-1) / DEG
        out["one_step_rotation_error_moving_mean_deg"] = float(left[moving].mean()) if moving.any() else None
        out["no_turn_rotation_error_moving_mean_deg"] = float(turn[moving].mean()) if moving.any() else None
    if model.config.arm:
        tcp = model.config.tcp_dims
        p1 = model.step_arm(tr["proprio0"], tr["proprio_prev"], tr["actions"], tr["objs"])
        out["arm_one_step_tcp_error_mean_m"] = float(
            (p1[:, tcp] - tr["proprio1"][:, tcp]).norm(dim=-1).mean()
        )
        out["arm_constant_velocity_tcp_error_mean_m"] = float(
            (2 * tr["proprio0"][:, tcp] - tr["proprio_prev"][:, tcp] - tr["proprio1"][:, tcp])
            .norm(dim=-1)
            .mean()
        )
    return out


@torch.no_grad()
def open_loop_error(
    model: ObjectDynamics, traj: Any, episodes: np.ndarray, steps: tuple[int, ...] = (16, 32)
) -> dict[str, float | None]:
    """Median distance (metres) between the simulator's and the model's objects after ``steps`` steps
    of each held-out episode, the model fed the episode's real proprio (with ``config.arm``: its own)
    and actions (the objects it moved in that episode: the largest real travel; with ``arm``, also
    the tcp's distance)."""
    c = model.config
    o3 = 3 * c.num_objects
    errs: dict[int, list[float]] = {s: [] for s in steps}
    tcp_errs: dict[int, list[float]] = {s: [] for s in steps}
    dev = model.device
    quats = episode_quats(traj, c) if c.orientation else None
    for lo, hi in np.asarray(traj.episode_bounds, np.int64)[np.asarray(episodes, np.int64)]:
        if hi - lo < 2:
            continue
        real = torch.from_numpy(np.asarray(traj.env_states[lo:hi, :o3], np.float32)).to(dev).view(
            hi - lo, c.num_objects, 3
        )
        mover = int((real[-1] - real[0]).norm(dim=-1).argmax())
        prop = torch.from_numpy(np.asarray(traj.states[lo:hi], np.float32)).to(dev)[None]
        act = torch.from_numpy(np.asarray(traj.actions[lo : hi - 1], np.float32)).to(dev)[None]
        if c.orientation:  # (1, hi-lo-1, ...): rows lo+1 ..
            prop_p, pred, _ = model.rollout_with_orientations(
                prop, act, real[:1], real[:1], torch.from_numpy(quats[lo:lo + 1]).to(dev)
            )
        else:
            prop_p, pred = model.rollout(prop, act, real[:1], real[:1])
        for s in steps:
            if s < hi - lo:
                errs[s].append(float((pred[0, s - 1, mover] - real[s, mover]).norm()))
                tcp_errs[s].append(float((prop_p[0, s - 1, c.tcp_dims] - prop[0, s, c.tcp_dims]).norm()))
    out = {f"open_loop_error_step_{s}_m": float(np.median(v)) if v else None for s, v in errs.items()}
    if c.arm:
        out.update(
            {
                f"arm_open_loop_tcp_error_step_{s}_m": float(np.median(v)) if v else None
                for s, v in tcp_errs.items()
            }
        )
    return out


def evaluate_object_dynamics(model: ObjectDynamics, traj: Any, episodes: np.ndarray) -> dict[str, float | None]:
    """:func:`one_step_error` and :func:`open_loop_error` of ``model`` on ``episodes`` of ``traj``
    (``wmrl.data.Trajectories`` with ``env_states``), e.g. held-out or later real episodes."""
    return {
        **one_step_error(model, _tensors(transitions(traj, model.config, episodes), model.device)),
        **open_loop_error(model, traj, episodes),
    }


def _set_normalisation(model: ObjectDynamics, tr: dict[str, Tensor], active: Tensor, c: ObjectDynamicsConfig) -> None:
    """A fresh model's input (and the arm's output) normalisation from the training transitions ``tr``
    (``active``: (N, O) the objects in the scene)."""
    with torch.no_grad():
        feats = model.features(
            tr["proprio0"], tr["proprio1"], tr["actions"], tr["objs"], tr["objs_prev"], tr.get("quats")
        )[active]
        model.feat_mean.copy_(feats.mean(0))
        model.feat_std.copy_(feats.std(0).clamp_min(1e-2))
        if c.arm:
            af = model.arm_features(tr["proprio0"], tr["proprio_prev"], tr["actions"], tr["objs"])
            model.arm_mean.copy_(af.mean(0))
            model.arm_std.copy_(af.std(0).clamp_min(1e-2))
            model.arm_out_std.copy_((tr["proprio1"] - tr["proprio0"]).std(0).clamp_min(1e-4))


def fit_object_dynamics(
    traj: Any, config: ObjectDynamicsConfig | None = None, progress: bool = True,
    device: str | torch.device | None = None, init: ObjectDynamics | None = None,
) -> tuple[ObjectDynamics, dict[str, Any]]:
    """Fit an :class:`ObjectDynamics` on ``traj`` (``wmrl.data.Trajectories`` with ``env_states``) on
    ``device`` (None: the CPU; the batches are drawn on the CPU either way, so a seed draws the same ones).
    ``init``: fine-tune that model instead (a copy: its weights and its input / output normalisation, which
    stay fixed; ``config`` may change only the schedule: ``steps``, ``batch_size``, ``lr``, ``weight_decay``,
    ``seed``, the sampling and the split; it defaults to ``init``'s). Returns (the model in eval mode, on
    ``device``; metrics: held-out one-step and open-loop errors, the stay-put baseline, wall time). Raises
    NonFiniteError when the loss turns NaN/Inf, ConfigError when ``config`` changes ``init``'s architecture."""
    from tqdm.auto import tqdm

    from wmrl.devices import resolve_device
    from wmrl.runs import check_finite

    c = config or (init.config if init is not None else ObjectDynamicsConfig())
    if init is not None:
        arch = ("num_objects", "tcp_dims", "finger_dims", "action_dims", "reach", "hidden", "layers", "arm", "proprio_dim",
                "orientation", "quat_column")
        changed = [k for k in arch if getattr(c, k) != getattr(init.config, k)]
        if changed:
            raise ConfigError(f"fine-tuning config changes the model's {', '.join(changed)}; expected {init.config}")
    dev = resolve_device(device)
    t0 = time.time()
    rng = np.random.default_rng(c.seed)
    n_ep = len(traj.episode_bounds)
    perm = rng.permutation(n_ep)
    n_test = int(round(c.test_fraction * n_ep)) if n_ep > 1 else 0
    test_eps, train_eps = np.sort(perm[:n_test]), np.sort(perm[n_test:])
    if c.bootstrap:  # after the split, so the held-out episodes are those of the plain fit
        train_eps = np.sort(rng.choice(train_eps, size=len(train_eps), replace=True))
    tr = _tensors(transitions(traj, c, train_eps), dev)
    active = (tr["objs"].abs() < c.active_bound).all(-1)  # (N, O)
    if not bool(active.any()):
        raise DatasetError(
            "the dataset has no transitions of an object in the scene to learn object dynamics from"
        )
    torch.manual_seed(c.seed)
    model = ObjectDynamics(c).to(dev)
    if init is not None:
        model.load_state_dict(init.state_dict())
    else:
        _set_normalisation(model, tr, active, c)
    # sample (transition, object) pairs of objects in the scene, moving ones up-weighted
    pair_t, pair_o = torch.nonzero(active, as_tuple=True)
    moving = (tr["objs_next"] - tr["objs"]).norm(dim=-1)[pair_t, pair_o] > c.moving_eps
    if c.orientation:  # an object turning in place moves too
        moving |= tr["rotation"].norm(dim=-1)[pair_t, pair_o] > MOVING_TURN_DEG * DEG
    # and each transition by its episode's weight (co-evolution up-weights the policy's failed rollouts)
    row_w = tr["weights"].double().cpu()
    uniform_rows = bool((row_w == 1.0).all())  # then the draws are those of an unweighted fit, bit for bit
    w = torch.where(moving, c.moving_weight, 1.0).double().cpu() * row_w[pair_t.cpu()]  # drawn on the CPU, by ``gen``
    gen = torch.Generator().manual_seed(c.seed)
    windows = _rollout_windows(traj, c, train_eps, tr) if c.rollout_steps >= 2 else None
    opt = torch.optim.AdamW(model.parameters(), lr=c.lr, weight_decay=c.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, c.steps)
    model.train()
    bar = tqdm(range(c.steps), desc="object dynamics", disable=not progress)
    loss_v = float("nan")
    for step in bar:
        j = torch.multinomial(w, c.batch_size, replacement=True, generator=gen).to(dev)
        ti, oi = pair_t[j], pair_o[j]
        feats = model.features(
            tr["proprio0"][ti], tr["proprio1"][ti], tr["actions"][ti], tr["objs"][ti], tr["objs_prev"][ti],
            tr["quats"][ti] if c.orientation else None,
        )[torch.arange(len(j), device=dev), oi]  # the MLP runs on the sampled (active) object only
        target = tr["objs_next"][ti, oi] - tr["objs"][ti, oi]
        delta, rot = model.motion(feats)
        loss = (((delta - target) * CM) ** 2).mean()
        if rot is not None:
            loss = loss + c.rotation_weight * (((rot - tr["rotation"][ti, oi]) / DEG) ** 2).mean()
        if c.arm:  # the arm on transitions drawn by their episodes' weights, in units of each dim's step spread
            ta = (torch.randint(len(tr["objs"]), (c.batch_size,), generator=gen) if uniform_rows
                  else torch.multinomial(row_w, c.batch_size, replacement=True, generator=gen)).to(dev)
            p1 = model.step_arm(tr["proprio0"][ta], tr["proprio_prev"][ta], tr["actions"][ta], tr["objs"][ta])
            loss = loss + (((p1 - tr["proprio1"][ta]) / model.arm_out_std) ** 2).mean()
        if windows is not None:
            starts, win_w = windows
            first = starts[torch.multinomial(win_w, c.rollout_batch, replacement=True, generator=gen)].to(dev)
            loss = loss + c.rollout_weight * rollout_loss(model, tr, first, c.rollout_steps)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if step % 200 == 0 or step == c.steps - 1:
            loss_v = float(loss.detach())
            check_finite(f"object-dynamics loss at step {step}", loss_v)
            bar.set_postfix(loss_cm2=f"{loss_v:.4f}")
    model.eval()
    metrics: dict[str, Any] = {
        "train_transitions": int(len(tr["objs"])),
        **({"rollout_windows": int(len(windows[0]))} if windows is not None else {}),
        "train_episodes": int(len(train_eps)),
        "train_distinct_episodes": int(len(np.unique(train_eps))),
        "test_episodes": int(len(test_eps)),
        "final_loss_cm2": loss_v,
    }
    if len(test_eps):
        metrics.update(evaluate_object_dynamics(model, traj, test_eps))
    metrics["wall_time_s"] = time.time() - t0
    return model, metrics


def _rollout_windows(
    traj: Any, c: ObjectDynamicsConfig, episodes: np.ndarray, tr: dict[str, Tensor]
) -> tuple[Tensor, Tensor]:
    """The multi-step loss's windows: (first rows (W,) int64 of every run of ``c.rollout_steps`` consecutive
    transitions of one episode in ``tr``, their sampling weights (W,) float64: the first row's episode weight,
    times ``moving_weight`` where an object in the scene moves in the window). DatasetError when no episode is
    long enough."""
    k = c.rollout_steps
    bounds = np.asarray(traj.episode_bounds, np.int64)[np.asarray(episodes, np.int64)]
    episode = np.repeat(np.arange(len(bounds)), np.maximum(bounds[:, 1] - bounds[:, 0] - 1, 0))  # per row of ``tr``
    n = len(episode)
    starts = np.nonzero(episode[: max(n - k + 1, 0)] == episode[k - 1:])[0] if n >= k else np.zeros(0, np.int64)
    if not len(starts):
        raise DatasetError(f"object_dynamics rollout_steps={k}: no training episode has {k} transitions; expected "
                           "a shorter window or longer episodes")
    active = (tr["objs"].abs() < c.active_bound).all(-1)
    moves = (((tr["objs_next"] - tr["objs"]).norm(dim=-1) > c.moving_eps) & active).any(-1).cpu().numpy()
    in_window = np.convolve(moves.astype(np.int64), np.ones(k, np.int64), mode="valid")[starts] > 0
    w = np.where(in_window, c.moving_weight, 1.0) * tr["weights"].double().cpu().numpy()[starts]
    return torch.from_numpy(starts), torch.from_numpy(w)


def rollout_loss(model: ObjectDynamics, tr: dict[str, Tensor], first: Tensor, steps: int) -> Tensor:
    """Mean squared position error (cm^2) of the scene's objects when ``model`` steps them ``steps`` times from
    the real objects at rows ``first`` (B,) of ``tr`` (``transitions``), on the real proprio and actions of those
    rows and the next ones, its own positions (and orientations) fed back. With ``config.rollout_arm`` the arm
    model steps the proprio too, from the real one at ``first``, its own fed back (the objects move on it), and
    the tcp's mean squared error (cm^2) over the window is added. Rows ``first + steps - 1`` must be of the same
    episodes (``_rollout_windows``)."""
    c = model.config
    objs, objs_prev = tr["objs"][first], tr["objs_prev"][first]
    quats = tr["quats"][first] if c.orientation else None
    now, prev = tr["proprio0"][first].float(), tr["proprio_prev"][first].float()  # the arm's own, rollout_arm only
    total, count = objs.new_zeros(()), objs.new_zeros(())
    tcp_total = objs.new_zeros(())
    for k in range(steps):
        r = first + k
        if c.rollout_arm:
            nxt = model.step_arm(now, prev, tr["actions"][r], objs)
            tcp_total = tcp_total + (((nxt - tr["proprio1"][r])[:, c.tcp_dims] * CM) ** 2).sum()
            objs_next, quats = model.step_objects(now, nxt, tr["actions"][r], objs, objs_prev, quats)
            prev, now = now, nxt
        else:
            objs_next, quats = model.step_objects(tr["proprio0"][r], tr["proprio1"][r], tr["actions"][r], objs,
                                                  objs_prev, quats)
        scene = ((tr["objs"][r].abs() < c.active_bound).all(-1)).float()  # (B, O): objects in the scene
        total = total + ((((objs_next - tr["objs_next"][r]) * CM) ** 2).sum(-1) * scene).sum()
        count = count + 3 * scene.sum()
        objs_prev, objs = objs, objs_next
    loss = total / count.clamp(min=1)
    return loss + tcp_total / (3 * steps * len(first)) if c.rollout_arm else loss


#: the multi-step loss's settings (``ObjectDynamicsConfig.rollout_*``): a fine-tune may take them from its caller
ROLLOUT_LOSS_KEYS = ("rollout_steps", "rollout_batch", "rollout_weight", "rollout_arm")


def fine_tune_object_dynamics(
    traj: Any, init: str | Path, steps: int, lr: float = WARM_REFIT_LR, seed: int | None = None,
    progress: bool = False, device: str | torch.device | None = None, loss: ObjectDynamicsConfig | None = None,
) -> tuple[ObjectDynamics, dict[str, Any]]:
    """The model saved in ``init`` fine-tuned on ``traj`` for ``steps`` steps from learning rate ``lr`` (cosine to
    0) by :func:`fit_object_dynamics` ``init=`` (its architecture, normalisation and sampling kept; ``seed`` None:
    its own; ``loss``: take the multi-step loss's settings, ``ROLLOUT_LOSS_KEYS``, from this config instead of
    the saved model's). Returns (the model; its metrics, with ``fine_tuned_from`` the folder ``init``)."""
    old = ObjectDynamics.from_pretrained(init)
    changes: dict[str, Any] = {"steps": int(steps), "lr": float(lr)}
    if seed is not None:
        changes["seed"] = int(seed)
    if loss is not None:
        changes.update({k: getattr(loss, k) for k in ROLLOUT_LOSS_KEYS})
    model, metrics = fit_object_dynamics(traj, dataclasses.replace(old.config, **changes), progress=progress,
                                         device=device, init=old)
    metrics["fine_tuned_from"] = str(init)
    return model, metrics


def policy_rollouts(
    policy_dir: str | Path,
    tasks: list[str],
    image_size: int,
    episodes: int,
    std: float | None = 0.1,
    seed: int = 9000,
    num_envs: int = 16,
    render: dict[str, Any] | None = None,
) -> tuple[Any, dict[str, float]]:
    """``episodes`` real episodes of the saved policy in ``policy_dir`` on ``tasks`` (sampled actions,
    exploration noise ``std``; None: the policy's own; layouts and noise drawn from ``seed``), as ``wmrl.data.Trajectories`` with environment
    states, and ``{"episodes", "success_rate", "env_steps"}``. ``render``: more ``envs.make_vec`` keyword
    arguments of how the frames are drawn (a run's ``render.env_kwargs()``; None: the default)."""
    import envs
    from imagination.coevolution import policy_chunk_fn, record_rollouts
    from imagination.trainer_utils import set_exploration_std
    from policies import load_policy

    policy = load_policy(policy_dir)
    set_exploration_std(std, policy)
    env = envs.make_vec(tasks, min(num_envs, episodes), image_size=image_size, **(render or {}),
                        autoreset_mode="same_step", seed=seed)
    try:
        with torch.random.fork_rng(devices=[]):  # the policy's noise is seeded too, the caller's RNG untouched
            torch.manual_seed(seed)
            return record_rollouts(env, policy_chunk_fn(policy), episodes, policy.chunk_size, seed=seed)
    finally:
        env.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m worldmodels.object_dynamics", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--data", required=True, help="LeRobotDataset folder (e.g. RUN/data)")
    p.add_argument("--out", required=True, help="folder to write the model to (e.g. RUN/object_dynamics)")
    p.add_argument("--steps", type=int, default=ObjectDynamicsConfig.steps)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--arm", action="store_true", help="also learn the proprio (and replace the world model's)"
    )
    p.add_argument("--policy", default=None, help="a saved policy folder (e.g. RUN/sft/policy) to collect episodes with")
    p.add_argument("--policy-episodes", type=int, default=0, help="real episodes of --policy to fit on too")
    p.add_argument("--policy-std", type=float, default=0.1, help="its exploration noise (default 0.1)")
    p.add_argument("--policy-seed", type=int, default=9000, help="env seed of those episodes")
    p.add_argument("--save-rollouts", default=None, metavar="FILE.npz", help="also write those episodes here")
    p.add_argument(
        "--extra-rollouts", nargs="+", default=[], metavar="FILE.npz",
        help="saved real episodes to fit on too (--save-rollouts files, a co-evolution round's rollouts.npz)",
    )
    p.add_argument(
        "--bootstrap", action="store_true",
        help="fit on a bootstrap resample (drawn by --seed) of the training episodes: ensemble members differ in data",
    )
    p.add_argument("--rollout-steps", type=int, default=0, metavar="K",
                   help="also train on K-step unrolls of the object model (multi-step loss; 0: one-step only)")
    p.add_argument("--rollout-weight", type=float, default=ObjectDynamicsConfig.rollout_weight)
    p.add_argument("--rollout-batch", type=int, default=ObjectDynamicsConfig.rollout_batch)
    p.add_argument("--rollout-arm", action="store_true",
                   help="the multi-step loss unrolls the arm model too, its own tcp moving the objects (needs --arm)")
    p.add_argument("--device", default="cpu", help="torch device to fit on: cpu, cuda, cuda:N or auto (default cpu)")
    p.add_argument("--num-threads", type=int, default=None)
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    from wmrl.devices import resolve_device
    from wmrl.errors import ConfigError

    try:
        device = resolve_device(args.device)
    except ConfigError as e:
        p.error(str(e))
    if args.policy_episodes < 0 or (args.policy_episodes > 0) != (args.policy is not None):
        p.error(f"--policy-episodes {args.policy_episodes} needs --policy, and --policy needs --policy-episodes >= 1")
    if args.save_rollouts and not args.policy_episodes:
        p.error(f"--save-rollouts {args.save_rollouts} writes the --policy episodes; there are none")
    from wmrl.data import Trajectories, load_trajectories, load_trajectories_npz, save_trajectories_npz

    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    traj = load_trajectories(args.data)
    rollout_stats = None
    if args.policy_episodes:
        tasks = sorted(set(traj.task_ids))
        roll, rollout_stats = policy_rollouts(
            args.policy, tasks, int(traj.images.shape[1]), args.policy_episodes, args.policy_std, args.policy_seed
        )
        if args.save_rollouts:
            save_trajectories_npz(args.save_rollouts, roll)
        traj = Trajectories.concat([traj, roll])
    extra = [load_trajectories_npz(f) for f in args.extra_rollouts]
    if extra:
        traj = Trajectories.concat([traj, *extra])
    try:
        config = ObjectDynamicsConfig(
            steps=args.steps,
            seed=args.seed,
            arm=args.arm,
            proprio_dim=int(traj.states.shape[1]),
            bootstrap=args.bootstrap,
            rollout_steps=args.rollout_steps,
            rollout_weight=args.rollout_weight,
            rollout_batch=args.rollout_batch,
            rollout_arm=args.rollout_arm,
        )
    except ConfigError as e:
        p.error(str(e))
    model, metrics = fit_object_dynamics(traj, config, progress=not args.no_progress, device=device)
    metrics["data"] = str(args.data)
    metrics["device"] = str(device)
    if extra:
        metrics["extra_rollouts"] = [str(f) for f in args.extra_rollouts]
        metrics["extra_rollout_episodes"] = int(sum(t.num_episodes for t in extra))
    if rollout_stats is not None:
        metrics.update(
            policy=str(args.policy),
            policy_std=args.policy_std,
            policy_rollout_episodes=int(rollout_stats["episodes"]),
            policy_rollout_success=float(rollout_stats["success_rate"]),
            policy_rollout_real_env_steps=int(rollout_stats["env_steps"]),
        )
    model.save_pretrained(args.out, metrics)
    print(json.dumps(metrics, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
