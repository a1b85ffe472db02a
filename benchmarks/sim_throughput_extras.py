"""Steps per second of the LIBERO and ManiSkill3 backends: state-only, and with cameras at 64 and 128.

Usage::

    python -m benchmarks.sim_throughput_extras --out benchmarks/results/sim_throughput_extras.json
    python -m benchmarks.sim_throughput_extras --quick --out /tmp/extras.json

One sub-env (one worker process) per configuration, zero actions, the agent-view camera plus the
wrist camera (LIBERO: eye-in-hand; ManiSkill: ``panda_wristcam`` hand camera) where images are on.
Each figure is the median over ``--repeats`` timed blocks of ``--steps`` steps after a warm-up,
measured through the full batched API (worker IPC included); ``load_avg_1min`` is recorded
because other work on the same cores slows the figures down. A backend that is not installed
is reported as skipped with the reason.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

from wmrl.errors import WmrlError

CONFIGS: tuple[tuple[str, int | None], ...] = (("state_only", None), ("cameras_64", 64), ("cameras_128", 128))
BACKENDS = {"maniskill": "PickCube-v1", "libero": "libero_goal.open_the_middle_drawer_of_the_cabinet"}


def measure(backend: str, task: str, image_size: int | None, steps: int, repeats: int) -> dict[str, Any]:
    from envs.registry import make_vec

    t0 = time.perf_counter()
    env = make_vec(task, num_envs=1, backend=backend, image_size=image_size, wrist_image=image_size is not None)
    startup = time.perf_counter() - t0
    try:
        env.reset(seed=0)
        a = np.zeros((1, 7), np.float32)
        for _ in range(3):  # warm-up
            env.step(a)
        rates = []
        for _ in range(repeats):
            t = time.perf_counter()
            for _ in range(steps):
                env.step(a)
            rates.append(steps / (time.perf_counter() - t))
        versions = env.metadata.get("versions", {})
    finally:
        env.close()
    return {
        "steps_per_second": round(statistics.median(rates), 2),
        "all_repeats": [round(r, 2) for r in rates],
        "startup_seconds": round(startup, 1),
        "cameras": 0 if image_size is None else 2,
        "load_avg_1min": round(os.getloadavg()[0], 2),
        "versions": versions,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sim_throughput_extras", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer steps (CI)")
    p.add_argument("--backends", default="maniskill,libero")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    import envs.libero  # noqa: F401
    import envs.maniskill  # noqa: F401
    from benchmarks._stats import machine_info, package_versions
    from envs.subproc_vec import BackendNotInstalledError
    from wmrl.io import atomic_write_json

    steps = args.steps or (10 if args.quick else 50)
    results: dict[str, Any] = {}
    for backend in args.backends.split(","):
        if backend not in BACKENDS:
            print(f"error: unknown backend {backend!r}; valid: {', '.join(BACKENDS)}", file=sys.stderr)
            return 2
        results[backend] = {"task": BACKENDS[backend]}
        for name, size in CONFIGS:
            try:
                r = measure(backend, BACKENDS[backend], size, steps, args.repeats)
            except BackendNotInstalledError as e:
                results[backend] = {"skipped": str(e)}
                break
            except WmrlError as e:
                results[backend][name] = {"error": str(e)}
                continue
            results[backend][name] = r
            print(f"{backend:10s} {name:12s} {r['steps_per_second']:8.2f} steps/s (load {r['load_avg_1min']})")
    atomic_write_json(
        args.out,
        {
            "benchmark": "sim_throughput_extras",
            "unit": "env steps per second, one sub-env, zero actions, median of repeats",
            "results": results,
            "config": {"steps": steps, "repeats": args.repeats, "quick": args.quick},
            "machine": machine_info(),
            "versions": package_versions(),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
