"""Fixed starts (LIBERO's protocol): RL that trains on, and is scored on, one fixed pool of starts.

Usage::

    python -m benchmarks.fixed_starts --runs runs/s47/seed_0 runs/s47/seed_1 runs/s47/seed_2
        [--starts-per-task 8] [--iterations 16] [--real-iterations 16] [--no-held-out] [--rl-seed N] [--jobs 2]
        [--state-models od_boot_100 od_boot_101 od_boot_102 [--real-steps 24] [--max-disagreement 0.025]
         [--train-on all|branch|prefix] [--renderer NAME]
         [--coevolution-rounds R [--data-control] [--gate-control METRES]
          [--warm-refit STEPS [--warm-refit-lr LR] [--warm-refit-failure-weight W] [--warm-refit-data all|latest]
           [--warm-refit-renderer STEPS]]
          [--lines LINE ...]]]
        [--work runs/fixed_starts] --out FILE.json
    python -m benchmarks.fixed_starts --quick --out FILE.json   # after benchmarks.imagination_lift --quick

LIBERO scores each task on 50 fixed initial states, and RL for VLAs on LIBERO (SimpleVLA-RL; WoVR's
39.9% -> 69.2%) trains from those same states. The main job's protocol is stricter: RL draws new
starts every iteration and is scored on 600 starts it never saw. This benchmark runs the other
protocol beside it, on finished ``wmrl run`` folders (read only; their round-0 world model, success
model, IDM and SFT policy):

* **The pool.** ``P = starts_per_task x tasks`` real starts. Start ``x`` is task ``tasks[x % T]``
  in the scene of seed ``s * 1_000_003 + x``, where ``s`` is the run's real-RL seed
  (``seed * 100 + 999``, plus ``1000 N`` with ``--rl-seed N``): the starts real GRPO with ``rl.start_pool=P`` trains on (its group slot
  ``g`` keeps task ``g`` and the starts ``x = g (mod groups)``).
* **SFT on the pool.** The SFT policy's mean action from every start, recorded (frames, proprio and
  environment states): its pool score, and the real trajectories imagination starts from.
* **Imagination arms.** GRPO in the run's world (its calibrated imagination config and gate) with
  ``rl.start_pool=P``; the group of start ``x`` starts from SFT's real episode from start ``x``
  (``ImaginedVectorEnv.pin_starts``). ``im_t0``: from its frame 0, for a full episode (the start
  the pool is scored on). ``im_kir``: from a keyframe inside it (the run's strategy and horizon).
  Real env steps: only the SFT pool episodes'.
* **Real arm.** ``real_pool``: GRPO in the real simulator with ``rl.start_pool=P``.
* **Branched state-model arm** (with ``--state-models NAME ...``): ``sm_branch``, GRPO with
  ``rl.start_pool=P`` in :class:`benchmarks._split_worlds.StateModelVectorEnv` (MBPO-style, as
  ``benchmarks.state_model_rl --real-steps K``): each episode's first ``--real-steps`` steps are the real
  simulator's, with the policy being trained, and the arm-and-object state model (the run's folders
  ``NAME``; several make an ensemble that succeeds only where every member does, advances with a random
  member, and ends an episode as a failure once two members disagree by more than
  ``--max-disagreement`` metres) goes on from the real state reached, drawn by the simulator, or with
  ``--renderer NAME`` by the run's learned :class:`worldmodels.state_renderer.StateRenderer` from the real
  frame the branch starts from (then every part of the branch is learned). Its real env steps are its
  prefixes'. ``--train-on branch`` (``prefix``) has GRPO train only on the model's (the real prefix's)
  chunks; every step still counts in the episode's outcome. ``--quick`` fits a tiny two-member ensemble on
  16 SFT episodes (and a tiny renderer with ``--renderer quick``).
* **Co-evolution on the pool** (``--coevolution-rounds R``; quick: 1, with the data and gate controls and the warm
  refit): after ``sm_branch``, each round
  plays the line's last policy on the pool in the real simulator, fits every state model again (its own
  config and seed) on the demos plus all the line's pool rollouts so far, and trains GRPO on from that
  policy for ``--real-iterations`` in the refitted world (``sm_coevo_r``). The control, ``sm_more_r``, trains
  as long from its own line's policy in the unchanged models, so the two differ in the refit alone. Their
  real env steps count the prefixes of every round and, for ``sm_coevo_r``, the pool rollouts fitted on.
  ``--data-control`` adds a third arm each round, ``sm_demos_r``: GRPO on from its own line in the state models
  fitted again on the demos plus as many scripted-expert episodes from the pool starts (the demos' noise
  levels) as ``sm_coevo_r`` fitted policy rollouts, so a gain of ``sm_coevo_r`` over it comes from the
  policy's own states, not from more real data (its real env steps count those expert episodes).
  ``--gate-control METRES`` (an ensemble) adds another, ``sm_gate_r``: GRPO on from its own line in the
  unchanged models with the disagreement gate at ``METRES`` instead of ``--max-disagreement``. The refits
  also quiet the gate (their members disagree less); a looser gate on the original models tests whether
  that alone gives their gain. ``--warm-refit STEPS`` adds a line that fine-tunes instead of refitting,
  ``sm_warm_r``: each round its previous state models (round 1: the originals) are fine-tuned for ``STEPS``
  steps (``--warm-refit-lr``, cosine) on the demos plus the line's own pool rollouts, as World-VLA-Loop
  fine-tunes its world model on the policy's rollouts; its real env steps count as ``sm_coevo_r``'s.
  ``--warm-refit-failure-weight W`` draws the line's failed pool rollouts W times as often in those fine-tunes (the
  issue's "failures weighted up", as the main job's co-evolution does; default 1: as often as the rest);
  ``--warm-refit-data latest`` fine-tunes on the demos plus the newest round's rollouts only.
  ``--warm-refit-renderer STEPS`` (with ``--renderer``) fine-tunes the line's learned renderer too, each round
  (round 1: the fitted one), for ``STEPS`` steps on the demos plus the newest round's pool rollouts (with their
  frames; half the draws, failures weighted as the state models'): the drawing co-evolves with the dynamics.
  ``--lines LINE ...`` runs only some of the lines (e.g. more rounds of ``sm_warm`` alone, resumed from a work
  folder whose other lines stop earlier).
* **Scores.** Every policy's mean action on the pool, and (unless ``--no-held-out``) the run's own
  held-out evaluation (its seeds, 600 episodes by default). The run's own policies are scored on the
  pool too: ``round_0`` (RL in imagination on new starts) and ``real_rl`` (its real-RL baseline).

Each run writes ``--work/<run key>/`` (the arms' RL folders, policies, a ``result.json``); a
re-run resumes its arms' RL from their checkpoints and skips finished runs. Each policy's pool play (states
and outcomes, no frames) is kept in ``pool_kept/`` and its held-out score beside it, so a run given more
co-evolution rounds (its ``result.json`` moved aside) plays only SFT and the new rounds' policies.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._stats import run_keys

ARMS = ("im_t0", "im_kir", "real_pool")
STATE_MODEL_ARM = "sm_branch"
# co-evolution rounds after sm_branch (arms NAME_r): GRPO on in the state models fitted again on the rounds' real
# pool rollouts, and the control, GRPO on in the unchanged state models
COEVOLUTION_ARMS = ("sm_coevo", "sm_more")
# the data control (--data-control): GRPO on in the state models fitted again on as many extra scripted-expert
# episodes from the pool starts as the co-evolving line's pool rollouts (more real data, not the policy's)
DATA_CONTROL_ARM = "sm_demos"
# the gate control (--gate-control METRES): GRPO on in the unchanged state models with the ensemble's disagreement
# gate at METRES (a quieter gate without refitting: does that alone give the refits' gain?)
GATE_CONTROL_ARM = "sm_gate"
# the warm refit (--warm-refit STEPS): GRPO on in the line's previous round's state models fine-tuned for STEPS steps
# on the demos plus the line's pool rollouts (World-VLA-Loop's fine-tune, instead of a fit from scratch)
WARM_REFIT_ARM = "sm_warm"
# --warm-refit's default peak learning rate (cosine to 0; a fit from scratch starts at 1e-3): the value of
# worldmodels.object_dynamics.WARM_REFIT_LR, written out so that this module imports without torch
WARM_REFIT_LR = 3e-4
# --warm-refit-renderer: the renderer's fine-tune, peak learning rate (cosine to 0; its fit starts at 2e-3) and the
# share of its draws from the newest pool rollouts (the rest: the demos)
RENDERER_REFIT_LR, RENDERER_REFIT_SHARE = 5e-4, 0.5
# --quick's tiny ensemble (names in the result's state_model_arm; folders: quick_member_dir)
QUICK_MEMBERS = ("quick", "quick_b")
QUICK_GATE_CONTROL = 0.035  # --quick's gate control (metres), the full runs' setting
QUICK_WARM_REFIT = 30  # --quick's warm refit (steps; its tiny models fit in 150)
QUICK_FAILURE_WEIGHT = 3.0  # --quick's warm refit up-weights the line's failures (as the main job's co-evolution)


WARM_REFIT_DATA = ("all", "latest")  # --warm-refit-data: the line's pool rollouts so far, or its newest round's only


@dataclasses.dataclass(frozen=True)
class WarmRefit:
    """The fine-tuned co-evolution line's recipe (``--warm-refit`` and its options): each round its previous state
    models are fine-tuned for ``steps`` steps from learning rate ``lr`` (cosine to 0) on the demos plus its pool
    rollouts: all of them so far (``data="all"``) or the newest round's only (``"latest"``), failed ones drawn
    ``failure_weight`` times as often. ``renderer_steps`` > 0: the line's learned renderer (a world drawn by one)
    is fine-tuned as well, for that many steps each round on the demos plus the newest round's rollouts
    (:func:`worldmodels.state_renderer.fine_tune_state_renderer`, ``RENDERER_REFIT_LR``, ``RENDERER_REFIT_SHARE``)."""

    steps: int
    lr: float = WARM_REFIT_LR
    failure_weight: float = 1.0
    data: str = "all"
    renderer_steps: int = 0

    def problems(self) -> list[str]:
        """What is wrong with it (one phrase each; empty when it is usable)."""
        out = [] if self.steps >= 1 else [f"steps {self.steps} must be >= 1"]
        if self.renderer_steps < 0:
            out.append(f"renderer_steps {self.renderer_steps} must be >= 0")
        if not (math.isfinite(self.lr) and self.lr > 0):
            out.append(f"lr {self.lr} must be > 0")
        if not (math.isfinite(self.failure_weight) and self.failure_weight > 0):
            out.append(f"failure_weight {self.failure_weight} must be > 0")
        if self.data not in WARM_REFIT_DATA:
            out.append(f"data {self.data!r} must be one of {', '.join(WARM_REFIT_DATA)}")
        return out

    def fine_tune_data(self, earlier: list[Any], newest: Any) -> list[Any]:
        """The pool rollouts a round's fine-tune reads besides the demos, as ``wmrl.data.Trajectories``: the
        ``earlier`` rounds' (as this returned them) and the ``newest`` round's, its failures weighted
        ``failure_weight``; the newest alone with ``data="latest"``. Pass its return as the next round's
        ``earlier``."""
        if self.failure_weight != 1.0:
            from imagination.coevolution import failure_weights

            newest = newest.with_weights(failure_weights(newest, self.failure_weight))
        return [*earlier, newest] if self.data == "all" else [newest]

    def record(self) -> dict[str, Any]:
        """As a result records it (options at their defaults left out, so older work folders resume)."""
        return {"steps": int(self.steps), "lr": float(self.lr),
                **({"failure_weight": float(self.failure_weight)} if self.failure_weight != 1.0 else {}),
                **({"data": self.data} if self.data != "all" else {}),
                **({"renderer_steps": int(self.renderer_steps)} if self.renderer_steps else {})}


def configured_lines(data_control: bool = False, gate_control: bool = False, warm_refit: bool = False) -> tuple[str, ...]:
    """The co-evolution lines a run has: the refit line and the control, then each configured control's."""
    return (COEVOLUTION_ARMS + ((DATA_CONTROL_ARM,) if data_control else ()) + ((GATE_CONTROL_ARM,) if gate_control else ())
            + ((WARM_REFIT_ARM,) if warm_refit else ()))


def quick_member_dir(work: Path, name: str) -> Path:
    """The folder of ``--quick``'s tiny ensemble member ``name`` in a run's work folder."""
    return work / f"state_model_{name}"


def pool_starts(tasks: list[str], starts_per_task: int, rl_seed: int) -> tuple[list[str], list[int]]:
    """The pool's task id and reset seed per start ``x`` (``P = starts_per_task * len(tasks)``)."""
    from imagination.grpo import group_seed

    p = starts_per_task * len(tasks)
    return [tasks[x % len(tasks)] for x in range(p)], [group_seed(rl_seed, x) for x in range(p)]


def play_pool(policy: Any, task_ids: list[str], seeds: list[int], env_kwargs: dict[str, Any],
              states_of: Any = None) -> tuple[Any, dict]:
    """``policy``'s mean action from every pool start, one sub-env per start: ``(Trajectories, stats)``
    with the episodes in start order (``traj.episode_success`` is the per-start outcome). ``states_of``:
    ``(unwrapped env) -> (() -> (N, S) states)`` recorded as the ``env_states`` (None: the env's own)."""
    import envs
    from imagination.coevolution import policy_chunk_fn, record_rollouts

    env = envs.make_vec(task_ids, len(task_ids), autoreset_mode="same_step", **env_kwargs)
    try:
        traj, st = record_rollouts(
            env,
            policy_chunk_fn(policy, deterministic=True),
            len(task_ids),
            policy.chunk_size,
            seed=list(seeds),
            first_episodes_only=True,
            env_state_fn=None if states_of is None else states_of(env.unwrapped),
        )
    finally:
        env.close()
    return traj, st


POOL_KEPT = "pool_kept"  # WORK/pool_kept/<policy name>.{npz,json}: each policy's pool play without frames


def pool_key(policy_dir: Path, task_ids: list[str], seeds: list[int], env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """What a kept pool play is valid for: the SHA-256 of the policy's weights in ``policy_dir``, the pool's
    starts (task ids and seeds, in order) and the env options they are played with."""
    import hashlib

    return {"policy_sha256": hashlib.sha256((policy_dir / "model.safetensors").read_bytes()).hexdigest(),
            "task_ids": list(task_ids), "seeds": [int(x) for x in seeds],
            "env_kwargs": json.loads(json.dumps(env_kwargs, default=str))}


def keep_pool_play(work: Path, name: str, key: dict[str, Any], traj: Any, stats: dict[str, Any]) -> tuple[Any, dict]:
    """Write policy ``name``'s pool play (``traj`` without its frames and terminal observations, and ``stats``) to
    ``work/pool_kept``, the trajectories first and the JSON with ``key`` last (atomically each: a stopped write is
    played again); the play as kept."""
    from wmrl.data import save_trajectories_npz
    from wmrl.io import atomic_write_json

    folder = work / POOL_KEPT
    folder.mkdir(parents=True, exist_ok=True)
    kept = dataclasses.replace(traj.without_frames(), terminal=None)
    save_trajectories_npz(folder / f"{name}.npz", kept)
    atomic_write_json(folder / f"{name}.json", {**key, "stats": stats})
    return kept, stats


def play_pool_kept(policy_dir: Path, name: str, task_ids: list[str], seeds: list[int], env_kwargs: dict[str, Any],
                   work: Path) -> tuple[Any, dict]:
    """:func:`play_pool` of the policy in ``policy_dir`` without its frames (``Trajectories.without_frames``) and
    terminal observations (neither is read by the state models' refits), kept in ``work/pool_kept/<name>`` with
    its :func:`pool_key` and read from there while the key is unchanged: a resumed run (e.g. one given more
    co-evolution rounds) does not play its finished policies again. The play is deterministic (mean action, seeded
    starts), so a kept one is the play itself."""
    from policies import load_policy
    from wmrl.data import load_trajectories_npz
    from wmrl.errors import DatasetError

    key = pool_key(policy_dir, task_ids, seeds, env_kwargs)
    meta = work / POOL_KEPT / f"{name}.json"
    if meta.is_file():
        try:
            kept = json.loads(meta.read_text())
            if all(kept.get(k) == v for k, v in key.items()) and "stats" in kept:
                traj = load_trajectories_npz(work / POOL_KEPT / f"{name}.npz")
                if traj.num_episodes == len(task_ids):
                    return traj.without_frames(), kept["stats"]  # the npz holds no terminal observations
        except (json.JSONDecodeError, DatasetError):
            pass  # a damaged keep is played again (and written anew)
    return keep_pool_play(work, name, key, *play_pool(load_policy(policy_dir), task_ids, seeds, env_kwargs))


def play_expert_pool(
    task_ids: list[str], seeds: list[int], env_kwargs: dict[str, Any], noise_levels: list[float], seed: int
) -> tuple[Any, dict]:
    """The built-in suite's scripted expert from every pool start, as the demos were collected: the pool split
    into ``len(noise_levels)`` consecutive parts, part ``j`` played at expert noise ``noise_levels[j]`` (noise
    seed ``seed + j``). ``(Trajectories, stats)`` as :func:`play_pool` (``first_episode_steps``: the real env
    steps of the kept episodes, all parts)."""
    import envs
    from imagination.coevolution import record_rollouts
    from wmrl.data import Trajectories

    if not noise_levels:
        raise ValueError("noise_levels is empty; expected the demos' expert noise levels, e.g. [0.0, 0.2, 0.4]")
    bounds = np.linspace(0, len(task_ids), len(noise_levels) + 1).round().astype(int)
    parts, steps = [], 0.0
    for j, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        if hi <= lo:
            continue
        env = envs.make_vec(task_ids[lo:hi], int(hi - lo), autoreset_mode="same_step", **env_kwargs)
        try:
            expert = envs.make_expert(env, noise=float(noise_levels[j]), seed=seed + j)
            # one action per call: every sub-env asks each step, so the expert's whole batch is the sub-batch
            traj, st = record_rollouts(env, lambda obs, instr, e=expert: e.act()[:, None, :], int(hi - lo), 1,
                                       seed=list(seeds[lo:hi]), first_episodes_only=True)
        finally:
            env.close()
        parts.append(traj)
        steps += st["first_episode_steps"]
    traj = Trajectories.concat(parts)
    return traj, {"episodes": float(len(traj.episode_success)), "success_rate": float(np.mean(traj.episode_success)),
                  "first_episode_steps": steps}


def held_out_key(policy_dir: Path, cfg: Any) -> dict[str, Any]:
    """What a kept held-out score is valid for: the SHA-256 of the policy's weights in ``policy_dir`` and the
    run's evaluation protocol (suite, ``cfg.eval``, render options)."""
    import hashlib

    protocol = {"suite": cfg.suite, "eval": dataclasses.asdict(cfg.eval), "render": cfg.render.env_kwargs()}
    return {"policy_sha256": hashlib.sha256((policy_dir / "model.safetensors").read_bytes()).hexdigest(),
            "protocol": json.loads(json.dumps(protocol, default=str))}


def held_out_eval(policy_dir: Path, cfg: Any) -> dict[str, Any]:
    """:func:`imagination.pipeline.evaluate_in_sim` of the policy in ``policy_dir``, kept beside it in
    ``held_out.json`` with its :func:`held_out_key`, and read from there while the key is unchanged (a
    resumed run does not score its finished policies again)."""
    from imagination.pipeline import evaluate_in_sim
    from policies import load_policy
    from wmrl.io import atomic_write_json

    key = held_out_key(policy_dir, cfg)
    cache = policy_dir.parent / "held_out.json"
    if cache.is_file():
        try:
            kept = json.loads(cache.read_text())
        except json.JSONDecodeError:
            kept = {}
        if all(kept.get(k) == v for k, v in key.items()) and "eval" in kept:
            return kept["eval"]
    ev = evaluate_in_sim(load_policy(policy_dir), cfg)
    atomic_write_json(cache, {**key, "eval": ev})
    return ev


def _grpo_config(cfg: Any, **changes: Any) -> Any:
    from wmrl.errors import ConfigError

    algo, rcfg = cfg.rl_config()
    if algo != "grpo":
        raise ConfigError(f"rl.algo={algo!r}: the fixed-start protocol cycles GRPO's start pool; expected grpo")
    return dataclasses.replace(rcfg, **changes)


def _train(env: Any, policy: Any, rcfg: Any, out: Path, progress: bool) -> list[dict]:
    """GRPO from ``policy`` (in place) in ``out/rl`` (resumable); saves ``out/policy``."""
    import copy

    from imagination.grpo import train_grpo
    from wmrl.runs import RunDir

    ref = copy.deepcopy(policy).requires_grad_(False) if rcfg.kl_coef > 0 else None
    run = RunDir(out / "rl", {"algo": "grpo", **dataclasses.asdict(rcfg)})
    hist = train_grpo(env, policy, rcfg, run=run, ref_policy=ref, progress=progress)
    policy.save_pretrained(out / "policy")
    return hist


def rl_seeds(cfg: Any, rl_seed: int) -> tuple[int, int]:
    """GRPO seeds ``(in imagination, in the real simulator)`` of a run: the main job's round 0 and real-RL
    baseline's for ``rl_seed`` 0, an independent repeat (other pool, starts and noise) for N > 0."""
    return cfg.seed * 100 + 1000 * rl_seed, cfg.seed * 100 + 999 + 1000 * rl_seed


def round_0_world(src: Path, cfg: Any) -> tuple[Any, Any, Any, Any]:
    """``(world model, success model, executability reward, imagination config)`` of ``src``'s round 0, as
    its RL in imagination saw them (object dynamics attached when enabled; the calibrated threshold)."""
    from imagination.pipeline import calibrated_imagination_config, round_models, round_object_dynamics

    od = round_object_dynamics(src, 0) if cfg.object_dynamics_config() else None
    return (*round_models(src, 0, od), calibrated_imagination_config(src, cfg))


def imagination_arm(
    src: Path, cfg: Any, world: tuple, keyframes: Any, strategy: str | None, starts: int, iterations: int, out: Path,
    progress: bool, rl_seed: int = 0,
) -> list[dict]:
    """GRPO in ``world`` (:func:`round_0_world`) from the pinned pool episodes ``keyframes`` (episode ``x``
    = start ``x``): ``strategy='start'`` from frame 0 for a full episode; None: the run's keyframe
    strategy and horizon."""
    import envs
    from imagination.grpo import group_seed
    from imagination.imagined_env import ImaginedVectorEnv
    from imagination.keyframes import KeyframeConfig
    from policies import load_policy

    tasks = envs.resolve_tasks(cfg.suite)
    wm, sm, exe, icfg = world
    policy = load_policy(src / "sft" / "policy")
    if strategy is not None:
        full = envs.full_episode_chunks(tasks, policy.chunk_size)
        icfg = dataclasses.replace(
            icfg, keyframes=KeyframeConfig(**{**icfg.keyframes.__dict__, "strategy": strategy}), horizon=full
        )
    rcfg = _grpo_config(cfg, seed=rl_seeds(cfg, rl_seed)[0], start_pool=starts, iterations=iterations,
                        max_chunks=icfg.horizon)
    env = ImaginedVectorEnv(wm, keyframes, success_model=sm, exec_reward=exe, task_ids=tasks, config=icfg, seed=cfg.seed)
    env.pin_starts({group_seed(rcfg.seed, x): x for x in range(starts)})
    hist = _train(env, policy, rcfg, out, progress)
    return hist


def real_arm(
    src: Path, cfg: Any, starts: int, iterations: int, out: Path, progress: bool, rl_seed: int = 0,
    world: Any = None, policy_dir: Path | None = None,
) -> list[dict]:
    """GRPO on the pool from the real simulator's starts (the run's real-RL layout, seed and reward).
    ``world``: None trains in the real simulator; else a function of the real (same-step) vector env
    returning the env GRPO trains in instead (:func:`state_model_world`). ``policy_dir``: the policy GRPO
    starts from (default: the run's SFT policy)."""
    import envs
    from envs.wrappers import ActionChunkWrapper
    from imagination.pipeline import real_rl_env, rl_task_layout
    from policies import load_policy

    tasks = envs.resolve_tasks(cfg.suite)
    policy = load_policy(policy_dir or src / "sft" / "policy")
    full = envs.full_episode_chunks(tasks, policy.chunk_size)
    rcfg = _grpo_config(cfg, seed=rl_seeds(cfg, rl_seed)[1], start_pool=starts, iterations=iterations, max_chunks=full)
    real = real_rl_env(cfg, rl_task_layout(tasks, cfg.real_rl_num_envs, rcfg.group_size))
    env = ActionChunkWrapper(real if world is None else world(real), policy.chunk_size, frames="chunk_end")
    try:
        return _train(env, policy, rcfg, out, progress)
    finally:
        env.close()


def state_model_world(
    model_dirs: list[Path], real_steps: int, max_disagreement: float | None, train_on: str = "all",
    renderer_dir: Path | None = None,
) -> Any:
    """A function of the real vector env returning the branched state-model world GRPO trains in:
    :class:`benchmarks._split_worlds.StateModelVectorEnv` with the state models in ``model_dirs`` (several:
    an ensemble, success on all members, a random member advancing, episodes ended as failures where the
    members disagree by more than ``max_disagreement`` metres), the first ``real_steps`` steps of each
    trained episode real (GRPO trains on first episodes only: no prefix after an autoreset). ``train_on``:
    the chunks GRPO trains on, ``all``, the model's ``branch`` or the real ``prefix``. ``renderer_dir``: a
    learned :class:`worldmodels.state_renderer.StateRenderer` draws the model's branches (from the real frame
    each starts from) instead of the simulator, so every part of the branch is learned; None: the
    simulator draws them."""
    from benchmarks._split_worlds import StateModelVectorEnv
    from worldmodels.object_dynamics import ObjectDynamics
    from worldmodels.state_renderer import StateRenderer

    models = [ObjectDynamics.from_pretrained(d) for d in model_dirs]
    renderer = None if renderer_dir is None else StateRenderer.from_pretrained(renderer_dir)

    def make(real: Any) -> Any:
        return StateModelVectorEnv(
            real, models if len(models) > 1 else models[0], max_disagreement=max_disagreement, gate="terminate",
            real_steps=real_steps, prefix_after_autoreset=False, train_on=train_on, renderer=renderer,
        )

    return make


def refit_state_models(
    demos: Any, dirs: list[Path], rollouts: list[Any], out: Path, fine_tune: tuple[int, float] | None = None
) -> list[Path]:
    """Each state model in ``dirs`` fitted again, with its own config and seed (a bootstrap member draws
    again), on the ``demos`` plus the real pool ``rollouts`` (``wmrl.data.Trajectories`` with environment
    states; ``demos`` may be a function returning them, called only if a fit is needed), into
    ``out/<its folder name>`` (a finished fit there is kept: resumable); the new folders. ``fine_tune``
    ``(steps, lr)``: each model is fine-tuned from its own weights for ``steps`` steps from learning rate ``lr``
    (cosine to 0) instead of fitted from scratch (its normalisation, sampling and seed kept)."""
    from wmrl.data import Trajectories
    from worldmodels.object_dynamics import ObjectDynamics, fine_tune_object_dynamics, fit_object_dynamics

    data, new = None, []
    for d in dirs:
        target = out / Path(d).name
        if not (target / "config.json").is_file():  # written last: a fit stopped half way is redone
            if data is None:
                data = Trajectories.concat([demos() if callable(demos) else demos, *rollouts])
            if fine_tune is None:
                model, metrics = fit_object_dynamics(data, ObjectDynamics.from_pretrained(d).config, progress=False)
            else:
                model, metrics = fine_tune_object_dynamics(data, d, *fine_tune)
            model.save_pretrained(target, metrics)
        new.append(target)
    return new


def refit_renderer(demos: Any, renderer_dir: Path, rollouts: Any | None, weights: np.ndarray, out: Path, steps: int,
                   replay: Any) -> Path:
    """The learned renderer in ``renderer_dir`` fine-tuned (:func:`worldmodels.state_renderer.fine_tune_state_renderer`,
    ``RENDERER_REFIT_LR``, ``RENDERER_REFIT_SHARE``) for ``steps`` steps on the ``demos`` (with frames; may be a
    function returning them) plus a round's pool ``rollouts`` (with frames; None: ``replay()`` plays them again,
    the policy's mean action from the same starts) drawn by their episode ``weights``, saved to ``out`` (a finished
    one there is kept, a fine-tune stopped half way goes on from its checkpoint in ``out/fit``); ``out``."""
    from worldmodels.state_renderer import StateRenderer, fine_tune_state_renderer

    if not (out / "config.json").is_file():  # written last
        rollouts = replay() if rollouts is None else rollouts
        model, metrics = fine_tune_state_renderer(
            StateRenderer.from_pretrained(renderer_dir), demos() if callable(demos) else demos,
            rollouts.with_weights(np.asarray(weights, np.float32)), steps, RENDERER_REFIT_LR, RENDERER_REFIT_SHARE,
            run_dir=out / "fit")
        model.save_pretrained(out, {**metrics, "fine_tuned_from": str(renderer_dir)})
    return out


def _arm_stats(hist: list[dict], t_arm: float) -> dict[str, Any]:
    """What a result records of one RL arm's history (``t_arm``: its start, ``time.perf_counter``)."""
    return {
        "rl_iterations": len(hist),
        "policy_updates": int(sum(1 for h in hist if not h.get("update_skipped"))),
        "train_env_steps": float(sum(h.get("env_steps", 0.0) for h in hist)),
        "train_success_by_iteration": [float(h.get("success_rate", np.nan)) for h in hist],
        "valid_frac_mean": float(np.mean([h.get("valid_frac", 1.0) for h in hist])) if hist else float("nan"),
        "real_prefix_steps": float(sum(h.get("real_prefix_steps", 0.0) for h in hist)),
        "rl_time_s": time.perf_counter() - t_arm,
    }


def _check_pool(cfg: Any, starts: int) -> None:
    from wmrl.errors import ConfigError

    rcfg = _grpo_config(cfg)
    groups = {
        "imagination": cfg.imagination_config().num_envs // rcfg.group_size,
        "real RL": cfg.real_rl_num_envs // rcfg.group_size,
    }
    need = math.lcm(*groups.values())
    if starts % need:
        raise ConfigError(
            f"a pool of {starts} starts: every group slot must keep its own starts, so the pool must be a "
            f"multiple of {need} (groups per iteration: {groups}); change --starts-per-task"
        )


def _stage_eval(src: Path, stage: str) -> dict[str, Any] | None:
    f = src / "stages" / f"{stage}.json"
    if not f.exists():
        return None
    d = json.loads(f.read_text())
    ev = d.get("eval", d)
    return {"success": float(ev["success"]), "per_task": ev.get("per_task", {}), "outcomes": ev.get("outcomes", {})}


def run_one(
    src: Path,
    work: Path,
    starts_per_task: int,
    iterations: int,
    real_iterations: int,
    held_out: bool = True,
    rl_seed: int = 0,
    state_models: tuple[str, ...] = (),
    real_steps: int = 24,
    max_disagreement: float | None = 0.025,
    quick_state_model: bool = False,
    train_on: str = "all",
    renderer: str | None = None,
    coevolution_rounds: int = 0,
    data_control: bool = False,
    gate_control: float | None = None,
    warm_refit: WarmRefit | None = None,
    only_lines: tuple[str, ...] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """The protocol on one run folder; written to ``work/result.json`` (returned as is when it exists).
    ``state_models``: the run's arm-and-object state model folders (names in ``src``) for the
    ``sm_branch`` arm (none: no such arm), with ``real_steps`` real steps per episode and, for an
    ensemble, ``max_disagreement``, GRPO training on ``train_on``'s chunks, and the branches drawn by the
    run's learned renderer ``renderer`` (a folder name in ``src``; None: by the simulator);
    ``quick_state_model``: the arm's model (and renderer, if any) is a tiny one fitted here
    (``benchmarks.state_model_rl.fit_quick_state_model``, ``state_model_ranking.fit_quick_renderer``) instead.
    ``coevolution_rounds`` R: after ``sm_branch``, R rounds of two arms each, both ``real_iterations`` more of
    GRPO from the previous round's policy (round 1: ``sm_branch``'s): ``sm_coevo_r`` in the state models fitted
    again (:func:`refit_state_models`) on the demos plus the real pool rollouts of every earlier policy of
    its line (World-VLA-Loop's co-evolution), and ``sm_more_r`` in the unchanged ones (the control).
    ``data_control``: a third arm each round, ``sm_demos_r``, GRPO on from its own line's policy in the state
    models fitted again on the demos plus as many scripted-expert episodes from the pool starts
    (:func:`play_expert_pool`, the demos' noise levels, new noise each round) as ``sm_coevo_r`` had policy
    rollouts: as much more real data, not the policy's. ``gate_control`` METRES: another arm each round,
    ``sm_gate_r``, GRPO on from its own line's policy in the unchanged state models with the ensemble's gate at
    METRES instead of ``max_disagreement``: a quieter (or stricter) gate without refitting. ``warm_refit``
    (:class:`WarmRefit`): another line each round, ``sm_warm_r``, GRPO on from its own line's policy in that line's
    previous state models (round 1: the originals) fine-tuned for ``steps`` steps from learning rate ``lr`` on the
    demos plus the line's own pool rollouts (:func:`refit_state_models` ``fine_tune``): by default the same data as
    ``sm_coevo_r``'s refit, a fine-tune instead of a fit from scratch; its ``data="latest"`` fine-tunes on the newest
    round's rollouts only, its ``failure_weight`` draws the failed ones that many times as often. ``only_lines``: the
    co-evolution lines to run (names from ``sm_coevo``, ``sm_more`` and the configured controls' ``sm_demos``,
    ``sm_gate``, ``sm_warm``; None: all of them), e.g. more rounds of one line from a work folder whose other lines
    stop earlier."""
    import envs
    from imagination.pipeline import evaluate_in_sim, run_config_of, run_env_kwargs
    from policies import load_policy
    from wmrl.data import load_trajectories
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    t0 = time.perf_counter()
    cfg = run_config_of(src)
    tasks = envs.resolve_tasks(cfg.suite)
    starts = starts_per_task * len(tasks)
    done = work / "result.json"
    sm_arm = None
    if state_models or quick_state_model:
        names = list(QUICK_MEMBERS) if quick_state_model else list(state_models)
        sm_arm = {"state_models": names, "real_steps": int(real_steps),
                  "max_disagreement": None if len(names) < 2 else max_disagreement,
                  **({"train_on": train_on} if train_on != "all" else {}),
                  **({"renderer": "quick" if quick_state_model else renderer} if renderer else {}),
                  **({"coevolution_rounds": int(coevolution_rounds)} if coevolution_rounds else {}),
                  **({"data_control": True} if data_control else {}),
                  **({"gate_control": float(gate_control)} if gate_control is not None else {}),
                  **({"warm_refit": warm_refit.record()} if warm_refit else {}),
                  **({"lines": list(only_lines)} if only_lines is not None else {})}
    elif coevolution_rounds:
        raise WmrlError(f"coevolution_rounds={coevolution_rounds} goes on from the sm_branch arm; it needs state models")
    if data_control and not coevolution_rounds:
        raise WmrlError("data_control=True is a third arm of each co-evolution round; it needs coevolution_rounds >= 1")
    if gate_control is not None and not (coevolution_rounds and sm_arm["max_disagreement"] is not None):
        raise WmrlError(f"gate_control={gate_control} is an arm of each co-evolution round in an ensemble's gated "
                        "world; it needs coevolution_rounds >= 1 and 2 or more state models")
    if warm_refit is not None:
        problems = warm_refit.problems() or ([] if coevolution_rounds else ["needs coevolution_rounds >= 1"])
        if problems:
            raise WmrlError(f"{warm_refit}: {'; '.join(problems)} (it is a line of each co-evolution round)")
        if warm_refit.renderer_steps and not renderer:
            raise WmrlError(f"{warm_refit}: renderer_steps={warm_refit.renderer_steps} fine-tunes the learned renderer "
                            "that draws the line's world; it needs a renderer")
    configured = configured_lines(data_control, gate_control is not None, bool(warm_refit))
    if only_lines is not None and not (coevolution_rounds and only_lines and set(only_lines) <= set(configured)):
        raise WmrlError(f"only_lines={list(only_lines)}: expected some of the configured lines {', '.join(configured)} "
                        "and coevolution_rounds >= 1")
    if done.exists():
        res = json.loads(done.read_text())
        asked = {"iterations": iterations, "real_iterations": real_iterations, "rl_seed": rl_seed, "starts": starts,
                 "held_out": held_out, "state_model_arm": sm_arm}
        had = {**{k: res.get(k) for k in asked}, "rl_seed": res.get("rl_seed", 0), "held_out": bool(res["held_out"])}
        if had != asked:
            raise WmrlError(f"{done} holds a result for {had}; this run asks for {asked}: use another --work")
        return res
    _check_pool(cfg, starts)
    for need in ("sft/policy", "world_model/model", "rewards/success", "rewards/executability"):
        if not (src / need).exists():
            raise WmrlError(f"{src / need} not found; expected a finished wmrl run folder (run `wmrl run` first)")
    work.mkdir(parents=True, exist_ok=True)
    env_kwargs = run_env_kwargs(cfg)
    task_ids, seeds = pool_starts(tasks, starts_per_task, rl_seeds(cfg, rl_seed)[1])
    sft = load_policy(src / "sft" / "policy")
    keyframes, sft_stats = play_pool(sft, task_ids, seeds, env_kwargs)

    policies: dict[str, Path] = {"sft": src / "sft" / "policy"}
    for name in ("round_0", "real_rl"):
        if (src / name / "policy").exists():
            policies[name] = src / name / "policy"
    pixel_world = round_0_world(src, cfg)  # the imagination arms'
    arms: dict[str, Any] = {}
    quick_fit_steps = 0.0
    dirs: list[Path] = []  # the sm_branch arm's state models (none without that arm)
    drawer: Path | None = None  # and its learned renderer (None: the simulator draws)
    for arm in ARMS + ((STATE_MODEL_ARM,) if sm_arm else ()):
        out = work / arm
        t_arm = time.perf_counter()
        if arm == "real_pool":
            hist = real_arm(src, cfg, starts, real_iterations, out, progress, rl_seed)
        elif arm == STATE_MODEL_ARM:
            from benchmarks.state_model_rl import fit_quick_state_model, state_model_dir

            if quick_state_model:  # a two-member ensemble (so the gate and the gate control run) on one set of episodes
                fits = [fit_quick_state_model(src, quick_member_dir(work, n), None if k == 0 else k)
                        for k, n in enumerate(QUICK_MEMBERS)]
                dirs, quick_fit_steps = [d for d, _ in fits], fits[0][1]  # both members fit the same episodes
            else:
                dirs = [state_model_dir(src, n) for n in state_models]
            if renderer and quick_state_model:
                from benchmarks.state_model_ranking import fit_quick_renderer

                drawer = work / "renderer_quick"
                fit_quick_renderer(src, drawer)
            elif renderer:
                drawer = src / renderer
            make = state_model_world(dirs, sm_arm["real_steps"], sm_arm["max_disagreement"], train_on, drawer)
            hist = real_arm(src, cfg, starts, real_iterations, out, progress, rl_seed, world=make)
        else:
            strategy = "start" if arm == "im_t0" else None
            hist = imagination_arm(src, cfg, pixel_world, keyframes, strategy, starts, iterations, out, progress, rl_seed)
        policies[arm] = out / "policy"
        arms[arm] = _arm_stats(hist, t_arm)
    played: dict[str, tuple] = {}  # policy name -> its pool episodes (Trajectories, stats)
    real_steps_of: dict[str, float] = {}
    if sm_arm:  # the branched arm's real prefixes (and the quick model's fitting episodes)
        real_steps_of[STATE_MODEL_ARM] = arms[STATE_MODEL_ARM]["real_prefix_steps"] + quick_fit_steps
    rollouts: list[Any] = []  # the co-evolving line's real pool rollouts so far
    # read once, and only if a round refits; the refits read states, not pixels: every dataset kept for them drops
    # its frames (Trajectories.without_frames; at round 5 of a 96-start pool at 64 px, a worker's peak memory
    # for these datasets and a refit's concatenation fell from 2.3 to 1.3 GB)
    demos = functools.cache(lambda: load_trajectories(src / "data").without_frames())
    demos_framed = functools.cache(lambda: load_trajectories(src / "data"))  # a renderer fine-tune's (read if one runs)
    expert_rollouts: list[Any] = []  # the data control's extra expert pool episodes so far
    expert_steps = 0.0
    expert_success: list[float] = []  # the expert's success on the pool, by round (what the control refits on)
    warm_rollouts: list[Any] = []  # the pool rollouts the warm-refit line's last fine-tune read (WarmRefit.fine_tune_data)
    warm_dirs = dirs  # the warm-refit line's state models: round r fine-tunes round r - 1's
    warm_drawer = drawer  # and its renderer (with renderer_steps: round r fine-tunes round r - 1's)
    lines = tuple(k for k in configured_lines(data_control, gate_control is not None, bool(warm_refit))
                  if only_lines is None or k in only_lines)
    gate = sm_arm["max_disagreement"] if sm_arm else None
    for r in range(1, coevolution_rounds + 1):
        coevo, more = (f"{k}_{r}" for k in COEVOLUTION_ARMS)
        prev = {k: STATE_MODEL_ARM if r == 1 else f"{k}_{r - 1}" for k in lines}
        worlds = []
        if "sm_coevo" in lines:
            played[prev["sm_coevo"]] = play_pool_kept(policies[prev["sm_coevo"]], prev["sm_coevo"], task_ids, seeds,
                                                      env_kwargs, work)
            rollouts.append(played[prev["sm_coevo"]][0])
            worlds.append((coevo, "sm_coevo", refit_state_models(demos, dirs, rollouts, work / coevo / "state_models"),
                           gate, drawer))
        if "sm_more" in lines:
            worlds.append((more, "sm_more", dirs, gate, drawer))
        if DATA_CONTROL_ARM in lines:
            noise = [float(x) for x in cfg.demos.noise]
            traj, st = play_expert_pool(task_ids, seeds, env_kwargs, noise, seed=rl_seeds(cfg, rl_seed)[1] + 7919 * r)
            expert_rollouts.append(traj.without_frames())
            del traj
            expert_steps = st["first_episode_steps"]
            expert_success.append(float(st["success_rate"]))
            name = f"{DATA_CONTROL_ARM}_{r}"
            worlds.append((name, DATA_CONTROL_ARM,
                           refit_state_models(demos, dirs, expert_rollouts, work / name / "state_models"), gate, drawer))
        if GATE_CONTROL_ARM in lines:
            worlds.append((f"{GATE_CONTROL_ARM}_{r}", GATE_CONTROL_ARM, dirs, float(gate_control), drawer))
        if WARM_REFIT_ARM in lines:
            name = f"{WARM_REFIT_ARM}_{r}"
            framed = None  # the round's pool rollouts with their frames, if the renderer's fine-tune reads them
            if prev[WARM_REFIT_ARM] not in played:  # round 1 starts from sm_branch, played above if sm_coevo runs
                p_prev = policies[prev[WARM_REFIT_ARM]]
                if warm_refit.renderer_steps and not (work / name / "renderer" / "config.json").is_file():
                    # the round's renderer fine-tune reads the frames: played, and kept without them
                    framed, st = play_pool(load_policy(p_prev), task_ids, seeds, env_kwargs)
                    played[prev[WARM_REFIT_ARM]] = keep_pool_play(
                        work, prev[WARM_REFIT_ARM], pool_key(p_prev, task_ids, seeds, env_kwargs), framed, st)
                else:
                    played[prev[WARM_REFIT_ARM]] = play_pool_kept(p_prev, prev[WARM_REFIT_ARM], task_ids, seeds,
                                                                  env_kwargs, work)
            warm_rollouts = warm_refit.fine_tune_data(warm_rollouts, played[prev[WARM_REFIT_ARM]][0])
            warm_dirs = refit_state_models(demos, warm_dirs, warm_rollouts, work / name / "state_models",
                                           fine_tune=(warm_refit.steps, warm_refit.lr))
            if warm_refit.renderer_steps:
                warm_drawer = refit_renderer(demos_framed, warm_drawer, framed, warm_rollouts[-1].episode_weights,
                                             work / name / "renderer", warm_refit.renderer_steps,
                                             lambda p=policies[prev[WARM_REFIT_ARM]]: play_pool(
                                                 load_policy(p), task_ids, seeds, env_kwargs)[0])
            del framed
            worlds.append((name, WARM_REFIT_ARM, warm_dirs, gate, warm_drawer))
        for name, kind, world_dirs, world_gate, world_drawer in worlds:
            t_arm = time.perf_counter()
            make = state_model_world(world_dirs, sm_arm["real_steps"], world_gate, train_on, world_drawer)
            hist = real_arm(src, cfg, starts, real_iterations, work / name, progress, rl_seed, world=make,
                            policy_dir=policies[prev[kind]])
            policies[name] = work / name / "policy"
            arms[name] = _arm_stats(hist, t_arm)
            # every real step of the line: the rounds' prefixes and, for co-evolution, the pool rollouts fitted on
            used = arms[name]["real_prefix_steps"]
            if kind in ("sm_coevo", WARM_REFIT_ARM):
                used += float(played[prev[kind]][1]["first_episode_steps"])
            elif kind == DATA_CONTROL_ARM:
                used += expert_steps
            real_steps_of[name] = real_steps_of[prev[kind]] + used
    pool_outcomes: dict[str, list[int]] = {"sft": [int(x) for x in keyframes.episode_success]}
    held: dict[str, Any] = {}
    for name, folder in policies.items():
        if name != "sft":
            outcome = (played.get(name) or play_pool_kept(folder, name, task_ids, seeds, env_kwargs, work))[0].episode_success
            pool_outcomes[name] = [int(x) for x in outcome]
        if held_out:
            stage = {"sft": "eval_sft", "round_0": "round_0", "real_rl": "real_rl"}.get(name)
            # the work folder's policies keep their score (resumable); the run folder is only read
            held[name] = (_stage_eval(src, stage) if stage else None) or (
                held_out_eval(folder, cfg) if folder.is_relative_to(work) else evaluate_in_sim(load_policy(folder), cfg))
    res = {
        "run": str(src),
        "seed": int(cfg.seed),
        "starts": starts,
        "pool_task_ids": task_ids,
        "pool_seeds": seeds,
        "pool_success": {k: float(np.mean(v)) for k, v in pool_outcomes.items()},
        "pool_outcomes": {k: "".join(map(str, v)) for k, v in pool_outcomes.items()},
        "held_out_success": {k: v["success"] for k, v in held.items()},
        "held_out": held,
        "arms": arms,
        "real_env_steps": {
            "sft_pool_episodes": float(sft_stats["first_episode_steps"]),
            "real_pool": arms["real_pool"]["train_env_steps"],
            **real_steps_of,
        },
        "state_model_arm": sm_arm,
        **({"expert_pool_success": expert_success} if DATA_CONTROL_ARM in lines else {}),
        "iterations": iterations,
        "real_iterations": real_iterations,
        "rl_seed": rl_seed,
        "wall_time_s": time.perf_counter() - t0,
        # the process's peak resident memory (Linux: kB), for sizing --jobs; a worker's own with --jobs > 1
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
    }
    atomic_write_json(done, res)
    return res


def _outcomes(run: dict[str, Any], field: str, name: str) -> np.ndarray:
    """Policy ``name``'s 0/1 outcomes in one run's result: on the pool (start order), or held out (tasks sorted)."""
    if field == "pool_outcomes":
        text = run[field][name]
    else:
        per_task = run["held_out"][name]["outcomes"]
        text = "".join(per_task[t] for t in sorted(per_task))
    return np.array(list(text), int)


def _paired(per_run: list[dict[str, Any]], field: str, a: str, b: str) -> dict[str, float]:
    """Mean over runs of ``b - a`` and the standard error of the per-episode paired differences."""
    d = np.concatenate([_outcomes(r, field, b) - _outcomes(r, field, a) for r in per_run]).astype(float)
    return {"diff": float(d.mean()), "se": float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan"),
            "episodes": int(len(d))}


def summarize(per_run: list[dict[str, Any]]) -> dict[str, Any]:
    """Means over runs, and each policy's paired difference from SFT on the pool and held out (and, with the
    data control, the mean success of its scripted-expert pool episodes by round)."""
    names = list(per_run[0]["pool_success"])
    out: dict[str, Any] = {"pool_success": {}, "pool_vs_sft": {}, "held_out_success": {}, "held_out_vs_sft": {}}
    for n in names:
        if all(n in r["pool_success"] for r in per_run):
            out["pool_success"][n] = float(np.mean([r["pool_success"][n] for r in per_run]))
            if n != "sft":
                out["pool_vs_sft"][n] = _paired(per_run, "pool_outcomes", "sft", n)
        if all(n in r["held_out"] and r["held_out"][n].get("outcomes") for r in per_run):
            out["held_out_success"][n] = float(np.mean([r["held_out"][n]["success"] for r in per_run]))
            if n != "sft":
                out["held_out_vs_sft"][n] = _paired(per_run, "held_out", "sft", n)
    if all(r.get("expert_pool_success") for r in per_run):  # the data control's expert episodes, by round
        out["expert_pool_success"] = [float(x) for x in np.mean([r["expert_pool_success"] for r in per_run], 0)]
    return out


def _one(*args: Any, progress: bool, config_name: str) -> dict[str, Any]:
    """:func:`run_one` for ``benchmarks.real_rl.run_pairs`` (the run's own config; ``config_name`` unused)."""
    return run_one(*args, progress=progress)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", nargs="+", type=Path, default=None,
                   help="finished wmrl run folders, one per seed (default runs/imagination_lift/seed_{0,1,2}; "
                   "quick: runs/imagination_lift_quick/seed_0)")
    p.add_argument("--starts-per-task", type=int, default=None, help="pool starts per task (default 8, quick 2; LIBERO: 50)")
    p.add_argument("--iterations", type=int, default=None, help="GRPO iterations in imagination (default: the run's)")
    p.add_argument("--real-iterations", type=int, default=None, help="GRPO iterations of the arms that start in the real simulator: real_pool and sm_branch (default: the run's)")
    p.add_argument("--no-held-out", action="store_true", help="score on the pool only")
    p.add_argument("--rl-seed", type=int, default=0,
                   help="> 0: an independent repeat with another pool, GRPO starts and noise (folders KEY_rlseedN)")
    p.add_argument("--state-models", nargs="+", default=[], metavar="NAME",
                   help="also the sm_branch arm: GRPO on the pool in the run's arm-and-object state model(s) NAME "
                   "(folders in each run; several: an ensemble), branched from real prefixes")
    p.add_argument("--real-steps", type=int, default=24, metavar="K",
                   help="sm_branch: the real simulator's steps at the start of each episode (default 24)")
    p.add_argument("--max-disagreement", type=float, default=0.025, metavar="METRES",
                   help="sm_branch with an ensemble: an episode ends as a failure once two members' tcp or cube "
                   "predictions lie further apart (default 0.025)")
    p.add_argument("--train-on", default="all", choices=("all", "branch", "prefix"),
                   help="sm_branch: the chunks GRPO trains on: all, the model's branches only, or the real "
                   "prefixes only (scored by where the model's branch ends)")
    p.add_argument("--renderer", default=None, metavar="NAME",
                   help="sm_branch: a learned state renderer's folder in each run draws the model's branches "
                   "(from the real frame each starts from) instead of the simulator: a world of learned parts "
                   "(with --quick: a tiny one fitted here, NAME 'quick')")
    p.add_argument("--coevolution-rounds", type=int, default=None, metavar="R",
                   help="after sm_branch, R co-evolution rounds: GRPO goes on (--real-iterations each) in the state "
                   "models fitted again on the demos plus the line's real pool rollouts (sm_coevo_r), and in the "
                   "unchanged ones (sm_more_r, the control) (default 0; quick: 1)")
    p.add_argument("--data-control", action="store_true",
                   help="with --coevolution-rounds: a third arm each round, sm_demos_r, GRPO on in the state models "
                   "fitted again on the demos plus as many scripted-expert episodes from the pool starts as the "
                   "co-evolving line's rollouts (more real data, not the policy's) (quick: on)")
    p.add_argument("--gate-control", type=float, default=None, metavar="METRES",
                   help="with --coevolution-rounds and an ensemble: another arm each round, sm_gate_r, GRPO on in "
                   "the unchanged state models with the disagreement gate at METRES instead of --max-disagreement "
                   "(does a quieter gate alone give the refits' gain?)")
    p.add_argument("--warm-refit", type=int, default=None, metavar="STEPS",
                   help="with --coevolution-rounds: another line each round, sm_warm_r, GRPO on in its previous "
                   "round's state models (round 1: the originals) fine-tuned for STEPS steps on the demos plus the "
                   "line's own pool rollouts, instead of fitted from scratch (quick: 30)")
    p.add_argument("--warm-refit-lr", type=float, default=WARM_REFIT_LR, metavar="LR",
                   help=f"--warm-refit's peak learning rate, cosine to 0 (default {WARM_REFIT_LR})")
    p.add_argument("--warm-refit-failure-weight", type=float, default=None, metavar="W",
                   help="--warm-refit's fine-tunes draw the line's failed pool rollouts W times as often as the rest "
                   f"(the main job's co-evolution: 3; default 1, quick {QUICK_FAILURE_WEIGHT})")
    p.add_argument("--warm-refit-data", choices=WARM_REFIT_DATA, default="all",
                   help="--warm-refit's fine-tunes read the demos plus all the line's pool rollouts so far (all, the "
                   "default) or only the newest round's (latest)")
    p.add_argument("--warm-refit-renderer", type=int, default=0, metavar="STEPS",
                   help="with --warm-refit and --renderer: each round also fine-tunes the line's learned renderer "
                   "(round 1: the fitted one) for STEPS steps on the demos plus the newest round's pool rollouts "
                   f"(half the draws; lr {RENDERER_REFIT_LR}, cosine) (default 0: the renderer as fitted)")
    p.add_argument("--lines", nargs="+", default=None, metavar="LINE",
                   help="with --coevolution-rounds: run only these co-evolution lines (sm_coevo, sm_more, and the "
                   "configured controls' sm_demos, sm_gate, sm_warm; default: all), e.g. more rounds of one line "
                   "from a work folder whose other lines stop earlier")
    p.add_argument("--work", type=Path, default=None, help="default runs/fixed_starts[_quick]")
    p.add_argument("--quick", action="store_true",
                   help="2 starts per task, 2 iterations of each arm, no held-out scores, the sm_branch arm in a "
                   "tiny two-member ensemble fitted on 16 SFT episodes, and one co-evolution round with the data "
                   f"and gate controls (gate {QUICK_GATE_CONTROL} m unless --gate-control) and the warm refit "
                   f"(failures weighted {QUICK_FAILURE_WEIGHT:g}) (CI smoke; quick runs)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (spawned processes of one torch thread)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    import torch

    from benchmarks._stats import machine_info
    from benchmarks.real_rl import run_pairs
    from imagination.pipeline import run_config_of
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    torch.set_num_threads(1)
    a.starts_per_task = a.starts_per_task or (2 if a.quick else 8)
    if a.starts_per_task < 1 or a.rl_seed < 0:
        raise WmrlError(f"--starts-per-task {a.starts_per_task} must be >= 1 and --rl-seed {a.rl_seed} >= 0")
    if a.real_steps < 1 or not (math.isfinite(a.max_disagreement) and a.max_disagreement > 0):
        raise WmrlError(f"--real-steps {a.real_steps} must be >= 1 and --max-disagreement {a.max_disagreement} "
                        "a number of metres > 0")
    if a.train_on != "all" and not (a.state_models or a.quick):
        raise WmrlError(f"--train-on {a.train_on} splits the sm_branch arm's episodes; it needs --state-models")
    if a.quick and a.state_models:
        raise WmrlError(f"--state-models {' '.join(a.state_models)}: --quick fits its own tiny state model")
    if a.renderer is not None and not (a.state_models or a.quick):
        raise WmrlError(f"--renderer {a.renderer} draws the sm_branch arm's branches; it needs --state-models")
    a.coevolution_rounds = (1 if a.quick else 0) if a.coevolution_rounds is None else a.coevolution_rounds
    if a.coevolution_rounds < 0 or (a.coevolution_rounds and not (a.state_models or a.quick)):
        raise WmrlError(f"--coevolution-rounds {a.coevolution_rounds} must be >= 0, and > 0 goes on from the "
                        "sm_branch arm: it needs --state-models")
    if a.data_control and not a.coevolution_rounds:
        raise WmrlError("--data-control adds an arm to each co-evolution round; it needs --coevolution-rounds >= 1")
    if a.gate_control is not None and not (a.coevolution_rounds and (len(a.state_models) > 1 or a.quick)
                                           and math.isfinite(a.gate_control) and a.gate_control > 0):
        raise WmrlError(f"--gate-control {a.gate_control} must be a number of metres > 0, and gates an ensemble's "
                        "world each co-evolution round: it needs --coevolution-rounds >= 1 and 2 or more "
                        "--state-models (or --quick, which fits two)")
    if a.warm_refit is not None and not (a.coevolution_rounds and a.warm_refit >= 1 and math.isfinite(a.warm_refit_lr)
                                         and a.warm_refit_lr > 0):
        raise WmrlError(f"--warm-refit {a.warm_refit} must be >= 1 steps and --warm-refit-lr {a.warm_refit_lr} > 0, "
                        "and fine-tunes a line's models each co-evolution round: it needs --coevolution-rounds >= 1")
    a.data_control = a.data_control or bool(a.quick and a.coevolution_rounds)
    if a.quick and a.coevolution_rounds and a.warm_refit is None:
        a.warm_refit = QUICK_WARM_REFIT
    if a.warm_refit_failure_weight is not None and a.warm_refit is None:
        raise WmrlError(f"--warm-refit-failure-weight {a.warm_refit_failure_weight} weights --warm-refit's "
                        "fine-tunes; it needs --warm-refit STEPS (and --coevolution-rounds >= 1)")
    if a.warm_refit_failure_weight is None:
        a.warm_refit_failure_weight = QUICK_FAILURE_WEIGHT if a.quick else 1.0
    if not (math.isfinite(a.warm_refit_failure_weight) and a.warm_refit_failure_weight > 0):
        raise WmrlError(f"--warm-refit-failure-weight {a.warm_refit_failure_weight} must be a number > 0")
    if a.warm_refit_data != "all" and a.warm_refit is None:
        raise WmrlError(f"--warm-refit-data {a.warm_refit_data} chooses --warm-refit's data; it needs --warm-refit "
                        "STEPS (and --coevolution-rounds >= 1)")
    if a.warm_refit_renderer and not (a.warm_refit is not None and a.renderer is not None and a.warm_refit_renderer > 0):
        raise WmrlError(f"--warm-refit-renderer {a.warm_refit_renderer} must be >= 1 steps, and fine-tunes the renderer "
                        "of the --warm-refit line's world: it needs --warm-refit STEPS and --renderer NAME")
    if a.quick and a.coevolution_rounds and a.gate_control is None:
        a.gate_control = QUICK_GATE_CONTROL
    configured = configured_lines(a.data_control, a.gate_control is not None, a.warm_refit is not None)
    if a.lines is not None and not (a.coevolution_rounds and set(a.lines) <= set(configured)):
        raise WmrlError(f"--lines {' '.join(a.lines)}: expected some of this run's co-evolution lines "
                        f"{', '.join(configured)} (sm_demos needs --data-control, sm_gate --gate-control, sm_warm "
                        "--warm-refit) and --coevolution-rounds >= 1")
    if a.quick and a.renderer not in (None, "quick"):
        raise WmrlError(f"--renderer {a.renderer}: --quick fits its own tiny renderer; pass --renderer quick")
    if a.runs is None:
        a.runs = ([Path("runs/imagination_lift_quick/seed_0")] if a.quick
                  else [Path(f"runs/imagination_lift/seed_{s}") for s in (0, 1, 2)])
    work = a.work or Path("runs/fixed_starts_quick" if a.quick else "runs/fixed_starts")
    t0 = time.perf_counter()
    keys = run_keys(a.runs)
    jobs: dict[str, tuple] = {}
    for src, key in zip(a.runs, keys, strict=True):
        cfg = run_config_of(src)
        its = 2 if a.quick else (a.iterations or _grpo_config(cfg).iterations)
        real_its = 2 if a.quick else (a.real_iterations or _grpo_config(cfg).iterations)
        if its < 1 or real_its < 1:
            raise WmrlError(f"--iterations {its} and --real-iterations {real_its} must be >= 1")
        folder = key if a.rl_seed == 0 else f"{key}_rlseed{a.rl_seed}"  # a repeat never resumes another seed's
        if a.state_models:
            from benchmarks.state_model_rl import state_model_dir

            for name in a.state_models:
                state_model_dir(src, name)  # before any work
            if a.renderer is not None:
                from worldmodels.state_renderer import StateRenderer

                StateRenderer.from_pretrained(src / a.renderer)  # a missing or corrupt one: before any work
        jobs[key] = (src, work / folder, a.starts_per_task, its, real_its, not (a.no_held_out or a.quick), a.rl_seed,
                     tuple(a.state_models), a.real_steps, a.max_disagreement, a.quick, a.train_on, a.renderer,
                     a.coevolution_rounds, a.data_control, a.gate_control,
                     None if a.warm_refit is None else WarmRefit(a.warm_refit, a.warm_refit_lr,
                                                                 a.warm_refit_failure_weight, a.warm_refit_data,
                                                                 a.warm_refit_renderer),
                     None if a.lines is None else tuple(dict.fromkeys(a.lines)))
    results: dict[str, dict] = {}
    run_pairs(_one, {(k,): v for k, v in jobs.items()}, a.jobs, not a.no_progress, "",
              lambda key, r: results.__setitem__(key, r))
    per_run = [results[k] for k in keys]
    res = {
        **summarize(per_run),
        "runs": {k: results[k] for k in keys},
        "starts_per_task": a.starts_per_task,
        "rl_seed": a.rl_seed,
        "state_model_arm": per_run[0].get("state_model_arm"),
        "quick": bool(a.quick),
        "jobs": a.jobs,
        "wall_time_s": time.perf_counter() - t0,
        "machine": machine_info(),
    }
    atomic_write_json(a.out, res)
    for n, v in res["pool_success"].items():
        d = res["pool_vs_sft"].get(n)
        h = res["held_out_success"].get(n)
        print(f"{n:10s} pool {v:.3f}" + (f" ({d['diff']:+.3f} +- {d['se']:.3f})" if d else "")
              + (f"  held-out {h:.3f}" if h is not None else ""))
    if "expert_pool_success" in res:
        print("data control's expert pool episodes, success by round:", [round(x, 3) for x in res["expert_pool_success"]])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
