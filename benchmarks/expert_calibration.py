"""Scripted-expert success per built-in task and noise level (the competence knob).

``python -m benchmarks.expert_calibration [--quick] --out benchmarks/results/expert_calibration.json``

Each sub-env records a fixed quota of consecutive episodes (no bias towards quick episodes).
Goal: >= 95% success at noise 0 over 100 episodes per task; success falls as noise rises.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")


def success_rate(task: str, noise: float, episodes: int, num_envs: int = 16, seed: int = 0) -> list[bool]:
    """Outcomes of ``episodes`` expert episodes of ``task`` at ``noise``."""
    import envs

    env = envs.make_vec(task, num_envs, seed=seed, autoreset_mode="same_step")
    expert = envs.make_expert(env, noise=noise, seed=seed)
    quota = np.full(num_envs, episodes // num_envs) + (np.arange(num_envs) < episodes % num_envs)
    obs, info = env.reset(seed=seed)
    outcomes: list[bool] = []
    while quota.sum() > 0:
        obs, _, te, tr, info = env.step(expert.act(obs, info))
        for i in np.flatnonzero(te | tr):
            if quota[i] > 0:
                quota[i] -= 1
                outcomes.append(bool(te[i]))
    env.close()
    return outcomes


def run(quick: bool) -> dict[str, Any]:
    import envs
    from benchmarks._stats import machine_info, package_versions, success_summary

    episodes = 16 if quick else 100
    noises = [0.0, 0.25, 0.5, 1.0]
    t0 = time.perf_counter()
    table: dict[str, dict[str, Any]] = {}
    for task in envs.list_tasks("mujoco"):
        table[task] = {str(nz): success_summary(success_rate(task, nz, episodes)) for nz in noises}
    zero = [table[t]["0.0"]["success_rate"] for t in table]
    return {
        "benchmark": "expert_calibration",
        "quick": quick,
        "episodes_per_cell": episodes,
        "noise_levels": noises,
        "by_task": table,
        "min_success_at_noise_0": min(zero),
        "mean_success_by_noise": {
            str(nz): float(np.mean([table[t][str(nz)]["success_rate"] for t in table])) for nz in noises
        },
        "goal": {"min_success_at_noise_0": ">= 0.95"},
        "wall_s": time.perf_counter() - t0,
        "machine": machine_info(),
        "versions": package_versions(),
        "seeds": [0],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    from wmrl.io import atomic_write_json

    res = run(a.quick)
    atomic_write_json(a.out, res)
    print(
        f"min success at noise 0: {res['min_success_at_noise_0']:.2f}; mean by noise: {res['mean_success_by_noise']}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
