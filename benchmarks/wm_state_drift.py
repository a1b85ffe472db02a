"""How far do a world model's predicted object poses drift from the simulator's over whole episodes?

Usage::

    python -m benchmarks.wm_state_drift [--quick] --out FILE.json [--run-dir RUN]
        [--episodes-per-task N] [--round R] [key=value ...]   # the run's Hydra overrides

Needs a ``wmrl run`` whose world model predicts the environment state
(``world_model.env_state_dim=9``); the run is made or resumed first, like
``benchmarks.wm_policy_ranking`` (``--existing``: used as it is, once its world-model, reward and
SFT stages are done). The run's SFT policy (its mean action) plays ``N`` episodes per
built-in task from seeded real resets in the simulator, and from the same first frame, proprio and
environment state in the world model of round ``R`` (default 0, before co-evolution fine-tuning):

* **closed loop**: the policy acts on the imagined frames, as in RL in imagination;
* **open loop**: the world model replays the real episode's actions (its error alone, without the
  policy's divergence).

Every chunk boundary compares the target cube's xyz (and the resting cubes': on the table, not the
target) with the simulator's. Fields, overall and per task (medians over episodes, metres):
``target_error_{closed,open}_loop`` at chunks 1, 4, 8 and ``final`` (the last chunk both worlds
reached), ``target_travel_{real,imagined}`` (path length over chunk boundaries),
``resting_cube_creep_{real,imagined}`` (how far the other cubes end from where they started), and
the task's own success rule on the imagined poses against the simulator's outcome
(``success_real``, ``success_imagined``, ``success_agreement``, ``success_both``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

CHECK_CHUNKS = (1, 4, 8)


@torch.no_grad()
def drift_episodes(
    policy: Any,
    world_model: Any,
    keyframes: Any,
    task: str,
    episodes: int,
    seed: int,
    horizon_chunks: int,
    *,
    image_size: int,
    imagination: Any,
    render: dict[str, Any] | None = None,
) -> dict[str, np.ndarray]:
    """One task's episodes in both worlds. Returns float arrays over E = ``episodes``:
    ``real_env`` / ``closed_env`` / ``open_env`` (E, C+1, 13) environment states at the start and
    after each chunk the real episode completed (NaN from the chunk in which it ended: the
    simulator restarts a finished episode at once), ``real_success`` / ``imagined_success`` bool (E,)
    (the simulator's flag; the task's rule on the closed-loop imagined poses, at any chunk)."""
    import envs
    from envs.wrappers import ActionChunkWrapper
    from imagination.imagined_env import ImaginedVectorEnv
    from imagination.rollout_buffer import env_instructions

    n, k = episodes, policy.chunk_size
    seeds = [seed + e for e in range(n)]
    real = ActionChunkWrapper(envs.make_vec(task, n, image_size=image_size, autoreset_mode="same_step",
                                            **(render or {})), k)
    obs, info = real.reset(seed=seeds)
    instr = env_instructions(real, info)
    env0 = np.asarray(real.unwrapped.environment_state(), np.float32)
    img0, st0 = obs["image"].copy(), obs["state"].copy()
    shape = (n, horizon_chunks + 1, env0.shape[1])
    real_env, closed_env, open_env = (np.full(shape, np.nan, np.float32) for _ in range(3))
    for arr in (real_env, closed_env, open_env):
        arr[:, 0] = env0
    actions: np.ndarray | None = None  # (E, H*K, A) the executed actions, zeros after the end
    alive, real_success = np.ones(n, bool), np.zeros(n, bool)
    real_chunks = np.zeros(n, np.int64)
    for c in range(horizon_chunks):
        a = np.asarray(policy.act(obs, env_instructions(real, info), deterministic=True).actions.cpu(), np.float32)
        if actions is None:
            actions = np.zeros((n, horizon_chunks * k, a.shape[-1]), np.float32)
        actions[:, c * k : (c + 1) * k] = np.where(alive[:, None, None], a, 0.0)
        obs, _, term, trunc, info = real.step(a)
        done = np.asarray(term) | np.asarray(trunc)
        # same-step autoreset: an episode that ended in this chunk already shows its next episode,
        # so its last boundary stays NaN (datasets likewise record states before each action)
        ok = alive & ~done
        real_env[ok, c + 1] = np.asarray(real.unwrapped.environment_state(), np.float32)[ok]
        real_success |= alive & np.asarray(info["success"], bool)
        real_chunks += ok
        alive = ok
        if not alive.any():
            break
    real.close()
    # closed loop: the policy on imagined frames; an episode ends when the task's rule passes on the
    # imagined poses (success_source=state), as a real one ends at the simulator's success
    icfg = dataclasses.replace(imagination, num_envs=n, horizon=horizon_chunks, gate="off", chunk_size=k,
                               success_source="state")
    imag = ImaginedVectorEnv(world_model, keyframes, config=icfg)
    obs_i, info_i = imag.reset_to(img0[:, None], st0[:, None], instr, [task] * n, env0[:, None])
    imagined_success, alive_i = np.zeros(n, bool), np.ones(n, bool)
    for c in range(horizon_chunks):
        a = policy.act(obs_i, env_instructions(imag, info_i), deterministic=True).actions
        obs_i, _, term, trunc, info_i = imag.step(np.asarray(a.cpu(), np.float32))
        closed_env[alive_i, c + 1] = imag.environment_state()[alive_i]
        imagined_success |= alive_i & np.asarray(info_i["success"], bool)
        alive_i &= ~(np.asarray(term) | np.asarray(trunc))
        if not alive_i.any():
            break
    # open loop: the real actions replayed from the same start (context = the first frame repeated)
    t = world_model.config.context_frames
    e = world_model.env_state_dim
    frames = np.repeat(img0[:, None], t, 1)
    states = np.repeat(np.concatenate([st0, env0[:, :e]], 1)[:, None], t, 1)
    roll = world_model.rollout(frames, states, actions)
    pred = roll.states.float().cpu().numpy()[..., -e:]  # (E, H*K, e)
    open_env[:, 1:, :e] = pred[:, k - 1 :: k]
    open_env[:, 1:, e:] = env0[:, None, e:]
    ended = np.arange(1, horizon_chunks + 1)[None] > real_chunks[:, None]  # (E, C): after the real episode
    open_env[:, 1:][ended] = np.nan
    closed_env[:, 1:][ended] = np.nan
    return {"real_env": real_env, "closed_env": closed_env, "open_env": open_env,
            "real_success": real_success, "imagined_success": imagined_success, "real_chunks": real_chunks}


def _target_index(env: np.ndarray) -> np.ndarray:
    """(E, C, 13) -> int (E,) each episode's target cube."""
    return np.clip(np.rint(env[:, 0, 11]), 0, 2).astype(np.int64)


def _target_xyz(env: np.ndarray) -> np.ndarray:
    """(E, C, 13) -> (E, C, 3) the target cube's xyz."""
    cubes = env[..., :9].reshape(*env.shape[:2], 3, 3)
    return cubes[np.arange(len(env)), :, _target_index(env)]


def _last_valid(x: np.ndarray) -> np.ndarray:
    """(E, C, ...) with NaN after the end -> (E, ...) each row's last non-NaN entry."""
    ok = ~np.isnan(x.reshape(*x.shape[:2], -1)).any(-1)
    last = ok.shape[1] - 1 - np.argmax(ok[:, ::-1], axis=1)
    return x[np.arange(len(x)), last]


def summarize(ep: dict[str, np.ndarray]) -> dict[str, Any]:
    """Medians (metres) and success agreement over the episodes of :func:`drift_episodes` outputs
    (concatenated over tasks)."""
    real_t = _target_xyz(ep["real_env"])
    out: dict[str, Any] = {"episodes": int(len(real_t))}
    for name in ("closed", "open"):
        err = np.linalg.norm(_target_xyz(ep[f"{name}_env"]) - real_t, axis=-1)  # (E, C+1)
        row = {f"chunk_{c}": _nanmedian(err[:, c]) for c in CHECK_CHUNKS if c < err.shape[1]}
        row["final"] = _nanmedian(_last_valid(err[..., None])[:, 0])
        out[f"target_error_{name}_loop"] = row
    for name, env in (("real", ep["real_env"]), ("imagined", ep["closed_env"])):
        xyz = _target_xyz(env)
        step = np.linalg.norm(np.diff(xyz, axis=1), axis=-1)
        out[f"target_travel_{name}"] = _nanmedian(np.nansum(step, axis=1))
        cubes = env[..., :9].reshape(*env.shape[:2], 3, 3)
        moved = np.linalg.norm(_last_valid(cubes) - cubes[:, 0], axis=-1)  # (E, 3)
        resting = (np.abs(cubes[:, 0, :, :2]).max(-1) < 1.0) & (np.arange(3)[None] != _target_index(env)[:, None])
        out[f"resting_cube_creep_{name}"] = _nanmedian(moved[resting])
    rs, im = ep["real_success"], ep["imagined_success"]
    out.update(success_real=float(rs.mean()), success_imagined=float(im.mean()),
               success_agreement=float((rs == im).mean()), success_both=int((rs & im).sum()),
               success_real_only=int((rs & ~im).sum()), success_imagined_only=int((~rs & im).sum()))
    return out


def _nanmedian(x: np.ndarray) -> float | None:
    x = np.asarray(x, np.float64)
    x = x[~np.isnan(x)]
    return float(np.median(x)) if len(x) else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default="benchmarks/results/wm_state_drift.json")
    p.add_argument("--run-dir", default=None, help="a wmrl run folder (default runs/state_drift[_quick]/seed_0)")
    p.add_argument("--episodes-per-task", type=int, default=None)
    p.add_argument("--round", type=int, default=0, help="whose world model (0: before co-evolution)")
    p.add_argument("--seed", type=int, default=777000)
    p.add_argument("--existing", action="store_true",
                   help="use the run folder as it is (its world_model, rewards and sft stages finished; e.g. while "
                   "the run goes on) instead of making or resuming it")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of the run config (as given to the run)")
    a = p.parse_args(argv)
    import envs
    from benchmarks.imagination_lift import environment_info
    from imagination.pipeline import Pipeline, load_run_config
    from wmrl.errors import ConfigError
    from wmrl.io import atomic_write_json

    t0 = time.perf_counter()
    run_dir = Path(a.run_dir or ("runs/state_drift_quick/seed_0" if a.quick else "runs/state_drift/seed_0"))
    overrides = list(a.overrides)
    if not any(o.startswith("world_model.env_state_dim=") for o in overrides):
        overrides.append("world_model.env_state_dim=9")
    cfg = load_run_config([*overrides, f"run_dir={run_dir}"], "run_quick" if a.quick else "run")
    pipe = Pipeline(cfg, progress=not a.no_progress)
    if a.existing:
        needed = ["world_model", "rewards", "sft", *(f"round_{r - 1}" for r in range(1, a.round + 1))]
        missing = [st for st in needed if not pipe.done(st)]
        if missing:
            raise ConfigError(f"--existing: {run_dir} has not finished stage(s) {', '.join(missing)}")
    else:
        pipe.run_all()
    wm, _, _ = pipe.load_models(a.round)
    if not wm.env_state_dim:
        raise ConfigError("wm_state_drift needs a run with world_model.env_state_dim=9 (predicted cube poses)")
    policy = pipe.policy_after(-1)  # the SFT policy
    tasks = pipe.tasks()
    n = a.episodes_per_task or (3 if a.quick else 12)
    horizon = envs.full_episode_chunks(tasks, policy.chunk_size)
    per_task, parts = {}, []
    for i, task in enumerate(tasks):
        ep = drift_episodes(policy, wm, pipe.trajectories(), task, n, a.seed + 1000 * i, horizon,
                            image_size=cfg.image_size, imagination=cfg.imagination_config(),
                            render=cfg.render.env_kwargs())
        per_task[task] = summarize(ep)
        parts.append(ep)
        if not a.no_progress:
            print(f"{task}: {json.dumps(per_task[task])}", flush=True)
    allep = {key: np.concatenate([p_[key] for p_ in parts]) for key in parts[0]}
    res = {
        "overall": summarize(allep),
        "per_task": per_task,
        "world_model": {"env_state_dim": wm.env_state_dim,
                        "env_state_contact_radius": wm.config.env_state_contact_radius,
                        "env_state_momentum": wm.config.env_state_momentum,
                        "residual_states": wm.config.residual_states, "round": a.round},
        "run_dir": str(run_dir),
        "overrides": overrides,
        "episodes_per_task": n,
        "horizon_chunks": horizon,
        "seed": a.seed,
        "quick": a.quick,
        "wall_time_s": time.perf_counter() - t0,
        "machine": environment_info(),
    }
    atomic_write_json(a.out, res)
    print(json.dumps(res["overall"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
