"""Choose the headless OpenGL backend before MuJoCo is imported (MuJoCo reads ``MUJOCO_GL`` once,
at import time). Imported by :mod:`envs.tabletop` itself, so it runs before any submodule."""

from __future__ import annotations

import ctypes.util
import os

from wmrl.errors import WmrlError

VALID = ("egl", "osmesa", "glfw")
INSTALL_HINT = (
    "install libegl1 libegl-mesa0 libgl1-mesa-dri (EGL) or libosmesa6 (OSMesa), e.g. by running .ci/setup.sh"
)


def select_backend() -> str | None:
    """Set ``MUJOCO_GL`` when unset: EGL if its library is present, else OSMesa. Returns the
    backend, or None when neither library is found (the renderer then fails with a clear error)."""
    chosen = os.environ.get("MUJOCO_GL", "").lower()
    if chosen:
        return check_backend()
    for backend, lib in (("egl", "EGL"), ("osmesa", "OSMesa")):
        if ctypes.util.find_library(lib):
            os.environ["MUJOCO_GL"] = backend
            os.environ.setdefault("PYOPENGL_PLATFORM", backend)
            return backend
    return None


def check_backend() -> str:
    """The backend in use; raises :class:`WmrlError` for an invalid or missing one."""
    chosen = os.environ.get("MUJOCO_GL", "").lower()
    if not chosen:
        raise WmrlError(
            f"no headless rendering backend found (MUJOCO_GL unset, no EGL or OSMesa library); {INSTALL_HINT}"
        )
    if chosen not in VALID:
        raise WmrlError(
            f"MUJOCO_GL={chosen!r} is not a rendering backend; expected one of {', '.join(VALID)}"
        )
    return chosen
