"""Config of the diffusion world model."""

from __future__ import annotations

from dataclasses import dataclass, field

from wmrl.errors import ConfigError
from worldmodels.configuration_common import WorldModelConfig


@dataclass
class DiffusionWMConfig(WorldModelConfig):
    """EDM diffusion world model (DIAMOND-style frame-stacked UNet).

    Args (in addition to :class:`WorldModelConfig`):
        sigma_data: data std in the EDM preconditioning.
        sigma_min / sigma_max / rho: sampling schedule (see ``kernels.sampling.karras_sigmas``).
        p_mean / p_std: log-normal training noise distribution.
        sampling_steps: denoising steps at inference (1-4 is the few-step regime).
        heun: Heun corrections (two denoiser calls per step except the last).
        sampler_impl: ``"reference"`` or ``"fast"`` (``kernels.sampling``).
    """

    sigma_data: float = 0.5
    sigma_min: float = 2e-3
    sigma_max: float = 5.0
    rho: float = 7.0
    p_mean: float = -0.4
    p_std: float = 1.2
    sampling_steps: int = 1
    heun: bool = False
    sampler_impl: str = "reference"
    family: str = field(default="diffusion", init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.sampling_steps, int) or not 1 <= self.sampling_steps <= 64:
            raise ConfigError(f"sampling_steps={self.sampling_steps!r} must be an integer in [1, 64]")
        if not 0 < self.sigma_min < self.sigma_max:
            raise ConfigError(
                f"need 0 < sigma_min < sigma_max; got sigma_min={self.sigma_min}, sigma_max={self.sigma_max}"
            )
        for name in ("sigma_data", "rho", "p_std"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name}={getattr(self, name)!r} must be > 0")
        if self.sampler_impl not in ("reference", "fast"):
            raise ConfigError(f"sampler_impl={self.sampler_impl!r}; expected 'reference' or 'fast'")
