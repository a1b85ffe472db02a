"""The batched environment contract every backend (real or imagined) honours.

A backend returns a :class:`gymnasium.vector.VectorEnv` with:

* ``observation_space``: ``Dict`` with
    - ``image``: uint8 ``(N, H, W, 3)`` agent-view frames,
    - ``wrist_image``: uint8 ``(N, H, W, 3)`` (only where the backend has one and it was asked for),
    - ``state``: float32 ``(N, D)`` proprioception (end-effector pose, gripper).
* ``action_space``: float32 ``(N, 7)`` in [-1, 1]: end-effector delta position (3), delta
  rotation (3), gripper (1; +1 closes). A backend that uses a subset says so in
  ``metadata["action_dims_used"]`` and still accepts 7-D actions.
* ``step`` returns ``info["success"]`` (bool ``(N,)``); ``terminated`` is success (or failure
  that ends the episode); ``truncated`` is the time limit.
* the current instruction of every sub-env: ``env.instructions`` (list of N strings) and
  ``info["instruction"]``; the task id of every sub-env: ``env.task_ids``.
* per-env autoreset (``metadata["autoreset_mode"]``; gymnasium's NEXT_STEP by default,
  SAME_STEP on request) and reset of a subset: ``reset(options={"reset_mask": mask})``.
* optionally, ``skip_next_frames(skip)`` with ``skip`` bool ``(N,)``: the next ``step`` need not draw
  the frames of those sub-envs, for a caller that reads frames only at some steps (a policy that acts
  on chunk ends: ``ActionChunkWrapper(..., frames="chunk_end")``). Their image rows in that step's
  observation and ``final_obs`` then hold the last frame drawn for them, except a sub-env restarted on
  that step, whose first frame is always drawn. A backend without it draws every frame.

Action chunks (K steps) are stepped by :class:`envs.wrappers.ActionChunkWrapper`, never by a
backend.
"""

from __future__ import annotations

import numpy as np

from wmrl.errors import WmrlError

ACTION_DIM = 7
MIN_IMAGE_SIZE = 32
MAX_IMAGE_SIZE = 256


class BadActionError(WmrlError, ValueError):
    """An action of the wrong shape, dtype, or with NaN/Inf."""


def check_image_size(image_size: int) -> int:
    if (
        not isinstance(image_size, (int, np.integer))
        or not MIN_IMAGE_SIZE <= int(image_size) <= MAX_IMAGE_SIZE
    ):
        raise WmrlError(
            f"image_size={image_size!r} is out of range; expected an integer in [{MIN_IMAGE_SIZE}, {MAX_IMAGE_SIZE}]"
        )
    return int(image_size)


def check_actions(actions, num_envs: int, action_dim: int = ACTION_DIM) -> np.ndarray:
    """Validate a batch of actions and return it as float32 ``(num_envs, action_dim)`` clipped to
    [-1, 1]. Raises :class:`BadActionError` naming the bad shape or the first bad entry."""
    a = np.asarray(actions)
    if a.shape != (num_envs, action_dim):
        raise BadActionError(f"action has shape {a.shape}; expected ({num_envs}, {action_dim})")
    if not np.issubdtype(a.dtype, np.number):
        raise BadActionError(f"action has dtype {a.dtype}; expected a float array")
    a = a.astype(np.float32, copy=False)
    finite = np.isfinite(a)
    if not finite.all():
        env_i, dim_i = np.argwhere(~finite)[0]
        raise BadActionError(
            f"action[{env_i}, {dim_i}]={a[env_i, dim_i]} is not finite; expected values in [-1, 1]"
        )
    return np.clip(a, -1.0, 1.0)


def check_sub_env_mask(mask, num_envs: int, name: str) -> np.ndarray:
    """``mask`` as a boolean ``(num_envs,)`` array; a one-line error naming ``name`` otherwise."""
    m = np.asarray(mask)
    if m.shape != (num_envs,) or m.dtype != np.bool_:
        raise WmrlError(f"{name} has shape {m.shape} and dtype {m.dtype}; expected bool ({num_envs},)")
    return m


def reset_mask_from_options(options: dict | None, num_envs: int) -> np.ndarray:
    """The boolean ``(num_envs,)`` mask of sub-envs to reset (all when no ``reset_mask``)."""
    if not options or options.get("reset_mask") is None:
        return np.ones(num_envs, dtype=bool)
    return check_sub_env_mask(options["reset_mask"], num_envs, "reset_mask")
