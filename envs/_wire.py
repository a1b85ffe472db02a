"""Wire protocol between the core process and simulator worker processes in other virtual envs.

LIBERO (mujoco < 3.9) and ManiSkill3 (numpy < 2 for mplib) cannot live in the core venv, so
their simulators run in worker processes started with another interpreter. This module is
imported on *both* sides, so it uses only the standard library and numpy (1.x or 2.x) and is
loaded by file path in the worker (never through the ``envs`` package).

Messages are pickled trees of plain Python values in which every numpy array is replaced by
``("__nd__", dtype_str, shape, raw_bytes)``: pickles of arrays made by numpy 2 do not load in
numpy 1 (``numpy._core``), raw bytes do.

A worker serves one *host* object (a batch of ``k`` sub-envs) over a
:class:`multiprocessing.connection.Connection`: each request is ``(method, kwargs)`` and the
reply is ``("ok", result)`` or ``("error", exception_type_name, message, traceback_text)``.
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

_ND = "__nd__"


class UserError(Exception):
    """Bad input detected in the worker; the core re-raises it as a one-line ``WmrlError``."""


class MissingAssetsError(UserError):
    """Simulator assets are missing; the core re-raises it as ``BackendNotInstalledError``."""


def encode(obj: Any) -> Any:
    """Replace numpy arrays and scalars in a tree of dict/list/tuple by portable tuples."""
    if isinstance(obj, np.ndarray):
        a = np.ascontiguousarray(obj)
        return (_ND, a.dtype.str, a.shape, a.tobytes())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        return {k: encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(encode(v) for v in obj)
    return obj


def decode(obj: Any) -> Any:
    """Inverse of :func:`encode`."""
    if isinstance(obj, tuple) and len(obj) == 4 and obj[0] == _ND:
        _, dtype, shape, raw = obj
        return np.frombuffer(raw, dtype=np.dtype(dtype)).reshape(shape).copy()
    if isinstance(obj, dict):
        return {k: decode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(decode(v) for v in obj)
    return obj


def send(conn: Connection, obj: Any) -> None:
    conn.send_bytes(pickle.dumps(encode(obj), protocol=4))


def recv(conn: Connection) -> Any:
    return decode(pickle.loads(conn.recv_bytes()))


def serve(make_host) -> None:
    """Worker main loop: serve ``make_host(**config)``.

    The socket is inherited from the parent; its file descriptor is ``WMRL_WORKER_FD``. The first request must be ``("init", config)``; ``("close",
    {})`` ends the loop. Exceptions are reported to the caller, never swallowed.
    """
    conn = Connection(int(os.environ["WMRL_WORKER_FD"]))
    host = None
    try:
        while True:
            try:
                method, kwargs = recv(conn)
            except EOFError:
                break
            try:
                if method == "init":
                    host = make_host(**kwargs)
                    result = host.describe()
                elif method == "close":
                    send(conn, ("ok", None))
                    break
                else:
                    result = getattr(host, method)(**kwargs)
                send(conn, ("ok", result))
            except Exception as e:  # report to the core side, which re-raises
                send(conn, ("error", type(e).__name__, str(e), traceback.format_exc()))
    finally:
        if host is not None and hasattr(host, "close"):
            try:
                host.close()
            except Exception:  # pragma: no cover - best effort on shutdown
                traceback.print_exc(file=sys.stderr)
        conn.close()
