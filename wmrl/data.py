"""Trajectory datasets in the LeRobotDataset layout (lerobot v3 format), written and read here.

Features per frame (frame t's observation is before action t; ``next.*`` come after it):
``observation.image`` (H,W,3) image, optional ``observation.wrist_image``, ``observation.state``
(D,), ``action`` (7,), ``next.reward`` (1,), ``next.success`` (1,), ``next.done`` (1,), and the
instruction as the frame's ``task``; optionally ``observation.environment_state`` (E,), the
simulator's privileged state (the built-in suite: :mod:`envs.tabletop.environment_state`), which no
policy observes but a world model may learn to predict. A sidecar ``meta/wmrl_episodes.jsonl`` records each
episode's env task id, seed and expert noise. A second sidecar ``meta/wmrl_terminal.npz``
holds each episode's terminal observation (the one after its last action, which the frame table
never stores: frame t is the observation before action t), e.g. the frame that shows success.
Datasets are readable by lerobot's own ``LeRobotDataset(repo_id, root=...)`` (with ``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import warnings
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from wmrl.errors import DatasetError

os.environ.setdefault("HF_HUB_OFFLINE", "1")
FORMAT_VERSION = 1
ENV_STATE_KEY = "observation.environment_state"
REQUIRED_FEATURES = ("observation.image", "observation.state", "action", "next.reward", "next.success")
SIDECAR = "meta/wmrl_episodes.jsonl"
TERMINAL_SIDECAR = "meta/wmrl_terminal.npz"


def dataset_features(
    image_size: int, state_dim: int, wrist: bool, action_dim: int = 7, env_state_dim: int = 0
) -> dict[str, dict]:
    """lerobot feature spec of a wmrl trajectory dataset (``env_state_dim`` > 0 adds
    ``observation.environment_state``)."""
    img = {"dtype": "image", "shape": (image_size, image_size, 3), "names": ["height", "width", "channels"]}
    feats: dict[str, dict] = {"observation.image": img}
    if wrist:
        feats["observation.wrist_image"] = dict(img)
    feats.update(
        {
            "observation.state": {"dtype": "float32", "shape": (state_dim,), "names": None},
            "action": {"dtype": "float32", "shape": (action_dim,), "names": None},
            "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
            "next.success": {"dtype": "bool", "shape": (1,), "names": None},
            "next.done": {"dtype": "bool", "shape": (1,), "names": None},
        }
    )
    if env_state_dim:
        feats[ENV_STATE_KEY] = {"dtype": "float32", "shape": (env_state_dim,), "names": None}
    return feats


def split_episode_positions(num_episodes: int, frac_test: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The episode positions of :meth:`Trajectories.split_episodes`' (train, test) split of ``num_episodes``
    episodes, each sorted (int64 (E_train,), (E_test,)); at least one episode in each. Lets a caller take
    the test episodes out without copying the training ones (``policies.train.ChunkDataset(episodes=...)``)."""
    if not 0.0 < frac_test < 1.0:
        raise DatasetError(f"frac_test={frac_test} must be in (0, 1)")
    if num_episodes < 2:
        raise DatasetError(f"cannot split a dataset of {num_episodes} episode(s); need at least 2")
    perm = np.random.default_rng(seed).permutation(num_episodes)
    n_test = min(max(1, round(num_episodes * frac_test)), num_episodes - 1)
    return np.sort(perm[n_test:]).astype(np.int64), np.sort(perm[:n_test]).astype(np.int64)


def blank_frames(n: int) -> np.ndarray:
    """A read-only black (n,1,1,3) uint8 placeholder for ``n`` frames that takes no memory."""
    return np.broadcast_to(np.zeros((1, 1, 1, 3), np.uint8), (n, 1, 1, 3))


@dataclass
class TerminalObs:
    """The terminal observation of each of E episodes (after its last action; not in the frame table).

    Args:
        images: uint8 (E,H,W,3) agent view.
        wrist_images: uint8 (E,H,W,3) or None.
        states: float32 (E,D).
        successes: bool (E,) success at the terminal observation (the last ``next.success``).
    """

    images: np.ndarray
    wrist_images: np.ndarray | None
    states: np.ndarray
    successes: np.ndarray

    def __post_init__(self) -> None:
        e = len(self.images)
        if self.images.ndim != 4 or self.images.shape[-1] != 3 or self.images.dtype != np.uint8:
            raise DatasetError(
                f"terminal images have shape {self.images.shape} {self.images.dtype}; expected uint8 (E,H,W,3)"
            )
        for name in ("states", "successes"):
            if len(getattr(self, name)) != e:
                raise DatasetError(f"TerminalObs.{name} has {len(getattr(self, name))} rows; expected {e}")
        if self.wrist_images is not None and self.wrist_images.shape != self.images.shape:
            raise DatasetError(
                f"terminal wrist images have shape {self.wrist_images.shape}; expected {self.images.shape}"
            )

    def select(self, episodes: np.ndarray) -> TerminalObs:
        return TerminalObs(
            images=self.images[episodes],
            wrist_images=None if self.wrist_images is None else self.wrist_images[episodes],
            states=self.states[episodes],
            successes=self.successes[episodes],
        )


@dataclass
class Trajectories:
    """A trajectory dataset held in memory (numpy). N frames, E episodes.

    Args:
        images: uint8 (N,H,W,3) agent view before each action.
        wrist_images: uint8 (N,H,W,3) or None.
        states: float32 (N,D).
        actions: float32 (N,A).
        rewards: float32 (N,) reward after each action.
        successes: bool (N,) success after each action.
        dones: bool (N,) episode ended after this action.
        episode_index: int64 (N,) episode id of each frame (0..E-1, contiguous).
        frame_index: int64 (N,) step within its episode.
        instructions: list of N instruction strings.
        task_ids: list of N env task ids.
        fps: control rate.
        episode_weights: float32 (E,) sampling weights (co-evolution up-weights failures).
        terminal: each episode's terminal observation (:class:`TerminalObs`, E rows) or None
            (datasets recorded without the ``meta/wmrl_terminal.npz`` sidecar, e.g. community ones).
        env_states: float32 (N, S) privileged environment state before each action, or None
            (datasets recorded without ``observation.environment_state``).
    """

    images: np.ndarray
    wrist_images: np.ndarray | None
    states: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    successes: np.ndarray
    dones: np.ndarray
    episode_index: np.ndarray
    frame_index: np.ndarray
    instructions: list[str]
    task_ids: list[str]
    fps: int = 20
    episode_weights: np.ndarray | None = field(default=None)
    terminal: TerminalObs | None = field(default=None)
    env_states: np.ndarray | None = field(default=None)

    def __post_init__(self) -> None:
        n = len(self.images)
        if self.env_states is not None and (self.env_states.ndim != 2 or len(self.env_states) != n):
            raise DatasetError(f"Trajectories.env_states has shape {self.env_states.shape}; expected ({n}, S)")
        for name in ("states", "actions", "rewards", "successes", "dones", "episode_index", "frame_index"):
            if len(getattr(self, name)) != n:
                raise DatasetError(f"Trajectories.{name} has {len(getattr(self, name))} rows; expected {n}")
        if self.images.ndim != 4 or self.images.shape[-1] != 3 or self.images.dtype != np.uint8:
            raise DatasetError(
                f"images have shape {self.images.shape} {self.images.dtype}; expected uint8 (N,H,W,3)"
            )
        if self.episode_weights is None:
            self.episode_weights = np.ones(self.num_episodes, np.float32)
        if self.terminal is not None and len(self.terminal.images) != self.num_episodes:
            raise DatasetError(
                f"terminal observations cover {len(self.terminal.images)} episodes; expected {self.num_episodes}"
            )

    # --------------------------------------------------------------- shape
    @property
    def num_frames(self) -> int:
        return len(self.images)

    @property
    def num_episodes(self) -> int:
        return len(self.episode_bounds)

    @property
    def image_size(self) -> int:
        return int(self.images.shape[1])

    @property
    def episode_bounds(self) -> np.ndarray:
        """int64 (E,2): [start, end) frame rows of each episode."""
        if self.num_frames == 0:
            return np.zeros((0, 2), np.int64)
        change = np.flatnonzero(np.diff(self.episode_index)) + 1
        starts = np.concatenate([[0], change])
        ends = np.concatenate([change, [self.num_frames]])
        return np.stack([starts, ends], axis=1).astype(np.int64)

    @property
    def episode_success(self) -> np.ndarray:
        """bool (E,): whether each episode reached success."""
        return np.array([self.successes[s:e].any() for s, e in self.episode_bounds], dtype=bool)

    def episode_task_ids(self) -> list[str]:
        return [self.task_ids[s] for s, _ in self.episode_bounds]

    # ------------------------------------------------------------ windows
    def window_starts(self, context: int, horizon: int) -> np.ndarray:
        """Rows s such that frames s .. s+context+horizon-1 lie in one episode (int64 (M,))."""
        span = context + horizon
        out = [np.arange(s, e - span + 1) for s, e in self.episode_bounds if e - s >= span]
        return np.concatenate(out).astype(np.int64) if out else np.zeros(0, np.int64)

    # ------------------------------------------------------- subsets
    def select_episodes(self, episodes: Sequence[int] | np.ndarray) -> Trajectories:
        """The given episodes (by position 0..E-1), renumbered 0..len-1."""
        bounds = self.episode_bounds
        episodes = np.asarray(episodes, dtype=np.int64)
        rows = (
            np.concatenate([np.arange(*bounds[e]) for e in episodes])
            if len(episodes)
            else np.zeros(0, np.int64)
        )
        new_ep = (
            np.concatenate([np.full(bounds[e, 1] - bounds[e, 0], k) for k, e in enumerate(episodes)])
            if len(episodes)
            else np.zeros(0, np.int64)
        )
        return Trajectories(
            images=self.images[rows],
            wrist_images=None if self.wrist_images is None else self.wrist_images[rows],
            states=self.states[rows],
            actions=self.actions[rows],
            rewards=self.rewards[rows],
            successes=self.successes[rows],
            dones=self.dones[rows],
            episode_index=new_ep.astype(np.int64),
            frame_index=self.frame_index[rows],
            instructions=[self.instructions[r] for r in rows],
            task_ids=[self.task_ids[r] for r in rows],
            fps=self.fps,
            episode_weights=self.episode_weights[episodes],
            terminal=None if self.terminal is None else self.terminal.select(episodes),
            env_states=None if self.env_states is None else self.env_states[rows],
        )

    def without_frames(self) -> Trajectories:
        """The same episodes without their pixels, for consumers of states, actions and environment states
        only (e.g. :func:`worldmodels.object_dynamics.fit_object_dynamics`): ``images`` (and the terminal
        observations' images) become a read-only black (N,1,1,3) placeholder that takes no memory, the wrist
        frames None; every other array is shared with ``self``. Datasets stripped alike concatenate."""
        terminal = self.terminal
        if terminal is not None:
            terminal = replace(terminal, images=blank_frames(len(terminal.images)), wrist_images=None)
        return replace(self, images=blank_frames(self.num_frames), wrist_images=None, terminal=terminal)

    def episodes_not_of(self, tasks: Collection[str]) -> list[int]:
        """Positions (0..E-1) of the episodes whose task id is not in ``tasks``."""
        drop = set(tasks)
        return [i for i, task in enumerate(self.episode_task_ids()) if task not in drop]

    def split_episodes(self, frac_test: float, seed: int = 0) -> tuple[Trajectories, Trajectories]:
        """Split by episode into (train, test); at least one episode in each when E >= 2."""
        train, test = split_episode_positions(self.num_episodes, frac_test, seed)
        return self.select_episodes(train), self.select_episodes(test)

    @staticmethod
    def concat(parts: Sequence[Trajectories]) -> Trajectories:
        """Concatenate datasets (episodes renumbered; all parts must share image size and dims)."""
        parts = [p for p in parts if p.num_frames]
        if not parts:
            raise DatasetError("nothing to concatenate: all parts are empty")
        ref = parts[0]
        for p in parts[1:]:
            if p.images.shape[1:] != ref.images.shape[1:] or p.states.shape[1] != ref.states.shape[1]:
                raise DatasetError(
                    f"cannot concatenate datasets with frames {p.images.shape[1:]} / state {p.states.shape[1]} "
                    f"and frames {ref.images.shape[1:]} / state {ref.states.shape[1]}"
                )
        offset, eps = 0, []
        for p in parts:
            eps.append(p.episode_index - p.episode_index.min() + offset if p.num_frames else p.episode_index)
            offset += p.num_episodes
        wrist = (
            None
            if any(p.wrist_images is None for p in parts)
            else np.concatenate([p.wrist_images for p in parts])
        )
        terminal = None
        if all(p.terminal is not None for p in parts):
            tw = [p.terminal.wrist_images for p in parts]
            terminal = TerminalObs(
                images=np.concatenate([p.terminal.images for p in parts]),
                wrist_images=None if any(w is None for w in tw) else np.concatenate(tw),
                states=np.concatenate([p.terminal.states for p in parts]),
                successes=np.concatenate([p.terminal.successes for p in parts]),
            )
        env = [p.env_states for p in parts]
        if any(e is None for e in env) or len({e.shape[1] for e in env}) > 1:
            env = None  # kept only when every part has it (with one size)
        return Trajectories(
            images=np.concatenate([p.images for p in parts]),
            wrist_images=wrist,
            states=np.concatenate([p.states for p in parts]),
            actions=np.concatenate([p.actions for p in parts]),
            rewards=np.concatenate([p.rewards for p in parts]),
            successes=np.concatenate([p.successes for p in parts]),
            dones=np.concatenate([p.dones for p in parts]),
            episode_index=np.concatenate(eps),
            frame_index=np.concatenate([p.frame_index for p in parts]),
            instructions=sum((p.instructions for p in parts), []),
            task_ids=sum((p.task_ids for p in parts), []),
            fps=ref.fps,
            episode_weights=np.concatenate([p.episode_weights for p in parts]),
            terminal=terminal,
            env_states=None if env is None else np.concatenate(env).astype(np.float32),
        )

    def with_weights(self, weights: np.ndarray) -> Trajectories:
        w = np.asarray(weights, np.float32)
        if w.shape != (self.num_episodes,):
            raise DatasetError(f"episode weights have shape {w.shape}; expected ({self.num_episodes},)")
        return replace(self, episode_weights=w)


# ---------------------------------------------------------------------- reading
_NPZ_ARRAYS = ("images", "states", "actions", "rewards", "successes", "dones", "episode_index", "frame_index")


def save_trajectories_npz(path: str | Path, traj: Trajectories) -> None:
    """Write ``traj`` (frames, states, actions, outcomes, instructions, task ids, fps and environment
    states; not wrist images, weights or terminal observations) to one compressed ``.npz``,
    atomically: e.g. a co-evolution round's real rollouts. Read back with :func:`load_trajectories_npz`."""
    from wmrl.io import atomic_write

    arrays = {k: getattr(traj, k) for k in _NPZ_ARRAYS}
    if traj.env_states is not None:
        arrays["env_states"] = traj.env_states
    arrays["instructions"] = np.array(traj.instructions)
    arrays["task_ids"] = np.array(traj.task_ids)
    arrays["fps"] = np.array(traj.fps)

    def write(p: Path) -> None:
        with open(p, "wb") as f:
            np.savez_compressed(f, **arrays)

    atomic_write(Path(path), write)


def load_trajectories_npz(path: str | Path, frames: bool = True) -> Trajectories:
    """The :class:`Trajectories` written by :func:`save_trajectories_npz` (``frames=False``: without
    decompressing the frames, which become :meth:`Trajectories.without_frames`' placeholder). A missing,
    unreadable or incomplete file is a one-line DatasetError."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path} not found; expected a trajectories .npz (e.g. RUN/round_1/rollouts.npz)")
    try:
        z = np.load(path)
        missing = [k for k in (*_NPZ_ARRAYS, "instructions", "task_ids", "fps") if k not in z.files]
    except Exception as e:  # noqa: BLE001 - zip/pickle errors of a corrupt file
        raise DatasetError(f"{path} is not a readable trajectories .npz ({type(e).__name__}: {e})") from e
    if missing:
        raise DatasetError(f"{path} lacks {', '.join(missing)}; expected a file written by save_trajectories_npz")
    states = z["states"]
    return Trajectories(
        images=z["images"] if frames else blank_frames(len(states)),
        wrist_images=None,
        states=states,
        actions=z["actions"],
        rewards=z["rewards"],
        successes=z["successes"],
        dones=z["dones"],
        episode_index=z["episode_index"],
        frame_index=z["frame_index"],
        instructions=[str(s) for s in z["instructions"]],
        task_ids=[str(s) for s in z["task_ids"]],
        fps=int(z["fps"]),
        env_states=z["env_states"] if "env_states" in z.files else None,
    )


def concat_with_npz(head: Trajectories, paths: Sequence[str | Path], drop_tasks: Collection[str] = (),
                    whole: Collection[str | Path] = ()) -> Trajectories:
    """``Trajectories.concat([head, *(load_trajectories_npz(p) for p in paths)])``, with each file's frames
    decompressed straight into the result's: while it runs, memory holds the result's frames and ``head``'s,
    never a file's (loading the files first holds all of theirs beside the result: e.g. a fifth
    self-imitation round's successes, about 1.9 GB). The files' frames must have ``head``'s size (a one-line
    DatasetError naming the file otherwise, raised before anything is allocated). ``drop_tasks``: task ids whose
    episodes in the files are left out (a file that holds some is decompressed whole, then its other episodes'
    frames copied: one file's frames are held for that moment), except in the files of ``whole``, kept whole."""
    paths = [Path(p) for p in paths]
    keep = {Path(p) for p in whole}
    size = head.images.shape[1:]
    light, rows, shapes = [], [], []
    for p in paths:
        t = load_trajectories_npz(p, frames=False)
        shape = _npz_member_shape(p, "images")
        if shape != (t.num_frames, *size):
            raise DatasetError(
                f"{p} holds frames of shape {shape}; expected ({t.num_frames}, {', '.join(map(str, size))}) "
                "to concatenate with the other episodes"
            )
        shapes.append(shape)
        ok = list(range(t.num_episodes)) if p in keep else t.episodes_not_of(drop_tasks)
        every = len(ok) == t.num_episodes
        rows.append(None if every else np.concatenate([np.arange(*t.episode_bounds[i]) for i in ok] or [[]]).astype(int))
        light.append(t if every else t.select_episodes(ok))
    out = Trajectories.concat([head.without_frames(), *light])
    images = np.empty((out.num_frames, *size), np.uint8)
    images[: head.num_frames] = head.images
    row = head.num_frames
    for p, t, keep, shape in zip(paths, light, rows, shapes):
        if keep is None:
            _read_npz_member_into(p, "images", images[row : row + t.num_frames])
        elif len(keep):  # some of its episodes are left out: the file's frames, then the others' rows
            frames = np.empty(shape, np.uint8)
            _read_npz_member_into(p, "images", frames)
            images[row : row + t.num_frames] = frames[keep]
            del frames
        row += t.num_frames
    return replace(out, images=images)


_NPY_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _npz_member_header(f: Any, path: Path, name: str) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype of the .npy member open in ``f`` (positioned at its start; left at its data)."""
    version = np.lib.format.read_magic(f)
    if version not in _NPY_HEADER_READERS:
        raise DatasetError(f"{path}: member {name} is in .npy format {version}; expected 1.0 or 2.0")
    shape, fortran, dtype = _NPY_HEADER_READERS[version](f)
    if fortran or dtype != np.uint8:
        raise DatasetError(f"{path}: member {name} is {dtype} (Fortran order: {fortran}); expected C-order uint8")
    return tuple(int(d) for d in shape), dtype


def _npz_member_shape(path: Path, name: str) -> tuple[int, ...]:
    """The shape of uint8 array ``name`` in the ``.npz`` at ``path``, read from its header alone."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf, zf.open(f"{name}.npy") as f:
            return _npz_member_header(f, path, name)[0]
    except (zipfile.BadZipFile, KeyError, ValueError, OSError) as e:
        raise DatasetError(f"{path}: cannot read the header of {name} ({type(e).__name__}: {e})") from e


def _read_npz_member_into(path: Path, name: str, out: np.ndarray, chunk: int = 1 << 24) -> None:
    """Decompress uint8 array ``name`` of the ``.npz`` at ``path`` into the C-contiguous ``out`` (its shape),
    ``chunk`` bytes at a time: no copy of the whole array is made."""
    import zipfile
    import zlib

    try:
        with zipfile.ZipFile(path) as zf, zf.open(f"{name}.npy") as f:
            shape, _ = _npz_member_header(f, path, name)
            if shape != out.shape:
                raise DatasetError(f"{path}: {name} has shape {shape}; expected {out.shape}")
            view, got = memoryview(out).cast("B"), 0
            while got < len(view):
                n = f.readinto(view[got : got + chunk])
                if not n:
                    raise DatasetError(f"{path}: {name} ends after {got} of {len(view)} bytes (truncated file?)")
                got += n
    except (zipfile.BadZipFile, zlib.error, EOFError, KeyError, ValueError, OSError) as e:
        raise DatasetError(f"{path}: cannot read {name} ({type(e).__name__}: {e}); corrupt file?") from e


def _decode_images(column: list[dict]) -> np.ndarray:
    import cv2

    out = []
    for cell in column:
        data = cell.get("bytes") if isinstance(cell, dict) else None
        if data is None:
            raise DatasetError("an image cell holds no bytes (dataset written with external image paths?)")
        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if img is None:
            raise DatasetError("an image in the dataset cannot be decoded (corrupt file?)")
        out.append(img[:, :, ::-1])
    return np.stack(out).astype(np.uint8)


IMAGE_KEYS = ("observation.image", "observation.images.image", "observation.images.agentview", "image")
WRIST_KEYS = ("observation.wrist_image", "observation.images.wrist_image", "wrist_image")


def load_trajectories(
    root: str | os.PathLike,
    require: Sequence[str] = REQUIRED_FEATURES,
    image_key: str | None = None,
    wrist_key: str | None = None,
    successful_demos: bool = False,
) -> Trajectories:
    """Load a LeRobot trajectory dataset from ``root`` into memory.

    Args:
        root: the dataset folder (``meta/info.json``, ``data/``, ``meta/tasks.parquet``).
        require: features that must be present (wmrl's own layout by default).
        image_key, wrist_key: feature names of the agent-view and wrist frames; by default the
            first present of :data:`IMAGE_KEYS` / :data:`WRIST_KEYS`, so community layouts
            (LIBERO's ``observation.images.image`` / ``observation.images.wrist_image``) load too.
        successful_demos: the dataset holds successful demonstrations without ``next.*``
            features (as published LIBERO demos): the last frame of each episode is marked
            success/done with reward 1.

    Raises :class:`DatasetError` (one line) when the folder is missing, is not a LeRobotDataset,
    or lacks a needed feature."""
    import pyarrow.parquet as pq

    root = Path(root)
    info_path = root / "meta" / "info.json"
    if not info_path.exists():
        raise DatasetError(f"no dataset at {str(root)!r}: {info_path} is missing (run `wmrl collect` first)")
    try:
        info = json.loads(info_path.read_text())
        features = info["features"]
    except (json.JSONDecodeError, KeyError) as e:
        raise DatasetError(f"corrupt dataset metadata {info_path}: {e}") from None
    image_key = image_key or next((k for k in IMAGE_KEYS if k in features), IMAGE_KEYS[0])
    wrist_key = wrist_key or next((k for k in WRIST_KEYS if k in features), None)
    if successful_demos:
        require = [image_key, "observation.state", "action"]
    missing = [f for f in require if f not in features]
    if missing:
        raise DatasetError(f"dataset {str(root)!r} lacks feature(s) {missing}; it has {sorted(features)}")
    if image_key not in features:
        raise DatasetError(
            f"dataset {str(root)!r} has no image feature {image_key!r}; it has {sorted(features)}"
        )
    files = sorted((root / "data").glob("*/*.parquet"))
    if not files:
        raise DatasetError(f"dataset {str(root)!r} holds no data files under data/")
    try:
        table = pq.ParquetDataset(files).read() if len(files) > 1 else pq.read_table(files[0])
        tasks = pq.read_table(root / "meta" / "tasks.parquet").to_pandas()
    except Exception as e:  # noqa: BLE001 - pyarrow raises many types for corrupt files
        raise DatasetError(f"cannot read dataset {str(root)!r}: {type(e).__name__}: {e}") from None
    order = np.lexsort((table["frame_index"].to_numpy(), table["episode_index"].to_numpy()))
    table = table.take(order)
    task_of = (
        {int(r): str(t) for t, r in zip(tasks.index, tasks["task_index"])} if "task_index" in tasks else {}
    )
    if "task" in tasks.columns:
        task_of = {int(i): str(t) for i, t in zip(tasks["task_index"], tasks["task"])}

    def col(name: str, dtype) -> np.ndarray | None:
        return np.asarray(table[name].to_pylist(), dtype=dtype) if name in table.column_names else None

    def frames(key: str) -> np.ndarray:
        if features[key].get("dtype") == "video":
            return _decode_video_feature(root, key, table)
        return _decode_images(table[key].to_pylist())

    n = table.num_rows
    episode_index = table["episode_index"].to_numpy().astype(np.int64)
    sidecar = read_episode_meta(root)
    remap = {int(e): k for k, e in enumerate(np.unique(episode_index))}
    instructions = [task_of.get(int(t), "") for t in table["task_index"].to_numpy()]
    env_task = [sidecar.get(int(e), {}).get("task_id", "") for e in episode_index]
    last = np.append(episode_index[1:] != episode_index[:-1], True)
    if successful_demos:
        rewards, successes, dones = last.astype(np.float32), last.copy(), last.copy()
    else:
        rewards = col("next.reward", np.float32).reshape(n)
        successes = col("next.success", bool).reshape(n)
        dones = col("next.done", bool)
        dones = dones.reshape(n) if dones is not None else last
    return Trajectories(
        images=frames(image_key),
        wrist_images=frames(wrist_key) if wrist_key and wrist_key in features else None,
        states=col("observation.state", np.float32),
        actions=col("action", np.float32),
        rewards=rewards,
        successes=successes,
        dones=dones,
        episode_index=np.array([remap[int(e)] for e in episode_index], np.int64),
        frame_index=table["frame_index"].to_numpy().astype(np.int64),
        instructions=instructions,
        task_ids=env_task,
        fps=int(info.get("fps", 20)),
        terminal=_read_terminal(root, np.unique(episode_index)),
        env_states=col(ENV_STATE_KEY, np.float32),
    )


def _read_terminal(root: Path, episodes: np.ndarray) -> TerminalObs | None:
    """The terminal-observation sidecar for ``episodes`` (original ids, sorted), or None when the
    dataset has none or it does not cover every episode (e.g. appended to a dataset recorded before)."""
    path = root / TERMINAL_SIDECAR
    if not path.exists():
        return None
    try:
        with np.load(path) as z:
            data = {k: z[k] for k in z.files}
    except Exception as e:  # noqa: BLE001 - numpy raises many types for corrupt files
        raise DatasetError(f"cannot read {path}: {type(e).__name__}: {e}") from None
    row_of = {int(e): i for i, e in enumerate(data["episode_index"])}
    if any(int(e) not in row_of for e in episodes):
        return None
    rows = np.array([row_of[int(e)] for e in episodes], np.int64)
    return TerminalObs(
        images=data["images"][rows],
        wrist_images=data["wrist_images"][rows] if "wrist_images" in data else None,
        states=data["states"][rows].astype(np.float32),
        successes=data["successes"][rows].astype(bool),
    )


def _decode_video_feature(root: Path, key: str, table) -> np.ndarray:
    """Decode a video feature frame by frame with lerobot (needs torchcodec + FFmpeg or PyAV)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    try:
        ds = LeRobotDataset(_repo_id(root), root=root)
        out = []
        for i in table["index"].to_numpy():
            img = ds[int(i)][key]  # (3,H,W) float in [0,1]
            out.append((img.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8))
    except Exception as e:  # noqa: BLE001 - decoder back-ends raise many types
        raise DatasetError(
            f"cannot decode video feature {key!r} of {str(root)!r}: {type(e).__name__}: {e}"
        ) from None
    return np.stack(out)


def read_episode_meta(root: str | Path) -> dict[int, dict[str, Any]]:
    """Per-episode records of the ``meta/wmrl_episodes.jsonl`` sidecar (env task id, seed, expert
    noise, render supersampling, ...), keyed by episode index; empty for datasets without one."""
    path = Path(root) / SIDECAR
    out: dict[int, dict[str, Any]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                out[int(row["episode_index"])] = row
    return out


# ---------------------------------------------------------------------- writing
class DatasetRecorder:
    """Write episodes from a batched env into a LeRobotDataset at ``root``.

    Args:
        root: dataset folder. An existing dataset is refused unless ``append`` (then episodes are
            added to it) or ``overwrite`` (then it is replaced once the new one is complete).
        fps: control rate.
        image_size, state_dim, wrist: feature shapes.
        append, overwrite: see ``root``.
        env_state_dim: size of ``observation.environment_state`` (0: not recorded); ``record``
            then reads it from ``env.unwrapped.environment_state()`` before every action.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        fps: int,
        image_size: int,
        state_dim: int,
        wrist: bool = False,
        append: bool = False,
        overwrite: bool = False,
        env_state_dim: int = 0,
    ):
        import datasets
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        datasets.disable_progress_bars()
        self.root = Path(root)
        self.final_root = self.root
        exists = (self.root / "meta" / "info.json").exists()
        if self.root.exists() and any(self.root.iterdir()) and not exists and not overwrite:
            raise DatasetError(
                f"output folder {str(self.root)!r} exists and is not a dataset; choose another --out"
            )
        if exists and not (append or overwrite):
            raise DatasetError(
                f"dataset {str(self.root)!r} already exists; pass --append to add episodes or --overwrite to replace it"
            )
        features = dataset_features(image_size, state_dim, wrist, env_state_dim=env_state_dim)
        if exists and append:
            self.ds = LeRobotDataset(_repo_id(self.root), root=self.root)
            have = {k: tuple(v["shape"]) for k, v in self.ds.features.items() if k in features}
            want = {k: tuple(v["shape"]) for k, v in features.items()}
            if have != want:
                raise DatasetError(
                    f"cannot append to {str(self.root)!r}: its features {have} differ from {want}"
                )
            self._next_episode = self.ds.num_episodes
        else:
            # Written beside and swapped in at finalize: an interrupted collection leaves no half
            # dataset under the final name, and an overwrite loses nothing on failure.
            self.root = self.root.with_name(self.root.name + ".tmp-new")
            shutil.rmtree(self.root, ignore_errors=True)
            self.ds = LeRobotDataset.create(
                _repo_id(self.final_root), fps=fps, features=features, root=self.root, use_videos=False
            )
            self._next_episode = 0
        self.wrist = wrist
        self.env_state_dim = int(env_state_dim)
        self._sidecar_rows: list[dict[str, Any]] = []
        self._terminal_rows: list[dict[str, Any]] = []

    def add_episode(
        self,
        steps: dict[str, np.ndarray],
        instruction: str,
        meta: dict[str, Any],
        terminal: dict[str, np.ndarray] | None = None,
    ) -> int:
        """Append one episode. ``steps`` holds arrays over T steps: ``image`` (T,H,W,3), optional
        ``wrist_image``, ``state`` (T,D), ``action`` (T,7), ``reward`` (T,), ``success`` (T,),
        ``done`` (T,), and ``env_state`` (T,S) when the recorder has ``env_state_dim``. ``terminal``: the observation after the last action (``image`` (H,W,3),
        optional ``wrist_image``, ``state`` (D,)), written to the terminal sidecar at finalize.
        Returns the episode index."""
        t_len = len(steps["action"])
        for t in range(t_len):
            frame = {
                "observation.image": steps["image"][t],
                "observation.state": np.asarray(steps["state"][t], np.float32),
                "action": np.asarray(steps["action"][t], np.float32),
                "next.reward": np.array([steps["reward"][t]], np.float32),
                "next.success": np.array([bool(steps["success"][t])]),
                "next.done": np.array([bool(steps["done"][t])]),
                "task": instruction,
            }
            if self.wrist:
                frame["observation.wrist_image"] = steps["wrist_image"][t]
            if self.env_state_dim:
                frame[ENV_STATE_KEY] = np.asarray(steps["env_state"][t], np.float32)
            self.ds.add_frame(frame)
        with warnings.catch_warnings():  # lerobot warns per episode that bool features become uint8 histograms
            warnings.filterwarnings("ignore", "Converting input from bool", RuntimeWarning)
            self.ds.save_episode()
        ep = self._next_episode
        self._next_episode += 1
        self._sidecar_rows.append(
            {"episode_index": ep, "length": t_len, "success": bool(np.any(steps["success"])), **meta}
        )
        if terminal is not None:
            img = np.asarray(terminal["image"])
            if img.shape != tuple(steps["image"].shape[1:]) or img.dtype != np.uint8:
                raise DatasetError(
                    f"terminal image has shape {img.shape} {img.dtype}; expected uint8 {tuple(steps['image'].shape[1:])}"
                )
            row = {"episode_index": ep, "image": img, "state": np.asarray(terminal["state"], np.float32),
                   "success": bool(steps["success"][-1])}
            if self.wrist:
                row["wrist_image"] = np.asarray(terminal["wrist_image"])
            self._terminal_rows.append(row)
        return ep

    def record(
        self,
        env,
        act: Callable[[dict[str, np.ndarray], dict[str, Any]], np.ndarray],
        num_episodes: int,
        meta: dict[str, Any] | None = None,
        progress: bool = True,
        background: bool = True,
        max_pending: int = 8,
    ) -> list[int]:
        """Run ``act(obs, info) -> (N,7)`` in a SAME_STEP-autoreset vector env until
        ``num_episodes`` episodes are done; write each as it ends. Returns episode indices.

        ``background``: episodes are written by one worker thread, in the order they ended, while the
        simulation goes on (the PNG encoding and the parquet write run beside the physics and
        rendering: 1.11x on a 72-episode collection, ``benchmarks.train_speed``); the dataset holds
        the same episodes either way. At most ``max_pending`` finished episodes wait for the writer.
        A writer error stops the recording."""
        from collections import deque
        from concurrent.futures import Future, ThreadPoolExecutor

        from tqdm import tqdm

        written: list[int] = []
        pool = ThreadPoolExecutor(1, thread_name_prefix="wmrl-writer") if background else None
        pending: deque[Future] = deque()
        bar = tqdm(total=num_episodes, desc="collect", unit="ep", disable=not progress)
        try:
            for args in self._finished_episodes(env, act, num_episodes, meta):
                if pool is None:
                    written.append(self.add_episode(*args))
                else:
                    pending.append(pool.submit(self.add_episode, *args))
                    while pending and (pending[0].done() or len(pending) > max_pending):
                        written.append(pending.popleft().result())  # re-raises a writer error
                bar.update(1)
            written += [f.result() for f in pending]
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)  # nothing is half-written when an error stops us
            bar.close()
        return written

    def _finished_episodes(
        self, env, act: Callable[[dict[str, np.ndarray], dict[str, Any]], np.ndarray], num_episodes: int,
        meta: dict[str, Any] | None,
    ) -> Iterator[tuple[dict[str, np.ndarray], str, dict[str, Any], dict[str, np.ndarray] | None]]:
        """Step the env until ``num_episodes`` episodes are done; yield each one's :meth:`add_episode`
        arguments (steps, instruction, meta, terminal) as it ends."""
        n = env.num_envs
        # Each sub-env records a fixed quota of consecutive episodes, so quick (often
        # successful) episodes are not over-represented.
        quota = np.full(n, num_episodes // n) + (np.arange(n) < num_episodes % n)
        obs, info = env.reset()
        bufs: list[dict[str, list]] = [_empty_buf() for _ in range(n)]
        instr = list(env.unwrapped.instructions)
        tasks = list(env.unwrapped.task_ids)
        env_state = self._env_state_fn(env)
        finished = 0
        while finished < num_episodes:
            actions = act(obs, info)
            es = env_state() if env_state is not None else None  # the state obs shows (before the action)
            nobs, r, te, tr, info = env.step(actions)
            for i in range(n):
                b = bufs[i]
                b["image"].append(obs["image"][i])
                if es is not None:
                    b["env_state"].append(es[i])
                if self.wrist:
                    b["wrist_image"].append(obs["wrist_image"][i])
                b["state"].append(obs["state"][i])
                b["action"].append(actions[i])
                b["reward"].append(r[i])
                b["success"].append(bool(info["success"][i]))
                b["done"].append(bool(te[i] or tr[i]))
                if te[i] or tr[i]:
                    if quota[i] > 0:
                        quota[i] -= 1
                        finished += 1
                        steps = {k: np.asarray(v) for k, v in b.items() if v}
                        fo = info.get("final_obs")  # SAME_STEP autoreset: nobs[i] is already the reset
                        terminal = None if fo is None else {k: np.array(fo[k][i])
                                                            for k in ("image", "wrist_image", "state") if k in fo}
                        yield steps, instr[i], {"task_id": tasks[i], **(meta or {})}, terminal
                    bufs[i] = _empty_buf()
            instr = list(env.unwrapped.instructions)
            obs = nobs

    def _env_state_fn(self, env) -> Callable[[], np.ndarray] | None:
        """The env's ``environment_state`` method when this recorder records one (checked: size)."""
        if not self.env_state_dim:
            return None
        fn = getattr(env.unwrapped, "environment_state", None)
        if fn is None:
            raise DatasetError(
                f"env {type(env.unwrapped).__name__} has no environment_state(); record with env_state_dim=0"
            )
        got = np.asarray(fn()).shape
        if got != (env.num_envs, self.env_state_dim):
            raise DatasetError(f"environment_state() has shape {got}; expected ({env.num_envs}, {self.env_state_dim})")
        return fn

    def finalize(self) -> Path:
        """Close the dataset files, write the sidecar, and swap a new dataset in under its final name."""
        from wmrl.io import atomic_write_text

        self.ds.finalize()
        side = self.root / SIDECAR
        old = side.read_text() if side.exists() else ""
        rows = "".join(json.dumps(r) + "\n" for r in self._sidecar_rows)
        atomic_write_text(side, old + rows)
        self._write_terminal()
        atomic_write_text(
            self.root / "meta" / "wmrl.json", json.dumps({"format_version": FORMAT_VERSION}) + "\n"
        )
        if self.root != self.final_root:
            backup = self.final_root.with_name(self.final_root.name + ".old")
            shutil.rmtree(backup, ignore_errors=True)
            if self.final_root.exists():
                os.replace(self.final_root, backup)
            os.replace(self.root, self.final_root)
            shutil.rmtree(backup, ignore_errors=True)
            self.root = self.final_root
        return self.final_root

    def _write_terminal(self) -> None:
        """Merge this session's terminal observations into ``meta/wmrl_terminal.npz`` (atomic)."""
        if not self._terminal_rows:
            return
        from wmrl.io import atomic_write

        path = self.root / TERMINAL_SIDECAR
        cols: dict[str, list[np.ndarray]] = {"episode_index": [], "images": [], "states": [], "successes": []}
        if self.wrist:
            cols["wrist_images"] = []
        if path.exists():
            with np.load(path) as z:
                old = {k: z[k] for k in z.files}
            if set(old) == set(cols):
                for k in cols:
                    cols[k].append(old[k])
        rows = self._terminal_rows
        cols["episode_index"].append(np.array([r["episode_index"] for r in rows], np.int64))
        cols["images"].append(np.stack([r["image"] for r in rows]).astype(np.uint8))
        cols["states"].append(np.stack([r["state"] for r in rows]).astype(np.float32))
        cols["successes"].append(np.array([r["success"] for r in rows], bool))
        if self.wrist:
            cols["wrist_images"].append(np.stack([r["wrist_image"] for r in rows]).astype(np.uint8))
        buf = io.BytesIO()
        np.savez(buf, **{k: np.concatenate(v) for k, v in cols.items()})
        data = buf.getvalue()
        atomic_write(path, lambda p: p.write_bytes(data))


def _empty_buf() -> dict[str, list]:
    return {k: [] for k in ("image", "wrist_image", "state", "env_state", "action", "reward", "success", "done")}


def _repo_id(root: Path) -> str:
    return f"local/{root.name}"
