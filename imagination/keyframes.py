"""Keyframe-initialized rollouts (KIR, from WoVR): where in real trajectories imagined episodes start.

An imagined episode starts from the world-model context made of the ``T`` real frames (and
states) ending at a *keyframe* row of a real trajectory, so the episode is short and imagination
errors have little depth to compound. Strategies:

* ``start``: only frame 0 of each episode (KIR off; the ablation).
* ``uniform``: any frame before the episode's first success.
* ``late``: frames in the last ``1 - late_fraction`` of the pre-success part (hard, late stages).
* ``near_failure``: with probability ``failure_mix`` a frame from the last ``failure_window``
  frames of a *failed* episode (where the demonstrator went wrong), else ``uniform``; falls back
  to ``uniform`` when the data holds no failures (``sampler.fallback`` is then True).

Sampling is balanced over tasks (task, then episode, then frame), from a caller-given
``numpy.random.Generator`` so equal seeds give equal keyframes (GRPO groups share starts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from wmrl.errors import ConfigError, DatasetError

STRATEGIES = ("start", "uniform", "late", "near_failure")


@dataclass
class KeyframeConfig:
    """Args:
    strategy: one of ``start``, ``uniform``, ``late``, ``near_failure``.
    late_fraction: ``late`` keeps frames at or after this fraction of the pre-success part.
    failure_window: ``near_failure`` window (frames before a failed episode's end).
    failure_mix: probability of drawing from the failure window under ``near_failure``.
    """

    strategy: str = "uniform"
    late_fraction: float = 0.5
    failure_window: int = 24
    failure_mix: float = 0.5

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ConfigError(f"keyframe strategy={self.strategy!r}; expected one of {', '.join(STRATEGIES)}")
        if not 0.0 <= self.late_fraction < 1.0:
            raise ConfigError(f"late_fraction={self.late_fraction} must lie in [0, 1)")
        if self.failure_window < 1 or not 0.0 <= self.failure_mix <= 1.0:
            raise ConfigError(
                f"failure_window={self.failure_window} must be >= 1, failure_mix={self.failure_mix} in [0, 1]"
            )


class KeyframeSampler:
    """Draws keyframe rows of ``traj`` (a ``wmrl.data.Trajectories``) and builds WM contexts.

    Args:
        traj: real trajectories (frames, states, instructions, task ids, episode bounds).
        context_frames: ``T`` of the world model.
        config: strategy and its parameters.
        task_ids: restrict to these env task ids (None: all tasks in ``traj``).
    """

    def __init__(
        self,
        traj: Any,
        context_frames: int,
        config: KeyframeConfig | None = None,
        task_ids: list[str] | None = None,
    ):
        self.traj, self.T = traj, int(context_frames)
        self.config = config or KeyframeConfig()
        if traj.num_frames == 0:
            raise DatasetError("keyframe dataset is empty; collect real episodes first")
        bounds = np.asarray(traj.episode_bounds)
        ep_tasks = traj.episode_task_ids()
        have = sorted(set(ep_tasks))
        if task_ids is not None:
            missing = sorted(set(task_ids) - set(have))
            if missing:
                raise DatasetError(f"keyframe dataset holds tasks {have}; it has no episodes of {missing}")
        want = set(have if task_ids is None else task_ids)
        ep_success = np.asarray(traj.episode_success)
        succ = np.asarray(traj.successes, bool)
        self.fallback = False
        # per task: list of (episode, candidate rows, failure rows); per episode: its two row sets
        self.tasks: dict[str, list[tuple[int, np.ndarray, np.ndarray]]] = {}
        self.episode_rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for e, (s, t) in enumerate(bounds):
            if ep_tasks[e] not in want:
                continue
            hit = np.flatnonzero(succ[s:t])
            last = s + int(hit[0]) if len(hit) else t - 1  # last frame that still needs an action
            rows = self._rows(int(s), int(last))
            fail = (
                np.arange(max(s, t - self.config.failure_window), t)
                if not ep_success[e]
                else np.zeros(0, int)
            )
            self.tasks.setdefault(ep_tasks[e], []).append((e, rows, fail))
            self.episode_rows[e] = (rows, fail)
        self.task_names = sorted(self.tasks)
        self._row_start = np.repeat(
            bounds[:, 0], bounds[:, 1] - bounds[:, 0]
        )  # (N,) first row of each row's episode
        if self.config.strategy == "near_failure" and not any(
            len(f) for v in self.tasks.values() for _, _, f in v
        ):
            self.fallback = True

    def _rows(self, s: int, last: int) -> np.ndarray:
        c = self.config
        if c.strategy == "start":
            return np.array([s])
        if c.strategy == "late":
            first = s + int(np.floor(c.late_fraction * (last - s)))
            return np.arange(first, last + 1)
        return np.arange(s, last + 1)

    def sample(self, rng: np.random.Generator, episode: int | None = None) -> int:
        """One keyframe row (index into ``traj``); with ``episode``, a row of that episode of ``traj``
        drawn by the strategy (its frame 0 under ``start``; its failure window, with probability
        ``failure_mix``, under ``near_failure`` when it failed)."""
        if episode is not None:
            if episode not in self.episode_rows:
                raise DatasetError(
                    f"keyframe episode {episode} is not among the {len(self.episode_rows)} episodes of the "
                    f"sampler's tasks (episode indices 0..{len(self.traj.episode_bounds) - 1})"
                )
            rows, fail = self.episode_rows[episode]
            if self.config.strategy == "near_failure" and len(fail) and rng.random() < self.config.failure_mix:
                return int(fail[int(rng.integers(len(fail)))])
            return int(rows[int(rng.integers(len(rows)))])
        task = self.task_names[int(rng.integers(len(self.task_names)))]
        eps = self.tasks[task]
        c = self.config
        if c.strategy == "near_failure" and not self.fallback and rng.random() < c.failure_mix:
            failed = [f for _, _, f in eps if len(f)]
            if failed:
                f = failed[int(rng.integers(len(failed)))]
                return int(f[int(rng.integers(len(f)))])
        _, rows, _ = eps[int(rng.integers(len(eps)))]
        return int(rows[int(rng.integers(len(rows)))])

    def context(self, row: int, states: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Real context ending at ``row``: frames uint8 ``(T, H, W, 3)``, states float32 ``(T, D)``
        (rows of ``states`` when given, an (N, D') array aligned with ``traj``, else ``traj.states``);
        rows before the episode start repeat its first frame."""
        idx = np.clip(np.arange(row - self.T + 1, row + 1), self._row_start[row], None)
        return self.traj.images[idx], (self.traj.states if states is None else states)[idx]
