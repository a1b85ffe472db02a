"""Deterministic world model: one UNet pass maps (T context frames, states, K actions) to K frames."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from worldmodels.deterministic.configuration_deterministic import DeterministicWMConfig
from worldmodels.modeling_common import ConditionedUNet, OutcomeHead, WMContext, WorldModel, to_unit


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
        self.net = ConditionedUNet(c, 3 * c.context_frames, 3 * c.chunk_size, self.cond_size(0))
        self.head = OutcomeHead(c, self.net.mid_channels, self.net.temb_dim)
        if c.predict_residual:
            out = self.net.unet.conv_out
            nn.init.zeros_(out.weight)
            nn.init.zeros_(out.bias)

    def _forward(
        self, ctx_frames: Tensor, ctx_noise: Tensor, states_n: Tensor, actions_n: Tensor, instr: Tensor | None
    ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """ctx_frames (B, T, 3, H, W) in [-1, 1] -> frames (B, K, 3, H, W), states (B, K, D),
        rewards (B, K), success logits (B, K)."""
        c = self.config
        b = ctx_frames.shape[0]
        cond = self._cond(ctx_noise, states_n, actions_n, instr)
        with self.autocast():
            out, mid, emb = self.net(ctx_frames.flatten(1, 2), cond)
            states, rew, succ = self.head(mid, emb)
        out = out.float().view(b, c.chunk_size, 3, c.image_size, c.image_size)
        if c.predict_residual:
            out = out + ctx_frames[:, -1:].float()
        return out, states, rew, succ

    def _predict(self, ctx: WMContext, actions_n: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        lvl = torch.full((ctx.batch_size,), self.config.inference_context_noise, device=self.device)
        frames, states, rew, succ = self._forward(ctx.frames, lvl, ctx.states, actions_n, ctx.instruction)
        return frames.clamp(-1, 1), states, rew, succ

    def training_loss(self, batch: dict[str, Tensor]) -> tuple[Tensor, dict[str, float]]:
        c = self.config
        t, k = c.context_frames, c.chunk_size
        frames = to_unit(batch["frames"])
        ctx, target = frames[:, :t], frames[:, t : t + k]
        noisy, lvl = self._augment_context(ctx)
        states_n = self.norm_states(batch["states"][:, :t])
        pred, states_p, rew_p, succ_p = self._forward(
            noisy, lvl, states_n, self.norm_actions(batch["actions"]), batch.get("instruction")
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
