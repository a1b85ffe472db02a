"""How much can GRPO learn from a policy? pass@k and group outcomes in the *real* simulator.

Usage::

    python -m benchmarks.rl_headroom --runs runs/imagination_lift/seed_0 ... [--stds 0.05 0.1 0.2 0.3]
        [--starts-per-task 8] [--samples 16] [--group-size 8] [--policy sft/policy] --out FILE.json
    python -m benchmarks.rl_headroom --quick --out FILE.json   # after benchmarks.imagination_lift --quick

GRPO scores a trajectory by its success and normalises within a group that shares a start, so a
group where every member fails (or every member succeeds) carries no gradient: dynamic sampling
drops it. Whatever the world model or the reward, RL can only fix the failures on which sampling
sometimes succeeds. This benchmark measures that headroom for a policy of finished ``wmrl run``
folders (default: the SFT policy): for ``--starts-per-task`` real starts per task it runs the
policy's mean action once and ``--samples`` sampled episodes per exploration std, all from the
same start, and reports per std:

* ``sample_success``: success of a sampled episode;
* ``pass_at_k``: the unbiased estimate of P(at least one of k samples succeeds), k = 1, 2, 4, ...;
* ``group``: for a group of ``--group-size`` samples (drawn without replacement from the
  ``--samples``), the probability that it is all-fail, all-success or mixed (learnable);
* ``failed_starts``: the same, only over the starts where the mean action fails (what RL has to
  fix): ``learnable`` is the expected fraction of them on which a group holds a success.

Read-only on the run folders; nothing is trained.
"""

from __future__ import annotations

import argparse
import os
import time
from math import comb
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")

DEFAULT_STDS = (0.05, 0.1, 0.2, 0.3)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased P(at least one success among k of n samples with c successes) (Chen et al. 2021)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    return 1.0 - comb(n - c, k) / comb(n, k)


def group_outcome_probs(n: int, c: int, g: int) -> tuple[float, float, float]:
    """``(all_fail, all_success, mixed)`` of a group of ``g`` drawn without replacement from ``n``
    samples with ``c`` successes (hypergeometric)."""
    if not 1 <= g <= n:
        raise ValueError(f"group size {g} must be in [1, n={n}]")
    fail, succ = comb(n - c, g) / comb(n, g), comb(c, g) / comb(n, g)
    return fail, succ, 1.0 - fail - succ


def summarize_counts(counts: np.ndarray, mean_ok: np.ndarray, n: int, g: int) -> dict[str, Any]:
    """Headroom figures from per-start success counts.

    Args:
        counts: int ``(S,)`` successes among the ``n`` samples of each start.
        mean_ok: bool ``(S,)`` whether the mean action succeeded from that start.
        n: samples per start; g: GRPO group size.
    """
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= n]
    probs = np.array([group_outcome_probs(n, int(c), g) for c in counts]).reshape(-1, 3)
    failed = ~mean_ok
    out: dict[str, Any] = {
        "starts": int(len(counts)),
        "sample_success": float(counts.sum() / (n * len(counts))) if len(counts) else float("nan"),
        "pass_at_k": {str(k): float(np.mean([pass_at_k(n, int(c), k) for c in counts])) for k in ks},
        "group": {
            "all_fail": float(probs[:, 0].mean()),
            "all_success": float(probs[:, 1].mean()),
            "mixed": float(probs[:, 2].mean()),
        },
        "failed_starts": {
            "count": int(failed.sum()),
            "learnable": float(probs[failed, 2].mean()) if failed.any() else float("nan"),
            "never_solved_in_n": float((counts[failed] == 0).mean()) if failed.any() else float("nan"),
        },
    }
    return out


def _run_settings(src: Path) -> tuple[int, list[str], dict[str, Any]]:
    """(seed, task ids, ``envs.make_vec`` kwargs) of a finished run folder, read from its config.yaml."""
    from omegaconf import OmegaConf

    import envs
    from imagination.pipeline import RenderConfig
    from wmrl.errors import WmrlError

    f = src / "config.yaml"
    if not f.exists():
        raise WmrlError(f"{f} not found; expected a finished wmrl run folder")
    cfg = OmegaConf.to_container(OmegaConf.load(f), resolve=True)
    if not isinstance(cfg, dict) or not isinstance(cfg.get("seed"), int):
        raise WmrlError(f"{f} gives no integer seed; expected a wmrl run folder's config")
    render = RenderConfig(**(cfg.get("render") or {}))
    kwargs = {"image_size": int(cfg.get("image_size", 64)), **render.env_kwargs()}
    return int(cfg["seed"]), envs.resolve_tasks(cfg.get("suite", "builtin")), kwargs


def measure_run(
    src: Path,
    policy_subdir: str,
    stds: list[float],
    starts_per_task: int,
    samples: int,
    group_size: int,
    progress: bool = True,
) -> dict[str, Any]:
    """Headroom of one run folder's policy; see the module docstring."""
    import torch
    from tqdm.auto import tqdm

    import envs
    from envs.wrappers import ActionChunkWrapper
    from imagination.rollout_buffer import collect_first_episodes
    from imagination.trainer_utils import set_exploration_std
    from policies import load_policy
    from wmrl.errors import WmrlError

    if not 1 <= group_size <= samples:
        raise WmrlError(f"--group-size {group_size} must be in [1, --samples {samples}]")
    seed, tasks, kwargs = _run_settings(src)
    pdir = src / policy_subdir
    if not pdir.exists():
        raise WmrlError(f"policy folder {pdir} not found; expected a saved policy (e.g. sft/policy)")
    policy = load_policy(pdir)
    n = samples * len(tasks)
    env = ActionChunkWrapper(
        envs.make_vec(
            [t for t in tasks for _ in range(samples)], n, autoreset_mode="same_step", seed=seed, **kwargs
        ),
        policy.chunk_size,
    )
    horizon = envs.full_episode_chunks(tasks, policy.chunk_size)
    task_of = np.repeat(np.arange(len(tasks)), samples)
    counts = {s: np.zeros((len(tasks), starts_per_task), np.int64) for s in stds}
    mean_ok = np.zeros((len(tasks), starts_per_task), bool)
    env_steps = 0.0
    bar = tqdm(total=starts_per_task * (1 + len(stds)), desc=f"headroom {src.name}", disable=not progress)
    torch.manual_seed(seed)
    with torch.no_grad():
        for j in range(starts_per_task):
            # one start per task and j; seeds no training or evaluation stage uses
            seeds = [300_000 + 10_000 * seed + 100 * int(t) + j for t in task_of]
            b = collect_first_episodes(env, policy, horizon, seeds=seeds, deterministic=True)
            ok = (b.success & b.valid).any(0).numpy()
            mean_ok[:, j] = ok.reshape(len(tasks), samples)[:, 0]
            env_steps += float(b.executed.sum())
            bar.update()
            for s in stds:
                set_exploration_std(s, policy)
                b = collect_first_episodes(env, policy, horizon, seeds=seeds)
                ok = (b.success & b.valid).any(0).numpy()
                counts[s][:, j] = ok.reshape(len(tasks), samples).sum(1)
                env_steps += float(b.executed.sum())
                bar.update()
    bar.close()
    env.close()
    by_std = {}
    for s in stds:
        row = summarize_counts(counts[s].ravel(), mean_ok.ravel(), samples, group_size)
        row["per_task"] = {
            t: summarize_counts(counts[s][i], mean_ok[i], samples, group_size) for i, t in enumerate(tasks)
        }
        by_std[str(s)] = row
    return {
        "seed": seed,
        "policy": str(pdir),
        "mean_action_success": float(mean_ok.mean()),
        "mean_action_success_per_task": {t: float(mean_ok[i].mean()) for i, t in enumerate(tasks)},
        "by_std": by_std,
        "counts": {str(s): counts[s].tolist() for s in stds},
        "mean_action_ok": mean_ok.tolist(),
        "real_env_steps": env_steps,
    }


def aggregate(per_run: dict[str, dict[str, Any]], stds: list[float], samples: int, g: int) -> dict[str, Any]:
    """Pool every run's starts per std (each start weighs the same)."""
    out = {}
    for s in stds:
        counts = np.concatenate([np.ravel(r["counts"][str(s)]) for r in per_run.values()])
        ok = np.concatenate([np.ravel(r["mean_action_ok"]) for r in per_run.values()])
        out[str(s)] = summarize_counts(counts, ok, samples, g)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=Path, nargs="+", default=None, help="finished wmrl run folders")
    p.add_argument("--policy", default="sft/policy", help="policy folder inside each run (default sft/policy)")
    p.add_argument("--stds", type=float, nargs="+", default=list(DEFAULT_STDS), help="exploration stds")
    p.add_argument("--starts-per-task", type=int, default=8)
    p.add_argument("--samples", type=int, default=16, help="sampled episodes per start and std")
    p.add_argument("--group-size", type=int, default=8, help="GRPO group size of the group figures")
    p.add_argument("--quick", action="store_true", help="runs/imagination_lift_quick/seed_0, 2 starts, 4 samples")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    import torch

    from benchmarks.imagination_lift import environment_info
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    torch.set_num_threads(1)
    if a.quick:
        a.starts_per_task, a.samples, a.group_size, a.stds = 2, 4, 4, [0.1]
    if a.runs is None:
        a.runs = (
            [Path("runs/imagination_lift_quick/seed_0")]
            if a.quick
            else [Path(f"runs/imagination_lift/seed_{s}") for s in (0, 1, 2)]
        )
    bad = [s for s in a.stds if not s > 0]
    if bad:
        raise WmrlError(f"--stds {bad[0]} must be > 0")
    if a.starts_per_task < 1 or a.samples < 1:
        raise WmrlError(f"--starts-per-task {a.starts_per_task} and --samples {a.samples} must be >= 1")
    t0 = time.perf_counter()
    per_run = {}
    for src in a.runs:
        per_run[src.name] = measure_run(
            src, a.policy, a.stds, a.starts_per_task, a.samples, a.group_size, progress=not a.no_progress
        )
    res = {
        "benchmark": "rl_headroom",
        "quick": bool(a.quick),
        "runs": [str(r) for r in a.runs],
        "policy": a.policy,
        "stds": a.stds,
        "starts_per_task": a.starts_per_task,
        "samples": a.samples,
        "group_size": a.group_size,
        "mean_action_success": float(np.mean([r["mean_action_success"] for r in per_run.values()])),
        "by_std": aggregate(per_run, a.stds, a.samples, a.group_size),
        "per_run": per_run,
        "real_env_steps": float(sum(r["real_env_steps"] for r in per_run.values())),
        "wall_time_s": time.perf_counter() - t0,
        "machine": environment_info(),
    }
    atomic_write_json(a.out, res)
    print(f"mean action success {res['mean_action_success']:.3f}")
    for s, row in res["by_std"].items():
        fs = row["failed_starts"]
        print(
            f"std {s}: sample success {row['sample_success']:.3f}, pass@k {row['pass_at_k']}, "
            f"group of {a.group_size} mixed {row['group']['mixed']:.3f}; of {fs['count']} starts the mean "
            f"action fails, learnable {fs['learnable']:.3f}, never solved in {a.samples} {fs['never_solved_in_n']:.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
