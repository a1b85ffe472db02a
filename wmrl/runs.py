"""Run folders: config, metrics (JSONL), checkpoints with resume, videos and plots.

Layout of a run folder::

    RUN/
      config.yaml          resolved config of the job
      metrics.jsonl        one JSON object per logged step ({"step": ..., "time": ..., ...})
      checkpoints/
        step_000100/       one folder per checkpoint (written to a temp folder, then renamed)
        latest             name of the newest complete checkpoint folder (atomic write)
      videos/              real vs imagined rollouts (mp4)
      plots/               png figures
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from wmrl.errors import CheckpointError, NonFiniteError
from wmrl.io import atomic_write_text


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU runs are then reproducible)."""
    import numpy as np

    random.seed(seed)
    np.random.seed(seed % (2**32))
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # pragma: no cover
        pass


def check_finite(name: str, value: Any) -> None:
    """Raise :class:`NonFiniteError` if ``value`` (float, numpy array or tensor) holds NaN/Inf."""
    bad = False
    if isinstance(value, (int, float)):
        bad = not math.isfinite(value)
    elif hasattr(value, "isfinite"):  # torch.Tensor
        bad = not bool(value.isfinite().all())
    else:
        import numpy as np

        bad = not bool(np.isfinite(np.asarray(value)).all())
    if bad:
        raise NonFiniteError(f"{name} is not finite (NaN or Inf); stopping instead of training on it")


class RunDir:
    """A job's run folder. ``RunDir(path, config)`` creates it (or reopens it to resume).

    Args:
        path: folder of the run.
        config: resolved config (mapping) written to ``config.yaml`` on first creation. On
            resume, a config that differs from the saved one is written to
            ``config.resumed.yaml`` for the record; the saved one is kept.
    """

    def __init__(self, path: str | os.PathLike, config: Mapping[str, Any] | None = None):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "checkpoints").mkdir(exist_ok=True)
        self.videos = self.path / "videos"
        self.plots = self.path / "plots"
        self.videos.mkdir(exist_ok=True)
        self.plots.mkdir(exist_ok=True)
        if config is not None:
            import yaml

            text = yaml.safe_dump(_plain(config), sort_keys=False)
            cfg_path = self.path / "config.yaml"
            if not cfg_path.exists():
                atomic_write_text(cfg_path, text)
            elif cfg_path.read_text() != text:
                atomic_write_text(self.path / "config.resumed.yaml", text)
        self._metrics_path = self.path / "metrics.jsonl"

    # ---------------------------------------------------------------- metrics
    def log(self, step: int, metrics: Mapping[str, Any], check: bool = True) -> None:
        """Append one line to ``metrics.jsonl``. Raises :class:`NonFiniteError` on NaN/Inf
        values when ``check`` (the line is still written, so the failure is on record)."""
        row = {"step": int(step), "time": time.time()}
        bad = []
        for k, v in metrics.items():
            v = _scalar(v)
            row[k] = v
            if check and isinstance(v, float) and not math.isfinite(v):
                bad.append(k)
        with open(self._metrics_path, "a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
        if bad:
            raise NonFiniteError(f"non-finite metric(s) {bad} at step {step}; stopping the job")

    def read_metrics(self) -> list[dict[str, Any]]:
        if not self._metrics_path.exists():
            return []
        rows = []
        for line in self._metrics_path.read_text().splitlines():
            line = line.strip()
            if line:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:  # a line cut by a crash: skip it
                    continue
        return rows

    # ------------------------------------------------------------ checkpoints
    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    def save_checkpoint(self, step: int, write: Callable[[Path], None], keep: int = 2) -> Path:
        """Write a checkpoint folder atomically: ``write(tmp_dir)`` fills a temp folder which is
        renamed to ``checkpoints/step_{step:06d}``; then ``latest`` is updated. Older
        checkpoints beyond ``keep`` are removed."""
        name = f"step_{int(step):06d}"
        final = self.checkpoints / name
        tmp = self.checkpoints / f".{name}.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        try:
            write(tmp)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        atomic_write_text(self.checkpoints / "latest", name + "\n")
        done = sorted(p for p in self.checkpoints.glob("step_*") if p.is_dir())
        for old in done[:-keep] if keep > 0 else []:
            if old.name != name:
                shutil.rmtree(old, ignore_errors=True)
        return final

    def latest_checkpoint(self) -> Path | None:
        """The newest complete checkpoint folder, or None if there is none."""
        ptr = self.checkpoints / "latest"
        if not ptr.exists():
            return None
        name = ptr.read_text().strip()
        path = self.checkpoints / name
        if not path.is_dir():
            raise CheckpointError(f"checkpoint pointer {ptr} names {name!r}, which does not exist")
        return path

    @staticmethod
    def step_of(checkpoint: Path) -> int:
        return int(checkpoint.name.split("_")[-1])


def _scalar(v: Any) -> Any:
    if hasattr(v, "item") and getattr(v, "ndim", 0) == 0:
        v = v.item()
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return v
    if hasattr(v, "tolist"):
        return v.tolist()
    return v


def _plain(obj: Any) -> Any:
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(obj, (DictConfig, ListConfig)):
            return OmegaConf.to_container(obj, resolve=True)
    except ImportError:  # pragma: no cover
        pass
    if hasattr(obj, "__dataclass_fields__"):
        import dataclasses

        return _plain(dataclasses.asdict(obj))
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj
