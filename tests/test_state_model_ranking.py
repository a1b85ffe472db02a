"""benchmarks.state_model_ranking: policies ranked in the arm-and-object state model's world (drawn by the
simulator) against the real simulator, from the same starts and with the same action noise."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import envs
from benchmarks._split_worlds import StateModelVectorEnv
from benchmarks.state_model_ranking import episode_successes, load_pixel, pixel_readings
from benchmarks.wm_policy_ranking import NoisyPolicy, RandomPolicy, resolved_pairs
from imagination.self_imitation import world_vs_real_on_eval_starts
from policies.vla.modeling_vla import VLAConfig, VLAPolicy
from wmrl.errors import WmrlError
from worldmodels.object_dynamics import ObjectDynamics, ObjectDynamicsConfig

TASKS = ["LiftCube-v0", "PushCube-v0"]


def _lift(cube_dz_cm: float) -> ObjectDynamics:
    """An arm-and-object model whose arm stays put and whose cubes rise ``cube_dz_cm`` cm every step."""
    m = ObjectDynamics(ObjectDynamicsConfig(arm=True, hidden=8, layers=1))
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        m.mlp[-1].bias[2] = cube_dz_cm
    return m.eval()


class Recorder:
    """Wraps a ranking policy and keeps every action chunk it returns (N, K, 7)."""

    def __init__(self, policy):
        self.policy, self.chunk_size, self.chunks = policy, policy.chunk_size, []

    def act(self, obs, instructions, deterministic=False):
        out = self.policy.act(obs, instructions, deterministic=deterministic)
        self.chunks.append(np.asarray(out.actions).copy())
        return out


def _real(task: str, n: int):
    return envs.make_vec(task, n, autoreset_mode="same_step", max_episode_steps=8)


def test_state_world_success_is_the_task_rule_on_the_models_states_task_major():
    """Cubes that rise 3 cm a step meet LiftCube's rule, never PushCube's; a random policy meets neither
    in the real simulator. Outcomes come task-major, episodes_per_task each."""
    pol = RandomPolicy(chunk_size=4, image_size=64)

    def state(task, n):
        return StateModelVectorEnv(_real(task, n), _lift(3.0))

    s = episode_successes(pol, state, TASKS, 3, seed=5, horizon_chunks=2)
    r = episode_successes(pol, _real, TASKS, 3, seed=5, horizon_chunks=2)
    assert s.tolist() == [True] * 3 + [False] * 3 and not r.any()
    still = episode_successes(pol, lambda t, n: StateModelVectorEnv(_real(t, n), _lift(0.0)), TASKS, 3, 5, 2)
    assert not still.any()
    # the horizon is honoured: at 1.5 cm a step the cube is 6 cm up after one chunk, 12 cm after two
    def slow(task, n):
        return StateModelVectorEnv(_real(task, n), _lift(1.5))

    assert not episode_successes(pol, slow, TASKS[:1], 2, seed=5, horizon_chunks=1).any()
    assert episode_successes(pol, slow, TASKS[:1], 2, seed=5, horizon_chunks=2).all()


@pytest.mark.parametrize("make", [lambda p: RandomPolicy(4, 64, seed=3), lambda p: NoisyPolicy(p, 0.5, seed=3)])
def test_noisy_policies_replay_one_noise_stream_per_task_in_every_world(make):
    """A noisy or random policy is reseeded per task and world, so both worlds (and a second call) see the
    same action noise; the streams of two tasks differ."""
    class Mean:  # a fixed mean action under NoisyPolicy: zeros
        chunk_size, action_dim, image_size, config = 4, 7, 64, None

        def act(self, obs, instructions, deterministic=False):
            from types import SimpleNamespace

            return SimpleNamespace(actions=torch.zeros(len(instructions), 4, 7))

    runs = []
    for make_env in (_real, lambda t, n: StateModelVectorEnv(_real(t, n), _lift(0.0)), _real):
        rec = Recorder(make(Mean()))
        episode_successes(rec, make_env, TASKS, 2, seed=11, horizon_chunks=2)
        runs.append(np.stack(rec.chunks))  # (tasks x chunks, N, K, 7)
    np.testing.assert_array_equal(runs[0], runs[1])
    np.testing.assert_array_equal(runs[0], runs[2])
    assert not np.allclose(runs[0][0], runs[0][2])  # task 0's first chunk against task 1's
    assert np.abs(runs[0]).max() > 0.05


def test_pixel_readings_score_each_reading_on_the_same_pairs_and_check_the_real_outcomes(tmp_path):
    e = 40
    real = {"good": np.arange(e) < 30, "mid": np.arange(e) < 15, "bad": np.zeros(e, bool)}
    pairs = resolved_pairs(real)
    assert set(pairs) == {("good", "mid"), ("good", "bad"), ("mid", "bad")}
    pixel = {"seed": 7, "episodes_per_task": 20, "policies": {
        "good": {"imagined_success": 0.8, "imagined_success_gated": 0.7, "real_success_retest": 0.7},
        "mid": {"imagined_success": 0.9, "imagined_success_gated": 0.5, "real_success_retest": 0.4},
        "bad": {"imagined_success": 0.1, "imagined_success_gated": 0.1, "real_success_retest": 0.0}}}
    own = {"good": real["good"].copy(), "mid": real["mid"].copy(), "bad": np.ones(e, bool)}
    out = pixel_readings(pixel, real, own, pairs)
    assert out["readings"]["gated"]["spearman"] == pytest.approx(1.0)
    assert out["readings"]["plain"]["pair_accuracy"] == pytest.approx(2 / 3)  # mid above good
    assert out["readings"]["plain"]["spearman"] == pytest.approx(0.5)
    assert "real_retest" not in out["readings"]
    assert out["real_outcomes_match"] == {"good": True, "mid": True, "bad": False}
    # a --policy the pixel ranking never saw is left out of its readings, not of the others
    mine = {**real, "mine": np.ones(e, bool)}
    out = pixel_readings(pixel, mine, own, resolved_pairs(mine))
    assert out["policies"] == ["good", "mid", "bad"]
    assert out["readings"]["plain"]["pair_accuracy"] == pytest.approx(2 / 3)
    # load_pixel: the same starts or a one-line error; the per-episode real outcomes from the .pairs.npz
    f = tmp_path / "rank.json"
    f.write_text(json.dumps(pixel))
    np.savez(tmp_path / "rank.pairs.npz", **{f"{n}/real": v for n, v in real.items()})
    res, got = load_pixel(f, 7, 20)
    assert res == pixel and all((got[n] == real[n]).all() for n in real)
    with pytest.raises(WmrlError, match=r"ranked seed=7, episodes_per_task=20; this run uses seed=8") as ei:
        load_pixel(f, 8, 20)
    assert "\n" not in str(ei.value)
    with pytest.raises(WmrlError, match="not a readable wm_policy_ranking result"):
        load_pixel(tmp_path / "missing.json", 7, 20)
    # --rescore --pixel: the same block added to a finished result from its pairs, no episode run
    from benchmarks.state_model_ranking import main

    done = tmp_path / "state.json"
    done.write_text(json.dumps({"seed": 7, "episodes_per_task": 20, "policies": {n: {} for n in real},
                                "resolved_pairs": {"pairs": [list(x) for x in pairs]}}))
    assert main(["--rescore", "--pixel", str(f), "--out", str(done)]) == 2  # no pairs beside it yet
    np.savez(tmp_path / "state.pairs.npz", **{f"{n}/real": v for n, v in real.items()})
    assert main(["--rescore", "--out", str(done)]) == 2  # no --pixel
    assert main(["--rescore", "--pixel", str(f), "--out", str(done)]) == 0
    block = json.loads(done.read_text())["pixel"]
    want = pixel_readings(pixel, real, got, pairs)
    assert block["file"] == str(f) and block["readings"] == want["readings"]
    assert block["real_outcomes_match"] == {"good": True, "mid": True, "bad": True}


def test_cli_bad_input_is_one_line(tmp_path, capsys):
    from benchmarks.state_model_ranking import main

    out = str(tmp_path / "x.json")
    assert main(["--run-dir", str(tmp_path), "--out", out]) == 2
    assert capsys.readouterr().err.strip() == f"error: --run-dir {tmp_path} is not a wmrl run folder (no stages/); run `wmrl run` first"
    (tmp_path / "stages").mkdir()
    assert main(["--run-dir", str(tmp_path), "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: no state model in {tmp_path}/od_arm; fit it with `python -m worldmodels.object_dynamics")
    assert "\n" not in err
    assert main(["--run-dir", str(tmp_path), "--pixel", str(tmp_path / "none.json"), "--out", out]) == 2
    assert "--pixel" in capsys.readouterr().err and not (tmp_path / "x.json").exists()
    # --policy: a missing folder, or a name the run's own policies use, fails before any work
    ObjectDynamics(ObjectDynamicsConfig(arm=True, hidden=8, layers=1)).save_pretrained(tmp_path / "od_arm", {})
    # --renderer: a folder without a learned renderer fails before any work
    assert main(["--run-dir", str(tmp_path), "--renderer", "od_arm", "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {tmp_path / 'od_arm' / 'config.json'} has kind=None") and "\n" not in err
    assert main(["--run-dir", str(tmp_path), "--policy", "mine", str(tmp_path / "nope"), "--out", out]) == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'nope'} has no config.json; expected a policy folder written by save_pretrained"
    policy = tmp_path / "pol"
    VLAPolicy(VLAConfig(image_size=64, channels=(8, 8, 8), hidden_dim=32, chunk_size=2)).save_pretrained(policy)
    for name in ("sft", "sft_noise_0.3"):
        assert main(["--run-dir", str(tmp_path), "--policy", name, str(policy), "--out", out]) == 2
        assert capsys.readouterr().err.strip() == f"error: --policy {name}: the run's own policies use that name; choose another"
    small = tmp_path / "pol32"
    VLAPolicy(VLAConfig(image_size=32, channels=(8, 8, 8), hidden_dim=32, chunk_size=2)).save_pretrained(small)
    assert main(["--run-dir", str(tmp_path), "--policy", "mine", str(small), "--out", out]) == 2
    assert capsys.readouterr().err.strip() == ("error: --policy mine: image_size=32, action_dim=7; the run's env has "
                                               "image_size=64, action_dim=7")
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "config.yaml").exists()


def test_world_vs_real_sets_each_start_of_the_world_against_the_evaluations_outcome():
    """Cubes that rise 3 cm a step meet LiftCube's rule at every start and PushCube's at none: against real
    outcomes 010 and 110 the world over-rates LiftCube by 2/3 with two false successes (precision 1/3) and
    under-rates PushCube by 2/3 with two missed ones (no imagined success: no precision); pooled the same."""
    entering = {"eval": {"per_task": {"LiftCube-v0": 1 / 3, "PushCube-v0": 2 / 3},
                         "outcomes": {"LiftCube-v0": "010", "PushCube-v0": "110"}}}
    res = world_vs_real_on_eval_starts(RandomPolicy(chunk_size=4, image_size=64), _lift(3.0), TASKS, entering,
                                       eval_seed=5, env_kwargs={"max_episode_steps": 8})
    lift, push, both = res["LiftCube-v0"], res["PushCube-v0"], res["all"]
    assert (lift["imagined"], lift["real"], lift["false_successes"], lift["missed_successes"]) == (1.0, 1 / 3, 2, 0)
    assert lift["overrating"] == pytest.approx(2 / 3) and lift["precision"] == pytest.approx(1 / 3)
    assert lift["overrating_se"] == pytest.approx(0.3333, abs=1e-3)  # d = (1, 0, 1): sd 0.577 / sqrt(3)
    assert (push["imagined"], push["missed_successes"], push["precision"]) == (0.0, 2, None)
    assert push["overrating"] == pytest.approx(-2 / 3)
    assert (lift["imagined_outcomes"], push["imagined_outcomes"]) == ("111", "000") and "imagined_outcomes" not in both
    assert both["episodes"] == 6 and both["overrating"] == pytest.approx(0.0) and both["precision"] == pytest.approx(1 / 3)
    # an evaluation without outcomes episode by episode, or none at all, gives nothing to set against
    assert world_vs_real_on_eval_starts(None, None, TASKS, {"per_task": {}}, 5, {}) == {}
    assert world_vs_real_on_eval_starts(None, None, TASKS, None, 5, {}) == {}
    with pytest.raises(WmrlError, match=r"cover \[2, 3\] episodes per task"):
        world_vs_real_on_eval_starts(None, None, TASKS, {"outcomes": {"LiftCube-v0": "01", "PushCube-v0": "110"}},
                                     5, {})
