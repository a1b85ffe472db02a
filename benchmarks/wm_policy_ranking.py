"""Does the world model rank policies the way the real simulator does?

Usage::

    python -m benchmarks.wm_policy_ranking [--quick] --out benchmarks/results/wm_policy_ranking.json
        [--run-dir RUN] [--episodes-per-task N] [key=value ...]   # the run's Hydra overrides

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
Fields: ``pearson``, ``spearman``, ``mmrv`` (mean maximum rank violation, lower is better),
``policies`` (per-policy imagined vs real success), and ``refuted`` (imagined successes the real
simulator refutes, counted over all imagined successes and over those that passed gating),
``episode_agreement`` (per policy and mean: the fraction of paired episodes whose imagined outcome
equals the real one).
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


@torch.no_grad()
def paired_episodes(
    policy: Any, pipe: Any, tasks: list[str], episodes_per_task: int, seed: int, horizon_chunks: int
) -> dict[str, np.ndarray]:
    """Run ``policy`` from the same real starts in the real simulator and in the world model.

    Returns bool arrays (E,): ``real``, ``imagined``, ``gate_ok`` (every imagined step reliable),
    and float (E,) ``imagined_max_p``: the highest success probability of a second imagined pass
    that never terminates on success (threshold 0.999) over the whole horizon, so that the imagined
    outcome at any threshold t is ``imagined_max_p >= t`` (the threshold sweep)."""
    import envs
    from envs.wrappers import ActionChunkWrapper
    from imagination.imagined_env import ImaginedEnvConfig, ImaginedVectorEnv
    from imagination.rollout_buffer import env_instructions

    wm, sm, exe = pipe.load_models(pipe.cfg.coevolution_config().rounds)
    k = policy.chunk_size
    out = {"real": [], "imagined": [], "gate_ok": [], "imagined_max_p": []}
    for ti, task in enumerate(tasks):
        n = episodes_per_task
        seeds = [seed + 1000 * ti + e for e in range(n)]
        real = ActionChunkWrapper(
            envs.make_vec(task, n, image_size=pipe.cfg.image_size, autoreset_mode="same_step"), k
        )
        icfg = ImaginedEnvConfig(
            **{
                **pipe.cfg.imagination_config().__dict__,
                "num_envs": n,
                "horizon": horizon_chunks,
                "gate": "mask",
                "chunk_size": k,
            }
        )
        imag = ImaginedVectorEnv(wm, pipe.trajectories(), success_model=sm, exec_reward=exe, config=icfg)
        sweep_cfg = dataclasses.replace(icfg, success_threshold=0.999, gate="off")
        sweep = ImaginedVectorEnv(wm, pipe.trajectories(), success_model=sm, config=sweep_cfg)
        obs_r, info_r = real.reset(seed=seeds)
        instr = env_instructions(real, info_r)
        obs_i, info_i = imag.reset_to(obs_r["image"][:, None], obs_r["state"][:, None], instr, [task] * n)
        obs_s, info_s = sweep.reset_to(obs_r["image"][:, None], obs_r["state"][:, None], instr, [task] * n)
        for name, env, obs, info in (
            ("real", real, obs_r, info_r),
            ("imagined", imag, obs_i, info_i),
            ("sweep", sweep, obs_s, info_s),
        ):
            alive, succ, gate = np.ones(n, bool), np.zeros(n, bool), np.ones(n, bool)
            max_p = np.zeros(n)
            for _ in range(horizon_chunks):
                a = policy.act(obs, env_instructions(env, info), deterministic=True).actions
                obs, _, term, trunc, info = env.step(np.asarray(a.cpu(), np.float32))
                succ |= alive & np.asarray(info["success"], bool)
                gate &= ~alive | np.asarray(info.get("gate_ok", np.ones(n, bool)), bool)
                if "chunk_success_prob" in info:
                    chunk_max = np.nan_to_num(info["chunk_success_prob"], nan=0.0).max(1)
                    max_p = np.where(alive, np.maximum(max_p, chunk_max), max_p)
                alive &= ~(np.asarray(term) | np.asarray(trunc))
                if not alive.any():
                    break
            if name == "sweep":
                out["imagined_max_p"].append(max_p)
                continue
            out[name].append(succ)
            if name == "imagined":
                out["gate_ok"].append(gate)
        real.close()
    return {k2: np.concatenate(v) for k2, v in out.items()}


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
    p.add_argument("--seed", type=int, default=4242)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of the run config (as given to the run)")
    a = p.parse_args(argv)
    import envs
    from benchmarks.imagination_lift import environment_info
    from imagination.pipeline import Pipeline, load_run_config
    from policies import load_policy
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
    imag = np.array([v["imagined_success"] for v in rows.values()])
    imag_g = np.array([v["imagined_success_gated"] for v in rows.values()])
    res: dict[str, Any] = {
        **rank_stats(imag, real),
        "gated": rank_stats(imag_g, real),
        "policies": rows,
        "refuted": refuted,
        "threshold_sweep": threshold_sweep(pairs),
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
    res["goal"] = {"spearman": ">= 0.9", "met": bool(res["spearman"] is not None and res["spearman"] >= 0.9)}
    atomic_write_json(a.out, res)
    print(
        json.dumps({k: res[k] for k in ("pearson", "spearman", "mmrv", "refuted", "num_policies")}, indent=2)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
