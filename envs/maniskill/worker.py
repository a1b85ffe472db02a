"""ManiSkill3 simulator worker: runs in the ManiSkill venv (``.cache/venvs/maniskill``).

Started by :class:`envs.subproc_vec.SubprocVecEnv` as ``python envs/maniskill/worker.py``; it
imports nothing from the core packages except the stdlib+numpy wire protocol (by file path).

Action convention: the core's 7-D action is ``[dx, dy, dz, drx, dry, drz, gripper]`` in
[-1, 1] with gripper +1 = close. ManiSkill's ``pd_ee_delta_pose`` has the same layout with
gripper +1 = *open*, so the gripper sign is flipped here (and nowhere else).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np

_spec = importlib.util.spec_from_file_location("_wmrl_wire", Path(__file__).resolve().parent.parent / "_wire.py")
_wire = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_wire)

#: Robots: the wrist camera lives on ``panda_wristcam``; PegInsertionSide only supports that one.
WRISTCAM_ONLY = {"PegInsertionSide-v1"}


def _np(x: Any) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _flatten_state(obs: dict[str, Any]) -> np.ndarray:
    """``(k, D)`` float32: agent qpos, qvel and the task's non-image ``extra`` entries, in order."""
    parts = []
    for group in ("agent", "extra"):
        for v in obs.get(group, {}).values():
            a = _np(v).astype(np.float32)
            parts.append(a.reshape(a.shape[0], -1))
    return np.concatenate(parts, axis=1)


class ManiSkillHost:
    """``k`` ManiSkill sub-envs of one task (CPU: ``k`` envs of 1; GPU: one env of ``k``).

    Args:
        env_ids: ManiSkill env id of each hosted sub-env, e.g. ``["PickCube-v1"]``.
        instructions: instruction string of each hosted sub-env.
        image_size: square camera size, or None for state-only (ManiSkill ``obs_mode="state"``:
            the full privileged state, no rendering).
        wrist_image: also return the hand camera (robot ``panda_wristcam``).
        sim_backend: ``"cpu"`` or ``"gpu"``.
        max_episode_steps: ManiSkill's own limit (the core enforces the registered one).
        reward_mode: ManiSkill reward mode (``"normalized_dense"``, ``"dense"``, ``"sparse"``).
        render_size: camera size actually rendered (None: ``image_size``); frames are then
            area-resized to ``image_size`` (what the demo converter does to ManiSkill's 128x128
            replays, so policies see the same pixels in demos and in the env).
    """

    def __init__(
        self,
        env_ids: list[str],
        instructions: list[str],
        image_size: int | None,
        wrist_image: bool,
        sim_backend: str,
        max_episode_steps: int,
        reward_mode: str = "normalized_dense",
        render_size: int | None = None,
    ) -> None:
        import gymnasium as gym
        import mani_skill.envs  # noqa: F401  (registers the tasks)

        self.k = len(env_ids)
        self.env_ids = list(env_ids)
        self.instructions = list(instructions)
        self.image_size = image_size
        self.render_size = render_size or image_size
        self.wrist_image = bool(wrist_image and image_size)
        self.gpu = sim_backend == "gpu"
        if self.gpu and len(set(env_ids)) != 1:
            raise ValueError(f"the GPU backend runs one task per batch; got {sorted(set(env_ids))}")

        def make(env_id: str, n: int):
            kw: dict[str, Any] = dict(
                num_envs=n,
                control_mode="pd_ee_delta_pose",
                sim_backend=sim_backend,
                reward_mode=reward_mode,
                max_episode_steps=max_episode_steps,
                render_mode="rgb_array",
            )
            if image_size:
                kw["obs_mode"] = "rgb"
                kw["sensor_configs"] = dict(width=self.render_size, height=self.render_size)
                if self.wrist_image or env_id in WRISTCAM_ONLY:
                    kw["robot_uids"] = "panda_wristcam"
            else:
                kw["obs_mode"] = "state"
                if env_id in WRISTCAM_ONLY:
                    kw["robot_uids"] = "panda_wristcam"
            return gym.make(env_id, **kw)

        self.envs = [make(env_ids[0], self.k)] if self.gpu else [make(e, 1) for e in env_ids]
        self.last: dict[str, np.ndarray] | None = None
        self.last_success = np.zeros(self.k, dtype=bool)

    # ------------------------------------------------------------------ helpers
    def _convert(self, obs: Any) -> dict[str, np.ndarray]:
        if not self.image_size:
            return {"state": _np(obs).astype(np.float32).reshape(_np(obs).shape[0], -1)}
        out = {
            "image": self._resize(_np(obs["sensor_data"]["base_camera"]["rgb"]).astype(np.uint8)),
            "state": _flatten_state(obs),
        }
        if self.wrist_image:
            out["wrist_image"] = self._resize(_np(obs["sensor_data"]["hand_camera"]["rgb"]).astype(np.uint8))
        return out

    def _resize(self, frames: np.ndarray) -> np.ndarray:
        """(k, R, R, 3) rendered frames -> (k, S, S, 3) by area interpolation (no-op when R == S)."""
        s = self.image_size
        if frames.shape[1] == s and frames.shape[2] == s:
            return frames
        import cv2

        return np.stack([cv2.resize(f, (s, s), interpolation=cv2.INTER_AREA) for f in frames])

    def _set(self, rows: np.ndarray, new: dict[str, np.ndarray]) -> None:
        """Write observations of sub-envs ``rows`` into the cached batch."""
        if self.last is None:
            self.last = {k: np.zeros((self.k, *v.shape[1:]), v.dtype) for k, v in new.items()}
        for key, v in new.items():
            if v.shape[1:] != self.last[key].shape[1:]:
                raise ValueError(f"{key} of {self.env_ids} has shape {v.shape[1:]} != {self.last[key].shape[1:]}")
            self.last[key][rows] = v

    def _reset_rows(self, mask: np.ndarray, seeds: list[int | None]) -> None:
        idx = np.flatnonzero(mask)
        if len(idx) == 0:
            return
        if self.gpu:
            import torch

            env = self.envs[0]
            opts = {"env_idx": torch.as_tensor(idx)}
            seed = [int(seeds[i]) for i in idx] if all(seeds[i] is not None for i in idx) else None
            obs, _ = env.reset(seed=seed, options=opts)
            self._set(idx, {k: v[idx] for k, v in self._convert(obs).items()})
        else:
            for i in idx:
                obs, _ = self.envs[i].reset(seed=seeds[i])
                self._set(np.array([i]), self._convert(obs))
        self.last_success[idx] = False

    # ------------------------------------------------------------------ host API
    def describe(self) -> dict[str, Any]:
        import mani_skill
        import sapien
        import torch

        self._reset_rows(np.ones(self.k, dtype=bool), [None] * self.k)
        return {
            "obs": {k: (v.shape[1:], v.dtype.str) for k, v in self.last.items()},
            "instructions": self.instructions,
            "info": {
                "backend": "maniskill",
                "sim_backend": "gpu" if self.gpu else "cpu",
                "control_mode": "pd_ee_delta_pose",
                "action_dims_used": list(range(7)),
                "gripper_convention": "+1 closes (ManiSkill's +1 = open is flipped in the worker)",
                "versions": {
                    "mani_skill": mani_skill.__version__,
                    "sapien": sapien.__version__,
                    "torch": torch.__version__,
                    "numpy": np.__version__,
                    "python": sys.version.split()[0],
                },
            },
        }

    def reset(self, mask: np.ndarray, seeds: list[int | None], options: list[dict | None]) -> dict[str, Any]:
        self._reset_rows(np.asarray(mask, dtype=bool), seeds)
        return self._out(np.zeros(self.k, np.float32), np.zeros(self.k, bool))

    def step(self, actions: np.ndarray, reset_mask: np.ndarray, seeds: list[int | None], options: list[dict | None]):
        reset_mask = np.asarray(reset_mask, dtype=bool)
        a = np.asarray(actions, dtype=np.float32).copy()
        a[:, 6] = -a[:, 6]  # core: +1 closes; ManiSkill: +1 opens
        reward = np.zeros(self.k, np.float32)
        terminated = np.zeros(self.k, bool)
        success = np.zeros(self.k, bool)
        if self.gpu:
            import torch

            env = self.envs[0]
            obs, r, te, _tr, info = env.step(torch.as_tensor(a, device=env.unwrapped.device))
            step_rows = np.flatnonzero(~reset_mask)
            conv = self._convert(obs)
            self._set(step_rows, {k: v[step_rows] for k, v in conv.items()})
            reward[step_rows] = _np(r).astype(np.float32)[step_rows]
            terminated[step_rows] = _np(te).astype(bool)[step_rows]
            success[step_rows] = _np(info["success"]).astype(bool)[step_rows]
        else:
            for i in np.flatnonzero(~reset_mask):
                obs, r, te, _tr, info = self.envs[i].step(a[i : i + 1])
                self._set(np.array([i]), self._convert(obs))
                reward[i] = float(_np(r).reshape(-1)[0])
                terminated[i] = bool(_np(te).reshape(-1)[0])
                success[i] = bool(_np(info["success"]).reshape(-1)[0])
        self._reset_rows(reset_mask, seeds)
        return self._out(reward, terminated, success)

    def _out(self, reward: np.ndarray, terminated: np.ndarray, success: np.ndarray | None = None) -> dict[str, Any]:
        return {
            "obs": self.last,
            "reward": reward,
            "terminated": terminated,
            "success": np.zeros(self.k, bool) if success is None else success,
            "instructions": self.instructions,
        }

    def close(self) -> None:
        for env in self.envs:
            env.close()


if __name__ == "__main__":
    _wire.serve(ManiSkillHost)
