"""How much can GRPO learn from a policy? pass@k and group outcomes in the *real* simulator.

Usage::

    python -m benchmarks.rl_headroom --runs runs/imagination_lift/seed_0 ... [--stds 0.05 0.1 0.2 0.3]
        [--starts-per-task 8] [--samples 16] [--group-size 8] [--policy sft/policy] --out FILE.json
    python -m benchmarks.rl_headroom --runs ... --stds 0.1 --imagined [--world-round R] [--keyframe-chunk C]
        --out FILE.json
    python -m benchmarks.rl_headroom --runs ... --stds 0.1 --imagined --object-dynamics NAME
        [--rendered-state-model] [--model-drawn-real] --out FILE.json
    python -m benchmarks.rl_headroom --runs ... --stds 0.1 --twin-pixel-noise 2 --out FILE.json
    python -m benchmarks.rl_headroom --quick --out FILE.json   # after benchmarks.imagination_lift --quick

GRPO scores a trajectory by its success and normalises within a group that shares a start, so a
group where every member fails (or every member succeeds) carries no gradient: dynamic sampling
drops it. Whatever the world model or the reward, RL can only fix the failures on which sampling
sometimes succeeds. This benchmark measures that headroom for a policy of finished ``wmrl run``
folders (default: the SFT policy): for ``--starts-per-task`` real starts per task it runs the
policy's mean action once and ``--samples`` sampled episodes per exploration std, all from the
same start, and reports per std:

* ``sample_success``: success of a sampled episode;
* ``pass_at_k``: the unbiased estimate of P(at least one of k samples succeeds), k = 1, 2, 4, ...;
* ``group``: for a group of ``--group-size`` samples (drawn without replacement from the
  ``--samples``), the probability that it is all-fail, all-success or mixed (learnable);
* ``failed_starts``: the same, only over the starts where the mean action fails (what RL has to
  fix): ``learnable`` is the expected fraction of them on which a group holds a success.

With ``--imagined`` the same policy also runs inside each run's world model (``--world-round``,
default the round-0 world RL in imagination starts from) from the *same* starts (the real first
frame, ``ImaginedVectorEnv.reset_to``) with common random numbers: sample ``i`` of a start draws
the same policy noise in both worlds. ``imagined`` then reports, per std, how far the imagined
outcomes agree with the real ones (:func:`imagination_agreement`), down to what GRPO trains on:
the cosine between the imagined and the real group-relative advantages of the same samples.
``--keyframe-chunk C`` starts both worlds at a keyframe instead of t=0: the real state where the
policy's mean action stands after ``C`` chunks (the simulator replays those actions exactly; the
imagined context is the real frames of the way there), for ``--horizon`` chunks (default: the
run's imagination horizon), as keyframe-initialized rollouts start imagined episodes.
``--object-dynamics NAME`` attaches the state-space object model in each run's folder ``NAME``
(``python -m worldmodels.object_dynamics --data RUN/data --out RUN/NAME``) to the world model: the
cubes of the imagined episodes (and so the state-rule success) then move by it; a model with an arm
(``--arm``) also gives the proprio, and replays every real sample's actions alone, open loop
(``imagined.<std>.state_model_open_loop``: the dynamics without the policy's closed loop).
``--rendered-state-model`` (with such an arm model) runs every sampled group once more closed loop
in that model alone, the policy seeing the simulator's rendering of the model's states
(``imagined.<std>.state_model_rendered``; :mod:`benchmarks._split_worlds`): what the state
model allows any pixel model at best. ``--model-drawn-real`` runs every sampled group once more in
the real simulator, the policy seeing the world model's drawing of the real states
(``imagined.<std>.model_drawn_real``): what the drawing alone costs; ``OUT_drawn_vs_real_RUN.mp4``
shows the first start of each task, the real frame beside the drawing of the same state.
``--twin-pixel-noise SIGMA`` replays every sampled group in the real simulator once more, the policy
seeing its frames with SIGMA uint8 levels of Gaussian noise and drawing the same action noise
(``twin``): the agreement a world model right up to such a change could reach at best.

Read-only on the run folders; nothing is trained.
"""

from __future__ import annotations

import argparse
import os
import time
from math import comb
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._stats import run_keys

os.environ.setdefault("MUJOCO_GL", "egl")

DEFAULT_STDS = (0.05, 0.1, 0.2, 0.3)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased P(at least one success among k of n samples with c successes) (Chen et al. 2021)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    return 1.0 - comb(n - c, k) / comb(n, k)


def group_outcome_probs(n: int, c: int, g: int) -> tuple[float, float, float]:
    """``(all_fail, all_success, mixed)`` of a group of ``g`` drawn without replacement from ``n``
    samples with ``c`` successes (hypergeometric)."""
    if not 1 <= g <= n:
        raise ValueError(f"group size {g} must be in [1, n={n}]")
    fail, succ = comb(n - c, g) / comb(n, g), comb(c, g) / comb(n, g)
    return fail, succ, 1.0 - fail - succ


def summarize_counts(counts: np.ndarray, mean_ok: np.ndarray, n: int, g: int) -> dict[str, Any]:
    """Headroom figures from per-start success counts.

    Args:
        counts: int ``(S,)`` successes among the ``n`` samples of each start.
        mean_ok: bool ``(S,)`` whether the mean action succeeded from that start.
        n: samples per start; g: GRPO group size.
    """
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= n]
    probs = np.array([group_outcome_probs(n, int(c), g) for c in counts]).reshape(-1, 3)
    failed = ~mean_ok
    out: dict[str, Any] = {
        "starts": int(len(counts)),
        "sample_success": float(counts.sum() / (n * len(counts))) if len(counts) else float("nan"),
        "pass_at_k": {str(k): float(np.mean([pass_at_k(n, int(c), k) for c in counts])) for k in ks},
        "group": {
            "all_fail": float(probs[:, 0].mean()),
            "all_success": float(probs[:, 1].mean()),
            "mixed": float(probs[:, 2].mean()),
        },
        "failed_starts": {
            "count": int(failed.sum()),
            "learnable": float(probs[failed, 2].mean()) if failed.any() else float("nan"),
            "never_solved_in_n": float((counts[failed] == 0).mean()) if failed.any() else float("nan"),
        },
    }
    return out


def _categories(outcomes: np.ndarray) -> np.ndarray:
    """Per start of bool ``(S, n)`` outcomes: 0 never, 1 some, 2 always succeeded."""
    c = outcomes.sum(1)
    return np.where(c == 0, 0, np.where(c == outcomes.shape[1], 2, 1))


def _advantages(outcomes: np.ndarray, valid: np.ndarray, g: int) -> np.ndarray:
    """GRPO advantages float64 ``(S, n)`` of bool ``(S, n)`` outcomes in groups of ``g`` consecutive
    samples (``valid`` False: out of the group and advantage 0), as the trainer computes them."""
    import torch

    from kernels.advantages import group_advantages_fast

    s, n = outcomes.shape
    ids = torch.arange(s * n) // g if n % g == 0 else torch.arange(s).repeat_interleave(n)
    adv, _ = group_advantages_fast(
        torch.as_tensor(outcomes.ravel(), dtype=torch.float32), ids, torch.as_tensor(valid.ravel())
    )
    return adv.double().numpy().reshape(s, n)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    d = float(np.sqrt((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / d) if d > 0 else float("nan")


def imagination_agreement(
    real: np.ndarray,
    imagined: np.ndarray,
    imagined_valid: np.ndarray,
    real_mean_ok: np.ndarray,
    imagined_mean_ok: np.ndarray,
    group_size: int,
    shuffles: int = 200,
    seed: int = 0,
) -> dict[str, Any]:
    """How far outcomes imagined from the same starts (and policy noise) agree with the real ones.

    Args:
        real / imagined: bool ``(S, n)``: sample ``i`` of start ``s`` succeeded in the real simulator
            / in the world model (the same policy noise in both).
        imagined_valid: bool ``(S, n)``: the imagined sample passed the gate (GRPO masks the others).
        real_mean_ok / imagined_mean_ok: bool ``(S,)``: the mean action succeeded from the start.
        group_size: GRPO group size ``g`` (groups of ``g`` consecutive samples; ``n`` a multiple of it,
            else one group per start).
        shuffles: permutations of the imagined samples within their groups for the chance level.

    Returns ``mean_action`` and ``samples`` (success rates, agreement, precision = P(real success |
    imagined success), recall = P(imagined success | real success)); ``start_rate_pearson``
    (per-start success rates); ``start_categories`` (3x3 counts, rows real, columns imagined:
    never / some / always among the ``n`` samples); and ``advantage``: ``cosine`` between the
    imagined and the real GRPO advantages of the same samples (1: imagination trains exactly as the
    real simulator would, 0: unrelated), ``cosine_shuffled`` its chance level (mean and 95th
    percentile), ``real_signal_recovered`` (the projection of the imagined advantages on the real
    ones, relative to the real ones' norm), and ``imagined_energy_on_flat_real_groups`` (the share
    of the imagined signal on groups where every real sample failed or every one succeeded: noise).
    """
    real, imagined = np.asarray(real, bool), np.asarray(imagined, bool)
    valid = np.asarray(imagined_valid, bool)
    if real.shape != imagined.shape or real.shape != valid.shape or real.ndim != 2:
        raise ValueError(
            f"real {real.shape}, imagined {imagined.shape} and imagined_valid {valid.shape} must share a (S, n) shape"
        )
    rm, im = np.asarray(real_mean_ok, bool), np.asarray(imagined_mean_ok, bool)

    def rates(r: np.ndarray, i: np.ndarray) -> dict[str, float]:
        return {
            "real_success": float(r.mean()),
            "imagined_success": float(i.mean()),
            "agreement": float((r == i).mean()),
            "precision": float(r[i].mean()) if i.any() else float("nan"),
            "recall": float(i[r].mean()) if r.any() else float("nan"),
        }

    rr, ir = real.mean(1), imagined.mean(1)
    pear = float(np.corrcoef(rr, ir)[0, 1]) if rr.std() > 0 and ir.std() > 0 else float("nan")
    conf = np.zeros((3, 3), np.int64)
    np.add.at(conf, (_categories(real), _categories(imagined)), 1)
    g = group_size
    a_real = _advantages(real, np.ones_like(real), g)
    a_imag = _advantages(imagined, valid, g)
    rng = np.random.default_rng(seed)
    s, n = real.shape
    gs = g if n % g == 0 else n
    shuffled = []
    for _ in range(shuffles):
        perm = np.argsort(rng.random((s, n // gs, gs)), axis=2)
        p_out = np.take_along_axis(imagined.reshape(s, n // gs, gs), perm, 2).reshape(s, n)
        p_val = np.take_along_axis(valid.reshape(s, n // gs, gs), perm, 2).reshape(s, n)
        shuffled.append(_cosine(_advantages(p_out, p_val, g), a_real))
    shuffled = [x for x in shuffled if np.isfinite(x)]
    flat = (a_real.reshape(s, n // gs, gs) == 0).all(2)  # real group all-fail or all-success
    e_imag = (a_imag.reshape(s, n // gs, gs) ** 2).sum(2)
    real_norm = float((a_real * a_real).sum())
    return {
        "starts": int(s),
        "samples_per_start": int(n),
        "mean_action": rates(rm, im),
        "samples": {**rates(real, imagined), "gated_out": float(1.0 - valid.mean())},
        "start_rate_pearson": pear,
        "start_categories": {
            "order": ["never", "some", "always"],
            "rows_real_cols_imagined": conf.tolist(),
            "real_some_imagined_some": float(conf[1, 1] / max(conf[1].sum(), 1)),
        },
        "advantage": {
            "cosine": _cosine(a_imag, a_real),
            "cosine_shuffled": {
                "mean": float(np.mean(shuffled)) if shuffled else float("nan"),
                "p95": float(np.percentile(shuffled, 95)) if shuffled else float("nan"),
            },
            "real_signal_recovered": float((a_imag * a_real).sum() / real_norm) if real_norm > 0 else float("nan"),
            "imagined_energy_on_flat_real_groups": float(e_imag[flat].sum() / e_imag.sum())
            if e_imag.sum() > 0
            else float("nan"),
        },
    }


class _StartFromReal:
    """An ``ImaginedVectorEnv`` whose ``reset`` starts every sub-env from a stored real start
    (``reset_to``), so ``collect_first_episodes`` runs imagined groups from real starts."""

    def __init__(self, env: Any, start: dict[str, Any]):
        self.env, self.start = env, start

    def reset(self, *, seed: Any = None, options: Any = None):
        return self.env.reset_to(**self.start)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


class _NoiseFrom:
    """A policy whose sampling draws from its own copy of a torch RNG state (common random numbers
    with the pass that started from the same state; the world model's draws do not shift it)."""

    def __init__(self, policy: Any, rng_state: Any):
        self.policy, self.rng_state = policy, rng_state

    def act(self, obs: Any, instructions: list[str], deterministic: bool = False) -> Any:
        import torch

        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self.rng_state)
            out = self.policy.act(obs, instructions, deterministic=deterministic)
            self.rng_state = torch.get_rng_state()
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)


class _PixelNoise:
    """A policy that sees the frames with independent Gaussian noise of ``sigma`` uint8 levels
    added (rounded, clipped): a twin of the real simulator whose only difference from it is an
    imperceptible change of what the policy sees. Its noise comes from its own numpy generator."""

    def __init__(self, policy: Any, sigma: float, seed: int):
        self.policy, self.sigma = policy, float(sigma)
        self.rng = np.random.default_rng(seed)

    def act(self, obs: Any, instructions: list[str], deterministic: bool = False) -> Any:
        import torch

        seen = dict(obs)
        for key, v in obs.items():
            if "image" in key:
                x = v.numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
                noisy = np.clip(np.rint(x.astype(np.float32) + self.rng.normal(0.0, self.sigma, x.shape)), 0, 255)
                seen[key] = torch.from_numpy(noisy.astype(x.dtype)) if isinstance(v, torch.Tensor) else noisy.astype(x.dtype)
        return self.policy.act(seen, instructions, deterministic=deterministic)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)


class _ReplayedStart:
    """A real chunked env (``ActionChunkWrapper``) whose ``reset`` resets every sub-env to its seed
    and replays ``prefix`` (float32 ``(C, N, K, A)``, the actions a deterministic pass took from
    those starts; ``C = 0``: none) one env step at a time. The simulator is deterministic, so each
    sub-env then stands where that pass stood after ``C`` chunks: a keyframe inside a real
    trajectory. After a reset, ``context`` holds the last ``keep`` frames, proprio states and
    environment states of the way there (``ImaginedVectorEnv.reset_to`` arguments), ``ended`` bool
    ``(N,)`` the sub-envs whose episode ended during the replay, and ``replayed_steps`` its env steps."""

    def __init__(self, env: Any, seeds: list[int], task_ids: list[str], prefix: np.ndarray | None = None, keep: int = 8):
        self.env, self.seeds, self.task_ids, self.keep = env, list(seeds), list(task_ids), int(keep)
        self.prefix = np.zeros((0, env.num_envs, env.chunk_size, 1), np.float32) if prefix is None else np.asarray(prefix)
        self.context: dict[str, Any] = {}
        self.ended = np.zeros(env.num_envs, bool)
        self.replayed_steps = 0

    def reset(self, *, seed: Any = None, options: Any = None):
        from imagination.rollout_buffer import env_instructions

        obs, info = self.env.reset(seed=self.seeds)
        instructions = env_instructions(self.env, info)
        raw = self.env.env  # one env step at a time
        env_state = getattr(raw.unwrapped, "environment_state", None)
        frames, states, env_states = [obs["image"]], [obs["state"]], [None if env_state is None else env_state()]
        self.ended = np.zeros(self.env.num_envs, bool)
        for chunk in self.prefix:
            for k in range(chunk.shape[1]):
                obs, _, term, trunc, _ = raw.step(np.ascontiguousarray(chunk[:, k], np.float32))
                self.ended |= np.asarray(term, bool) | np.asarray(trunc, bool)
                frames.append(obs["image"])
                states.append(obs["state"])
                env_states.append(None if env_state is None else env_state())
                frames, states, env_states = frames[-self.keep :], states[-self.keep :], env_states[-self.keep :]
        self.replayed_steps = int(self.prefix.shape[0] * self.prefix.shape[2]) * self.env.num_envs
        self.context = {
            "frames": np.stack(frames, 1),
            "states": np.stack(states, 1),
            "instructions": instructions,
            "task_ids": self.task_ids,
            "env_states": None if env_state is None else np.stack(env_states, 1).astype(np.float32),
        }
        return obs, info

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)


def _write_drawn_video(path: Path, world: Any, samples: int) -> None:
    """The recorded chunks of a :class:`ModelDrawnRealWorld` pass as an mp4: one tile per task (its
    first sample), the real frame | the world model's drawing of the same state."""
    from wmrl.video import grid, side_by_side, write_video

    real, drawn = np.stack(world.real_frames, 1), np.stack(world.drawn_frames, 1)  # (N, T, H, W, 3)
    tiles = [side_by_side(real[i], drawn[i]) for i in range(0, len(real), samples)]
    write_video(path, grid(tiles, ncols=3), fps=2)


def _solved(batch: Any, num_tasks: int) -> np.ndarray:
    """bool ``(tasks, samples)``: each sub-env's first episode in ``batch`` succeeded at a valid step."""
    return (batch.success & batch.valid).any(0).numpy().reshape(num_tasks, -1)


def _state_model_outcomes(model: Any, context: dict[str, Any], batch: Any, task_ids: list[str]) -> np.ndarray:
    """bool ``(N,)``: did the task's rule hold at any valid step when an arm-and-object
    ``ObjectDynamics`` replays a real pass's sampled actions (``batch.actions`` ``(T, N, K, A)``,
    clipped to [-1, 1] as the simulator clips them) open loop from the real start ``context``
    (``_ReplayedStart.context``)? The dynamics alone, without the frames the policy acts on."""
    from benchmarks._split_worlds import StateModelRollout

    sim = StateModelRollout(model, context, task_ids)
    hit = np.zeros(len(task_ids), bool)
    for t in range(batch.num_steps):
        hit |= batch.valid[t].numpy() & sim.step(batch.actions[t].float())
    return hit


def _imagined_env(
    src: Path,
    cfg: Any,
    world_round: int,
    num_envs: int,
    horizon: int,
    chunk_size: int,
    tasks: list[str],
    object_dynamics: str | None = None,
):
    """An ``ImaginedVectorEnv`` on run ``src``'s (config ``cfg``) world of round ``world_round``, as
    its RL saw it (calibrated success threshold, gate), for ``horizon``-chunk episodes from real starts;
    with ``object_dynamics`` (a folder inside ``src``) that object model attached to the world model."""
    import dataclasses

    from imagination.imagined_env import ImaginedVectorEnv
    from imagination.pipeline import calibrated_imagination_config, round_models
    from wmrl.data import load_trajectories

    wm, sm, exe = round_models(src, world_round, src / object_dynamics if object_dynamics else None)
    icfg = dataclasses.replace(
        calibrated_imagination_config(src, cfg),
        num_envs=num_envs,
        horizon=horizon,
        chunk_size=chunk_size,
        autoreset_mode="same_step",
    )
    return ImaginedVectorEnv(
        wm, load_trajectories(src / "data"), success_model=sm, exec_reward=exe, task_ids=tasks, config=icfg
    )


def measure_run(
    src: Path,
    policy_subdir: str,
    stds: list[float],
    starts_per_task: int,
    samples: int,
    group_size: int,
    progress: bool = True,
    imagined: bool = False,
    world_round: int = 0,
    keyframe_chunk: int = 0,
    keyframe_horizon: int | None = None,
    object_dynamics: str | None = None,
    twin_pixel_noise: float = 0.0,
    rendered_state_model: bool = False,
    model_drawn_real: bool = False,
    video: Path | None = None,
) -> dict[str, Any]:
    """Headroom of one run folder's policy (and with ``imagined``, the agreement of its world model of
    round ``world_round`` on the same starts); see the module docstring. ``keyframe_chunk`` C > 0
    starts every episode at a keyframe instead of t=0: where the policy's mean action stands after C
    chunks from the real start (starts where that episode ended sooner are left out), for
    ``keyframe_horizon`` chunks (default: the run's imagination horizon). ``object_dynamics``: see :func:`_imagined_env`. ``twin_pixel_noise`` > 0 also runs every sampled
    group once more in the real simulator, the policy seeing the frames with that much pixel noise
    (:class:`_PixelNoise`) and drawing the same action noise: the agreement ceiling of a world
    that is right up to an imperceptible change of the frames. ``rendered_state_model`` also runs every
    sampled group closed loop in the attached arm-and-object model, the policy seeing the simulator's
    rendering of its states (:class:`RenderedStateModelWorld`) and drawing the same action noise.
    ``model_drawn_real`` runs every sampled group once more in the real simulator, the policy seeing the
    world model's drawing of the real states (:class:`ModelDrawnRealWorld`), the same action noise;
    ``video``: where to write the first start's first sample per task of it, real | drawn."""
    import torch
    from tqdm.auto import tqdm

    import envs
    from envs.wrappers import ActionChunkWrapper
    from imagination.grpo import trajectory_scores
    from imagination.pipeline import run_config_of
    from imagination.rollout_buffer import collect_first_episodes
    from imagination.trainer_utils import set_exploration_std
    from policies import load_policy
    from wmrl.errors import WmrlError

    if not 1 <= group_size <= samples:
        raise WmrlError(f"--group-size {group_size} must be in [1, --samples {samples}]")
    cfg = run_config_of(src)
    seed, tasks = cfg.seed, envs.resolve_tasks(cfg.suite)
    kwargs = {"image_size": cfg.image_size, **cfg.render.env_kwargs()}
    pdir = src / policy_subdir
    if not pdir.exists():
        raise WmrlError(f"policy folder {pdir} not found; expected a saved policy (e.g. sft/policy)")
    policy = load_policy(pdir)
    n = samples * len(tasks)
    env = ActionChunkWrapper(
        envs.make_vec(
            [t for t in tasks for _ in range(samples)], n, autoreset_mode="same_step", seed=seed, **kwargs
        ),
        policy.chunk_size,
    )
    full = envs.full_episode_chunks(tasks, policy.chunk_size)
    if not 0 <= keyframe_chunk < full:
        raise WmrlError(f"--keyframe-chunk {keyframe_chunk} must be in [0, {full}) (chunks of a full episode)")
    horizon = int(keyframe_horizon or (cfg.imagination_config().horizon if keyframe_chunk else full))
    task_of = np.repeat(np.arange(len(tasks)), samples)
    task_ids = [tasks[int(t)] for t in task_of]
    start_ok = np.ones((len(tasks), starts_per_task), bool)  # the start's keyframe was reached
    replay_diff = 0.0
    counts = {s: np.zeros((len(tasks), starts_per_task), np.int64) for s in stds}
    mean_ok = np.zeros((len(tasks), starts_per_task), bool)
    shape = (len(tasks), starts_per_task, samples)
    outcomes = {s: np.zeros(shape, bool) for s in stds}  # real, per sample
    imag = None
    if imagined:
        imag = _imagined_env(src, cfg, world_round, n, horizon, policy.chunk_size, tasks, object_dynamics)
        im_out = {s: np.zeros(shape, bool) for s in stds}
        im_valid = {s: np.zeros(shape, bool) for s in stds}
        im_mean_ok = np.zeros((len(tasks), starts_per_task), bool)
    twin_out = {st: np.zeros(shape, bool) for st in stds} if twin_pixel_noise > 0 else None
    state_model = imag.wm.object_dynamics if imag is not None and object_dynamics else None  # the attached model
    state_out = {st: np.zeros(shape, bool) for st in stds} if state_model is not None and state_model.config.arm else None
    if rendered_state_model and state_out is None:
        raise WmrlError("--rendered-state-model needs --imagined and an arm-and-object --object-dynamics model")
    rendered_out = {st: np.zeros(shape, bool) for st in stds} if rendered_state_model else None
    if model_drawn_real and imag is None:
        raise WmrlError("--model-drawn-real draws with the run's world model; it needs --imagined")
    drawn_out = {st: np.zeros(shape, bool) for st in stds} if model_drawn_real else None
    env_steps = 0.0
    bar = tqdm(
        total=starts_per_task * (1 + len(stds)) * (2 if imagined else 1)
        + starts_per_task * len(stds) * ((twin_out is not None) + (rendered_out is not None) + (drawn_out is not None)),
        desc=f"headroom {src.name}",
        disable=not progress,
    )
    torch.manual_seed(seed)
    with torch.no_grad():
        for j in range(starts_per_task):
            # one start per task and j; seeds no training or evaluation stage uses
            seeds = [300_000 + 10_000 * seed + 100 * int(t) + j for t in task_of]
            b = collect_first_episodes(env, policy, full if keyframe_chunk else horizon, seeds=seeds, deterministic=True)
            env_steps += float(b.executed.sum())
            start = _ReplayedStart(env, seeds, task_ids)
            if keyframe_chunk:  # the keyframe: where that mean-action episode stands after C chunks
                c = keyframe_chunk
                alive = b.valid[c].numpy() if b.num_steps > c else np.zeros(n, bool)
                start = _ReplayedStart(env, seeds, task_ids, b.actions[:c].numpy())
                start.reset()
                alive &= ~start.ended
                start_ok[:, j] = alive.reshape(len(tasks), samples)[:, 0]
                if alive.any():  # the replay must land on the recorded state (a deterministic simulator)
                    replay_diff = max(replay_diff, float(np.abs(start.context["states"][alive, -1]
                                                                - b.obs["state"][c].numpy()[alive]).max()))
                b = collect_first_episodes(start, policy, horizon, deterministic=True)
                env_steps += float(b.executed.sum()) + 2 * start.replayed_steps
            mean_ok[:, j] = _solved(b, len(tasks))[:, 0]
            bar.update()
            if imag is not None:
                start.reset()
                env_steps += start.replayed_steps
                im_start = _StartFromReal(imag, start.context)
                bi = collect_first_episodes(im_start, policy, horizon, deterministic=True)
                im_mean_ok[:, j] = _solved(bi, len(tasks))[:, 0]
                bar.update()
            for s in stds:
                set_exploration_std(s, policy)
                rng_before = torch.get_rng_state()
                b = collect_first_episodes(start, policy, horizon)
                outcomes[s][:, j] = _solved(b, len(tasks))
                counts[s][:, j] = outcomes[s][:, j].sum(1)
                if state_out is not None:  # the arm-and-object model replays these actions open loop
                    hit = _state_model_outcomes(state_model, start.context, b, task_ids)
                    state_out[s][:, j] = hit.reshape(len(tasks), samples)
                env_steps += float(b.executed.sum()) + start.replayed_steps
                bar.update()
                if imag is not None:  # the same noise draws as the real pass, from the same start
                    bi = collect_first_episodes(im_start, _NoiseFrom(policy, rng_before), horizon)
                    score, ok_gate, _ = trajectory_scores(bi, "success", imag.config.gate)
                    im_out[s][:, j] = score.bool().numpy().reshape(len(tasks), samples)
                    im_valid[s][:, j] = ok_gate.numpy().reshape(len(tasks), samples)
                    bar.update()
                if rendered_out is not None:  # the state model closed loop, drawn by the simulator
                    from benchmarks._split_worlds import RenderedStateModelWorld

                    world = RenderedStateModelWorld(state_model, start, task_ids)
                    br = collect_first_episodes(world, _NoiseFrom(policy, rng_before), horizon)
                    rendered_out[s][:, j] = _solved(br, len(tasks))
                    env_steps += start.replayed_steps
                    bar.update()
                if drawn_out is not None:  # the real dynamics closed loop, drawn by the world model
                    from benchmarks._split_worlds import ModelDrawnRealWorld

                    world = ModelDrawnRealWorld(imag.wm, start, record=video is not None and j == 0 and s == stds[0])
                    bd = collect_first_episodes(world, _NoiseFrom(policy, rng_before), horizon)
                    if world.record:
                        _write_drawn_video(video, world, samples)
                    drawn_out[s][:, j] = _solved(bd, len(tasks))
                    env_steps += float(bd.executed.sum()) + start.replayed_steps
                    bar.update()
                if twin_out is not None:  # the real simulator again, the frames a little noisy
                    twin = _PixelNoise(_NoiseFrom(policy, rng_before), twin_pixel_noise, seed=10_000 * seed + j)
                    bt = collect_first_episodes(start, twin, horizon)
                    twin_out[s][:, j] = _solved(bt, len(tasks))
                    env_steps += float(bt.executed.sum()) + start.replayed_steps
                    bar.update()
    bar.close()
    env.close()
    extra: dict[str, Any] = {}
    keep = start_ok.ravel()  # starts whose keyframe was reached (all of them from t=0)
    if keyframe_chunk:
        extra["keyframe"] = {
            "chunk": keyframe_chunk,
            "horizon": horizon,
            "start_ok": start_ok.tolist(),
            "starts_reached": int(keep.sum()),
            "replay_max_state_diff": replay_diff,
        }
    if imag is not None:
        flat = (len(tasks) * starts_per_task, samples)
        extra["imagined"] = {
            "world_round": world_round,
            "object_dynamics": object_dynamics,
            "mean_action_success": float(im_mean_ok.ravel()[keep].mean()) if keep.any() else float("nan"),
            "mean_action_ok": im_mean_ok.tolist(),
            "by_std": {
                str(s): imagination_agreement(
                    outcomes[s].reshape(flat)[keep], im_out[s].reshape(flat)[keep], im_valid[s].reshape(flat)[keep],
                    mean_ok.ravel()[keep], im_mean_ok.ravel()[keep], group_size,
                )
                for s in stds
            },
            "outcomes": {str(s): im_out[s].astype(int).tolist() for s in stds},
            "valid": {str(s): im_valid[s].astype(int).tolist() for s in stds},
        }
        if state_out is not None:
            extra["imagined"]["state_model_open_loop_outcomes"] = {str(s): state_out[s].astype(int).tolist() for s in stds}
        if rendered_out is not None:
            extra["imagined"]["state_model_rendered_outcomes"] = {
                str(s): rendered_out[s].astype(int).tolist() for s in stds
            }
        if drawn_out is not None:
            extra["imagined"]["model_drawn_real_outcomes"] = {str(s): drawn_out[s].astype(int).tolist() for s in stds}
        imag.close()
    if twin_out is not None:
        extra["twin"] = {"pixel_noise": twin_pixel_noise, "outcomes": {str(s): twin_out[s].astype(int).tolist() for s in stds}}
    if imag is not None or twin_out is not None:  # the per-sample real outcomes the replays are compared with
        extra["outcomes"] = {str(s): outcomes[s].astype(int).tolist() for s in stds}
    by_std = {}
    for s in stds:
        row = summarize_counts(counts[s].ravel()[keep], mean_ok.ravel()[keep], samples, group_size)
        row["per_task"] = {
            t: summarize_counts(counts[s][i][start_ok[i]], mean_ok[i][start_ok[i]], samples, group_size)
            for i, t in enumerate(tasks)
        }
        by_std[str(s)] = row
    return {
        "seed": seed,
        "policy": str(pdir),
        "mean_action_success": float(mean_ok.ravel()[keep].mean()) if keep.any() else float("nan"),
        "mean_action_success_per_task": {
            t: float(mean_ok[i][start_ok[i]].mean()) if start_ok[i].any() else float("nan")
            for i, t in enumerate(tasks)
        },
        "by_std": by_std,
        "counts": {str(s): counts[s].tolist() for s in stds},
        "mean_action_ok": mean_ok.tolist(),
        "real_env_steps": env_steps,
        **extra,
    }


def _start_ok(run: dict[str, Any]) -> np.ndarray:
    """bool (tasks x starts,) of one run's result: the start's keyframe was reached."""
    kf = run.get("keyframe")
    return np.ravel(np.asarray(kf["start_ok"], bool)) if kf else np.ones(np.size(run["mean_action_ok"]), bool)


def aggregate_imagined(per_run: dict[str, dict[str, Any]], stds: list[float], g: int) -> dict[str, Any]:
    """Pool every run's starts into one :func:`imagination_agreement` per std."""
    runs = list(per_run.values())
    keep = np.concatenate([_start_ok(r) for r in runs])

    def pooled(rows: list[Any], n: int | None) -> np.ndarray:
        x = np.concatenate([np.asarray(x, bool).reshape(-1, n) if n else np.ravel(np.asarray(x, bool)) for x in rows])
        return x[keep]

    out = {}
    for s in stds:
        k = str(s)
        n = int(np.shape(runs[0]["outcomes"][k])[-1])
        out[k] = imagination_agreement(
            pooled([r["outcomes"][k] for r in runs], n),
            pooled([r["imagined"]["outcomes"][k] for r in runs], n),
            pooled([r["imagined"]["valid"][k] for r in runs], n),
            pooled([r["mean_action_ok"] for r in runs], None),
            pooled([r["imagined"]["mean_action_ok"] for r in runs], None),
            g,
        )
        if all("state_model_open_loop_outcomes" in r["imagined"] for r in runs):
            other = [r["imagined"]["state_model_open_loop_outcomes"][k] for r in runs]
            out[k]["state_model_open_loop"] = _replay_agreement(runs, other, k, g)
        if all("state_model_rendered_outcomes" in r["imagined"] for r in runs):
            other = [r["imagined"]["state_model_rendered_outcomes"][k] for r in runs]
            out[k]["state_model_rendered"] = _replay_agreement(runs, other, k, g)
        if all("model_drawn_real_outcomes" in r["imagined"] for r in runs):
            other = [r["imagined"]["model_drawn_real_outcomes"][k] for r in runs]
            out[k]["model_drawn_real"] = _replay_agreement(runs, other, k, g)
    return out


def _replay_agreement(runs: list[dict[str, Any]], other: list[Any], k: str, g: int) -> dict[str, Any]:
    """:func:`imagination_agreement` of the pooled real outcomes of std ``k`` with ``other`` (one
    ``(tasks, starts, n)`` outcome list per run, every sample valid), without the mean-action part
    (these replays play no mean action)."""
    keep = np.concatenate([_start_ok(r) for r in runs])
    n = int(np.shape(runs[0]["outcomes"][k])[-1])
    real = np.concatenate([np.asarray(r["outcomes"][k], bool).reshape(-1, n) for r in runs])[keep]
    rep = np.concatenate([np.asarray(x, bool).reshape(-1, n) for x in other])[keep]
    ok = np.zeros(len(real), bool)
    row = imagination_agreement(real, rep, np.ones_like(rep), ok, ok, g)
    row.pop("mean_action")
    return row


def aggregate_twin(per_run: dict[str, dict[str, Any]], stds: list[float], g: int) -> dict[str, Any]:
    """Pool every run's starts into one agreement of the pixel-noise twin with the real outcomes per
    std (:func:`_replay_agreement`)."""
    runs = list(per_run.values())
    return {str(s): _replay_agreement(runs, [r["twin"]["outcomes"][str(s)] for r in runs], str(s), g) for s in stds}


def aggregate(per_run: dict[str, dict[str, Any]], stds: list[float], samples: int, g: int) -> dict[str, Any]:
    """Pool every run's starts per std (each start weighs the same)."""
    out = {}
    keep = np.concatenate([_start_ok(r) for r in per_run.values()])
    for s in stds:
        counts = np.concatenate([np.ravel(r["counts"][str(s)]) for r in per_run.values()])
        ok = np.concatenate([np.ravel(r["mean_action_ok"]) for r in per_run.values()])
        out[str(s)] = summarize_counts(counts[keep], ok[keep], samples, g)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=Path, nargs="+", default=None, help="finished wmrl run folders")
    p.add_argument("--policy", default="sft/policy", help="policy folder inside each run (default sft/policy)")
    p.add_argument("--stds", type=float, nargs="+", default=list(DEFAULT_STDS), help="exploration stds")
    p.add_argument("--starts-per-task", type=int, default=8)
    p.add_argument("--samples", type=int, default=16, help="sampled episodes per start and std")
    p.add_argument("--group-size", type=int, default=8, help="GRPO group size of the group figures")
    p.add_argument(
        "--imagined", action="store_true", help="also run the policy in each run's world model from the same starts"
    )
    p.add_argument("--world-round", type=int, default=0, help="world model as of this RL round (default 0)")
    p.add_argument(
        "--keyframe-chunk", type=int, default=0,
        help="start at the mean action's state after this many chunks instead of t=0 (KIR-like keyframes)",
    )
    p.add_argument(
        "--horizon", type=int, default=None,
        help="chunks per episode (default: a full episode from t=0, the run's imagination horizon from a keyframe)",
    )
    p.add_argument(
        "--object-dynamics", default=None, metavar="NAME",
        help="with --imagined: attach the object-dynamics model in folder NAME of each run to its world model",
    )
    p.add_argument(
        "--twin-pixel-noise", type=float, default=0.0, metavar="SIGMA",
        help="also replay every sampled group in the real sim with SIGMA uint8 levels of pixel noise "
        "on the policy's frames (the agreement ceiling of a world that is right up to such noise)",
    )
    p.add_argument(
        "--rendered-state-model", action="store_true",
        help="with an arm-and-object --object-dynamics model: also run every sampled group closed loop in "
        "that model, the policy seeing the simulator's rendering of its states (the best frames it could get)",
    )
    p.add_argument(
        "--model-drawn-real", action="store_true",
        help="with --imagined: also run every sampled group in the real simulator, the policy seeing the world "
        "model's drawing of the real states (what the drawing alone costs)",
    )
    p.add_argument(
        "--quick", action="store_true", help="runs/imagination_lift_quick/seed_0, 2 starts, 4 samples, --imagined"
    )
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    import torch

    from benchmarks.imagination_lift import environment_info
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    torch.set_num_threads(1)
    if a.quick:
        a.starts_per_task, a.samples, a.group_size, a.stds, a.imagined = 2, 4, 4, [0.1], True
    if a.runs is None:
        a.runs = (
            [Path("runs/imagination_lift_quick/seed_0")]
            if a.quick
            else [Path(f"runs/imagination_lift/seed_{s}") for s in (0, 1, 2)]
        )
    bad = [s for s in a.stds if not s > 0]
    if bad:
        raise WmrlError(f"--stds {bad[0]} must be > 0")
    if a.starts_per_task < 1 or a.samples < 1:
        raise WmrlError(f"--starts-per-task {a.starts_per_task} and --samples {a.samples} must be >= 1")
    if a.world_round < 0:
        raise WmrlError(f"--world-round {a.world_round} must be >= 0")
    if a.object_dynamics and not a.imagined:
        raise WmrlError("--object-dynamics changes the imagined world; it needs --imagined")
    if a.model_drawn_real and not a.imagined:
        raise WmrlError("--model-drawn-real draws with the run's world model; it needs --imagined")
    if a.rendered_state_model and not a.object_dynamics:
        raise WmrlError("--rendered-state-model runs the --object-dynamics model closed loop; name one (with an arm)")
    if a.twin_pixel_noise < 0:
        raise WmrlError(f"--twin-pixel-noise {a.twin_pixel_noise} must be >= 0 (uint8 levels)")
    if a.horizon is not None and a.horizon < 1:
        raise WmrlError(f"--horizon {a.horizon} must be >= 1")
    t0 = time.perf_counter()
    if len(set(map(str, a.runs))) != len(a.runs):
        raise WmrlError(f"--runs {[str(r) for r in a.runs]} names a run folder twice")
    per_run = {}
    for key, src in zip(run_keys(a.runs), a.runs, strict=True):
        per_run[key] = measure_run(
            src, a.policy, a.stds, a.starts_per_task, a.samples, a.group_size, progress=not a.no_progress,
            imagined=a.imagined, world_round=a.world_round, keyframe_chunk=a.keyframe_chunk,
            keyframe_horizon=a.horizon, object_dynamics=a.object_dynamics, twin_pixel_noise=a.twin_pixel_noise,
            rendered_state_model=a.rendered_state_model, model_drawn_real=a.model_drawn_real,
            video=a.out.with_name(f"{a.out.stem}_drawn_vs_real_{key.replace('/', '_')}.mp4") if a.model_drawn_real else None,
        )
    res = {
        "benchmark": "rl_headroom",
        "quick": bool(a.quick),
        "runs": [str(r) for r in a.runs],
        "policy": a.policy,
        "stds": a.stds,
        "starts_per_task": a.starts_per_task,
        "samples": a.samples,
        "group_size": a.group_size,
        "keyframe_chunk": a.keyframe_chunk,
        "horizon": a.horizon,
        "object_dynamics": a.object_dynamics,
        "rendered_state_model": bool(a.rendered_state_model),
        "model_drawn_real": bool(a.model_drawn_real),
        "mean_action_success": float(np.mean([r["mean_action_success"] for r in per_run.values()])),
        "by_std": aggregate(per_run, a.stds, a.samples, a.group_size),
        **({"imagined": aggregate_imagined(per_run, a.stds, a.group_size)} if a.imagined else {}),
        "twin_pixel_noise": a.twin_pixel_noise,
        **({"twin": aggregate_twin(per_run, a.stds, a.group_size)} if a.twin_pixel_noise > 0 else {}),
        "per_run": per_run,
        "real_env_steps": float(sum(r["real_env_steps"] for r in per_run.values())),
        "wall_time_s": time.perf_counter() - t0,
        "machine": environment_info(),
    }
    atomic_write_json(a.out, res)
    reached = sum(int(np.sum(_start_ok(r))) for r in per_run.values())
    print(f"mean action success {res['mean_action_success']:.3f} ({reached} starts)")
    for s, row in res["by_std"].items():
        fs = row["failed_starts"]
        print(
            f"std {s}: sample success {row['sample_success']:.3f}, pass@k {row['pass_at_k']}, "
            f"group of {a.group_size} mixed {row['group']['mixed']:.3f}; of {fs['count']} starts the mean "
            f"action fails, learnable {fs['learnable']:.3f}, never solved in {a.samples} {fs['never_solved_in_n']:.3f}"
        )
    for s, row in res.get("imagined", {}).items():
        adv, sm = row["advantage"], row["samples"]
        print(
            f"imagined, std {s}: mean action {row['mean_action']['imagined_success']:.3f} (agreement "
            f"{row['mean_action']['agreement']:.3f}); samples {sm['imagined_success']:.3f} vs real "
            f"{sm['real_success']:.3f}, agreement {sm['agreement']:.3f}, precision {sm['precision']:.3f}; "
            f"start-rate pearson {row['start_rate_pearson']:.3f}; advantage cosine {adv['cosine']:.3f} "
            f"(chance {adv['cosine_shuffled']['mean']:.3f}, p95 {adv['cosine_shuffled']['p95']:.3f})"
        )
    replays = [(f"state model open loop (the real sampled actions), std {s}", row["state_model_open_loop"])
               for s, row in res.get("imagined", {}).items() if "state_model_open_loop" in row]
    replays += [(f"state model closed loop, drawn by the simulator, std {s}", row["state_model_rendered"])
                for s, row in res.get("imagined", {}).items() if "state_model_rendered" in row]
    replays += [(f"real dynamics closed loop, drawn by the world model, std {s}", row["model_drawn_real"])
                for s, row in res.get("imagined", {}).items() if "model_drawn_real" in row]
    replays += [(f"real twin (pixel noise {a.twin_pixel_noise}), std {s}", row) for s, row in res.get("twin", {}).items()]
    for label, row in replays:
        adv, sm = row["advantage"], row["samples"]
        print(
            f"{label}: samples {sm['imagined_success']:.3f} vs real {sm['real_success']:.3f}, agreement "
            f"{sm['agreement']:.3f}; start-rate pearson {row['start_rate_pearson']:.3f}; advantage cosine "
            f"{adv['cosine']:.3f} (chance p95 {adv['cosine_shuffled']['p95']:.3f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
