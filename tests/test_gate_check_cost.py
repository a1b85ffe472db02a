"""benchmarks.gate_check_cost: the gate's check on every start against the world's successes alone (the checks
themselves, on a run: the self-imitation pipeline test in test_imagination.py)."""

from __future__ import annotations

import json

import pytest

from benchmarks.gate_check_cost import kept_check_starts, main, summarise
from wmrl.errors import WmrlError


def _row(n: int, hits: int) -> dict:
    return {"episodes": float(n), "imagined": hits / n, "false_successes": 0.0, "precision": 1.0 if hits else None}


def test_kept_checks_count_the_starts_the_world_calls_a_success(tmp_path):
    res = {"gate": {"per_run": {
        "runs/a": {"0": {"fresh": {"PushCube-v0": _row(50, 10), "LiftCube-v0": _row(50, 40), "all": _row(100, 50)}},
                   "1": {"fresh": {"PushCube-v0": _row(50, 5), "LiftCube-v0": _row(50, 45), "all": _row(100, 50)}}},
        "runs/b": {"0": {"fresh": {"PushCube-v0": _row(50, 0), "LiftCube-v0": _row(50, 30), "all": _row(100, 30)}}},
    }}}
    f = tmp_path / "wvr.json"
    f.write_text(json.dumps(res))
    got = kept_check_starts(f)
    assert got["checks"] == 3 and got["episodes"] == 300 and got["world_successes"] == 130
    assert got["share"] == pytest.approx(130 / 300)
    assert got["by_task"]["PushCube-v0"] == {"episodes": 150, "world_successes": 15, "share": 0.1}
    (tmp_path / "empty.json").write_text(json.dumps({"gate": None}))
    with pytest.raises(WmrlError, match="holds no gate check of its own"):
        kept_check_starts(tmp_path / "empty.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(WmrlError, match="--kept .*bad.json: not a readable benchmarks.world_vs_real result"):
        kept_check_starts(tmp_path / "bad.json")
    out = tmp_path / "out.json"
    assert main(["--kept", str(f), "--no-progress", "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["kept"][str(f)] == got and written["summary"] is None and written["per_run"] == {}


def test_summary_pools_steps_and_counts_and_the_cli_refuses_bad_input(tmp_path, capsys):
    def check(all_steps: float, part: float, played: int) -> dict:
        return {"steps_all": all_steps, "steps_world_successes": part, "step_share": part / all_steps,
                "episodes_per_task": 50, "tasks": ["a", "b"], "real_played": played, "real_reproduced": played,
                "world_outcomes_same": 2, "decisions": 4, "decisions_same": 4}

    s = summarise({"r0": {"0": check(1000, 300, 20), "1": check(3000, 1200, 40)}, "r1": {"0": check(2000, 400, 10)}})
    assert s["checks"] == 3 and s["steps_all"] == 6000 and s["steps_world_successes"] == 1900
    assert s["step_share"] == pytest.approx(1900 / 6000) and s["step_share_median"] == pytest.approx(0.3)
    assert s["episodes"] == 300 and s["played"] == 70 and s["decisions_same"] == s["decisions"] == 12
    out = str(tmp_path / "o.json")
    assert main(["--out", out]) == 2
    assert "give --runs RUN" in capsys.readouterr().err
    assert main(["--runs", str(tmp_path), "--out", out]) == 2
    assert "is not a wmrl run folder" in capsys.readouterr().err
    (tmp_path / "stages").mkdir()
    assert main(["--runs", str(tmp_path), "--out", out]) == 2
    assert "has no round with a gate check of its own; name --rounds" in capsys.readouterr().err
    assert main(["--runs", str(tmp_path), "--rounds", "0", "--out", out]) == 2
    assert "config.yaml not found; expected a wmrl run folder" in capsys.readouterr().err
    for bad, msg in [(["--threshold", "0"], "--threshold 0.0: expected a precision in (0, 1]"),
                     (["--confidence", "1"], "--confidence 1.0: expected a confidence in [0.5, 1)"),
                     (["--episodes", "0"], "--episodes 0: expected 1 to 1000 starts per task")]:
        assert main([*bad, "--runs", str(tmp_path), "--out", out]) == 2
        assert msg in capsys.readouterr().err
    assert not (tmp_path / "o.json").exists()
