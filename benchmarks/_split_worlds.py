"""Diagnostic worlds for ``rl_headroom`` that take one half of imagination from the real simulator.

In imagination two things stand between the policy and the real simulator: the dynamics (here an
arm-and-object :class:`worldmodels.object_dynamics.ObjectDynamics`, or the pixel model's own) and
the frames the policy acts on (a pixel world model's drawing). Each world here makes one of them exact:

* :class:`RenderedStateModelWorld`: the state model's dynamics, drawn by the built-in suite's own
  renderer at the model's states (``TabletopVectorEnv.render_states``): the best frames there can
  be, so its agreement with the real simulator is what that state model allows any pixel model.
* :class:`ModelDrawnRealWorld`: the real simulator's dynamics and success, drawn by the world model
  from the real states (``WorldModel.step(states=...)``): what the drawing alone costs when the
  dynamics are exact.

The policy runs closed loop in both, so the pair splits the loss between the imagined world's
closed loop and the real simulator's into its dynamics and its drawing.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class StateModelRollout:
    """An arm-and-object ``ObjectDynamics`` stepping chunk by chunk from a real start ``context``
    (``rl_headroom._ReplayedStart.context``: the last proprio and environment states of the way
    there), with each sub-env's task rule (:func:`success_from_environment_state`) read at every step.
    ``now`` / ``prev`` are the proprio (N, P) now and one step earlier, ``objs`` / ``objs_prev`` the
    object positions (N, O, 3)."""

    def __init__(self, model: Any, context: dict[str, Any], task_ids: list[str]):
        import torch

        self.model, self.task_ids = model, list(task_ids)
        self.o3 = 3 * model.config.num_objects
        states = torch.as_tensor(np.asarray(context["states"], np.float32))  # (N, T', P)
        env = np.asarray(context["env_states"], np.float32)  # (N, T', E)
        before = -2 if states.shape[1] > 1 else -1
        self.now, self.prev = states[:, -1], states[:, before]
        self.objs = torch.as_tensor(env[:, -1, : self.o3]).unflatten(-1, (-1, 3))
        self.objs_prev = torch.as_tensor(env[:, before, : self.o3]).unflatten(-1, (-1, 3))
        self.env_now = env[:, -1].copy()

    def step(self, actions: Any) -> np.ndarray:
        """One chunk of actions (N, K, A) (clipped to [-1, 1] as the simulator clips them) -> bool
        (N,): the task's rule held at some step of it."""
        import torch

        from envs.tabletop.environment_state import success_from_environment_state

        acts = torch.as_tensor(np.asarray(actions, np.float32)).clamp(-1.0, 1.0)
        k = acts.shape[1]
        hit = np.zeros(len(self.task_ids), bool)
        with torch.no_grad():
            props, moved = self.model.rollout(self.now[:, None], acts, self.objs, self.objs_prev, self.prev)
        for j in range(k):
            self.env_now[:, : self.o3] = moved[:, j].flatten(1).numpy()
            hit |= success_from_environment_state(self.task_ids, props[:, j].numpy(), self.env_now)
        self.prev, self.now = (props[:, -2] if k > 1 else self.now), props[:, -1]
        self.objs_prev, self.objs = (moved[:, -2] if k > 1 else self.objs), moved[:, -1]
        return hit


class RenderedStateModelWorld:
    """A chunked vector env (``collect_first_episodes`` contract) that starts where ``start`` (a
    ``rl_headroom._ReplayedStart`` on the built-in suite) resets to, steps ``model`` (an
    ``ObjectDynamics`` with ``config.arm``) on the action chunks, and shows the policy the simulator's
    rendering of the model's proprio and cube positions after each chunk, with the model's proprio
    as its ``state``. A sub-env terminates when its task's rule (:func:`success_from_environment_state`)
    holds at any step of a chunk; it never truncates (the caller's horizon does). Actions are
    clipped to [-1, 1] as the simulator clips them. The start's real env only draws: nothing steps it."""

    def __init__(self, model: Any, start: Any, task_ids: list[str]):
        from wmrl.errors import WmrlError

        if not getattr(model.config, "arm", False):
            raise WmrlError("RenderedStateModelWorld needs an arm-and-object state model (object_dynamics --arm)")
        self.model, self.start, self.task_ids = model, start, list(task_ids)
        self.num_envs, self.chunk_size = int(start.num_envs), int(start.chunk_size)
        self.sim = start.env.unwrapped
        if not hasattr(self.sim, "render_states"):
            raise WmrlError(f"{type(self.sim).__name__} cannot draw given states; expected the built-in suite")
        self.instructions: list[str] = []
        self.rollout: StateModelRollout | None = None

    def reset(self, *, seed: Any = None, options: Any = None):
        """The real start (``seed`` is ignored: ``start`` holds the seeds) and its first observation."""
        obs, info = self.start.reset()
        self.rollout = StateModelRollout(self.model, self.start.context, self.task_ids)
        self.instructions = list(self.start.context["instructions"])
        return obs, info

    def step(self, actions: np.ndarray):
        """actions (N, K, A) -> (obs, reward (N,), terminated (N,), truncated (N,), info)."""
        hit = self.rollout.step(actions)
        now = self.rollout.now.numpy()
        frames = self.sim.render_states(now, self.rollout.objs.numpy())  # (N, H, W, 3)
        obs = {"image": frames, "state": now.astype(np.float32)}
        info = {"success": hit.copy(), "instruction": list(self.instructions)}
        return obs, hit.astype(np.float32), hit.copy(), np.zeros(self.num_envs, bool), info


class ModelDrawnRealWorld:
    """A chunked vector env (``collect_first_episodes`` contract) whose dynamics and success are the
    real simulator's (``start``, a ``rl_headroom._ReplayedStart``, stepped one action at a time) and
    whose frames are drawn by ``world_model`` from the real states of each chunk
    (``WorldModel.step(ctx, actions, states=real)``), from a context of the start's real frames. The
    policy sees those frames and the real proprio. A sub-env terminates at its first real success and
    truncates where the simulator truncates it, as in the real pass."""

    def __init__(self, world_model: Any, start: Any, record: bool = False):
        self.wm, self.start = world_model, start
        self.num_envs, self.chunk_size = int(start.num_envs), int(start.chunk_size)
        self.env_dim = int(world_model.config.env_state_dim)
        self.ctx: Any = None
        self.record = bool(record)
        self.real_frames: list[np.ndarray] = []  # with ``record``: (N, H, W, 3) per chunk, the real frame
        self.drawn_frames: list[np.ndarray] = []  # ... and the world model's drawing of its states

    def _model_states(self, proprio: np.ndarray, env_states: np.ndarray | None) -> np.ndarray:
        """(N, T, P) proprio and (N, T, E) environment states -> (N, T, D) the states the model reads."""
        if not self.env_dim:
            return np.asarray(proprio, np.float32)
        return np.concatenate([proprio, np.asarray(env_states)[..., : self.env_dim]], -1).astype(np.float32)

    def reset(self, *, seed: Any = None, options: Any = None):
        """The real start (``seed`` is ignored: ``start`` holds the seeds) and its first observation."""
        obs, info = self.start.reset()
        ctx, T = self.start.context, int(self.wm.config.context_frames)
        frames = np.asarray(ctx["frames"])
        states = self._model_states(ctx["states"], ctx["env_states"])
        if frames.shape[1] < T:  # as ImaginedVectorEnv.reset_to: left-pad by repeating the first
            pad = T - frames.shape[1]
            frames = np.concatenate([np.repeat(frames[:, :1], pad, 1), frames], 1)
            states = np.concatenate([np.repeat(states[:, :1], pad, 1), states], 1)
        instr = list(ctx["instructions"]) if self.wm.config.instruction_dim else None
        self.ctx = self.wm.init_context(frames[:, -T:], states[:, -T:], instr)
        if self.record:
            self.real_frames, self.drawn_frames = [np.asarray(obs["image"])], [np.asarray(obs["image"])]
        return obs, info

    def step(self, actions: np.ndarray):
        """actions (N, K, A) -> (obs, reward (N,), terminated (N,), truncated (N,), info)."""
        import torch

        raw = self.start.env.env  # one real step at a time: every step's states
        sim = raw.unwrapped
        acts = np.asarray(actions, np.float32)
        n, k = acts.shape[:2]
        hit, ended = np.zeros(n, bool), np.zeros(n, bool)
        proprio, env_states = [], []
        for j in range(k):  # a sub-env that ends restarts (same-step autoreset); its later steps do not count
            obs, _, term, trunc, info = raw.step(np.ascontiguousarray(acts[:, j]))
            hit |= np.asarray(info["success"], bool) & np.asarray(term, bool) & ~ended
            ended |= np.asarray(term, bool) | np.asarray(trunc, bool)
            proprio.append(obs["state"])
            env_states.append(sim.environment_state() if self.env_dim else None)
        states = self._model_states(np.stack(proprio, 1), np.stack(env_states, 1) if self.env_dim else None)
        k_wm = int(self.wm.config.chunk_size)
        with torch.no_grad():
            for j in range(0, k, k_wm):
                out = self.wm.step(
                    self.ctx,
                    torch.as_tensor(np.clip(acts[:, j : j + k_wm], -1.0, 1.0), device=self.wm.device),
                    states=torch.as_tensor(states[:, j : j + k_wm], device=self.wm.device),
                )
                self.ctx = out.context
        frames = out.frames[:, -1].cpu().numpy()  # (N, H, W, 3) uint8
        if self.record:
            self.real_frames.append(np.asarray(obs["image"]))
            self.drawn_frames.append(frames)
        obs = {"image": frames, "state": np.asarray(proprio[-1], np.float32)}
        info = {"success": hit.copy(), "instruction": list(self.start.context["instructions"])}
        return obs, hit.astype(np.float32), hit.copy(), ended & ~hit, info
