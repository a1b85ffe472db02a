"""ImaginedVectorEnv: a world model behind the real env's batched contract (a policy cannot tell).

* Observations: dict ``image`` uint8 ``(N, H, W, 3)`` (the latest imagined frame), ``state``
  float32 ``(N, D)``; ``info["success"]`` bool ``(N,)``, ``info["instruction"]`` and
  ``env.instructions`` / ``env.task_ids``; per-env autoreset (NEXT_STEP by default, SAME_STEP on
  request) and ``reset(seed=..., options={"reset_mask": bool (N,)})``.
* Steps take action chunks natively: ``step(actions float32 (N, K, 7))`` with ``K =
  env.chunk_size`` (a multiple of the world model's chunk size), like a real env wrapped in
  ``envs.wrappers.ActionChunkWrapper``; ``info["chunk_valid"]`` / ``chunk_rewards`` /
  ``chunk_frames`` as there.
* Reset fills the world-model context with the real frames ending at a keyframe
  (:mod:`imagination.keyframes`); equal per-env seeds give equal keyframes (GRPO groups).
* Success probability per imagined frame comes from the success reward model, the world
  model's success head, the lower of the two, or (``state``) the task's own success test applied
  to the world model's predicted environment state (a world model with ``env_state_dim > 0``:
  predicted object poses, the episode's goal from its keyframe; 1 or 0) (``success_source``); crossing
  ``success_threshold`` terminates. ``info["success_prob"]`` (N,) is the last executed frame's,
  ``info["chunk_success_prob"]`` (N, K) every executed frame's (NaN after a success).
  Reward ``"success"`` (1 at success), ``"relative"`` (``p_t - p_{t-1}`` summed over the chunk)
  or ``"world_model"`` (the world model's reward head). Truncation after ``horizon`` chunks.
* Gating: every step reports ``info["exec_score"]`` (mean IDM executability score of the
  chunk, ``rewards.ExecutabilityReward``) and ``info["reward_confidence"]`` (how far from the
  threshold the success probabilities are, the lowest over the executed steps; a success step
  counts with the highest probability imagined from it to the chunk's end; times the agreement
  of success model and world-model head when both exist); ``info["gate_ok"]`` is both above their
  thresholds (``confidence_scope="outcome"``: the confidence of the episode's outcome, checked at
  its success step or at the horizon; other chunks by executability alone). ``gate="mask"``
  only reports (trainers mask those trajectories), ``"terminate"`` also truncates the episode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from imagination.keyframes import KeyframeConfig, KeyframeSampler
from wmrl.errors import ConfigError, DatasetError, WmrlError
from wmrl.runs import check_finite

SUCCESS_SOURCES = ("success_model", "world_model", "min", "state")


@dataclass
class ImaginedEnvConfig:
    """Args:
    num_envs: N sub-envs (batched through the world model).
    horizon: chunk steps before truncation.
    chunk_size: actions per ``step`` (None: the world model's chunk size; else a multiple of it).
    keyframes: keyframe strategy (:class:`imagination.keyframes.KeyframeConfig`).
    reward: ``success`` | ``relative`` | ``world_model``.
    success_threshold: success probability that counts as success (terminates).
    success_persistence: consecutive imagined frames (across chunks) the probability must stay
        >= ``success_threshold`` before the episode succeeds (1: the first frame above it). A
        success model that flickers on one hallucinated frame then does not end the episode;
        ``benchmarks.wm_policy_ranking`` chooses it with the threshold on paired episodes.
    success_source: where an imagined frame's success probability comes from: ``success_model``
        (the success reward model; the world model's head when the env has none), ``world_model``
        (the world model's success head), ``min`` (the lower of the two: a success needs both), or
        ``state``: the task's own success test (``envs.tabletop.environment_state``) on the world
        model's predicted environment state (needs a world model with ``env_state_dim > 0``, keyframes
        with ``env_states``, and built-in tasks); the probability is 1 or 0, so the confidence
        gate passes every step and only executability gates.
    gate: ``mask`` | ``terminate`` | ``off``.
    exec_threshold: minimum executability score of a reliable step.
    confidence_threshold: minimum reward confidence of a reliable step.
    confidence_scope: what the confidence gate judges. ``step``: every executed chunk (one whose
        probabilities came near the threshold is unreliable, even if a later chunk succeeds
        clearly). ``outcome``: the episode's outcome only: a success by its success step (the
        highest probability from it to the chunk's end), a failure at the horizon by the step
        that came closest to the threshold; the other chunks are gated by executability alone.
    confidence_agreement: multiply the reward confidence by the agreement of the success model
        and the world model's success head (``1 - |p_model - p_head|``) when both exist. A head
        that never fires (it predicts ~0 everywhere) then makes every confident success look
        unreliable (agreement ``1 - p``).
    autoreset_mode: ``next_step`` | ``same_step``.
    """

    num_envs: int = 16
    horizon: int = 8
    chunk_size: int | None = None
    keyframes: KeyframeConfig = None  # type: ignore[assignment]
    reward: str = "success"
    success_threshold: float = 0.5
    success_persistence: int = 1
    success_source: str = "success_model"
    gate: str = "mask"
    exec_threshold: float = 0.25
    confidence_threshold: float = 0.1
    confidence_scope: str = "step"
    confidence_agreement: bool = True
    autoreset_mode: str = "next_step"

    def __post_init__(self) -> None:
        if self.keyframes is None:
            self.keyframes = KeyframeConfig()
        if not isinstance(self.num_envs, int) or self.num_envs < 1:
            raise ConfigError(f"num_envs={self.num_envs!r} must be an integer >= 1")
        if not isinstance(self.horizon, int) or self.horizon < 1:
            raise ConfigError(f"horizon={self.horizon!r} must be an integer >= 1")
        if self.reward not in ("success", "relative", "world_model"):
            raise ConfigError(f"reward={self.reward!r}; expected 'success', 'relative' or 'world_model'")
        if self.success_source not in SUCCESS_SOURCES:
            raise ConfigError(
                f"success_source={self.success_source!r}; expected one of {', '.join(SUCCESS_SOURCES)}"
            )
        if self.gate not in ("mask", "terminate", "off"):
            raise ConfigError(f"gate={self.gate!r}; expected 'mask', 'terminate' or 'off'")
        if self.confidence_scope not in ("step", "outcome"):
            raise ConfigError(f"confidence_scope={self.confidence_scope!r}; expected 'step' or 'outcome'")
        if not isinstance(self.success_persistence, int) or self.success_persistence < 1:
            raise ConfigError(f"success_persistence={self.success_persistence!r} must be an integer >= 1")
        if not 0.0 < self.success_threshold < 1.0:
            raise ConfigError(f"success_threshold={self.success_threshold} must lie in (0, 1)")
        if self.autoreset_mode not in ("next_step", "same_step"):
            raise ConfigError(f"autoreset_mode={self.autoreset_mode!r}; expected 'next_step' or 'same_step'")


class ImaginedVectorEnv(gym.vector.VectorEnv):
    """Batched imagined env (see the module docstring for the contract).

    Args:
        world_model: a ``worldmodels.WorldModel`` (``init_context`` / ``step``), on any device.
        keyframes: ``wmrl.data.Trajectories`` of real episodes (same image size and state dim
            as the world model) the episodes start from.
        success_model: ``rewards.SuccessRewardModel`` or None (then the world model's success head).
        exec_reward: ``rewards.ExecutabilityReward`` or None (then executability is not gated).
        task_ids: restrict keyframes to these tasks (None: every task in ``keyframes``).
        config: :class:`ImaginedEnvConfig`; ``**overrides`` replace its fields
            (``num_envs=..., horizon=..., keyframe_strategy="late"`` ...).
        seed: seed of the keyframe draws when ``reset`` gets none.
    """

    def __init__(
        self,
        world_model: Any,
        keyframes: Any,
        success_model: Any | None = None,
        exec_reward: Any | None = None,
        task_ids: list[str] | None = None,
        config: ImaginedEnvConfig | None = None,
        seed: int = 0,
        **overrides: Any,
    ):
        cfg = config or ImaginedEnvConfig()
        if "keyframe_strategy" in overrides:
            kf = KeyframeConfig(**{**cfg.keyframes.__dict__, "strategy": overrides.pop("keyframe_strategy")})
            overrides["keyframes"] = kf
        if overrides:
            cfg = ImaginedEnvConfig(**{**cfg.__dict__, **overrides})
        self.config = cfg
        self.wm, self.success_model, self.exec_reward = world_model, success_model, exec_reward
        wc = world_model.config
        self.env_dim = int(getattr(world_model, "env_state_dim", 0))
        size, d = int(world_model.image_size), int(world_model.state_dim) - self.env_dim
        if cfg.success_source == "state" and not self.env_dim:
            raise ConfigError(
                "success_source='state' needs a world model that predicts the environment state "
                "(world_model.env_state_dim > 0)"
            )
        if keyframes.image_size != size:
            raise DatasetError(
                f"keyframes have {keyframes.image_size}x{keyframes.image_size} frames; "
                f"the world model expects {size}x{size}"
            )
        if d and keyframes.states.shape[1] != d:
            raise DatasetError(
                f"keyframes have state dim {keyframes.states.shape[1]}; the world model expects {d}"
            )
        if success_model is not None and int(success_model.config.image_size) != size:
            raise WmrlError(
                f"success model image_size={success_model.config.image_size} differs from the world model's {size}"
            )
        self.sampler = KeyframeSampler(keyframes, int(wc.context_frames), cfg.keyframes, task_ids)
        # the world model's states of every keyframe row (proprio + environment state)
        self._kf_states = None
        if self.env_dim:
            from worldmodels.modeling_common import model_states

            self._kf_states = model_states(keyframes, wc)
        k_wm = int(wc.chunk_size)
        self.chunk_size = int(cfg.chunk_size or k_wm)
        if self.chunk_size % k_wm:
            raise ConfigError(
                f"chunk_size={self.chunk_size} must be a multiple of the world model's chunk size {k_wm}"
            )
        n = cfg.num_envs
        self.num_envs = n
        d_obs = keyframes.states.shape[1]
        self.single_observation_space = gym.spaces.Dict(
            {
                "image": gym.spaces.Box(0, 255, (size, size, 3), np.uint8),
                "state": gym.spaces.Box(-np.inf, np.inf, (d_obs,), np.float32),
            }
        )
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, n)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (int(wc.action_dim),), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (n, self.chunk_size, int(wc.action_dim)), np.float32)
        mode = (
            gym.vector.AutoresetMode.NEXT_STEP
            if cfg.autoreset_mode == "next_step"
            else gym.vector.AutoresetMode.SAME_STEP
        )
        self.metadata = {
            "autoreset_mode": mode,
            "imagined": True,
            "action_dims_used": _dims_the_world_model_reads(world_model),
        }
        self._rngs = [np.random.default_rng([seed, i]) for i in range(n)]
        self.instructions: list[str] = [""] * n
        self.task_ids: list[str] = [""] * n
        self.keyframe_rows = np.zeros(n, np.int64)
        self._t = np.zeros(n, np.int64)
        self._prev_p = np.zeros(n, np.float32)
        self._run = np.zeros(n, np.int64)  # imagined frames in a row at or above the threshold
        self._min_conf = np.full(n, np.inf, np.float32)  # lowest chunk confidence of the episode so far
        self._prev_done = np.zeros(n, bool)
        self._image = np.zeros((n, size, size, 3), np.uint8)
        self._state = np.zeros((n, d_obs), np.float32)
        # the full environment state of each sub-env's episode (its keyframe's, the first
        # env_state_dim dims then replaced by the world model's predictions)
        e_full = 0 if keyframes.env_states is None or not self.env_dim else keyframes.env_states.shape[1]
        self._env_state = np.zeros((n, e_full), np.float32)
        self._ctx = None
        self.imagined_steps = 0  # world-model steps taken (single actions)
        self.pinned_starts: dict[int, int] = {}  # reset seed -> keyframe episode (see pin_starts)

    def pin_starts(self, seed_to_episode: dict[int, int]) -> None:
        """Fixed starts, as LIBERO's fixed initial states: a reset with a seed in ``seed_to_episode``
        starts from a keyframe of that episode of ``keyframes`` (drawn by the keyframe strategy from
        the seed, so equal seeds start alike: its frame 0 under ``start``), not from a keyframe of
        any episode. Other seeds, and resets without a seed (autoresets), draw as before.
        An episode outside the sampler's tasks is a DatasetError here, before any reset."""
        for seed, episode in seed_to_episode.items():
            if int(episode) not in self.sampler.episode_rows:
                raise DatasetError(
                    f"pinned start seed {seed} names keyframe episode {episode}; the keyframes hold "
                    f"{len(self.sampler.episode_rows)} episodes of tasks {self.sampler.task_names}"
                )
        self.pinned_starts = {int(k): int(v) for k, v in seed_to_episode.items()}

    # ------------------------------------------------------------------ reset
    def _reset_rows(self, mask: np.ndarray, seeds: list[int | None]) -> None:
        idx = np.flatnonzero(mask)
        if len(idx) == 0:
            return
        frames, states = [], []
        for i in idx:
            pinned = None
            if seeds[i] is not None:
                self._rngs[i] = np.random.default_rng(int(seeds[i]))
                pinned = self.pinned_starts.get(int(seeds[i]))
            row = self.sampler.sample(self._rngs[i], pinned)
            f, s = self.sampler.context(row, self._kf_states)
            frames.append(f)
            states.append(s)
            self.keyframe_rows[i] = row
            self.instructions[i] = self.sampler.traj.instructions[row]
            self.task_ids[i] = self.sampler.traj.task_ids[row]
            self._image[i] = f[-1]
            self._state[i] = s[-1, : self._state.shape[1]]
            if self.env_dim:
                self._env_state[i] = self.sampler.traj.env_states[row]
        instr = [self.instructions[i] for i in idx] if self.wm.config.instruction_dim else None
        ctx = self.wm.init_context(np.stack(frames), np.stack(states).astype(np.float32), instr)
        if self._ctx is None or len(idx) == self.num_envs:
            self._ctx = (
                ctx
                if len(idx) == self.num_envs
                else self.wm.init_context(
                    np.repeat(np.stack(frames)[:1], self.num_envs, 0),
                    np.repeat(np.stack(states)[:1], self.num_envs, 0),
                    None if instr is None else instr[:1] * self.num_envs,
                ).assign(torch.as_tensor(mask), ctx)
            )
        else:
            self._ctx = self._ctx.assign(torch.as_tensor(mask), ctx)
        self._t[idx] = 0
        self._run[idx] = 0
        self._min_conf[idx] = np.inf
        self._prev_done[idx] = False
        self._prev_p[idx] = self._success_prob(
            self._image[idx][:, None], [self.instructions[i] for i in idx], idx=idx,
            states=self._state[idx][:, None], env_states=self._env_state[idx][:, None],
        )[0][:, 0]

    def reset(self, *, seed: int | list[int | None] | None = None, options: dict | None = None):
        """Reset all sub-envs (or those in ``options["reset_mask"]``). ``seed``: an int (sub-env i
        gets ``seed + i``) or one int per sub-env (equal seeds: equal keyframes)."""
        n = self.num_envs
        mask = np.ones(n, bool)
        if options and options.get("reset_mask") is not None:
            mask = np.asarray(options["reset_mask"])
            if mask.shape != (n,) or mask.dtype != np.bool_:
                raise WmrlError(
                    f"reset_mask has shape {mask.shape} and dtype {mask.dtype}; expected bool ({n},)"
                )
        if seed is None:
            seeds: list[int | None] = [None] * n
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(n)]
        else:
            seeds = list(seed)
            if len(seeds) != n:
                raise WmrlError(f"seed has {len(seeds)} entries; expected an int or {n} ints")
        self._reset_rows(mask, seeds)
        return self._obs(), self._info(np.zeros(n, bool))

    def reset_to(
        self,
        frames: np.ndarray,
        states: np.ndarray,
        instructions: list[str],
        task_ids: list[str],
        env_states: np.ndarray | None = None,
    ):
        """Start every sub-env from given real frames instead of keyframes (e.g. the first frame of
        a real episode, to pair imagined and real rollouts of the same start).

        Args:
            frames: uint8 ``(N, T', H, W, 3)``; states: float32 ``(N, T', D)`` proprio states; the
                last ``T`` are used (fewer are left-padded by repeating the first).
            env_states: float32 ``(N, T', S)`` the real environment states (``environment_state()``
                of the built-in suite); needed when the world model predicts them.
        Returns: ``(obs, info)`` like :meth:`reset`.
        """
        n, T = self.num_envs, int(self.wm.config.context_frames)
        frames, states = np.asarray(frames), np.asarray(states, np.float32)
        if self.env_dim:
            if env_states is None:
                raise WmrlError(
                    f"reset_to needs env_states: the world model predicts {self.env_dim} environment-state dims"
                )
            env_states = np.asarray(env_states, np.float32)
            if env_states.shape[:2] != states.shape[:2] or env_states.shape[2] < self.env_dim:
                raise WmrlError(
                    f"reset_to env_states have shape {env_states.shape}; expected ({n}, {states.shape[1]}, "
                    f">= {self.env_dim})"
                )
            self._env_state = env_states[:, -1].copy()
            states = np.concatenate([states, env_states[..., : self.env_dim]], axis=2)
        if frames.ndim != 5 or frames.shape[0] != n or frames.shape[2:] != self._image.shape[1:]:
            raise WmrlError(
                f"reset_to frames have shape {frames.shape}; expected ({n}, T, {self._image.shape[1]}, "
                f"{self._image.shape[2]}, 3)"
            )
        if len(instructions) != n or len(task_ids) != n:
            raise WmrlError(
                f"reset_to needs {n} instructions and task ids; got {len(instructions)} and {len(task_ids)}"
            )
        if frames.shape[1] < T:
            pad = T - frames.shape[1]
            frames = np.concatenate([np.repeat(frames[:, :1], pad, 1), frames], 1)
            states = np.concatenate([np.repeat(states[:, :1], pad, 1), states], 1)
        frames, states = frames[:, -T:], states[:, -T:]
        self.instructions, self.task_ids = list(instructions), list(task_ids)
        instr = self.instructions if self.wm.config.instruction_dim else None
        self._ctx = self.wm.init_context(frames, states, instr)
        self._image[:], self._state[:] = frames[:, -1], states[:, -1, : self._state.shape[1]]
        self.keyframe_rows[:] = -1
        self._t[:] = 0
        self._run[:] = 0
        self._min_conf[:] = np.inf
        self._prev_done[:] = False
        self._prev_p[:] = self._success_prob(
            self._image[:, None], self.instructions, idx=np.arange(n),
            states=self._state[:, None], env_states=self._env_state[:, None],
        )[0][:, 0]
        return self._obs(), self._info(np.zeros(n, bool))

    # ------------------------------------------------------------------ step
    def _success_prob(
        self,
        frames: np.ndarray,
        instructions: list[str],
        wm_prob: np.ndarray | None = None,
        idx: np.ndarray | None = None,
        states: np.ndarray | None = None,
        env_states: np.ndarray | None = None,
    ):
        """frames uint8 (B, K, H, W, 3) -> (prob (B, K), confidence (B, K)) in [0, 1]. ``idx``
        (B,) sub-envs, ``states`` (B, K, D) proprio and ``env_states`` (B, K, E) full environment
        states of the frames: what ``success_source="state"`` judges."""
        b, k = frames.shape[:2]
        src = self.config.success_source
        if src == "state":
            from envs.tabletop.environment_state import success_from_environment_state

            tasks = [self.task_ids[i] for i in idx for _ in range(k)]
            ok = success_from_environment_state(
                tasks, states.reshape(b * k, -1), env_states.reshape(b * k, -1)
            )
            return ok.reshape(b, k).astype(np.float32), np.ones((b, k), np.float32)
        use_model = self.success_model is not None and src != "world_model"
        if src == "world_model" and wm_prob is None:
            # a reset frame has no world-model prediction yet: nothing imagined has succeeded
            return np.zeros((b, k), np.float32), np.ones((b, k), np.float32)
        if use_model:
            p = self.success_model.predict(
                frames.reshape(b * k, *frames.shape[2:]), [s for s in instructions for _ in range(k)]
            )
            p = p.float().cpu().numpy().reshape(b, k)
            if src == "min" and wm_prob is not None:
                p = np.minimum(p, wm_prob)
        elif wm_prob is not None:
            p = wm_prob
        else:
            return np.zeros((b, k), np.float32), np.ones((b, k), np.float32)
        check_finite("imagined success probability", p)
        thr = self.config.success_threshold
        conf = np.abs(p - thr) / np.where(p >= thr, 1.0 - thr, thr)
        if use_model and wm_prob is not None and self.config.confidence_agreement:
            conf = conf * (1.0 - np.abs(p - wm_prob))
        return p.astype(np.float32), conf.astype(np.float32)

    def step(self, actions: Any):
        """Imagine one chunk ``(N, K, A)`` per sub-env; returns obs, reward (N,), terminated (N,),
        truncated (N,), info (see the module docstring)."""
        cfg, n, k = self.config, self.num_envs, self.chunk_size
        a = np.asarray(actions.detach().cpu() if isinstance(actions, torch.Tensor) else actions, np.float32)
        a_dim = int(self.single_action_space.shape[0])
        if a.shape != (n, k, a_dim):
            raise WmrlError(f"action chunk has shape {a.shape}; expected ({n}, {k}, {a_dim})")
        check_finite("actions", a)
        a = np.clip(a, -1.0, 1.0)
        reset_now = self._prev_done.copy()
        act = np.flatnonzero(~reset_now)
        reward = np.zeros(n, np.float32)
        term = np.zeros(n, bool)
        trunc = np.zeros(n, bool)
        success = np.zeros(n, bool)
        valid = np.zeros((n, k), bool)
        chunk_rewards = np.zeros((n, k), np.float32)
        chunk_frames = np.zeros((n, k, *self._image.shape[1:]), np.uint8)
        exec_score = np.full(n, np.nan, np.float32)
        conf_out = np.full(n, np.nan, np.float32)
        gate_ok = np.ones(n, bool)
        success_prob = self._prev_p.copy()
        chunk_success_prob = np.full((n, k), np.nan, np.float32)
        if len(act):
            frames, probs, confs, wm_rew, states, env_states = self._imagine(act, a[act])
            b = len(act)
            # first success within the chunk terminates; later frames are not executed. A success
            # is the frame where the probability has stayed >= threshold success_persistence frames.
            run = np.zeros((b, k), np.int64)
            carry = self._run[act].copy()
            for j in range(k):
                carry = np.where(probs[:, j] >= cfg.success_threshold, carry + 1, 0)
                run[:, j] = carry
            hit = run >= cfg.success_persistence
            first = np.where(hit.any(1), hit.argmax(1), k - 1)
            ok = np.arange(k)[None, :] <= first[:, None]  # (b, k)
            prev = np.concatenate([self._prev_p[act, None], probs[:, :-1]], 1)
            if cfg.reward == "success":
                r = hit & (np.arange(k)[None, :] == first[:, None])
            elif cfg.reward == "relative":
                r = probs - prev
            else:
                r = wm_rew
            r = np.where(ok, r, 0.0).astype(np.float32)
            check_finite("imagined reward", r)
            rows = np.arange(b)
            last = first
            e_score = self._exec_scores(act, frames, a[act])  # (b, k) in [0, 1] or None
            es = np.where(ok, e_score, np.nan) if e_score is not None else None
            # a success is judged by the highest probability the world model imagined from the
            # success step to the end of the chunk (hysteresis: a frame that just crosses the
            # threshold and keeps rising is a confident success, one that falls back is not)
            succ_rows = np.flatnonzero(hit.any(1))
            if len(succ_rows):
                after = (np.arange(k)[None, :] >= first[succ_rows, None]) & hit[succ_rows]
                tail = np.where(after, confs[succ_rows], 0.0)
                confs = confs.copy()
                confs[succ_rows, first[succ_rows]] = tail.max(1)
            c_min = np.where(ok, confs, np.inf).min(1)
            conf_out[act] = c_min
            success_prob[act] = probs[rows, last]
            chunk_success_prob[act] = np.where(ok, probs, np.nan)
            if cfg.confidence_scope == "outcome":
                hit_any = hit.any(1)
                self._min_conf[act] = np.minimum(self._min_conf[act], np.where(hit_any, np.inf, c_min))
                ends = self._t[act] + 1 >= cfg.horizon  # a failure is judged when it ends
                c_gate = np.where(hit_any, confs[rows, first], np.where(ends, self._min_conf[act], np.inf))
            else:
                c_gate = c_min
            good = c_gate >= cfg.confidence_threshold
            if es is not None:
                exec_score[act] = np.nanmean(es, 1)
                good &= exec_score[act] >= cfg.exec_threshold
            if cfg.gate != "off":
                gate_ok[act] = good
            valid[act] = ok
            chunk_rewards[act] = r
            chunk_frames[act] = np.where(ok[..., None, None, None], frames, frames[rows, last][:, None])
            reward[act] = r.sum(1)
            success[act] = hit.any(1)
            term[act] = hit.any(1)
            self._t[act] += 1
            trunc[act] = ~term[act] & (self._t[act] >= cfg.horizon)
            if cfg.gate == "terminate":
                trunc[act] |= ~term[act] & ~gate_ok[act]
            self._image[act] = frames[rows, last]
            self._state[act] = states[rows, last]
            if self.env_dim:
                self._env_state[act] = env_states[rows, last]
            self._prev_p[act] = probs[rows, last]
            self._run[act] = run[rows, last]
        info = self._info(success)
        info.update(
            chunk_valid=valid,
            chunk_rewards=chunk_rewards,
            chunk_success_prob=chunk_success_prob,
            chunk_frames=chunk_frames,
            exec_score=exec_score,
            reward_confidence=conf_out,
            gate_ok=gate_ok,
            success_prob=success_prob,
            keyframe_row=self.keyframe_rows.copy(),
        )
        done = term | trunc
        if cfg.autoreset_mode == "next_step":
            if reset_now.any():
                self._reset_rows(reset_now, [None] * n)
                info["instruction"] = list(self.instructions)
            self._prev_done = done
        elif done.any():
            info["final_obs"] = self._obs()
            info["_final_obs"] = done.copy()
            self._reset_rows(done, [None] * n)
            info["instruction"] = list(self.instructions)
        return self._obs(), reward, term, trunc, info

    @torch.no_grad()
    def _imagine(self, idx: np.ndarray, actions: np.ndarray):
        """World-model steps of sub-envs ``idx`` over one env chunk. Returns frames uint8
        (b, K, H, W, 3), success probs / confidences (b, K), world-model rewards (b, K), proprio
        states (b, K, D) and full environment states (b, K, E) (E = 0 without them)."""
        k_wm = int(self.wm.config.chunk_size)
        full = len(idx) == self.num_envs
        ctx = self._ctx if full else self._ctx.index_select(torch.as_tensor(idx))
        fr, wp, wr, st = [], [], [], []
        for j in range(0, self.chunk_size, k_wm):
            out = self.wm.step(ctx, torch.as_tensor(actions[:, j : j + k_wm], device=self.wm.device))
            ctx = out.context
            fr.append(out.frames.cpu().numpy())
            wp.append(out.success_prob.float().cpu().numpy())
            wr.append(out.rewards.float().cpu().numpy())
            st.append(out.states.float().cpu().numpy())
        mask = np.zeros(self.num_envs, bool)
        mask[idx] = True
        self._ctx = ctx if full else self._ctx.assign(torch.as_tensor(mask), ctx)
        self.imagined_steps += len(idx) * self.chunk_size
        frames = np.concatenate(fr, 1)
        wm_prob = np.concatenate(wp, 1)
        states = np.concatenate(st, 1)
        if states.shape[-1] == 0:  # a world model without state: keep the keyframe's state
            states = np.repeat(self._state[idx][:, None], frames.shape[1], 1)
        check_finite("imagined states", states)
        env_states = np.repeat(self._env_state[idx][:, None], frames.shape[1], 1)
        if self.env_dim:
            env_states[..., : self.env_dim] = states[..., -self.env_dim :]
            states = states[..., : -self.env_dim]
        probs, confs = self._success_prob(
            frames, [self.instructions[i] for i in idx], wm_prob, idx=idx, states=states, env_states=env_states
        )
        return frames, probs, confs, np.concatenate(wr, 1), states, env_states

    def _exec_scores(self, idx: np.ndarray, frames: np.ndarray, actions: np.ndarray) -> np.ndarray | None:
        """Per-step executability (b, K) of the imagined transitions, or None without a model."""
        if self.exec_reward is None:
            return None
        clip = np.concatenate([self._image[idx][:, None], frames], 1)  # (b, K+1, H, W, 3)
        out = self.exec_reward(clip, actions)
        score = out.per_step_score.float().cpu().numpy()
        check_finite("executability score", score)
        return score

    # ------------------------------------------------------------------ helpers
    def environment_state(self) -> np.ndarray:
        """float32 (N, E): each sub-env's environment state after its last step, in the layout of
        the real env's ``environment_state()`` (``envs.tabletop.environment_state``): the world
        model's predicted dims, then the episode constants taken from its start. Needs a world
        model with ``env_state_dim > 0``."""
        if not self.env_dim:
            raise ConfigError("environment_state() needs a world model with env_state_dim > 0")
        return self._env_state.copy()

    def _obs(self) -> dict[str, np.ndarray]:
        return {"image": self._image.copy(), "state": self._state.copy()}

    def _info(self, success: np.ndarray) -> dict[str, Any]:
        return {"success": success.copy(), "instruction": list(self.instructions)}

    def close(self, **kwargs: Any) -> None:
        self._ctx = None


def _dims_the_world_model_reads(world_model: Any) -> list[int]:
    """Action dims that varied in the world model's training data (the others it ignores, like
    the real env they came from; see ``worldmodels`` ``norm_actions``)."""
    a_dim = int(world_model.config.action_dim)
    if not hasattr(world_model, "action_dim_mask"):
        return list(range(a_dim))
    dims = torch.nonzero(world_model.action_dim_mask().cpu()).flatten().tolist()
    return [int(d) for d in dims] or list(range(a_dim))


__all__ = ["ImaginedEnvConfig", "ImaginedVectorEnv"]
