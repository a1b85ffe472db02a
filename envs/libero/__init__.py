"""LIBERO backend registration (light: no simulator import).

Task ids are ``<suite>.<bddl_name>``, e.g.
``libero_goal.open_the_middle_drawer_of_the_cabinet``; the suites are ``libero_spatial``,
``libero_object``, ``libero_goal``, ``libero_10`` and ``libero_90``. The simulator runs in
worker processes of the LIBERO venv (``.ci/setup_libero.sh``). See
:mod:`envs.libero.vector_env` and ``docs/backends.md``.
"""

from __future__ import annotations

from envs.libero.tasks import MAX_EPISODE_STEPS, SUITES
from envs.registry import register_backend, register_suite, register_task


def task_id(suite: str, bddl_name: str) -> str:
    """The registered id of a LIBERO task."""
    return f"{suite}.{bddl_name}"


register_backend("libero", "envs.libero.vector_env:make_libero_vec")
for _suite, _tasks in SUITES.items():
    for _index, (_name, _instruction) in enumerate(_tasks):
        register_task(
            task_id(_suite, _name),
            "libero",
            MAX_EPISODE_STEPS[_suite],
            suite=_suite,
            bddl_name=_name,
            task_index=_index,
            instruction=_instruction,
        )
    register_suite(_suite, "libero", [task_id(_suite, n) for n, _ in _tasks])
