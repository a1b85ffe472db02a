"""RL in imagination: ImaginedVectorEnv (keyframe-initialized rollouts, gating), GRPO / PPO on action
chunks, co-evolution of policy, world model and reward model, and the ``wmrl run`` pipeline.

Imports are lazy (``imagination.ImaginedVectorEnv`` loads torch/gymnasium only when used)."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ImaginedVectorEnv": "imagination.imagined_env",
    "ImaginedEnvConfig": "imagination.imagined_env",
    "KeyframeConfig": "imagination.keyframes",
    "KeyframeSampler": "imagination.keyframes",
    "GRPOConfig": "imagination.grpo",
    "train_grpo": "imagination.grpo",
    "PPOConfig": "imagination.ppo",
    "train_ppo": "imagination.ppo",
    "CoevolutionConfig": "imagination.coevolution",
    "record_rollouts": "imagination.coevolution",
    "calibrate_success_threshold": "imagination.calibration",
    "paired_episodes": "imagination.calibration",
}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'imagination' has no attribute {name!r}")


__all__ = sorted(_EXPORTS)
