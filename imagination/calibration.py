"""Calibrate the imagined success threshold on paired (imagined, real) episodes.

A success model trained on real frames scores imagined frames on another scale (blurred objects,
a ghost gripper over the goal), so "probability >= 0.5" is not a calibrated decision inside a
world model. Given episodes that ran the same policy from the same real starts in both worlds
(``benchmarks.wm_policy_ranking.paired_episodes``), this picks the threshold ``t`` for which
"the imagined success probability ever reached ``t``" best separates the real successes from
the real failures: the point of the ROC curve with the largest Youden's J = TPR - FPR
(equivalently, the best balanced accuracy).

``paired_episodes(policy, world_model, ...)`` runs those pairs and returns ``real`` (E,),
``imagined_max_p`` (E,) and the per-frame ``imagined_p_trace`` (E, T);
``calibrate_success_threshold(max_p (E,), real (E,)) -> ThresholdCalibration``;
``SuccessProbabilityCalibration().fit(score, real).predict(score)``: calibrated probabilities (an
isotonic map), whose mean over a policy's episodes is its expected real success.

Two further readings of the same pairs:
- persistence: a success must hold ``m`` imagined frames in a row (:func:`persisted_max`), ``m``
  and the threshold chosen together (:func:`calibrate_success_persistence`); the imagined env's
  ``success_persistence`` applies it.
- fine-tuning: the pairs' imagined frames, labelled by the real outcome of the same start
  (:func:`paired_success_frames`), fine-tune a copy of the success model
  (:func:`finetune_success_on_pairs`).
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


def _checked_pairs(score: Any, real: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validate per-episode imagined scores float (E,) and real outcomes (E,) -> (float64, bool),
    with both real successes and real failures among them."""
    p = np.asarray(score, np.float64)
    y = np.asarray(real)
    if p.ndim != 1 or y.shape != p.shape:
        raise WmrlError(f"scores have shape {p.shape} and real {y.shape}; expected two equal shapes (E,)")
    if not np.isfinite(p).all():
        raise WmrlError(f"scores have {int((~np.isfinite(p)).sum())} non-finite values; expected probabilities")
    if y.dtype != bool and not np.isin(y, (0, 1)).all():
        raise WmrlError("real must be bool (or 0/1) per episode")
    y = y.astype(bool)
    npos = int(y.sum())
    if npos == 0 or npos == len(y):
        raise WmrlError(
            f"cannot calibrate on {len(y)} paired episodes with {npos} real successes: "
            "need both real successes and real failures"
        )
    return p, y


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
    p, y = _checked_pairs(max_p, real)
    if not 0.0 < lo < hi < 1.0:
        raise WmrlError(f"lo={lo}, hi={hi}: expected 0 < lo < hi < 1")
    npos = int(y.sum())
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


class SuccessProbabilityCalibration:
    """P(real success | imagined score): an isotonic (monotone, non-decreasing) map fitted on paired
    episodes, so a policy's imagined success can be read as its *expected* real success, the mean
    calibrated probability over its imagined episodes, rather than the fraction that crossed one
    threshold (it keeps how far each score sits from the cut, which a threshold drops). Measured in
    ``benchmarks.wm_policy_ranking`` (``expected``), it did not rank policies better than a threshold.

    ``fit(score (E,), real (E,))`` then ``predict(score (N,)) -> (N,)`` in [0, 1]; scores outside the
    fitted range take the value at its nearer end. ``brier`` is the fit's in-sample Brier score and
    ``base_rate`` the calibration episodes' real success rate (a constant at it scores
    ``base_rate * (1 - base_rate)``)."""

    def __init__(self) -> None:
        self._iso: Any = None
        self.episodes = 0
        self.positives = 0
        self.brier = float("nan")
        self.base_rate = float("nan")

    def fit(self, score: Any, real: Any) -> SuccessProbabilityCalibration:
        from sklearn.isotonic import IsotonicRegression

        p, y = _checked_pairs(score, real)
        self._iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(p, y)
        self.episodes, self.positives = len(y), int(y.sum())
        self.base_rate = float(y.mean())
        self.brier = float(np.mean((self._iso.predict(p) - y) ** 2))
        return self

    def predict(self, score: Any) -> np.ndarray:
        if self._iso is None:
            raise WmrlError("SuccessProbabilityCalibration.predict before fit")
        p = np.asarray(score, np.float64)
        if p.ndim != 1 or not np.isfinite(p).all():
            raise WmrlError(f"score has shape {p.shape} with non-finite values or ndim != 1; expected finite (N,)")
        return self._iso.predict(p)

    def to_dict(self) -> dict[str, Any]:
        return {"episodes": self.episodes, "positives": self.positives, "brier_in_sample": self.brier,
                "brier_constant": self.base_rate * (1 - self.base_rate), "base_rate": self.base_rate,
                "method": "isotonic regression of the real outcome on the imagined score"}


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
    render: dict[str, Any] | None = None,
    success_model: Any | None = None,
    exec_reward: Any | None = None,
    gated_pass: bool = True,
    imagined: bool = True,
    deterministic: bool = True,
    score_models: dict[str, Any] | None = None,
    record_frames: bool = False,
) -> dict[str, np.ndarray]:
    """Run ``policy`` (its mean action unless ``deterministic=False``) from the same real starts in the real simulator and in the
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
        render: more ``envs.make_vec`` options of the real envs (the run's render settings).
        gated_pass: also run the thresholded, gated imagined pass.
        imagined: False runs the real simulator alone (``real`` and ``real_env_steps`` only; the
            world model is not used): a retest of the same policy from other starts.
        deterministic: False samples the policy's actions, with common random numbers: every pass
            of a task replays the same policy noise stream (the CPU generator, seeded by ``seed``
            and the task), so a pair differs by its world, not by its noise draws.
        score_models: more success models (name -> model) that score the sweep pass's imagined
            frames: ``imagined_max_p_<name>`` (E,), the same statistic on the same frames.
        record_frames: also return the sweep pass's executed imagined frames for training:
            ``frames`` uint8 (M, H, W, 3), ``frame_episode`` int (M,), ``frame_step`` int (M,) (the
            frame follows that many executed actions), and ``instruction`` (E,).

    Returns arrays over the E = tasks x episodes_per_task episodes: bool ``real`` (success in the
    real simulator); float ``imagined_max_p``: the highest success probability of an imagined pass
    that does not stop on success (threshold 0.999, no gating), so that the imagined outcome at any
    threshold t is ``imagined_max_p >= t``; float ``imagined_p_trace`` (E, horizon_chunks * K):
    that pass's success probability of every executed imagined frame (NaN where none was executed);
    with ``gated_pass``, bool ``imagined`` (success at the
    configured threshold) and ``gate_ok`` (every imagined step reliable); and int
    ``real_env_steps`` (E,): the real simulator steps each episode took."""
    import dataclasses

    import envs
    from envs.wrappers import ActionChunkWrapper
    from imagination.imagined_env import ImaginedVectorEnv
    from imagination.rollout_buffer import env_instructions

    k = policy.chunk_size
    gated_pass = gated_pass and imagined
    score_models = dict(score_models or {}) if imagined else {}
    record_frames = record_frames and imagined
    out: dict[str, list] = {"real": [], "real_env_steps": []}
    if imagined:
        out["imagined_max_p"], out["imagined_p_trace"] = [], []
        out.update({f"imagined_max_p_{m}": [] for m in score_models})
    if gated_pass:
        out.update(imagined=[], gate_ok=[])
    if record_frames:
        out.update(frames=[], frame_episode=[], frame_step=[], instruction=[])
    for ti, task in enumerate(tasks):
        n = episodes_per_task
        seeds = [seed + 1000 * ti + e for e in range(n)]
        real = ActionChunkWrapper(
            envs.make_vec(task, n, image_size=image_size, autoreset_mode="same_step", **(render or {})), k,
            frames="chunk_end",
        )
        icfg = dataclasses.replace(imagination, num_envs=n, horizon=horizon_chunks, gate="mask", chunk_size=k)
        obs_r, info_r = real.reset(seed=seeds)
        instr = env_instructions(real, info_r)
        first_image, first_state = obs_r["image"][:, None], obs_r["state"][:, None]
        env_state_fn = getattr(real.unwrapped, "environment_state", None)
        first_env = None if env_state_fn is None else np.asarray(env_state_fn(), np.float32)[:, None]
        passes = [("real", real, obs_r, info_r)]
        if gated_pass:
            imag = ImaginedVectorEnv(
                world_model, keyframes, success_model=success_model, exec_reward=exec_reward, config=icfg
            )
            passes.append(("imagined", imag, *imag.reset_to(first_image, first_state, instr, [task] * n, first_env)))
        if imagined:
            sweep_cfg = dataclasses.replace(icfg, success_threshold=0.999, gate="off")
            sweep = ImaginedVectorEnv(world_model, keyframes, success_model=success_model, config=sweep_cfg)
            passes.append(("sweep", sweep, *sweep.reset_to(first_image, first_state, instr, [task] * n, first_env)))
        e0 = ti * n  # this task's first episode index
        for name, env, obs, info in passes:
            alive, succ, gate = np.ones(n, bool), np.zeros(n, bool), np.ones(n, bool)
            max_p, steps = np.zeros(n), np.zeros(n, np.int64)
            extra_p = {m: np.zeros(n) for m in score_models}
            trace = np.full((n, horizon_chunks * k), np.nan)
            noise = torch.Generator().manual_seed(seed * 7919 + ti)  # the same stream for every pass
            for c in range(horizon_chunks):
                if deterministic:
                    a = policy.act(obs, env_instructions(env, info), deterministic=True).actions
                else:
                    with torch.random.fork_rng(devices=[]):
                        torch.set_rng_state(noise.get_state())
                        a = policy.act(obs, env_instructions(env, info), deterministic=False).actions
                        noise.set_state(torch.get_rng_state())
                obs, _, term, trunc, info = env.step(np.asarray(a.cpu(), np.float32))
                if name == "sweep" and (score_models or record_frames):
                    done_before = steps.copy()
                    _score_chunk(info, alive, score_models, extra_p, env_instructions(env, info),
                                 out if record_frames else None, e0, done_before)
                succ |= alive & np.asarray(info["success"], bool)
                gate &= ~alive | np.asarray(info.get("gate_ok", np.ones(n, bool)), bool)
                if "chunk_valid" in info:
                    steps += np.where(alive, np.asarray(info["chunk_valid"], bool).sum(1), 0)
                if "chunk_success_prob" in info:
                    trace[:, c * k : (c + 1) * k] = np.where(alive[:, None], info["chunk_success_prob"], np.nan)
                    chunk_max = np.nan_to_num(info["chunk_success_prob"], nan=0.0).max(1)
                    max_p = np.where(alive, np.maximum(max_p, chunk_max), max_p)
                alive &= ~(np.asarray(term) | np.asarray(trunc))
                if not alive.any():
                    break
            if name == "sweep":
                out["imagined_max_p"].append(max_p)
                out["imagined_p_trace"].append(trace)
                for m, v in extra_p.items():
                    out[f"imagined_max_p_{m}"].append(v)
                if record_frames:
                    out["instruction"].append(np.array(instr, dtype=object))
                continue
            out[name].append(succ)
            if name == "real":
                out["real_env_steps"].append(steps)
            if name == "imagined":
                out["gate_ok"].append(gate)
        real.close()
    res = {k2: np.concatenate(v) for k2, v in out.items() if v}
    if record_frames and "frames" not in res:
        size = keyframes.images.shape[1:]
        res.update(frames=np.zeros((0, *size), np.uint8), frame_episode=np.zeros(0, np.int64),
                   frame_step=np.zeros(0, np.int64))
    return res


def _score_chunk(
    info: dict[str, Any],
    alive: np.ndarray,
    score_models: dict[str, Any],
    max_p: dict[str, np.ndarray],
    instructions: list[str],
    record: dict[str, list] | None,
    first_episode: int,
    steps_before: np.ndarray,
) -> None:
    """Score one imagined chunk's executed frames (``info["chunk_frames"]`` (N, K, H, W, 3), executed
    where ``chunk_success_prob`` is not NaN, of the episodes ``alive`` (N,) before the step) with
    each of ``score_models`` (raising ``max_p[name]`` (N,) in place), and append them to ``record``."""
    frames = np.asarray(info["chunk_frames"])
    executed = ~np.isnan(np.asarray(info["chunk_success_prob"], np.float64)) & alive[:, None]
    rows, cols = np.nonzero(executed)
    if len(rows) == 0:
        return
    flat = frames[rows, cols]
    instr = [instructions[r] for r in rows]
    for m, model in score_models.items():
        p = model.predict(flat, instr).cpu().numpy().astype(np.float64)
        best = np.zeros(len(alive))
        np.maximum.at(best, rows, p)
        max_p[m][:] = np.maximum(max_p[m], best)
    if record is not None:
        record["frames"].append(flat)
        record["frame_episode"].append(first_episode + rows)
        record["frame_step"].append(steps_before[rows] + cols + 1)


def paired_success_frames(pairs: dict[str, np.ndarray]) -> Any:
    """Imagined frames labelled by the paired real outcome (``rewards.success.SuccessFrames``).

    ``pairs``: :func:`paired_episodes` output with ``record_frames``. A frame of episode ``e`` that
    follows ``s`` executed actions is a success iff the real episode from the same start succeeded
    within ``s`` steps (the real env stops at its success, after ``real_env_steps[e]`` steps): the
    imagined twin of a real failure is a failure throughout, and the twin of a real success turns
    into one when the real episode did. The success model then learns to read *closed-loop*
    imagined frames, where the world model's compounding errors paint successes that the real
    simulator refutes."""
    from rewards.success import SuccessFrames

    for key in ("frames", "frame_episode", "frame_step", "instruction", "real", "real_env_steps"):
        if key not in pairs:
            raise WmrlError(f"pairs lack {key!r}; run paired_episodes(..., record_frames=True)")
    ep = np.asarray(pairs["frame_episode"], np.int64)
    real = np.asarray(pairs["real"], bool)
    labels = real[ep] & (np.asarray(pairs["frame_step"]) >= np.asarray(pairs["real_env_steps"])[ep])
    return SuccessFrames(
        images=np.asarray(pairs["frames"], np.uint8),
        labels=labels,
        instructions=[str(pairs["instruction"][e]) for e in ep],
        episode=ep,
        terminal=np.zeros(len(ep), bool),
    )


def finetune_success_on_pairs(
    success_model: Any,
    dataset: Any,
    pairs: dict[str, np.ndarray] | list[dict[str, np.ndarray]],
    steps: int = 300,
    extra_share: float = 0.5,
    seed: int = 0,
) -> Any:
    """A copy of ``success_model`` fine-tuned on ``dataset`` (its real frames; ``Trajectories``)
    plus the imagined frames of paired episodes labelled by their real outcomes
    (:func:`paired_success_frames`), which make up ``extra_share`` of each class's draws. The
    original model is untouched."""
    import copy

    from rewards.success import SuccessFrames

    parts = [paired_success_frames(p) for p in (pairs if isinstance(pairs, list) else [pairs])]
    offset, eps = 0, []
    for p in parts:  # distinct episode ids across pair sets
        eps.append(p.episode + offset)
        offset += int(p.episode.max()) + 1 if len(p.episode) else 0
    extra = SuccessFrames(
        images=np.concatenate([p.images for p in parts]),
        labels=np.concatenate([p.labels for p in parts]),
        instructions=[s for p in parts for s in p.instructions],
        episode=np.concatenate(eps),
        terminal=np.concatenate([p.terminal for p in parts]),
    )
    model = copy.deepcopy(success_model)
    model.finetune(dataset, steps=steps, weights=getattr(dataset, "episode_weights", None), seed=seed,
                   extra=extra, extra_share=extra_share)
    model.eval()
    return model


def persisted_max(trace: Any, frames: int) -> np.ndarray:
    """The highest success probability an imagined episode *held* for ``frames`` consecutive
    executed frames: per row of ``trace`` float (E, T) (NaN where no frame was executed), the max
    over windows of ``frames`` consecutive executed frames of the window's min (an episode with
    fewer executed frames: the min over them; none: 0). ``frames=1`` is the plain max. A success
    model that flickers on one hallucinated frame scores low here; a success that stays scores high.
    """
    p = np.asarray(trace, np.float64)
    if p.ndim != 2 or frames < 1:
        raise WmrlError(f"trace has shape {p.shape} and frames={frames}; expected (E, T) and frames >= 1")
    valid = ~np.isnan(p)
    if frames <= p.shape[1]:
        view = np.lib.stride_tricks.sliding_window_view
        win = view(np.where(valid, p, 0.0), frames, axis=1).min(-1)
        whole = view(valid, frames, axis=1).all(-1)  # a window with a non-executed frame does not count
        best = np.where(whole, win, -np.inf).max(1)
    else:
        best = np.full(len(p), -np.inf)
    n_valid = valid.sum(1)
    short = n_valid < frames
    best[short] = np.where(n_valid[short] > 0, np.where(valid, p, np.inf)[short].min(1), 0.0)
    return np.maximum(best, 0.0)


def calibrate_success_persistence(
    trace: Any, real: Any, frames: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
) -> tuple[int, ThresholdCalibration, dict[int, float]]:
    """Choose the success persistence ``m`` and threshold together on paired episodes: for each ``m``
    in ``frames``, :func:`calibrate_success_threshold` on :func:`persisted_max` of the imagined
    probability traces (E, T); the ``m`` with the best Youden's J wins (ties: the smaller ``m``).
    Returns ``(m, its calibration, J per m)``; raises like :func:`calibrate_success_threshold`."""
    if not frames or any(int(m) < 1 for m in frames):
        raise WmrlError(f"frames={frames}: expected a non-empty list of integers >= 1")
    cals = {int(m): calibrate_success_threshold(persisted_max(trace, int(m)), real) for m in frames}
    best = max(cals, key=lambda m: (round(cals[m].youden_j, 9), -m))
    return best, cals[best], {m: c.youden_j for m, c in cals.items()}
