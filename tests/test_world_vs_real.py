"""benchmarks.world_vs_real: each self-imitation round's world set against the simulator on the evaluation's own
starts (the check itself: test_state_model_ranking.py; on a run: the self-imitation pipeline test)."""

from __future__ import annotations

import json

import pytest

from benchmarks.world_vs_real import main, pool
from imagination.self_imitation import (
    SelfImitationConfig,
    gated_tasks,
    pool_check_rows,
    pooled_gate_check,
    precision_lower_bound,
)
from wmrl.errors import ConfigError, WmrlError


def test_pool_sums_episodes_and_combines_standard_errors():
    a = {"episodes": 100.0, "imagined": 0.3, "real": 0.2, "overrating": 0.1, "overrating_se": 0.03,
         "false_successes": 15.0, "missed_successes": 5.0, "precision": 0.5}
    b = {"episodes": 100.0, "imagined": 0.5, "real": 0.2, "overrating": 0.3, "overrating_se": 0.04,
         "false_successes": 30.0, "missed_successes": 0.0, "precision": 0.4}
    p = pool([a, b])
    assert p["episodes"] == 200 and p["imagined"] == pytest.approx(0.4) and p["overrating"] == pytest.approx(0.2)
    assert p["overrating_se"] == pytest.approx(0.025)  # sqrt(0.03^2 + 0.04^2) / 2
    assert p["false_successes"] == 45 and p["precision"] == pytest.approx((80 - 45) / 80)


def test_a_check_of_the_worlds_successes_alone_reads_the_same_precision_and_pools_the_rest_to_none():
    """self_imitation.check_real=world_successes: the simulator plays only the starts the world calls a success.
    The precision and its Wilson bound (all the gate reads) are those of the check on every start; the real
    success and the missed successes, which the unplayed starts decide, read None, and pool to None."""
    import numpy as np

    from imagination.self_imitation import check_rows, partial_rows

    tasks = ["PushCube-v0", "LiftCube-v0"]
    imagined = np.array([[1, 1, 0, 0, 1, 0], [1, 1, 1, 1, 0, 0]], bool)
    real = np.array([[1, 0, 1, 0, 0, 1], [1, 1, 1, 0, 1, 0]], bool)
    full = check_rows(tasks, imagined, real)
    part = partial_rows(check_rows(tasks, imagined, real & imagined))  # the unplayed starts read False
    for t in tasks:
        assert {k: part[t][k] for k in ("episodes", "imagined", "false_successes", "precision", "imagined_outcomes")} \
            == {k: full[t][k] for k in ("episodes", "imagined", "false_successes", "precision", "imagined_outcomes")}
        assert part[t]["real"] is None and part[t]["missed_successes"] is None and part[t]["overrating_se"] is None
        assert precision_lower_bound(part[t], 0.9) == precision_lower_bound(full[t], 0.9)
    assert part["PushCube-v0"]["real_played"] == 3 and part["all"]["real_played"] == 7
    assert full["PushCube-v0"]["missed_successes"] == 2 and full["PushCube-v0"]["precision"] == pytest.approx(1 / 3)
    assert gated_tasks(part, 0.5) == gated_tasks(full, 0.5) == ["PushCube-v0"]
    mixed = pool([full["PushCube-v0"], part["PushCube-v0"]])
    assert mixed["real"] is None and mixed["missed_successes"] is None and mixed["overrating"] is None
    assert mixed["false_successes"] == 4 and mixed["precision"] == pytest.approx(2 / 6)
    assert pool([full["LiftCube-v0"]] * 2)["real"] == pytest.approx(4 / 6)
    with pytest.raises(ConfigError, match="check_real='some'; expected one of all, world_successes, until_decided"):
        SelfImitationConfig(check_real="some")
    with pytest.raises(ConfigError, match="check_real=world_successes .* needs self_imitation.check_episodes > 0"):
        SelfImitationConfig(check_real="world_successes")
    assert SelfImitationConfig(check_real="world_successes", check_episodes=50).check_real == "world_successes"


def test_a_check_until_decided_gates_as_the_check_of_every_world_success_for_fewer_starts():
    """self_imitation.check_real=until_decided plays a task's world successes in order only until the gate's
    decision is settled whatever the rest would show, and its rows gate exactly as the whole check's: 3,600
    outcome sequences of 1-30 world successes (random ones, all real, all refuted) at five thresholds, on the point
    estimate and three confidences."""
    import numpy as np

    from imagination.self_imitation import check_rows, decisive_count, partial_rows, play_until_decided

    assert decisive_count(10, 0.5) == 5 and decisive_count(10, 0.55) == 6 and decisive_count(3, 1.0) == 3
    assert decisive_count(0, 0.5) == 0 and play_until_decided([], None, 0.5)[0] == []  # kept: no precision read
    assert decisive_count(1, 0.5, 0.9) == 2  # one world success can never show the bound above 0.5: gated
    assert decisive_count(20, 0.5, 0.9) == 13  # the 90% Wilson bound of 13/20 is 0.507, of 12/20 below 0.5
    calls: list[list[int]] = []
    outs = np.array([1, 1, 0, 1, 1, 1, 0, 0, 1, 1], bool)

    def play(idx: list[int]) -> tuple:
        calls.append(idx)
        return outs[idx], np.full(len(idx), 10)

    idx, ok, lengths = play_until_decided(list(range(10)), play, 0.5)
    # each call plays as many as could be needed before a decision: 5 (none comes sooner), then 1 (4 confirmed
    # and 1 refuted: the next one either keeps the task or leaves it open)
    assert calls == [[0, 1, 2, 3, 4], [5]] and idx == [0, 1, 2, 3, 4, 5] and ok.sum() == 5 and lengths.sum() == 60
    calls.clear()
    # three world successes pass the 90% bound only all confirmed: the first refuted one settles it
    assert play_until_decided([2, 4, 9], play, 0.5, 0.9)[0] == [2] and calls == [[2]]
    rng = np.random.default_rng(0)
    for hits in range(1, 31):
        for thr in (0.2, 0.5, 0.6, 0.9, 1.0):
            for conf in (None, 0.75, 0.9, 0.95):
                for rep in range(6):
                    seq = rng.uniform(size=hits) < rng.uniform() if rep > 1 else np.full(hits, rep == 0)
                    imagined = np.zeros((1, hits + 3), bool)
                    imagined[0, :hits] = True
                    real = imagined.copy()
                    real[0, :hits] = seq
                    full = check_rows(["t"], imagined, real)
                    got = play_until_decided(list(range(hits)), lambda i, seq=seq: (seq[i], np.ones(len(i), int)),
                                             thr, conf)
                    assert list(got[1]) == list(seq[:len(got[0])]) and 1 <= len(got[0]) <= hits
                    real = imagined.copy()
                    real[0, got[0]] = got[1]
                    part = partial_rows(check_rows(["t"], imagined, real), {"t": len(got[0])})
                    assert gated_tasks(part, thr, conf) == gated_tasks(full, thr, conf), (hits, thr, conf, seq)
                    assert part["t"]["precision"] == got[1].mean() and part["t"]["real_played"] == len(got[0])
    for bad, msg in [({}, "check_real=until_decided stops the check .* needs a gate: self_imitation.min_precision"),
                     ({"min_precision": 0.5, "pool_checks": True}, "until_decided leaves starts unplayed, and "
                      "self_imitation.pool_checks=true pools every outcome")]:
        with pytest.raises(ConfigError, match=msg):
            SelfImitationConfig(check_real="until_decided", check_episodes=50, **bad)


def test_cli_refuses_a_folder_that_is_not_a_run_and_rounds_it_lacks(tmp_path, capsys):
    assert main(["--runs", str(tmp_path / "nope"), "--out", str(tmp_path / "o.json")]) == 2
    assert "is not a wmrl run folder" in capsys.readouterr().err
    run = tmp_path / "run"
    (run / "stages").mkdir(parents=True)
    (run / "round_0").mkdir()
    (run / "round_0" / "self_imitation_collection.json").write_text(json.dumps({}))
    assert main(["--runs", str(run), "--rounds", "0", "3", "--out", str(tmp_path / "o.json")]) == 2
    assert "has self-imitation rounds [0]; asked for [3]" in capsys.readouterr().err
    assert main(["--runs", str(run), "--refit-episodes", "0", "--out", str(tmp_path / "o.json")]) == 2
    assert "--refit-episodes [0]: expected counts >= 0, one of them > 0" in capsys.readouterr().err
    assert main(["--runs", str(run), "--gate-threshold", "1.5", "--out", str(tmp_path / "o.json")]) == 2
    assert "--gate-threshold 1.5: expected a precision in (0, 1]" in capsys.readouterr().err
    assert not (tmp_path / "o.json").exists()


def test_min_precision_gates_the_tasks_whose_world_successes_are_mostly_false():
    """self_imitation.min_precision: a round clones no successes of a task whose precision in the round's check
    is below it; a task the world counts no success of (precision None) and the pooled row are never gated."""
    check = {"PushCube-v0": {"precision": 0.3}, "LiftCube-v0": {"precision": 0.9},
             "StackCube-v0": {"precision": None}, "all": {"precision": 0.2}}
    assert gated_tasks(check, 0.5) == ["PushCube-v0"]
    assert gated_tasks(check, None) == [] and gated_tasks({}, 0.5) == []
    assert gated_tasks(check, 1.0) == ["PushCube-v0", "LiftCube-v0"]
    for bad in (0.0, 1.5, True):
        with pytest.raises(ConfigError, match="self_imitation.min_precision=.*expected a number in \\(0, 1\\]"):
            SelfImitationConfig(min_precision=bad)
    for bad in (-1, 1001):
        with pytest.raises(ConfigError, match=f"self_imitation.check_episodes={bad}; expected 0 .* to 1000 fresh"):
            SelfImitationConfig(check_episodes=bad)


def test_gate_confidence_reads_the_precisions_one_sided_wilson_lower_bound():
    """self_imitation.gate_confidence: the gate reads each task's precision as its one-sided Wilson lower bound,
    so session 82's PushCube check (8 of 12 world successes real, 0.67) no longer passes a 0.5 gate at 90%
    while LiftCube's (37 of 39) does; a task with few successes, all real, passes only when they suffice."""
    def row(episodes, hits, false):
        return {"episodes": float(episodes), "imagined": hits / episodes, "false_successes": float(false),
                "precision": (hits - false) / hits if hits else None}

    check = {"PushCube-v0": row(50, 12, 4), "LiftCube-v0": row(50, 39, 2), "PushCubeSpatial-v0": row(50, 18, 10),
             "StackCube-v0": row(50, 3, 0), "PlaceInBowl-v0": row(50, 0, 0), "all": row(300, 72, 15)}
    # (c - h) / d with p = k/n, z = 1.2816 (90%), d = 1 + z^2/n, c = p + z^2/2n, h = z sqrt(p(1-p)/n + z^2/4n^2)
    assert precision_lower_bound(check["PushCube-v0"], 0.9) == pytest.approx(0.481813, abs=1e-6)
    assert precision_lower_bound(check["LiftCube-v0"], 0.9) == pytest.approx(0.882680, abs=1e-6)
    assert precision_lower_bound(check["StackCube-v0"], 0.9) == pytest.approx(0.646221, abs=1e-6)
    assert precision_lower_bound(check["PlaceInBowl-v0"], 0.9) is None
    # the point estimate at 0.5 gates PushCubeSpatial alone; the bound at 90% gates PushCube too
    assert gated_tasks(check, 0.5) == ["PushCubeSpatial-v0"]
    assert gated_tasks(check, 0.5, 0.9) == ["PushCube-v0", "PushCubeSpatial-v0"]
    # a higher confidence lowers the bound: 3 of 3 real no longer clears 0.6 at 97.5%
    assert "StackCube-v0" not in gated_tasks(check, 0.6, 0.9) and "StackCube-v0" in gated_tasks(check, 0.6, 0.975)
    # at confidence 0.5 (z = 0) the bound is the point estimate
    assert gated_tasks(check, 0.5, 0.5) == gated_tasks(check, 0.5)
    for bad in (0.4, 1.0, True):
        with pytest.raises(ConfigError, match="self_imitation.gate_confidence=.*expected a confidence in \\[0.5, 1\\)"):
            SelfImitationConfig(min_precision=0.5, gate_confidence=bad)
    with pytest.raises(ConfigError, match="gate_confidence=0.9 .* needs self_imitation.min_precision"):
        SelfImitationConfig(gate_confidence=0.9)


def test_pooled_gate_check_pools_every_rounds_check_and_counts_the_steps_no_round_counted(tmp_path):
    """self_imitation.pool_checks: round R's gate reads each task's precision over the checks of rounds 0..R.
    A round's own fresh check (gate_check.json) was counted in its round; a check on the evaluation's starts
    (world_vs_real.json) counts the evaluation's steps now unless that round's gate counted them."""
    from types import SimpleNamespace

    from imagination.self_imitation import GATE_CHECK, WORLD_CHECK

    def row(n, hits, false, real=0.2):
        return {"episodes": n, "imagined": hits / n, "real": real, "overrating": hits / n - real,
                "overrating_se": 0.05, "false_successes": false, "missed_successes": 1.0,
                "precision": (hits - false) / hits if hits else None}

    markers = {"eval_sft": {"eval_env_steps": 900.0}, "round_0": {"gate_real_env_steps": 0.0, "eval": {"eval_env_steps": 800.0}},
               "round_1": {"gate_real_env_steps": 800.0}}
    pipe = SimpleNamespace(root=tmp_path, done=markers.get)
    for q, name, rows in [(0, WORLD_CHECK, {"PushCube-v0": row(100, 10, 6), "LiftCube-v0": row(100, 0, 0)}),
                          (1, WORLD_CHECK, {"PushCube-v0": row(100, 12, 5), "LiftCube-v0": row(100, 40, 4)}),
                          (2, GATE_CHECK, {"check": {"PushCube-v0": row(50, 8, 2), "LiftCube-v0": row(50, 20, 1)}})]:
        (tmp_path / f"round_{q}").mkdir()
        (tmp_path / f"round_{q}" / name).write_text(json.dumps(rows))
    now = {"PushCube-v0": row(50, 10, 3), "LiftCube-v0": row(50, 20, 2), "StackCube-v0": row(50, 0, 0)}
    pooled, steps = pooled_gate_check(pipe, 3, now)
    # round 0's check read the SFT evaluation, uncounted then (no gate): it counts now; round 1's gate counted
    # round 0's evaluation; round 2's fresh check counted itself
    assert steps == 900.0
    push = pooled["PushCube-v0"]
    assert push["episodes"] == 300 and push["rounds"] == 4 and push["false_successes"] == 16
    assert push["precision"] == pytest.approx((40 - 16) / 40) and push["imagined"] == pytest.approx(40 / 300)
    assert pooled["LiftCube-v0"]["precision"] == pytest.approx((80 - 7) / 80)
    assert pooled["StackCube-v0"]["rounds"] == 1 and pooled["StackCube-v0"]["precision"] is None
    # one round's noisy precision gates PushCube alone at round 0 (0.40); pooled, it is gated at 0.6 but not at 0.5
    assert gated_tasks(pooled, 0.65) == ["PushCube-v0"] and gated_tasks(pooled, 0.5) == []
    assert pooled_gate_check(pipe, 0, now) == (pool_check_rows([now]), 0.0)
    # a round that pooled already counted the checks before it: round 0's evaluation is not counted twice
    markers["round_1"]["gate_pooled"] = {}
    assert pooled_gate_check(pipe, 3, now) == (pooled, 0.0)
    markers["round_0"]["gate_pooled"] = {}
    del markers["round_1"]["gate_pooled"]
    assert pooled_gate_check(pipe, 3, now)[1] == 0.0  # rounds 1-2 had counted their own checks
    # a check stopped once its gate's decision was settled cannot be pooled
    (tmp_path / "round_2" / GATE_CHECK).write_text(json.dumps({"check": {}, "check_real": "until_decided"}))
    with pytest.raises(ConfigError, match="pool_checks=true pools every outcome, and .*round_2/gate_check.json stopped"):
        pooled_gate_check(pipe, 3, now)
    assert pool_check_rows([]) == {}
    for bad in ("yes", 1):
        with pytest.raises(ConfigError, match=f"self_imitation.pool_checks={bad!r}; expected true or false"):
            SelfImitationConfig(pool_checks=bad)


def test_gate_agreement_sets_each_rounds_fresh_check_against_the_evaluation_starts_check(tmp_path):
    """benchmarks.world_vs_real: a round whose gate checked on fresh starts of its own (gate_check.json) is set
    against its check on the evaluation's starts, task by task, at the threshold; rounds without one are left out."""
    from benchmarks.world_vs_real import gate_agreement
    from imagination.self_imitation import GATE_CHECK

    def row(precision, n=10.0):
        hits = 4.0
        return {"episodes": n, "imagined": hits / n, "real": 0.3, "overrating": hits / n - 0.3, "overrating_se": 0.1,
                "false_successes": hits * (1 - precision), "missed_successes": 1.0, "precision": precision}

    on_eval = {"PushCube-v0": row(0.25), "LiftCube-v0": row(0.75), "all": row(0.5)}
    fresh = {"PushCube-v0": row(0.25), "LiftCube-v0": row(0.25), "all": row(0.25)}
    (tmp_path / "round_1").mkdir()
    (tmp_path / "round_1" / GATE_CHECK).write_text(json.dumps({"check": fresh}))
    per_run = {str(tmp_path): {"0": on_eval, "1": on_eval}}
    g = gate_agreement(per_run, 0.5)
    assert g["decisions"] == 2 and g["agree"] == 1 and list(g["per_run"][str(tmp_path)]) == ["1"]
    v = g["per_run"][str(tmp_path)]["1"]
    assert v["gated_fresh"] == ["PushCube-v0", "LiftCube-v0"] and v["gated_eval"] == ["PushCube-v0"]
    assert g["by_round"]["1"]["LiftCube-v0"]["precision"] == pytest.approx(0.25)
    assert gate_agreement({str(tmp_path): {"0": on_eval}}, 0.5) is None
    # at 90%, LiftCube's 3 of 4 on the evaluation's starts reads a Wilson bound of 0.43: gated too
    g90 = gate_agreement(per_run, 0.5, 0.9)
    assert g90["confidence"] == 0.9 and g["confidence"] is None
    assert g90["per_run"][str(tmp_path)]["1"]["gated_eval"] == ["PushCube-v0", "LiftCube-v0"]
    assert g90["decisions"] == 2 and g90["agree"] == 2
    # a check stopped once its own gate's decision was settled (until_decided) reads at that gate only
    (tmp_path / "round_1" / GATE_CHECK).write_text(json.dumps({"check": fresh, "check_real": "until_decided",
                                                               "min_precision": 0.5, "confidence": None}))
    assert gate_agreement(per_run, 0.5)["agree"] == 1
    with pytest.raises(WmrlError, match=r"gate_check.json stopped once its gate's decision \(min_precision 0.5, "
                       r"confidence None\) was settled; it cannot be read at threshold 0.5, confidence 0.9"):
        gate_agreement(per_run, 0.5, 0.9)
    from imagination.self_imitation import check_reads_at

    assert check_reads_at({"check_real": "world_successes"}, 0.7, 0.9) and check_reads_at({}, 0.5)
    assert not check_reads_at({"check_real": "until_decided", "min_precision": 0.5, "confidence": 0.9}, 0.6, 0.9)
