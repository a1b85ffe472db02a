"""User-facing errors: one clear line naming the bad value and what was expected."""

from __future__ import annotations


class WmrlError(Exception):
    """Base class for errors caused by bad input (config, data, arguments).

    The CLI prints ``error: <message>`` on one line and exits with status 2.
    """


class ConfigError(WmrlError, ValueError):
    """A configuration value or key is invalid."""


class DatasetError(WmrlError):
    """A dataset is missing, corrupt, or lacks a needed feature."""


class CheckpointError(WmrlError):
    """A checkpoint is missing, corrupt, partial or belongs to another architecture/config."""


class NonFiniteError(WmrlError, FloatingPointError):
    """NaN or Inf appeared in a loss, reward or observation; the job stops instead of training on it."""
