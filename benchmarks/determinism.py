"""Do two identical training runs give identical weights, with and without deterministic kernels?

``python -m benchmarks.determinism [--quick] [--run RUN] [--device auto] [--steps N] --out FILE.json``

The world model (``worldmodels.train``) and SFT (``policies.train``) each train ``--steps`` steps
from the same seed and data twice with ``deterministic=false`` and twice with ``deterministic=true``
(:func:`wmrl.devices.use_deterministic_algorithms`), every run in a fresh process (the switch and
cuBLAS's workspace setting are per process, as in ``wmrl run``). For each trainer and setting it
reports whether the two runs' saved weights are byte-identical, how many tensors differ and the
largest difference, and the median seconds per run. A kernel with no deterministic form on this
device shows as that run's error (torch names the op).

On a CPU both settings repeat bit for bit; the GPU is where they can differ (``cuDNN`` picks
convolution algorithms and reductions add atomically).

Data: ``--run RUN`` trains the run's own world model and policy configs on its demos (``RUN/data``),
with its SFT instruction embeddings (``RUN/sft/policy/instructions.safetensors``, so no sentence model is
loaded); otherwise a small fresh collection of the built-in suite in a temporary folder with the
``run_quick`` configs. ``--quick``: one task, 4 episodes, 5 steps (CI smoke).
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

TRAINERS = ("world_model", "sft")
SETTINGS = ("default", "deterministic")


def train_once(trainer: str, deterministic: bool, job: dict[str, Any], out: str) -> dict[str, Any]:
    """One training run in this (fresh) process; its saved weights' path, seconds, or the error."""
    import torch

    from wmrl.data import load_trajectories

    torch.set_num_threads(job["threads"])
    traj = load_trajectories(job["data"])
    t0 = time.perf_counter()
    try:
        if trainer == "world_model":
            from worldmodels.train import TrainLoopConfig, TrainWorldModelConfig, train_world_model

            loop = TrainLoopConfig(steps=job["steps"], batch_size=job["wm_batch"], checkpoint_every=job["steps"],
                                   log_every=max(1, job["steps"] // 5), videos=0, seed=0, device=job["device"],
                                   deterministic=deterministic, num_threads=job["threads"])
            cfg = TrainWorldModelConfig(world_model=job["world_model"], train=loop, run_dir=out)
            tr, te = traj.split_episodes(0.1, 0)
            train_world_model(cfg, tr, te, progress=False)
            weights = Path(out) / "model" / "model.safetensors"
        else:
            from policies.text import InstructionEncoder
            from policies.train import TrainPolicyConfig, train_policy
            from policies.vla.configuration_vla import VLAConfig

            if job["instructions"]:
                InstructionEncoder(job["instructions"])  # fills the process's embedding cache
            cfg = TrainPolicyConfig(out=out, steps=job["steps"], seed=0, device=job["device"], deterministic=deterministic,
                                    num_threads=job["threads"], log_every=max(1, job["steps"] // 5),
                                    ckpt_every=job["steps"], policy=VLAConfig(**job["policy"]))
            train_policy(cfg, traj, progress=False)
            weights = Path(out) / "policy" / "model.safetensors"
    except Exception as e:  # noqa: BLE001 - reported (torch's own error names a non-deterministic op)
        return {"error": f"{type(e).__name__}: {e}".splitlines()[0], "seconds": time.perf_counter() - t0}
    return {"weights": str(weights), "seconds": time.perf_counter() - t0}


def compare_weights(a: str, b: str) -> dict[str, Any]:
    """Byte equality of two safetensors files, and tensor by tensor: how many differ, largest |a - b|."""
    from safetensors.torch import load_file

    da, db = Path(a).read_bytes(), Path(b).read_bytes()
    ta, tb = load_file(a), load_file(b)
    diff = [k for k in ta if k not in tb or ta[k].shape != tb[k].shape or not bool((ta[k] == tb[k]).all())]
    big = max((float((ta[k].float() - tb[k].float()).abs().max()) for k in diff if k in tb and ta[k].shape == tb[k].shape),
              default=0.0)
    return {
        "identical": da == db,
        "sha256": [hashlib.sha256(da).hexdigest()[:16], hashlib.sha256(db).hexdigest()[:16]],
        "tensors": len(ta),
        "tensors_differing": len(diff),
        "max_abs_diff": big,
    }


def job_of(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """The data and the model configs both trainers use (see the module docstring)."""
    from imagination.pipeline import load_run_config, run_config_of
    from wmrl.devices import resolve_device
    from wmrl.errors import WmrlError

    if args.run:
        run = Path(args.run)
        if not (run / "data" / "meta" / "info.json").exists():
            raise WmrlError(f"--run {run}: no demos at {run / 'data'}; give a finished `wmrl run` folder")
        cfg, data = run_config_of(run), str(run / "data")
        cache = run / "sft" / "policy" / "instructions.safetensors"
        instructions = str(cache) if cache.exists() else None
    else:
        from wmrl.collect import collect

        cfg = load_run_config([], "run_quick")
        data, instructions = str(tmp / "data"), None
        tasks = list(cfg.suite) if isinstance(cfg.suite, list) else [cfg.suite]
        collect(data, tasks[0] if args.quick else cfg.suite, 4 if args.quick else 8 * len(tasks), [0.0, 0.3],
                num_envs=4, seed=0, image_size=cfg.image_size, progress=False)
    return {
        "data": data,
        "instructions": instructions,
        "device": str(resolve_device(args.device)),
        "steps": args.steps if args.steps is not None else (5 if args.quick else 200),
        "wm_batch": 16,
        "threads": args.threads,
        "world_model": {**cfg.world_model, "image_size": cfg.image_size, "seed": 0},
        "policy": {**cfg.policy, "image_size": cfg.image_size},
    }


def measure(job: dict[str, Any], tmp: Path, trainers: tuple[str, ...] = TRAINERS,
            settings: tuple[str, ...] = SETTINGS) -> dict[str, Any]:
    """Each of ``trainers`` x ``settings``, two runs each (compared), each run in a fresh process."""
    out: dict[str, Any] = {}
    for trainer in trainers:
        for setting in settings:
            runs = []
            for r in range(2):
                with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as ex:
                    runs.append(ex.submit(train_once, trainer, setting == "deterministic", job,
                                          str(tmp / f"{trainer}_{setting}_{r}")).result())
            key = f"{trainer}/{setting}"
            errors = [x["error"] for x in runs if "error" in x]
            res: dict[str, Any] = {"seconds": [x["seconds"] for x in runs],
                                   "median_s": statistics.median(x["seconds"] for x in runs)}
            if errors:
                res["error"] = errors[0]
            else:
                res.update(compare_weights(runs[0]["weights"], runs[1]["weights"]))
            out[key] = res
            print(f"{key}: " + (f"error {res['error']}" if errors else
                                f"identical={res['identical']} ({res['tensors_differing']}/{res['tensors']} tensors "
                                f"differ, max |diff| {res['max_abs_diff']:.3g}), {res['median_s']:.1f} s per run"))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="one task, 4 episodes, 5 steps (CI smoke)")
    p.add_argument("--run", default=None, help="a finished `wmrl run` folder: its demos, configs and instruction cache")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default auto)")
    p.add_argument("--steps", type=int, default=None, help="training steps per run (default 200; quick 5)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run (default 1)")
    p.add_argument("--trainers", nargs="+", default=list(TRAINERS), choices=TRAINERS)
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=SETTINGS)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    from benchmarks.imagination_lift import environment_info
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    if a.steps is not None and a.steps < 1:
        raise WmrlError(f"--steps={a.steps} must be >= 1")
    if a.threads < 1:
        raise WmrlError(f"--threads={a.threads} must be >= 1")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        job = job_of(a, Path(tmp))
        results = measure(job, Path(tmp), trainers=tuple(a.trainers), settings=tuple(a.settings))
    res = {
        "results": results,
        "repeat_bit_for_bit": {k: bool(v.get("identical", False)) for k, v in results.items()},
        "device": job["device"],
        "steps": job["steps"],
        "run": a.run,
        "threads": a.threads,
        "quick": a.quick,
        "wall_time_s": time.perf_counter() - t0,
        "machine": environment_info(),
    }
    atomic_write_json(a.out, res)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
