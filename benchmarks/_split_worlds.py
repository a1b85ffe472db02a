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

:class:`StateModelVectorEnv` is :class:`RenderedStateModelWorld` as a full ``gymnasium.vector.VectorEnv``
(the real env's contract: single actions, per-env autoreset, reset of a subset) from the real env's
own resets, so GRPO can train in it (``benchmarks.state_model_rl``). With ``renderer`` it draws with a
learned :class:`worldmodels.state_renderer.StateRenderer` instead of the simulator (a world of learned
parts only), and :class:`RendererDrawnRealEnv` is the real simulator drawn by that renderer: the same
split of dynamics and drawing, for the learned renderer (``benchmarks.state_model_ranking --renderer``).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

SUCCESS_RULES = ("all", "any", "advanced")
ADVANCE_RULES = ("first", "random")
# the config fields that fix what an ObjectDynamics reads and predicts: an ensemble's members must share them
_SHAPE_FIELDS = ("num_objects", "tcp_dims", "finger_dims", "action_dims", "reach", "active_bound", "arm", "proprio_dim")


def check_rules(success: str, advance: str) -> None:
    """A one-line WmrlError unless ``success`` is one of :data:`SUCCESS_RULES` and ``advance`` one of
    :data:`ADVANCE_RULES`."""
    from wmrl.errors import WmrlError

    if success not in SUCCESS_RULES:
        raise WmrlError(f"success={success!r}; expected one of {', '.join(SUCCESS_RULES)}")
    if advance not in ADVANCE_RULES:
        raise WmrlError(f"advance={advance!r}; expected one of {', '.join(ADVANCE_RULES)}")


def check_ensemble(models: Any) -> list[Any]:
    """``models`` (one ObjectDynamics or a non-empty list of them) as a list; a one-line WmrlError if the
    list is empty or its members read or predict different things (:data:`_SHAPE_FIELDS`; the width,
    depth, training and fit seed may differ)."""
    from wmrl.errors import WmrlError

    members = list(models) if isinstance(models, (list, tuple)) else [models]
    if not members:
        raise WmrlError("the state model ensemble is empty; give at least one ObjectDynamics")
    first = members[0].config
    for i, m in enumerate(members[1:], 1):
        bad = [f for f in _SHAPE_FIELDS if getattr(m.config, f) != getattr(first, f)]
        if bad:
            raise WmrlError(
                f"ensemble member {i} differs from member 0 in {', '.join(f'{f}={getattr(m.config, f)!r}' for f in bad)}"
                f" (member 0: {', '.join(f'{f}={getattr(first, f)!r}' for f in bad)})"
            )
    return members


class StateModelRollout:
    """An arm-and-object ``ObjectDynamics`` (or an ensemble of them) stepping chunk by chunk from a real
    start ``context`` (``rl_headroom._ReplayedStart.context``: the last proprio and environment states of
    the way there), with each sub-env's task rule (:func:`success_from_environment_state`) read at every
    step. ``now`` / ``prev`` are the proprio (N, P) now and one step earlier, ``objs`` / ``objs_prev`` the
    object positions (N, O, 3).

    With an ensemble of M members every member steps each chunk from the same current state; the state
    advances with one member's prediction per sub-env and chunk (``advance``: ``first`` member 0, ``random``
    a member drawn from ``rng`` per sub-env and chunk, as MOPO draws its model). ``success``: the rule must
    hold at a step on ``all`` members' predictions, on ``any``, or on the ``advanced`` one. ``spread`` (N,)
    is the last chunk's disagreement: the largest distance (metres) between two members' predicted tcp or
    object positions over its steps (0 for one member). One member gives the single model's rollout."""

    def __init__(
        self,
        model: Any,
        context: dict[str, Any],
        task_ids: list[str],
        success: str = "all",
        advance: str = "first",
        rng: np.random.Generator | None = None,
    ):
        import torch

        self.models = check_ensemble(model)
        check_rules(success, advance)
        self.model, self.task_ids = self.models[0], list(task_ids)
        self.success, self.advance = success, advance
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self.o3 = 3 * self.model.config.num_objects
        self.tcp = list(self.model.config.tcp_dims)
        states = torch.as_tensor(np.asarray(context["states"], np.float32))  # (N, T', P)
        env = np.asarray(context["env_states"], np.float32)  # (N, T', E)
        before = -2 if states.shape[1] > 1 else -1
        self.now, self.prev = states[:, -1], states[:, before]
        self.objs = torch.as_tensor(env[:, -1, : self.o3]).unflatten(-1, (-1, 3))
        self.objs_prev = torch.as_tensor(env[:, before, : self.o3]).unflatten(-1, (-1, 3))
        self.env_now = env[:, -1].copy()
        self.spread = np.zeros(len(self.task_ids), np.float32)
        self.member = np.zeros(len(self.task_ids), np.int64)  # the member each sub-env advanced with last

    def restart(
        self,
        ids: np.ndarray,
        proprio: np.ndarray,
        env_state: np.ndarray,
        prev_proprio: Any = None,
        prev_objects: Any = None,
    ) -> None:
        """Start sub-envs ``ids`` (M,) again at proprio (M, P) and environment state (M, E): at rest (one
        step earlier = now, as a context of one state does), or moving, from ``prev_proprio`` (M, P) and
        ``prev_objects`` (M, O, 3) one step earlier (a branch from a real state mid-episode)."""
        import torch

        p = torch.as_tensor(np.asarray(proprio, np.float32))
        objs = torch.as_tensor(np.asarray(env_state, np.float32)[:, : self.o3]).unflatten(-1, (-1, 3))
        p_prev = p if prev_proprio is None else torch.as_tensor(np.asarray(prev_proprio, np.float32))
        objs_prev = objs if prev_objects is None else torch.as_tensor(np.asarray(prev_objects, np.float32))
        self.now, self.prev = self.now.clone(), self.prev.clone()  # they may share memory with each other
        self.objs, self.objs_prev = self.objs.clone(), self.objs_prev.clone()
        self.now[ids], self.prev[ids], self.objs[ids], self.objs_prev[ids] = p, p_prev, objs, objs_prev
        self.env_now[ids] = np.asarray(env_state, np.float32)
        self.spread[ids] = 0.0

    def step(self, actions: Any) -> np.ndarray:
        """One chunk of actions (N, K, A) (clipped to [-1, 1] as the simulator clips them) -> bool
        (N,): the task's rule held at some step of it (on the members ``success`` asks for)."""
        import torch

        from envs.tabletop.environment_state import success_from_environment_state

        acts = torch.as_tensor(np.asarray(actions, np.float32)).clamp(-1.0, 1.0)
        n, k, m = acts.shape[0], acts.shape[1], len(self.models)
        with torch.no_grad():
            outs = [mod.rollout(self.now[:, None], acts, self.objs, self.objs_prev, self.prev) for mod in self.models]
        props_all = torch.stack([o[0] for o in outs])  # (M, N, K, P)
        moved_all = torch.stack([o[1] for o in outs])  # (M, N, K, O, 3)
        self.member = self.rng.integers(m, size=n) if self.advance == "random" and m > 1 else np.zeros(n, np.int64)
        rows = torch.arange(n)
        pick = torch.as_tensor(self.member)
        props, moved = props_all[pick, rows], moved_all[pick, rows]  # (N, K, P), (N, K, O, 3)
        hit = np.zeros(n, bool)
        for j in range(k):
            self.env_now[:, : self.o3] = moved[:, j].flatten(1).numpy()
            if m == 1 or self.success == "advanced":
                hit |= success_from_environment_state(self.task_ids, props[:, j].numpy(), self.env_now)
                continue
            each = []
            for i in range(m):
                env_i = self.env_now.copy()
                env_i[:, : self.o3] = moved_all[i, :, j].flatten(1).numpy()
                each.append(success_from_environment_state(self.task_ids, props_all[i, :, j].numpy(), env_i))
            hit |= np.all(each, 0) if self.success == "all" else np.any(each, 0)
        if m > 1:  # (M, N, K, 1 + O, 3): tcp and objects; largest distance between two members
            pts = torch.cat([props_all[..., self.tcp][..., None, :], moved_all], -2)
            d = (pts[:, None] - pts[None]).norm(dim=-1)  # (M, M, N, K, 1 + O)
            self.spread = d.amax(dim=(0, 1, 3, 4)).numpy().astype(np.float32)
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


class RendererAnchors:
    """What a learned :class:`worldmodels.state_renderer.StateRenderer` draws from: each sub-env's real anchor
    frame (its episode's first, or the real frame a model branch starts from) and its states there
    (``arrays``: ``image`` uint8 (N, H, W, 3), ``proprio`` (N, P), ``objs`` (N, O, 3); None before the first
    reset)."""

    def __init__(self, renderer: Any):
        self.renderer = renderer.eval()
        self.arrays: dict[str, np.ndarray] | None = None

    def set(self, mask: np.ndarray, image: np.ndarray, proprio: np.ndarray, objs: np.ndarray) -> None:
        """The sub-envs in ``mask`` (N,) take a new anchor: (N, ...) arrays of every sub-env, of which the
        masked rows are kept (the first call keeps all)."""
        new = {"image": np.asarray(image), "proprio": np.asarray(proprio, np.float32), "objs": np.asarray(objs, np.float32)}
        if self.arrays is None:
            self.arrays = {k: v.copy() for k, v in new.items()}
        for k, v in new.items():
            self.arrays[k][mask] = v[mask]

    def draw(self, proprio: np.ndarray, objs: np.ndarray, ids: np.ndarray | None = None) -> np.ndarray:
        """The frames uint8 (M, H, W, 3) of the sub-envs ``ids`` (M,) (default: all N) at proprio (M, P) and
        object positions (M, O, 3)."""
        a = self.arrays if ids is None else {k: v[ids] for k, v in self.arrays.items()}
        return self.renderer.draw(a["image"], a["proprio"], a["objs"], proprio, objs)


class RendererDrawnRealEnv(gymnasium.vector.VectorWrapper):
    """The real built-in suite (its physics and success) with its frames drawn by a learned renderer: a
    :class:`worldmodels.state_renderer.StateRenderer` draws each observation's frame from the sub-env's real
    first frame of its episode (the anchor) and the real proprio and cube positions. It separates what the
    learned drawing costs from what learned dynamics cost (:class:`StateModelVectorEnv` with ``renderer``).

    Args:
        env: a :class:`envs.tabletop.TabletopVectorEnv` (not chunked, no wrist camera) that autoresets on
            the same step.
        renderer: the StateRenderer; it draws ``env``'s image size.

    ``reset`` and an autoreset show the real first frame (the new anchor); every other step's ``image``
    is drawn. ``info["final_obs"]`` stays the simulator's. Rewards, ``terminated``, ``truncated``, the
    proprio ``state`` and ``info["success"]`` are the real env's."""

    def __init__(self, env: Any, renderer: Any):
        from envs.tabletop.vector_env import TabletopVectorEnv
        from wmrl.errors import WmrlError

        sim = env.unwrapped
        if not isinstance(sim, TabletopVectorEnv) or sim.wrist:
            raise WmrlError(f"RendererDrawnRealEnv wraps the built-in suite without a wrist camera, got {type(sim).__name__}")
        if sim.metadata["autoreset_mode"] != gymnasium.vector.AutoresetMode.SAME_STEP:
            raise WmrlError(f"RendererDrawnRealEnv needs an env that autoresets on the same step; it has "
                            f"autoreset_mode={sim.metadata['autoreset_mode']}")
        if renderer.config.image_size != sim.image_size:
            raise WmrlError(f"renderer draws {renderer.config.image_size}x{renderer.config.image_size} frames; the "
                            f"env's are {sim.image_size}x{sim.image_size}")
        super().__init__(env)
        self.anchors = RendererAnchors(renderer)
        self._frames: np.ndarray | None = None  # the last observation's frames (N, H, W, 3)
        self._skip: np.ndarray | None = None  # sub-envs whose frames the next step need not draw

    def skip_next_frames(self, skip: np.ndarray) -> None:
        """The next ``step`` need not draw the frames of the sub-envs in ``skip`` bool (N,), neither the
        learned drawing nor the simulator's ``final_obs`` (see :mod:`envs.base`); a restarted sub-env shows
        its real first frame."""
        from envs.base import check_sub_env_mask

        self._skip = check_sub_env_mask(skip, self.num_envs, "skip")

    def _objs(self) -> np.ndarray:
        """The real object positions (N, O, 3): the environment state's first 3 O dims."""
        o = self.anchors.renderer.config.num_objects
        return np.asarray(self.env.unwrapped.environment_state()[:, : 3 * o], np.float32).reshape(-1, o, 3)

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None):
        from envs.base import reset_mask_from_options

        obs, info = self.env.reset(seed=seed, options=options)
        mask = reset_mask_from_options(options, self.num_envs)
        if self.anchors.arrays is None and not mask.all():
            from wmrl.errors import WmrlError

            raise WmrlError("RendererDrawnRealEnv: the first reset must reset every sub-env (no reset_mask)")
        self.anchors.set(mask, obs["image"], obs["state"], self._objs())
        if self._frames is not None:  # the others keep the frame they showed
            obs = {**obs, "image": np.where(mask[:, None, None, None], obs["image"], self._frames)}
        self._frames = obs["image"]
        return obs, info

    def step(self, actions: np.ndarray):
        from wmrl.errors import WmrlError

        if self.anchors.arrays is None:
            raise WmrlError("RendererDrawnRealEnv.step before reset; call reset() first")
        skip, self._skip = self._skip, None
        if skip is not None:  # the simulator's frames of those (their final_obs) need not be drawn either
            self.env.unwrapped.skip_next_frames(skip)
        obs, reward, term, trunc, info = self.env.step(actions)
        done = np.asarray(term, bool) | np.asarray(trunc, bool)
        objs = self._objs()
        image = np.where(done[:, None, None, None], obs["image"], self._frames)  # restarted: real, the new anchor
        ids = np.flatnonzero(~done if skip is None else ~done & ~skip)
        if len(ids):
            image[ids] = self.anchors.draw(np.asarray(obs["state"], np.float32)[ids], objs[ids], ids)
        if done.any():
            self.anchors.set(done, obs["image"], obs["state"], objs)
        self._frames = image
        return {**obs, "image": image}, reward, term, trunc, info


def check_state_model(model: Any, proprio_dim: int) -> None:
    """A one-line WmrlError unless ``model`` is an arm-and-object ``ObjectDynamics`` that steps a proprio
    of ``proprio_dim`` and the built-in suite's three cubes."""
    from wmrl.errors import WmrlError
    from worldmodels.object_dynamics import ObjectDynamics

    if not isinstance(model, ObjectDynamics):
        raise WmrlError(
            f"expected a worldmodels.object_dynamics.ObjectDynamics state model, got {type(model).__name__}"
        )
    c = model.config
    if not c.arm:
        raise WmrlError("the state model has no arm (object_dynamics --arm): it cannot step the proprio")
    if c.orientation:
        raise WmrlError(
            "the state model reads the cubes' orientations (config.orientation); the state-model worlds carry "
            "positions only: use a model fitted with orientation=false"
        )
    if c.proprio_dim != proprio_dim or c.num_objects != 3:
        raise WmrlError(
            f"the state model steps proprio_dim={c.proprio_dim} and {c.num_objects} objects; "
            f"expected {proprio_dim} and 3 (the built-in suite's cubes)"
        )


class StateModelVectorEnv(gymnasium.vector.VectorEnv):
    """The built-in suite with its dynamics replaced by an arm-and-object state model, drawn by the
    simulator: a ``gymnasium.vector.VectorEnv`` with the wrapped real env's contract (:mod:`envs.base`).

    Args:
        env: a :class:`envs.tabletop.TabletopVectorEnv` (not chunked; any autoreset mode, no wrist
            camera; its ``reward_type``, ``sparse`` or ``dense``, is this env's). Its resets give the
            layouts, instructions and first states; it only draws (``render_states``); its physics steps
            only in a real prefix (``real_steps``).
        model: an arm-and-object :class:`worldmodels.object_dynamics.ObjectDynamics` (``config.arm``), or
            an ensemble: a non-empty list of them that read and predict the same things (fit seeds differ).
        success: with an ensemble, a step succeeds when the task's rule holds on ``all`` members'
            predictions (pessimism; the default), on ``any``, or on the ``advanced`` member's.
        advance: with an ensemble, the member whose prediction the env advances with each step, per
            sub-env: ``random`` (drawn from a generator seeded by ``seed`` and each full reset's seeds, as
            MOPO draws its model per transition) or ``first`` (member 0).
        max_disagreement: with an ensemble, a step whose members' spread (the largest distance between
            two members' predicted tcp or cube positions, metres) exceeds this is unreliable. ``gate="mask"``:
            ``info["gate_ok"]`` False there (GRPO's ``gate="mask"`` drops the trajectory);
            ``gate="terminate"``: the episode ends there as a failure (truncated, no ``gate_ok``: GRPO keeps
            and scores it, MOReL's halt). None: no gate.
        seed: the base seed of ``advance="random"``.
        real_steps: the first ``real_steps`` steps of every episode step the real simulator's physics (the
            policy's own real states; ``env`` must autoreset on the same step), and the model takes over
            from the real state reached, moving as it moved (MBPO's rollouts branched from real states).
            Every step taken while any sub-env is in its real prefix steps all sub-envs' physics, without
            autoreset (a sub-env past its prefix keeps its layout; only its cubes' orientation, which the
            drawing keeps, can change). ``real_sim_calls["prefix_steps"]`` counts the prefix sub-envs'
            steps (the real experience: real env steps) and ``["physics_steps"]`` all physics steps taken
            (compute). 0: the model from the reset.
        prefix_after_autoreset: False: only episodes started by ``reset()`` get the real prefix; one that
            starts by autoreset runs in the model from its real first state. GRPO's collection trains on
            each sub-env's first episode only, so this saves the prefixes of the episodes it ignores.
        share_prefix: G > 1: consecutive groups of G sub-envs (GRPO's groups, which share a start) share
            one real prefix: in it every member executes its group leader's (the first member's)
            action, so the group reaches one real state and only the leader's prefix steps count as
            real experience (``prefix_steps``; the others are copies of it, as a real robot would run
            the prefix once and branch G model rollouts from where it ended). The members' recorded
            prefix actions were not the executed ones, so RL must train on the branches only
            (``train_on="branch"``, the default then). A full reset whose groups do not start from
            one state is an error. 1: every sub-env runs its own prefix.
        renderer: a learned :class:`worldmodels.state_renderer.StateRenderer` that draws the model's states
            instead of the simulator: each frame from a real anchor frame and the states. The anchor is the
            sub-env's real first frame of its episode (the real reset's), or, after a real prefix, the
            prefix's last real frame, where the model's branch starts (always drawn for it, also when
            skipped). None: the simulator's renderer draws them.
        train_on: which steps' chunks the RL update trains on: ``all``; ``prefix`` (the real prefix
            only: the policy's real actions, scored by where the model's branch ends up); or
            ``branch`` (the model's steps only). Otherwise ``info["untrained"]`` (N,) marks the others
            (see :mod:`imagination.rollout_buffer`); an episode's length and score count every step.
            None: ``branch`` with ``share_prefix`` > 1, else ``all``.

    ``reset(seed, options)`` resets the real env (the same seeds give the same layouts as the real
    env) and returns its first observation. ``step(actions (N, 7))`` clips the actions to [-1, 1] as
    the real env does and steps the model one step: proprio (N, 8) and cube positions (N, 3, 3). The
    observation is ``image`` uint8 (N, H, W, 3), the simulator's drawing of those states (the cubes
    keep their orientation), and ``state`` float32 (N, 8), the model's proprio. ``terminated`` is the
    task's rule on the predicted states (:func:`envs.tabletop.environment_state.success_from_environment_state`),
    and so is the sparse reward; the dense one is 1 there and else the task's staged progress on the
    states advanced with (:func:`~envs.tabletop.environment_state.shaping_from_environment_state`, the
    simulator's dense reward with the model's states; a real prefix step gets the simulator's own).
    ``truncated`` is the real env's time limit; autoreset (next step, same step with
    ``final_obs``/``final_info``, or disabled) and ``info`` (``success``, ``instruction``, ``task_id``) are the real env's. A non-finite prediction
    is a NonFiniteError. ``real_sim_calls`` counts what was asked of the real simulator.

    With an ensemble of more than one member, every member steps from the same current state, the
    observation and the next state are the advanced member's, ``info["disagreement"]`` float32 (N,) is
    each step's spread (metres), and ``disagreement_log`` holds, per full reset, each sub-env's largest
    spread over its first episode after it (N,) (NaN until that episode ends). One member is the single
    model's env exactly.
    """

    def __init__(
        self,
        env: Any,
        model: Any,
        success: str = "all",
        advance: str = "random",
        max_disagreement: float | None = None,
        gate: str = "mask",
        seed: int = 0,
        real_steps: int = 0,
        prefix_after_autoreset: bool = True,
        share_prefix: int = 1,
        train_on: str | None = None,
        renderer: Any = None,
    ):
        from envs.tabletop.vector_env import STATE_DIM, TabletopVectorEnv
        from wmrl.errors import WmrlError

        if not isinstance(env, TabletopVectorEnv):
            raise WmrlError(
                f"StateModelVectorEnv wraps a TabletopVectorEnv (the built-in suite), got {type(env).__name__}"
            )
        if env.wrist:
            raise WmrlError("StateModelVectorEnv draws the agent view only; make the env with wrist_image=False")
        if env.reward_type not in ("sparse", "dense"):
            raise WmrlError(f"StateModelVectorEnv: reward_type={env.reward_type!r}; expected 'sparse' or 'dense'")
        for m in model if isinstance(model, (list, tuple)) else [model]:
            check_state_model(m, STATE_DIM)
        self.models = [m.eval() for m in check_ensemble(model)]
        check_rules(success, advance)  # here too: the rollout is only built at the first reset
        if max_disagreement is not None and not (np.isfinite(max_disagreement) and max_disagreement > 0):
            raise WmrlError(f"max_disagreement={max_disagreement!r} must be a finite number of metres > 0 or None")
        if max_disagreement is not None and len(self.models) < 2:
            raise WmrlError("max_disagreement gates on the members' spread; it needs an ensemble of 2 or more")
        if gate not in ("mask", "terminate"):
            raise WmrlError(f"gate={gate!r}; expected 'mask' or 'terminate'")
        if isinstance(real_steps, bool) or not isinstance(real_steps, (int, np.integer)) or real_steps < 0:
            raise WmrlError(f"real_steps={real_steps!r}; expected an integer >= 0 (real physics steps per episode)")
        if real_steps and env.metadata["autoreset_mode"] != gymnasium.vector.AutoresetMode.SAME_STEP:
            raise WmrlError(
                f"real_steps={real_steps} needs an env that autoresets on the same step; it has "
                f"autoreset_mode={env.metadata['autoreset_mode']}"
            )
        if isinstance(share_prefix, bool) or not isinstance(share_prefix, (int, np.integer)) or share_prefix < 1:
            raise WmrlError(f"share_prefix={share_prefix!r}; expected an integer group size >= 1")
        if share_prefix > 1 and (not real_steps or env.num_envs % share_prefix):
            raise WmrlError(
                f"share_prefix={share_prefix} needs real_steps > 0 (got {real_steps}) and num_envs "
                f"({env.num_envs}) a multiple of it"
            )
        train_on = train_on or ("branch" if share_prefix > 1 else "all")
        if train_on not in ("all", "prefix", "branch"):
            raise WmrlError(f"train_on={train_on!r}; expected 'all', 'prefix' or 'branch'")
        if train_on != "all" and not real_steps:
            raise WmrlError(f"train_on={train_on!r} splits an episode at its real prefix; it needs real_steps > 0")
        if share_prefix > 1 and train_on != "branch":
            raise WmrlError(
                f"share_prefix={share_prefix} with train_on={train_on!r}: the members' recorded prefix actions "
                "were not executed, so only the branches can be trained on (train_on='branch')"
            )
        if renderer is not None and renderer.config.image_size != env.image_size:
            raise WmrlError(
                f"renderer draws {renderer.config.image_size}x{renderer.config.image_size} frames; the env's are "
                f"{env.image_size}x{env.image_size}"
            )
        self.anchors = None if renderer is None else RendererAnchors(renderer)
        self.real_steps, self.share_prefix, self.train_on = int(real_steps), int(share_prefix), train_on
        self.prefix_after_autoreset = bool(prefix_after_autoreset)
        self._prefixed = np.ones(env.num_envs, bool)  # whose current episode gets the real prefix
        self.env, self.model = env, self.models[0]
        self.success_rule, self.advance, self.gate = success, advance, gate
        self.max_disagreement = None if max_disagreement is None else float(max_disagreement)
        self.seed = int(seed)
        self.disagreement_log: list[np.ndarray] = []  # per full reset: (N,) first-episode largest spread
        self._episode_spread = np.zeros(env.num_envs, np.float32)
        self.num_envs, self.task_ids = env.num_envs, list(env.task_ids)
        self.metadata = dict(env.metadata)
        self.render_mode = env.render_mode
        self.single_observation_space, self.single_action_space = env.single_observation_space, env.single_action_space
        self.observation_space, self.action_space = env.observation_space, env.action_space
        self._autoreset = env.metadata["autoreset_mode"]
        self.max_steps = env.max_steps.copy()
        self._steps = np.zeros(self.num_envs, np.int64)
        self._needs_reset = np.zeros(self.num_envs, bool)
        self._frames: np.ndarray | None = None  # the last observation's frames (N, H, W, 3)
        self._skip: np.ndarray | None = None  # sub-envs whose frames the next step need not draw
        self.rollout: StateModelRollout | None = None
        # what was asked of the real simulator: reset calls (each draws every sub-env once), the sub-envs
        # they reset, render_states calls (each draws the sub-envs not skipped); with real_steps, the sub-env physics steps taken
        # (compute) and those of sub-envs in their prefix (real experience: the real env steps used)
        self.real_sim_calls = {
            "resets": 0, "sub_env_resets": 0, "render_states": 0, "physics_steps": 0, "prefix_steps": 0
        }

    @property
    def instructions(self) -> list[str]:
        return self.env.instructions

    def _real_reset(self, mask: np.ndarray, seed: Any = None) -> dict[str, np.ndarray]:
        """Reset the real sub-envs in ``mask`` and (re)start the model there; the real observation."""
        obs, _ = self.env.reset(seed=seed, options={"reset_mask": mask})
        ids = np.flatnonzero(mask)
        env_states = self.env.environment_state()  # (N, E)
        proprio, env_state = obs["state"][ids], env_states[ids]
        if self.rollout is None:
            ctx = {"states": obs["state"][:, None], "env_states": env_states[:, None]}
            self.rollout = StateModelRollout(self.models, ctx, self.task_ids, self.success_rule, self.advance)
        else:
            self.rollout.restart(ids, proprio, env_state)
        if self.anchors is not None:
            self.anchors.set(mask, obs["image"], obs["state"], self.rollout.objs.numpy())
        self._episode_spread[ids] = 0.0
        self._steps[ids] = 0
        self._needs_reset[ids] = False
        self.real_sim_calls["resets"] += 1
        self.real_sim_calls["sub_env_resets"] += len(ids)
        return obs

    def reset(self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None):
        """Reset the sub-envs of ``options["reset_mask"]`` (all by default; ``seed`` as the real env
        takes it) -> (obs, info). The first reset must reset every sub-env."""
        from envs.base import reset_mask_from_options
        from wmrl.errors import WmrlError

        mask = reset_mask_from_options(options, self.num_envs)
        if self.rollout is None and not mask.all():
            raise WmrlError("StateModelVectorEnv: the first reset must reset every sub-env (no reset_mask)")
        real = self._real_reset(mask, seed)
        self._prefixed[mask] = True
        if mask.all() and self.share_prefix > 1:
            self._check_groups_share_starts()
        if mask.all():  # the member draws restart from the seeds; a new row of the log
            seeds = [] if seed is None else np.atleast_1d(np.asarray(seed, np.int64)).tolist()
            self.rollout.rng = np.random.default_rng([self.seed, *seeds])
            if len(self.models) > 1:
                self.disagreement_log.append(np.full(self.num_envs, np.nan, np.float32))
        if self._frames is not None:  # the others keep their last frame: their states did not change
            real["image"] = np.where(mask[:, None, None, None], real["image"], self._frames)
        self._frames = real["image"]
        obs = {"image": self._frames, "state": self.rollout.now.numpy().astype(np.float32)}
        return obs, self._info(np.zeros(self.num_envs, bool))

    def _check_groups_share_starts(self) -> None:
        """With ``share_prefix`` G: every group of G sub-envs starts from one state (proprio and cubes)."""
        from wmrl.errors import WmrlError

        g = self.share_prefix
        start = np.concatenate([self.rollout.now.numpy(), self.rollout.objs.numpy().reshape(self.num_envs, -1)], 1)
        start = start.reshape(self.num_envs // g, g, -1)
        differ = np.flatnonzero((start != start[:, :1]).any((1, 2)))
        if len(differ):
            k = int(differ[0])
            raise WmrlError(
                f"share_prefix={g}: sub-envs {k * g}-{k * g + g - 1} do not start from one state; a shared "
                "prefix needs every group to reset with one seed (GRPO's group-shared starts)"
            )

    def skip_next_frames(self, skip: np.ndarray) -> None:
        """The next ``step`` need not draw the frames of the sub-envs in ``skip`` bool (N,): their image
        rows there (observation and ``final_obs``) hold their last frame; a sub-env restarted on that step
        shows its real first frame (see :mod:`envs.base`)."""
        from envs.base import check_sub_env_mask

        self._skip = check_sub_env_mask(skip, self.num_envs, "skip")

    def _observe(self, undrawn: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """The observation at the model's states; the sub-envs in ``undrawn`` bool (N,) keep their last
        frame (skipped, or shown from elsewhere: the real prefix's, a restart's)."""
        now, objs = self.rollout.now.numpy(), self.rollout.objs.numpy()
        if undrawn is None or self._frames is None:
            ids, frames = None, None
        else:
            ids, frames = np.flatnonzero(~undrawn), self._frames.copy()
        if ids is None or len(ids):
            sel = slice(None) if ids is None else ids
            if self.anchors is not None:
                drawn = self.anchors.draw(now[sel], objs[sel], ids)
            else:
                drawn = self.env.render_states(now[sel], objs[sel], ids)
                self.real_sim_calls["render_states"] += 1
            if frames is None:
                frames = drawn
            else:
                frames[ids] = drawn
        self._frames = frames
        return {"image": self._frames, "state": now.astype(np.float32)}

    def _info(self, success: np.ndarray) -> dict[str, Any]:
        return {"success": success, "instruction": list(self.instructions), "task_id": list(self.task_ids)}

    def step(self, actions: np.ndarray):
        """actions (N, 7) -> (obs, reward (N,), terminated (N,), truncated (N,), info)."""
        from gymnasium.vector import AutoresetMode

        from envs.base import check_actions
        from wmrl.errors import WmrlError
        from wmrl.runs import check_finite

        if self.rollout is None:
            raise WmrlError("StateModelVectorEnv.step before reset; call reset() first")
        a = check_actions(actions, self.num_envs)
        skip, self._skip = self._skip, None
        undrawn = np.zeros(self.num_envs, bool) if skip is None else skip.copy()
        next_step = self._autoreset == AutoresetMode.NEXT_STEP
        pending = self._needs_reset.copy() if next_step else np.zeros(self.num_envs, bool)
        prefix = (self._steps < self.real_steps) & self._prefixed  # sub-envs still in their episode's real prefix
        if self.share_prefix > 1 and prefix.any():  # the members follow their leader through the prefix
            lead = np.repeat(a[:: self.share_prefix], self.share_prefix, axis=0)
            a = np.where(prefix[:, None], lead, a).astype(np.float32)
        # sub-envs whose prefix ends with this step: a learned renderer draws their branch from its last real frame
        handover = prefix & (self._steps + 1 == self.real_steps) if self.anchors is not None else None
        phys = None
        if prefix.any():  # the physics draws only what is shown of it: the prefix sub-envs' frames
            self.env.skip_next_frames((undrawn if handover is None else undrawn & ~handover) | ~prefix)
            phys = self._real_step(a, prefix)
            undrawn |= prefix
        success = self.rollout.step(a[:, None])
        check_finite("state model prediction", self.rollout.now)
        check_finite("state model prediction", self.rollout.objs)
        if phys is not None:  # the prefix sub-envs are where the physics took them
            ids, r_obs, r_reward, r_info, env_states, prev_p, prev_o = phys
            success[prefix] = np.asarray(r_info["success"], bool)[prefix]
            self.rollout.restart(ids, r_obs["state"][ids], env_states[ids], prev_p, prev_o)
            if handover is not None and handover.any():  # the branch's anchor: the real frame it starts from
                self.anchors.set(handover, r_obs["image"], r_obs["state"], self.rollout.objs.numpy())
        self._steps += 1
        terminated = success.copy()
        truncated = (self._steps >= self.max_steps) & ~terminated
        spread = self.rollout.spread.copy()
        spread[prefix] = 0.0
        gate_ok = np.ones(self.num_envs, bool) if self.max_disagreement is None else spread <= self.max_disagreement
        if self.gate == "terminate":
            truncated |= ~gate_ok & ~terminated
        restarted = None
        if pending.any():  # NEXT_STEP autoreset: sub-envs that ended last step ignore this action and restart
            restarted = self._real_reset(pending)["image"]
            self._prefixed[pending] = self.prefix_after_autoreset
            terminated[pending] = truncated[pending] = success[pending] = False
            gate_ok[pending], spread[pending] = True, 0.0
        reward = success.astype(np.float32)
        if self.env.reward_type == "dense":  # the task's shaping on the advanced states, 1 on success
            from envs.tabletop.environment_state import shaping_from_environment_state

            shaping = shaping_from_environment_state(self.task_ids, self.rollout.now.numpy(), self.rollout.env_now)
            reward = np.where(success, 1.0, shaping).astype(np.float32)
            if phys is not None:
                reward[prefix] = phys[2][prefix]  # the prefix's: the physics' own dense reward
            if pending.any():
                reward[pending] = 0.0
        done = terminated | truncated
        info = self._info(success)
        if len(self.models) > 1:
            info["disagreement"] = spread
            self._log_spread(spread, done)
        if self.max_disagreement is not None and self.gate == "mask":
            info["gate_ok"] = gate_ok
        if self.train_on != "all":  # the steps whose chunks RL leaves out
            info["untrained"] = prefix.copy() if self.train_on == "branch" else ~prefix
        if self._autoreset == AutoresetMode.SAME_STEP and done.any():
            final_obs, final_instr = self._observe(undrawn), list(self.instructions)
            if phys is not None:  # the real prefix shows the physics' own observations
                final_obs = self._with_real(prefix, phys[1], final_obs)
            real = self._real_reset(done)
            self._prefixed[done] = self.prefix_after_autoreset
            self._frames = np.where(done[:, None, None, None], real["image"], final_obs["image"])
            obs = {"image": self._frames, "state": self.rollout.now.numpy().astype(np.float32)}
            info["final_obs"] = final_obs
            info["final_info"] = {"success": success.copy(), "instruction": final_instr}
            info["_final_obs"], info["_final_info"] = done.copy(), done.copy()
            info["instruction"] = list(self.instructions)
        else:
            obs = self._observe(undrawn | pending)
            if phys is not None:
                obs = self._with_real(prefix, phys[1], obs)
                self._frames = obs["image"]
            if restarted is not None:  # a restarted sub-env shows the real env's first frame
                self._frames = obs["image"] = np.where(pending[:, None, None, None], restarted, obs["image"])
            if next_step:
                self._needs_reset = done.copy()
        return obs, reward, terminated, truncated, info

    def _real_step(self, actions: np.ndarray, prefix: np.ndarray) -> tuple:
        """Step the real physics of every sub-env with ``actions`` (N, A) for the sub-envs in ``prefix``
        (N,): (their ids, the real obs, reward (N,) and info, the environment states (N, E), and the proprio
        (M, P) and object positions (M, O, 3) the rollout held for them one step earlier)."""
        ids = np.flatnonzero(prefix)
        prev_p, prev_o = self.rollout.now[ids].clone(), self.rollout.objs[ids].clone()
        # no autoreset: a sub-env past its prefix keeps the layout its model episode is drawn in
        r_obs, r_reward, _, _, r_info = self.env.step_without_autoreset(actions)
        self.real_sim_calls["physics_steps"] += self.num_envs
        # a shared prefix is one real trajectory per group: its leader's
        leaders = prefix & (np.arange(self.num_envs) % self.share_prefix == 0)
        self.real_sim_calls["prefix_steps"] += int(leaders.sum())
        return ids, r_obs, np.asarray(r_reward, np.float32), r_info, self.env.environment_state(), prev_p, prev_o

    @staticmethod
    def _with_real(prefix: np.ndarray, r_obs: dict, obs: dict) -> dict[str, np.ndarray]:
        """``obs`` (``image`` (N, H, W, 3), ``state`` (N, P)) with the real prefix sub-envs' observations
        after this step (an episode the physics ended: its final one; nothing autoreset it)."""
        return {
            k: np.where(prefix.reshape(-1, *[1] * (v.ndim - 1)), np.asarray(r_obs[k]), v).astype(v.dtype)
            for k, v in obs.items()
        }

    def _log_spread(self, spread: np.ndarray, done: np.ndarray) -> None:
        """Keep each episode's largest spread; a sub-env's first episode after a full reset goes to the log."""
        self._episode_spread = np.maximum(self._episode_spread, spread)
        if self.disagreement_log:
            row = self.disagreement_log[-1]
            first = done & np.isnan(row)
            row[first] = self._episode_spread[first]
        self._episode_spread[done] = 0.0

    def render(self) -> np.ndarray | None:
        """The frames (N, H, W, 3) of the last observation."""
        return self._frames

    def close_extras(self, **kwargs: Any) -> None:
        self.env.close()
