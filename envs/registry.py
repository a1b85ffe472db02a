"""One registry of tasks and suites across simulator backends.

Backends register their tasks at import time of a *light* module (no simulator imports); the
factory that builds environments is named as ``"module:function"`` and imported only when used,
so heavy optional stacks (LIBERO, ManiSkill3) are never imported unless asked for.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from wmrl.errors import WmrlError


class UnknownTaskError(WmrlError, KeyError):
    """A task, suite or backend id that is not registered."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@dataclass(frozen=True)
class TaskSpec:
    """A registered task.

    Args:
        task_id: e.g. ``"PushCube-v0"`` (the gymnasium id is ``"wmrl/PushCube-v0"``).
        backend: backend name, e.g. ``"mujoco"``.
        max_episode_steps: episode length limit (truncation) at the control rate.
        kwargs: backend-specific defaults passed to the factory.
    """

    task_id: str
    backend: str
    max_episode_steps: int
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SuiteSpec:
    name: str
    backend: str
    task_ids: tuple[str, ...]


_BACKENDS: dict[str, str] = {}
_TASKS: dict[str, TaskSpec] = {}
_SUITES: dict[str, SuiteSpec] = {}


def register_backend(name: str, factory: str) -> None:
    """Register a backend whose vector-env factory is ``"module:function"``.

    The factory is called as ``factory(task_ids: list[str], **kwargs)`` with one task id per
    sub-env and returns a :class:`gymnasium.vector.VectorEnv` honouring the contract in
    :mod:`envs.base`."""
    _BACKENDS[name] = factory


def register_task(task_id: str, backend: str, max_episode_steps: int, **kwargs: Any) -> None:
    _TASKS[task_id] = TaskSpec(task_id, backend, max_episode_steps, dict(kwargs))


def register_suite(name: str, backend: str, task_ids: list[str] | tuple[str, ...]) -> None:
    _SUITES[name] = SuiteSpec(name, backend, tuple(task_ids))


def list_backends() -> list[str]:
    return sorted(_BACKENDS)


def list_tasks(backend: str | None = None) -> list[str]:
    return sorted(t for t, s in _TASKS.items() if backend is None or s.backend == backend)


def list_suites(backend: str | None = None) -> list[str]:
    return sorted(n for n, s in _SUITES.items() if backend is None or s.backend == backend)


def task_spec(task_id: str) -> TaskSpec:
    task_id = task_id.removeprefix("wmrl/")
    if task_id not in _TASKS:
        raise UnknownTaskError(f"unknown task {task_id!r}; valid tasks: {', '.join(list_tasks())}")
    return _TASKS[task_id]


def full_episode_chunks(task_ids: list[str], chunk_size: int) -> int:
    """Action chunks of ``chunk_size`` that cover the longest episode (``max_episode_steps``) of
    ``task_ids``: the horizon of a rollout that starts at t=0 and must be allowed to finish."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size} must be >= 1")
    return -(-max(task_spec(t).max_episode_steps for t in task_ids) // int(chunk_size))


def resolve_tasks(task_or_suite: str | list[str] | tuple[str, ...]) -> list[str]:
    """Expand a task id, a suite name, or a list of task ids into a list of task ids."""
    if isinstance(task_or_suite, (list, tuple)):
        ids = [task_spec(t).task_id for t in task_or_suite]
        if not ids:
            raise UnknownTaskError("empty task list; give at least one task id or a suite name")
    elif task_or_suite in _SUITES:
        ids = list(_SUITES[task_or_suite].task_ids)
    else:
        name = str(task_or_suite).removeprefix("wmrl/")
        if name not in _TASKS:
            raise UnknownTaskError(
                f"unknown task or suite {task_or_suite!r}; valid suites: {', '.join(list_suites())}; "
                f"valid tasks: {', '.join(list_tasks())}"
            )
        ids = [name]
    backends = {_TASKS[t].backend for t in ids}
    if len(backends) > 1:
        raise UnknownTaskError(f"tasks {ids} mix backends {sorted(backends)}; one batch holds one backend")
    return ids


def load_factory(backend: str):
    if backend not in _BACKENDS:
        raise UnknownTaskError(f"unknown backend {backend!r}; valid backends: {', '.join(list_backends())}")
    module, func = _BACKENDS[backend].split(":")
    return getattr(importlib.import_module(module), func)


def make_vec(task_or_suite: str | list[str], num_envs: int = 1, backend: str | None = None, **kwargs: Any):
    """Build a batched env over ``num_envs`` sub-envs.

    Args:
        task_or_suite: a task id (``"PushCube-v0"``), a suite name (``"builtin"``) or a list of
            task ids. Sub-env ``i`` runs task ``ids[i % len(ids)]`` (mixed-task batches).
        num_envs: number of sub-envs, >= 1.
        backend: optional; if given it must match the tasks' backend.
        kwargs: backend options (``image_size``, ``wrist_image``, ``seed``, ...).

    Returns:
        a :class:`gymnasium.vector.VectorEnv` (see :mod:`envs.base` for the contract).
    """
    ids = resolve_tasks(task_or_suite)
    spec_backend = _TASKS[ids[0]].backend
    if backend is not None and backend != spec_backend:
        raise UnknownTaskError(
            f"backend {backend!r} does not serve {ids[0]!r} (its backend is {spec_backend!r}); "
            f"valid backends: {', '.join(list_backends())}"
        )
    if not isinstance(num_envs, int) or num_envs < 1:
        raise WmrlError(f"num_envs={num_envs!r} must be an integer >= 1")
    per_env = [ids[i % len(ids)] for i in range(num_envs)]
    return load_factory(spec_backend)(per_env, **kwargs)
