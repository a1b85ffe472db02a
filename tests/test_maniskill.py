"""Contract tests of the ManiSkill3 backend (real SAPIEN simulation in worker processes), and the
config/validation paths of the ManiSkill loop runner and of the merged throughput benchmark.

Tests that run SAPIEN are skipped when the ManiSkill venv is not installed
(``bash .ci/setup_maniskill.sh``); the validation tests need no simulator."""

from __future__ import annotations

import numpy as np
import pytest

import envs.maniskill  # noqa: F401
from envs.base import BadActionError
from envs.registry import UnknownTaskError, list_suites, list_tasks, make_vec, resolve_tasks, task_spec
from envs.subproc_vec import cache_dir
from wmrl.errors import ConfigError, WmrlError

pytestmark = pytest.mark.maniskill

needs_venv = pytest.mark.skipif(
    not (cache_dir() / "venvs" / "maniskill" / "bin" / "python").exists(),
    reason="ManiSkill venv not installed (run .ci/setup_maniskill.sh)",
)


@pytest.fixture(scope="module")
def env():
    e = make_vec("PushCube-v1", num_envs=2, image_size=32, wrist_image=True)
    yield e
    e.close()


def test_registered_tasks():
    assert {"PickCube-v1", "PushCube-v1", "StackCube-v1", "PegInsertionSide-v1"} <= set(list_tasks("maniskill"))


@needs_venv
def test_contract_shapes_reset_mask_and_autoreset(env):
    obs, info = env.reset(seed=[3, 4])
    assert obs["image"].shape == (2, 32, 32, 3) and obs["image"].dtype == np.uint8
    assert obs["wrist_image"].shape == (2, 32, 32, 3) and obs["wrist_image"].dtype == np.uint8
    assert obs["state"].dtype == np.float32 and obs["state"].shape[0] == 2
    assert env.observation_space.contains(obs)
    assert env.instructions == ["push the cube to the red and white target"] * 2
    assert env.metadata["render_size"] == 128  # rendered at 128x128, area-resized to 32x32 like the demos
    assert env.task_ids == ["PushCube-v1"] * 2
    assert info["success"].dtype == bool and info["success"].shape == (2,)
    # seeded resets are reproducible, sub-env by sub-env
    again, _ = env.reset(seed=[3, 99])
    np.testing.assert_allclose(again["state"][0], obs["state"][0], atol=1e-5)
    # stepping moves the arm; images are real renders (not constant)
    a = np.zeros((2, 7), np.float32)
    a[:, 0] = 1.0
    nobs, r, term, trunc, info = env.step(a)
    assert r.shape == (2,) and r.dtype == np.float32 and term.dtype == bool and trunc.dtype == bool
    assert not np.allclose(nobs["state"], again["state"])
    assert nobs["image"].std() > 1.0
    # reset only sub-env 1: sub-env 0 keeps its state
    mask = np.array([False, True])
    robs, rinfo = env.reset(seed=[None, 3], options={"reset_mask": mask})
    np.testing.assert_array_equal(robs["state"][0], nobs["state"][0])
    np.testing.assert_allclose(robs["state"][1], obs["state"][0], atol=1e-5)
    assert list(rinfo["elapsed_steps"]) == [1, 0]


@needs_venv
def test_time_limit_then_next_step_autoreset(env):
    env.reset(seed=0)
    limit = int(env._max_steps[0])
    a = np.zeros((2, 7), np.float32)
    for t in range(limit):
        _, _, term, trunc, info = env.step(a)
        if t < limit - 1:
            assert not trunc.any()
    assert trunc.all() and not term.any()
    _, r, term, trunc, info = env.step(a)  # NEXT_STEP: this step resets instead
    assert list(info["elapsed_steps"]) == [0, 0] and not (term | trunc).any() and (r == 0).all()


@needs_venv
def test_bad_inputs(env):
    with pytest.raises(BadActionError, match=r"expected \(2, 7\)"):
        env.step(np.zeros((2, 6), np.float32))
    bad = np.zeros((2, 7), np.float32)
    bad[1, 3] = np.nan
    with pytest.raises(BadActionError, match=r"action\[1, 3\]=nan"):
        env.step(bad)
    with pytest.raises(UnknownTaskError, match="valid tasks: .*PickCube-v1"):
        make_vec("PickBanana-v1")
    with pytest.raises(WmrlError, match="image_size=8 is out of range"):
        make_vec("PickCube-v1", image_size=8)


@needs_venv
def test_state_only_mode():
    e = make_vec("PickCube-v1", num_envs=1, image_size=None)
    try:
        obs, _ = e.reset(seed=0)
        assert set(obs) == {"state"} and obs["state"].dtype == np.float32
        obs2, *_ = e.step(np.zeros((1, 7), np.float32))
        assert obs2["state"].shape == obs["state"].shape
    finally:
        e.close()


def test_pickcube_mp100_variant():
    spec = task_spec("PickCube-v1-mp100")
    assert spec.backend == "maniskill" and spec.max_episode_steps == 100
    assert spec.kwargs["ms_env_id"] == "PickCube-v1"
    assert spec.kwargs["instruction"] == task_spec("PickCube-v1").kwargs["instruction"]
    assert "PickCube-v1-mp100" not in resolve_tasks("maniskill") and "maniskill" in list_suites()


def test_render_size_and_demo_args_are_checked():
    from envs.maniskill.demos import generate

    with pytest.raises(WmrlError, match="render_size=16 must be an integer in"):
        make_vec("PickCube-v1", image_size=64, render_size=16)
    with pytest.raises(WmrlError, match="unknown ManiSkill task 'PickBanana-v1'; valid: PickCube-v1, .*PickCube-v1-mp100"):
        generate("PickBanana-v1", 2, 64, "/nonexistent")
    with pytest.raises(WmrlError, match="num=0 demos must be an integer >= 1"):
        generate("PickCube-v1", 0, 64, "/nonexistent")


def test_maniskill_lift_config_validation(capsys):
    from benchmarks.maniskill_lift import check_config, main
    from imagination.pipeline import load_run_config

    for name in ("run_maniskill", "run_maniskill_quick"):
        cfg = load_run_config([], name)
        assert check_config(cfg) == ["PickCube-v1-mp100"]
        assert cfg.demos.source == "maniskill_motionplanning" and cfg.world_model["state_dim"] == 29
        assert cfg.rl["algo"] == "grpo" and cfg.rl["score"] == "return"
        assert (cfg.rl["group_size"], cfg.rl["max_chunks"]) == ((4, 4) if name.endswith("quick") else (8, 8))
        # the presets' own rl blocks keep to keys both trainers share, so PPO composes with them
        ppo = load_run_config(["rl=ppo"], name).rl
        assert ppo["algo"] == "ppo" and "group_size" not in ppo and "score" not in ppo
        assert (ppo["iterations"], ppo["minibatch_size"]) == (cfg.rl["iterations"], cfg.rl["minibatch_size"])
    with pytest.raises(WmrlError, match="suite='builtin' must be one ManiSkill task id; valid: .*PickCube-v1-mp100"):
        check_config(load_run_config(["suite=builtin", "real_rl_num_envs=48"], "run_maniskill"))
    with pytest.raises(WmrlError, match="demos.source='expert'; the ManiSkill loop needs"):
        check_config(load_run_config(["demos.source=expert"], "run_maniskill"))
    with pytest.raises(WmrlError, match=r"world_model.state_dim=29 != policy.state_dim=8"):
        check_config(load_run_config(["policy.state_dim=8"], "run_maniskill"))
    with pytest.raises(ConfigError, match="real_rl_num_envs=8: .*6 tasks.*use >= 48"):  # before any work
        load_run_config(["suite=builtin"], "run_maniskill")
    with pytest.raises(ConfigError, match="demos.source='scripted'; expected 'expert' or 'maniskill_motionplanning'"):
        load_run_config(["demos.source=scripted"], "run_maniskill")
    # the CLI fails before any work, with one line
    assert main(["--quick", "--out", "/nonexistent/x.json", "suite=PushCube-v0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: suite='PushCube-v0' must be one ManiSkill task id") and "\n" not in err


def test_sim_throughput_backends_and_skip(monkeypatch, tmp_path):
    from benchmarks import sim_throughput as st

    assert st.parse_backends(None, quick=True) == ["builtin"]
    assert st.parse_backends("maniskill, builtin,maniskill", quick=False) == ["maniskill", "builtin"]
    with pytest.raises(WmrlError, match=r"--backends='builtin,bullet': unknown \['bullet'\]; valid: builtin"):
        st.parse_backends("builtin,bullet", quick=False)
    # an extra backend whose venv is missing is reported as skipped, with how to install it
    monkeypatch.setenv("WMRL_MANISKILL_PYTHON", str(tmp_path / "no-python"))
    assert not st.installed("maniskill") and "maniskill" not in st.parse_backends(None, quick=False)
    res = st.run_all(quick=True, backends=["maniskill"])
    assert "setup_maniskill.sh" in res["backends"]["maniskill"]["skipped"] and "steps_per_s" not in res
    # re-using the built-in section of an earlier result keeps the fields benchmarks.report reads
    old = tmp_path / "old.json"
    old.write_text('{"steps_per_s": {"batched_16": 1200.0}, "ratio_vs_sync_vector_16": 2.5, "pusher_v5_steps_per_s": 300.0}')
    res = st.run_all(quick=True, backends=["builtin", "maniskill"], reuse_builtin=str(old))
    assert res["steps_per_s"]["batched_16"] == 1200.0 and res["ratio_vs_sync_vector_16"] == 2.5
    assert res["backends"]["builtin"]["source"]["reused_from"] == str(old)
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(WmrlError, match="has no built-in figures"):
        st.run_all(True, ["builtin"], reuse_builtin=str(bad))
    # and the extra backends' sections (a machine without their venvs keeps the earlier figures)
    older = tmp_path / "older.json"
    older.write_text('{"backends": {"libero": {"task": "t", "state_only": {"steps_per_second": 36.0}}}}')
    res = st.run_all(quick=True, backends=["maniskill"], reuse_extra=str(older))
    assert res["backends"]["libero"]["state_only"]["steps_per_second"] == 36.0
    assert res["backends"]["libero"]["source"]["reused_from"] == str(older)
    assert "skipped" in res["backends"]["maniskill"]  # measured in this run, not overwritten
    with pytest.raises(WmrlError, match=r"--reuse-extra .* has no maniskill or libero section"):
        st.run_all(True, ["maniskill"], reuse_extra=str(bad))
