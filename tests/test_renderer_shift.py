"""benchmarks.renderer_shift: bad input fails before any work, with one line naming the bad value."""

from __future__ import annotations

from benchmarks.renderer_shift import main


def test_a_missing_policy_or_renderer_or_a_bad_share_is_one_line_before_any_work(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "sft" / "policy").mkdir(parents=True)
    out = tmp_path / "r.json"
    cases = [
        (["--fit-policy", "sft", "--test-policy", "sm_warm_2"], "policy 'sm_warm_2': "),
        (["--fit-policy", "sft", "--test-policy", "sft"], "is not a state-renderer checkpoint"),
        (["--rollout-share", "1.5"], "--rollout-share 1.5: expected a share in (0, 1)"),
    ]
    for args, msg in cases:
        assert main(["--runs", str(run), "--policy-work", str(tmp_path / "fs"), "--work", str(tmp_path / "w"),
                     "--out", str(out), *args]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and msg in err and "\n" not in err, err
    assert not out.exists() and not (tmp_path / "w").exists()
