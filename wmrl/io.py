"""Atomic file writes (temp file + rename) so an interrupted job never leaves a half-written file."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write(path: str | os.PathLike, writer: Callable[[Path], None]) -> Path:
    """Write ``path`` atomically: ``writer(tmp_path)`` writes a temp file in the same folder,
    which is then renamed over ``path``. On any error the temp file is removed and ``path`` is
    left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # The temp name keeps the suffix: some writers (ffmpeg) pick the format from it.
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        writer(tmp_path)
        os.replace(tmp_path, path)
    except BaseException:
        tmp_path.unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write(path, lambda p: p.write_text(text))


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int = 2) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=indent, default=_json_default) + "\n")


def atomic_save_safetensors(
    path: str | os.PathLike, tensors: dict, metadata: dict[str, str] | None = None
) -> Path:
    """Save a ``dict[str, Tensor]`` with safetensors, atomically; equal tensors and metadata give
    equal bytes (see :func:`safetensors_bytes`)."""
    from safetensors.torch import save_file

    tensors = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    if metadata is not None and len(metadata) > 1:
        return atomic_write(path, lambda p: p.write_bytes(safetensors_bytes(tensors, metadata)))
    return atomic_write(path, lambda p: save_file(tensors, str(p), metadata=metadata))


def safetensors_bytes(tensors: dict, metadata: dict[str, str] | None = None) -> bytes:
    """``safetensors.torch.save(tensors, metadata)`` with the header's ``__metadata__`` entries in
    sorted order.

    safetensors holds the metadata in a Rust ``HashMap``, so a file with two or more metadata
    entries came out in a different entry order on every save: the same tensors, other bytes (the
    world model's two entries, the instruction cache's one per instruction). The header is written
    again as compact JSON with the entries sorted, padded with spaces to a multiple of 8 bytes as
    safetensors pads it; the tensor data after it is unchanged (its offsets are relative to it)."""
    from safetensors.torch import save

    raw = save(tensors, metadata=metadata)
    if not metadata or len(metadata) < 2:
        return raw
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    head = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    head += b" " * (-len(head) % 8)
    return len(head).to_bytes(8, "little") + head + raw[8 + n :]


def atomic_torch_save(path: str | os.PathLike, obj: Any) -> Path:
    """``torch.save`` atomically (for optimizer/RNG state in training checkpoints)."""
    import torch

    return atomic_write(path, lambda p: torch.save(obj, p))


def _json_default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "tolist"):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
