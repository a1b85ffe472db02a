"""What the precision gate's own check costs when the simulator plays only the world's successes, or those only
until the gate's decision is settled.

Usage::

    python -m benchmarks.gate_check_cost --runs RUN [RUN ...] [--rounds R ...] [--episodes 50]
        [--threshold 0.5] [--confidence 0.9] [--kept WORLD_VS_REAL.json ...] --out FILE.json
    python -m benchmarks.gate_check_cost --quick --out FILE.json   # the tiny run of benchmarks.world_vs_real --quick

A gated self-imitation round (``self_imitation.min_precision`` with ``check_episodes`` > 0) plays the policy
entering it from fresh starts in the simulator and in its state model's world, and keeps out of its cloning the
tasks whose precision (the share of the world's successes the simulator confirms) is low
(:func:`imagination.self_imitation.gate_check`). That check was nearly all of a gated round's real steps
(12-14k of 14-15k a round in sessions 78-84). Only the starts the world calls a success enter the precision, so
``self_imitation.check_real: world_successes`` plays the simulator from those alone
(:func:`imagination.self_imitation.fresh_check`).

Per run and round (its entering policy and state model, :func:`imagination.pipeline.round_object_dynamics`), from
the round's own check starts (:func:`imagination.self_imitation.check_seed`), this plays the check both ways: every
start (``all``; read back from ``round_R/gate_check.json`` when the round kept that check) and the world's successes
only (``world_successes``, played here). It reports the real env steps of each and their ratio, whether the world
outcomes and the real outcomes on the starts both play agree episode by episode (an episode's outcome depends on
its start seed, and only slightly, through the tiled renderer, on the episodes batched with it), and the tasks each gates at ``--threshold``, on the point estimate and on the one-sided
Wilson bound at ``--confidence``. From the world's successes' outcomes it also replays ``check_real:
until_decided`` for both gates (:func:`imagination.self_imitation.play_until_decided`: the world's successes in
start order, only until the gate's decision is settled; exact but for the rare episode whose outcome or length
the batch changes): its real steps and the tasks it gates.

Fields: ``per_run`` (run -> round -> ``episodes_per_task``, ``seed``, ``steps_all`` / ``steps_world_successes``
(real env steps) and ``step_share`` (their ratio), ``seconds_all`` (None when read back) / ``seconds_world_successes``,
``world_outcomes_same`` (tasks whose world outcomes agree start by start), ``real_reproduced`` / ``real_played``
(of the starts the partial check played, those whose real outcome is the full check's), ``gated`` (``point`` and
``confidence``: the tasks each check gates), ``decisions_same``, ``until_decided`` (``point`` and ``confidence``:
``steps``, ``played``, ``gated``, ``decisions_same`` with the check on every start), ``kept_until_decided_same``
(a round that kept an ``until_decided`` check played in the run: whether the replay at its gate is that check,
:func:`kept_until_decided_same`; else None), ``per_task`` (task ->
``world_successes``, ``precision`` of each check)), ``summary`` (``steps_all``, ``steps_world_successes``,
``step_share`` pooled and its median over the checks, ``episodes`` and ``played``, ``real_reproduced`` of
``real_played``, ``decisions`` and ``decisions_same``, ``until_decided`` (per gate: ``steps``, ``played``,
``step_share`` of the world's successes' steps and of every start's, pooled, and ``decisions_same``),
``kept_until_decided`` and ``kept_until_decided_same`` (the rounds with an in-run ``until_decided`` check, and
those the replay reproduces); None without runs), ``kept`` (``--kept FILE``: per file, :func:`kept_check_starts`),
``runs``, ``threshold``, ``confidence``, ``quick``, ``wall_time_s``, ``machine``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def check_rounds(run: Path) -> list[int]:
    """The rounds of run folder ``run`` that kept a gate check of their own (``round_R/gate_check.json``)."""
    from imagination.self_imitation import GATE_CHECK

    return sorted(int(p.parent.name.split("_")[1]) for p in run.glob(f"round_*/{GATE_CHECK}"))


def full_check(kept: dict[str, Any] | None, policy: Any, model: Any, cfg: Any, tasks: list[str], episodes: int,
               seed: int) -> tuple[dict[str, Any], float | None]:
    """A round's check on every start: the round's own ``gate_check.json`` record ``kept`` when it holds this check
    (every start played, the same starts), else played now (:func:`imagination.self_imitation.fresh_check`);
    ``(record, seconds or None when read back)``."""
    from imagination.self_imitation import fresh_check

    if kept is not None and kept.get("check_real", "all") == "all" and kept["seed"] == seed \
            and kept["episodes_per_task"] == episodes:
        return kept, None
    t0 = time.perf_counter()
    rec = fresh_check(policy, model, cfg, tasks, episodes, seed, "all")
    return rec, time.perf_counter() - t0


def replay_until_decided(part: dict[str, Any], tasks: list[str], threshold: float,
                         confidence: float | None) -> dict[str, Any]:
    """``check_real: until_decided`` replayed from a check of the world's successes (``part``, a
    :func:`imagination.self_imitation.fresh_check` record): per task the starts
    :func:`imagination.self_imitation.play_until_decided` would play at ``threshold`` and ``confidence`` (None: the
    point estimate), their outcomes and lengths read from the record. Returns ``steps``, ``played``, ``starts``
    (task -> the episode indices played) and ``gated`` (the tasks its rows gate,
    :func:`imagination.self_imitation.gated_tasks`)."""
    from imagination.self_imitation import gated_tasks, play_world_successes

    imagined = np.array([[c == "1" for c in part["check"][t]["imagined_outcomes"]] for t in tasks], bool)
    real = part["real"]
    seen = {t: {e: (c == "1", n) for e, c, n in zip(real[t]["played"], real[t]["outcomes"], real[t]["lengths"])}
            for t in tasks}

    def play(i: int, t: str, idx: list[int]) -> tuple[Any, Any]:
        return np.array([seen[t][e][0] for e in idx], bool), np.array([seen[t][e][1] for e in idx], int)

    played, steps, rows = play_world_successes(tasks, imagined, play, "until_decided", threshold, confidence)
    return {"steps": steps, "played": sum(len(p["played"]) for p in played.values()),
            "starts": {t: p["played"] for t, p in played.items()}, "gated": gated_tasks(rows, threshold, confidence)}


def kept_until_decided_same(kept: dict[str, Any], part: dict[str, Any], tasks: list[str]) -> bool:
    """Whether a round's kept ``until_decided`` check (``kept``, played in the run) is the one
    :func:`replay_until_decided` reads off the world's successes' check ``part`` at the run's gate: the same world
    outcomes, the same starts played with the same outcomes, the same real steps."""
    got = replay_until_decided(part, tasks, kept["min_precision"], kept["confidence"])
    return got["steps"] == float(kept["real_env_steps"]) and all(
        got["starts"][t] == kept["real"][t]["played"]
        and kept["check"][t]["imagined_outcomes"] == part["check"][t]["imagined_outcomes"]
        and kept["real"][t]["outcomes"] == "".join(part["real"][t]["outcomes"][part["real"][t]["played"].index(e)]
                                                   for e in got["starts"][t]) for t in tasks)


def compare(run: Path, r: int, episodes: int | None, threshold: float, confidence: float) -> dict[str, Any]:
    """Round ``r`` of run ``run``: its gate check played on every start and on the world's successes only, set
    side by side (the module docstring's ``per_run`` fields)."""
    from benchmarks.world_vs_real import load_entering
    from imagination.pipeline import round_object_dynamics
    from imagination.self_imitation import GATE_CHECK, check_seed, fresh_check, gated_tasks

    cfg, _, tasks, policy, model = load_entering(run, r, round_object_dynamics(run, r))
    path = run / f"round_{r}" / GATE_CHECK
    kept = json.loads(path.read_text()) if path.is_file() else None
    if episodes is None:
        episodes = kept["episodes_per_task"] if kept is not None else 50
    seed = check_seed(cfg.seed, r)
    full, seconds_all = full_check(kept, policy, model, cfg, tasks, episodes, seed)
    t0 = time.perf_counter()
    part = fresh_check(policy, model, cfg, tasks, episodes, seed, "world_successes")
    seconds_part = time.perf_counter() - t0
    reproduced = played = 0
    per_task, world_same = {}, 0
    for t in tasks:
        f, p, got = full["check"][t], part["check"][t], part["real"][t]
        world_same += int(f["imagined_outcomes"] == p["imagined_outcomes"])
        real_full = full["real"]["outcomes"][t]
        reproduced += sum(real_full[e] == c for e, c in zip(got["played"], got["outcomes"]))
        played += len(got["played"])
        per_task[t] = {"world_successes": len(got["played"]), "precision_all": f["precision"],
                       "precision_world_successes": p["precision"]}
    gated = {
        "all": {"point": gated_tasks(full["check"], threshold), "confidence": gated_tasks(full["check"], threshold, confidence)},
        "world_successes": {"point": gated_tasks(part["check"], threshold),
                            "confidence": gated_tasks(part["check"], threshold, confidence)},
    }
    same = sum(int((t in gated["all"][k]) == (t in gated["world_successes"][k])) for k in ("point", "confidence")
               for t in tasks)
    steps_all, steps_part = float(full["real_env_steps"]), float(part["real_env_steps"])
    decided = {}
    for k, conf in (("point", None), ("confidence", confidence)):
        d = replay_until_decided(part, tasks, threshold, conf)
        d["decisions_same"] = sum(int((t in gated["all"][k]) == (t in d["gated"])) for t in tasks)
        decided[k] = {key: v for key, v in d.items() if key != "starts"}
    in_run = kept is not None and kept.get("check_real") == "until_decided" and kept["seed"] == seed \
        and kept["episodes_per_task"] == episodes
    return {
        "episodes_per_task": episodes, "seed": seed, "tasks": tasks,
        "steps_all": steps_all, "steps_world_successes": steps_part,
        "step_share": steps_part / steps_all if steps_all else None,
        "seconds_all": seconds_all, "seconds_world_successes": seconds_part,
        "world_outcomes_same": world_same, "real_reproduced": int(reproduced), "real_played": int(played),
        "gated": gated, "decisions": 2 * len(tasks), "decisions_same": int(same), "until_decided": decided,
        "kept_until_decided_same": kept_until_decided_same(kept, part, tasks) if in_run else None,
        "per_task": per_task,
    }


def summarise(per_run: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """The checks of ``per_run`` pooled: steps summed, the step share pooled and its median over the checks,
    episodes and starts played, outcomes reproduced and decisions alike."""
    rows = [row for rounds in per_run.values() for row in rounds.values()]
    steps_all = sum(r["steps_all"] for r in rows)
    steps_part = sum(r["steps_world_successes"] for r in rows)
    shares = [r["step_share"] for r in rows if r["step_share"] is not None]
    return {
        "checks": len(rows), "steps_all": steps_all, "steps_world_successes": steps_part,
        "step_share": steps_part / steps_all if steps_all else None,
        "step_share_median": float(np.median(shares)) if shares else None,
        "episodes": int(sum(r["episodes_per_task"] * len(r["tasks"]) for r in rows)),
        "played": int(sum(r["real_played"] for r in rows)),
        "real_reproduced": int(sum(r["real_reproduced"] for r in rows)),
        "world_outcomes_same": int(sum(r["world_outcomes_same"] for r in rows)),
        "task_checks": int(sum(len(r["tasks"]) for r in rows)),
        "decisions": int(sum(r["decisions"] for r in rows)), "decisions_same": int(sum(r["decisions_same"] for r in rows)),
        "until_decided": {k: until_decided_summary(rows, k, steps_part, steps_all) for k in ("point", "confidence")}
        if all("until_decided" in r for r in rows) else None,
        "kept_until_decided": sum(r.get("kept_until_decided_same") is not None for r in rows),
        "kept_until_decided_same": sum(bool(r.get("kept_until_decided_same")) for r in rows),
    }


def until_decided_summary(rows: list[dict[str, Any]], gate: str, steps_part: float, steps_all: float) -> dict[str, Any]:
    """The ``until_decided`` replays of ``rows`` for one gate (``point`` or ``confidence``) pooled: steps and starts
    played, their step share of the world's successes' checks and of the checks on every start, decisions alike."""
    steps = sum(r["until_decided"][gate]["steps"] for r in rows)
    return {"steps": steps, "played": int(sum(r["until_decided"][gate]["played"] for r in rows)),
            "share_of_world_successes": steps / steps_part if steps_part else None,
            "share_of_all": steps / steps_all if steps_all else None,
            "decisions": int(sum(len(r["tasks"]) for r in rows)),
            "decisions_same": int(sum(r["until_decided"][gate]["decisions_same"] for r in rows))}


def kept_check_starts(path: Path) -> dict[str, Any]:
    """The gate checks a ``benchmarks.world_vs_real`` result kept (``gate.per_run``: run -> round -> ``fresh``, each
    played on every start): how many of their starts the world calls a success, so how many a check of the world's
    successes alone would have played in the simulator (episodes, not steps: the kept rows hold no episode
    lengths). Returns ``checks``, ``episodes``, ``world_successes``, ``share`` and ``by_task`` (task -> the same)."""
    from wmrl.errors import WmrlError

    try:
        gate = json.loads(Path(path).read_text()).get("gate") or {}
    except (OSError, json.JSONDecodeError) as e:
        raise WmrlError(f"--kept {path}: not a readable benchmarks.world_vs_real result ({e})") from None
    rows = [rounds[r]["fresh"] for rounds in (gate.get("per_run") or {}).values() for r in rounds]
    if not rows:
        raise WmrlError(f"--kept {path}: holds no gate check of its own (gate.per_run is empty)")
    by_task: dict[str, list[int]] = {}
    for check in rows:
        for t, row in check.items():
            if t != "all":
                n = int(row["episodes"])
                hits = by_task.setdefault(t, [0, 0])
                hits[0] += n
                hits[1] += round(float(row["imagined"]) * n)
    episodes, hits = sum(v[0] for v in by_task.values()), sum(v[1] for v in by_task.values())
    return {"checks": len(rows), "episodes": episodes, "world_successes": hits, "share": hits / episodes,
            "by_task": {t: {"episodes": n, "world_successes": k, "share": k / n} for t, (n, k) in by_task.items()}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", nargs="+", type=Path, default=[], help="self-imitation run folders (wmrl run)")
    p.add_argument("--rounds", nargs="+", type=int, default=None,
                   help="rounds to check (default: every round that kept a gate check of its own)")
    p.add_argument("--episodes", type=int, default=None,
                   help="check starts per task (default: the round's own check's, else 50)")
    p.add_argument("--threshold", type=float, default=0.5, help="the gate's min_precision the decisions are read at")
    p.add_argument("--confidence", type=float, default=0.9, help="the gate_confidence the bound decisions are read at")
    p.add_argument("--kept", nargs="+", type=Path, default=[], metavar="FILE",
                   help="also count the starts the world calls a success in the gate checks these "
                   "benchmarks.world_vs_real results kept (kept_check_starts)")
    p.add_argument("--quick", action="store_true", help="the tiny run of benchmarks.world_vs_real --quick, 8 starts")
    p.add_argument("--out", required=True)
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    from tqdm import tqdm

    from benchmarks.imagination_lift import environment_info
    from benchmarks.world_vs_real import check_gate_reading, quick_run
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    t0 = time.perf_counter()
    try:
        check_gate_reading(a.threshold, a.confidence, "--threshold", "--confidence")
        if a.episodes is not None and not 1 <= a.episodes <= 1000:
            raise WmrlError(f"--episodes {a.episodes}: expected 1 to 1000 starts per task")
        kept = {str(f): kept_check_starts(f) for f in a.kept}
        runs = [quick_run()] if a.quick else list(a.runs)
        episodes = 8 if a.quick and a.episodes is None else a.episodes
        if not runs and not kept:
            raise WmrlError("give --runs RUN [RUN ...] (self-imitation run folders), --kept FILE [...] or --quick")
        jobs = []
        for run in runs:
            if not (run / "stages").is_dir():
                raise WmrlError(f"--runs {run} is not a wmrl run folder (no stages/)")
            want = ([0] if a.quick else check_rounds(run)) if a.rounds is None else a.rounds
            if not want:
                raise WmrlError(f"--runs {run} has no round with a gate check of its own; name --rounds")
            jobs += [(run, r) for r in want]
        per_run: dict[str, dict[str, Any]] = {}
        for run, r in tqdm(jobs, desc="checks", disable=a.no_progress):
            per_run.setdefault(str(run), {})[str(r)] = compare(run, r, episodes, a.threshold, a.confidence)
    except WmrlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    res = {"per_run": per_run, "summary": summarise(per_run) if per_run else None, "kept": kept,
           "runs": [str(r) for r in runs],
           "threshold": a.threshold, "confidence": a.confidence, "quick": a.quick,
           "wall_time_s": time.perf_counter() - t0, "machine": environment_info()}
    atomic_write_json(a.out, res)
    print(json.dumps({"summary": res["summary"], "kept": {f: {k: v for k, v in k_.items() if k != "by_task"}
                                                          for f, k_ in kept.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
