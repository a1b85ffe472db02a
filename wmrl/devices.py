"""Which torch device a job puts its models on.

A device is named by ``auto`` (CUDA when torch sees a GPU, otherwise the CPU), ``cpu``, ``cuda`` or
``cuda:N``. Simulators stay on the CPU (the built-in suite steps MuJoCo there); the models
(world model, policy, reward models) and their training run on the chosen device, and the
imagined environment is batched on its world model's device.
"""

from __future__ import annotations

import os
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


def use_deterministic_algorithms(enabled: bool) -> None:
    """Make this process's torch kernels deterministic (``enabled``) or let torch pick the fastest.

    CPU runs of wmrl repeat bit for bit without it. On CUDA, cuDNN's autotuned convolutions and
    atomic-add reductions can differ from run to run; this sets ``torch.use_deterministic_algorithms``,
    ``cudnn.deterministic`` (and turns off ``cudnn.benchmark``) and, for cuBLAS, the workspace
    setting ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` when it is unset. That variable counts only for
    cuBLAS handles made after it is set, so call this before the first CUDA matrix product (``wmrl run``
    and the trainers do, from their ``deterministic`` key). An op with no deterministic CUDA kernel
    then raises torch's own error naming it, instead of running non-deterministically."""
    if enabled:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(bool(enabled))
    torch.backends.cudnn.deterministic = bool(enabled)
    torch.backends.cudnn.benchmark = False


def adaptive_avg_pool2d(x: torch.Tensor, size: int) -> torch.Tensor:
    """``F.adaptive_avg_pool2d(x, size)`` for ``x`` (B, C, H, W) -> (B, C, size, size), whose backward
    CUDA cannot run deterministically. Under deterministic algorithms on CUDA, sides that ``size``
    divides or that divide ``size`` go through :func:`even_adaptive_avg_pool2d` (the same values, a
    deterministic backward). Everywhere else (the CPU, or the default setting) it is the adaptive op
    itself, so CPU runs keep their bits."""
    if x.is_cuda and torch.are_deterministic_algorithms_enabled():
        out = even_adaptive_avg_pool2d(x, size)
        if out is not None:
            return out
    return torch.nn.functional.adaptive_avg_pool2d(x, size)


def even_adaptive_avg_pool2d(x: torch.Tensor, size: int) -> torch.Tensor | None:
    """Adaptive average pooling of ``x`` (B, C, H, W) to (B, C, size, size) without the adaptive op,
    where each side divides evenly: ``avg_pool2d`` with kernel = stride = side / size when ``size``
    divides the side, or each cell repeated side-to-``size`` times (an ``expand``, whose backward is a
    plain sum) when the side divides ``size``. None when a side does neither."""
    h, w = x.shape[-2:]
    if h % size == 0 and w % size == 0:
        return torch.nn.functional.avg_pool2d(x, (h // size, w // size))
    if size % h == 0 and size % w == 0:
        b, c = x.shape[:-2]
        kh, kw = size // h, size // w
        return x[:, :, :, None, :, None].expand(b, c, h, kh, w, kw).reshape(b, c, size, size)
    return None


class AdaptiveAvgPool2d(torch.nn.Module):
    """:func:`adaptive_avg_pool2d` as a module (a drop-in for ``nn.AdaptiveAvgPool2d(size)``)."""

    def __init__(self, size: int):
        super().__init__()
        self.size = int(size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return adaptive_avg_pool2d(x, self.size)


__all__ = [
    "DEVICE_CHOICES",
    "AdaptiveAvgPool2d",
    "adaptive_avg_pool2d",
    "even_adaptive_avg_pool2d",
    "resolve_device",
    "use_deterministic_algorithms",
]
