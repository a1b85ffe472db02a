"""EDM few-step sampling: the world models' imagination hot path.

Two implementations with the same signature and results:

* :func:`edm_sample_reference`: a plain Python loop over the noise levels (readable, the spec);
* :func:`edm_sample_fast`: the same update, with the denoiser network and the Euler/Heun update
  compiled by ``torch.compile`` (inductor C++ kernels on CPU; CUDA graphs
  (``mode="reduce-overhead"``) when the tensors live on a GPU).

A denoiser is ``fn(x (B, C, H, W), sigma (B,), *args) -> denoised`` where ``denoised`` is the x0
estimate (B, C, H, W), or a tuple ``(x0 estimate, aux)``; the samplers return ``(x0, aux of the
last denoiser call)`` (aux is None for plain tensors). ``args`` (conditioning) are passed through.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

Denoiser = Callable[..., Tensor | tuple[Tensor, object]]

_COMPILED: dict[tuple[int, str], tuple[object, Callable]] = {}


def _call(denoise: Denoiser, x: Tensor, sigma: Tensor, args: tuple) -> tuple[Tensor, object]:
    out = denoise(x, sigma, *args)
    if isinstance(out, tuple):
        return out[0], out[1]
    return out, None


def karras_sigmas(
    steps: int,
    sigma_min: float = 2e-3,
    sigma_max: float = 5.0,
    rho: float = 7.0,
    device: torch.device | str = "cpu",
) -> Tensor:
    """Noise levels for ``steps`` sampler steps: (steps + 1,) decreasing, ending with 0.

    The rho-spaced points are ``i / steps`` for ``i < steps`` (not ``i / (steps - 1)``), so every
    step removes a real share of the noise: with 2 steps the levels are 5 -> 0.28 -> 0, not the
    degenerate 5 -> 0.002 -> 0 that makes "2 steps" one step plus a no-op."""
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r} must be an integer >= 1")
    if not 0 < sigma_min < sigma_max:
        raise ValueError(f"need 0 < sigma_min < sigma_max; got sigma_min={sigma_min}, sigma_max={sigma_max}")
    i = torch.arange(steps, dtype=torch.float64) / steps
    a, b = sigma_max ** (1 / rho), sigma_min ** (1 / rho)
    s = (a + i * (b - a)) ** rho
    return torch.cat([s, s.new_zeros(1)]).float().to(device)


def edm_preconditioning(sigma: Tensor, sigma_data: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """EDM (Karras et al. 2022) scalings for sigma (B,): c_skip, c_out, c_in, c_noise, each (B,)."""
    s2 = sigma**2 + sigma_data**2
    c_skip = sigma_data**2 / s2
    c_out = sigma * sigma_data / s2.sqrt()
    c_in = 1.0 / s2.sqrt()
    c_noise = sigma.clamp_min(1e-8).log() / 4.0
    return c_skip, c_out, c_in, c_noise


def euler_update(x: Tensor, denoised: Tensor, sigma: Tensor, sigma_next: Tensor) -> Tensor:
    """One Euler step of the probability-flow ODE: x + (sigma_next - sigma) * (x - denoised) / sigma."""
    return x + (sigma_next - sigma) * (x - denoised) / sigma


def heun_update(
    x: Tensor, x_euler: Tensor, denoised: Tensor, denoised_next: Tensor, sigma: Tensor, sigma_next: Tensor
) -> Tensor:
    """Heun's correction: average the slopes at sigma and sigma_next."""
    d1 = (x - denoised) / sigma
    d2 = (x_euler - denoised_next) / sigma_next
    return x + (sigma_next - sigma) * 0.5 * (d1 + d2)


def edm_sample_reference(
    denoise: Denoiser, noise: Tensor, sigmas: Tensor, heun: bool = False, args: tuple = ()
) -> tuple[Tensor, object]:
    """Sample x0 from unit Gaussian ``noise`` (B, C, H, W) along ``sigmas`` (S + 1,) ending in 0.

    Euler steps (Heun corrections when ``heun`` and the next sigma is > 0).
    Returns (x0 (B, C, H, W), aux of the last denoiser call)."""
    b = noise.shape[0]
    x = noise * sigmas[0]
    aux = None
    for i in range(len(sigmas) - 1):
        s, s_next = sigmas[i], sigmas[i + 1]
        den, aux = _call(denoise, x, s.expand(b), args)
        x_next = euler_update(x, den, s, s_next)
        if heun and float(s_next) > 0:
            den_next, aux = _call(denoise, x_next, s_next.expand(b), args)
            x_next = heun_update(x, x_next, den, den_next, s, s_next)
        x = x_next
    return x, aux


def compiled(fn: Callable, device_type: str = "cpu") -> Callable:
    """``torch.compile(fn)`` cached per function (bound methods: per object and method name)."""
    owner = getattr(fn, "__self__", None)
    ref = owner if owner is not None else fn
    k = (id(ref), getattr(fn, "__name__", ""))
    hit = _COMPILED.get(k)
    if hit is None or hit[0] is not ref:
        mode = "reduce-overhead" if device_type == "cuda" else None
        hit = (ref, torch.compile(fn, dynamic=False, mode=mode))
        _COMPILED[k] = hit
    return hit[1]


def _sample_loop(
    denoise: Denoiser, x: Tensor, sigmas: list[float], heun: bool, args: tuple
) -> tuple[Tensor, object]:
    b = x.shape[0]
    aux = None
    for i in range(len(sigmas) - 1):
        s, s_next = sigmas[i], sigmas[i + 1]
        den, aux = _call(denoise, x, x.new_full((b,), s), args)
        x_next = x + (s_next - s) * (x - den) / s
        if heun and s_next > 0:
            den_next, aux = _call(denoise, x_next, x.new_full((b,), s_next), args)
            x_next = x + (s_next - s) * 0.5 * ((x - den) / s + (x_next - den_next) / s_next)
        x = x_next
    return x, aux


def edm_sample_fast(
    denoise: Denoiser,
    noise: Tensor,
    sigmas: Tensor,
    heun: bool = False,
    args: tuple = (),
    compile_denoiser: bool = True,
) -> tuple[Tensor, object]:
    """Same result as :func:`edm_sample_reference` (to float tolerance), faster.

    The denoiser is compiled once per function object (``torch.compile``, static shapes), the
    sigmas become Python floats (no per-step tensor indexing or host syncs), and the update is
    traced into the same graph when the loop is compiled as a whole."""
    fn = compiled(denoise, noise.device.type) if compile_denoiser else denoise
    sig = [float(s) for s in sigmas]
    return _sample_loop(fn, noise * sig[0], sig, heun, args)


def clear_compiled() -> None:
    """Forget compiled denoisers (e.g. after a model is deleted)."""
    _COMPILED.clear()


def time_call(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeats`` calls, after ``warmup`` calls."""
    import time

    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    ts.sort()
    return ts[len(ts) // 2] if ts else math.nan
