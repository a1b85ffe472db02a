"""Contract tests of the LIBERO backend (real robosuite/MuJoCo 3.8 in worker processes) and of
the LeRobot-format LIBERO demo loader.

The env tests are skipped when the LIBERO venv is not installed (``bash .ci/setup_libero.sh``);
the loader test needs only the core venv (lerobot)."""

from __future__ import annotations

import numpy as np
import pytest

import envs.libero  # noqa: F401
from envs.registry import UnknownTaskError, list_suites, list_tasks, make_vec, resolve_tasks
from envs.subproc_vec import cache_dir
from wmrl.errors import WmrlError

pytestmark = pytest.mark.libero
needs_venv = pytest.mark.skipif(
    not (cache_dir() / "venvs" / "libero" / "bin" / "python").exists(),
    reason="LIBERO venv not installed (run .ci/setup_libero.sh)",
)


def test_registration_is_light_and_complete():
    assert {"libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90"} <= set(list_suites("libero"))
    sizes = {s: len(resolve_tasks(s)) for s in ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")}
    assert sizes == {"libero_spatial": 10, "libero_object": 10, "libero_goal": 10, "libero_10": 10, "libero_90": 90}
    assert len(list_tasks("libero")) == 130
    with pytest.raises(UnknownTaskError, match="valid suites: .*libero_goal"):
        resolve_tasks("libero_100x")


@pytest.fixture(scope="module")
def env():
    e = make_vec("libero_goal.open_the_middle_drawer_of_the_cabinet", num_envs=2, image_size=32, reflections=False)
    yield e
    e.close()


@needs_venv
def test_contract_and_fixed_init_states(env):
    obs, info = env.reset()
    assert obs["image"].shape == (2, 32, 32, 3) and obs["image"].dtype == np.uint8
    assert obs["wrist_image"].shape == (2, 32, 32, 3)
    assert obs["state"].shape == (2, 8) and obs["state"].dtype == np.float32
    assert env.observation_space.contains(obs)
    assert env.instructions == ["open the middle drawer of the cabinet"] * 2
    assert list(info["init_state_id"]) == [0, 1]  # two sub-envs of one task cover init states 0, 1, 2, ...
    assert info["success"].shape == (2,) and info["success"].dtype == bool
    # an explicit init state reproduces the same start
    r1, i1 = env.reset(options={"env_options": [{"init_state_id": 5}, {"init_state_id": 5}]})
    np.testing.assert_allclose(r1["state"][0], r1["state"][1], atol=1e-5)
    assert list(i1["init_state_id"]) == [5, 5]
    a = np.zeros((2, 7), np.float32)
    a[:, 2] = 1.0  # move up
    nobs, r, term, trunc, info = env.step(a)
    assert nobs["state"][0, 2] > r1["state"][0, 2]
    assert r.dtype == np.float32 and not term.any() and not trunc.any()
    # reset only sub-env 0 to init state 7
    mask = np.array([True, False])
    robs, rinfo = env.reset(options={"reset_mask": mask, "env_options": [{"init_state_id": 7}, None]})
    np.testing.assert_array_equal(robs["state"][1], nobs["state"][1])
    assert list(rinfo["init_state_id"]) == [7, 5] and list(rinfo["elapsed_steps"]) == [0, 1]


@needs_venv
def test_bad_inputs(env):
    from envs.base import BadActionError

    with pytest.raises(BadActionError, match=r"expected \(2, 7\)"):
        env.step(np.zeros((1, 7), np.float32))
    with pytest.raises(WmrlError, match="init_state_id=77 is out of range"):
        env.reset(options={"env_options": [{"init_state_id": 77}, None]})
    with pytest.raises(WmrlError, match="image_size=300 is out of range"):
        make_vec("libero_goal", image_size=300)
