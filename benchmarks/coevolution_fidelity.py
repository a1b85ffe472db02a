"""Are the co-evolved state models more accurate where the policy goes?

Usage::

    python -m benchmarks.coevolution_fidelity --work runs/s50/coevo3_k12 [--held-out-starts-per-task 16]
        [--policies NAME ...] [--worlds NAME ...] [--jobs 3] --out FILE.json
    python -m benchmarks.coevolution_fidelity --quick --out FILE.json   # after benchmarks.fixed_starts --quick

``benchmarks.fixed_starts --coevolution-rounds R`` refits the branched world's state models each round on
the demos plus the co-evolving line's real pool rollouts (``sm_coevo_r``) and trains GRPO on in them, beside
a control that trains as long in the unchanged models (``sm_more_r``). The refit line scores higher on the
pool; this benchmark asks whether its worlds are also more faithful to the policies that train in them,
which is the reason co-evolution is meant to work (World-VLA-Loop).

For each finished run in a ``fixed_starts`` work folder (``--work``: each run's ``result.json``, the arms'
policies and the refitted models), every policy of the co-evolution lines (``sm_branch``, ``sm_coevo_r``, ``sm_more_r``) is
played with its mean action from two sets of starts: the result's pool (the starts the refits fitted on,
with other policies' actions) and ``--held-out-starts-per-task`` starts of each task no arm saw (reset seeds
``HELD_OUT_SEED_BASE + x``). From every start it plays once in the real simulator and once in each world:
the run's original state models (``original``) and each round's refitted ones (``refit_r``), branched from the
real state after the result's ``real_steps`` steps, as GRPO trained there (an ensemble that succeeds only
where every member does, advances with a random member and ends an episode as a failure once members
disagree by more than ``max_disagreement``; :func:`benchmarks.fixed_starts.state_model_world`).

Recorded per start set, policy and world: the world's success, the real success, their start-by-start
agreement, the world's false successes (per real failure) and missed ones (per real success), the share
of episodes the disagreement gate ended; and the members' open-loop errors on the policy's real episodes
(:func:`worldmodels.object_dynamics.evaluate_object_dynamics`, mean over members: one-step cube error
where a cube moves, cube error after 16 and 32 steps from the episode's start). ``paired`` gives, start by
start over all runs, each refitted world's agreement minus the original's (mean and standard error). A
policy's own rollouts are never in a world it is scored in unless that world was refitted after it played:
``refit_r`` fitted on the pool rollouts of ``sm_branch`` and ``sm_coevo_1 .. sm_coevo_(r-1)``
(``fitted_on`` in the result). The real pool outcomes are checked against the run's ``fixed_starts``
result (``real_pool_outcomes_match``: the mean action is deterministic).

With ``fixed_starts --data-control`` the work folder also holds the data control's line (``sm_demos_r``) and
its worlds (``demos_r``: the models refitted on the demos plus ``r`` x P scripted-expert episodes from the pool
starts, as many as ``refit_r``'s policy rollouts); they are scored too, and ``paired`` adds ``refit_r`` minus
``demos_r``: is a world fitted on the policy's own episodes more faithful than one fitted on as much expert
data? With ``fixed_starts --gate-control METRES`` it also holds that control's line (``sm_gate_r``: GRPO in
the original models behind a gate at METRES) and its world (``gate``), scored too; ``paired`` adds ``refit_r``
minus ``gate``: is a refitted world more faithful than the original models behind a quieter gate? With
``fixed_starts --warm-refit STEPS``, the warm-refit line (``sm_warm_r``) and its fine-tuned worlds (``warm_r``, on
the pool rollouts of ``sm_branch`` and ``sm_warm_1 .. sm_warm_(r-1)``); ``paired`` adds ``refit_r`` minus
``warm_r``.
``--policies`` / ``--worlds`` score a selection (the original world always).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")

HELD_OUT_SEED_BASE = 7_000_000  # far from the pools' seeds (run real-RL seed x 1_000_003 + start)
OPEN_LOOP_SCORES = ("one_step_error_moving_mean_m", "open_loop_error_step_16_m", "open_loop_error_step_32_m")


# a refitted world's kind -> the line whose round-r arm folder holds its state_models
WORLD_LINES = {"refit": "sm_coevo", "demos": "sm_demos", "warm": "sm_warm"}


def coevolution_names(
    rounds: int, data_control: bool = False, gate_control: bool = False, warm_refit: bool = False,
    lines: list[str] | None = None,
) -> tuple[list[str], list[str]]:
    """The co-evolution lines' policies (``sm_branch``, then ``sm_coevo_r`` and ``sm_more_r`` per round,
    ``sm_demos_r`` with the data control, ``sm_gate_r`` with the gate control, ``sm_warm_r`` with the warm refit)
    and the worlds (``original``, ``refit_1 .. refit_R``, ``demos_1 .. demos_R``: the models refitted on as many
    expert episodes, ``gate``: the original models behind the gate control's threshold, ``warm_1 .. warm_R``: the
    warm-refit line's fine-tuned models) of a result with ``rounds`` rounds; ``lines``: only those lines ran
    (``fixed_starts --lines``), and only their worlds."""
    from benchmarks.fixed_starts import configured_lines

    ran = [k for k in configured_lines(data_control, gate_control, warm_refit) if lines is None or k in lines]
    policies = ["sm_branch"] + [f"{k}_{r}" for r in range(1, rounds + 1) for k in ran]
    each = range(1, rounds + 1)
    worlds = ["original"] + ([f"refit_{r}" for r in each] if "sm_coevo" in ran else [])
    worlds += [f"demos_{r}" for r in each] if "sm_demos" in ran else []
    worlds += ["gate"] if "sm_gate" in ran else []
    return policies, worlds + ([f"warm_{r}" for r in each] if "sm_warm" in ran else [])


def world_folder(world: str) -> str | None:
    """The arm folder whose ``state_models`` a refitted world ``refit_r`` / ``demos_r`` / ``warm_r`` is (None: a
    world of the original models, ``original`` or ``gate``)."""
    if world in ("original", "gate"):
        return None
    kind, r = world.rsplit("_", 1)
    return f"{WORLD_LINES[kind]}_{r}"


def world_outcomes(
    policy: Any, make_world: Any, real: Any, seeds: list[int], horizon_chunks: int
) -> tuple[np.ndarray, float]:
    """``policy``'s mean action in the world ``make_world(real)`` from one start per sub-env of ``real`` (a
    same-step vector env of the built-in suite; reset seeds ``seeds``): each first episode's success (bool
    (N,)) within ``horizon_chunks`` chunks, and the share of episodes the ensemble's disagreement gate ended."""
    from benchmarks.state_model_ranking import first_episode_successes
    from envs.wrappers import ActionChunkWrapper

    world = make_world(real)
    env = ActionChunkWrapper(world, policy.chunk_size, frames="chunk_end")
    obs, info = env.reset(seed=list(seeds))
    succ = first_episode_successes(policy, env, obs, info, horizon_chunks)
    log, limit = getattr(world, "disagreement_log", None), getattr(world, "max_disagreement", None)
    if not log or limit is None:  # no ensemble gate (one model, or the real env itself)
        return succ, 0.0
    return succ, float(np.mean(np.nan_to_num(log[-1], nan=0.0) > limit))


def open_loop_scores(models: list[Any], traj: Any) -> dict[str, float | None]:
    """The members' mean open-loop errors (:data:`OPEN_LOOP_SCORES`, metres) on every episode of ``traj``."""
    from worldmodels.object_dynamics import evaluate_object_dynamics

    eps = np.arange(traj.num_episodes)
    per = [evaluate_object_dynamics(m, traj, eps) for m in models]
    return {
        k: (float(np.mean([p[k] for p in per])) if all(p.get(k) is not None for p in per) else None)
        for k in OPEN_LOOP_SCORES
    }


def measure_run(
    run: dict[str, Any],
    folder: Path,
    held_out_per_task: int,
    progress: bool = False,
    policies: list[str] | None = None,
    worlds: list[str] | None = None,
) -> dict[str, Any]:
    """One run of a ``fixed_starts`` result (``run``: its entry; ``folder``: its work folder): the co-evolution
    policies' real and in-world outcomes from the pool and the held-out starts (``policies`` / ``worlds``:
    those of :func:`coevolution_names`, or a selection of them)."""
    import torch
    from tqdm import tqdm

    import envs
    from benchmarks.fixed_starts import QUICK_MEMBERS, play_pool, quick_member_dir, state_model_world
    from benchmarks.state_model_rl import state_model_dir
    from imagination.pipeline import run_config_of, run_env_kwargs
    from policies import load_policy
    from worldmodels.object_dynamics import ObjectDynamics

    src = Path(run["run"])
    arm = run["state_model_arm"]
    rounds = int(arm.get("coevolution_rounds", 0))
    every_policy, every_world = coevolution_names(rounds, bool(arm.get("data_control")), arm.get("gate_control") is not None,
                                                  bool(arm.get("warm_refit")), arm.get("lines"))
    policies, worlds = policies or every_policy, worlds or every_world
    cfg = run_config_of(src)
    tasks = envs.resolve_tasks(cfg.suite)
    kwargs = run_env_kwargs(cfg)
    if arm["state_models"][0] == QUICK_MEMBERS[0]:  # fixed_starts --quick's tiny model(s), fitted in its work folder
        dirs = {"original": [quick_member_dir(folder, n) for n in arm["state_models"]]}
    else:
        dirs = {"original": [state_model_dir(src, n) for n in arm["state_models"]]}
    for w in worlds[1:]:  # refit_state_models' folders: the originals' names
        sub = world_folder(w)
        dirs[w] = dirs["original"] if sub is None else [folder / sub / "state_models" / d.name for d in dirs["original"]]
    models = {w: [ObjectDynamics.from_pretrained(d) for d in ds] for w, ds in dirs.items() if w != "gate"}
    if "gate" in dirs:  # the original models behind another gate: same members, same open-loop errors
        models["gate"] = models["original"]
    makers = {
        w: state_model_world(ds, arm["real_steps"], arm["gate_control"] if w == "gate" else arm["max_disagreement"],
                             arm.get("train_on", "all"))
        for w, ds in dirs.items()
    }
    held = held_out_per_task * len(tasks)
    start_sets = {
        "pool": (list(run["pool_task_ids"]), [int(s) for s in run["pool_seeds"]]),
        "held_out": (
            [tasks[x % len(tasks)] for x in range(held)],
            [HELD_OUT_SEED_BASE + x for x in range(held)],
        ),
    }
    out: dict[str, Any] = {"run": str(src), "worlds": {w: [str(d) for d in ds] for w, ds in dirs.items()}}
    bar = tqdm(
        total=len(start_sets) * len(policies) * (1 + len(worlds)),
        desc=f"fidelity {src.name}",
        disable=not progress,
    )
    for set_name, (task_ids, seeds) in start_sets.items():
        block: dict[str, Any] = {}
        for name in policies:
            policy = load_policy(folder / name / "policy")
            chunks = envs.full_episode_chunks(sorted(set(task_ids)), policy.chunk_size)
            with torch.no_grad():
                traj, _ = play_pool(policy, task_ids, seeds, kwargs)
                bar.update()
                entry: dict[str, Any] = {
                    "real": "".join(str(int(x)) for x in traj.episode_success),
                    "worlds": {},
                    "gated": {},
                    "open_loop": {},
                }
                for w in worlds:
                    real = envs.make_vec(task_ids, len(task_ids), autoreset_mode="same_step", **kwargs)
                    try:
                        succ, gated = world_outcomes(policy, makers[w], real, seeds, chunks)
                    finally:
                        real.close()
                    entry["worlds"][w] = "".join(str(int(x)) for x in succ)
                    entry["gated"][w] = gated
                    entry["open_loop"][w] = (
                        entry["open_loop"]["original"] if w == "gate" else open_loop_scores(models[w], traj)
                    )
                    bar.update()
            block[name] = entry
        out[set_name] = block
    bar.close()
    if "pool_outcomes" in run:
        out["real_pool_outcomes_match"] = {
            n: out["pool"][n]["real"] == run["pool_outcomes"][n]
            for n in policies
            if n in run["pool_outcomes"]
        }
    return out


def _bits(text: str) -> np.ndarray:
    return np.array(list(text), int)


def summarize(per_run: list[dict[str, Any]], policies: list[str], worlds: list[str]) -> dict[str, Any]:
    """Per start set, policy and world: success, agreement, false and missed success rates, gate share and
    open-loop errors (means over runs' starts); ``paired``: each refitted world's agreement minus the
    original's, and ``refit_r`` minus ``demos_r`` (minus ``gate``, minus ``warm_r``) where both are scored, start by start over
    all runs (mean and standard error). ``worlds[0]`` is the original models'."""
    summary: dict[str, Any] = {}
    paired: dict[str, Any] = {}
    for set_name in ("pool", "held_out"):
        s_block, p_block = {}, {}
        for name in policies:
            real = np.concatenate([_bits(r[set_name][name]["real"]) for r in per_run])
            per_world, agree = {}, {}
            for w in worlds:
                sim = np.concatenate([_bits(r[set_name][name]["worlds"][w]) for r in per_run])
                agree[w] = (sim == real).astype(float)
                ol = [r[set_name][name]["open_loop"][w] for r in per_run]
                per_world[w] = {
                    "world_success": float(sim.mean()),
                    "real_success": float(real.mean()),
                    "agreement": float(agree[w].mean()),
                    "false_success_rate": float(sim[real == 0].mean()) if (real == 0).any() else None,
                    "missed_success_rate": float(1 - sim[real == 1].mean()) if (real == 1).any() else None,
                    "gated_share": float(np.mean([r[set_name][name]["gated"][w] for r in per_run])),
                    **{
                        k: (float(np.mean([o[k] for o in ol])) if all(o[k] is not None for o in ol) else None)
                        for k in OPEN_LOOP_SCORES
                    },
                }
            s_block[name] = per_world
            pairs = [(w, worlds[0]) for w in worlds[1:]]
            pairs += [(w, f"demos_{w[6:]}") for w in worlds if w.startswith("refit_") and f"demos_{w[6:]}" in worlds]
            pairs += [(w, "gate") for w in worlds if w.startswith("refit_") and "gate" in worlds]
            pairs += [(w, f"warm_{w[6:]}") for w in worlds if w.startswith("refit_") and f"warm_{w[6:]}" in worlds]
            p_block[name] = {
                f"{a}-{b}": {
                    "diff": float((agree[a] - agree[b]).mean()),
                    "se": float((agree[a] - agree[b]).std(ddof=1) / np.sqrt(len(real))),
                    "starts": int(len(real)),
                }
                for a, b in pairs
            }
        summary[set_name], paired[set_name] = s_block, p_block
    return {"summary": summary, "paired": paired}


def _one(
    run: dict[str, Any],
    folder: Path,
    held_out_per_task: int,
    policies: list[str],
    worlds: list[str],
    progress: bool,
    config_name: str,
) -> dict[str, Any]:
    """:func:`measure_run` for ``benchmarks.real_rl.run_pairs`` (``config_name`` unused)."""
    return measure_run(run, folder, held_out_per_task, progress, policies, worlds)


def finished_runs(work: Path) -> dict[str, dict[str, Any]]:
    """The finished ``fixed_starts`` runs with co-evolution rounds under ``work``: ``{folder name: its
    result.json}``, all with one number of rounds; a one-line error if there are none or they differ, or a
    run folder lacks a policy or a round's refitted models."""
    from wmrl.errors import WmrlError

    runs: dict[str, dict[str, Any]] = {}
    for f in sorted(work.glob("*/result.json")):
        try:
            res = json.loads(f.read_text())
            rounds = int((res.get("state_model_arm") or {}).get("coevolution_rounds", 0))
        except (OSError, ValueError, TypeError, AttributeError) as e:
            raise WmrlError(f"{f}: not a readable benchmarks.fixed_starts run result ({e})") from e
        if rounds >= 1:
            runs[f.parent.name] = res
    if not runs:
        raise WmrlError(
            f"--work {work}: no finished run with co-evolution rounds (*/result.json); expected the --work folder "
            "of `python -m benchmarks.fixed_starts ... --coevolution-rounds R`"
        )
    rounds = {
        k: (
            r["state_model_arm"]["coevolution_rounds"],
            bool(r["state_model_arm"].get("data_control")),
            r["state_model_arm"].get("gate_control"),
            json.dumps(r["state_model_arm"].get("warm_refit")),  # a dict (steps, lr) or null, as hashable text
            json.dumps(r["state_model_arm"].get("lines")),
        )
        for k, r in runs.items()
    }
    if len(set(rounds.values())) > 1:
        raise WmrlError(
            f"--work {work}: its runs have different (co-evolution rounds, data control, gate control, warm refit, "
            f"lines) {rounds}; expected one"
        )
    for key in runs:
        n_rounds, data_control, gate, warm, lines = rounds[key]
        policies, worlds = coevolution_names(n_rounds, data_control, gate is not None, warm != "null", json.loads(lines))
        folder = work / key
        missing = [n for n in policies if not (folder / n / "policy").is_dir()]
        missing += [
            f"{world_folder(w)}/state_models"
            for w in worlds[1:]
            if world_folder(w) is not None and not (folder / world_folder(w) / "state_models").is_dir()
        ]
        if missing:
            raise WmrlError(
                f"--work {work}: {folder} lacks {', '.join(missing)}; expected a finished run folder"
            )
    return runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--work",
        type=Path,
        default=None,
        help="a benchmarks.fixed_starts --coevolution-rounds R work folder (default, --quick: "
        "runs/fixed_starts_quick, after benchmarks.fixed_starts --quick)",
    )
    p.add_argument(
        "--held-out-starts-per-task",
        type=int,
        default=None,
        help="starts per task no arm saw (default 16; quick 2)",
    )
    p.add_argument(
        "--policies",
        nargs="+",
        default=None,
        metavar="NAME",
        help="score only these policies (default: every co-evolution policy: sm_branch, sm_coevo_r, sm_more_r, "
        "sm_demos_r with the data control, sm_gate_r with the gate control)",
    )
    p.add_argument(
        "--worlds",
        nargs="+",
        default=None,
        metavar="NAME",
        help="score only in these worlds (default: every one: original, refit_r, demos_r with the data "
        "control, gate with the gate control); original is always scored",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="the quick fixed_starts run, 2 held-out starts per task (CI smoke)",
    )
    p.add_argument("--jobs", type=int, default=1, help="runs at once (spawned processes of one torch thread)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    import torch

    from benchmarks._stats import machine_info
    from benchmarks.real_rl import run_pairs
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    torch.set_num_threads(1)
    held = (2 if a.quick else 16) if a.held_out_starts_per_task is None else a.held_out_starts_per_task
    if held < 1 or a.jobs < 1:
        raise WmrlError(f"--held-out-starts-per-task {held} and --jobs {a.jobs} must be >= 1")
    if a.work is None and not a.quick:
        raise WmrlError("--work is needed (the fixed_starts --coevolution-rounds R work folder), or --quick")
    work = a.work or Path("runs/fixed_starts_quick")
    runs = finished_runs(work)
    first = next(iter(runs.values()))
    rounds = int(first["state_model_arm"]["coevolution_rounds"])
    data_control = bool(first["state_model_arm"].get("data_control"))
    gate_control = first["state_model_arm"].get("gate_control") is not None
    warm_refit = bool(first["state_model_arm"].get("warm_refit"))
    every_policy, every_world = coevolution_names(rounds, data_control, gate_control, warm_refit,
                                                  first["state_model_arm"].get("lines"))
    for flag, asked, known in (("--policies", a.policies, every_policy), ("--worlds", a.worlds, every_world)):
        bad = [n for n in asked or [] if n not in known]
        if bad:
            raise WmrlError(f"{flag} {' '.join(bad)}: not in this work folder; expected some of {', '.join(known)}")
    policies = [n for n in every_policy if n in (a.policies or every_policy)]
    worlds = ["original"] + [w for w in every_world[1:] if w in (a.worlds or every_world)]
    t0 = time.perf_counter()
    per_run: dict[str, dict] = {}
    run_pairs(
        _one,
        {(k,): (r, work / k, held, policies, worlds) for k, r in runs.items()},
        a.jobs,
        not a.no_progress,
        "",
        lambda key, r: per_run.__setitem__(key, r),
    )
    ordered = [per_run[k] for k in runs]
    out = {
        "benchmark": "coevolution_fidelity",
        "work": str(work),
        "runs": list(runs),
        "rl_seeds": {k: int(r.get("rl_seed", 0)) for k, r in runs.items()},
        "rounds": rounds,
        "state_model_arm": first["state_model_arm"],
        "policies": policies,
        "worlds": worlds,
        "fitted_on": {
            w: fitted
            for w, fitted in {
                **{f"refit_{r}": ["sm_branch"] + [f"sm_coevo_{q}" for q in range(1, r)] for r in range(1, rounds + 1)},
                **{f"demos_{r}": [f"expert_pool_{q}" for q in range(1, r + 1)] for r in range(1, rounds + 1)},
                **{f"warm_{r}": ["sm_branch"] + [f"sm_warm_{q}" for q in range(1, r)] for r in range(1, rounds + 1)},
            }.items()
            if w in every_world
        },
        "held_out_starts_per_task": held,
        "held_out_seed_base": HELD_OUT_SEED_BASE,
        **summarize(ordered, policies, worlds),
        "per_run": per_run,
        "quick": bool(a.quick),
        "wall_time_s": time.perf_counter() - t0,
        "machine": machine_info(),
    }
    atomic_write_json(a.out, out)
    for set_name in ("pool", "held_out"):
        for name in policies:
            row = out["summary"][set_name][name]
            print(
                f"{set_name:8s} {name:11s} real {row['original']['real_success']:.3f}  "
                + "  ".join(f"{w} {row[w]['world_success']:.3f}/{row[w]['agreement']:.3f}" for w in worlds)
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
