"""GRPO on action chunks (masked, group-shared starts, dynamic sampling), for real or imagined envs.

One iteration (WoVR's masked GRPO, DAPO's dynamic sampling):

1. Reset ``N = num_groups * G`` sub-envs with one seed per group repeated ``G`` times, so a
   group shares its start (a real env reproduces the scene; the imagined env the keyframe).
2. Roll each sub-env's first episode (at most ``max_chunks`` chunk steps).
3. Score each trajectory (success or return); trajectories with an unreliable imagined step
   (``gate_ok`` False) are masked out; advantages are group-relative over the valid members;
   groups whose valid members all scored the same (all-success / all-fail) are dropped.
4. Clipped-ratio policy-gradient on every valid chunk, each trajectory weighted by
   ``1 / valid_length`` (so long trajectories do not dominate), optional KL to the SFT policy.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from imagination.rollout_buffer import (
    RolloutBatch,
    check_policy_env,
    collect_first_episodes,
    match_policy_to_env_dims,
)
from imagination.trainer_utils import (
    RLProgress,
    budget_exhausted,
    check_augment,
    check_freeze,
    check_max_kl,
    checkpoint_budget_stop,
    clipped_surrogate,
    freezes_parameters,
    iteration_generator,
    old_log_prob_dims,
    policy_device,
    real_prefix_steps,
    resume_trainer,
    save_trainer_checkpoint,
    set_exploration_std,
    shift_consistency,
    trainable_parameters,
    trust_region,
)
from kernels.advantages import compute_group_advantages
from wmrl.errors import ConfigError
from wmrl.runs import RunDir, check_finite, seed_everything

SCORES = ("success", "return", "progress")


@dataclass
class GRPOConfig:
    """GRPO hyper-parameters.

    Args:
        iterations: collect/update iterations.
        group_size: G, trajectories per shared start; the env's ``num_envs`` must be a multiple.
        max_chunks: horizon cap in chunk steps per trajectory.
        update_epochs: passes over each batch; minibatch_size: chunk samples per gradient step.
            A success-scored trajectory's advantage is one number for a whole episode of
            chunks, so a gradient from a few trajectories is mostly noise; minibatches that
            cover the whole batch (one Adam step per epoch) average it out (measured on one seed,
            real simulator, 380k steps, exploration_std 0.1: 64 gave 0.275, 1024 gave 0.408, from
            SFT 0.342; ``benchmarks.real_rl`` compares the settings on 3 seeds).
        exploration_std: standard deviation the Gaussian head samples with when RL starts
            (None: the SFT policy's own, fitted to the demos' spread; it stays trainable).
        lr: Adam learning rate; clip_eps: PPO-style ratio clip; max_grad_norm: gradient clip.
        ratio: ``"chunk"``: one importance ratio per action chunk (the joint density of its K*A
            dims, the default); ``"dim"``: one ratio per action dimension, clipped on its own and
            averaged over the chunk's active dims (token-level, as in LLM and tokenised-VLA RL), so
            one sample's drift on a few dims does not clip the whole chunk. Needs a policy whose
            ``evaluate_actions`` gives ``log_prob_dims`` (the built-in VLA's heads do).
        kl_coef: weight of the k3 KL estimate to the reference (SFT) policy (0: no reference).
        entropy_coef: entropy bonus weight.
        dynamic_sampling: drop groups whose valid members all scored the same.
        min_kept_groups: an iteration updates the policy only when at least this many groups are
            kept (``update_skipped`` is logged otherwise). An Adam step on a handful of trajectories
            is as large as one on a full batch, and a fresh optimiser's first steps are the largest:
            in co-evolution rounds where gating and dynamic sampling left 2-13 of 64 imagined
            trajectories, a round's first update moved the policy by an approximate KL of 0.1-0.5 per
            chunk (real GRPO's first update on a full batch: 0.06-0.11; its median over 100
            iterations: 0.004). 1: update on any kept group (the behaviour before this option).
        normalize_std: divide advantages by the group's standard deviation.
        score: ``"success"`` (1 if the episode succeeded), ``"return"`` (sum of rewards) or
            ``"progress"``: 1 if the episode succeeded, else the highest chunk-mean reward it reached
            (the chunk's reward over the single steps it executed). With a staged dense reward in
            [0, 1) below success (the built-in suite's ``reward_type="dense"``), failures are then
            ranked by how far they got, so an all-fail group still teaches, and no failure outscores a
            success (a dense *return* would: a long failure sums more than a quick success). With
            the sparse success reward it equals ``"success"``.
        gate: ``"mask"`` drops trajectories with an unreliable imagined step; ``"off"`` keeps them.
        seed: seed of start states, sampling and minibatch order.
        checkpoint_every: iterations between checkpoints (with a run folder).
        start_pool: 0: every iteration's groups start from new starts (seeds never seen before);
            P > 0 (a multiple of the number of groups): the starts cycle through a fixed pool of P, as
            LIBERO's fixed initial states per task (group g of iteration i takes start
            ``(i * groups + g) mod P``, so a group slot, and with it its task, keeps its own starts).
            Training success is then measured on the same starts again and again: set against the
            held-out evaluation it tells fitting from generalising.
        freeze: parameter-name prefixes of the policy that RL leaves as they are (e.g.
            ``[net.image_enc]``: the built-in VLA's vision encoder), so the noisy policy gradient
            moves only the rest; [] trains every trainable parameter.
        augment_shift: > 0: each update minibatch also scores its stored actions on frames shifted
            by up to this many pixels (random shift, as SFT's ``augment_shift``), and
            ``augment_coef`` x the KL from the behaviour policy on the real frames to the policy on
            the shifted ones joins the loss (``trainer_utils.shift_consistency``; DrAC), so what RL
            changes is tied to what the frames show, not to their exact pixels; 0: off.
        augment_coef: weight of that consistency KL (nats per chunk).
        max_kl: > 0: a trust region on every update. After an iteration's Adam steps the KL from the
            behaviour policy to the updated one is measured on the trained chunks (k3, nats per
            chunk); above ``max_kl`` the parameter step is halved until it is within it (TRPO's
            backtracking line search, applied to the finished update; ``update_kl``,
            ``update_kl_full`` and ``trust_region_scale`` are logged). A fresh Adam's first steps
            are full-size however few trajectories were kept, so without it a handful of imagined
            trajectories can move the policy as far as a full batch (see ``min_kept_groups``).
            Costs one forward pass over the batch per try. 0: off.
    """

    iterations: int = 20
    group_size: int = 8
    max_chunks: int = 10
    update_epochs: int = 2
    minibatch_size: int = 64
    exploration_std: float | None = None
    lr: float = 1e-4
    clip_eps: float = 0.2
    max_grad_norm: float = 1.0
    ratio: str = "chunk"
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    dynamic_sampling: bool = True
    min_kept_groups: int = 1
    normalize_std: bool = True
    score: str = "success"
    gate: str = "mask"
    seed: int = 0
    checkpoint_every: int = 5
    start_pool: int = 0
    freeze: list[str] = field(default_factory=list)
    augment_shift: int = 0
    augment_coef: float = 0.1
    max_kl: float = 0.0

    def __post_init__(self) -> None:
        self.freeze = check_freeze(self.freeze)
        self.augment_shift = check_augment(self.augment_shift, self.augment_coef)
        for k in (
            "iterations",
            "group_size",
            "max_chunks",
            "update_epochs",
            "minibatch_size",
            "checkpoint_every",
            "start_pool",
            "min_kept_groups",
        ):
            v, lo = getattr(self, k), 0 if k in ("iterations", "start_pool") else 1
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ConfigError(f"{k}={v!r} must be an integer >= {lo}")
        if self.group_size < 2:
            raise ConfigError(
                f"group_size={self.group_size} must be >= 2 (advantages are relative within a group)"
            )
        if not (self.lr > 0 and 0 < self.clip_eps < 1 and self.max_grad_norm > 0):
            raise ConfigError(
                f"lr={self.lr}, clip_eps={self.clip_eps}, max_grad_norm={self.max_grad_norm} out of range"
            )
        if self.exploration_std is not None and not self.exploration_std > 0:
            raise ConfigError(f"exploration_std={self.exploration_std!r} must be > 0 or null")
        if self.kl_coef < 0 or self.entropy_coef < 0:
            raise ConfigError(f"kl_coef={self.kl_coef} and entropy_coef={self.entropy_coef} must be >= 0")
        if self.score not in SCORES:
            raise ConfigError(f"score={self.score!r}; expected one of {', '.join(SCORES)}")
        if self.gate not in ("mask", "off"):
            raise ConfigError(f"gate={self.gate!r}; expected 'mask' or 'off'")
        if self.ratio not in ("chunk", "dim"):
            raise ConfigError(f"ratio={self.ratio!r}; expected 'chunk' or 'dim'")
        self.max_kl = check_max_kl(self.max_kl)


def trajectory_scores(
    batch: RolloutBatch, score: str, gate: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-trajectory ``(scores float32 (N,), valid bool (N,), lengths int64 (N,))``.

    A trajectory is valid when it is not gated out (``gate="mask"``: every executed step reliable)."""
    lengths = batch.valid.sum(0)
    success = (batch.success & batch.valid).any(0).float()
    if score == "success":
        scores = success
    elif score == "progress":
        per_step = batch.rewards / batch.executed.clamp(min=1.0)
        peak = torch.where(batch.valid, per_step, torch.zeros_like(per_step)).amax(0).clamp(0.0, 1.0)
        scores = torch.where(success > 0, torch.ones_like(peak), peak)
    else:
        scores = (batch.rewards * batch.valid).sum(0)
    ok = lengths > 0
    if gate == "mask":
        ok &= (batch.gate_ok | ~batch.valid).all(0)
    return scores, ok, lengths


def grpo_update(
    policy: Any,
    opt: torch.optim.Optimizer,
    batch: RolloutBatch,
    adv_traj: torch.Tensor,
    keep: torch.Tensor,
    cfg: GRPOConfig,
    gen: torch.Generator,
) -> dict[str, float]:
    """Clipped-ratio update on every trainable chunk of the kept trajectories (``batch.trainable``: valid
    and not marked ``untrained`` by the env; each trajectory's weight 1 is shared by them; one screen,
    cleanrl style)."""
    dev = policy_device(policy)  # the batch lives on the CPU; the per-sample terms move to the policy
    trained = batch.trainable & keep[None, :]
    t_idx, n_idx = torch.nonzero(trained, as_tuple=True)
    old_logp, adv = batch.log_probs[t_idx, n_idx].to(dev), adv_traj[n_idx].to(dev)
    per_dim = cfg.ratio == "dim" and len(t_idx) > 0
    old_dims = old_log_prob_dims(policy, batch, t_idx, n_idx, cfg.minibatch_size) if per_dim else None
    # masked GRPO: each trajectory's trained chunks share weight 1
    w = (1.0 / trained.sum(0).clamp(min=1)[n_idx].float()).to(dev)
    ref_logp = batch.ref_log_probs[t_idx, n_idx].to(dev) if batch.ref_log_probs is not None else None
    stats: dict[str, list[float]] = {
        "loss": [],
        "kl": [],
        "clip_frac": [],
        "approx_kl_old": [],
        "entropy": [],
        "augment_kl": [],
    }
    params = trainable_parameters(policy)
    start = [p.detach().clone() for p in params] if cfg.max_kl > 0 else None
    for _ in range(cfg.update_epochs):
        for mb in torch.randperm(len(t_idx), generator=gen).split(cfg.minibatch_size):
            obs, instr, act = batch.gather(t_idx[mb], n_idx[mb])
            ev = policy.evaluate_actions(obs, instr, act)
            if old_dims is not None:
                pg, clip_frac = clipped_surrogate(
                    ev.log_prob_dims - old_dims[mb], adv[mb], cfg.clip_eps, ev.dim_mask
                )
            else:
                pg, clip_frac = clipped_surrogate(ev.log_prob - old_logp[mb], adv[mb], cfg.clip_eps, None)
            log_ratio = (ev.log_prob - old_logp[mb]).clamp(-20.0, 20.0)  # the chunk's, for the KL statistic
            wm = w[mb] / w[mb].sum()
            loss = (pg * wm).sum() - cfg.entropy_coef * (ev.entropy * wm).sum()
            kl = torch.zeros((), device=dev)
            if ref_logp is not None and cfg.kl_coef > 0:
                d = (ref_logp[mb] - ev.log_prob).clamp(-20.0, 20.0)
                kl = ((d.exp() - d - 1.0) * wm).sum()  # k3 estimator of KL(pi || pi_ref)
                loss = loss + cfg.kl_coef * kl
            if cfg.augment_shift:
                aug = shift_consistency(policy, obs, instr, act, old_logp[mb], cfg.augment_shift, gen)
                aug_kl = (aug * wm).sum()
                loss = loss + cfg.augment_coef * aug_kl
                stats["augment_kl"].append(float(aug_kl.detach()))
            check_finite("GRPO loss", loss)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm)
            opt.step()
            stats["loss"].append(float(loss.detach()))
            stats["kl"].append(float(kl.detach()))
            stats["clip_frac"].append(float(clip_frac))
            stats["approx_kl_old"].append(float((log_ratio.exp() - 1 - log_ratio).detach().mean()))
            stats["entropy"].append(float(ev.entropy.detach().mean()))
    out = {k: sum(v) / len(v) for k, v in stats.items() if v}
    if start is not None and len(t_idx):
        out.update(trust_region(policy, params, start, batch, t_idx, n_idx, old_logp, cfg.minibatch_size, cfg.max_kl))
    return out


def group_seed(rl_seed: int, start: int) -> int:
    """The reset seed a GRPO group gets for start index ``start`` (iteration i's group g: ``i * groups + g``,
    modulo ``start_pool`` when set): equal seeds start alike in the real and the imagined envs."""
    return rl_seed * 1_000_003 + start


@freezes_parameters
def train_grpo(
    env: Any,
    policy: Any,
    cfg: GRPOConfig,
    run: RunDir | None = None,
    ref_policy: Any | None = None,
    progress: bool = True,
    log_prefix: str = "grpo/",
    max_env_steps: float | None = None,
) -> list[dict[str, float]]:
    """Train ``policy`` in place with GRPO on ``env`` (real or imagined; chunk-stepping).

    Args:
        env: vector env honouring the wmrl contract, stepping chunks ``(N, K, A)``;
            ``env.num_envs`` must be a multiple of ``cfg.group_size``.
        policy: a ``policies.Policy`` (``act``/``evaluate_actions``); ``ref_policy`` is the frozen
            SFT policy for the KL term (a copy of ``policy`` is taken when ``kl_coef > 0`` and
            none is given).
        run: run folder for metrics and checkpoints; resumes from its latest checkpoint.
        max_env_steps: stop once the single env steps executed (valid or not) reach this budget
            (RL in the real simulator at a fixed real-step budget); None: ``cfg.iterations`` only.

    Returns:
        one metrics dict per iteration (also appended to ``run``'s metrics.jsonl).
    """
    check_policy_env(policy, env)
    n = env.num_envs
    if n % cfg.group_size:
        raise ConfigError(f"env num_envs={n} is not a multiple of group_size={cfg.group_size}")
    num_groups = n // cfg.group_size
    if cfg.start_pool % num_groups:
        raise ConfigError(
            f"start_pool={cfg.start_pool} must be a multiple of the {num_groups} groups per iteration "
            f"(num_envs {n} / group_size {cfg.group_size}), so each group slot keeps its own starts"
        )
    if cfg.kl_coef > 0 and ref_policy is None:
        ref_policy = copy.deepcopy(policy).requires_grad_(False)
    match_policy_to_env_dims(env, policy, ref_policy)
    seed_everything(cfg.seed)
    opt = torch.optim.Adam(trainable_parameters(policy), lr=cfg.lr)
    start, history = resume_trainer(run, {"policy": policy}, {"policy": opt})
    if start == 0:  # a resumed run already holds its (trained) std
        set_exploration_std(cfg.exploration_std, policy, ref_policy)
    bar = RLProgress("GRPO", start, cfg.iterations, history, max_env_steps, progress)
    for it in range(start, cfg.iterations):
        if budget_exhausted(history, max_env_steps):  # stop before the next iteration would exceed it
            checkpoint_budget_stop(
                run, it, start, cfg.checkpoint_every, {"policy": policy}, {"policy": opt}, history
            )
            break
        t0 = time.perf_counter()
        gen = iteration_generator(cfg.seed, it)
        starts = [it * num_groups + g for g in range(num_groups)]
        if cfg.start_pool:
            starts = [x % cfg.start_pool for x in starts]
        group_seeds = [group_seed(cfg.seed, x) for x in starts]
        seeds = [s for s in group_seeds for _ in range(cfg.group_size)]
        prefix0 = real_prefix_steps(env)
        batch = collect_first_episodes(env, policy, cfg.max_chunks, seeds=seeds, ref_policy=ref_policy)
        scores, valid, lengths = trajectory_scores(batch, cfg.score, cfg.gate)
        group_ids = torch.arange(n) // cfg.group_size
        adv, std = compute_group_advantages(scores, group_ids, valid, cfg.normalize_std)
        keep = valid & (std > 0 if cfg.dynamic_sampling else torch.ones(n, dtype=torch.bool))
        kept_groups = int(group_ids[keep].unique().numel())
        m: dict[str, float] = {
            "iteration": it,
            "score_mean": float(scores.mean()),
            "success_rate": float((batch.success & batch.valid).any(0).float().mean()),
            "valid_frac": float(valid.float().mean()),
            "kept_frac": float(keep.float().mean()),
            "kept_groups": float(kept_groups),
            "chunk_steps": float(batch.valid.sum()),
            "mean_length": float(lengths.float().mean()),
            "env_steps": float(batch.executed.sum()),
        }
        if prefix0 is not None:
            m["real_prefix_steps"] = real_prefix_steps(env) - prefix0
        if kept_groups >= cfg.min_kept_groups:  # >= 1 kept group
            m.update(grpo_update(policy, opt, batch, adv, keep, cfg, gen))
        else:
            m["update_skipped"] = 1.0
            _warn_if_all_gated(valid)
        m["iter_time_s"] = time.perf_counter() - t0
        history.append(m)
        if run is not None:
            run.log(it, {log_prefix + k: v for k, v in m.items()})
            if (it + 1) % cfg.checkpoint_every == 0 or it + 1 == cfg.iterations:
                save_trainer_checkpoint(run, it + 1, {"policy": policy}, {"policy": opt}, history)
        bar.advance(m, success=f"{m['success_rate']:.2f}", kept=f"{m['kept_frac']:.2f}")
    bar.close()
    return history


def _warn_if_all_gated(valid: torch.Tensor) -> None:
    """An iteration where gating rejected every trajectory is worth a warning, not an error;
    but a run where no trajectory is ever reliable would silently train nothing."""
    if not valid.any():
        import warnings

        warnings.warn("GRPO: every trajectory was gated out this iteration (no update)", stacklevel=2)


__all__ = ["GRPOConfig", "grpo_update", "train_grpo", "trajectory_scores"]
