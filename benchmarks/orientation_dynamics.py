"""Does a state model that reads and predicts the cubes' orientations follow turned cubes better?

The state-model worlds of :mod:`benchmarks.fixed_starts` step the cubes' positions only
(:mod:`worldmodels.object_dynamics`), and :mod:`benchmarks.cube_turns` found their branches wrong where the
task's cube turns (8 cm off at the episode's end against about 1 cm). A turned cube is also a knocked one, so that
did not say whether the missing orientation or the hard contact is to blame. This benchmark separates them: on one
set of recorded episodes (the cubes' quaternions recorded beside the environment state:
``benchmarks.cube_turns.states_with_orientations``) it fits pairs of arm-and-object state models that differ only
in ``ObjectDynamicsConfig.orientation`` (same data, same fit seed, same schedule), and branches every test episode in
both from the real state at step ``--branch-step``, open loop with the episode's real actions (each model's own
arm), as :mod:`benchmarks.cube_turns` does. Per test set and task, turned and unturned episodes apart (the target
cube's largest turn past ``--threshold-deg``, modulo the cube's symmetries): the median distance of the branch's
target cube from the real one at the episode's end (mean over the fit seeds) for each variant, the paired
difference with a bootstrap interval over episodes, the orientation models given the real orientation before every
step instead of their own (``oracle``: is the orientation worth knowing, if it could be known?), and the orientation
models' final angle error against the "it does not turn" reading of the position-only models (the branch start's
orientation held). Also per test set: one-step errors and how far a moving cube turns over a step, by task. The
fitted models are kept in ``--work`` (``--jobs`` fits at once); a rerun on the same data reuses them.

Training data are scripted-expert episodes at the demos' noise levels (as ``wmrl run`` collects them: the data the
worlds' state models are fitted on); the test sets are expert episodes from other starts at ``--test-noise`` and,
with ``--policy-runs``, each run's SFT policy on its held-out evaluation starts (mean action, as it is scored).

Usage::

    python -m benchmarks.orientation_dynamics --policy-runs runs/s65/base --policy-episodes-per-task 100 --jobs 2 \
        --work runs/s65/od --out benchmarks/results/orientation_dynamics.json
    python -m benchmarks.orientation_dynamics --quick --out /tmp/orientation_dynamics_quick.json
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.cube_turns import (
    QUAT_COLUMN,
    TARGET_COLUMN,
    cube_angle_deg,
    states_with_orientations,
    turn_deg,
)

VARIANTS = ("position", "orientation")


def expert_episodes(tasks: list[str], per_task: int, noise: list[float], seed: int, image_size: int,
                    progress: bool) -> Any:
    """``per_task`` scripted-expert episodes of every task, split evenly over the ``noise`` levels (one batch of
    sub-envs per task and level, each playing one start: task ``i``'s ``e``-th start of level ``k`` from seed
    ``seed + 1000 i + 100000 k + e``), with the cubes' orientations recorded (``wmrl.data.Trajectories``)."""
    from tqdm.auto import tqdm

    import envs
    from imagination.coevolution import record_rollouts
    from wmrl.data import Trajectories

    per_level = np.diff(np.linspace(0, per_task, len(noise) + 1).round().astype(int))
    parts = []
    jobs = [(i, t, k, nz, int(n)) for i, t in enumerate(tasks) for k, (nz, n) in enumerate(zip(noise, per_level)) if n]
    for i, task, k, nz, n in tqdm(jobs, desc="expert episodes", disable=not progress):
        seeds = [seed + 1000 * i + 100000 * k + e for e in range(n)]
        env = envs.make_vec(task, n, image_size=image_size, autoreset_mode="same_step", seed=seeds[0])
        try:
            expert = envs.make_expert(env, noise=nz, seed=seeds[0])
            chunk = lambda obs, instructions, expert=expert: expert.act()[:, None]  # noqa: E731 (1-step chunks)
            traj, _ = record_rollouts(env, chunk, n, 1, seed=seeds, first_episodes_only=True,
                                      env_state_fn=states_with_orientations(env))
        finally:
            env.close()
        parts.append(traj)
    return Trajectories.concat(parts)


def policy_episodes(run: Path, per_task: int) -> tuple[Any, str]:
    """The run's SFT policy on the first ``per_task`` held-out evaluation starts of every task (``cfg.eval``'s
    seeds and batches, mean action), orientations recorded; (trajectories, the policy's folder)."""
    import envs
    from benchmarks.cube_turns import play_pool_with_orientations
    from imagination.pipeline import run_config_of, run_env_kwargs
    from policies import load_policy
    from wmrl.data import Trajectories
    from wmrl.errors import CheckpointError

    cfg = run_config_of(run)
    d = run / "sft" / "policy"
    if not d.is_dir():
        raise CheckpointError(f"{d} is missing; expected a wmrl run folder whose SFT stage has finished")
    policy = load_policy(d)
    tasks = envs.resolve_tasks(cfg.suite)
    first, b = cfg.eval.seed, cfg.eval.num_envs
    groups = [([t] * min(b, per_task - k), [first + 1000 * i + e for e in range(k, min(k + b, per_task))])
              for i, t in enumerate(tasks) for k in range(0, per_task, b)]
    return Trajectories.concat([play_pool_with_orientations(policy, ids, seeds, run_env_kwargs(cfg))[0]
                                for ids, seeds in groups]), str(d)


def data_fingerprint(traj: Any) -> str:
    """A short hash of what the state models read of ``traj`` (states, actions, environment states, episodes)."""
    import hashlib

    h = hashlib.sha256()
    for arr in (traj.states, traj.actions, traj.env_states, traj.episode_index):
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()[:16]


def fit_one(traj: Any, variant: str, seed: int, steps: int, rotation_weight: float, folder: Path, *,
            progress: bool, config_name: str = "") -> dict[str, Any]:
    """Fit the ``variant`` state model (arm and objects; ``orientation`` also reads and predicts the cubes'
    orientations, its rotation loss weighted ``rotation_weight``) on all of ``traj`` with ``seed`` and save it in
    ``folder``; a model already there for the same data, variant, seed and schedule is kept (a rerun resumes).
    Returns its fit metrics."""
    import json

    from worldmodels.object_dynamics import ObjectDynamicsConfig, fit_object_dynamics

    cfg = ObjectDynamicsConfig(arm=True, proprio_dim=int(traj.states.shape[1]), steps=steps, seed=seed,
                               test_fraction=0.0, orientation=variant == "orientation", quat_column=QUAT_COLUMN,
                               rotation_weight=rotation_weight if variant == "orientation" else 1.0)
    data = data_fingerprint(traj)
    meta = folder / "config.json"
    if meta.is_file() and (folder / "model.safetensors").is_file():
        try:
            old = json.loads(meta.read_text())
        except json.JSONDecodeError:  # a torn or foreign file: fitted again, and overwritten
            old = {}
        if old.get("metrics", {}).get("data") == data and old.get("config") == dataclasses.asdict(cfg):
            return old["metrics"]
    model, metrics = fit_object_dynamics(traj, cfg, progress=progress)
    metrics["data"] = data
    model.save_pretrained(folder, metrics)
    return metrics


def branch(models: list[Any], traj: Any, branch_step: int) -> dict[str, np.ndarray]:
    """Every episode of ``traj`` long enough (>= 2 rows after ``branch_step``) branched in each of ``models`` at
    once (episodes batched, padded with zero actions): from the real state at row ``branch_step`` (and the row
    before it), open loop with the episode's real actions to its last row. Returns ``episode`` (E',) the episodes
    branched, ``final_error_m`` (M, E') the target cube's distance from the real one at the last row,
    ``mean_error_m`` (M, E') that distance averaged over the branch's steps, and ``final_angle_deg`` (M, E') the
    target cube's angle from the real one at the last row modulo its symmetries (NaN for a position-only model);
    ``oracle_final_error_m`` (M, E') for an orientation model the final distance when it is given the real
    orientations at every step instead of its own (a diagnostic: is the orientation worth knowing, if it could be
    known?), NaN for a position-only model."""
    import torch

    es = np.asarray(traj.env_states, np.float32)
    bounds = np.asarray(traj.episode_bounds, np.int64)
    keep = np.flatnonzero(bounds[:, 1] - (bounds[:, 0] + branch_step) >= 2)
    s = bounds[keep, 0] + branch_step
    n_steps = bounds[keep, 1] - 1 - s  # actions s .. hi-2 lead to rows s+1 .. hi-1
    t_max = int(n_steps.max()) if len(keep) else 0
    rows = s[:, None] + np.minimum(np.arange(t_max), n_steps[:, None] - 1)  # (E', T) clipped at the last action
    act = np.asarray(traj.actions, np.float32)[rows] * (np.arange(t_max) < n_steps[:, None])[..., None]
    prop = torch.from_numpy(np.asarray(traj.states, np.float32)[np.stack([s - 1, s], 1)])  # (E', 2, P)
    cubes = torch.from_numpy(es[:, :9].reshape(-1, 3, 3))
    quats = torch.from_numpy(es[:, QUAT_COLUMN:QUAT_COLUMN + 12].reshape(-1, 3, 4))
    target = np.rint(es[bounds[keep, 0], TARGET_COLUMN]).astype(np.int64)
    ids = np.arange(len(keep))
    last = s + n_steps  # the real last row
    real_final = es[last, :9].reshape(-1, 3, 3)[ids, target]
    real_q = es[last, QUAT_COLUMN:QUAT_COLUMN + 12].reshape(-1, 3, 4)[ids, target]
    real_path = es[:, :9].reshape(-1, 3, 3)[rows + 1][ids, :, target]  # (E', T, 3)
    valid = np.arange(t_max) < n_steps[:, None]
    out = {"episode": keep, "final_error_m": [], "mean_error_m": [], "final_angle_deg": [], "oracle_final_error_m": []}
    for m in models:
        args = (prop[:, 1:], torch.from_numpy(act), cubes[s], cubes[s - 1])
        with torch.no_grad():
            if m.config.orientation:
                _, pos, q = m.rollout_with_orientations(*args, quats[s], proprio_prev=prop[:, 0])
            else:
                (_, pos), q = m.rollout(*args, proprio_prev=prop[:, 0]), None
        pos = pos.numpy()[ids, :, target]  # (E', T, 3)
        final = pos[ids, n_steps - 1]
        dist = np.linalg.norm(pos - real_path, axis=-1)
        out["final_error_m"].append(np.linalg.norm(final - real_final, axis=-1))
        out["mean_error_m"].append((dist * valid).sum(1) / n_steps)
        if q is None:
            out["final_angle_deg"].append(np.full(len(keep), np.nan))
            out["oracle_final_error_m"].append(np.full(len(keep), np.nan))
        else:
            q_final = q.numpy()[ids, n_steps - 1, target]
            out["final_angle_deg"].append(cube_angle_deg(q_final, real_q))
            oracle = _oracle_rollout(m, prop, torch.from_numpy(act), cubes[s], cubes[s - 1], quats[rows])
            out["oracle_final_error_m"].append(
                np.linalg.norm(oracle.numpy()[ids, n_steps - 1, target] - real_final, axis=-1))
    return {k: np.asarray(v) for k, v in out.items()}


def _oracle_rollout(model: Any, prop: Any, act: Any, objs: Any, objs_prev: Any, quats: Any) -> Any:
    """An orientation model's open-loop object positions (E, T, O, 3), its own arm, given the real orientations
    ``quats`` (E, T, O, 4) before every step instead of stepping its own. ``prop`` (E, 2, P): the rows before and at
    the branch; ``act`` (E, T, A)."""
    import torch

    prev, now, path = prop[:, 0], prop[:, 1], []
    with torch.no_grad():
        for k in range(act.shape[1]):
            nxt_p = model.step_arm(now, prev, act[:, k], objs)
            nxt, _ = model.step_objects(now, nxt_p, act[:, k], objs, objs_prev, quats[:, k])
            prev, now, objs_prev, objs = now, nxt_p, objs, nxt
            path.append(nxt)
    return torch.stack(path, 1)


def episode_facts(traj: Any, branch_step: int) -> dict[str, np.ndarray]:
    """Per episode: task, the target cube's largest turn over the episode (deg, modulo its symmetries), and its
    angle at the last row from where the branch starts (deg: what "it does not turn" gets wrong)."""
    es = np.asarray(traj.env_states, np.float32)
    task, turn, held = [], [], []
    for lo, hi in traj.episode_bounds:
        t = int(round(float(es[lo, TARGET_COLUMN])))
        q = es[lo:hi, QUAT_COLUMN + 4 * t:QUAT_COLUMN + 4 * t + 4]
        task.append(traj.task_ids[lo])
        turn.append(float(turn_deg(q).max()))
        b = min(branch_step, hi - lo - 1)
        held.append(float(cube_angle_deg(q[b], q[-1])))
    return {"task": np.array(task), "turn_deg": np.array(turn), "no_turn_angle_deg": np.array(held)}


def rotation_stats(traj: Any) -> dict[str, dict[str, Any]]:
    """How the cubes turn over one step, by task: over the steps where a cube in the scene moves (more than
    ``moving_eps`` or 0.5 deg), the median and 90th percentile of its rotation (deg) and displacement (cm), and the
    share of those steps whose rotation is mostly about the vertical (a spin) rather than a horizontal axis (a tip)."""
    from worldmodels.object_dynamics import MOVING_TURN_DEG, ObjectDynamicsConfig, transitions

    cfg = ObjectDynamicsConfig(orientation=True, quat_column=QUAT_COLUMN)
    out: dict[str, dict[str, Any]] = {}
    for task in sorted(set(traj.task_ids)):
        eps = np.array([i for i, (lo, _) in enumerate(traj.episode_bounds) if traj.task_ids[lo] == task])
        tr = transitions(traj, cfg, eps)
        rot = np.degrees(np.linalg.norm(tr["rotation"], axis=-1))
        disp = np.linalg.norm(tr["objs_next"] - tr["objs"], axis=-1) * 100
        active = (np.abs(tr["objs"]) < cfg.active_bound).all(-1)
        moving = active & ((disp > cfg.moving_eps * 100) | (rot > MOVING_TURN_DEG))
        r = tr["rotation"][moving]
        out[task] = {"moving_steps": int(moving.sum()),
                     "rotation_median_deg": float(np.median(rot[moving])) if moving.any() else None,
                     "rotation_p90_deg": float(np.quantile(rot[moving], 0.9)) if moving.any() else None,
                     "displacement_median_cm": float(np.median(disp[moving])) if moving.any() else None,
                     "spin_share": float((np.abs(r[:, 2]) > np.abs(r[:, :2]).max(1)).mean()) if moving.any() else None}
    return out


def _median(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    return float(np.median(x)) if len(x) else None


def paired(diff: np.ndarray, rng: np.random.Generator, draws: int = 2000) -> dict[str, Any]:
    """Median and mean of per-episode differences with a 95% bootstrap interval of the mean (None when empty)."""
    if not len(diff):
        return {"median": None, "mean": None, "mean_ci95": None}
    boot = rng.choice(diff, (draws, len(diff)), replace=True).mean(1)
    return {"median": float(np.median(diff)), "mean": float(diff.mean()),
            "mean_ci95": [float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))]}


def compare(facts: dict[str, np.ndarray], br: dict[str, dict[str, np.ndarray]], sel: np.ndarray,
            threshold_deg: float, rng: np.random.Generator) -> dict[str, Any]:
    """Of the branched episodes ``sel`` (bool over ``br``'s episodes), turned and unturned apart: episodes, each
    variant's median final and mean branch error (metres; each episode's mean over the fit seeds), the paired
    difference orientation - position of the final error, the same for the orientation models given the real
    orientations (``oracle``), and the final target-cube angle error of the orientation models against the held
    start orientation."""
    idx = br["position"]["episode"]
    turned = facts["turn_deg"][idx] > threshold_deg
    out: dict[str, Any] = {}
    for part, part_sel in (("all", sel), ("turned", sel & turned), ("unturned", sel & ~turned)):
        row: dict[str, Any] = {"episodes": int(part_sel.sum())}
        for v in VARIANTS:
            row[f"{v}_final_error_median_m"] = _median(br[v]["final_error_m"].mean(0)[part_sel])
            row[f"{v}_mean_error_median_m"] = _median(br[v]["mean_error_m"].mean(0)[part_sel])
        pos = br["position"]["final_error_m"].mean(0)
        row["final_error_diff_m"] = paired((br["orientation"]["final_error_m"].mean(0) - pos)[part_sel], rng)
        oracle = br["orientation"]["oracle_final_error_m"].mean(0)
        row["oracle_final_error_median_m"] = _median(oracle[part_sel])
        row["oracle_final_error_diff_m"] = paired((oracle - pos)[part_sel], rng)
        row["orientation_final_angle_median_deg"] = _median(br["orientation"]["final_angle_deg"].mean(0)[part_sel])
        row["no_turn_final_angle_median_deg"] = _median(facts["no_turn_angle_deg"][idx][part_sel])
        out[part] = row
    return out


def evaluate(name: str, traj: Any, fits: list[dict[str, Any]], branch_step: int, threshold_deg: float,
             seed: int) -> dict[str, Any]:
    """One test set: its turned share, the models' one-step errors on it, and :func:`compare` overall and by task."""
    from worldmodels.object_dynamics import _tensors, one_step_error, transitions

    facts = episode_facts(traj, branch_step)
    br = {v: branch([f[v] for f in fits], traj, branch_step) for v in VARIANTS}
    rng = np.random.default_rng(seed)
    idx = br["position"]["episode"]
    every = np.ones(len(idx), bool)
    tasks = facts["task"][idx]
    eps = np.arange(traj.num_episodes)
    one_step = {}
    for v in VARIANTS:  # the fit seeds' models read the same transitions
        tr = _tensors(transitions(traj, fits[0][v].config, eps))
        one_step[v] = [one_step_error(f[v], tr) for f in fits]
    return {
        "test_set": name, "episodes": int(traj.num_episodes), "branched": int(len(idx)),
        "rotation_stats": rotation_stats(traj),
        "success": float(np.mean(traj.episode_success)),
        "turned_share": float((facts["turn_deg"] > threshold_deg).mean()),
        "one_step": one_step,
        "summary": compare(facts, br, every, threshold_deg, rng),
        "per_task": {t: compare(facts, br, tasks == t, threshold_deg, rng) for t in sorted(set(tasks.tolist()))},
        "episodes_detail": {"task": facts["task"].tolist(), "turn_deg": facts["turn_deg"].tolist(),
                            "branched": idx.tolist(),
                            **{f"{v}_final_error_m": br[v]["final_error_m"].tolist() for v in VARIANTS},
                            "orientation_final_angle_deg": br["orientation"]["final_angle_deg"].tolist(),
                            "oracle_final_error_m": br["orientation"]["oracle_final_error_m"].tolist()},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.orientation_dynamics", description=__doc__.split("\n")[0])
    p.add_argument("--train-episodes-per-task", type=int, default=60, help="expert episodes per task to fit on")
    p.add_argument("--train-noise", type=float, nargs="+", default=[0.0, 0.2, 0.4],
                   help="their noise levels (default the main job's demos')")
    p.add_argument("--test-episodes-per-task", type=int, default=40, help="expert test episodes per task")
    p.add_argument("--test-noise", type=float, nargs="+", default=[0.2, 0.4, 0.6])
    p.add_argument("--policy-runs", type=Path, nargs="*", default=[],
                   help="wmrl run folders whose SFT policy plays a test set on its held-out starts")
    p.add_argument("--policy-episodes-per-task", type=int, default=50)
    p.add_argument("--fit-seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=8000, help="fit steps of every state model (default the config's)")
    p.add_argument("--rotation-weight", type=float, default=0.05,
                   help="the orientation models' rotation loss weight (degrees^2 against the positions' cm^2; default "
                   "0.05, the better of 1, 0.05 and 0.002 in a one-seed pilot on the expert test set)")
    p.add_argument("--branch-step", type=int, default=12)
    p.add_argument("--threshold-deg", type=float, default=15.0)
    p.add_argument("--seed", type=int, default=0, help="seed of the training starts (test starts: seed + 500000)")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--num-threads", type=int, default=None)
    p.add_argument("--jobs", type=int, default=1, help="state models fitted at once (spawned processes, one thread each)")
    p.add_argument("--work", type=Path, default=Path("runs/orientation_dynamics"),
                   help="folder of the fitted state models (a rerun with the same data and settings reuses them)")
    p.add_argument("--quick", action="store_true", help="2 training and 2 test episodes per task, 100 fit steps, one seed")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    import torch

    import envs
    from benchmarks._stats import machine_info
    from benchmarks.real_rl import run_each
    from wmrl.errors import ConfigError, WmrlError
    from wmrl.io import atomic_write_json
    from worldmodels.object_dynamics import ObjectDynamics

    if a.quick:
        a.train_episodes_per_task, a.test_episodes_per_task, a.train_noise, a.test_noise = 4, 2, [0.0, 0.4], [0.4]
        a.steps, a.fit_seeds, a.policy_episodes_per_task = 100, [0], 2
        a.work = a.work.with_name(a.work.name + "_quick")
    if a.num_threads:
        torch.set_num_threads(a.num_threads)
    progress = not a.no_progress
    t0 = time.perf_counter()
    try:
        for name in ("train_episodes_per_task", "test_episodes_per_task", "policy_episodes_per_task", "steps"):
            if getattr(a, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} {getattr(a, name)}: expected >= 1")
        if a.branch_step < 1:
            raise ConfigError(f"--branch-step {a.branch_step}: expected >= 1 real step before the branch")
        if not 0.0 < a.threshold_deg < 63.0:
            raise ConfigError(f"--threshold-deg {a.threshold_deg}: expected an angle in (0, 63) degrees")
        if any(x < 0 for x in a.train_noise + a.test_noise):
            raise ConfigError(f"--train-noise {a.train_noise} / --test-noise {a.test_noise}: expected levels >= 0")
        tasks = envs.resolve_tasks("builtin")
        train = expert_episodes(tasks, a.train_episodes_per_task, a.train_noise, a.seed, a.image_size, progress)
        test_sets = {"expert": expert_episodes(tasks, a.test_episodes_per_task, a.test_noise, a.seed + 500000,
                                               a.image_size, progress)}
        policies = {}
        for run in a.policy_runs:
            traj, d = policy_episodes(run, a.policy_episodes_per_task)
            test_sets[f"sft:{run}"], policies[f"sft:{run}"] = traj, d
        t_data = time.perf_counter() - t0
        light = dataclasses.replace(train, images=np.zeros((len(train.states), 1, 1, 3), np.uint8))  # no frames needed
        def folder(v: str, s: int) -> Path:  # the position models do not depend on the rotation weight: shared
            return a.work / (f"{v}_seed{s}" if v == "position" else f"{v}_w{a.rotation_weight:g}_seed{s}")

        jobs = {(f"{v}_seed{s}",): (light, v, s, a.steps, a.rotation_weight, folder(v, s))
                for s in a.fit_seeds for v in VARIANTS}
        fit_metrics = run_each(fit_one, jobs, a.jobs, progress)
        fits = [{v: ObjectDynamics.from_pretrained(folder(v, s)) for v in VARIANTS} for s in a.fit_seeds]
        t_fit = time.perf_counter() - t0 - t_data
        results = [evaluate(name, traj, fits, a.branch_step, a.threshold_deg, a.seed) for name, traj in test_sets.items()]
    except WmrlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    res = {
        "train": {"episodes": int(train.num_episodes), "noise": a.train_noise, "success": float(np.mean(train.episode_success)),
                  "turned_share": float((episode_facts(train, a.branch_step)["turn_deg"] > a.threshold_deg).mean()),
                  "rotation_stats": rotation_stats(train)},
        "fits": {v: [fit_metrics[f"{v}_seed{s}"] for s in a.fit_seeds] for v in VARIANTS}, "work": str(a.work),
        "test_sets": results, "policies": policies, "fit_seeds": a.fit_seeds, "steps": a.steps,
        "rotation_weight": a.rotation_weight, "branch_step": a.branch_step, "threshold_deg": a.threshold_deg, "quick": bool(a.quick),
        "argv": sys.argv[1:] if argv is None else list(argv),
        "data_time_s": t_data, "fit_time_s": t_fit, "wall_time_s": time.perf_counter() - t0, "machine": machine_info(),
    }
    atomic_write_json(a.out, res)
    fmt = lambda x: "-" if x is None else f"{100 * x:.2f}"  # noqa: E731 (metres -> cm)
    for r in results:
        print(f"{r['test_set']}: {r['episodes']} episodes, turned {r['turned_share']:.2f}")
        for part, row in r["summary"].items():
            d = row["final_error_diff_m"]
            print(f"  {part:9s} n={row['episodes']:4d}  final error cm: position {fmt(row['position_final_error_median_m'])}"
                  f"  orientation {fmt(row['orientation_final_error_median_m'])}  diff mean {fmt(d['mean'])}"
                  f"  oracle {fmt(row['oracle_final_error_median_m'])}"
                  f"  angle deg: orientation {row['orientation_final_angle_median_deg']}  held {row['no_turn_final_angle_median_deg']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
