"""kernels.sampling: the fast sampler agrees with the reference one; schedules are sane."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from kernels import sampling


class TinyDenoiser(nn.Module):
    """fn(x (B,C,H,W), sigma (B,), cond (B,C)) -> (x0 estimate, aux (B,))."""

    def __init__(self, c: int = 3):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x, sigma, cond):
        c_skip, c_out, c_in, c_noise = sampling.edm_preconditioning(sigma, 0.5)
        f = torch.tanh(
            self.conv(x * c_in[:, None, None, None]) + cond[:, :, None, None] + c_noise[:, None, None, None]
        )
        den = c_skip[:, None, None, None] * x + c_out[:, None, None, None] * f
        return den, f.mean(dim=(1, 2, 3))


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_karras_schedule_has_no_degenerate_steps():
    s = sampling.karras_sigmas(2, 2e-3, 5.0, 7.0)
    assert s.shape == (3,) and float(s[0]) == pytest.approx(5.0) and float(s[-1]) == 0.0
    assert 0.05 < float(s[1]) < 2.0  # a real second step, not 5 -> 0.002 -> 0
    for n in (1, 3, 4):
        s = sampling.karras_sigmas(n)
        assert s.shape == (n + 1,) and bool((s[1:] < s[:-1]).all())
    with pytest.raises(ValueError, match="steps=0"):
        sampling.karras_sigmas(0)


def test_edm_preconditioning_identity_at_zero_noise():
    c_skip, c_out, c_in, _ = sampling.edm_preconditioning(torch.tensor([1e-6, 1.0]), 0.5)
    assert float(c_skip[0]) == pytest.approx(1.0, abs=1e-6) and float(c_out[0]) == pytest.approx(
        0.0, abs=1e-5
    )
    assert float(c_in[1]) == pytest.approx(1 / (1.25**0.5))


@pytest.mark.parametrize("steps,heun", [(1, False), (3, False), (2, True)])
def test_fast_loop_matches_reference(steps, heun):
    den = TinyDenoiser()
    noise = torch.randn(2, 3, 8, 8)
    cond = torch.randn(2, 3)
    sig = sampling.karras_sigmas(steps)
    with torch.no_grad():
        ref, aux_r = sampling.edm_sample_reference(den, noise, sig, heun=heun, args=(cond,))
        fast, aux_f = sampling.edm_sample_fast(
            den, noise, sig, heun=heun, args=(cond,), compile_denoiser=False
        )
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(aux_f, aux_r)


def test_compiled_sampler_matches_reference():
    den = TinyDenoiser()
    noise = torch.randn(2, 3, 8, 8)
    cond = torch.randn(2, 3)
    sig = sampling.karras_sigmas(2)
    with torch.no_grad():
        ref, _ = sampling.edm_sample_reference(den, noise, sig, args=(cond,))
        fast, _ = sampling.edm_sample_fast(den, noise, sig, args=(cond,))
        fast2, _ = sampling.edm_sample_fast(den, noise, sig, args=(cond,))  # cached compiled function
    torch.testing.assert_close(fast, ref, rtol=1e-4, atol=1e-4)
    assert torch.equal(fast, fast2)
    sampling.clear_compiled()


def test_plain_denoiser_without_aux():
    noise = torch.randn(1, 1, 4, 4)
    out, aux = sampling.edm_sample_reference(
        lambda x, s: torch.zeros_like(x), noise, sampling.karras_sigmas(1)
    )
    assert aux is None  # one Euler step to sigma 0 lands on D(x)
    torch.testing.assert_close(out, torch.zeros_like(noise), atol=1e-5, rtol=0)


@pytest.mark.gpu
def test_cuda_fast_sampler_matches_cpu_reference():
    den = TinyDenoiser()
    noise = torch.randn(4, 3, 8, 8)
    cond = torch.randn(4, 3)
    sig = sampling.karras_sigmas(2)
    with torch.no_grad():
        ref, _ = sampling.edm_sample_reference(den, noise, sig, args=(cond,))
        dcu = den.cuda()
        fast, _ = sampling.edm_sample_fast(dcu, noise.cuda(), sig.cuda(), args=(cond.cuda(),))
    torch.testing.assert_close(fast.cpu(), ref, rtol=1e-3, atol=1e-3)
