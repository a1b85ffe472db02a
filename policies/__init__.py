"""Policies: VLA architectures with action-chunk heads, the instruction encoder, SFT, the lerobot adapter.

``load_policy(path)`` reads ``path/config.json`` and dispatches on ``policy_type`` (lazy imports).
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path

from wmrl.errors import CheckpointError

#: policy_type -> "module:Class" (imported lazily: lerobot is heavy).
POLICIES: dict[str, str] = {
    "vla": "policies.vla.modeling_vla:VLAPolicy",
    "lerobot": "policies.lerobot_adapter:LeRobotPolicyAdapter",
}


def policy_class(policy_type: str):
    """The class registered under ``policy_type``."""
    if policy_type not in POLICIES:
        raise CheckpointError(f"unknown policy_type {policy_type!r}; valid types: {', '.join(POLICIES)}")
    module, name = POLICIES[policy_type].split(":")
    return getattr(importlib.import_module(module), name)


def load_policy(path: str | os.PathLike, map_location: str = "cpu"):
    """Load any registered policy saved with ``save_pretrained`` (a folder with ``config.json``)."""
    path = Path(path)
    cfg = path / "config.json"
    if not cfg.exists():
        raise CheckpointError(f"{path} has no config.json; expected a policy folder written by save_pretrained")
    try:
        meta = json.loads(cfg.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{cfg} is not valid JSON ({e.msg})") from None
    if "policy_type" not in meta:
        raise CheckpointError(f"{cfg} has no 'policy_type'; it is not a policy checkpoint (world model or reward model?)")
    return policy_class(meta["policy_type"]).from_pretrained(path, map_location=map_location)


__all__ = ["POLICIES", "load_policy", "policy_class"]
