"""Simulator throughput of every backend: the built-in suite side by side with its peers, and
ManiSkill3 / LIBERO with cameras at 64 and 128.

``python -m benchmarks.sim_throughput [--quick] [--backends builtin,maniskill,libero] --out FILE.json``

Default backends: ``builtin`` plus each extra backend whose venv is installed (``--quick``: builtin
only, unless ``--backends`` names more). One JSON: the built-in figures at the top level (the fields
``benchmarks.report`` reads) and a per-backend section under ``backends``.

Built-in configs, interleaved in every repeat (so machine noise hits them alike):
* ``batched_N``: ``envs.make_vec("builtin", N)`` (one ``mujoco.batch.Batch`` + tiled renderer),
  N in {1, 16, 64};
* ``sync_vector_16``: 16 single envs (``gymnasium.make("wmrl/<task>")``) in gymnasium's
  ``SyncVectorEnv``;
* ``pusher_v5``: gymnasium's own ``Pusher-v5`` stepping + ``render()`` at 64x64 (a peer);
* ``batched_16_shadows`` / ``batched_16_supersample2`` / ``batched_16_untiled`` / ``batched_64_untiled``: the
  16-env (64-env) batch with the render options (``shadows=True``: a 128x128 shadow map; ``supersample=2``:
  render at 128, area-downsample to 64; ``tiled_frames=False``: each frame drawn alone and read back at once,
  the same bits whatever the batch).
Reports env-steps/s (median over repeats), ``ratio_vs_sync_vector_16`` for the 16-env batch and
``render_option_cost`` (plain batched_16, or batched_64 for ``untiled_64``, / with the option, the median of
per-repeat ratios).
``--reuse-builtin FILE`` copies the built-in section of an earlier result instead of measuring it
(the JSON says so in ``backends.builtin.source``); ``--reuse-extra FILE`` does the same for the
ManiSkill3 / LIBERO sections (for a machine where their venvs are not installed).

ManiSkill3 (PickCube-v1) and LIBERO (libero_goal, open the middle drawer): one sub-env (one worker
process) per config, zero actions: ``state_only`` (no rendering), ``cameras_64`` and ``cameras_128``
(agent view + wrist camera; ManiSkill renders 128x128 and area-resizes, see
``envs.maniskill.vector_env``). Each figure is the median over ``--repeats`` timed blocks of
``--extra-steps`` steps after a warm-up, through the full batched API (worker IPC included), with
the worker start-up time and the 1-minute load average (other work on the same cores slows them).
A backend that is not installed is reported as skipped with the reason.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.errors import WmrlError

os.environ.setdefault("MUJOCO_GL", "egl")

BACKENDS = ("builtin", "maniskill", "libero")
#: extra backend -> (task, venv name, env var of a python override)
EXTRA: dict[str, tuple[str, str, str]] = {
    "maniskill": ("PickCube-v1", "maniskill", "WMRL_MANISKILL_PYTHON"),
    "libero": ("libero_goal.open_the_middle_drawer_of_the_cabinet", "libero", "WMRL_LIBERO_PYTHON"),
}
EXTRA_CONFIGS: tuple[tuple[str, int | None], ...] = (("state_only", None), ("cameras_64", 64), ("cameras_128", 128))
#: the top-level built-in fields (read by benchmarks.report)
BUILTIN_KEYS = (
    "image_size",
    "steps_per_s",
    "steps_per_s_samples",
    "ratio_vs_sync_vector_16",
    "ratio_samples",
    "render_option_cost",
    "pusher_v5_steps_per_s",
    "goals",
    "config",
    "seeds",
    "render_backend",
)


def _time_steps(step, num_envs: int, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return num_envs * steps / (time.perf_counter() - t0)


def _batched(n: int, **render: Any):
    """``n`` built-in envs (``render``: ``shadows`` / ``supersample`` / ``tiled_frames`` options) and a random-action
    step."""
    import envs

    env = envs.make_vec("builtin", n, seed=0, **render)
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
    """The built-in suite's figures (top-level fields of the result)."""
    from benchmarks._stats import machine_info, package_versions

    repeats = 3 if quick else 7
    steps = {"batched_1": 100, "batched_16": 40, "batched_64": 12, "sync_vector_16": 40, "pusher_v5": 200,
             "batched_16_shadows": 40, "batched_16_supersample2": 40, "batched_16_untiled": 40, "batched_64_untiled": 12}
    if quick:
        steps = {k: max(5, v // 4) for k, v in steps.items()}
    makers = {
        "batched_1": lambda: _batched(1),
        "batched_16": lambda: _batched(16),
        "batched_64": lambda: _batched(64),
        "sync_vector_16": _sync16,
        "pusher_v5": _pusher,
        "batched_16_shadows": lambda: _batched(16, shadows=True),
        "batched_16_supersample2": lambda: _batched(16, supersample=2),
        "batched_16_untiled": lambda: _batched(16, tiled_frames=False),
        "batched_64_untiled": lambda: _batched(64, tiled_frames=False),
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
    cost = {
        opt: statistics.median(p / q for p, q in zip(samples[plain], samples[option], strict=True))
        for opt, plain, option in (("shadows", "batched_16", "batched_16_shadows"),
                                   ("supersample2", "batched_16", "batched_16_supersample2"),
                                   ("untiled", "batched_16", "batched_16_untiled"),
                                   ("untiled_64", "batched_64", "batched_64_untiled"))
    }
    return {
        "benchmark": "sim_throughput",
        "quick": quick,
        "image_size": 64,
        "steps_per_s": med,
        "steps_per_s_samples": samples,
        "ratio_vs_sync_vector_16": statistics.median(ratios),
        "ratio_samples": ratios,
        "render_option_cost": cost,
        "pusher_v5_steps_per_s": med["pusher_v5"],
        "goals": {"ratio_vs_sync_vector_16": ">= 2", "batched_16_steps_per_s": ">= 1000"},
        "config": {"repeats": repeats, "steps_per_repeat": steps, "suite": "builtin", "actions": "uniform random"},
        "machine": machine_info(),
        "versions": package_versions(),
        "seeds": [0],
        "render_backend": os.environ.get("MUJOCO_GL"),
    }


def installed(backend: str) -> bool:
    """``builtin`` always; an extra backend when its venv (or the python override) exists."""
    if backend == "builtin":
        return True
    from envs.subproc_vec import cache_dir

    _, venv, var = EXTRA[backend]
    override = os.environ.get(var)
    return Path(override).exists() if override else (cache_dir() / "venvs" / venv / "bin" / "python").exists()


def parse_backends(text: str | None, quick: bool) -> list[str]:
    """``--backends`` -> list (default: builtin + installed extras; quick: builtin only)."""
    if text is None:
        return ["builtin"] if quick else [b for b in BACKENDS if installed(b)]
    names = [b.strip() for b in text.split(",") if b.strip()]
    bad = [b for b in names if b not in BACKENDS]
    if bad or not names:
        raise WmrlError(f"--backends={text!r}: unknown {bad or 'empty list'}; valid: {', '.join(BACKENDS)}")
    return list(dict.fromkeys(names))


def measure_extra(backend: str, image_size: int | None, steps: int, repeats: int) -> dict[str, Any]:
    """Steps/s of one ManiSkill/LIBERO sub-env (agent + wrist camera at ``image_size``, or
    state-only when None): median of ``repeats`` blocks of ``steps`` zero-action steps."""
    from envs.registry import make_vec

    task = EXTRA[backend][0]
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
        meta = dict(env.metadata)
    finally:
        env.close()
    return {
        "steps_per_second": round(statistics.median(rates), 2),
        "all_repeats": [round(r, 2) for r in rates],
        "startup_seconds": round(startup, 1),
        "cameras": 0 if image_size is None else 2,
        "render_size": meta.get("render_size"),
        "load_avg_1min": round(os.getloadavg()[0], 2),
        "versions": meta.get("versions", {}),
    }


def run_extra(backend: str, steps: int, repeats: int) -> dict[str, Any]:
    """One extra backend's section: its configs, or ``skipped`` with the reason."""
    from envs.subproc_vec import BackendNotInstalledError

    out: dict[str, Any] = {"task": EXTRA[backend][0], "sub_envs": 1}
    for name, size in EXTRA_CONFIGS:
        try:
            out[name] = measure_extra(backend, size, steps, repeats)
        except BackendNotInstalledError as e:
            return {"task": EXTRA[backend][0], "skipped": str(e)}
        except WmrlError as e:
            out[name] = {"error": str(e)}
            continue
        print(f"{backend:10s} {name:12s} {out[name]['steps_per_second']:8.2f} steps/s "
              f"(start-up {out[name]['startup_seconds']} s, load {out[name]['load_avg_1min']})")
    return out


def _earlier_result(flag: str, path: str) -> dict[str, Any]:
    """An earlier result JSON named by ``flag`` (one-line error when unreadable)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise WmrlError(f"{flag} {path!r}: cannot read a JSON file ({e})") from None


def reused_builtin(path: str) -> dict[str, Any]:
    """The built-in fields of an earlier result JSON (for ``--reuse-builtin``)."""
    old = _earlier_result("--reuse-builtin", path)
    missing = [k for k in ("steps_per_s", "ratio_vs_sync_vector_16", "pusher_v5_steps_per_s") if k not in old]
    if missing:
        raise WmrlError(f"--reuse-builtin {path!r} has no built-in figures (missing {missing})")
    return old


def reused_extra(path: str) -> dict[str, dict[str, Any]]:
    """The ManiSkill3 / LIBERO sections of an earlier result JSON (for ``--reuse-extra``)."""
    old = _earlier_result("--reuse-extra", path)
    found = {b: sec for b, sec in (old.get("backends") or {}).items() if b in EXTRA}
    if not found:
        raise WmrlError(f"--reuse-extra {path!r} has no {' or '.join(EXTRA)} section")
    return found


def run_all(
    quick: bool,
    backends: list[str],
    reuse_builtin: str | None = None,
    extra_steps: int | None = None,
    repeats: int = 3,
    reuse_extra: str | None = None,
) -> dict[str, Any]:
    """Every requested backend; returns the result dict (see the module docstring). Sections
    reused from earlier results (``reuse_builtin`` / ``reuse_extra``) say so in ``source``."""
    from benchmarks._stats import machine_info, package_versions

    res: dict[str, Any] = {"benchmark": "sim_throughput", "quick": quick, "backends": {}}
    if "builtin" in backends:
        if reuse_builtin:
            old = reused_builtin(reuse_builtin)
            b = {k: old[k] for k in BUILTIN_KEYS if k in old}
            source = {
                "reused_from": reuse_builtin,
                "note": "built-in figures copied from an earlier run of this benchmark (not re-measured in this run)",
                "machine": old.get("machine"),
                "versions": old.get("versions"),
            }
        else:
            b = run(quick)
            source = {"measured": "in this run", "load_avg_1min": round(os.getloadavg()[0], 2)}
        res.update({k: b[k] for k in BUILTIN_KEYS if k in b})
        res["backends"]["builtin"] = {
            "suite": "builtin",
            "image_size": b.get("image_size", 64),
            "steps_per_s": b["steps_per_s"],
            "ratio_vs_sync_vector_16": b["ratio_vs_sync_vector_16"],
            "source": source,
        }
    steps = extra_steps or (5 if quick else 20)
    for backend in backends:
        if backend != "builtin":
            res["backends"][backend] = run_extra(backend, steps, 2 if quick else repeats)
    if reuse_extra:
        for backend, sec in reused_extra(reuse_extra).items():
            if backend not in res["backends"]:
                source = {"reused_from": reuse_extra, "note": "copied from an earlier run (not re-measured in this run)"}
                res["backends"][backend] = {**sec, "source": sec.get("source", source)}
    res["extra_config"] = {
        "unit": "env steps per second, one sub-env, zero actions, median of repeats",
        "steps": steps,
        "repeats": 2 if quick else repeats,
    }
    res["machine"] = machine_info()
    res["versions"] = package_versions()
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sim_throughput", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats/steps; builtin only unless --backends")
    p.add_argument("--backends", default=None, help="comma list of builtin, maniskill, libero (default: installed)")
    p.add_argument("--reuse-builtin", default=None, metavar="FILE", help="copy the built-in figures of FILE")
    p.add_argument("--reuse-extra", default=None, metavar="FILE",
                   help="copy the ManiSkill3 / LIBERO sections of FILE (those not measured in this run)")
    p.add_argument("--extra-steps", type=int, default=None, help="steps per timed block, extra backends")
    p.add_argument("--repeats", type=int, default=3, help="timed blocks per config, extra backends")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    from wmrl.io import atomic_write_json

    try:
        if a.extra_steps is not None and a.extra_steps < 1:
            raise WmrlError(f"--extra-steps={a.extra_steps} must be >= 1")
        if a.repeats < 1:
            raise WmrlError(f"--repeats={a.repeats} must be >= 1")
        backends = parse_backends(a.backends, a.quick)
        res = run_all(a.quick, backends, a.reuse_builtin, a.extra_steps, a.repeats, a.reuse_extra)
    except WmrlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    atomic_write_json(a.out, res)
    if "steps_per_s" in res:
        s = res["steps_per_s"]
        print(
            "builtin env-steps/s (median): "
            + ", ".join(f"{k}={v:.0f}" for k, v in s.items())
            + f"; ratio batched_16 / sync_vector_16 = {res['ratio_vs_sync_vector_16']:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
