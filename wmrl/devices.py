"""Which torch device a job puts its models on.

A device is named by ``auto`` (CUDA when torch sees a GPU, otherwise the CPU), ``cpu``, ``cuda`` or
``cuda:N``. Simulators stay on the CPU (the built-in suite steps MuJoCo there); the models
(world model, policy, reward models) and their training run on the chosen device, and the
imagined environment is batched on its world model's device.
"""

from __future__ import annotations

import re

import torch

from wmrl.errors import ConfigError

DEVICE_CHOICES = "'auto', 'cpu', 'cuda' or 'cuda:N'"


def resolve_device(spec: str | torch.device | None) -> torch.device:
    """``spec`` -> a ``torch.device`` this machine has; a one-line ``ConfigError`` for a name that
    is none of :data:`DEVICE_CHOICES` or a CUDA device torch cannot see. ``None`` is the CPU."""
    if spec is None:
        return torch.device("cpu")
    if isinstance(spec, torch.device):
        spec = str(spec)
    if not isinstance(spec, str) or not re.fullmatch(r"auto|cpu|cuda(:\d+)?", spec.strip()):
        raise ConfigError(f"device={spec!r}; expected {DEVICE_CHOICES}")
    spec = spec.strip()
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError(f"device={spec!r} but torch sees no CUDA device; use device=auto or device=cpu")
    dev = torch.device(spec)
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise ConfigError(f"device={spec!r} but torch sees {torch.cuda.device_count()} CUDA device(s)")
    return dev


__all__ = ["DEVICE_CHOICES", "resolve_device"]
