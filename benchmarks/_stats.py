"""Shared helpers of the benchmark runners: Wilson confidence intervals, machine and version info."""

from __future__ import annotations

import importlib.metadata
import math
import os
import platform
import sys
from typing import Any


def wilson_ci(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% (default ``z``) Wilson score interval of ``successes / n``; (0, 1) when ``n == 0``.

    >>> tuple(round(x, 3) for x in wilson_ci(0, 2))
    (0.0, 0.658)
    """
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= successes <= n:
        raise ValueError(f"successes={successes} is not in [0, n={n}]")
    p = successes / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, centre - half), min(1.0, centre + half))


def success_summary(successes: list[bool] | Any) -> dict[str, Any]:
    """``{"success_rate", "ci95": [lo, hi], "successes", "episodes"}`` of a list of outcomes."""
    s = [bool(x) for x in successes]
    k, n = sum(s), len(s)
    lo, hi = wilson_ci(k, n)
    return {"success_rate": k / n if n else 0.0, "ci95": [lo, hi], "successes": k, "episodes": n}


def paired_outcome_difference(arm: dict[str, Any], ref: dict[str, Any], z: float = 1.959964) -> dict[str, Any]:
    """``arm`` minus ``ref`` success, episode by episode on the same starts.

    Args:
        arm, ref: task -> outcomes in seed order (a sequence of 0/1 or a string such as ``"0110"``; numbers
            in [0, 1] such as a mean over repeats also do); both must hold the same tasks and as many episodes
            per task.
    Returns:
        ``{"diff", "se", "ci95": [lo, hi], "episodes"}``: the mean of the per-episode differences
        (the difference of the mean success when every task has as many episodes), its standard error
        and a normal 95% (default ``z``) interval. Pairing removes the spread of the starts both
        policies share, so this is tighter than comparing two separate intervals.

    >>> paired_outcome_difference({"t": "1101"}, {"t": "0101"})["diff"]
    0.25
    """
    if sorted(arm) != sorted(ref):
        raise ValueError(f"paired outcomes need the same tasks; got {sorted(arm)} and {sorted(ref)}")
    d: list[float] = []
    for t in sorted(ref):
        a, r = [float(x) for x in arm[t]], [float(x) for x in ref[t]]
        if len(a) != len(r):
            raise ValueError(f"task {t}: {len(a)} episodes against {len(r)}; paired outcomes need as many")
        d += [x - y for x, y in zip(a, r)]
    n = len(d)
    mean = sum(d) / n if n else 0.0
    se = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1) / n) if n > 1 else float("nan")
    return {"diff": mean, "se": se, "ci95": [mean - z * se, mean + z * se], "episodes": n}


def run_keys(paths: list[Any]) -> list[str]:
    """Names for run folders in result files: each folder's name, or where two share it (e.g.
    ``.../seed_0/ablation_x`` and ``.../seed_1/ablation_x``) the shortest path suffix that tells
    them apart.

    >>> run_keys(["runs/a/seed_0", "runs/a/seed_1"])
    ['seed_0', 'seed_1']
    >>> run_keys(["r/seed_0/ablation_x", "r/seed_1/ablation_x"])
    ['seed_0/ablation_x', 'seed_1/ablation_x']
    """
    parts = [tuple(str(p).rstrip("/").split("/")) for p in paths]
    if len(set(parts)) != len(parts):
        raise ValueError(f"run folders {[str(p) for p in paths]} name the same folder twice")
    for n in range(1, max((len(q) for q in parts), default=1) + 1):
        keys = ["/".join(q[-n:]) for q in parts]
        if len(set(keys)) == len(keys):
            return keys
    return ["/".join(q) for q in parts]


def machine_info() -> dict[str, Any]:
    """CPU model, core count, memory, OS, python, GPU presence."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = None
    try:
        mem_gib = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        pass
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "memory_gib": mem_gib,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "nvidia_gpu": os.path.exists("/dev/nvidiactl"),
    }


def package_versions(names: tuple[str, ...] = ("numpy", "gymnasium", "torch", "lerobot", "mujoco")) -> dict[str, str]:
    """Installed versions of the core venv's packages (``"absent"`` when not installed)."""
    out = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "absent"
    return out
