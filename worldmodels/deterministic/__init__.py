"""Deterministic (regression) world model: predicts the mean next frames in one forward pass."""

from worldmodels.deterministic.configuration_deterministic import DeterministicWMConfig
from worldmodels.deterministic.modeling_deterministic import DeterministicWorldModel

__all__ = ["DeterministicWMConfig", "DeterministicWorldModel"]
