"""Diffusion world model: EDM-preconditioned denoiser of K future frames given T context frames."""

from __future__ import annotations

import torch
from torch import Tensor

from kernels import sampling
from worldmodels.diffusion.configuration_diffusion import DiffusionWMConfig
from worldmodels.modeling_common import (
    ConditionedUNet,
    OutcomeHead,
    WMContext,
    WorldModel,
    fourier_features,
    to_unit,
)


class DiffusionWorldModel(WorldModel):
    """DIAMOND-style diffusion world model.

    Denoiser input: T context frames and the K noisy target frames (scaled by c_in) stacked on
    channels (B, 3(T+K), H, W); conditioning: K actions, T states, context-noise level and the
    EDM noise level c_noise (Fourier features), all added to the UNet's timestep embedding.
    D(x; sigma) = c_skip x + c_out F(c_in x, c_noise). The outcome head reads the mid features of
    the last denoiser call.
    """

    family = "diffusion"
    config_class = DiffusionWMConfig

    def __init__(self, config: DiffusionWMConfig):
        super().__init__(config)
        c = config
        torch.manual_seed(c.seed)
        self.net = ConditionedUNet(
            c, 3 * (c.context_frames + c.chunk_size) + self.heatmap_channels, 3 * c.chunk_size, self.cond_size(16)
        )
        self.head = OutcomeHead(
            c, self.net.mid_channels, self.net.temb_dim, self.cond_size(16) if c.head_reads_cond else 0
        )

    def _with_heatmaps(self, ctx_flat: Tensor, heat: Tensor | None) -> Tensor:
        """Context frames (B, 3T, H, W) followed by the chunk's heatmaps (``state_heatmaps``; zeros
        when not given)."""
        if not self.config.state_heatmaps:
            return ctx_flat
        heat = heat if heat is not None else self.future_heatmaps(None, batch=ctx_flat.shape[0])
        return torch.cat([ctx_flat, heat.to(ctx_flat.dtype)], dim=1)

    def denoise(
        self, x: Tensor, sigma: Tensor, ctx_flat: Tensor, cond_base: Tensor
    ) -> tuple[Tensor, tuple[Tensor, Tensor, Tensor]]:
        """x: noisy target (B, 3K, H, W); sigma (B,); ctx_flat (B, 3T [+ K*O heatmaps], H, W);
        cond_base (B, cond-16).

        Returns (x0 estimate (B, 3K, H, W) float32,
        (states (B, K, D), rewards (B, K), success logits (B, K)))."""
        c_skip, c_out, c_in, c_noise = sampling.edm_preconditioning(sigma, self.config.sigma_data)
        cond = torch.cat([cond_base, fourier_features(c_noise, 16)], dim=1)
        inp = torch.cat([ctx_flat, x * c_in[:, None, None, None]], dim=1)
        with self.autocast():
            f, mid, emb = self.net(inp, cond)
            heads = self.head(mid, emb, cond)
        den = c_skip[:, None, None, None] * x + c_out[:, None, None, None] * f.float()
        return den, heads

    def _predict(
        self, ctx: WMContext, actions_n: Tensor, future_n: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        c = self.config
        b = ctx.batch_size
        lvl = torch.full((b,), c.inference_context_noise, device=self.device)
        future = None if future_n is None else self.future_features(ctx.states, future_n)
        cond_base = self._cond(lvl, ctx.states, actions_n, ctx.instruction, future=future)
        ctx_flat = self._with_heatmaps(ctx.frames.flatten(1, 2), None if future_n is None else self.future_heatmaps(future_n))
        noise = torch.randn(b, 3 * c.chunk_size, c.image_size, c.image_size, device=self.device)
        sig = sampling.karras_sigmas(c.sampling_steps, c.sigma_min, c.sigma_max, c.rho, device=self.device)
        args = (ctx_flat, cond_base)
        if c.sampler_impl == "fast":
            x, heads = sampling.edm_sample_fast(self.denoise, noise, sig, heun=c.heun, args=args)
        else:
            x, heads = sampling.edm_sample_reference(self.denoise, noise, sig, heun=c.heun, args=args)
        states, rew, succ = heads  # type: ignore[misc]
        frames = x.view(b, c.chunk_size, 3, c.image_size, c.image_size).clamp(-1, 1)
        return frames, states, rew, succ

    def training_loss(self, batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        c = self.config
        t, k = c.context_frames, c.chunk_size
        frames = to_unit(batch["frames"])
        ctx, target = frames[:, :t], frames[:, t : t + k]
        b = ctx.shape[0]
        noisy_ctx, lvl = self._augment_context(ctx)
        states_n = self.norm_states(batch["states"][:, :t])
        future, heat = self._training_future(batch, states_n)
        cond_base = self._cond(
            lvl, states_n, self.norm_actions(batch["actions"]), batch.get("instruction"), future=future
        )
        sigma = (c.p_mean + c.p_std * torch.randn(b, device=ctx.device)).exp()
        x0 = target.flatten(1, 2)
        x = x0 + sigma[:, None, None, None] * torch.randn_like(x0)
        den, (states_p, rew_p, succ_p) = self.denoise(
            x, sigma, self._with_heatmaps(noisy_ctx.flatten(1, 2), heat), cond_base
        )
        # EDM loss weight (sigma^2 + sd^2) / (sigma sd)^2 makes this the unit-variance F-space MSE.
        c_skip, c_out, _, _ = sampling.edm_preconditioning(sigma, c.sigma_data)
        lam = 1.0 / c_out**2
        pw = self._pixel_weights(target, ctx[:, -1]).repeat_interleave(3, dim=2).flatten(1, 2)
        err = ((den - x0) ** 2 * pw).mean(dim=(1, 2, 3)) * lam
        w = batch["weights"]
        lpix = (err * w).mean()
        lhead, logs = self._head_losses(batch, states_p, rew_p, succ_p, w)
        loss = lpix + lhead
        logs["loss_pixel"] = float(lpix.detach())
        logs["loss"] = float(loss.detach())
        return loss, logs
