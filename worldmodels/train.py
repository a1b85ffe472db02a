"""``wmrl train-world-model``: train a world model on a trajectory dataset.

Usage::

    wmrl train-world-model data.root=/tmp/wm_data world_model=deterministic run_dir=runs/wm_det

Hydra overrides ``key=value`` compose ``conf/train_world_model.yaml`` (world-model family in the
``world_model`` group: ``conf/world_model/{deterministic,diffusion}.yaml``). The run folder gets
``config.yaml``, ``metrics.jsonl``, checkpoints every ``train.checkpoint_every`` steps (training
resumes from the newest one when the same ``run_dir`` is used again), side-by-side real | imagined
videos in ``videos/``, the loss plot in ``plots/loss.png`` and the final model in ``model/``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wmrl.ema import WeightEMA
from wmrl.errors import CheckpointError, ConfigError, DatasetError, WmrlError
from worldmodels.modeling_common import model_states


@dataclass
class DataConfig:
    """Args:
    root: LeRobotDataset folder written by ``wmrl collect``.
    test_fraction: share of episodes held out (videos and the final test PSNR use them).
    split_seed: seed of the episode split.
    """

    root: str | None = None
    test_fraction: float = 0.1
    split_seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 <= self.test_fraction < 1.0:
            raise ConfigError(f"data.test_fraction={self.test_fraction!r} must be in [0, 1)")


@dataclass
class TrainLoopConfig:
    """Args:
    steps: optimisation steps in total (a resumed run continues up to this number).
    batch_size: windows per step.
    lr / weight_decay / warmup_steps / grad_clip: AdamW with linear warm-up and cosine decay.
    max_time_s: stop (and checkpoint) after this many seconds of training (None: no limit).
    time_anneal_slack: with ``max_time_s``, how far (as a share of the cap) the time share may run
        ahead of the step share before the learning rate anneals by time (see :func:`lr_at`). A run
        that keeps pace anneals by step alone, so its weights do not depend on the machine's speed.
    checkpoint_every / log_every: in steps.
    videos / video_horizon: number of held-out rollouts written as real | imagined mp4 at the end.
    num_threads: torch CPU threads (None: torch default).
    device: where the model trains (``wmrl.devices``: auto | cpu | cuda | cuda:N); windows are
        sampled on the CPU and moved there per step.
    deterministic: deterministic torch kernels for the whole process
        (:func:`wmrl.devices.use_deterministic_algorithms`), so CUDA runs repeat too; CPU runs repeat
        without it.
    seed: seed of sampling and noise (CPU runs are reproducible).
    ema_decay: keep an exponential moving average of the weights (decay ramped as
        min(ema_decay, (1+step)/(10+step))) and save it as the final model (checkpoints keep the raw
        weights plus the average, so a resumed run continues both). 0: off.
    """

    steps: int = 2000
    batch_size: int = 16
    lr: float = 3e-4
    weight_decay: float = 0.0
    warmup_steps: int = 50
    grad_clip: float = 1.0
    max_time_s: float | None = None
    time_anneal_slack: float = 0.1
    checkpoint_every: int = 200
    log_every: int = 10
    videos: int = 4
    video_horizon: int = 16
    num_threads: int | None = None
    seed: int = 0
    ema_decay: float = 0.0
    device: str = "cpu"
    deterministic: bool = False

    def __post_init__(self) -> None:
        from wmrl.devices import resolve_device

        resolve_device(self.device)  # a bad name or a missing GPU fails before any work
        for name in ("steps", "batch_size", "checkpoint_every", "log_every"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ConfigError(f"train.{name}={v!r} must be an integer >= 1")
        if not self.lr > 0:
            raise ConfigError(f"train.lr={self.lr!r} must be > 0")
        if self.max_time_s is not None and not self.max_time_s > 0:
            raise ConfigError(f"train.max_time_s={self.max_time_s!r} must be > 0 or null")
        if not 0.0 <= self.time_anneal_slack < 1.0:
            raise ConfigError(f"train.time_anneal_slack={self.time_anneal_slack!r} must be in [0, 1)")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ConfigError(f"train.ema_decay={self.ema_decay!r} must be in [0, 1) (0: off)")
        if self.video_horizon < 1 or self.videos < 0:
            raise ConfigError(
                f"train.videos={self.videos!r} / video_horizon={self.video_horizon!r} must be >= 0 / >= 1"
            )


@dataclass
class TrainWorldModelConfig:
    """Top-level config of ``wmrl train-world-model``.

    Args:
        world_model: ``family`` plus the family's config fields (see ``worldmodels.*.configuration_*``).
        data / train: see :class:`DataConfig`, :class:`TrainLoopConfig`.
        run_dir: run folder (re-using it resumes from its newest checkpoint).
        init_from: optional checkpoint folder to start from (fine-tuning).
    """

    world_model: dict = field(default_factory=lambda: {"family": "deterministic"})
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainLoopConfig = field(default_factory=TrainLoopConfig)
    run_dir: str = "runs/world_model"
    init_from: str | None = None

    def model_config(self):
        """The typed config of the selected family."""
        from wmrl.config import to_dataclass
        from worldmodels import get_config_class

        wm = dict(self.world_model)
        family = wm.pop("family", None)
        if family is None:
            raise ConfigError("world_model.family is missing; expected 'deterministic' or 'diffusion'")
        return family, to_dataclass(wm, get_config_class(family), where="world_model.")


def anneal_progress(step: int, cfg: TrainLoopConfig, elapsed_s: float = 0.0) -> tuple[float, bool]:
    """Cosine progress in [0, 1] after warm-up, and whether the clock (not the step count) set it.

    The step share is ``(step - warmup) / (steps - warmup)``. With ``max_time_s`` the time share
    ``t = elapsed_s / max_time_s`` takes over only when the run falls behind the pace that finishes
    all steps inside the cap by more than ``time_anneal_slack`` (s): progress is
    ``max(step share, (t - s) / (1 - s))``, which reaches 1 at the cap. So a run that keeps pace anneals
    by step alone and repeats bit for bit on a faster or slower machine, and a run that would be cut
    short by the cap still ends annealed. ``s = 0`` anneals by whichever share is larger.
    """
    p = min(1.0, max(0.0, step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps))
    if cfg.max_time_s:
        s = cfg.time_anneal_slack
        p_time = min(1.0, (elapsed_s / cfg.max_time_s - s) / (1.0 - s))
        if p_time > p:
            return p_time, True
    return p, False


def lr_at(step: int, cfg: TrainLoopConfig, elapsed_s: float = 0.0) -> float:
    """Linear warm-up, then cosine decay to 10% of ``lr`` over :func:`anneal_progress`."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    p, _ = anneal_progress(step, cfg, elapsed_s)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))


def _write_checkpoint(model, opt, step: int, sampler, elapsed: float, ema: WeightEMA | None = None):
    from wmrl.io import atomic_torch_save

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp / "model")
        state = {
            "step": step,
            "optimizer": opt.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "sampler_rng": sampler.rng.bit_generator.state,
            "elapsed_s": elapsed,
        }
        if ema is not None:
            state["ema"] = ema.state_dict()
        atomic_torch_save(tmp / "trainer_state.pt", state)

    return write


def train_world_model(
    cfg: TrainWorldModelConfig,
    train_traj: Any = None,
    test_traj: Any = None,
    progress: bool = True,
    config_record: Any = None,
) -> tuple[Any, dict[str, Any]]:
    """Train (or resume) a world model; returns (model, info) with ``train_time_s``, ``steps``,
    ``train_frames``, ``train_episodes``, ``final_loss`` and ``test_psnr_h1``.

    ``train_traj`` / ``test_traj`` (``wmrl.data.Trajectories``) may be given in memory; otherwise
    ``cfg.data.root`` is loaded and split."""
    from tqdm import tqdm

    from wmrl.devices import resolve_device
    from wmrl.runs import RunDir, seed_everything
    from worldmodels import get_family
    from worldmodels.modeling_common import WindowSampler, WorldModel, train_step

    family, mcfg = cfg.model_config()
    tc = cfg.train
    device = resolve_device(tc.device)
    if tc.deterministic:
        from wmrl.devices import use_deterministic_algorithms

        use_deterministic_algorithms(True)
    seed_everything(tc.seed)
    if tc.num_threads:
        torch.set_num_threads(tc.num_threads)
    if train_traj is None:
        if not cfg.data.root:
            raise ConfigError("data.root is not set; give the dataset folder, e.g. data.root=/tmp/wm_data")
        from wmrl.data import load_trajectories

        if not Path(cfg.data.root).exists():
            raise DatasetError(f"dataset folder {cfg.data.root} does not exist")
        traj = load_trajectories(cfg.data.root)
        if cfg.data.test_fraction > 0:
            train_traj, test_traj = traj.split_episodes(cfg.data.test_fraction, cfg.data.split_seed)
        else:
            train_traj, test_traj = traj, None
    if int(getattr(train_traj, "image_size", mcfg.image_size)) != mcfg.image_size:
        raise DatasetError(
            f"dataset image_size={train_traj.image_size}; world_model.image_size={mcfg.image_size}"
        )

    run = RunDir(cfg.run_dir, config_record if config_record is not None else dataclasses.asdict(cfg))
    sampler = WindowSampler(train_traj, mcfg, seed=tc.seed)
    latest = run.latest_checkpoint()
    start_step, elapsed0 = 0, 0.0
    ema_state = None
    if latest is not None:
        model = WorldModel.from_pretrained(latest / "model")
        if dataclasses.asdict(model.config) != dataclasses.asdict(mcfg):
            raise CheckpointError(
                f"checkpoint {latest} was trained with another world-model config; use a new run_dir "
                f"(saved family={model.family!r}, requested {family!r})"
            )
        try:
            state = torch.load(latest / "trainer_state.pt", weights_only=False, map_location="cpu")
        except Exception as e:
            raise CheckpointError(
                f"{latest / 'trainer_state.pt'} is corrupt or partial ({type(e).__name__})"
            ) from None
        model.to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, weight_decay=tc.weight_decay)
        opt.load_state_dict(state["optimizer"])  # its moment buffers follow the parameters' device
        torch.set_rng_state(state["torch_rng"])
        sampler.rng.bit_generator.state = state["sampler_rng"]
        start_step, elapsed0 = int(state["step"]), float(state.get("elapsed_s", 0.0))
        ema_state = state.get("ema")
        if progress:
            print(f"resuming from {latest} (step {start_step})")
    else:
        if cfg.init_from:
            model = WorldModel.from_pretrained(cfg.init_from)
            if dataclasses.asdict(model.config) != dataclasses.asdict(mcfg):
                raise CheckpointError(
                    f"init_from={cfg.init_from} holds a model with another config than world_model"
                )
        else:
            model = get_family(family)(mcfg)
            model.fit_stats(
                model_states(train_traj, mcfg),
                np.asarray(train_traj.actions),
                np.asarray(train_traj.rewards),
                images=train_traj.images if mcfg.state_heatmaps else None,
            )
        model.to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, weight_decay=tc.weight_decay)

    ema = WeightEMA(model, tc.ema_decay) if tc.ema_decay > 0 else None
    if ema is not None and latest is not None and ema_state is not None:
        ema.load_state_dict(ema_state, str(latest / "trainer_state.pt"))
    t_start = time.perf_counter()
    step = start_step
    losses: list[float] = []
    bar = tqdm(
        total=tc.steps, initial=start_step, desc=f"train {family}", disable=not progress, dynamic_ncols=True
    )
    acc: dict[str, list[float]] = {}
    stopped_by_time = False
    lr_by_time_from: int | None = None  # first step whose learning rate followed the clock
    elapsed = elapsed0
    while step < tc.steps:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, tc, elapsed)
        if lr_by_time_from is None and step >= tc.warmup_steps and anneal_progress(step, tc, elapsed)[1]:
            lr_by_time_from = step
        loss, logs = train_step(model, opt, sampler.sample(tc.batch_size), grad_clip=tc.grad_clip)
        step += 1
        if ema is not None:
            ema.update(model, step)
        losses.append(loss)
        for k, v in logs.items():
            acc.setdefault(k, []).append(v)
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.4f}")
        elapsed = elapsed0 + time.perf_counter() - t_start
        if step % tc.log_every == 0 or step == tc.steps:
            row = {k: float(np.mean(v)) for k, v in acc.items()}
            row.update(lr=opt.param_groups[0]["lr"], elapsed_s=elapsed)
            run.log(step, row)
            acc = {}
        out_of_time = tc.max_time_s is not None and elapsed >= tc.max_time_s
        if step % tc.checkpoint_every == 0 or step == tc.steps or out_of_time:
            run.save_checkpoint(step, _write_checkpoint(model, opt, step, sampler, elapsed, ema))
        if out_of_time:
            stopped_by_time = True
            break
    bar.close()
    if acc:
        run.log(step, {k: float(np.mean(v)) for k, v in acc.items()})
    model.eval()
    train_time = elapsed0 + time.perf_counter() - t_start
    if ema is not None:
        ema.copy_to(model)  # the final model is the weight average (checkpoints keep the raw weights)
    model.save_pretrained(run.path / "model")
    info: dict[str, Any] = {
        "family": family,
        "steps": step,
        "stopped_by_time": stopped_by_time,
        "lr_by_time_from_step": lr_by_time_from,
        "ema_decay": tc.ema_decay,
        "train_time_s": train_time,
        "train_frames": int(len(train_traj.images)),
        "train_episodes": int(len(train_traj.episode_bounds)),
        "final_loss": float(np.mean(losses[-20:])) if losses else None,
        "run_dir": str(run.path),
    }
    _loss_plot(run)
    if test_traj is not None and tc.videos > 0:
        info.update(_videos_and_test_psnr(model, test_traj, run, tc, step))
    return model, info


def _loss_plot(run) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from wmrl.io import atomic_write

    rows = [r for r in run.read_metrics() if "loss" in r]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for key in ("loss", "loss_pixel", "loss_state", "loss_reward", "loss_success"):
        pts = [(r["step"], r[key]) for r in rows if key in r]
        if pts:
            ax.plot(*zip(*pts, strict=True), label=key)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.legend(fontsize=7)
    fig.tight_layout()
    atomic_write(run.plots / "loss.png", lambda p: fig.savefig(p, format="png", dpi=100))
    plt.close(fig)


TEST_WINDOWS = 32  # held-out windows behind the test PSNR / state errors (videos: the first ``tc.videos``)


def _videos_and_test_psnr(model, test_traj, run, tc: TrainLoopConfig, step: int) -> dict[str, float]:
    """Open-loop rollouts on up to :data:`TEST_WINDOWS` held-out windows: test PSNR and (models with
    a state) the mean absolute error of the proprio dims (``test_proprio_mae_h*``, the data's units)
    and of the environment-state dims (``test_env_state_mae_h*``, metres for the built-in cubes) one
    and ``video_horizon`` steps ahead; writes the first ``tc.videos`` as real | imagined mp4s."""
    from wmrl.video import side_by_side, write_video

    t, h = model.context_frames, tc.video_horizon
    starts = np.asarray(test_traj.window_starts(t, h))
    if len(starts) == 0:
        return {}
    rng = np.random.default_rng(tc.seed)
    pick = np.sort(rng.choice(starts, size=min(max(TEST_WINDOWS, tc.videos), len(starts)), replace=False))
    idx = pick[:, None] + np.arange(t + h)[None]
    frames = torch.from_numpy(test_traj.images[idx])
    all_states = model_states(test_traj, model.config)
    states = torch.from_numpy(all_states[idx[:, :t]])
    actions = torch.from_numpy(np.asarray(test_traj.actions, np.float32)[idx[:, t - 1 : t + h - 1]])
    out = model.rollout(frames[:, :t], states, actions)
    imagined = out.frames.cpu()  # (B, h, H, W, 3) uint8, off the model's device
    real = frames[:, t:].float()
    mse = ((imagined.float() - real) ** 2).mean(dim=(0, 2, 3, 4)).clamp_min(1e-10)
    psnr = (10 * torch.log10(255.0**2 / mse)).tolist()
    extra: dict[str, float] = {}
    s, d = model.config.env_state_dim, model.config.state_dim
    if d:  # open-loop state errors
        err = np.abs(out.states.float().cpu().numpy() - all_states[idx[:, t:]])
        extra = {"test_proprio_mae_h1": float(err[:, 0, :d].mean()), f"test_proprio_mae_h{h}": float(err[:, -1, :d].mean())}
        if s:
            extra.update({"test_env_state_mae_h1": float(err[:, 0, d:].mean()),
                          f"test_env_state_mae_h{h}": float(err[:, -1, d:].mean())})
    pick = pick[: tc.videos]
    for i in range(len(pick)):
        vid = side_by_side(frames[i].numpy(), np.concatenate([frames[i, :t].numpy(), imagined[i].numpy()]))
        name = f"step_{step:06d}_rollout_{i:02d}_real_vs_imagined.mp4"
        write_video(run.videos / name, vid, fps=int(getattr(test_traj, "fps", 10)))
    return {"test_psnr_h1": psnr[0], f"test_psnr_h{h}": psnr[-1], **extra}


def main(argv: list[str]) -> int:
    """CLI entry point: ``wmrl train-world-model [key=value ...]``. Returns the exit status."""
    from omegaconf import OmegaConf

    from wmrl.config import load_config, to_dataclass

    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    bad = [a for a in argv if "=" not in a]
    if bad:
        raise ConfigError(f"argument {bad[0]!r} is not a key=value override")
    cfg_dc = load_config("train_world_model", list(argv))
    cfg = to_dataclass(cfg_dc, TrainWorldModelConfig)
    cfg.model_config()  # validate the family config before any data is loaded
    try:
        _, info = train_world_model(cfg, config_record=OmegaConf.to_container(cfg_dc, resolve=True))
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to resume from the last checkpoint")
        return 130
    except WmrlError:
        raise
    print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in info.items()})
    return 0


if __name__ == "__main__":  # pragma: no cover
    import sys

    raise SystemExit(main(sys.argv[1:]))
