"""benchmarks.cube_turns: the turn of a cube modulo its symmetries, the pool played with the cubes' orientations,
and bad input as one line before any work."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from benchmarks.cube_turns import (
    branch_errors,
    cube_symmetries,
    episode_turns,
    main,
    per_task,
    play_pool_with_orientations,
    turn_deg,
)


def _quat(axis: str, deg: float) -> np.ndarray:
    """(w, x, y, z) of a turn of ``deg`` degrees about world axis ``axis``."""
    h = math.radians(deg) / 2
    v = np.zeros(3)
    v["xyz".index(axis)] = math.sin(h)
    return np.array([math.cos(h), *v])


def _compose(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The quaternion product a * b (w, x, y, z)."""
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])


def test_a_turn_is_read_modulo_the_cubes_symmetries_from_its_start_orientation():
    g = cube_symmetries()
    assert g.shape == (24, 3, 3) and np.allclose(np.linalg.det(g), 1.0)
    start = _quat("z", 10.0)  # turns are read from the start, whatever it is
    seq = [start] + [_compose(start, _quat("z", d)) for d in (30, 45, 60, 90, 180)]
    seq.append(_compose(start, _compose(_quat("x", 90), _quat("y", 20))))  # a quarter turn over, then 20 deg
    seq.append(3.0 * _compose(start, _quat("y", 25)))  # unnormalised
    np.testing.assert_allclose(turn_deg(np.stack(seq)), [0, 30, 45, 30, 0, 0, 20, 25], atol=1e-6)


def test_the_pool_is_played_with_the_cubes_orientations_beside_the_environment_state():
    """play_pool_with_orientations records the same episodes as fixed_starts.play_pool (mean action, seeded
    starts), its env states extended by the three cubes' unit quaternions; every episode gets a turn."""
    from benchmarks.fixed_starts import play_pool, pool_starts
    from policies.vla import VLAConfig, VLAPolicy

    torch.manual_seed(0)
    policy = VLAPolicy(VLAConfig(image_size=32, channels=(8, 8, 8), hidden_dim=32, chunk_size=3))
    task_ids, seeds = pool_starts(["PushCube-v0", "StackCube-v0"], 2, 3)
    traj, stats = play_pool_with_orientations(policy, task_ids, seeds, {"image_size": 32})
    plain, plain_stats = play_pool(policy, task_ids, seeds, {"image_size": 32})
    assert stats == plain_stats and traj.env_states.shape == (plain.num_frames, 25)
    np.testing.assert_array_equal(traj.env_states[:, :13], plain.env_states)
    q = traj.env_states[:, 13:].reshape(-1, 3, 4)
    np.testing.assert_allclose(np.linalg.norm(q, axis=-1), 1.0, atol=1e-5)
    eps = episode_turns(traj)
    assert eps["task_ids"] == plain.episode_task_ids() and eps["success"] == list(plain.episode_success)
    assert all(0.0 <= t <= 63.0 for t in eps["target_turn_deg"] + eps["other_turn_deg"])


def test_a_branch_is_scored_on_the_target_cube_and_members_that_agree_have_no_spread():
    """branch_errors: a model that moves nothing ends each episode's branch where the target cube stood at the
    branch step, so its error is the target's real travel after it; two copies of one model never drift apart,
    and a member that moves the cubes does."""
    from wmrl.data import Trajectories
    from worldmodels.object_dynamics import ObjectDynamics, ObjectDynamicsConfig

    # two episodes of 6 rows; the target (index in column 11) slides 1 cm a step along x from row 2 on
    rows, eps = 6, 2
    env = np.zeros((rows * eps, 25), np.float32)
    env[:, 11] = [1] * rows + [2] * rows
    for e in range(eps):
        target = 1 + e
        for t in range(rows):
            env[e * rows + t, 3 * target] = 0.01 * max(t - 2, 0)
    traj = Trajectories(
        images=np.zeros((rows * eps, 4, 4, 3), np.uint8), wrist_images=None,
        states=np.zeros((rows * eps, 8), np.float32), actions=np.zeros((rows * eps, 7), np.float32),
        rewards=np.zeros(rows * eps, np.float32), successes=np.zeros(rows * eps, bool),
        dones=np.array(([False] * (rows - 1) + [True]) * eps), episode_index=np.repeat(np.arange(eps), rows),
        frame_index=np.tile(np.arange(rows), eps), instructions=[""] * (rows * eps), task_ids=["t"] * (rows * eps),
        fps=20, env_states=env)
    still = ObjectDynamics(ObjectDynamicsConfig(hidden=8, layers=1))
    with torch.no_grad():
        for prm in still.parameters():
            prm.zero_()
    got = branch_errors([still, still], traj, branch_step=2)
    np.testing.assert_allclose(got["branch_error_m"], [0.03, 0.03], atol=1e-6)  # rows 2 -> 5: 3 cm of travel
    assert got["branch_spread_m"] == [0.0, 0.0]
    assert np.isnan(branch_errors([still], traj, branch_step=5)["branch_error_m"]).all()  # nothing left to branch
    torch.manual_seed(0)
    moving = ObjectDynamics(ObjectDynamicsConfig(hidden=8, layers=1))
    assert min(branch_errors([still, moving], traj, branch_step=2)["branch_spread_m"]) > 0.0


def test_per_task_splits_success_by_whether_the_target_turned():
    eps = {"task_ids": ["A", "A", "A", "A", "B"], "success": [True, False, False, True, True],
           "target_turn_deg": [2.0, 40.0, 30.0, 5.0, 1.0], "other_turn_deg": [0.0, 20.0, 0.0, 0.0, 0.0]}
    got = per_task(eps, 15.0)
    assert got["A"] == {"episodes": 4, "success": 0.5, "target_turn_median_deg": 17.5, "turned_share": 0.5,
                        "other_turned_share": 0.25, "success_turned": 0.0, "success_unturned": 1.0}
    assert got["B"]["success_turned"] is None and got["B"]["success_unturned"] == 1.0


@pytest.mark.parametrize(("args", "msg"), [
    (["--policies", "sm_warm_2"], "policy 'sm_warm_2': "),
    (["--threshold-deg", "70"], "--threshold-deg 70.0: expected an angle in (0, 63) degrees"),
    (["--starts-per-task", "0"], "--starts-per-task 0: expected >= 1"),
    (["--branch-step", "0"], "--branch-step 0: expected >= 1 real step before the branch"),
    (["--state-models", "od_boot_100"], "has no state model od_boot_100/"),
    (["--state-models", "fs/{run}/sm_warm_5/state_models/od_boot_100"], "fs/run/sm_warm_5/state_models has no state"),
])
def test_bad_input_is_one_line_before_any_work(tmp_path, capsys, args, msg):
    run = tmp_path / "run"
    (run / "sft" / "policy").mkdir(parents=True)
    out = tmp_path / "t.json"
    assert main(["--runs", str(run), "--policy-work", str(tmp_path / "fs"), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and msg in err and "\n" not in err, err
    assert not out.exists()


def test_held_out_mode_plays_the_runs_evaluation_starts_as_its_held_out_score_does(tmp_path, monkeypatch):
    """run_one(held_out=True) plays each task's evaluation starts (cfg.eval: task i's episode e from seed
    eval.seed + 1000 i + e, benchmarks.policy_eval's) with the cubes' orientations, in the evaluation's batches
    (eval.num_envs): the episodes' outcomes are evaluate_in_sim's, start by start."""
    import dataclasses

    from omegaconf import OmegaConf

    import benchmarks.cube_turns as ct
    from benchmarks.cube_turns import run_one
    from imagination.pipeline import EvalConfig, RunConfig, evaluate_in_sim
    from policies import load_policy
    from policies.vla import VLAConfig, VLAPolicy

    torch.manual_seed(0)
    run = tmp_path / "run"
    VLAPolicy(VLAConfig(image_size=32, channels=(8, 8, 8), hidden_dim=32, chunk_size=3)).save_pretrained(
        run / "sft" / "policy")
    cfg = RunConfig(suite=["PushCube-v0", "LiftCube-v0"], image_size=32,
                    eval=EvalConfig(episodes_per_task=3, num_envs=2))
    OmegaConf.save(OmegaConf.create(dataclasses.asdict(cfg)), run / "config.yaml")
    played, play = [], ct.play_pool_with_orientations
    monkeypatch.setattr(ct, "play_pool_with_orientations",
                        lambda policy, t, s, kw: played.append((t, s)) or play(policy, t, s, kw))
    got = run_one(run, tmp_path / "fs", "seed_0", ["sft"], 1, 0, 15.0, held_out=True)
    first = cfg.eval.seed
    assert played == [(["PushCube-v0"] * 2, [first, first + 1]), (["PushCube-v0"], [first + 2]),  # eval's batches
                      (["LiftCube-v0"] * 2, [first + 1000, first + 1001]), (["LiftCube-v0"], [first + 1002])]
    ev = evaluate_in_sim(load_policy(run / "sft" / "policy"), cfg)
    eps = got["policies"]["sft"]["episodes"]
    assert got["starts_of"] == "held_out" and got["starts"] == 6
    assert eps["task_ids"] == ["PushCube-v0"] * 3 + ["LiftCube-v0"] * 3
    assert "".join(str(int(x)) for x in eps["success"]) == ev["outcomes"]["PushCube-v0"] + ev["outcomes"]["LiftCube-v0"]
    assert got["policies"]["sft"]["success"] == ev["success"]


def test_a_state_model_is_a_run_folder_name_or_a_path_with_the_runs_key(tmp_path):
    from benchmarks.cube_turns import state_model_folder
    from worldmodels.object_dynamics import ObjectDynamics, ObjectDynamicsConfig

    model = ObjectDynamics(ObjectDynamicsConfig(hidden=8, layers=1))
    model.save_pretrained(tmp_path / "run" / "od")
    model.save_pretrained(tmp_path / "fs" / "seed_3" / "line" / "od")
    assert state_model_folder(tmp_path / "run", "seed_3", "od") == tmp_path / "run" / "od"
    assert state_model_folder(tmp_path / "run", "seed_3", f"{tmp_path}/fs/{{run}}/line/od") == (
        tmp_path / "fs" / "seed_3" / "line" / "od")
