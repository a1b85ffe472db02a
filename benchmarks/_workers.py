"""Worker processes of the benchmarks that run seeds side by side (``--jobs N``).

A :class:`concurrent.futures.ProcessPoolExecutor` worker outlives a parent that is killed (SIGTERM,
SIGKILL, an OOM kill): the pool's own shutdown never runs, and the spawned worker, whose command line
reads ``multiprocessing.spawn``, goes on writing into the same run folders as the next invocation.
:func:`pool` gives workers that die with the process that started them.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to send this process SIGTERM when its parent exits (Linux ``PR_SET_PDEATHSIG``),
    and exit at once if the parent ``parent_pid`` is already gone. A no-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:  # the parent died before the request was made
        os._exit(1)


def one_thread_worker(parent_pid: int) -> None:
    """Worker initializer: one torch thread (seeds share the cores), and die with the parent."""
    die_with_parent(parent_pid)
    import torch

    torch.set_num_threads(1)


def pool(jobs: int, one_thread: bool = True) -> ProcessPoolExecutor:
    """``jobs`` spawned workers that die with this process; ``one_thread``: of one torch thread each."""
    import multiprocessing as mp

    init = one_thread_worker if one_thread else die_with_parent
    return ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), initializer=init, initargs=(os.getpid(),))
