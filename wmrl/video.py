"""Videos of rollouts: single, side-by-side (real | imagined) and grids, written atomically as mp4."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from wmrl.io import atomic_write


def upscale(frames: np.ndarray, factor: int) -> np.ndarray:
    """Nearest-neighbour upscale. frames: uint8 (..., H, W, C) -> (..., H*f, W*f, C)."""
    if factor <= 1:
        return frames
    return frames.repeat(factor, axis=-3).repeat(factor, axis=-2)


def side_by_side(*videos: np.ndarray, gap: int = 2) -> np.ndarray:
    """Concatenate videos of shape (T, H, W, 3) horizontally with a white gap; shorter ones are
    padded with their last frame. Returns uint8 (T_max, H, sum(W) + gaps, 3)."""
    if not videos:
        raise ValueError("side_by_side needs at least one video")
    t_max = max(v.shape[0] for v in videos)
    h = videos[0].shape[1]
    cols = []
    for i, v in enumerate(videos):
        if v.ndim != 4 or v.shape[1] != h or v.shape[-1] != 3:
            raise ValueError(f"video {i} has shape {v.shape}; expected (T, {h}, W, 3)")
        if v.shape[0] < t_max:
            v = np.concatenate([v, np.repeat(v[-1:], t_max - v.shape[0], axis=0)])
        cols.append(v.astype(np.uint8))
        if i < len(videos) - 1 and gap > 0:
            cols.append(np.full((t_max, h, gap, 3), 255, np.uint8))
    return np.concatenate(cols, axis=2)


def grid(videos: Sequence[np.ndarray], ncols: int = 4, gap: int = 2) -> np.ndarray:
    """Tile videos (each (T, H, W, 3), same H and W) in a grid. Returns (T_max, H', W', 3)."""
    rows = []
    for r in range(0, len(videos), ncols):
        row = list(videos[r : r + ncols])
        while len(row) < ncols:
            row.append(np.zeros_like(videos[0][:1]))
        rows.append(side_by_side(*row, gap=gap))
    t_max = max(r.shape[0] for r in rows)
    rows = [
        np.concatenate([r, np.repeat(r[-1:], t_max - r.shape[0], 0)]) if r.shape[0] < t_max else r
        for r in rows
    ]
    out = []
    for i, r in enumerate(rows):
        out.append(r)
        if i < len(rows) - 1:
            out.append(np.full((t_max, gap, r.shape[2], 3), 255, np.uint8))
    return np.concatenate(out, axis=1)


def _has_ffmpeg_plugin() -> bool:
    """Whether imageio's FFmpeg plugin can run: ``imageio-ffmpeg`` (the ``imageio[ffmpeg]`` extra,
    about 68 MB with its static binary) is installed. Without it videos go through PyAV."""
    import importlib.util

    return importlib.util.find_spec("imageio_ffmpeg") is not None


def write_video(path: str | os.PathLike, frames: np.ndarray, fps: int = 10, scale: int = 4) -> Path:
    """Write uint8 frames (T, H, W, 3) to an mp4 (H.264) atomically; ``scale`` upsamples small
    frames so a person can see them. Written by imageio's FFmpeg plugin, or by PyAV where
    ``imageio-ffmpeg`` is not installed."""
    import imageio.v3 as iio

    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames have shape {frames.shape}; expected (T, H, W, 3)")
    frames = upscale(frames.astype(np.uint8), scale)
    # H.264 wants even sizes.
    h, w = frames.shape[1] - frames.shape[1] % 2, frames.shape[2] - frames.shape[2] % 2
    frames = np.ascontiguousarray(frames[:, :h, :w])
    path = Path(path)

    def _write(tmp: Path) -> None:
        if _has_ffmpeg_plugin():
            iio.imwrite(tmp, frames, extension=".mp4", fps=fps, codec="libx264", macro_block_size=1)
        else:  # PyAV (a lerobot dependency) bundles its own FFmpeg libraries
            iio.imwrite(tmp, frames, extension=".mp4", plugin="pyav", fps=fps, codec="libx264")

    return atomic_write(path, _write)
