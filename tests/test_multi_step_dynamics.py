"""benchmarks.multi_step_dynamics' paired comparison of two state-model worlds on the same starts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks.multi_step_dynamics import paired_changes


def _run(root: Path, outcomes: dict[str, str]) -> str:
    (root / "stages").mkdir(parents=True)
    (root / "stages" / "eval_sft.json").write_text(json.dumps({"eval": {"outcomes": outcomes}}))
    return str(root)


def _check(imagined: dict[str, str]) -> dict:
    return {"check": {**{t: {"imagined_outcomes": s} for t, s in imagined.items()}, "all": {"episodes": 0.0}}}


def test_paired_changes_count_fixed_and_broken_starts_and_bound_the_precision_change(tmp_path):
    """Real 1100, base world 1000, K world 1101: each world agrees on 3 of 4 starts; K fixes start 1 and breaks
    start 3 (d = 0, +1, 0, -1: change 0, s.e. sd/2 = 0.408); precision 1/1 -> 2/3. A second run's task adds to
    the pooled row only: 5 of the K world's 6 successes are real."""
    a = _run(tmp_path / "a", {"PushCube-v0": "1100"})
    b = _run(tmp_path / "b", {"PushCube-v0": "0011", "LiftCube-v0": "10"})
    per_run = {a: {"0": _check({"PushCube-v0": "1000"}), "8": _check({"PushCube-v0": "1101"})},
               b: {"0": _check({"PushCube-v0": "0011", "LiftCube-v0": "00"}),
                   "8": _check({"PushCube-v0": "0011", "LiftCube-v0": "10"})}}
    got = paired_changes({a: per_run[a]}, ["0", "8"], resamples=400)["8 - 0"]
    push = got["PushCube-v0"]
    assert (push["episodes"], push["agreement_base"], push["agreement_k"], push["agreement_change"]) == (4, .75, .75, 0)
    assert push["agreement_change_se"] == pytest.approx(math.sqrt(2 / 3) / 2)
    assert (push["fixed"], push["broken"]) == (1, 1)
    assert (push["precision_base"], push["precision_k"]) == (1.0, pytest.approx(2 / 3))
    lo, hi = push["precision_change_ci95"]
    assert lo <= push["precision_change"] <= hi and lo < 0 and hi <= 0
    assert got["all"] == {**push, "precision_change_ci95": got["all"]["precision_change_ci95"]}
    both = paired_changes(per_run, ["0", "8"], resamples=400)["8 - 0"]
    assert both["PushCube-v0"]["episodes"] == 8 and both["LiftCube-v0"]["fixed"] == 1
    assert both["LiftCube-v0"]["precision_base"] is None and both["LiftCube-v0"]["precision_change"] is None
    pooled = both["all"]
    assert (pooled["episodes"], pooled["fixed"], pooled["broken"]) == (10, 2, 1)
    assert pooled["agreement_change"] == pytest.approx(0.1) and pooled["precision_k"] == pytest.approx(5 / 6)
    # the same draws from the same seed; a single K has nothing to pair with
    assert paired_changes(per_run, ["0", "8"], resamples=400) == paired_changes(per_run, ["0", "8"], resamples=400)
    assert paired_changes(per_run, ["0"]) == {}
    three = {run: {**v, "8arm": v["0"]} for run, v in per_run.items()}  # every later fit against each earlier one
    got3 = paired_changes(three, ["0", "8", "8arm"], resamples=400)
    assert list(got3) == ["8 - 0", "8arm - 0", "8arm - 8"] and got3["8arm - 0"]["all"]["agreement_change"] == 0
    assert got3["8arm - 8"]["all"]["agreement_change"] == pytest.approx(-0.1)
