"""Does refitting the state model on a co-evolution round's real rollouts help on the next round's?

Usage::

    python -m benchmarks.state_model_refit --runs runs/imagination_lift/seed_0 ... [--steps 8000] --out FILE.json

Co-evolution (``object_dynamics.refit_each_round``) fits the arm-and-object state model
(:mod:`worldmodels.object_dynamics`) again on the demos plus every round's real rollouts. For each
finished run folder with ``round_1/rollouts.npz`` and ``round_2/rollouts.npz`` this fits it (a) on the
demos and (b) on the demos plus round 1's rollouts (what round 1's refit sees), with the same
config and seed, and scores both on round 2's rollouts: the next policy's real episodes, which
neither fit saw. Reported per run and as the mean over runs: the one-step cube error where a cube
moves and the tcp's, and the open-loop cube and tcp errors after 16 and 32 steps (medians over
episodes). Read-only on the run folders.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._stats import run_keys

os.environ.setdefault("MUJOCO_GL", "egl")

SCORES = (
    "one_step_error_moving_mean_m",
    "arm_one_step_tcp_error_mean_m",
    "open_loop_error_step_16_m",
    "open_loop_error_step_32_m",
    "arm_open_loop_tcp_error_step_16_m",
    "arm_open_loop_tcp_error_step_32_m",
)
FITS = ("demos", "demos+round_1")


def measure_run(src: Path, steps: int, progress: bool = True) -> dict[str, Any]:
    """Both fits of run folder ``src`` scored on its round-2 rollouts (see the module docstring)."""
    import dataclasses

    from imagination.pipeline import run_config_of
    from wmrl.data import Trajectories, load_trajectories, load_trajectories_npz
    from wmrl.errors import WmrlError
    from worldmodels.object_dynamics import (
        ObjectDynamicsConfig,
        evaluate_object_dynamics,
        fit_object_dynamics,
    )

    cfg = run_config_of(src)
    for r in (1, 2):
        if not (src / f"round_{r}" / "rollouts.npz").is_file():
            raise WmrlError(f"{src / f'round_{r}' / 'rollouts.npz'} not found; expected a run with >= 2 co-evolution rounds")
    demos = load_trajectories(src / "data")
    r1 = load_trajectories_npz(src / "round_1" / "rollouts.npz")
    r2 = load_trajectories_npz(src / "round_2" / "rollouts.npz")
    base = cfg.object_dynamics_config() or ObjectDynamicsConfig()
    oc = dataclasses.replace(base, arm=True, steps=int(steps), proprio_dim=int(demos.states.shape[1]), seed=1000 + cfg.seed)
    eps = np.arange(r2.num_episodes)
    out: dict[str, Any] = {"round_1_episodes": r1.num_episodes, "round_2_episodes": r2.num_episodes, "fits": {}}
    for name, traj in zip(FITS, (demos, Trajectories.concat([demos, r1])), strict=True):
        model, metrics = fit_object_dynamics(traj, oc, progress=progress)
        score = evaluate_object_dynamics(model, r2, eps)
        out["fits"][name] = {
            "train_transitions": metrics["train_transitions"],
            "fit_time_s": metrics["wall_time_s"],
            "on_round_2": {k: score.get(k) for k in SCORES},
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=Path, nargs="+", required=True, help="finished wmrl run folders (>= 2 rounds)")
    p.add_argument("--steps", type=int, default=8000, help="optimiser steps per fit (the pipeline's default)")
    p.add_argument("--num-threads", type=int, default=1)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    import torch

    from benchmarks.imagination_lift import environment_info
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    if a.steps < 1 or a.num_threads < 1:
        raise WmrlError(f"--steps {a.steps} and --num-threads {a.num_threads} must be >= 1")
    torch.set_num_threads(a.num_threads)
    t0 = time.perf_counter()
    per_run = {k: measure_run(src, a.steps, progress=not a.no_progress) for k, src in zip(run_keys(a.runs), a.runs, strict=True)}
    mean = {
        name: {
            k: float(np.mean([r["fits"][name]["on_round_2"][k] for r in per_run.values()]))
            if all(r["fits"][name]["on_round_2"][k] is not None for r in per_run.values())
            else None
            for k in SCORES
        }
        for name in FITS
    }
    res = {
        "benchmark": "state_model_refit",
        "runs": [str(r) for r in a.runs],
        "steps": a.steps,
        "mean_over_runs": mean,
        "per_run": per_run,
        "wall_time_s": time.perf_counter() - t0,
        "machine": environment_info(),
    }
    atomic_write_json(a.out, res)
    for name in FITS:
        print(name, {k: None if v is None else round(100 * v, 2) for k, v in mean[name].items()}, "(cm)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
