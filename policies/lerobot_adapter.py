"""Run a lerobot 0.4.4 policy (ACT or Diffusion; random init or a user checkpoint) in wmrl evaluation.

The adapter maps the env observation dict (``image`` uint8 (B,H,W,3), ``state`` (B,D)) to lerobot's
batch (``observation.image`` float (B,3,H,W) in [0,1], ``observation.state``, ``task``), runs the
checkpoint's pre-processor (normalisation) when the checkpoint has one, and returns one action per
call (lerobot policies keep their own action queue, so ``chunk_size`` is 1 from our side).
lerobot policies have no tractable action log-probability: the adapter is for evaluation
(``act`` returns NaN log-probs); ``evaluate_actions`` raises.

    from policies.lerobot_adapter import LeRobotAdapterConfig, LeRobotPolicyAdapter
    pol = LeRobotPolicyAdapter(LeRobotAdapterConfig(lerobot_type="act"))           # random init
    pol = LeRobotPolicyAdapter(LeRobotAdapterConfig(pretrained_path="ckpt/pretrained_model"))
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from policies.base import FORMAT_VERSION, Policy, PolicyEval, PolicyOutput, to_tensor_obs
from policies.text import check_instructions
from wmrl.errors import CheckpointError, ConfigError, WmrlError
from wmrl.io import atomic_write_json

LEROBOT_TYPES = ("act", "diffusion")


@dataclass
class LeRobotAdapterConfig:
    """Args:
    lerobot_type: ``"act"`` or ``"diffusion"`` (ignored when ``pretrained_path`` gives its own).
    pretrained_path: folder of a lerobot checkpoint (``config.json`` + ``model.safetensors``
        [+ processor files]); None: random init.
    image_size: env frame side.
    state_dim: proprio size D.
    action_dim: action size A.
    lerobot_chunk: lerobot ``chunk_size``/``horizon`` and ``n_action_steps`` for random init.
    """

    lerobot_type: str = "act"
    pretrained_path: str | None = None
    image_size: int = 64
    state_dim: int = 8
    action_dim: int = 7
    lerobot_chunk: int = 8

    def __post_init__(self) -> None:
        if self.lerobot_type not in LEROBOT_TYPES:
            raise ConfigError(f"{self.lerobot_type=} is not one of {LEROBOT_TYPES}")
        if self.lerobot_chunk < 1:
            raise ConfigError(f"{self.lerobot_chunk=} must be >= 1")
        if self.pretrained_path is not None and not Path(self.pretrained_path).is_dir():
            raise ConfigError(f"{self.pretrained_path=} is not a folder")

    @property
    def chunk_size(self) -> int:
        return 1


def _random_init(cfg: LeRobotAdapterConfig) -> Any:
    from lerobot.configs.types import FeatureType, PolicyFeature

    inputs = {
        "observation.image": PolicyFeature(type=FeatureType.VISUAL, shape=(3, cfg.image_size, cfg.image_size)),
        "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(cfg.state_dim,)),
    }
    outputs = {"action": PolicyFeature(type=FeatureType.ACTION, shape=(cfg.action_dim,))}
    if cfg.lerobot_type == "act":
        from lerobot.policies.act.configuration_act import ACTConfig
        from lerobot.policies.act.modeling_act import ACTPolicy

        c = ACTConfig(input_features=inputs, output_features=outputs, chunk_size=cfg.lerobot_chunk,
                      n_action_steps=cfg.lerobot_chunk, pretrained_backbone_weights=None, device="cpu")
        return ACTPolicy(c)
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
    from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy

    horizon = max(8, 1 << (cfg.lerobot_chunk - 1).bit_length())
    c = DiffusionConfig(input_features=inputs, output_features=outputs, horizon=horizon, n_action_steps=cfg.lerobot_chunk,
                        crop_shape=None, pretrained_backbone_weights=None, use_group_norm=True, num_inference_steps=10,
                        down_dims=(64, 128, 256), device="cpu")
    return DiffusionPolicy(c)


class LeRobotPolicyAdapter(Policy):
    """A lerobot policy behind the wmrl :class:`Policy` surface (evaluation only)."""

    config_class = LeRobotAdapterConfig
    name = "lerobot"

    def __init__(self, config: LeRobotAdapterConfig):
        super().__init__(config)
        self.preprocessor = self.postprocessor = None
        if config.pretrained_path is None:
            self.inner = _random_init(config)
        else:
            self.inner = self._load_lerobot(Path(config.pretrained_path))
        self.inner.eval()

    def _load_lerobot(self, path: Path) -> Any:
        meta_file = path / "config.json"
        if not meta_file.exists():
            raise CheckpointError(f"{path} has no config.json; expected a lerobot pretrained_model folder")
        kind = json.loads(meta_file.read_text()).get("type")
        if kind not in LEROBOT_TYPES:
            raise CheckpointError(f"{path} holds a lerobot policy of type {kind!r}; the adapter supports {LEROBOT_TYPES}")
        if kind == "act":
            from lerobot.policies.act.modeling_act import ACTPolicy as cls
        else:
            from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy as cls
        policy = cls.from_pretrained(str(path))
        if any(path.glob("policy_preprocessor*.json")):
            from lerobot.policies.factory import make_pre_post_processors

            self.preprocessor, self.postprocessor = make_pre_post_processors(policy.config, pretrained_path=str(path))
        return policy

    def reset(self) -> None:
        super().reset()
        self.inner.reset()

    @torch.no_grad()
    def act(self, obs: dict, instructions: list[str], deterministic: bool = True) -> PolicyOutput:
        """obs (B, ...) -> one action per call: actions (B, 1, A) in [-1, 1]; log_prob/entropy are NaN."""
        o = to_tensor_obs(obs, self.config.image_size, self.config.state_dim, False, "cpu")
        instructions = check_instructions(instructions, o["image"].shape[0])
        batch: dict[str, Any] = {
            "observation.image": o["image"].permute(0, 3, 1, 2).float() / 255.0,
            "observation.state": o["state"],
            "task": instructions,
        }
        if self.preprocessor is not None:
            batch = self.preprocessor(batch)
        action = self.inner.select_action(batch)
        if self.postprocessor is not None:
            action = self.postprocessor(action)
        action = torch.as_tensor(action).float().view(o["image"].shape[0], 1, -1).clamp(-1, 1)
        nan = torch.full((action.shape[0],), float("nan"))
        return PolicyOutput(action, nan, nan, None)

    def evaluate_actions(self, obs: dict, instructions: list[str], actions: Tensor) -> PolicyEval:
        raise WmrlError("lerobot ACT/Diffusion policies have no tractable action log-probability; use them for evaluation")

    def save_pretrained(self, path: str | os.PathLike) -> Path:
        """``config.json`` (adapter) + the lerobot policy in ``path/lerobot`` (its own format)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.inner.save_pretrained(str(path / "lerobot"))
        if self.preprocessor is not None:
            self.preprocessor.save_pretrained(str(path / "lerobot"))
            self.postprocessor.save_pretrained(str(path / "lerobot"))
        cfg = asdict(self.config)
        cfg["pretrained_path"] = None
        atomic_write_json(path / "config.json", {"policy_type": self.name, "format_version": FORMAT_VERSION, "config": cfg})
        return path

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, map_location: str = "cpu") -> LeRobotPolicyAdapter:
        from wmrl.config import to_dataclass

        path = Path(path)
        meta = json.loads((path / "config.json").read_text()) if (path / "config.json").exists() else {}
        if meta.get("policy_type") == cls.name:
            cfg = to_dataclass(meta["config"], LeRobotAdapterConfig)
            cfg.pretrained_path = str(path / "lerobot")
            return cls(cfg)
        if meta.get("type") in LEROBOT_TYPES:  # a plain lerobot checkpoint folder
            return cls(LeRobotAdapterConfig(lerobot_type=meta["type"], pretrained_path=str(path)))
        raise CheckpointError(f"{path} is neither a wmrl lerobot-adapter folder nor a lerobot ACT/Diffusion checkpoint")
