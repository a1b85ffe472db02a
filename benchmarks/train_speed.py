"""Side by side: the main job's training hot paths against the implementations they replaced.

``python -m benchmarks.train_speed [--quick] [--dataset DIR] [--repeats N] --out FILE.json``

Each pair alternates its reference and its current implementation call by call (so machine noise
hits both alike) and reports the median time of each and the median (and quartiles) of the per-call
ratios (``speedup`` = reference time / current time):

* ``context_noise``: the world model's context-noise draw on a training batch's context
  ``(16, T, 3, H, W)``. Reference ``torch.randn_like`` copies the frames' channels-last strides (the
  batch is ``to_unit``'s view of uint8 ``(..., H, W, 3)`` frames), and a tensor of those strides is
  slow to fill on the CPU; current: one contiguous ``torch.randn``.
* ``wm_train_step``: one training step of the main job's world model (``conf/run.yaml``, batch 16)
  with each draw.
* ``random_shift``: the SFT augmentation of a 64-frame batch. Reference: index the batch out of the
  dataset, then its rows and columns (three index tensors); current: one ``index_select`` of pixels
  straight from the dataset (``policies.train.random_shift``). The two give the same pixels for the
  same draws (``random_shift.identical``).
* ``sft_step``: one SFT step of the main job's policy (``conf/run.yaml``, batch 64) with each shift.
* ``replays``: the world model's open-loop replays of the demos (the rewards stage's
  ``imagined_replays``). Reference: one episode at a time, which is
  ``imagination.coevolution.rollout_frames(batch_size=1)`` pixel for pixel; current: 64 per batch.
* ``demos_writer``: the demos stage's collection (``wmrl.collect``, the built-in suite, 12 envs, three
  noise levels; full: 72 episodes at 64 px, ``--quick``: 12 at 32 px) into a fresh LeRobotDataset.
  Reference: each episode written as it ends, between simulation steps; current: written by a worker
  thread while the simulation goes on (``DatasetRecorder.record(background=True)``). Both write the
  same dataset (``demos_writer.identical``: every frame, state, action and the episode records).

Data: ``--dataset`` (a LeRobotDataset folder, e.g. a run's ``RUN/data``), else a fresh collection of
the built-in suite in a temporary folder (full: 60 episodes at 64 px; ``--quick``: 12 at 32 px).
Models are freshly initialised (a step costs the same trained or not). Torch uses its default
threads unless ``--threads``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch


def reference_context_noise(self: Any, ctx_frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The world model's context augmentation as it was: ``randn_like`` on the (strided) context."""
    b = ctx_frames.shape[0]
    level = torch.rand(b, device=ctx_frames.device) * self.config.context_noise_max
    return ctx_frames + level[:, None, None, None, None] * torch.randn_like(ctx_frames), level


def reference_random_shift(images: torch.Tensor, shift: int, gen: torch.Generator | None = None) -> torch.Tensor:
    """The SFT random shift as it was: ``images`` is the batch, uint8 (B,H,W,3), already indexed out."""
    b, h, w, _ = images.shape
    oy = torch.randint(-shift, shift + 1, (b, 1), generator=gen)
    ox = torch.randint(-shift, shift + 1, (b, 1), generator=gen)
    rows = (oy + torch.arange(h)[None]).clamp(0, h - 1)
    cols = (ox + torch.arange(w)[None]).clamp(0, w - 1)
    return images[torch.arange(b)[:, None, None], rows[:, :, None], cols[:, None, :]]


@contextlib.contextmanager
def context_noise(reference: bool) -> Iterator[None]:
    """World models draw their context noise the reference way inside the block (when ``reference``)."""
    from worldmodels.modeling_common import WorldModel

    current = WorldModel._augment_context
    if reference:
        WorldModel._augment_context = reference_context_noise
    try:
        yield
    finally:
        WorldModel._augment_context = current


def timed_pair(fn: Callable[[bool], Any], calls: int) -> tuple[list[float], list[float]]:
    """Seconds of ``calls`` calls of ``fn(True)`` (reference) and ``fn(False)`` (current), alternated
    call by call (the order flips every call), after one warm-up call of each."""
    fn(True)
    fn(False)
    ref, cur = [], []
    for i in range(calls):
        for reference in ((True, False) if i % 2 == 0 else (False, True)):
            t = time.perf_counter()
            fn(reference)
            (ref if reference else cur).append(time.perf_counter() - t)
    return ref, cur


def load_or_collect(dataset: str | None, quick: bool, tmp: Path) -> tuple[Any, str]:
    """The trajectories to time on, and where they came from."""
    from wmrl.data import load_trajectories

    if dataset:
        return load_trajectories(dataset), dataset
    from wmrl.collect import collect

    episodes, size = (12, 32) if quick else (60, 64)
    collect(str(tmp / "data"), "builtin", episodes, [0.0, 0.2, 0.4], num_envs=12, seed=0, image_size=size,
            progress=False)
    return load_trajectories(tmp / "data"), f"fresh collection: builtin, {episodes} episodes at {size} px"


def build_models(traj: Any) -> tuple[Any, Any]:
    """The main job's world model and policy (``conf/run.yaml`` composed, as ``wmrl run`` builds
    them) at the data's image size, freshly initialised."""
    from imagination.pipeline import load_run_config
    from policies.vla import VLAConfig, VLAPolicy
    from wmrl.config import to_dataclass
    from worldmodels import make_world_model
    from worldmodels.modeling_common import model_states

    size = int(traj.images.shape[1])
    cfg = load_run_config([f"image_size={size}"])
    wm_cfg = dict(cfg.world_model)
    wm = make_world_model(wm_cfg.pop("family"), **{**wm_cfg, "image_size": size, "seed": cfg.seed})
    wm.fit_stats(model_states(traj, wm.config), np.asarray(traj.actions), np.asarray(traj.rewards))
    policy = VLAPolicy(to_dataclass({**cfg.policy, "image_size": size}, VLAConfig, where="policy."))
    return wm, policy


def demos_writer_pair(tmp: Path, quick: bool) -> tuple[Callable[[bool], Any], Callable[[], bool]]:
    """The ``demos_writer`` pair (one collection per call) and a check that its two sides wrote the
    same dataset."""
    from wmrl.collect import collect
    from wmrl.data import load_trajectories, read_episode_meta

    episodes, size = (12, 32) if quick else (72, 64)

    def write(reference: bool) -> None:
        out = tmp / ("writer_reference" if reference else "writer_current")
        collect(str(out), "builtin", episodes, [0.0, 0.2, 0.4], num_envs=12, seed=0, image_size=size,
                overwrite=True, progress=False, background_writer=not reference)

    def identical() -> bool:
        a, b = (tmp / "writer_reference", tmp / "writer_current")
        ta, tb = load_trajectories(a), load_trajectories(b)
        same = all(np.array_equal(getattr(ta, k), getattr(tb, k)) for k in ("images", "states", "actions", "successes"))
        return bool(same and ta.instructions == tb.instructions and read_episode_meta(a) == read_episode_meta(b))

    return write, identical


def measure(traj: Any, repeats: int, quick: bool, replay_episodes: int, tmp: Path) -> dict[str, Any]:
    """Every pair's medians and per-call speedups; see the module docstring."""
    from imagination.coevolution import rollout_frames
    from policies.train import ChunkDataset, random_shift
    from worldmodels.modeling_common import WindowSampler, model_states, to_unit, train_step

    wm, policy = build_models(traj)
    wm.train()
    sampler = WindowSampler(traj, wm.config, seed=0)
    wm_opt = torch.optim.AdamW(wm.parameters(), lr=1e-4)
    t_ctx = wm.config.context_frames
    ctx = to_unit(torch.from_numpy(np.ascontiguousarray(sampler.sample(16)["frames"][:, :t_ctx])))

    policy.known_instructions = sorted(set(traj.instructions))
    text = policy.encode_instructions(policy.known_instructions)
    data = ChunkDataset(traj, policy.config.chunk_size, None, policy.config.use_wrist)
    data.texts = torch.stack([text[policy.known_instructions.index(s)] for s in data.instructions])
    pol_opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)
    policy.train()

    def sft_step(reference: bool) -> None:
        ids = torch.randint(0, len(data), (64,), generator=gen)
        if reference:  # ChunkDataset.batch as it was: the batch indexed out, then shifted
            batch = data.batch(ids, 0)
            batch["image"] = reference_random_shift(batch["image"], 4, gen)
        else:
            batch = data.batch(ids, 4, gen)
        loss, _ = policy(batch)
        pol_opt.zero_grad(set_to_none=True)
        loss.backward()
        pol_opt.step()

    def shift(reference: bool) -> torch.Tensor:
        ids = torch.randint(0, len(data), (64,), generator=gen)
        return reference_random_shift(data.images[ids], 4, gen) if reference else random_shift(data.images, 4, gen, ids)

    def noise(reference: bool) -> None:
        with context_noise(reference):
            wm._augment_context(ctx)

    def wm_step(reference: bool) -> None:
        with context_noise(reference):
            train_step(wm, wm_opt, sampler.sample(16), grad_clip=1.0)

    bounds = np.asarray(traj.episode_bounds)[:replay_episodes]
    states = model_states(traj, wm.config)
    starts = [b for b in bounds if b[1] - b[0] > t_ctx]
    replay_args = (
        [traj.images[s : s + t_ctx] for s, _ in starts],
        [states[s : s + t_ctx] for s, _ in starts],
        [traj.actions[s + t_ctx - 1 : e - 1] for s, e in starts],
    )
    calls = {"context_noise": 10 if quick else 30, "wm_train_step": 2 if quick else 8,
             "random_shift": 10 if quick else 50, "sft_step": 5 if quick else 30, "replays": 1,
             "demos_writer": 1 if quick else 2}

    demos_writer, writer_identical = demos_writer_pair(tmp, quick)

    def replays(reference: bool) -> None:
        wm.eval()
        with torch.no_grad():
            rollout_frames(wm, *replay_args, batch_size=1 if reference else 64)
        wm.train()

    pairs: dict[str, Callable[[bool], Any]] = {
        "context_noise": noise, "wm_train_step": wm_step, "random_shift": shift, "sft_step": sft_step,
        "replays": replays, "demos_writer": demos_writer,
    }
    times: dict[str, dict[str, list[float]]] = {k: {"reference": [], "current": []} for k in pairs}
    for _ in range(repeats):
        for name, fn in pairs.items():
            ref, cur = timed_pair(fn, calls[name])
            times[name]["reference"] += ref
            times[name]["current"] += cur
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    ids = torch.randint(0, len(data), (64,), generator=torch.Generator().manual_seed(3))
    identical = bool(torch.equal(reference_random_shift(data.images[ids], 4, g1), random_shift(data.images, 4, g2, ids)))
    out: dict[str, Any] = {}
    for name, t in times.items():
        ratios = [r / c for r, c in zip(t["reference"], t["current"])]
        out[name] = {"reference_s": statistics.median(t["reference"]), "current_s": statistics.median(t["current"]),
                     "speedup": statistics.median(ratios), "calls": len(ratios),
                     "speedup_quartiles": [float(q) for q in np.percentile(ratios, [25, 75])]}
    out["random_shift"]["identical"] = identical
    out["replays"]["episodes"] = len(starts)
    out["demos_writer"]["identical"] = writer_identical()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="12 episodes at 32 px, 2 repeats (CI smoke)")
    p.add_argument("--out", default="benchmarks/results/train_speed.json")
    p.add_argument("--dataset", default=None, help="a LeRobotDataset folder (default: a fresh collection)")
    p.add_argument("--repeats", type=int, default=None, help="default 5 (quick: 2)")
    p.add_argument("--replay-episodes", type=int, default=60, help="episodes the replays pair plays")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    a = p.parse_args(argv)
    from benchmarks.imagination_lift import environment_info
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    repeats = a.repeats if a.repeats is not None else (2 if a.quick else 5)
    if repeats < 1:
        raise WmrlError(f"--repeats={repeats} must be >= 1")
    if a.replay_episodes < 1:
        raise WmrlError(f"--replay-episodes={a.replay_episodes} must be >= 1")
    if a.dataset and not Path(a.dataset).exists():
        raise WmrlError(f"--dataset={a.dataset} does not exist; give a LeRobotDataset folder (e.g. RUN/data)")
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        traj, source = load_or_collect(a.dataset, a.quick, Path(tmp))
        pairs = measure(traj, repeats, a.quick, a.replay_episodes, Path(tmp))
    res = {
        "pairs": pairs,
        "speedup": {k: v["speedup"] for k, v in pairs.items()},
        "dataset": source,
        "image_size": int(traj.images.shape[1]),
        "episodes": int(traj.num_episodes),
        "frames": int(traj.num_frames),
        "repeats": repeats,
        "quick": a.quick,
        "wall_time_s": time.perf_counter() - t0,
        "machine": environment_info(),
    }
    atomic_write_json(a.out, res)
    for k, v in pairs.items():
        print(f"{k}: reference {v['reference_s'] * 1e3:.2f} ms, current {v['current_s'] * 1e3:.2f} ms, "
              f"speedup {v['speedup']:.2f}x")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
