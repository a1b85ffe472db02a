"""ManiSkill3 backend registration (light: no simulator import).

Tasks keep ManiSkill's ids (``PickCube-v1``, ...); they run with the ``pd_ee_delta_pose``
controller in worker processes of the ManiSkill venv (``.ci/setup_maniskill.sh``). The suite
``maniskill`` holds all of them. See :mod:`envs.maniskill.vector_env` and ``docs/backends.md``.

``PickCube-v1-mp100`` is ``PickCube-v1`` with a 100-step limit: ManiSkill's motion-planning demos
of PickCube take about 75 steps (the default limit is 50), so policies cloned from them are
evaluated with the longer limit (ManiSkill's own baselines do the same). It is not in the suite.
"""

from __future__ import annotations

from envs.registry import register_backend, register_suite, register_task

#: task id -> (episode limit at 20 Hz control, instruction). Limits are ManiSkill's defaults.
TASKS: dict[str, tuple[int, str]] = {
    "PickCube-v1": (50, "pick up the red cube and move it to the goal position"),
    "PushCube-v1": (50, "push the cube to the red and white target"),
    "StackCube-v1": (50, "stack the red cube on top of the green cube"),
    "PegInsertionSide-v1": (100, "insert the peg sideways into the hole in the box"),
}

register_backend("maniskill", "envs.maniskill.vector_env:make_maniskill_vec")
for _task_id, (_steps, _instruction) in TASKS.items():
    register_task(_task_id, "maniskill", _steps, ms_env_id=_task_id, instruction=_instruction)
register_suite("maniskill", "maniskill", list(TASKS))

#: variant id -> (ManiSkill env id, episode limit): same task, longer limit (see the module docstring).
VARIANTS: dict[str, tuple[str, int]] = {"PickCube-v1-mp100": ("PickCube-v1", 100)}
for _task_id, (_ms_id, _steps) in VARIANTS.items():
    register_task(_task_id, "maniskill", _steps, ms_env_id=_ms_id, instruction=TASKS[_ms_id][1])
