"""Cube orientations for state-space world models: quaternion algebra and features a cube's symmetry leaves alone.

Quaternions are MuJoCo's (w, x, y, z), world frame. A rotation increment over a step is a rotation vector
``omega`` (radians, world frame): ``q_next = exp(omega) * q``. A cube looks and pushes the same after a
quarter turn about any of its axes, so the features an object-dynamics model reads from an orientation
(:func:`cube_orientation_features`) are invariant to those 24 rotations: how far it is tipped off a face,
and its yaw modulo 90 degrees (as cos 4yaw, sin 4yaw, read from every body axis at once), with which the tcp's offset and motion are also
expressed in the cube's own horizontal frame (modulo quarter turns).
"""

from __future__ import annotations

import torch
from torch import Tensor

CUBE_FEATURE_DIM = 9  # tilt, cos 4yaw, sin 4yaw, and three xy vectors in the cube's frame


def quat_multiply(a: Tensor, b: Tensor) -> Tensor:
    """Hamilton product ``a * b`` of quaternions (..., 4) (w, x, y, z): the rotation ``b`` then ``a``."""
    aw, ax, ay, az = a.unbind(-1)
    bw, bx, by, bz = b.unbind(-1)
    return torch.stack(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ],
        -1,
    )


def quat_conjugate(q: Tensor) -> Tensor:
    """The inverse rotation of unit quaternions (..., 4)."""
    return q * q.new_tensor([1.0, -1.0, -1.0, -1.0])


def rotvec_to_quat(omega: Tensor) -> Tensor:
    """Rotation vectors (..., 3) (radians) -> unit quaternions (..., 4)."""
    angle = omega.norm(dim=-1, keepdim=True)
    half = 0.5 * angle
    # sin(half) / angle, with its limit 0.5 near 0 (and a gradient there)
    scale = torch.where(angle > 1e-6, torch.sin(half) / angle.clamp_min(1e-6), 0.5 - angle**2 / 48.0)
    return torch.cat([torch.cos(half), omega * scale], -1)


def quat_to_rotvec(q: Tensor) -> Tensor:
    """Unit quaternions (..., 4) -> rotation vectors (..., 3) (radians, angle in [0, pi])."""
    q = torch.where(q[..., :1] < 0, -q, q)  # the shorter way round
    v = q[..., 1:]
    s = v.norm(dim=-1, keepdim=True)
    angle = 2.0 * torch.atan2(s, q[..., :1])
    scale = torch.where(s > 1e-8, angle / s.clamp_min(1e-8), 2.0 / q[..., :1].clamp_min(1e-8))
    return v * scale


def step_quat(q: Tensor, omega: Tensor) -> Tensor:
    """Orientations (..., 4) turned by world-frame rotation vectors (..., 3): ``exp(omega) * q``, renormalised."""
    out = quat_multiply(rotvec_to_quat(omega), q)
    return out / out.norm(dim=-1, keepdim=True).clamp_min(1e-8)


def rotation_increment(q: Tensor, q_next: Tensor) -> Tensor:
    """World-frame rotation vectors (..., 3) taking orientations ``q`` to ``q_next`` (..., 4): ``log(q_next q^-1)``."""
    return quat_to_rotvec(quat_multiply(q_next, quat_conjugate(q)))


def quat_to_matrix(q: Tensor) -> Tensor:
    """Rotation matrices (..., 3, 3) of quaternions (..., 4) (normalised here); column i is body axis i in the world."""
    q = q / q.norm(dim=-1, keepdim=True).clamp_min(1e-8)
    w, x, y, z = q.unbind(-1)
    return torch.stack(
        [
            torch.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            torch.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            torch.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


def cube_yaw_tilt(q: Tensor) -> tuple[Tensor, Tensor]:
    """Orientations (..., 4) -> (yaw modulo 90 degrees in [-pi/4, pi/4] (...), tilt (...)), the same for any
    of the 24 orientations that look alike.

    ``tilt`` is 1 - the largest vertical component of a body axis (0 lying on a face). The yaw is a quarter
    of the angle of ``sum_i (x_i + i y_i)^4`` over the body axes' horizontal parts (x_i, y_i): each axis's
    heading times four, weighted by how horizontal it lies. Quarter turns and flips of the body axes only
    permute and negate the terms, and a cube lying on a face reads its heading modulo 90 degrees exactly."""
    r = quat_to_matrix(q)
    tilt = 1.0 - r[..., 2, :].abs().amax(-1)
    x, y = r[..., 0, :], r[..., 1, :]
    re2, im2 = x * x - y * y, 2 * x * y  # (x + iy)^2
    re4, im4 = (re2 * re2 - im2 * im2).sum(-1), (2 * re2 * im2).sum(-1)  # sum of (x + iy)^4
    return 0.25 * torch.atan2(im4, re4), tilt


def rotate_xy(v: Tensor, angle: Tensor) -> Tensor:
    """The xy part of vectors (..., >= 2) rotated by ``-angle`` (...): expressed in a frame turned by ``angle``."""
    c, s = torch.cos(angle), torch.sin(angle)
    x, y = v[..., 0], v[..., 1]
    return torch.stack([c * x + s * y, -s * x + c * y], -1)


def cube_orientation_features(q: Tensor, rel: Tensor, move: Tensor, vel: Tensor) -> Tensor:
    """Per-object orientation features (..., :data:`CUBE_FEATURE_DIM`) from orientations ``q`` (..., 4) and the
    object's tcp offset ``rel``, the tcp's move ``move`` and the object's last velocity ``vel`` (..., 3) (any
    units): tilt, cos 4yaw, sin 4yaw, then the xy of ``rel``, ``move`` and ``vel`` in the cube's horizontal frame
    (yaw modulo a quarter turn)."""
    yaw, tilt = cube_yaw_tilt(q)
    return torch.cat(
        [
            tilt[..., None],
            torch.cos(4 * yaw)[..., None],
            torch.sin(4 * yaw)[..., None],
            rotate_xy(rel, yaw),
            rotate_xy(move, yaw),
            rotate_xy(vel, yaw),
        ],
        -1,
    )


__all__ = [
    "CUBE_FEATURE_DIM",
    "cube_orientation_features",
    "cube_yaw_tilt",
    "quat_conjugate",
    "quat_multiply",
    "quat_to_matrix",
    "quat_to_rotvec",
    "rotate_xy",
    "rotation_increment",
    "rotvec_to_quat",
    "step_quat",
]
