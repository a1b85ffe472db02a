"""Privileged environment state of the built-in suite, as recorded in datasets
(``observation.environment_state``) and predicted by a world model with ``env_state_dim > 0``.

Layout, float32 (..., 13) (:data:`ENV_STATE_NAMES`):

* 0-8: xyz of the red, green and blue cubes (metres; a cube not in the layout sits parked out of
  view). These change during an episode; a world model predicts them.
* 9-10: the goal's xy (target pad or bowl; for stacking the base cube's xy; 0 for lifting).
* 11: index of the manipulated cube; 12: index of the goal pad/bowl or base cube.
  These are constants of the episode (they come from the keyframe, never from a prediction).

:func:`success_from_environment_state` applies each task's own success test
(:mod:`envs.tabletop.tasks`) to such a state and a proprio state (tcp xyz, finger opening), so
an imagined episode can be judged by the simulator's rule instead of by a classifier on pixels.
"""

from __future__ import annotations

import numpy as np

from envs.tabletop.tasks import TASKS
from wmrl.errors import WmrlError

CUBE_DIMS = 9  # the dynamic part: cube xyz x 3
ENV_STATE_NAMES = (
    *(f"cube_{c}_{ax}" for c in ("red", "green", "blue") for ax in "xyz"),
    "goal_x",
    "goal_y",
    "target_index",
    "goal_index",
)
ENV_STATE_DIM = len(ENV_STATE_NAMES)


def pack_environment_state(
    cube_pos: np.ndarray, goal_xy: np.ndarray, target: np.ndarray, goal: np.ndarray
) -> np.ndarray:
    """cube_pos (N,3,3), goal_xy (N,2), target (N,), goal (N,) -> float32 (N, 13)."""
    n = len(target)
    return np.concatenate(
        [
            np.asarray(cube_pos, np.float64).reshape(n, CUBE_DIMS),
            np.asarray(goal_xy, np.float64).reshape(n, 2),
            np.asarray(target, np.float64)[:, None],
            np.asarray(goal, np.float64)[:, None],
        ],
        axis=1,
    ).astype(np.float32)


def success_from_environment_state(
    task_ids: list[str], proprio: np.ndarray, env_state: np.ndarray
) -> np.ndarray:
    """Each task's own success test on (predicted) states.

    Args:
        task_ids: N built-in task ids.
        proprio: float (N, 8) ``TabletopVectorEnv`` proprio states (tcp xyz at 0-2, finger at 6).
        env_state: float (N, 13) environment states (layout above).
    Returns: bool (N,).
    """
    return _task_rule("success", task_ids, proprio, env_state).astype(bool)


def shaping_from_environment_state(
    task_ids: list[str], proprio: np.ndarray, env_state: np.ndarray
) -> np.ndarray:
    """Each task's staged progress below success (:meth:`envs.tabletop.tasks.Task.shaping`: what the
    dense reward pays before success, in [0, 0.75]) on (predicted) states; arguments as
    :func:`success_from_environment_state`. Returns float32 (N,)."""
    return _task_rule("shaping", task_ids, proprio, env_state).astype(np.float32)


def _task_rule(rule: str, task_ids: list[str], proprio: np.ndarray, env_state: np.ndarray) -> np.ndarray:
    """Each task's method ``rule`` on the states (checked) -> float64 (N,)."""
    proprio, env_state = np.asarray(proprio, np.float64), np.asarray(env_state, np.float64)
    n = len(task_ids)
    if proprio.shape != (n, 8) or env_state.shape != (n, ENV_STATE_DIM):
        raise WmrlError(
            f"states have shapes {proprio.shape} and {env_state.shape}; expected ({n}, 8) and ({n}, {ENV_STATE_DIM})"
        )
    unknown = sorted({t for t in task_ids if t not in TASKS})
    if unknown:
        raise WmrlError(f"task {unknown[0]!r} has no state-based {rule} test; built-in tasks: {', '.join(TASKS)}")
    cube_pos = env_state[:, :CUBE_DIMS].reshape(n, 3, 3)
    goal_xy = env_state[:, 9:11]
    target = np.clip(np.rint(env_state[:, 11]), 0, 2).astype(np.int64)
    goal = np.clip(np.rint(env_state[:, 12]), 0, 2).astype(np.int64)
    tcp, finger = proprio[:, :3], proprio[:, 6]
    out = np.zeros(n, np.float64)
    ids = np.asarray(task_ids)
    for name in dict.fromkeys(task_ids):
        m = ids == name
        out[m] = getattr(TASKS[name], rule)(cube_pos[m], target[m], goal_xy[m], goal[m], tcp[m], finger[m])
    return out


__all__ = [
    "CUBE_DIMS",
    "ENV_STATE_DIM",
    "ENV_STATE_NAMES",
    "pack_environment_state",
    "shaping_from_environment_state",
    "success_from_environment_state",
]
