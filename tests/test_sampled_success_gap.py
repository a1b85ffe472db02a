"""benchmarks.sampled_success_gap: a world's sampled success against the simulator's, task by task."""

from __future__ import annotations

import json

import pytest

from benchmarks.sampled_success_gap import main, sampled_gaps
from wmrl.errors import WmrlError


def _result(world: str, rates: dict[str, dict[str, float]], **kw) -> dict:
    """A self_imitation-shaped result: one round per run with these per-task sampled successes."""
    base = {"benchmark": "self_imitation", "world": world, "group": 8, "max_episodes": 400, "std": 0.1, "rounds": 1,
            "init": "policy", "demos_only": False}
    base.update(kw)
    base["per_seed"] = {run: {"rounds": [{"round": 0, "sampled_success": r}]} for run, r in rates.items()}
    return base


def test_gaps_are_the_worlds_rate_minus_the_real_one_on_shared_runs():
    real = _result("real", {"a": {"Push": 0.2, "Lift": 0.8}, "b": {"Push": 0.1, "Lift": 0.6}})
    world = _result("state_model:od", {"a": {"Push": 0.5, "Lift": 0.7}, "b": {"Push": 0.1, "Lift": 0.8},
                                       "c": {"Push": 0.9, "Lift": 0.9}})
    g = sampled_gaps(real, world)
    assert g["runs"] == ["a", "b"]  # run c has no real counterpart
    assert g["per_seed"]["a"][0] == pytest.approx({"Lift": -0.1, "Push": 0.3})
    assert g["mean_abs_gap"] == pytest.approx((0.3 + 0.1 + 0.0 + 0.2) / 4)
    assert g["mean_gap"] == pytest.approx((0.3 - 0.1 + 0.0 + 0.2) / 4)
    assert g["mean_gap_by_task"] == pytest.approx({"Lift": 0.05, "Push": 0.15})


def test_mismatched_collections_are_one_line_errors(tmp_path):
    real = _result("real", {"a": {"Push": 0.2}})
    with pytest.raises(WmrlError, match="max_episodes 800 differs from the real collection's 400"):
        sampled_gaps(real, _result("state_model:od", {"a": {"Push": 0.2}}, max_episodes=800), "od")
    with pytest.raises(WmrlError, match="expected 'real'"):
        sampled_gaps(_result("state_model:od", {"a": {"Push": 0.2}}), real)
    with pytest.raises(WmrlError, match="share none"):
        sampled_gaps(real, _result("state_model:od", {"z": {"Push": 0.2}}))
    with pytest.raises(WmrlError, match="sampled tasks"):
        sampled_gaps(real, _result("state_model:od", {"a": {"Lift": 0.2}}))
    ctrl = tmp_path / "ctrl.json"
    ctrl.write_text(json.dumps(_result("real", {"a": {}}, demos_only=True)))
    with pytest.raises(WmrlError, match="samples nothing"):
        main(["--real", str(ctrl), "--world", f"od={ctrl}", "--out", str(tmp_path / "o.json")])
    with pytest.raises(WmrlError, match="expected NAME=FILE.json"):
        main(["--real", str(ctrl), "--world", "od", "--out", str(tmp_path / "o.json")])


def test_main_writes_every_world(tmp_path):
    real, od = tmp_path / "real.json", tmp_path / "od.json"
    real.write_text(json.dumps(_result("real", {"a": {"Push": 0.2}})))
    od.write_text(json.dumps(_result("state_model:od", {"a": {"Push": 0.35}})))
    assert main(["--real", str(real), "--world", f"od={od}", "--out", str(tmp_path / "gap.json")]) == 0
    res = json.loads((tmp_path / "gap.json").read_text())
    assert res["worlds"]["od"]["mean_gap"] == pytest.approx(0.15)
    assert res["real_sampled_success"] == {"a": [{"Push": 0.2}]}
