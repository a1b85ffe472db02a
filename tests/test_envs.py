"""Contract tests for every registered built-in task and the batched API."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import envs
from envs.base import BadActionError
from envs.wrappers import ActionChunkWrapper
from wmrl.errors import WmrlError

BUILTIN = envs.list_tasks("mujoco")


def test_builtin_suite_has_six_tasks_over_three_families():
    from envs.tabletop.tasks import TASKS

    assert len(BUILTIN) >= 6
    assert len({TASKS[t].family for t in BUILTIN}) >= 3
    for t in BUILTIN:
        doc = type(TASKS[t]).__doc__
        assert "Task Description" in doc and "Randomizations" in doc and "Success Conditions" in doc


@pytest.mark.parametrize("task", BUILTIN)
def test_vector_contract(task):
    env = envs.make_vec(task, 3, seed=0, wrist_image=True)
    obs, info = env.reset(seed=0)
    assert obs["image"].shape == (3, 64, 64, 3) and obs["image"].dtype == np.uint8
    assert obs["wrist_image"].shape == (3, 64, 64, 3)
    assert obs["state"].shape == (3, 8) and obs["state"].dtype == np.float32
    assert env.observation_space.contains(obs)
    assert len(env.instructions) == 3 and all(isinstance(s, str) and s for s in env.instructions)
    assert env.task_ids == [task] * 3
    obs2, r, te, tr, info = env.step(env.action_space.sample())
    assert r.shape == (3,) and te.shape == (3,) and tr.shape == (3,)
    assert info["success"].dtype == bool and info["success"].shape == (3,)
    env.close()


@pytest.mark.parametrize("task", BUILTIN)
def test_single_env_passes_gymnasium_checker(task):
    from gymnasium.utils.env_checker import check_env

    env = gym.make(f"wmrl/{task}")
    check_env(env.unwrapped, skip_render_check=True)
    env.close()


def test_reset_is_seeded_and_layouts_vary():
    a = envs.make_vec("PushCube-v0", 4, seed=0)
    b = envs.make_vec("PushCube-v0", 4, seed=0)
    oa, _ = a.reset(seed=7)
    ob, _ = b.reset(seed=7)
    np.testing.assert_array_equal(oa["image"], ob["image"])
    assert a.instructions == b.instructions
    # Sub-envs draw different layouts.
    assert len({x.tobytes() for x in oa["image"]}) == 4


def test_reset_subset_keeps_others():
    env = envs.make_vec("builtin", 6, seed=1)
    obs, _ = env.reset(seed=1)
    for _ in range(3):
        obs, *_ = env.step(np.tile([[1.0, 0, 0, 0, 0, 0, 1.0]], (6, 1)).astype(np.float32))
    mask = np.array([True, False, True, False, False, False])
    obs2, _ = env.reset(options={"reset_mask": mask})
    np.testing.assert_array_equal(obs2["state"][~mask], obs["state"][~mask])
    assert not np.allclose(obs2["state"][mask], obs["state"][mask])


def test_mixed_suite_batch_and_next_step_autoreset():
    env = envs.make_vec("builtin", 6, seed=0, max_episode_steps=3)
    assert len(set(env.task_ids)) == 6
    env.reset(seed=0)
    a = np.zeros((6, 7), np.float32)
    for _ in range(2):
        _, _, te, tr, _ = env.step(a)
        assert not tr.any()
    _, _, te, tr, _ = env.step(a)
    assert tr.all()
    _, r, te, tr, _ = env.step(a)  # NEXT_STEP: this step resets
    assert not (te | tr).any() and (r == 0).all()
    assert env.unwrapped._steps.tolist() == [0] * 6


def test_same_step_autoreset_gives_final_obs_and_chunks():
    env = envs.make_vec("LiftCube-v0", 2, seed=0, max_episode_steps=5, autoreset_mode="same_step")
    chunked = ActionChunkWrapper(env, chunk_size=4)
    chunked.reset(seed=0)
    _, r, te, tr, info = chunked.step(np.zeros((2, 4, 7), np.float32))
    assert info["chunk_valid"].all() and not (te | tr).any()
    _, r, te, tr, info = chunked.step(np.zeros((2, 4, 7), np.float32))
    assert tr.all()
    assert info["chunk_valid"][:, 0].all() and not info["chunk_valid"][:, 1:].any()
    assert info["final_obs"]["image"].shape == (2, 64, 64, 3)
    assert info["chunk_frames"].shape == (2, 4, 64, 64, 3)
    with pytest.raises(BadActionError, match="expected \\(2, 4, A\\)"):
        chunked.step(np.zeros((2, 3, 7), np.float32))


def test_step_without_autoreset_keeps_an_ended_episode_for_the_caller():
    """One call with autoreset off: the time limit ends the episodes but nothing resets them (no
    final_obs, the same layouts); the env's own mode is back for the next call."""
    env = envs.make_vec(["PushCube-v0", "LiftCube-v0"], 2, seed=0, max_episode_steps=2, autoreset_mode="same_step")
    env.reset(seed=4)
    layout = (list(env.instructions), env.environment_state().copy())
    env.step(np.zeros((2, 7), np.float32))
    obs, _, te, tr, info = env.step_without_autoreset(np.zeros((2, 7), np.float32))
    assert tr.all() and "final_obs" not in info and env.metadata["autoreset_mode"].name == "SAME_STEP"
    assert env.instructions == layout[0]  # the same scenes: cubes held still where they were, same goals
    np.testing.assert_allclose(env.environment_state(), layout[1], atol=1e-3)
    env.reset(seed=4, options={"reset_mask": np.array([True, True])})
    env.step(np.zeros((2, 7), np.float32))
    _, _, _, tr, info = env.step(np.zeros((2, 7), np.float32))
    assert tr.all() and info["_final_obs"].all()  # the env's own same-step autoreset is back
    env.close()


@pytest.mark.parametrize("task", BUILTIN)
def test_expert_solves_and_noise_degrades(task):
    def rate(noise: float, episodes: int = 16) -> float:
        env = envs.make_vec(task, 8, seed=3, autoreset_mode="same_step")
        ex = envs.make_expert(env, noise=noise, seed=0)
        obs, info = env.reset(seed=3)
        done = succ = 0
        while done < episodes:
            obs, r, te, tr, info = env.step(ex.act(obs, info))
            done += int((te | tr).sum())
            succ += int(te.sum())
        return succ / done

    assert rate(0.0) >= 0.9
    assert rate(1.5) < 0.5


def test_dense_and_sparse_rewards_are_separate():
    sparse = envs.make_vec("PushCube-v0", 2, seed=0)
    dense = envs.make_vec("PushCube-v0", 2, seed=0, reward_type="dense")
    sparse.reset(seed=0)
    dense.reset(seed=0)
    a = np.zeros((2, 7), np.float32)
    _, rs, *_ = sparse.step(a)
    _, rd, *_ = dense.step(a)
    assert (rs == 0).all() and ((rd > 0) & (rd < 1)).all()


def test_bad_inputs_give_one_line_errors():
    with pytest.raises(WmrlError, match="unknown task or suite 'NoSuchTask'.*valid tasks: .*PushCube-v0"):
        envs.make_vec("NoSuchTask", 1)
    with pytest.raises(WmrlError, match="image_size=16 is out of range"):
        envs.make_vec("PushCube-v0", 1, image_size=16)
    env = envs.make_vec("PushCube-v0", 2)
    env.reset(seed=0)
    with pytest.raises(BadActionError, match=r"action has shape \(2, 6\); expected \(2, 7\)"):
        env.step(np.zeros((2, 6), np.float32))
    bad = np.zeros((2, 7), np.float32)
    bad[1, 3] = np.nan
    with pytest.raises(BadActionError, match=r"action\[1, 3\]=nan is not finite"):
        env.step(bad)


def test_image_sizes_and_projection():
    env = envs.make_vec("StackCube-v0", 1, seed=0, image_size=128)
    obs, _ = env.reset(seed=0)
    assert obs["image"].shape == (1, 128, 128, 3)
    s = env.privileged_state()
    cube = s["cube_pos"][0, s["target"][0]]
    col, row = env.project_to_pixels(cube).round().astype(int)
    pixel = obs["image"][0, row, col].astype(int)
    assert pixel.max() - pixel.min() > 80  # a saturated cube colour, not the grey table


def test_supersample_is_the_box_average_of_a_larger_render():
    """supersample=2 at 32 px: the 64 px frames of the same states, every 2x2 block averaged;
    both cameras, after steps; the same physics; edges get intermediate shades."""
    kw = dict(seed=3, wrist_image=True)
    big = envs.make_vec(["PushCube-v0", "PlaceInBowl-v0"], 2, image_size=64, **kw)
    aa = envs.make_vec(["PushCube-v0", "PlaceInBowl-v0"], 2, image_size=32, supersample=2, **kw)
    plain = envs.make_vec(["PushCube-v0", "PlaceInBowl-v0"], 2, image_size=32, **kw)
    outs = [e.reset(seed=3)[0] for e in (big, aa, plain)]
    act = np.zeros((2, 7), np.float32)
    act[:, :3] = [0.5, -0.3, -0.6]
    for _ in range(3):
        outs = [e.step(act)[0] for e in (big, aa, plain)]
    o_big, o_aa, o_plain = outs
    np.testing.assert_array_equal(o_aa["state"], o_big["state"])
    for key in ("image", "wrist_image"):
        want = o_big[key].reshape(2, 32, 2, 32, 2, 3).mean(axis=(2, 4)).round()
        assert o_aa[key].shape == (2, 32, 32, 3)
        np.testing.assert_array_equal(o_aa[key], want.astype(np.uint8))
    assert len(np.unique(o_aa["image"].reshape(-1, 3), axis=0)) > len(np.unique(o_plain["image"].reshape(-1, 3), axis=0))
    with pytest.raises(WmrlError, match="supersample=0; expected an integer in"):
        envs.make_vec("PushCube-v0", 1, supersample=0)


def test_shadows_mark_the_grippers_table_position_and_leave_physics_alone():
    """shadows=True: the same states and physics; the pixels the shadow darkens sit under the
    gripper's table-plane position and stay there while the gripper rises ~10 px in the image."""
    kw = dict(seed=3)
    lit = envs.make_vec(["PushCube-v0"] * 2, 2, shadows=True, **kw)
    plain = envs.make_vec(["PushCube-v0"] * 2, 2, **kw)
    o_lit, o_plain = lit.reset(seed=3)[0], plain.reset(seed=3)[0]
    up = np.zeros((2, 7), np.float32)
    up[:, 2] = 0.8
    centroids, grippers = [], []
    for _ in range(3):
        np.testing.assert_array_equal(o_lit["state"], o_plain["state"])
        darker = o_plain["image"].astype(int).sum(-1) - o_lit["image"].astype(int).sum(-1) > 30
        tcp = o_lit["state"][:, :3].astype(np.float64)
        for i in range(2):
            rows, cols = np.nonzero(darker[i])
            assert len(rows) > 10
            on_table = lit.project_to_pixels(np.array([tcp[i, 0], tcp[i, 1], 0.0]))
            assert np.abs(np.array([cols.mean(), rows.mean()]) - on_table).max() < 7
        centroids.append([np.nonzero(d)[0].mean() for d in darker])
        grippers.append([lit.project_to_pixels(t)[1] for t in tcp])
        o_lit, o_plain = lit.step(up)[0], plain.step(up)[0]
    assert np.ptp(np.array(grippers), axis=0).min() > 8  # the gripper moved up the image ...
    assert np.ptp(np.array(centroids), axis=0).max() < 3  # ... its shadow did not
    with pytest.raises(WmrlError, match="shadows='yes'; expected True or False"):
        envs.make_vec("PushCube-v0", 1, shadows="yes")


def test_closing_one_env_leaves_another_envs_frames_intact():
    """MjrContext.free deletes GL objects in the *current* context: closing (or dropping) one env
    after another was made used to free the live one's framebuffer, so it rendered black."""
    first = envs.make_vec("PushCube-v0", 1, seed=0)
    want = first.reset(seed=0)[0]["image"]
    second = envs.make_vec("PushCube-v0", 1, seed=0)
    first.close()
    del first
    got = second.reset(seed=0)[0]["image"]
    assert got.mean() > 50
    np.testing.assert_array_equal(got, want)


def test_bad_rendering_backend_is_a_one_line_cli_error(tmp_path):
    import os
    import subprocess
    import sys

    env = dict(os.environ, MUJOCO_GL="bogus")
    out = tmp_path / "d"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "wmrl.cli",
            "collect",
            "--task",
            "LiftCube-v0",
            "--episodes",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 2
    assert (
        r.stderr.strip()
        == "error: MUJOCO_GL='bogus' is not a rendering backend; expected one of egl, osmesa, glfw"
    )
    assert not out.exists()


def test_gymnasium_make_vec_entry_point():
    env = gym.make_vec("wmrl/PushCube-v0", num_envs=3, vectorization_mode="vector_entry_point")
    obs, _ = env.reset(seed=0)
    assert obs["image"].shape == (3, 64, 64, 3) and len(env.unwrapped.instructions) == 3
    env.close()


def test_full_episode_chunks_cover_the_longest_episode():
    import math

    import envs

    tasks = envs.resolve_tasks("PushCube-v0") + envs.resolve_tasks("StackCube-v0")
    longest = max(envs.task_spec(t).max_episode_steps for t in tasks)
    for k in (1, 3, 4):
        assert envs.full_episode_chunks(tasks, k) == math.ceil(longest / k)
    with pytest.raises(ValueError, match="chunk_size=0"):
        envs.full_episode_chunks(tasks, 0)


def test_render_states_draws_given_states_and_leaves_the_env_as_it_is():
    """TabletopVectorEnv.render_states: the real states give back the real frame exactly; a cube
    moved 6 cm draws elsewhere (and where its projection says); the env's own state and last frame
    do not change; wrong shapes and NaN are one-line errors."""
    env = envs.make_vec(["PushCube-v0", "StackCube-v0"], 2, seed=0, image_size=64)
    obs, _ = env.reset(seed=5)
    act = np.zeros((2, 7), np.float32)
    act[:, :3] = [0.4, -0.2, -0.5]
    for _ in range(3):
        obs, *_ = env.step(act)
    s = env.privileged_state()
    qpos = np.array(env._qpos, copy=True)
    again = env.render_states(obs["state"], s["cube_pos"])
    # the right finger mirrors the left one exactly here, in the simulator up to a soft constraint's lag:
    # a few pixels at the gripper may differ, nothing else
    off = np.argwhere(np.abs(again.astype(int) - obs["image"]).max(-1) > 0)  # (M, 3) env, row, col
    tcp_px = env.project_to_pixels(s["tcp"])  # (2, 2) col, row
    assert len(off) < 20
    assert all(np.hypot(*(tcp_px[i] - (c, r))) < 10 for i, r, c in off)
    moved = s["cube_pos"].copy()
    t = s["target"][0]
    moved[0, t, 1] += 0.06  # away from the gripper, which would hide it
    frames = env.render_states(obs["state"], moved)
    np.testing.assert_array_equal(frames[1], obs["image"][1])
    assert np.abs(frames[0].astype(int) - obs["image"][0]).max() > 80
    col, row = env.project_to_pixels(moved[0, t]).round().astype(int)
    pixel = frames[0, row, col].astype(int)
    assert pixel.max() - pixel.min() > 80  # the cube's saturated colour at its new place
    np.testing.assert_array_equal(env._qpos, qpos)
    np.testing.assert_array_equal(env.render(), obs["image"])
    with pytest.raises(WmrlError, match=r"render_states got proprio \(2, 7\).*expected \(2, 8\) and \(2, 3, 3\)"):
        env.render_states(obs["state"][:, :7], moved)
    bad = moved.copy()
    bad[1, 0, 0] = np.nan
    with pytest.raises(WmrlError, match="NaN/Inf"):
        env.render_states(obs["state"], bad)
    env.close()
