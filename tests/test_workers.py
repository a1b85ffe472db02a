"""Benchmark worker processes (``--jobs N``) die with the process that started them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def test_busy_pool_worker_dies_when_its_parent_is_killed() -> None:
    script = textwrap.dedent(
        """
        import os, time
        from benchmarks._workers import pool

        ex = pool(1, one_thread=False)
        print(ex.submit(os.getpid).result(), flush=True)
        ex.submit(time.sleep, 120)  # the worker is busy when its parent is killed
        time.sleep(120)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    worker = None
    try:
        worker = int(parent.stdout.readline())
        assert worker != parent.pid and _alive(worker)
        time.sleep(0.5)  # the sleep is running in the worker
        parent.send_signal(signal.SIGTERM)
        parent.wait(timeout=30)
        deadline = time.monotonic() + 15
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(worker), f"worker {worker} outlived its killed parent {parent.pid}"
    finally:
        parent.kill()
        if worker is not None and _alive(worker):
            os.kill(worker, signal.SIGKILL)
