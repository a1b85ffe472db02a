"""The built-in MuJoCo tabletop suite (backend ``"mujoco"``): 6 language-instructed tasks over
4 skill families (push, lift, pick-and-place, stack)."""

from __future__ import annotations

from envs.tabletop.gl import select_backend

select_backend()  # before anything imports mujoco

TASK_STEPS = {
    "PushCube-v0": 60,
    "PushCubeSpatial-v0": 60,
    "LiftCube-v0": 40,
    "PlaceInBowl-v0": 60,
    "PlaceInSpatialBowl-v0": 60,
    "StackCube-v0": 60,
}


def register() -> None:
    """Register the backend, its tasks, the ``builtin`` suite and the gymnasium ids (lazily: no
    MuJoCo import happens here)."""
    import gymnasium as gym

    from envs.registry import register_backend, register_suite, register_task

    register_backend("mujoco", "envs.tabletop.vector_env:make_tabletop_vec")
    for task_id, steps in TASK_STEPS.items():
        register_task(task_id, "mujoco", steps)
        gid = f"wmrl/{task_id}"
        if gid not in gym.registry:
            gym.register(
                gid,
                entry_point="envs.tabletop.single_env:TabletopEnv",
                max_episode_steps=steps,
                kwargs={"task_id": task_id},
                vector_entry_point="envs.tabletop.vector_env:_gym_vector_entry",
            )
    register_suite("builtin", "mujoco", list(TASK_STEPS))
