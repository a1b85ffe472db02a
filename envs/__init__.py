"""Simulator backends behind one batched API (see :mod:`envs.base` for the contract).

``envs.make_vec(task_or_suite, num_envs, ...)`` builds a :class:`gymnasium.vector.VectorEnv`;
``gymnasium.make("wmrl/PushCube-v0")`` a single built-in env. Importing this package is cheap:
simulators are imported only when an env is built."""

from __future__ import annotations

from envs import tabletop as _tabletop
from envs.registry import (
    UnknownTaskError,
    full_episode_chunks,
    list_backends,
    list_suites,
    list_tasks,
    make_vec,
    resolve_tasks,
    task_spec,
)

_tabletop.register()

import envs.libero  # noqa: E402,F401  (light registration; LIBERO runs in its own venv's workers)
import envs.maniskill  # noqa: E402,F401  (light registration; ManiSkill3 runs in its own venv's workers)


def make_expert(env, noise: float = 0.0, seed: int = 0):
    """Scripted expert for a built-in env (batched). ``noise`` (>= 0) is the std of Gaussian action
    noise and the rate of mistakes; 0 is the competent expert."""
    from envs.tabletop.experts import TabletopExpert

    return TabletopExpert(env, noise=noise, seed=seed)


__all__ = [
    "UnknownTaskError",
    "full_episode_chunks",
    "list_backends",
    "list_suites",
    "list_tasks",
    "make_expert",
    "make_vec",
    "resolve_tasks",
    "task_spec",
]
