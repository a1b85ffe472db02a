"""Does the world model rank policies the way the real simulator does?

Usage::

    python -m benchmarks.wm_policy_ranking [--quick] --out benchmarks/results/wm_policy_ranking.json
        [--run-dir RUN] [--episodes-per-task N] [--calibration-episodes-per-task N]
        [key=value ...]   # the run's Hydra overrides

Uses a finished ``wmrl run`` folder (its world model, success / executability reward models and
policies; the run is made, or resumed, first). Every policy runs from the *same* real starts in
both worlds: the real env is reset with fixed seeds, and the imagined env starts from those
first real frames (``ImaginedVectorEnv.reset_to``), so each episode gives a (imagined, real)
success pair. Policies (>= 6, varied quality): the SFT policy, the RL-in-imagination and
co-evolution checkpoints, the real-RL baseline, the SFT policy with Gaussian action noise at
several levels, and a uniform random policy. (The scripted experts read the simulator's
privileged state, which a world model does not have, so they cannot act inside it.)

``threshold_sweep``: the same statistics if imagined success meant "the success probability ever
reached t" (from a second imagined pass that never stops on success), for a range of t.
``calibrated``: the same statistics at one threshold chosen *before* looking at these episodes:
the SFT policy runs alone from other real starts (seed + 500000, ``--calibration-episodes-per-task``,
24 by default) in both worlds, and :func:`imagination.calibration.calibrate_success_threshold`
takes the threshold with the best Youden's J against their real outcomes (``calibration`` records
it); ``goal.met_calibrated`` judges that Spearman.
Fields: ``pearson``, ``spearman``, ``mmrv`` (mean maximum rank violation, lower is better),
``policies`` (per-policy imagined vs real success), and ``refuted`` (imagined successes the real
simulator refutes, counted over all imagined successes and over those that passed gating),
``episode_agreement`` (per policy and mean: the fraction of paired episodes whose imagined outcome
equals the real one).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch


class NoisyPolicy:
    """A policy whose chunks get Gaussian noise (clipped to [-1, 1]): a controlled, worse policy."""

    def __init__(self, policy: Any, sigma: float, seed: int = 0):
        self.policy, self.sigma = policy, float(sigma)
        self.chunk_size, self.action_dim, self.image_size = (
            policy.chunk_size,
            policy.action_dim,
            policy.image_size,
        )
        self.config = getattr(policy, "config", None)
        self.gen = torch.Generator().manual_seed(seed)

    @torch.no_grad()
    def act(self, obs: dict, instructions: list[str], deterministic: bool = False):
        out = self.policy.act(obs, instructions, deterministic=deterministic)
        noise = torch.randn(out.actions.shape, generator=self.gen) * self.sigma
        out.actions = (out.actions.cpu() + noise).clamp(-1.0, 1.0)
        return out


class RandomPolicy:
    """Uniform random chunks in [-1, 1]."""

    def __init__(self, chunk_size: int, image_size: int, action_dim: int = 7, seed: int = 0):
        self.chunk_size, self.action_dim, self.image_size = chunk_size, action_dim, image_size
        self.gen = torch.Generator().manual_seed(seed)

    def act(self, obs: dict, instructions: list[str], deterministic: bool = False):
        from types import SimpleNamespace

        b = len(instructions)
        a = torch.rand((b, self.chunk_size, self.action_dim), generator=self.gen) * 2 - 1
        return SimpleNamespace(actions=a, log_prob=torch.zeros(b), entropy=torch.zeros(b), value=None)


def paired_episodes(
    policy: Any,
    pipe: Any,
    tasks: list[str],
    episodes_per_task: int,
    seed: int,
    horizon_chunks: int,
    gated_pass: bool = True,
) -> dict[str, np.ndarray]:
    """:func:`imagination.calibration.paired_episodes` with the models of the run's last round."""
    from imagination.calibration import paired_episodes as run_pairs

    wm, sm, exe = pipe.load_models(pipe.cfg.coevolution_config().rounds)
    return run_pairs(
        policy,
        wm,
        pipe.trajectories(),
        tasks,
        episodes_per_task,
        seed,
        horizon_chunks,
        image_size=pipe.cfg.image_size,
        imagination=pipe.imagination_config(),  # the calibrated threshold where the run has one
        success_model=sm,
        exec_reward=exe,
        gated_pass=gated_pass,
    )


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks (1..n) with ties given their average rank."""
    _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    return ((ends - counts + 1 + ends) / 2.0)[inv]


def rank_stats(imagined: np.ndarray, real: np.ndarray) -> dict[str, float | None]:
    """Pearson, Spearman and MMRV of per-policy success rates (None where undefined)."""
    out: dict[str, float | None] = {"pearson": None, "spearman": None}
    if np.std(imagined) > 0 and np.std(real) > 0:
        out["pearson"] = float(np.corrcoef(imagined, real)[0, 1])
        out["spearman"] = float(np.corrcoef(_ranks(imagined), _ranks(real))[0, 1])
    # MMRV (SIMPLER): for each policy, the largest real-success gap to a policy the WM orders the other way
    n = len(real)
    viol = [
        max(
            [abs(real[i] - real[j]) for j in range(n) if (imagined[i] < imagined[j]) != (real[i] < real[j])]
            or [0.0]
        )
        for i in range(n)
    ]
    out["mmrv"] = float(np.mean(viol)) if n else None
    return out


CALIBRATION_SEED_OFFSET = 500_000  # calibration starts: seed + 500000 + 1000 * task + episode

SWEEP_THRESHOLDS = (0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98)


def threshold_sweep(pairs: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, float | None]]:
    """Ranking statistics if imagined success meant ``imagined_max_p >= t``, for each sweep threshold
    t: how much of the ranking error is the threshold's, and how much the probabilities'."""
    real = np.array([p["real"].mean() for p in pairs.values()])
    out = {}
    for t in SWEEP_THRESHOLDS:
        imag_eps = {n: p["imagined_max_p"] >= t for n, p in pairs.items()}
        imag = np.array([v.mean() for v in imag_eps.values()])
        out[str(t)] = {
            **rank_stats(imag, real),
            "episode_agreement": float(
                np.mean([(imag_eps[n] == p["real"]).mean() for n, p in pairs.items()])
            ),
            "mean_imagined_success": float(imag.mean()),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default="benchmarks/results/wm_policy_ranking.json")
    p.add_argument(
        "--run-dir", default=None, help="a wmrl run folder (default runs/imagination_lift[_quick]/seed_0)"
    )
    p.add_argument("--episodes-per-task", type=int, default=None)
    p.add_argument(
        "--calibration-episodes-per-task",
        type=int,
        default=None,
        help="SFT episodes per task, from starts the ranking never uses, that calibrate the threshold",
    )
    p.add_argument("--seed", type=int, default=4242)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of the run config (as given to the run)")
    a = p.parse_args(argv)
    import envs
    from benchmarks.imagination_lift import environment_info
    from imagination.calibration import calibrate_success_threshold
    from imagination.pipeline import Pipeline, load_run_config
    from policies import load_policy
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    t0 = time.perf_counter()
    config_name = "run_quick" if a.quick else "run"
    run_dir = Path(
        a.run_dir or ("runs/imagination_lift_quick/seed_0" if a.quick else "runs/imagination_lift/seed_0")
    )
    cfg = load_run_config([*a.overrides, f"run_dir={run_dir}"], config_name)
    pipe = Pipeline(cfg, progress=not a.no_progress)
    pipe.run_all()  # makes the run, or resumes it (finished stages are skipped)
    eps = a.episodes_per_task or (4 if a.quick else 12)
    tasks = pipe.tasks()
    sft = load_policy(run_dir / "sft" / "policy")
    cands: dict[str, Any] = {"sft": sft}
    for r in range(cfg.coevolution_config().rounds + 1):
        cands[f"imagination_round_{r}"] = load_policy(run_dir / f"round_{r}" / "policy")
    if (run_dir / "real_rl" / "policy").exists():
        cands["real_rl"] = load_policy(run_dir / "real_rl" / "policy")
    for sigma in (0.3, 0.6, 1.0):
        cands[f"sft_noise_{sigma}"] = NoisyPolicy(sft, sigma, seed=int(sigma * 10))
    cands["random"] = RandomPolicy(sft.chunk_size, sft.image_size)
    horizon = -(-max(envs.task_spec(t).max_episode_steps for t in tasks) // sft.chunk_size)
    rows, refuted = {}, {"all": 0, "all_imagined_successes": 0, "gated": 0, "gated_imagined_successes": 0}
    pairs: dict[str, dict[str, np.ndarray]] = {}
    for name, pol in cands.items():
        r = pairs[name] = paired_episodes(pol, pipe, tasks, eps, a.seed, horizon)
        gated_imag = r["imagined"] & r["gate_ok"]
        rows[name] = {
            "real_success": float(r["real"].mean()),
            "imagined_success": float(r["imagined"].mean()),
            "imagined_success_gated": float(gated_imag.mean()),
            "episodes": int(len(r["real"])),
            "gate_pass_frac": float(r["gate_ok"].mean()),
            # per-episode trust: how often the imagined outcome equals the real one from the same start
            "episode_agreement": float((r["imagined"] == r["real"]).mean()),
            "imagined_false_successes": int((r["imagined"] & ~r["real"]).sum()),
            "imagined_missed_successes": int((~r["imagined"] & r["real"]).sum()),
        }
        refuted["all"] += int((r["imagined"] & ~r["real"]).sum())
        refuted["all_imagined_successes"] += int(r["imagined"].sum())
        refuted["gated"] += int((gated_imag & ~r["real"]).sum())
        refuted["gated_imagined_successes"] += int(gated_imag.sum())
        if not a.no_progress:
            print(f"{name}: {rows[name]}")
    real = np.array([v["real_success"] for v in rows.values()])
    # Calibrated threshold: chosen on the SFT policy's paired episodes from other starts, then applied
    # to every policy's sweep pass (the ranking's own real outcomes never choose it).
    cal_eps = a.calibration_episodes_per_task or (4 if a.quick else 24)
    cal_seed = a.seed + CALIBRATION_SEED_OFFSET
    cal_pairs = paired_episodes(sft, pipe, tasks, cal_eps, cal_seed, horizon, gated_pass=False)
    try:
        cal = calibrate_success_threshold(cal_pairs["imagined_max_p"], cal_pairs["real"])
    except WmrlError as e:  # e.g. a quick run's SFT policy that never succeeds
        calibrated: dict[str, Any] = {"error": str(e)}
    else:
        imag_c = {n: pr["imagined_max_p"] >= cal.threshold for n, pr in pairs.items()}
        rates_c = np.array([v.mean() for v in imag_c.values()])
        calibrated = {
            **rank_stats(rates_c, real),
            "episode_agreement": float(
                np.mean([(imag_c[n] == pr["real"]).mean() for n, pr in pairs.items()])
            ),
            "mean_imagined_success": float(rates_c.mean()),
            "imagined_success": {n: float(v) for n, v in zip(imag_c, rates_c)},
            "imagined_false_successes": int(sum((imag_c[n] & ~pr["real"]).sum() for n, pr in pairs.items())),
            "imagined_missed_successes": int(sum((~imag_c[n] & pr["real"]).sum() for n, pr in pairs.items())),
        }
    calibrated["calibration"] = {
        **({} if "error" in calibrated else cal.to_dict()),
        "policy": "sft",
        "episodes_per_task": cal_eps,
        "seed": cal_seed,
        "real_success": float(cal_pairs["real"].mean()),
    }
    imag = np.array([v["imagined_success"] for v in rows.values()])
    imag_g = np.array([v["imagined_success_gated"] for v in rows.values()])
    res: dict[str, Any] = {
        **rank_stats(imag, real),
        "gated": rank_stats(imag_g, real),
        "policies": rows,
        "refuted": refuted,
        "threshold_sweep": threshold_sweep(pairs),
        "calibrated": calibrated,
        "success_source": cfg.imagination_config().success_source,
        "success_threshold": cfg.imagination_config().success_threshold,
        "episode_agreement": float(np.mean([v["episode_agreement"] for v in rows.values()])),
        "num_policies": len(rows),
        "episodes_per_task": eps,
        "tasks": tasks,
        "seed": a.seed,
        "run_dir": str(run_dir),
        "quick": a.quick,
        "wall_time_s": time.perf_counter() - t0,
        "machine": environment_info(),
    }
    cal_s = calibrated.get("spearman")
    res["goal"] = {
        "spearman": ">= 0.9",
        "met": bool(res["spearman"] is not None and res["spearman"] >= 0.9),
        "met_calibrated": bool(cal_s is not None and cal_s >= 0.9),
    }
    atomic_write_json(a.out, res)
    print(
        json.dumps({k: res[k] for k in ("pearson", "spearman", "mmrv", "refuted", "num_policies")}, indent=2)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
