"""Run one ``wmrl run`` stage in a child process while the parent runs others (``sft_beside_world_model``).

SFT needs only the demos, so it can train while the world model does. On a small CPU
two one-thread jobs side by side do more work than one two-thread job: on the 2-core machine a
world-model step takes 0.27 s on 2 threads and 0.36-0.41 s on 1, an SFT step 45 and 62 ms, and the two
one-thread jobs together run at their one-thread speeds (``docs/rl_in_imagination.md``).

Every stage keeps a fixed thread count (:func:`thread_shares`), whether or not the other job is
running, so a run gives the same weights however its stages overlap and when it resumes.

The child runs with a ``spawn`` start (no forked torch or OpenMP state) and reports through a JSON
file that it writes atomically: the stage's summary, or its error's class and message. Only the
parent writes the run's stage markers and metrics.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from wmrl import errors
from wmrl.errors import WmrlError
from wmrl.io import atomic_write_json


def thread_shares(total: int) -> tuple[int, int]:
    """Split ``total`` torch threads between the parent's stages and the background stage.

    Returns ``(parent, child)``: ``(total - total // 2, total // 2)``, e.g. 2 -> (1, 1), 5 -> (3, 2).
    """
    if total < 2:
        raise ValueError(f"total={total} threads cannot be shared between two jobs; expected >= 2")
    return total - total // 2, total // 2


def _child_main(fn: Callable[..., dict], args: tuple, threads: int, result: str, parent_pid: int) -> None:
    """Child process body: die with the parent, set the thread count, run ``fn(*args)``, write its
    summary or error to ``result``."""
    import torch

    from benchmarks._workers import die_with_parent

    die_with_parent(parent_pid)
    torch.set_num_threads(threads)
    try:
        summary = fn(*args)
    except BaseException as e:  # the parent reports it; the traceback goes to this process's stderr
        traceback.print_exc()
        atomic_write_json(result, {"error_type": type(e).__name__, "error": str(e)})
        raise SystemExit(1) from None
    atomic_write_json(result, {"summary": summary})


class BackgroundStage:
    """One stage running in a child process.

    Args:
        name: the stage's name (for messages).
        fn: a module-level function (picklable) returning the stage's summary dict (with its own
            ``stage_time_s`` / ``stage_cpu_s`` when it times itself).
        args: its arguments (picklable).
        threads: torch threads of the child.
        result: the JSON file the child reports through (removed before the start).
    """

    def __init__(self, name: str, fn: Callable[..., dict], args: tuple, threads: int, result: Path):
        self.name, self.result = name, Path(result)
        self.result.unlink(missing_ok=True)
        self.result.parent.mkdir(parents=True, exist_ok=True)
        ctx = mp.get_context("spawn")
        self.proc = ctx.Process(target=_child_main, args=(fn, args, threads, str(self.result), os.getpid()),
                                name=f"wmrl-{name}")
        self.proc.start()

    def stop(self) -> None:
        """Terminate the child (the parent failed); its checkpoints stay for the resume."""
        if self.proc.is_alive():
            self.proc.terminate()
        self.proc.join(timeout=30)

    def join(self, progress: Callable[[], int] | None = None, total: int | None = None, show: bool = True) -> dict:
        """Wait for the child; its summary, with ``waited_s``: how long this call waited.

        ``progress()`` (e.g. the last logged step) drives a bar up to ``total`` while waiting.
        Raises the child's :class:`WmrlError` class with its message (other errors as
        :class:`RuntimeError`), naming the stage; a child that died without a report (killed by the
        OS, say) raises :class:`WmrlError` naming its signal or exit code.
        """
        from tqdm import tqdm

        t0 = time.perf_counter()
        bar = tqdm(total=total, desc=f"{self.name} (background)", disable=not show or progress is None)
        try:
            while self.proc.is_alive():
                if progress is not None:
                    bar.update(max(0, progress() - bar.n))
                self.proc.join(timeout=0.5)
            if progress is not None:
                bar.update(max(0, progress() - bar.n))
        except BaseException:
            self.stop()
            raise
        finally:
            bar.close()
        if not self.result.exists():
            raise WmrlError(f"the background {self.name} stage {_exit_reason(self.proc.exitcode)} without a "
                            "report; re-run to resume it from its last checkpoint")
        report = json.loads(self.result.read_text())
        if "summary" in report:
            return {**report["summary"], "waited_s": time.perf_counter() - t0}
        cls = getattr(errors, report["error_type"], None)
        msg = f"the background {self.name} stage failed: {report['error']}"
        if isinstance(cls, type) and issubclass(cls, WmrlError):
            raise cls(msg)
        raise RuntimeError(f"{msg} ({report['error_type']}; traceback above)")


def _exit_reason(code: int | None) -> str:
    """How a child process ended, in words: ``'was killed by SIGKILL (out of memory?)'``, ``'exited
    with code 3'``."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}" + (" (out of memory?)" if -code == signal.SIGKILL else "")
    return f"exited with code {code}"


def last_logged_step(metrics: Path) -> Callable[[], int]:
    """A ``progress`` callable for :meth:`BackgroundStage.join`: the last step in a ``metrics.jsonl``."""

    def step() -> int:
        try:
            lines = metrics.read_text().splitlines()
        except FileNotFoundError:
            return 0
        for line in reversed(lines):
            try:
                return int(json.loads(line)["step"])
            except (ValueError, KeyError):  # a line being written
                continue
        return 0

    return step


__all__ = ["BackgroundStage", "last_logged_step", "thread_shares"]
