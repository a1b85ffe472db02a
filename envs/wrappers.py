"""Wrappers over any env honouring the batched contract (real or imagined)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv, VectorWrapper

from envs.base import BadActionError


class ActionChunkWrapper(VectorWrapper):
    """Step action chunks of K actions: ``step(actions (N, K, A))``.

    Each sub-env executes its chunk until it ends (terminated or truncated) or the chunk runs
    out. Rewards over the executed steps are summed. ``info["chunk_valid"]`` (N, K) marks the
    steps each sub-env executed, ``info["chunk_rewards"]`` (N, K) holds per-step rewards, and
    ``info["chunk_frames"]`` (N, K, H, W, 3) the frames after each executed step. The wrapped
    env must use SAME_STEP autoreset, so a sub-env that ends mid-chunk has already restarted
    when the chunk returns (its terminal observation is in ``info["final_obs"]``). When the wrapped
    env reports ``info["gate_ok"]`` (N,) (a step judged reliable, e.g. ``StateModelVectorEnv``'s
    ensemble gate), the chunk's ``gate_ok`` is True where every executed step was; when it reports
    ``info["untrained"]`` (N,) (a step RL should not train on), the chunk's is True where any executed
    step was.

    ``frames="chunk_end"``: the caller reads only the observation a chunk returns (a policy acting on
    chunk ends, an evaluation), so the steps inside a chunk need not draw frames. When the wrapped env
    has ``skip_next_frames`` (:mod:`envs.base`) it is told to skip every sub-env's frames on all steps
    but a chunk's last, and there those of the sub-envs that ended inside the chunk; ``info`` has no
    ``chunk_frames``. The returned observations are the ones ``frames="all"`` returns (a sub-env that
    ended inside the chunk shows its restarted first frame, always drawn), but the ``final_obs`` images
    of steps inside a chunk are stale, so a caller that bootstraps from them (PPO's truncated episodes)
    keeps ``"all"``: every step's frames, in ``chunk_frames``.
    """

    def __init__(self, env: VectorEnv, chunk_size: int, frames: str = "all"):
        super().__init__(env)
        if env.metadata.get("autoreset_mode") != AutoresetMode.SAME_STEP:
            raise BadActionError("ActionChunkWrapper needs an env made with autoreset_mode='same_step'")
        if chunk_size < 1:
            raise BadActionError(f"chunk_size={chunk_size} must be >= 1")
        if frames not in ("all", "chunk_end"):
            raise BadActionError(f"frames={frames!r}; expected 'all' or 'chunk_end'")
        self.chunk_size = int(chunk_size)
        self.frames = frames
        self._skip_frames = getattr(env, "skip_next_frames", None) if frames == "chunk_end" else None

    def step(self, actions):
        a = np.asarray(actions, dtype=np.float32)
        n, k = self.num_envs, self.chunk_size
        if a.ndim != 3 or a.shape[:2] != (n, k):
            raise BadActionError(f"action chunk has shape {a.shape}; expected ({n}, {k}, A)")
        active = np.ones(n, bool)
        total = np.zeros(n, np.float32)
        valid = np.zeros((n, k), bool)
        rewards = np.zeros((n, k), np.float32)
        terminated = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        success = np.zeros(n, bool)
        frames = None
        final_obs: dict[str, np.ndarray] | None = None
        final_mask = np.zeros(n, bool)
        obs: dict[str, np.ndarray] = {}
        info: dict[str, Any] = {}
        held: dict[str, np.ndarray] | None = None
        gate_ok: np.ndarray | None = None
        untrained: np.ndarray | None = None
        for t in range(k):
            if not active.any():
                break
            # Sub-envs already done this chunk repeat a zero action; their results are ignored
            # (the env has autoreset them; we keep their post-reset obs from that step).
            step_a = np.where(active[:, None], a[:, t], 0.0).astype(np.float32)
            if self._skip_frames is not None:  # only the chunk's last frames of the sub-envs still in it
                self._skip_frames(np.ones(n, bool) if t < k - 1 else ~active)
            o, r, te, tr, inf = self.env.step(step_a)
            valid[:, t] = active
            rewards[:, t] = np.where(active, r, 0.0)
            total += rewards[:, t]
            success |= active & np.asarray(inf["success"], bool)
            if "gate_ok" in inf:
                gate_ok = np.ones(n, bool) if gate_ok is None else gate_ok
                gate_ok &= ~active | np.asarray(inf["gate_ok"], bool)
            if "untrained" in inf:
                untrained = np.zeros(n, bool) if untrained is None else untrained
                untrained |= active & np.asarray(inf["untrained"], bool)
            done = active & (te | tr)
            terminated |= active & te
            truncated |= active & tr
            if self.frames == "all":
                if frames is None:
                    frames = np.zeros((n, k) + o["image"].shape[1:], np.uint8)
                frames[active, t] = (inf["final_obs"]["image"] if "final_obs" in inf else o["image"])[active]
            if held is None:
                held = {key: v.copy() for key, v in o.items()}
            else:
                for key in held:
                    held[key][active] = o[key][active]
            if done.any():
                fo = inf["final_obs"]
                if final_obs is None:
                    final_obs = {key: v.copy() for key, v in fo.items()}
                else:
                    for key in final_obs:
                        final_obs[key][done] = fo[key][done]
                final_mask |= done
            active &= ~done
            info = inf
        obs = held if held is not None else obs
        out_info = {
            "success": success,
            "instruction": list(getattr(self.env.unwrapped, "instructions", info.get("instruction", []))),
            "chunk_valid": valid,
            "chunk_rewards": rewards,
        }
        if self.frames == "all":
            out_info["chunk_frames"] = frames
        if gate_ok is not None:
            out_info["gate_ok"] = gate_ok
        if untrained is not None:
            out_info["untrained"] = untrained
        if final_obs is not None:
            out_info["final_obs"] = final_obs
            out_info["_final_obs"] = final_mask
        return obs, total, terminated, truncated, out_info
