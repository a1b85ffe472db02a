"""Contract tests of the ManiSkill3 backend (real SAPIEN simulation in worker processes).

Skipped when the ManiSkill venv is not installed (``bash .ci/setup_maniskill.sh``)."""

from __future__ import annotations

import numpy as np
import pytest

from envs.subproc_vec import cache_dir

pytestmark = pytest.mark.maniskill

if not (cache_dir() / "venvs" / "maniskill" / "bin" / "python").exists():
    pytest.skip("ManiSkill venv not installed (run .ci/setup_maniskill.sh)", allow_module_level=True)

import envs.maniskill  # noqa: E402,F401
from envs.base import BadActionError  # noqa: E402
from envs.registry import UnknownTaskError, list_tasks, make_vec  # noqa: E402
from wmrl.errors import WmrlError  # noqa: E402


@pytest.fixture(scope="module")
def env():
    e = make_vec("PushCube-v1", num_envs=2, image_size=32, wrist_image=True)
    yield e
    e.close()


def test_registered_tasks():
    assert {"PickCube-v1", "PushCube-v1", "StackCube-v1", "PegInsertionSide-v1"} <= set(list_tasks("maniskill"))


def test_contract_shapes_reset_mask_and_autoreset(env):
    obs, info = env.reset(seed=[3, 4])
    assert obs["image"].shape == (2, 32, 32, 3) and obs["image"].dtype == np.uint8
    assert obs["wrist_image"].shape == (2, 32, 32, 3) and obs["wrist_image"].dtype == np.uint8
    assert obs["state"].dtype == np.float32 and obs["state"].shape[0] == 2
    assert env.observation_space.contains(obs)
    assert env.instructions == ["push the cube to the red and white target"] * 2
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


def test_state_only_mode():
    e = make_vec("PickCube-v1", num_envs=1, image_size=None)
    try:
        obs, _ = e.reset(seed=0)
        assert set(obs) == {"state"} and obs["state"].dtype == np.float32
        obs2, *_ = e.step(np.zeros((1, 7), np.float32))
        assert obs2["state"].shape == obs["state"].shape
    finally:
        e.close()
