"""The ManiSkill3 vector env: ManiSkill tasks in worker processes of the ManiSkill venv.

CPU backend (SAPIEN's CPU physics allows one env per process): sub-envs are spread over
``num_workers`` processes (default: one per sub-env, at most the CPU count). GPU backend
(``sim_backend="gpu"``, chosen by ``"auto"`` when an NVIDIA device is present): one worker runs
all sub-envs as one GPU-batched ManiSkill env (one task per batch). The GPU path has not been
run on these CPU-only machines.
"""

from __future__ import annotations

import os
from pathlib import Path

from envs.base import check_image_size
from envs.registry import task_spec
from envs.subproc_vec import (
    BackendNotInstalledError,
    SubprocVecEnv,
    WorkerSpec,
    cache_dir,
    default_num_workers,
    split_evenly,
    venv_python,
)
from wmrl.errors import WmrlError

SETUP_SCRIPT = ".ci/setup_maniskill.sh"


def maniskill_worker_env() -> dict[str, str]:
    """Environment variables of a ManiSkill worker: the private lavapipe Vulkan driver (unless
    ``VK_ICD_FILENAMES`` is already set) and ``MS_ASSET_DIR`` inside the project cache."""
    cache = cache_dir()
    env = {"MS_ASSET_DIR": os.environ.get("MS_ASSET_DIR", str(cache / "maniskill_assets"))}
    icd = cache / "vulkan" / "lvp_icd.json"
    if "VK_ICD_FILENAMES" not in os.environ and not has_cuda():
        if not icd.exists():
            raise BackendNotInstalledError(
                f"the Vulkan driver for ManiSkill is missing: {icd} does not exist; run `bash {SETUP_SCRIPT}` "
                "(unpacks Mesa 25 lavapipe from Debian bookworm-backports, package mesa-vulkan-drivers)"
            )
        env["VK_ICD_FILENAMES"] = str(icd)
        libdir = cache / "vulkan" / "usr" / "lib" / "x86_64-linux-gnu"
        env["LD_LIBRARY_PATH"] = ":".join(p for p in (str(libdir), os.environ.get("LD_LIBRARY_PATH", "")) if p)
    return env


def has_cuda() -> bool:
    """An NVIDIA GPU is visible (without importing torch)."""
    return Path("/dev/nvidiactl").exists() and os.environ.get("CUDA_VISIBLE_DEVICES", "0") != ""


def make_maniskill_vec(
    task_ids: list[str],
    image_size: int | None = 128,
    wrist_image: bool = False,
    num_workers: int | None = None,
    sim_backend: str = "auto",
    reward_mode: str = "normalized_dense",
    autoreset_mode: str = "next_step",
    seed: int | None = None,
    render_size: int | None = 128,
) -> SubprocVecEnv:
    """Build a batched ManiSkill env (one task id per sub-env; the registry's ``make_vec``
    calls this).

    Args:
        task_ids: N registered ManiSkill task ids (``PickCube-v1``, ...).
        image_size: square camera size in [32, 256]; None for state-only observations (the full
            privileged ManiSkill state, no rendering, no ``image`` key).
        wrist_image: add ``wrist_image`` (the ``panda_wristcam`` hand camera).
        num_workers: worker processes for the CPU backend (default: one per sub-env, capped at
            the CPU count).
        sim_backend: ``"cpu"``, ``"gpu"`` or ``"auto"`` (GPU when an NVIDIA device is visible).
        reward_mode: ManiSkill's reward mode.
        autoreset_mode: ``"next_step"`` (default) or ``"same_step"``.
        seed: accepted for API symmetry; seed episodes with ``reset(seed=...)``.
        render_size: camera size rendered before an area resize to ``image_size`` (default 128,
            ManiSkill's own camera size: frames then match the converted motion-planning demos,
            which are 128x128 replays resized the same way; rendering 64x64 directly differs by
            about 9 uint8 levels per pixel on average). None: render at ``image_size``. A render
            size below ``image_size`` is raised to it.

    Returns:
        :class:`envs.subproc_vec.SubprocVecEnv` with ``image`` uint8 (N, S, S, 3) (unless
        state-only), optional ``wrist_image``, ``state`` float32 (N, D): qpos (9), qvel (9)
        and the task's non-privileged extras (TCP pose, goal position, ...).
    """
    if image_size is not None:
        image_size = check_image_size(image_size)
    if render_size is not None:
        if not isinstance(render_size, int) or not 32 <= render_size <= 512:
            raise WmrlError(f"render_size={render_size!r} must be an integer in [32, 512] or None")
        render_size = max(render_size, image_size or 0)
    if sim_backend == "auto":
        sim_backend = "gpu" if has_cuda() else "cpu"
    if sim_backend not in ("cpu", "gpu"):
        raise WmrlError(f"sim_backend={sim_backend!r}; expected 'cpu', 'gpu' or 'auto'")
    specs = [task_spec(t) for t in task_ids]
    bad = [s.task_id for s in specs if s.backend != "maniskill"]
    if bad:
        raise WmrlError(f"tasks {bad} are not ManiSkill tasks; valid: {', '.join(_valid())}")
    python = venv_python("maniskill", "WMRL_MANISKILL_PYTHON", SETUP_SCRIPT, "mani-skill 3.0.1, sapien 3.0.3")
    n = len(task_ids)
    if sim_backend == "gpu":
        if len(set(task_ids)) != 1:
            raise WmrlError(f"the ManiSkill GPU backend runs one task per batch; got {sorted(set(task_ids))}")
        groups = [list(range(n))]
    else:
        groups = split_evenly(n, num_workers or default_num_workers(n))
    workers = [
        WorkerSpec(
            env_indices=g,
            config=dict(
                env_ids=[specs[i].kwargs["ms_env_id"] for i in g],
                instructions=[specs[i].kwargs["instruction"] for i in g],
                image_size=image_size,
                wrist_image=wrist_image,
                sim_backend=sim_backend,
                max_episode_steps=max(specs[i].max_episode_steps for i in g) + 1,
                reward_mode=reward_mode,
                render_size=render_size if image_size else None,
            ),
        )
        for g in groups
    ]
    env = SubprocVecEnv(
        task_ids=[s.task_id for s in specs],
        max_episode_steps=[s.max_episode_steps for s in specs],
        python=python,
        worker_script=Path(__file__).resolve().parent / "worker.py",
        workers=workers,
        env={**maniskill_worker_env(), "PYTHONUNBUFFERED": "1"},
        autoreset_mode=autoreset_mode,
        metadata={
            "image_size": image_size,
            "render_size": render_size if image_size else None,
            "wrist_image": wrist_image,
            "num_workers": len(groups),
        },
    )
    return env


def _valid() -> list[str]:
    from envs.registry import list_tasks

    return list_tasks("maniskill")
