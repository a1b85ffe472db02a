"""What does the imagined env's gate mask, and why? Successes and failures gated, per setting.

Usage::

    python -m benchmarks.gate_breakdown [--quick] --out FILE.json [--run-dir RUN] [--episodes N]
        [key=value ...]   # the run's Hydra overrides

Uses a finished ``wmrl run`` folder (made or resumed first, like ``benchmarks.wm_policy_ranking``).
Its SFT policy samples (as in RL) ``N`` imagined episodes from keyframe starts (the same seeds for
every setting) in the round-0 world model, and each episode is counted as gated if any of its
executed chunks had ``gate_ok`` False. Settings: the configured success threshold and the run's
calibrated one (``round_0/success_calibration.json``, when the run has one), each with the default
confidence (every chunk judged, times the success model / world-model head agreement) and with
``confidence_agreement=false, confidence_scope=outcome``. Fields per setting: ``success_rate``,
``gated_frac``, ``successes_gated`` / ``successes``, ``failures_gated`` / ``failures``,
``exec_gated`` (episodes with a chunk below the executability threshold), ``confidence_gated``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch


@torch.no_grad()
def gate_counts(
    pipe: Any, models: tuple, policy: Any, icfg: Any, episodes: int, seed: int
) -> dict[str, float]:
    """Roll ``policy`` (sampling) for ``episodes`` imagined episodes under ``icfg`` in ``models``
    (world model, success model, executability reward: ``pipe.load_models(0)``)."""
    from imagination.imagined_env import ImaginedVectorEnv
    from imagination.rollout_buffer import env_instructions

    wm, sm, exe = models
    icfg = dataclasses.replace(icfg, num_envs=episodes, gate="mask")
    env = ImaginedVectorEnv(
        wm,
        pipe.trajectories(),
        success_model=sm,
        exec_reward=exe,
        task_ids=pipe.tasks(),
        config=icfg,
        seed=seed,
    )
    torch.manual_seed(seed)
    obs, info = env.reset(seed=[seed + i for i in range(episodes)])
    n = episodes
    alive, succ = np.ones(n, bool), np.zeros(n, bool)
    gated, exec_bad, conf_bad = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, bool)
    for _ in range(icfg.horizon):
        a = policy.act(obs, env_instructions(env, info), deterministic=False).actions
        obs, _, term, trunc, info = env.step(np.asarray(a.cpu(), np.float32))
        gated |= alive & ~np.asarray(info["gate_ok"], bool)
        exec_bad |= alive & (np.nan_to_num(info["exec_score"], nan=1.0) < icfg.exec_threshold)
        conf_bad |= alive & ~np.asarray(info["gate_ok"], bool) & ~exec_bad
        succ |= alive & np.asarray(info["success"], bool)
        alive &= ~(np.asarray(term) | np.asarray(trunc))
        if not alive.any():
            break
    return {
        "success_threshold": float(icfg.success_threshold),
        "confidence_scope": icfg.confidence_scope,
        "confidence_agreement": bool(icfg.confidence_agreement),
        "episodes": n,
        "success_rate": float(succ.mean()),
        "gated_frac": float(gated.mean()),
        "successes": int(succ.sum()),
        "successes_gated": int((gated & succ).sum()),
        "failures": int((~succ).sum()),
        "failures_gated": int((gated & ~succ).sum()),
        "exec_gated": int(exec_bad.sum()),
        "confidence_gated": int(conf_bad.sum()),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default="benchmarks/results/gate_breakdown.json")
    p.add_argument("--run-dir", default=None, help="a wmrl run folder (default as wm_policy_ranking)")
    p.add_argument("--episodes", type=int, default=None)
    p.add_argument("--seed", type=int, default=123)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of the run config (as given to the run)")
    a = p.parse_args(argv)
    from benchmarks.imagination_lift import environment_info
    from imagination.pipeline import Pipeline, load_run_config
    from wmrl.io import atomic_write_json

    t0 = time.perf_counter()
    run_dir = Path(
        a.run_dir or ("runs/imagination_lift_quick/seed_0" if a.quick else "runs/imagination_lift/seed_0")
    )
    cfg = load_run_config([*a.overrides, f"run_dir={run_dir}"], "run_quick" if a.quick else "run")
    pipe = Pipeline(cfg, progress=not a.no_progress)
    pipe.run_all()
    episodes = a.episodes or (8 if a.quick else 64)
    base = cfg.imagination_config()
    thresholds = {"configured": base.success_threshold}
    cal = run_dir / "round_0" / "success_calibration.json"
    if cal.exists():
        thresholds["calibrated"] = float(json.loads(cal.read_text())["threshold"])
    settings: dict[str, Any] = {}
    models, policy = pipe.load_models(0), pipe.policy_after(-1)  # the round-0 world and the SFT policy
    for tname, thr in thresholds.items():
        for cname, kw in (
            ("default", {"confidence_scope": "step", "confidence_agreement": True}),
            ("outcome_no_agreement", {"confidence_scope": "outcome", "confidence_agreement": False}),
        ):
            icfg = dataclasses.replace(base, success_threshold=thr, **kw)
            settings[f"{tname}_{cname}"] = r = gate_counts(pipe, models, policy, icfg, episodes, a.seed)
            if not a.no_progress:
                print(f"{tname}_{cname}: {r}")
    res = {
        "settings": settings,
        "run_dir": str(run_dir),
        "episodes": episodes,
        "seed": a.seed,
        "quick": a.quick,
        "wall_time_s": time.perf_counter() - t0,
        "machine": environment_info(),
    }
    atomic_write_json(a.out, res)
    print(
        json.dumps({k: (v["gated_frac"], v["successes_gated"], v["successes"]) for k, v in settings.items()})
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
