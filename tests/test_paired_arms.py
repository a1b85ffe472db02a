"""benchmarks.paired_arms: policies from several result files paired on the same runs' evaluation starts."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from benchmarks import paired_arms
from benchmarks._stats import paired_outcome_difference


def _run(root: Path, name: str, sft: dict[str, str]) -> Path:
    run = root / name
    (run / "stages").mkdir(parents=True)
    (run / "stages" / "eval_sft.json").write_text(json.dumps({"success": 0.0, "outcomes": sft}))
    (run / "stages" / "round_0.json").write_text(json.dumps({"eval": {"outcomes": sft}, "real_env_steps": 7}))  # same as SFT
    return run


def _result(path: Path, runs: list[Path], per_run: list[dict], key: str = "variants", rl_seed: int = 0) -> Path:
    per_seed = {r.name: v for r, v in zip(runs, per_run, strict=True)}
    path.write_text(json.dumps({key: {"default": {"per_seed": per_seed, "lift": 0.0}}, "runs": [str(r) for r in runs],
                                "rl_seed": rl_seed}))
    return path


@pytest.fixture
def three_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    monkeypatch.chdir(tmp_path)
    runs = [_run(tmp_path, f"seed_{s}", {"a": "0000", "b": "0011"}) for s in range(3)]
    first = _result(tmp_path / "rl.json", runs[:2], [
        {"outcomes": {"a": "1000", "b": "0011"}, "real_env_steps": 100,
         "curve": [{"outcomes": {"a": "1100", "b": "0011"}, "real_env_steps": 200}]},
        {"outcomes": {"a": "0000", "b": "0001"}, "real_env_steps": 110,
         "curve": [{"outcomes": {"a": "0000", "b": "0011"}, "real_env_steps": 220}]},
    ])
    second = _result(tmp_path / "rl_seed2.json", runs[2:], [{"outcomes": {"a": "1111", "b": "1111"},
                                                            "real_env_steps": 120}])
    world = _result(tmp_path / "world.json", runs, [{"outcomes": {"a": "0000", "b": "0011"}, "real_env_steps_used": s}
                                                    for s in (10, 20, 30)], key="worlds")
    repeat = _result(tmp_path / "rl_rlseed1.json", runs[:2], [{"outcomes": {"a": "1100", "b": "0011"}, "real_env_steps": 1},
                                                              {"outcomes": {"a": "0000", "b": "0011"}, "real_env_steps": 3}],
                     rl_seed=1)
    return {"rl": first, "rl2": second, "world": world, "repeat": repeat, "root": tmp_path}


def test_pairs_join_files_and_match_the_per_episode_difference(three_runs: dict[str, Path], capsys) -> None:
    out = three_runs["root"] / "pairs.json"
    rc = paired_arms.main([
        "--arm", f"rl={three_runs['rl']}", "--arm", f"rl={three_runs['rl2']}:variants.default",
        "--arm", f"curve={three_runs['rl']}@0", "--arm", f"world={three_runs['world']}", "--arm", "r0=stage:round_0",
        "--pair", "rl:sft", "--pair", "curve:sft", "--pair", "rl:world", "--pair", "r0:sft",
        "--after", "rl:world", "--after", "curve:r0", "--out", str(out),
    ])
    assert rc == 0, capsys.readouterr().err
    res = json.loads(out.read_text())
    # per run: seed_0 +1/8, seed_1 -1/8, seed_2 +6/8 (SFT 0000/0011 against 1111/1111)
    rl = res["pairs"]["rl - sft"]
    assert rl["diff_per_run"] == {"seed_0": 0.125, "seed_1": -0.125, "seed_2": 0.75}
    assert rl["diff"] == pytest.approx(0.25)
    se = [paired_outcome_difference({"a": a, "b": b}, {"a": "0000", "b": "0011"})["se"]
          for a, b in (("1000", "0011"), ("0000", "0001"), ("1111", "1111"))]
    assert rl["se"] == pytest.approx(math.sqrt(sum(x * x for x in se)) / 3)
    assert res["pairs"]["curve - sft"]["diff_per_run"] == {"seed_0": 0.25, "seed_1": 0.0}  # seed_2 has no curve
    assert res["pairs"]["rl - world"]["diff"] == pytest.approx(rl["diff"])  # the world's policy scored as SFT
    assert res["pairs"]["r0 - sft"]["diff"] == 0.0
    # --after: rl started from the world's policies, so its real steps count the world's too
    assert res["arms"]["rl"]["real_env_steps_per_run"] == {"seed_0": 110.0, "seed_1": 130.0, "seed_2": 150.0}
    assert res["arms"]["curve"]["real_env_steps_per_run"] == {"seed_0": 207.0, "seed_1": 227.0}
    assert "real_env_steps_per_run" not in res["arms"]["sft"]
    assert res["arms"]["sft"]["success"] == pytest.approx(0.25)
    assert "rl - sft: +0.250" in capsys.readouterr().out


def test_rl_seed_repeats_are_averaged_episode_by_episode(three_runs: dict[str, Path], capsys) -> None:
    out = three_runs["root"] / "pairs.json"
    rl, repeat = three_runs["rl"], three_runs["repeat"]
    assert paired_arms.main(["--arm", f"rl={rl}", "--arm", f"rl={repeat}", "--arm", f"one={repeat}",
                             "--arm", f"world={three_runs['world']}", "--after", "rl:world", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["arms"]["rl"]["rl_seeds_per_run"] == {"seed_0": [0, 1], "seed_1": [0, 1]}
    # seed_0: RL seed 0 1000/0011, RL seed 1 1100/0011 -> episode means a = [1, .5, 0, 0] against SFT 0000/0011
    d0 = paired_outcome_difference({"a": [1, 0.5, 0, 0], "b": [0, 0, 1, 1]}, {"a": "0000", "b": "0011"})
    d1 = paired_outcome_difference({"a": [0, 0, 0, 0], "b": [0, 0, 0.5, 1]}, {"a": "0000", "b": "0011"})
    got = res["pairs"]["rl - sft"]
    assert got["diff_per_run"] == {"seed_0": pytest.approx(d0["diff"]), "seed_1": pytest.approx(d1["diff"])}
    assert got["se"] == pytest.approx(math.sqrt(d0["se"] ** 2 + d1["se"] ** 2) / 2)
    assert res["arms"]["rl"]["success_per_run"]["seed_0"] == pytest.approx((0.375 + 0.5) / 2)
    # --after matches RL seeds run by run: the world (one repeat per run) adds its steps to both
    assert res["arms"]["rl"]["real_env_steps_per_run"] == {"seed_0": pytest.approx((110 + 11) / 2),
                                                           "seed_1": pytest.approx((130 + 23) / 2)}
    assert res["pairs"]["one - sft"]["diff_per_run"] == {"seed_0": 0.25, "seed_1": 0.0}
    assert paired_arms.main(["--arm", f"rl={repeat}", "--arm", f"rl={repeat}"]) == 2
    assert "with RL seed 1 comes twice" in capsys.readouterr().err
    short = _result(three_runs["root"] / "short.json", [three_runs["root"] / "seed_0"],
                    [{"outcomes": {"a": "11", "b": "00"}}], rl_seed=2)
    assert paired_arms.main(["--arm", f"rl={rl}", "--arm", f"rl={short}"]) == 2
    assert "other tasks or episode counts" in capsys.readouterr().err


def test_bad_arms_are_one_line_errors(three_runs: dict[str, Path], capsys) -> None:
    rl, world = three_runs["rl"], three_runs["world"]
    cases = [
        ([f"--arm=rl={rl}", f"--arm=rl={rl}"], "comes twice"),
        ([f"--arm=rl={rl}:variants.nope"], "no arm 'variants.nope'"),
        ([f"--arm=rl={rl}@3"], "curve points, not @3"),
        ([f"--arm=rl={rl}@x"], "is not an index"),
        ([f"--arm=rl={three_runs['root'] / 'missing.json'}"], "no such result file"),
        ([f"--arm=rl={rl}", "--arm=x=stage:round_9"], "no finished stage 'round_9'"),
        ([f"--arm=rl={rl}", "--pair=rl:nope"], "among the arms"),
        (["--arm=just-a-label"], "expected LABEL="),
        ([f"--arm=a={rl}@0", f"--arm=b={world}", "--pair=a:b"], None),  # seed_0 shared: fine
    ]
    for argv, msg in cases:
        rc = paired_arms.main(argv)
        err = capsys.readouterr().err.strip()
        if msg is None:
            assert rc == 0, err
        else:
            assert rc == 2 and msg in err and "\n" not in err, (argv, err)
    (three_runs["root"] / "broken.json").write_text("{")
    assert paired_arms.main([f"--arm=rl={three_runs['root'] / 'broken.json'}"]) == 2
    assert "not a JSON result" in capsys.readouterr().err


def test_stage_arms_from_given_runs_and_an_ablations_sub_run(three_runs: dict[str, Path], capsys) -> None:
    root = three_runs["root"]
    runs = [root / f"seed_{s}" for s in range(3)]
    for i, run in enumerate(runs):  # the ablation kept inside each run folder, evaluated on the same starts
        (run / "ablation_x" / "stages").mkdir(parents=True)
        (run / "ablation_x" / "stages" / "round_0.json").write_text(
            json.dumps({"eval": {"outcomes": {"a": "1000" if i == 0 else "0000", "b": "0011"}}}))
    out = root / "pairs.json"
    assert paired_arms.main(["--runs", *map(str, runs), "--arm", "x=stage:ablation_x/round_0",
                             "--arm", "r0=stage:round_0", "--pair", "x:r0", "--out", str(out)]) == 0
    got = json.loads(out.read_text())["pairs"]["x - r0"]
    assert got["diff_per_run"] == {"seed_0": 0.125, "seed_1": 0.0, "seed_2": 0.0}
    assert paired_arms.main(["--arm", "x=stage:round_0"]) == 2  # no run folders to read it from
    assert "give --runs" in capsys.readouterr().err
    assert paired_arms.main(["--runs", str(runs[0]), "--arm", "x=stage:ablation_y/round_0"]) == 2
    assert "ablation_y/stages/round_0.json" in capsys.readouterr().err


def test_branch_runs_pair_with_their_parent_line_on_its_starts(three_runs: dict[str, Path], capsys) -> None:
    root = three_runs["root"]
    parents = [root / f"seed_{s}" for s in range(2)]
    branches = []
    for i, parent in enumerate(parents):  # a copy of the parent up to round 0, round 1 run again with other settings
        (parent / "stages" / "round_1.json").write_text(json.dumps({"eval": {"outcomes": {"a": "1000", "b": "0011"}},
                                                                    "real_env_steps": 40}))
        b = _run(root / "branches", f"seed_{i}", {"a": "0000", "b": "0011"})
        (b / "stages" / "round_1.json").write_text(json.dumps({"eval": {"outcomes": {"a": "1100", "b": "0111"}},
                                                               "real_env_steps": 30 + i}))
        branches.append(b)
    flags = [f"--branch=pool={b}:{p}" for b, p in zip(branches, parents, strict=True)]
    out = root / "pairs.json"
    assert paired_arms.main([*flags, "--arm", "r1=stage:round_1", "--arm", "r1pool=branch:pool:round_1",
                             "--arm", "r0=branch:pool:round_0", "--pair", "r1pool:r1", "--pair", "r1pool:sft",
                             "--out", str(out)]) == 0, capsys.readouterr().err
    res = json.loads(out.read_text())
    # each branch sits under its parent's run: seed_0 1100/0111 - 1000/0011 = +2/8 on the parent's starts
    assert res["pairs"]["r1pool - r1"]["diff_per_run"] == {"seed_0": 0.25, "seed_1": 0.25}
    assert res["pairs"]["r1pool - sft"]["diff"] == pytest.approx(0.375)
    assert res["arms"]["r1pool"]["real_env_steps_per_run"] == {"seed_0": 30.0, "seed_1": 31.0}
    assert res["arms"]["r0"]["sources"] == ["branch:pool:round_0"]
    assert set(res["arms"]["sft"]["success_per_run"]) == {"seed_0", "seed_1"}  # the parents' own SFT
    other = _run(root / "other", "seed_0", {"a": "1111", "b": "0011"})  # other starts or another SFT policy
    cases = [
        ([f"--branch=pool={other}:{parents[0]}", "--arm=x=stage:round_0"], "is not a branch of"),
        ([f"--branch=pool={branches[0]}", "--arm=x=stage:round_0"], "expected GROUP=BRANCH_RUN:PARENT_RUN"),
        ([*flags, "--arm=x=branch:nope:round_1"], "among the --branch groups ['pool']"),
        ([*flags, "--arm=x=branch:pool:round_7"], "no finished stage 'round_7'"),
        ([*flags, f"--branch=pool={branches[1]}:{parents[0]}", "--arm=x=stage:round_0"], "already has a branch of"),
    ]
    for argv, msg in cases:
        assert paired_arms.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert msg in err and "\n" not in err, (argv, err)


def _fixed_starts_result(path: Path, runs: list[str], rl_seed: int, pool: dict[str, list[str]],
                         held: dict[str, list[dict[str, str]]], steps: dict[str, float]) -> Path:
    """A benchmarks.fixed_starts result: per run, its pool (tasks a, b, a, b) outcomes and held-out outcomes."""
    per_run = {Path(r).name: {"run": r, "rl_seed": rl_seed, "pool_task_ids": ["a", "b", "a", "b"],
                              "pool_outcomes": {k: v[i] for k, v in pool.items()},
                              "pool_success": {}, "held_out": {k: {"outcomes": v[i]} for k, v in held.items()},
                              "real_env_steps": steps}
               for i, r in enumerate(runs)}
    path.write_text(json.dumps({"runs": per_run, "rl_seed": rl_seed, "pool_success": {}}))
    return path


def test_fixed_starts_pools_are_units_of_their_own_and_held_out_repeats_average(tmp_path: Path, monkeypatch,
                                                                                capsys) -> None:
    monkeypatch.chdir(tmp_path)
    runs = ["gone/seed_0", "gone/seed_1"]  # folders that no longer exist: the files carry their own SFT
    held_sft = [{"a": "00", "b": "01"}, {"a": "10", "b": "00"}]
    f0 = _fixed_starts_result(tmp_path / "fs.json", runs, 0,
                              {"sft": ["0010", "0000"], "sm_warm_2": ["1011", "0100"]},
                              {"sft": held_sft, "sm_warm_2": [{"a": "11", "b": "01"}, {"a": "10", "b": "00"}]},
                              {"sm_warm_2": 50.0})
    f1 = _fixed_starts_result(tmp_path / "fs_rlseed1.json", runs, 1,
                              {"sft": ["1000", "0001"], "sm_warm_2": ["1000", "0001"]},
                              {"sft": held_sft, "sm_warm_2": [{"a": "01", "b": "01"}, {"a": "10", "b": "00"}]},
                              {"sm_warm_2": 70.0})
    assert paired_arms.main(["--list", str(f0)]) == 0
    listed = capsys.readouterr().out
    assert "pool.sm_warm_2" in listed and "held_out.sft" in listed and "gone/seed_0" in listed
    out = tmp_path / "pairs.json"
    assert paired_arms.main(["--arm", f"w={f0}:pool.sm_warm_2", "--arm", f"w={f1}:pool.sm_warm_2",
                             "--arm", f"wh={f0}:held_out.sm_warm_2", "--arm", f"wh={f1}:held_out.sm_warm_2",
                             "--out", str(out)]) == 0, capsys.readouterr().err
    res = json.loads(out.read_text())
    w = res["pairs"]["w - sft_pool"]  # by default against the pools' SFT; four units: 2 runs x 2 RL seeds
    assert w["diff_per_run"] == {"gone/seed_0#pool_rlseed0": 0.5, "gone/seed_1#pool_rlseed0": 0.25,
                                 "gone/seed_0#pool_rlseed1": 0.0, "gone/seed_1#pool_rlseed1": 0.0}
    # pool order a, b, a, b (task a holds starts 0 and 2): seed_0's 1011 against 0010 is +2 of 4 starts
    assert w["diff"] == pytest.approx((0.5 + 0.25) / 4)
    # held out: the same evaluation starts, so the two RL seeds are repeats averaged episode by episode
    wh = res["pairs"]["wh - sft"]
    d0 = paired_outcome_difference({"a": [0.5, 1], "b": [0, 1]}, held_sft[0])
    assert wh["diff_per_run"] == {"gone/seed_0": pytest.approx(d0["diff"]), "gone/seed_1": 0.0}
    assert res["arms"]["wh"]["rl_seeds_per_run"] == {"gone/seed_0": [0, 1], "gone/seed_1": [0, 1]}
    assert res["arms"]["w"]["real_env_steps_mean"] == pytest.approx(60.0)
    assert paired_arms.main(["--arm", f"w={f0}:pool.sm_warm_2@0"]) == 2
    assert "no learning-curve points" in capsys.readouterr().err
    assert paired_arms.main(["--arm", f"w={f0}:pool.sm_warm_9"]) == 2
    assert "no arm 'pool.sm_warm_9'" in capsys.readouterr().err
