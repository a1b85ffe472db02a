"""Self-imitation in the state model's world as the main job's imagination phase (``self_imitation.enabled``).

Each round of ``wmrl run`` (:meth:`imagination.pipeline.Pipeline.s_round`) then trains the policy by
success-filtered behaviour cloning (filtered BC; ReST / RAFT-style rejection sampling with a binary reward)
instead of GRPO or PPO in the pixel world model:

1. (round 0, ``policy_episodes`` > 0) the SFT policy plays that many real episodes at exploration ``std``
   (their real steps count in round 0's budget), and the round's arm-and-object state model is fitted on the
   demos plus them (``round_0/object_dynamics``; the run then fits none on the demos alone,
   :meth:`imagination.pipeline.RunConfig.fits_object_dynamics_on_demos`); co-evolution rounds refit it on
   every real episode so far (``object_dynamics.refit_each_round``; ``object_dynamics.warm_refit_steps`` > 0
   fine-tunes the model the round started from instead);
2. the current policy samples episodes at ``std`` from fresh real starts in that model's world
   (:class:`benchmarks._split_worlds.StateModelVectorEnv`: real resets and the simulator's drawing, the
   model's dynamics, the task's rule on its predicted states as success), task by task, until it has
   ``target`` successes of the task or has finished ``max_episodes`` of it; no real physics step is taken
   beyond the resets;
3. the run's SFT recipe (``steps`` optimiser steps; None: ``sft.steps``) fine-tunes the current policy on the
   successful demos plus every round's kept successes so far.

Each round also sets its world against the simulator start by start for the policy it collects with
(:func:`world_vs_real_on_eval_starts`, ``round_R/world_vs_real.json`` and the round's marker): how many of the
world's successes are real, per task, on the run's own evaluation starts (``benchmarks.world_vs_real`` reads
them over runs and rounds). ``min_precision`` gates the tasks whose world is mostly wrong there; the gate reads
real outcomes, so their real steps count in the round's budget (:func:`gate_check`): the evaluation's, or with
``check_episodes`` > 0 those of a check of its own on fresh starts; ``pool_checks`` pools the checks of every
round so far (:func:`pooled_gate_check`), as a task's precision read on one round's few world successes is noisy;
``gate_confidence`` gates on the precision's one-sided Wilson lower bound instead (:func:`precision_lower_bound`), so
a task passes only when its check's successes show the precision above ``min_precision`` at that confidence;
``check_real: world_successes`` plays the simulator only from the check's starts the world calls a success
(:func:`fresh_check`), all that the precision depends on: the same gate for about two fifths of the check's real steps
(``benchmarks.gate_check_cost``); ``check_real: until_decided`` plays those in turn only until the gate's decision
on the task can no longer change whatever the rest would show (:func:`play_until_decided`): the same decisions again,
for fewer real steps still. ``clone_real`` also clones the successes among the real episodes the run already played
for data (:func:`real_successes`: round 0's SFT episodes, each co-evolution round's rollouts), every task's, as the
gate judges the world's successes only: true successes of the tasks it gates, at no real step beyond those counted.

``benchmarks.self_imitation`` measured this recipe on finished runs (one round: +0.027 held out over three
seeds; four rounds +0.061; the same recipe's successes found in the simulator +0.035 a round).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.errors import ConfigError

#: the round's policy-rollout file of round 0 (``round_0/<this>``), and each round's kept successes
POLICY_ROLLOUTS = "policy_rollouts.npz"
SUCCESSES = "successes.npz"
#: each round's world set against the simulator on the evaluation's starts (:func:`world_vs_real_on_eval_starts`)
WORLD_CHECK = "world_vs_real.json"
#: each round's successful real episodes played for data (``self_imitation.clone_real``), and their record
REAL_SUCCESSES = "real_successes.npz"
REAL_SUCCESSES_RECORD = "real_successes.json"
#: the gate's own check on fresh starts (``self_imitation.check_episodes`` > 0, :func:`gate_check`)
GATE_CHECK = "gate_check.json"
#: a task's check starts are ``check_seed + 1000 * task + episode``: at most this many per task
MAX_CHECK_EPISODES = 1000
#: ``self_imitation.check_real``: the simulator plays every start of the gate's check, the world's successes only, or
#: those only until the gate's decision is settled
CHECK_REAL = ("all", "world_successes", "until_decided")


@dataclass
class SelfImitationConfig:
    """``self_imitation`` of ``conf/run.yaml``.

    Args:
        enabled: each round's imagination phase is self-imitation in the state model's world (needs
            ``object_dynamics.enabled=true object_dynamics.arm=true``) instead of RL in the world model.
        target: successes kept per task and round.
        max_episodes: episodes per task and round at most (the collection stops there with fewer successes).
        std: the policy's exploration std while it collects (and while it plays ``policy_episodes``).
        steps: optimiser steps of each round's fine-tune (None: ``sft.steps``).
        policy_episodes: real episodes of the SFT policy that round 0's state model is fitted on beside the
            demos (0: the demos alone), so the world knows the policy's own contacts.
        num_envs: sub-envs a task is collected in.
        min_precision: a round clones none of the kept successes (its own or earlier rounds') of a task whose
            precision in the round's gate check (:func:`gate_check`: the share of the world's successes the
            simulator confirms, for the policy entering the round) is below this; a task the world counts no
            success of there is kept. None: no gate.
        check_episodes: the starts per task the gate checks on. 0: the run's evaluation of the entering policy
            (its real steps then count in the round's budget when there is a gate); N > 0: N fresh real
            episodes per task of the entering policy played for the check alone (their real steps count), so
            the gate no longer reads the evaluation that measures the round.
        pool_checks: the gate reads each task's precision pooled over the checks of rounds 0..R
            (:func:`pooled_gate_check`) instead of round R's alone; an earlier round's check whose real steps
            that round did not count (its evaluation's, read without a gate then) counts them now.
        gate_confidence: the gate reads each task's precision as its one-sided Wilson lower bound at this
            confidence (:func:`precision_lower_bound`; 0.9: the bound the precision exceeds with 90% confidence)
            instead of the point estimate, so a task whose check counts few world successes passes only when
            nearly all of them are real. None: the point estimate.
        check_real: which starts of the gate's own check (``check_episodes`` > 0) the simulator plays. ``all``:
            every one, so the check also reads the policy's real success there. ``world_successes``: only those
            whose episode the world calls a success, as the precision the gate reads (the share of the world's
            successes the simulator confirms) depends on those alone: the same gate for the real steps of the
            world's successes only (the rows then read None for the real success and the missed successes).
            ``until_decided``: the world's successes in start order, only until the gate's decision on the task
            is settled whatever the others would show (:func:`play_until_decided`; needs ``min_precision``, and
            not ``pool_checks``, whose pooled reading needs every outcome): the decisions ``world_successes`` gives,
            and the rows' ``precision`` is the share confirmed of the starts played.
        clone_real: each round's fine-tune also clones the successful episodes among the real episodes the run
            has already played for data (:func:`real_successes`): round 0's ``policy_episodes`` and each
            co-evolution round's recorded rollouts. They are real, so the gate never leaves them out, and they
            cost no real step beyond those already counted. (The gate's check keeps outcomes only, not frames.)
    """

    enabled: bool = False
    target: int = 150
    max_episodes: int = 1500
    std: float = 0.1
    steps: int | None = None
    policy_episodes: int = 720
    num_envs: int = 16
    min_precision: float | None = None
    check_episodes: int = 0
    pool_checks: bool = False
    gate_confidence: float | None = None
    check_real: str = "all"
    clone_real: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"self_imitation.enabled={self.enabled!r}; expected true or false")
        for key in ("target", "max_episodes", "num_envs"):
            if int(getattr(self, key)) < 1:
                raise ConfigError(f"self_imitation.{key}={getattr(self, key)} must be >= 1")
        if not self.std > 0:
            raise ConfigError(f"self_imitation.std={self.std} must be > 0")
        if self.steps is not None and int(self.steps) < 1:
            raise ConfigError(f"self_imitation.steps={self.steps} must be >= 1 or null (sft.steps)")
        if int(self.policy_episodes) < 0:
            raise ConfigError(f"self_imitation.policy_episodes={self.policy_episodes} must be >= 0")
        if self.min_precision is not None and (isinstance(self.min_precision, bool)
                                               or not 0.0 < float(self.min_precision) <= 1.0):
            raise ConfigError(f"self_imitation.min_precision={self.min_precision!r}; expected a number in (0, 1] or null")
        if not 0 <= int(self.check_episodes) <= MAX_CHECK_EPISODES:
            raise ConfigError(f"self_imitation.check_episodes={self.check_episodes}; expected 0 (the evaluation's "
                              f"starts) to {MAX_CHECK_EPISODES} fresh starts per task")
        for key in ("pool_checks", "clone_real"):
            if not isinstance(getattr(self, key), bool):
                raise ConfigError(f"self_imitation.{key}={getattr(self, key)!r}; expected true or false")
        if self.gate_confidence is not None and (isinstance(self.gate_confidence, bool)
                                                 or not 0.5 <= float(self.gate_confidence) < 1.0):
            raise ConfigError(f"self_imitation.gate_confidence={self.gate_confidence!r}; expected a confidence in "
                              f"[0.5, 1) or null (the precision's point estimate)")
        if self.gate_confidence is not None and self.min_precision is None:
            raise ConfigError(f"self_imitation.gate_confidence={self.gate_confidence} sets the confidence of the "
                              f"precision gate; it needs self_imitation.min_precision (a number in (0, 1])")
        if self.check_real not in CHECK_REAL:
            raise ConfigError(f"self_imitation.check_real={self.check_real!r}; expected one of {', '.join(CHECK_REAL)}")
        if self.check_real != "all" and int(self.check_episodes) == 0:
            raise ConfigError(f"self_imitation.check_real={self.check_real} plays the gate's own check on fresh starts; "
                              f"it needs self_imitation.check_episodes > 0 (0 reads the evaluation's starts)")
        if self.check_real == "until_decided" and self.min_precision is None:
            raise ConfigError("self_imitation.check_real=until_decided stops the check once the gate's decision is "
                              "settled; it needs a gate: self_imitation.min_precision (a number in (0, 1])")
        if self.check_real == "until_decided" and self.pool_checks:
            raise ConfigError("self_imitation.check_real=until_decided leaves starts unplayed, and "
                              "self_imitation.pool_checks=true pools every outcome; set check_real to world_successes")


def policy_rollouts_for_world(pipe: Any, out: Path) -> tuple[Any | None, float]:
    """Round 0's real episodes of the SFT policy for its state model (``policy_episodes`` of them at ``std``,
    env and noise seed ``9000 + seed``), recorded once into ``out/policy_rollouts.npz`` and read back on
    resume; ``(episodes with environment states or None when policy_episodes is 0, their real env steps)``."""
    from wmrl.data import load_trajectories_npz, save_trajectories_npz
    from wmrl.io import atomic_write_json
    from worldmodels.object_dynamics import policy_rollouts

    si = pipe.cfg.self_imitation_config()
    if si.policy_episodes == 0:
        return None, 0.0
    path, record = out / POLICY_ROLLOUTS, out / "policy_rollouts.json"
    if not (path.is_file() and record.is_file()):
        seed = 9000 + pipe.cfg.seed
        traj, st = policy_rollouts(pipe.root / "sft" / "policy", pipe.tasks(), pipe.cfg.image_size, si.policy_episodes,
                                   si.std, seed, render=pipe.cfg.render.env_kwargs())
        save_trajectories_npz(path, traj)
        atomic_write_json(record, {"episodes": int(st["episodes"]), "success_rate": float(st["success_rate"]),
                                   "env_steps": float(st["env_steps"]), "std": si.std, "seed": seed})
    return load_trajectories_npz(path), float(json.loads(record.read_text())["env_steps"])


def real_successes(pipe: Any, r: int, out: Path) -> dict[str, int]:
    """Round ``r``'s successful real episodes for the fine-tunes (``self_imitation.clone_real``): those among the
    real episodes the round played for data, round 0's SFT episodes (``out/policy_rollouts.npz``) or a
    co-evolution round's recorded rollouts (``out/rollouts.npz``), written once into ``out/real_successes.npz``
    (no file when none succeeded; each episode's weight 1) and counted per task in ``out/real_successes.json``,
    written after it and read back on resume. Returns ``{task: successes}`` over every task of the run."""
    from wmrl.data import load_trajectories_npz, save_trajectories_npz
    from wmrl.io import atomic_write_json

    record = out / REAL_SUCCESSES_RECORD
    if not record.is_file():
        source = out / (POLICY_ROLLOUTS if r == 0 else "rollouts.npz")
        counts = {t: 0 for t in pipe.tasks()}
        played = 0
        if source.is_file():
            traj = load_trajectories_npz(source)
            played = traj.num_episodes
            ok = np.flatnonzero(traj.episode_success)
            if len(ok):
                won = traj.select_episodes(ok)
                won = replace(won, episode_weights=np.ones(won.num_episodes, np.float32))
                save_trajectories_npz(out / REAL_SUCCESSES, won)
                for task in won.episode_task_ids():
                    counts[task] = counts.get(task, 0) + 1
            del traj
        atomic_write_json(record, {"source": source.name, "episodes": played, "successes": counts})
    return {t: int(n) for t, n in json.loads(record.read_text())["successes"].items()}


def self_imitation_round(pipe: Any, r: int, out: Path, world_dir: Path) -> dict[str, Any]:
    """Round ``r``'s imagination phase: collect the policy entering the round's successes in the world of the
    state model in ``world_dir``, fine-tune it on the successful demos plus every round's successes so far
    (``out/self_imitation``, resumable from its checkpoints), and save the result as ``out/policy``.

    Returns the round summary's fields: ``imagined_steps`` (steps played in the model's world),
    ``prefix_real_env_steps`` (the collection's real physics steps: 0), ``gate_real_env_steps`` (the real steps
    of the outcomes the gate read, :func:`gate_check`, and with ``pool_checks`` those of earlier rounds' checks
    not counted yet), ``gate_check`` (the gate's own check on fresh starts; None where it reads the
    evaluation's), ``gate_pooled`` (with ``pool_checks`` and a gate: the pooled rows it read, else None),
    ``gated_tasks``, ``self_imitation`` (per task:
    ``finished``, ``kept``, ``finished_success_rate``, ``env_steps``), ``successes_kept``,
    ``episodes_cloned``, ``fine_tune_steps``, ``imagined_success_last`` (the collection's sampled
    success over every task's finished episodes) and ``imagined_overrating_by_task``
    (:func:`imagined_overrating`) and ``averaged_rounds`` (the rounds whose trained policies ``out/policy``
    averages, :meth:`~imagination.pipeline.Pipeline.save_round_policy`; ``[r]``: the round's own),
    ``real_successes`` (with ``clone_real``: the round's real successes per task, :func:`real_successes`; else
    None) and ``real_successes_cloned`` (every round's so far, cloned whatever the gate; 0 without ``clone_real``)."""
    from benchmarks._split_worlds import check_state_model
    from benchmarks.self_imitation import collect_round
    from envs.tabletop.vector_env import STATE_DIM
    from policies import load_policy
    from worldmodels.object_dynamics import ObjectDynamics

    si, seed = pipe.cfg.self_imitation_config(), pipe.cfg.seed
    model = ObjectDynamics.from_pretrained(world_dir)
    check_state_model(model, STATE_DIM)
    policy = pipe.policy_after(r - 1)
    found = out / SUCCESSES
    record = out / "self_imitation_collection.json"
    if not record.is_file():  # written after the successes: a collection cut short runs again
        from wmrl.io import atomic_write_json

        _, stats = collect_round(policy, pipe.tasks(), r, seed, si.target, si.max_episodes, si.std, pipe.env_kwargs(),
                                 found, num_envs=si.num_envs, state_model=model)
        atomic_write_json(record, stats)
    stats = json.loads(record.read_text())
    entering = pipe.done("eval_sft" if r == 0 else f"round_{r - 1}")
    overrating = imagined_overrating(stats, entering)
    check = out / WORLD_CHECK
    if not check.is_file():
        from wmrl.io import atomic_write_json

        atomic_write_json(check, world_vs_real_on_eval_starts(policy, model, pipe.tasks(), entering,
                                                              pipe.cfg.eval.seed, pipe.env_kwargs()))
    world_vs_real = json.loads(check.read_text())
    gate_rows, gate_steps = gate_check(pipe, r, out, policy, model, world_vs_real)
    pooled = None
    if si.pool_checks and si.min_precision is not None:
        pooled, earlier_steps = pooled_gate_check(pipe, r, gate_rows)
        gate_steps += earlier_steps
    reads = precision_reads(pooled if pooled is not None else gate_rows, si.gate_confidence)
    gated = reads_below(reads, si.min_precision)
    kept = [p for q in range(r + 1) if (p := pipe.root / f"round_{q}" / SUCCESSES).is_file()]
    real_counts: list[dict[str, int]] = []
    if si.clone_real:  # every round's so far (one run without clone_real too), every task's: they are real
        real_counts = [real_successes(pipe, q, pipe.root / f"round_{q}") for q in range(r + 1)]
    real = [p for q in range(len(real_counts)) if (p := pipe.root / f"round_{q}" / REAL_SUCCESSES).is_file()]
    steps = int(si.steps if si.steps is not None else pipe.cfg.sft.get("steps"))
    start = pipe.root / ("sft" if r == 0 else f"round_{r - 1}") / "policy"
    # every round's successes decompressed straight into the concatenation: it alone holds their frames
    train = pipe.train_sft(out / "self_imitation", steps, extra=kept or None, init=start, drop_tasks=gated,
                           whole_files=real)
    pol = load_policy(out / "self_imitation" / "policy", map_location=str(pipe.device))
    _, averaged = pipe.save_round_policy(r, pol, "self_imitation")
    finished = sum(s["finished"] for s in stats.values())
    return {
        "imagination_phase": "self_imitation",
        "imagined_steps": float(sum(s["env_steps"] for s in stats.values())),
        "prefix_real_env_steps": float(sum(s["real_env_steps"] for s in stats.values())),
        "self_imitation": stats,
        "successes_kept": float(sum(s["kept"] for s in stats.values())),
        "episodes_cloned": int(train.get("episodes", 0)),
        "fine_tune_steps": steps,
        "imagined_success_last": float(sum(s["finished_success_rate"] * s["finished"] for s in stats.values())
                                       / max(finished, 1)),
        "imagined_overrating_by_task": overrating,
        "world_vs_real_on_eval_starts": world_vs_real,
        "gate_check": gate_rows if si.check_episodes > 0 else None,
        "gate_pooled": pooled,
        "gate_real_env_steps": gate_steps,
        "gated_tasks": gated,
        "gate_lower_bounds": reads if si.gate_confidence is not None else None,
        "gated_frac": 0.0,
        "averaged_rounds": averaged,
        "real_successes": real_counts[-1] if real_counts else None,
        "real_successes_cloned": int(sum(sum(c.values()) for c in real_counts)),
    }


def imagined_overrating(stats: dict[str, dict[str, float]], entering: dict[str, Any] | None) -> dict[str, float]:
    """How far the state model's world rates the collecting policy above the simulator, per task: the
    collection's ``finished_success_rate`` minus the real success of the same policy in the run's evaluation
    of it (``entering``: the ``eval_sft`` marker for round 0, else the previous round's marker, whose ``eval``
    block holds it). Positive: the world counts successes the simulator would not (kept successes of such a
    task hold some false ones). Tasks with no finished episode or no real figure are left out; {} without
    the marker. The real figure comes from the run's own evaluation starts (``eval.episodes_per_task`` per
    task), so it carries that evaluation's noise."""
    if entering is None:
        return {}
    real = entering.get("eval", entering).get("per_task", {})
    return {t: float(st["finished_success_rate"] - real[t]) for t, st in stats.items()
            if t in real and st.get("finished", 0) > 0}


def world_vs_real_on_eval_starts(
    policy: Any, model: Any, tasks: list[str], entering: dict[str, Any] | None, eval_seed: int, env_kwargs: dict,
) -> dict[str, dict[str, float | None]]:
    """The state model's world set against the simulator start by start, for the policy it is about to train:
    ``policy`` plays with its mean action, as the run's evaluation plays it, in the world of ``model``
    (:class:`benchmarks._split_worlds.StateModelVectorEnv`) from the starts of the run's evaluation of it
    (``entering``: the ``eval_sft`` marker, or a round's marker whose ``eval`` block holds the outcomes episode
    by episode in seed order; episode e of task i starts from seed ``eval_seed + 1000 * i + e``, as
    :func:`benchmarks.policy_eval.evaluate_policy` seeds it). No real physics step is taken beyond the resets.

    Unlike :func:`imagined_overrating`, both sides play the same starts with the same (noise-free) actions,
    so the start set's luck cancels and only the world's errors remain.

    Returns per task (and ``all``, pooled): ``episodes``, ``imagined`` and ``real`` success, ``overrating``
    (imagined - real) and its paired standard error ``overrating_se``, ``false_successes`` (imagined successes
    the simulator refutes), ``missed_successes``, and ``precision`` (the share of imagined successes that
    are real; None without any); per task also ``imagined_outcomes``, the world's outcome episode by episode in
    seed order (``"0"``/``"1"``, as the evaluation's ``outcomes``), for paired comparisons of worlds on these
    starts. {} without the marker or its outcomes."""
    import numpy as np

    block = None if entering is None else entering.get("eval", entering)
    outcomes = (block or {}).get("outcomes", {})
    if not outcomes or any(t not in outcomes for t in tasks):
        return {}
    real = {t: np.array([c == "1" for c in outcomes[t]], bool) for t in tasks}
    eps = {len(v) for v in real.values()}
    if len(eps) != 1:
        from wmrl.errors import WmrlError

        raise WmrlError(f"the evaluation's outcomes cover {sorted(eps)} episodes per task; expected one count")
    imagined = world_outcomes(policy, model, tasks, eps.pop(), eval_seed, env_kwargs)
    return check_rows(tasks, imagined, np.stack([real[t] for t in tasks]))


def world_outcomes(policy: Any, model: Any, tasks: list[str], episodes: int, seed: int,
                   env_kwargs: dict) -> Any:
    """``policy`` with its mean action in the world of ``model`` (:class:`benchmarks._split_worlds.StateModelVectorEnv`)
    from the starts ``seed + 1000 * i + e`` (task i, episode e), for a full episode: bool (len(tasks), episodes),
    whether the world calls each episode a success. No real physics step is taken beyond the resets."""
    import envs
    from benchmarks._split_worlds import StateModelVectorEnv
    from benchmarks.state_model_ranking import episode_successes

    def make_world(task: str, num: int) -> Any:
        return StateModelVectorEnv(envs.make_vec(task, num, autoreset_mode="same_step", **env_kwargs), model)

    horizon = envs.full_episode_chunks(tasks, policy.chunk_size)
    return episode_successes(policy, make_world, tasks, episodes, seed, horizon).reshape(len(tasks), episodes)


def check_rows(tasks: list[str], imagined: Any, real: Any) -> dict[str, dict[str, Any]]:
    """The world-vs-simulator rows of :func:`world_vs_real_on_eval_starts` from the outcomes, task by task (and
    ``all``, pooled): ``imagined`` bool (T, E), the world's; ``real`` bool (T, E), the simulator's on the same
    starts (a check that played only the world's successes passes False elsewhere and reads the rows through
    :func:`partial_rows`)."""
    import math

    import numpy as np

    def row(s: Any, r: Any) -> dict[str, float | None]:
        d = s.astype(float) - r.astype(float)
        return {
            "episodes": float(len(s)), "imagined": float(s.mean()), "real": float(r.mean()),
            "overrating": float(d.mean()),
            "overrating_se": float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else None,
            "false_successes": float((s & ~r).sum()), "missed_successes": float((~s & r).sum()),
            "precision": float((s & r).sum() / s.sum()) if s.any() else None,
        }

    imagined, real = np.asarray(imagined, bool), np.asarray(real, bool)
    out = {t: {**row(imagined[i], real[i]), "imagined_outcomes": "".join("1" if x else "0" for x in imagined[i])}
           for i, t in enumerate(tasks)}
    out["all"] = row(imagined.ravel(), real.ravel())
    return out


def partial_rows(rows: dict[str, dict[str, Any]], played: dict[str, int] | None = None) -> dict[str, dict[str, Any]]:
    """:func:`check_rows` of a check whose simulator played only the world's successes: the fields those
    outcomes do not determine set to None, ``real_played`` (the episodes played) added. ``played`` (task -> count;
    None: all the world's successes) is for a check that played some of them only (``until_decided``): ``rows``
    then read its unplayed world successes as real (so ``false_successes`` counts the refuted ones played), and
    ``precision`` is the share confirmed of those played (None when none was)."""
    unknown = ("real", "overrating", "overrating_se", "missed_successes")
    out = {}
    for t, row in rows.items():
        n = world_successes_played(row) if played is None else (sum(played.values()) if t == "all" else played[t])
        precision = row["precision"] if played is None else ((n - row["false_successes"]) / n if n else None)
        out[t] = {**row, **dict.fromkeys(unknown), "precision": precision, "real_played": n}
    return out


def decisive_count(hits: int, min_precision: float, confidence: float | None = None) -> int:
    """The fewest of a task's ``hits`` world successes the simulator must confirm for the gate to keep the task:
    its precision read (the point estimate ``k / hits``, or with ``confidence`` the one-sided Wilson lower bound,
    :func:`precision_lower_bound`) is then at least ``min_precision``; ``hits + 1`` when no count would do, 0 for
    no world success (the gate keeps a task it reads no precision of). Both reads grow with the count confirmed,
    so the gate keeps the task exactly when the count reaches this."""
    from statistics import NormalDist

    from benchmarks._stats import wilson_ci

    if hits < 1:
        return 0
    z = None if confidence is None else NormalDist().inv_cdf(float(confidence))
    for k in range(hits + 1):
        read = k / hits if z is None else wilson_ci(k, hits, z)[0]
        if read >= float(min_precision):
            return k
    return hits + 1


def play_until_decided(starts: list[int], play: Any, min_precision: float,
                       confidence: float | None = None) -> tuple[list[int], Any, Any]:
    """The simulator's outcomes of a task's world successes (``starts``, their episode indices), in order, only
    until the gate's decision on the task (:func:`gated_tasks` at ``min_precision`` and ``confidence``) cannot
    change whatever the unplayed ones would show: the confirmed count has reached :func:`decisive_count` (kept),
    or the refuted count makes that count unreachable (gated; at least one start is played, so the row reads a
    precision). ``play(indices)`` plays episodes and returns (success bool (n,), length int (n,)); each call plays
    as many as could be needed before any decision, so the starts played are those one-at-a-time play would.
    Returns ``(played indices, success bool (m,), length int (m,))``."""
    import numpy as np

    hits = len(starts)
    need = decisive_count(hits, min_precision, confidence)
    ok, lengths = np.zeros(0, bool), np.zeros(0, int)
    while len(ok) < hits:
        confirmed, refuted = int(ok.sum()), int((~ok).sum())
        to_keep, to_gate = need - confirmed, hits - need + 1 - refuted
        if to_keep <= 0 or (to_gate <= 0 and len(ok) > 0):
            break
        n = max(1, min(to_keep, to_gate))
        s, ln = play([int(e) for e in starts[len(ok):len(ok) + n]])
        ok, lengths = np.concatenate([ok, np.asarray(s, bool)]), np.concatenate([lengths, np.asarray(ln, int)])
    return [int(e) for e in starts[:len(ok)]], ok, lengths


def check_reads_at(record: dict[str, Any], min_precision: float, confidence: float | None = None) -> bool:
    """Whether a kept gate check (``record``, :func:`fresh_check`) gives the decisions of a gate at
    ``min_precision`` and ``confidence``: any check that played all it reads does; one stopped once its own gate's
    decision was settled (``until_decided``) only at that gate's reading."""
    if record.get("check_real") != "until_decided":
        return True
    return float(record["min_precision"]) == float(min_precision) and record.get("confidence") == confidence


def check_seed(run_seed: int, r: int) -> int:
    """The first start seed of round ``r``'s gate check in run seed ``run_seed``'s run: episode e of task i
    starts from ``check_seed + 1000 * i + e``, apart from the evaluation's (``eval.seed`` 12345 + ...), the
    collection's (77,000 + ...) and the held-out comparison's (777,000 + ...) starts, fresh each round."""
    return 2_000_000 + 100_000 * r + 10_000 * (run_seed % 10)


def gate_check(pipe: Any, r: int, out: Path, policy: Any, model: Any,
               eval_check: dict[str, dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], float]:
    """The world check round ``r``'s gate reads, and the real env steps it cost: ``(rows, steps)``.

    ``self_imitation.check_episodes`` = 0: the check on the evaluation's starts (``eval_check``,
    :func:`world_vs_real_on_eval_starts`); with a gate (``min_precision``) the evaluation's real steps
    (``eval_env_steps`` of the entering policy's evaluation) count, as the gate trains on what they found;
    without one, or without outcomes to read, none. N > 0: ``policy`` (the policy entering the round) plays N
    real episodes per task with its mean action, as the evaluation plays, from the fresh starts of
    :func:`check_seed`, and the same starts in the world of ``model`` (:func:`fresh_check`; with
    ``self_imitation.check_real: world_successes`` the simulator plays only the starts the world calls a success);
    their real steps count whether or not a gate reads them. Recorded in ``out/gate_check.json`` (``seed``,
    ``episodes_per_task``, ``check_real``, ``real_env_steps``, ``real``: the simulator's outcomes, ``check``: the
    rows) and read back on resume."""
    from wmrl.io import atomic_write_json

    si = pipe.cfg.self_imitation_config()
    n = int(si.check_episodes)
    if n == 0:
        if si.min_precision is None or not eval_check:
            return eval_check, 0.0
        entering = pipe.done("eval_sft" if r == 0 else f"round_{r - 1}")
        return eval_check, float(entering.get("eval", entering)["eval_env_steps"])
    path = out / GATE_CHECK
    if not path.is_file():
        atomic_write_json(path, fresh_check(policy, model, pipe.cfg, pipe.tasks(), n, check_seed(pipe.cfg.seed, r),
                                            si.check_real, si.min_precision, si.gate_confidence))
    rec = json.loads(path.read_text())
    return rec["check"], float(rec["real_env_steps"])


def fresh_check(policy: Any, model: Any, cfg: Any, tasks: list[str], episodes: int, seed: int,
                check_real: str = "all", min_precision: float | None = None,
                confidence: float | None = None) -> dict[str, Any]:
    """The world of ``model`` against the simulator for ``policy`` (its mean action, as the evaluation plays) on
    ``episodes`` fresh starts per task, episode e of task i from ``seed + 1000 * i + e``, in run config ``cfg``'s
    protocol (its evaluation's sub-envs and render); the record :func:`gate_check` keeps.

    ``check_real`` (``self_imitation.check_real``): ``all`` plays every start in the simulator
    (:func:`imagination.pipeline.evaluate_in_sim`) and sets the world against it start by start
    (:func:`world_vs_real_on_eval_starts`); ``world_successes`` plays the world first
    (:func:`world_outcomes`) and the simulator only from the starts the world calls a success
    (:func:`benchmarks.policy_eval.play_seeds`), enough for the precision the gate reads
    (:func:`partial_rows`); ``until_decided`` plays those only until the gate's decision at ``min_precision`` and
    ``confidence`` (``self_imitation.min_precision`` / ``gate_confidence``) is settled (:func:`play_until_decided`).

    Returns ``seed``, ``episodes_per_task``, ``check_real``, ``real_env_steps`` (the simulator's steps),
    ``real`` (``all``: the evaluation record; otherwise per task ``played``, the episode indices played, and
    ``outcomes`` / ``lengths`` there) and ``check`` (the rows); ``until_decided`` adds ``min_precision`` and
    ``confidence``."""
    from imagination.pipeline import evaluate_in_sim, run_env_kwargs

    if check_real not in CHECK_REAL:
        raise ConfigError(f"self_imitation.check_real={check_real!r}; expected one of {', '.join(CHECK_REAL)}")
    head = {"seed": seed, "episodes_per_task": episodes, "check_real": check_real}
    if check_real == "until_decided":
        if min_precision is None:
            raise ConfigError("self_imitation.check_real=until_decided needs the gate's min_precision")
        head.update(min_precision=float(min_precision), confidence=confidence)
    if check_real == "all":
        real = evaluate_in_sim(policy, cfg, episodes_per_task=episodes, seed=seed)
        rows = world_vs_real_on_eval_starts(policy, model, tasks, real, seed, run_env_kwargs(cfg))
        return {**head, "real_env_steps": real["eval_env_steps"], "real": real, "check": rows}
    from benchmarks.policy_eval import play_seeds

    imagined = world_outcomes(policy, model, tasks, episodes, seed, run_env_kwargs(cfg))

    def play(i: int, task: str, idx: list[int]) -> tuple[Any, Any]:
        return play_seeds(policy, task, [seed + 1000 * i + e for e in idx], num_envs=cfg.eval.num_envs,
                          render=cfg.render.env_kwargs())

    played, steps, rows = play_world_successes(tasks, imagined, play, check_real, min_precision, confidence)
    return {**head, "real_env_steps": steps, "real": played, "check": rows}


def play_world_successes(tasks: list[str], imagined: Any, play: Any, check_real: str = "world_successes",
                         min_precision: float | None = None,
                         confidence: float | None = None) -> tuple[dict[str, dict[str, Any]], float, dict[str, Any]]:
    """The simulator's side of a check that plays the world's successes only (``check_real: world_successes``), or
    those only until the gate's decision at ``min_precision`` and ``confidence`` is settled (``until_decided``,
    :func:`play_until_decided`): ``imagined`` bool (T, E), the world's outcomes; ``play(task_index, task, episode
    indices)`` plays episodes and returns (success bool (n,), length int (n,)). Returns ``(played, steps, rows)``:
    per task ``played`` (the episode indices played) and ``outcomes`` / ``lengths`` there, the real env steps, and
    the rows (:func:`partial_rows`)."""
    import numpy as np

    real = imagined.copy()  # until_decided: the unplayed world successes read as real (partial_rows)
    played: dict[str, dict[str, Any]] = {}
    steps = 0
    for i, task in enumerate(tasks):
        hits = [int(e) for e in np.flatnonzero(imagined[i])]
        if check_real == "until_decided":
            idx, ok, lengths = play_until_decided(hits, lambda ids, i=i, task=task: play(i, task, ids),
                                                  float(min_precision), confidence)
        else:
            idx, (ok, lengths) = hits, play(i, task, hits)
        real[i, idx] = ok
        steps += int(lengths.sum())
        played[task] = {"played": idx, "outcomes": "".join("1" if x else "0" for x in ok),
                        "lengths": [int(x) for x in lengths]}
    counts = {t: len(p["played"]) for t, p in played.items()} if check_real == "until_decided" else None
    return played, float(steps), partial_rows(check_rows(tasks, imagined, real), counts)


def round_gate_rows(pipe: Any, q: int) -> tuple[dict[str, dict[str, Any]], float]:
    """Round ``q``'s world check as its gate read it, and the real steps reading it now adds: ``(rows, steps)``.
    Its own check on fresh starts (``round_q/gate_check.json``), whose steps round ``q`` counted already (0);
    else its check on the evaluation's starts (``round_q/world_vs_real.json``), whose steps (the evaluation of
    the policy entering round ``q``) count now unless round ``q``'s gate counted them (``gate_real_env_steps``
    in its marker). ``({}, 0.0)`` for a round without a check; a ConfigError for a check stopped once its gate's
    decision was settled (``until_decided``), which pooling cannot read."""
    folder = pipe.root / f"round_{q}"
    if (folder / GATE_CHECK).is_file():
        rec = json.loads((folder / GATE_CHECK).read_text())
        if rec.get("check_real") == "until_decided":
            raise ConfigError(f"self_imitation.pool_checks=true pools every outcome, and {folder / GATE_CHECK} stopped "
                              f"once its gate's decision was settled (check_real=until_decided); set pool_checks=false")
        return rec["check"], 0.0
    if not (folder / WORLD_CHECK).is_file():
        return {}, 0.0
    rows = json.loads((folder / WORLD_CHECK).read_text())
    marker = pipe.done(f"round_{q}") or {}
    if not rows or marker.get("gate_real_env_steps"):
        return rows, 0.0
    entering = pipe.done("eval_sft" if q == 0 else f"round_{q - 1}") or {}
    return rows, float(entering.get("eval", entering).get("eval_env_steps", 0.0))


def pool_check_rows(rounds: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """World checks (:func:`world_vs_real_on_eval_starts` rows, one dict per round) pooled task by task
    (:func:`benchmarks.world_vs_real.pool`: episodes, successes, false and missed ones summed), so ``precision``
    is the share of all the rounds' world successes that were real; ``rounds`` counts the checks pooled."""
    from benchmarks.world_vs_real import pool

    out = {}
    for task in dict.fromkeys(t for rows in rounds for t in rows):
        rows = [r[task] for r in rounds if task in r]
        out[task] = {**pool(rows), "rounds": len(rows)}
    return out


def pooled_gate_check(pipe: Any, r: int, rows: dict[str, dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], float]:
    """Round ``r``'s gate check ``rows`` pooled with rounds ``0..r-1``'s (:func:`round_gate_rows`,
    :func:`pool_check_rows`), and the real steps of the earlier checks that count now: ``(rows, steps)``.
    An earlier round that pooled too (``gate_pooled`` in its marker) counted the checks before it, so only the
    rounds after the last such round add their uncounted steps."""
    earlier = [round_gate_rows(pipe, q) for q in range(r)]
    last = max((q for q in range(r) if (pipe.done(f"round_{q}") or {}).get("gate_pooled") is not None), default=-1)
    checks = [c for c, _ in earlier if c] + ([rows] if rows else [])
    return pool_check_rows(checks), float(sum(s for q, (_, s) in enumerate(earlier) if q > last))


def world_successes_played(row: dict[str, Any]) -> int:
    """How many of a world check row's world successes the simulator played, the count its ``precision`` reads:
    ``real_played`` where a check recorded it (:func:`partial_rows`), else all of them (``imagined`` rate times
    ``episodes``)."""
    played = row.get("real_played")
    return round(float(row["imagined"]) * float(row["episodes"])) if played is None else int(played)


def precision_lower_bound(row: dict[str, Any], confidence: float) -> float | None:
    """The one-sided Wilson lower bound at ``confidence`` of a world check row's precision (its ``imagined`` rate
    times ``episodes`` world successes, or the ``real_played`` of them a check played, ``false_successes`` of them
    refuted): the precision exceeds it with that confidence (:func:`benchmarks._stats.wilson_ci` at z = the normal
    quantile of ``confidence``). None when the world counts no success there (or the check played none)."""
    from statistics import NormalDist

    from benchmarks._stats import wilson_ci

    hits = world_successes_played(row)
    if hits < 1:
        return None
    real = hits - round(float(row["false_successes"]))
    return float(wilson_ci(real, hits, NormalDist().inv_cdf(float(confidence)))[0])


def precision_reads(check: dict[str, dict[str, Any]], confidence: float | None = None) -> dict[str, float | None]:
    """What the gate reads of each task of a world check (:func:`world_vs_real_on_eval_starts`; the pooled row
    ``all`` left out): with ``confidence`` the precision's one-sided Wilson lower bound at that confidence
    (:func:`precision_lower_bound`), else the point estimate; None where the world counts no success."""
    return {t: row.get("precision") if confidence is None or row.get("precision") is None
            else precision_lower_bound(row, confidence)
            for t, row in check.items() if t != "all"}


def gated_tasks(check: dict[str, dict[str, Any]], min_precision: float | None,
                confidence: float | None = None) -> list[str]:
    """The tasks of a round's world check (:func:`world_vs_real_on_eval_starts`) whose precision is below
    ``min_precision``: the round clones none of their kept successes. With ``confidence`` the precision read is
    its one-sided Wilson lower bound at that confidence (:func:`precision_reads`), else the point estimate.
    A task without imagined successes there (precision None) is kept; none without a gate or a check."""
    return reads_below(precision_reads(check, confidence), min_precision)


def reads_below(reads: dict[str, float | None], min_precision: float | None) -> list[str]:
    """The tasks of :func:`precision_reads` read below ``min_precision`` (none without a gate or a read)."""
    if min_precision is None:
        return []
    return [t for t, read in reads.items() if read is not None and read < float(min_precision)]


def fit_round_zero_world(pipe: Any, out: Path) -> tuple[Path, float]:
    """Round 0's state model: with ``policy_episodes`` > 0, the run's object dynamics fitted on the demos
    plus the SFT policy's real episodes (:func:`policy_rollouts_for_world`) into ``out/object_dynamics``
    (kept on resume); else the demos' fit (``RUN/object_dynamics``). ``(its folder, the real env steps)``."""
    from imagination.pipeline import RUN_OBJECT_DYNAMICS
    from wmrl.data import Trajectories

    rollouts, steps = policy_rollouts_for_world(pipe, out)
    if rollouts is None:
        return pipe.root / RUN_OBJECT_DYNAMICS, 0.0
    target = out / RUN_OBJECT_DYNAMICS
    if not (target / "config.json").is_file():  # written last: a fit cut short runs again
        pipe.fit_object_dynamics(Trajectories.concat([pipe.trajectories(), rollouts]), target, pipe.cfg.seed)
    return target, steps


def check_self_imitation_config(cfg: Any) -> None:
    """A one-line ConfigError when ``self_imitation.enabled`` lacks what it needs: the built-in suite and an
    arm-and-object state model (``object_dynamics.enabled=true object_dynamics.arm=true``)."""
    od = cfg.object_dynamics_config()
    if od is None or not od.arm:
        raise ConfigError("self_imitation.enabled collects in the arm-and-object state model's world: set "
                          "object_dynamics.enabled=true object_dynamics.arm=true (and world_model.env_state_dim=9)")
    if od.orientation:
        raise ConfigError("self_imitation.enabled: object_dynamics.orientation=true is not supported by the "
                          "state model's world (positions only); set it to false")


__all__ = [
    "SelfImitationConfig",
    "check_self_imitation_config",
    "check_reads_at",
    "check_rows",
    "check_seed",
    "fit_round_zero_world",
    "fresh_check",
    "gate_check",
    "policy_rollouts_for_world",
    "gated_tasks",
    "imagined_overrating",
    "pool_check_rows",
    "precision_lower_bound",
    "precision_reads",
    "reads_below",
    "real_successes",
    "partial_rows",
    "world_successes_played",
    "decisive_count",
    "play_until_decided",
    "play_world_successes",
    "pooled_gate_check",
    "round_gate_rows",
    "self_imitation_round",
    "world_outcomes",
    "world_vs_real_on_eval_starts",
]
