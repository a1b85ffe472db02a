"""Does RL inside the world model raise real-simulator success? (the mission's core claim)

Usage::

    python -m benchmarks.imagination_lift [--quick] --out benchmarks/results/imagination_lift.json
        [--seeds 0 1 2] [--runs-dir runs/imagination_lift] [--variant NAME key=value ...]
        [--coevolution-variant NAME key=value ...] [--full-variant NAME key=value ...]
        [--full-reference NAME] [key=value ...]   # Hydra overrides of conf/run.yaml

Per seed, ``wmrl run`` (``conf/run.yaml``; ``--quick``: ``conf/run_quick.yaml``) gives the real-simulator
success of (a) SFT, (b) RL in imagination, (c) each co-evolution round and (d) the same RL in the
real simulator with the real-env steps (b)+(c) used. Ablations re-run (b) on the same data, world
model, reward models and SFT policy with KIR off (episodes start only at t=0) and with
gating/masking off, and each ``--variant`` (round 0 again with extra overrides, e.g. ``--variant
it128 rl.iterations=128``, given after the run overrides; reported beside the ablations; a variant
that changes ``world_model.*`` trains its own world model and reward models). Runs are
resumable (a re-run skips finished stages). Every seed's folder keeps its results.md, plot and
videos. Every phase of a seed plays the same evaluation starts, so ``lift_vs_sft`` (each phase against
SFT), ``lift_vs_round_0`` (each co-evolution round and real RL against RL in imagination) and each
ablation's ``lift_vs_sft`` and ``lift_vs_round_0`` (against the full method) are read episode by episode and averaged over the seeds, with 95% intervals of
the evaluation's noise; every goal carries its comparison's as ``ci95_paired``.
``--coevolution-variant NAME key=value ...`` runs the co-evolution rounds again from each seed's own
round 0 with those overrides (``coevolution_variants``: per-round success, and each round against SFT,
against round 0 and against the default run's same round, episode by episode).
``--full-variant NAME key=value ...`` reruns every phase after SFT with those overrides from the same SFT
policy (``full_variants``: each phase against the default run's same phase, ``vs_default``), and
``--full-reference NAME`` also reads every other full variant against that one (``vs_reference``), e.g.
against the current defaults when the base runs were made before them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._variants import parse_variants

ABLATIONS: dict[str, list[str]] = {
    "kir_off": ["imagination.keyframes.strategy=start"],
    "gating_off": ["imagination.gate=off", "rl.gate=off"],
}
SHARED_STAGES = ("demos", "world_model", "idm", "rewards", "sft", "eval_sft")
SHARED_DIRS = ("data", "world_model", "rewards", "sft")
#: what each reward stage writes under ``RUN/rewards``: a variant that retrains one links the other's
REWARD_PARTS = {"idm": "executability", "rewards": "success"}
#: ``rewards.*`` keys only the success model reads (others, the batch size say, retrain the IDM too)
SUCCESS_ONLY_KEYS = ("rewards.success_steps", "rewards.success.", "rewards.imagined_replays",
                     "rewards.imagined_random_failures")


def run_seed(
    config_name: str, run_dir: Path, seed: int, overrides: list[str], progress: bool
) -> dict[str, Any]:
    """The full pipeline for one seed; returns its results.json content."""
    from imagination.pipeline import Pipeline, load_run_config

    cfg = load_run_config([*overrides, f"run_dir={run_dir}", f"seed={seed}"], config_name)
    Pipeline(cfg, progress=progress).run_all()
    return json.loads((run_dir / "results.json").read_text())


def retrained_stages(changes: list[str]) -> tuple[str, ...]:
    """The shared stages whose results a variant's overrides change, so its folder runs them anew:
    ``world_model.*`` / ``world_model_train.*`` the world model and the success model (it learns from
    the world model's rollouts), ``rewards.*`` the success model, and the IDM too unless every such key
    is one only the success model reads (:data:`SUCCESS_ONLY_KEYS`)."""
    keys = [c.lstrip("+~").split("=", 1)[0] for c in changes]
    reward_keys = [k for k in keys if k.startswith("rewards.")]
    out: list[str] = []
    if any(k.startswith(("world_model.", "world_model_train.")) for k in keys):
        out.append("world_model")
    if any(not k.startswith(SUCCESS_ONLY_KEYS) for k in reward_keys):
        out.append("idm")
    if out or reward_keys:
        out.append("rewards")
    return tuple(out)


def link_shared_stages(src: Path, dst: Path, retrain: tuple[str, ...] = ()) -> None:
    """Make ``dst`` a run folder that shares ``src``'s data, world model, reward models and SFT
    policy (symlinks, not copies) and its finished stages up to the SFT evaluation (copied markers,
    so a pipeline in ``dst`` skips them), except the stages in ``retrain`` (their folders and
    markers are left to the pipeline in ``dst``). ``dst/rewards`` links the whole folder when neither
    reward stage is retrained, else it is a folder holding a link to the part not retrained
    (:data:`REWARD_PARTS`). A ``src`` from before the IDM had its own stage has no ``idm`` marker:
    its ``rewards`` marker (copied) carries the IDM's calibration, and retraining ``rewards`` retrains
    the IDM too."""
    if "rewards" in retrain and not (src / "stages" / "idm.json").exists():
        retrain = (*retrain, "idm")  # a run from before the IDM had its own stage: its rewards stage trained both
    (dst / "stages").mkdir(parents=True, exist_ok=True)
    for sub in SHARED_DIRS:
        if sub not in retrain and sub != "rewards" and not (dst / sub).exists():
            os.symlink((src / sub).resolve(), dst / sub)
    if not any(st in retrain for st in REWARD_PARTS):
        if not (dst / "rewards").exists():
            os.symlink((src / "rewards").resolve(), dst / "rewards")
    else:  # a folder of its own, holding links to the reward models it does not retrain
        (dst / "rewards").mkdir(exist_ok=True)
        for st, part in REWARD_PARTS.items():
            if st not in retrain and not (dst / "rewards" / part).exists():
                os.symlink((src / "rewards" / part).resolve(), dst / "rewards" / part)
    for st in SHARED_STAGES:
        if st not in retrain and (src / "stages" / f"{st}.json").exists():
            shutil.copyfile(src / "stages" / f"{st}.json", dst / "stages" / f"{st}.json")


def run_ablation(
    config_name: str,
    base: Path,
    name: str,
    seed: int,
    overrides: list[str],
    progress: bool,
    changes: list[str] | None = None,
) -> float:
    """Round 0 (RL in imagination) again with ``changes`` (default ``ABLATIONS[name]``), sharing the
    base run's data, world model, reward models and SFT policy (linked, not recomputed) unless the
    changes touch them (:func:`retrained_stages`: trained anew in the variant's folder). Returns
    real success."""
    from imagination.pipeline import Pipeline, load_run_config

    d = base / f"ablation_{name}"
    changes = ABLATIONS[name] if changes is None else changes
    link_shared_stages(base, d, retrained_stages(changes))
    cfg = load_run_config(
        [
            *overrides,
            *changes,
            f"run_dir={d}",
            f"seed={seed}",
            "coevolution.rounds=0",
            "real_rl_baseline=false",
            "videos=0",
        ],
        config_name,
    )
    pipe = Pipeline(cfg, progress=progress)
    pipe.run_all()
    return float(pipe.done("round_0")["eval"]["success"])


def stage(folder: Path, name: str) -> dict[str, Any]:
    """A run folder's marker of finished stage ``name`` (``stages/<name>.json``)."""
    return json.loads((folder / "stages" / f"{name}.json").read_text())


def stage_eval(folder: Path, name: str) -> dict[str, Any]:
    """The real-simulator evaluation a finished stage recorded: a round's ``eval`` block, or the whole
    marker of ``eval_sft`` (which is that evaluation)."""
    st = stage(folder, name)
    return st.get("eval", st)


def check_coevolution_variant(name: str, changes: list[str]) -> None:
    """A co-evolution variant starts from the base run's round 0, so it may not change the models that
    round was trained with (a one-line ConfigError)."""
    from wmrl.errors import ConfigError

    if retrained_stages(changes):
        raise ConfigError(f"--coevolution-variant {name}: {' '.join(changes)} changes the models round 0 was "
                          "trained with; use --variant for those")


def run_coevolution_variant(
    config_name: str, base: Path, name: str, seed: int, overrides: list[str], progress: bool, changes: list[str]
) -> dict[str, Any]:
    """The co-evolution rounds again with ``changes``, from the base run's own round 0 (its RL-in-imagination
    policy, copied) and its data, world model, reward models and SFT policy (linked), in
    ``base/coevolution_<name>``. Returns that run's results.json content plus ``vs_default``: each round's
    real success minus the base run's same round, episode by episode."""
    from imagination.pipeline import Pipeline, load_run_config

    check_coevolution_variant(name, changes)
    d = base / f"coevolution_{name}"
    link_shared_stages(base, d)
    if not (d / "round_0").exists():
        shutil.copytree(base / "round_0", d / "round_0")
    shutil.copyfile(base / "stages" / "round_0.json", d / "stages" / "round_0.json")
    cfg = load_run_config(
        [*overrides, *changes, f"run_dir={d}", f"seed={seed}", "real_rl_baseline=false", "videos=0"], config_name
    )
    Pipeline(cfg, progress=progress).run_all()
    res = json.loads((d / "results.json").read_text())
    res["vs_default"] = vs_default(base, d, [f"round_{r}" for r in range(1, len(res["coevolution_success_by_round"]) + 1)])
    return res


def vs_default(base: Path, variant: Path, phases: list[str]) -> dict[str, dict[str, Any]]:
    """Each of ``phases`` that both run folders finished: the variant's real success minus the base run's,
    episode by episode on the same evaluation starts (:func:`imagination.report.paired_lifts`)."""
    from imagination.report import paired_lifts

    out: dict[str, dict[str, Any]] = {}
    for ph in phases:
        if (base / "stages" / f"{ph}.json").exists() and (variant / "stages" / f"{ph}.json").exists():
            out.update(paired_lifts(stage_eval(base, ph), {ph: stage_eval(variant, ph)}))
    return out


def run_full_variant(
    config_name: str, base: Path, name: str, seed: int, overrides: list[str], progress: bool, changes: list[str]
) -> dict[str, Any]:
    """Every phase after the SFT evaluation again with ``changes`` (RL in imagination, the co-evolution
    rounds, real RL at the same budget), from the base run's SFT policy, data, world model and reward
    models (linked; trained anew when the changes touch them), in ``base/full_<name>``: what a fresh run
    with those settings as defaults gives on the same SFT policy. Returns that run's results.json
    content plus ``vs_default``: each phase's real success minus the base run's same phase, episode by
    episode."""
    from imagination.pipeline import Pipeline, load_run_config

    d = base / f"full_{name}"
    link_shared_stages(base, d, retrained_stages(changes))
    cfg = load_run_config([*overrides, *changes, f"run_dir={d}", f"seed={seed}", "videos=0"], config_name)
    Pipeline(cfg, progress=progress).run_all()
    res = json.loads((d / "results.json").read_text())
    res["vs_default"] = vs_default(base, d, full_phases(res))
    return res


def full_phases(result: dict[str, Any]) -> list[str]:
    """The phases a full variant reruns, from its results.json content: round 0, each co-evolution
    round, real RL at the same budget."""
    return [f"round_{r}" for r in range(len(result["coevolution_success_by_round"]) + 1)] + ["real_rl"]


def full_vs_reference(base: Path, name: str, reference: str, result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Full variant ``name``'s phases against full variant ``reference``'s same phases (both under
    ``base``), episode by episode; ``result`` is ``name``'s results.json content."""
    return vs_default(base / f"full_{reference}", base / f"full_{name}", full_phases(result))


def summarize_full_variant(per_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """A full variant's benchmark fields and goals over its seeds (as :func:`summarize`), plus its mean
    paired difference from the default run's same phases (``vs_default``)."""
    out = summarize(per_seed, {})
    del out["ablations"]
    out["vs_default"] = mean_paired_lifts([per_seed[s].get("vs_default", {}) for s in sorted(per_seed)])
    return out


def summarize_coevolution_variant(per_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Means over seeds of a co-evolution variant's rounds and of its paired lifts (over SFT, over its
    round 0, over the default rounds)."""
    seeds = sorted(per_seed)
    by_round = np.array([per_seed[s]["coevolution_success_by_round"] for s in seeds], dtype=float)
    return {
        "coevolution_success_by_round": by_round.mean(0).tolist(),
        "per_seed": {str(s): per_seed[s]["coevolution_success_by_round"] for s in seeds},
        **{k: mean_paired_lifts([per_seed[s].get(k, {}) for s in seeds])
           for k in ("lift_vs_sft", "lift_vs_round_0", "vs_default")},
    }


def _mean(xs: list[float]) -> float:
    return float(np.mean(xs)) if xs else float("nan")


def mean_paired_lifts(per_seed: list[dict[str, dict[str, Any]]], z: float = 1.959964) -> dict[str, dict[str, Any]]:
    """Each phase's paired lift (one dict per seed, e.g. the runs' ``lift_vs_sft`` or ``lift_vs_round_0``),
    averaged over the seeds, for the phases every seed has: ``diff`` (mean), ``se`` (the evaluation's
    standard error of that mean, sqrt(sum se^2) / k; the seeds' own spread is in ``diff_per_seed``), ``ci95``."""
    phases = set.intersection(*(set(d) for d in per_seed)) if per_seed else set()
    out = {}
    for name in sorted(phases):
        diffs = [float(d[name]["diff"]) for d in per_seed]
        se = float(np.sqrt(sum(float(d[name]["se"]) ** 2 for d in per_seed)) / len(per_seed))
        m = float(np.mean(diffs))
        out[name] = {"diff": m, "se": se, "ci95": [m - z * se, m + z * se], "diff_per_seed": diffs}
    return out


def ablation_lift(runs: Path, seeds: list[int], name: str, reference: str = "eval_sft") -> dict[str, Any] | None:
    """An ablation's round-0 success minus its seed's ``reference`` stage (``eval_sft``: SFT; ``round_0``:
    the full method's RL in imagination), paired episode by episode and averaged over the seeds
    (:func:`mean_paired_lifts`); None when a seed's evaluations kept no episodes."""
    from imagination.report import paired_lifts

    per_seed = [
        paired_lifts(stage_eval(runs / f"seed_{s}", reference),
                     {"round_0": stage_eval(runs / f"seed_{s}" / f"ablation_{name}", "round_0")})
        for s in seeds
    ]
    return mean_paired_lifts(per_seed).get("round_0")


def summarize(per_seed: dict[int, dict[str, Any]], ablations: dict[str, dict[int, float]]) -> dict[str, Any]:
    """Means over seeds of the benchmark fields, with the per-seed values and the goals."""
    seeds = sorted(per_seed)
    col = {
        k: [per_seed[s][k] for s in seeds]
        for k in ("sft_success", "imagination_rl_success", "real_env_steps_used")
    }
    by_round = np.array([per_seed[s]["coevolution_success_by_round"] for s in seeds], dtype=float)
    real = [per_seed[s].get("real_rl_same_budget_success") for s in seeds]
    out: dict[str, Any] = {
        "sft_success": _mean(col["sft_success"]),
        "imagination_rl_success": _mean(col["imagination_rl_success"]),
        "coevolution_success_by_round": by_round.mean(0).tolist() if by_round.size else [],
        "real_rl_same_budget_success": _mean([r for r in real if r is not None]),
        "real_env_steps_used": _mean(col["real_env_steps_used"]),
        "ablations": {
            k: {"imagination_rl_success": _mean(list(v.values())), "per_seed": v}
            for k, v in ablations.items()
        },
        "seeds": seeds,
        "per_seed": {
            str(s): {k: v for k, v in per_seed[s].items() if k not in ("per_task", "ci95")} for s in seeds
        },
    }
    out["lift_vs_sft"] = mean_paired_lifts([per_seed[s].get("lift_vs_sft", {}) for s in seeds])
    out["lift_vs_round_0"] = mean_paired_lifts([per_seed[s].get("lift_vs_round_0", {}) for s in seeds])
    lift = out["imagination_rl_success"] - out["sft_success"]
    last = out["coevolution_success_by_round"][-1] if out["coevolution_success_by_round"] else float("nan")
    n_rounds = len(out["coevolution_success_by_round"])
    out["goals"] = {
        "imagination_lift": {"value": lift, "goal": ">= 0.30", "met": bool(lift >= 0.30),
                             **_paired_ci(out["lift_vs_sft"].get("round_0"))},
        "coevolution_gain": {
            "value": last - out["imagination_rl_success"],
            "goal": ">= 0.05",
            "met": bool(last - out["imagination_rl_success"] >= 0.05),
            **_paired_ci(out["lift_vs_round_0"].get(f"round_{n_rounds}")),
        },
        "imagination_vs_real_rl": {
            "value": out["imagination_rl_success"] - out["real_rl_same_budget_success"],
            "goal": ">= 0",
            "met": bool(out["imagination_rl_success"] >= out["real_rl_same_budget_success"]),
            **_paired_ci(out["lift_vs_round_0"].get("real_rl"), negate=True),
        },
    }
    return out


def _paired_ci(d: dict[str, Any] | None, negate: bool = False) -> dict[str, Any]:
    """``{"ci95_paired": [lo, hi]}`` of a mean paired lift (negated: the reference minus the phase),
    or nothing when the runs kept no episodes."""
    if d is None:
        return {}
    lo, hi = d["ci95"]
    return {"ci95_paired": [-hi, -lo] if negate else [lo, hi]}


def environment_info() -> dict[str, Any]:
    """The machine's facts that move the timings: a CPU without native bf16 (AVX512-BF16 or AMX) trains
    the world model in fp32, and the same run took about twice as long on one."""
    import torch

    from worldmodels.modeling_common import native_bf16

    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpu_native_bf16": native_bf16("cpu"),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="conf/run_quick.yaml, one seed (CI smoke)")
    p.add_argument("--out", default="benchmarks/results/imagination_lift.json")
    p.add_argument("--seeds", type=int, nargs="*", default=None, help="default: 0 1 2 (quick: 0)")
    p.add_argument(
        "--runs-dir", default=None, help="folder of the per-seed runs (default runs/imagination_lift[_quick])"
    )
    p.add_argument("--no-ablations", action="store_true")
    p.add_argument(
        "--variant",
        nargs="+",
        action="append",
        metavar="NAME [key=value ...]",
        help="an extra round-0 re-run per seed with these overrides (repeatable), e.g. it128 rl.iterations=128",
    )
    p.add_argument(
        "--coevolution-variant",
        nargs="+",
        action="append",
        metavar="NAME [key=value ...]",
        help="the co-evolution rounds again per seed, from the same round 0, with these overrides (repeatable), "
        "e.g. noft coevolution.wm_finetune_steps=0 coevolution.success_finetune_steps=0",
    )
    p.add_argument(
        "--full-variant",
        nargs="+",
        action="append",
        metavar="NAME [key=value ...]",
        help="every phase after SFT again per seed (RL in imagination, co-evolution, real RL), from the same SFT "
        "policy, with these overrides (repeatable): a fresh run with them as defaults, e.g. maxkl rl.max_kl=0.01",
    )
    p.add_argument(
        "--full-reference",
        default=None,
        metavar="NAME",
        help="a --full-variant the other full variants are also read against, phase by phase and paired "
        "(vs_reference): e.g. the current defaults when the base runs predate them",
    )
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of the run config")
    a = p.parse_args(argv)
    from wmrl.io import atomic_write_json

    config_name = "run_quick" if a.quick else "run"
    seeds = a.seeds if a.seeds is not None else ([0] if a.quick else [0, 1, 2])
    runs = Path(a.runs_dir or ("runs/imagination_lift_quick" if a.quick else "runs/imagination_lift"))
    t0 = time.perf_counter()
    variants = parse_variants(a.variant, taken=tuple(ABLATIONS))
    coevo_variants = parse_variants(a.coevolution_variant, flag="--coevolution-variant")
    full_variants = parse_variants(a.full_variant, flag="--full-variant")
    for name, changes in coevo_variants.items():
        check_coevolution_variant(name, changes)
    if a.full_reference is not None and a.full_reference not in full_variants:
        from wmrl.errors import ConfigError

        raise ConfigError(f"--full-reference {a.full_reference!r} is not a --full-variant; expected one of "
                        f"{sorted(full_variants) or 'the names given with --full-variant'}")
    from imagination.pipeline import load_run_config

    for changes in [[], *variants.values(), *coevo_variants.values(), *full_variants.values()]:  # a bad key or value: an error before any work
        load_run_config([*a.overrides, *changes], config_name)
    coevo: dict[str, dict[int, dict[str, Any]]] = {k: {} for k in coevo_variants}
    full: dict[str, dict[int, dict[str, Any]]] = {k: {} for k in full_variants}
    per_seed, abl = {}, {k: {} for k in ABLATIONS} if not a.no_ablations else {}
    abl.update({k: {} for k in variants})
    for s in seeds:
        base = runs / f"seed_{s}"
        per_seed[s] = run_seed(config_name, base, s, a.overrides, not a.no_progress)
        for name in abl:
            abl[name][s] = run_ablation(
                config_name, base, name, s, a.overrides, not a.no_progress, variants.get(name)
            )
        for name, changes in coevo_variants.items():
            coevo[name][s] = run_coevolution_variant(config_name, base, name, s, a.overrides, not a.no_progress,
                                                     changes)
        for name, changes in full_variants.items():
            full[name][s] = run_full_variant(config_name, base, name, s, a.overrides, not a.no_progress, changes)
    res = summarize(per_seed, abl)
    for name in abl:
        res["ablations"][name]["lift_vs_sft"] = ablation_lift(runs, seeds, name)
        res["ablations"][name]["lift_vs_round_0"] = ablation_lift(runs, seeds, name, reference="round_0")
    if coevo:
        res["coevolution_variants"] = {k: summarize_coevolution_variant(v) for k, v in coevo.items()}
    if full:
        res["full_variants"] = {k: summarize_full_variant(v) for k, v in full.items()}
        if a.full_reference is not None:
            ref = a.full_reference
            for name in full:
                if name != ref:
                    res["full_variants"][name]["vs_reference"] = {
                        "reference": ref,
                        **mean_paired_lifts([full_vs_reference(runs / f"seed_{sd}", name, ref, full[name][sd])
                                             for sd in seeds]),
                    }
    # compute time of every stage of every run (resumed stages count their original time), and of
    # this invocation (small when everything was resumed)
    abl_times = [
        stage(runs / f"seed_{sd}" / f"ablation_{n}", "round_0")["stage_time_s"]
        for sd in seeds
        for n in abl
    ]
    coevo_times = [  # the variants' own rounds (their shared stages are the base runs')
        json.loads(f.read_text())["stage_time_s"]
        for sd in seeds
        for n in coevo
        for f in (runs / f"seed_{sd}" / f"coevolution_{n}" / "stages").glob("round_*.json")
        if f.stem != "round_0"
    ]
    full_times = [  # the full variants' own stages (their shared ones are the base runs')
        t or 0.0 for sd in seeds for n in full for st, t in full[n][sd]["stage_time_s"].items() if st not in SHARED_STAGES
    ]
    res["wall_time_s"] = float(sum(per_seed[sd]["wall_time_s"] for sd in seeds) + sum(abl_times) + sum(coevo_times)
                               + sum(full_times))
    res["invocation_time_s"] = time.perf_counter() - t0
    res["run_wall_time_s_by_seed"] = {str(s): per_seed[s]["wall_time_s"] for s in seeds}
    res["config"] = {
        "config_name": config_name,
        "overrides": a.overrides,
        "runs_dir": str(runs),
        "variants": variants,
        "coevolution_variants": coevo_variants,
        "full_variants": full_variants,
    }
    res["quick"] = a.quick
    res["machine"] = environment_info()
    atomic_write_json(a.out, res)
    print(
        json.dumps(
            {
                k: res[k]
                for k in (
                    "sft_success",
                    "imagination_rl_success",
                    "coevolution_success_by_round",
                    "real_rl_same_budget_success",
                    "real_env_steps_used",
                    "goals",
                )
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
