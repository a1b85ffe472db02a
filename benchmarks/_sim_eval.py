"""Episode scheduler shared by the LIBERO and ManiSkill benchmark runners.

One batched env per task (its sub-envs run in parallel worker processes). Episodes are a fixed
list (LIBERO: init-state ids; ManiSkill: seeds) handed out to sub-envs as they free up: when a
sub-env's episode ends it is reset at once (``reset_mask``) with the next episode's options, so
no step is wasted and the result does not depend on the number of workers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.errors import WmrlError
from wmrl.video import write_video


class ZeroActor:
    """Holds still with the gripper open (a baseline that should never succeed)."""

    chunk_size = 1
    image_size = 128
    use_wrist = False
    description = "zero (hold still, gripper open)"

    def reset(self) -> None:
        pass

    def chunk(self, obs: dict, info: dict, env: Any) -> np.ndarray:
        a = np.zeros((env.num_envs, 1, 7), np.float32)
        a[:, :, 6] = -1.0
        return a


class RandomActor:
    """Uniform random actions in [-1, 1] (seeded)."""

    chunk_size = 1
    image_size = 128
    use_wrist = False

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.description = f"random(seed={seed})"

    def reset(self) -> None:
        pass

    def chunk(self, obs: dict, info: dict, env: Any) -> np.ndarray:
        return self.rng.uniform(-1, 1, (env.num_envs, 1, 7)).astype(np.float32)


BUILTIN_POLICIES = ("random", "zero")


def make_actor(policy: str, seed: int, image_size: int, wrist: bool) -> Any:
    """``"random"``, ``"zero"`` or a saved wmrl policy folder (loaded with
    :func:`policies.load_policy`). Built-in actors use ``image_size`` / ``wrist``; a saved policy
    brings its own and must act in the 7-D action space."""
    if policy in BUILTIN_POLICIES:
        actor = RandomActor(seed) if policy == "random" else ZeroActor()
        actor.image_size, actor.use_wrist = image_size, wrist
        return actor
    if policy in ("scripted", "expert"):
        raise WmrlError(
            f"--policy {policy!r}: these backends have no closed-loop scripted expert; "
            f"valid: {', '.join(BUILTIN_POLICIES)} or a saved policy folder"
        )
    if not Path(policy).exists():
        raise WmrlError(f"--policy {policy!r} is neither {' nor '.join(BUILTIN_POLICIES)} nor an existing policy folder")
    try:
        from benchmarks.policy_eval import PolicyActor
        from policies import load_policy
    except ImportError as e:
        raise WmrlError(f"--policy {policy!r} needs the policies package, which cannot be imported: {e}") from None
    actor = PolicyActor(load_policy(policy), deterministic=True)
    if int(getattr(actor.policy, "action_dim", 7)) != 7:
        raise WmrlError(
            f"policy {policy!r} acts in {actor.policy.action_dim}-D; these backends expect 7-D "
            "end-effector delta pose + gripper actions"
        )
    actor.description = f"{policy} ({actor.description})"
    return actor


def check_policy_fits(actor: Any, env: Any, policy: str) -> None:
    """A saved policy trained on another state size than the env's: one-line error."""
    cfg = getattr(getattr(actor, "policy", None), "config", None)
    want = getattr(cfg, "state_dim", None)
    have = int(env.single_observation_space["state"].shape[0])
    if want is not None and int(want) != have:
        raise WmrlError(f"policy {policy!r} expects state_dim={want}; this env gives state_dim={have}")


@dataclass
class TaskResult:
    """Outcome of the episodes of one task."""

    successes: list[bool] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    episode_keys: list[int] = field(default_factory=list)
    videos: list[np.ndarray] = field(default_factory=list)
    env_steps: int = 0
    seconds: float = 0.0
    startup_seconds: float = 0.0
    versions: dict[str, Any] = field(default_factory=dict)


def run_episodes(
    make_env: Callable[[int], Any],
    actor: Any,
    episode_options: list[dict[str, Any]],
    max_steps: int,
    num_envs: int,
    record_videos: int = 1,
    progress: Any = None,
) -> TaskResult:
    """Run one episode per entry of ``episode_options`` (``{"seed": s}`` or backend options such
    as ``{"init_state_id": i}``) and collect success, length and the first ``record_videos``
    episodes' frames (agent view, wrist view beside it when present).

    Args:
        make_env: ``make_env(num_envs)`` builds the batched env of the task.
        actor: ``chunk(obs, info, env) -> (N, K, 7)``, ``reset()``.
        max_steps: episode limit (at most the registered one).
        num_envs: sub-envs (parallel workers), at most the number of episodes.
        progress: a tqdm bar updated once per finished episode (optional).
    """
    n_eps = len(episode_options)
    n = max(1, min(num_envs, n_eps))
    t_start = time.perf_counter()
    env = make_env(n)
    res = TaskResult(versions=dict(env.metadata.get("versions", {})))
    t0 = time.perf_counter()
    res.startup_seconds = t0 - t_start
    try:
        res.successes = [False] * n_eps
        res.lengths = [0] * n_eps
        frames: dict[int, list[np.ndarray]] = {}
        slot_ep = np.arange(n)  # episode running in each sub-env (-1: idle)
        next_ep = n

        def reset_opts(eps: np.ndarray, mask: np.ndarray) -> dict[str, Any]:
            seeds: list[int | None] = [None] * n
            env_opts: list[dict | None] = [None] * n
            for i in np.flatnonzero(mask):
                o = dict(episode_options[eps[i]])
                seeds[i] = o.pop("seed", None)
                env_opts[i] = o or None
            return {"seed": seeds, "options": {"reset_mask": mask, "env_options": env_opts}}

        first = reset_opts(slot_ep, np.ones(n, bool))
        obs, info = env.reset(seed=first["seed"], options={"env_options": first["options"]["env_options"]})
        actor.reset()

        def frame(i: int) -> np.ndarray:
            img = obs["image"][i]
            return np.concatenate([img, obs["wrist_image"][i]], axis=1) if "wrist_image" in obs else img.copy()

        for i in range(n):
            if slot_ep[i] < record_videos:
                frames[int(slot_ep[i])] = [frame(i)]
        queue = np.zeros((n, 0, 7), np.float32)
        qpos = np.zeros(n, int)
        steps = np.zeros(n, int)
        while (slot_ep >= 0).any():
            need = qpos >= queue.shape[1]
            if need.any():
                new = np.asarray(actor.chunk(obs, info, env), np.float32)
                if new.ndim != 3 or new.shape[0] != n or new.shape[2] != 7:
                    raise WmrlError(f"policy returned actions of shape {new.shape}; expected ({n}, K, 7)")
                if queue.shape[1] != new.shape[1]:
                    queue, qpos = new, np.zeros(n, int)
                else:
                    queue[need], qpos[need] = new[need], 0
            a = queue[np.arange(n), qpos]
            qpos += 1
            obs, _r, term, trunc, info = env.step(a)
            res.env_steps += int((slot_ep >= 0).sum())
            steps += 1
            ended = np.zeros(n, bool)
            for i in range(n):
                ep = int(slot_ep[i])
                if ep < 0:
                    continue
                if info["success"][i]:
                    res.successes[ep] = True
                if ep in frames:
                    frames[ep].append(frame(i))
                if term[i] or trunc[i] or steps[i] >= max_steps:
                    res.lengths[ep] = int(steps[i])
                    ended[i] = True
                    if progress is not None:
                        progress.update(1)
                    if next_ep < n_eps:
                        slot_ep[i] = next_ep
                        next_ep += 1
                    else:
                        slot_ep[i] = -1
            if ended.any():
                # restart finished sub-envs now with their next episode (idle ones too: cheap).
                ro = reset_opts(np.maximum(slot_ep, 0), ended)
                obs, info = env.reset(seed=ro["seed"], options=ro["options"])
                steps[ended] = 0
                qpos[ended] = queue.shape[1]  # fresh chunk for a fresh episode
                for i in np.flatnonzero(ended):
                    if 0 <= slot_ep[i] < record_videos:
                        frames[int(slot_ep[i])] = [frame(i)]
        res.videos = [np.stack(frames[k]) for k in sorted(frames)]
    finally:
        env.close()
    res.seconds = time.perf_counter() - t0
    return res


def evaluate_tasks(
    backend: str,
    tasks: list[str],
    policy: str,
    episode_options: Callable[[str], list[dict[str, Any]]],
    max_steps: Callable[[str], int],
    env_kwargs: dict[str, Any],
    num_envs: int,
    seed: int,
    video_dir: Path | None,
    record_videos: int,
    protocol: str,
    config: dict[str, Any],
) -> dict[str, Any]:
    """Evaluate ``policy`` on ``tasks`` and return the result JSON (see the runners' docstrings)."""
    from tqdm import tqdm

    import envs.registry as registry
    from benchmarks._stats import machine_info, package_versions, success_summary

    actor = make_actor(policy, seed, env_kwargs.get("image_size") or 128, bool(env_kwargs.get("wrist_image")))
    kwargs = {**env_kwargs, "image_size": actor.image_size, "wrist_image": actor.use_wrist}
    t0 = time.perf_counter()
    per_task: dict[str, Any] = {}
    backend_versions: dict[str, Any] = {}
    all_success: list[bool] = []
    total_eps = sum(len(episode_options(t)) for t in tasks)
    bar = tqdm(total=total_eps, desc=f"{backend} eval", unit="ep")
    for task in tasks:
        opts = episode_options(task)
        checked: list[bool] = []

        def make_env(n: int, task: str = task, checked: list[bool] = checked) -> Any:
            env = registry.make_vec(task, num_envs=n, backend=backend, **kwargs)
            if not checked:
                try:
                    check_policy_fits(actor, env, policy)
                except Exception:
                    env.close()
                    raise
                checked.append(True)
            return env

        bar.set_postfix_str(task[-40:])
        res = run_episodes(make_env, actor, opts, max_steps(task), num_envs, record_videos, progress=bar)
        backend_versions = res.versions or backend_versions
        videos = []
        if video_dir is not None and res.videos:
            for k, frames in enumerate(res.videos):
                path = video_dir / f"{task.replace('/', '_')}_ep{k}.mp4"
                write_video(path, frames, fps=10 if backend == "libero" else 20, scale=1)
                videos.append(str(path))
        per_task[task] = {
            **success_summary(res.successes),
            "mean_length": float(np.mean(res.lengths)) if res.lengths else 0.0,
            "episode_options": opts,
            "episode_success": res.successes,
            "episode_length": res.lengths,
            "env_steps": res.env_steps,
            "startup_seconds": round(res.startup_seconds, 2),
            "wall_seconds": round(res.seconds, 2),
            "env_steps_per_second": round(res.env_steps / res.seconds, 2) if res.seconds else None,
            "videos": videos,
        }
        all_success += res.successes
    bar.close()
    rates = [v["success_rate"] for v in per_task.values()]
    pooled = success_summary(all_success)
    return {
        "benchmark": backend,
        "protocol": protocol,
        "policy": policy,
        "policy_description": actor.description,
        "tasks": per_task,
        "mean_success": float(np.mean(rates)) if rates else 0.0,
        "mean_ci95": pooled["ci95"],
        "episodes": pooled["episodes"],
        "successes": pooled["successes"],
        "wall_seconds": round(time.perf_counter() - t0, 2),
        "config": {**config, "env_kwargs": kwargs, "num_envs": num_envs},
        "seed": seed,
        "machine": machine_info(),
        "versions": {"core": package_versions(), "backend": backend_versions},
    }
