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


def test_until_decided_is_replayed_from_the_world_successes_outcomes_and_pooled():
    """replay_until_decided reads a check of the world's successes as check_real=until_decided would play it:
    the same starts in order, stopped once the gate's decision is settled, and the same tasks gated."""
    from benchmarks.gate_check_cost import (
        kept_until_decided_same,
        replay_until_decided,
        until_decided_summary,
    )
    from imagination.self_imitation import gated_tasks

    part = {"check": {"a": {"imagined_outcomes": "1101101100"}, "b": {"imagined_outcomes": "0110000001"}},
            "real": {"a": {"played": [0, 1, 3, 4, 6, 7], "outcomes": "111011", "lengths": [20, 21, 22, 23, 24, 25]},
                     "b": {"played": [1, 2, 9], "outcomes": "000", "lengths": [60, 60, 60]}}}
    got = replay_until_decided(part, ["a", "b"], 0.5, None)
    # a: 3 of 6 confirmed keep it, after the first 3 starts; b: 2 refuted of 3 gate it
    assert got == {"steps": 20 + 21 + 22 + 60 + 60, "played": 5, "starts": {"a": [0, 1, 3], "b": [1, 2]}, "gated": ["b"]}
    kept = {"min_precision": 0.5, "confidence": None, "real_env_steps": 183.0, "check": part["check"],
            "real": {"a": {"played": [0, 1, 3], "outcomes": "111"}, "b": {"played": [1, 2], "outcomes": "00"}}}
    assert kept_until_decided_same(kept, part, ["a", "b"])
    for bad in ({**kept, "real_env_steps": 184.0}, {**kept, "real": {**kept["real"], "b": {"played": [1, 2, 9],
                                                                                          "outcomes": "000"}}},
                {**kept, "real": {**kept["real"], "a": {"played": [0, 1, 3], "outcomes": "110"}}}):
        assert not kept_until_decided_same(bad, part, ["a", "b"])
    # at 0.7 and 90%: a needs 6 of 6 and its 4th start is refuted; b's 3 can never pass, one start is played
    strict = replay_until_decided(part, ["a", "b"], 0.7, 0.9)
    assert strict["played"] == 4 + 1 and strict["gated"] == ["a", "b"]
    import numpy as np

    from imagination.self_imitation import check_rows, partial_rows

    imagined = np.array([[c == "1" for c in part["check"][t]["imagined_outcomes"]] for t in "ab"])
    real = np.zeros_like(imagined)
    real[0, [0, 1, 3, 6, 7]] = True
    assert gated_tasks(partial_rows(check_rows(["a", "b"], imagined, real)), 0.7, 0.9) == strict["gated"]
    rows = [{"tasks": ["a", "b"], "until_decided": {"point": {"steps": got["steps"], "played": 5, "decisions_same": 2}}}] * 2
    s = until_decided_summary(rows, "point", 800.0, 2000.0)
    assert s == {"steps": 366.0, "played": 10, "share_of_world_successes": 366 / 800, "share_of_all": 366 / 2000,
                 "decisions": 4, "decisions_same": 4}
