"""PPO with GAE and a critic on action chunks, for real or imagined envs (cleanrl style).

The critic is the policy's value head when ``policy.act`` returns ``value``; otherwise a small
:class:`ValueNet` (conv encoder of the image + MLP of the state) trained beside it. One chunk
step is one PPO step (discount ``gamma`` per chunk). Invalid steps (NEXT_STEP reset steps,
gated-out imagined steps) are excluded from the loss.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from imagination.rollout_buffer import (
    StepCollector,
    check_policy_env,
    env_instructions,
    match_policy_to_env_dims,
    obs_to_torch,
)
from imagination.trainer_utils import (
    RLProgress,
    action_parameters,
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
from kernels.advantages import compute_gae
from wmrl.devices import AdaptiveAvgPool2d
from wmrl.errors import ConfigError
from wmrl.runs import RunDir, check_finite, seed_everything


@dataclass
class PPOConfig:
    """PPO hyper-parameters.

    Args:
        iterations: collect/update iterations; num_steps: chunk steps per sub-env per iteration.
        update_epochs, minibatch_size: passes and samples per gradient step.
        exploration_std: standard deviation the Gaussian head samples with when RL starts
            (None: the SFT policy's own; see ``GRPOConfig.exploration_std``).
        lr: Adam learning rate (policy); critic_lr: learning rate of a separate critic.
        gamma, gae_lambda: discount per chunk step and GAE lambda.
        clip_eps: ratio clip; ratio: ``"chunk"`` or ``"dim"`` (see ``GRPOConfig.ratio``); vf_coef: value loss weight; entropy_coef: entropy bonus;
        max_grad_norm: gradient clip; norm_adv: normalise advantages per minibatch.
        critic_warmup: value-only epochs on the first batch before the policy moves (a fresh
            critic on a pretrained policy would otherwise push it with noise).
        seed: seed of resets, sampling and minibatch order; checkpoint_every: iterations.
        freeze: parameter-name prefixes of the policy RL leaves as they are (see ``GRPOConfig.freeze``).
        augment_shift, augment_coef: the shift-consistency KL on the policy (see
            ``GRPOConfig.augment_shift``; the critic trains on the real frames); 0: off.
        max_kl: > 0: a trust region on every iteration's update, as ``GRPOConfig.max_kl``: the KL
            from the behaviour policy to the updated one on the iteration's valid chunks (k3, nats
            per chunk) above it halves the step of the parameters the action distribution depends
            on until it is within it (a value head's own layers and a separate critic keep their
            full step; a shared trunk is scaled with the policy). 0: off.
    """

    iterations: int = 20
    num_steps: int = 8
    update_epochs: int = 4
    minibatch_size: int = 64
    exploration_std: float | None = None
    lr: float = 1e-4
    critic_lr: float = 1e-3
    gamma: float = 0.95
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ratio: str = "chunk"
    vf_coef: float = 0.5
    entropy_coef: float = 0.0
    max_grad_norm: float = 1.0
    norm_adv: bool = True
    critic_warmup: int = 4
    seed: int = 0
    checkpoint_every: int = 5
    freeze: list[str] = field(default_factory=list)
    augment_shift: int = 0
    augment_coef: float = 0.1
    max_kl: float = 0.0

    def __post_init__(self) -> None:
        self.freeze = check_freeze(self.freeze)
        self.max_kl = check_max_kl(self.max_kl)
        self.augment_shift = check_augment(self.augment_shift, self.augment_coef)
        for k in (
            "iterations",
            "num_steps",
            "update_epochs",
            "minibatch_size",
            "checkpoint_every",
            "critic_warmup",
        ):
            v = getattr(self, k)
            lo = 0 if k in ("iterations", "critic_warmup") else 1
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ConfigError(f"{k}={v!r} must be an integer >= {lo}")
        if self.exploration_std is not None and not self.exploration_std > 0:
            raise ConfigError(f"exploration_std={self.exploration_std!r} must be > 0 or null")
        if not (0 <= self.gamma <= 1 and 0 <= self.gae_lambda <= 1):
            raise ConfigError(f"gamma={self.gamma} and gae_lambda={self.gae_lambda} must lie in [0, 1]")
        if not (self.lr > 0 and self.critic_lr > 0 and 0 < self.clip_eps < 1 and self.max_grad_norm > 0):
            raise ConfigError(
                f"lr={self.lr}, critic_lr={self.critic_lr}, clip_eps={self.clip_eps} out of range"
            )
        if self.ratio not in ("chunk", "dim"):
            raise ConfigError(f"ratio={self.ratio!r}; expected 'chunk' or 'dim'")


class ValueNet(nn.Module):
    """Critic V(image, state): conv encoder on uint8 ``(B, H, W, 3)`` + MLP on ``(B, D)`` -> ``(B,)``."""

    def __init__(self, state_dim: int, width: int = 32):
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(3, width, 5, stride=2, padding=2),
            nn.SiLU(),
            nn.Conv2d(width, width, 3, stride=2, padding=1),
            nn.SiLU(),
            nn.Conv2d(width, width, 3, stride=2, padding=1),
            nn.SiLU(),
            AdaptiveAvgPool2d(4),  # wmrl's: deterministic on CUDA under use_deterministic_algorithms
            nn.Flatten(),
        )
        self.mlp = nn.Sequential(nn.Linear(width * 16 + state_dim, 128), nn.SiLU(), nn.Linear(128, 1))

    def forward(self, obs: dict[str, Tensor], instructions: list[str] | None = None) -> Tensor:
        dev = self.mlp[0].weight.device
        img = obs["image"].to(dev).permute(0, 3, 1, 2).float() / 127.5 - 1.0
        return self.mlp(torch.cat([self.conv(img), obs["state"].to(dev).float()], -1)).squeeze(-1)


@freezes_parameters
def train_ppo(
    env: Any,
    policy: Any,
    cfg: PPOConfig,
    run: RunDir | None = None,
    critic: nn.Module | None = None,
    progress: bool = True,
    log_prefix: str = "ppo/",
    max_env_steps: float | None = None,
) -> list[dict[str, float]]:
    """Train ``policy`` in place with PPO on ``env``; returns one metrics dict per iteration.

    Args:
        env: vector env stepping chunks ``(N, K, A)`` (real + ActionChunkWrapper, or imagined).
        policy: a ``policies.Policy``; without a value head, ``critic`` (default: a new
            :class:`ValueNet`) is trained beside it.
        run: run folder for metrics and checkpoints; resumes from its latest checkpoint.
        max_env_steps: stop once the single env steps executed reach this budget (None: no cap).
    """
    check_policy_env(policy, env)
    match_policy_to_env_dims(env, policy)
    seed_everything(cfg.seed)
    collector = StepCollector(env, seed=cfg.seed)
    if critic is None:
        with torch.no_grad():
            probe = policy.act(obs_to_torch(collector.obs), env_instructions(env, collector.info))
        if probe.value is None:
            critic = ValueNet(int(env.single_observation_space["state"].shape[-1])).to(policy_device(policy))
    modules: dict[str, nn.Module] = {"policy": policy}
    opts = {"policy": torch.optim.Adam(trainable_parameters(policy), lr=cfg.lr)}
    if critic is not None:
        modules["critic"] = critic
        opts["critic"] = torch.optim.Adam(critic.parameters(), lr=cfg.critic_lr)
    value_fn = critic  # None: the policy's own value head
    tr_params: list[nn.Parameter] | None = None  # what the trust region (cfg.max_kl) scales back

    start, history = resume_trainer(run, modules, opts)
    if start == 0:  # a resumed run already holds its (trained) std
        set_exploration_std(cfg.exploration_std, policy)
    bar = RLProgress("PPO", start, cfg.iterations, history, max_env_steps, progress)
    for it in range(start, cfg.iterations):
        if budget_exhausted(history, max_env_steps):  # stop before the next iteration would exceed it
            checkpoint_budget_stop(run, it, start, cfg.checkpoint_every, modules, opts, history)
            break
        t0 = time.perf_counter()
        gen = iteration_generator(cfg.seed, it)
        prefix0 = real_prefix_steps(env)
        batch, last_value = collector.collect(policy, cfg.num_steps, value_fn)
        dones = batch.terminated | batch.truncated
        rewards = batch.rewards + cfg.gamma * batch.final_values * (batch.truncated & ~batch.terminated)
        adv, ret = compute_gae(rewards, batch.values, dones, last_value, cfg.gamma, cfg.gae_lambda)
        t_idx, n_idx = torch.nonzero(batch.valid, as_tuple=True)
        dev = policy_device(policy)  # the batch lives on the CPU; the per-sample terms move to the policy
        old_logp, adv_s, ret_s = (x[t_idx, n_idx].to(dev) for x in (batch.log_probs, adv, ret))
        per_dim = cfg.ratio == "dim" and len(t_idx) > 0
        old_dims = old_log_prob_dims(policy, batch, t_idx, n_idx, cfg.minibatch_size) if per_dim else None
        warm = cfg.critic_warmup if (it == 0 and critic is not None) else 0
        start_params = None
        if cfg.max_kl > 0 and len(t_idx):
            if tr_params is None:
                tr_params = action_parameters(policy, trainable_parameters(policy), batch, t_idx, n_idx)
            start_params = [p.detach().clone() for p in tr_params]
        stats: dict[str, list[float]] = {"pg_loss": [], "v_loss": [], "entropy": [], "clip_frac": [], "augment_kl": []}
        for epoch in range(warm + cfg.update_epochs):
            for mb in torch.randperm(len(t_idx), generator=gen).split(cfg.minibatch_size):
                obs, instr, act = batch.gather(t_idx[mb], n_idx[mb])
                ev = policy.evaluate_actions(obs, instr, act)
                value = critic(obs, instr) if critic is not None else ev.value
                a = adv_s[mb]
                if cfg.norm_adv and len(mb) > 1:
                    a = (a - a.mean()) / (a.std() + 1e-8)
                if old_dims is not None:
                    pg, clip_frac = clipped_surrogate(
                        ev.log_prob_dims - old_dims[mb], a, cfg.clip_eps, ev.dim_mask
                    )
                else:
                    pg, clip_frac = clipped_surrogate(ev.log_prob - old_logp[mb], a, cfg.clip_eps, None)
                pg_loss = pg.mean()
                v_loss = 0.5 * ((value - ret_s[mb]) ** 2).mean()
                policy_on = epoch >= warm
                loss = (pg_loss - cfg.entropy_coef * ev.entropy.mean()) * policy_on + cfg.vf_coef * v_loss
                if cfg.augment_shift and policy_on:
                    aug = shift_consistency(policy, obs, instr, act, old_logp[mb], cfg.augment_shift, gen)
                    loss = loss + cfg.augment_coef * aug.mean()
                    stats["augment_kl"].append(float(aug.detach().mean()))
                check_finite("PPO loss", loss)
                for o in opts.values():
                    o.zero_grad(set_to_none=True)
                loss.backward()
                for name, o in opts.items():
                    torch.nn.utils.clip_grad_norm_(trainable_parameters(modules[name]), cfg.max_grad_norm)
                    if name == "critic" or policy_on:
                        o.step()
                stats["pg_loss"].append(float(pg_loss.detach()))
                stats["v_loss"].append(float(v_loss.detach()))
                stats["entropy"].append(float(ev.entropy.detach().mean()))
                stats["clip_frac"].append(float(clip_frac))
        m: dict[str, float] = {"iteration": it, **{k: sum(v) / len(v) for k, v in stats.items() if v}}
        if start_params is not None:
            m.update(trust_region(policy, tr_params, start_params, batch, t_idx, n_idx, old_logp,
                                  cfg.minibatch_size, cfg.max_kl))
        m.update(collector.pop_episode_stats())
        m["chunk_steps"] = float(batch.valid.sum())
        m["env_steps"] = float(batch.executed.sum())
        if prefix0 is not None:
            m["real_prefix_steps"] = real_prefix_steps(env) - prefix0
        m["iter_time_s"] = time.perf_counter() - t0
        history.append(m)
        if run is not None:
            run.log(it, {log_prefix + k: v for k, v in m.items()})
            if (it + 1) % cfg.checkpoint_every == 0 or it + 1 == cfg.iterations:
                save_trainer_checkpoint(run, it + 1, modules, opts, history)
        bar.advance(m, success=f"{m.get('episode_success', float('nan')):.2f}")
    bar.close()
    return history


__all__ = ["PPOConfig", "ValueNet", "train_ppo"]
