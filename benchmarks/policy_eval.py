"""Evaluate a policy in the real simulator: per-task and mean success with 95% Wilson CIs, rollout videos.

Usage::

    python -m benchmarks.policy_eval --policy runs/policy/policy --suite builtin --episodes-per-task 20 \
        --out results/eval.json          # also: --policy expert:0.3, --policy random
    wmrl evaluate --policy PATH ...      # same

Episodes of each task run in batches of ``--num-envs`` sub-envs; each episode's sub-env is reset
with its own seed, ``seed + 1000 * task_index + episode``, so two runs with the same seed see the same
initial layouts whatever their batch size (the scripted experts' action noise still follows the
batch). A chunk policy re-plans every K steps (open-loop within a chunk). Videos of the first
episodes of every task are written next to the JSON (``<out stem>_videos/<task>.mp4``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._stats import machine_info, package_versions, wilson_ci
from wmrl.errors import WmrlError


class _Actor:
    """Uniform wrapper: ``reset()``, ``chunk(obs, info, env) -> float32 (N, K, 7)``."""

    chunk_size = 1
    image_size = 64
    use_wrist = False
    description = ""

    def reset(self) -> None:
        pass

    def chunk(self, obs: dict, info: dict, env: Any) -> np.ndarray:
        raise NotImplementedError


class PolicyActor(_Actor):
    """A :class:`policies.base.Policy` (or anything with ``act`` and ``chunk_size``)."""

    def __init__(self, policy: Any, deterministic: bool = True):
        self.policy = policy
        self.chunk_size = int(policy.chunk_size)
        self.image_size = int(policy.image_size)
        self.use_wrist = bool(getattr(getattr(policy, "config", None), "use_wrist", False))
        self.deterministic = deterministic
        self.description = f"{type(policy).__name__}(K={self.chunk_size}, deterministic={deterministic})"

    def reset(self) -> None:
        if hasattr(self.policy, "reset"):
            self.policy.reset()

    def chunk(self, obs: dict, info: dict, env: Any) -> np.ndarray:
        import torch

        with torch.no_grad():
            out = self.policy.act(obs, list(env.instructions), deterministic=self.deterministic)
        return out.actions.cpu().numpy().astype(np.float32)


class ExpertActor(_Actor):
    """The scripted expert of the built-in suite with action noise ``noise``."""

    def __init__(self, noise: float, seed: int):
        self.noise, self.seed, self.expert = noise, seed, None
        self.description = f"expert(noise={noise})"

    def bind(self, env: Any, seed: int) -> None:
        import envs

        self.expert = envs.make_expert(env, noise=self.noise, seed=seed)

    def chunk(self, obs: dict, info: dict, env: Any) -> np.ndarray:
        return np.asarray(self.expert.act(obs, info), dtype=np.float32)[:, None]


class RandomActor(_Actor):
    """Uniform random actions in [-1, 1]."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.description = "random"

    def chunk(self, obs: dict, info: dict, env: Any) -> np.ndarray:
        return self.rng.uniform(-1, 1, (env.num_envs, 1, 7)).astype(np.float32)


def make_actor(policy: Any, seed: int = 0, deterministic: bool = True) -> _Actor:
    """``policy``: a Policy object, ``"random"``, ``"expert"``/``"expert:NOISE"``, or a checkpoint folder."""
    if isinstance(policy, _Actor):
        return policy
    if isinstance(policy, str):
        if policy == "random":
            return RandomActor(seed)
        if policy == "expert" or policy.startswith("expert:"):
            try:
                noise = float(policy.split(":", 1)[1]) if ":" in policy else 0.0
            except ValueError:
                raise WmrlError(f"--policy {policy!r}: expected expert:NOISE with a number, e.g. expert:0.3") from None
            if noise < 0:
                raise WmrlError(f"--policy {policy!r}: noise must be >= 0")
            return ExpertActor(noise, seed)
        if not Path(policy).exists():
            raise WmrlError(f"--policy {policy!r} is neither 'random', 'expert:NOISE' nor an existing checkpoint folder")
        from policies import load_policy

        actor = PolicyActor(load_policy(policy), deterministic)
        actor.description = f"{policy} ({actor.description})"
        return actor
    if hasattr(policy, "act") and hasattr(policy, "chunk_size"):
        return PolicyActor(policy, deterministic)
    raise WmrlError(f"policy of type {type(policy).__name__} is not a Policy, 'random', 'expert:NOISE' or a path")


def _run_batch(env: Any, actor: _Actor, seeds: list[int], max_steps: int, record: int) -> tuple[np.ndarray, np.ndarray, list]:
    """Run one episode in each of the ``n = len(seeds)`` sub-envs, sub-env ``i`` reset with its own
    ``seeds[i]`` (so an episode's start does not depend on how the episodes are batched). Returns
    success bool (n,), length (n,), frames of the first ``record`` sub-envs (lists of (H,W,3))."""
    n = len(seeds)
    obs, info = env.reset(seed=list(seeds))
    if isinstance(actor, ExpertActor):
        actor.bind(env, seeds[0])
    actor.reset()
    done = np.zeros(n, bool)
    success = np.zeros(n, bool)
    length = np.zeros(n, int)
    frames: list[list[np.ndarray]] = [[obs["image"][i].copy()] for i in range(record)]
    queue: np.ndarray | None = None
    qpos = 0
    skip_frames = getattr(env, "skip_next_frames", None)  # frames nobody reads need not be drawn
    for _ in range(max_steps + 1):
        if queue is None or qpos >= queue.shape[1]:
            queue, qpos = actor.chunk(obs, info, env), 0
        a = queue[:, qpos]
        qpos += 1
        if skip_frames is not None:
            # read: by the actor at a chunk's end (not for an ended episode), and by the videos
            skip = done.copy() if qpos >= queue.shape[1] else np.ones(n, bool)
            skip[:record] = done[:record]
            skip_frames(skip)
        obs, _, term, trunc, info = env.step(a)
        live = ~done
        success |= live & np.asarray(info["success"], bool)
        length[live] += 1
        for i in range(record):
            if live[i]:
                frames[i].append(obs["image"][i].copy())
        done |= np.asarray(term, bool) | np.asarray(trunc, bool)
        if done.all():
            break
    return success, length, frames


def evaluate_policy(
    policy: Any,
    suite_or_task: str | list[str] = "builtin",
    episodes_per_task: int = 10,
    seed: int = 0,
    num_envs: int = 10,
    video_dir: str | os.PathLike | None = None,
    deterministic: bool = True,
    videos_per_task: int = 2,
    progress: bool = False,
    render: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Evaluate ``policy`` in the real simulator.

    Args:
        policy: Policy object, checkpoint folder, ``"random"`` or ``"expert:NOISE"``.
        suite_or_task: suite name, task id or list of task ids.
        episodes_per_task: episodes per task (fixed seeds, see module docstring).
        num_envs: sub-envs per batch.
        video_dir: folder for ``<task>.mp4`` rollout videos (None: no videos).
        render: more ``envs.make_vec`` options of the backend (the built-in suite's ``supersample``,
            ``shadows``): the frames the policy was trained on.
    Returns:
        dict with ``tasks`` {task: {success_rate, ci95, successes, episodes, mean_length, outcomes
        (0/1 per episode, in seed order)}},
        ``mean_success`` (mean of the per-task rates), ``mean_ci95`` (Wilson on the pooled episodes),
        ``episodes_per_task``, ``seed``, ``policy``, ``wall_seconds``.
    """
    import envs

    if episodes_per_task < 1:
        raise WmrlError(f"episodes_per_task={episodes_per_task} must be >= 1")
    if num_envs < 1:
        raise WmrlError(f"num_envs={num_envs} must be >= 1")
    actor = make_actor(policy, seed, deterministic)
    tasks = envs.resolve_tasks(suite_or_task)
    t0 = time.time()
    results: dict[str, Any] = {}
    from tqdm import tqdm

    for ti, task in enumerate(tqdm(tasks, desc="evaluate", disable=not progress)):
        max_steps = int(envs.task_spec(task).max_episode_steps)
        succ_all, len_all, videos = [], [], []
        done_eps = 0
        while done_eps < episodes_per_task:
            n = min(num_envs, episodes_per_task - done_eps)
            env = envs.make_vec(task, num_envs=n, image_size=actor.image_size, wrist_image=actor.use_wrist,
                                **(render or {}))
            try:
                rec = min(n, max(0, videos_per_task - len(videos))) if video_dir else 0
                first = seed + 1000 * ti + done_eps
                s, ln, fr = _run_batch(env, actor, list(range(first, first + n)), max_steps, rec)
            finally:
                env.close()
            succ_all.append(s)
            len_all.append(ln)
            videos += [np.stack(f) for f in fr]
            done_eps += n
        s = np.concatenate(succ_all)
        k = int(s.sum())
        results[task] = {
            "success_rate": k / len(s),
            "ci95": list(wilson_ci(k, len(s))),
            "successes": k,
            "episodes": len(s),
            "mean_length": float(np.concatenate(len_all).mean()),
            "outcomes": [int(x) for x in s],  # episode by episode, in seed order
        }
        if video_dir and videos:
            from wmrl.video import grid

            save_video(Path(video_dir) / f"{task}.mp4", grid(videos, ncols=len(videos)))
    total = sum(r["successes"] for r in results.values())
    n_all = sum(r["episodes"] for r in results.values())
    return {
        "suite": suite_or_task if isinstance(suite_or_task, str) else list(suite_or_task),
        "tasks": results,
        "mean_success": float(np.mean([r["success_rate"] for r in results.values()])),
        "mean_ci95": list(wilson_ci(total, n_all)),
        "episodes_per_task": episodes_per_task,
        "seed": seed,
        "deterministic": deterministic,
        "policy": actor.description,
        "wall_seconds": time.time() - t0,
    }


def play_seeds(
    policy: Any,
    task: str,
    seeds: list[int],
    num_envs: int = 10,
    deterministic: bool = True,
    render: dict[str, Any] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One real episode of ``policy`` on ``task`` from each start seed in ``seeds`` (any seeds, in order;
    ``num_envs`` at a time), as :func:`evaluate_policy` plays its contiguous ones: an episode's start depends on
    its seed alone. Its outcome does too with ``render={"tiled_frames": False}``; with the default tiled frames
    a frame can differ by a pixel with the sub-env's place in the batch, which tipped 4 of 4,639 real outcomes
    between batchings in session 86 (``benchmarks.batch_invariance``; the policy's own calls do not depend on
    their batch, ``policies.row_stable``). Returns success bool (n,) and length int (n,) in the order of
    ``seeds``; empty arrays for no seeds."""
    import envs

    if num_envs < 1:
        raise WmrlError(f"num_envs={num_envs} must be >= 1")
    if not seeds:
        return np.zeros(0, bool), np.zeros(0, int)
    actor = make_actor(policy, int(seeds[0]), deterministic)
    max_steps = int(envs.task_spec(task).max_episode_steps)
    succ, lens = [], []
    for i in range(0, len(seeds), num_envs):
        batch = [int(s) for s in seeds[i:i + num_envs]]
        env = envs.make_vec(task, num_envs=len(batch), image_size=actor.image_size, wrist_image=actor.use_wrist,
                            **(render or {}))
        try:
            s, ln, _ = _run_batch(env, actor, batch, max_steps, 0)
        finally:
            env.close()
        succ.append(s)
        lens.append(ln)
    return np.concatenate(succ), np.concatenate(lens)


def save_video(path: Path, frames: np.ndarray, fps: int = 10, scale: int = 3) -> Path:
    """Write a rollout video (``wmrl.video.write_video``, atomic mp4)."""
    from wmrl.video import write_video

    return write_video(path, frames, fps=fps, scale=scale)


def environment_info() -> dict[str, Any]:
    """Machine, versions and torch threads for benchmark JSONs."""
    import torch

    return {**machine_info(), "versions": package_versions(), "torch_threads": torch.get_num_threads()}


def main(argv: list[str] | None = None) -> int:
    """CLI of ``python -m benchmarks.policy_eval`` and ``wmrl evaluate``."""
    p = argparse.ArgumentParser(prog="wmrl evaluate", description=__doc__.split("\n")[0])
    p.add_argument("--policy", required=True, help="checkpoint folder, 'random' or 'expert:NOISE'")
    p.add_argument("--suite", default="builtin", help="suite name or task id (default: builtin)")
    p.add_argument("--episodes-per-task", type=int, default=10)
    p.add_argument("--num-envs", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stochastic", action="store_true", help="sample actions instead of the mode")
    p.add_argument("--no-video", action="store_true")
    p.add_argument("--quick", action="store_true", help="2 episodes per task (CI)")
    p.add_argument("--out", required=True, help="JSON file to write")
    args = p.parse_args(argv)
    from wmrl.io import atomic_write_json

    out = Path(args.out)
    eps = 2 if args.quick else args.episodes_per_task
    video_dir = None if args.no_video else out.parent / f"{out.stem}_videos"
    res = evaluate_policy(args.policy, args.suite, eps, args.seed, args.num_envs, video_dir, not args.stochastic)
    res.update({"benchmark": "policy_eval", "quick": args.quick, "machine": environment_info(),
                "video_dir": str(video_dir) if video_dir else None})
    atomic_write_json(out, res)
    for task, r in res["tasks"].items():
        print(f"{task:24s} {r['success_rate']:.2f}  [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]  n={r['episodes']}")
    print(f"{'mean':24s} {res['mean_success']:.2f}  [{res['mean_ci95'][0]:.2f}, {res['mean_ci95'][1]:.2f}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
