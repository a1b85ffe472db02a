"""Co-evolution of policy, world model and reward model (PACE / World-VLA-Loop).

A round: RL in imagination -> evaluate in the real simulator -> record real rollouts of the
improved policy (failures weighted up) and add them to the dataset -> fine-tune the world model
and the success reward model on the grown dataset -> next round. Every real-environment step
taken for data is counted (``real_env_steps``); evaluation steps are counted separately.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from wmrl.errors import ConfigError, WmrlError

ChunkFn = Callable[[dict[str, np.ndarray], list[str]], np.ndarray]


def policy_chunk_fn(policy: Any, deterministic: bool = False) -> ChunkFn:
    """``(obs, instructions) -> float32 (B, K, A)`` from a ``policies.Policy``."""

    @torch.no_grad()
    def fn(obs: dict[str, np.ndarray], instructions: list[str]) -> np.ndarray:
        return policy.act(obs, instructions, deterministic=deterministic).actions.float().cpu().numpy()

    return fn


def record_rollouts(
    env: Any,
    chunk_fn: ChunkFn,
    num_episodes: int,
    chunk_size: int,
    seed: int | list[int] | None = None,
    fps: int = 20,
    successes_only: bool = False,
    max_finished: int | None = None,
    provenance: bool = False,
    first_episodes_only: bool = False,
    env_state_fn: Callable[[], np.ndarray] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Run ``chunk_fn`` open-loop per chunk in a SAME_STEP single-action vector env and keep the
    first ``num_episodes`` finished episodes in memory.

    Args:
        env: ``envs.make_vec(..., autoreset_mode="same_step")`` (single actions ``(N, 7)``).
        chunk_fn: called on the sub-batch of sub-envs whose chunk ran out.
        chunk_size: K actions executed per call before re-planning.
        successes_only: keep only the episodes that succeed (the others are played, counted and dropped).
        max_finished: stop once this many episodes have finished, kept or not (None: no cap); with
            ``successes_only`` fewer than ``num_episodes`` may then be kept.
        provenance: also return where each episode came from: ``stats["finished_from"]`` lists
            ``(sub_env, ordinal, success)`` for every counted finished episode (``ordinal``: the
            sub-env's 0-based episode count) and ``stats["kept_from"]`` ``(sub_env, ordinal)`` for each
            kept episode, in the trajectories' order. Sub-envs reset with equal seeds start their k-th
            episodes alike (per-sub-env start generators), so this groups samples of one start.
        first_episodes_only: keep each sub-env's first episode alone, in sub-env order, and stop once
            every sub-env has finished it (``num_episodes`` must then equal ``env.num_envs``); a seed
            list then plays one given start per sub-env, e.g. a fixed pool of starts. ``env_steps``
            still counts every step taken, ``first_episode_steps`` those of the kept episodes.
        env_state_fn: ``() -> float (N, S)`` the states recorded as ``env_states`` before each action
            (None: the env's ``environment_state()`` when it has one), e.g. with extra columns.
    Returns:
        ``(wmrl.data.Trajectories, stats)`` (None instead of the trajectories when ``successes_only``
        found no success within ``max_finished`` episodes; with ``env_states`` when the env has
        ``environment_state()``, as the built-in suite does) with ``stats = {"episodes", "success_rate",
        "env_steps", "finished", "finished_success_rate"}``: ``episodes`` / ``success_rate`` are the kept
        episodes', ``finished`` / ``finished_success_rate`` every finished episode's, and ``env_steps``
        counts every step taken, including those of episodes left unfinished.
    """
    from wmrl.data import Trajectories

    if num_episodes < 1:
        raise WmrlError(f"num_episodes={num_episodes} must be >= 1")
    if max_finished is not None and max_finished < 1:
        raise WmrlError(f"max_finished={max_finished} must be >= 1 or None")
    n = env.num_envs
    if first_episodes_only and (num_episodes != n or successes_only or max_finished is not None):
        raise WmrlError(
            f"first_episodes_only keeps one episode per sub-env: num_episodes={num_episodes} must equal "
            f"num_envs={n}, without successes_only or max_finished"
        )
    obs, info = env.reset(seed=seed)
    queue = np.zeros((n, chunk_size, env.single_action_space.shape[0]), np.float32)
    qpos = np.full(n, chunk_size)
    bufs: list[dict[str, list]] = [{} for _ in range(n)]
    episodes: list[dict[str, Any]] = []
    steps, finished, finished_ok = 0, 0, 0
    ordinal = np.zeros(n, np.int64)
    finished_from: list[tuple[int, int, bool]] = []
    kept_from: list[tuple[int, int]] = []
    env_state_fn = env_state_fn or getattr(env.unwrapped, "environment_state", None)
    while len(episodes) < num_episodes and (max_finished is None or finished < max_finished):
        need = qpos >= chunk_size
        if need.any():
            idx = np.flatnonzero(need)
            sub = {k: v[idx] for k, v in obs.items()}
            chunk = np.asarray(chunk_fn(sub, [info["instruction"][i] for i in idx]), np.float32)
            if chunk.shape[:2] != (len(idx), chunk_size):
                raise WmrlError(
                    f"policy chunk has shape {chunk.shape}; expected ({len(idx)}, {chunk_size}, A)"
                )
            queue[idx], qpos[idx] = chunk, 0
        a = queue[np.arange(n), qpos]
        qpos += 1
        instr, tasks = (
            list(info["instruction"]),
            list(info.get("task_id", getattr(env.unwrapped, "task_ids", [""] * n))),
        )
        es = env_state_fn() if env_state_fn is not None else None  # before the action, as obs
        nobs, r, te, tr, info = env.step(a)
        steps += n
        for i in range(n):
            b = bufs[i]
            for key, val in (
                ("image", obs["image"][i]),
                ("state", obs["state"][i]),
                ("action", a[i]),
                ("reward", r[i]),
                ("success", bool(info["success"][i])),
                ("done", bool(te[i] or tr[i])),
            ):
                b.setdefault(key, []).append(val)
            if es is not None:
                b.setdefault("env_state", []).append(es[i])
            b["instruction"], b["task_id"] = instr[i], tasks[i]
            if te[i] or tr[i]:
                ok = any(b["success"])
                # first_episodes_only: a sub-env's later episodes are played, not counted or kept
                within = (max_finished is None or finished < max_finished) and not (
                    first_episodes_only and ordinal[i] > 0
                )
                if within:
                    finished, finished_ok = finished + 1, finished_ok + int(ok)
                    finished_from.append((i, int(ordinal[i]), ok))
                if within and len(episodes) < num_episodes and (ok or not successes_only):
                    episodes.append(b)
                    kept_from.append((i, int(ordinal[i])))
                ordinal[i] += 1
                bufs[i] = {}
                qpos[i] = chunk_size  # re-plan at the new episode's start
        obs = nobs
    if first_episodes_only:  # in sub-env order (they finished in any order)
        order = np.argsort([i for i, _ in kept_from], kind="stable")
        episodes, kept_from = [episodes[j] for j in order], [kept_from[j] for j in order]
    origin = {"finished_from": finished_from, "kept_from": kept_from} if provenance else {}
    if not episodes:  # successes_only, and no success within max_finished
        return None, {"episodes": 0.0, "success_rate": 0.0, "env_steps": float(steps), "finished": float(finished),
                      "finished_success_rate": 0.0, **origin}
    idx_parts = [np.full(len(e["image"]), j, np.int64) for j, e in enumerate(episodes)]
    traj = Trajectories(
        images=np.stack([f for e in episodes for f in e["image"]]).astype(np.uint8),
        wrist_images=None,
        states=np.stack([s for e in episodes for s in e["state"]]).astype(np.float32),
        actions=np.stack([x for e in episodes for x in e["action"]]).astype(np.float32),
        rewards=np.array([x for e in episodes for x in e["reward"]], np.float32),
        successes=np.array([x for e in episodes for x in e["success"]], bool),
        dones=np.array([x for e in episodes for x in e["done"]], bool),
        episode_index=np.concatenate(idx_parts),
        frame_index=np.concatenate([np.arange(len(p)) for p in idx_parts]),
        instructions=[e["instruction"] for e in episodes for _ in e["image"]],
        task_ids=[e["task_id"] for e in episodes for _ in e["image"]],
        fps=fps,
        env_states=(
            np.stack([s for e in episodes for s in e["env_state"]]).astype(np.float32)
            if env_state_fn is not None
            else None
        ),
    )
    stats = {
        "episodes": float(len(episodes)),
        "success_rate": float(np.mean(traj.episode_success)),
        "env_steps": float(steps),
        "finished": float(finished),
        "finished_success_rate": finished_ok / max(finished, 1),
        **origin,
    }
    if first_episodes_only:
        stats["first_episode_steps"] = float(len(traj.images))
    return traj, stats


def failure_weights(traj: Any, failure_weight: float) -> np.ndarray:
    """Per-episode weights float32 (E,): ``failure_weight`` for failed episodes, 1 for successes."""
    return np.where(np.asarray(traj.episode_success), 1.0, float(failure_weight)).astype(np.float32)


@dataclass
class CoevolutionConfig:
    """Args:
    rounds: co-evolution rounds after the first RL-in-imagination phase.
    episodes_per_round: real rollouts of the current policy recorded per round (data).
    failure_weight: sampling weight of failed episodes when fine-tuning (successes: 1).
    wm_finetune_steps, success_finetune_steps: fine-tuning steps per round.
    wm_batch_size, wm_lr: world-model fine-tuning batch and learning rate.
    imagined_success_labels: also fine-tune the success model on the world model's open-loop
        replays of the new real rollouts (imagined frames, labelled with the real outcome), so it
        learns to read imagined frames, where its false successes come from. Off by default: on
        3 seeds x 600 paired episodes it cost 0.023 [0.005, 0.042] of real success in round 1.
    replay_outcomes: which replays join that refit: ``"all"``, or ``"failures"`` only (hard negatives:
        imagined frames of episodes that really failed, labelled failures; a replay of a real success
        often shows none, and labelling it a success teaches the model to call such frames successes).
    deterministic_rollouts: record the real rollouts with the policy's mean action (what the
        evaluation runs) instead of sampling it; sampled rollouts of the built-in SFT policy
        succeed 4-29% of the time where its mean action scores 29-47%, so their failures are
        largely the sampling noise's.
    average_rounds: K > 1 makes each round's policy (the one evaluated, saved as ``round_r/policy`` and
        carried into the next round) the uniform weight average of the policies trained in rounds
        r-K+1..r (from round 0 on; :func:`policies.weight_average.average_policies`), a model soup of the
        line; 1 keeps the round's trained policy. Round 0 is never averaged.
    """

    rounds: int = 2
    episodes_per_round: int = 24
    failure_weight: float = 3.0
    wm_finetune_steps: int = 150
    success_finetune_steps: int = 150
    wm_batch_size: int = 16
    wm_lr: float = 1e-4
    imagined_success_labels: bool = False
    replay_outcomes: str = "all"
    deterministic_rollouts: bool = False
    average_rounds: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.average_rounds, bool) or not isinstance(self.average_rounds, int) or self.average_rounds < 1:
            raise ConfigError(f"average_rounds={self.average_rounds!r} must be an integer >= 1 (1: no averaging)")
        if self.rounds < 0 or self.episodes_per_round < 1:
            raise ConfigError(
                f"rounds={self.rounds} must be >= 0 and episodes_per_round={self.episodes_per_round} >= 1"
            )
        if self.replay_outcomes not in ("all", "failures"):
            raise ConfigError(f"replay_outcomes={self.replay_outcomes!r}; expected 'all' or 'failures'")
        if self.failure_weight <= 0:
            raise ConfigError(f"failure_weight={self.failure_weight} must be > 0")
        if self.wm_finetune_steps < 0 or self.success_finetune_steps < 0:
            raise ConfigError(
                f"wm_finetune_steps={self.wm_finetune_steps} and success_finetune_steps={self.success_finetune_steps} must be >= 0"
            )


def coevolve_models(
    world_model: Any,
    success_model: Any | None,
    dataset: Any,
    new_rollouts: Any,
    cfg: CoevolutionConfig,
    seed: int = 0,
) -> tuple[Any, dict[str, float]]:
    """Add ``new_rollouts`` to ``dataset`` (failures up-weighted) and fine-tune the world model and
    the success model on the result in place. Returns ``(grown dataset, stats)``."""
    from wmrl.data import Trajectories

    new = new_rollouts.with_weights(failure_weights(new_rollouts, cfg.failure_weight))
    grown = Trajectories.concat([dataset, new])
    t0 = time.perf_counter()
    stats: dict[str, float] = {
        "dataset_episodes": float(grown.num_episodes),
        "new_failures": float((~np.asarray(new_rollouts.episode_success)).sum()),
    }
    if cfg.wm_finetune_steps:
        world_model.train()
        losses = world_model.finetune(
            grown,
            cfg.wm_finetune_steps,
            weights=grown.episode_weights,
            batch_size=cfg.wm_batch_size,
            lr=cfg.wm_lr,
            seed=seed,
        )
        world_model.eval()
        stats["wm_finetune_loss"] = float(np.mean(losses[-10:]))
    if success_model is not None and cfg.success_finetune_steps:
        data = grown
        if cfg.imagined_success_labels:
            replays = imagined_replays(world_model, new)
            if replays is not None and cfg.replay_outcomes == "failures":
                failed = np.flatnonzero(~np.asarray(replays.episode_success, bool))
                replays = replays.select_episodes(failed) if failed.size else None
            if replays is not None:
                data = Trajectories.concat([grown, replays])
                stats["imagined_replay_episodes"] = float(replays.num_episodes)
        success_model.finetune(
            data, steps=cfg.success_finetune_steps, weights=data.episode_weights, seed=seed
        )
        success_model.eval()
    stats["finetune_time_s"] = time.perf_counter() - t0
    return grown, stats


@torch.no_grad()
def rollout_frames(
    world_model: Any,
    context_frames: list[np.ndarray],
    context_states: list[np.ndarray],
    actions: list[np.ndarray],
    batch_size: int = 64,
) -> list[np.ndarray]:
    """Open-loop rollouts of many episodes of different lengths, ``batch_size`` at a time.

    Episode i: context frames uint8 (T, H, W, 3), states (T, D), actions (h_i, A) -> imagined frames
    uint8 (h_i, H, W, 3). Episodes of similar length share a batch; a shorter one's actions are
    padded with zeros, as ``WorldModel.rollout`` pads its last chunk, so every chunk up to h_i sees
    the same actions as in a rollout of its own; the frames after h_i are dropped. One
    batched call in place of one call per episode: the replays of the main job's demos took 48 s
    one at a time on 2 CPU threads."""
    order = np.argsort([len(a) for a in actions], kind="stable")
    out: list[np.ndarray] = [np.empty(0)] * len(actions)
    for i in range(0, len(order), batch_size):
        idx = order[i : i + batch_size]
        h = max(len(actions[j]) for j in idx)
        a = np.zeros((len(idx), h, np.asarray(actions[idx[0]]).shape[1]), np.float32)
        for row, j in enumerate(idx):
            a[row, : len(actions[j])] = actions[j]
        frames = world_model.rollout(
            np.stack([context_frames[j] for j in idx]), np.stack([context_states[j] for j in idx]), a
        ).frames.cpu().numpy()
        for row, j in enumerate(idx):
            out[j] = frames[row, : len(actions[j])]
    return out


@torch.no_grad()
def imagined_replays(world_model: Any, traj: Any) -> Any | None:
    """The world model's open-loop replay of every episode of ``traj``: from the real first ``T``
    frames it imagines the rest under the real actions. Rows stay aligned with ``traj`` (same
    states, actions, successes, weights; images after the context are imagined), so the real
    outcome labels the imagined frames. When ``traj`` has terminal observations (the frame after
    the last action, the one that shows success), the replay's terminal frame is imagined too
    (one more step under the last action), so a success model trained on replays sees imagined
    successes, not only imagined failures next to crisp real successes (which would teach it
    that "blurry" means "failed"). None when no episode is longer than the context."""
    from worldmodels.modeling_common import model_states

    T = int(world_model.config.context_frames)
    states = model_states(traj, world_model.config)
    images = np.array(traj.images, copy=True)
    term = traj.terminal
    term_images = None if term is None else np.array(term.images, copy=True)
    bounds = np.asarray(traj.episode_bounds)
    keep = [e for e, (s, t) in enumerate(bounds) if t - s - T >= 1]
    if not keep:
        return None
    extra = 0 if term_images is None else 1  # the last action leads to the terminal frame
    frames = rollout_frames(
        world_model,
        [traj.images[bounds[e, 0] : bounds[e, 0] + T] for e in keep],
        [states[bounds[e, 0] : bounds[e, 0] + T] for e in keep],
        [traj.actions[bounds[e, 0] + T - 1 : bounds[e, 1] - 1 + extra] for e in keep],
    )
    for e, f in zip(keep, frames):
        s, t = bounds[e]
        images[s + T : t] = f[: t - s - T]
        if term_images is not None:
            term_images[e] = f[t - s - T]
    from dataclasses import replace

    changes: dict[str, Any] = {"images": images}
    if term_images is not None:
        changes["terminal"] = replace(term, images=term_images)
    return replace(traj, **changes).select_episodes(np.array(keep))


def imagined_random_failures(world_model: Any, traj: Any, episodes: int, seed: int = 0) -> Any | None:
    """Hard negatives for the success model: the world model's rollouts of *uniformly random*
    action chunks from the first frame of ``episodes`` episodes of ``traj`` (context filled as a
    reset fills it), each as long as its source episode, every frame labelled a failure.

    A random policy does not solve the built-in tasks from a reset (0 of 72 paired real episodes in
    ``benchmarks/results/wm_policy_ranking.json``), but inside a world model its jittering arm
    turns into smeared blobs that a success model trained on real frames and replays alone can
    score as success (it gave a random policy 51-65% imagined success). Only dims the world model
    reads get random values (the others stay 0). Rows: images from the rollout (the first is the
    real reset frame), the source episode's states (not imagined), the random actions, rewards 0,
    successes False; the terminal frame is the rollout's next frame when ``traj`` has terminals.
    None when ``episodes`` is 0 or no episode is longer than one step."""
    if episodes <= 0:
        return None
    T = int(world_model.config.context_frames)
    bounds = np.asarray(traj.episode_bounds)
    long_eps = np.flatnonzero(bounds[:, 1] - bounds[:, 0] >= 2)
    if len(long_eps) == 0:
        return None
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(long_eps, size=min(int(episodes), len(long_eps)), replace=False))
    sub = traj.select_episodes(pick)
    from worldmodels.modeling_common import model_states

    sub_states = model_states(sub, world_model.config)
    images = np.array(sub.images, copy=True)
    actions = np.zeros_like(np.asarray(sub.actions, np.float32))
    dims = world_model.action_dim_mask().cpu().numpy().astype(bool)
    term = sub.terminal
    term_images = None if term is None else np.array(term.images, copy=True)
    bounds = np.asarray(sub.episode_bounds)
    chunks = []
    for s, t in bounds:
        n = int(t - s)
        a = np.zeros((n, actions.shape[1]), np.float32)
        a[:, dims] = rng.uniform(-1.0, 1.0, (n, int(dims.sum())))
        actions[s:t] = a
        chunks.append(a[: n if term_images is not None else n - 1])  # action i leads to frame i+1
    frames = rollout_frames(
        world_model,
        [np.repeat(sub.images[s : s + 1], T, 0) for s, _ in bounds],
        [np.repeat(sub_states[s : s + 1], T, 0) for s, _ in bounds],
        chunks,
    )
    for e, ((s, t), f) in enumerate(zip(bounds, frames)):
        n = int(t - s)
        images[s + 1 : t] = f[: n - 1]
        if term_images is not None:
            term_images[e] = f[n - 1]
    from dataclasses import replace

    changes: dict[str, Any] = {
        "images": images,
        "actions": actions,
        "rewards": np.zeros_like(np.asarray(sub.rewards)),
        "successes": np.zeros_like(np.asarray(sub.successes, bool)),
    }
    if term_images is not None:
        changes["terminal"] = replace(term, images=term_images, successes=np.zeros_like(term.successes))
    return replace(sub, **changes)


__all__ = [
    "CoevolutionConfig",
    "rollout_frames",
    "imagined_random_failures",
    "imagined_replays",
    "coevolve_models",
    "failure_weights",
    "policy_chunk_fn",
    "record_rollouts",
]
