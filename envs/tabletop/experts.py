"""Scripted experts for the built-in tasks, batched, with a noise/competence knob.

Each sub-env runs a small state machine on privileged simulator state (object and goal
positions). ``noise`` adds Gaussian action noise (std = noise) and a per-episode aiming error
(std = noise * 1.5 cm), so higher noise gives graded, lower success: imperfect demos and
policies of varied quality.
"""

from __future__ import annotations

import numpy as np

from envs.tabletop.scene import CUBE_HALF
from envs.tabletop.vector_env import ACTION_SCALE

OPEN, CLOSE = -1.0, 1.0
HOVER = 0.09
CARRY = 0.14


def _to(target: np.ndarray, tcp: np.ndarray, gain: float = 1.0, limit: float = 1.0) -> np.ndarray:
    return np.clip(gain * (target - tcp) / ACTION_SCALE, -limit, limit)


class TabletopExpert:
    """Batched scripted expert. ``act(obs, info) -> (N, 7)`` float32 actions in [-1, 1].

    Args:
        env: a built-in env (``TabletopVectorEnv``, possibly wrapped).
        noise: >= 0; 0 is the competent expert (>= 95% success on every task).
        seed: seed of the noise.
    """

    def __init__(self, env, noise: float = 0.0, seed: int = 0):
        if noise < 0:
            raise ValueError(f"noise={noise} must be >= 0")
        self.env = env.unwrapped if hasattr(env, "unwrapped") else env
        if not hasattr(self.env, "privileged_state"):
            raise TypeError("the scripted expert needs a built-in tabletop env (privileged_state)")
        self.noise = float(noise)
        self.rng = np.random.default_rng(seed)
        n = self.env.num_envs
        self.phase = np.zeros(n, np.int64)
        self.count = np.zeros(n, np.int64)
        self.aim = np.zeros((n, 2))
        self._last_steps = np.full(n, -1)

    def _new_episode(self, i: int) -> None:
        self.phase[i] = 0
        self.count[i] = 0
        self.aim[i] = self.rng.normal(0.0, 0.015 * self.noise, 2)

    def act(self, obs=None, info=None) -> np.ndarray:
        s = self.env.privileged_state()
        n = len(s["tcp"])
        actions = np.zeros((n, 7), np.float32)
        for i in range(n):
            if s["steps"][i] == 0 or s["steps"][i] < self._last_steps[i]:
                self._new_episode(i)
            self._last_steps[i] = s["steps"][i]
            fam = s["family"][i]
            if fam == "push":
                actions[i] = self._push(i, s)
            else:
                actions[i] = self._pick(i, s, fam)
        if self.noise > 0:
            actions[:, :3] += self.rng.normal(0.0, self.noise, (n, 3))
            actions[:, 6] += self.rng.normal(0.0, self.noise, n)
        return np.clip(actions, -1.0, 1.0).astype(np.float32)

    # ------------------------------------------------------------------ push
    def _push(self, i: int, s: dict) -> np.ndarray:
        tcp = s["tcp"][i]
        cube = s["cube_pos"][i, s["target"][i]]
        goal = s["goal_xy"][i] + self.aim[i]
        d = goal - cube[:2]
        dist = np.linalg.norm(d)
        u = d / max(dist, 1e-6)
        pre = cube[:2] - u * (CUBE_HALF + 0.03)
        a = np.zeros(7)
        a[6] = CLOSE
        # Offset of the TCP from the cube->goal line, and whether it is behind the cube.
        rel = tcp[:2] - cube[:2]
        lateral = abs(rel[0] * u[1] - rel[1] * u[0])
        behind = rel @ u < -CUBE_HALF * 0.8
        if self.phase[i] == 2 and (lateral > 0.02 or not behind):
            self.phase[i] = 0
        if self.phase[i] == 0:  # above the pre-push point
            target = np.array([pre[0], pre[1], HOVER])
            if tcp[2] < 0.06 and np.linalg.norm(tcp[:2] - pre) > 0.02:
                target = np.array([tcp[0], tcp[1], HOVER])  # lift before travelling
            a[:3] = _to(target, tcp)
            if np.linalg.norm(tcp[:2] - pre) < 0.012:
                self.phase[i] = 1
        elif self.phase[i] == 1:  # descend behind the cube
            a[:3] = _to(np.array([pre[0], pre[1], CUBE_HALF]), tcp)
            if tcp[2] < CUBE_HALF + 0.012:
                self.phase[i] = 2
        elif self.phase[i] == 2:  # push along the line, correcting sideways drift
            if dist < 0.01:
                self.phase[i] = 3
            push_to = cube[:2] + u * min(dist, 0.03) - u * (CUBE_HALF + 0.004)
            target = np.array([push_to[0], push_to[1], CUBE_HALF])
            a[:3] = _to(target, tcp, limit=0.6)
        else:  # done: back off upwards
            a[:3] = _to(np.array([tcp[0] - u[0] * 0.02, tcp[1] - u[1] * 0.02, HOVER]), tcp, limit=0.5)
            if dist > 0.03:
                self.phase[i] = 0
        return a

    # ------------------------------------------------------- pick and place
    def _pick(self, i: int, s: dict, fam: str) -> np.ndarray:
        tcp = s["tcp"][i]
        cube = s["cube_pos"][i, s["target"][i]]
        a = np.zeros(7)
        held = np.linalg.norm(cube - tcp) < 0.025 and s["finger"][i] < 0.03
        ph = self.phase[i]
        grasp_xy = cube[:2] + self.aim[i] * 0.5
        if ph >= 3 and ph <= 5 and not held:
            ph = self.phase[i] = 0
        if ph == 0:  # above the cube, open
            a[6] = OPEN
            target = np.array([grasp_xy[0], grasp_xy[1], HOVER])
            if tcp[2] < 0.06 and np.linalg.norm(tcp[:2] - grasp_xy) > 0.02:
                target = np.array([tcp[0], tcp[1], HOVER])
            a[:3] = _to(target, tcp)
            if np.linalg.norm(tcp[:2] - grasp_xy) < 0.01 and s["finger"][i] > 0.035:
                self.phase[i] = 1
        elif ph == 1:  # descend around it
            a[6] = OPEN
            a[:3] = _to(np.array([grasp_xy[0], grasp_xy[1], cube[2]]), tcp)
            if abs(tcp[2] - cube[2]) < 0.008:
                self.phase[i], self.count[i] = 2, 0
        elif ph == 2:  # close
            a[6] = CLOSE
            a[:3] = _to(np.array([grasp_xy[0], grasp_xy[1], cube[2]]), tcp)
            self.count[i] += 1
            if self.count[i] >= 3:
                self.phase[i] = 3
        elif ph == 3:  # lift
            a[6] = CLOSE
            a[:3] = _to(np.array([tcp[0], tcp[1], CARRY]), tcp)
            if tcp[2] > CARRY - 0.015:
                self.phase[i] = 4 if fam != "lift" else 3
        elif ph == 4:  # carry above the goal
            a[6] = CLOSE
            goal = s["goal_xy"][i] + self.aim[i]
            a[:3] = _to(np.array([goal[0], goal[1], CARRY]), tcp)
            if np.linalg.norm(tcp[:2] - goal) < 0.008:
                self.phase[i] = 5
        elif ph == 5:  # lower to the release height
            a[6] = CLOSE
            goal = s["goal_xy"][i] + self.aim[i]
            if fam == "stack":
                base = s["cube_pos"][i, s["goal"][i]]
                z = base[2] + 2 * CUBE_HALF + 0.004
            else:
                z = CUBE_HALF + 0.02
            a[:3] = _to(np.array([goal[0], goal[1], z]), tcp, limit=0.5)
            if abs(tcp[2] - z) < 0.006:
                self.phase[i], self.count[i] = 6, 0
        elif ph == 6:  # release
            a[6] = OPEN
            self.count[i] += 1
            if self.count[i] >= 3:
                self.phase[i] = 7
        else:  # retreat
            a[6] = OPEN
            a[:3] = _to(np.array([tcp[0], tcp[1], CARRY]), tcp, limit=0.5)
        return a
