"""How far a world's sampled success sits from the simulator's, task by task, on the same starts.

Usage::

    python -m benchmarks.sampled_success_gap --real REAL.json --world NAME=WORLD.json [--world ...] --out FILE.json

``benchmarks.self_imitation`` samples the policy (exploration ``--std``) on starts drawn from seeds that
depend only on the run's seed, the round and the task, so a collection in a state model's world
(``--object-dynamics``: real resets, the model's dynamics, the task's rule on its predicted states) and one in
the real simulator with the same ``--group`` / ``--max-episodes`` / ``--std`` play starts drawn from the same
seeds. A world whose success labels are right samples each task as often as the simulator does. Per run
(the files' ``per_seed`` keys), round and task this writes the world's ``sampled_success`` minus the real
one, and per world the mean absolute gap over tasks and runs (``mean_abs_gap``) and the mean signed gap per
task (``mean_gap_by_task``: > 0 where the world is optimistic).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

MATCHED = ("group", "max_episodes", "std", "rounds", "init")  # collection settings both files must share


def _load(path: Path) -> dict[str, Any]:
    """A self_imitation result, or a one-line error naming the file."""
    from wmrl.errors import WmrlError

    try:
        d = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise WmrlError(f"{path}: not a readable JSON result ({e})") from None
    if d.get("benchmark") != "self_imitation":
        raise WmrlError(f"{path}: benchmark {d.get('benchmark')!r}, expected a 'self_imitation' result")
    if d.get("demos_only"):
        raise WmrlError(f"{path}: a --demos-only result samples nothing; give a collection")
    return d


def sampled_gaps(real: dict[str, Any], world: dict[str, Any], name: str = "world") -> dict[str, Any]:
    """The world's per-task sampled success minus the real one, per run and round.

    Args:
        real / world: ``benchmarks.self_imitation`` results (``world`` of the real file must be ``real``),
            collected with the same settings (:data:`MATCHED`) on the same runs.
    Returns:
        ``{"per_seed": {run: [{task: gap} per round]}, "mean_abs_gap", "mean_gap_by_task", "world"}``.
    """
    from wmrl.errors import WmrlError

    if real.get("world") != "real":
        raise WmrlError(f"--real holds world {real.get('world')!r}, expected 'real' (a collection in the simulator)")
    for key in MATCHED:
        if real.get(key) != world.get(key):
            raise WmrlError(f"{name}: {key} {world.get(key)!r} differs from the real collection's {real.get(key)!r}; "
                            "the starts would differ")
    runs = sorted(set(real["per_seed"]) & set(world["per_seed"]))
    if not runs:
        raise WmrlError(f"{name}: runs {sorted(world['per_seed'])} share none with the real result's "
                        f"{sorted(real['per_seed'])}")
    per_seed: dict[str, list[dict[str, float]]] = {}
    for run in runs:
        rounds = []
        for rr, rw in zip(real["per_seed"][run]["rounds"], world["per_seed"][run]["rounds"], strict=True):
            tasks = sorted(rr["sampled_success"])
            if sorted(rw["sampled_success"]) != tasks:
                raise WmrlError(f"{name}: run {run} round {rw['round']} sampled tasks {sorted(rw['sampled_success'])}, "
                                f"the real collection {tasks}")
            rounds.append({t: float(rw["sampled_success"][t] - rr["sampled_success"][t]) for t in tasks})
        per_seed[run] = rounds
    gaps = [g for rounds in per_seed.values() for r in rounds for g in r.values()]
    tasks = sorted({t for rounds in per_seed.values() for r in rounds for t in r})
    return {
        "world": world.get("world"),
        "runs": runs,
        "per_seed": per_seed,
        "mean_abs_gap": float(np.mean(np.abs(gaps))),
        "mean_gap": float(np.mean(gaps)),
        "mean_gap_by_task": {t: float(np.mean([r[t] for rounds in per_seed.values() for r in rounds if t in r]))
                             for t in tasks},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.sampled_success_gap", description=__doc__.split("\n\n")[0])
    p.add_argument("--real", type=Path, required=True, help="a self_imitation result collected in the simulator")
    p.add_argument("--world", action="append", required=True, metavar="NAME=FILE.json",
                   help="a self_imitation result collected in a state model's world (repeatable)")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    worlds = {}
    for spec in a.world:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise WmrlError(f"--world {spec!r}: expected NAME=FILE.json")
        worlds[name] = Path(path)
    real = _load(a.real)
    res = {
        "benchmark": "sampled_success_gap",
        "real": str(a.real),
        "real_sampled_success": {run: [r["sampled_success"] for r in v["rounds"]] for run, v in real["per_seed"].items()},
        "worlds": {name: {"file": str(path), **sampled_gaps(real, _load(path), name)} for name, path in worlds.items()},
    }
    atomic_write_json(a.out, res)
    for name, w in res["worlds"].items():
        by_task = ", ".join(f"{t} {g:+.3f}" for t, g in w["mean_gap_by_task"].items())
        print(f"{name}: mean |gap| {w['mean_abs_gap']:.3f}, mean gap {w['mean_gap']:+.3f} ({by_task})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
