"""Advantage estimation for RL: GAE (PPO) and group-relative advantages (GRPO).

Each operation has a plain reference implementation (Python loops, obviously correct) and a fast
one (vectorised torch; runs on whatever device its inputs are on, so CUDA inputs take the CUDA
path). ``tests/test_kernels_advantages.py`` checks them against each other and
``python -m kernels.advantages`` prints the measured speed ratio.

Conventions (time-major, as cleanrl):

* ``rewards``, ``values``, ``dones``: ``(T, N)``; ``dones[t]`` is True when the episode ended at
  step ``t`` (no bootstrap from ``values[t + 1]``). Truncated episodes should have the
  discounted value of their final observation folded into ``rewards[t]`` by the caller.
* ``last_value``: ``(N,)`` value of the observation after step ``T - 1``.
"""

from __future__ import annotations

import math
import time

import torch
from torch import Tensor

from wmrl.errors import WmrlError

__all__ = [
    "benchmark",
    "compute_gae",
    "compute_group_advantages",
    "gae_fast",
    "gae_reference",
    "group_advantages_fast",
    "group_advantages_reference",
]


def _check_gae(
    rewards: Tensor, values: Tensor, dones: Tensor, last_value: Tensor, gamma: float, lam: float
) -> None:
    if rewards.ndim != 2:
        raise WmrlError(f"rewards has shape {tuple(rewards.shape)}; expected (T, N)")
    if values.shape != rewards.shape or dones.shape != rewards.shape:
        raise WmrlError(
            f"values {tuple(values.shape)} / dones {tuple(dones.shape)} must match rewards {tuple(rewards.shape)}"
        )
    if last_value.shape != rewards.shape[1:]:
        raise WmrlError(f"last_value has shape {tuple(last_value.shape)}; expected ({rewards.shape[1]},)")
    if not (0.0 <= gamma <= 1.0 and 0.0 <= lam <= 1.0):
        raise WmrlError(f"gamma={gamma} and lam={lam} must lie in [0, 1]")


def gae_reference(
    rewards: Tensor, values: Tensor, dones: Tensor, last_value: Tensor, gamma: float = 0.99, lam: float = 0.95
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation, one scalar at a time.

    Args:
        rewards, values: float ``(T, N)``; dones: bool/float ``(T, N)``; last_value: ``(N,)``.

    Returns:
        ``(advantages, returns)``, both float32 ``(T, N)``; ``returns = advantages + values``.
    """
    _check_gae(rewards, values, dones, last_value, gamma, lam)
    T, N = rewards.shape
    r = rewards.double().cpu().tolist()
    v = values.double().cpu().tolist()
    d = dones.double().cpu().tolist()
    lv = last_value.double().cpu().tolist()
    adv = [[0.0] * N for _ in range(T)]
    for n in range(N):
        running = 0.0
        for t in reversed(range(T)):
            next_v = lv[n] if t == T - 1 else v[t + 1][n]
            nonterminal = 1.0 - d[t][n]
            delta = r[t][n] + gamma * next_v * nonterminal - v[t][n]
            running = delta + gamma * lam * nonterminal * running
            adv[t][n] = running
    a = torch.tensor(adv, dtype=torch.float32, device=rewards.device)
    return a, a + values.float()


def gae_fast(
    rewards: Tensor,
    values: Tensor,
    dones: Tensor,
    last_value: Tensor,
    gamma: float = 0.99,
    lam: float = 0.95,
    block: int | None = None,
) -> tuple[Tensor, Tensor]:
    """Vectorised GAE: a blocked, segmented reverse cumulative sum.

    Within a block of ``L`` steps, ``A_t = sum_{s=t}^{e_t - 1} (gl)^{s-t} delta_s`` where ``gl =
    gamma * lam`` and ``e_t`` is one past the first done at or after ``t``; with ``x_s = gl^s
    delta_s`` this is ``(S_t - S_{e_t}) / gl^t`` for the reverse cumulative sum ``S`` of ``x``
    (one ``cumsum``, one ``cummin`` and a gather over the whole ``(L, N)`` block). The block
    length keeps ``gl^-L <= 1e8`` so float64 cancellation stays below 1e-7; the value after the
    block is carried in with weight ``gl^{L-t} prod(1 - done)``. Runs on the inputs' device (CPU
    or CUDA); ``T / L`` sequential steps instead of ``T``. Same result as :func:`gae_reference`.
    """
    _check_gae(rewards, values, dones, last_value, gamma, lam)
    T, N = rewards.shape
    dev, dt = rewards.device, torch.float64
    v, d = values.to(dt), dones.to(dt)
    nonterm = 1.0 - d
    next_v = torch.cat([v[1:], last_value.to(dt).reshape(1, N)], 0)
    delta = rewards.to(dt) + gamma * next_v * nonterm - v  # (T, N)
    gl = float(gamma * lam)
    if gl == 0.0:
        adv = delta
    else:
        if block is None:
            block = T if gl >= 1.0 else max(1, int(8 * math.log(10) / -math.log(gl)))
        adv = torch.empty_like(delta)
        carry = torch.zeros(N, dtype=dt, device=dev)  # advantage at the step after the block
        for end in range(T, 0, -block):
            start = max(0, end - block)
            L = end - start
            k = torch.arange(L, device=dev)
            pw = torch.full((L,), gl, dtype=dt, device=dev) ** k.to(dt)  # gl^s
            S = torch.zeros(L + 1, N, dtype=dt, device=dev)
            S[:L] = torch.flip(torch.cumsum(torch.flip(delta[start:end] * pw[:, None], [0]), 0), [0])
            done_at = torch.where(d[start:end] > 0, k[:, None], torch.full_like(k[:, None], L - 1))  # (L, N)
            e = torch.flip(torch.cummin(torch.flip(done_at, [0]), 0).values, [0]) + 1  # one past segment end
            blk = (S[:L] - torch.gather(S, 0, e)) / pw[:, None]
            tail_nodone = torch.flip(torch.cumprod(torch.flip(nonterm[start:end], [0]), 0), [0])  # (L, N)
            blk = blk + (gl * pw[-1] / pw)[:, None] * tail_nodone * carry[None, :]  # gl^(L-t)
            adv[start:end] = blk
            carry = blk[0]
    adv32 = adv.float()
    return adv32, adv32 + values.float()


def compute_gae(
    rewards: Tensor, values: Tensor, dones: Tensor, last_value: Tensor, gamma: float = 0.99, lam: float = 0.95
) -> tuple[Tensor, Tensor]:
    """The GAE used by the trainers (the fast implementation)."""
    return gae_fast(rewards, values, dones, last_value, gamma, lam)


def _check_groups(scores: Tensor, group_ids: Tensor, valid: Tensor | None) -> None:
    if scores.ndim != 1 or group_ids.shape != scores.shape:
        raise WmrlError(
            f"scores {tuple(scores.shape)} and group_ids {tuple(group_ids.shape)} must both be (B,)"
        )
    if valid is not None and valid.shape != scores.shape:
        raise WmrlError(f"valid has shape {tuple(valid.shape)}; expected {tuple(scores.shape)}")


def group_advantages_reference(
    scores: Tensor,
    group_ids: Tensor,
    valid: Tensor | None = None,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> tuple[Tensor, Tensor]:
    """GRPO group-relative advantages, one group at a time.

    Args:
        scores: float ``(B,)`` trajectory returns.
        group_ids: int ``(B,)``; trajectories sharing an id share a start state.
        valid: bool ``(B,)`` or None; invalid (gated-out) trajectories neither enter the group
            statistics nor get an advantage (0).
        normalize_std: divide by the group's (population) standard deviation + ``eps``.

    Returns:
        ``(advantages float32 (B,), group_std float32 (B,))``, the std of each trajectory's group
        (0 for a group with fewer than one valid member); used for dynamic sampling.
    """
    _check_groups(scores, group_ids, valid)
    s = scores.double().cpu().tolist()
    g = group_ids.cpu().tolist()
    ok = [True] * len(s) if valid is None else [bool(x) for x in valid.cpu().tolist()]
    adv = [0.0] * len(s)
    std_out = [0.0] * len(s)
    for gid in sorted(set(g)):
        members = [i for i in range(len(s)) if g[i] == gid and ok[i]]
        if not members:
            continue
        mean = sum(s[i] for i in members) / len(members)
        std = (sum((s[i] - mean) ** 2 for i in members) / len(members)) ** 0.5
        for i in (i for i in range(len(s)) if g[i] == gid):
            std_out[i] = std
        for i in members:
            adv[i] = (s[i] - mean) / (std + eps) if normalize_std else s[i] - mean
    dev = scores.device
    return torch.tensor(adv, dtype=torch.float32, device=dev), torch.tensor(
        std_out, dtype=torch.float32, device=dev
    )


def group_advantages_fast(
    scores: Tensor,
    group_ids: Tensor,
    valid: Tensor | None = None,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> tuple[Tensor, Tensor]:
    """Vectorised group-relative advantages (scatter-add over group ids; any device).

    Same arguments and result as :func:`group_advantages_reference`."""
    _check_groups(scores, group_ids, valid)
    s = scores.double()
    ok = torch.ones_like(s) if valid is None else valid.to(s.dtype)
    _, inv = torch.unique(group_ids, return_inverse=True)
    G = int(inv.max().item()) + 1 if inv.numel() else 0
    cnt = torch.zeros(G, dtype=s.dtype, device=s.device).index_add_(0, inv, ok)
    tot = torch.zeros(G, dtype=s.dtype, device=s.device).index_add_(0, inv, s * ok)
    mean = tot / cnt.clamp_min(1.0)
    dev2 = (s - mean[inv]) ** 2 * ok
    var = torch.zeros(G, dtype=s.dtype, device=s.device).index_add_(0, inv, dev2) / cnt.clamp_min(1.0)
    std = var.sqrt()
    adv = s - mean[inv]
    if normalize_std:
        adv = adv / (std[inv] + eps)
    adv = adv * ok
    return adv.float(), std[inv].float()


def compute_group_advantages(
    scores: Tensor,
    group_ids: Tensor,
    valid: Tensor | None = None,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> tuple[Tensor, Tensor]:
    """The group-relative advantages used by GRPO (the fast implementation)."""
    return group_advantages_fast(scores, group_ids, valid, normalize_std, eps)


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def benchmark(
    T: int = 256, N: int = 64, B: int = 512, G: int = 8, repeats: int = 5, device: str = "cpu"
) -> dict:
    """Median time of reference vs fast implementations measured side by side; returns a dict
    with the times (s) and the speed ratios (reference / fast)."""
    gen = torch.Generator().manual_seed(0)
    r = torch.randn(T, N, generator=gen).to(device)
    v = torch.randn(T, N, generator=gen).to(device)
    d = (torch.rand(T, N, generator=gen) < 0.05).to(device)
    lv = torch.randn(N, generator=gen).to(device)
    s = torch.randn(B, generator=gen).to(device)
    gid = (torch.arange(B) // G).to(device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def run(fn, *a):
        def f():
            fn(*a)
            sync()

        return f

    out = {"T": T, "N": N, "B": B, "G": G, "device": device, "repeats": repeats}
    out["gae_reference_s"] = _median_time(run(gae_reference, r, v, d, lv), repeats)
    out["gae_fast_s"] = _median_time(run(gae_fast, r, v, d, lv), repeats)
    out["group_reference_s"] = _median_time(run(group_advantages_reference, s, gid), repeats)
    out["group_fast_s"] = _median_time(run(group_advantages_fast, s, gid), repeats)
    out["gae_speedup"] = out["gae_reference_s"] / out["gae_fast_s"]
    out["group_speedup"] = out["group_reference_s"] / out["group_fast_s"]
    return out


if __name__ == "__main__":  # pragma: no cover - manual benchmark
    import json
    import sys

    # One intra-op thread by default: on shared CPUs the small element-wise kernels of the fast path
    # otherwise spend their time waiting for a second, busy core (pass a number to change it).
    torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
    shapes = [dict(T=256, N=64, B=512, G=8), dict(T=64, N=1024, B=4096, G=8), dict(T=1024, N=16, B=256, G=8)]
    res = {"torch_threads": torch.get_num_threads(), "cpu": [benchmark(repeats=7, **kw) for kw in shapes]}
    if torch.cuda.is_available():
        res["cuda"] = [benchmark(repeats=7, device="cuda", **kw) for kw in shapes]
    print(json.dumps(res, indent=2))
