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
    """

    loss: str = "mse"
    predict_residual: bool = True
    family: str = field(default="deterministic", init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.loss not in ("mse", "l1"):
            raise ConfigError(f"loss={self.loss!r}; expected 'mse' or 'l1'")
