"""Config of the deterministic (regression) world model."""

from __future__ import annotations

from dataclasses import dataclass, field

from wmrl.errors import ConfigError
from worldmodels.configuration_common import WorldModelConfig


@dataclass
class DeterministicWMConfig(WorldModelConfig):
    """Deterministic world model: frame-stacked UNet regressing K future frames.

    Args (in addition to :class:`WorldModelConfig`):
        loss: pixel loss, ``"mse"`` or ``"l1"``.
        predict_residual: predict the change from the last context frame (the untrained model
            starts as the copy-last-frame baseline: the output layer is zero-initialised).
        predict_flow: also predict, per future frame, a dense displacement field (2 channels, in
            pixels) that warps the last context frame (bilinear ``grid_sample``); the residual is
            added to the warped frame. Moving an object is then a displacement of its pixels, which
            stays sharp and is learned from its edges, instead of painting it anew (blurred).
            Needs ``predict_residual``.
        flow_scale: pixels of displacement per unit of the raw flow output.
        residual_deadzone: at inference, predicted changes from the last context frame smaller
            than this (max over RGB, in [-1, 1] pixel units; 0.03 is about 4 uint8 levels) are
            dropped: an under-trained model's low-amplitude residual noise then does not creep
            into static pixels (and static objects) and compound over a rollout. 0: off.
    """

    loss: str = "mse"
    predict_residual: bool = True
    predict_flow: bool = False
    flow_scale: float = 4.0
    residual_deadzone: float = 0.0
    family: str = field(default="deterministic", init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss not in ("mse", "l1"):
            raise ConfigError(f"loss={self.loss!r}; expected 'mse' or 'l1'")
        if self.predict_flow and not self.predict_residual:
            raise ConfigError("predict_flow=true needs predict_residual=true (the flow warps the last frame)")
        if not 0.0 <= self.residual_deadzone < 1.0:
            raise ConfigError(f"residual_deadzone={self.residual_deadzone!r} must be in [0, 1)")
        if not self.flow_scale > 0:
            raise ConfigError(f"flow_scale={self.flow_scale!r} must be > 0")
