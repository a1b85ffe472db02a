"""Does the state model's world rate each task's success as the simulator does, on the same starts?

Usage::

    python -m benchmarks.world_vs_real --runs RUN [RUN ...] [--rounds R ...] [--verify-real]
        [--refit-episodes N [N ...]] --out FILE.json
    python -m benchmarks.world_vs_real --quick [...] --out FILE.json   # a tiny self-imitation run made here

Each self-imitation round of ``wmrl run`` (``self_imitation.enabled``) trains the policy on the successes its
state model's world counts. Where that world counts successes the simulator would not, the round clones
false ones. This benchmark sets the world of each round against the simulator start by start, for the policy
the round is about to train: the policy entering round R (SFT for round 0, else round R-1's policy) plays with
its mean action in round R's world (``round_R/object_dynamics`` or the latest before it) from the starts of
the run's own evaluation of that policy, whose real outcomes, episode by episode, the run already holds
(:func:`imagination.self_imitation.world_vs_real_on_eval_starts`). Both sides play the same starts with the same
noise-free actions, so the start set's luck cancels: what remains is the world's error.

A round run on code that records the check (``round_R/world_vs_real.json``) is read back; an older round is
computed here and that file written into its folder, so a second call reads it back too. ``--verify-real``
also plays each run's SFT policy in the simulator from the same seeds and counts how many of the evaluation's
outcomes it reproduces (the pairing's premise: the same seed gives the same start and the same outcome).
``--refit-episodes N ...`` asks how much fresh real data of the policy the world needs to stop flattering it:
the last round's own policy plays max(N) real episodes, the round's world is fine-tuned as the next round would
fine-tune it on every real episode so far plus the first N of them (0: as it is), and each is checked against
that policy's evaluation (:func:`refit_checks`).

Fields: ``per_run`` (run -> round -> task -> ``episodes``, ``imagined``, ``real``, ``overrating`` and its
paired ``overrating_se``, ``false_successes``, ``missed_successes``, ``precision``), ``by_round`` (round ->
task -> the same pooled over the runs: rates and counts summed over their episodes, ``overrating_se`` as
sqrt(sum se^2) / k), ``by_task`` (task -> pooled over runs and rounds; the rounds of a run share their starts,
so these are summaries, not independent samples), ``real_reproduced`` (with ``--verify-real``), ``refit``
(with ``--refit-episodes``: run -> ``round``, ``fresh_success_rate`` and N -> the check with ``real_env_steps``
and ``seconds``; ``pooled``: N -> task -> pooled over the runs), ``gate`` (rounds with a gate check of their
own on fresh starts, ``self_imitation.check_episodes`` > 0; else None: ``threshold``, ``per_run`` (run -> round
-> ``fresh``: that check's rows, ``gated_fresh`` / ``gated_eval``: the tasks below the threshold on the fresh
starts / on the evaluation's), ``decisions`` and ``agree`` (task-rounds the two checks gate alike), ``by_round``
(the fresh checks pooled over the runs)), ``runs``, ``rounds``, ``wall_time_s``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

QUICK_RUN = Path("runs/world_vs_real_quick/seed_0")


def quick_run(root: Path = QUICK_RUN) -> Path:
    """A tiny self-imitation run (one task, round 0 only), made once into ``root`` and resumed after."""
    from imagination.pipeline import Pipeline, load_run_config

    over = [
        "suite=PushCube-v0", "demos.episodes_per_task=4", "demos.num_envs=4", "world_model_train.steps=4",
        "world_model_train.videos=0", "rewards.idm_steps=4", "rewards.success_steps=4",
        "rewards.imagined_random_failures=4", "sft.steps=200", "eval.episodes_per_task=8", "eval.num_envs=8",
        "videos=0", "num_threads=1", "world_model.env_state_dim=9", "object_dynamics.enabled=true",
        "object_dynamics.arm=true", "+object_dynamics.steps=200", "+object_dynamics.hidden=64",
        "self_imitation.enabled=true", "self_imitation.target=4", "self_imitation.max_episodes=16",
        "self_imitation.policy_episodes=8", "self_imitation.num_envs=8", "self_imitation.steps=20",
    ]
    pipe = Pipeline(load_run_config([f"run_dir={root}", *over], "run_quick"), progress=False)
    pipe.stage("demos", pipe.s_demos)
    pipe.world_models()
    for name in ("idm", "rewards", "sft", "eval_sft"):
        pipe.stage(name, getattr(pipe, f"s_{name}"))
    pipe.stage("round_0", lambda: pipe.s_round(0))
    return root


def self_imitation_rounds(run: Path) -> list[int]:
    """The rounds of run folder ``run`` whose self-imitation collection finished, in order."""
    return sorted(int(p.parent.name.split("_")[1]) for p in run.glob("round_*/self_imitation_collection.json"))


def round_check(run: Path, r: int, progress: bool = False) -> dict[str, dict[str, Any]]:
    """Round ``r`` of self-imitation run ``run``: its world against the simulator on the evaluation's starts of
    the policy entering it, read from ``round_r/world_vs_real.json`` or computed and written there."""
    from imagination.pipeline import round_object_dynamics
    from imagination.self_imitation import WORLD_CHECK

    return entering_check(run, r, round_object_dynamics(run, r), run / f"round_{r}" / WORLD_CHECK)


def entering_check(run: Path, r: int, model_dir: Path, out: Path, outcomes: bool = False) -> dict[str, dict[str, Any]]:
    """The state model saved in ``model_dir`` against the simulator for the policy entering round ``r`` of run
    ``run`` (SFT for round 0), on the starts of the run's evaluation of that policy
    (:func:`imagination.self_imitation.world_vs_real_on_eval_starts`); read from ``out`` or computed and written
    there. ``outcomes``: a check read back must hold the world's outcomes episode by episode
    (``imagined_outcomes``, which checks written before them lack); else it is computed again and rewritten."""
    from imagination.pipeline import run_env_kwargs
    from imagination.self_imitation import world_vs_real_on_eval_starts
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    if out.is_file():
        res = json.loads(out.read_text())
        if not outcomes or all("imagined_outcomes" in row for t, row in res.items() if t != "all"):
            return res
    cfg, entering, tasks, policy, model = load_entering(run, r, model_dir)
    res = world_vs_real_on_eval_starts(policy, model, tasks, entering, cfg.eval.seed, run_env_kwargs(cfg))
    if not res:
        stage = run / "stages" / ("eval_sft.json" if r == 0 else f"round_{r - 1}.json")
        raise WmrlError(f"{stage} holds no outcomes episode by episode; the run predates them")
    atomic_write_json(out, res)
    return res


def load_entering(run: Path, r: int, model_dir: Path) -> tuple[Any, dict[str, Any], list[str], Any, Any]:
    """What a check of round ``r`` of run ``run`` reads: ``(run config, the marker of the entering policy's
    evaluation (eval_sft for round 0, else round r-1's), its tasks, that policy, the state model in model_dir)``."""
    from benchmarks._split_worlds import check_state_model
    from envs.tabletop.vector_env import STATE_DIM
    from imagination.pipeline import run_config_of
    from policies import load_policy
    from wmrl.errors import WmrlError
    from worldmodels.object_dynamics import ObjectDynamics

    cfg = run_config_of(run)
    stage = run / "stages" / ("eval_sft.json" if r == 0 else f"round_{r - 1}.json")
    if not stage.is_file():
        raise WmrlError(f"{stage} not found: round {r}'s entering policy was not evaluated in {run}")
    entering = json.loads(stage.read_text())
    policy = load_policy(run / ("sft" if r == 0 else f"round_{r - 1}") / "policy")
    model = ObjectDynamics.from_pretrained(model_dir)
    check_state_model(model, STATE_DIM)
    return cfg, entering, list(entering.get("eval", entering)["per_task"]), policy, model


def verify_real(run: Path) -> dict[str, float]:
    """Play run ``run``'s SFT policy in the simulator from its evaluation's seeds as
    :func:`world_vs_real_on_eval_starts` plays the world, and count the evaluation's outcomes reproduced."""
    import envs
    from benchmarks.state_model_ranking import episode_successes
    from imagination.pipeline import run_config_of, run_env_kwargs
    from policies import load_policy

    cfg = run_config_of(run)
    ev = json.loads((run / "stages" / "eval_sft.json").read_text())
    tasks = list(ev["per_task"])
    real = np.concatenate([[c == "1" for c in ev["outcomes"][t]] for t in tasks])
    n = len(ev["outcomes"][tasks[0]])
    policy = load_policy(run / "sft" / "policy")
    kw = run_env_kwargs(cfg)
    again = episode_successes(policy, lambda t, k: envs.make_vec(t, k, autoreset_mode="same_step", **kw), tasks, n,
                              cfg.eval.seed, envs.full_episode_chunks(tasks, policy.chunk_size))
    return {"episodes": float(len(real)), "reproduced": float((again == real).sum()),
            "success_eval": float(real.mean()), "success_again": float(again.mean())}


def refit_checks(run: Path, r: int, episodes: list[int], progress: bool = False) -> dict[str, Any]:
    """How much fresh real data the world needs to rate round ``r``'s own policy right: that policy plays
    ``max(episodes)`` real episodes at the run's ``self_imitation.std`` (layouts and noise from seed
    ``9500 + 100 * seed + r``, apart from the evaluation's seeds); for each N in ``episodes`` round ``r``'s
    world is fine-tuned as the next co-evolution round fine-tunes it (``object_dynamics.warm_refit_steps``
    from ``warm_refit_lr``, seed ``1000 * (r + 1) + seed``) on every real episode the run has (the demos,
    round 0's policy episodes, rounds 1..r's rollouts) plus the first N of the fresh ones (N = 0: the world
    as round ``r`` trained in it, not fine-tuned), and set against the simulator on the evaluation's starts of
    round ``r``'s policy (:func:`world_vs_real_on_eval_starts`). Returns ``{N: check}`` with ``real_env_steps``
    (the fresh episodes' steps) and the fine-tune's ``seconds``."""
    from benchmarks._split_worlds import check_state_model
    from envs.tabletop.vector_env import STATE_DIM
    from imagination.pipeline import WARM_REFIT_STEPS, round_object_dynamics, run_config_of, run_env_kwargs
    from imagination.self_imitation import POLICY_ROLLOUTS, world_vs_real_on_eval_starts
    from policies import load_policy
    from wmrl.data import Trajectories, load_trajectories, load_trajectories_npz
    from wmrl.errors import WmrlError
    from worldmodels.object_dynamics import (
        WARM_REFIT_LR,
        ObjectDynamics,
        fine_tune_object_dynamics,
        policy_rollouts,
    )

    cfg = run_config_of(run)
    stage = run / "stages" / f"round_{r}.json"
    if not stage.is_file():
        raise WmrlError(f"{stage} not found: round {r} of {run} did not finish")
    entering = json.loads(stage.read_text())
    tasks = list(entering["eval"]["per_task"])
    policy_dir = run / f"round_{r}" / "policy"
    policy = load_policy(policy_dir)
    world = round_object_dynamics(run, r)
    steps, lr = cfg.object_dynamics_warm_refit() or (WARM_REFIT_STEPS, WARM_REFIT_LR)
    kw = run_env_kwargs(cfg)
    fresh, st = policy_rollouts(policy_dir, tasks, cfg.image_size, max(episodes), cfg.self_imitation_config().std,
                                seed=9500 + 100 * cfg.seed + r, render=cfg.render.env_kwargs())
    parts = [load_trajectories(run / "data").without_frames()]
    parts += [load_trajectories_npz(p, frames=False) for p in [run / "round_0" / POLICY_ROLLOUTS,
                                                                *(run / f"round_{q}" / "rollouts.npz" for q in range(1, r + 1))]
              if p.is_file()]
    out: dict[str, Any] = {}
    for n in sorted(episodes):
        t0 = time.perf_counter()
        if n == 0:
            model = ObjectDynamics.from_pretrained(world)
        else:
            data = Trajectories.concat([*parts, fresh.select_episodes(np.arange(n)).without_frames()])
            model, _ = fine_tune_object_dynamics(data, world, steps, lr, seed=1000 * (r + 1) + cfg.seed,
                                                 progress=progress)
        check_state_model(model, STATE_DIM)
        seconds = time.perf_counter() - t0
        frames = fresh.episode_bounds[n - 1, 1] if n else 0  # one frame per real step
        out[str(n)] = {**world_vs_real_on_eval_starts(policy, model, tasks, entering, cfg.eval.seed, kw),
                       "real_env_steps": float(frames), "seconds": seconds}
    out["fresh_success_rate"] = float(st["success_rate"])
    return out


def pool(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows of :func:`world_vs_real_on_eval_starts` (one task, several runs) pooled: rates and counts summed
    over their episodes, the standard error as sqrt(sum se^2) / k. A field some row lacks (a check that played
    only the world's successes, :func:`imagination.self_imitation.partial_rows`) pools to None; ``precision`` is
    the share confirmed of the world's successes the rows played (all of them, but for ``until_decided`` checks)."""
    from imagination.self_imitation import world_successes_played

    n = np.array([r["episodes"] for r in rows], float)
    w = n / n.sum()
    imagined = float(sum(wi * r["imagined"] for wi, r in zip(w, rows)))
    known = all(r.get("real") is not None and r.get("missed_successes") is not None for r in rows)
    real = float(sum(wi * r["real"] for wi, r in zip(w, rows))) if known else None
    false = sum(r["false_successes"] for r in rows)
    hits = sum(world_successes_played(r) for r in rows)
    ses = [r.get("overrating_se") for r in rows]
    return {
        "episodes": float(n.sum()), "imagined": imagined, "real": real,
        "overrating": imagined - real if real is not None else None,
        "overrating_se": None if any(s is None for s in ses) else float(math.sqrt(sum(s * s for s in ses)) / len(ses)),
        "false_successes": float(false),
        "missed_successes": float(sum(r["missed_successes"] for r in rows)) if known else None,
        "precision": float((hits - false) / hits) if hits > 0.5 else None,
    }


def check_gate_reading(threshold: float, confidence: float | None, threshold_flag: str, confidence_flag: str) -> None:
    """A one-line WmrlError naming the flag when a gate's threshold is outside (0, 1] or its confidence (None: the
    point estimate) outside [0.5, 1), the ranges of ``self_imitation.min_precision`` and ``gate_confidence``."""
    from wmrl.errors import WmrlError

    if not 0.0 < threshold <= 1.0:
        raise WmrlError(f"{threshold_flag} {threshold}: expected a precision in (0, 1]")
    if confidence is not None and not 0.5 <= confidence < 1.0:
        raise WmrlError(f"{confidence_flag} {confidence}: expected a confidence in [0.5, 1)")


def gate_agreement(per_run: dict[str, dict[str, Any]], threshold: float,
                   confidence: float | None = None) -> dict[str, Any] | None:
    """The rounds of ``per_run`` (run -> round -> the check on the evaluation's starts) whose gate checked on
    fresh starts of its own (``round_R/gate_check.json``): does it gate the same tasks at ``threshold`` as the
    check on the evaluation's starts would? Both read each task's precision as the gate does
    (:func:`imagination.self_imitation.gated_tasks`): the point estimate, or with ``confidence`` its one-sided
    Wilson lower bound at that confidence. None when no round has one. A check stopped once its own gate's
    decision was settled (``check_real: until_decided``) is read at that gate only: another reading is an error."""
    from imagination.self_imitation import GATE_CHECK, check_reads_at, gated_tasks
    from wmrl.errors import WmrlError

    rows: dict[str, dict[str, Any]] = {}
    for run, rounds in per_run.items():
        for r, check in rounds.items():
            p = Path(run) / f"round_{r}" / GATE_CHECK
            if p.is_file():
                rec = json.loads(p.read_text())
                if not check_reads_at(rec, threshold, confidence):
                    raise WmrlError(f"{p} stopped once its gate's decision (min_precision {rec['min_precision']}, "
                                    f"confidence {rec.get('confidence')}) was settled; it cannot be read at threshold "
                                    f"{threshold}, confidence {confidence}")
                fresh = rec["check"]
                rows.setdefault(run, {})[r] = {"fresh": fresh, "gated_fresh": gated_tasks(fresh, threshold, confidence),
                                               "gated_eval": gated_tasks(check, threshold, confidence)}
    if not rows:
        return None
    same = [(t in v["gated_fresh"]) == (t in v["gated_eval"])
            for run in rows.values() for v in run.values() for t in v["fresh"] if t != "all"]
    rounds = sorted({int(r) for v in rows.values() for r in v})
    tasks = [t for t in next(iter(next(iter(rows.values())).values()))["fresh"] if t != "all"]
    by_round = {str(r): {t: pool([v[str(r)]["fresh"][t] for v in rows.values() if str(r) in v]) for t in tasks}
                for r in rounds}
    return {"threshold": threshold, "confidence": confidence, "per_run": rows, "decisions": len(same), "agree": int(sum(same)),
            "by_round": by_round}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", nargs="+", type=Path, default=[], help="self-imitation run folders (wmrl run)")
    p.add_argument("--rounds", nargs="+", type=int, default=None, help="rounds to check (default: every one)")
    p.add_argument("--verify-real", action="store_true",
                   help="also replay each run's SFT evaluation in the simulator and count the outcomes reproduced")
    p.add_argument("--refit-episodes", nargs="+", type=int, default=None, metavar="N",
                   help="also fine-tune the last round's world on N fresh real episodes of its own policy (each N; "
                   "0: not fine-tuned) and set it against the simulator for that policy (refit_checks)")
    p.add_argument("--gate-threshold", type=float, default=0.5,
                   help="the precision below which a gate check keeps a task out (rounds with their own gate check)")
    p.add_argument("--gate-confidence", type=float, default=None,
                   help="read each task's precision as its one-sided Wilson lower bound at this confidence, as "
                   "self_imitation.gate_confidence does (default: the point estimate)")
    p.add_argument("--quick", action="store_true", help="a tiny self-imitation run made here (one round)")
    p.add_argument("--out", default="benchmarks/results/world_vs_real.json")
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    from tqdm import tqdm

    from benchmarks.imagination_lift import environment_info
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    t0 = time.perf_counter()
    try:
        check_gate_reading(a.gate_threshold, a.gate_confidence, "--gate-threshold", "--gate-confidence")
        if a.refit_episodes is not None and (min(a.refit_episodes) < 0 or not max(a.refit_episodes)):
            raise WmrlError(f"--refit-episodes {a.refit_episodes}: expected counts >= 0, one of them > 0")
        runs = [quick_run()] if a.quick else list(a.runs)
        if not runs:
            raise WmrlError("give --runs RUN [RUN ...] (self-imitation run folders) or --quick")
        rounds = {}
        for run in runs:
            if not (run / "stages").is_dir():
                raise WmrlError(f"--runs {run} is not a wmrl run folder (no stages/)")
            have = self_imitation_rounds(run)
            want = have if a.rounds is None else a.rounds
            missing = sorted(set(want) - set(have))
            if missing or not want:
                raise WmrlError(f"--runs {run} has self-imitation rounds {have}; asked for {missing or want}")
            rounds[str(run)] = want
        per_run: dict[str, dict[str, Any]] = {}
        jobs = [(run, r) for run in runs for r in rounds[str(run)]]
        for run, r in tqdm(jobs, desc="rounds", disable=a.no_progress):
            per_run.setdefault(str(run), {})[str(r)] = round_check(run, r)
        reproduced = {str(run): verify_real(run) for run in runs} if a.verify_real else None
        refit = None if a.refit_episodes is None else {
            str(run): {"round": rounds[str(run)][-1], **refit_checks(run, rounds[str(run)][-1], a.refit_episodes)}
            for run in runs}
        gate = gate_agreement(per_run, a.gate_threshold, a.gate_confidence)
    except WmrlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    all_rounds = sorted({int(r) for v in per_run.values() for r in v})
    tasks = list(next(iter(next(iter(per_run.values())).values())))
    by_round = {str(r): {t: pool([v[str(r)][t] for v in per_run.values() if str(r) in v]) for t in tasks}
                for r in all_rounds}
    by_task = {t: pool([rr[t] for v in per_run.values() for rr in v.values()]) for t in tasks}
    if refit is not None:  # each count's check pooled over the runs
        counts = [str(n) for n in sorted(a.refit_episodes)]
        refit["pooled"] = {n: {t: pool([v[n][t] for k, v in refit.items() if k != "pooled"]) for t in tasks}
                           for n in counts}
    res = {"per_run": per_run, "by_round": by_round, "by_task": by_task, "real_reproduced": reproduced, "refit": refit,
           "gate": gate,
           "runs": [str(r) for r in runs], "rounds": all_rounds, "quick": a.quick,
           "wall_time_s": time.perf_counter() - t0, "machine": environment_info()}
    atomic_write_json(a.out, res)
    print(json.dumps({t: {k: by_task[t][k] for k in ("imagined", "real", "overrating", "precision")} for t in tasks},
                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
