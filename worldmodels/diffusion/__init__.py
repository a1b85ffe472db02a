"""Diffusion world model (DIAMOND-style EDM, few-step Euler/Heun sampling)."""

from worldmodels.diffusion.configuration_diffusion import DiffusionWMConfig
from worldmodels.diffusion.modeling_diffusion import DiffusionWorldModel

__all__ = ["DiffusionWMConfig", "DiffusionWorldModel"]
