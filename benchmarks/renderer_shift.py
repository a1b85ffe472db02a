"""Does the learned renderer hold on the policy's own rollouts, and does a fine-tune on them mend it?

The renderer (:mod:`worldmodels.state_renderer`) is fitted on the demos. In a world drawn by it, RL shows the
policy frames of the states its own actions reach: failed grasps, knocked cubes, poses the demos never held.
Per run folder (one per seed), on the fixed pool of starts (:mod:`benchmarks.fixed_starts`):

1. the renderer (``RUN/NAME``) draws, from each episode's real first frame, the real states of (a) its held-out
   demo episodes and (b) the pool rollouts of a later policy (``--test-policy``, e.g. a co-evolution line's
   round-r policy), and is scored by PSNR against the real frames (split by the rollouts' outcome);
2. it is fine-tuned, as a co-evolution round would, on its training demos plus the pool rollouts of an
   earlier policy of the line (``--fit-policy``, e.g. round r - 1's), those rollouts drawn ``--rollout-share``
   of the time, and scored again on (a) and (b): a gain on (b) with (a) kept says the policy's states were
   the renderer's gap and its own rollouts close it.

Usage::

    python -m benchmarks.renderer_shift --runs runs/s55/lift/seed_{0,1,2} --renderer renderer \\
        --policy-work runs/s60/rend --fit-policy sm_warm_1 --test-policy sm_warm_2 --starts-per-task 16 \\
        --out benchmarks/results/renderer_shift.json
    python -m benchmarks.renderer_shift --quick --out /tmp/renderer_shift_quick.json

A policy NAME is the run's own stage (``sft``, ``round_0``, ``real_rl``: ``RUN/NAME/policy``) or a
fixed-starts arm (``POLICY_WORK/<run key>/NAME/policy``). Each run writes ``WORK/<run key>/``: the fine-tuned
renderer (its fit's run folder inside: resumable) and videos of failed test rollouts, real | drawn before the
fine-tune (``test_failed_before.mp4``) and after (``test_failed_after.mp4``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._stats import run_keys

STAGES = ("sft", "round_0", "real_rl")  # policies a finished run folder holds itself


def policy_dir(src: Path, policy_work: Path, key: str, name: str) -> Path:
    """The folder of policy ``name``: the run's own stage, else the fixed-starts arm in ``policy_work/key``."""
    from wmrl.errors import CheckpointError

    d = src / name / "policy" if name in STAGES else policy_work / key / name / "policy"
    if not d.is_dir():
        raise CheckpointError(f"policy {name!r}: {d} not found; expected a run stage ({', '.join(STAGES)}) or a "
                              f"fixed-starts arm under {policy_work / key}")
    return d


def scores(model: Any, demos: Any, demo_test: list[int], rollouts: Any) -> dict[str, Any]:
    """PSNR (dB) of ``model`` drawing from each episode's first frame: the held-out demo episodes ``demo_test``
    and the ``rollouts`` (all, and the successful and failed ones apart)."""
    from worldmodels.state_renderer import evaluate_state_renderer

    ok = np.asarray(rollouts.episode_success, bool)
    out: dict[str, Any] = {"demos_held_out": evaluate_state_renderer(model, demos, np.asarray(demo_test)),
                           "rollouts": evaluate_state_renderer(model, rollouts, np.arange(len(ok)))}
    for name, eps in (("rollouts_success", np.flatnonzero(ok)), ("rollouts_failed", np.flatnonzero(~ok))):
        if len(eps):
            out[name] = evaluate_state_renderer(model, rollouts, eps)
    return out


def run_one(src: Path, work: Path, policy_work: Path, key: str, renderer: str | None, fit_policy: str,
            test_policy: str, starts_per_task: int, rl_seed: int, steps: int, lr: float, batch_size: int,
            rollout_share: float, progress: bool = True) -> dict[str, Any]:
    """The measurement on one run folder (``renderer`` None: a tiny renderer fitted here, quick mode)."""
    import envs
    from benchmarks.fixed_starts import play_pool, pool_starts, rl_seeds
    from imagination.pipeline import run_config_of, run_env_kwargs
    from policies import load_policy
    from wmrl.data import load_trajectories
    from worldmodels.state_renderer import StateRenderer, fine_tune_state_renderer, held_out_video

    t0 = time.perf_counter()
    out = work / key
    cfg = run_config_of(src)
    tasks = envs.resolve_tasks(cfg.suite)
    task_ids, seeds = pool_starts(tasks, starts_per_task, rl_seeds(cfg, rl_seed)[1])
    env_kwargs = run_env_kwargs(cfg)
    fit_dir, test_dir = (policy_dir(src, policy_work, key, n) for n in (fit_policy, test_policy))
    if renderer is None:
        from benchmarks.state_model_ranking import fit_quick_renderer

        model = fit_quick_renderer(src, out / "renderer_quick")
        base_dir = out / "renderer_quick"
    else:
        base_dir = src / renderer
        model = StateRenderer.from_pretrained(base_dir)
    meta = json.loads((base_dir / "config.json").read_text())["metrics"]
    demo_test = [int(e) for e in meta.get("test_episode_indices", [])]
    if not demo_test:
        from wmrl.errors import CheckpointError

        raise CheckpointError(f"{base_dir} records no held-out demo episodes (test_episode_indices); fit it with "
                              "test_fraction > 0")
    demos = load_trajectories(src / "data")
    fit_roll, fit_stats = play_pool(load_policy(fit_dir), task_ids, seeds, env_kwargs)
    test_roll, test_stats = play_pool(load_policy(test_dir), task_ids, seeds, env_kwargs)
    before = scores(model, demos, demo_test, test_roll)

    tuned, fit_metrics = fine_tune_state_renderer(model, demos, fit_roll, steps, lr, rollout_share, batch_size,
                                                  skip_demo_episodes=demo_test, progress=progress,
                                                  run_dir=out / "renderer_ft" / "fit")
    n_d, n_r = demos.num_episodes - len(demo_test), fit_roll.num_episodes
    tuned.save_pretrained(out / "renderer_ft", {**fit_metrics, "fine_tuned_from": str(base_dir)})
    after = scores(tuned, demos, demo_test, test_roll)
    failed = np.flatnonzero(~np.asarray(test_roll.episode_success, bool))[:6]
    if len(failed):
        held_out_video(model, test_roll, failed, out / "test_failed_before.mp4")
        held_out_video(tuned, test_roll, failed, out / "test_failed_after.mp4")
    return {
        "run": str(src),
        "renderer": str(base_dir),
        "fit_policy": str(fit_dir),
        "test_policy": str(test_dir),
        "starts": len(task_ids),
        "fit_rollouts": {"episodes": n_r, "frames": int(fit_roll.num_frames),
                         "success": float(fit_stats["success_rate"])},
        "test_rollouts": {"episodes": int(test_roll.num_episodes), "frames": int(test_roll.num_frames),
                          "success": float(test_stats["success_rate"])},
        "train_demo_episodes": n_d,
        "before": before,
        "after": after,
        "gain_db": {k: after[k]["psnr_db"] - before[k]["psnr_db"] for k in before if k in after},
        "fine_tune": {"steps": steps, "lr": lr, "batch_size": batch_size, "rollout_share": rollout_share,
                      "final_loss": fit_metrics["final_loss"], "wall_time_s": fit_metrics["wall_time_s"]},
        "wall_time_s": time.perf_counter() - t0,
    }


def summarize(per_run: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean over runs of each score before and after, and of the gains (with the per-run values)."""
    keys = [k for k in per_run[0]["before"] if all(k in r["before"] and k in r["after"] for r in per_run)]
    return {k: {"before_psnr_db": float(np.mean([r["before"][k]["psnr_db"] for r in per_run])),
                "after_psnr_db": float(np.mean([r["after"][k]["psnr_db"] for r in per_run])),
                "anchor_psnr_db": float(np.mean([r["before"][k]["anchor_psnr_db"] for r in per_run])),
                "gain_db": float(np.mean([r["gain_db"][k] for r in per_run])),
                "gain_db_by_run": [float(r["gain_db"][k]) for r in per_run]} for k in keys}


def _one(*args: Any, progress: bool, config_name: str) -> dict[str, Any]:
    return run_one(*args, progress=progress)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.renderer_shift", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=Path, nargs="+", default=None,
                   help="finished wmrl run folders, one per seed (default runs/imagination_lift/seed_{0,1,2}; "
                   "quick: runs/imagination_lift_quick/seed_0)")
    p.add_argument("--renderer", default="renderer", help="the renderer's folder name in each run (default renderer)")
    p.add_argument("--policy-work", type=Path, default=Path("runs/fixed_starts"),
                   help="the fixed-starts work folder whose arms --fit-policy / --test-policy name")
    p.add_argument("--fit-policy", default="sft", help="the policy whose pool rollouts the fine-tune reads")
    p.add_argument("--test-policy", default="real_rl", help="the policy whose pool rollouts score the renderer")
    p.add_argument("--starts-per-task", type=int, default=16)
    p.add_argument("--rl-seed", type=int, default=0, help="the fixed-starts pool's rl seed (its starts)")
    p.add_argument("--steps", type=int, default=500, help="fine-tune steps (default 500)")
    p.add_argument("--lr", type=float, default=5e-4, help="fine-tune peak learning rate, cosine to 0")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--rollout-share", type=float, default=0.5,
                   help="share of the fine-tune's draws from the rollouts (the rest: the training demos)")
    p.add_argument("--work", type=Path, default=None, help="default runs/renderer_shift[_quick]")
    p.add_argument("--quick", action="store_true",
                   help="the quick run, a tiny renderer fitted here, 2 starts per task, 20 fine-tune steps (CI smoke)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (spawned processes of one torch thread)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    import sys

    from benchmarks._stats import machine_info
    from benchmarks.real_rl import run_each
    from wmrl.errors import ConfigError, WmrlError
    from wmrl.io import atomic_write_json

    try:
        if not 0.0 < a.rollout_share < 1.0:
            raise ConfigError(f"--rollout-share {a.rollout_share}: expected a share in (0, 1)")
        if a.steps < 1 or a.starts_per_task < 1:
            raise ConfigError(f"--steps {a.steps} and --starts-per-task {a.starts_per_task} must be >= 1")
        if a.quick:
            a.runs = a.runs or [Path("runs/imagination_lift_quick/seed_0")]
            a.starts_per_task, a.steps, a.batch_size = 2, 20, 8
        a.runs = a.runs or [Path(f"runs/imagination_lift/seed_{s}") for s in (0, 1, 2)]
        work = a.work or Path("runs/renderer_shift_quick" if a.quick else "runs/renderer_shift")
        keys = run_keys(a.runs)
        jobs = {(k,): (src, work, a.policy_work, k, None if a.quick else a.renderer, a.fit_policy, a.test_policy,
                       a.starts_per_task, a.rl_seed, a.steps, a.lr, a.batch_size, a.rollout_share)
                for src, k in zip(a.runs, keys, strict=True)}
        for (k,), args in jobs.items():  # every policy and renderer found before any work
            for name in (a.fit_policy, a.test_policy):
                policy_dir(args[0], a.policy_work, k, name)
            if not a.quick:
                from worldmodels.state_renderer import StateRenderer

                StateRenderer.from_pretrained(args[0] / a.renderer)
        t0 = time.perf_counter()
        results = run_each(_one, jobs, a.jobs, not a.no_progress)
    except WmrlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    per_run = [results[k] for k in keys]
    res = {"summary": summarize(per_run), "runs": {k: results[k] for k in keys}, "quick": bool(a.quick),
           "argv": sys.argv[1:] if argv is None else list(argv), "wall_time_s": time.perf_counter() - t0,
           "machine": machine_info()}
    atomic_write_json(a.out, res)
    for k, v in res["summary"].items():
        print(f"{k:18s} PSNR {v['before_psnr_db']:.2f} -> {v['after_psnr_db']:.2f} dB ({v['gain_db']:+.2f}; "
              f"anchor {v['anchor_psnr_db']:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
