"""The built-in language-instructed tasks.

Every task shares the scene of :mod:`envs.tabletop.scene`. A task samples an episode layout
(:class:`Layout`) from a seeded generator and evaluates success and dense reward *batched* over
the sub-envs that run it. Left/right are as seen from the agent-view camera (left = smaller x).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from envs.tabletop.scene import (
    BOWL_INNER_HALF,
    CUBE_COLORS,
    CUBE_HALF,
    PAD_RADIUS,
)

COLOR_NAMES = tuple(CUBE_COLORS)
X_RANGE = (-0.17, 0.17)
Y_RANGE = (-0.08, 0.12)
OPEN_FINGER = 0.03  # finger travel above which the gripper holds nothing of cube size


@dataclass
class Layout:
    """One episode's layout.

    Args:
        cube_xy: (3, 2) positions of the red/green/blue cubes; NaN rows are parked out of view.
        pad_xy: (2, 2) target pad positions; NaN rows parked.
        bowl_xy: (2, 2) bowl positions; NaN rows parked.
        target: index of the cube to manipulate.
        goal: index of the goal pad/bowl, or of the base cube for stacking.
        instruction: the language instruction.
    """

    cube_xy: np.ndarray
    pad_xy: np.ndarray
    bowl_xy: np.ndarray
    target: int
    goal: int
    instruction: str


def _sample_points(
    rng: np.random.Generator, n: int, min_dist: np.ndarray, fixed: list[np.ndarray]
) -> np.ndarray:
    """Rejection-sample ``n`` xy points in the workspace, each at least ``min_dist[i]`` from the
    points before it and from ``fixed``."""
    for _ in range(1000):
        pts: list[np.ndarray] = []
        ok = True
        for i in range(n):
            for _ in range(200):
                p = np.array([rng.uniform(*X_RANGE), rng.uniform(*Y_RANGE)])
                if all(np.linalg.norm(p - q) >= min_dist[i] for q in pts + fixed):
                    pts.append(p)
                    break
            else:
                ok = False
                break
        if ok:
            return np.stack(pts)
    raise RuntimeError("could not sample a layout; the workspace is too crowded")


def _clear_path(cube: np.ndarray, goal: np.ndarray, other: np.ndarray, clearance: float = 0.085) -> bool:
    """Whether ``other`` keeps ``clearance`` from the push path: the segment from behind
    ``cube`` (where the gripper stands) to ``goal``."""
    u = (goal - cube) / max(np.linalg.norm(goal - cube), 1e-6)
    a, b = cube - 0.08 * u, goal
    t = np.clip((other - a) @ (b - a) / max((b - a) @ (b - a), 1e-9), 0.0, 1.0)
    return bool(np.linalg.norm(other - (a + t * (b - a))) >= clearance)


def _grasp_clear(cube: np.ndarray, bowl: np.ndarray) -> bool:
    """Whether the open fingers (which open along x) can reach around ``cube`` without landing
    on the walls of the bowl at ``bowl``."""
    dx, dy = np.abs(cube - bowl)
    return bool(dx >= BOWL_INNER_HALF + 0.07 or dy >= BOWL_INNER_HALF + 0.05)


def _nan(n: int) -> np.ndarray:
    return np.full((n, 2), np.nan)


class Task:
    """Base class. Subclasses define ``family``, ``max_episode_steps``, ``sample`` and ``success``."""

    family: str = ""
    max_episode_steps: int = 60

    def sample(self, rng: np.random.Generator) -> Layout:
        raise NotImplementedError

    def goal_pos(self, layout_goal_xy: np.ndarray, cube_pos: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """(n,3) goal position of the manipulated cube for the dense reward."""
        return np.concatenate([layout_goal_xy, np.full((len(goal), 1), CUBE_HALF)], axis=1)

    def success(self, cube_pos, target, goal_xy, goal, tcp, finger) -> np.ndarray:
        """Batched success. cube_pos (n,3,3), target (n,), goal_xy (n,2), goal (n,), tcp (n,3),
        finger (n,) -> bool (n,)."""
        raise NotImplementedError

    def shaping(self, cube_pos, target, goal_xy, goal, tcp, finger) -> np.ndarray:
        """The staged progress below success, in [0, 0.75]: reach the cube (1/4), bring it to the goal
        (2/4). Same arguments as :meth:`success`; float (n,)."""
        n = len(target)
        cube = cube_pos[np.arange(n), target]
        reach = 1.0 - np.tanh(8.0 * np.linalg.norm(tcp - cube, axis=1))
        goal3 = self.goal_pos(goal_xy, cube_pos, goal)
        place = 1.0 - np.tanh(8.0 * np.linalg.norm(cube - goal3, axis=1))
        return (reach + 2.0 * place) / 4.0

    def dense_reward(self, cube_pos, target, goal_xy, goal, tcp, finger) -> np.ndarray:
        """Staged dense reward in [0, 1]: :meth:`shaping`, 1 on success."""
        ok = self.success(cube_pos, target, goal_xy, goal, tcp, finger)
        return np.where(ok, 1.0, self.shaping(cube_pos, target, goal_xy, goal, tcp, finger)).astype(np.float32)


def _two_colors(rng: np.random.Generator) -> tuple[int, int]:
    a, b = rng.choice(3, size=2, replace=False)
    return int(a), int(b)


class PushCube(Task):
    """**Task Description:** push the named cube onto the yellow target pad; a second cube of
    another colour is a distractor.

    **Randomizations:** which colour is the target and which the distractor; cube and pad xy
    positions in the workspace (at least 12 cm apart).

    **Success Conditions:** the target cube's centre lies within 3.5 cm (xy) of the pad centre and
    the cube rests on the table.
    """

    family = "push"
    max_episode_steps = 60

    def sample(self, rng):
        t, d = _two_colors(rng)
        for _ in range(200):
            pts = _sample_points(rng, 3, np.array([0.0, 0.14, 0.09]), [])
            if _clear_path(pts[1], pts[0], pts[2]):
                break
        pad, cube_t, cube_d = pts
        cube_xy = _nan(3)
        cube_xy[t], cube_xy[d] = cube_t, cube_d
        pad_xy = _nan(2)
        pad_xy[0] = pad
        return Layout(cube_xy, pad_xy, _nan(2), t, 0, f"push the {COLOR_NAMES[t]} cube onto the target")

    def success(self, cube_pos, target, goal_xy, goal, tcp, finger):
        cube = cube_pos[np.arange(len(target)), target]
        return (np.linalg.norm(cube[:, :2] - goal_xy, axis=1) < PAD_RADIUS - 0.015) & (
            cube[:, 2] < CUBE_HALF + 0.01
        )


class PushCubeSpatial(PushCube):
    """**Task Description:** push the named cube onto the left or the right of two identical
    target pads (left/right as seen from the agent camera).

    **Randomizations:** the cube's colour (a distractor cube of another colour is present), which
    side is asked for, all xy positions (pads at least 15 cm apart in x).

    **Success Conditions:** the target cube's centre lies within 3.5 cm (xy) of the named pad
    and rests on the table.
    """

    def sample(self, rng):
        t, d = _two_colors(rng)
        for _ in range(100):
            pts = _sample_points(rng, 4, np.array([0.0, 0.12, 0.14, 0.09]), [])
            side = int(rng.integers(2))  # 0 left, 1 right
            goal = int(np.argsort(pts[:2, 0])[side])
            if abs(pts[0, 0] - pts[1, 0]) >= 0.15 and _clear_path(pts[2], pts[goal], pts[3]):
                break
        pad_xy = pts[:2].copy()
        cube_xy = _nan(3)
        cube_xy[t], cube_xy[d] = pts[2], pts[3]
        word = "left" if side == 0 else "right"
        return Layout(
            cube_xy, pad_xy, _nan(2), t, goal, f"push the {COLOR_NAMES[t]} cube onto the {word} target"
        )


class LiftCube(Task):
    """**Task Description:** pick up the named cube (a distractor cube of another colour is
    present).

    **Randomizations:** colours of target and distractor, cube xy positions.

    **Success Conditions:** the target cube's centre is at least 10 cm above the table.
    """

    family = "lift"
    max_episode_steps = 40

    def sample(self, rng):
        t, d = _two_colors(rng)
        pts = _sample_points(rng, 2, np.array([0.0, 0.09]), [])
        cube_xy = _nan(3)
        cube_xy[t], cube_xy[d] = pts
        return Layout(cube_xy, _nan(2), _nan(2), t, 0, f"pick up the {COLOR_NAMES[t]} cube")

    def shaping(self, cube_pos, target, goal_xy, goal, tcp, finger):
        n = len(target)
        cube = cube_pos[np.arange(n), target]
        reach = 1.0 - np.tanh(8.0 * np.linalg.norm(tcp - cube, axis=1))
        lift = np.clip((cube[:, 2] - CUBE_HALF) / 0.1, 0.0, 1.0)
        return (reach + 2.0 * lift) / 4.0

    def success(self, cube_pos, target, goal_xy, goal, tcp, finger):
        cube = cube_pos[np.arange(len(target)), target]
        return cube[:, 2] > CUBE_HALF + 0.1


class PlaceInBowl(Task):
    """**Task Description:** put the named cube into the bowl (a distractor cube of another colour
    is present).

    **Randomizations:** colours, bowl and cube xy positions (cubes at least 12 cm from the bowl).

    **Success Conditions:** the target cube lies inside the bowl's inner square, below the rim,
    and the gripper has released it.
    """

    family = "pick_place"
    max_episode_steps = 60

    def sample(self, rng):
        t, d = _two_colors(rng)
        for _ in range(200):
            pts = _sample_points(rng, 3, np.array([0.0, 0.13, 0.09]), [])
            if _grasp_clear(pts[1], pts[0]):
                break
        bowl_xy = _nan(2)
        bowl_xy[0] = pts[0]
        cube_xy = _nan(3)
        cube_xy[t], cube_xy[d] = pts[1], pts[2]
        return Layout(cube_xy, _nan(2), bowl_xy, t, 0, f"put the {COLOR_NAMES[t]} cube in the bowl")

    def goal_pos(self, layout_goal_xy, cube_pos, goal):
        return np.concatenate([layout_goal_xy, np.full((len(goal), 1), CUBE_HALF + 0.008)], axis=1)

    def success(self, cube_pos, target, goal_xy, goal, tcp, finger):
        cube = cube_pos[np.arange(len(target)), target]
        inside = np.abs(cube[:, :2] - goal_xy).max(axis=1) < BOWL_INNER_HALF - 0.01
        return inside & (cube[:, 2] < CUBE_HALF + 0.03) & (finger > OPEN_FINGER)


class PlaceInSpatialBowl(PlaceInBowl):
    """**Task Description:** put the named cube into the left or the right of two identical
    bowls (left/right as seen from the agent camera).

    **Randomizations:** cube colour, which side is asked for, bowl and cube xy positions (bowls at
    least 16 cm apart in x).

    **Success Conditions:** the target cube lies inside the named bowl, below the rim, released.
    """

    def sample(self, rng):
        t = int(rng.integers(3))
        for _ in range(100):
            pts = _sample_points(rng, 3, np.array([0.0, 0.16, 0.12]), [])
            if (
                abs(pts[0, 0] - pts[1, 0]) >= 0.16
                and _grasp_clear(pts[2], pts[0])
                and _grasp_clear(pts[2], pts[1])
            ):
                break
        bowl_xy = pts[:2].copy()
        side = int(rng.integers(2))
        goal = int(np.argsort(bowl_xy[:, 0])[side])
        cube_xy = _nan(3)
        cube_xy[t] = pts[2]
        word = "left" if side == 0 else "right"
        return Layout(cube_xy, _nan(2), bowl_xy, t, goal, f"put the {COLOR_NAMES[t]} cube in the {word} bowl")


class StackCube(Task):
    """**Task Description:** stack the first named cube on top of the second.

    **Randomizations:** the colours of the two cubes (ordered pair of distinct colours), their xy
    positions (at least 10 cm apart).

    **Success Conditions:** the top cube's centre is within 2 cm (xy) of the base cube's and one
    cube height (+-1 cm) above it, and the gripper has released it.
    """

    family = "stack"
    max_episode_steps = 60

    def sample(self, rng):
        t, b = _two_colors(rng)
        pts = _sample_points(rng, 2, np.array([0.0, 0.1]), [])
        cube_xy = _nan(3)
        cube_xy[t], cube_xy[b] = pts
        return Layout(
            cube_xy, _nan(2), _nan(2), t, b, f"stack the {COLOR_NAMES[t]} cube on the {COLOR_NAMES[b]} cube"
        )

    def goal_pos(self, layout_goal_xy, cube_pos, goal):
        base = cube_pos[np.arange(len(goal)), goal]
        return base + np.array([0.0, 0.0, 2 * CUBE_HALF])

    def success(self, cube_pos, target, goal_xy, goal, tcp, finger):
        n = np.arange(len(target))
        top, base = cube_pos[n, target], cube_pos[n, goal]
        xy_ok = np.linalg.norm(top[:, :2] - base[:, :2], axis=1) < 0.02
        z_ok = np.abs(top[:, 2] - base[:, 2] - 2 * CUBE_HALF) < 0.01
        return xy_ok & z_ok & (finger > OPEN_FINGER)


TASKS: dict[str, Task] = {
    "PushCube-v0": PushCube(),
    "PushCubeSpatial-v0": PushCubeSpatial(),
    "LiftCube-v0": LiftCube(),
    "PlaceInBowl-v0": PlaceInBowl(),
    "PlaceInSpatialBowl-v0": PlaceInSpatialBowl(),
    "StackCube-v0": StackCube(),
}
