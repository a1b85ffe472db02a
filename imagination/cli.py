"""``wmrl imagine``: RL of a saved policy inside a saved world model (one phase of ``wmrl run``).

Usage::

    wmrl imagine --world-model RUN/world_model/model --dataset RUN/data --policy RUN/sft/policy \
        --success-model RUN/rewards/success --exec-reward RUN/rewards/executability --out runs/imagine \
        [rl=ppo] [rl.iterations=20] [imagination.keyframes.strategy=late] [imagination.gate=terminate]

The ``rl`` and ``imagination`` sections come from ``conf/run.yaml`` (and its ``rl`` group), so the
same overrides work here and in ``wmrl run``. The run folder holds metrics, resumable RL
checkpoints and the trained policy in ``OUT/policy``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path


def imagine_main(argv: list[str]) -> int:
    """Entry point of ``wmrl imagine`` (see the module docstring)."""
    p = argparse.ArgumentParser(prog="wmrl imagine", description=__doc__.split("\n")[0])
    p.add_argument("--world-model", required=True, help="world-model folder (save_pretrained)")
    p.add_argument("--dataset", required=True, help="LeRobotDataset of real episodes (keyframes)")
    p.add_argument("--policy", required=True, help="policy folder (save_pretrained)")
    p.add_argument(
        "--success-model", default=None, help="rewards.SuccessRewardModel folder (default: WM head)"
    )
    p.add_argument(
        "--exec-reward", default=None, help="rewards.ExecutabilityReward folder (default: no gating on it)"
    )
    p.add_argument("--tasks", nargs="*", default=None, help="restrict keyframes to these task ids")
    p.add_argument("--out", default="runs/imagine")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of the rl / imagination sections")
    a = p.parse_args(argv)

    from imagination.grpo import train_grpo
    from imagination.imagined_env import ImaginedVectorEnv
    from imagination.pipeline import load_run_config
    from imagination.ppo import train_ppo
    from policies import load_policy
    from rewards import ExecutabilityReward, SuccessRewardModel
    from wmrl.data import load_trajectories
    from wmrl.io import atomic_write_json
    from wmrl.runs import RunDir
    from worldmodels import load_world_model

    bad = [o for o in a.overrides if not o.lstrip("+~").startswith(("rl", "imagination"))]
    if bad:
        from wmrl.errors import ConfigError

        raise ConfigError(f"wmrl imagine takes only rl.* / imagination.* overrides; got {bad}")
    cfg = load_run_config(a.overrides)
    algo, rcfg = cfg.rl_config()
    rcfg = dataclasses.replace(rcfg, seed=a.seed)
    wm = load_world_model(a.world_model).eval()
    sm = SuccessRewardModel.from_pretrained(a.success_model).eval() if a.success_model else None
    exe = ExecutabilityReward.from_pretrained(a.exec_reward) if a.exec_reward else None
    env = ImaginedVectorEnv(
        wm,
        load_trajectories(a.dataset),
        success_model=sm,
        exec_reward=exe,
        task_ids=a.tasks,
        config=cfg.imagination_config(),
        seed=a.seed,
    )
    policy = load_policy(a.policy)
    run = RunDir(
        Path(a.out),
        {
            "algo": algo,
            "rl": dataclasses.asdict(rcfg),
            "imagination": cfg.imagination,
            "world_model": a.world_model,
            "policy": a.policy,
            "dataset": a.dataset,
        },
    )
    if algo == "grpo":
        hist = train_grpo(env, policy, rcfg, run=run, progress=not a.no_progress)
    else:
        hist = train_ppo(env, policy, rcfg, run=run, progress=not a.no_progress)
    policy.save_pretrained(run.path / "policy")
    summary = {
        "iterations": len(hist),
        "imagined_steps": env.imagined_steps,
        "last": hist[-1] if hist else {},
        "policy": str(run.path / "policy"),
    }
    atomic_write_json(run.path / "summary.json", summary)
    print(json.dumps(summary, indent=2, default=str))
    return 0
