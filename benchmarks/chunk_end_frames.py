"""Frames drawn only where they are read: the time ``ActionChunkWrapper(frames="chunk_end")`` and the
evaluation's frame skipping save, side by side with drawing every frame, and a check that every outcome
is the same.

Usage::

    python -m benchmarks.chunk_end_frames --run-dir RUN [--object-dynamics od_arm] [--renderer renderer]
        [--episodes-per-task 12] [--repeats 3] --out FILE.json [key=value ...]   # the run's Hydra overrides
    python -m benchmarks.chunk_end_frames --quick --out FILE.json   # runs/imagination_lift_quick/seed_0

A policy acting on action chunks of K steps reads a frame every K steps, but every backend drew one at
every step. Backends that can skip a frame now say so (``skip_next_frames``, :mod:`envs.base`): the
built-in suite, the state-model worlds and the renderer-drawn real env. Two callers use it: the
ranking benchmarks' episodes (``ActionChunkWrapper(..., frames="chunk_end")``, in
:func:`benchmarks.state_model_ranking.episode_successes` and the real pass of
:func:`imagination.calibration.paired_episodes`) and the main job's evaluation
(:func:`benchmarks.policy_eval._run_batch`, which also draws every frame its videos show).

Measured here, each pair in the same repeat (interleaved, so machine noise hits both alike):

* ``worlds``: the run's SFT policy plays ``--episodes-per-task`` episodes of every task (the ranking's
  starts and horizon) with ``frames="all"`` and ``"chunk_end"`` in the worlds of
  ``benchmarks.state_model_ranking``: ``real``; ``state_model`` (``--object-dynamics``, drawn by the
  simulator); with ``--renderer``, ``learned_renderer`` (the state model drawn by the learned renderer)
  and ``learned_renderer_real_dynamics`` (the real simulator drawn by it).
* ``evaluation``: the main job's evaluation batch (``_run_batch``: next-step autoreset, videos of two
  sub-envs) in the real simulator with the env's ``skip_next_frames`` hidden (every frame) and used.

Per pair: seconds (median over repeats) of each mode, ``speedup`` (the median of the per-repeat ratios
every-frame / skipping) and ``outcomes_identical`` (every episode's success, in every repeat; the
evaluation's lengths and video frames too). ``--quick`` fits (or reuses) the tiny state model and
learned renderer of ``benchmarks.state_model_ranking --quick`` and plays 2 episodes per task once.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium.vector import VectorWrapper


class EveryFrame(VectorWrapper):
    """The wrapped env without ``skip_next_frames``: callers then have every frame drawn."""

    @property
    def instructions(self) -> list[str]:
        return self.env.instructions

    @property
    def task_ids(self) -> list[str]:
        return self.env.task_ids


def _timed(fn: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn()
    return time.perf_counter() - t, out


def _pair_summary(times: dict[str, list[float]], same: list[bool], slow: str, fast: str) -> dict[str, Any]:
    return {
        f"{slow}_s": statistics.median(times[slow]),
        f"{fast}_s": statistics.median(times[fast]),
        "speedup": statistics.median(a / b for a, b in zip(times[slow], times[fast])),
        "repeats_s": times,
        "outcomes_identical": bool(all(same)),
    }


def _run(a: argparse.Namespace) -> int:
    import envs
    from benchmarks._split_worlds import RendererDrawnRealEnv, StateModelVectorEnv
    from benchmarks.imagination_lift import environment_info
    from benchmarks.policy_eval import PolicyActor, _run_batch
    from benchmarks.state_model_ranking import episode_successes, fit_quick_renderer
    from benchmarks.state_model_rl import fit_quick_state_model
    from imagination.pipeline import Pipeline, load_run_config
    from policies import load_policy
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json
    from worldmodels.object_dynamics import ObjectDynamics
    from worldmodels.state_renderer import StateRenderer

    t0 = time.perf_counter()
    run_dir = a.run_dir or Path("runs/imagination_lift_quick/seed_0" if a.quick else "runs/imagination_lift/seed_0")
    if not (run_dir / "stages").is_dir():
        raise WmrlError(f"--run-dir {run_dir} is not a wmrl run folder (no stages/); run `wmrl run` first")
    if not (run_dir / "sft" / "policy").is_dir():
        raise WmrlError(f"--run-dir {run_dir} has no SFT policy (sft/policy); finish its `wmrl run` first")
    if a.quick:
        od_dir = fit_quick_state_model(run_dir, run_dir / "quick_state_model")[0]
        renderer = fit_quick_renderer(run_dir, run_dir / "quick_renderer")
    else:
        od_dir = run_dir / a.object_dynamics
        if not (od_dir / "config.json").exists():
            raise WmrlError(f"no state model in {od_dir}; fit it with `python -m worldmodels.object_dynamics --data "
                            f"{run_dir}/data --out {od_dir} --arm`")
        renderer = None if a.renderer is None else StateRenderer.from_pretrained(run_dir / a.renderer)
    model = ObjectDynamics.from_pretrained(od_dir)
    cfg = load_run_config([*a.overrides, f"run_dir={run_dir}"], "run_quick" if a.quick else "run")
    if cfg.num_threads:
        import torch

        torch.set_num_threads(cfg.num_threads)
    pipe = Pipeline(cfg, progress=False)
    tasks, kw = pipe.tasks(), pipe.env_kwargs()
    policy = load_policy(run_dir / "sft" / "policy")
    horizon = envs.full_episode_chunks(tasks, policy.chunk_size)
    eps = a.episodes_per_task or (2 if a.quick else 12)
    repeats = 1 if a.quick else a.repeats

    def real(task: str, n: int, mode: str = "same_step") -> Any:
        return envs.make_vec(task, n, autoreset_mode=mode, **kw)

    worlds = {"real": real,
              "state_model": lambda t, n: StateModelVectorEnv(real(t, n), model, gate="terminate", seed=a.seed)}
    if renderer is not None:
        worlds["learned_renderer"] = lambda t, n: StateModelVectorEnv(real(t, n), model, gate="terminate", seed=a.seed,
                                                                     renderer=renderer)
        worlds["learned_renderer_real_dynamics"] = lambda t, n: RendererDrawnRealEnv(real(t, n), renderer)
    times = {w: {"all": [], "chunk_end": []} for w in worlds}
    same: dict[str, list[bool]] = {w: [] for w in worlds}
    ev_times, ev_same = {"every_frame": [], "skipping": []}, []
    actor = PolicyActor(policy, deterministic=True)
    for r in range(repeats):
        for w, make in worlds.items():
            got = {}
            for mode in (("all", "chunk_end") if r % 2 == 0 else ("chunk_end", "all")):
                dt, got[mode] = _timed(lambda m=mode, mk=make: episode_successes(policy, mk, tasks, eps, a.seed, horizon, m))
                times[w][mode].append(dt)
            same[w].append(bool(np.array_equal(got["all"], got["chunk_end"])))
            if not a.no_progress:
                print(f"repeat {r} {w}: all {times[w]['all'][-1]:.1f} s, chunk_end {times[w]['chunk_end'][-1]:.1f} s, "
                      f"success {got['all'].mean():.3f}", flush=True)
        ev = {}
        for mode in (("every_frame", "skipping") if r % 2 == 0 else ("skipping", "every_frame")):
            def one_eval(m: str = mode) -> list:
                out = []
                for ti, task in enumerate(tasks):
                    env = real(task, eps, "next_step")
                    env = EveryFrame(env) if m == "every_frame" else env
                    try:
                        out.append(_run_batch(env, actor, [a.seed + 1000 * ti + e for e in range(eps)],
                                              int(envs.task_spec(task).max_episode_steps), 2))
                    finally:
                        env.close()
                return out
            dt, ev[mode] = _timed(one_eval)
            ev_times[mode].append(dt)
        ev_same.append(all(np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1])
                           and all(np.array_equal(np.stack(f), np.stack(g)) for f, g in zip(x[2], y[2], strict=True))
                           for x, y in zip(ev["every_frame"], ev["skipping"], strict=True)))
    res: dict[str, Any] = {
        "worlds": {w: _pair_summary(times[w], same[w], "all", "chunk_end") for w in worlds},
        "evaluation": _pair_summary(ev_times, ev_same, "every_frame", "skipping"),
        "outcomes_identical": bool(all(all(v) for v in same.values()) and all(ev_same)),
        "policy": str(run_dir / "sft" / "policy"), "chunk_size": int(policy.chunk_size),
        "episodes_per_task": eps, "tasks": tasks, "repeats": repeats, "seed": a.seed,
        "object_dynamics": str(od_dir), "renderer": None if renderer is None else str(a.renderer or "quick_renderer"),
        "run_dir": str(run_dir), "quick": a.quick, "machine": environment_info(),
    }
    res["wall_time_s"] = time.perf_counter() - t0
    atomic_write_json(a.out, res)
    print(json.dumps({**{w: round(v["speedup"], 2) for w, v in res["worlds"].items()},
                      "evaluation": round(res["evaluation"]["speedup"], 2),
                      "outcomes_identical": res["outcomes_identical"]}))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="runs/imagination_lift_quick/seed_0, tiny models, one repeat")
    p.add_argument("--out", default="benchmarks/results/chunk_end_frames.json")
    p.add_argument("--run-dir", type=Path, default=None, help="a finished wmrl run folder")
    p.add_argument("--object-dynamics", default="od_arm", metavar="NAME",
                   help="the arm-and-object state model's folder in the run")
    p.add_argument("--renderer", default=None, metavar="NAME", help="a learned state renderer's folder in the run")
    p.add_argument("--episodes-per-task", type=int, default=None)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=4242)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of the run config (as given to the run)")
    a = p.parse_args(argv)
    from wmrl.errors import WmrlError

    try:
        if a.repeats < 1 or (a.episodes_per_task is not None and a.episodes_per_task < 1):
            raise WmrlError(f"--repeats {a.repeats} and --episodes-per-task {a.episodes_per_task} must be >= 1")
        return _run(a)
    except WmrlError as e:  # bad input: one line, before any result is written
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
