"""Compare groups of policies in the real simulator on many more held-out episodes than a run evaluates.

Usage::

    python -m benchmarks.policy_compare --arm sft runs/s27/base/seed_0/sft/policy ..._1/... ..._2/... \
        --arm default runs/s29/real_rl/default/seed_0/real_rl/policy ... [--arm NAME PATH ...] \
        [--arm-from NAME FILE.json ARM ...] \
        --reference sft [--episodes-per-task 100] [--seed 777000] [--jobs 2] [--work DIR] --out FILE.json
    python -m benchmarks.policy_compare --quick --out FILE.json   # CI smoke: scripted experts, 2 episodes per task

A run's evaluation (20 episodes per task) puts about +-0.045 (1 s.e.) on one policy's success, as much
as the lifts being compared. Here every policy of every arm plays the *same* held-out starts
(``benchmarks.policy_eval``'s protocol: seed ``--seed + 1000 * task + episode``, the mean action; the
default seed lies far from the runs' evaluation seed 12345), so the arms can be compared episode by
episode. An arm is a name and one policy per pair (e.g. per base-run seed); the arms must hold as many
policies each, and pair ``i`` is the ``i``-th policy of every arm.

``--arm-from NAME FILE.json ARM`` takes arm ``ARM`` of an earlier result of this benchmark as it was played
(its outcomes, not its policies, which may be gone), so new policies can be paired with it episode by episode;
the earlier result must have played the same protocol (episodes per task, seed, sub-envs, starts). Its
policies are listed as ``FILE.json#ARM[i]``.

Fields: ``arms`` (per arm: each policy's success, the mean, per-task means, and each policy's outcomes
per task as strings of 0/1), ``paired`` (per arm against ``--reference``: the difference per pair, its
mean, ``se_pairs``, the standard error over pairs, which holds the RL runs' own spread, and
``se_episodes``, the standard error of the episode-level paired differences, which holds the
evaluation's alone). Each policy's outcomes are kept in ``--work`` (resumed: a finished policy is
not played again).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

# How the held-out starts are drawn; part of the cache key and of the result. Each episode's sub-env
# is reset with its own seed. Results without ``starts`` (and caches made then) drew one seed per batch
# of --num-envs episodes and spread it over the batch's sub-envs.
STARTS = "per-episode-seed"
QUICK_ARMS = {"expert": ["expert:0.0", "expert:0.1"], "noisy_expert": ["expert:0.5", "expert:0.8"]}


def play(policy: str, episodes_per_task: int, seed: int, num_envs: int, work: Path) -> dict[str, list[int]]:
    """The policy's mean-action outcomes (0/1) per built-in task on the held-out starts, from ``work``'s
    cache when it has them (keyed by the policy's path and the protocol)."""
    from benchmarks.policy_eval import evaluate_policy
    from wmrl.io import atomic_write_json

    key = hashlib.sha1(f"{Path(policy).resolve() if Path(policy).exists() else policy}|{episodes_per_task}|"
                       f"{seed}|{num_envs}|{STARTS}".encode()).hexdigest()[:16]
    cache = work / f"{key}.json"
    if cache.is_file():
        return json.loads(cache.read_text())["outcomes"]
    res = evaluate_policy(policy, "builtin", episodes_per_task, seed=seed, num_envs=num_envs, video_dir=None)
    outcomes = {t: [int(x) for x in r["outcomes"]] for t, r in res["tasks"].items()}
    atomic_write_json(cache, {"policy": str(policy), "outcomes": outcomes})
    return outcomes


def paired_difference(arm: list[dict[str, list[int]]], ref: list[dict[str, list[int]]]) -> dict[str, Any]:
    """Arm minus reference, pair by pair (each a dict task -> outcomes on the same starts): the mean
    success difference per pair, its mean, its standard error over pairs (None for one pair) and the
    standard error of the episode-level differences (evaluation noise only)."""
    per_pair, eps = [], []
    for a, r in zip(arm, ref, strict=True):
        d = np.concatenate([np.asarray(a[t], float) - np.asarray(r[t], float) for t in sorted(r)])
        per_pair.append(float(d.mean()))
        eps.append(d)
    d_all = np.concatenate(eps)
    k = len(per_pair)
    return {
        "diff_per_pair": per_pair,
        "mean_diff": float(np.mean(per_pair)),
        "se_pairs": float(np.std(per_pair, ddof=1) / np.sqrt(k)) if k > 1 else None,
        "se_episodes": float(d_all.std(ddof=1) / np.sqrt(len(d_all))),
    }


def summarize_arm(paths: list[str], outcomes: list[dict[str, list[int]]]) -> dict[str, Any]:
    """Per-policy success (mean of the per-task rates), their mean, per-task means and the outcomes."""
    tasks = list(outcomes[0])
    per_policy = [float(np.mean([np.mean(o[t]) for t in tasks])) for o in outcomes]
    return {
        "policies": list(paths),
        "success_per_policy": per_policy,
        "success": float(np.mean(per_policy)),
        "per_task": {t: float(np.mean([np.mean(o[t]) for o in outcomes])) for t in tasks},
        "outcomes": [{t: "".join(map(str, o[t])) for t in tasks} for o in outcomes],
    }


def arm_from_result(path: Path, arm: str, protocol: dict[str, Any]) -> tuple[list[str], list[dict[str, list[int]]]]:
    """Arm ``arm`` of the earlier result ``path`` as it was played: ``(names, outcomes)``, a name
    ``path#arm[i]`` and the outcomes per task of each of its policies. A one-line WmrlError when the file is not
    such a result, lacks the arm, or played another ``protocol`` (episodes per task, seed, sub-envs, starts)."""
    from wmrl.errors import WmrlError

    try:
        res = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise WmrlError(f"--arm-from {path}: not a readable benchmarks.policy_compare result ({e})") from e
    if not isinstance(res, dict) or res.get("benchmark") != "policy_compare":
        raise WmrlError(f"--arm-from {path}: not a benchmarks.policy_compare result")
    if arm not in res.get("arms", {}):
        raise WmrlError(f"--arm-from {path} {arm}: no such arm; it holds {', '.join(res.get('arms', {}))}")
    differ = {k: (res.get(k), v) for k, v in protocol.items() if res.get(k) != v}
    if differ:
        raise WmrlError(f"--arm-from {path}: played another protocol ("
                        + "; ".join(f"{k} {a!r}, here {b!r}" for k, (a, b) in differ.items()) + ")")
    outcomes = [{t: [int(c) for c in o] for t, o in per.items()} for per in res["arms"][arm]["outcomes"]]
    return [f"{path}#{arm}[{i}]" for i in range(len(outcomes))], outcomes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arm", nargs="+", action="append", metavar="NAME PATH", default=None,
                   help="an arm: its name, then one policy folder per pair ('random' / 'expert:NOISE' too)")
    p.add_argument("--arm-from", nargs=3, action="append", metavar=("NAME", "FILE", "ARM"), default=[],
                   help="an arm read from an earlier result of this benchmark (its outcomes as played; same protocol)")
    p.add_argument("--reference", default=None, help="the arm the others are set against (default: the first)")
    p.add_argument("--pair", nargs=2, action="append", metavar=("ARM", "REF"), default=[],
                   help="also set ARM against REF, pair by pair (repeatable; kept under 'pairs')")
    p.add_argument("--episodes-per-task", type=int, default=100)
    p.add_argument("--seed", type=int, default=777_000, help="held-out starts: seed + 1000 * task + episode")
    p.add_argument("--num-envs", type=int, default=10)
    p.add_argument("--jobs", type=int, default=1, help="policies played at once (spawned processes)")
    p.add_argument("--work", type=Path, default=None, help="outcome cache (default runs/policy_compare[_quick])")
    p.add_argument("--quick", action="store_true", help="scripted experts, 2 episodes per task (CI smoke)")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    import torch

    from benchmarks.imagination_lift import environment_info
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    arms = dict(QUICK_ARMS) if a.quick else {}
    for spec in a.arm or []:
        if len(spec) < 2:
            raise WmrlError(f"--arm {' '.join(spec)}: expected a name and at least one policy")
        if spec[0] in arms:
            raise WmrlError(f"--arm {spec[0]!r} is given twice")
        arms[spec[0]] = spec[1:]
    eps = 2 if a.quick else a.episodes_per_task
    protocol = {"episodes_per_task": eps, "seed": a.seed, "num_envs": a.num_envs, "starts": STARTS}
    played: dict[str, dict[str, list[int]]] = {}
    for name, path, arm in a.arm_from:
        if name in arms:
            raise WmrlError(f"--arm {name!r} is given twice")
        names, outcomes = arm_from_result(Path(path), arm, protocol)
        arms[name] = names
        played.update(zip(names, outcomes))
    if not arms:
        raise WmrlError("no --arm given (or --quick)")
    sizes = {len(v) for v in arms.values()}
    if len(sizes) > 1:
        raise WmrlError(f"the arms hold {', '.join(f'{k}: {len(v)}' for k, v in arms.items())} policies; "
                        "every arm needs one per pair")
    ref = a.reference or next(iter(arms))
    for name in [ref, *(x for pair in a.pair for x in pair)]:
        if name not in arms:
            raise WmrlError(f"arm {name!r} (--reference / --pair) is not an arm; arms: {', '.join(arms)}")
    for path in {x for v in arms.values() for x in v} - set(played):
        if not (path == "random" or path.startswith("expert:") or (Path(path) / "config.json").is_file()):
            raise WmrlError(f"policy {path!r} is not a policy folder (no config.json), 'random' or 'expert:NOISE'")
    if eps < 1:
        raise WmrlError(f"--episodes-per-task {eps} must be >= 1")
    work = a.work or Path("runs/policy_compare_quick" if a.quick else "runs/policy_compare")
    work.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)  # one core per policy played (the --jobs workers too)
    t0 = time.perf_counter()
    todo = [x for x in dict.fromkeys(x for v in arms.values() for x in v) if x not in played]

    def done(path: str, outcomes: dict[str, list[int]]) -> None:
        played[path] = outcomes
        print(f"{path}: {np.mean([np.mean(o) for o in outcomes.values()]):.3f}", flush=True)

    if a.jobs <= 1:
        for path in todo:
            done(path, play(path, eps, a.seed, a.num_envs, work))
    else:
        from benchmarks._workers import pool

        with pool(a.jobs) as ex:
            futs = {path: ex.submit(play, path, eps, a.seed, a.num_envs, work) for path in todo}
            for path, f in futs.items():
                done(path, f.result())
    out_arms = {name: summarize_arm(paths, [played[x] for x in paths]) for name, paths in arms.items()}
    paired = {
        name: {"vs": ref, **paired_difference([played[x] for x in paths], [played[x] for x in arms[ref]])}
        for name, paths in arms.items()
        if name != ref
    }
    pairs = [
        {"arm": x, "vs": r, **paired_difference([played[p] for p in arms[x]], [played[p] for p in arms[r]])}
        for x, r in a.pair
    ]
    res = {
        "benchmark": "policy_compare",
        "episodes_per_task": eps,
        "seed": a.seed,
        "num_envs": a.num_envs,
        "starts": STARTS,
        "reference": ref,
        "arms": out_arms,
        "paired": paired,
        "pairs": pairs,
        "quick": bool(a.quick),
        "jobs": a.jobs,
        "wall_time_s": time.perf_counter() - t0,
        "machine": environment_info(),
    }
    atomic_write_json(a.out, res)
    for name, v in out_arms.items():
        d = paired.get(name)
        extra = "" if d is None else (
            f"  vs {ref}: {d['mean_diff']:+.3f} (s.e. pairs {d['se_pairs'] if d['se_pairs'] is None else round(d['se_pairs'], 3)},"
            f" episodes {d['se_episodes']:.3f})"
        )
        print(f"{name:24s} {v['success']:.3f}  [{' / '.join(f'{x:.3f}' for x in v['success_per_policy'])}]{extra}")
    for d in pairs:
        se = "-" if d["se_pairs"] is None else f"{d['se_pairs']:.3f}"
        print(f"{d['arm']} vs {d['vs']}: {d['mean_diff']:+.3f} (s.e. pairs {se}, episodes {d['se_episodes']:.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
