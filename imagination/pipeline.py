"""``wmrl run``: the whole loop on the built-in suite, resumable stage by stage.

Stages (each leaves ``RUN/stages/<name>.json`` and is skipped when that marker exists)::

    demos          scripted-expert demos (wmrl.collect -> LeRobotDataset in RUN/data)
    world_model    action-conditioned world model (worldmodels.train, RUN/world_model)
    sft            behaviour-cloned VLA policy (policies.train, RUN/sft)
    eval_sft       real-simulator success of the SFT policy
    idm            IDM + executability reward, calibrated on real clips (RUN/rewards/executability)
    rewards        success reward model, trained on real frames and the world model's replays
                   (RUN/rewards/success)
    round_0        GRPO/PPO in imagination (ImaginedVectorEnv, keyframe starts, gating) + evaluation;
                   with success_calibration.episodes_per_task > 0, first paired SFT episodes in both
                   worlds set the success threshold of every round (their real steps counted here)
    round_r        co-evolution: real rollouts of the policy (counted) -> fine-tune world model and
                   success model (failures up-weighted) -> RL in imagination -> evaluation
                   (self_imitation.enabled: each round clones the policy's own successes found in the
                   arm-and-object state model's world instead of RL: imagination.self_imitation)
    real_rl        baseline: the same RL in the real simulator with the real-env steps rounds 0..R used
    report         results.md table, success-per-round plot, real | imagined videos, results.json

Long stages checkpoint inside (world model, SFT, RL iterations) and resume from there. ``real_rl`` and
``report`` also record what they were made from (the real budget; the stage markers read) and run again when
a resumed run changes it (another ``coevolution.rounds``): :meth:`Pipeline.stage`.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wmrl.errors import ConfigError, WmrlError
from wmrl.io import atomic_write_json, atomic_write_text

RUN_OBJECT_DYNAMICS = "object_dynamics"  # the run folder's fitted object model (object_dynamics.enabled)
#: ``object_dynamics`` keys of the co-evolution refit, not ``ObjectDynamicsConfig`` fields
ROUND_REFIT_KEYS = ("warm_refit_steps", "warm_refit_lr")
#: ``object_dynamics.warm_refit_steps``' default: co-evolution rounds fine-tune the object dynamics they started from
#: for 1,000 steps (from ``worldmodels.object_dynamics.WARM_REFIT_LR``; a fit from scratch is 8,000 from 1e-3), as
#: good in session 54's branched worlds and session 72's self-imitation rounds
WARM_REFIT_STEPS = 1000


# ---------------------------------------------------------------------------------------------- config
@dataclass
class DemoConfig:
    """Args: episodes_per_task: expert episodes per task; noise: expert noise levels (episodes split
    evenly); num_envs: sub-envs while collecting; source: ``expert`` (the built-in suite's scripted
    experts) or ``maniskill_motionplanning`` (ManiSkill's motion planner via
    :func:`envs.maniskill.demos.generate`, successful episodes only; noise/num_envs unused)."""

    episodes_per_task: int = 30
    noise: tuple[float, ...] = (0.0, 0.2, 0.4)
    num_envs: int = 12
    source: str = "expert"

    def __post_init__(self) -> None:
        if self.source not in ("expert", "maniskill_motionplanning"):
            raise ConfigError(
                f"demos.source={self.source!r}; expected 'expert' or 'maniskill_motionplanning'"
            )
        if self.episodes_per_task < 2 or self.num_envs < 1 or not self.noise or min(self.noise) < 0:
            raise ConfigError(
                f"demos: episodes_per_task={self.episodes_per_task} must be >= 2, "
                f"num_envs={self.num_envs} >= 1, noise={self.noise} non-empty and >= 0"
            )


@dataclass
class RenderConfig:
    """How the built-in suite renders every real frame of the run (demos, evaluation, co-evolution
    rollouts, the real-RL baseline, calibration pairs), so the world model, the reward models and
    the policy all see one kind of frame. Args: supersample: render N times larger and box-average
    down (anti-aliasing; 1: off); shadows: the overhead light casts shadows (see
    ``envs.tabletop.TabletopVectorEnv``). Both sharpen the IDM's depth/height motion
    (``benchmarks.reward_models``) and cost env speed (``benchmarks.sim_throughput``). tiled: draw a
    batch's frames as tiles of one framebuffer (``envs.tabletop.render``), where a frame can differ by a pixel
    with its sub-env's place in the batch; false: each frame drawn alone, the same bits whatever the batch
    (an episode's outcome then does not depend on the episodes played beside it), for fewer env steps/s."""

    supersample: int = 1
    shadows: bool = False
    tiled: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.supersample, bool) or not isinstance(self.supersample, int) or not 1 <= self.supersample <= 4:
            raise ConfigError(f"render.supersample={self.supersample!r}; expected an integer in [1, 4]")
        for name in ("shadows", "tiled"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"render.{name}={getattr(self, name)!r}; expected true or false")

    @property
    def is_default(self) -> bool:
        return self.supersample == 1 and not self.shadows and self.tiled

    def env_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``envs.make_vec`` for the built-in suite (empty when default, so any
        backend takes them)."""
        if self.is_default:
            return {}
        return {"supersample": self.supersample, "shadows": self.shadows, **({} if self.tiled else {"tiled_frames": False})}


@dataclass
class RewardsConfig:
    """Args: idm_steps / success_steps: training steps; batch_size; calibrate_clips: real clips that
    calibrate the executability scale; idm / success: extra fields of IDMConfig / SuccessModelConfig;
    imagined_replays: also train the success model on the world model's open-loop replays of the
    demo episodes, labelled by their real outcomes, so it learns what a real success looks like
    *through the world model* (imagined frames are blurrier and can drift; a classifier trained on
    real frames alone over-trusts them);
    imagined_random_failures: that many world-model rollouts of uniformly random actions from demo
    episodes' first frames, labelled failures, join the success model's data (hard negatives:
    see :func:`imagination.coevolution.imagined_random_failures`; 0: off)."""

    idm_steps: int = 600
    success_steps: int = 600
    batch_size: int = 64
    calibrate_clips: int = 64
    imagined_replays: bool = True
    imagined_random_failures: int = 0
    idm: dict = field(default_factory=dict)
    success: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.imagined_random_failures < 0:
            raise ConfigError(
                f"rewards.imagined_random_failures={self.imagined_random_failures} must be >= 0 (episodes)"
            )
        if self.idm_steps < 1 or self.success_steps < 1 or self.calibrate_clips < 1:
            raise ConfigError(
                f"rewards: idm_steps={self.idm_steps}, success_steps={self.success_steps}, "
                f"calibrate_clips={self.calibrate_clips} must be >= 1"
            )


@dataclass
class EvalConfig:
    """Args: episodes_per_task: real-simulator episodes per task and evaluation; num_envs: batch."""

    episodes_per_task: int = 10
    num_envs: int = 10
    seed: int = 12345

    def __post_init__(self) -> None:
        if self.episodes_per_task < 1 or self.num_envs < 1:
            raise ConfigError(
                f"eval: episodes_per_task={self.episodes_per_task} and num_envs={self.num_envs} must be >= 1"
            )


@dataclass
class SuccessCalibrationConfig:
    """Args: episodes_per_task: SFT-policy episodes per task run in both worlds from the same real
    starts before RL (:func:`imagination.calibration.paired_episodes`); the success threshold of
    every RL round is then the one that best separates their real successes from their real
    failures (:func:`imagination.calibration.calibrate_success_threshold`). Their real steps count
    in round 0's real-env budget. 0: off (``imagination.success_threshold`` as given).
    persistence_frames: candidate ``imagination.success_persistence`` values, chosen together with
    the threshold (:func:`imagination.calibration.calibrate_success_persistence`); ``[1]`` calibrates
    the threshold alone."""

    episodes_per_task: int = 0
    persistence_frames: list = field(default_factory=lambda: [1])

    def __post_init__(self) -> None:
        if self.episodes_per_task < 0:
            raise ConfigError(f"success_calibration.episodes_per_task={self.episodes_per_task} must be >= 0")
        frames = list(self.persistence_frames or [])
        if not frames or any(not isinstance(m, int) or m < 1 for m in frames):
            raise ConfigError(
                f"success_calibration.persistence_frames={self.persistence_frames!r}: expected a list of integers >= 1"
            )
        self.persistence_frames = frames


@dataclass
class RunConfig:
    """Config of ``wmrl run`` (``conf/run.yaml``).

    Args:
        run_dir: run folder (re-using it resumes).
        suite: task id, suite name or list of task ids.
        image_size: frame side for every model (policy, world model, rewards).
        seed: seed of the whole run; num_threads: torch CPU threads (null: torch default).
        device: where the models train and run (``wmrl.devices``: auto = CUDA when torch sees a
            GPU, else the CPU; cpu; cuda; cuda:N). The simulators stay on the CPU.
        deterministic: deterministic torch kernels in the run's processes (the background SFT child
            too; :func:`wmrl.devices.use_deterministic_algorithms`), so a GPU run repeats bit for
            bit. CPU runs repeat without it.
        demos, rewards, eval: see their classes.
        render: how the built-in suite renders real frames (:class:`RenderConfig`; other backends
            take only the default).
        world_model: family + world-model config fields (``conf/world_model/*``).
        world_model_train: ``worldmodels.train.TrainLoopConfig`` fields.
        policy: ``policies.vla.VLAConfig`` fields (``conf/policy/*``); sft: ``TrainPolicyConfig``
            fields besides dataset/out/policy.
        imagination: ``ImaginedEnvConfig`` fields (``keyframes`` a ``KeyframeConfig`` mapping).
        success_calibration: calibrate imagination's success threshold on paired episodes.
        rl: ``algo`` (grpo | ppo) + that trainer's config fields (``conf/rl/*``).
        coevolution: ``CoevolutionConfig`` fields.
        sft_successful_only: behaviour-clone only the demo episodes that succeeded (the failed noisy
            ones still train the world model and reward models).
        sft_beside_world_model: run the stages that need no world model (SFT, its evaluation and the
            IDM: :attr:`Pipeline.BACKGROUND_STAGES`) in a child process while the world model trains,
            each side on half of the threads (``num_threads``, or torch's default when null;
            :mod:`imagination.background_stage`); the success model trains after both, on all of them.
            Each stage keeps its thread count however the two overlap, so the run repeats. With
            fewer than 2 threads the stages run one after the other on all of them.
        real_rl_baseline: run RL in the real simulator with the same real-env budget.
        real_rl_num_envs: sub-envs of that baseline (a multiple of the GRPO group size, one group per
            task at least: see :func:`rl_task_layout`).
        real_rl_reward: the reward RL in the real simulator gets: ``sparse`` (1 on success) or
            ``dense`` (the built-in suite's staged shaping in [0, 1), 1 on success; for
            ``rl.score=progress`` or PPO). Evaluation always counts success.
        videos: real | imagined videos written in the report.
        object_dynamics: ``enabled`` (fit a :class:`worldmodels.object_dynamics.ObjectDynamics` on
            the demos after the world model, in ``object_dynamics/``, and attach it to every world
            model RL in imagination uses) + its ``ObjectDynamicsConfig`` fields (e.g. ``arm``, ``steps``);
            ``refit_each_round`` (default true): each co-evolution round fits it again, on the demos and
            every round's real rollouts so far (``round_R/object_dynamics``), and later rounds use that one;
            ``warm_refit_steps`` (default 1,000; 0: fit from scratch) fine-tunes the model the round
            started from for that many steps instead, from learning rate ``warm_refit_lr`` (default 3e-4).
        self_imitation: ``enabled`` makes each round's imagination phase success-filtered self-imitation in
            the arm-and-object state model's world instead of RL in the world model
            (:mod:`imagination.self_imitation`; needs ``object_dynamics.enabled`` with ``arm``) + its
            ``SelfImitationConfig`` fields.
    """

    run_dir: str = "runs/run"
    suite: Any = "builtin"
    image_size: int = 64
    seed: int = 0
    num_threads: int | None = None
    device: str = "auto"
    deterministic: bool = False
    demos: DemoConfig = field(default_factory=DemoConfig)
    world_model: dict = field(default_factory=lambda: {"family": "deterministic"})
    world_model_train: dict = field(default_factory=dict)
    rewards: RewardsConfig = field(default_factory=RewardsConfig)
    policy: dict = field(default_factory=dict)
    sft: dict = field(default_factory=dict)
    sft_successful_only: bool = True
    sft_beside_world_model: bool = True
    imagination: dict = field(default_factory=dict)
    rl: dict = field(default_factory=lambda: {"algo": "grpo"})
    coevolution: dict = field(default_factory=dict)
    eval: EvalConfig = field(default_factory=EvalConfig)
    render: RenderConfig = field(default_factory=RenderConfig)
    success_calibration: SuccessCalibrationConfig = field(default_factory=SuccessCalibrationConfig)
    real_rl_baseline: bool = True
    real_rl_num_envs: int = 48
    real_rl_reward: str = "sparse"
    videos: int = 2
    object_dynamics: dict = field(default_factory=lambda: {"enabled": False})
    self_imitation: dict = field(default_factory=lambda: {"enabled": False})

    def __post_init__(self) -> None:
        if isinstance(self.suite, (list, tuple)):
            self.suite = list(self.suite)
        if self.image_size not in (32, 64, 96, 128):
            raise ConfigError(f"image_size={self.image_size} must be one of 32, 64, 96, 128")
        if self.rl.get("algo") not in ("grpo", "ppo"):
            raise ConfigError(f"rl.algo={self.rl.get('algo')!r}; expected 'grpo' or 'ppo'")
        if self.num_threads is not None and self.num_threads < 1:
            raise ConfigError(f"num_threads={self.num_threads} must be >= 1 or null")
        from wmrl.devices import resolve_device

        resolve_device(self.device)  # a bad name or a missing GPU fails before any work
        if not self.render.is_default:
            other = self.other_backends()
            if other:
                raise ConfigError(f"render={self.render} is for the built-in suite; suite={self.suite!r} runs on "
                                  f"{', '.join(other)}, which renders its own frames")
        if self.real_rl_reward not in ("sparse", "dense"):
            raise ConfigError(f"real_rl_reward={self.real_rl_reward!r}; expected 'sparse' or 'dense'")
        if self.real_rl_reward == "dense" and self.other_backends():
            raise ConfigError(
                f"real_rl_reward=dense is the built-in suite's shaping; suite={self.suite!r} runs on "
                f"{', '.join(self.other_backends())}"
            )
        # typed sub-configs are built (and checked) here so a bad key fails before any work
        from policies.train import TrainPolicyConfig
        from wmrl.config import to_dataclass
        from worldmodels.train import TrainLoopConfig

        to_dataclass({"seed": self.seed, **self.world_model_train}, TrainLoopConfig, where="world_model_train.")
        to_dataclass({"seed": self.seed, **self.sft}, TrainPolicyConfig, where="sft.")  # SFT may run in a child
        _, rcfg = self.rl_config()
        if self.real_rl_baseline:
            import envs

            rl_task_layout(envs.resolve_tasks(self.suite), self.real_rl_num_envs, getattr(rcfg, "group_size", 1))
        icfg = self.imagination_config()
        env_dim = self.world_model.get("env_state_dim", 0)
        if isinstance(env_dim, bool) or not isinstance(env_dim, int) or env_dim < 0:
            raise ConfigError(f"world_model.env_state_dim={env_dim!r}; expected an integer >= 0")
        if icfg.success_source == "state" and not env_dim:
            raise ConfigError(
                "imagination.success_source=state judges imagined success on the world model's predicted "
                "environment state: set world_model.env_state_dim (9: the built-in cubes' xyz)"
            )
        if env_dim:
            other = self.other_backends()
            if other:
                raise ConfigError(f"world_model.env_state_dim={env_dim} is for the built-in suite; suite="
                                  f"{self.suite!r} runs on {', '.join(other)}, whose demos record no environment state")
        self.coevolution_config()
        od = self.object_dynamics_config()
        if od is not None and env_dim != 3 * od.num_objects:
            raise ConfigError(
                f"object_dynamics.enabled moves {od.num_objects} objects: set world_model.env_state_dim="
                f"{3 * od.num_objects} (got {env_dim})"
            )
        if self.self_imitation_config().enabled:
            from imagination.self_imitation import check_self_imitation_config

            check_self_imitation_config(self)

    def object_dynamics_config(self):
        """The ``ObjectDynamicsConfig`` of ``object_dynamics`` (seeded by the run), None when not enabled."""
        from wmrl.config import to_dataclass
        from worldmodels.object_dynamics import ObjectDynamicsConfig

        d = dict(self.object_dynamics)
        enabled = d.pop("enabled", False)
        refit = d.pop("refit_each_round", True)
        for key in ROUND_REFIT_KEYS:
            d.pop(key, None)
        for key, v in (("enabled", enabled), ("refit_each_round", refit)):
            if not isinstance(v, bool):
                raise ConfigError(f"object_dynamics.{key}={v!r}; expected true or false")
        self.object_dynamics_warm_refit()
        cfg = to_dataclass({"seed": self.seed, **d}, ObjectDynamicsConfig, where="object_dynamics.")
        return cfg if enabled else None

    def self_imitation_config(self):
        """The ``SelfImitationConfig`` of ``self_imitation``."""
        from imagination.self_imitation import SelfImitationConfig
        from wmrl.config import to_dataclass

        return to_dataclass(dict(self.self_imitation), SelfImitationConfig, where="self_imitation.")

    def fits_object_dynamics_on_demos(self) -> bool:
        """Whether the run fits its object dynamics on the demos alone (the ``object_dynamics`` stage, into
        ``RUN/object_dynamics``): not when it is off, nor when self-imitation's round 0 fits it on the demos
        plus the SFT policy's real episodes (``self_imitation.policy_episodes`` > 0), since no round reads
        the demos' fit then."""
        if self.object_dynamics_config() is None:
            return False
        si = self.self_imitation_config()
        return not (si.enabled and si.policy_episodes > 0)

    def object_dynamics_warm_refit(self) -> tuple[int, float] | None:
        """``(steps, lr)`` when co-evolution rounds fine-tune the round's starting object dynamics for
        ``object_dynamics.warm_refit_steps`` steps from learning rate ``warm_refit_lr`` (cosine to 0) instead
        of fitting them from scratch (``warm_refit_steps`` 0: None); a ConfigError on a bad value."""
        from worldmodels.object_dynamics import WARM_REFIT_LR

        steps = self.object_dynamics.get("warm_refit_steps", WARM_REFIT_STEPS)
        lr = self.object_dynamics.get("warm_refit_lr", WARM_REFIT_LR)
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ConfigError(f"object_dynamics.warm_refit_steps={steps!r}; expected an integer >= 0 (0: refit "
                              "from scratch)")
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < float("inf"):
            raise ConfigError(f"object_dynamics.warm_refit_lr={lr!r}; expected a learning rate > 0")
        return (steps, float(lr)) if steps > 0 else None

    def refit_object_dynamics_each_round(self) -> bool:
        """Whether co-evolution rounds refit the enabled object dynamics on their real rollouts."""
        return self.object_dynamics_config() is not None and bool(self.object_dynamics.get("refit_each_round", True))

    def other_backends(self) -> list[str]:
        """The suite's backends other than the built-in one (``mujoco``), sorted."""
        import envs

        return sorted({envs.task_spec(t).backend for t in envs.resolve_tasks(self.suite)} - {"mujoco"})

    def rl_config(self):
        from imagination.grpo import GRPOConfig
        from imagination.ppo import PPOConfig
        from wmrl.config import to_dataclass

        rl = dict(self.rl)
        algo = rl.pop("algo")
        return algo, to_dataclass(rl, GRPOConfig if algo == "grpo" else PPOConfig, where="rl.")

    def imagination_config(self):
        from imagination.imagined_env import ImaginedEnvConfig
        from wmrl.config import to_dataclass

        return to_dataclass(dict(self.imagination), ImaginedEnvConfig, where="imagination.")

    def coevolution_config(self):
        from imagination.coevolution import CoevolutionConfig
        from wmrl.config import to_dataclass

        return to_dataclass(dict(self.coevolution), CoevolutionConfig, where="coevolution.")


def rl_task_layout(tasks: list[str], num_envs: int, group_size: int) -> list[str]:
    """Sub-env task ids of RL in the real simulator (the baseline): ``group_size`` consecutive
    sub-envs (a GRPO group, which shares its start) share a task, and the groups cycle through
    ``tasks``. A sub-env keeps its task for the whole run, so every task needs a group of its own
    or the baseline never trains on it: fewer than ``group_size * len(tasks)`` sub-envs, or a count
    that is not a multiple of ``group_size``, is a ConfigError naming the smallest count that works."""
    need = group_size * len(tasks)
    if num_envs < need or num_envs % group_size:
        raise ConfigError(
            f"real_rl_num_envs={num_envs}: RL in the real simulator needs a multiple of the group size "
            f"{group_size} and at least one group per task ({len(tasks)} tasks): use >= {need}"
        )
    return [tasks[(i // group_size) % len(tasks)] for i in range(num_envs)]


# ---------------------------------------------------------------------------------------------- stages
class Pipeline:
    """Runs the stages of :class:`RunConfig` in a run folder (see the module docstring)."""

    def __init__(self, cfg: RunConfig, progress: bool = True):
        from wmrl.runs import RunDir

        self.cfg, self.progress = cfg, progress
        self.root = Path(cfg.run_dir)
        self.run = RunDir(self.root, dataclasses.asdict(cfg))
        (self.root / "stages").mkdir(exist_ok=True)
        self.t0 = time.perf_counter()
        self._traj = None
        from wmrl.devices import resolve_device

        self.device = resolve_device(cfg.device)  # models train and run here; simulators stay on the CPU
        if cfg.deterministic:  # before any CUDA work of this process (the background SFT child builds its own)
            from wmrl.devices import use_deterministic_algorithms

            use_deterministic_algorithms(True)

    # -- markers
    def done(self, stage: str) -> dict | None:
        p = self.root / "stages" / f"{stage}.json"
        return json.loads(p.read_text()) if p.exists() else None

    def mark(self, stage: str, summary: dict) -> dict:
        atomic_write_json(self.root / "stages" / f"{stage}.json", summary)
        self.run.log(
            len(list((self.root / "stages").glob("*.json"))),
            {f"{stage}/{k}": v for k, v in summary.items() if isinstance(v, (int, float, bool))},
        )
        return summary

    def stage(self, name: str, fn, inputs: dict[str, Any] | None = None) -> dict:
        """Run stage ``name`` (``fn()`` returns its summary) unless its marker says it is done.

        ``inputs``: what the stage's result depends on besides the stages before it (JSON values),
        kept in its marker under ``inputs``: a finished stage whose recorded inputs differ runs
        again (:func:`changed_inputs`), e.g. the real-RL baseline and the report once a resumed run
        has more co-evolution rounds."""
        prev = self.done(name)
        if prev is not None:
            changed = changed_inputs(prev, inputs)
            if not changed:
                self._say(f"[skip] {name} (done: {self.root / 'stages' / (name + '.json')})")
                return prev
            self._say(f"[redo] {name}: its inputs changed ({'; '.join(changed)})")
        self._say(f"[stage] {name}")
        summary = _timed(fn)
        if inputs is not None:
            summary["inputs"] = inputs
        return self.mark(name, summary)

    def _say(self, msg: str) -> None:
        if self.progress:
            from rich import print as rprint

            rprint(f"[bold cyan]wmrl run[/] {msg}  [dim]({time.perf_counter() - self.t0:.0f}s)[/]")

    # -- data
    @property
    def data_root(self) -> Path:
        return self.root / "data"

    def trajectories(self):
        if self._traj is None:
            from wmrl.data import load_trajectories

            self._traj = load_trajectories(self.data_root)
        return self._traj

    def check_demo_render(self) -> None:
        """A resumed run's demos must have been rendered as ``render`` asks (its models learn those frames)."""
        from wmrl.data import read_episode_meta

        meta = read_episode_meta(self.data_root).values()
        have = sorted({(int(r.get("supersample", 1)), bool(r.get("shadows", False))) for r in meta})
        want = (self.cfg.render.supersample, self.cfg.render.shadows)
        if have and have != [want]:
            raise ConfigError(f"{self.data_root} was rendered with (supersample, shadows)={have}; this run asks for "
                              f"render.supersample={want[0]}, render.shadows={want[1]}: use another run_dir")

    def tasks(self) -> list[str]:
        import envs

        return envs.resolve_tasks(self.cfg.suite)

    def env_kwargs(self) -> dict[str, Any]:
        """``envs.make_vec`` keyword arguments every real env of the run shares (frame size, render)."""
        return run_env_kwargs(self.cfg)

    # -- stage bodies
    def s_demos(self) -> dict:
        import shutil

        from wmrl.collect import collect

        c = self.cfg.demos
        if self.data_root.exists() and not (self.data_root / "meta" / "info.json").exists():
            shutil.rmtree(self.data_root)  # a collection cut short: start it again
        if c.source == "maniskill_motionplanning":
            return _motionplanning_demos(self)
        n_tasks = len(self.tasks())
        return collect(
            str(self.data_root),
            self.cfg.suite,
            c.episodes_per_task * n_tasks,
            list(c.noise),
            num_envs=c.num_envs,
            seed=self.cfg.seed,
            image_size=self.cfg.image_size,
            overwrite=self.data_root.exists(),
            progress=self.progress,
            supersample=self.cfg.render.supersample,
            shadows=self.cfg.render.shadows,
        )

    def s_world_model(self) -> dict:
        from wmrl.config import to_dataclass
        from worldmodels.train import TrainLoopConfig, TrainWorldModelConfig, train_world_model

        wm = {**self.cfg.world_model, "image_size": self.cfg.image_size, "seed": self.cfg.seed}
        loop = to_dataclass(
            {"seed": self.cfg.seed, "device": str(self.device), **self.cfg.world_model_train},
            TrainLoopConfig,
            where="world_model_train.",
        )
        tcfg = TrainWorldModelConfig(world_model=wm, train=loop, run_dir=str(self.root / "world_model"))
        tr, te = self.trajectories().split_episodes(0.1, self.cfg.seed)
        _, info = train_world_model(tcfg, tr, te, progress=self.progress)
        by_time = info.get("lr_by_time_from_step")
        if by_time is not None or info.get("stopped_by_time"):
            how = f"its learning rate followed the clock from step {by_time}" if by_time is not None else ""
            if info.get("stopped_by_time"):
                how += (" and " if how else "") + f"the cap stopped it at step {info['steps']}"
            self._say(
                f"[yellow]the world model fell behind its {loop.max_time_s:g} s cap's pace: {how}, so it and "
                "every later stage depend on this machine's speed (world_model_train.max_time_s=null repeats)[/]"
            )
        return {k: v for k, v in info.items() if isinstance(v, (int, float, str, bool)) or v is None}

    def s_object_dynamics(self) -> dict:
        return self.fit_object_dynamics(self.trajectories(), self.root / RUN_OBJECT_DYNAMICS, self.cfg.seed)

    def fit_object_dynamics(
        self, traj: Any, out: Path, seed: int, init: Path | None = None, fine_tune: tuple[int, float] | None = None
    ) -> dict:
        """Fit the run's object dynamics on ``traj`` (seed ``seed``) and save it to ``out``; its metrics.
        ``init`` with ``fine_tune`` ``(steps, lr)``: fine-tune the model saved there instead (its architecture
        and normalisation kept; ``steps`` steps from ``lr``, cosine to 0; the run's ``object_dynamics.rollout_*``
        multi-step loss)."""
        from worldmodels.object_dynamics import fine_tune_object_dynamics, fit_object_dynamics

        if init is not None and fine_tune is not None:
            model, metrics = fine_tune_object_dynamics(traj, init, *fine_tune, seed=seed, progress=self.progress,
                                                       device=self.device, loss=self.cfg.object_dynamics_config())
        else:
            cfg = dataclasses.replace(
                self.cfg.object_dynamics_config(), proprio_dim=int(traj.states.shape[1]), seed=int(seed)
            )
            model, metrics = fit_object_dynamics(traj, cfg, progress=self.progress, device=self.device)
        model.save_pretrained(out, metrics)
        return metrics

    def s_idm(self) -> dict:
        """The IDM and its executability reward, calibrated on real clips of the demos: it needs no world
        model, so it can train beside it (:attr:`BACKGROUND_STAGES`). A run folder from before the IDM
        had its own stage trained it in the ``rewards`` stage: its marker's calibration is taken."""
        old = self.done("rewards")
        if old is not None and "exec_scale" in old:
            return {"exec_scale": old["exec_scale"], "exec_step_scale": old["exec_step_scale"], "in_rewards_stage": True}
        from rewards import ExecutabilityReward, IDMConfig, train_idm
        from wmrl.config import to_dataclass

        rc, traj, size = self.cfg.rewards, self.trajectories(), self.cfg.image_size
        idm = train_idm(
            traj,
            to_dataclass({"image_size": size, **rc.idm}, IDMConfig, where="rewards.idm."),
            steps=rc.idm_steps,
            batch_size=rc.batch_size,
            seed=self.cfg.seed,
            progress=self.progress,
            device=self.device,
        )
        exe = ExecutabilityReward(idm)
        clips, acts = _real_clips(traj, 5, rc.calibrate_clips, self.cfg.seed)
        cal = exe.calibrate(clips, acts)
        exe.save_pretrained(self.root / "rewards" / "executability")
        return {"exec_scale": cal["scale"], "exec_step_scale": cal["step_scale"]}

    def s_rewards(self) -> dict:
        """The success model, on the demos' real frames and (``rewards.imagined_replays`` /
        ``imagined_random_failures``) the world model's replays and random-action rollouts of them."""
        from rewards import SuccessModelConfig, train_success_model
        from wmrl.config import to_dataclass

        rc, traj, size = self.cfg.rewards, self.trajectories(), self.cfg.image_size
        parts = [traj]
        replay_eps = negative_eps = 0
        if rc.imagined_replays or rc.imagined_random_failures:
            from imagination.coevolution import imagined_random_failures, imagined_replays
            from worldmodels import load_world_model

            wm = load_world_model(self.root / "world_model" / "model").to(self.device).eval()
            replays = imagined_replays(wm, traj) if rc.imagined_replays else None
            if replays is not None:
                parts.append(replays)
                replay_eps = replays.num_episodes
            negatives = imagined_random_failures(wm, traj, rc.imagined_random_failures, seed=self.cfg.seed)
            if negatives is not None:
                parts.append(negatives)
                negative_eps = negatives.num_episodes
        if len(parts) > 1:
            from wmrl.data import Trajectories

            data = Trajectories.concat(parts)
        else:
            data = traj
        succ = train_success_model(
            data,
            to_dataclass({"image_size": size, **rc.success}, SuccessModelConfig, where="rewards.success."),
            steps=rc.success_steps,
            batch_size=rc.batch_size,
            seed=self.cfg.seed,
            progress=self.progress,
            device=self.device,
        )
        succ.save_pretrained(self.root / "rewards" / "success")
        return {
            "success_imagined_replay_episodes": replay_eps,
            "success_imagined_random_failure_episodes": negative_eps,
        }

    def s_sft(self) -> dict:
        return self.train_sft(self.root / "sft")

    def s_eval_sft(self) -> dict:
        return self.evaluate(self.policy_after(-1), "sft")

    def train_sft(
        self,
        out: Path,
        steps: int | None = None,
        extra: Any = None,
        init: Path | None = None,
        num_threads: int | None = None,
        drop_tasks: Any = (),
        whole_files: Any = (),
    ) -> dict:
        """Behaviour-clone the run's policy on its demos into ``out`` (``out/policy``): the ``sft``
        stage, or (``steps``) the same recipe at another optimiser-step budget (its learning-rate
        schedule spans ``steps``). ``extra``: more episodes cloned beside the demos (a
        ``wmrl.data.Trajectories`` or an iterable of them, e.g. each round's kept successes:
        ``benchmarks.self_imitation``, or a list of their ``.npz`` files), concatenated with the demos once
        (:meth:`sft_trajectories`); a generator or a list of files leaves only that concatenation's copy of
        their frames in memory while SFT trains, where a list of datasets keeps its own too. ``init``: a
        saved policy folder training starts from (fine-tuning; None: the config's ``sft.init``, by
        default a fresh initialisation). ``num_threads``: torch threads of the training (None: the
        run's ``num_threads``). ``drop_tasks``: task ids whose episodes in ``extra`` are left out (the demos
        are kept whole). ``whole_files``: ``.npz`` files of more episodes cloned whole, whatever ``drop_tasks``
        says (self-imitation's real successes, ``self_imitation.clone_real``). Resumes from ``out/checkpoints``."""
        from policies.train import TrainPolicyConfig, train_policy
        from policies.vla.configuration_vla import VLAConfig
        from wmrl.config import to_dataclass

        pol = to_dataclass({**self.cfg.policy, "image_size": self.cfg.image_size}, VLAConfig, where="policy.")
        sft = {**self.cfg.sft, **({} if steps is None else {"steps": int(steps)})}
        tc = to_dataclass({"seed": self.cfg.seed, "device": str(self.device), **sft}, TrainPolicyConfig, where="sft.")
        tc = dataclasses.replace(
            tc,
            dataset=str(self.data_root),
            out=str(out),
            policy=pol,
            num_threads=self.cfg.num_threads if num_threads is None else int(num_threads),
            **({} if init is None else {"init": str(init)}),
        )
        # passed without a local name: train_policy holds the only reference to the concatenation
        _, summary = train_policy(tc, self.sft_trajectories(extra, drop_tasks, whole_files), progress=self.progress)
        return {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in summary.items()
            if isinstance(v, (int, float, str, bool, Path))
        }

    def sft_trajectories(self, extra: Any = None, drop_tasks: Any = (), whole_files: Any = ()) -> Any:
        """The episodes SFT clones: the demos (only the successful ones with ``sft_successful_only``) plus
        ``extra`` (a ``wmrl.data.Trajectories``, an iterable of them, a list of paths to files written by
        ``wmrl.data.save_trajectories_npz``, or None), concatenated once. A generator's episodes are loaded
        for the concatenation only: none of them outlives it. Files' frames are decompressed straight into
        the concatenation (``wmrl.data.concat_with_npz``), so no file's frames are held beside it.
        ``drop_tasks``: task ids whose episodes in ``extra`` are left out. ``whole_files``: ``.npz`` files
        whose episodes are all cloned, after ``extra``'s, whatever ``drop_tasks`` says."""
        from wmrl.data import Trajectories, concat_with_npz

        whole = [Path(p) for p in whole_files]
        files = extra is None or (isinstance(extra, (list, tuple)) and bool(extra)
                                  and all(isinstance(e, (str, Path)) for e in extra))
        if whole and not files:
            raise TypeError("sft_trajectories: whole_files goes with extra given as a list of .npz files or None")
        traj = self.trajectories()
        if self.cfg.sft_successful_only:
            ok = np.flatnonzero(np.asarray(traj.episode_success, bool))
            if len(ok) == 0:
                raise WmrlError(
                    f"sft_successful_only: none of the {traj.num_episodes} demo episodes succeeded"
                )
            traj = traj.select_episodes(ok)
        if extra is None and not whole:
            return traj
        drop = set(drop_tasks)
        if files:
            return concat_with_npz(traj, [*(extra or []), *whole], drop_tasks=drop, whole=whole)

        def without(t: Trajectories) -> Trajectories:
            ok = t.episodes_not_of(drop)
            return t if len(ok) == t.num_episodes else t.select_episodes(ok)

        return Trajectories.concat([traj, *(without(t) for t in ([extra] if isinstance(extra, Trajectories) else extra))])

    def evaluate(self, policy: Any, name: str) -> dict:
        return evaluate_in_sim(policy, self.cfg, self.run.videos / name, self.progress)

    # -- models
    def load_models(self, round_idx: int):
        """World model, success model and executability reward as of the start of RL round ``round_idx``
        (the world model with the run's object dynamics attached when ``object_dynamics.enabled``)."""
        return round_models(
            self.root,
            round_idx,
            round_object_dynamics(self.root, round_idx) if self.cfg.object_dynamics_config() else None,
            device=self.device,
        )

    def policy_after(self, round_idx: int):
        from policies import load_policy

        folder = self.root / "sft" if round_idx < 0 else self.root / f"round_{round_idx}"
        return load_policy(folder / "policy", map_location=str(self.device))

    def trained_policy_dir(self, q: int) -> Path:
        """Round ``q``'s trained policy before any averaging (``coevolution.average_rounds``): the
        self-imitation fine-tune's (``round_q/self_imitation/policy``), else ``round_q/policy_trained``
        (written where rounds are averaged), else ``round_q/policy``."""
        out = self.root / f"round_{q}"
        for folder in (out / "self_imitation" / "policy", out / "policy_trained"):
            if (folder / "config.json").is_file():
                return folder
        return out / "policy"

    def save_round_policy(self, r: int, trained: Any, phase: str) -> tuple[Any, list[int]]:
        """Save round ``r``'s policy from its ``trained`` policy and return it with the rounds it averages.

        ``coevolution.average_rounds`` K = 1, and round 0: ``round_r/policy`` is ``trained``. K > 1: the
        trained policy is kept (``phase`` "self_imitation": already in ``round_r/self_imitation/policy``;
        otherwise saved to ``round_r/policy_trained``) and ``round_r/policy`` is the uniform weight average
        of rounds max(0, r-K+1)..r's trained policies (:func:`policies.weight_average.average_policies`)."""
        from policies import load_policy
        from policies.weight_average import average_policies

        out = self.root / f"round_{r}"
        rounds = list(range(max(0, r - self.cfg.coevolution_config().average_rounds + 1), r + 1))
        if len(rounds) == 1:
            trained.save_pretrained(out / "policy")
            return trained, rounds
        if phase != "self_imitation":
            trained.save_pretrained(out / "policy_trained")
        average_policies([self.trained_policy_dir(q) for q in rounds], out / "policy")
        return load_policy(out / "policy", map_location=str(self.device)), rounds

    def rl(
        self,
        env: Any,
        policy: Any,
        out: Path,
        seed_offset: int,
        max_env_steps: float | None = None,
        max_chunks: int | None = None,
    ) -> list:
        from imagination.grpo import train_grpo
        from imagination.ppo import train_ppo
        from wmrl.runs import RunDir

        algo, rcfg = self.cfg.rl_config()
        rcfg = dataclasses.replace(rcfg, seed=self.cfg.seed * 100 + seed_offset)
        if max_env_steps is not None:  # a budgeted run stops on real-env steps, not iterations
            rcfg = dataclasses.replace(rcfg, iterations=1_000_000)
        if max_chunks is not None and hasattr(rcfg, "max_chunks"):
            rcfg = dataclasses.replace(rcfg, max_chunks=max_chunks)
        run = RunDir(out / "rl", {"algo": algo, **dataclasses.asdict(rcfg)})
        if algo == "grpo":
            ref = copy.deepcopy(policy).requires_grad_(False) if rcfg.kl_coef > 0 else None
            return train_grpo(
                env,
                policy,
                rcfg,
                run=run,
                ref_policy=ref,
                progress=self.progress,
                max_env_steps=max_env_steps,
            )
        return train_ppo(env, policy, rcfg, run=run, progress=self.progress, max_env_steps=max_env_steps)

    def imagination_config(self):
        """The run's ``ImaginedEnvConfig``, with the calibrated success threshold (and persistence)
        once there is one."""
        return calibrated_imagination_config(self.root, self.cfg)

    def calibrate_success(self, wm: Any, sm: Any, exe: Any) -> dict:
        """Paired SFT episodes in both worlds -> the success threshold (written once, reused on resume)."""
        import envs
        from imagination.calibration import calibrate_success_persistence, paired_episodes

        path = self.root / "round_0" / "success_calibration.json"
        if path.exists():
            return json.loads(path.read_text())
        policy, tasks = self.policy_after(-1), self.tasks()
        n = self.cfg.success_calibration.episodes_per_task
        horizon = envs.full_episode_chunks(tasks, policy.chunk_size)
        seed = 200_000 + 10_000 * self.cfg.seed  # starts no other stage uses
        configured_cfg = self.cfg.imagination_config()
        pairs = paired_episodes(
            policy,
            wm,
            self.trajectories(),
            tasks,
            n,
            seed,
            horizon,
            image_size=self.cfg.image_size,
            render=self.cfg.render.env_kwargs(),
            imagination=configured_cfg,
            success_model=sm,
            exec_reward=exe,
            gated_pass=False,
        )
        configured = configured_cfg.success_threshold
        try:
            m, cal, j_by_m = calibrate_success_persistence(
                pairs["imagined_p_trace"], pairs["real"], tuple(self.cfg.success_calibration.persistence_frames)
            )
            found: dict[str, Any] = {**cal.to_dict(), "success_persistence": m,
                                     "youden_j_by_persistence": {str(k): v for k, v in j_by_m.items()}}
        except WmrlError as e:  # e.g. every real episode failed: nothing to separate
            found = {"threshold": configured, "success_persistence": configured_cfg.success_persistence,
                     "error": f"{e}; kept the configured threshold {configured}"}
            self._say(f"[yellow]success calibration: {found['error']}[/]")
        out = {
            **found,
            "episodes_per_task": n,
            "seed": seed,
            "real_success": float(pairs["real"].mean()),
            "real_env_steps": float(pairs["real_env_steps"].sum()),
            "configured_threshold": configured,
        }
        atomic_write_json(path, out)
        return out

    def imagined_env(self, wm: Any, sm: Any, exe: Any, keyframes: Any, seed: int):
        from imagination.imagined_env import ImaginedVectorEnv

        return ImaginedVectorEnv(
            wm,
            keyframes,
            success_model=sm,
            exec_reward=exe,
            task_ids=self.tasks(),  # keyframes of other tasks only: a clear DatasetError
            config=self.imagination_config(),
            seed=seed,
        )

    def s_round(self, r: int) -> dict:
        import envs
        from imagination.coevolution import coevolve_models, policy_chunk_fn, record_rollouts
        from imagination.self_imitation import POLICY_ROLLOUTS, fit_round_zero_world, self_imitation_round
        from wmrl.data import Trajectories, load_trajectories_npz, save_trajectories_npz

        out = self.root / f"round_{r}"
        out.mkdir(exist_ok=True)
        policy = self.policy_after(r - 1)
        summary: dict[str, Any] = {"round": r}
        self_imitation = self.cfg.self_imitation_config().enabled
        if r > 0:
            cc = self.cfg.coevolution_config()
            rollouts_dir = out / "rollouts.npz"
            if not (out / "world_model").exists():
                wm, sm, _ = self.load_models(r - 1)
                env = envs.make_vec(
                    self.cfg.suite,
                    min(16, cc.episodes_per_round),
                    **self.env_kwargs(),
                    autoreset_mode="same_step",
                    seed=self.cfg.seed + 7000 + r,
                )
                traj_new, st = record_rollouts(
                    env,
                    policy_chunk_fn(policy, deterministic=cc.deterministic_rollouts),
                    cc.episodes_per_round,
                    policy.chunk_size,
                    seed=self.cfg.seed + 7000 + r,
                )
                env.close()
                save_trajectories_npz(rollouts_dir, traj_new)
                earlier = [load_trajectories_npz(self.root / f"round_{q}" / "rollouts.npz") for q in range(1, r)]
                dataset = self.trajectories()
                for past in earlier:
                    dataset = _concat_weighted(dataset, past, cc)
                _, fst = coevolve_models(wm, sm, dataset, traj_new, cc, seed=self.cfg.seed + r)
                if self.cfg.refit_object_dynamics_each_round():  # the dynamics of every real step so far
                    first = self.root / "round_0" / POLICY_ROLLOUTS  # self-imitation's round-0 episodes
                    pol = [load_trajectories_npz(first)] if first.is_file() else []
                    fit = self.fit_object_dynamics(
                        Trajectories.concat([self.trajectories(), *pol, *earlier, traj_new]),
                        out / RUN_OBJECT_DYNAMICS,
                        1000 * r + self.cfg.seed,
                        init=round_object_dynamics(self.root, r - 1),  # the model the round started from
                        fine_tune=self.cfg.object_dynamics_warm_refit(),
                    )
                    fst = {**fst, **{f"object_dynamics_{k}": v for k, v in fit.items() if isinstance(v, (int, float))}}
                sm.save_pretrained(out / "success")
                wm.save_pretrained(out / "world_model")  # the marker of a finished fine-tune: written last
                atomic_write_json(out / "rollout_stats.json", {**st, **fst})
            summary.update(json.loads((out / "rollout_stats.json").read_text()))
            summary["real_env_steps"] = summary["env_steps"]
        else:
            summary["real_env_steps"] = 0.0
            if self_imitation:  # round 0's world: the demos + the SFT policy's episodes
                _, steps = fit_round_zero_world(self, out)
                summary["real_env_steps"] = summary["policy_episodes_real_env_steps"] = steps
        if self_imitation:  # reads the round's state model only, not the world model or reward models
            si = self_imitation_round(self, r, out, round_object_dynamics(self.root, r))
            summary.update(si)
            summary["real_env_steps"] += si["prefix_real_env_steps"] + si["gate_real_env_steps"]
            summary["eval"] = self.evaluate(self.policy_after(r), f"round_{r}")
            return summary
        wm, sm, exe = self.load_models(r)
        if r == 0 and self.cfg.success_calibration.episodes_per_task > 0:
            cal = self.calibrate_success(wm, sm, exe)
            summary["success_calibration"] = cal
            summary["real_env_steps"] = cal["real_env_steps"]
        keyframes = self.trajectories()
        if r > 0:
            keyframes = _concat_weighted(
                keyframes, load_trajectories_npz(out / "rollouts.npz"), self.cfg.coevolution_config()
            )
        env = self.imagined_env(wm, sm, exe, keyframes, seed=self.cfg.seed + 31 * r)
        hist = self.rl(env, policy, out, seed_offset=r)
        policy, summary["averaged_rounds"] = self.save_round_policy(r, policy, "rl")
        summary["imagined_steps"] = float(env.imagined_steps)
        summary["rl_iterations"] = len(hist)
        summary["policy_updates"] = policy_updates(hist)
        summary["imagined_success_last"] = (
            float(hist[-1].get("success_rate", hist[-1].get("episode_success", 0.0))) if hist else 0.0
        )
        summary["gated_frac"] = (
            float(1.0 - np.mean([h.get("valid_frac", 1.0) for h in hist])) if hist else 0.0
        )
        summary["eval"] = self.evaluate(policy, f"round_{r}")
        return summary

    def real_rl_env(self, per_env: list[str]) -> Any:
        return real_rl_env(self.cfg, per_env)

    def s_real_rl(
        self,
        budget: float | None,
        world: Any = None,
        name: str = "real_rl",
        rl_seed: int = 0,
        tag: str = "",
        init_policy: Path | None = None,
    ) -> dict:
        """RL from the SFT policy (``init_policy``: from that saved policy instead) from the real simulator's starts (t=0, full episodes; GRPO groups share a
        task and a start), then the real evaluation; written to ``RUN/<name>``. ``budget``: real env steps
        (0: no RL; None: the config's ``rl.iterations``). ``world``: None trains in the real simulator
        (the baseline); else a function of the real (same-step) vector env returning the env RL trains
        in instead, from the real env's resets (``benchmarks.state_model_rl``); its ``real_sim_calls``
        (if it has them) are reported, and its real env steps are its real prefixes' (the trainers'
        ``real_prefix_steps``; 0 for a world without them). ``rl_seed``: 0 gives the RL seed
        ``seed * 100 + 999`` (its starts and noise); N > 0 an independent repeat (offset ``999 + 1000 * N``).
        ``tag``: a later point of the same RL run (resumed from its last checkpoint and trained on to the
        larger ``budget``) saves its policy as ``policy<tag>`` and its evaluation videos as ``<name><tag>``."""
        import envs
        from envs.wrappers import ActionChunkWrapper

        if init_policy is None:
            policy = self.policy_after(-1)
        else:
            from policies import load_policy

            policy = load_policy(init_policy, map_location=str(self.device))
        algo, rcfg = self.cfg.rl_config()
        g = getattr(rcfg, "group_size", 1)
        n = self.cfg.real_rl_num_envs
        tasks = self.tasks()
        per_env = rl_task_layout(tasks, n, g)
        real = self.real_rl_env(per_env)
        trained_in = real if world is None else world(real)
        # GRPO reads frames at chunk ends only; PPO bootstraps from final frames, which may fall inside a chunk
        env = ActionChunkWrapper(trained_in, policy.chunk_size, frames="chunk_end" if algo == "grpo" else "all")
        out = self.root / name
        out.mkdir(exist_ok=True)
        summary: dict[str, Any] = {"real_env_steps_budget": budget}
        hist = []
        if budget is None or budget > 0:
            # real episodes start at t=0 and need their full length (no keyframe starts here)
            hist = self.rl(
                env,
                policy,
                out,
                seed_offset=999 + 1000 * rl_seed,
                max_env_steps=budget,
                max_chunks=envs.full_episode_chunks(tasks, policy.chunk_size),
            )
        steps = float(sum(h.get("env_steps", 0.0) for h in hist))
        # a world's real steps are its real prefixes', from the whole history (a resumed run's too)
        prefix = float(sum(h.get("real_prefix_steps", 0.0) for h in hist))
        summary["real_env_steps"] = steps if world is None else prefix
        summary["rl_iterations"] = len(hist)
        summary["policy_updates"] = policy_updates(hist)
        if world is not None:
            summary["world_env_steps"] = steps
            # this invocation's calls only (a resumed run's earlier ones are not in them)
            summary["real_sim_calls"] = dict(getattr(trained_in, "real_sim_calls", {}))
        env.close()
        policy.save_pretrained(out / f"policy{tag}")
        summary["eval"] = self.evaluate(policy, name + tag)
        return summary

    def s_report(self) -> dict:
        from imagination.report import write_report

        return write_report(self)

    # -- driver
    def world_models(self) -> None:
        """The world model and, when enabled, the object dynamics fitted beside it."""
        self.stage("world_model", self.s_world_model)
        if self.cfg.fits_object_dynamics_on_demos():
            self.stage("object_dynamics", self.s_object_dynamics)

    #: stages that need no world model, in the order the background child runs them beside it: SFT, then
    #: those of :attr:`SHARED_BACKGROUND_STAGES` that the parent has not claimed
    BACKGROUND_STAGES = ("sft", "eval_sft", "idm")
    #: stages either side may run, whichever is free first (:func:`claim_stage`): the IDM needs neither the
    #: world model nor SFT; SFT's evaluation needs SFT, so the parent never finds it free
    SHARED_BACKGROUND_STAGES = ("eval_sft", "idm")

    def world_models_beside_background_stages(self, total: int) -> None:
        """:meth:`world_models` on one share of ``total`` threads while the unfinished
        :attr:`BACKGROUND_STAGES` run in a child process on the other share
        (:func:`imagination.background_stage.thread_shares`); then wait for them.

        Which side finishes first depends on the machine: on the 2-core AVX2 machine the world model
        (about 840 s on one thread) outlasts SFT (about 660 s); on an AVX-512 one SFT (300 s) outlasts
        it (240 s). So the stages of :attr:`SHARED_BACKGROUND_STAGES` go to whichever side is free
        first: the child takes them after SFT, the parent the IDM after the world model, each by
        claiming it (:func:`claim_stage`). Both sides run them on the child's thread count, so their
        weights do not depend on which side did. The wait for the child counts once, on the first of
        its stages (``waited_s``; 0 on the others)."""
        from imagination.background_stage import BackgroundStage, last_logged_step, thread_shares

        mine, child = thread_shares(total)
        names = tuple(n for n in self.BACKGROUND_STAGES if self.done(n) is None)
        bg = None
        if names:
            claims = self.root / "stages_claimed"
            shutil.rmtree(claims, ignore_errors=True)  # an interrupted split's claims: its unfinished stages run again
            claims.mkdir()
            self._say(f"[stage] {', '.join(names)}: in a child process on {child} thread(s), beside the world "
                      f"model on {mine}")
            bg = BackgroundStage("/".join(names), _stages_in_background, (self.cfg, child, names), child,
                                 self.root / "background_stages.json")
        torch.set_num_threads(mine)
        try:
            self.world_models()
            if "idm" in names and claim_stage(self.root, "idm"):  # the child is still busy: take the IDM
                torch.set_num_threads(child)
                self._say(f"[stage] idm: here on {child} thread(s), while the child process goes on")
                self.mark("idm", {**_timed(self.s_idm), "num_threads": child})
        except BaseException:
            if bg is not None:
                bg.stop()
            raise
        finally:
            torch.set_num_threads(total)
        for n in self.BACKGROUND_STAGES:
            if n not in names:
                self._say(f"[skip] {n} (done: {self.root / 'stages' / (n + '.json')})")
        if bg is None:
            return
        left = [n for n in names if self.done(n) is None]
        self._say(f"[stage] {', '.join(left) or 'nothing left'}: waiting for the child process")
        bar = (last_logged_step(self.root / "sft" / "metrics.jsonl"), self.cfg.sft.get("steps")) if "sft" in names else (None, None)
        report = bg.join(*bar, show=self.progress)
        waited = report.pop("waited_s")
        for i, n in enumerate(report):
            self.mark(n, {**report[n], "background": True, "num_threads": child, "waited_s": waited if i == 0 else 0.0})

    #: stages :meth:`run_only` runs, each with the stages it needs finished first (``rewards`` runs the
    #: ``idm`` stage first when it is not finished: the two make the run's reward models)
    SINGLE_STAGES = {
        "demos": (),
        "world_model": ("demos",),
        "object_dynamics": ("demos",),
        "sft": ("demos",),
        "idm": ("demos",),
        "rewards": ("demos", "world_model"),
    }

    @classmethod
    def check_single_stages(cls, names: list[str]) -> None:
        """A one-line ``ConfigError`` for a name in ``names`` that is not one of :attr:`SINGLE_STAGES`."""
        for n in names:
            if n not in cls.SINGLE_STAGES:
                raise ConfigError(f"--only {n!r}: expected one of {', '.join(cls.SINGLE_STAGES)}")

    def run_only(self, names: list[str]) -> dict[str, dict]:
        """Run just the stages ``names`` (of :attr:`SINGLE_STAGES`, in that order), e.g. the world model
        on a GPU machine: copy the run folder back, and ``wmrl run`` there goes on from the stages
        finished. A stage whose inputs are not finished yet is a one-line ``ConfigError``."""
        bodies = {"demos": self.s_demos, "world_model": self.s_world_model, "object_dynamics": self.s_object_dynamics,
                  "sft": self.s_sft, "idm": self.s_idm, "rewards": self.s_rewards}
        self.check_single_stages(names)
        if self.cfg.num_threads:
            torch.set_num_threads(self.cfg.num_threads)
        from wmrl.runs import seed_everything

        seed_everything(self.cfg.seed)
        out = {}
        for n in [n for n in self.SINGLE_STAGES if n in names]:
            missing = [d for d in self.SINGLE_STAGES[n] if self.done(d) is None]
            if missing:
                raise ConfigError(f"--only {n}: stage(s) {', '.join(missing)} of {self.root} are not finished; run them first")
            if n == "object_dynamics" and self.cfg.object_dynamics_config() is None:
                raise ConfigError("--only object_dynamics: object_dynamics.enabled is false in this run's config")
            if n == "demos":
                out[n] = self.stage(n, self.s_demos)
                self.check_demo_render()
            else:
                if n == "rewards" and "idm" not in out:
                    out["idm"] = self.stage("idm", self.s_idm)
                out[n] = self.stage(n, bodies[n])
        return out

    def run_all(self) -> dict:
        cfg = self.cfg
        if cfg.num_threads:
            torch.set_num_threads(cfg.num_threads)
        from wmrl.runs import seed_everything

        seed_everything(cfg.seed)
        self.stage("demos", self.s_demos)
        self.check_demo_render()
        total = torch.get_num_threads()
        beside = cfg.sft_beside_world_model and total >= 2
        if beside:
            self.world_models_beside_background_stages(total)
        else:
            self.world_models()
        self.stage("idm", self.s_idm)  # done beside the world model, unless the stages run one after the other
        self.stage("rewards", self.s_rewards)
        self.stage("sft", self.s_sft)
        self.stage("eval_sft", self.s_eval_sft)
        rounds = self.cfg.coevolution_config().rounds
        for r in range(rounds + 1):
            self.stage(f"round_{r}", lambda r=r: self.s_round(r))
        budget = float(sum(self.done(f"round_{r}")["real_env_steps"] for r in range(rounds + 1)))
        if cfg.real_rl_baseline:
            self.set_aside_real_rl_beyond(budget)
            self.stage("real_rl", lambda: self.s_real_rl(budget), inputs={"real_env_steps_budget": budget})
        read = ["eval_sft", *(f"round_{r}" for r in range(rounds + 1)), "real_rl"]
        summary = self.stage("report", self.s_report, inputs={"stages": self.marker_digests(read)})
        return summary

    def marker_digests(self, names: list[str]) -> dict[str, str | None]:
        """Each stage of ``names``: a digest of its marker's content (None: no marker), so a stage that
        read them (the report) can tell when one has changed or a new one has come."""
        out: dict[str, str | None] = {}
        for n in names:
            p = self.root / "stages" / f"{n}.json"
            out[n] = hashlib.sha256(p.read_bytes()).hexdigest()[:16] if p.exists() else None
        return out

    def set_aside_real_rl_beyond(self, budget: float) -> None:
        """Before the real-RL baseline runs for ``budget`` real env steps: a baseline whose checkpoint
        holds iterations a run to ``budget`` would not take (it ran to a larger budget: a resumed run
        with fewer co-evolution rounds) cannot be cut back, so its folder (and its stage marker, as
        ``stage_real_rl.json``) moves to ``RUN/real_rl.budget_<its budget>`` and the stage starts
        afresh. Any other resumes from its last checkpoint and trains on to ``budget``, ending as a run
        to ``budget`` from scratch would (:func:`imagination.trainer_utils.takes_iterations`)."""
        from imagination.trainer_utils import takes_iterations
        from wmrl.runs import RunDir

        prev = self.done("real_rl")
        if prev is not None and not changed_inputs(prev, {"real_env_steps_budget": budget}):
            return  # finished at this budget: the stage is skipped, its checkpoint need not be read
        prev = prev or {}
        src = self.root / "real_rl"
        if not (src / "rl" / "checkpoints" / "latest").exists():
            return
        ckpt = RunDir(src / "rl").latest_checkpoint()
        history = torch.load(ckpt / "trainer.pt", weights_only=False, map_location="cpu")["history"]
        if takes_iterations(history, budget):
            return
        old = prev.get("real_env_steps_budget")
        base = self.root / (f"real_rl.budget_{old:.0f}" if old is not None else "real_rl.unfinished")
        dest, k = base, 1
        while dest.exists():
            k += 1
            dest = base.with_name(f"{base.name}.v{k}")
        os.replace(src, dest)
        if prev:
            os.replace(self.root / "stages" / "real_rl.json", dest / "stage_real_rl.json")
        used = sum(h.get("env_steps", 0.0) for h in history)
        self._say(f"[set aside] real_rl: its {len(history)} iterations used {used:.0f} real env steps, more than "
                  f"a run to the {budget:.0f} of rounds 0..{self.cfg.coevolution_config().rounds} takes; kept in {dest}")


def run_env_kwargs(cfg: RunConfig) -> dict[str, Any]:
    """``envs.make_vec`` keyword arguments every real env of a run shares (frame size, render)."""
    return {"image_size": cfg.image_size, **cfg.render.env_kwargs()}


def real_rl_env(cfg: RunConfig, per_env: list[str]) -> Any:
    """The real vector env RL in the real simulator collects in: one sub-env per entry of ``per_env``
    (task ids), autoreset on the same step, the run's ``real_rl_reward``."""
    import envs

    dense = {"reward_type": "dense"} if cfg.real_rl_reward == "dense" else {}
    return envs.make_vec(
        per_env, len(per_env), **run_env_kwargs(cfg), **dense, autoreset_mode="same_step", seed=cfg.seed + 999
    )


def evaluate_in_sim(
    policy: Any,
    cfg: RunConfig,
    video_dir: Path | None = None,
    progress: bool = False,
    episodes_per_task: int | None = None,
    seed: int | None = None,
) -> dict:
    """``policy``'s real-simulator evaluation with the run's fixed protocol (``cfg.eval``), one video per
    task in ``video_dir`` (None: none): success, its 95% interval, per task, the outcomes episode by
    episode, and the env steps taken. ``episodes_per_task`` / ``seed`` (None: the protocol's) play the same
    protocol on other starts (episode e of task i from ``seed + 1000 * i + e``)."""
    from benchmarks.policy_eval import evaluate_policy

    e = cfg.eval
    res = evaluate_policy(
        policy,
        cfg.suite,
        e.episodes_per_task if episodes_per_task is None else episodes_per_task,
        seed=e.seed if seed is None else seed,
        num_envs=e.num_envs,
        video_dir=video_dir,
        videos_per_task=1,
        progress=progress,
        render=cfg.render.env_kwargs(),
    )
    return {
        "success": float(res["mean_success"]),
        "ci95": list(res.get("mean_ci95", [])),
        "per_task": {t: float(v["success_rate"]) for t, v in res["tasks"].items()},
        # episode by episode (0/1 in seed order): every phase plays the same starts, so the report
        # can set each against SFT pair by pair
        "outcomes": {t: "".join(str(int(x)) for x in v["outcomes"]) for t, v in res["tasks"].items()},
        "eval_env_steps": float(sum(v["mean_length"] * v["episodes"] for v in res["tasks"].values())),
    }


def _timed(fn) -> dict:
    """``fn()``'s stage summary with its ``stage_time_s`` and ``stage_cpu_s``: CPU seconds of this
    process and its children (simulator workers); on a shared machine the wall time depends on the
    load, the CPU time does not."""
    t, c = time.perf_counter(), _cpu_seconds()
    out = fn()
    out["stage_time_s"] = time.perf_counter() - t
    out["stage_cpu_s"] = _cpu_seconds() - c
    return out


def changed_inputs(marker: dict[str, Any], inputs: dict[str, Any] | None) -> list[str]:
    """How ``inputs`` differ from those a finished stage's ``marker`` recorded (its ``inputs``; a
    marker from before a key was recorded there: the key at its top level), one line per key;
    dict-valued inputs name their entries that changed. Empty: nothing changed, or no ``inputs``."""
    if inputs is None:
        return []
    seen = marker.get("inputs", {})
    out = []
    for key, new in inputs.items():
        old = seen.get(key, marker.get(key))
        if old == new:
            continue
        if isinstance(new, dict):
            old = old if isinstance(old, dict) else {}
            diff = [k for k in new if old.get(k) != new[k]] + [k for k in old if k not in new]
            out.append(f"{key}: {', '.join(diff)}" if old else f"{key}: not recorded before")
        else:
            out.append(f"{key}: {old} -> {new}")
    return out


def claim_stage(root: Path, stage: str) -> bool:
    """True for the first process to claim ``stage`` of :attr:`Pipeline.SHARED_BACKGROUND_STAGES` in run
    folder ``root``: it creates ``root/stages_claimed/<stage>`` exclusively, so exactly one of the parent
    and the background child runs it."""
    try:
        os.close(os.open(root / "stages_claimed" / stage, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _stages_in_background(cfg: RunConfig, threads: int, names: tuple[str, ...]) -> dict:
    """The bodies of stages ``names`` (of :attr:`Pipeline.BACKGROUND_STAGES`), each timed, one after the
    other in a child process on ``threads`` threads (:meth:`Pipeline.world_models_beside_background_stages`):
    ``{name: summary}`` of those it ran (a shared stage the parent claimed first is left to it). Only
    the parent writes their markers."""
    pipe = Pipeline(cfg, progress=False)
    bodies = {"sft": lambda: pipe.train_sft(pipe.root / "sft", num_threads=threads),
              "eval_sft": pipe.s_eval_sft, "idm": pipe.s_idm}
    out = {}
    for n in names:
        if n in Pipeline.SHARED_BACKGROUND_STAGES and not claim_stage(pipe.root, n):
            continue
        try:
            out[n] = _timed(bodies[n])
        except WmrlError as e:  # name the stage that failed (the parent reports the error class)
            raise type(e)(f"{n}: {e}") from e
    return out


# ---------------------------------------------------------------------------------------------- run folders
def run_config_of(root: Path) -> RunConfig:
    """The :class:`RunConfig` a run folder was made with (its ``config.yaml``), for reading the run.

    The real-RL baseline's layout check is skipped (``real_rl_baseline=False``): runs made before
    it was added laid that baseline out with fewer sub-envs, and reading them needs no baseline."""
    from omegaconf import OmegaConf

    from wmrl.config import to_dataclass

    f = Path(root) / "config.yaml"
    if not f.exists():
        raise WmrlError(f"{f} not found; expected a wmrl run folder")
    d = OmegaConf.to_container(OmegaConf.load(f), resolve=True)
    if not isinstance(d, dict):
        raise WmrlError(f"{f} is not a mapping; expected a wmrl run folder's config")
    return to_dataclass({**d, "real_rl_baseline": False}, RunConfig)


def round_models(
    root: Path, round_idx: int, object_dynamics: Path | None = None, device: str | torch.device | None = None
) -> tuple[Any, Any, Any]:
    """``(world model, success model, executability reward)`` of run folder ``root`` as of the start
    of RL round ``round_idx`` (the latest co-evolved world and success model before it); with
    ``object_dynamics`` (a folder written by ``ObjectDynamics.save_pretrained``) that model attached.
    All on ``device`` (``wmrl.devices`` names; None: the CPU)."""
    from rewards import ExecutabilityReward, SuccessRewardModel
    from wmrl.devices import resolve_device
    from worldmodels import load_world_model

    root = Path(root)
    wm_dir, sm_dir = root / "world_model" / "model", root / "rewards" / "success"
    for r in range(round_idx, 0, -1):
        if (root / f"round_{r}" / "world_model").exists():
            wm_dir, sm_dir = root / f"round_{r}" / "world_model", root / f"round_{r}" / "success"
            break
    dev = str(resolve_device(device))
    wm = load_world_model(wm_dir).to(dev).eval()
    if object_dynamics is not None:
        from worldmodels.object_dynamics import ObjectDynamics

        wm.attach_object_dynamics(ObjectDynamics.from_pretrained(object_dynamics))
    sm = SuccessRewardModel.from_pretrained(sm_dir, map_location=dev).eval()
    exe = ExecutabilityReward.from_pretrained(root / "rewards" / "executability", map_location=dev)
    return wm, sm, exe


def round_object_dynamics(root: Path, round_idx: int) -> Path:
    """The object-dynamics folder of run folder ``root`` as of the start of RL round ``round_idx``: the
    latest round's refit (``round_R/object_dynamics``, R <= ``round_idx``: a co-evolution round's, or round
    0's fit on the demos and the SFT policy's episodes with ``self_imitation.policy_episodes``), else the one
    fitted on the demos (``object_dynamics/``)."""
    root = Path(root)
    for r in range(round_idx, -1, -1):
        if (root / f"round_{r}" / RUN_OBJECT_DYNAMICS).exists():
            return root / f"round_{r}" / RUN_OBJECT_DYNAMICS
    return root / RUN_OBJECT_DYNAMICS


def calibrated_imagination_config(root: Path, cfg: RunConfig):
    """``cfg``'s ``ImaginedEnvConfig`` with the success threshold (and persistence) calibrated in
    run folder ``root`` (``round_0/success_calibration.json``), once there is one."""
    icfg = cfg.imagination_config()
    cal = Path(root) / "round_0" / "success_calibration.json"
    if cfg.success_calibration.episodes_per_task > 0 and cal.exists():
        found = json.loads(cal.read_text())
        icfg = dataclasses.replace(
            icfg,
            success_threshold=found["threshold"],
            success_persistence=int(found.get("success_persistence", icfg.success_persistence)),
        )
    return icfg


# ---------------------------------------------------------------------------------------------- helpers
def _motionplanning_demos(pipe: Any) -> dict:
    """Demos stage of ``demos.source=maniskill_motionplanning``: one ManiSkill task, successful
    motion-planning episodes replayed in ``pd_ee_delta_pose`` (:func:`envs.maniskill.demos.generate`)."""
    import envs
    from envs.maniskill.demos import generate

    tasks = pipe.tasks()
    backend = envs.task_spec(tasks[0]).backend
    if backend != "maniskill" or len(tasks) != 1:
        raise ConfigError(
            f"demos.source=maniskill_motionplanning needs suite= one ManiSkill task id; got {pipe.cfg.suite!r}"
            f" (backend {backend!r}, {len(tasks)} tasks)"
        )
    t = time.perf_counter()
    root = generate(
        tasks[0],
        pipe.cfg.demos.episodes_per_task,
        pipe.cfg.image_size,
        pipe.data_root,
        overwrite=pipe.data_root.exists(),
    )
    return {
        "out": str(root),
        "episodes": pipe.cfg.demos.episodes_per_task,
        "source": "maniskill_motionplanning",
        "seconds": time.perf_counter() - t,
    }


def _cpu_seconds() -> float:
    """User + system CPU time of this process and its finished children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _real_clips(traj: Any, length: int, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``count`` real clips: frames uint8 (B, length, H, W, 3) and their actions (B, length-1, A)."""
    starts = traj.window_starts(length, 0)
    if len(starts) == 0:
        raise WmrlError(f"no episode has {length} frames; collect longer demos")
    rng = np.random.default_rng(seed)
    s = rng.choice(starts, size=min(count, len(starts)), replace=False)
    idx = s[:, None] + np.arange(length)[None]
    return traj.images[idx], traj.actions[idx[:, :-1]]


def policy_updates(history: list[dict[str, float]]) -> int:
    """How many of an RL run's iterations updated the policy: GRPO skips the update when dynamic
    sampling and gating keep too few groups (``rl.min_kept_groups``), and logs a loss only when it
    updates; PPO updates every iteration."""
    return int(sum(1 for h in history if "loss" in h or "pg_loss" in h))


def _concat_weighted(dataset: Any, new: Any, cc: Any) -> Any:
    from imagination.coevolution import failure_weights
    from wmrl.data import Trajectories

    return Trajectories.concat([dataset, new.with_weights(failure_weights(new, cc.failure_weight))])


def load_run_config(overrides: list[str], config_name: str = "run") -> RunConfig:
    """Compose ``conf/<config_name>.yaml`` with ``key=value`` overrides into a :class:`RunConfig`."""
    from wmrl.config import load_config, to_dataclass

    return to_dataclass(load_config(config_name, overrides), RunConfig)


def main(argv: list[str]) -> int:
    """``wmrl run [--config-name run|run_quick] [key=value ...]``: the whole loop; prints the results table."""
    p = argparse.ArgumentParser(prog="wmrl run", description=__doc__.split("\n")[0])
    p.add_argument("--config-name", default="run", help="conf/<name>.yaml (run or run_quick)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--only", default=None, metavar="STAGE[,STAGE]",
        help=f"run just these stages ({', '.join(Pipeline.SINGLE_STAGES)}), e.g. the world model on a GPU machine; "
        "rewards runs idm first when it is not finished; a later `wmrl run` on the same folder goes on from them",
    )
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. run_dir=runs/x coevolution.rounds=1")
    a = p.parse_args(argv)
    only = [s.strip() for s in a.only.split(",")] if a.only is not None else None
    Pipeline.check_single_stages(only or [])  # before the run folder is made
    cfg = load_run_config(a.overrides, a.config_name)
    pipe = Pipeline(cfg, progress=not a.no_progress)
    if only:
        for name, summary in pipe.run_only(only).items():
            print(f"{name}: done in {summary.get('stage_time_s', 0):.0f} s ({pipe.root / 'stages' / (name + '.json')})")
        return 0
    pipe.run_all()
    print((Path(cfg.run_dir) / "results.md").read_text())
    return 0


__all__ = [
    "Pipeline",
    "RunConfig",
    "atomic_write_text",
    "calibrated_imagination_config",
    "load_run_config",
    "main",
    "round_models",
    "run_config_of",
]
