"""Where an object's xyz lands in the image: a quadratic map fitted on frames and their states.

The built-in camera is fixed, so an object's pixel position is a smooth function of its xyz. A
least-squares fit of a quadratic in xyz to the centroids of the object's colour mask is accurate to
about half a pixel at 64x64 (``benchmarks.frames_follow_states``: ``projection_error_px``). World
models use it to draw the chunk's states as heatmaps (``WorldModelConfig.state_heatmaps``); the
benchmark uses it to ask whether the frames show what the states say.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

NUM_FEATURES = 10


def quadratic_features(xyz: Tensor | np.ndarray) -> Tensor | np.ndarray:
    """(..., 3) -> (..., 10): 1, x, y, z and their products of degree 2 (numpy or torch)."""
    x, y, z = xyz[..., 0], xyz[..., 1], xyz[..., 2]
    parts = [x * 0 + 1, x, y, z, x * x, y * y, z * z, x * y, x * z, y * z]
    if isinstance(xyz, Tensor):
        return torch.stack(parts, -1)
    return np.stack(parts, -1)


def mask_centroids(masks: np.ndarray, min_px: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """masks bool (..., O, H, W) -> (centroids (..., O, 2) as (row, col), visible (..., O): at least
    ``min_px`` pixels)."""
    h, w = masks.shape[-2:]
    yy, xx = np.mgrid[0:h, 0:w]
    n = masks.sum((-1, -2))
    cen = np.stack([(masks * yy).sum((-1, -2)), (masks * xx).sum((-1, -2))], -1) / np.maximum(n, 1)[..., None]
    return cen, n >= min_px


OFFSCREEN = -1.0e4  # the constant term of an object never seen: it projects far outside the image


def fit_projection(
    centroids: np.ndarray,
    visible: np.ndarray,
    xyz: np.ndarray,
    names: tuple[str, ...] = (),
    unseen: str = "raise",
) -> np.ndarray:
    """Least-squares quadratic map per object. centroids (N, O, 2), visible (N, O) bool, xyz (N, O, 3)
    metres -> coefficients (O, 10, 2). An object seen in fewer than 20 frames raises ValueError, or
    with ``unseen="offscreen"`` (a dataset where it is always parked out of view) is mapped far
    outside the image (:data:`OFFSCREEN`)."""
    o = xyz.shape[1]
    coef = np.zeros((o, NUM_FEATURES, 2))
    for j in range(o):
        v = visible[:, j]
        if v.sum() < 20 and unseen == "offscreen":
            coef[j, 0] = OFFSCREEN
            continue
        if v.sum() < 20:
            name = names[j] if j < len(names) else f"object {j}"
            raise ValueError(f"{name} is visible in only {int(v.sum())} training frames; need >= 20")
        feats, target = quadratic_features(xyz[v, j].astype(np.float64)), centroids[v, j]
        coef[j] = np.linalg.lstsq(feats, target, rcond=None)[0]
        inlier = np.linalg.norm(feats @ coef[j] - target, axis=-1) < 3.0  # refit without occluded masks
        if 20 <= inlier.sum() < len(inlier):
            coef[j] = np.linalg.lstsq(feats[inlier], target[inlier], rcond=None)[0]
    return coef


def fit_scene_projection(
    images: np.ndarray,
    rows: np.ndarray,
    xyz: np.ndarray,
    colors: tuple | list,
    color_cos: float,
    tcp_dark_max: float | None = None,
    workspace_m: float = 1.0,
    names: tuple[str, ...] = (),
) -> np.ndarray:
    """Quadratic xyz -> pixel map per point (P, 10, 2) from the frames ``images[rows]`` (uint8 (N, H, W, 3))
    and the points' xyz there (len(rows), P, 3) metres. The first ``len(colors)`` points are found by the
    centroids of their colour masks (:func:`worldmodels.modeling_common.object_masks`, cosine ``color_cos``),
    and with ``tcp_dark_max`` one more, the gripper, by the centroid of the dark pixels (every channel <=
    ``tcp_dark_max`` in [0, 1]). A point whose x or y lies beyond ``workspace_m`` (parked) is left out, and
    one never seen maps off the image. Raises ``np.linalg.LinAlgError`` when the fit fails."""
    from worldmodels.modeling_common import object_masks, to_unit

    masks = []
    for i in range(0, len(rows), 2048):
        f = to_unit(torch.from_numpy(np.ascontiguousarray(images[rows[i : i + 2048]])))
        parts = [object_masks(f, (tuple(col),), color_cos) for col in colors]
        if tcp_dark_max is not None:
            parts.append((((f + 1.0) * 0.5) <= tcp_dark_max).all(dim=-3, keepdim=True))
        masks.append(torch.cat(parts, dim=-3).numpy())
    cen, vis = mask_centroids(np.concatenate(masks))
    vis &= (np.abs(xyz[..., :2]) <= workspace_m).all(-1)  # parked objects: left out
    return fit_projection(cen, vis, xyz, names=names, unseen="offscreen")


def project(coef: np.ndarray | Tensor, xyz: np.ndarray | Tensor) -> np.ndarray | Tensor:
    """xyz (..., O, 3) metres -> image positions (..., O, 2) (row, col), numpy or torch."""
    if isinstance(xyz, Tensor):
        return torch.einsum("...jf,jfc->...jc", quadratic_features(xyz), coef.to(xyz.dtype))
    return np.einsum("...jf,jfc->...jc", quadratic_features(xyz), coef)


def gaussian_heatmaps(points: Tensor, size: int, sigma: float) -> Tensor:
    """points (..., 2) (row, col) in pixels -> (..., size, size) Gaussian blobs of peak 1."""
    grid = torch.arange(size, device=points.device, dtype=points.dtype)
    dy = (grid[:, None] - points[..., 0, None, None]) ** 2
    dx = (grid[None, :] - points[..., 1, None, None]) ** 2
    return torch.exp(-(dy + dx) / (2.0 * sigma * sigma))
