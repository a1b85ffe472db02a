"""World-model fidelity and speed on held-out episodes of the built-in suite.

``python -m benchmarks.wm_fidelity [--quick] [--parallel-train] --out benchmarks/results/wm_fidelity.json``

One run: collect a dataset of scripted-expert episodes at mixed noise levels (``wmrl collect``),
hold out 10% of the episodes, train every world-model family for step budgets that take about the
same time (``FULL_STEPS``; ``--parallel-train`` trains them side by side, one process each),
then on held-out windows roll out open-loop from T real context frames driven by the real
actions for ``horizon`` steps, and compare with the real frames, next to the copy-last-frame
baseline. Per horizon step:

* ``psnr_by_horizon`` / ``ssim_by_horizon``: whole frame (Gaussian-window SSIM, 11x11, sigma 1.5);
* ``moving_psnr_by_horizon``: PSNR over pixels where the real future differs from the last
  context frame (any channel by more than ``MOVING_THRESHOLD``): the static background cannot flatter it;
* ``object_error_px_by_horizon``: distance in pixels between the centroids of each cube
  (red/green/blue colour masks) in the predicted and the real frame, averaged over the cubes
  visible in the real frame (a cube missing from the prediction counts ``MISSING_PENALTY_PX``);
* ``moving_object_error_px_by_horizon``: the same, only over cubes that really moved (> 1 px from
  the last context frame): most cubes stand still, which copy-last gets right for free;
* action sensitivity: the same rollouts with each window's actions replaced by another window's
  (a cyclic shift over windows from different episodes): ``action_shuffle_psnr_drop`` (moving-region
  PSNR, mean over horizon steps) and ``action_shuffle_object_error_rise_px``;
* ``from_reset`` (per family): the same PSNR / object metrics from each held-out episode's first
  frame, with the context filled as a reset fills it (that frame repeated T times), against
  copy-last: where imagined episodes from a reset begin, with the episode's largest arm motion.
Speed: ``imagined_frames_per_s`` (rollout of 16 steps at batch 32, 64x64, median of repeats),
``flops_per_frame`` (torch FLOP counter), ``fraction_of_matmul_peak`` against a plain bf16/fp32
matmul measured in the same run, ``sampler_kernel_speedup`` (kernels.sampling fast vs reference,
interleaved repeats). Top-level fields are the default family; ``families`` holds every family;
``goals`` holds the issue's goals at h=16 for the default family. ``--quick`` (CI) trains fixed step
budgets (``QUICK_STEPS``: a busy or slow machine reaches the same model, later) and exits 1 when the
default family does not beat copy-last-frame on object error at h=16 (``--no-check`` to ignore).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

MOVING_THRESHOLD = 20  # uint8 levels
MISSING_PENALTY_PX = 16.0
MIN_MASK_PX = 4
DEFAULT_FAMILY = "deterministic"
# --quick trains a fixed number of steps per family (not a time budget), so CI on a slow or busy
# machine reaches the same model as here, only later
QUICK_STEPS = {"deterministic": 600, "diffusion": 100}
# full run: equal-time step budgets (2,450 deterministic steps took as long as 1,383 diffusion steps);
# measured: 10,000 deterministic steps ~48 min and 5,645 diffusion steps ~44 min, trained side by side
# (--parallel-train) on 2 shared cores
FULL_STEPS = {"deterministic": 10000, "diffusion": 5645}


# ------------------------------------------------------------------------------------------ metrics
def psnr_per_frame(pred: np.ndarray, real: np.ndarray) -> np.ndarray:
    """pred, real uint8 (N, H, T, h, w, 3)-like (..., h, w, 3) -> PSNR (...) in dB (capped at 60)."""
    mse = ((pred.astype(np.float64) - real.astype(np.float64)) ** 2).mean(axis=(-1, -2, -3))
    return np.minimum(10 * np.log10(255.0**2 / np.maximum(mse, 1e-10)), 60.0)


def moving_psnr(pred: np.ndarray, real: np.ndarray, last: np.ndarray) -> np.ndarray:
    """PSNR over moving pixels. pred/real (N, H, h, w, 3), last (N, h, w, 3) -> (N, H), NaN where
    nothing moved."""
    mask = np.abs(real.astype(np.int16) - last[:, None].astype(np.int16)).max(-1) > MOVING_THRESHOLD
    err = ((pred.astype(np.float64) - real.astype(np.float64)) ** 2).mean(-1)
    n = mask.sum(axis=(-1, -2))
    mse = (err * mask).sum(axis=(-1, -2)) / np.maximum(n, 1)
    out = np.minimum(10 * np.log10(255.0**2 / np.maximum(mse, 1e-10)), 60.0)
    return np.where(n > 0, out, np.nan)


def ssim_per_frame(pred: np.ndarray, real: np.ndarray) -> np.ndarray:
    """Gaussian-window SSIM (11x11, sigma 1.5, per channel, averaged). (..., h, w, 3) -> (...)."""
    import torch
    import torch.nn.functional as F

    shp = pred.shape[:-3]
    x = torch.from_numpy(pred.reshape(-1, *pred.shape[-3:])).float().permute(0, 3, 1, 2) / 255.0
    y = torch.from_numpy(real.reshape(-1, *real.shape[-3:])).float().permute(0, 3, 1, 2) / 255.0
    g = torch.exp(-((torch.arange(11) - 5.0) ** 2) / (2 * 1.5**2))
    g = g / g.sum()
    w = (g[:, None] * g[None]).expand(3, 1, 11, 11).contiguous()

    def blur(z):
        return F.conv2d(z, w, groups=3)

    c1, c2 = 0.01**2, 0.03**2
    mx, my = blur(x), blur(y)
    sxx, syy, sxy = blur(x * x) - mx**2, blur(y * y) - my**2, blur(x * y) - mx * my
    s = ((2 * mx * my + c1) * (2 * sxy + c2)) / ((mx**2 + my**2 + c1) * (sxx + syy + c2))
    return s.mean(dim=(1, 2, 3)).numpy().reshape(shp)


def colour_masks(frames: np.ndarray) -> dict[str, np.ndarray]:
    """Masks of the built-in cubes: red (0.85,0.1,0.1), green (0.1,0.75,0.2), blue (0.15,0.3,0.9).
    frames uint8 (..., h, w, 3) -> bool (..., h, w) per colour."""
    f = frames.astype(np.int16)
    r, g, b = f[..., 0], f[..., 1], f[..., 2]
    return {
        "red": (r > 120) & (r - g > 70) & (r - b > 70),
        "green": (g > 100) & (g - r > 50) & (g - b > 30),
        "blue": (b > 120) & (b - r > 60) & (b - g > 30),
    }


def object_error(pred: np.ndarray, real: np.ndarray, last: np.ndarray | None = None) -> np.ndarray:
    """Mean centroid distance (px) over the cubes visible in the real frame.
    pred/real (N, H, h, w, 3) -> (N, H), NaN where no cube is visible. With ``last`` (N, h, w, 3),
    only cubes whose real centroid moved by more than 1 px from the last context frame count."""
    h, w = real.shape[-3:-1]
    yy, xx = np.mgrid[0:h, 0:w]
    mp, mr = colour_masks(pred), colour_masks(real)
    tot = np.zeros(real.shape[:-3])
    cnt = np.zeros(real.shape[:-3])
    for c in mr:
        nr, npd = mr[c].sum((-1, -2)), mp[c].sum((-1, -2))
        vis = nr >= MIN_MASK_PX

        def cen(m, n):
            return (
                np.stack([(m * yy).sum((-1, -2)), (m * xx).sum((-1, -2))], -1) / np.maximum(n, 1)[..., None]
            )

        d = np.linalg.norm(cen(mp[c], npd) - cen(mr[c], nr), axis=-1)
        d = np.where(npd >= 1, d, MISSING_PENALTY_PX)
        if last is not None:
            ml = colour_masks(last)[c][:, None]
            nl = ml.sum((-1, -2))
            moved = np.linalg.norm(cen(mr[c], nr) - cen(ml, nl), axis=-1) > 1.0
            vis = vis & (nl >= MIN_MASK_PX) & moved
        tot += np.where(vis, d, 0.0)
        cnt += vis
    return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)


def horizon_metrics(pred: np.ndarray, real: np.ndarray, last: np.ndarray) -> dict[str, list[float]]:
    """All per-horizon metrics (means over windows). pred/real uint8 (N, H, h, w, 3), last (N, h, w, 3)."""
    return {
        "psnr_by_horizon": np.nanmean(psnr_per_frame(pred, real), 0).tolist(),
        "ssim_by_horizon": np.nanmean(ssim_per_frame(pred, real), 0).tolist(),
        "moving_psnr_by_horizon": np.nanmean(moving_psnr(pred, real, last), 0).tolist(),
        "object_error_px_by_horizon": np.nanmean(object_error(pred, real), 0).tolist(),
        "moving_object_error_px_by_horizon": _nanmean0(object_error(pred, real, last)),
    }


def _nanmean0(x: np.ndarray) -> list[float | None]:
    """Column means ignoring NaN; None for all-NaN columns (JSON has no NaN)."""
    cnt = np.isfinite(x).sum(0)
    m = np.where(cnt > 0, np.nansum(x, 0) / np.maximum(cnt, 1), np.nan)
    return [float(v) if np.isfinite(v) else None for v in m]


# ------------------------------------------------------------------------------------------ data
def eval_windows(test, context: int, horizon: int, n: int, seed: int) -> dict[str, np.ndarray]:
    """Up to ``n`` windows from held-out episodes, spread over episodes (round-robin)."""
    rng = np.random.default_rng(seed)
    starts = np.asarray(test.window_starts(context, horizon))
    ep = np.asarray(test.episode_index)[starts]
    by_ep = {e: rng.permutation(starts[ep == e]).tolist() for e in np.unique(ep)}
    order = rng.permutation(list(by_ep))
    pick: list[int] = []
    while len(pick) < n and any(by_ep.values()):
        for e in order:
            if by_ep[e] and len(pick) < n:
                pick.append(by_ep[e].pop())
    pick_a = np.sort(np.asarray(pick, np.int64))
    idx = pick_a[:, None] + np.arange(context + horizon)[None]
    return {
        "frames": test.images[idx],
        "states": np.asarray(test.states, np.float32)[idx[:, :context]],
        "actions": np.asarray(test.actions, np.float32)[idx[:, context - 1 : context + horizon - 1]],
        "episode": np.asarray(test.episode_index)[pick_a],
    }


def reset_windows(test, context: int, horizon: int) -> dict[str, np.ndarray]:
    """One window per held-out episode at least ``horizon + 1`` frames long, starting at its first
    frame with the context filled the way a reset fills it (the first frame and state repeated T
    times): frames (N, T+H, h, w, 3) whose last H are the episode's frames 1..H, states (N, T, D),
    actions (N, H, A) (the episode's actions 0..H-1)."""
    starts = [int(s) for s, e in np.asarray(test.episode_bounds) if e - s >= horizon + 1]
    st = np.asarray(starts, np.int64)
    ctx = np.repeat(st[:, None], context, axis=1)
    fut = st[:, None] + 1 + np.arange(horizon)[None]
    return {
        "frames": test.images[np.concatenate([ctx, fut], 1)],
        "states": np.asarray(test.states, np.float32)[ctx],
        "actions": np.asarray(test.actions, np.float32)[st[:, None] + np.arange(horizon)[None]],
    }


def evaluate_from_reset(model, w: dict[str, np.ndarray], context: int) -> dict[str, Any]:
    """Rollouts from episode starts (``reset_windows``): how imagined episodes from a reset begin.
    The largest motions of an episode (the arm leaving its home pose) happen here."""
    import torch

    torch.manual_seed(0)
    real, last = w["frames"][:, context:], w["frames"][:, context - 1]
    pred = rollout_all(model, w, w["actions"])
    m = horizon_metrics(pred, real, last)
    base = horizon_metrics(np.repeat(last[:, None], real.shape[1], axis=1), real, last)
    keep = ("psnr_by_horizon", "moving_psnr_by_horizon", "object_error_px_by_horizon")
    return {
        "episodes": int(len(real)),
        **{k: m[k] for k in keep},
        "baseline_copy_last": {k: base[k] for k in keep},
        "psnr_minus_copy_last_db_h16": m["psnr_by_horizon"][-1] - base["psnr_by_horizon"][-1],
    }


def shuffled_actions(w: dict[str, np.ndarray]) -> np.ndarray:
    """Each window gets the actions of the window ``shift`` places on, choosing the smallest shift
    for which no window keeps actions of its own episode where possible."""
    n = len(w["episode"])
    for shift in range(1, n):
        if not (w["episode"] == np.roll(w["episode"], -shift)).any():
            break
    return np.roll(w["actions"], -shift, axis=0)


# ------------------------------------------------------------------------------------------ speed
def matmul_gflops(dtype_name: str, n: int = 1024, repeats: int = 5) -> float:
    import torch

    from kernels.sampling import time_call

    dt = getattr(torch, dtype_name)
    a, b = torch.randn(n, n).to(dt), torch.randn(n, n).to(dt)
    t = time_call(lambda: a @ b, repeats=repeats, warmup=2)
    return 2 * n**3 / t / 1e9


def speed(model, repeats: int) -> dict[str, float]:
    """Imagined frames/s for a 16-step rollout at batch 32 and FLOPs per frame."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from kernels.sampling import time_call

    c = model.config
    b, h = 32, 16
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(
        0, 256, (b, c.context_frames, c.image_size, c.image_size, 3), dtype=torch.uint8, generator=g
    )
    states = torch.zeros(b, c.context_frames, c.full_state_dim)
    actions = torch.rand(b, h, c.action_dim, generator=g) * 2 - 1
    ctx = model.init_context(frames, states)
    with FlopCounterMode(display=False) as fc:
        model.step(ctx, actions[:, : c.chunk_size])
    flops = fc.get_total_flops() / (b * c.chunk_size)
    t = time_call(lambda: model.rollout(frames, states, actions), repeats=repeats, warmup=1)
    return {"imagined_frames_per_s": b * h / t, "flops_per_frame": float(flops), "rollout_b32_h16_s": t}


def sampler_speedup(model, repeats: int) -> dict[str, Any]:
    """Reference vs fast (torch.compile) sampler on the same model and inputs, interleaved."""
    import torch

    from kernels import sampling

    c = model.config
    b = 32
    g = torch.Generator().manual_seed(1)
    frames = torch.randint(
        0, 256, (b, c.context_frames, c.image_size, c.image_size, 3), dtype=torch.uint8, generator=g
    )
    ctx = model.init_context(frames, torch.zeros(b, c.context_frames, c.full_state_dim))
    actions = torch.zeros(b, c.chunk_size, c.action_dim)
    impl0 = getattr(c, "sampler_impl", None)
    if impl0 is None:
        return {}
    t_compile0 = time.perf_counter()
    c.sampler_impl = "fast"
    torch.manual_seed(0)
    fast_out = model.step(ctx, actions).frames
    compile_s = time.perf_counter() - t_compile0
    c.sampler_impl = "reference"
    torch.manual_seed(0)
    ref_out = model.step(ctx, actions).frames
    ts: dict[str, list[float]] = {"reference": [], "fast": []}
    for _ in range(repeats):
        for impl in ("reference", "fast"):
            c.sampler_impl = impl
            ts[impl].append(sampling.time_call(lambda: model.step(ctx, actions), repeats=1, warmup=0))
    c.sampler_impl = impl0
    ref, fast = statistics.median(ts["reference"]), statistics.median(ts["fast"])
    return {
        "sampler_kernel_speedup": ref / fast,
        "sampler_reference_s": ref,
        "sampler_fast_s": fast,
        "sampler_compile_s": compile_s,
        "sampler_max_abs_diff_uint8": int((fast_out.int() - ref_out.int()).abs().max()),
    }


# ------------------------------------------------------------------------------------------ run
def rollout_all(model, w: dict[str, np.ndarray], actions: np.ndarray, batch: int = 32) -> np.ndarray:
    import torch

    t = model.context_frames
    outs = []
    for i in range(0, len(actions), batch):
        sl = slice(i, i + batch)
        o = model.rollout(
            torch.from_numpy(w["frames"][sl, :t]),
            torch.from_numpy(w["states"][sl]),
            torch.from_numpy(actions[sl]),
        )
        outs.append(o.frames.numpy())
    return np.concatenate(outs)


def evaluate_family(
    model, w: dict[str, np.ndarray], context: int, step_sweep: list[int] | None
) -> dict[str, Any]:
    import torch

    torch.manual_seed(0)
    real, last = w["frames"][:, context:], w["frames"][:, context - 1]
    pred = rollout_all(model, w, w["actions"])
    res: dict[str, Any] = horizon_metrics(pred, real, last)
    torch.manual_seed(0)
    pred_sh = rollout_all(model, w, shuffled_actions(w))
    sh = horizon_metrics(pred_sh, real, last)
    drop = np.asarray(res["moving_psnr_by_horizon"]) - np.asarray(sh["moving_psnr_by_horizon"])
    rise = np.asarray(sh["object_error_px_by_horizon"]) - np.asarray(res["object_error_px_by_horizon"])
    mo = np.array([np.nan if v is None else v for v in res["moving_object_error_px_by_horizon"]])
    mo_sh = np.array([np.nan if v is None else v for v in sh["moving_object_error_px_by_horizon"]])
    res.update(
        action_shuffle_moving_object_error_rise_px=float(np.nanmean(mo_sh - mo)),
        action_shuffle_psnr_drop=float(np.nanmean(drop)),
        action_shuffle_object_error_rise_px=float(np.nanmean(rise)),
        action_shuffle_psnr_drop_by_horizon=drop.tolist(),
        action_shuffle_object_error_rise_px_by_horizon=rise.tolist(),
        action_shuffled=sh,
    )
    if step_sweep:
        sweep = {}
        steps0 = model.config.sampling_steps
        for s in step_sweep:
            model.config.sampling_steps = s
            torch.manual_seed(0)
            m = horizon_metrics(rollout_all(model, w, w["actions"]), real, last)
            sweep[str(s)] = {k: v[-1] for k, v in m.items()} | {"psnr_h1": m["psnr_by_horizon"][0]}
        model.config.sampling_steps = steps0
        res["quality_by_sampling_steps_at_final_horizon"] = sweep
    return res


def save_video(
    path: Path, w: dict[str, np.ndarray], preds: dict[str, np.ndarray], context: int, n: int = 4
) -> None:
    from wmrl.video import grid, side_by_side, write_video

    rows = []
    for i in range(min(n, len(w["frames"]))):
        real = w["frames"][i]
        vids = [real] + [np.concatenate([real[:context], p[i]]) for p in preds.values()]
        rows.append(side_by_side(*vids))
    write_video(path, grid(rows, ncols=1), fps=10)


def _parse_steps(spec: str | None, default: dict[str, int] | None) -> dict[str, int] | None:
    """``"600"`` (every family) or ``"deterministic=600,diffusion=100"`` -> {family: steps}."""
    from wmrl.errors import ConfigError

    if spec is None:
        return None if default is None else dict(default)
    out: dict[str, int] = {}
    try:
        if "=" not in spec:
            out = dict.fromkeys(("deterministic", "diffusion"), int(spec))
        else:
            for part in spec.split(","):
                fam, n = part.split("=")
                out[fam.strip()] = int(n)
    except ValueError:
        out = {}
    if not out or min(out.values()) < 1:
        raise ConfigError(f"--train-steps={spec!r}; expected N or family=N,... with integers >= 1")
    return out


def train_family_worker(cfg: Any, data_root: str, seed: int, threads: int) -> dict[str, Any]:
    """``--parallel-train``: train one family in a worker process on the same split as the parent
    (held-out 10% of ``data_root`` by ``seed``); returns the training info (``run_dir/model`` holds
    the final model)."""
    import torch

    from wmrl.data import load_trajectories
    from wmrl.runs import seed_everything
    from worldmodels.train import train_world_model

    torch.set_num_threads(threads)
    seed_everything(seed)
    train, test = load_trajectories(data_root).split_episodes(0.1, seed=seed)
    return train_world_model(cfg, train, test, progress=False)[1]


def goals(r: dict[str, Any], quick: bool) -> dict[str, Any]:
    """The issue's goals for the default family at the last horizon step. ``checked``: the ones this
    variant must meet or exit 1 (``--quick``, in CI: beat copy-last on object error; the full run
    reports its goals and checks none)."""
    g = r["goals_h16"]
    rows = {
        "psnr_minus_copy_last_db": (g["psnr_minus_copy_last_db"], ">=", 3.0),
        "object_error_ratio_to_copy_last": (g["object_error_ratio_to_copy_last"], "<=", 0.5),
        "action_shuffle_psnr_drop": (r["action_shuffle_psnr_drop"], ">=", 2.0),
        "imagined_frames_per_s": (r["imagined_frames_per_s"], ">=", 100.0),
        "beats_copy_last_object_error": (g["object_error_ratio_to_copy_last"], "<", 1.0),
    }
    out: dict[str, Any] = {}
    for name, (v, op, target) in rows.items():
        met = bool(v >= target if op == ">=" else v <= target if op == "<=" else v < target)
        out[name] = {"value": float(v), "target": f"{op} {target}", "met": met}
    out["checked"] = ["beats_copy_last_object_error"] if quick else []
    out["all_checked_met"] = all(out[k]["met"] for k in out["checked"])
    out["all_issue_goals_met"] = all(out[k]["met"] for k in rows if k != "beats_copy_last_object_error")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="CI size: 90 episodes, fixed step budgets (QUICK_STEPS), exits 1 unless the default "
        "family beats copy-last on object error at h=16",
    )
    ap.add_argument("--out", default="benchmarks/results/wm_fidelity.json")
    ap.add_argument("--families", default="deterministic,diffusion")
    ap.add_argument("--episodes", type=int, default=None, help="episodes to collect (default 400; quick 90)")
    ap.add_argument(
        "--train-seconds",
        type=float,
        default=None,
        help="training wall-time budget per family instead of step budgets (default: none; fixed steps, "
        "FULL_STEPS or QUICK_STEPS, see --train-steps)",
    )
    ap.add_argument(
        "--train-steps",
        type=str,
        default=None,
        help="fixed optimisation steps per family instead of a time budget, as N or family=N,... "
        f"(quick default: {QUICK_STEPS}; reproducible on any machine, unlike a time budget)",
    )
    ap.add_argument(
        "--no-check",
        action="store_true",
        help="exit 0 even when a goal checked by this run is missed (see the JSON's goals block)",
    )
    ap.add_argument(
        "--ema-decay",
        type=float,
        default=0.99,
        help="weight average of training (train.ema_decay; 0: off): the evaluated model is the average",
    )
    ap.add_argument("--data", default=None, help="use this dataset instead of collecting one")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1 was ~10x faster than 2 on the shared, oversubscribed 2-core box)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--override",
        action="append",
        default=[],
        help="extra train_world_model override for every family, e.g. world_model.object_weight=0 (repeatable)",
    )
    ap.add_argument("--eval-windows", type=int, default=None)
    ap.add_argument(
        "--parallel-train",
        action="store_true",
        help="train the families at the same time, one worker process each (one core each), then evaluate",
    )
    args = ap.parse_args(argv)

    import torch

    from wmrl.config import load_config
    from wmrl.data import load_trajectories
    from wmrl.io import atomic_write_json
    from wmrl.runs import seed_everything
    from worldmodels.train import DataConfig, TrainLoopConfig, TrainWorldModelConfig, train_world_model

    torch.set_num_threads(args.threads)
    seed_everything(args.seed)
    quick = args.quick
    episodes = args.episodes or (90 if quick else 400)
    steps_by_family = _parse_steps(
        args.train_steps, None if args.train_seconds else (QUICK_STEPS if quick else FULL_STEPS)
    )
    train_s = args.train_seconds
    n_eval = args.eval_windows or (32 if quick else 96)
    horizon = 16
    families = [f for f in args.families.split(",") if f]
    noises = [0.1, 0.3, 0.6]
    t_all = time.perf_counter()
    tmp = tempfile.TemporaryDirectory(prefix="wm_fidelity_")
    data_root = args.data
    collect_s = 0.0
    if data_root is None:
        from wmrl.collect import collect

        data_root = str(Path(tmp.name) / "data")
        t0 = time.perf_counter()
        collect(data_root, "builtin", episodes, noises, num_envs=16, seed=args.seed, progress=False)
        collect_s = time.perf_counter() - t0
        print(f"collected {episodes} episodes in {collect_s:.0f} s", flush=True)
    traj = load_trajectories(data_root)
    train, test = traj.split_episodes(0.1, seed=args.seed)
    results: dict[str, Any] = {}
    models = {}
    context = None
    windows = None
    cfgs = {}
    for fam in families:
        # the same world-model config as `wmrl train-world-model world_model=<family>`
        wm = dict(load_config("train_world_model", [f"world_model={fam}", *args.override]).world_model)
        cfgs[fam] = TrainWorldModelConfig(
            world_model=wm,
            data=DataConfig(root=data_root),
            train=TrainLoopConfig(
                steps=steps_by_family.get(fam, 100000) if steps_by_family else 100000,
                batch_size=16,
                lr=5e-4,
                warmup_steps=20,
                max_time_s=train_s,
                ema_decay=args.ema_decay,
                checkpoint_every=100000,
                log_every=10,
                videos=2,
                seed=args.seed,
            ),
            run_dir=str(Path(tmp.name) / f"run_{fam}"),
        )
    trained = {}
    if args.parallel_train and len(families) > 1:
        from benchmarks._workers import pool
        from worldmodels import load_world_model

        with pool(len(families), one_thread=False) as ex:
            futures = {f: ex.submit(train_family_worker, cfgs[f], data_root, args.seed, args.threads) for f in families}
            for fam, fut in futures.items():
                info = fut.result()
                trained[fam] = (load_world_model(Path(info["run_dir"]) / "model"), info)
    for fam in families:
        cfg = cfgs[fam]
        if fam in trained:
            model, info = trained[fam]
        else:
            model, info = train_world_model(cfg, train, test, progress=False)
        print(f"trained {fam}: {info['steps']} steps in {info['train_time_s']:.0f} s", flush=True)
        context = model.context_frames
        if windows is None:
            windows = eval_windows(test, context, horizon, n_eval, args.seed)
        t0 = time.perf_counter()
        sweep = ([1, 2] if quick else [1, 2, 3, 4]) if fam == "diffusion" else None
        r = evaluate_family(model, windows, context, sweep)
        r["from_reset"] = evaluate_from_reset(model, reset_windows(test, context, horizon), context)
        r["eval_s"] = time.perf_counter() - t0
        r.update(speed(model, repeats=3))
        if quick:
            r["sampler_kernel_speedup"] = None
            r["sampler_kernel_note"] = (
                "skipped in --quick: torch.compile of the UNet takes minutes on 2 busy cores"
            )
        else:
            r.update(sampler_speedup(model, repeats=5))
        r.update(
            family=fam,
            sampling_steps=int(getattr(model.config, "sampling_steps", 1)),
            forward_passes_per_chunk=int(getattr(model.config, "sampling_steps", 1)),
            train_time_s=info["train_time_s"],
            train_steps=info["steps"],
            train_budget={"steps": cfg.train.steps if cfg.train.steps < 100000 else None, "seconds": train_s},
            train_ema_decay=args.ema_decay,
            train_final_loss=info["final_loss"],
            config=dataclasses.asdict(model.config),
            num_params=int(sum(p.numel() for p in model.parameters())),
        )
        results[fam] = r
        models[fam] = model
        print(
            f"{fam}: psnr h16 {r['psnr_by_horizon'][-1]:.2f} "
            f"obj err h16 {r['object_error_px_by_horizon'][-1]:.2f} "
            f"shuffle drop {r['action_shuffle_psnr_drop']:.2f} fps {r['imagined_frames_per_s']:.0f}",
            flush=True,
        )

    assert windows is not None and context is not None
    real, last = windows["frames"][:, context:], windows["frames"][:, context - 1]
    copy = np.repeat(last[:, None], horizon, axis=1)
    baseline = horizon_metrics(copy, real, last)
    peaks = {"fp32": matmul_gflops("float32"), "bf16": matmul_gflops("bfloat16")}
    for fam, r in results.items():
        dtype = "bf16" if models[fam].uses_bf16 else "fp32"
        r["fraction_of_matmul_peak"] = (
            r["flops_per_frame"] * r["imagined_frames_per_s"] / (peaks[dtype] * 1e9)
        )
        r["matmul_peak_dtype"] = dtype
        r["goals_h16"] = {
            "psnr_minus_copy_last_db": r["psnr_by_horizon"][-1] - baseline["psnr_by_horizon"][-1],
            "object_error_ratio_to_copy_last": r["object_error_px_by_horizon"][-1]
            / baseline["object_error_px_by_horizon"][-1],
            "beats_copy_last_object_error": r["object_error_px_by_horizon"][-1]
            < baseline["object_error_px_by_horizon"][-1],
            "moving_object_error_ratio_to_copy_last": (r["moving_object_error_px_by_horizon"][-1] or np.nan)
            / (baseline["moving_object_error_px_by_horizon"][-1] or np.nan),
        }
    default = DEFAULT_FAMILY if DEFAULT_FAMILY in results else families[0]
    # which family measured better here: lower object error at the last horizon step, then moving PSNR
    better = min(
        results,
        key=lambda f: (
            results[f]["object_error_px_by_horizon"][-1],
            -results[f]["moving_psnr_by_horizon"][-1],
        ),
    )
    if len(models) and "diffusion" in models and "deterministic" in models:
        save_video(
            Path(args.out).with_suffix(".mp4"),
            windows,
            {
                f: rollout_all(models[f], {k: v[:4] for k, v in windows.items()}, windows["actions"][:4])
                for f in models
            },
            context,
        )
    import diffusers

    out = {
        "benchmark": "wm_fidelity",
        "quick": quick,
        "default_family": default,
        "better_family_by_measurement": better,
        **{k: v for k, v in results[default].items() if k not in ("config",)},
        "goals": goals(results[default], quick),
        "baseline_copy_last": baseline,
        "families": results,
        "dataset": {
            "episodes": int(traj.num_episodes),
            "frames": int(traj.num_frames),
            "train_episodes": int(train.num_episodes),
            "train_frames": int(train.num_frames),
            "test_episodes": int(test.num_episodes),
            "eval_windows": int(len(windows["frames"])),
            "noise_levels": noises,
            "suite": "builtin",
            "fps": int(traj.fps),
            "collect_s": collect_s,
        },
        "horizon": horizon,
        "context_frames": context,
        "train_seconds_budget_per_family": train_s,
        "train_steps_budget_per_family": steps_by_family,
        "matmul_gflops": peaks,
        "definitions": {
            "moving_region": "pixels where any channel of the real future differs from the last context "
            f"frame by > {MOVING_THRESHOLD}",
            "object_error": "centroid distance of red/green/blue cube colour masks, predicted vs real; "
            f"missing in prediction counts {MISSING_PENALTY_PX} px",
            "action_shuffle": "actions cyclically shifted across windows of different episodes; "
            "drop/rise are means over horizon steps",
            "imagined_frames_per_s": "batch 32, 64x64, 16-step rollout incl. chunk bookkeeping, median of 3",
        },
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "load_avg_at_end": os.getloadavg(),
        },
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "diffusers": diffusers.__version__,
            "numpy": np.__version__,
        },
        "seeds": {"seed": args.seed},
        "overrides": list(args.override),
        "parallel_train": bool(args.parallel_train),
        "wall_s": time.perf_counter() - t_all,
    }
    atomic_write_json(args.out, out)
    print(f"wrote {args.out} in {out['wall_s']:.0f} s")
    tmp.cleanup()
    g = out["goals"]
    for name in [k for k in g if isinstance(g[k], dict)]:
        print(
            f"goal {name}: {g[name]['value']:.3f} (target {g[name]['target']}): "
            f"{'met' if g[name]['met'] else 'missed'}" + (" (checked)" if name in g["checked"] else "")
        )
    if not g["all_checked_met"] and not args.no_check:
        print(f"{default} world model missed a goal this run checks (--no-check to ignore)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
