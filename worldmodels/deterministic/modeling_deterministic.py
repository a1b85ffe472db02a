"""Deterministic world model: one UNet pass maps (T context frames, states, K actions) to K frames."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from worldmodels.deterministic.configuration_deterministic import DeterministicWMConfig
from worldmodels.modeling_common import ConditionedUNet, OutcomeHead, WMContext, WorldModel, to_unit


def warp(frames: Tensor, flow_px: Tensor) -> Tensor:
    """Backward warp: output pixel p takes ``frames`` at p + flow (bilinear, border padding).

    frames (B, K, C, H, W), flow_px (B, K, 2, H, W) in pixels (x, y) -> (B, K, C, H, W)."""
    b, k, ch, h, w = frames.shape
    ys = torch.linspace(-1.0, 1.0, h, device=frames.device)
    xs = torch.linspace(-1.0, 1.0, w, device=frames.device)
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    base = torch.stack([gx, gy], dim=-1)  # (H, W, 2) as grid_sample wants (x, y)
    scale = torch.tensor([2.0 / max(w - 1, 1), 2.0 / max(h - 1, 1)], device=frames.device)
    grid = base + flow_px.flatten(0, 1).permute(0, 2, 3, 1) * scale
    out = F.grid_sample(
        frames.flatten(0, 1), grid, mode="bilinear", padding_mode="border", align_corners=True
    )
    return out.view(b, k, ch, h, w)


class DeterministicWorldModel(WorldModel):
    """Regression world model (the CPU-budget simulator of the pilot).

    Network input: T context frames stacked on channels (B, 3T, H, W); conditioning: K
    normalised actions, T normalised states, the context-noise level (and the instruction
    embedding). Output: K frames (B, 3K, H, W), as a residual over the last context frame when
    ``predict_residual``; the outcome head gives K states, rewards and success logits.
    """

    family = "deterministic"
    config_class = DeterministicWMConfig

    def __init__(self, config: DeterministicWMConfig):
        super().__init__(config)
        c = config
        torch.manual_seed(c.seed)
        out_ch = (5 if c.predict_flow else 3) * c.chunk_size
        self.net = ConditionedUNet(c, 3 * c.context_frames + self.heatmap_channels, out_ch, self.cond_size(0))
        self.head = OutcomeHead(
            c, self.net.mid_channels, self.net.temb_dim, self.cond_size(0) if c.head_reads_cond else 0
        )
        if c.predict_residual:
            out = self.net.unet.conv_out
            nn.init.zeros_(out.weight)
            nn.init.zeros_(out.bias)

    def _forward(
        self,
        ctx_frames: Tensor,
        ctx_noise: Tensor,
        states_n: Tensor,
        actions_n: Tensor,
        instr: Tensor | None,
        future: Tensor | None = None,
        heat: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """ctx_frames (B, T, 3, H, W) in [-1, 1] -> frames (B, K, 3, H, W), states (B, K, D),
        rewards (B, K), success logits (B, K). future: :meth:`future_features` (B, K*D + 1), heat:
        :meth:`future_heatmaps` (B, K*P, H, W), or None (not given)."""
        c = self.config
        b = ctx_frames.shape[0]
        cond = self._cond(ctx_noise, states_n, actions_n, instr, future=future)
        x = ctx_frames.flatten(1, 2)
        if c.state_heatmaps:
            x = torch.cat([x, heat if heat is not None else self.future_heatmaps(None, batch=b)], dim=1)
        with self.autocast():
            out, mid, emb = self.net(x, cond)
            states, rew, succ = self.head(mid, emb, cond)
        last = ctx_frames[:, -1:].float()
        if c.predict_flow:
            out = out.float().view(b, c.chunk_size, 5, c.image_size, c.image_size)
            out = out[:, :, :3] + warp(
                last.expand(-1, c.chunk_size, -1, -1, -1), out[:, :, 3:] * c.flow_scale
            )
        else:
            out = out.float().view(b, c.chunk_size, 3, c.image_size, c.image_size)
            if c.predict_residual:
                out = out + last
        return out, states, rew, succ

    def _predict(
        self, ctx: WMContext, actions_n: Tensor, future_n: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        lvl = torch.full((ctx.batch_size,), self.config.inference_context_noise, device=self.device)
        future = None if future_n is None else self.future_features(ctx.states, future_n)
        heat = None if future_n is None else self.future_heatmaps(future_n)
        frames, states, rew, succ = self._forward(
            ctx.frames, lvl, ctx.states, actions_n, ctx.instruction, future, heat
        )
        dz = self.config.residual_deadzone
        if dz > 0:
            last = ctx.frames[:, -1:].float()
            keep = (frames - last).abs().amax(dim=2, keepdim=True) >= dz
            frames = torch.where(keep, frames, last)
        return frames.clamp(-1, 1), states, rew, succ

    def training_loss(self, batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        c = self.config
        t, k = c.context_frames, c.chunk_size
        frames = to_unit(batch["frames"])
        ctx, target = frames[:, :t], frames[:, t : t + k]
        noisy, lvl = self._augment_context(ctx)
        states_n = self.norm_states(batch["states"][:, :t])
        pred, states_p, rew_p, succ_p = self._forward(
            noisy,
            lvl,
            states_n,
            self.norm_actions(batch["actions"]),
            batch.get("instruction"),
            *self._training_future(batch, states_n),
        )
        w = batch["weights"]
        pw = self._pixel_weights(target, ctx[:, -1])
        err = (pred - target) ** 2 if c.loss == "mse" else (pred - target).abs()
        lpix = ((err * pw).mean(dim=(1, 2, 3, 4)) * w).mean()
        lhead, logs = self._head_losses(batch, states_p, rew_p, succ_p, w)
        loss = lpix + lhead
        logs["loss_pixel"] = float(lpix.detach())
        logs["loss"] = float(loss.detach())
        return loss, logs
