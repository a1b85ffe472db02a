"""LIBERO benchmark: success of a policy on a LIBERO suite with the fixed initial states.

Usage::

    python -m benchmarks.libero --suite libero_spatial --policy runs/policy/policy --out results/libero.json
    python -m benchmarks.libero --suite libero_goal --policy random --episodes 5 --num-envs 2 --out r.json
    python -m benchmarks.libero --suite libero_goal --quick --out benchmarks/results/libero_quick.json

Protocol (LIBERO / OpenVLA evaluation): every task of the suite runs one episode from each of
its 50 fixed initial states (``--episodes`` takes the first ones), after 10 settling no-op
steps, with the suite's step limit (spatial 220, object 280, goal 300, libero_10 520,
libero_90 400); success is LIBERO's goal predicate. Per-task success rate with a 95% Wilson
interval, the mean over tasks, episode videos (agent view | wrist view), a progress bar;
sub-envs run in parallel worker processes (``--num-envs``).
``--quick``: the first task, 2 episodes (init states 0 and 1) cut at 30 steps, 64x64 images.
A full 500-episode suite is hours on a 2-core CPU (about 4 steps/s per core with two 128x128
cameras): run it on a machine with many cores.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wmrl.errors import WmrlError

SUITE_NAMES = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.libero", description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", default="libero_spatial", help=f"one of {', '.join(SUITE_NAMES)}")
    p.add_argument("--task", default=None, help="only this task of the suite (index or bddl name)")
    p.add_argument("--policy", default="random", help="'random', 'zero' or a saved wmrl policy folder")
    p.add_argument("--episodes", type=int, default=50, help="episodes per task: init states 0..episodes-1 (max 50)")
    p.add_argument("--max-steps", type=int, default=None, help="cut episodes shorter than the suite's limit")
    p.add_argument("--num-envs", type=int, default=2, help="parallel sub-envs (worker processes)")
    p.add_argument("--image-size", type=int, default=128)
    p.add_argument("--no-wrist-image", action="store_true")
    p.add_argument("--no-reflections", action="store_true", help="faster rendering, not LIBERO's exact look")
    p.add_argument("--seed", type=int, default=0, help="seed of the robosuite envs and of the random policy")
    p.add_argument("--videos", type=int, default=2, help="episodes per task recorded as mp4")
    p.add_argument("--quick", action="store_true", help="one task, 2 short episodes, 64x64 (CI)")
    p.add_argument("--out", required=True, help="result JSON path")
    args = p.parse_args(argv)
    try:
        run(args)
    except WmrlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def run(args: argparse.Namespace) -> dict:
    import envs.libero  # noqa: F401  (registers the suites)
    from envs.libero.tasks import MAX_EPISODE_STEPS, NUM_INIT_STATES, SUITES
    from envs.registry import resolve_tasks
    from wmrl.io import atomic_write_json

    if args.suite not in SUITE_NAMES:
        raise WmrlError(f"unknown LIBERO suite {args.suite!r}; valid suites: {', '.join(SUITE_NAMES)}")
    tasks = resolve_tasks(args.suite)
    if args.task is not None:
        names = [n for n, _ in SUITES[args.suite]]
        if args.task.isdigit() and int(args.task) < len(names):
            tasks = [tasks[int(args.task)]]
        elif args.task.removeprefix(args.suite + ".") in names:
            tasks = [f"{args.suite}.{args.task.removeprefix(args.suite + '.')}"]
        else:
            raise WmrlError(f"unknown task {args.task!r} in {args.suite}; valid: 0..{len(names) - 1} or {', '.join(names)}")
    if not 1 <= args.episodes <= NUM_INIT_STATES:
        raise WmrlError(f"--episodes={args.episodes}; expected 1..{NUM_INIT_STATES} (one per fixed init state)")
    if args.quick:
        tasks, args.episodes, args.image_size, args.num_envs, args.videos = tasks[:1], 2, 64, 2, 1
        args.max_steps = args.max_steps or 30
    limit = MAX_EPISODE_STEPS[args.suite] if args.max_steps is None else min(args.max_steps, MAX_EPISODE_STEPS[args.suite])
    out = Path(args.out)
    from benchmarks._sim_eval import evaluate_tasks

    result = evaluate_tasks(
        backend="libero",
        tasks=tasks,
        policy=args.policy,
        episode_options=lambda t: [{"init_state_id": e} for e in range(args.episodes)],
        max_steps=lambda t: limit,
        env_kwargs={
            "image_size": args.image_size,
            "wrist_image": not args.no_wrist_image,
            "reflections": not args.no_reflections,
            "seed": args.seed,
        },
        num_envs=args.num_envs,
        seed=args.seed,
        video_dir=out.with_name(out.stem + "_videos") if args.videos > 0 else None,
        record_videos=args.videos,
        protocol=f"LIBERO fixed init states 0..{args.episodes - 1} per task, 10 settle steps, "
        f"max {limit} steps (suite limit {MAX_EPISODE_STEPS[args.suite]})",
        config={k: v for k, v in vars(args).items() if k != "out"},
    )
    result["suite"] = args.suite
    atomic_write_json(out, result)
    print(f"{args.suite}: mean success {result['mean_success']:.3f} (95% CI {result['mean_ci95'][0]:.3f}-"
          f"{result['mean_ci95'][1]:.3f}) over {result['episodes']} episodes -> {out}")
    return result


if __name__ == "__main__":
    raise SystemExit(main())
