"""Exponential moving average of a model's weights, shared by the world-model and policy trainers."""

from __future__ import annotations

import torch

from wmrl.errors import CheckpointError


class WeightEMA:
    """Exponential moving average of a model's parameters (float32 copies; buffers are not averaged).

    ``update(step)`` after each optimiser step uses decay min(decay, (1+step)/(10+step)), so the
    average follows the fast-changing early weights; ``copy_to(model)`` writes it into the model."""

    def __init__(self, model: torch.nn.Module, decay: float):
        self.decay = decay
        self.shadow = {n: p.detach().float().clone() for n, p in model.named_parameters()}

    @torch.no_grad()
    def update(self, model: torch.nn.Module, step: int) -> None:
        d = min(self.decay, (1.0 + step) / (10.0 + step))
        for n, p in model.named_parameters():
            self.shadow[n].lerp_(p.detach().float(), 1.0 - d)

    @torch.no_grad()
    def copy_to(self, model: torch.nn.Module) -> None:
        for n, p in model.named_parameters():
            p.copy_(self.shadow[n].to(p.dtype))

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.shadow)

    def load_state_dict(self, state: dict[str, torch.Tensor], where: str) -> None:
        if set(state) != set(self.shadow) or any(state[n].shape != v.shape for n, v in self.shadow.items()):
            raise CheckpointError(f"{where} holds a weight average that does not match the model")
        self.shadow = {n: v.float().to(self.shadow[n].device).clone() for n, v in state.items()}
