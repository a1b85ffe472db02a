"""Reward models: inverse dynamics model (IDM), executability reward, success reward model."""

from rewards.executability import ExecOutput, ExecutabilityConfig, ExecutabilityReward
from rewards.idm import IDM, IDMConfig, idm_r2, train_idm
from rewards.success import SuccessModelConfig, SuccessRewardModel, frame_success_labels, train_success_model

__all__ = [
    "IDM",
    "ExecOutput",
    "ExecutabilityConfig",
    "ExecutabilityReward",
    "IDMConfig",
    "SuccessModelConfig",
    "SuccessRewardModel",
    "frame_success_labels",
    "idm_r2",
    "train_idm",
    "train_success_model",
]
