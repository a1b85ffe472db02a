"""Batched built-in tabletop environment: one :class:`mujoco.batch.Batch` steps every sub-env on
native threads and one :class:`~envs.tabletop.render.BatchRenderer` draws them all.

Mixed-task batches share the scene model (tasks differ only in layout and success test).
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import mujoco
import mujoco.batch
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from envs.base import ACTION_DIM, check_actions, check_image_size, check_sub_env_mask, reset_mask_from_options
from envs.tabletop.environment_state import pack_environment_state
from envs.tabletop.render import BatchRenderer, check_supersample
from envs.tabletop.scene import (
    CONTROL_SUBSTEPS,
    CUBE_HALF,
    FINGER_MAX,
    PARK_Y,
    TCP_HIGH,
    TCP_HOME,
    TCP_LOW,
    SceneIndex,
    build_model,
)
from envs.tabletop.tasks import TASKS, Task
from wmrl.errors import WmrlError

ACTION_SCALE = 0.04  # metres of TCP motion per unit action per control step
STATE_DIM = 8
STATE_NAMES = ("tcp_x", "tcp_y", "tcp_z", "tcp_vx", "tcp_vy", "tcp_vz", "finger_opening", "gripper_command")
_MODES = {
    "next_step": AutoresetMode.NEXT_STEP,
    "same_step": AutoresetMode.SAME_STEP,
    "disabled": AutoresetMode.DISABLED,
}


class TabletopVectorEnv(VectorEnv):
    """The built-in suite as a ``gymnasium.vector.VectorEnv`` (contract: :mod:`envs.base`).

    Args:
        task_ids: one task id per sub-env (``len(task_ids)`` = ``num_envs``).
        image_size: frame size, 32-256 (default 64).
        wrist_image: also render the wrist camera.
        seed: base seed; sub-env ``i`` draws layouts from its own generator.
        reward_type: ``"sparse"`` (1 on success) or ``"dense"`` (staged shaping in [0, 1]).
        autoreset_mode: ``"next_step"`` (gymnasium default), ``"same_step"`` or ``"disabled"``.
        max_episode_steps: overrides every task's own limit when given.
        nthread: physics threads (default: all cores, at most num_envs).
        supersample: render at ``image_size * supersample`` and box-average down to
            ``image_size`` (anti-aliasing; 1, the default: off). Frames change, physics does not.
        shadows: the overhead light casts shadows (off by default); the gripper's shadow shows
            where it is over the table. Frames change, physics does not.
        tiled_frames: draw the batch's frames as tiles of one framebuffer (the default; ``envs.tabletop.render``),
            where a frame can differ by a pixel with its sub-env's place in the batch; False: each frame drawn
            alone, the same bits whatever the batch, for fewer steps per second. Frames change, physics does not.

    Observations: ``image`` uint8 (N,H,W,3), ``wrist_image`` (optional), ``state`` float32 (N,8)
    = tcp xyz, tcp velocity xyz, finger opening (m), last gripper command. Actions (N,7): the
    suite uses dims 0-2 (TCP delta, 4 cm per unit) and 6 (gripper, +1 closes); rotation dims 3-5
    are accepted and ignored.
    """

    metadata = {
        "render_modes": ["rgb_array"],
        "autoreset_mode": AutoresetMode.NEXT_STEP,
        "action_dims_used": (0, 1, 2, 6),
    }

    def __init__(
        self,
        task_ids: list[str],
        image_size: int = 64,
        wrist_image: bool = False,
        seed: int | None = None,
        reward_type: str = "sparse",
        autoreset_mode: str = "next_step",
        max_episode_steps: int | None = None,
        nthread: int | None = None,
        render_mode: str | None = "rgb_array",
        supersample: int = 1,
        shadows: bool = False,
        tiled_frames: bool = True,
    ):
        unknown = [t for t in task_ids if t not in TASKS]
        if unknown:
            raise WmrlError(f"unknown task {unknown[0]!r}; valid tasks: {', '.join(TASKS)}")
        if reward_type not in ("sparse", "dense"):
            raise WmrlError(f"reward_type={reward_type!r}; expected 'sparse' or 'dense'")
        if autoreset_mode not in _MODES:
            raise WmrlError(f"autoreset_mode={autoreset_mode!r}; expected one of {', '.join(_MODES)}")
        self.image_size = check_image_size(image_size)
        self.num_envs = len(task_ids)
        self.task_ids = list(task_ids)
        self.tasks: list[Task] = [TASKS[t] for t in task_ids]
        self.wrist = bool(wrist_image)
        self.reward_type = reward_type
        self.render_mode = render_mode
        self.metadata = dict(self.metadata, autoreset_mode=_MODES[autoreset_mode])
        self._autoreset = _MODES[autoreset_mode]
        self.max_steps = np.array(
            [max_episode_steps or t.max_episode_steps for t in self.tasks], dtype=np.int64
        )

        self.supersample = check_supersample(supersample)
        if not isinstance(shadows, (bool, np.bool_)):
            raise WmrlError(f"shadows={shadows!r}; expected True or False")
        self.shadows = bool(shadows)
        # the image size sizes the offscreen buffer only; shadows change the renderer, not physics
        self.model = build_model(self.image_size * self.supersample, shadows=self.shadows)
        self.idx = SceneIndex(self.model)
        n = self.num_envs
        nthread = nthread or min(os.cpu_count() or 1, n)
        self._batch = mujoco.batch.Batch(self.model, n, nthread=nthread, persistent=True)
        self._qpos = self._batch.bind("qpos")
        self._qvel = self._batch.bind("qvel")
        self._ctrl = self._batch.bind("ctrl")
        self._mocap = self._batch.bind("mocap_pos")
        cams = ("agentview", "wrist") if self.wrist else ("agentview",)
        self._renderer = BatchRenderer(
            self.model, self.image_size, cams, supersample=self.supersample, shadows=self.shadows, tiled=tiled_frames
        )

        img = gym.spaces.Box(0, 255, (self.image_size, self.image_size, 3), np.uint8)
        spaces = {"image": img, "state": gym.spaces.Box(-np.inf, np.inf, (STATE_DIM,), np.float32)}
        if self.wrist:
            spaces["wrist_image"] = img
        self.single_observation_space = gym.spaces.Dict(spaces)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
        self.observation_space = batch_space(self.single_observation_space, n)
        self.action_space = batch_space(self.single_action_space, n)

        self._seed_seq = np.random.SeedSequence(seed)
        self._rngs = [np.random.default_rng(s) for s in self._seed_seq.spawn(n)]
        self.instructions = [""] * n
        self._target = np.zeros(n, np.int64)
        self._goal = np.zeros(n, np.int64)
        self._pad_xy = np.zeros((n, 2, 2))
        self._bowl_xy = np.zeros((n, 2, 2))
        self._grip_cmd = np.zeros(n, np.float32)
        self._steps = np.zeros(n, np.int64)
        self._needs_reset = np.zeros(n, dtype=bool)
        self._last_frames: list[np.ndarray] | None = None  # per camera (N, H, W, 3): the last drawn
        self._skip: np.ndarray | None = None  # sub-envs whose frames the next step need not draw
        self._groups = {
            name: np.array([i for i, t in enumerate(task_ids) if t == name])
            for name in dict.fromkeys(task_ids)
        }

    # ------------------------------------------------------------------ reset
    def reset(self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None):
        mask = reset_mask_from_options(options, self.num_envs)
        if seed is not None:
            # A list gives each sub-env its own seed; an int seeds them all through SeedSequence.
            if isinstance(seed, (list, tuple)):
                if len(seed) != self.num_envs:
                    raise WmrlError(f"got {len(seed)} seeds for {self.num_envs} envs")
                seeds = list(seed)
            else:
                seeds = np.random.SeedSequence(int(seed)).spawn(self.num_envs)
            for i in np.flatnonzero(mask):
                self._rngs[i] = np.random.default_rng(seeds[i])
        self._reset_envs(np.flatnonzero(mask))
        obs = self._observe(~mask)  # the others did not move: their frames are the last drawn
        return obs, self._info(np.zeros(self.num_envs, bool))

    def _reset_envs(self, ids: np.ndarray) -> None:
        if len(ids) == 0:
            return
        self._batch.reset(ids=ids, stage=mujoco.mjtStage.mjSTAGE_NONE)
        ix = self.idx
        for i in ids:
            rng = self._rngs[i]
            layout = self.tasks[i].sample(rng)
            q = self._qpos[i]
            tcp = TCP_HOME + rng.uniform(-0.03, 0.03, 3)
            q[ix.tcp_qpos] = tcp
            q[ix.finger_qpos] = FINGER_MAX
            for c in range(3):
                a = ix.cube_qpos[c]
                xy = layout.cube_xy[c]
                if np.isnan(xy[0]):
                    xy = np.array([0.5 + 0.2 * c, PARK_Y])
                q[a : a + 3] = (xy[0], xy[1], CUBE_HALF)
                q[a + 3 : a + 7] = (1.0, 0.0, 0.0, 0.0)
            self._qvel[i] = 0.0
            mocap = self._mocap[i]
            for k in range(2):
                pad = layout.pad_xy[k]
                mocap[ix.pad_mocap[k]] = (
                    (pad[0], pad[1], 0.0005) if not np.isnan(pad[0]) else (-0.5 - 0.2 * k, PARK_Y, 0.0005)
                )
                bowl = layout.bowl_xy[k]
                mocap[ix.bowl_mocap[k]] = (
                    (bowl[0], bowl[1], 0.0) if not np.isnan(bowl[0]) else (-1.2 - 0.3 * k, PARK_Y, 0.0)
                )
            self._pad_xy[i] = np.nan_to_num(layout.pad_xy)
            self._bowl_xy[i] = np.nan_to_num(layout.bowl_xy)
            self._target[i] = layout.target
            self._goal[i] = layout.goal
            self.instructions[i] = layout.instruction
            self._ctrl[i, :3] = tcp
            self._ctrl[i, 3] = FINGER_MAX
            self._grip_cmd[i] = -1.0
            self._steps[i] = 0
        self._batch.forward(ids=ids)
        self._needs_reset[ids] = False

    # ------------------------------------------------------------------- step
    def skip_next_frames(self, skip) -> None:
        """The next ``step`` need not draw the frames of the sub-envs in ``skip`` bool (N,): their image
        rows there (observation and ``final_obs``) hold the last frame drawn for them, and so do later
        observations until they are drawn again; a sub-env that restarts on that step gets its first
        frame drawn (see :mod:`envs.base`)."""
        self._skip = check_sub_env_mask(skip, self.num_envs, "skip")

    def step(self, actions):
        a = check_actions(actions, self.num_envs)
        skip, self._skip = self._skip, None
        pending = (
            np.flatnonzero(self._needs_reset)
            if self._autoreset == AutoresetMode.NEXT_STEP
            else np.array([], int)
        )
        tcp = self._qpos[:, self.idx.tcp_qpos]
        self._ctrl[:, :3] = np.clip(tcp + a[:, :3] * ACTION_SCALE, TCP_LOW, TCP_HIGH)
        self._ctrl[:, 3] = FINGER_MAX * (1.0 - a[:, 6]) / 2.0
        self._grip_cmd[:] = a[:, 6]
        self._batch.step(nstep=CONTROL_SUBSTEPS, stage=mujoco.mjtStage.mjSTAGE_VEL)
        self._steps += 1
        success = self._success()
        reward = self._reward(success)
        terminated = success.copy()
        truncated = (self._steps >= self.max_steps) & ~terminated
        if len(pending):
            # NEXT_STEP autoreset: envs that ended last step ignore this action and restart.
            self._reset_envs(pending)
            reward[pending] = 0.0
            terminated[pending] = False
            truncated[pending] = False
            success[pending] = False
        done = terminated | truncated
        info = self._info(success)
        if self._autoreset == AutoresetMode.SAME_STEP and done.any():
            final_obs = self._observe(skip)
            final_instr = list(self.instructions)
            ids = np.flatnonzero(done)
            self._reset_envs(ids)
            obs = self._observe(None if skip is None else skip & ~done)
            info["final_obs"] = final_obs
            info["final_info"] = {"success": success.copy(), "instruction": final_instr}
            info["_final_obs"] = done.copy()
            info["_final_info"] = done.copy()
            info["instruction"] = list(self.instructions)
        else:
            if skip is not None and len(pending):
                skip = skip.copy()
                skip[pending] = False  # restarted: their first frame
            obs = self._observe(skip)
            if self._autoreset == AutoresetMode.NEXT_STEP:
                self._needs_reset = done.copy()
        return obs, reward, terminated, truncated, info

    def step_without_autoreset(self, actions):
        """``step`` with autoreset off for this one call, whatever the mode: a sub-env that ends keeps
        its final state and layout (no ``final_obs``), the caller resets it (``reset(options=
        {"reset_mask": ...})``), and later calls autoreset as before. For a caller that also steps the
        physics of sub-envs whose episodes it runs elsewhere (``StateModelVectorEnv``'s real prefix)."""
        mode, self._autoreset = self._autoreset, AutoresetMode.DISABLED
        try:
            return self.step(actions)
        finally:
            self._autoreset = mode

    # ------------------------------------------------------------ internals
    def _cube_pos(self) -> np.ndarray:
        """(N, 3, 3) xyz of the red/green/blue cubes."""
        adr = self.idx.cube_qpos[:, None] + np.arange(3)[None, :]
        return self._qpos[:, adr]

    def _finger(self) -> np.ndarray:
        return self._qpos[:, self.idx.finger_qpos[0]].copy()

    def _goal_xy(self, cube_pos: np.ndarray) -> np.ndarray:
        n = np.arange(self.num_envs)
        goal_xy = np.zeros((self.num_envs, 2))
        for i, t in enumerate(self.tasks):
            if t.family == "push":
                goal_xy[i] = self._pad_xy[i, self._goal[i]]
            elif t.family == "pick_place":
                goal_xy[i] = self._bowl_xy[i, self._goal[i]]
        stack = np.array([t.family == "stack" for t in self.tasks])
        if stack.any():
            goal_xy[stack] = cube_pos[n[stack], self._goal[stack], :2]
        return goal_xy

    def _per_task(self, fn_name: str) -> np.ndarray:
        cube_pos = self._cube_pos()
        goal_xy = self._goal_xy(cube_pos)
        tcp = self._qpos[:, self.idx.tcp_qpos]
        finger = self._finger()
        out = np.zeros(self.num_envs, dtype=np.float64)
        for name, ids in self._groups.items():
            fn = getattr(TASKS[name], fn_name)
            out[ids] = fn(
                cube_pos[ids], self._target[ids], goal_xy[ids], self._goal[ids], tcp[ids], finger[ids]
            )
        return out

    def _success(self) -> np.ndarray:
        return self._per_task("success").astype(bool)

    def _reward(self, success: np.ndarray) -> np.ndarray:
        if self.reward_type == "sparse":
            return success.astype(np.float32)
        return self._per_task("dense_reward").astype(np.float32)

    def _state(self) -> np.ndarray:
        tcp = self._qpos[:, self.idx.tcp_qpos]
        vel = self._qvel[:, self.idx.tcp_qvel]
        return np.concatenate([tcp, vel, self._finger()[:, None], self._grip_cmd[:, None]], axis=1).astype(
            np.float32
        )

    def _observe(self, skip: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The observation; the sub-envs in ``skip`` bool (N,) keep their last drawn frames."""
        if skip is None or self._last_frames is None or not skip.any():
            frames = self._renderer.render(self._qpos, self._mocap)
        else:
            frames = [f.copy() for f in self._last_frames]
            ids = np.flatnonzero(~skip)
            if len(ids):
                for f, drawn in zip(frames, self._renderer.render(self._qpos[ids], self._mocap[ids], ids)):
                    f[ids] = drawn
        self._last_frames = frames
        obs = {"image": frames[0], "state": self._state()}
        if self.wrist:
            obs["wrist_image"] = frames[1]
        return obs

    def _info(self, success: np.ndarray) -> dict[str, Any]:
        return {"success": success, "instruction": list(self.instructions), "task_id": list(self.task_ids)}

    # ----------------------------------------------------------------- public
    def privileged_state(self) -> dict[str, np.ndarray]:
        """Simulator ground truth for scripted experts and evaluation (not an observation).

        Returns: ``cube_pos`` (N,3,3), ``tcp`` (N,3), ``finger`` (N,), ``target`` (N,),
        ``goal`` (N,), ``goal_xy`` (N,2), ``family`` (N,) str, ``steps`` (N,)."""
        cube_pos = self._cube_pos().copy()
        return {
            "cube_pos": cube_pos,
            "tcp": self._qpos[:, self.idx.tcp_qpos].copy(),
            "finger": self._finger(),
            "target": self._target.copy(),
            "goal": self._goal.copy(),
            "goal_xy": self._goal_xy(cube_pos),
            "family": np.array([t.family for t in self.tasks]),
            "steps": self._steps.copy(),
        }

    def environment_state(self) -> np.ndarray:
        """float32 (N, 13) privileged environment state (cube xyz, goal xy, target and goal
        indices; :mod:`envs.tabletop.environment_state`), recorded beside the observations."""
        cube_pos = self._cube_pos()
        return pack_environment_state(cube_pos, self._goal_xy(cube_pos), self._target, self._goal)

    def cube_orientations(self) -> np.ndarray:
        """float32 (N, 3, 4) the red/green/blue cubes' unit quaternions (w, x, y, z; world frame). Not in
        :meth:`environment_state`, which holds their positions only (``benchmarks.cube_turns`` reads both)."""
        adr = self.idx.cube_qpos[:, None] + 3 + np.arange(4)[None, :]
        return self._qpos[:, adr].astype(np.float32)

    def project_to_pixels(self, points: np.ndarray, camera: str = "agentview") -> np.ndarray:
        """Project world points (..., 3) to pixel coordinates (..., 2) = (col, row) of the
        ``image_size`` frame of a fixed camera (agent view)."""
        m = self.model
        cid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        d = mujoco.MjData(m)
        mujoco.mj_kinematics(m, d)
        mujoco.mj_camlight(m, d)
        pos, rot = d.cam_xpos[cid], d.cam_xmat[cid].reshape(3, 3)
        p = (np.asarray(points) - pos) @ rot  # camera frame: x right, y up, -z forward
        f = 0.5 * self.image_size / np.tan(np.deg2rad(m.cam_fovy[cid]) / 2)
        col = self.image_size / 2 + f * p[..., 0] / -p[..., 2]
        row = self.image_size / 2 - f * p[..., 1] / -p[..., 2]
        return np.stack([col, row], axis=-1)

    def render_states(self, proprio: np.ndarray, cube_pos: np.ndarray, ids: np.ndarray | None = None) -> np.ndarray:
        """The agent-view frames uint8 (M,H,W,3) of the current scenes with the gripper and the cubes
        placed at given states: ``proprio`` (M, 8) (tcp xyz at 0-2, finger opening at 6, as in the
        ``state`` observation) and ``cube_pos`` (M, 3, 3) (red/green/blue xyz; each cube keeps its
        orientation), for the sub-envs ``ids`` (M,) (default: all N, in order). Layouts (pads, bowls) are
        the current ones and the env's own state is left as it is: the simulator's drawing of states
        predicted elsewhere (a state-space model's rollout)."""
        ids = np.arange(self.num_envs) if ids is None else np.asarray(ids, np.int64)
        m = len(ids)
        proprio, cube_pos = np.asarray(proprio, np.float64), np.asarray(cube_pos, np.float64)
        if proprio.shape != (m, STATE_DIM) or cube_pos.shape != (m, 3, 3):
            raise WmrlError(
                f"render_states got proprio {proprio.shape} and cube_pos {cube_pos.shape}; "
                f"expected ({m}, {STATE_DIM}) and ({m}, 3, 3)"
            )
        if not (np.isfinite(proprio).all() and np.isfinite(cube_pos).all()):
            raise WmrlError("render_states got NaN/Inf states; expected finite positions")
        qpos = np.array(self._qpos[ids], copy=True)
        qpos[:, self.idx.tcp_qpos] = np.clip(proprio[:, :3], TCP_LOW, TCP_HIGH)
        qpos[:, self.idx.finger_qpos] = np.clip(proprio[:, 6:7], 0.0, FINGER_MAX)  # rf mirrors lf
        for c in range(3):
            a = self.idx.cube_qpos[c]
            qpos[:, a : a + 3] = cube_pos[:, c]
        return self._renderer.render(qpos, np.array(self._mocap[ids], copy=True), ids)[0]

    def render(self) -> np.ndarray | None:
        """The agent-view frames (N,H,W,3) of the last observation."""
        return None if self._last_frames is None else self._last_frames[0]

    def close_extras(self, **kwargs: Any) -> None:
        self._renderer.close()


def make_tabletop_vec(task_ids: list[str], **kwargs: Any) -> TabletopVectorEnv:
    """Registry factory for the ``mujoco`` backend."""
    return TabletopVectorEnv(task_ids, **kwargs)


def _gym_vector_entry(task_id: str, num_envs: int = 1, **kwargs: Any) -> TabletopVectorEnv:
    """``gymnasium.make_vec("wmrl/<Task>-v0", num_envs, vectorization_mode="vector_entry_point")``."""
    kwargs.pop("render_mode", None)
    return TabletopVectorEnv([task_id] * num_envs, **kwargs)
