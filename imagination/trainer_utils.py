"""Checkpoint / resume plumbing shared by the GRPO and PPO trainers (RunDir checkpoints).

A trainer checkpoint folder holds ``modules.safetensors`` (the policy's and critic's weights,
keys prefixed ``policy.`` / ``critic.``), ``trainer.pt`` (optimizer state, iteration, RNG
states, history) and, when the policy has ``save_pretrained``, ``policy/`` (a loadable policy).
"""

from __future__ import annotations

import contextlib
import functools
import math
import random
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from wmrl.errors import CheckpointError, ConfigError, WmrlError
from wmrl.io import atomic_save_safetensors, atomic_torch_save
from wmrl.runs import RunDir

if TYPE_CHECKING:
    from imagination.rollout_buffer import RolloutBatch


def save_trainer_checkpoint(
    run: RunDir,
    iteration: int,
    modules: dict[str, nn.Module],
    optimizers: dict[str, torch.optim.Optimizer],
    history: list[dict[str, Any]],
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write a complete checkpoint of iteration ``iteration`` (atomic folder rename)."""

    def write(d: Path) -> None:
        tensors = {f"{name}.{k}": v for name, m in modules.items() for k, v in m.state_dict().items()}
        atomic_save_safetensors(d / "modules.safetensors", tensors)
        state = {
            "iteration": iteration,
            "optimizers": {k: o.state_dict() for k, o in optimizers.items()},
            "history": history,
            "rng": {
                "torch": torch.get_rng_state(),
                "numpy": np.random.get_state(),
                "python": random.getstate(),
            },
            "extra": extra or {},
        }
        atomic_torch_save(d / "trainer.pt", state)
        pol = modules.get("policy")
        if pol is not None and hasattr(pol, "save_pretrained"):
            pol.save_pretrained(d / "policy")

    return run.save_checkpoint(iteration, write)


def load_trainer_checkpoint(
    ckpt: Path, modules: dict[str, nn.Module], optimizers: dict[str, torch.optim.Optimizer]
) -> dict[str, Any]:
    """Restore modules/optimizers/RNG from ``ckpt``; returns the trainer state dict
    (``iteration``, ``history``, ``extra``). A checkpoint of other modules is an error."""
    from safetensors.torch import load_file

    f = ckpt / "modules.safetensors"
    if not f.exists() or not (ckpt / "trainer.pt").exists():
        raise CheckpointError(
            f"{ckpt} is not a trainer checkpoint (missing modules.safetensors or trainer.pt)"
        )
    tensors = load_file(str(f))
    for name, m in modules.items():
        sd = {k[len(name) + 1 :]: v for k, v in tensors.items() if k.startswith(name + ".")}
        own = m.state_dict()
        if set(sd) != set(own) or any(sd[k].shape != own[k].shape for k in own):
            raise CheckpointError(
                f"{ckpt} holds {name} weights of another architecture; cannot resume from it"
            )
        m.load_state_dict(sd)
    state = torch.load(ckpt / "trainer.pt", weights_only=False, map_location="cpu")
    for k, o in optimizers.items():
        o.load_state_dict(state["optimizers"][k])
    torch.set_rng_state(state["rng"]["torch"])
    np.random.set_state(state["rng"]["numpy"])
    random.setstate(state["rng"]["python"])
    return state


def policy_device(policy: Any) -> torch.device:
    """The device a policy computes on (its ``device``, else its first parameter's; the CPU for one
    without parameters)."""
    dev = getattr(policy, "device", None)
    if isinstance(dev, (torch.device, str)):
        return torch.device(dev)
    p = next(iter(policy.parameters()), None) if hasattr(policy, "parameters") else None
    return p.device if p is not None else torch.device("cpu")


def trainable_parameters(module: nn.Module) -> list[nn.Parameter]:
    """Parameters with ``requires_grad`` (frozen encoders stay frozen); error when none."""
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        raise WmrlError(f"{type(module).__name__} has no trainable parameters; nothing for RL to update")
    return params


FRAME_KEYS = ("image", "wrist_image")  # the env contract's camera frames, uint8 (M, H, W, 3)


def shift_consistency(
    policy: Any,
    obs: dict[str, torch.Tensor],
    instructions: list[str],
    actions: torch.Tensor,
    old_log_prob: torch.Tensor,
    shift: int,
    gen: torch.Generator,
) -> torch.Tensor:
    """Per-sample ``(M,)`` estimate of KL(pi_old(.|o) || pi(.|shift(o))) on the stored actions, where
    shift(o) moves every frame of ``obs`` (``FRAME_KEYS``) by up to ``shift`` pixels on its own (the SFT
    recipe's random shift, ``policies.train.random_shift``) and keeps the other keys.

    The actions ``(M, K, A)`` were sampled from the behaviour policy on the unshifted frames
    (``old_log_prob`` ``(M,)``), so ``old_log_prob - log pi(a | shift(o))`` is an unbiased sample of the
    KL and its gradient is the KL's: the policy learns to act on a shifted view as it acted on the
    real one (DrAC's policy regulariser, Raileanu et al. 2021). Scoring the policy-gradient ratio
    itself on shifted frames (RAD) is not used: with the built-in suite's exploration std 0.1 a
    4-pixel shift moves the mean by more than a std, and 94% of the ratios were clipped."""
    from policies.train import random_shift

    shifted = {k: random_shift(v, shift, gen) if k in FRAME_KEYS else v for k, v in obs.items()}
    ev = policy.evaluate_actions(shifted, instructions, actions)
    return old_log_prob - ev.log_prob


def check_augment(shift: Any, coef: Any) -> int:
    """A trainer config's ``augment_shift`` (integer pixels >= 0) and ``augment_coef`` (> 0);
    returns the shift (a ConfigError otherwise)."""
    if not isinstance(shift, int) or isinstance(shift, bool) or shift < 0:
        raise ConfigError(f"augment_shift={shift!r}; expected an integer number of pixels >= 0 (0: off)")
    if isinstance(coef, bool) or not isinstance(coef, (int, float)) or not coef > 0:
        raise ConfigError(f"augment_coef={coef!r}; expected a number > 0 (the weight of the shift-consistency KL)")
    return shift


def check_max_kl(max_kl: Any) -> float:
    """A trainer config's ``max_kl`` (nats per chunk >= 0; 0: off) as a float (a ConfigError otherwise)."""
    if isinstance(max_kl, bool) or not isinstance(max_kl, (int, float)) or not max_kl >= 0:
        raise ConfigError(f"max_kl={max_kl!r}; expected a number of nats per chunk >= 0 (0: off)")
    return float(max_kl)


def check_freeze(freeze: Any) -> list[str]:
    """A trainer config's ``freeze``: a list of parameter-name prefixes (a ConfigError otherwise)."""
    if isinstance(freeze, str) or not isinstance(freeze, (list, tuple)) or not all(
        isinstance(f, str) and f for f in freeze
    ):
        raise ConfigError(f"freeze={freeze!r}; expected a list of parameter-name prefixes, e.g. [net.image_enc]")
    return list(freeze)


@contextlib.contextmanager
def frozen(module: nn.Module, prefixes: list[str] | tuple[str, ...]) -> Iterator[list[str]]:
    """Keep the parameters of ``module`` whose names start with any of ``prefixes`` (e.g.
    ``net.image_enc``: the built-in VLA's vision encoder) out of training while the block runs
    (``requires_grad`` False; restored after). Yields the frozen names. A prefix that names no
    parameter is a ConfigError listing the module's top-level parts."""
    if not prefixes:
        yield []
        return
    named = list(module.named_parameters())

    def under(name: str, pre: str) -> bool:
        return name == pre or name.startswith(pre + ".")

    for pre in prefixes:
        if not any(under(n, pre) for n, _ in named):
            parts = sorted({".".join(n.split(".")[:2]) for n, _ in named})
            raise ConfigError(f"freeze: {pre!r} names no parameter of {type(module).__name__}; its parts: {', '.join(parts)}")
    hit = [(n, p) for n, p in named if any(under(n, pre) for pre in prefixes)]
    before = [p.requires_grad for _, p in hit]
    for _, p in hit:
        p.requires_grad_(False)
    try:
        yield [n for n, _ in hit]
    finally:
        for (_, p), rg in zip(hit, before):
            p.requires_grad_(rg)


def freezes_parameters(train: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator of a trainer ``train(env, policy, cfg, ...)``: it runs with ``cfg.freeze``'s parameters
    of ``policy`` frozen (:func:`frozen`)."""

    @functools.wraps(train)
    def run_frozen(env: Any, policy: Any, cfg: Any, *args: Any, **kwargs: Any) -> Any:
        with frozen(policy, cfg.freeze):
            return train(env, policy, cfg, *args, **kwargs)

    return run_frozen


def resume_trainer(
    run: RunDir | None, modules: dict[str, nn.Module], optimizers: dict[str, torch.optim.Optimizer]
) -> tuple[int, list[dict[str, float]]]:
    """``(start iteration, history)`` from ``run``'s latest checkpoint (loaded into ``modules`` /
    ``optimizers``), or ``(0, [])`` without a run or a checkpoint."""
    if run is None or (ckpt := run.latest_checkpoint()) is None:
        return 0, []
    state = load_trainer_checkpoint(ckpt, modules, optimizers)
    return state["iteration"], state["history"]


def set_exploration_std(std: float | None, *policies: Any) -> None:
    """Start RL from sampling noise ``std`` (None: keep each policy's own). Every given policy (the
    trained one and its frozen reference) gets it, so a KL term measures drift of the mean, not the
    changed noise. A policy without a Gaussian action head (the ``tokens`` head, a lerobot policy)
    keeps its own sampling, with a warning; a ``std`` outside the head's range is a ConfigError."""
    if std is None:
        return
    for pol in policies:
        if pol is None:
            continue
        head = getattr(pol, "head", None)
        try:
            applied = (
                head is not None and hasattr(head, "set_exploration_std") and head.set_exploration_std(std)
            )
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if not applied:
            warnings.warn(
                f"exploration_std={std} ignored: {type(pol).__name__} has no Gaussian action head "
                "(it samples with its own distribution)",
                stacklevel=2,
            )


def real_prefix_steps(env: Any) -> float | None:
    """The real env steps an env made of a world model and a real simulator has taken so far (its
    ``real_sim_calls["prefix_steps"]``: real-physics prefixes of its episodes, as
    ``benchmarks._split_worlds.StateModelVectorEnv(real_steps=K)`` takes), or None for an env that does
    not report them. The trainers log each iteration's share (``real_prefix_steps``), so a resumed run's
    history still holds every real step, not only those of the invocation that finished it."""
    calls = getattr(getattr(env, "unwrapped", env), "real_sim_calls", None)
    if not isinstance(calls, dict) or "prefix_steps" not in calls:
        return None
    return float(calls["prefix_steps"])


def budget_exhausted(history: list[dict[str, float]], max_env_steps: float | None) -> bool:
    """True when another iteration as costly as the last would push the env steps executed so
    far (``history[i]["env_steps"]``) past ``max_env_steps`` (None: no budget)."""
    if max_env_steps is None or not history:
        return False
    return sum(h["env_steps"] for h in history) + history[-1]["env_steps"] > max_env_steps


def takes_iterations(history: list[dict[str, float]], max_env_steps: float | None) -> bool:
    """True when a run under ``max_env_steps`` takes every iteration of ``history`` (a run's history,
    ``history[i]["env_steps"]`` each), so a run to that budget can resume from it and end where a run
    to it from scratch would: the first iteration always runs, and each later one unless
    :func:`budget_exhausted` stops the run before it."""
    return not any(budget_exhausted(history[:k], max_env_steps) for k in range(1, len(history)))


class RLProgress:
    """The progress bar of an RL trainer: its iterations, or under an env-step budget
    (``max_env_steps``) the env steps spent of that budget, since a budgeted run's iteration count is
    open-ended (the pipeline sets it to a million) and an iteration bar would show that as its total.
    Call :meth:`close` after the loop (an error's bar is closed when it is collected)."""

    def __init__(
        self,
        desc: str,
        start: int,
        iterations: int,
        history: list[dict[str, Any]],
        max_env_steps: float | None,
        enabled: bool,
    ) -> None:
        self.budgeted = max_env_steps is not None and math.isfinite(max_env_steps)
        if self.budgeted:
            spent = int(sum(h["env_steps"] for h in history))  # a resumed run's earlier iterations
            self.bar = tqdm(total=int(max_env_steps), initial=spent, desc=f"{desc} (env steps of the budget)",
                            unit="step", disable=not enabled)
        else:
            self.bar = tqdm(total=iterations, initial=start, desc=desc, disable=not enabled)

    def advance(self, metrics: dict[str, Any], **postfix: str) -> None:
        """One iteration done: its ``metrics["env_steps"]`` (budgeted) or 1 (iterations) more."""
        self.bar.update(int(metrics["env_steps"]) if self.budgeted else 1)
        self.bar.set_postfix(**postfix)

    def close(self) -> None:
        self.bar.close()


def checkpoint_budget_stop(
    run: RunDir | None,
    iteration: int,
    start: int,
    every: int,
    modules: dict[str, nn.Module],
    optimizers: dict[str, torch.optim.Optimizer],
    history: list[dict[str, Any]],
) -> None:
    """Checkpoint a run that its env-step budget stopped after ``iteration`` iterations, unless the
    periodic checkpoint (every ``every``) or the resume point ``start`` already holds that state:
    resumed with a larger budget, it then goes on from exactly where it stopped (a learning curve
    over budgets is one run) instead of redoing the iterations since the last periodic checkpoint."""
    if run is not None and iteration > start and iteration % every:
        save_trainer_checkpoint(run, iteration, modules, optimizers, history)


def iteration_generator(seed: int, iteration: int) -> torch.Generator:
    """The generator of one iteration's sampling/minibatch order: a function of (seed, iteration)
    only, so a resumed run draws exactly what an uninterrupted one would."""
    return torch.Generator().manual_seed(seed * 1_000_003 + iteration)


def old_log_prob_dims(
    policy: Any, batch: RolloutBatch, t_idx: torch.Tensor, n_idx: torch.Tensor, size: int
) -> torch.Tensor:
    """Per-dim log-probs ``(M, K, A)`` of the collected chunks ``(t_idx, n_idx)`` (M each) under the
    policy before this update (the one that sampled them; a rollout stores only their sum), in
    batches of ``size``; a ConfigError when the policy gives no per-dim terms."""
    out = []
    with torch.no_grad():
        for sl in torch.arange(len(t_idx)).split(size):
            obs, instr, act = batch.gather(t_idx[sl], n_idx[sl])
            ev = policy.evaluate_actions(obs, instr, act)
            if getattr(ev, "log_prob_dims", None) is None or getattr(ev, "dim_mask", None) is None:
                raise ConfigError(
                    f"rl.ratio='dim' needs per-dimension log-probs, which {type(policy).__name__} does not give; "
                    "use rl.ratio=chunk"
                )
            out.append(ev.log_prob_dims)
    return torch.cat(out)


def clipped_surrogate(
    log_ratio: torch.Tensor, adv: torch.Tensor, clip_eps: float, dim_mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped policy-gradient loss per sample ``(B,)`` and the clipped fraction (a scalar).

    ``log_ratio`` is ``(B,)`` (one ratio per chunk) or ``(B, K, A)`` with ``dim_mask`` ``(A,)``: one
    ratio per dimension, the per-dim losses averaged over the active dims."""
    log_ratio = log_ratio.clamp(-20.0, 20.0)
    ratio = log_ratio.exp()
    a = adv.view(-1, *([1] * (ratio.dim() - 1)))
    pg = -torch.min(ratio * a, ratio.clamp(1 - clip_eps, 1 + clip_eps) * a)
    clipped = ((ratio.detach() - 1).abs() > clip_eps).float()
    if dim_mask is None:
        return pg, clipped.mean()
    m = dim_mask.to(pg.dtype).expand_as(pg)
    return (pg * m).flatten(1).sum(-1) / m.flatten(1).sum(-1), (clipped * m).sum() / m.sum()


def update_kl(
    policy: Any,
    batch: RolloutBatch,
    t_idx: torch.Tensor,
    n_idx: torch.Tensor,
    old_logp: torch.Tensor,
    size: int,
) -> float:
    """Mean KL(behaviour policy || policy now) over the chunks ``(t_idx, n_idx)`` (M each), in nats
    per chunk: the k3 estimate ``(r - 1) - log r`` with ``r = pi(a | o) / pi_old(a | o)`` on the
    behaviour policy's own actions (unbiased and >= 0), ``old_logp (M,)`` their stored log-probs."""
    total = 0.0
    with torch.no_grad():
        for sl in torch.arange(len(t_idx)).split(size):
            obs, instr, act = batch.gather(t_idx[sl], n_idx[sl])
            log_ratio = policy.evaluate_actions(obs, instr, act).log_prob - old_logp[sl.to(old_logp.device)]
            log_ratio = log_ratio.clamp(-20.0, 20.0)
            total += float((log_ratio.exp() - 1.0 - log_ratio).sum())
    return total / max(len(t_idx), 1)


def trust_region(
    policy: Any,
    params: list[nn.Parameter],
    start: list[torch.Tensor],
    batch: RolloutBatch,
    t_idx: torch.Tensor,
    n_idx: torch.Tensor,
    old_logp: torch.Tensor,
    size: int,
    max_kl: float,
) -> dict[str, float]:
    """A trainer's trust region on its finished update: :func:`backtrack_to_kl` of ``params`` from ``start``
    with the KL of :func:`update_kl` on the chunks ``(t_idx, n_idx)`` (``old_logp (M,)``, ``size`` chunks a
    pass). Returns the metrics both trainers log: ``update_kl_full``, ``update_kl``, ``trust_region_scale``."""
    full, kept, scale = backtrack_to_kl(
        params, start, functools.partial(update_kl, policy, batch, t_idx, n_idx, old_logp, size), max_kl
    )
    return {"update_kl_full": full, "update_kl": kept, "trust_region_scale": scale}


def action_parameters(
    policy: Any, params: list[nn.Parameter], batch: RolloutBatch, t_idx: torch.Tensor, n_idx: torch.Tensor
) -> list[nn.Parameter]:
    """The members of ``params`` that the policy's action log-prob depends on, found by one backward
    pass over a few of the chunks ``(t_idx, n_idx)``: a value head's own layers drop out, so a trust
    region on the action distribution (:func:`backtrack_to_kl`) leaves the critic's step whole."""
    obs, instr, act = batch.gather(t_idx[:8], n_idx[:8])
    grads = torch.autograd.grad(
        policy.evaluate_actions(obs, instr, act).log_prob.sum(), params, allow_unused=True
    )
    return [p for p, g in zip(params, grads, strict=True) if g is not None]


def backtrack_to_kl(
    params: list[nn.Parameter],
    start: list[torch.Tensor],
    kl_of_params: Callable[[], float],
    max_kl: float,
    max_halvings: int = 12,
) -> tuple[float, float, float]:
    """Trust region by backtracking (TRPO's line search, on the finished update): when the update
    that took ``params`` from ``start`` moved the policy by more than ``max_kl`` (``kl_of_params()``
    on the current values), shrink the step to ``start + s * step`` with ``s`` halved until it is
    within ``max_kl``; after ``max_halvings`` the parameters go back to ``start`` (``s = 0``).

    Returns ``(kl of the full update, kl kept, s)``; the parameters hold the kept update."""
    full = kl = kl_of_params()
    if kl <= max_kl:  # a NaN KL is never accepted
        return full, kl, 1.0
    step = [p.detach() - s0 for p, s0 in zip(params, start, strict=True)]
    scale = 1.0
    with torch.no_grad():
        for _ in range(max_halvings):
            scale *= 0.5
            for p, s0, d in zip(params, start, step, strict=True):
                p.copy_(s0 + scale * d)
            kl = kl_of_params()
            if kl <= max_kl:
                return full, kl, scale
        for p, s0 in zip(params, start, strict=True):
            p.copy_(s0)
    return full, 0.0, 0.0
