"""Simulator throughput of the built-in suite with 64x64 rendering, measured side by side.

``python -m benchmarks.sim_throughput [--quick] --out benchmarks/results/sim_throughput.json``

Configs, interleaved in every repeat (so machine noise hits them alike):
* ``batched_N``: ``envs.make_vec("builtin", N)`` (one ``mujoco.batch.Batch`` + tiled renderer),
  N in {1, 16, 64};
* ``sync_vector_16``: 16 single envs (``gymnasium.make("wmrl/<task>")``) in gymnasium's
  ``SyncVectorEnv``;
* ``pusher_v5``: gymnasium's own ``Pusher-v5`` stepping + ``render()`` at 64x64 (a peer).
Reports env-steps/s (median over repeats) and ``ratio_vs_sync_vector_16`` for the 16-env batch.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time
from typing import Any

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")


def _time_steps(step, num_envs: int, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return num_envs * steps / (time.perf_counter() - t0)


def _batched(n: int):
    import envs

    env = envs.make_vec("builtin", n, seed=0)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    return lambda: env.step(rng.uniform(-1, 1, (n, 7)).astype(np.float32)), n


def _sync16():
    import gymnasium as gym

    import envs

    tasks = envs.list_tasks("mujoco")
    fns = [functools.partial(gym.make, f"wmrl/{tasks[i % len(tasks)]}") for i in range(16)]
    env = gym.vector.SyncVectorEnv(fns)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    return lambda: env.step(rng.uniform(-1, 1, (16, 7)).astype(np.float32)), 16


def _pusher():
    import gymnasium as gym

    env = gym.make("Pusher-v5", render_mode="rgb_array", width=64, height=64)
    env.reset(seed=0)
    rng = np.random.default_rng(0)

    def step():
        _, _, te, tr, _ = env.step(rng.uniform(-1, 1, 7).astype(np.float32))
        env.render()
        if te or tr:
            env.reset()

    return step, 1


def run(quick: bool) -> dict[str, Any]:
    from benchmarks._stats import machine_info, package_versions

    repeats = 3 if quick else 7
    steps = {"batched_1": 100, "batched_16": 40, "batched_64": 12, "sync_vector_16": 40, "pusher_v5": 200}
    if quick:
        steps = {k: max(5, v // 4) for k, v in steps.items()}
    makers = {
        "batched_1": lambda: _batched(1),
        "batched_16": lambda: _batched(16),
        "batched_64": lambda: _batched(64),
        "sync_vector_16": _sync16,
        "pusher_v5": _pusher,
    }
    built = {k: m() for k, m in makers.items()}
    for step, _ in built.values():  # warm-up
        for _ in range(3):
            step()
    samples: dict[str, list[float]] = {k: [] for k in built}
    ratios = []
    for _ in range(repeats):
        for k, (step, n) in built.items():
            samples[k].append(_time_steps(step, n, steps[k]))
        ratios.append(samples["batched_16"][-1] / samples["sync_vector_16"][-1])
    med = {k: statistics.median(v) for k, v in samples.items()}
    return {
        "benchmark": "sim_throughput",
        "quick": quick,
        "image_size": 64,
        "steps_per_s": med,
        "steps_per_s_samples": samples,
        "ratio_vs_sync_vector_16": statistics.median(ratios),
        "ratio_samples": ratios,
        "pusher_v5_steps_per_s": med["pusher_v5"],
        "goals": {"ratio_vs_sync_vector_16": ">= 2", "batched_16_steps_per_s": ">= 1000"},
        "config": {"repeats": repeats, "steps_per_repeat": steps, "suite": "builtin", "actions": "uniform random"},
        "machine": machine_info(),
        "versions": package_versions(),
        "seeds": [0],
        "render_backend": os.environ.get("MUJOCO_GL"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    from wmrl.io import atomic_write_json

    res = run(a.quick)
    atomic_write_json(a.out, res)
    s = res["steps_per_s"]
    print(
        "env-steps/s (median): "
        + ", ".join(f"{k}={v:.0f}" for k, v in s.items())
        + f"; ratio batched_16 / sync_vector_16 = {res['ratio_vs_sync_vector_16']:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
