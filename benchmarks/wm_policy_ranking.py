"""Does the world model rank policies the way the real simulator does?

Usage::

    python -m benchmarks.wm_policy_ranking [--quick] --out benchmarks/results/wm_policy_ranking.json
        [--run-dir RUN] [--episodes-per-task N] [--calibration-episodes-per-task N]
        [--finetune-steps N] [key=value ...]   # the run's Hydra overrides
    python -m benchmarks.wm_policy_ranking --rescore --out FILE.json   # new readings of a finished result

Uses a finished ``wmrl run`` folder (its world model, success / executability reward models and
policies; the run is made, or resumed, first). Every policy runs from the *same* real starts in
both worlds: the real env is reset with fixed seeds, and the imagined env starts from those
first real frames (``ImaginedVectorEnv.reset_to``), so each episode gives a (imagined, real)
success pair. Policies (>= 6, varied quality): the SFT policy, the same SFT recipe at 30%, 50% and
70% of its optimiser steps (``sft_steps_N``, trained once into ``RUN/ranking/``), the
RL-in-imagination and co-evolution checkpoints, the real-RL baseline, the SFT policy with Gaussian
action noise at several levels, and a uniform random policy. (The scripted experts read the simulator's
privileged state, which a world model does not have, so they cannot act inside it.)

``threshold_sweep``: the same statistics if imagined success meant "the success probability ever
reached t" (from a second imagined pass that never stops on success), for a range of t.
``calibrated``: the same statistics at one threshold chosen *before* looking at these episodes:
the SFT policy runs alone from other real starts (seed + 500000, ``--calibration-episodes-per-task``,
24 by default) in both worlds, and :func:`imagination.calibration.calibrate_success_threshold`
takes the threshold with the best Youden's J against their real outcomes (``calibration`` records
it); ``goal.met_calibrated`` judges that Spearman.
``persistence``: the same, if imagined success meant "the probability held >= t for m consecutive
imagined frames" (:func:`imagination.calibration.persisted_max`), m and t chosen together on those
calibration episodes. ``expected``: each policy's imagined success read as its expected real
success, the mean over its episodes of P(real success | imagined score) from an isotonic fit on the
same calibration episodes (:class:`imagination.calibration.SuccessProbabilityCalibration`), for the
plain max probability (``max_p``) and the persistence-chosen score (``persisted``), with the Brier
score of those per-episode probabilities. ``finetuned``: the same, with a copy of the run's success
model fine-tuned (``--finetune-steps``) on the imagined frames of the calibration episodes, run with
the mean action and with sampled actions (common random numbers in both worlds), labelled by their
real outcomes
(:func:`imagination.calibration.finetune_success_on_pairs`); its threshold comes from a second set of
SFT starts (seed + 600000), and ``episode_auroc`` compares it with the run's model over every
ranked episode. Every Spearman has a paired-bootstrap 95% interval (``spearman_ci95``).
Fields: ``pearson``, ``spearman``, ``mmrv`` (mean maximum rank violation, lower is better),
``policies`` (per-policy imagined vs real success), and ``refuted`` (imagined successes the real
simulator refutes, counted over all imagined successes and over those that passed gating),
``episode_agreement`` (per policy and mean: the fraction of paired episodes whose imagined outcome
equals the real one), and ``noise_ceiling``: every policy runs again in the real simulator alone
from as many other starts (seed + 700000), and the rank statistics of that retest against the
ranking's real success say how well the real simulator agrees with itself (policies closer than
the sampling noise get reordered by any second evaluation; a world model cannot beat that).
``resolved_pairs``: the policy pairs whose real success differs beyond the noise (start by start,
95%), and the share of them each reading orders as the simulator does: a trust figure that near-tied
policies do not cap, as they cap Spearman (:func:`resolved_pairs_block`).
The per-episode pairs (``PAIR_FIELDS`` of every policy and of the SFT calibration episodes) are
saved beside the JSON as ``OUT.pairs.npz`` (keys ``policy/field``); ``--rescore`` adds
``resolved_pairs`` to a finished result from them, without running an episode.
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
    imagined: bool = True,
    **kwargs: Any,
) -> dict[str, np.ndarray]:
    """:func:`imagination.calibration.paired_episodes` with the models of the run's last round
    (``kwargs``: its ``deterministic``, ``score_models``, ``record_frames``)."""
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
        render=pipe.cfg.render.env_kwargs(),
        imagination=pipe.imagination_config(),  # the calibrated threshold where the run has one
        success_model=sm,
        exec_reward=exe,
        gated_pass=gated_pass,
        imagined=imagined,
        **kwargs,
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
FINETUNE_THRESHOLD_SEED_OFFSET = 600_000  # the fine-tuned success model's threshold starts
PERSISTENCE_FRAMES = (1, 2, 3, 4, 6, 8)  # consecutive imagined frames a success must hold
RETEST_SEED_OFFSET = 700_000  # the real retest's starts (noise ceiling)
SFT_BUDGET_FRACTIONS = (0.3, 0.5, 0.7)  # of the run's SFT steps: the weaker SFT policies


def sft_at_budgets(pipe: Any, fractions: tuple[float, ...] = SFT_BUDGET_FRACTIONS) -> dict[str, Any]:
    """The run's SFT recipe at smaller optimiser-step budgets (``fraction`` x the run's steps, at
    least 20), trained once into ``RUN/ranking/sft_steps_N`` (kept, and resumed, across calls):
    the "SFT at several budgets" policies, graded by training rather than by injected noise."""
    from imagination.pipeline import run_config_of
    from policies import load_policy
    from policies.train import TrainPolicyConfig

    # the run's own SFT steps (the config.yaml its Pipeline keeps: a run made before a default changed keeps its own)
    full = int(run_config_of(pipe.root).sft.get("steps") or TrainPolicyConfig.steps)
    out = {}
    for f in fractions:
        n = max(20, int(round(f * full)))
        folder = pipe.root / "ranking" / f"sft_steps_{n}"
        if not (folder / "policy" / "config.json").exists():
            pipe.train_sft(folder, steps=n)
        out[f"sft_steps_{n}"] = load_policy(folder / "policy")
    return out


NOISE_LEVELS = (0.3, 0.6, 1.0)  # action-noise sigmas of the noisy SFT policies


def ranking_policies(pipe: Any) -> dict[str, Any]:
    """The ranked policies of a finished run (``pipe``: its :class:`imagination.pipeline.Pipeline`), by
    name: ``sft``, the SFT recipe at smaller budgets (:func:`sft_at_budgets`, trained once), each
    co-evolution round's policy (``imagination_round_R``), the real-RL baseline where the run has one,
    the SFT policy with action noise (:data:`NOISE_LEVELS`) and a uniform random policy."""
    from policies import load_policy

    root = pipe.root
    sft = load_policy(root / "sft" / "policy")
    cands: dict[str, Any] = {"sft": sft, **sft_at_budgets(pipe)}
    for r in range(pipe.cfg.coevolution_config().rounds + 1):
        cands[f"imagination_round_{r}"] = load_policy(root / f"round_{r}" / "policy")
    if (root / "real_rl" / "policy").exists():
        cands["real_rl"] = load_policy(root / "real_rl" / "policy")
    for sigma in NOISE_LEVELS:
        cands[f"sft_noise_{sigma}"] = NoisyPolicy(sft, sigma, seed=int(sigma * 10))
    cands["random"] = RandomPolicy(sft.chunk_size, sft.image_size)
    return cands


def is_run_policy_name(name: str) -> bool:
    """Whether :func:`ranking_policies` can give a policy this name (so another policy must not take it)."""
    return name in ("sft", "real_rl", "random") or name.startswith(("sft_steps_", "imagination_round_", "sft_noise_"))


def noise_ceiling(real: np.ndarray, retest: np.ndarray) -> dict[str, Any]:
    """How well the real simulator ranks the policies against itself: rank statistics of the
    policies' real success on the ranking's starts (``real`` (P,)) against their real success on
    as many other starts (``retest`` (P,)). A world model cannot be expected to beat this: with
    policies whose success differs by less than the sampling noise, even a second real
    evaluation reorders them."""
    return {**rank_stats(retest, real), "retest_success": [float(x) for x in retest]}


def resolved_pairs(real_eps: dict[str, np.ndarray], z: float = 1.959964) -> list[tuple[str, str]]:
    """Policy pairs the real simulator tells apart, as ``(better, worse)``.

    Every policy plays the same starts (episode k of each from one start), so a pair's real
    outcomes are compared start by start (:func:`benchmarks._stats.paired_outcome_difference`),
    and the pair counts when that difference's normal interval (``z``: 95%) is clear of 0. Policies
    closer than that are reordered by any second real evaluation; how a world model orders them
    says nothing about the world model. ``real_eps``: policy -> bool (E,) real outcomes, E the same
    for all."""
    from benchmarks._stats import paired_outcome_difference

    names = list(real_eps)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            d = paired_outcome_difference({"all": real_eps[a].astype(int)}, {"all": real_eps[b].astype(int)}, z=z)
            lo, hi = d["ci95"]
            if lo > 0:
                out.append((a, b))
            elif hi < 0:
                out.append((b, a))
    return out


def pair_order_accuracy(rates: dict[str, float], pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """How many of ``pairs`` (``(better, worse)`` in the real simulator) a reading's per-policy success
    ``rates`` order the same way: ``accuracy`` = (agreeing + ties / 2) / pairs, None without pairs."""
    agree = sum(rates[a] > rates[b] for a, b in pairs)
    ties = sum(rates[a] == rates[b] for a, b in pairs)
    return {"accuracy": (agree + ties / 2) / len(pairs) if pairs else None,
            "agree": int(agree), "ties": int(ties), "pairs": len(pairs)}


def ranking_readings(res: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Every reading a ranking result ``res`` holds, as reading -> policy -> success rate: the plain one,
    gated, calibrated, persistence, each expected-success score, the fine-tuned success model and the
    real retest (those present)."""
    rows = res["policies"]
    readings: dict[str, dict[str, float]] = {
        "plain": {n: r["imagined_success"] for n, r in rows.items()},
        "gated": {n: r["imagined_success_gated"] for n, r in rows.items()},
    }
    for key in ("calibrated", "persistence", "finetuned"):
        if "imagined_success" in (res.get(key) or {}):
            readings[key] = res[key]["imagined_success"]
    for tag, block in (res.get("expected") or {}).items():
        if "imagined_success" in block:
            readings[f"expected_{tag}"] = block["imagined_success"]
    if all("real_success_retest" in r for r in rows.values()):
        readings["real_retest"] = {n: r["real_success_retest"] for n, r in rows.items()}
    return readings


def resolved_pairs_block(
    res: dict[str, Any], real_eps: dict[str, np.ndarray], readings: dict[str, dict[str, float]] | None = None
) -> dict[str, Any]:
    """The ``resolved_pairs`` block of a ranking result ``res``: the policy pairs the real simulator
    tells apart (:func:`resolved_pairs` on ``real_eps``, policy -> bool (E,)) and, for every reading
    (``readings``, reading -> policy -> rate; default :func:`ranking_readings` of ``res``), the share of
    those pairs it orders as the simulator does (:func:`pair_order_accuracy`). Unlike Spearman over all
    policies, this is not capped by policies that even the simulator cannot tell apart."""
    rows = res["policies"]
    readings = ranking_readings(res) if readings is None else readings
    pairs = resolved_pairs({n: real_eps[n] for n in rows})
    return {
        "num_pairs": len(pairs),
        "of_pairs": len(rows) * (len(rows) - 1) // 2,
        "pairs": [list(p) for p in pairs],
        "accuracy": {k: pair_order_accuracy(v, pairs) for k, v in readings.items()},
    }


def rescore(out: Path) -> dict[str, Any]:
    """Add the readings that need no new episodes (``resolved_pairs``) to a finished result ``out``
    from its per-episode pairs (``out.pairs.npz``), and write it back (atomically)."""
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    npz = out.with_suffix(".pairs.npz")
    for f in (out, npz):
        if not f.exists():
            raise WmrlError(f"--rescore: {f} does not exist; expected a finished wm_policy_ranking result and its pairs")
    try:
        res = json.loads(out.read_text())
        policies = list(res["policies"])
    except (ValueError, KeyError, TypeError) as e:
        raise WmrlError(f"--rescore: {out} is not a wm_policy_ranking result ({e!r})") from e
    try:
        with np.load(npz) as z:
            missing = [n for n in policies if f"{n}/real" not in z.files]
            real_eps = {n: z[f"{n}/real"] for n in policies if n not in missing}
    except (OSError, ValueError) as e:
        raise WmrlError(f"--rescore: {npz} is not a readable .npz of per-episode pairs ({e})") from e
    if missing:
        raise WmrlError(f"--rescore: {npz} lacks the real outcomes of policies {missing}")
    res["resolved_pairs"] = resolved_pairs_block(res, real_eps)
    atomic_write_json(out, res)
    return res


PAIR_FIELDS = ("real", "imagined", "imagined_max_p", "imagined_p_trace", "gate_ok")  # saved per episode
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


def spearman_ci95(imagined: list[np.ndarray], real: list[np.ndarray], draws: int = 1000, seed: int = 0) -> list[float] | None:
    """Paired-bootstrap 95% interval of the Spearman correlation between per-policy imagined and real
    success rates: each draw resamples every policy's episodes with replacement (the same episodes for
    both worlds). ``imagined`` / ``real``: per policy, bool (E_p,) outcomes. None when too few draws
    give a defined correlation (constant rates)."""
    rng = np.random.default_rng(seed)
    vals = []
    for _ in range(draws):
        idx = [rng.integers(len(r), size=len(r)) for r in real]
        im = np.array([i[j].mean() for i, j in zip(imagined, idx)])
        re = np.array([r[j].mean() for r, j in zip(real, idx)])
        if np.std(im) > 0 and np.std(re) > 0:
            vals.append(np.corrcoef(_ranks(im), _ranks(re))[0, 1])
    if len(vals) < draws // 2:
        return None
    return [float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5))]


def thresholded(pairs: dict[str, dict[str, np.ndarray]], key: str, threshold: float) -> dict[str, Any]:
    """Ranking statistics if imagined success meant ``pairs[policy][key] >= threshold``."""
    real = np.array([p["real"].mean() for p in pairs.values()])
    imag = {n: p[key] >= threshold for n, p in pairs.items()}
    rates = np.array([v.mean() for v in imag.values()])
    return {
        **rank_stats(rates, real),
        "spearman_ci95": spearman_ci95(list(imag.values()), [p["real"] for p in pairs.values()]),
        "episode_agreement": float(np.mean([(imag[n] == p["real"]).mean() for n, p in pairs.items()])),
        "mean_imagined_success": float(rates.mean()),
        "imagined_success": {n: float(v) for n, v in zip(imag, rates)},
        "imagined_false_successes": int(sum((imag[n] & ~p["real"]).sum() for n, p in pairs.items())),
        "imagined_missed_successes": int(sum((~imag[n] & p["real"]).sum() for n, p in pairs.items())),
    }


def expected(pairs: dict[str, dict[str, np.ndarray]], key: str, cal: Any) -> dict[str, Any]:
    """Ranking statistics if a policy's imagined success were its *expected* real success: the mean,
    over its episodes, of ``cal.predict(pairs[policy][key])`` (a :class:`SuccessProbabilityCalibration`
    fitted on other episodes). ``brier``: the mean squared error of those probabilities against the
    same starts' real outcomes (``brier_constant``: of each policy's own real rate, a bound no
    per-episode score beats without per-episode information)."""
    real = np.array([p["real"].mean() for p in pairs.values()])
    prob = {n: cal.predict(p[key]) for n, p in pairs.items()}
    rates = np.array([v.mean() for v in prob.values()])
    y = {n: p["real"].astype(np.float64) for n, p in pairs.items()}
    return {
        **rank_stats(rates, real),
        "spearman_ci95": spearman_ci95(list(prob.values()), [p["real"] for p in pairs.values()]),
        "brier": float(np.mean(np.concatenate([(prob[n] - y[n]) ** 2 for n in pairs]))),
        "brier_constant": float(np.mean(np.concatenate([(y[n].mean() - y[n]) ** 2 for n in pairs]))),
        "mean_imagined_success": float(rates.mean()),
        "imagined_success": {n: float(v) for n, v in zip(prob, rates)},
    }


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
    p.add_argument(
        "--finetune-steps",
        type=int,
        default=None,
        help="steps that fine-tune a copy of the success model on the calibration pairs' imagined frames "
        "(0: skip; default 300, 30 with --quick)",
    )
    p.add_argument("--seed", type=int, default=4242)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--rescore", action="store_true",
                   help="only add the readings that need no new episodes to the finished --out (from its .pairs.npz)")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of the run config (as given to the run)")
    a = p.parse_args(argv)
    if a.rescore:
        res = rescore(Path(a.out))
        print(json.dumps({k: res["resolved_pairs"][k] for k in ("num_pairs", "of_pairs")}))
        return 0
    import envs
    from benchmarks.imagination_lift import environment_info
    from imagination.calibration import (
        SuccessProbabilityCalibration,
        calibrate_success_persistence,
        calibrate_success_threshold,
        finetune_success_on_pairs,
        persisted_max,
    )
    from imagination.pipeline import Pipeline, load_run_config
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write, atomic_write_json

    t0 = time.perf_counter()
    config_name = "run_quick" if a.quick else "run"
    run_dir = Path(
        a.run_dir or ("runs/imagination_lift_quick/seed_0" if a.quick else "runs/imagination_lift/seed_0")
    )
    cfg = load_run_config([*a.overrides, f"run_dir={run_dir}"], config_name)
    pipe = Pipeline(cfg, progress=not a.no_progress)
    pipe.run_all()  # makes the run, or resumes it (finished stages are skipped)
    eps = a.episodes_per_task or (4 if a.quick else 24)
    if a.finetune_steps is None:
        a.finetune_steps = 30 if a.quick else 300
    tasks = pipe.tasks()
    cands = ranking_policies(pipe)
    sft = cands["sft"]
    horizon = envs.full_episode_chunks(tasks, sft.chunk_size)
    # Calibration on the SFT policy's paired episodes from other starts (seed + 500000), before the
    # ranking: (1) the threshold of the run's success model; (2) a copy of that success model
    # fine-tuned on the imagined frames of those episodes (deterministic and sampled actions),
    # labelled by their real outcomes, whose threshold is then chosen on a second set of SFT
    # starts (seed + 600000). The ranking's own real outcomes choose neither.
    cal_eps = a.calibration_episodes_per_task or (4 if a.quick else 24)
    cal_seed = a.seed + CALIBRATION_SEED_OFFSET
    cal_pairs = paired_episodes(sft, pipe, tasks, cal_eps, cal_seed, horizon, gated_pass=False, record_frames=True)
    try:
        cal = calibrate_success_threshold(cal_pairs["imagined_max_p"], cal_pairs["real"])
    except WmrlError as e:  # e.g. a quick run's SFT policy that never succeeds
        cal, cal_error = None, str(e)
    sm_ft, ft_info = None, {}
    if a.finetune_steps > 0:
        sampled = paired_episodes(sft, pipe, tasks, cal_eps, cal_seed, horizon, gated_pass=False,
                                  record_frames=True, deterministic=False)
        _, sm, _ = pipe.load_models(cfg.coevolution_config().rounds)
        tf = time.perf_counter()
        sm_ft = finetune_success_on_pairs(sm, pipe.trajectories(), [cal_pairs, sampled], steps=a.finetune_steps,
                                          seed=a.seed)
        ft_info = {"finetune_steps": a.finetune_steps, "finetune_seconds": time.perf_counter() - tf,
                   "pair_episodes": int(len(cal_pairs["real"]) + len(sampled["real"])),
                   "pair_real_success": {"deterministic": float(cal_pairs["real"].mean()),
                                         "sampled": float(sampled["real"].mean())},
                   "pair_frames": int(len(cal_pairs["frame_episode"]) + len(sampled["frame_episode"]))}
        ft_seed = a.seed + FINETUNE_THRESHOLD_SEED_OFFSET
        held = paired_episodes(sft, pipe, tasks, cal_eps, ft_seed, horizon, gated_pass=False,
                               score_models={"finetuned": sm_ft})
        ft_info.update(threshold_seed=ft_seed, threshold_episodes=int(len(held["real"])),
                       threshold_real_success=float(held["real"].mean()))
        try:
            ft_info["heldout_auroc_run_model"] = calibrate_success_threshold(held["imagined_max_p"], held["real"]).auroc
            ft_cal = calibrate_success_threshold(held["imagined_max_p_finetuned"], held["real"])
        except WmrlError as e:
            ft_cal, ft_info["error"] = None, str(e)
    # Persistence: imagined success as "the probability held >= t for m consecutive frames", with m
    # and t chosen together on the same calibration pairs (best Youden's J; ties to the smaller m).
    try:
        best_m, persist_cal, persist_j = calibrate_success_persistence(
            cal_pairs["imagined_p_trace"], cal_pairs["real"], PERSISTENCE_FRAMES
        )
    except WmrlError:
        best_m = None
    score = {"finetuned": sm_ft} if sm_ft is not None else None
    rows, refuted = {}, {"all": 0, "all_imagined_successes": 0, "gated": 0, "gated_imagined_successes": 0}
    pairs: dict[str, dict[str, np.ndarray]] = {}
    for name, pol in cands.items():
        r = pairs[name] = paired_episodes(pol, pipe, tasks, eps, a.seed, horizon, score_models=score)
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
    calibrated: dict[str, Any] = (
        {"error": cal_error} if cal is None else thresholded(pairs, "imagined_max_p", cal.threshold)
    )
    calibrated["calibration"] = {
        **({} if cal is None else cal.to_dict()),
        "policy": "sft",
        "episodes_per_task": cal_eps,
        "seed": cal_seed,
        "real_success": float(cal_pairs["real"].mean()),
    }
    persistence: dict[str, Any] = {"error": "no calibration (see calibrated)"}
    if best_m is not None:
        for pr in pairs.values():
            pr["imagined_persist"] = persisted_max(pr["imagined_p_trace"], best_m)
        persistence = {
            **thresholded(pairs, "imagined_persist", persist_cal.threshold),
            "frames": best_m,
            "calibration": persist_cal.to_dict(),
            "calibration_youden_j_by_frames": {str(m): j for m, j in persist_j.items()},
        }
    # Expected success: each episode's imagined score mapped to P(real success) by an isotonic fit on
    # the calibration pairs, averaged per policy (the plain max, and the persistence-chosen score).
    expected_rows: dict[str, Any] = {}
    scores = {"max_p": ("imagined_max_p", cal_pairs["imagined_max_p"])}
    if best_m is not None:
        scores["persisted"] = ("imagined_persist", persisted_max(cal_pairs["imagined_p_trace"], best_m))
    for tag, (key, cal_score) in scores.items():
        try:
            iso = SuccessProbabilityCalibration().fit(cal_score, cal_pairs["real"])
        except WmrlError as e:
            expected_rows[tag] = {"error": str(e)}
            continue
        expected_rows[tag] = {**expected(pairs, key, iso), "calibration": iso.to_dict(),
                              **({"frames": best_m} if tag == "persisted" else {})}
    finetuned: dict[str, Any] | None = None
    if sm_ft is not None:
        finetuned = {} if ft_cal is None else thresholded(pairs, "imagined_max_p_finetuned", ft_cal.threshold)
        from sklearn.metrics import roc_auc_score

        both = [(p["imagined_max_p"], p["imagined_max_p_finetuned"], p["real"]) for p in pairs.values()]
        y = np.concatenate([b[2] for b in both])
        if 0 < y.sum() < len(y):  # per-episode AUROC over every ranked policy's pairs
            finetuned["episode_auroc"] = float(roc_auc_score(y, np.concatenate([b[1] for b in both])))
            finetuned["episode_auroc_run_model"] = float(roc_auc_score(y, np.concatenate([b[0] for b in both])))
        finetuned["calibration"] = {**({} if ft_cal is None else ft_cal.to_dict()), **ft_info}
    retest_seed = a.seed + RETEST_SEED_OFFSET
    retest_eps = [paired_episodes(pol, pipe, tasks, eps, retest_seed, horizon, imagined=False)["real"]
                  for pol in cands.values()]
    retest = np.array([r.mean() for r in retest_eps])
    for name, r in zip(rows, retest):
        rows[name]["real_success_retest"] = float(r)
    imag = np.array([v["imagined_success"] for v in rows.values()])
    imag_g = np.array([v["imagined_success_gated"] for v in rows.values()])
    res: dict[str, Any] = {
        **rank_stats(imag, real),
        "spearman_ci95": spearman_ci95([p["imagined"] for p in pairs.values()], [p["real"] for p in pairs.values()]),
        "gated": rank_stats(imag_g, real),
        "policies": rows,
        "refuted": refuted,
        "threshold_sweep": threshold_sweep(pairs),
        "calibrated": calibrated,
        "noise_ceiling": {**noise_ceiling(real, retest), "seed": retest_seed,
                          "spearman_ci95": spearman_ci95(retest_eps, [p["real"] for p in pairs.values()])},
        "finetuned": finetuned,
        "persistence": persistence,
        "expected": expected_rows,
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
        "met_finetuned": bool(finetuned is not None and (finetuned.get("spearman") or 0) >= 0.9),
        "met_persistence": bool((persistence.get("spearman") or 0) >= 0.9),
        "met_expected": {tag: bool((r.get("spearman") or 0) >= 0.9) for tag, r in expected_rows.items()},
        "real_retest_spearman": res["noise_ceiling"]["spearman"],
    }
    res["resolved_pairs"] = resolved_pairs_block(res, {n: pr["real"] for n, pr in pairs.items()})
    atomic_write_json(a.out, res)
    # The per-episode pairs beside the JSON, so further readings can be computed without a re-run.
    arrays = {f"{name}/{k}": np.asarray(v) for name, pr in {"calibration_sft": cal_pairs, **pairs}.items()
              for k, v in pr.items() if k in PAIR_FIELDS}
    atomic_write(Path(a.out).with_suffix(".pairs.npz"), lambda tmp: np.savez_compressed(tmp, **arrays))
    print(
        json.dumps({k: res[k] for k in ("pearson", "spearman", "mmrv", "refuted", "num_policies")}, indent=2)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
