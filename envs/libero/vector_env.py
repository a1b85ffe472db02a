"""The LIBERO vector env: LIBERO tasks in worker processes of the LIBERO venv.

Each worker process hosts a group of sub-envs (default: one per sub-env, at most the CPU
count); workers step in parallel. Every episode starts from one of the task's 50 fixed initial
states (LIBERO's evaluation protocol): sub-env ``i`` of a task starts at init state
``j`` (its rank among the sub-envs of that task) and advances by the number of such
sub-envs at each reset, so N sub-envs of one task cover the 50 states without repeats. Choose
one explicitly with ``reset(options={"reset_mask": m, "env_options": [{"init_state_id": 7}, ...]})``.
The current one is in ``info["init_state_id"]``.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from envs.base import check_image_size
from envs.registry import list_suites, task_spec
from envs.subproc_vec import (
    SubprocVecEnv,
    WorkerSpec,
    cache_dir,
    default_num_workers,
    split_evenly,
    venv_python,
)
from wmrl.errors import WmrlError

SETUP_SCRIPT = ".ci/setup_libero.sh"


def libero_worker_env() -> dict[str, str]:
    """Environment of a LIBERO worker: the prepared config (so import never prompts) and
    headless rendering (EGL unless ``MUJOCO_GL`` is set)."""
    cfg = Path(os.environ.get("LIBERO_CONFIG_PATH") or cache_dir() / "libero")
    if not (cfg / "config.yaml").exists():
        from envs.subproc_vec import BackendNotInstalledError

        raise BackendNotInstalledError(
            f"LIBERO's config is missing: {cfg / 'config.yaml'} does not exist; run `bash {SETUP_SCRIPT}`"
        )
    gl = os.environ.get("MUJOCO_GL", "egl")
    return {"LIBERO_CONFIG_PATH": str(cfg), "MUJOCO_GL": gl, "PYOPENGL_PLATFORM": gl, "PYTHONUNBUFFERED": "1"}


def make_libero_vec(
    task_ids: list[str],
    image_size: int | None = 128,
    wrist_image: bool = True,
    num_workers: int | None = None,
    reflections: bool = True,
    autoreset_mode: str = "next_step",
    seed: int | None = None,
) -> SubprocVecEnv:
    """Build a batched LIBERO env (one task id per sub-env; the registry's ``make_vec`` calls
    this).

    Args:
        task_ids: N registered LIBERO task ids (``libero_goal.open_the_middle_drawer_of_the_cabinet``).
        image_size: square camera size in [32, 256] (default 128, LIBERO's); None for state-only.
        wrist_image: add ``wrist_image`` (the eye-in-hand camera).
        num_workers: worker processes (default: one per sub-env, capped at the CPU count).
        reflections: keep MuJoCo reflections (LIBERO's look); False renders about 1.7x faster.
        autoreset_mode: ``"next_step"`` (default) or ``"same_step"``.
        seed: seed of the robosuite envs (default 0, as LIBERO's evaluation).

    Returns:
        :class:`envs.subproc_vec.SubprocVecEnv` with ``image`` uint8 (N, S, S, 3) upright,
        ``wrist_image`` uint8 (N, S, S, 3), ``state`` float32 (N, 8).
    """
    if image_size is not None:
        image_size = check_image_size(image_size)
    specs = [task_spec(t) for t in task_ids]
    bad = [s.task_id for s in specs if s.backend != "libero"]
    if bad:
        raise WmrlError(f"tasks {bad} are not LIBERO tasks; valid suites: {', '.join(list_suites('libero'))}")
    python = venv_python("libero", "WMRL_LIBERO_PYTHON", SETUP_SCRIPT, "hf-libero 0.1.4 with mujoco<3.9")
    env_vars = libero_worker_env()
    counts = Counter(s.task_id for s in specs)
    rank: dict[str, int] = Counter()
    offsets = []
    for s in specs:
        offsets.append(rank[s.task_id])
        rank[s.task_id] += 1
    n = len(specs)
    groups = split_evenly(n, num_workers or default_num_workers(n))
    workers = [
        WorkerSpec(
            env_indices=g,
            config=dict(
                tasks=[(specs[i].kwargs["suite"], specs[i].kwargs["bddl_name"]) for i in g],
                image_size=image_size,
                wrist_image=wrist_image,
                init_offsets=[offsets[i] for i in g],
                init_strides=[counts[specs[i].task_id] for i in g],
                reflections=reflections,
                env_seed=0 if seed is None else int(seed),
            ),
        )
        for g in groups
    ]
    return SubprocVecEnv(
        task_ids=[s.task_id for s in specs],
        max_episode_steps=[s.max_episode_steps for s in specs],
        python=python,
        worker_script=Path(__file__).resolve().parent / "worker.py",
        workers=workers,
        env=env_vars,
        autoreset_mode=autoreset_mode,
        metadata={"image_size": image_size, "wrist_image": wrist_image, "num_workers": len(groups)},
    )
