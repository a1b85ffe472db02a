"""Configuration of the small vision-language-action policy (:class:`policies.vla.VLAPolicy`)."""

from __future__ import annotations

from dataclasses import dataclass

from wmrl.errors import ConfigError

FUSIONS = ("film", "concat")
LOG_STD_MODES = ("state_independent", "state_dependent")


@dataclass
class VLAConfig:
    """Small VLA: conv image encoder(s) + frozen MiniLM instruction embedding + proprio state -> action chunk.

    Args:
        image_size: side of the square agent-view (and wrist) images, pixels.
        state_dim: proprio state size D.
        action_dim: action size A (7: dpos, drot, gripper).
        chunk_size: K actions predicted per call.
        use_wrist: also encode ``wrist_image`` with a second encoder.
        channels: conv channels per stage (first three stages stride 2, the rest stride 1).
        hidden_dim: width of the fused trunk and of the feature the head reads.
        text_dim: instruction embedding size (384 for all-MiniLM-L6-v2).
        fusion: ``"film"`` (instruction modulates every conv stage and is concatenated) or ``"concat"``.
        head: action head, one of ``policies.heads.HEADS`` (``"gaussian"``, ``"tokens"``).
        log_std_mode: Gaussian head: ``"state_independent"`` or ``"state_dependent"``.
        squash: Gaussian head: tanh-squash (exact Jacobian) instead of censored clipping.
        init_log_std: Gaussian head: initial log-std.
        num_bins: tokens head: bins per action dimension.
        temperature: tokens head: sampling temperature.
        value_head: add a value head (PPO critic).
    """

    image_size: int = 64
    state_dim: int = 8
    action_dim: int = 7
    chunk_size: int = 4
    use_wrist: bool = False
    channels: tuple[int, ...] = (16, 32, 32, 32)
    hidden_dim: int = 128
    text_dim: int = 384
    fusion: str = "film"
    head: str = "gaussian"
    log_std_mode: str = "state_independent"
    squash: bool = False
    init_log_std: float = -1.0
    num_bins: int = 64
    temperature: float = 1.0
    value_head: bool = True

    def __post_init__(self) -> None:
        from policies.heads import HEADS

        self.channels = tuple(int(c) for c in self.channels)
        if not 16 <= self.image_size <= 256 or self.image_size % 8:
            raise ConfigError(f"{self.image_size=} must be a multiple of 8 in [16, 256]")
        if self.state_dim < 1:
            raise ConfigError(f"{self.state_dim=} must be >= 1")
        if self.action_dim < 1:
            raise ConfigError(f"{self.action_dim=} must be >= 1")
        if not 1 <= self.chunk_size <= 64:
            raise ConfigError(f"{self.chunk_size=} must be in [1, 64]")
        if len(self.channels) < 3 or any(c < 1 for c in self.channels):
            raise ConfigError(f"{self.channels=} needs at least 3 positive entries")
        if self.hidden_dim < 8:
            raise ConfigError(f"{self.hidden_dim=} must be >= 8")
        if self.fusion not in FUSIONS:
            raise ConfigError(f"{self.fusion=} is not one of {FUSIONS}")
        if self.head not in HEADS:
            raise ConfigError(f"{self.head=} is not one of {tuple(HEADS)}")
        if self.log_std_mode not in LOG_STD_MODES:
            raise ConfigError(f"{self.log_std_mode=} is not one of {LOG_STD_MODES}")
        if self.num_bins < 2:
            raise ConfigError(f"{self.num_bins=} must be >= 2")
        if self.temperature <= 0:
            raise ConfigError(f"{self.temperature=} must be > 0")
