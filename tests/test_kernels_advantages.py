"""kernels.advantages: the fast GAE / group-relative advantages against the plain references."""

from __future__ import annotations

import pytest
import torch

from kernels.advantages import (
    benchmark,
    gae_fast,
    gae_reference,
    group_advantages_fast,
    group_advantages_reference,
)
from wmrl.errors import WmrlError


@pytest.mark.parametrize(
    "T,N,block,p_done",
    [(1, 3, None, 0.1), (37, 5, 8, 0.1), (130, 4, None, 0.3), (64, 2, 64, 0.0), (700, 3, None, 0.01)],
)
@pytest.mark.parametrize("gamma,lam", [(0.99, 0.95), (1.0, 1.0), (0.9, 0.0)])
def test_gae_fast_matches_reference(T, N, block, p_done, gamma, lam):
    g = torch.Generator().manual_seed(T * 31 + N)
    r = torch.randn(T, N, generator=g)
    v = torch.randn(T, N, generator=g)
    d = torch.rand(T, N, generator=g) < p_done
    lv = torch.randn(N, generator=g)
    a_ref, ret_ref = gae_reference(r, v, d, lv, gamma, lam)
    a_fast, ret_fast = gae_fast(r, v, d, lv, gamma, lam, block=block)
    torch.testing.assert_close(a_fast, a_ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(ret_fast, ret_ref, atol=1e-4, rtol=1e-4)


def test_gae_known_values():
    # one env, 3 steps, gamma=lam=1, zero values: advantages are reward-to-go cut at the done
    r = torch.tensor([[1.0], [2.0], [3.0]])
    v = torch.zeros(3, 1)
    d = torch.tensor([[False], [True], [False]])
    lv = torch.tensor([10.0])
    for fn in (gae_reference, gae_fast):
        a, _ = fn(r, v, d, lv, 1.0, 1.0)
        assert a.squeeze(1).tolist() == pytest.approx([3.0, 2.0, 13.0])


def test_gae_shape_errors():
    with pytest.raises(WmrlError, match="last_value"):
        gae_fast(torch.zeros(4, 2), torch.zeros(4, 2), torch.zeros(4, 2), torch.zeros(3), 0.9, 0.9)
    with pytest.raises(WmrlError, match="gamma"):
        gae_reference(torch.zeros(4, 2), torch.zeros(4, 2), torch.zeros(4, 2), torch.zeros(2), 1.5, 0.9)


@pytest.mark.parametrize("normalize_std", [True, False])
def test_group_advantages_fast_matches_reference(normalize_std):
    g = torch.Generator().manual_seed(3)
    B = 48
    s = torch.randn(B, generator=g)
    gid = torch.randint(0, 7, (B,), generator=g) * 3 + 100  # arbitrary, non-contiguous ids
    valid = torch.rand(B, generator=g) < 0.8
    for val in (None, valid):
        a_ref, std_ref = group_advantages_reference(s, gid, val, normalize_std)
        a_fast, std_fast = group_advantages_fast(s, gid, val, normalize_std)
        torch.testing.assert_close(a_fast, a_ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(std_fast, std_ref, atol=1e-5, rtol=1e-5)
    # invalid members get no advantage; a degenerate group (all equal) gets zeros and std 0
    a, std = group_advantages_fast(torch.tensor([1.0, 1.0, 0.0, 1.0]), torch.tensor([0, 0, 1, 1]), None)
    assert a[:2].abs().max() == 0 and std[:2].max() == 0 and std[2] > 0
    a, _ = group_advantages_fast(s, gid, valid)
    assert (a[~valid] == 0).all()


def test_group_advantages_zero_mean_per_group():
    s = torch.tensor([0.0, 1.0, 1.0, 0.0, 5.0, 3.0])
    gid = torch.tensor([0, 0, 0, 0, 1, 1])
    a, _ = group_advantages_fast(s, gid)
    assert a[:4].sum().abs() < 1e-5 and a[4:].sum().abs() < 1e-5
    assert a[1] > 0 > a[0]


def test_benchmark_reports_speedup():
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # busy shared cores make 2-thread timings of tiny kernels meaningless
    try:
        res = benchmark(T=128, N=32, B=256, G=8, repeats=3)
    finally:
        torch.set_num_threads(n)
    assert res["gae_fast_s"] > 0 and res["gae_speedup"] > 1.0
    assert res["group_speedup"] > 1.0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gae_cuda_matches_cpu():
    g = torch.Generator().manual_seed(0)
    r, v = torch.randn(100, 8, generator=g), torch.randn(100, 8, generator=g)
    d, lv = torch.rand(100, 8, generator=g) < 0.1, torch.randn(8, generator=g)
    a_cpu, _ = gae_fast(r, v, d, lv)
    a_gpu, _ = gae_fast(r.cuda(), v.cuda(), d.cuda(), lv.cuda())
    torch.testing.assert_close(a_gpu.cpu(), a_cpu, atol=1e-4, rtol=1e-4)
