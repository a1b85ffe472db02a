"""``wmrl collect``: record scripted-expert episodes of the built-in suite as a LeRobotDataset."""

from __future__ import annotations

import argparse
import time

import numpy as np


def collect(
    out: str,
    task_or_suite: str,
    episodes: int,
    noise: list[float],
    num_envs: int = 16,
    seed: int = 0,
    image_size: int = 64,
    wrist: bool = False,
    append: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    supersample: int = 1,
    shadows: bool = False,
    background_writer: bool = True,
) -> dict:
    """Collect ``episodes`` episodes (split evenly over the ``noise`` levels) into ``out``.

    ``supersample`` > 1 anti-aliases the built-in suite's frames (rendered that many times larger
    and box-averaged down; see ``TabletopVectorEnv``); other backends take only 1. ``shadows`` lets the
    built-in suite's overhead light cast shadows (see ``TabletopVectorEnv``). ``background_writer``:
    write finished episodes in a worker thread while the simulation goes on (the same dataset).
    Returns a summary dict (episodes, frames, success rate per noise level, seconds)."""
    import envs
    from wmrl.data import DatasetRecorder
    from wmrl.errors import WmrlError

    if episodes < 1:
        raise WmrlError(f"--episodes={episodes} must be >= 1")
    if any(x < 0 for x in noise):
        raise WmrlError(f"--noise={noise} must be >= 0")
    tasks = envs.resolve_tasks(task_or_suite)  # validate before touching the output folder
    other = sorted({envs.task_spec(t).backend for t in tasks} - {"mujoco"})
    if supersample != 1 and other:
        raise WmrlError(f"--supersample={supersample} is for the built-in suite; the {other[0]} backend renders at 1")
    if shadows and other:
        raise WmrlError(f"--shadows is for the built-in suite; the {other[0]} backend renders its own lighting")
    env = envs.make_vec(
        task_or_suite,
        num_envs,
        seed=seed,
        image_size=image_size,
        wrist_image=wrist,
        autoreset_mode="same_step",
        **({"supersample": supersample} if supersample != 1 else {}),
        **({"shadows": True} if shadows else {}),
    )
    # the built-in suite's privileged state is recorded too (observation.environment_state)
    env_state_fn = getattr(env.unwrapped, "environment_state", None)
    rec = DatasetRecorder(
        out,
        fps=20,
        image_size=image_size,
        state_dim=env.single_observation_space["state"].shape[0],
        wrist=wrist,
        append=append,
        overwrite=overwrite,
        env_state_dim=0 if env_state_fn is None else int(np.asarray(env_state_fn()).shape[1]),
    )
    t0 = time.perf_counter()
    per = np.diff(np.linspace(0, episodes, len(noise) + 1).round().astype(int))
    summary: dict = {"by_noise": {}}
    for k, (nz, count) in enumerate(zip(noise, per)):
        if count == 0:
            continue
        expert = envs.make_expert(env, noise=nz, seed=seed + k)
        env.reset(seed=seed + 1000 * k)
        meta = {"noise": nz, "seed": seed, "supersample": supersample, "shadows": bool(shadows)}
        eps = rec.record(env, expert.act, int(count), meta=meta, progress=progress, background=background_writer)
        summary["by_noise"][str(nz)] = {
            "episodes": len(eps),
            "success": float(np.mean([r["success"] for r in rec._sidecar_rows[-len(eps) :]])),
        }
    root = rec.finalize()
    env.close()
    summary.update({"out": str(root), "episodes": int(sum(per)), "seconds": time.perf_counter() - t0})
    return summary


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="wmrl collect", description=__doc__)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--task", help="task id, e.g. PushCube-v0")
    g.add_argument("--suite", help="suite name, e.g. builtin")
    p.add_argument("--episodes", type=int, required=True)
    p.add_argument(
        "--noise", type=float, nargs="+", default=[0.0], help="expert noise level(s); episodes split evenly"
    )
    p.add_argument("--out", required=True, help="dataset folder (LeRobotDataset)")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--wrist", action="store_true", help="also record the wrist camera")
    p.add_argument(
        "--supersample", type=int, default=1, help="built-in suite: render N times larger and box-average (anti-aliasing)"
    )
    p.add_argument("--shadows", action="store_true", help="built-in suite: the overhead light casts shadows")
    p.add_argument("--append", action="store_true", help="add episodes to an existing dataset")
    p.add_argument(
        "--overwrite", action="store_true", help="replace an existing dataset (once the new one is complete)"
    )
    a = p.parse_args(argv)
    s = collect(
        a.out,
        a.task or a.suite,
        a.episodes,
        a.noise,
        a.num_envs,
        a.seed,
        a.image_size,
        a.wrist,
        a.append,
        a.overwrite,
        supersample=a.supersample,
        shadows=a.shadows,
    )
    rates = ", ".join(f"noise {k}: {v['success']:.0%}" for k, v in s["by_noise"].items())
    print(f"wrote {s['episodes']} episodes to {s['out']} in {s['seconds']:.1f}s ({rates})")
    return 0
