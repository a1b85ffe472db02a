"""Do the imagined frames show what the imagined states say? (built-in suite, ``env_state_dim=9``)

Usage::

    python -m benchmarks.frames_follow_states --runs RUN [RUN ...] [--object-dynamics object_dynamics]
        [--windows 256] [--horizon 16] --out FILE.json

In imagination the policy acts on frames while the success is the task's rule on the states. When
the two disagree (the frames draw the cube where the state says it is not), the policy's actions
in imagination drift from what it would do in the simulator. Per run folder (its round-0 world
model, the state model in ``RUN/NAME`` when there is one), on held-out demo windows (the world
model's own test split), open loop for ``--horizon`` steps on the real actions, in three modes:

* ``alone``: the world model without a state model;
* ``state_model``: the state model (``worldmodels.object_dynamics``) attached;
* ``real_states``: every chunk's real states given (``WorldModel.step(states=...)``): an exact
  state model. A ``state_conditioned_frames`` world draws its frames from them; any other world
  only reads them in its context.

Per mode and horizon step (means over windows):

* ``object_error_px``: cube centroids in the frames vs the real frames (``wm_fidelity.object_error``);
  ``moving_object_error_px``: the same over cubes that really moved;
* ``frame_state_gap_px``: for every cube visible in a frame whose state puts it in view, the
  distance between its centroid there and where the mode's own state puts it in the image (a quadratic projection of the cube's
  xyz fitted on the run's training frames; its held-out error on real frames is
  ``projection_error_px``, the floor of this gap);
* ``cube_state_error_cm``: the mode's cube positions vs the real ones.

Read-only on the run folders; nothing is trained.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._stats import machine_info
from benchmarks.wm_fidelity import MIN_MASK_PX, _nanmean0, colour_masks, object_error
from worldmodels import object_projection
from worldmodels.object_projection import mask_centroids, project

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

COLOURS = ("red", "green", "blue")  # the built-in cubes, in the order of their environment-state triples


def centroids(frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cube centroids (row, col) per colour. frames uint8 (..., h, w, 3) -> (centroids (..., 3, 2),
    visible (..., 3) bool: at least ``MIN_MASK_PX`` pixels)."""
    masks = colour_masks(frames)
    return mask_centroids(np.stack([masks[c] for c in COLOURS], -3), MIN_MASK_PX)


def fit_projection(frames: np.ndarray, cubes: np.ndarray) -> np.ndarray:
    """The quadratic xyz -> centroid map of each cube (:mod:`worldmodels.object_projection`).
    frames uint8 (N, h, w, 3), cubes (N, 3, 3) metres -> coefficients (3, 10, 2)."""
    cen, vis = centroids(frames)
    return object_projection.fit_projection(cen, vis, cubes, tuple(f"cube {c}" for c in COLOURS))


def frame_state_gap(frames: np.ndarray, cubes: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """Mean of |centroid - projection of its state| (px) over the cubes visible in each frame whose
    state puts them inside the image. frames uint8 (..., h, w, 3), cubes (..., 3, 3) -> (...), NaN
    where there is none."""
    cen, vis = centroids(frames)
    proj = project(coef, cubes)
    size = np.array(frames.shape[-3:-1])
    vis = vis & ((proj >= 0) & (proj < size)).all(-1)
    d = np.linalg.norm(cen - proj, axis=-1)
    return np.where(vis.any(-1), (d * vis).sum(-1) / np.maximum(vis.sum(-1), 1), np.nan)


def windows(traj: Any, full: np.ndarray, context: int, horizon: int, n: int, seed: int) -> dict[str, np.ndarray]:
    """Up to ``n`` held-out windows (starts drawn at random, sorted): frames (N, T+H, h, w, 3),
    states (N, T+H, D) (the world model's full states), actions (N, H, A)."""
    rng = np.random.default_rng(seed)
    starts = np.asarray(traj.window_starts(context, horizon))
    pick = np.sort(rng.permutation(starts)[:n])
    idx = pick[:, None] + np.arange(context + horizon)[None]
    return {
        "frames": traj.images[idx],
        "states": full[idx].astype(np.float32),
        "actions": np.asarray(traj.actions, np.float32)[idx[:, context - 1 : context + horizon - 1]],
    }


def rollout(wm: Any, w: dict[str, np.ndarray], mode: str, batch: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Open-loop frames (N, H, h, w, 3) and states (N, H, D) of ``wm`` on windows ``w``; ``mode``
    ``real_states`` gives each chunk its real states."""
    import torch

    t, k = wm.context_frames, wm.chunk_size
    h = w["actions"].shape[1]
    frames, states = [], []
    for i in range(0, len(w["actions"]), batch):
        sl = slice(i, i + batch)
        ctx = wm.init_context(torch.from_numpy(w["frames"][sl, :t]), torch.from_numpy(w["states"][sl, :t]))
        fs, ss = [], []
        for c in range(0, h, k):
            given = torch.from_numpy(w["states"][sl, t + c : t + c + k]) if mode == "real_states" else None
            o = wm.step(ctx, torch.from_numpy(w["actions"][sl, c : c + k]), states=given)
            ctx = o.context
            fs.append(o.frames.numpy())
            ss.append(o.states.numpy())
        frames.append(np.concatenate(fs, 1))
        states.append(np.concatenate(ss, 1))
    return np.concatenate(frames), np.concatenate(states)


def measure_run(root: Path, object_dynamics: str | None, n: int, horizon: int, seed: int) -> dict[str, Any]:
    """All modes on one run folder."""
    from imagination.pipeline import round_models, run_config_of
    from wmrl.data import load_trajectories
    from wmrl.errors import WmrlError
    from worldmodels.modeling_common import model_states

    cfg = run_config_of(root)
    od = root / object_dynamics if object_dynamics else None
    wm = round_models(root, 0, od if od is not None and od.exists() else None)[0]
    c = wm.config
    if c.env_state_dim != 9 or horizon % c.chunk_size:
        raise WmrlError(
            f"{root}: needs a world model with env_state_dim=9 (got {c.env_state_dim}) and --horizon a "
            f"multiple of its chunk size {c.chunk_size} (got {horizon})"
        )
    traj = load_trajectories(root / "data")
    train, test = traj.split_episodes(0.1, int(cfg.seed))  # the world model's own split
    full_train = model_states(train, c)
    sub = np.random.default_rng(seed).permutation(len(full_train))[:20000]
    coef = fit_projection(train.images[sub], full_train[sub, -9:].reshape(-1, 3, 3))
    w = windows(test, model_states(test, c), c.context_frames, horizon, n, seed)
    t = c.context_frames
    real_frames, real_cubes = w["frames"][:, t:], w["states"][:, t:, -9:].reshape(len(w["frames"]), horizon, 3, 3)
    out: dict[str, Any] = {
        "windows": len(w["frames"]),
        "state_conditioned_frames": bool(c.state_conditioned_frames),
        "state_model": str(od) if wm.object_dynamics is not None else None,
        "projection_error_px": float(np.nanmean(frame_state_gap(real_frames, real_cubes, coef))),
        "modes": {},
    }
    modes = ["alone", "real_states"] + (["state_model"] if wm.object_dynamics is not None else [])
    attached = wm.object_dynamics
    for mode in modes:
        wm.attach_object_dynamics(attached if mode == "state_model" else None)
        t0 = time.perf_counter()
        frames, states = rollout(wm, w, mode)
        cubes = states[..., -9:].reshape(real_cubes.shape)
        out["modes"][mode] = {
            "object_error_px": _nanmean0(object_error(frames, real_frames)),
            "moving_object_error_px": _nanmean0(object_error(frames, real_frames, w["frames"][:, t - 1])),
            "frame_state_gap_px": _nanmean0(frame_state_gap(frames, cubes, coef)),
            "cube_state_error_cm": (100 * np.linalg.norm(cubes - real_cubes, axis=-1).mean((0, 2))).tolist(),
            "time_s": time.perf_counter() - t0,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", nargs="+", required=True, help="finished wmrl run folders (env_state_dim=9)")
    p.add_argument("--object-dynamics", default="object_dynamics", help="the state model's folder in each run")
    p.add_argument("--windows", type=int, default=256)
    p.add_argument("--horizon", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--num-threads", type=int, default=None)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    import torch

    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    if a.windows < 1 or a.horizon < 1:
        raise SystemExit(f"--windows {a.windows} and --horizon {a.horizon} must be >= 1")
    for r in a.runs:
        if not (Path(r) / "world_model" / "model").exists() or not (Path(r) / "data").exists():
            raise SystemExit(f"--runs {r}: not a wmrl run folder (no world_model/model or data)")
    if a.num_threads:
        torch.set_num_threads(a.num_threads)
    t0 = time.perf_counter()
    try:
        runs = {r: measure_run(Path(r), a.object_dynamics, a.windows, a.horizon, a.seed) for r in a.runs}
    except (WmrlError, ValueError) as e:
        raise SystemExit(f"frames_follow_states: {e}") from None
    summary: dict[str, Any] = {}
    for mode in ("alone", "real_states", "state_model"):
        got = [r["modes"][mode] for r in runs.values() if mode in r["modes"]]
        if got:
            summary[mode] = {
                key: _nanmean0(np.array([[np.nan if v is None else v for v in g[key]] for g in got], float))
                for key in ("object_error_px", "frame_state_gap_px", "cube_state_error_cm")
            }
    res = {
        "runs": runs,
        "mean_over_runs": summary,
        "projection_error_px": float(np.mean([r["projection_error_px"] for r in runs.values()])),
        "config": {k: v for k, v in vars(a).items() if k != "out"},
        "wall_time_s": time.perf_counter() - t0,
        "machine": machine_info(),
    }
    atomic_write_json(a.out, res)
    for mode, m in summary.items():
        print(
            f"{mode:12s} h=4/8/16: object error px "
            + " / ".join(f"{m['object_error_px'][h - 1]:.2f}" for h in (4, 8, 16))
            + "  frame-state gap px "
            + " / ".join(f"{m['frame_state_gap_px'][h - 1]:.2f}" for h in (4, 8, 16))
            + "  cube state error cm "
            + " / ".join(f"{m['cube_state_error_cm'][h - 1]:.2f}" for h in (4, 8, 16))
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
