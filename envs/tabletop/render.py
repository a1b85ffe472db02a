"""Offscreen rendering of many sub-envs' states with one OpenGL context.

By default (``tiled=True``) a batch's frames are drawn as tiles of one framebuffer and read back together:
the read-back and its sync are paid once per pass, and the software rasteriser works on many tiles at once.
But it places an edge a pixel apart from one tile to another (32 of 552 frames of 24 PushCube starts
differed by a pixel between tiles, session 87), so a sub-env's frame, and rarely an episode's outcome,
depends on its place in the batch. ``tiled=False`` draws each frame alone at the buffer's origin and reads
it back at once: a state's frame is then the same bits whatever is drawn with it, for fewer env steps per
second (``benchmarks.sim_throughput``, ``render_option_cost.untiled``).
"""

from __future__ import annotations

import mujoco
import numpy as np

from envs.tabletop.gl import INSTALL_HINT, check_backend
from wmrl.errors import WmrlError


def check_supersample(supersample: int) -> int:
    """``supersample`` as an int in [1, 4], or a one-line error naming the bad value."""
    if isinstance(supersample, bool) or not isinstance(supersample, (int, np.integer)) or not 1 <= supersample <= 4:
        raise WmrlError(f"supersample={supersample!r}; expected an integer in [1, 4]")
    return int(supersample)


class BatchRenderer:
    """Render ``(N, H, W, 3)`` uint8 frames of N states of one model from named cameras.

    Args:
        model: the MuJoCo model (its ``vis.global_.offwidth/offheight`` bound the tile grid).
        size: frame height and width in pixels.
        cameras: camera names to render, e.g. ``("agentview", "wrist")``.
        supersample: draw each frame at ``size * supersample`` pixels and average every
            ``supersample x supersample`` block (a box filter, what ``cv2.INTER_AREA`` does for an
            integer factor): anti-aliased frames whose edges move by fractions of a pixel. 1: off
            (the software renderer's multisampling misplaces tiles, so it is done here).
        shadows: draw the lights' shadows (the model must be built with ``shadows=True``).
        tiled: draw a batch's frames as tiles of one framebuffer (the default), or each alone at its origin
            (see the module docstring).
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        size: int,
        cameras: tuple[str, ...],
        supersample: int = 1,
        shadows: bool = False,
        tiled: bool = True,
    ):
        backend = check_backend()
        self.model = model
        self.size = size
        self.supersample = check_supersample(supersample)
        side = size * self.supersample
        self.width = int(model.vis.global_.offwidth)
        self.height = int(model.vis.global_.offheight)
        self.cols, self.rows = self.width // side, self.height // side
        if self.cols * self.rows < 1:
            raise WmrlError(f"offscreen buffer {self.width}x{self.height} cannot hold a {side}x{side} frame")
        if not isinstance(tiled, (bool, np.bool_)):
            raise WmrlError(f"tiled={tiled!r}; expected True or False")
        self.tiled = bool(tiled)
        try:
            self._gl = mujoco.GLContext(self.width, self.height)
            self._gl.make_current()
        except Exception as e:  # noqa: BLE001 - GL errors come in many types
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise WmrlError(f"cannot create a MUJOCO_GL={backend} rendering context ({msg}); {INSTALL_HINT}") from None
        self._con = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_50)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._con)
        self._scn = mujoco.MjvScene(model, maxgeom=200)
        for flag in (
            mujoco.mjtRndFlag.mjRND_SHADOW,
            mujoco.mjtRndFlag.mjRND_REFLECTION,
            mujoco.mjtRndFlag.mjRND_SKYBOX,
        ):
            self._scn.flags[flag] = 0
        self.shadows = bool(shadows)
        if self.shadows:
            if int(model.vis.quality.shadowsize) <= 0:
                raise WmrlError("shadows=True needs a model built with shadows (vis.quality.shadowsize > 0)")
            self._scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 1
        self._opt = mujoco.MjvOption()
        self._pert = mujoco.MjvPerturb()
        self._cams = []
        for name in cameras:
            cid = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, name)
            if cid < 0:
                raise WmrlError(f"unknown camera {name!r}")
            cam = mujoco.MjvCamera()
            cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
            cam.fixedcamid = cid
            self._cams.append(cam)
        self._scratch = mujoco.MjData(model)
        self._rect = mujoco.MjrRect(0, 0, side, side)
        self._buf = np.empty((self.height, self.width, 3) if self.tiled else (side, side, 3), dtype=np.uint8)

    def render(self, qpos: np.ndarray, mocap_pos: np.ndarray, slots: np.ndarray | None = None) -> list[np.ndarray]:
        """Render every camera for each state: as tiles (the default), or each frame alone at the buffer's origin
        (``tiled=False``: a state's frame does not depend on the other states or on its place among them).

        Args:
            qpos: (N, nq) joint positions.
            mocap_pos: (N, nmocap, 3) mocap body positions.
            slots: tiled only: int (N,), distinct: the place of each state in the batch it belongs to (default
                ``arange(N)``). A frame is drawn in the tile its slot gives, so a subset of a batch drawn with its
                sub-envs' indices as slots gets exactly the pixels the whole batch gets.

        Returns:
            one uint8 array (N, size, size, 3) per camera, upright.
        """
        if self.tiled:
            return self._render_tiles(qpos, mocap_pos, slots)
        n = qpos.shape[0]
        out = [np.empty((n, self.size, self.size, 3), np.uint8) for _ in self._cams]
        self._gl.make_current()
        for i in range(n):
            self._pose(qpos[i], mocap_pos[i])
            for c, cam in enumerate(self._cams):
                self._scene(cam)
                mujoco.mjr_render(self._rect, self._scn, self._con)
                mujoco.mjr_readPixels(self._buf, None, self._rect, self._con)
                out[c][i] = self._downsample(self._buf)[::-1]  # GL rows start at the bottom: flip to upright
        return out

    def _pose(self, qpos: np.ndarray, mocap_pos: np.ndarray) -> None:
        """Put the scratch data in one state: ``qpos`` (nq,), ``mocap_pos`` (nmocap, 3); kinematics and lights."""
        d = self._scratch
        d.qpos[:] = qpos
        d.mocap_pos[:] = mocap_pos
        mujoco.mj_kinematics(self.model, d)
        mujoco.mj_camlight(self.model, d)

    def _scene(self, cam: mujoco.MjvCamera) -> None:
        """The scene of the posed scratch data seen from ``cam``."""
        mujoco.mjv_updateScene(self.model, self._scratch, self._opt, self._pert, cam, mujoco.mjtCatBit.mjCAT_ALL,
                               self._scn)

    def _downsample(self, buf: np.ndarray) -> np.ndarray:
        """(h*ss, w*ss, 3) -> (h, w, 3): the mean of each ss x ss block, rounded (a box filter); as is for ss = 1."""
        ss = self.supersample
        if ss == 1:
            return buf
        h, w = buf.shape[0] // ss, buf.shape[1] // ss
        return buf.reshape(h, ss, w, ss, 3).mean(axis=(1, 3)).round().astype(np.uint8)

    def _render_tiles(self, qpos: np.ndarray, mocap_pos: np.ndarray, slots: np.ndarray | None) -> list[np.ndarray]:
        """:meth:`render` with ``tiled=True``: the frames as tiles, one read-back per pass of the buffer."""
        n = qpos.shape[0]
        ncam = len(self._cams)
        out = [np.empty((n, self.size, self.size, 3), np.uint8) for _ in range(ncam)]
        per_pass = self.cols * self.rows
        slots = np.arange(n) if slots is None else np.asarray(slots, np.int64)
        # (row, camera, tile index in the whole batch's job list)
        jobs = [(i, c, int(slots[i]) * ncam + c) for i in range(n) for c in range(ncam)]
        passes: dict[int, list[tuple[int, int, int]]] = {}
        for i, c, j in jobs:
            passes.setdefault(j // per_pass, []).append((i, c, j % per_pass))
        self._gl.make_current()
        s = self.size * self.supersample
        for chunk in passes.values():
            for i, c, k in chunk:
                self._pose(qpos[i], mocap_pos[i])
                self._scene(self._cams[c])
                viewport = mujoco.MjrRect((k % self.cols) * s, (k // self.cols) * s, s, s)
                mujoco.mjr_render(viewport, self._scn, self._con)
            used_rows = max(k for _, _, k in chunk) // self.cols + 1
            rect = mujoco.MjrRect(0, 0, self.width, used_rows * s)
            buf = self._buf[: used_rows * s]
            mujoco.mjr_readPixels(buf, None, rect, self._con)
            buf = self._downsample(buf)
            t = self.size
            for i, c, k in chunk:
                r, col = k // self.cols, k % self.cols
                out[c][i] = buf[r * t : (r + 1) * t, col * t : (col + 1) * t][::-1]  # GL rows start at the bottom
        return out

    def close(self) -> None:
        """Free the GL resources. ``MjrContext.free`` deletes GL objects in whichever context is
        current, so it runs with this renderer's own context current (and the previous one
        restored): freeing a dropped renderer used to delete another live renderer's framebuffer,
        whose frames then came back black."""
        if getattr(self, "_gl", None) is not None:
            try:
                with self._gl.as_current():
                    self._con.free()
                self._gl.free()
            except Exception:  # noqa: BLE001
                pass
            self._gl = None

    def __del__(self) -> None:  # pragma: no cover - best effort
        self.close()
