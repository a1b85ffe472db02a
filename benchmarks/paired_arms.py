"""Pair policies from several benchmark results on the same runs, episode by episode.

`python -m benchmarks.paired_arms --arm LABEL=SOURCE [--arm ...] [--branch GROUP=BRANCH:PARENT ...] [--pair A:B ...]
--out FILE.json`

Results written on the same wmrl run folders (`benchmarks.real_rl`, `benchmarks.state_model_rl`, ...) keep
each policy's real-simulator outcomes per run (task -> "0110..."), scored on that run's evaluation starts.
So two policies from different files, or a file and the run's own stages, can be compared start by start:
the paired difference is far tighter than two separate intervals. An arm is

- ``FILE.json[:SELECTOR][@I]``: the per-run results under ``SELECTOR`` (a dotted path to an object with a
  ``per_seed`` map, e.g. ``variants.default`` or ``worlds.state_model``; may be left out where the file
  holds one), ``@I`` for learning-curve point ``I``; the file's ``runs`` name the run folders;
- ``FILE.json:pool.NAME`` / ``FILE.json:held_out.NAME``: policy ``NAME`` of a ``benchmarks.fixed_starts``
  result (``sft``, ``real_pool``, ``sm_branch``, ``sm_warm_5``, ...), on its pool or on the run's held-out
  evaluation starts. An RL seed draws its own pool, so on the pool each run and RL seed is a unit of its own
  (``RUN#pool_rlseedS``), never a repeat; the files' SFT on their pools is the arm ``sft_pool``, which pool
  arms are paired with by default;
- ``stage:NAME``: each run folder's own evaluation at stage ``NAME`` (``eval_sft``, ``round_0``,
  ``real_rl``, ...; ``ablation_kir_off/round_0`` reads the sub-run an ablation keeps in the run folder,
  evaluated on the same starts), for the runs given with ``--runs`` and those the other result files name
  (a fixed_starts file names none: its run folders may be gone) and the parents of ``--branch`` folders;
- ``branch:GROUP:NAME``: stage ``NAME`` of the run folders given as ``--branch GROUP=BRANCH_RUN:PARENT_RUN``,
  each paired under its parent's run. A branch is a copy of the parent run folder whose later stages were run
  again with other settings (e.g. ``self_imitation.pool_checks=true`` from the parent's round 0 on): it shares
  the parent's SFT and evaluation starts, so its rounds pair with the parent line's on the same starts
  (checked: the two folders' ``eval_sft`` outcomes must be identical).

``sft`` is built in unless given: ``stage:eval_sft`` of those run folders, and the fixed_starts files'
``held_out.sft``.

A label given several times joins its sources' runs (e.g. seeds 0-1 from one file, seed 2 from another);
a run met again with another RL seed (the results' ``rl_seed``, e.g. ``benchmarks.real_rl --rl-seed 1``) is a
repeat: each evaluation episode's success is averaged over the repeats before pairing, so the standard
error stays honest about the shared evaluation starts.
``--after A:B`` says arm A's RL started from arm B's policy (``benchmarks.real_rl --init-policy``), so A's
real env steps count B's too.
Each pair is read on the runs both arms have: mean over runs of the paired difference, with the
evaluation's standard error sqrt(sum se^2) / k (`benchmarks.imagination_lift.mean_paired_lifts`) and the
per-run differences (their spread is the seeds' own).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STAGE = "stage:"
BRANCH = "branch:"
SFT_POOL = "sft_pool"  # the implicit arm of the fixed_starts files' SFT on their pools


@dataclass
class Arm:
    """One policy per run folder, possibly repeated with other RL seeds: ``outcomes[run][rl_seed]`` (task ->
    outcome string; ``rl_seed`` None for a run's own stages) and the real env steps each reports
    (``steps[run][rl_seed]``, absent where it reports none)."""

    label: str
    sources: list[str] = field(default_factory=list)
    outcomes: dict[str, dict[int | None, dict[str, str]]] = field(default_factory=dict)
    steps: dict[str, dict[int | None, float]] = field(default_factory=dict)

    def add(self, source: str, run: str, outcomes: dict[str, Any], steps: float | None, rl_seed: int | None) -> None:
        from wmrl.errors import WmrlError

        if rl_seed in self.outcomes.get(run, {}):
            raise WmrlError(f"--arm {self.label}: run {run} with RL seed {rl_seed} comes twice (again from "
                            f"{source}); expected each run once per label and RL seed")
        new = {t: "".join(str(int(x)) for x in o) for t, o in outcomes.items()}
        for other in self.outcomes.get(run, {}).values():
            if {t: len(o) for t, o in other.items()} != {t: len(o) for t, o in new.items()}:
                raise WmrlError(f"--arm {self.label}: run {run} from {source} has other tasks or episode counts than "
                                "the same run's other repeat; expected repeats scored on the same evaluation starts")
        self.outcomes.setdefault(run, {})[rl_seed] = new
        if steps is not None:
            self.steps.setdefault(run, {})[rl_seed] = float(steps)

    def episode_means(self, run: str) -> dict[str, list[float]]:
        """Task -> each evaluation episode's success averaged over the run's repeats (RL seeds)."""
        reps = list(self.outcomes[run].values())
        return {t: [sum(int(r[t][i]) for r in reps) / len(reps) for i in range(len(o))] for t, o in reps[0].items()}


def _load(path: Path) -> dict[str, Any]:
    from wmrl.errors import WmrlError

    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise WmrlError(f"{path}: no such result file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise WmrlError(f"{path}: not a JSON result ({e})") from None


def selectors(res: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of the objects in a result that hold a ``per_seed`` map of per-run results with
    ``outcomes`` (the arms a file offers).

    >>> selectors({"variants": {"a": {"per_seed": {"seed_0": {"outcomes": {}}}}}, "runs": []})
    ['variants.a']
    """
    if _is_fixed_starts(res):
        per_run = list(res["runs"].values())
        pool = [n for n in per_run[0]["pool_outcomes"] if all(n in r["pool_outcomes"] for r in per_run)]
        held = [n for n in per_run[0].get("held_out") or {}
                if all((r.get("held_out") or {}).get(n, {}).get("outcomes") for r in per_run)]
        return [f"{prefix}pool.{n}" for n in pool] + [f"{prefix}held_out.{n}" for n in held]
    out = []
    for k, v in res.items():
        if not isinstance(v, dict):
            continue
        ps = v.get("per_seed")
        if isinstance(ps, dict) and ps and all(isinstance(r, dict) and "outcomes" in r for r in ps.values()):
            out.append(prefix + k)
        out += selectors(v, f"{prefix}{k}.")
    return out


def _is_fixed_starts(res: dict[str, Any]) -> bool:
    """A ``benchmarks.fixed_starts`` result: ``runs`` maps run keys to per-run results with ``pool_outcomes``."""
    runs = res.get("runs")
    return isinstance(runs, dict) and bool(runs) and all(
        isinstance(r, dict) and "pool_outcomes" in r for r in runs.values())


def _pool_by_task(task_ids: list[str], outcomes: str) -> dict[str, str]:
    """A fixed_starts pool's outcome string (one character per start, in pool order) -> task -> outcomes."""
    out: dict[str, str] = {}
    for t, o in zip(task_ids, outcomes, strict=True):
        out[t] = out.get(t, "") + o
    return out


def read_fixed_starts_arm(arm: Arm, spec: str, res: dict[str, Any], sel: str) -> None:
    """Adds policy ``NAME`` of a fixed_starts result (``sel`` = ``pool.NAME`` or ``held_out.NAME``) to ``arm``."""
    field, _, name = sel.partition(".")
    for r in res["runs"].values():
        run, rl_seed = Path(r["run"]), _rl_seed(r, res)
        steps = (r.get("real_env_steps") or {}).get(name)
        steps = float(steps) if isinstance(steps, (int, float)) else None
        if field == "pool":
            arm.add(spec, f"{_run_id(run)}#pool_rlseed{rl_seed}",
                    _pool_by_task(r["pool_task_ids"], r["pool_outcomes"][name]), steps, rl_seed)
        else:
            arm.add(spec, _run_id(run), r["held_out"][name]["outcomes"], steps, rl_seed)
    arm.sources.append(spec)


def _rl_seed(r: dict[str, Any], res: dict[str, Any]) -> int:
    """The RL seed a per-run result was trained with (its own field, else the file's; 0 where neither says)."""
    v = r.get("rl_seed", res.get("rl_seed"))
    return int(v) if isinstance(v, int) else 0


def _run_steps(r: dict[str, Any]) -> float | None:
    for k in ("real_env_steps", "real_env_steps_used"):
        if isinstance(r.get(k), (int, float)):
            return float(r[k])
    return None


def _split_spec(spec: str) -> tuple[str, str, str | None]:
    """``FILE.json[:SELECTOR][@I]`` -> (``FILE.json``, ``SELECTOR`` or "", ``I`` as written or None)."""
    spec_path, point = spec, None
    if "@" in spec.rsplit(":", 1)[-1]:
        spec_path, point = spec.rsplit("@", 1)
    file, _, sel = spec_path.partition(".json:")
    return (file if file.endswith(".json") else file + ".json"), sel, point


def read_file_arm(arm: Arm, spec: str) -> list[Path] | None:
    """Adds the runs of ``FILE.json[:SELECTOR][@I]`` to ``arm``; returns the run folders it named, or None for a
    fixed_starts result (it names none: it carries its own SFT, and its run folders may be gone)."""
    from benchmarks._stats import run_keys
    from wmrl.errors import WmrlError

    file, sel, p = _split_spec(spec)
    point = None
    if p is not None:
        if not p.isdigit():
            raise WmrlError(f"--arm {arm.label}={spec}: curve point {p!r} is not an index (expected @0, @1, ...)")
        point = int(p)
    res = _load(Path(file))
    offered = selectors(res)
    if not sel:
        if len(offered) != 1:
            raise WmrlError(f"--arm {arm.label}={spec}: {file} holds {len(offered)} arms {offered}; "
                            f"name one as {file}:SELECTOR")
        sel = offered[0]
    if sel not in offered:
        raise WmrlError(f"--arm {arm.label}={spec}: no arm {sel!r} in {file}; expected one of {offered}")
    if _is_fixed_starts(res):
        if point is not None:
            raise WmrlError(f"--arm {arm.label}={spec}: a fixed_starts result has no learning-curve points; "
                            "name a round's policy instead (e.g. pool.sm_warm_3)")
        read_fixed_starts_arm(arm, spec, res, sel)
        return None
    node: Any = res
    for part in sel.split("."):
        node = node[part]
    runs = [Path(r) for r in res.get("runs") or []]
    keys = dict(zip(run_keys(runs), runs, strict=True)) if runs else {}
    for key, r in node["per_seed"].items():
        if key not in keys:
            raise WmrlError(f"{file}: run key {key!r} is not among its runs {[str(p) for p in runs]}")
        rl_seed = _rl_seed(r, res)
        if point is not None:
            curve = r.get("curve") or []
            if point >= len(curve):
                raise WmrlError(f"--arm {arm.label}={spec}: run {key} has {len(curve)} curve points, not @{point}")
            r = curve[point]
        arm.add(spec, _run_id(keys[key]), r["outcomes"], _run_steps(r), rl_seed)
    arm.sources.append(spec)
    return list(keys.values())


def _run_id(run: Path) -> str:
    """A run folder as the pairs name it: its path relative to the working folder where it lies under it."""
    p = run.resolve()
    try:
        return str(p.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


def _stage_marker(arm: Arm, source: str, run: Path, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run folder ``run``'s marker of stage ``name`` and its evaluation block (with ``outcomes``)."""
    from benchmarks.imagination_lift import stage
    from wmrl.errors import WmrlError

    sub, _, leaf = name.rpartition("/")  # e.g. ablation_kir_off/round_0: a run's sub-run, on the same starts
    try:
        marker = stage(run / sub, leaf)
    except FileNotFoundError:
        raise WmrlError(f"--arm {arm.label}={source}: {run} has no finished stage {name!r} "
                        f"(expected {run / sub}/stages/{leaf}.json)") from None
    ev = marker.get("eval", marker)  # a round's eval block, or eval_sft's whole marker
    if "outcomes" not in ev:
        raise WmrlError(f"--arm {arm.label}={source}: {run}'s stage {name!r} kept no per-episode outcomes")
    return marker, ev


def read_stage_arm(arm: Arm, name: str, runs: list[Path], keys: list[Path] | None = None,
                   source: str | None = None) -> None:
    """Adds each run folder's own evaluation at stage ``name`` to ``arm``, with the real env steps the stage
    reports (a co-evolution round's ``real_env_steps``). ``keys`` (one per run) names the unit each run's
    outcomes are paired under (a branch's parent run; default the run itself)."""
    from wmrl.errors import WmrlError

    source = source or f"{STAGE}{name}"
    if not runs:
        raise WmrlError(f"--arm {arm.label}={source}: no run folders to read it from; give --runs or a result "
                        "file arm too")
    for run, key in zip(runs, keys or runs, strict=True):
        marker, ev = _stage_marker(arm, source, run, name)
        arm.add(source, _run_id(key), ev["outcomes"], _run_steps(marker), None)
    arm.sources.append(source)


def parse_branches(specs: list[str]) -> dict[str, list[tuple[Path, Path]]]:
    """``GROUP=BRANCH:PARENT`` specs -> group -> (branch run folder, parent run folder) pairs. A branch is a copy
    of its parent run folder from some stage on (the same demos, SFT policy and evaluation starts), so its stages
    pair with the parent line's on the same starts: checked by the two folders' identical ``eval_sft`` outcomes."""
    from wmrl.errors import WmrlError

    groups: dict[str, list[tuple[Path, Path]]] = {}
    for s in specs:
        group, eq, rest = s.partition("=")
        branch, colon, parent = rest.partition(":")
        if not (eq and colon and group and branch and parent) or ":" in group:
            raise WmrlError(f"--branch {s!r}: expected GROUP=BRANCH_RUN:PARENT_RUN")
        b, p = Path(branch), Path(parent)
        probe = Arm(f"branch {group}")
        sft_b = _stage_marker(probe, s, b, "eval_sft")[1]["outcomes"]
        sft_p = _stage_marker(probe, s, p, "eval_sft")[1]["outcomes"]
        if sft_b != sft_p:
            raise WmrlError(f"--branch {s}: {b} is not a branch of {p} (their eval_sft outcomes differ); expected a "
                            "copy of the parent run folder, on the same evaluation starts")
        pairs = groups.setdefault(group, [])
        if any(_run_id(p) == _run_id(q) for _, q in pairs):
            raise WmrlError(f"--branch {s}: group {group!r} already has a branch of {p}; expected one per parent")
        pairs.append((b, p))
    return groups


def parse_arms(specs: list[str], runs_given: list[Path] | None = None,
               branches: dict[str, list[tuple[Path, Path]]] | None = None) -> dict[str, Arm]:
    """``LABEL=SOURCE`` specs -> arms by label. ``stage:`` arms are read from ``runs_given``, every run folder
    the (non-fixed_starts) result files name and the parents of ``branches`` (:func:`parse_branches`);
    ``branch:GROUP:NAME`` arms from group ``GROUP``'s branch folders, each under its parent's run. Unless given,
    ``sft`` is always there: ``stage:eval_sft`` of those run folders, and the ``pool.sft`` / ``held_out.sft`` of
    every fixed_starts file among the arms."""
    from wmrl.errors import WmrlError

    branches = branches or {}
    parsed = []
    for s in specs:
        label, eq, src = s.partition("=")
        if not eq or not label or not src or ":" in label:
            raise WmrlError(f"--arm {s!r}: expected LABEL=FILE.json[:SELECTOR][@I], LABEL=stage:NAME or "
                            "LABEL=branch:GROUP:NAME")
        if src.startswith(BRANCH):
            group, colon, name = src[len(BRANCH):].partition(":")
            if not colon or not name or group not in branches:
                raise WmrlError(f"--arm {s!r}: expected LABEL=branch:GROUP:NAME with GROUP among the --branch groups "
                                f"{sorted(branches)}")
        parsed.append((label, src))
    implicit_sft = not any(label == "sft" for label, _ in parsed)
    arms: dict[str, Arm] = {}
    runs: dict[str, Path] = {_run_id(r): r for r in runs_given or []}
    for pairs in branches.values():
        for _, parent in pairs:
            runs.setdefault(_run_id(parent), parent)
    fixed_files: list[str] = []
    for label, src in parsed:
        if not src.startswith((STAGE, BRANCH)):
            folders = read_file_arm(arms.setdefault(label, Arm(label)), src)
            if folders is None:  # a fixed_starts result: stage: arms read the run folders given with --runs
                fixed_files.append(_split_spec(src)[0])
            for r in folders or []:
                runs.setdefault(_run_id(r), r)
    if implicit_sft:
        sft = arms.setdefault("sft", Arm("sft"))
        for file in dict.fromkeys(fixed_files):
            offered = selectors(_load(Path(file)))
            for label, sel in (("sft", "held_out.sft"), (SFT_POOL, "pool.sft")):
                if sel in offered:
                    one = Arm(label)
                    read_file_arm(one, f"{file}:{sel}")
                    _merge_new_units(arms.setdefault(label, Arm(label)), one)
        if runs:
            one = Arm("sft")
            read_stage_arm(one, "eval_sft", list(runs.values()))
            _merge_new_units(sft, one)
        if not sft.outcomes:
            del arms["sft"]
    for label, src in parsed:
        if src.startswith(STAGE):
            read_stage_arm(arms.setdefault(label, Arm(label)), src[len(STAGE):], list(runs.values()))
        elif src.startswith(BRANCH):
            group, _, name = src[len(BRANCH):].partition(":")
            folders, parents = zip(*branches[group], strict=True)
            read_stage_arm(arms.setdefault(label, Arm(label)), name, list(folders), list(parents), source=src)
    return arms


def _merge_new_units(dst: Arm, src: Arm) -> None:
    """Adds to ``dst`` the (run, RL seed) units of ``src`` it does not hold yet (the same SFT met in several files)."""
    for run, by_seed in src.outcomes.items():
        for rl_seed, outcomes in by_seed.items():
            if rl_seed not in dst.outcomes.get(run, {}):
                dst.add(src.sources[-1], run, outcomes, src.steps.get(run, {}).get(rl_seed), rl_seed)
    dst.sources += [x for x in src.sources if x not in dst.sources]


def arm_summary(arm: Arm) -> dict[str, Any]:
    """Mean success over the arm's runs (each run's success over all its episodes, averaged over its
    repeats), per run, the repeats (RL seeds) per run, and the mean real env steps."""
    per_run = {}
    for run in arm.outcomes:
        ep = [x for v in arm.episode_means(run).values() for x in v]
        per_run[run] = sum(ep) / len(ep) if ep else float("nan")
    out: dict[str, Any] = {
        "sources": arm.sources,
        "success": sum(per_run.values()) / len(per_run),
        "success_per_run": per_run,
        "rl_seeds_per_run": {run: sorted(o, key=lambda k: -1 if k is None else k) for run, o in arm.outcomes.items()},
    }
    if arm.steps:
        steps = {run: sum(s.values()) / len(s) for run, s in arm.steps.items()}
        out["real_env_steps_per_run"] = steps
        out["real_env_steps_mean"] = sum(steps.values()) / len(steps)
    return out


def pair(a: Arm, b: Arm) -> dict[str, Any]:
    """``a`` minus ``b`` on the runs both have. Per run, each evaluation episode's success is first averaged
    over the arm's repeats (RL seeds), then paired with the other arm's on the same start; those per-run
    differences are averaged over runs (``diff``, ``se``, ``ci95``, as
    :func:`benchmarks.imagination_lift.mean_paired_lifts`: the evaluation's noise only), with
    ``diff_per_run``."""
    from benchmarks._stats import paired_outcome_difference
    from benchmarks.imagination_lift import mean_paired_lifts
    from wmrl.errors import WmrlError

    shared = [r for r in a.outcomes if r in b.outcomes]
    if not shared:
        raise WmrlError(f"--pair {a.label}:{b.label}: the arms share no run (runs {sorted(a.outcomes)} and "
                        f"{sorted(b.outcomes)})")
    try:
        per_run = [{"d": paired_outcome_difference(a.episode_means(r), b.episode_means(r))} for r in shared]
    except ValueError as e:
        raise WmrlError(f"--pair {a.label}:{b.label}: {e}") from None
    out = mean_paired_lifts(per_run)["d"]
    out["diff_per_run"] = dict(zip(shared, out.pop("diff_per_seed"), strict=True))
    out["episodes_per_run"] = per_run[0]["d"]["episodes"]
    return out


def default_pairs(arms: dict[str, Arm]) -> list[tuple[str, str]]:
    """Each arm against SFT on the units they share: ``sft`` (evaluation starts), else ``sft_pool`` (a
    fixed_starts pool)."""
    from wmrl.errors import WmrlError

    out = []
    for k, v in arms.items():
        if k in ("sft", SFT_POOL):
            continue
        base = next((b for b in ("sft", SFT_POOL) if b in arms and set(v.outcomes) & set(arms[b].outcomes)), None)
        if base is None:
            raise WmrlError(f"--arm {k}: it shares no run with an SFT arm (arms {sorted(arms)}); pair it with --pair")
        out.append((k, base))
    return out


def _arm_pair(flag: str, spec: str, arms: dict[str, Arm]) -> tuple[str, str]:
    from wmrl.errors import WmrlError

    q = tuple(spec.split(":", 1))
    if len(q) != 2 or any(x not in arms for x in q):
        raise WmrlError(f"{flag} {spec}: expected A:B with A and B among the arms {sorted(arms)}")
    return q[0], q[1]


def add_steps_of_start(arm: Arm, start: Arm) -> None:
    """``arm``'s RL started from ``start``'s policies: each run's (and RL seed's) real env steps gain those
    of ``start`` for the same run and RL seed, or of its only repeat on that run."""
    from wmrl.errors import WmrlError

    for run, by_seed in arm.steps.items():
        theirs = start.steps.get(run, {})
        for k in by_seed:
            got = theirs.get(k, next(iter(theirs.values())) if len(theirs) == 1 else None)
            if got is None:
                raise WmrlError(f"--after {arm.label}:{start.label}: {start.label} reports no real env steps for "
                                f"run {run} with RL seed {k}")
            by_seed[k] += got
    arm.sources.append(f"after {start.label}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arm", action="append", default=[], metavar="LABEL=SOURCE",
                   help="FILE.json[:SELECTOR][@I] or stage:NAME; repeat a label to join runs from several files")
    p.add_argument("--runs", nargs="+", type=Path, default=None, metavar="RUN",
                   help="wmrl run folders whose own stages the stage: arms read (beside those the result files name)")
    p.add_argument("--branch", action="append", default=[], metavar="GROUP=BRANCH_RUN:PARENT_RUN",
                   help="a run folder copied from PARENT_RUN (same SFT and evaluation starts): arms "
                        "branch:GROUP:NAME read its stage NAME, paired under the parent's run")
    p.add_argument("--pair", action="append", default=[], metavar="A:B",
                   help="A minus B, paired (default: every arm against sft)")
    p.add_argument("--after", action="append", default=[], metavar="A:B",
                   help="arm A's RL started from arm B's policy: A's real env steps include B's, run by run")
    p.add_argument("--list", nargs="+", type=Path, default=None, metavar="FILE",
                   help="print the arms (selectors) each result file offers, and stop")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    try:
        if a.list:
            for f in a.list:
                res = _load(f)
                runs = res.get("runs")
                print(f"{f}: runs {[r['run'] for r in runs.values()] if _is_fixed_starts(res) else runs}")
                for s in selectors(res):
                    print(f"  {s}")
            return 0
        if not a.arm:
            raise WmrlError("no --arm given; expected at least one LABEL=FILE.json[:SELECTOR][@I] or LABEL=stage:NAME")
        arms = parse_arms(a.arm, a.runs, parse_branches(a.branch))
        # by default every arm against the SFT it shares runs with: sft (evaluation starts) or sft_pool (a pool)
        pairs = [_arm_pair("--pair", q, arms) for q in a.pair] or default_pairs(arms)
        for q in a.after:
            add_steps_of_start(*(arms[x] for x in _arm_pair("--after", q, arms)))
        res = {
            "arms": {k: arm_summary(v) for k, v in arms.items()},
            "pairs": {f"{x} - {y}": pair(arms[x], arms[y]) for x, y in pairs},
            "argv": sys.argv[1:] if argv is None else argv,
        }
    except WmrlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for k, v in res["arms"].items():
        steps = f", real steps {v['real_env_steps_mean']:,.0f}" if "real_env_steps_mean" in v else ""
        per = " / ".join(f"{x:.3f}" for x in v["success_per_run"].values())
        print(f"{k}: success {v['success']:.3f} ({per}){steps}")
    for k, v in res["pairs"].items():
        per = " / ".join(f"{x:+.3f}" for x in v["diff_per_run"].values())
        print(f"{k}: {v['diff']:+.3f} (s.e. {v['se']:.3f}, 95% CI [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}]; "
              f"per run {per})")
    if a.out:
        atomic_write_json(a.out, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
