"""A single built-in task as a plain ``gymnasium.Env`` (``gymnasium.make("wmrl/PushCube-v0")``).

It is a one-env view of :class:`~envs.tabletop.vector_env.TabletopVectorEnv` (autoreset off),
so single and batched envs share one implementation."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from envs.tabletop.vector_env import TabletopVectorEnv


class TabletopEnv(gym.Env):
    """One sub-env of the built-in suite. Observations ``image`` (H,W,3) uint8, ``state`` (8,),
    optional ``wrist_image``; action (7,) in [-1, 1]; ``info["success"]``; ``self.instruction``."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 20}

    def __init__(self, task_id: str, render_mode: str | None = "rgb_array", **kwargs: Any):
        kwargs.pop("max_episode_steps", None)  # gymnasium's TimeLimit handles it
        self._venv = TabletopVectorEnv(
            [task_id], autoreset_mode="disabled", max_episode_steps=10**9, **kwargs
        )
        self.render_mode = render_mode
        self.observation_space = self._venv.single_observation_space
        self.action_space = self._venv.single_action_space
        self.task_id = task_id

    @property
    def instruction(self) -> str:
        return self._venv.instructions[0]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        obs, info = self._venv.reset(seed=[int(seed)] if seed is not None else None)
        return {k: v[0] for k, v in obs.items()}, {
            "success": bool(info["success"][0]),
            "instruction": self.instruction,
        }

    def step(self, action):
        obs, r, term, trunc, info = self._venv.step(np.asarray(action, dtype=np.float32)[None])
        return (
            {k: v[0] for k, v in obs.items()},
            float(r[0]),
            bool(term[0]),
            bool(trunc[0]),
            {"success": bool(info["success"][0]), "instruction": self.instruction},
        )

    def render(self):
        frames = self._venv.render()
        return None if frames is None else frames[0]

    def close(self):
        self._venv.close()
