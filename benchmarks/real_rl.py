"""Can our RL lift the SFT policy at all? GRPO in the *real* simulator with a large budget.

Usage::

    python -m benchmarks.real_rl --runs runs/imagination_lift/seed_0 runs/imagination_lift/seed_1 ...
        [--budget 380000] [--curve 760000 1520000] [--num-envs 64] [--variant NAME key=value ...] [--rl-seed N] [--jobs 2] --out FILE.json
    python -m benchmarks.real_rl --quick --out FILE.json   # after benchmarks.imagination_lift --quick

RL in imagination can only lift a policy that the RL algorithm itself can lift. This benchmark
takes finished ``wmrl run`` folders (their demos, SFT policy and SFT evaluation are reused, read
only) and, per folder and per *variant* (a named list of Hydra overrides of the run's config),
runs the run's RL algorithm in the real simulator from the SFT policy for ``--budget`` real env
steps (GRPO groups share a task and a start, ``--num-envs`` sub-envs), then evaluates the policy
with the run's fixed evaluation protocol. Variants run side by side on the same seeds, so their
differences are the variants'. Default variants: ``default`` (the current ``conf/rl/grpo.yaml``)
and ``sft_std_minibatch64`` (the settings before exploration_std existed: sampling with the SFT
policy's own std and 64-sample minibatches).

``--curve B2 B3 ...`` goes on with the same RL run to each larger budget and evaluates it there
(a learning curve: does the lift keep growing with real steps, or level off?).

``--rl-seed N`` (N > 0) repeats every pair with other GRPO starts and sampling noise (folders
``NAME_rlseedN``): GRPO's seed-to-seed spread is as large as most effects measured here.

Each variant/seed writes a small run folder under ``--work`` (metrics.jsonl, checkpoints, the
final policy and evaluation videos); a re-run resumes finished pairs.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._stats import run_keys
from benchmarks._variants import parse_variants

DEFAULT_VARIANTS: dict[str, list[str]] = {
    "default": [],
    "sft_std_minibatch64": ["rl.exploration_std=null", "rl.minibatch_size=64"],
}


def _link_run(src: Path, dst: Path) -> None:
    """A run folder at ``dst`` sharing ``src``'s data, models and SFT stages; ``src`` must be finished."""
    from benchmarks.imagination_lift import SHARED_STAGES, link_shared_stages
    from wmrl.errors import WmrlError

    done = {s for s in SHARED_STAGES if (src / "stages" / f"{s}.json").exists()}
    if "rewards" in done:  # a run from before the IDM had its own stage trained it in its rewards stage
        done.add("idm")
    missing = [s for s in SHARED_STAGES if s not in done]
    if missing:
        raise WmrlError(f"{src} is not a finished wmrl run (stages {missing} missing); run `wmrl run` first")
    link_shared_stages(src, dst)


def episode_fields(ev: dict[str, Any], sft: dict[str, Any]) -> dict[str, Any]:
    """An evaluation's episode-by-episode record against the SFT evaluation of the same starts:
    ``outcomes`` (task -> "0110...", in seed order; other results on the same runs can be paired with
    them) and ``lift_vs_sft`` (:func:`benchmarks._stats.paired_outcome_difference`: ``diff``, ``se``,
    ``ci95``, ``episodes``); both None for an evaluation that kept no outcomes."""
    from imagination.report import paired_lifts

    return {"outcomes": ev.get("outcomes"), "lift_vs_sft": paired_lifts(sft, {"rl": ev}).get("rl")}


def seed_mean_lift(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The rows' ``lift_vs_sft`` averaged over the seeds (:func:`benchmarks.imagination_lift.mean_paired_lifts`:
    ``diff``, ``se`` of the evaluation's noise, ``ci95``, ``diff_per_seed``); None unless every row has one."""
    from benchmarks.imagination_lift import mean_paired_lifts

    if not rows or any(r.get("lift_vs_sft") is None for r in rows):
        return None
    return mean_paired_lifts([{"rl": r["lift_vs_sft"]} for r in rows])["rl"]


def start_policy(init_policy: Path | None) -> dict[str, Any]:
    """``{"path", "sha256"}`` of a start policy's weights (both None for the run's SFT); a folder without
    saved weights is a one-line error."""
    import hashlib

    from wmrl.errors import WmrlError

    if init_policy is None:
        return {"path": None, "sha256": None}
    weights = Path(init_policy) / "model.safetensors"
    if not weights.is_file():
        raise WmrlError(f"--init-policy {init_policy}: no saved policy there (no model.safetensors); "
                        "expected a policy folder such as RUN/round_0/policy")
    return {"path": str(init_policy), "sha256": hashlib.sha256(weights.read_bytes()).hexdigest()}


def check_start_policy(dst: Path, init_policy: Path | None) -> dict[str, Any]:
    """The policy RL in ``dst`` starts from (``init_policy``, or None for the run's SFT): ``{"path",
    "sha256"}`` of its weights (path and sha None for SFT), recorded in ``dst/start_policy.json`` on the
    first call. A ``dst`` that an earlier call started from another policy is a one-line error before
    any RL."""
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    start = start_policy(init_policy)
    record = dst / "start_policy.json"
    if record.exists():
        before = json.loads(record.read_text())
        if before.get("sha256") != start["sha256"]:
            raise WmrlError(f"{dst} holds RL started from {before.get('path') or 'SFT'}, not from "
                            f"{start['path'] or 'SFT'}; use another --work folder")
    elif (dst / "real_rl").exists() and init_policy is not None:  # RL begun before start policies were recorded: SFT's
        raise WmrlError(f"{dst} holds RL started from SFT, not from {init_policy}; use another --work folder")
    else:
        dst.mkdir(parents=True, exist_ok=True)
        atomic_write_json(record, start)
    return start


def paired_text(summary: dict[str, Any]) -> str:
    """", paired [lo, hi]": a summary's ``lift_vs_sft`` interval for a printed line ("" without one)."""
    p = summary.get("lift_vs_sft")
    return f", paired [{p['ci95'][0]:+.3f}, {p['ci95'][1]:+.3f}]" if p else ""


def run_pair(
    src: Path,
    dst: Path,
    overrides: list[str],
    budget: float,
    num_envs: int,
    rl_seed: int = 0,
    curve: tuple[float, ...] = (),
    init_policy: Path | None = None,
    progress: bool = True,
    config_name: str = "run",
) -> dict:
    """Real-simulator RL from ``src``'s SFT policy with ``overrides``; returns the summary. ``rl_seed``
    > 0 repeats the RL with other starts and noise (``Pipeline.s_real_rl``'s, as
    ``benchmarks.state_model_rl --rl-seed``; 0: the seeds used so far). ``curve``: larger budgets the
    same RL run goes on to after ``budget`` (resumed from its checkpoint), evaluated at each.
    ``init_policy``: RL starts from this saved policy instead of SFT (e.g. one trained in a model world:
    real RL after RL in imagination); the lift is still read against SFT. A folder that started from
    another policy (or from SFT) is not resumed from another: that is an error."""
    from imagination.pipeline import Pipeline, load_run_config
    from wmrl.errors import ConfigError

    seed = _seed_of(src)  # the config is conf/<config_name>.yaml at that seed; its finished stages are reused
    start_policy(init_policy)  # a missing start policy fails before anything is written
    _link_run(src, dst)
    start = check_start_policy(dst, init_policy)
    cfg = load_run_config(
        [*overrides, f"run_dir={dst}", f"seed={seed}", f"real_rl_num_envs={num_envs}", "videos=0"],
        config_name,
    )
    pipe = Pipeline(cfg, progress=progress)
    prev = pipe.done("real_rl")
    if prev is not None and prev.get("real_env_steps_budget") != budget:  # its checkpoints ran to that budget
        raise ConfigError(f"{dst} holds real RL run to a budget of {prev.get('real_env_steps_budget')} real env "
                          f"steps, not --budget {budget:g}; use another --work folder (or --curve to go on)")
    out = pipe.stage("real_rl", lambda: pipe.s_real_rl(budget, rl_seed=rl_seed, init_policy=init_policy))
    points = [out]
    for b in curve:
        tag = f"_{int(b)}"
        points.append(pipe.stage(
            f"real_rl{tag}", lambda b=b, tag=tag: pipe.s_real_rl(b, rl_seed=rl_seed, tag=tag, init_policy=init_policy)
        ))
    hist = [json.loads(line) for line in (dst / "real_rl" / "rl" / "metrics.jsonl").read_text().splitlines()]
    train_success = [float(h.get("grpo/success_rate", h.get("ppo/episode_success", np.nan))) for h in hist]
    sft = json.loads((dst / "stages" / "eval_sft.json").read_text())
    return {
        "seed": seed,
        "sft_success": float(sft["success"]),
        "rl_success": float(out["eval"]["success"]),
        "lift": float(out["eval"]["success"]) - float(sft["success"]),
        **episode_fields(out["eval"], sft),
        "per_task": out["eval"]["per_task"],
        "sft_per_task": sft.get("per_task", {}),
        "real_env_steps": float(out["real_env_steps"]),
        "rl_iterations": int(out["rl_iterations"]),
        "train_success_by_iteration": train_success,
        "stage_time_s": float(out.get("stage_time_s", float("nan"))),
        "stage_cpu_s": float(out.get("stage_cpu_s", float("nan"))),
        "rl_seed": int(rl_seed),
        "start_policy": start,
        "curve": [
            {
                "budget_real_env_steps": float(p["real_env_steps_budget"]),
                "real_env_steps": float(p["real_env_steps"]),
                "rl_iterations": int(p["rl_iterations"]),
                "rl_success": float(p["eval"]["success"]),
                **episode_fields(p["eval"], sft),
                "per_task": p["eval"]["per_task"],
            }
            for p in points
        ],
    }


def run_pairs(fn: Any, args: dict[Any, tuple], jobs: int, progress: bool, config_name: str, done: Any) -> None:
    """``done(*key, fn(*args[key], progress=..., config_name=config_name))`` for every key of ``args``: one
    after another (``jobs`` <= 1), else ``jobs`` at once in spawned processes of one torch thread each,
    which die with this process (:func:`benchmarks._workers.pool`)."""
    if jobs <= 1:
        for key, arg in args.items():
            done(*key, fn(*arg, progress=progress, config_name=config_name))
        return
    from benchmarks._workers import pool

    with pool(jobs) as ex:
        futs = {ex.submit(fn, *arg, progress=False, config_name=config_name): key for key, arg in args.items()}
        for f, key in futs.items():
            done(*key, f.result())


def run_each(fn: Any, args: dict[tuple[str], tuple], jobs: int, progress: bool) -> dict[str, Any]:
    """:func:`run_pairs` over runs keyed ``(run key,)``: each run's result by its run key, in ``args``' order."""
    results: dict[str, Any] = {}
    run_pairs(fn, args, jobs, progress, "", results.__setitem__)
    return {k: results[k] for (k,) in args}


def run_fields(a: argparse.Namespace, num_envs: int, config_name: str, t0: float) -> dict[str, Any]:
    """The result fields of a benchmark that runs RL from finished runs: sub-envs, config, runs, quick,
    jobs, wall time since ``t0``, machine."""
    from benchmarks.imagination_lift import environment_info

    return {
        "num_envs": num_envs,
        "config_name": config_name,
        "runs": [str(r) for r in a.runs],
        "quick": bool(a.quick),
        "jobs": a.jobs,
        "wall_time_s": time.perf_counter() - t0,
        "machine": environment_info(),
    }


def _seed_of(src: Path) -> int:
    """The seed of a run folder, from its config.yaml."""
    from omegaconf import OmegaConf

    from wmrl.errors import WmrlError

    f = src / "config.yaml"
    seed = OmegaConf.load(f).get("seed") if f.exists() else None
    if not isinstance(seed, int):
        raise WmrlError(f"{f} gives no integer seed (found {seed!r}); expected a wmrl run folder's config")
    return seed


def summarize(results: dict[str, dict[str, dict]]) -> dict[str, Any]:
    """Per variant: mean SFT and RL success over seeds, mean lift and its per-seed values."""
    out: dict[str, Any] = {}
    for name, per_seed in results.items():
        lifts = [r["lift"] for r in per_seed.values()]
        out[name] = {
            "sft_success": float(np.mean([r["sft_success"] for r in per_seed.values()])),
            "rl_success": float(np.mean([r["rl_success"] for r in per_seed.values()])),
            "lift": float(np.mean(lifts)),
            "lift_per_seed": lifts,
            "lift_vs_sft": seed_mean_lift(list(per_seed.values())),
            "seeds_lifted": int(sum(x > 0 for x in lifts)),
            "curve": _mean_curve(per_seed),
            "per_seed": per_seed,
        }
    return out


def _mean_curve(per_seed: dict[str, dict]) -> list[dict[str, Any]]:
    """Per budget of the learning curve: the mean RL success over seeds, per-seed values and iterations."""
    curves = [r.get("curve", []) for r in per_seed.values()]
    return [
        {
            "budget_real_env_steps": points[0]["budget_real_env_steps"],
            "rl_success": float(np.mean([p["rl_success"] for p in points])),
            "rl_success_per_seed": [p["rl_success"] for p in points],
            "lift_vs_sft": seed_mean_lift(list(points)),
            "rl_iterations_per_seed": [p["rl_iterations"] for p in points],
        }
        for points in zip(*curves)
    ]


def _parse_variants(tokens: list[list[str]] | None) -> dict[str, list[str]]:
    return parse_variants(tokens) if tokens else dict(DEFAULT_VARIANTS)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--runs",
        nargs="+",
        type=Path,
        default=None,
        help="finished wmrl run folders, one per seed (default: benchmarks.imagination_lift's, "
        "runs/imagination_lift/seed_{0,1,2}; quick: runs/imagination_lift_quick/seed_0)",
    )
    p.add_argument("--budget", type=float, default=380_000, help="real env steps of RL per seed and variant")
    p.add_argument(
        "--curve",
        nargs="+",
        type=float,
        default=[],
        metavar="STEPS",
        help="larger budgets (increasing) the same RL run goes on to after --budget, evaluated at each: "
        "a learning curve (quick: always one point, 4,000)",
    )
    p.add_argument("--num-envs", type=int, default=64, help="real sub-envs (a multiple of rl.group_size)")
    p.add_argument(
        "--init-policy", default=None, metavar="TEMPLATE",
        help="RL starts from this saved policy instead of each run's SFT; {run} stands for the run's key (its "
        "folder name, e.g. seed_0): runs/smrl/state_model/{run}/state_model_rl/policy (real RL after RL in a "
        "model world; lifts are still read against SFT)",
    )
    p.add_argument("--variant", nargs="+", action="append", metavar="NAME [key=value ...]")
    p.add_argument(
        "--rl-seed", type=int, default=0,
        help="> 0: repeat the RL with other starts and noise (pair folders NAME_rlseedN); 0: the seeds used so far",
    )
    p.add_argument("--work", type=Path, default=None, help="default runs/real_rl_benchmark[_quick]")
    p.add_argument(
        "--quick",
        action="store_true",
        help="conf/run_quick.yaml (the runs must be quick ones), 8 sub-envs, a 2,000-step budget and a curve "
        "point at 4,000 (CI smoke)",
    )
    p.add_argument("--jobs", type=int, default=1, help="variant/seed pairs run at once (spawned processes)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    import torch

    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    torch.set_num_threads(1)
    budget = 2_000.0 if a.quick else float(a.budget)
    curve = (4_000.0,) if a.quick else tuple(a.curve)
    if any(b <= prev for prev, b in zip((budget, *curve), curve)):
        raise WmrlError(f"--curve {list(curve)} must increase and start above --budget {budget:g}")
    num_envs, config_name = (8, "run_quick") if a.quick else (a.num_envs, "run")
    if a.runs is None:
        a.runs = (
            [Path("runs/imagination_lift_quick/seed_0")]
            if a.quick
            else [Path(f"runs/imagination_lift/seed_{s}") for s in (0, 1, 2)]
        )
    if a.work is None:
        a.work = Path("runs/real_rl_benchmark_quick" if a.quick else "runs/real_rl_benchmark")
    variants = _parse_variants(a.variant)
    if a.rl_seed < 0:
        raise WmrlError(f"--rl-seed {a.rl_seed} must be >= 0 (0: the seeds used so far)")
    t0 = time.perf_counter()
    pairs = [(name, src) for name in variants for src in a.runs]
    results: dict[str, dict[str, dict]] = {name: {} for name in variants}
    keys = dict(zip(a.runs, run_keys(a.runs), strict=True))

    def done(name: str, src: Path, r: dict) -> None:
        results[name][keys[src]] = r
        print(f"{name} {keys[src]}: SFT {r['sft_success']:.3f} -> RL {r['rl_success']:.3f}", flush=True)

    folder = {n: n if a.rl_seed == 0 else f"{n}_rlseed{a.rl_seed}" for n in variants}  # a repeat never resumes another seed's
    init = {s: None if a.init_policy is None else Path(a.init_policy.replace("{run}", keys[s])) for s in a.runs}
    for f in init.values():
        start_policy(f)  # every start policy is there before any work
    args = {(n, s): (s, a.work / folder[n] / keys[s], variants[n], budget, num_envs, a.rl_seed, curve, init[s])
            for n, s in pairs}
    run_pairs(run_pair, args, a.jobs, not a.no_progress, config_name, done)
    results = {n: {keys[s]: results[n][keys[s]] for s in a.runs} for n in variants}  # stable order
    res = {
        "variants": summarize(results),
        "variant_overrides": variants,
        "budget_real_env_steps": budget,
        "curve_real_env_steps": [budget, *curve] if curve else [],
        "rl_seed": a.rl_seed,
        "init_policy": a.init_policy,
        **run_fields(a, num_envs, config_name, t0),
    }
    atomic_write_json(a.out, res)
    for name, v in res["variants"].items():
        print(
            f"{name}: SFT {v['sft_success']:.3f} -> RL {v['rl_success']:.3f} (lift {v['lift']:+.3f}{paired_text(v)}, "
            f"{v['seeds_lifted']}/{len(v['lift_per_seed'])} seeds)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
