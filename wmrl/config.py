"""Hydra configuration: compose ``conf/`` and instantiate typed dataclass configs (unknown keys are errors).

Top-level configs live in ``conf/<name>.yaml`` (e.g. ``conf/train_world_model.yaml``) and may use
Hydra defaults lists over groups (``conf/world_model/*.yaml``, ``conf/policy/*.yaml``, ...).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from wmrl.errors import ConfigError

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
T = TypeVar("T")


def load_config(name: str, overrides: list[str] | None = None):
    """Compose ``conf/<name>.yaml`` with Hydra overrides (``key=value``; ``+key=value`` adds).

    Returns an ``omegaconf.DictConfig`` (struct mode: a misspelt key is an error)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    if not (CONF_DIR / f"{name}.yaml").exists():
        names = sorted(p.stem for p in CONF_DIR.glob("*.yaml"))
        raise ConfigError(f"unknown config {name!r}; valid configs: {', '.join(names)}")
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return compose(config_name=name, overrides=list(overrides or []))
    except (HydraException, OmegaConfBaseException) as e:
        msg = str(e).strip().splitlines()[0]
        raise ConfigError(f"bad config override in {list(overrides or [])}: {msg}") from None


def to_dataclass(cfg: Any, cls: type[T], where: str = "") -> T:
    """Build dataclass ``cls`` from a mapping (DictConfig or dict), recursively.

    Unknown keys raise :class:`ConfigError` naming the key and the valid ones; values are passed
    to the dataclass, whose ``__post_init__`` checks them."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(cfg, (DictConfig, ListConfig)):
        cfg = OmegaConf.to_container(cfg, resolve=True)
    if cfg is None:
        cfg = {}
    if not isinstance(cfg, dict):
        raise ConfigError(f"config {where or cls.__name__} is {cfg!r}; expected a mapping")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(cfg) - set(fields) - {"_target_"})
    if unknown:
        raise ConfigError(
            f"unknown config key(s) {', '.join(where + k for k in unknown)} for {cls.__name__}; "
            f"valid keys: {', '.join(sorted(fields))}"
        )
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for k, v in cfg.items():
        if k == "_target_":
            continue
        sub = _dataclass_type(hints.get(k))
        if sub is not None and isinstance(v, dict):
            v = to_dataclass(v, sub, where=f"{where}{k}.")
        elif isinstance(v, list) and _is_tuple(hints.get(k)):
            v = tuple(v)
        kwargs[k] = v
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"{cls.__name__}: {e}") from None


def _dataclass_type(tp: Any) -> type | None:
    if tp is None:
        return None
    if dataclasses.is_dataclass(tp):
        return tp
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        for a in typing.get_args(tp):
            if dataclasses.is_dataclass(a):
                return a
    return None


def _is_tuple(tp: Any) -> bool:
    return tp is tuple or typing.get_origin(tp) is tuple
