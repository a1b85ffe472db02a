"""Calibrate the imagined success threshold on paired (imagined, real) episodes.

A success model trained on real frames scores imagined frames on another scale (blurred objects,
a ghost gripper over the goal), so "probability >= 0.5" is not a calibrated decision inside a
world model. Given episodes that ran the same policy from the same real starts in both worlds
(``benchmarks.wm_policy_ranking.paired_episodes``), this picks the threshold ``t`` for which
"the imagined success probability ever reached ``t``" best separates the real successes from
the real failures: the point of the ROC curve with the largest Youden's J = TPR - FPR
(equivalently, the best balanced accuracy).

``paired_episodes(policy, world_model, ...)`` runs those pairs and returns ``real`` (E,) and
``imagined_max_p`` (E,); ``calibrate_success_threshold(max_p (E,), real (E,)) ->
ThresholdCalibration``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from wmrl.errors import WmrlError


@dataclass(frozen=True)
class ThresholdCalibration:
    """Args:
    threshold: the calibrated success threshold, in ``[lo, hi]``.
    youden_j: TPR - FPR of ``max_p >= threshold`` on the calibration episodes.
    tpr / fpr: its true- and false-positive rates there.
    auroc: area under the ROC curve of ``max_p`` against the real outcomes.
    episodes / positives: calibration episodes, and how many of them succeeded in the real simulator.
    """

    threshold: float
    youden_j: float
    tpr: float
    fpr: float
    auroc: float
    episodes: int
    positives: int

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "criterion": "max Youden's J (TPR - FPR) of imagined max success prob"}


def calibrate_success_threshold(
    max_p: Any, real: Any, lo: float = 0.05, hi: float = 0.95
) -> ThresholdCalibration:
    """Threshold on the highest imagined success probability that best predicts real success.

    Args:
        max_p: float (E,): per paired episode, the highest success probability the imagined
            rollout reached (a pass that does not stop on success).
        real: bool (E,): whether the same start succeeded in the real simulator.
        lo / hi: the threshold is clipped to ``[lo, hi]`` (an imagined env needs one in (0, 1)).

    The threshold sits halfway between the ROC point's score and the next lower distinct score,
    so it does not rest on one episode's exact probability. Ties in J go to the higher threshold
    (fewer imagined successes)."""
    p = np.asarray(max_p, np.float64)
    y = np.asarray(real)
    if p.ndim != 1 or y.shape != p.shape:
        raise WmrlError(f"max_p has shape {p.shape} and real {y.shape}; expected two equal shapes (E,)")
    if not np.isfinite(p).all():
        raise WmrlError(f"max_p has {int((~np.isfinite(p)).sum())} non-finite values; expected probabilities")
    if y.dtype != bool and not np.isin(y, (0, 1)).all():
        raise WmrlError("real must be bool (or 0/1) per episode")
    y = y.astype(bool)
    if not 0.0 < lo < hi < 1.0:
        raise WmrlError(f"lo={lo}, hi={hi}: expected 0 < lo < hi < 1")
    npos = int(y.sum())
    if npos == 0 or npos == len(y):
        raise WmrlError(
            f"cannot calibrate on {len(y)} paired episodes with {npos} real successes: "
            "need both real successes and real failures"
        )
    from sklearn.metrics import roc_auc_score, roc_curve

    fpr, tpr, thr = roc_curve(y, p, drop_intermediate=False)
    j = tpr - fpr  # thr decreases; thr[0] = +inf (nothing predicted positive)
    best = int(np.flatnonzero(j == j.max())[0])  # first = highest threshold among ties
    if best == 0:  # no threshold beats predicting "fail" everywhere: stay above every score
        t = float(p.max()) + 1e-6
    else:
        below = thr[best + 1] if best + 1 < len(thr) else 0.0
        t = 0.5 * (float(thr[best]) + float(below))
    t = float(np.clip(t, lo, hi))
    pred = p >= t
    return ThresholdCalibration(
        threshold=t,
        youden_j=float(pred[y].mean() - pred[~y].mean()),
        tpr=float(pred[y].mean()),
        fpr=float(pred[~y].mean()),
        auroc=float(roc_auc_score(y, p)),
        episodes=len(y),
        positives=npos,
    )


@torch.no_grad()
def paired_episodes(
    policy: Any,
    world_model: Any,
    keyframes: Any,
    tasks: list[str],
    episodes_per_task: int,
    seed: int,
    horizon_chunks: int,
    *,
    image_size: int,
    imagination: Any,
    success_model: Any | None = None,
    exec_reward: Any | None = None,
    gated_pass: bool = True,
) -> dict[str, np.ndarray]:
    """Run ``policy`` (deterministic) from the same real starts in the real simulator and in the
    world model: episode ``e`` of task ``i`` starts from the real reset with seed
    ``seed + 1000 * i + e``, and the imagined episodes start from that first real frame
    (``ImaginedVectorEnv.reset_to``).

    Args:
        policy: acts on ``obs`` dicts (``act(obs, instructions, deterministic)``), ``chunk_size``.
        world_model / success_model / exec_reward: the imagined world and its rewards.
        keyframes: the ``Trajectories`` an ``ImaginedVectorEnv`` is built on (its task ids).
        tasks: registered task ids; ``episodes_per_task`` real envs each.
        horizon_chunks: chunks per episode in both worlds.
        image_size: real env frame size; ``imagination``: the ``ImaginedEnvConfig`` to start from
            (its ``num_envs``, ``horizon``, ``chunk_size`` and ``gate`` are set here).
        gated_pass: also run the thresholded, gated imagined pass.

    Returns arrays over the E = tasks x episodes_per_task episodes: bool ``real`` (success in the
    real simulator); float ``imagined_max_p``: the highest success probability of an imagined pass
    that does not stop on success (threshold 0.999, no gating), so that the imagined outcome at any
    threshold t is ``imagined_max_p >= t``; with ``gated_pass``, bool ``imagined`` (success at the
    configured threshold) and ``gate_ok`` (every imagined step reliable); and int
    ``real_env_steps`` (E,): the real simulator steps each episode took."""
    import dataclasses

    import envs
    from envs.wrappers import ActionChunkWrapper
    from imagination.imagined_env import ImaginedVectorEnv
    from imagination.rollout_buffer import env_instructions

    k = policy.chunk_size
    out: dict[str, list] = {"real": [], "imagined_max_p": [], "real_env_steps": []}
    if gated_pass:
        out.update(imagined=[], gate_ok=[])
    for ti, task in enumerate(tasks):
        n = episodes_per_task
        seeds = [seed + 1000 * ti + e for e in range(n)]
        real = ActionChunkWrapper(
            envs.make_vec(task, n, image_size=image_size, autoreset_mode="same_step"), k
        )
        icfg = dataclasses.replace(imagination, num_envs=n, horizon=horizon_chunks, gate="mask", chunk_size=k)
        sweep_cfg = dataclasses.replace(icfg, success_threshold=0.999, gate="off")
        sweep = ImaginedVectorEnv(world_model, keyframes, success_model=success_model, config=sweep_cfg)
        obs_r, info_r = real.reset(seed=seeds)
        instr = env_instructions(real, info_r)
        first_image, first_state = obs_r["image"][:, None], obs_r["state"][:, None]
        passes = [("real", real, obs_r, info_r)]
        if gated_pass:
            imag = ImaginedVectorEnv(
                world_model, keyframes, success_model=success_model, exec_reward=exec_reward, config=icfg
            )
            passes.append(("imagined", imag, *imag.reset_to(first_image, first_state, instr, [task] * n)))
        passes.append(("sweep", sweep, *sweep.reset_to(first_image, first_state, instr, [task] * n)))
        for name, env, obs, info in passes:
            alive, succ, gate = np.ones(n, bool), np.zeros(n, bool), np.ones(n, bool)
            max_p, steps = np.zeros(n), np.zeros(n, np.int64)
            for _ in range(horizon_chunks):
                a = policy.act(obs, env_instructions(env, info), deterministic=True).actions
                obs, _, term, trunc, info = env.step(np.asarray(a.cpu(), np.float32))
                succ |= alive & np.asarray(info["success"], bool)
                gate &= ~alive | np.asarray(info.get("gate_ok", np.ones(n, bool)), bool)
                if "chunk_valid" in info:
                    steps += np.where(alive, np.asarray(info["chunk_valid"], bool).sum(1), 0)
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
            if name == "real":
                out["real_env_steps"].append(steps)
            if name == "imagined":
                out["gate_ok"].append(gate)
        real.close()
    return {k2: np.concatenate(v) for k2, v in out.items()}
