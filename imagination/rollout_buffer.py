"""Rollout collection shared by GRPO and PPO, for any env honouring the wmrl contract.

An env here steps action *chunks*: ``step(actions float32 (N, K, A))`` (a real env wrapped in
``envs.wrappers.ActionChunkWrapper``, or :class:`imagination.ImaginedVectorEnv` natively). One
buffer row is one chunk step of all N sub-envs. Both gymnasium autoreset modes are handled:
with NEXT_STEP, the step after an episode end is a reset step whose action is ignored; it is
marked invalid (``valid=False``) and never trained on.

Optional per-step info the imagined env reports (real envs lack them and count as reliable):
``info["gate_ok"]`` bool ``(N,)`` (executability and reward confidence above thresholds),
``info["exec_score"]`` / ``info["reward_confidence"]`` float ``(N,)``.
``info["untrained"]`` bool ``(N,)``: the step's chunk counts for the episode's length and score but is
not trained on (``trainable``), e.g. a chunk of a group's shared real prefix, whose recorded actions
were not the executed ones (``benchmarks._split_worlds.StateModelVectorEnv(share_prefix=G)``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from wmrl.errors import WmrlError
from wmrl.runs import check_finite

ValueFn = Callable[[dict[str, Tensor], list[str]], Tensor]


def autoreset_mode(env: Any) -> str:
    """``"next_step"`` or ``"same_step"`` from ``env.metadata["autoreset_mode"]`` (enum or str)."""
    m = getattr(env, "metadata", {}).get("autoreset_mode", "next_step")
    m = str(getattr(m, "value", m)).lower().replace("_", "")
    if m in ("nextstep", "next"):
        return "next_step"
    if m in ("samestep", "same"):
        return "same_step"
    raise WmrlError(f"env autoreset_mode={m!r}; the RL trainers need 'next_step' or 'same_step'")


def env_instructions(env: Any, info: dict) -> list[str]:
    """The current instruction of every sub-env (``info["instruction"]`` or ``env.instructions``)."""
    if "instruction" in info:
        return [str(s) for s in info["instruction"]]
    e = env
    while e is not None:
        if hasattr(e, "instructions"):
            return list(e.instructions)
        e = getattr(e, "env", None)
    raise WmrlError("env reports no instructions (neither info['instruction'] nor env.instructions)")


def env_chunk_size(env: Any) -> int | None:
    """The chunk size K the env steps (``env.chunk_size``), or None when it steps single actions."""
    return getattr(env, "chunk_size", None)


def check_policy_env(policy: Any, env: Any) -> None:
    """Raise a one-line error when the policy's action dim or chunk size differs from the env's."""
    a_env = int(env.single_action_space.shape[-1])
    if int(policy.action_dim) != a_env:
        raise WmrlError(f"policy action_dim={policy.action_dim} differs from the env's action dim {a_env}")
    k_env = env_chunk_size(env)
    if k_env is None:
        raise WmrlError(
            "env steps single actions; wrap it in envs.wrappers.ActionChunkWrapper(env, policy.chunk_size)"
        )
    if int(policy.chunk_size) != int(k_env):
        raise WmrlError(f"policy chunk_size={policy.chunk_size} differs from the env's chunk size {k_env}")


def env_action_dims_used(env: Any) -> list[int] | None:
    """``metadata["action_dims_used"]`` of ``env`` or of the first wrapped env that reports it."""
    e = env
    while e is not None:
        dims = (getattr(e, "metadata", None) or {}).get("action_dims_used")
        if dims is not None:
            return [int(d) for d in dims]
        e = getattr(e, "env", None)
    return None


def match_policy_to_env_dims(env: Any, *policies: Any) -> list[int] | None:
    """Make the action dims the env ignores deterministic and unscored in each policy's head
    (``ActionHead.set_active_dims``), so RL samples no noise on them and their log-probs do not
    enter the ratios. Returns the active dims (None: the env uses every dim)."""
    dims = env_action_dims_used(env)
    for pol in policies:
        head = getattr(pol, "head", None)
        if pol is not None and hasattr(head, "set_active_dims"):
            head.set_active_dims(dims if dims is not None and len(dims) < int(pol.action_dim) else None)
    return dims


def obs_to_torch(obs: dict[str, Any]) -> dict[str, Tensor]:
    """Env observation dict (numpy or tensors) -> dict of CPU tensors (images stay uint8)."""
    return {
        k: torch.as_tensor(np.asarray(v)) if not isinstance(v, Tensor) else v.cpu() for k, v in obs.items()
    }


@dataclass
class RolloutBatch:
    """Chunk-level rollouts, time-major: ``T`` chunk steps of ``N`` sub-envs.

    Attributes:
        obs: dict of ``(T, N, ...)`` tensors (``image`` uint8 ``(T, N, H, W, 3)``, ``state``
            float32 ``(T, N, D)``, ...), the observation each chunk was chosen from.
        instructions: ``T`` lists of ``N`` strings.
        actions: float32 ``(T, N, K, A)``; log_probs: float32 ``(T, N)`` at collection time.
        ref_log_probs: float32 ``(T, N)`` under the reference (SFT) policy, or None.
        values: float32 ``(T, N)`` or None; rewards: float32 ``(T, N)`` (chunk sums).
        terminated, truncated, success: bool ``(T, N)``.
        valid: bool ``(T, N)``: the chunk was executed in an episode this batch trains on.
        gate_ok: bool ``(T, N)``: the step was judged reliable (always True in real envs).
        exec_score, reward_confidence: float32 ``(T, N)`` (NaN where the env does not report them).
        final_values: float32 ``(T, N)``: value of the final observation of truncated episodes
            (SAME_STEP autoreset only; 0 elsewhere), for bootstrapping.
        executed: float32 ``(T, N)``: single env steps each sub-env executed (``chunk_valid``
            count; K where the env does not report it), valid or not: the env-step cost.
        trainable: bool ``(T, N)``: valid chunks the env did not mark ``info["untrained"]``; GRPO updates
            on these only.
    """

    obs: dict[str, Tensor]
    instructions: list[list[str]]
    actions: Tensor
    log_probs: Tensor
    ref_log_probs: Tensor | None
    values: Tensor | None
    rewards: Tensor
    terminated: Tensor
    truncated: Tensor
    success: Tensor
    valid: Tensor
    gate_ok: Tensor
    exec_score: Tensor
    reward_confidence: Tensor
    final_values: Tensor
    executed: Tensor
    trainable: Tensor | None = None

    def __post_init__(self) -> None:
        if self.trainable is None and self.valid is not None:
            self.trainable = self.valid.clone()

    @property
    def num_steps(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def num_envs(self) -> int:
        return int(self.rewards.shape[1])

    def gather(self, t_idx: Tensor, n_idx: Tensor) -> tuple[dict[str, Tensor], list[str], Tensor]:
        """Observations ``dict (M, ...)``, instructions ``[M]`` and actions ``(M, K, A)`` of samples."""
        obs = {k: v[t_idx, n_idx] for k, v in self.obs.items()}
        instr = [
            self.instructions[int(t)][int(n)] for t, n in zip(t_idx.tolist(), n_idx.tolist(), strict=True)
        ]
        return obs, instr, self.actions[t_idx, n_idx]


class _Recorder:
    """Accumulates per-step arrays and stacks them into a :class:`RolloutBatch`."""

    def __init__(self) -> None:
        self.rows: dict[str, list] = {}
        self.obs: dict[str, list[Tensor]] = {}
        self.instructions: list[list[str]] = []

    def add(self, obs: dict[str, Tensor], instructions: list[str], **arrays: Tensor | None) -> None:
        for k, v in obs.items():
            self.obs.setdefault(k, []).append(v)
        self.instructions.append(list(instructions))
        for k, v in arrays.items():
            self.rows.setdefault(k, []).append(v)

    def batch(self) -> RolloutBatch:
        st = {k: (torch.stack(v) if v and v[0] is not None else None) for k, v in self.rows.items()}
        return RolloutBatch(
            obs={k: torch.stack(v) for k, v in self.obs.items()},
            instructions=self.instructions,
            **st,  # type: ignore[arg-type]
        )


def _executed(info: dict, n: int, k: int) -> Tensor:
    if "chunk_valid" in info:
        return torch.as_tensor(np.asarray(info["chunk_valid"]).reshape(n, -1).sum(1), dtype=torch.float32)
    return torch.full((n,), float(k))


def _info_array(info: dict, key: str, n: int, default: float | bool, dtype) -> Tensor:
    if key in info:
        return torch.as_tensor(np.asarray(info[key]), dtype=dtype).reshape(n)
    return torch.full((n,), default, dtype=dtype)


@torch.no_grad()
def policy_step(policy: Any, obs: dict[str, Tensor], instructions: list[str], deterministic: bool = False):
    """``policy.act`` on a batch, with actions checked for shape/finiteness."""
    out = policy.act(obs, instructions, deterministic=deterministic)
    check_finite("policy actions", out.actions)
    return out


@torch.no_grad()
def collect_first_episodes(
    env: Any,
    policy: Any,
    max_steps: int,
    seeds: Sequence[int] | int | None = None,
    ref_policy: Any | None = None,
    value_fn: ValueFn | None = None,
    deterministic: bool = False,
) -> RolloutBatch:
    """Reset every sub-env and roll until each one's first episode ends (GRPO collection).

    ``seeds`` (one per sub-env) fixes the start states: equal seeds give equal starts, which is
    how a GRPO group shares its start on real and imagined envs alike. At most ``max_steps``
    chunk steps are taken; an episode still running then counts as truncated. Steps after a
    sub-env's first episode are ``valid=False``.
    """
    obs, info = env.reset(seed=list(seeds) if isinstance(seeds, Sequence) else seeds)
    n = env.num_envs
    alive = torch.ones(n, dtype=torch.bool)
    rec = _Recorder()
    for t in range(max_steps):
        o = obs_to_torch(obs)
        instr = env_instructions(env, info)
        out = policy_step(policy, o, instr, deterministic)
        ref = ref_policy.evaluate_actions(o, instr, out.actions).log_prob if ref_policy is not None else None
        val = value_fn(o, instr) if value_fn is not None else out.value
        obs, reward, term, trunc, info = env.step(out.actions.cpu().numpy())
        r = torch.as_tensor(np.asarray(reward), dtype=torch.float32)
        check_finite("reward", r)
        term_t = torch.as_tensor(np.asarray(term), dtype=torch.bool)
        trunc_t = torch.as_tensor(np.asarray(trunc), dtype=torch.bool)
        if t == max_steps - 1:
            trunc_t = trunc_t | (alive & ~term_t)
        rec.add(
            o,
            instr,
            actions=out.actions.detach().float().cpu(),
            log_probs=out.log_prob.detach().float().cpu(),
            ref_log_probs=None if ref is None else ref.detach().float().cpu(),
            values=None if val is None else val.detach().float().cpu().reshape(n),
            rewards=r * alive,
            terminated=term_t & alive,
            truncated=trunc_t & alive,
            success=_info_array(info, "success", n, False, torch.bool) & alive,
            valid=alive.clone(),
            gate_ok=_info_array(info, "gate_ok", n, True, torch.bool) | ~alive,
            exec_score=_info_array(info, "exec_score", n, float("nan"), torch.float32),
            reward_confidence=_info_array(info, "reward_confidence", n, float("nan"), torch.float32),
            final_values=torch.zeros(n),
            executed=_executed(info, n, out.actions.shape[1]),
            trainable=alive & ~_info_array(info, "untrained", n, False, torch.bool),
        )
        alive = alive & ~(term_t | trunc_t)
        if not alive.any():
            break
    return rec.batch()


class StepCollector:
    """Continuing collection of ``num_steps`` chunk steps per call (PPO), across episodes.

    With SAME_STEP autoreset the value of a truncated episode's final observation
    (``info["final_obs"]``) is recorded in ``final_values`` for bootstrapping; with NEXT_STEP the
    reset step that follows an episode end is marked invalid.
    """

    def __init__(self, env: Any, seed: int | None = None):
        self.env = env
        self.mode = autoreset_mode(env)
        self.obs, self.info = env.reset(seed=seed)
        self.prev_done = torch.zeros(env.num_envs, dtype=torch.bool)
        self.episode_returns: list[float] = []
        self.episode_success: list[bool] = []
        self._ret = torch.zeros(env.num_envs)
        self._succ = torch.zeros(env.num_envs, dtype=torch.bool)

    @torch.no_grad()
    def collect(
        self, policy: Any, num_steps: int, value_fn: ValueFn | None = None
    ) -> tuple[RolloutBatch, Tensor]:
        """Returns the batch and ``last_value`` float32 ``(N,)`` of the observation after it."""
        env, n = self.env, self.env.num_envs
        rec = _Recorder()
        for _ in range(num_steps):
            o = obs_to_torch(self.obs)
            instr = env_instructions(env, self.info)
            out = policy_step(policy, o, instr)
            val = (
                (value_fn(o, instr) if value_fn is not None else out.value).detach().float().cpu().reshape(n)
            )
            self.obs, reward, term, trunc, self.info = env.step(out.actions.cpu().numpy())
            r = torch.as_tensor(np.asarray(reward), dtype=torch.float32)
            check_finite("reward", r)
            term_t = torch.as_tensor(np.asarray(term), dtype=torch.bool)
            trunc_t = torch.as_tensor(np.asarray(trunc), dtype=torch.bool)
            valid = ~self.prev_done if self.mode == "next_step" else torch.ones(n, dtype=torch.bool)
            done = term_t | trunc_t
            succ = _info_array(self.info, "success", n, False, torch.bool) & valid
            final_v = torch.zeros(n)
            if self.mode == "same_step" and (trunc_t & ~term_t).any() and "final_obs" in self.info:
                fo = obs_to_torch(self.info["final_obs"])
                fv = value_fn(fo, instr) if value_fn is not None else policy.act(fo, instr).value
                final_v = torch.where(trunc_t & ~term_t, fv.float().cpu().reshape(n), final_v)
            rec.add(
                o,
                instr,
                actions=out.actions.detach().float().cpu(),
                log_probs=out.log_prob.detach().float().cpu(),
                ref_log_probs=None,
                values=val,
                rewards=r * valid,
                terminated=term_t & valid,
                truncated=trunc_t & valid,
                success=succ,
                valid=valid & _info_array(self.info, "gate_ok", n, True, torch.bool),
                gate_ok=_info_array(self.info, "gate_ok", n, True, torch.bool),
                exec_score=_info_array(self.info, "exec_score", n, float("nan"), torch.float32),
                reward_confidence=_info_array(self.info, "reward_confidence", n, float("nan"), torch.float32),
                final_values=final_v,
                executed=_executed(self.info, n, out.actions.shape[1]),
            )
            self._ret += r * valid
            self._succ |= succ
            ended = done & valid
            for i in torch.nonzero(ended).flatten().tolist():
                self.episode_returns.append(float(self._ret[i]))
                self.episode_success.append(bool(self._succ[i]))
            self._ret[ended] = 0.0
            self._succ[ended] = False
            # NEXT_STEP: the step after an end is a reset step (its action is ignored)
            self.prev_done = done & valid if self.mode == "next_step" else torch.zeros(n, dtype=torch.bool)
        o = obs_to_torch(self.obs)
        instr = env_instructions(env, self.info)
        last = value_fn(o, instr) if value_fn is not None else policy.act(o, instr).value
        return rec.batch(), last.detach().float().cpu().reshape(n)

    def pop_episode_stats(self) -> dict[str, float]:
        """Number, mean return and success rate of episodes finished since the last call
        (only ``episodes`` when none finished)."""
        out = {"episodes": float(len(self.episode_returns))}
        if self.episode_returns:
            out["episode_return"] = float(np.mean(self.episode_returns))
            out["episode_success"] = float(np.mean(self.episode_success))
        self.episode_returns, self.episode_success = [], []
        return out
