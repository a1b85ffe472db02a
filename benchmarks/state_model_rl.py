"""Does RL in the state model's world, drawn by the simulator, lift *real* success?

Usage::

    python -m benchmarks.state_model_rl --runs runs/s15/lift/seed_0 runs/s15/lift/seed_1 ...
        [--object-dynamics object_dynamics_arm [od_demo_f1 ...]] [--success all|any|advanced]
        [--advance random|first] [--max-disagreement METRES] [--gate mask|terminate]
        [--real-steps K [--share-prefix]] [--iterations N] [--num-envs 64] [--real-baseline] [--jobs 2]
        [--work DIR] --out FILE.json
        [key=value ...]   # run config overrides, e.g. real_rl_reward=dense rl.score=progress
    python -m benchmarks.state_model_rl --quick --out FILE.json   # after benchmarks.imagination_lift --quick

RL in imagination does not lift the SFT policy, while ``benchmarks.rl_headroom --rendered-state-model``
shows that an arm-and-object state model drawn by the simulator itself agrees with the real simulator
far better than the pixel world model's imagination (advantage cosine 0.17 vs 0.07). This benchmark
asks whether that world is good enough to train in: per finished ``wmrl run`` folder (its demos, SFT
policy and SFT evaluation are reused, read only) it runs the run's RL algorithm from the SFT policy in
:class:`benchmarks._split_worlds.StateModelVectorEnv` (the state model in folder ``--object-dynamics``
of the run steps the proprio and the cubes; the real env only resets, giving real layouts and first
frames, and draws the model's states; the task's rule on the predicted states is the reward) with the
real-RL baseline's layout and seeds (``Pipeline.s_real_rl``: ``--num-envs`` sub-envs, GRPO groups
sharing a task and a start, full episodes from t=0) for ``--iterations`` iterations (default: the
run's ``rl.iterations``, what RL in imagination runs in round 0), then evaluates the policy in the
real simulator with the run's evaluation protocol (the SFT evaluation's episodes and seeds).
``--real-baseline`` also runs the same RL in the real simulator for the same iterations. As in
``benchmarks.real_rl``, the config is ``conf/run.yaml`` (``run_quick`` with ``--quick``) at the run's seed.

Each world/seed writes a run folder under ``--work`` (config, metrics.jsonl, checkpoints, the final
policy); a re-run resumes (finished stages are skipped, RL resumes from its last checkpoint).
``--quick`` fits a tiny arm-and-object model on a few real episodes of the quick run's SFT policy
(its real steps are reported) since the quick run has none.

Several ``--object-dynamics`` folders make an ensemble (MOPO/MOReL-style pessimism against the policy
exploiting one model's errors): every member steps from the same state, the env advances with a
member drawn per step (``--advance``), a step succeeds only when the rule holds on every member's
prediction (``--success all``), and with ``--max-disagreement`` a trajectory where two members' tcp or
cube predictions ever lie further apart than that is left out of GRPO's update (``--gate mask``) or
ends there as a failure that GRPO scores (``--gate terminate``, MOReL's halt). Each seed then also
reports its masked fraction per iteration and the distribution of the members' largest spread per
episode (with the share above the threshold: what ``terminate`` ends).

``--real-steps K`` branches the model's episodes from real states of the policy being trained, as MBPO
branches short model rollouts from real ones: every episode's first K steps step the real simulator,
and the state model goes on from the real state reached (with GRPO only in the episodes it trains on,
each sub-env's first after a reset: ``prefix_after_autoreset=False``). The prefix steps are the
real env steps it used (``real_env_steps_used``), to set against ``benchmarks.real_rl`` at the same
real budget; the batched simulator steps every sub-env's physics while any is in its prefix
(``real_sim_calls``' ``physics_steps``: compute, not experience).

``--share-prefix`` (with ``--real-steps K``, GRPO) runs one real prefix per GRPO group instead of one
per member: every member executes the group's first member's actions for K steps, so the group
reaches one real state, and only that one trajectory counts as real steps (G times fewer). The
members then branch in the state model with their own actions, and GRPO trains on those branches only
(the prefix chunks' recorded actions were not the executed ones). Whether the model's branches teach
anything the real prefix does not is what this asks: with per-member prefixes, GRPO also credits the
members' own real prefix actions. ``--train-on prefix`` asks the other half: per-member prefixes, and
GRPO trains only on the prefix's real chunks, scored by where the model's branch ends (the model as a
judge of outcomes, not a scene the policy learns to act in); ``--train-on branch`` trains on the
model's chunks only.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._split_worlds import ADVANCE_RULES, SUCCESS_RULES
from benchmarks._stats import run_keys
from benchmarks.real_rl import (
    _link_run,
    _seed_of,
    episode_fields,
    paired_text,
    run_fields,
    run_pairs,
    seed_mean_lift,
)

WORLDS = ("state_model", "real")


def state_model_dir(src: Path, name: str) -> Path:
    """The arm-and-object state model folder ``name`` of run folder ``src``; a one-line error if absent."""
    from wmrl.errors import WmrlError

    d = Path(src) / name
    if not (d / "config.json").is_file() or not (d / "model.safetensors").is_file():
        raise WmrlError(
            f"{src} has no state model {name}/ (config.json, model.safetensors); fit one with "
            f"`python -m worldmodels.object_dynamics --data {src}/data --out {d} --arm`"
        )
    return d


def spread_summary(log: list[np.ndarray], threshold: float | None) -> dict[str, Any]:
    """Quantiles (metres) of the members' largest spread per episode, from ``disagreement_log`` (per full
    reset, (N,) with NaN for unfinished episodes): over all, over the first reset (the SFT policy), and
    per reset the share above ``threshold`` (what the gate drops)."""
    rows = [r[np.isfinite(r)] for r in log]
    rows = [r for r in rows if len(r)]
    if not rows:
        return {}
    q = (0.1, 0.25, 0.5, 0.75, 0.9, 0.99)
    allv = np.concatenate(rows)
    out: dict[str, Any] = {
        "quantiles": list(q),
        "episodes": int(len(allv)),
        "all_iterations": [float(x) for x in np.quantile(allv, q)],
        "iteration_0": [float(x) for x in np.quantile(rows[0], q)],
        "median_by_iteration": [float(np.median(r)) for r in rows],
    }
    if threshold is not None:
        out["above_threshold_by_iteration"] = [float((r > threshold).mean()) for r in rows]
    return out


def run_world(
    src: Path,
    dst: Path,
    world: str,
    model_dir: Path | list[Path] | None,
    iterations: int,
    num_envs: int,
    ensemble: dict[str, Any] | None = None,
    rl_seed: int = 0,
    real_steps: int = 0,
    overrides: tuple[str, ...] = (),
    share_prefix: bool = False,
    train_on: str | None = None,
    progress: bool = True,
    config_name: str = "run",
) -> dict[str, Any]:
    """RL from ``src``'s SFT policy in ``world`` (``state_model``: :class:`StateModelVectorEnv` with the
    state model in ``model_dir``, or the ensemble of the folders in a list of them, with ``ensemble``'s
    ``StateModelVectorEnv`` options ``success``, ``advance``, ``max_disagreement``, ``gate``; ``real``:
    the real simulator) for ``iterations`` iterations, in run folder ``dst``, then the real evaluation;
    returns the seed's summary. ``rl_seed`` > 0 repeats the RL with other starts and noise (0: the
    real-RL baseline's seeds, as ``benchmarks.real_rl``). ``real_steps`` > 0: every episode's first
    ``real_steps`` steps are the real simulator's and the state model branches from there
    (``StateModelVectorEnv(real_steps=...)``); its prefix steps are the real env steps used. ``overrides``:
    the run config's (``key=value``; e.g. ``real_rl_reward=dense rl.score=progress``: both worlds pay the
    staged dense reward, the state model's on its predicted states). ``share_prefix``: each GRPO group
    shares one real prefix (``StateModelVectorEnv(share_prefix=rl.group_size)``), and RL trains on the
    model's branches from it. ``train_on``: ``StateModelVectorEnv``'s (``all``, ``prefix`` or ``branch``;
    None: its default)."""
    from benchmarks._split_worlds import StateModelVectorEnv, check_state_model
    from envs.tabletop.vector_env import STATE_DIM
    from imagination.pipeline import Pipeline, load_run_config
    from wmrl.errors import WmrlError
    from worldmodels.object_dynamics import ObjectDynamics

    if world not in WORLDS:
        raise WmrlError(f"world={world!r}; expected one of {', '.join(WORLDS)}")
    make_world = None
    made: list[StateModelVectorEnv] = []
    if world == "state_model":
        if model_dir is None:
            raise WmrlError("world=state_model needs the state model's folder")
        dirs = model_dir if isinstance(model_dir, list) else [model_dir]
        models = [ObjectDynamics.from_pretrained(d) for d in dirs]
        for m in models:
            check_state_model(m, STATE_DIM)  # before any work
        opts = {**(ensemble or {}), "real_steps": real_steps}

        def make_world(real: Any) -> StateModelVectorEnv:
            # GRPO trains on first episodes only: no real prefix for the episodes its collection ignores
            algo, rl_cfg = cfg.rl_config()
            if (share_prefix or train_on not in (None, "all")) and algo != "grpo":
                raise WmrlError(f"--share-prefix and --train-on prefix|branch need GRPO (PPO trains on every "
                                f"chunk); rl.algo is {algo!r}")
            group = rl_cfg.group_size if share_prefix else 1
            env = StateModelVectorEnv(
                real, models if isinstance(model_dir, list) else models[0], **opts,
                prefix_after_autoreset=algo != "grpo", share_prefix=group, train_on=train_on,
            )
            made.append(env)
            return env

    seed = _seed_of(src)
    _link_run(src, dst)
    cfg = load_run_config(
        [*overrides, f"run_dir={dst}", f"seed={seed}", f"real_rl_num_envs={num_envs}", "videos=0",
         f"rl.iterations={iterations}"],
        config_name,
    )
    pipe = Pipeline(cfg, progress=progress)
    stage = f"{world}_rl"
    resumed = (dst / "stages" / f"{stage}.json").exists()  # finished by an earlier invocation: read back
    out = pipe.stage(stage, lambda: pipe.s_real_rl(None, make_world, name=stage, rl_seed=rl_seed))
    hist = [json.loads(line) for line in (dst / stage / "rl" / "metrics.jsonl").read_text().splitlines()]
    sft = json.loads((dst / "stages" / "eval_sft.json").read_text())
    train = [float(h["grpo/success_rate"]) for h in hist]
    extra: dict[str, Any] = {}
    if isinstance(model_dir, list):
        extra["ensemble"] = dict(ensemble or {})
        extra["gated_frac_by_iteration"] = [1.0 - float(h["grpo/valid_frac"]) for h in hist]
        spread_file = dst / stage / "disagreement.json"
        if made and made[0].disagreement_log:  # this invocation trained: its log (a resumed one: the last kept)
            from wmrl.io import atomic_write_json

            atomic_write_json(spread_file, {
                "log": [[float(x) for x in r] for r in made[0].disagreement_log],
                "first_iteration": len(hist) - len(made[0].disagreement_log),
            })
        if spread_file.exists():
            saved = json.loads(spread_file.read_text())
            extra["disagreement_m"] = spread_summary(
                [np.asarray(r, np.float32) for r in saved["log"]], (ensemble or {}).get("max_disagreement")
            )
            extra["disagreement_m"]["first_iteration_logged"] = int(saved["first_iteration"])
    return {
        "seed": seed,
        "state_model": None if model_dir is None else (
            [str(d) for d in model_dir] if isinstance(model_dir, list) else str(model_dir)
        ),
        "sft_success": float(sft["success"]),
        "rl_success": float(out["eval"]["success"]),
        "lift": float(out["eval"]["success"]) - float(sft["success"]),
        **episode_fields(out["eval"], sft),
        "rl_ci95": out["eval"]["ci95"],
        "per_task": out["eval"]["per_task"],
        "sft_per_task": sft.get("per_task", {}),
        "rl_iterations": int(out["rl_iterations"]),
        "train_success_by_iteration": train,  # sampled episodes inside the world RL trains in
        "train_success_last4": float(np.mean(train[-4:])) if train else float("nan"),
        "world_env_steps": float(out.get("world_env_steps", out["real_env_steps"])),
        # RL's real env steps: the real world's, or the real prefixes' (every iteration's, resumed or not)
        "real_env_steps_used": float(out["real_env_steps"])
        or float(out.get("real_sim_calls", {}).get("prefix_steps", 0.0)),  # a stage finished before they were logged
        "real_steps_per_episode": int(real_steps) if world == "state_model" else None,
        "share_prefix": bool(share_prefix) if world == "state_model" else None,
        "train_on": (train_on or ("branch" if share_prefix else "all")) if world == "state_model" else None,
        "real_sim_calls": out.get("real_sim_calls", {}),
        "eval_env_steps": float(out["eval"]["eval_env_steps"]),
        "wall_time_s": float(out.get("stage_time_s", float("nan"))),  # the stage's own, also when resumed
        "cpu_time_s": float(out.get("stage_cpu_s", float("nan"))),
        "resumed": resumed,
        "rl_seed": int(rl_seed),
        **extra,
    }


def fit_quick_state_model(src: Path, out: Path, bootstrap_seed: int | None = None) -> tuple[Path, float]:
    """A tiny arm-and-object model fitted on 16 real episodes of ``src``'s SFT policy (quick mode: the
    quick run has none); returns its folder and the real env steps of those episodes. ``bootstrap_seed``:
    a bootstrap member of a tiny ensemble instead (the same episodes, drawn again with that seed)."""
    from imagination.pipeline import run_config_of
    from worldmodels.object_dynamics import ObjectDynamicsConfig, fit_object_dynamics, policy_rollouts

    done = out / "real_env_steps.json"
    if done.exists():
        return out, float(json.loads(done.read_text())["real_env_steps"])
    import envs
    from wmrl.io import atomic_write_json

    cfg = run_config_of(src)
    traj, st = policy_rollouts(src / "sft" / "policy", envs.resolve_tasks(cfg.suite), cfg.image_size, 16, seed=9000)
    c = ObjectDynamicsConfig(arm=True, steps=150, batch_size=256, hidden=32, layers=2, lr=3e-3, test_fraction=0.25,
                             **({} if bootstrap_seed is None else {"bootstrap": True, "seed": int(bootstrap_seed)}))
    model, metrics = fit_object_dynamics(traj, c, progress=False)
    model.save_pretrained(out, metrics)
    atomic_write_json(done, {"real_env_steps": float(st["env_steps"])})
    return out, float(st["env_steps"])


def summarize(per_seed: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Means over seeds of one world's per-seed summaries."""
    rows = list(per_seed.values())
    lifts = [r["lift"] for r in rows]
    return {
        "sft_success": float(np.mean([r["sft_success"] for r in rows])),
        "rl_success": float(np.mean([r["rl_success"] for r in rows])),
        "lift": float(np.mean(lifts)),
        "lift_per_seed": lifts,
        "lift_vs_sft": seed_mean_lift(rows),
        "seeds_lifted": int(sum(x > 1e-9 for x in lifts)),  # not float noise of equal rates
        "train_success_first": float(np.mean([r["train_success_by_iteration"][0] for r in rows])),
        "train_success_last4": float(np.mean([r["train_success_last4"] for r in rows])),
        "world_env_steps": float(np.mean([r["world_env_steps"] for r in rows])),
        "real_env_steps_used": float(np.mean([r["real_env_steps_used"] for r in rows])),
        "wall_time_s": float(np.mean([r["wall_time_s"] for r in rows])),
        "per_seed": per_seed,
    }


def pair_folder(work: Path, world: str, iterations: int, rl_seed: int, key: str) -> Path:
    """Where a world/run pair's RL lives: ``WORK/WORLD_itN[_rlseedS]/KEY``, so a repeat with another RL seed
    never reads back (resumes) another seed's finished stage.

    >>> pair_folder(Path("w"), "state_model", 100, 1, "seed_0").as_posix()
    'w/state_model_it100_rlseed1/seed_0'
    """
    return work / f"{world}_it{iterations}{f'_rlseed{rl_seed}' if rl_seed else ''}" / key


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", nargs="+", type=Path, default=None, help="finished wmrl run folders, one per seed")
    p.add_argument(
        "--object-dynamics",
        nargs="+",
        default=["object_dynamics_arm"],
        metavar="NAME",
        help="the arm-and-object state model's folder in each run (python -m worldmodels.object_dynamics --arm); "
        "several: an ensemble",
    )
    p.add_argument("--success", default="all", choices=SUCCESS_RULES,
                   help="ensemble: the task's rule must hold on all members' predictions, any, or the advanced one's")
    p.add_argument("--advance", default="random", choices=ADVANCE_RULES,
                   help="ensemble: the member the env advances with per step (random: seeded draw, as MOPO)")
    p.add_argument("--max-disagreement", type=float, default=None, metavar="METRES",
                   help="ensemble: a step whose members' tcp/cube predictions lie further apart is unreliable")
    p.add_argument("--gate", default="mask", choices=("mask", "terminate"),
                   help="ensemble with --max-disagreement: GRPO drops the trajectory (mask) or it ends as a scored failure")
    p.add_argument("--real-steps", type=int, default=0, metavar="K",
                   help="the first K steps of every episode are the real simulator's; the state model branches "
                   "from the real state reached (MBPO); those steps count as real env steps")
    p.add_argument("--share-prefix", action="store_true",
                   help="with --real-steps: each GRPO group runs one real prefix (its first member's actions) and "
                   "branches its members in the model from there; only that prefix counts as real steps, and "
                   "RL trains on the branches")
    p.add_argument("--train-on", default=None, choices=("all", "prefix", "branch"),
                   help="with --real-steps: the chunks GRPO trains on: all, the real prefix's only, or the model "
                   "branch's only (default: all; branch with --share-prefix)")
    p.add_argument("--iterations", type=int, default=None, help="RL iterations (default: the config's rl.iterations)")
    p.add_argument("--rl-seed", type=int, default=0,
                   help="0: the real-RL baseline's RL seeds; N > 0: an independent repeat (other starts and noise)")
    p.add_argument("--num-envs", type=int, default=64, help="sub-envs (a multiple of rl.group_size, as real_rl)")
    p.add_argument("--real-baseline", action="store_true", help="also RL in the real simulator, same iterations")
    p.add_argument("--work", type=Path, default=None, help="default runs/state_model_rl[_quick]")
    p.add_argument(
        "--quick",
        action="store_true",
        help="conf/run_quick.yaml, runs/imagination_lift_quick/seed_0, 8 sub-envs, a tiny fitted state model, "
        "--real-baseline (CI smoke)",
    )
    p.add_argument("--jobs", type=int, default=1, help="world/seed pairs run at once (spawned processes)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="run config overrides for every world (e.g. real_rl_reward=dense rl.score=progress)")
    a = p.parse_args(argv)
    import torch

    from wmrl.config import load_config
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    torch.set_num_threads(1)
    config_name = "run_quick" if a.quick else "run"
    num_envs = 8 if a.quick else a.num_envs
    if a.runs is None:
        a.runs = [Path("runs/imagination_lift_quick/seed_0")] if a.quick else [
            Path(f"runs/s15/lift/seed_{s}") for s in (0, 1, 2)
        ]
    if a.work is None:
        a.work = Path("runs/state_model_rl_quick" if a.quick else "runs/state_model_rl")
    iterations = int(a.iterations or load_config(config_name, [])["rl"]["iterations"])
    if iterations < 1:
        raise WmrlError(f"--iterations {iterations} must be >= 1")
    worlds = ["state_model", "real"] if a.real_baseline or a.quick else ["state_model"]
    if a.rl_seed < 0:
        raise WmrlError(f"--rl-seed {a.rl_seed} must be >= 0 (0: the real-RL baseline's seeds)")
    if a.real_steps < 0:
        raise WmrlError(f"--real-steps {a.real_steps} must be >= 0 (real physics steps per episode)")
    if (a.share_prefix or a.train_on not in (None, "all")) and not a.real_steps:
        raise WmrlError("--share-prefix and --train-on prefix|branch split episodes at the real prefix of "
                        "--real-steps K; give K > 0")
    if a.share_prefix and a.train_on not in (None, "branch"):
        raise WmrlError(f"--share-prefix trains on the model's branches only; --train-on {a.train_on} cannot be")
    swallowed = [n for n in [*a.object_dynamics, *[str(r) for r in a.runs]] if "=" in n]
    if swallowed:
        raise WmrlError(
            f"{swallowed[0]!r} was read as a folder name; put the key=value overrides after a one-value option "
            "(e.g. before --out FILE.json), not right after --runs or --object-dynamics"
        )
    bad = [o for o in a.overrides if "=" not in o]
    if bad:
        raise WmrlError(f"override {bad[0]!r} is not key=value")
    is_ensemble = len(a.object_dynamics) > 1
    if a.quick and is_ensemble:
        raise WmrlError("--quick fits one tiny state model; give one --object-dynamics")
    if a.max_disagreement is not None and not is_ensemble:
        raise WmrlError("--max-disagreement needs an ensemble: give several --object-dynamics folders")
    if a.max_disagreement is not None and not (np.isfinite(a.max_disagreement) and a.max_disagreement > 0):
        raise WmrlError(f"--max-disagreement {a.max_disagreement} must be a finite number of metres > 0")
    ensemble = {
        "success": a.success, "advance": a.advance, "max_disagreement": a.max_disagreement, "gate": a.gate
    } if is_ensemble else None
    keys = dict(zip(a.runs, run_keys(a.runs), strict=True))
    t0 = time.perf_counter()
    quick_real_steps = 0.0
    models: dict[Path, Path | list[Path]] = {}
    for src in a.runs:  # every folder's model is checked before any RL
        if a.quick:
            models[src], steps = fit_quick_state_model(src, a.work / "quick_state_model" / keys[src])
            quick_real_steps += steps
        else:
            dirs = [state_model_dir(src, name) for name in a.object_dynamics]
            models[src] = dirs if is_ensemble else dirs[0]
    args = {
        (w, s): (s, pair_folder(a.work, w, iterations, a.rl_seed, keys[s]), w, models[s] if w == "state_model" else None,
                 iterations, num_envs, ensemble, a.rl_seed, a.real_steps, tuple(a.overrides), a.share_prefix,
                 a.train_on)
        for w in worlds
        for s in a.runs
    }
    results: dict[str, dict[str, dict]] = {w: {} for w in worlds}

    def done(w: str, src: Path, r: dict) -> None:
        results[w][keys[src]] = r
        print(f"{w} {keys[src]}: SFT {r['sft_success']:.3f} -> RL {r['rl_success']:.3f} (inside the world: "
              f"{r['train_success_by_iteration'][0]:.3f} -> {r['train_success_last4']:.3f})", flush=True)

    run_pairs(run_world, args, a.jobs, not a.no_progress, config_name, done)
    worlds_out = {w: summarize({keys[s]: results[w][keys[s]] for s in a.runs}) for w in worlds}
    res = {
        "benchmark": "state_model_rl",
        "sft_success": worlds_out["state_model"]["sft_success"],
        "state_model_rl_success": worlds_out["state_model"]["rl_success"],
        "real_rl_same_iterations_success": worlds_out["real"]["rl_success"] if "real" in worlds_out else None,
        "worlds": worlds_out,
        "object_dynamics": "quick: fitted here" if a.quick else (
            a.object_dynamics if is_ensemble else a.object_dynamics[0]
        ),
        "ensemble": ensemble,
        "quick_state_model_real_env_steps": quick_real_steps,
        "iterations": iterations,
        "rl_seed": a.rl_seed,
        "real_steps_per_episode": a.real_steps,
        "share_prefix": bool(a.share_prefix),
        "train_on": a.train_on or ("branch" if a.share_prefix else "all"),
        "overrides": list(a.overrides),
        **run_fields(a, num_envs, config_name, t0),
    }
    atomic_write_json(a.out, res)
    for w, v in worlds_out.items():
        print(
            f"{w}: SFT {v['sft_success']:.3f} -> RL {v['rl_success']:.3f} (lift {v['lift']:+.3f}{paired_text(v)}, "
            f"{v['seeds_lifted']}/{len(v['lift_per_seed'])} seeds); success inside it "
            f"{v['train_success_first']:.3f} -> {v['train_success_last4']:.3f} (last 4 iterations)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
