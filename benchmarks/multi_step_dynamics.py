"""Does training the object model on its own K-step unrolls make the state model's world rate success truer?

Usage::

    python -m benchmarks.multi_step_dynamics --runs RUN [RUN ...] [--rollout-steps 0 8 8arm ...] [--steps N]
        [--work DIR] [--jobs J] --out FILE.json
    python -m benchmarks.multi_step_dynamics --quick --out FILE.json   # world_vs_real's tiny run

The state model's world (the arm-and-object model of ``worldmodels.object_dynamics`` that self-imitation's rounds
collect successes in) is fitted on one-step displacements. Its errors compound over an episode: a pushed cube
that drifts a centimetre a step off its real path ends up in the goal when the real one does not, and the round
clones a false success. ``ObjectDynamicsConfig.rollout_steps=K`` adds a multi-step loss: the model unrolled K
steps through windows of real transitions, its own positions fed back; ``Karm`` (``rollout_arm=true``) unrolls the
arm model too, its own tcp moving the cubes, as the world steps them.

For each run folder of a self-imitation run (``wmrl run ... self_imitation.enabled=true``) and each K, this fits
round 0's state model again (the run's own object-dynamics config, on what round 0 fitted it on: the demos plus
``round_0/policy_rollouts.npz``, the SFT policy's real episodes; ``--steps`` steps, the run's seed), into
``WORK/<run>/k<K>`` (kept: a second call reads the fit back; where the run's ``round_0/object_dynamics`` is that
very fit, K=0 at round 0's steps, it and round 0's own check are read instead: ``round_0/world_vs_real.json``,
computed and written there where it is missing, as ``benchmarks.world_vs_real`` does), and sets its world against the simulator start by
start for the SFT policy on the run's own evaluation starts (:func:`imagination.self_imitation.
world_vs_real_on_eval_starts`: same starts, same noise-free actions, no real physics step beyond the resets).
Every K of a run is fitted on the same data from the same seed and checked on the same starts, so the
differences are the loss's.

Fields: ``per_run`` (run -> K -> ``model``: the fit's folder, ``fit``: the fit's held-out one-step and open-loop errors and wall time, and
``check``: task -> ``episodes``, ``imagined``, ``real``, ``overrating`` (``overrating_se``), ``false_successes``,
``missed_successes``, ``precision``), ``pooled`` (K -> task -> the check pooled over the runs,
``benchmarks.world_vs_real.pool``; ``open_loop_error_step_16_m`` / ``_32_m`` and ``fit_wall_time_s`` the runs'
medians), ``paired`` (``"K - BASE"`` -> task -> each fit against each earlier one start by start, :func:`paired_changes`: the
change in agreement with the simulator with its paired standard error, episodes fixed and broken, and the change
in precision with a paired-bootstrap 95% interval), ``rollout_steps``, ``steps``, ``runs``, ``quick``, ``wall_time_s``, ``machine``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

FIT_KEYS = ("one_step_error_mean_m", "one_step_error_moving_mean_m", "open_loop_error_step_16_m",
            "open_loop_error_step_32_m", "arm_open_loop_tcp_error_step_16_m", "arm_open_loop_tcp_error_step_32_m",
            "final_loss_cm2", "rollout_windows", "train_episodes", "wall_time_s")


def parse_label(label: str) -> tuple[int, bool]:
    """A fit's label, ``K`` or ``Karm`` -> (``rollout_steps``, ``rollout_arm``); WmrlError on any other."""
    from wmrl.errors import ConfigError, WmrlError
    from worldmodels.object_dynamics import ObjectDynamicsConfig

    arm = label.endswith("arm")
    digits = label[:-3] if arm else label
    if not digits.isdigit():
        raise WmrlError(f"--rollout-steps {label}: expected K (an integer: 0, or >= 2) or Karm (K >= 2, the arm "
                        "unrolled too)")
    k = int(digits)
    try:
        ObjectDynamicsConfig(rollout_steps=k, arm=True, rollout_arm=arm)
    except ConfigError as e:
        raise WmrlError(f"--rollout-steps {label}: {e}") from None
    return k, arm


def fit_and_check(run: Path, label: str, steps: int, work: Path) -> dict[str, Any]:
    """Round 0's state model of self-imitation run ``run`` fitted again with the multi-step loss of ``label``
    (:func:`parse_label`: ``rollout_steps`` and ``rollout_arm``) for ``steps`` steps into ``work`` (read back when
    already there), and its world against the simulator for the SFT policy on the run's evaluation starts:
    ``{"fit": ..., "check": ..., "model": ...}``."""
    from benchmarks.world_vs_real import entering_check
    from imagination.pipeline import run_config_of
    from imagination.self_imitation import WORLD_CHECK
    from wmrl.data import Trajectories, load_trajectories, load_trajectories_npz
    from wmrl.errors import WmrlError
    from worldmodels.object_dynamics import fit_object_dynamics

    cfg = run_config_of(run)
    od = cfg.object_dynamics_config()
    if od is None or not od.arm:
        raise WmrlError(f"--runs {run}: its config fits no arm-and-object state model (expected object_dynamics."
                        "enabled=true arm=true, a self-imitation run)")
    k, arm = parse_label(label)
    rollouts = run / "round_0" / "policy_rollouts.npz"
    model_dir, own = work / f"k{label}", run / "round_0" / "object_dynamics"
    if _is_round_zero_fit(own, od, cfg.seed, steps, k, arm):  # round 0 fitted this very model: read, not fitted again
        model_dir = own
    elif not (model_dir / "config.json").is_file():  # written last: a fit cut short runs again
        parts = [load_trajectories(run / "data")] + ([load_trajectories_npz(rollouts)] if rollouts.is_file() else [])
        traj = Trajectories.concat(parts)
        c = dataclasses.replace(od, proprio_dim=int(traj.states.shape[1]), seed=int(cfg.seed), steps=int(steps),
                                rollout_steps=k, rollout_arm=arm)
        model, metrics = fit_object_dynamics(traj, c, progress=False)
        metrics["policy_rollouts"] = str(rollouts) if rollouts.is_file() else None
        model.save_pretrained(model_dir, metrics)
    metrics = json.loads((model_dir / "config.json").read_text()).get("metrics", {})
    # round 0's own model is checked (or read back) where the run keeps that check, as world_vs_real does
    check = entering_check(run, 0, model_dir, run / "round_0" / WORLD_CHECK if model_dir == own else work / f"k{label}_check.json",
                           outcomes=True)
    return {"fit": {key: metrics.get(key) for key in FIT_KEYS}, "check": check, "model": str(model_dir)}


def _is_round_zero_fit(folder: Path, od: Any, seed: int, steps: int, k: int, arm: bool = False) -> bool:
    """Whether ``folder`` (a run's ``round_0/object_dynamics``) holds the fit asked for: round 0 fitted it on the
    same data with the run's config, seed ``seed``, ``steps`` steps, ``rollout_steps`` ``k`` and ``rollout_arm``
    ``arm`` (its saved config
    equal to that one but for ``proprio_dim``, which the data sets; fields a model saved before them lacks take
    their defaults)."""
    f = folder / "config.json"
    if not f.is_file():
        return False
    saved = dataclasses.asdict(type(od)(**json.loads(f.read_text()).get("config", {})))  # older: defaults filled in
    want = {**dataclasses.asdict(od), "seed": int(seed), "steps": int(steps), "rollout_steps": int(k),
            "rollout_arm": bool(arm)}
    return {key: v for key, v in saved.items() if key != "proprio_dim"} == {
        key: v for key, v in want.items() if key != "proprio_dim"}


def _job(args: tuple[Path, str, int, Path]) -> dict[str, Any]:
    return fit_and_check(*args)


def pooled(per_run: dict[str, dict[str, Any]], ks: list[str]) -> dict[str, Any]:
    """K -> task -> the runs' checks pooled (``benchmarks.world_vs_real.pool``), with the fits' median open-loop
    errors and wall time."""
    from benchmarks.world_vs_real import pool

    out: dict[str, Any] = {}
    for k in ks:
        rows = [v[k] for v in per_run.values()]
        tasks = list(rows[0]["check"])
        out[k] = {t: pool([r["check"][t] for r in rows]) for t in tasks}
        for key, name in (("open_loop_error_step_16_m", None), ("open_loop_error_step_32_m", None),
                          ("wall_time_s", "fit_wall_time_s")):
            vals = [r["fit"][key] for r in rows if r["fit"].get(key) is not None]
            out[k][name or key] = statistics.median(vals) if vals else None
    return out


def real_outcomes(run: Path) -> dict[str, np.ndarray]:
    """Task -> the simulator's outcome episode by episode (bool, seed order) of run ``run``'s SFT evaluation."""
    block = json.loads((run / "stages" / "eval_sft.json").read_text())
    return {t: np.array([c == "1" for c in v], bool) for t, v in block.get("eval", block)["outcomes"].items()}


def paired_changes(per_run: dict[str, dict[str, Any]], ks: list[str], resamples: int = 2000,
                   seed: int = 0) -> dict[str, Any]:
    """Each fit of ``ks`` against each earlier one start by start: both worlds played the same starts with the
    same actions, so per episode the real outcome is one and only the world's can differ. ``"K - BASE"`` (a later
    label minus an earlier one) -> task (and ``all``) ->
    ``episodes`` (pooled over the runs), ``agreement`` of each world with the simulator (``base``, ``k``) and its
    change with the paired standard error (``agreement_change_se``: the per-episode differences' sd / sqrt(n)),
    ``fixed`` / ``broken`` (episodes the K world gets right / wrong where the base world got them wrong / right),
    ``precision`` of each world's successes (pooled) and ``precision_change`` with a 95% interval from a paired
    bootstrap of the episodes within each run and task (``resamples`` draws from ``seed``)."""
    rng = np.random.default_rng(seed)
    reals = {run: real_outcomes(Path(run)) for run in per_run}
    out = {}
    for base, k in ((ks[i], k) for j, k in enumerate(ks) for i in range(j)):
        blocks: dict[str, list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}  # task -> (real, base, k) per run
        for run, by_k in per_run.items():
            real = reals[run]
            for t, row in by_k[k]["check"].items():
                if t == "all":
                    continue
                b = np.array([c == "1" for c in by_k[base]["check"][t]["imagined_outcomes"]], bool)
                m = np.array([c == "1" for c in row["imagined_outcomes"]], bool)
                blocks.setdefault(t, []).append((real[t], b, m))
        blocks["all"] = [x for t in list(blocks) for x in blocks[t]]
        out[f"{k} - {base}"] = {t: _paired_row(bl, rng, resamples) for t, bl in blocks.items()}
    return out


def _paired_row(blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray]], rng: np.random.Generator,
                resamples: int) -> dict[str, Any]:
    """:func:`paired_changes`' row for blocks of (real, base world, K world) outcomes, each shape (episodes,)."""
    real, b, m = (np.concatenate(x) for x in zip(*blocks, strict=True))
    agree_b, agree_m = b == real, m == real
    d = agree_m.astype(float) - agree_b.astype(float)

    def precision(s: np.ndarray, r: np.ndarray) -> float | None:
        return float((s & r).sum() / s.sum()) if s.any() else None

    offsets = np.cumsum([0] + [len(x[0]) for x in blocks])
    draws = np.concatenate([lo + rng.integers(0, hi - lo, size=(resamples, hi - lo))
                            for lo, hi in zip(offsets[:-1], offsets[1:], strict=True)], axis=1)  # (resamples, n)
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = ((m[draws] & real[draws]).sum(1) / m[draws].sum(1)) - ((b[draws] & real[draws]).sum(1) / b[draws].sum(1))
    boot = boot[np.isfinite(boot)]
    pb, pm = precision(b, real), precision(m, real)
    return {
        "episodes": float(len(real)), "agreement_base": float(agree_b.mean()), "agreement_k": float(agree_m.mean()),
        "agreement_change": float(d.mean()),
        "agreement_change_se": float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else None,
        "fixed": float((agree_m & ~agree_b).sum()), "broken": float((~agree_m & agree_b).sum()),
        "precision_base": pb, "precision_k": pm,
        "precision_change": None if pb is None or pm is None else pm - pb,
        "precision_change_ci95": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]
        if len(boot) >= resamples // 2 else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", nargs="+", type=Path, default=[], help="self-imitation run folders (wmrl run)")
    p.add_argument("--rollout-steps", nargs="+", default=["0", "8"], metavar="K",
                   help="the multi-step loss's window per fit (0: one-step loss only; Karm: the arm model unrolled "
                   "too, object_dynamics.rollout_arm; default 0 8)")
    p.add_argument("--steps", type=int, default=8000, help="fit steps (default 8000, round 0's)")
    p.add_argument("--work", type=Path, default=Path("runs/multi_step_dynamics"),
                   help="where the fits and checks are kept (WORK/<run folder name>/k<K>)")
    p.add_argument("--jobs", type=int, default=1, help="fits side by side, one torch thread each")
    p.add_argument("--quick", action="store_true", help="world_vs_real's tiny self-imitation run, 40-step fits")
    p.add_argument("--out", default="benchmarks/results/multi_step_dynamics.json")
    a = p.parse_args(argv)
    from tqdm import tqdm

    from benchmarks._workers import pool as worker_pool
    from benchmarks.imagination_lift import environment_info
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    t0 = time.perf_counter()
    try:
        if a.quick:
            from benchmarks.world_vs_real import quick_run

            runs, a.steps, a.rollout_steps = [quick_run()], 40, ["0", "4", "4arm"]
            a.work = a.work.with_name(a.work.name + "_quick")
        else:
            runs = list(a.runs)
        if not runs:
            raise WmrlError("give --runs RUN [RUN ...] (self-imitation run folders) or --quick")
        if a.steps < 1 or a.jobs < 1 or len(set(a.rollout_steps)) != len(a.rollout_steps):
            raise WmrlError(f"--steps {a.steps} and --jobs {a.jobs} must be >= 1 and --rollout-steps "
                            f"{a.rollout_steps} distinct")
        for label in a.rollout_steps:
            parse_label(label)
        names = [r.resolve().name for r in runs]
        if len(set(names)) != len(names):  # the work folders are named by them
            names = [f"{r.resolve().parent.name}_{r.resolve().name}" for r in runs]
        for run in runs:
            if not (run / "stages" / "eval_sft.json").is_file():
                raise WmrlError(f"--runs {run}: no stages/eval_sft.json; expected a wmrl run folder past its SFT "
                                "evaluation")
        jobs = [(run, k, a.steps, a.work / name) for run, name in zip(runs, names, strict=True)
                for k in a.rollout_steps]
        if a.jobs > 1:
            with worker_pool(a.jobs) as ex:
                results = list(tqdm(ex.map(_job, jobs), total=len(jobs), desc="fits"))
        else:
            import torch

            torch.set_num_threads(1)  # as each worker of --jobs runs, so a fit does not depend on --jobs
            results = [_job(j) for j in tqdm(jobs, desc="fits")]
    except WmrlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    per_run: dict[str, dict[str, Any]] = {}
    for (run, k, _, _), res in zip(jobs, results, strict=True):
        per_run.setdefault(str(run), {})[k] = res
    out = {"per_run": per_run, "pooled": pooled(per_run, a.rollout_steps),
           "paired": paired_changes(per_run, a.rollout_steps), "rollout_steps": a.rollout_steps,
           "steps": a.steps, "runs": [str(r) for r in runs], "quick": a.quick,
           "wall_time_s": time.perf_counter() - t0, "machine": environment_info()}
    atomic_write_json(Path(a.out), out)
    for k, rows in out["pooled"].items():
        tasks = " ".join(f"{t} {r['precision'] if r['precision'] is None else round(r['precision'], 3)}"
                         f" ({r['overrating']:+.3f})" for t, r in rows.items() if isinstance(r, dict))
        errs = " / ".join("n/a" if rows[f"open_loop_error_step_{s}_m"] is None else f"{rows[f'open_loop_error_step_{s}_m']:.4f}"
                          for s in (16, 32))
        print(f"K={k}: open-loop 16/32 steps {errs} m; precision (overrating): {tasks}")
    for pair, rows in out["paired"].items():
        r = rows["all"]
        ci = r["precision_change_ci95"]
        print(f"K={pair} on the same starts: agreement with the simulator "
              f"{r['agreement_change']:+.3f} (s.e. {r['agreement_change_se'] or 0:.3f}; {r['fixed']:.0f} fixed, "
              f"{r['broken']:.0f} broken); precision "
              + ("n/a" if r["precision_change"] is None else f"{r['precision_change']:+.3f}")
              + ("" if ci is None else f" [{ci[0]:+.3f}, {ci[1]:+.3f}]"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
