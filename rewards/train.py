"""``wmrl train-rewards``: train the IDM (and calibrate the executability reward) and the success model.

    wmrl train-rewards dataset=/tmp/rew_data out=runs/rewards idm_steps=3000 success_steps=2000

Writes ``out/executability/`` (``executability.json`` + ``idm/``), ``out/success/``, ``metrics.jsonl``
and ``eval.json`` (held-out IDM R^2 per action dim, success AUROC). A stage whose model folder
already exists is skipped, so an interrupted job resumes at the unfinished stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rewards.executability import ExecutabilityConfig, ExecutabilityReward
from rewards.idm import IDMConfig, idm_r2, train_idm
from rewards.success import SuccessModelConfig, SuccessRewardModel, success_frames, train_success_model
from wmrl.errors import ConfigError


@dataclass
class RewardModelsConfig:
    """Architectures: ``idm``, ``success``, ``executability``."""

    idm: IDMConfig = field(default_factory=IDMConfig)
    success: SuccessModelConfig = field(default_factory=SuccessModelConfig)
    executability: ExecutabilityConfig = field(default_factory=ExecutabilityConfig)


@dataclass
class TrainRewardsConfig:
    """Args:
    dataset: LeRobotDataset folder.
    out: run folder.
    idm_steps, success_steps: optimiser steps per model.
    batch_size, lr, seed: optimisation (``lr`` of the success model).
    idm_lr, idm_augment_shift: the IDM's learning rate and random-shift augmentation (pixels).
    val_frac: held-out episode fraction (half calibrates the executability reward, half is eval.json's test set).
    clip_len: frames per clip for the executability calibration.
    num_threads: torch threads (1 is fastest on a busy 2-core CPU).
    rewards: architectures.
    """

    dataset: str | None = None
    out: str = "runs/rewards"
    idm_steps: int = 3000
    success_steps: int = 2000
    batch_size: int = 64
    lr: float = 1e-3
    idm_lr: float = 3e-3
    idm_augment_shift: int = 0
    seed: int = 0
    val_frac: float = 0.2
    clip_len: int = 8
    num_threads: int | None = 1
    rewards: RewardModelsConfig = field(default_factory=RewardModelsConfig)

    def __post_init__(self) -> None:
        if self.idm_steps < 1 or self.success_steps < 1:
            raise ConfigError(f"{self.idm_steps=} and {self.success_steps=} must be >= 1")
        if self.batch_size < 2:
            raise ConfigError(f"{self.batch_size=} must be >= 2")
        if not self.lr > 0 or not self.idm_lr > 0:
            raise ConfigError(f"{self.lr=} and {self.idm_lr=} must be > 0")
        if self.idm_augment_shift < 0:
            raise ConfigError(f"{self.idm_augment_shift=} must be >= 0")
        if not 0 < self.val_frac < 1:
            raise ConfigError(f"{self.val_frac=} must be in (0, 1)")
        if self.clip_len < 3:
            raise ConfigError(f"{self.clip_len=} must be >= 3 (jerk needs 3 transitions)")


def real_clips(traj: Any, clip_len: int, max_clips: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random real clips: frames uint8 (M, T, H, W, 3), commanded actions (M, T-1, 7), start rows (M,)."""
    starts = traj.window_starts(0, clip_len)
    if len(starts) == 0:
        raise ConfigError(f"no episode is at least {clip_len=} frames long")
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.choice(starts, min(max_clips, len(starts)), replace=False))
    idx = starts[:, None] + np.arange(clip_len)[None]
    return traj.images[idx], np.asarray(traj.actions, np.float32)[idx[:, :-1]], starts


def auroc(pos: np.ndarray, neg: np.ndarray) -> float:
    """Area under the ROC curve of scores ``pos`` (label 1) against ``neg`` (label 0)."""
    from sklearn.metrics import roc_auc_score

    y = np.concatenate([np.ones(len(pos)), np.zeros(len(neg))])
    return float(roc_auc_score(y, np.concatenate([pos, neg])))


def success_eval(model: SuccessRewardModel, test: Any) -> dict[str, Any]:
    """Held-out success AUROC over the labelled frame pool of :func:`rewards.success.success_frames`
    (stored frames + real terminal frames when the dataset has them), with the pool's make-up, and
    (with terminal frames) the AUROC of terminal frames alone (successful vs failed episode ends)."""
    pool = success_frames(test)
    prob = model.predict(pool.images, pool.instructions).numpy()
    y = pool.labels

    def roc(mask: np.ndarray) -> float | None:
        return auroc(prob[mask & y], prob[mask & ~y]) if (mask & y).any() and (mask & ~y).any() else None

    term = pool.terminal
    return {
        "success_auroc": roc(np.ones(len(y), bool)),
        "success_auroc_terminal_only": roc(term) if term.any() else None,
        "success_eval_frames": {"positives": int(y.sum()), "negatives": int((~y).sum()),
                                "terminal_frames": int(term.sum()),
                                "labels": "real terminal frames" if term.any() else
                                          "last stored frame of successful episodes (no terminal sidecar)"},
    }


def split_for_eval(traj: Any, cfg: TrainRewardsConfig) -> tuple[Any, tuple[Any, Any]]:
    """Episodes -> (train, (calibration, test)): ``val_frac`` held out, half of it to calibrate the
    executability reward (the IDM's residuals must be measured on data it did not fit), half to test."""
    train, held = traj.split_episodes(cfg.val_frac, cfg.seed)
    return train, held.split_episodes(0.5, cfg.seed + 1)


def train_reward_models(cfg: TrainRewardsConfig, trajectories: Any = None, progress: bool = True) -> dict[str, Any]:
    """Train both models; returns eval figures (also written to ``out/eval.json``)."""
    from wmrl.io import atomic_write_json
    from wmrl.runs import RunDir, seed_everything

    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    if trajectories is None:
        if not cfg.dataset:
            raise ConfigError("dataset=PATH is required (a LeRobotDataset written by `wmrl collect`)")
        from wmrl.data import load_trajectories

        trajectories = load_trajectories(cfg.dataset)
    seed_everything(cfg.seed)
    run = RunDir(cfg.out, cfg)
    train, test = split_for_eval(trajectories, cfg)
    calib = test[0]
    test = test[1]
    out = Path(cfg.out)
    exec_dir, succ_dir = out / "executability", out / "success"
    if (exec_dir / "executability.json").exists():
        exe = ExecutabilityReward.from_pretrained(exec_dir)
        idm = exe.idm
    else:
        idm = train_idm(train, cfg.rewards.idm, cfg.idm_steps, cfg.batch_size, cfg.idm_lr, cfg.seed,
                        augment_shift=cfg.idm_augment_shift, log=run.log, progress=progress)
        exe = ExecutabilityReward(idm, cfg.rewards.executability)
        frames, cmd, _ = real_clips(calib, cfg.clip_len, 256, cfg.seed)
        exe.calibrate(frames, cmd)
        exe.save_pretrained(exec_dir)
    if (succ_dir / "config.json").exists():
        succ = SuccessRewardModel.from_pretrained(succ_dir)
    else:
        succ = train_success_model(train, cfg.rewards.success, cfg.success_steps, cfg.batch_size, cfg.lr, cfg.seed,
                                   log=run.log, progress=progress)
        succ.save_pretrained(succ_dir)
    r2 = idm_r2(idm, test)
    result = {
        "idm_r2": r2,
        **success_eval(succ, test),
        "test_episodes": int(test.num_episodes),
        "executability_scale": exe.config.scale,
    }
    atomic_write_json(out / "eval.json", result)
    return result


def main(argv: list[str]) -> int:
    """Entry point of ``wmrl train-rewards``."""
    from policies.train import parse_argv
    from wmrl.config import load_config, to_dataclass

    name, overrides = parse_argv(list(argv), default="train_rewards")
    cfg = to_dataclass(load_config(name, overrides), TrainRewardsConfig)
    res = train_reward_models(cfg)
    print(f"reward models saved to {cfg.out}: IDM R^2 per dim {res['idm_r2']['per_dim']}, "
          f"success AUROC {res['success_auroc']}")
    return 0
