"""ManiSkill3 benchmark: success of a policy on ManiSkill tasks with fixed seeds.

Usage::

    python -m benchmarks.maniskill --task PickCube-v1 --policy random --out results/ms.json
    python -m benchmarks.maniskill --task maniskill --policy runs/policy/policy --episodes 100 --num-envs 8
    python -m benchmarks.maniskill --quick --out benchmarks/results/maniskill_quick.json

Protocol: episode ``e`` (0 <= e < ``--episodes``) of every task is reset with seed
``--seed + e`` (ManiSkill's seeded reset fixes the initial layout and goal), controller
``pd_ee_delta_pose``, the registered episode limit (ManiSkill's default). Per-task success
rate with a 95% Wilson interval, their mean, episode videos (agent view | wrist view) next to
the JSON, progress bar. Sub-envs run in parallel worker processes (``--num-envs``).
``--quick``: the first task, 2 episodes, 64x64 images, 2 workers (fits CI).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wmrl.errors import WmrlError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.maniskill", description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="maniskill", help="a ManiSkill task id (PickCube-v1, ...) or the suite 'maniskill'")
    p.add_argument("--policy", default="random", help="'random', 'zero' or a saved wmrl policy folder")
    p.add_argument("--episodes", type=int, default=50, help="episodes per task (seeds seed..seed+episodes-1)")
    p.add_argument("--num-envs", type=int, default=2, help="parallel sub-envs (worker processes on CPU)")
    p.add_argument("--image-size", type=int, default=128)
    p.add_argument("--wrist-image", action="store_true", help="add the hand camera (panda_wristcam)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sim-backend", default="auto", choices=["auto", "cpu", "gpu"])
    p.add_argument("--videos", type=int, default=2, help="episodes per task recorded as mp4")
    p.add_argument("--quick", action="store_true", help="one task, 2 episodes, 64x64 (CI)")
    p.add_argument("--out", required=True, help="result JSON path")
    args = p.parse_args(argv)
    try:
        run(args)
    except WmrlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def run(args: argparse.Namespace) -> dict:
    import envs.maniskill  # noqa: F401  (registers the tasks)
    from envs.registry import list_tasks, resolve_tasks
    from envs.registry import task_spec as spec
    from wmrl.io import atomic_write_json

    valid = list_tasks("maniskill")
    name = args.task.removeprefix("maniskill/")
    if name != "maniskill" and name not in valid:
        raise WmrlError(f"unknown ManiSkill task {args.task!r}; valid: maniskill (all), {', '.join(valid)}")
    tasks = resolve_tasks(name)
    if args.episodes < 1:
        raise WmrlError(f"--episodes={args.episodes} must be >= 1")
    if args.quick:
        tasks, args.episodes, args.image_size, args.num_envs, args.videos = tasks[:1], 2, 64, 2, 1
    out = Path(args.out)
    from benchmarks._sim_eval import evaluate_tasks

    result = evaluate_tasks(
        backend="maniskill",
        tasks=tasks,
        policy=args.policy,
        episode_options=lambda t: [{"seed": args.seed + e} for e in range(args.episodes)],
        max_steps=lambda t: spec(t).max_episode_steps,
        env_kwargs={"image_size": args.image_size, "wrist_image": args.wrist_image, "sim_backend": args.sim_backend},
        num_envs=args.num_envs,
        seed=args.seed,
        video_dir=out.with_name(out.stem + "_videos") if args.videos > 0 else None,
        record_videos=args.videos,
        protocol=f"fixed seeds {args.seed}..{args.seed + args.episodes - 1} per task, pd_ee_delta_pose, "
        "ManiSkill's episode limits",
        config={k: v for k, v in vars(args).items() if k != "out"},
    )
    atomic_write_json(out, result)
    print(f"mean success {result['mean_success']:.3f} (95% CI {result['mean_ci95'][0]:.3f}-{result['mean_ci95'][1]:.3f}) "
          f"over {result['episodes']} episodes -> {out}")
    return result


if __name__ == "__main__":
    raise SystemExit(main())
