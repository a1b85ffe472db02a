"""Action-chunk heads behind one interface.

Every head maps a feature vector ``(B, F)`` to a distribution over chunks ``(B, K, A)`` in [-1, 1]:

* ``sample(feat, deterministic) -> (actions (B,K,A), log_prob (B,), entropy (B,))``
* ``evaluate(feat, actions) -> (log_prob (B,), entropy (B,))``: the same log-probability the
  sample call returned for a chunk it produced (tested), differentiable.
* ``evaluate_dims(feat, actions) -> (log_prob per dim (B,K,A), entropy (B,))``: the terms
  ``evaluate`` sums (zero on inactive dims), for per-dimension (token-level) ratios in RL.
* ``bc_loss(feat, actions, mask (B,K)) -> (loss, logs)`` for supervised fine-tuning.
* ``set_active_dims(dims)``: action dims the embodiment ignores (e.g. the built-in suite's rotation
  dims, ``env.metadata["action_dims_used"]``) are emitted at their mode, without sampling noise, and
  left out of log-probs and entropies, so RL gradients and ratios carry no noise from actions that
  change nothing. Default: every dim active. Not saved with the policy (the RL trainers set it
  from the env); supervised fine-tuning ignores it.

Heads (registry :data:`HEADS`):

* ``gaussian``: diagonal Gaussian with a state-independent (parameter) or state-dependent
  (linear) log-std. ``squash=False`` clips samples to [-1, 1] and scores them exactly as a
  *censored* Gaussian: the density inside (-1, 1) and the tail mass ``Phi`` at +-1 (gripper
  commands of exactly +-1 get probability mass, not a density). ``squash=True`` uses
  ``a = tanh(u)`` with the exact change-of-variables correction. Entropy is that of the
  underlying Gaussian (an upper bound for the clipped/squashed one), as in SAC/PPO practice.
* ``tokens``: OpenVLA-style discretisation: each of the K*A action dimensions is one categorical
  over ``num_bins`` uniform bins spanning [-1, 1] (bin centres include -1 and +1); log-prob and
  entropy are exact.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from policies.row_stable import RowStableLinear

LOG_STD_MIN, LOG_STD_MAX = -5.0, 1.0
_SQUASH_EPS = 1e-4


class ActionHead(nn.Module):
    """Base class. Args: in_dim F, chunk_size K, action_dim A."""

    def __init__(self, in_dim: int, chunk_size: int, action_dim: int):
        super().__init__()
        self.in_dim, self.chunk_size, self.action_dim = in_dim, chunk_size, action_dim
        self.register_buffer("dim_mask", torch.ones(action_dim), persistent=False)

    def set_active_dims(self, dims: list[int] | tuple[int, ...] | None) -> None:
        """Make only ``dims`` (indices < A) stochastic and scored; None: all dims."""
        mask = torch.ones(self.action_dim, device=self.dim_mask.device)
        if dims is not None:
            dims = [int(d) for d in dims]
            if not dims or min(dims) < 0 or max(dims) >= self.action_dim:
                raise ValueError(f"active dims {dims} must be a non-empty subset of 0..{self.action_dim - 1}")
            mask.zero_()
            mask[dims] = 1.0
        self.dim_mask.copy_(mask)

    def set_exploration_std(self, std: float) -> bool:
        """Set the sampling noise an RL run starts from; False: this head has no Gaussian std
        (the ``tokens`` head explores through its categorical distribution and temperature)."""
        return False

    def _masked_sum(self, x: Tensor) -> Tensor:
        """(B, K, A) per-dim terms -> (B,) summed over the active dims."""
        return (x * self.dim_mask).flatten(1).sum(-1)

    def sample(self, feat: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        raise NotImplementedError

    def evaluate_dims(self, feat: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        """feat (B, F), actions (B, K, A) -> per-dim log-probs (B, K, A), zero on inactive dims, and entropy (B,)."""
        raise NotImplementedError

    def evaluate(self, feat: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        """feat (B, F), actions (B, K, A) -> log_prob (B,) (the sum of :meth:`evaluate_dims`), entropy (B,)."""
        lp, entropy = self.evaluate_dims(feat, actions)
        return lp.flatten(1).sum(-1), entropy

    def bc_loss(self, feat: Tensor, actions: Tensor, mask: Tensor) -> tuple[Tensor, dict[str, float]]:
        raise NotImplementedError


class GaussianHead(ActionHead):
    """Diagonal Gaussian chunk head (clipped-censored or tanh-squashed), see module docstring.

    Args:
        log_std_mode: ``"state_independent"`` (one learned vector) or ``"state_dependent"``.
        squash: tanh squashing (True) or clipping with the censored likelihood (False).
        init_log_std: initial log standard deviation.
    """

    def __init__(
        self,
        in_dim: int,
        chunk_size: int,
        action_dim: int,
        log_std_mode: str = "state_independent",
        squash: bool = False,
        init_log_std: float = -1.0,
    ):
        super().__init__(in_dim, chunk_size, action_dim)
        n = chunk_size * action_dim
        self.mean = RowStableLinear(in_dim, n)
        nn.init.zeros_(self.mean.bias)
        self.mean.weight.data.mul_(0.1)
        self.log_std_mode, self.squash = log_std_mode, squash
        if log_std_mode == "state_independent":
            self.log_std = nn.Parameter(torch.full((n,), float(init_log_std)))
        else:
            self.log_std_layer = RowStableLinear(in_dim, n)
            nn.init.zeros_(self.log_std_layer.weight)
            nn.init.constant_(self.log_std_layer.bias, float(init_log_std))

    @torch.no_grad()
    def set_exploration_std(self, std: float) -> bool:
        """Make every dim's standard deviation ``std`` (in [-1, 1] action units), whatever the
        state: the std fitted by supervised fine-tuning measures the demos' spread around the
        mean, which can be far more noise than RL from that mean needs (see
        ``imagination.grpo.GRPOConfig.exploration_std``). The std stays trainable."""
        lo, hi = math.exp(LOG_STD_MIN), math.exp(LOG_STD_MAX)
        if not (lo <= float(std) <= hi):
            raise ValueError(f"exploration_std={std} must lie in [{lo:.4g}, {hi:.4g}]")
        if self.log_std_mode == "state_independent":
            self.log_std.fill_(math.log(float(std)))
        else:
            self.log_std_layer.weight.zero_()
            self.log_std_layer.bias.fill_(math.log(float(std)))
        return True

    def params(self, feat: Tensor) -> tuple[Tensor, Tensor]:
        """feat (B, F) -> mean (B, K, A) (pre-squash when ``squash``), std (B, K, A)."""
        shape = (feat.shape[0], self.chunk_size, self.action_dim)
        mu = self.mean(feat).view(shape)
        if self.log_std_mode == "state_independent":
            log_std = self.log_std.view(1, self.chunk_size, self.action_dim).expand(shape)
        else:
            log_std = self.log_std_layer(feat).view(shape)
        log_std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        return mu, log_std.exp()

    def _gauss_entropy(self, std: Tensor) -> Tensor:
        return self._masked_sum(0.5 * math.log(2 * math.pi * math.e) + std.log())

    def _log_prob_dims(self, mu: Tensor, std: Tensor, actions: Tensor) -> Tensor:
        """(B, K, A) per-dim log-densities (censored or squashed), zero on inactive dims."""
        if self.squash:
            a = actions.clamp(-1 + _SQUASH_EPS, 1 - _SQUASH_EPS)
            u = torch.atanh(a)
            lp = torch.distributions.Normal(mu, std, validate_args=False).log_prob(u) - torch.log1p(-a.pow(2))
        else:
            lp_in = torch.distributions.Normal(mu, std, validate_args=False).log_prob(actions)
            lp_lo = torch.special.log_ndtr((-1.0 - mu) / std)
            lp_hi = torch.special.log_ndtr((mu - 1.0) / std)
            lp = torch.where(actions <= -1.0, lp_lo, torch.where(actions >= 1.0, lp_hi, lp_in))
        return lp * self.dim_mask

    def sample(self, feat: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        mu, std = self.params(feat)
        u = mu if deterministic else mu + std * torch.randn_like(mu) * self.dim_mask
        actions = torch.tanh(u).clamp(-1 + _SQUASH_EPS, 1 - _SQUASH_EPS) if self.squash else u.clamp(-1.0, 1.0)
        return actions, self._log_prob_dims(mu, std, actions).flatten(1).sum(-1), self._gauss_entropy(std)

    def evaluate_dims(self, feat: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        mu, std = self.params(feat)
        return self._log_prob_dims(mu, std, actions), self._gauss_entropy(std)

    def bc_loss(self, feat: Tensor, actions: Tensor, mask: Tensor) -> tuple[Tensor, dict[str, float]]:
        """Mean-squared error of the mean (in action space) plus the likelihood of the std (mean detached)."""
        mu, std = self.params(feat)
        m = mask.unsqueeze(-1).float()
        denom = m.sum().clamp_min(1.0) * self.action_dim
        pred = torch.tanh(mu) if self.squash else mu
        mse = ((pred - actions).pow(2) * m).sum() / denom
        if self.squash:
            target = torch.atanh(actions.clamp(-1 + 0.05, 1 - 0.05))
        else:
            target = actions
        nll = -(torch.distributions.Normal(mu.detach(), std, validate_args=False).log_prob(target) * m).sum() / denom
        return mse + 0.01 * nll, {"mse": float(mse.detach()), "std_nll": float(nll.detach())}


class TokenHead(ActionHead):
    """OpenVLA-style discretised actions: K*A independent categoricals over ``num_bins`` bins in [-1, 1].

    Args:
        num_bins: bins per action dimension (>= 2); bin ``i`` decodes to ``-1 + 2 i / (num_bins - 1)``.
        temperature: sampling temperature folded into the logits (log-probs are of the tempered distribution).
    """

    def __init__(self, in_dim: int, chunk_size: int, action_dim: int, num_bins: int = 64, temperature: float = 1.0):
        super().__init__(in_dim, chunk_size, action_dim)
        self.num_bins, self.temperature = num_bins, temperature
        self.logits = RowStableLinear(in_dim, chunk_size * action_dim * num_bins)
        self.logits.weight.data.mul_(0.1)
        self.register_buffer("centres", torch.linspace(-1.0, 1.0, num_bins), persistent=False)

    def _logits(self, feat: Tensor) -> Tensor:
        """(B, F) -> log-softmax logits (B, K, A, num_bins)."""
        z = self.logits(feat).view(feat.shape[0], self.chunk_size, self.action_dim, self.num_bins)
        return F.log_softmax(z / self.temperature, dim=-1)

    def to_bins(self, actions: Tensor) -> Tensor:
        """actions (..., ) in [-1, 1] -> nearest bin index (long)."""
        return ((actions.clamp(-1, 1) + 1) * 0.5 * (self.num_bins - 1)).round().long()

    def _entropy(self, logp: Tensor) -> Tensor:
        return self._masked_sum(-(logp.exp() * logp).sum(-1))

    def sample(self, feat: Tensor, deterministic: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        logp = self._logits(feat)
        if deterministic:
            idx = logp.argmax(-1)
        else:
            idx = torch.distributions.Categorical(logits=logp).sample()
            idx = torch.where(self.dim_mask.bool(), idx, logp.argmax(-1))
        lp = self._masked_sum(logp.gather(-1, idx.unsqueeze(-1)).squeeze(-1))
        return self.centres[idx], lp, self._entropy(logp)

    def evaluate_dims(self, feat: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
        logp = self._logits(feat)
        idx = self.to_bins(actions)
        return logp.gather(-1, idx.unsqueeze(-1)).squeeze(-1) * self.dim_mask, self._entropy(logp)

    def bc_loss(self, feat: Tensor, actions: Tensor, mask: Tensor) -> tuple[Tensor, dict[str, float]]:
        """Cross-entropy of the target bins (masked steps ignored)."""
        logp = self._logits(feat)
        nll = -logp.gather(-1, self.to_bins(actions).unsqueeze(-1)).squeeze(-1)  # (B, K, A)
        m = mask.unsqueeze(-1).float()
        loss = (nll * m).sum() / (m.sum().clamp_min(1.0) * self.action_dim)
        with torch.no_grad():
            mse = (((self.centres[logp.argmax(-1)] - actions) ** 2) * m).sum() / (m.sum().clamp_min(1.0) * self.action_dim)
        return loss, {"ce": float(loss.detach()), "mse": float(mse)}


HEADS: dict[str, type[ActionHead]] = {"gaussian": GaussianHead, "tokens": TokenHead}
