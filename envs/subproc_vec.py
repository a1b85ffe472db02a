"""A batched env whose simulators live in worker processes of *another* Python interpreter.

Used by the LIBERO and ManiSkill3 backends, whose pins (mujoco < 3.9; numpy < 2) cannot meet
the core's. Each worker is started as ``<python> <worker_script>``, talks over a
socket pair inherited at start (:mod:`multiprocessing.connection` framing) and serves a *host*: a batch
of ``k`` sub-envs. The workers step in parallel (send to all, then receive from all).

Host interface (worker side, arrays batched over the host's ``k`` sub-envs)::

    describe() -> {"obs": {key: (shape, dtype_str)}, "instructions": [k str], "info": {...}}
    reset(mask: bool (k,), seeds: [k int|None], options: [k dict|None]) -> out
    step(actions: float32 (k, 7), reset_mask: bool (k,), seeds, options) -> out
        out = {"obs": {key: (k, ...)}, "reward": float32 (k,), "terminated": bool (k,),
               "success": bool (k,), "instructions": [k str], "extra": {key: (k, ...)}}
        sub-envs in ``reset_mask`` are reset instead of stepped (reward 0, not terminated).

This class owns time limits, autoreset (gymnasium's NEXT_STEP by default, SAME_STEP on request),
reset of a subset and the action checks, so every worker backend behaves the same.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from envs import _wire
from envs.base import ACTION_DIM, check_actions, reset_mask_from_options
from wmrl.errors import WmrlError


class BackendNotInstalledError(WmrlError, RuntimeError):
    """An optional simulator backend (its venv or its assets) is not installed."""


class WorkerError(WmrlError, RuntimeError):
    """A simulator worker failed (its traceback is attached to the message)."""


@dataclass
class WorkerSpec:
    """One worker process.

    Args:
        env_indices: indices (into the batch of N sub-envs) this worker hosts, in order.
        config: keyword arguments of the worker's host constructor (plain Python values).
    """

    env_indices: list[int]
    config: dict[str, Any] = field(default_factory=dict)


class SubprocVecEnv(gym.vector.VectorEnv):
    """Batched env over worker processes (see the module docstring for the protocol).

    Args:
        task_ids: one task id per sub-env, length N.
        max_episode_steps: time limit per sub-env, length N.
        python: the interpreter of the simulator's venv.
        worker_script: path of the worker script (run as ``python worker_script``).
        workers: which sub-envs each worker hosts, and its host config.
        env: extra environment variables for the workers.
        autoreset_mode: ``"next_step"`` (gymnasium default) or ``"same_step"``.
        metadata: merged into ``self.metadata``.
    """

    def __init__(
        self,
        task_ids: Sequence[str],
        max_episode_steps: Sequence[int],
        python: str | os.PathLike,
        worker_script: str | os.PathLike,
        workers: Sequence[WorkerSpec],
        env: dict[str, str] | None = None,
        autoreset_mode: str = "next_step",
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.num_envs = len(task_ids)
        covered = sorted(i for w in workers for i in w.env_indices)
        if covered != list(range(self.num_envs)):
            raise WmrlError(f"workers host sub-envs {covered}; expected each of 0..{self.num_envs - 1} once")
        if autoreset_mode not in ("next_step", "same_step"):
            raise WmrlError(f"autoreset_mode={autoreset_mode!r}; expected 'next_step' or 'same_step'")
        self.task_ids = list(task_ids)
        self._max_steps = np.asarray(max_episode_steps, dtype=np.int64)
        self._workers = list(workers)
        self._autoreset = autoreset_mode
        self._procs: list[subprocess.Popen] = []
        self._conns: list[Any] = []
        self._closed = False
        wenv = {**os.environ, **(env or {})}
        wenv.pop("PYTHONPATH", None)  # the core's path must not leak into the other venv
        try:
            for _ in self._workers:
                ours, theirs = socket.socketpair()
                wenv["WMRL_WORKER_FD"] = str(theirs.fileno())
                self._procs.append(
                    subprocess.Popen(
                        [str(python), str(worker_script)],
                        env=wenv,
                        stdin=subprocess.DEVNULL,
                        pass_fds=[theirs.fileno()],
                    )
                )
                theirs.close()
                self._conns.append(Connection(ours.detach()))
        except Exception as e:
            self.close()
            raise WorkerError(f"simulator workers ({python} {worker_script}) did not start: {e}") from e
        try:
            for conn, w in zip(self._conns, self._workers, strict=True):
                _wire.send(conn, ("init", w.config))
            descs = [self._reply(c) for c in self._conns]
        except Exception:
            self.close()
            raise
        d0 = descs[0]
        self._obs_keys = list(d0["obs"])
        self.instructions: list[str] = [""] * self.num_envs
        for w, d in zip(self._workers, descs, strict=True):
            for j, i in enumerate(w.env_indices):
                self.instructions[i] = d["instructions"][j]
        spaces = {}
        for key, (shape, dtype) in d0["obs"].items():
            shape = tuple(shape)
            if np.dtype(dtype) == np.uint8:
                spaces[key] = gym.spaces.Box(0, 255, (self.num_envs, *shape), np.uint8)
            else:
                spaces[key] = gym.spaces.Box(-np.inf, np.inf, (self.num_envs, *shape), np.dtype(dtype))
        self.single_observation_space = gym.spaces.Dict(
            {k: gym.spaces.Box(s.low[0], s.high[0], s.shape[1:], s.dtype) for k, s in spaces.items()}
        )
        self.observation_space = gym.spaces.Dict(spaces)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (ACTION_DIM,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.num_envs, ACTION_DIM), np.float32)
        mode = (
            gym.vector.AutoresetMode.NEXT_STEP
            if autoreset_mode == "next_step"
            else gym.vector.AutoresetMode.SAME_STEP
        )
        self.metadata = {"autoreset_mode": mode, **d0.get("info", {}), **(metadata or {})}
        self.worker_info = [d.get("info", {}) for d in descs]
        self._elapsed = np.zeros(self.num_envs, dtype=np.int64)
        self._needs_reset = np.zeros(self.num_envs, dtype=bool)
        self._obs: dict[str, np.ndarray] | None = None
        self._seed_counter: int | None = None

    # ------------------------------------------------------------------ plumbing
    def _reply(self, conn) -> Any:
        try:
            status, *payload = _wire.recv(conn)
        except (EOFError, ConnectionResetError, OSError) as e:
            codes = [p.poll() for p in self._procs]
            raise WorkerError(f"a simulator worker died (exit codes {codes}): {e!r}") from e
        if status == "error":
            name, msg, tb = payload
            if name == "MissingAssetsError":
                raise BackendNotInstalledError(msg)
            if name == "UserError":
                raise WmrlError(msg)
            raise WorkerError(f"simulator worker error: {name}: {msg}\n--- worker traceback ---\n{tb}")
        return payload[0]

    def _call_all(self, method: str, per_worker: list[dict[str, Any]]) -> list[Any]:
        for conn, kwargs in zip(self._conns, per_worker, strict=True):
            _wire.send(conn, (method, kwargs))
        return [self._reply(c) for c in self._conns]

    def _gather(self, outs: list[dict[str, Any]]) -> dict[str, Any]:
        """Scatter per-worker results back into arrays ordered by sub-env index."""
        n = self.num_envs
        res: dict[str, Any] = {"obs": {}, "extra": {}}
        for key in ("reward", "terminated", "success"):
            first = np.asarray(outs[0][key])
            res[key] = np.zeros((n, *first.shape[1:]), dtype=first.dtype)
        for key, v in outs[0]["obs"].items():
            res["obs"][key] = np.zeros((n, *v.shape[1:]), dtype=v.dtype)
        for key, v in outs[0].get("extra", {}).items():
            v = np.asarray(v)
            res["extra"][key] = np.zeros((n, *v.shape[1:]), dtype=v.dtype)
        for w, out in zip(self._workers, outs, strict=True):
            idx = np.asarray(w.env_indices)
            for key in ("reward", "terminated", "success"):
                res[key][idx] = out[key]
            for key, v in out["obs"].items():
                res["obs"][key][idx] = v
            for key, v in out.get("extra", {}).items():
                res["extra"][key][idx] = v
            for j, i in enumerate(w.env_indices):
                self.instructions[i] = out["instructions"][j]
        return res

    def _split(self, mask: np.ndarray, seeds: list[int | None], options: list[dict | None]) -> list[dict]:
        return [
            {
                "mask": mask[w.env_indices],
                "seeds": [seeds[i] for i in w.env_indices],
                "options": [options[i] for i in w.env_indices],
            }
            for w in self._workers
        ]

    def _seeds(self, seed: int | Sequence[int] | None, mask: np.ndarray) -> list[int | None]:
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, (int, np.integer)):
            return [int(seed) + i if mask[i] else None for i in range(self.num_envs)]
        seed = list(seed)
        if len(seed) != self.num_envs:
            raise WmrlError(f"seed has {len(seed)} entries; expected an int or {self.num_envs} ints")
        return [None if s is None else int(s) for s in seed]

    def _info(self, res: dict[str, Any]) -> dict[str, Any]:
        info: dict[str, Any] = {
            "success": res["success"].astype(bool),
            "instruction": list(self.instructions),
            "task_id": list(self.task_ids),
            "elapsed_steps": self._elapsed.copy(),
        }
        info.update(res["extra"])
        return info

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None):
        """Reset all sub-envs, or those in ``options["reset_mask"]`` (bool ``(N,)``).

        ``seed``: an int (sub-env ``i`` gets ``seed + i``) or one int per sub-env.
        ``options["env_options"]``: optional list of N per-sub-env dicts for the backend (e.g.
        ``{"init_state_id": 3}`` for LIBERO).
        """
        mask = reset_mask_from_options(options, self.num_envs)
        per_env = (options or {}).get("env_options") or [None] * self.num_envs
        if len(per_env) != self.num_envs:
            raise WmrlError(f"options['env_options'] has {len(per_env)} entries; expected {self.num_envs}")
        if not mask.all() and self._obs is None:
            raise WmrlError("reset_mask needs a first full reset(); call reset() without a mask first")
        outs = self._call_all("reset", self._split(mask, self._seeds(seed, mask), list(per_env)))
        res = self._gather(outs)
        self._elapsed[mask] = 0
        self._needs_reset[mask] = False
        self._obs = res["obs"]
        return {k: v.copy() for k, v in res["obs"].items()}, self._info(res)

    def step(self, actions):
        """Step every sub-env with ``actions`` float32 ``(N, 7)`` in [-1, 1].

        Returns ``obs, reward (N,), terminated (N,), truncated (N,), info`` with
        ``info["success"]`` bool ``(N,)``. With NEXT_STEP autoreset, a sub-env that ended on
        the previous step is reset instead (its action is ignored, reward 0).
        """
        if self._obs is None:
            raise WmrlError("step() before reset(); call reset() first")
        a = check_actions(actions, self.num_envs)
        reset_now = self._needs_reset.copy()
        nones = [None] * self.num_envs
        per_worker = self._split(reset_now, nones, nones)
        for w, kw in zip(self._workers, per_worker, strict=True):
            kw["actions"] = a[w.env_indices]
            kw["reset_mask"] = kw.pop("mask")
        res = self._gather(self._call_all("step", per_worker))
        self._elapsed[reset_now] = 0
        self._elapsed[~reset_now] += 1
        terminated = res["terminated"].astype(bool) & ~reset_now
        truncated = (self._elapsed >= self._max_steps) & ~terminated & ~reset_now
        done = terminated | truncated
        reward = res["reward"].astype(np.float32)
        info = self._info(res)
        obs = res["obs"]
        if self._autoreset == "same_step" and done.any():
            info["final_obs"] = {k: v.copy() for k, v in obs.items()}
            info["final_info"] = {"success": info["success"].copy()}
            info["_final_obs"] = done.copy()
            r = self._gather(self._call_all("reset", self._split(done, nones, nones)))
            self._elapsed[done] = 0
            for k in obs:
                obs[k][done] = r["obs"][k][done]
            self._needs_reset[:] = False
        else:
            self._needs_reset = done
        self._obs = obs
        return {k: v.copy() for k, v in obs.items()}, reward, terminated, truncated, info

    def call_hosts(self, method: str, **kwargs: Any) -> list[Any]:
        """Call ``method(**kwargs)`` on every worker's host (backend-specific extras)."""
        return self._call_all(method, [kwargs] * len(self._workers))

    def close_extras(self, **kwargs: Any) -> None:
        for conn in self._conns:
            try:
                _wire.send(conn, ("close", {}))
            except (OSError, EOFError):
                pass
        deadline = time.monotonic() + 10
        for p in self._procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for conn in self._conns:
            conn.close()
        self._conns, self._procs = [], []

    def close(self, **kwargs: Any) -> None:
        if self._closed:
            return
        self._closed = True
        self.close_extras(**kwargs)

    def __del__(self) -> None:  # pragma: no cover - interpreter shutdown
        try:
            self.close()
        except Exception:
            pass


def split_evenly(num_envs: int, num_workers: int) -> list[list[int]]:
    """Contiguous, near-equal index groups: ``split_evenly(5, 2) == [[0, 1, 2], [3, 4]]``."""
    num_workers = max(1, min(num_workers, num_envs))
    bounds = np.linspace(0, num_envs, num_workers + 1).round().astype(int)
    return [list(range(bounds[i], bounds[i + 1])) for i in range(num_workers)]


def default_num_workers(num_envs: int) -> int:
    """One worker per sub-env, capped at the CPU count."""
    return max(1, min(num_envs, os.cpu_count() or 1))


def python_version_of(python: str | os.PathLike) -> str:
    """``sys.version`` of another interpreter (for error messages and result JSON)."""
    out = subprocess.run(
        [str(python), "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True
    )
    return out.stdout.strip() or f"unknown ({out.stderr.strip()[-200:]})"


def repo_root() -> Path:
    """The repository root (parent of ``envs/``)."""
    return Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """The project cache (``$WMRL_CACHE`` or ``<repo>/.cache``; git-ignored)."""
    return Path(os.environ.get("WMRL_CACHE") or repo_root() / ".cache")


def venv_python(name: str, env_var: str, setup_script: str, provides: str) -> Path:
    """The python of the extra venv ``.cache/venvs/<name>`` (or ``$<env_var>``), or a one-line
    error saying how to install it."""
    override = os.environ.get(env_var)
    py = Path(override) if override else cache_dir() / "venvs" / name / "bin" / "python"
    if not py.exists():
        raise BackendNotInstalledError(
            f"the {name} backend is not installed: {py} does not exist; run `bash {setup_script}` "
            f"(installs {provides}) or set {env_var} to a python that has them"
        )
    return py
