"""``wmrl train-policy``: supervised fine-tuning (behaviour cloning) of a VLA policy on a LeRobotDataset.

Usage::

    wmrl train-policy dataset=/tmp/pol_data out=runs/policy steps=3000 policy=vla_tokens

Each training sample is frame ``t`` of an episode (agent view, state, instruction) and the target
chunk ``actions[t : t+K]`` (steps past the episode end are masked out). The run folder holds
``config.yaml``, ``metrics.jsonl``, ``checkpoints/`` (resumed automatically), ``plots/loss.png``
and the final policy in ``out/policy`` (load it with ``policies.load_policy``).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from policies.vla import VLAConfig, VLAPolicy
from wmrl.data import split_episode_positions
from wmrl.ema import WeightEMA
from wmrl.errors import CheckpointError, ConfigError, DatasetError
from wmrl.runs import RunDir, check_finite, seed_everything


@dataclass
class TrainPolicyConfig:
    """SFT job.

    Args:
        dataset: LeRobotDataset folder (``wmrl collect``).
        out: run folder.
        steps: optimiser steps.
        batch_size: frames per step.
        lr: AdamW learning rate (cosine decay to 10%).
        weight_decay: AdamW weight decay.
        grad_clip: gradient-norm clip.
        seed: seed of init, batches and augmentation.
        val_frac: fraction of episodes held out for the validation loss (0: none).
        log_every: steps between metric lines.
        ckpt_every: steps between checkpoints (resume point).
        augment_shift: random-shift augmentation in pixels.
        ema_decay: keep an exponential moving average of the weights (decay ramped as
            min(ema_decay, (1+step)/(10+step))) and save it as the final policy (checkpoints keep the
            raw weights and the average; 0: off).
        max_episodes: train on the first N episodes only (demo budget); None: all.
        num_threads: torch intra-op threads (1: fastest for these small convs on a busy 2-core CPU,
            where 2 threads ran 10x slower); None: leave as is.
        device: where the policy trains (``wmrl.devices``: auto | cpu | cuda | cuda:N); the frames
            stay on the CPU and each batch moves there.
        deterministic: deterministic torch kernels for the whole process
            (:func:`wmrl.devices.use_deterministic_algorithms`), so CUDA runs repeat too.
        init: a saved policy folder (``VLAPolicy.save_pretrained``) whose weights and state
            normalisation training starts from (fine-tuning; its architecture must be ``policy``'s);
            None: a fresh initialisation, normalised on the data.
        policy: the policy architecture.
    """

    dataset: str | None = None
    out: str = "runs/policy"
    steps: int = 3000
    batch_size: int = 64
    lr: float = 3e-4
    weight_decay: float = 1e-4
    grad_clip: float = 1.0
    seed: int = 0
    val_frac: float = 0.1
    log_every: int = 100
    ckpt_every: int = 500
    augment_shift: int = 4
    ema_decay: float = 0.0
    max_episodes: int | None = None
    num_threads: int | None = 1
    device: str = "cpu"
    deterministic: bool = False
    init: str | None = None
    policy: VLAConfig = field(default_factory=VLAConfig)

    def __post_init__(self) -> None:
        from wmrl.devices import resolve_device

        resolve_device(self.device)  # a bad name or a missing GPU fails before any work
        if self.steps < 1:
            raise ConfigError(f"{self.steps=} must be >= 1")
        if self.batch_size < 1:
            raise ConfigError(f"{self.batch_size=} must be >= 1")
        if not self.lr > 0:
            raise ConfigError(f"{self.lr=} must be > 0")
        if not 0 <= self.val_frac < 1:
            raise ConfigError(f"{self.val_frac=} must be in [0, 1)")
        if self.log_every < 1 or self.ckpt_every < 1:
            raise ConfigError(f"{self.log_every=} and {self.ckpt_every=} must be >= 1")
        if self.augment_shift < 0:
            raise ConfigError(f"{self.augment_shift=} must be >= 0")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ConfigError(f"{self.ema_decay=} must be in [0, 1) (0: off)")
        if self.max_episodes is not None and self.max_episodes < 1:
            raise ConfigError(f"{self.max_episodes=} must be >= 1 or null")


# --------------------------------------------------------------------------- data
class ChunkDataset:
    """In-memory BC samples from :class:`wmrl.data.Trajectories`.

    Holds ``images`` uint8 (N,H,W,3), ``states`` (N,D), ``chunk_idx`` (N,K) frame indices of the
    target chunk, ``mask`` (N,K), ``text_idx`` (N,) into ``texts`` (U,384) for all N frames of ``traj``
    (no copy of its frames), and ``rows`` (M,): the frames it samples, those of ``episodes`` (positions
    0..E-1), or None for every frame in order. Sample ``i`` (``0 <= i < len(self) = M``) is frame
    ``rows[i]``, so a dataset over a subset draws the same batches for the same ids as one over a copy of
    that subset.
    """

    def __init__(
        self,
        traj: Any,
        chunk_size: int,
        text: torch.Tensor | None = None,
        use_wrist: bool = False,
        episodes: np.ndarray | None = None,
    ):
        n = len(traj.actions)
        if n == 0:
            raise DatasetError("the dataset has no frames")
        if use_wrist and traj.wrist_images is None:
            raise DatasetError("policy.use_wrist=true but the dataset has no observation.wrist_image")
        ends = np.empty(n, dtype=np.int64)
        for s, e in traj.episode_bounds:
            ends[s:e] = e
        idx = np.arange(n)[:, None] + np.arange(chunk_size)[None, :]
        self.mask = torch.from_numpy(idx < ends[:, None])
        self.chunk_idx = torch.from_numpy(np.minimum(idx, ends[:, None] - 1))
        self.images = torch.from_numpy(np.ascontiguousarray(traj.images))
        self.wrist = torch.from_numpy(np.ascontiguousarray(traj.wrist_images)) if use_wrist else None
        self.states = torch.from_numpy(np.asarray(traj.states, dtype=np.float32))
        self.actions = torch.from_numpy(np.clip(np.asarray(traj.actions, dtype=np.float32), -1, 1))
        uniq = sorted(set(traj.instructions))
        pos = {s: i for i, s in enumerate(uniq)}
        self.instructions = uniq
        self.text_idx = torch.tensor([pos[s] for s in traj.instructions])
        self.texts = text
        self.rows: torch.Tensor | None = None
        if episodes is not None:
            bounds = traj.episode_bounds
            episodes = np.asarray(episodes, dtype=np.int64)
            if len(episodes) == 0 or episodes.min() < 0 or episodes.max() >= len(bounds):
                got = f"{len(episodes)} from {episodes.min()} to {episodes.max()}" if len(episodes) else "none"
                raise DatasetError(f"episodes must be 1 or more positions in [0, {len(bounds)}); got {got}")
            self.rows = torch.from_numpy(np.concatenate([np.arange(*bounds[e]) for e in episodes]))

    def __len__(self) -> int:
        return len(self.actions) if self.rows is None else len(self.rows)

    def sampled_states(self) -> torch.Tensor:
        """float32 (M,D): the states of the frames this dataset samples."""
        return self.states if self.rows is None else self.states[self.rows]

    def sampled_instructions(self) -> set[str]:
        """The instructions of the frames this dataset samples."""
        idx = self.text_idx if self.rows is None else self.text_idx[self.rows]
        return {self.instructions[i] for i in idx.unique().tolist()}

    def batch(self, ids: torch.Tensor, shift: int = 0, gen: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """Samples ``ids`` (B,) of ``0..len(self)-1``: ``image`` uint8 (B,H,W,3) (shifted by up to ``shift``
        pixels), ``state`` (B,D), ``text`` (B,384), ``actions`` (B,K,A), ``mask`` (B,K) and, with the wrist
        camera, ``wrist_image``."""
        if self.rows is not None:
            ids = self.rows[ids]
        out = {
            "image": random_shift(self.images, shift, gen, ids),
            "state": self.states[ids],
            "text": self.texts[self.text_idx[ids]],
            "actions": self.actions[self.chunk_idx[ids]],
            "mask": self.mask[ids],
        }
        if self.wrist is not None:
            out["wrist_image"] = random_shift(self.wrist, shift, gen, ids)
        return out


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """A :meth:`ChunkDataset.batch` moved to the policy's ``device`` (no copy on the CPU)."""
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def random_shift(
    images: torch.Tensor, shift: int, gen: torch.Generator | None = None, ids: torch.Tensor | None = None
) -> torch.Tensor:
    """DrQ-style augmentation: pad by ``shift`` (edge) and crop back at a random offset.

    images: uint8 (N,H,W,C); ids: optional (B,) rows of ``images`` to take (None: all N). Returns
    (B,H,W,C) on ``images``' device. One ``index_select`` of pixels straight from ``images`` (about 3x
    faster on the CPU than indexing the batch out first and then its rows and columns; the same pixels
    for the same draws)."""
    if shift <= 0:
        return images if ids is None else images[ids]
    n, h, w, c = images.shape
    ids = torch.arange(n) if ids is None else ids.long().cpu()
    b = len(ids)
    oy = torch.randint(-shift, shift + 1, (b, 1), generator=gen)
    ox = torch.randint(-shift, shift + 1, (b, 1), generator=gen)
    rows = (oy + torch.arange(h)[None]).clamp(0, h - 1)  # edge pixels repeat, like replicate padding
    cols = (ox + torch.arange(w)[None]).clamp(0, w - 1)
    pixel = ((ids[:, None, None] * h + rows[:, :, None]) * w + cols[:, None, :]).reshape(-1).to(images.device)
    return images.reshape(n * h * w, c).index_select(0, pixel).view(b, h, w, c)


# --------------------------------------------------------------------------- training
def train_policy(cfg: TrainPolicyConfig, trajectories: Any = None, progress: bool = True) -> tuple[VLAPolicy, dict]:
    """Run SFT; returns the trained policy and a summary dict (also written to ``out``).

    Args:
        cfg: the job config.
        trajectories: optional in-memory :class:`wmrl.data.Trajectories` (else read ``cfg.dataset``).
    """
    from tqdm import tqdm

    from wmrl.devices import resolve_device, use_deterministic_algorithms

    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    if cfg.deterministic:
        use_deterministic_algorithms(True)
    if trajectories is None:
        if not cfg.dataset:
            raise ConfigError("dataset=PATH is required (a LeRobotDataset written by `wmrl collect`)")
        from wmrl.data import load_trajectories

        trajectories = load_trajectories(cfg.dataset)
    traj = trajectories
    n_ep = len(traj.episode_bounds)
    # the episodes trained on, by position: the first max_episodes, less the validation ones. SFT samples
    # them in place (ChunkDataset(episodes=...)), so only the validation episodes are copied out
    train_eps = np.arange(n_ep)
    if cfg.max_episodes is not None:
        if cfg.max_episodes > n_ep:
            raise ConfigError(f"{cfg.max_episodes=} exceeds the {n_ep} episodes in the dataset")
        train_eps = np.arange(cfg.max_episodes)
    n_used = len(train_eps)
    if traj.images.shape[1] != cfg.policy.image_size:
        raise ConfigError(f"policy.image_size={cfg.policy.image_size} but the dataset frames are {traj.images.shape[1]}px")
    if traj.states.shape[1] != cfg.policy.state_dim:
        raise ConfigError(f"policy.state_dim={cfg.policy.state_dim} but the dataset states are {traj.states.shape[1]}-D")
    val = None
    if cfg.val_frac > 0 and len(train_eps) >= 5:
        keep, held = split_episode_positions(len(train_eps), cfg.val_frac, cfg.seed)
        val = traj.select_episodes(train_eps[held])
        train_eps = train_eps[keep]

    seed_everything(cfg.seed)
    run = RunDir(cfg.out, cfg)
    policy = VLAPolicy(cfg.policy)
    data = ChunkDataset(traj, cfg.policy.chunk_size, None, cfg.policy.use_wrist,
                        episodes=None if len(train_eps) == n_ep else train_eps)
    del traj, trajectories  # the dataset holds the frames it needs
    policy.known_instructions = sorted(data.sampled_instructions() | (set(val.instructions) if val is not None else set()))
    text = policy.encode_instructions(policy.known_instructions)
    text_of = {s: text[i] for i, s in enumerate(policy.known_instructions)}
    # an instruction only of episodes beyond max_episodes is never sampled: zeros stand in for it
    data.texts = torch.stack([text_of.get(s, torch.zeros_like(text[0])) for s in data.instructions])
    vdata = None
    if val is not None:
        vdata = ChunkDataset(val, cfg.policy.chunk_size, None, cfg.policy.use_wrist)
        vdata.texts = torch.stack([text_of[s] for s in vdata.instructions])
    if cfg.init is not None:
        _load_init(policy, cfg.init)  # weights and normalisation; the instructions are this data's
    else:
        states = data.sampled_states()
        policy.set_normalization(states.mean(0), states.std(0))
        del states
    policy.to(resolve_device(cfg.device))

    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * min(s, cfg.steps) / cfg.steps))
    )
    gen = torch.Generator().manual_seed(cfg.seed)
    start, elapsed_before = 0, 0.0
    ema = WeightEMA(policy, cfg.ema_decay) if cfg.ema_decay > 0 else None
    ckpt = run.latest_checkpoint()
    if ckpt is not None:
        state = torch.load(ckpt / "trainer.pt", weights_only=False, map_location="cpu")
        loaded = VLAPolicy.from_pretrained(ckpt / "policy")
        policy.load_state_dict(loaded.state_dict())
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        gen.set_state(state["gen"])
        torch.set_rng_state(state["torch_rng"])
        start = RunDir.step_of(ckpt)
        if ema is not None:
            if "ema" not in state:
                raise CheckpointError(f"{ckpt} was written with ema_decay=0; resume it with ema_decay=0 or a new out=")
            ema.load_state_dict(state["ema"], str(ckpt / "trainer.pt"))
        if "elapsed" in state:
            elapsed_before = float(state["elapsed"])
        else:  # checkpoint of an older trainer: estimate from the metric timestamps
            rows = [r for r in run.read_metrics() if r["step"] <= start]
            if len(rows) >= 2:
                span = rows[-1]["time"] - rows[0]["time"]
                elapsed_before = span * rows[-1]["step"] / max(1, rows[-1]["step"] - rows[0]["step"])

    def save(step: int) -> None:
        def write(tmp: Path) -> None:
            policy.save_pretrained(tmp / "policy")
            torch.save(
                {"opt": opt.state_dict(), "sched": sched.state_dict(), "gen": gen.get_state(),
                 "torch_rng": torch.get_rng_state(), "elapsed": elapsed_before + time.time() - t0,
                 **({"ema": ema.state_dict()} if ema is not None else {})},
                tmp / "trainer.pt",
            )

        run.save_checkpoint(step, write)

    t0 = time.time()
    policy.train()
    bar = tqdm(range(start, cfg.steps), initial=start, total=cfg.steps, desc="train-policy", disable=not progress)
    logs: dict[str, float] = {}
    for step in bar:
        ids = torch.randint(0, len(data), (cfg.batch_size,), generator=gen)
        loss, logs = policy(to_device(data.batch(ids, cfg.augment_shift, gen), policy.device))
        check_finite("policy SFT loss", loss)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.grad_clip)
        opt.step()
        sched.step()
        if ema is not None:
            ema.update(policy, step)
        done = step + 1
        if done % cfg.log_every == 0 or done == cfg.steps:
            row = {"loss": loss.item(), "grad_norm": float(gnorm), "lr": sched.get_last_lr()[0], **logs}
            if vdata is not None:
                row["val_loss"] = validation_loss(policy, vdata)
            run.log(done, row)
            bar.set_postfix(loss=f"{loss.item():.4f}", val=f"{row.get('val_loss', float('nan')):.4f}")
        if done % cfg.ckpt_every == 0 or done == cfg.steps:
            save(done)
    policy.eval()
    if ema is not None:
        ema.copy_to(policy)  # the final policy is the weight average (checkpoints keep the raw weights)
    final = policy.save_pretrained(Path(cfg.out) / "policy")
    plot_losses(run)
    summary = {"steps": cfg.steps, "ema_decay": cfg.ema_decay, "episodes": n_used, "frames": len(data), "resumed_from": start,
               "train_seconds": elapsed_before + time.time() - t0,
               "final": final, **{k: v for k, v in (run.read_metrics() or [{}])[-1].items() if k != "time"}}
    return policy, summary


def _load_init(policy: VLAPolicy, folder: str) -> None:
    """Copy the weights (state normalisation included) of the saved policy in ``folder`` into ``policy``."""
    if not (Path(folder) / "config.json").exists():
        raise CheckpointError(f"init={folder!r} is not a saved policy folder (no config.json)")
    init = VLAPolicy.from_pretrained(folder)

    def plain(c: Any) -> Any:  # tuples and lists alike (a config read from json holds lists)
        return json.loads(json.dumps(dataclasses.asdict(c)))

    if plain(init.config) != plain(policy.config):
        raise ConfigError(f"init={folder!r} has architecture {init.config}; expected the training's {policy.config}")
    policy.load_state_dict(init.state_dict())


@torch.no_grad()
def validation_loss(policy: VLAPolicy, data: ChunkDataset, max_frames: int = 512) -> float:
    """Mean SFT loss on (up to ``max_frames`` evenly spaced) held-out frames."""
    was = policy.training
    policy.eval()
    ids = torch.linspace(0, len(data) - 1, min(max_frames, len(data))).long()
    losses = [
        float(policy(to_device(data.batch(ids[i : i + 256]), policy.device))[0]) * len(ids[i : i + 256])
        for i in range(0, len(ids), 256)
    ]
    policy.train(was)
    return sum(losses) / len(ids)


def plot_losses(run: RunDir) -> None:
    """plots/loss.png: training and validation loss against step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = run.read_metrics()
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], label="train")
    if "val_loss" in rows[-1]:
        ax.plot([r["step"] for r in rows if "val_loss" in r], [r["val_loss"] for r in rows if "val_loss" in r], label="val")
    ax.set_xlabel("step")
    ax.set_ylabel("SFT loss")
    ax.legend()
    fig.tight_layout()
    from wmrl.io import atomic_write

    atomic_write(run.plots / "loss.png", lambda p: fig.savefig(p, format="png", dpi=100))
    plt.close(fig)


def parse_argv(argv: list[str], default: str = "train_policy") -> tuple[str, list[str]]:
    """Split ``--config-name NAME`` from Hydra-style overrides."""
    name, rest, i = default, [], 0
    while i < len(argv):
        a = argv[i]
        if a == "--config-name":
            if i + 1 >= len(argv):
                raise ConfigError("--config-name needs a value")
            name, i = argv[i + 1], i + 2
            continue
        if a.startswith("--config-name="):
            name = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    return name, rest


def main(argv: list[str]) -> int:
    """Entry point of ``wmrl train-policy`` (Hydra-style ``key=value`` overrides)."""
    from wmrl.config import load_config, to_dataclass

    name, overrides = parse_argv(list(argv))
    cfg = to_dataclass(load_config(name, overrides), TrainPolicyConfig)
    _, summary = train_policy(cfg)
    print(f"trained policy saved to {summary['final']} ({summary['steps']} steps, {summary['train_seconds']:.0f} s)")
    return 0
