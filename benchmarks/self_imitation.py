"""Success-filtered self-imitation: does cloning the policy's own successes (found in the real simulator
or in a state model's world) lift it where GRPO's small steps do not?

Usage::

    python -m benchmarks.self_imitation --runs runs/s35/seed_5 runs/s34/seed_4 [--target 150]
        [--max-episodes 1500] [--std 0.1] [--rounds 1] [--init policy|scratch] [--steps N]
        [--object-dynamics od_arm [--refit-episodes 720] [--renderer renderer]] [--group 8 --hard-max 0.5]
        [--work DIR] [--jobs 2]
        --out FILE.json
    python -m benchmarks.self_imitation --quick --out FILE.json   # after benchmarks.imagination_lift --quick

The built-in suite's SFT policy is short of data: cloned from about 53 successful demos per task it
reaches about 0.40, and from 200 per task 0.81 (``policy_sft.json``). Its sampling also finds more than
its mean action does: at exploration std 0.1 a group of 8 holds a success on about 70% of starts
(``rl_headroom.json``). Success-filtered behaviour cloning (filtered BC; ReST / RAFT-style rejection
sampling with a binary reward) turns those successes into data. Per finished ``wmrl run`` folder (its
demos, SFT policy and SFT evaluation are reused, read only), and per round:

1. the current policy samples episodes (``--std``) from fresh real starts, task by task, until it has
   ``--target`` successes of that task or has finished ``--max-episodes`` episodes of it;
2. the run's SFT recipe (same config and seed; ``--steps`` optimiser steps, default the run's) clones
   the successful demos plus every success kept so far, fine-tuning the current policy
   (``--init policy``) or from a fresh initialisation (``--init scratch``);
3. the new policy is evaluated with the run's own protocol (the same 600 starts as its SFT evaluation),
   and set against SFT and the previous round episode by episode.

``--object-dynamics DIR`` collects in the world of the run's arm-and-object state model in ``DIR``
instead (:class:`benchmarks._split_worlds.StateModelVectorEnv`: real resets and drawing, the model's
dynamics, the task's rule on its predicted states as success): the model only picks which of the
policy's own samples are cloned, and no real env step is taken beyond the resets.

``--renderer NAME`` draws that world with the run's learned
:class:`worldmodels.state_renderer.StateRenderer` in ``NAME`` (``python -m worldmodels.state_renderer --data
RUN/data --out RUN/NAME``) instead of the simulator's renderer: every part of the world is then learned (the
dynamics, the success read off its states and the frames the policy sees and clones); the simulator gives
only each episode's real reset and its first frame, which the renderer draws from.

``--refit-episodes N`` lets that world co-evolve with the policy: before each round the state model is
fitted again (its own config and seed, from scratch) on the run's demos plus ``N`` real episodes of the
policy entering the round (``worldmodels.object_dynamics.policy_rollouts`` at ``--std``, env seed
``9000 + run seed + 100 * round``), into ``--work/<run>/self_imitation/world_R``; the round collects in
that world, and those real steps count in the round's. Round 0's refit of ``od_arm`` is the
``--policy RUN/sft/policy --policy-episodes N --policy-seed 9000+seed`` fit of
``python -m worldmodels.object_dynamics``.

``--group G`` targets the starts the policy mostly fails. Plain collection keeps successes in
proportion to how often each start succeeds, so most come from starts the policy already solves.
With ``--group`` every start is sampled ``G`` times (sub-envs reset with shared seeds), all
``--max-episodes`` are played, and one success is kept per start whose group success rate is at most
``--hard-max``, the hardest starts first, ``--target`` at most per task.

``--demos-only`` is the control: no collection, each round fine-tunes on the demos alone with the
same recipe, so the lift of the extra training by itself is measured.

Every real env step of the collection is counted (``real_env_steps``): GRPO's 380k-step lift in the
real simulator (``real_rl.json``) is the yardstick. Each round writes
``--work/<run>/self_imitation/round_R`` (successes.npz, the cloned policy and its training metrics)
and a stage record; a re-run resumes finished rounds.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._stats import paired_outcome_difference, run_keys

SUB_ENVS = 16  # sub-envs a task is played in


def check_group(group: int, num_envs: int = SUB_ENVS) -> None:
    """Raise a one-line error unless ``group`` is >= 1 and divides ``num_envs``."""
    from wmrl.errors import WmrlError

    if group < 1 or num_envs % group:
        divisors = ", ".join(str(d) for d in range(1, num_envs + 1) if num_envs % d == 0)
        raise WmrlError(f"--group {group} must divide the {num_envs} sub-envs a task is played in ({divisors})")


def collect_successes(
    policy: Any,
    task: str,
    target: int,
    max_episodes: int,
    std: float,
    seed: int,
    env_kwargs: dict,
    num_envs: int = SUB_ENVS,
    state_model: Any = None,
    group: int = 1,
    hard_max: float = 1.0,
    renderer: Any = None,
) -> tuple[Any | None, dict[str, float]]:
    """Sample ``policy`` (a copy, at exploration ``std``) on fresh starts of ``task`` until ``target``
    successes or ``max_episodes`` finished episodes. ``seed`` draws the starts and the policy's noise, so a
    collection repeats (the noise was drawn from the process's RNG before session 66).

    Args:
        state_model: None plays in the real simulator; an arm-and-object
            :class:`worldmodels.object_dynamics.ObjectDynamics` plays in its world instead
            (:class:`benchmarks._split_worlds.StateModelVectorEnv`: real resets and drawing, the model's
            dynamics, the task's rule on its predicted states as success).
        group: > 1 samples every start ``group`` times (sub-envs reset with shared seeds) and plays all
            ``max_episodes``; then one success is kept per start whose group succeeds at a rate in
            ``(0, hard_max]``, the hardest starts first, ``target`` at most. The starts the policy
            already solves then stop drowning out those it mostly fails. ``num_envs`` must be a
            multiple of ``group``.
        renderer: with ``state_model``, a learned :class:`worldmodels.state_renderer.StateRenderer` draws its
            world's frames (from each episode's real first frame) instead of the simulator.
    Returns:
        ``(successes, stats)``: the successful episodes (``wmrl.data.Trajectories``; None when there is
        none) and ``{"finished", "kept", "finished_success_rate", "env_steps", "real_env_steps"}``
        (``env_steps``: steps played; ``real_env_steps``: those of the real simulator's physics, 0 in the
        state model's world); with ``group`` > 1 also ``starts`` (starts all of whose samples finished),
        ``starts_solved`` (the fraction of them with a success) and ``kept_rate`` (the mean group
        success rate of the kept starts).
    """
    import torch

    import envs
    from imagination.coevolution import policy_chunk_fn, record_rollouts
    from imagination.trainer_utils import set_exploration_std

    check_group(group, num_envs)
    pol = copy.deepcopy(policy)
    set_exploration_std(std, pol)
    env = envs.make_vec(task, num_envs, **env_kwargs, autoreset_mode="same_step", seed=seed)
    if state_model is not None:
        from benchmarks._split_worlds import StateModelVectorEnv

        env = StateModelVectorEnv(env, state_model, seed=seed, renderer=renderer)
    reset_seed: int | list[int] = seed
    if group > 1:  # each run of `group` sub-envs shares a seed, so its k-th starts are alike
        starts = np.random.default_rng(seed).integers(0, 2**31 - 1, num_envs // group)
        reset_seed = [int(x) for x in np.repeat(starts, group)]
    try:
        with torch.random.fork_rng(devices=[]):  # the policy's noise is seeded too, the caller's RNG untouched
            torch.manual_seed(seed)
            traj, st = record_rollouts(
                env, policy_chunk_fn(pol), target if group == 1 else max_episodes, pol.chunk_size, seed=reset_seed,
                successes_only=True, max_finished=max_episodes, provenance=group > 1,
            )
    finally:
        env.close()
    stats = {
        "finished": st["finished"],
        "kept": st["episodes"],
        "finished_success_rate": st["finished_success_rate"],
        "env_steps": st["env_steps"],
        "real_env_steps": st["env_steps"] if state_model is None else float(env.real_sim_calls["prefix_steps"]),
    }
    if group > 1:
        keep, groups = hard_start_successes(st["finished_from"], st["kept_from"], group, hard_max, target)
        traj = traj.select_episodes([k for k, _ in keep]) if traj is not None and keep else None
        stats.update(kept=float(len(keep)), starts=float(len(groups)),
                     starts_solved=float(np.mean([r > 0 for r in groups.values()])) if groups else 0.0,
                     kept_rate=float(np.mean([r for _, r in keep])) if keep else math.nan)
    return traj, stats


def collect_round(
    policy: Any, tasks: list[str], r: int, seed: int, target: int, max_episodes: int, std: float, env_kwargs: dict,
    out: Path, **collect: Any,
) -> tuple[list[Any], dict[str, dict[str, float]]]:
    """Round ``r``'s collection of run seed ``seed``: :func:`collect_successes` of ``policy`` on each of ``tasks``
    (task ``ti`` on seed ``1000 * seed + 100 * r + ti + 77000``, so a round repeats), the successes written to
    ``out`` (a ``successes.npz``; an older one removed when none was found). ``collect``: the rest of
    :func:`collect_successes`'s keywords. Returns ``(each task's successes found, per-task statistics)``."""
    from wmrl.data import Trajectories, save_trajectories_npz

    parts, stats = [], {}
    for ti, task in enumerate(tasks):
        traj, stats[task] = collect_successes(policy, task, target, max_episodes, std,
                                              seed * 1000 + 100 * r + ti + 77_000, env_kwargs, **collect)
        if traj is not None:
            parts.append(traj)
    if parts:
        save_trajectories_npz(out, Trajectories.concat(parts))
    elif out.exists():
        out.unlink()
    return parts, stats


def hard_start_successes(
    finished_from: list[tuple[int, int, bool]], kept_from: list[tuple[int, int]], group: int, hard_max: float,
    target: int,
) -> tuple[list[tuple[int, float]], dict[tuple[int, int], float]]:
    """One success per start of a grouped play, from the starts the group mostly fails.

    Args:
        finished_from: ``(sub_env, ordinal, success)`` of every finished episode; sub-envs
            ``group * g .. group * g + group - 1`` share start ``(g, ordinal)``.
        kept_from: ``(sub_env, ordinal)`` of each recorded success, in recorded order.
        hard_max: the highest group success rate of a start whose success is kept.
    Returns:
        ``(keep, rates)``: ``keep`` lists ``(position in kept_from, the start's success rate)``, the
        lowest rates first (ties in recorded order), ``target`` at most; ``rates`` maps every start
        all ``group`` of whose samples finished to its success rate.
    """
    outcomes: dict[tuple[int, int], list[bool]] = {}
    for env_i, k, ok in finished_from:
        outcomes.setdefault((env_i // group, k), []).append(bool(ok))
    rates = {s: float(np.mean(o)) for s, o in outcomes.items() if len(o) == group}
    first: dict[tuple[int, int], int] = {}
    for pos, (env_i, k) in enumerate(kept_from):
        first.setdefault((env_i // group, k), pos)
    cands = [(pos, rates[s]) for s, pos in first.items() if s in rates and 0 < rates[s] <= hard_max]
    cands.sort(key=lambda x: (x[1], x[0]))
    return cands[:target], rates


def refit_world_dir(model_dir: Path, out: Path) -> Path:
    """Where :func:`refit_world` writes the state model of ``model_dir`` refitted into ``out``."""
    return out / model_dir.name


def refit_world(
    demos: Any, model_dir: Path, policy_dir: Path, episodes: int, std: float, seed: int, out: Path
) -> dict[str, Any]:
    """The state model in ``model_dir`` fitted again, with its own config and seed, on the ``demos``
    (``wmrl.data.Trajectories`` with environment states, or a function returning them, called only if a fit
    is needed) plus ``episodes`` real episodes of the policy in ``policy_dir`` (exploration ``std``, env seed ``seed``),
    into ``out/<model_dir's name>``; a finished fit there is kept (its episodes' record too). Returns
    ``{"model", "real_env_steps", "episodes", "real_success_rate"}`` (the policy's sampled success in the
    real simulator, the episodes' real steps)."""
    from benchmarks.fixed_starts import refit_state_models
    from wmrl.io import atomic_write_json
    from worldmodels.object_dynamics import policy_rollouts

    record = out / "policy_rollouts.json"
    target = refit_world_dir(model_dir, out)
    if not (record.is_file() and (target / "config.json").is_file()):
        demos = demos() if callable(demos) else demos
        roll, st = policy_rollouts(policy_dir, sorted(set(demos.task_ids)), int(demos.images.shape[1]), episodes,
                                   std, seed)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(record, {"policy": str(policy_dir), "std": std, "seed": seed, "episodes": int(st["episodes"]),
                                   "success_rate": float(st["success_rate"]), "env_steps": float(st["env_steps"])})
        refit_state_models(demos, [model_dir], [roll], out)  # demos then episodes, as the CLI's --policy fit
    rec = json.loads(record.read_text())
    return {"model": str(target), "real_env_steps": rec["env_steps"], "episodes": rec["episodes"],
            "real_success_rate": rec["success_rate"]}


def run_one(
    src: Path,
    dst: Path,
    target: int,
    max_episodes: int,
    std: float,
    rounds: int,
    init: str = "policy",
    steps: int | None = None,
    object_dynamics: str | None = None,
    group: int = 1,
    hard_max: float = 1.0,
    demos_only: bool = False,
    refit_episodes: int = 0,
    renderer: str | None = None,
    progress: bool = True,
    config_name: str = "run",
) -> dict[str, Any]:
    """Every round of self-imitation from ``src``'s SFT policy, in ``dst``; returns the summary. ``init``:
    each round fine-tunes the current ``policy`` or clones from ``scratch``; ``steps``: its optimiser
    steps (None: the run's SFT steps); ``object_dynamics``: the folder (in ``src``) of an arm-and-object
    state model to collect in instead of the real simulator (None: real); ``group`` / ``hard_max``: as
    :func:`collect_successes` takes them; ``demos_only``: the control, no collection (each round
    fine-tunes on the demos alone); ``refit_episodes`` > 0: before each round that state model is fitted
    again on the demos plus that many real episodes of the current policy (:func:`refit_world`); ``renderer``:
    the folder (in ``src``) of a learned state renderer that draws that world (None: the simulator draws it)."""
    from benchmarks.real_rl import _link_run, _seed_of
    from imagination.pipeline import Pipeline, load_run_config, run_config_of
    from policies import load_policy
    from wmrl.data import load_trajectories_npz

    seed = _seed_of(src)
    if steps is None:  # the run's own SFT steps (its config.yaml), not today's conf/run.yaml default
        steps = int(run_config_of(src).sft["steps"])
    model, model_dir = None, (src / object_dynamics if object_dynamics is not None else None)
    if object_dynamics is not None:
        from benchmarks._split_worlds import check_state_model
        from envs.tabletop.vector_env import STATE_DIM
        from worldmodels.object_dynamics import ObjectDynamics

        model = ObjectDynamics.from_pretrained(model_dir)
        check_state_model(model, STATE_DIM)  # before any work
    drawer = None
    if renderer is not None:
        from worldmodels.state_renderer import StateRenderer

        drawer = StateRenderer.from_pretrained(src / renderer)  # before any work: a missing one is a clear error
    _link_run(src, dst)
    cfg = load_run_config([f"run_dir={dst}", f"seed={seed}", "videos=0"], config_name)
    pipe = Pipeline(cfg, progress=progress)
    sft = json.loads((dst / "stages" / "eval_sft.json").read_text())
    policy, prev_eval = pipe.policy_after(-1), sft
    start = dst / "sft" / "policy"
    kept: list[Any] = []
    out_rounds = []
    for r in range(rounds):
        folder = dst / "self_imitation" / f"round_{r}"
        folder.mkdir(parents=True, exist_ok=True)
        refit: dict[str, Any] = {}
        if refit_episodes:  # the world fitted again on the policy entering this round
            world_dir = dst / "self_imitation" / f"world_{r}"
            refit = pipe.stage(f"self_imitation_world_{r}", lambda r=r, start=start, world_dir=world_dir: refit_world(
                pipe.trajectories, model_dir, start, refit_episodes, std, 9000 + seed + 100 * r, world_dir))
            # from this run's folder, not the record's path (relative to wherever the stage ran)
            model = ObjectDynamics.from_pretrained(refit_world_dir(model_dir, world_dir))

        def round_body(r: int = r, folder: Path = folder, policy: Any = policy, start: Path = start,
                       world: Any = model) -> dict:
            parts, stats = collect_round(policy, [] if demos_only else pipe.tasks(), r, seed, target, max_episodes,
                                         std, pipe.env_kwargs(), folder / "successes.npz", state_model=world,
                                         group=group, hard_max=hard_max, renderer=drawer)
            if not parts and not demos_only:  # the round clones the demos and earlier rounds' successes only
                warnings.warn(f"self-imitation round {r}: no success in {max_episodes} episodes of any task", stacklevel=2)
            train = pipe.train_sft(folder / "sft", steps, extra=[*kept, *parts] or None,
                                   init=start if init == "policy" else None)
            pol = load_policy(folder / "sft" / "policy", map_location=str(pipe.device))
            ev = pipe.evaluate(pol, f"self_imitation_round_{r}")
            return {"collection": stats, "real_env_steps": float(sum(s["real_env_steps"] for s in stats.values())),
                    "env_steps": float(sum(s["env_steps"] for s in stats.values())),
                    "sft_train_seconds": float(train.get("train_seconds", math.nan)),
                    "episodes_cloned": int(train.get("episodes", 0)), "eval": ev}

        res = pipe.stage(f"self_imitation_{r}", round_body)
        if (folder / "successes.npz").exists():
            kept.append(load_trajectories_npz(folder / "successes.npz"))
        start = folder / "sft" / "policy"
        policy = load_policy(start, map_location=str(pipe.device))
        ev = res["eval"]
        out_rounds.append({
            "round": r,
            "success": float(ev["success"]),
            "per_task": ev["per_task"],
            "vs_sft": paired_outcome_difference(ev["outcomes"], sft["outcomes"]),
            "vs_previous": paired_outcome_difference(ev["outcomes"], prev_eval["outcomes"]),
            "real_env_steps": res["real_env_steps"] + refit.get("real_env_steps", 0.0),
            **({"refit": {k: refit[k] for k in ("real_env_steps", "episodes", "real_success_rate", "model")}}
               if refit else {}),
            # a round finished before "env_steps" was recorded: in the real simulator they are the real steps
            "env_steps": float(res.get("env_steps", res["real_env_steps"] if model is None else math.nan)),
            "successes_kept": {t: s["kept"] for t, s in res["collection"].items()},
            "episodes_played": {t: s["finished"] for t, s in res["collection"].items()},
            "sampled_success": {t: s["finished_success_rate"] for t, s in res["collection"].items()},
            **({"starts_solved": {t: s["starts_solved"] for t, s in res["collection"].items()},
                "kept_rate": {t: s["kept_rate"] for t, s in res["collection"].items()}} if group > 1 else {}),
            "episodes_cloned": res["episodes_cloned"],
            "stage_time_s": float(res.get("stage_time_s", math.nan)),
        })
        prev_eval = ev
    return {
        "seed": seed,
        "sft_success": float(sft["success"]),
        "sft_per_task": sft.get("per_task", {}),
        "rounds": out_rounds,
        "final_success": out_rounds[-1]["success"],
        "lift": out_rounds[-1]["success"] - float(sft["success"]),
        "real_env_steps": float(sum(x["real_env_steps"] for x in out_rounds)),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", nargs="+", type=Path, default=None,
                   help="finished wmrl run folders, one per seed (quick: runs/imagination_lift_quick/seed_0)")
    p.add_argument("--target", type=int, default=150, help="successes to keep per task and round")
    p.add_argument("--max-episodes", type=int, default=1500, help="episodes played per task and round at most")
    p.add_argument("--std", type=float, default=0.1, help="exploration std the policy samples with")
    p.add_argument("--rounds", type=int, default=1, help="collect -> clone -> evaluate rounds")
    p.add_argument("--init", choices=("policy", "scratch"), default="policy",
                   help="each round fine-tunes the current policy (default) or clones from a fresh initialisation")
    p.add_argument("--steps", type=int, default=None, help="optimiser steps per round (default: the run's sft.steps)")
    p.add_argument("--object-dynamics", default=None, metavar="DIR",
                   help="collect in the world of this arm-and-object state model (a folder in each run, e.g. od_arm: "
                   "`python -m worldmodels.object_dynamics --arm`), drawn by the simulator; default: the real simulator")
    p.add_argument("--refit-episodes", type=int, default=0, metavar="N",
                   help="with --object-dynamics: before each round fit that state model again on the demos plus N "
                   "real episodes of the current policy (the world co-evolves with the policy; those steps count)")
    p.add_argument("--renderer", default=None, metavar="NAME",
                   help="with --object-dynamics: draw that world with this learned state renderer (a folder in each "
                   "run: `python -m worldmodels.state_renderer`) instead of the simulator, so every part is learned")
    p.add_argument("--group", type=int, default=1,
                   help="> 1: sample every start this many times, play all --max-episodes, and keep one success "
                   "per start whose group success rate is at most --hard-max, the hardest first (--target at most)")
    p.add_argument("--hard-max", type=float, default=1.0, help="with --group: the highest group success rate kept")
    p.add_argument("--demos-only", action="store_true",
                   help="the control: collect nothing; each round fine-tunes on the demos alone with the same recipe "
                   "(how much of a lift the extra training alone gives)")
    p.add_argument("--work", type=Path, default=None, help="default runs/self_imitation[_quick]")
    p.add_argument("--quick", action="store_true",
                   help="conf/run_quick.yaml runs, 2 successes and at most 12 episodes per task (CI smoke)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (spawned processes)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    import torch

    from benchmarks.real_rl import run_fields, run_pairs
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    torch.set_num_threads(1)
    if a.quick:
        a.target, a.max_episodes = 2, 12
    for name, v in (("--target", a.target), ("--max-episodes", a.max_episodes), ("--rounds", a.rounds),
                    ("--steps", 1 if a.steps is None else a.steps)):
        if v < 1:
            raise WmrlError(f"{name} {v} must be >= 1")
    if not a.std > 0:
        raise WmrlError(f"--std {a.std} must be > 0 (the policy samples; a mean action finds nothing new)")
    check_group(a.group)  # before any work
    if a.refit_episodes < 0 or (a.refit_episodes and (a.object_dynamics is None or a.demos_only)):
        raise WmrlError(f"--refit-episodes {a.refit_episodes} must be >= 0 and needs --object-dynamics (the state "
                        "model to fit again), without --demos-only (which collects in no world)")
    if a.renderer is not None and a.object_dynamics is None:
        raise WmrlError(f"--renderer {a.renderer} draws a state model's world; it needs --object-dynamics")
    if not 0 < a.hard_max <= 1:
        raise WmrlError(f"--hard-max {a.hard_max} must be in (0, 1]")
    config_name = "run_quick" if a.quick else "run"
    if a.runs is None:
        a.runs = [Path("runs/imagination_lift_quick/seed_0")] if a.quick else [Path("runs/imagination_lift/seed_0")]
    if a.work is None:
        a.work = Path("runs/self_imitation_quick" if a.quick else "runs/self_imitation")
    t0 = time.perf_counter()
    keys = dict(zip(a.runs, run_keys(a.runs), strict=True))
    results: dict[str, dict] = {}

    def done(src: Path, r: dict) -> None:
        results[keys[src]] = r
        print(f"{keys[src]}: SFT {r['sft_success']:.3f} -> self-imitation "
              f"{[round(x['success'], 3) for x in r['rounds']]} ({r['real_env_steps']:.0f} real env steps)", flush=True)

    args = {(s,): (s, a.work / keys[s], a.target, a.max_episodes, a.std, a.rounds, a.init, a.steps, a.object_dynamics,
                     a.group, a.hard_max, a.demos_only, a.refit_episodes, a.renderer)
            for s in a.runs}
    run_pairs(run_one, args, a.jobs, not a.no_progress, config_name, done)
    per_seed = {keys[s]: results[keys[s]] for s in a.runs}
    by_round = [
        {
            "round": r,
            "success": float(np.mean([v["rounds"][r]["success"] for v in per_seed.values()])),
            "lift": float(np.mean([v["rounds"][r]["success"] - v["sft_success"] for v in per_seed.values()])),
            "lift_per_seed": [v["rounds"][r]["success"] - v["sft_success"] for v in per_seed.values()],
            "real_env_steps_per_seed": [v["rounds"][r]["real_env_steps"] for v in per_seed.values()],
        }
        for r in range(a.rounds)
    ]
    res = {
        "benchmark": "self_imitation",
        "sft_success": float(np.mean([v["sft_success"] for v in per_seed.values()])),
        "final_success": float(np.mean([v["final_success"] for v in per_seed.values()])),
        "lift": float(np.mean([v["lift"] for v in per_seed.values()])),
        "by_round": by_round,
        "per_seed": per_seed,
        "target": a.target,
        "max_episodes": a.max_episodes,
        "std": a.std,
        "rounds": a.rounds,
        "init": a.init,
        "world": "real" if a.object_dynamics is None else f"state_model:{a.object_dynamics}",
        "renderer": a.renderer,  # None: the simulator draws the world
        "steps": a.steps,
        "group": a.group,
        "hard_max": a.hard_max,
        "demos_only": a.demos_only,
        "refit_episodes": a.refit_episodes,
        **run_fields(a, SUB_ENVS, config_name, t0),
    }
    atomic_write_json(a.out, res)
    print(f"self-imitation: SFT {res['sft_success']:.3f} -> {res['final_success']:.3f} (lift {res['lift']:+.3f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
