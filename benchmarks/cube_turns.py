"""How far do the cubes turn in a policy's real episodes, and do the episodes that turn them fail?

The learned worlds of :mod:`benchmarks.fixed_starts` read the built-in suite's environment state, which holds
the cubes' positions only: the arm-and-object state models (:mod:`worldmodels.object_dynamics`) predict cube
xyz and the learned renderer (:mod:`worldmodels.state_renderer`) draws a cube where it is, not how it is
turned. This benchmark measures what that leaves out. Per run folder (one per seed) and policy, every start of
the fixed pool is played in the real simulator (the policy's mean action, as the pool is scored), recording the
cubes' orientations (``TabletopVectorEnv.cube_orientations``) beside the states. An episode's **turn** is the
largest rotation of the task's target cube away from its start orientation, modulo the cube's 24 symmetries
(a quarter turn about an axis leaves a cube looking and pushing the same: 0 deg); the other cubes' largest
turn is recorded too (a knocked neighbour). Per task: the episodes' median turn, the share turned past
``--threshold-deg``, and the success rate of the turned and the unturned episodes apart.

With ``--state-models NAME ...`` (the run's arm-and-object state models, e.g. its bootstrap ensemble) each episode
is also branched as the fixed-starts world branches it: from the real state at step ``--branch-step`` every member
goes on open loop with the episode's real actions (its own arm), and the benchmark records how far its target cube
ends from the real one (mean over the members) and how far two members' target cubes drift apart on the way (the
largest distance). Per task these are split by turned and unturned episodes: is the world wrong where cubes turn,
and does its ensemble notice? ``--held-out`` plays the runs' held-out evaluation starts instead of the pool (the
600 starts every policy's held-out score comes from), to see whether what RL changed on the pool carries over.

Usage::

    python -m benchmarks.cube_turns --runs runs/s55/lift/seed_{0,1,2} --policies sft real_pool sm_warm_4 \\
        --policy-work runs/s60/rend --starts-per-task 16 --out benchmarks/results/cube_turns.json
    python -m benchmarks.cube_turns --runs runs/s55/lift/seed_{0,1,2} --policies sft \\
        --state-models od_boot_100 od_boot_101 od_boot_102 --out benchmarks/results/cube_turns_branch.json
    python -m benchmarks.cube_turns --runs runs/s55/lift/seed_{0,1,2} --policies sft sm_warm_4 \\
        --policy-work runs/s60/rend --held-out --out benchmarks/results/cube_turns_held_out.json
    python -m benchmarks.cube_turns --quick --out /tmp/cube_turns_quick.json

A policy NAME is the run's own stage (``sft``, ``round_0``, ``real_rl``) or a fixed-starts arm
(``POLICY_WORK/<run key>/NAME/policy``), as in :mod:`benchmarks.renderer_shift`.
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._stats import run_keys
from envs.tabletop.environment_state import ENV_STATE_DIM

TARGET_COLUMN = 11  # the environment state's target-cube index (envs.tabletop.environment_state)
QUAT_COLUMN = ENV_STATE_DIM  # the recorded states' first quaternion column (play_pool_with_orientations)


def cube_symmetries() -> np.ndarray:
    """float64 (24, 3, 3): the rotations that map a cube onto itself (signed permutation matrices, det +1)."""
    mats = []
    for perm in itertools.permutations(range(3)):
        for signs in itertools.product((1.0, -1.0), repeat=3):
            m = np.zeros((3, 3))
            m[np.arange(3), perm] = signs
            if np.linalg.det(m) > 0:
                mats.append(m)
    return np.stack(mats)


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """float64 rotation matrices (..., 3, 3) of unit quaternions ``q`` (..., 4) in MuJoCo's order (w, x, y, z)
    (:func:`worldmodels.orientation.quat_to_matrix` on numpy arrays)."""
    import torch

    from worldmodels.orientation import quat_to_matrix as matrices

    return matrices(torch.from_numpy(np.asarray(q, np.float64))).numpy()


def turn_deg(quats: np.ndarray) -> np.ndarray:
    """float64 (T,): how far a cube with orientations ``quats`` (T, 4) (w, x, y, z) has turned from ``quats[0]``
    at each step, in degrees, modulo its symmetries (:func:`cube_angle_deg`; a quarter turn reads 0)."""
    return cube_angle_deg(np.broadcast_to(np.asarray(quats)[:1], np.shape(quats)), quats)


def cube_angle_deg(q_a: np.ndarray, q_b: np.ndarray) -> np.ndarray:
    """float64 (...): the angle (degrees) between cube orientations ``q_a`` and ``q_b`` (..., 4) (w, x, y, z)
    modulo the cube's symmetries: the smallest rotation angle of ``R_a^T R_b g`` over the 24 symmetries ``g``."""
    ra, rb = quat_to_matrix(q_a), quat_to_matrix(q_b)
    rel = np.einsum("...ji,...jk->...ik", ra, rb)  # R_a^T R_b: the turn in a's frame
    traces = np.einsum("...ij,gji->...g", rel, cube_symmetries())  # trace(rel @ g)
    return np.degrees(np.arccos(np.clip((traces.max(-1) - 1.0) / 2.0, -1.0, 1.0)))


def states_with_orientations(env: Any) -> Any:
    """For :func:`benchmarks.fixed_starts.play_pool` ``states_of``: the tabletop ``env``'s environment state with
    the cubes' quaternions after it, (N, ENV_STATE_DIM + 12), from column ``QUAT_COLUMN`` on the red/green/blue
    cubes' (w, x, y, z)."""
    from wmrl.errors import WmrlError

    if not hasattr(env, "cube_orientations"):
        raise WmrlError(f"{type(env).__name__} has no cube_orientations(); expected the built-in suite's tabletop env")

    def states() -> np.ndarray:
        return np.concatenate([env.environment_state(), env.cube_orientations().reshape(env.num_envs, -1)], 1)

    return states


def play_pool_with_orientations(policy: Any, task_ids: list[str], seeds: list[int],
                                env_kwargs: dict[str, Any]) -> tuple[Any, dict]:
    """``benchmarks.fixed_starts.play_pool`` recording :func:`states_with_orientations`."""
    from benchmarks.fixed_starts import play_pool

    return play_pool(policy, task_ids, seeds, env_kwargs, states_of=states_with_orientations)


def episode_turns(traj: Any) -> dict[str, list]:
    """Per episode of ``traj`` (recorded by :func:`play_pool_with_orientations`): its task, success, the target
    cube's largest turn (deg) and the other cubes' largest turn (deg)."""
    es = traj.env_states
    out: dict[str, list] = {"task_ids": [], "success": [], "target_turn_deg": [], "other_turn_deg": []}
    for s, e in traj.episode_bounds:
        target = int(round(float(es[s, TARGET_COLUMN])))
        turns = [float(turn_deg(es[s:e, QUAT_COLUMN + 4 * c:QUAT_COLUMN + 4 * (c + 1)]).max()) for c in range(3)]
        out["task_ids"].append(traj.task_ids[s])
        out["success"].append(bool(traj.successes[s:e].any()))
        out["target_turn_deg"].append(turns[target])
        out["other_turn_deg"].append(max(t for c, t in enumerate(turns) if c != target))
    return out


def state_model_folder(src: Path, key: str, name: str) -> Path:
    """State model ``name`` of run ``src``: a folder name in the run, or a path (``{run}`` stands for the run's key,
    e.g. a fixed-starts line's fine-tuned model ``runs/fs/{run}/sm_warm_5/state_models/od_boot_100``); a one-line
    error if it is not a state model."""
    from benchmarks.state_model_rl import state_model_dir

    if "/" not in name:
        return state_model_dir(src, name)
    d = Path(name.replace("{run}", key))
    return state_model_dir(d.parent, d.name)


def branch_errors(models: list[Any], traj: Any, branch_step: int) -> dict[str, list[float]]:
    """Per episode of ``traj`` (with ``env_states``; the cubes' xyz in columns 0-8): each state model of ``models``
    (``worldmodels.object_dynamics.ObjectDynamics``) goes on from the real state at step ``branch_step`` open loop,
    fed the episode's real actions (and its real proprio, or with ``config.arm`` its own). ``branch_error_m``: the
    distance (metres) between the predicted and the real target cube at the episode's last row, mean over the
    members; ``branch_spread_m``: the largest distance between two members' target cubes along the way (0 with one
    member). NaN for an episode with fewer than 2 rows after ``branch_step``."""
    import torch

    es, out = traj.env_states, {"branch_error_m": [], "branch_spread_m": []}
    for lo, hi in traj.episode_bounds:
        s = lo + branch_step
        if hi - s < 2:
            out["branch_error_m"].append(float("nan"))
            out["branch_spread_m"].append(float("nan"))
            continue
        target = int(round(float(es[lo, TARGET_COLUMN])))
        cubes = torch.from_numpy(np.asarray(es[:, :9], np.float32)[s - 1:hi].reshape(-1, 3, 3))  # rows s-1 .. hi-1
        prop = torch.from_numpy(np.asarray(traj.states[s - 1:hi], np.float32))
        act = torch.from_numpy(np.asarray(traj.actions[s:hi - 1], np.float32))
        with torch.no_grad():
            preds = torch.stack([m.rollout(prop[None, 1:], act[None], cubes[None, 1], cubes[None, 0],
                                           proprio_prev=prop[None, 0])[1][0, :, target] for m in models])  # (M, T, 3)
        out["branch_error_m"].append(float((preds[:, -1] - cubes[-1, target]).norm(dim=-1).mean()))
        spread = (preds[:, None] - preds[None]).norm(dim=-1).amax() if len(models) > 1 else torch.zeros(())
        out["branch_spread_m"].append(float(spread))
    return out


def turn_split(episodes: dict[str, list], sel: np.ndarray, threshold_deg: float) -> dict[str, Any]:
    """Of the episodes ``sel`` (bool mask): success, share whose target turned past ``threshold_deg``, the success
    of the turned and the unturned ones (None where there are none) and, with branches, their median branch error
    and spread (over the episodes long enough to branch)."""
    ok = np.array(episodes["success"], bool)[sel]
    turned = np.array(episodes["target_turn_deg"])[sel] > threshold_deg
    out: dict[str, Any] = {"success": float(ok.mean()), "turned_share": float(turned.mean()),
                           "success_turned": float(ok[turned].mean()) if turned.any() else None,
                           "success_unturned": float(ok[~turned].mean()) if (~turned).any() else None}
    for key in ("branch_error_m", "branch_spread_m"):
        if key in episodes:
            v = np.array(episodes[key], float)[sel]
            for part, part_sel in (("turned", turned), ("unturned", ~turned)):
                w = v[part_sel][np.isfinite(v[part_sel])]
                out[f"{key.removesuffix('_m')}_{part}_median_m"] = float(np.median(w)) if len(w) else None
    return out


def per_task(episodes: dict[str, list], threshold_deg: float) -> dict[str, dict[str, Any]]:
    """By task: episodes, median target turn, share of other cubes turned past ``threshold_deg``, and
    :func:`turn_split` of its episodes."""
    tasks = np.array(episodes["task_ids"])
    turn, other = np.array(episodes["target_turn_deg"]), np.array(episodes["other_turn_deg"])
    return {t: {"episodes": int((tasks == t).sum()), "target_turn_median_deg": float(np.median(turn[tasks == t])),
                "other_turned_share": float((other[tasks == t] > threshold_deg).mean()),
                **turn_split(episodes, tasks == t, threshold_deg)}
            for t in sorted(set(tasks.tolist()))}


def run_one(src: Path, policy_work: Path, key: str, policies: list[str], starts_per_task: int, rl_seed: int,
            threshold_deg: float, state_models: tuple[str, ...] = (), branch_step: int = 12,
            quick_fit: Path | None = None, held_out: bool = False) -> dict[str, Any]:
    """Every policy's pool episodes on one run folder, with their turns (and with ``state_models``, the run's
    folders of that name, their branches: :func:`branch_errors`; ``quick_fit``: instead branched in a tiny
    two-member ensemble fitted there, quick mode). ``held_out``: the run's held-out evaluation starts instead of
    the pool (``cfg.eval``: task ``i``'s episode ``e`` from seed ``eval.seed + 1000 i + e``, as
    ``imagination.pipeline.evaluate_in_sim`` plays them, in its batches of ``eval.num_envs``: the outcomes are the
    held-out score's, episode for episode)."""
    import envs
    from benchmarks.fixed_starts import pool_starts, rl_seeds
    from benchmarks.renderer_shift import policy_dir
    from imagination.pipeline import run_config_of, run_env_kwargs
    from policies import load_policy
    from wmrl.data import Trajectories

    t0 = time.perf_counter()
    cfg = run_config_of(src)
    tasks = envs.resolve_tasks(cfg.suite)
    if held_out:  # in the evaluation's batches too (a policy's float results depend a little on the batch size)
        n, first, b = cfg.eval.episodes_per_task, cfg.eval.seed, cfg.eval.num_envs
        groups = [([t] * min(b, n - k), [first + 1000 * i + e for e in range(k, min(k + b, n))])
                  for i, t in enumerate(tasks) for k in range(0, n, b)]
    else:
        groups = [pool_starts(tasks, starts_per_task, rl_seeds(cfg, rl_seed)[1])]
    out: dict[str, Any] = {"run": str(src), "starts_of": "held_out" if held_out else "pool",
                           "starts": sum(len(g[0]) for g in groups), "policies": {}}
    models = []
    if state_models or quick_fit is not None:
        from benchmarks.state_model_rl import fit_quick_state_model
        from worldmodels.object_dynamics import ObjectDynamics

        dirs = ([fit_quick_state_model(src, quick_fit / n, b)[0] for n, b in (("quick", None), ("quick_b", 1))]
                if quick_fit is not None else [state_model_folder(src, key, n) for n in state_models])
        models = [ObjectDynamics.from_pretrained(d).eval() for d in dirs]
        out.update(state_models=[str(d) for d in dirs], branch_step=branch_step)
    for name in policies:
        d = policy_dir(src, policy_work, key, name)
        policy = load_policy(d)
        traj = Trajectories.concat([play_pool_with_orientations(policy, task_ids, seeds, run_env_kwargs(cfg))[0]
                                    for task_ids, seeds in groups])
        eps = {**episode_turns(traj), **(branch_errors(models, traj, branch_step) if models else {})}
        out["policies"][name] = {"policy": str(d), "success": float(np.mean(traj.episode_success)),
                                 "per_task": per_task(eps, threshold_deg), "episodes": eps}
    out["wall_time_s"] = time.perf_counter() - t0
    return out


def summarize(per_run: list[dict[str, Any]], policies: list[str], threshold_deg: float) -> dict[str, Any]:
    """Each policy's episodes pooled over the runs: :func:`turn_split` of them all, and :func:`per_task`."""
    out: dict[str, Any] = {}
    for name in policies:
        keys = per_run[0]["policies"][name]["episodes"].keys()
        eps = {k: [x for r in per_run for x in r["policies"][name]["episodes"][k]] for k in keys}
        every = np.ones(len(eps["success"]), bool)
        out[name] = {"episodes": int(every.sum()), **turn_split(eps, every, threshold_deg),
                     "per_task": per_task(eps, threshold_deg)}
    return out


def _one(*args: Any, progress: bool, config_name: str) -> dict[str, Any]:
    return run_one(*args)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cube_turns", description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=Path, nargs="+", default=None,
                   help="finished wmrl run folders, one per seed (default runs/imagination_lift/seed_{0,1,2}; "
                   "quick: runs/imagination_lift_quick/seed_0)")
    p.add_argument("--policies", nargs="+", default=["sft"],
                   help="policy names: run stages (sft, round_0, real_rl) or fixed-starts arms (default sft)")
    p.add_argument("--policy-work", type=Path, default=Path("runs/fixed_starts"),
                   help="the fixed-starts work folder whose arms --policies name")
    p.add_argument("--starts-per-task", type=int, default=16)
    p.add_argument("--held-out", action="store_true",
                   help="play the runs' held-out evaluation starts (cfg.eval, 600 by default) instead of the pool")
    p.add_argument("--rl-seed", type=int, default=0, help="the fixed-starts pool's rl seed (its starts)")
    p.add_argument("--threshold-deg", type=float, default=15.0,
                   help="an episode whose target cube turned further (modulo its symmetries) counts as turned")
    p.add_argument("--state-models", nargs="+", default=[], metavar="NAME",
                   help="also branch each episode in state models NAME: folders in each run, or paths where {run} "
                   "stands for the run's key (several: each member alone)")
    p.add_argument("--branch-step", type=int, default=12,
                   help="with --state-models: the real steps before the branch (default 12, as fixed_starts "
                   "--real-steps 12)")
    p.add_argument("--quick", action="store_true",
                   help="the quick run, 2 starts per task, branched in a tiny state model fitted here (CI smoke)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (spawned processes of one torch thread)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    import sys

    from benchmarks._stats import machine_info
    from benchmarks.real_rl import run_each
    from benchmarks.renderer_shift import policy_dir
    from wmrl.errors import ConfigError, WmrlError
    from wmrl.io import atomic_write_json

    try:
        if a.starts_per_task < 1:
            raise ConfigError(f"--starts-per-task {a.starts_per_task}: expected >= 1")
        if not 0.0 < a.threshold_deg < 63.0:  # a cube's largest turn modulo its symmetries is about 62.8 deg
            raise ConfigError(f"--threshold-deg {a.threshold_deg}: expected an angle in (0, 63) degrees")
        if a.branch_step < 1:
            raise ConfigError(f"--branch-step {a.branch_step}: expected >= 1 real step before the branch")
        if a.quick:
            a.runs = a.runs or [Path("runs/imagination_lift_quick/seed_0")]
            a.starts_per_task = 2
        a.runs = a.runs or [Path(f"runs/imagination_lift/seed_{s}") for s in (0, 1, 2)]
        keys = run_keys(a.runs)
        for src, k in zip(a.runs, keys, strict=True):  # every policy and state model found before any work
            for name in a.policies:
                policy_dir(src, a.policy_work, k, name)
            for name in a.state_models:
                state_model_folder(src, k, name)
        jobs = {(k,): (src, a.policy_work, k, list(a.policies), a.starts_per_task, a.rl_seed, a.threshold_deg,
                       tuple(a.state_models), a.branch_step, Path("runs/cube_turns_quick") / k if a.quick else None,
                       a.held_out)
                for src, k in zip(a.runs, keys, strict=True)}
        t0 = time.perf_counter()
        runs = run_each(_one, jobs, a.jobs, not a.no_progress)
    except WmrlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    res = {"summary": summarize(list(runs.values()), list(a.policies), a.threshold_deg), "runs": runs,
           "threshold_deg": a.threshold_deg, "held_out": a.held_out, "starts_per_task": a.starts_per_task,
           "rl_seed": a.rl_seed,
           "quick": bool(a.quick), "argv": sys.argv[1:] if argv is None else list(argv),
           "wall_time_s": time.perf_counter() - t0, "machine": machine_info()}
    atomic_write_json(a.out, res)
    for name, v in res["summary"].items():
        fmt = lambda x: "-" if x is None else f"{x:.3f}"  # noqa: E731
        branch = (f"  branch error {fmt(v['branch_error_turned_median_m'])} / {fmt(v['branch_error_unturned_median_m'])}"
                  f" m, spread {fmt(v['branch_spread_turned_median_m'])} / {fmt(v['branch_spread_unturned_median_m'])} m"
                  if "branch_error_turned_median_m" in v else "")
        print(f"{name:12s} success {v['success']:.3f}  turned {v['turned_share']:.3f}  success turned "
              f"{fmt(v['success_turned'])} / unturned {fmt(v['success_unturned'])}{branch}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
