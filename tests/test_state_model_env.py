"""StateModelVectorEnv (benchmarks._split_worlds): the real env's VectorEnv contract with an arm-and-object
state model's dynamics drawn by the simulator; its reward is the task's rule on the predicted states."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import envs
from benchmarks._split_worlds import StateModelVectorEnv, check_ensemble
from envs.base import BadActionError
from envs.wrappers import ActionChunkWrapper
from wmrl.errors import NonFiniteError, WmrlError
from worldmodels.object_dynamics import ObjectDynamics, ObjectDynamicsConfig

TASKS = ["PushCube-v0", "LiftCube-v0", "StackCube-v0"]


def _model(seed: int = 0, scale: float = 0.05) -> ObjectDynamics:
    """A small arm-and-object model, seeded, its outputs scaled down to centimetre steps: it moves the
    arm and the cubes in an action-dependent way (untrained, but a real model)."""
    torch.manual_seed(seed)
    m = ObjectDynamics(ObjectDynamicsConfig(arm=True, hidden=16, layers=1))
    with torch.no_grad():
        for net in (m.mlp, m.arm):
            net[-1].weight.mul_(scale)
            net[-1].bias.mul_(scale)
    return m.eval()


def _drift(tcp_dx: float = 0.0, cube_dz_cm: float = 0.0) -> ObjectDynamics:
    """A model whose tcp moves ``tcp_dx`` metres along x and whose cubes rise ``cube_dz_cm`` cm every step."""
    m = ObjectDynamics(ObjectDynamicsConfig(arm=True, hidden=8, layers=1))
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        m.arm[-1].bias[0] = tcp_dx
        m.mlp[-1].bias[2] = cube_dz_cm
    return m.eval()


def _env(model: ObjectDynamics, n: int = 3, **kw) -> StateModelVectorEnv:
    return StateModelVectorEnv(envs.make_vec(TASKS[:n], n, seed=0, **kw), model)


def _actions(n: int, t: int) -> np.ndarray:
    return np.random.default_rng(t).uniform(-1, 1, (n, 7)).astype(np.float32)


def test_contract_matches_the_real_env():
    real = envs.make_vec(TASKS, 3, seed=0)
    env = _env(_model())
    assert env.observation_space == real.observation_space and env.action_space == real.action_space
    assert env.metadata["autoreset_mode"] == real.metadata["autoreset_mode"]
    assert env.metadata["action_dims_used"] == (0, 1, 2, 6) and env.task_ids == TASKS
    obs, info = env.reset(seed=3)
    robs, rinfo = real.reset(seed=3)
    # real layouts and the real first observation
    np.testing.assert_array_equal(obs["image"], robs["image"])
    np.testing.assert_array_equal(obs["state"], robs["state"])
    assert env.instructions == real.instructions and info["instruction"] == rinfo["instruction"]
    assert set(obs) == set(robs) and set(info) == set(rinfo)
    qpos = np.array(env.env._qpos, copy=True)
    for t in range(3):
        obs, r, te, tr, info = env.step(_actions(3, t))
        assert env.observation_space.contains(obs)
        assert r.shape == te.shape == tr.shape == (3,) and r.dtype == np.float32
        assert te.dtype == tr.dtype == info["success"].dtype == bool
        assert info["task_id"] == TASKS and info["instruction"] == real.instructions
    np.testing.assert_array_equal(env.env._qpos, qpos)  # the real env only draws: its physics never steps
    assert env.env._steps.tolist() == [0] * 3 and env._steps.tolist() == [3] * 3
    assert env.real_sim_calls == {
        "resets": 1, "sub_env_resets": 3, "render_states": 3, "physics_steps": 0, "prefix_steps": 0
    }
    env.close()
    real.close()


def test_a_step_draws_the_models_states_and_moves_the_gripper():
    """Observations are the model's proprio and the simulator's drawing of the model's states (checked
    against ObjectDynamics.rollout and render_states directly); a model moving the tcp 2 cm along x
    moves the drawn gripper there and nothing else."""
    model = _model()
    env = _env(model)
    obs, _ = env.reset(seed=5)
    ref = envs.make_vec(TASKS, 3, seed=0)
    ref.reset(seed=5)
    env_state = ref.environment_state()
    acts = np.stack([_actions(3, t) for t in range(4)], 1)  # (N, K, A)
    with torch.no_grad():
        objs = torch.as_tensor(env_state[:, :9]).unflatten(-1, (3, 3))
        props, moved = model.rollout(torch.as_tensor(obs["state"])[:, None], torch.as_tensor(acts), objs, objs)
    for t in range(4):
        obs, *_ = env.step(acts[:, t])
        np.testing.assert_allclose(obs["state"], props[:, t].numpy(), rtol=0, atol=1e-6)
        np.testing.assert_array_equal(obs["image"], ref.render_states(props[:, t].numpy(), moved[:, t].numpy()))
    assert np.abs(props[:, -1, :3].numpy() - props[:, 0, :3].numpy()).max() > 0.005  # the arm did move
    env.close()

    env = _env(_drift(tcp_dx=0.02))
    first, _ = env.reset(seed=5)
    obs, *_ = env.step(np.zeros((3, 7), np.float32))
    np.testing.assert_allclose(obs["state"][:, 0] - first["state"][:, 0], 0.02, atol=1e-6)
    np.testing.assert_allclose(obs["state"][:, 1:], first["state"][:, 1:], atol=1e-6)
    before = ref.project_to_pixels(first["state"][:, :3].astype(np.float64))  # (N, 2) col, row
    after = ref.project_to_pixels(obs["state"][:, :3].astype(np.float64))
    for i in range(3):
        off = np.argwhere(np.abs(obs["image"][i].astype(int) - first["image"][i]).max(-1) > 30)  # (M, 2) row, col
        assert len(off) > 10, "the gripper did not move in the frame"
        # only the gripper changed: at or above the tcp (its shaft rises out of view), beside it
        assert off[:, 0].max() <= before[i, 1] + 3
        assert before[i, 0] - 14 < off[:, 1].min() and off[:, 1].max() < after[i, 0] + 14

        def body_col(frame: np.ndarray, i: int = i) -> float:  # the dark gripper body's mean column
            dark = frame.max(-1) < 90
            row = int(before[i, 1])
            dark[: max(row - 12, 0)], dark[row + 3 :] = False, False
            return float(np.argwhere(dark)[:, 1].mean())

        shift = body_col(obs["image"][i]) - body_col(first["image"][i])
        assert abs(shift - (after[i, 0] - before[i, 0])) < 1.5  # where the projection of the move says
    env.close()
    ref.close()


def test_success_is_the_tasks_rule_on_predicted_states_and_same_step_autoreset():
    """A model lifting every cube 3 cm a step: LiftCube's rule (cube 10 cm up) holds at step 4, PushCube's
    never; same-step autoreset gives final_obs / final_info and restarts at the real env's next layout."""
    real = envs.make_vec(["LiftCube-v0", "PushCube-v0"], 2, seed=1, autoreset_mode="same_step", max_episode_steps=6)
    env = StateModelVectorEnv(
        envs.make_vec(["LiftCube-v0", "PushCube-v0"], 2, seed=1, autoreset_mode="same_step", max_episode_steps=6),
        _drift(cube_dz_cm=3.0),
    )
    env.reset(seed=2)
    real.reset(seed=2)
    a = np.zeros((2, 7), np.float32)
    for _ in range(3):
        _, r, te, tr, info = env.step(a)
        assert not (te | tr).any() and (r == 0).all()
    obs, r, te, tr, info = env.step(a)
    assert te.tolist() == [True, False] and r.tolist() == [1.0, 0.0] and not tr.any()
    assert info["final_info"]["success"].tolist() == [True, False] and info["_final_obs"].tolist() == [True, False]
    assert info["final_obs"]["image"].shape == (2, 64, 64, 3)
    real.reset(options={"reset_mask": np.array([True, False])})  # the real env's next layout for sub-env 0
    np.testing.assert_array_equal(obs["state"][0], real._state()[0])
    np.testing.assert_array_equal(obs["image"][0], real.render()[0])
    for _ in range(2):
        _, r, te, tr, info = env.step(a)
    assert tr.tolist() == [False, True] and not te.any()  # PushCube's 6-step limit
    chunked = ActionChunkWrapper(env, chunk_size=4)
    chunked.reset(seed=0)
    _, total, te, tr, info = chunked.step(np.zeros((2, 4, 7), np.float32))
    assert te.tolist() == [True, False] and info["chunk_valid"][0].tolist() == [True] * 4
    env.close()
    real.close()


def test_next_step_autoreset_reset_subset_and_determinism():
    env = _env(_model(), max_episode_steps=3)
    assert env.metadata["autoreset_mode"].value == "NextStep"
    env.reset(seed=0)
    a = np.zeros((3, 7), np.float32)
    for _ in range(2):
        *_, tr, _ = env.step(a)
        assert not tr.any()
    *_, tr, _ = env.step(a)
    assert tr.all()
    obs, r, te, tr, _ = env.step(a)  # NEXT_STEP: this step restarts every sub-env
    assert not (te | tr).any() and (r == 0).all() and env._steps.tolist() == [0] * 3
    np.testing.assert_array_equal(obs["state"], env.env._state())  # at the real env's new (reset) state
    for t in range(2):
        obs, *_ = env.step(_actions(3, t))
    mask = np.array([True, False, True])
    obs2, _ = env.reset(options={"reset_mask": mask})
    np.testing.assert_array_equal(obs2["state"][~mask], obs["state"][~mask])
    np.testing.assert_array_equal(obs2["image"][~mask], obs["image"][~mask])
    assert not np.allclose(obs2["state"][mask], obs["state"][mask])
    env.close()

    runs = []
    for _ in range(2):  # the same seed and actions give the same episode
        env = _env(_model(seed=1))
        frames = [env.reset(seed=11)[0]["image"]]
        frames += [env.step(_actions(3, t))[0]["image"] for t in range(5)]
        runs.append(np.stack(frames))
        env.close()
    np.testing.assert_array_equal(runs[0], runs[1])
    assert not np.array_equal(runs[0][0], runs[0][-1])


def test_real_prefix_is_the_physics_then_the_model_branches_from_the_real_state():
    """real_steps=k (MBPO's branch): an episode's first k steps are the real simulator's (observations,
    rewards, ends and success, its physics steps counted); then the model steps on from the real state
    reached, moving as it moved (ObjectDynamics.rollout from the real last two states), the physics at
    rest. A prefix as long as the episode is the real env, through its end."""
    model, k = _model(), 3
    env = StateModelVectorEnv(envs.make_vec(TASKS, 3, seed=0, autoreset_mode="same_step"), model, real_steps=k)
    real = envs.make_vec(TASKS, 3, seed=0, autoreset_mode="same_step")
    env.reset(seed=5)
    robs, _ = real.reset(seed=5)
    states, env_states = [robs["state"]], [real.environment_state()]
    for t in range(k):
        obs, r, te, tr, info = env.step(_actions(3, t))
        robs, rr, rte, rtr, rinfo = real.step(_actions(3, t))
        np.testing.assert_array_equal(obs["image"], robs["image"])
        np.testing.assert_array_equal(obs["state"], robs["state"])
        for a, b in ((r, rr), (te, rte), (tr, rtr), (info["success"], rinfo["success"])):
            np.testing.assert_array_equal(a, b)
        states.append(robs["state"])
        env_states.append(real.environment_state())
    assert env.real_sim_calls["physics_steps"] == env.real_sim_calls["prefix_steps"] == 3 * k
    assert not np.array_equal(states[-1], states[-2])  # the arm moves when the model takes over
    qpos = np.array(env.env._qpos, copy=True)
    acts = np.stack([_actions(3, t) for t in range(k, k + 3)], 1)  # (N, K, A)

    def cubes(e: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(e[:, :9]).unflatten(-1, (3, 3))

    with torch.no_grad():
        props, moved = model.rollout(
            torch.as_tensor(states[-1])[:, None],
            torch.as_tensor(acts),
            cubes(env_states[-1]),
            cubes(env_states[-2]),
            torch.as_tensor(states[-2]),
        )
        at_rest, _ = model.rollout(
            torch.as_tensor(states[-1])[:, None], torch.as_tensor(acts), cubes(env_states[-1]), cubes(env_states[-1])
        )
    assert not torch.allclose(props, at_rest, atol=1e-4)  # the previous state matters to the model
    for j in range(3):
        obs, *_ = env.step(acts[:, j])
        np.testing.assert_allclose(obs["state"], props[:, j].numpy(), rtol=0, atol=1e-6)
        np.testing.assert_array_equal(obs["image"], real.render_states(props[:, j].numpy(), moved[:, j].numpy()))
    np.testing.assert_array_equal(env.env._qpos, qpos)  # after the prefix the physics rests
    assert env.real_sim_calls["physics_steps"] == env.real_sim_calls["prefix_steps"] == 3 * k
    # a sub-env reset mid-way runs its own prefix: every sub-env's physics steps, only its steps are its prefix
    env.reset(options={"reset_mask": np.array([True, False, False])})
    env.step(_actions(3, 9))
    assert env.real_sim_calls["physics_steps"] == 3 * k + 3 and env.real_sim_calls["prefix_steps"] == 3 * k + 1
    assert env.instructions[1:] == real.instructions[1:]  # the others keep their scenes
    env.close()

    env = StateModelVectorEnv(
        envs.make_vec(TASKS, 3, seed=0, autoreset_mode="same_step", max_episode_steps=4), model, real_steps=10
    )
    real = envs.make_vec(TASKS, 3, seed=0, autoreset_mode="same_step", max_episode_steps=4)
    env.reset(seed=7)
    real.reset(seed=7)
    for t in range(4):
        obs, r, te, tr, info = env.step(_actions(3, t))
        robs, rr, rte, rtr, rinfo = real.step(_actions(3, t))
        np.testing.assert_array_equal(r, rr)
        np.testing.assert_array_equal(te | tr, rte | rtr)
    assert (te | tr).all()  # the time limit ended every episode: the final observations are the physics'
    for key in ("image", "state"):
        np.testing.assert_array_equal(info["final_obs"][key], rinfo["final_obs"][key])
    np.testing.assert_array_equal(info["final_info"]["success"], rinfo["final_info"]["success"])
    with pytest.raises(WmrlError, match=r"real_steps=-1; expected an integer >= 0"):
        StateModelVectorEnv(envs.make_vec(TASKS, 3, autoreset_mode="same_step"), model, real_steps=-1)
    with pytest.raises(WmrlError, match=r"real_steps=2 needs an env that autoresets on the same step"):
        StateModelVectorEnv(envs.make_vec(TASKS, 3), model, real_steps=2)
    env.close()
    real.close()


def test_dense_reward_is_the_tasks_shaping_on_the_model_states_and_the_physics_in_a_prefix():
    """reward_type="dense": a real prefix step pays the simulator's own dense reward; a model step pays
    the task's staged progress (the simulator's shaping, read on the states the model advanced with),
    1 on success. The shaping read on real states is the simulator's dense reward below success."""
    from envs.tabletop.environment_state import shaping_from_environment_state

    env = StateModelVectorEnv(
        envs.make_vec(TASKS, 3, seed=0, autoreset_mode="same_step", reward_type="dense"), _model(), real_steps=2
    )
    real = envs.make_vec(TASKS, 3, seed=0, autoreset_mode="same_step", reward_type="dense")
    env.reset(seed=3)
    real.reset(seed=3)
    for t in range(2):
        _, r, *_ = env.step(_actions(3, t))
        robs, rr, _, _, rinfo = real.step(_actions(3, t))
        np.testing.assert_array_equal(r, rr)
        assert (rr > 0).all() and not rinfo["success"].any()
        shaped = shaping_from_environment_state(TASKS, robs["state"], real.environment_state())
        np.testing.assert_allclose(shaped, rr, rtol=0, atol=1e-6)
    seen = []
    for t in range(2, 6):
        _, r, te, *_ = env.step(_actions(3, t))
        want = shaping_from_environment_state(TASKS, env.rollout.now.numpy(), env.rollout.env_now)
        np.testing.assert_allclose(r, np.where(te, 1.0, want), rtol=0, atol=1e-6)
        seen.append(r)
    assert len(np.unique(np.round(seen, 6))) > 3 and (np.asarray(seen) <= 1.0).all()  # it moves with the states
    env.close()
    real.close()


@pytest.mark.parametrize("after_autoreset", [True, False])
def test_real_prefix_after_autoreset_or_only_after_reset(after_autoreset):
    """An episode started by autoreset gets its own real prefix, or (prefix_after_autoreset=False, for
    GRPO's first-episode collection) runs in the model from its real first state: no more physics."""
    env = StateModelVectorEnv(
        envs.make_vec(TASKS, 3, seed=0, autoreset_mode="same_step", max_episode_steps=4),
        _model(),
        real_steps=3,
        prefix_after_autoreset=after_autoreset,
    )
    env.reset(seed=2)
    for t in range(4):
        *_, te, tr, _ = env.step(_actions(3, t))
    assert (te | tr).all() and env.real_sim_calls["prefix_steps"] == 9
    qpos = np.array(env.env._qpos, copy=True)
    for t in range(3):
        obs, *_ = env.step(_actions(3, 4 + t))
    assert env.real_sim_calls["prefix_steps"] == (18 if after_autoreset else 9)
    assert np.array_equal(env.env._qpos, qpos) != after_autoreset  # the physics moved only for a prefix
    env.reset(seed=2)  # reset() always gives the prefix
    env.step(_actions(3, 0))
    assert env.real_sim_calls["prefix_steps"] == (21 if after_autoreset else 12)
    env.close()


def test_bad_input_gives_one_line_errors(tmp_path):
    from benchmarks.state_model_rl import state_model_dir

    env = _env(_model())
    with pytest.raises(WmrlError, match="step before reset"):
        env.step(np.zeros((3, 7), np.float32))
    with pytest.raises(WmrlError, match="first reset must reset every sub-env"):
        env.reset(options={"reset_mask": np.array([True, False, False])})
    env.reset(seed=0)
    with pytest.raises(BadActionError, match=r"action has shape \(3, 4\); expected \(3, 7\)"):
        env.step(np.zeros((3, 4), np.float32))
    with pytest.raises(BadActionError, match="not finite"):
        env.step(np.full((3, 7), np.nan, np.float32))
    env.close()
    bad = _drift()
    with torch.no_grad():
        bad.arm[-1].bias[0] = float("nan")
    env = _env(bad)
    env.reset(seed=0)
    with pytest.raises(NonFiniteError, match="state model prediction"):
        env.step(np.zeros((3, 7), np.float32))
    env.close()
    real = envs.make_vec(TASKS, 3, seed=0)
    with pytest.raises(WmrlError, match="has no arm"):
        StateModelVectorEnv(real, ObjectDynamics(ObjectDynamicsConfig(hidden=8, layers=1)))
    with pytest.raises(WmrlError, match="proprio_dim=5"):
        StateModelVectorEnv(real, ObjectDynamics(ObjectDynamicsConfig(arm=True, proprio_dim=5, hidden=8, layers=1)))
    with pytest.raises(WmrlError, match="expected a worldmodels.object_dynamics.ObjectDynamics"):
        StateModelVectorEnv(real, torch.nn.Linear(2, 2))
    real.close()
    with pytest.raises(WmrlError, match="wraps a TabletopVectorEnv"):
        StateModelVectorEnv(ActionChunkWrapper(envs.make_vec(TASKS, 3, autoreset_mode="same_step"), 4), _model())
    with pytest.raises(WmrlError, match="wrist_image=False"):
        StateModelVectorEnv(envs.make_vec(TASKS, 3, wrist_image=True), _model())
    with pytest.raises(WmrlError, match=r"has no state model object_dynamics_arm/.*--arm"):
        state_model_dir(tmp_path, "object_dynamics_arm")
    _model().save_pretrained(tmp_path / "od")
    assert state_model_dir(tmp_path, "od") == tmp_path / "od"
    from benchmarks.state_model_rl import main, pair_folder

    # a repeat with another RL seed lives in its own folder: it never reads back RL seed 0's finished stage
    assert pair_folder(tmp_path, "state_model", 100, 0, "seed_0") == tmp_path / "state_model_it100" / "seed_0"
    assert pair_folder(tmp_path, "state_model", 100, 2, "seed_0") == tmp_path / "state_model_it100_rlseed2" / "seed_0"
    with pytest.raises(WmrlError, match=r"--rl-seed -1 must be >= 0"):
        main(["--runs", str(tmp_path), "--rl-seed", "-1", "--out", str(tmp_path / "r.json")])
    with pytest.raises(WmrlError, match=r"--real-steps -2 must be >= 0"):
        main(["--runs", str(tmp_path), "--real-steps", "-2", "--out", str(tmp_path / "r.json")])
    with pytest.raises(WmrlError, match=r"'rl.score=progress' was read as a folder name"):
        main(["--out", str(tmp_path / "r.json"), "--runs", str(tmp_path), "--object-dynamics", "od", "rl.score=progress"])
    with pytest.raises(WmrlError, match=r"override 'dense' is not key=value"):
        main(["--runs", str(tmp_path), "--out", str(tmp_path / "r.json"), "dense"])
    with pytest.raises(WmrlError, match=r"--share-prefix and --train-on prefix\|branch split .* give K > 0"):
        main(["--runs", str(tmp_path), "--train-on", "prefix", "--out", str(tmp_path / "r.json")])
    with pytest.raises(WmrlError, match=r"--share-prefix trains on the model's branches only; --train-on all"):
        main(["--runs", str(tmp_path), "--real-steps", "24", "--share-prefix", "--train-on", "all",
              "--out", str(tmp_path / "r.json")])
    assert not (tmp_path / "r.json").exists()


# ------------------------------------------------------------------------------------------ ensembles
def _lift_env(members, max_episode_steps: int = 8, **kw) -> StateModelVectorEnv:
    real = envs.make_vec(["LiftCube-v0", "PushCube-v0"], 2, seed=1, autoreset_mode="same_step",
                         max_episode_steps=max_episode_steps)
    return StateModelVectorEnv(real, members, **kw)


def test_an_ensemble_of_one_is_the_single_model_env():
    """Same observations, rewards, ends and info keys, through next-step autoresets and a subset reset,
    whatever the ensemble options (one member has no spread to gate on)."""
    for kw in ({}, {"advance": "first", "success": "any"}, {"advance": "random", "success": "advanced"}):
        single = _env(_model(seed=2), max_episode_steps=4)
        ens = StateModelVectorEnv(envs.make_vec(TASKS, 3, seed=0, max_episode_steps=4), [_model(seed=2)], **kw)
        assert len(ens.models) == 1
        for e in (single, ens):
            e.reset(seed=7)
        for t in range(10):
            if t == 6:
                for e in (single, ens):
                    e.reset(options={"reset_mask": np.array([False, True, True])})
            a, b = single.step(_actions(3, t)), ens.step(_actions(3, t))
            np.testing.assert_array_equal(a[0]["image"], b[0]["image"])
            np.testing.assert_array_equal(a[0]["state"], b[0]["state"])
            for x, y in zip(a[1:4], b[1:4], strict=True):
                np.testing.assert_array_equal(x, y)
            assert set(a[4]) == set(b[4]) and "gate_ok" not in b[4]
        single.close()
        ens.close()


def test_all_success_is_the_and_of_the_members_and_the_spread_is_their_distance():
    """Member 0 lifts the cubes 3 cm a step, member 1 lowers them 3 cm; the env advances with member 0.
    LiftCube's rule (10 cm up) holds on member 0 from step 4 (12 cm) and on member 1 (the state minus
    3 cm) from step 6: ``all`` succeeds at step 6, ``any`` and ``advanced`` at 4; the members' spread is
    6 cm on the lifted cube every step."""
    up, down = _drift(cube_dz_cm=3.0), _drift(cube_dz_cm=-3.0)
    first = {}
    for rule in ("all", "any", "advanced"):
        env = _lift_env([up, down], success=rule, advance="first")
        env.reset(seed=2)
        for t in range(1, 9):
            _, r, te, tr, info = env.step(np.zeros((2, 7), np.float32))
            np.testing.assert_allclose(info["disagreement"], 0.06, atol=1e-5)
            if te[0]:
                first[rule] = t
                assert r[0] == 1.0 and info["final_info"]["success"][0]
                break
        env.close()
    assert first == {"all": 6, "any": 4, "advanced": 4}
    # the same model twice: no spread, and ``all`` is that model's own rule
    env, ref = _lift_env([up, up]), _lift_env(up)
    env.reset(seed=2)
    ref.reset(seed=2)
    for _ in range(5):
        a, b = env.step(np.zeros((2, 7), np.float32)), ref.step(np.zeros((2, 7), np.float32))
        np.testing.assert_array_equal(a[2], b[2])
        assert (a[4]["disagreement"] == 0).all()
    env.close()
    ref.close()


def test_disagreement_gate_masks_or_terminates_and_reaches_the_chunk():
    """Members 6 cm apart are gated at 5 cm (``gate_ok`` False; ``terminate`` instead ends the episode
    there as a failure that GRPO keeps), not at 7 cm; the same model twice never is. The chunk wrapper passes ``gate_ok`` on (False
    when any executed step was), where GRPO's ``trajectory_scores`` masks the trajectory."""
    import torch

    from imagination.grpo import trajectory_scores
    from imagination.rollout_buffer import RolloutBatch

    up, down = _drift(cube_dz_cm=3.0), _drift(cube_dz_cm=-3.0)
    zero = np.zeros((2, 7), np.float32)
    for members, limit, ok in (([up, up], 0.01, True), ([up, down], 0.07, True), ([up, down], 0.05, False)):
        env = _lift_env(members, max_disagreement=limit, advance="first")
        env.reset(seed=0)
        _, _, te, tr, info = env.step(zero)
        assert info["gate_ok"].tolist() == [ok, ok] and not (te | tr).any()
        env.close()
    env = _lift_env([up, down], max_disagreement=0.05, gate="terminate", advance="first")
    env.reset(seed=0)
    _, r, te, tr, info = env.step(zero)
    assert tr.tolist() == [True, True] and not te.any() and (r == 0).all() and "gate_ok" not in info
    env.close()
    env = _lift_env([up, down], max_disagreement=0.07, gate="terminate", advance="first")
    env.reset(seed=0)
    assert not env.step(zero)[3].any()
    env.close()
    for limit, ok in ((0.05, False), (0.07, True)):
        chunked = ActionChunkWrapper(_lift_env([up, down], max_disagreement=limit, advance="first"), 2)
        chunked.reset(seed=0)
        _, _, _, _, info = chunked.step(np.zeros((2, 2, 7), np.float32))
        assert info["gate_ok"].tolist() == [ok, ok]
        chunked.close()
    fields = {f: None for f in RolloutBatch.__dataclass_fields__}
    fields.update(valid=torch.ones(1, 2, dtype=torch.bool), success=torch.zeros(1, 2, dtype=torch.bool),
                  gate_ok=torch.tensor([[False, True]]))
    _, valid, _ = trajectory_scores(RolloutBatch(**fields), "success", "mask")
    assert valid.tolist() == [False, True]


def test_ensemble_random_advance_is_seeded_and_mixes_the_members():
    """``advance="random"`` draws a member per sub-env and step from the reset's seeds: the lifted cube
    rises or sinks 3 cm a step, both happen, and the same seeds give the same draws."""
    up, down = _drift(cube_dz_cm=3.0), _drift(cube_dz_cm=-3.0)
    runs = []
    for seed in (4, 4, 5):
        env = _lift_env([up, down], max_episode_steps=40, success="any")
        env.reset(seed=seed)
        z = [env.rollout.objs[0, :, 2].max().item()]
        for _ in range(6):
            env.step(np.zeros((2, 7), np.float32))
            z.append(env.rollout.objs[0, :, 2].max().item())
        runs.append(np.round(np.diff(z), 4))
        env.close()
    np.testing.assert_array_equal(runs[0], runs[1])
    assert set(runs[0].tolist()) == {0.03, -0.03} and not np.array_equal(runs[0], runs[2])


def test_ensemble_bad_input_gives_one_line_errors():
    real = envs.make_vec(TASKS, 3, seed=0)
    with pytest.raises(WmrlError, match="ensemble is empty"):
        StateModelVectorEnv(real, [])
    two = ObjectDynamics(ObjectDynamicsConfig(arm=True, num_objects=2, hidden=8, layers=1))
    with pytest.raises(WmrlError, match="member 1 differs from member 0 in num_objects=2"):
        check_ensemble([_model(), two])
    reach = ObjectDynamics(ObjectDynamicsConfig(arm=True, reach=0.3, hidden=8, layers=1))
    with pytest.raises(WmrlError, match="reach=0.3"):
        StateModelVectorEnv(real, [_model(), reach])
    for bad in (0.0, -0.01, float("nan"), float("inf")):
        with pytest.raises(WmrlError, match="max_disagreement=.* must be a finite number of metres > 0"):
            StateModelVectorEnv(real, [_model(), _model(1)], max_disagreement=bad)
    with pytest.raises(WmrlError, match="needs an ensemble of 2 or more"):
        StateModelVectorEnv(real, [_model()], max_disagreement=0.02)
    with pytest.raises(WmrlError, match="success='most'"):
        StateModelVectorEnv(real, [_model(), _model(1)], success="most")
    with pytest.raises(WmrlError, match="advance='mean'"):
        StateModelVectorEnv(real, [_model(), _model(1)], advance="mean")
    with pytest.raises(WmrlError, match="gate='off'"):
        StateModelVectorEnv(real, [_model(), _model(1)], gate="off")
    real.close()


def test_grpo_history_counts_every_real_prefix_step_also_when_resumed(tmp_path):
    """GRPO in a branched world logs each iteration's real prefix steps (``real_prefix_steps``), so a run
    stopped and resumed holds them all in its history, as many as the env of an uninterrupted run counted."""
    from imagination.grpo import GRPOConfig, train_grpo
    from policies.vla.configuration_vla import VLAConfig
    from policies.vla.modeling_vla import VLAPolicy
    from wmrl.runs import RunDir

    def world() -> ActionChunkWrapper:
        real = envs.make_vec([t for t in TASKS for _ in range(2)], 6, seed=0, image_size=32,
                             autoreset_mode="same_step", max_episode_steps=8)
        return ActionChunkWrapper(StateModelVectorEnv(real, _model(), real_steps=4, prefix_after_autoreset=False), 2)

    def policy() -> VLAPolicy:
        torch.manual_seed(0)
        return VLAPolicy(VLAConfig(image_size=32, channels=(8, 8, 8), hidden_dim=32, chunk_size=2)).eval()

    cfg = GRPOConfig(iterations=3, group_size=2, max_chunks=4, minibatch_size=64, checkpoint_every=1)
    env = world()
    full = train_grpo(env, policy(), cfg, run=RunDir(tmp_path / "full"), progress=False)
    counted = env.unwrapped.real_sim_calls["prefix_steps"]
    assert counted > 0 and sum(h["real_prefix_steps"] for h in full) == counted
    train_grpo(world(), policy(), GRPOConfig(**{**cfg.__dict__, "iterations": 1}), run=RunDir(tmp_path / "cut"),
               progress=False)
    resumed_env = world()
    resumed = train_grpo(resumed_env, policy(), cfg, run=RunDir(tmp_path / "cut"), progress=False)
    assert resumed_env.unwrapped.real_sim_calls["prefix_steps"] < counted  # this invocation ran 2 of 3
    assert [h["real_prefix_steps"] for h in resumed] == [h["real_prefix_steps"] for h in full]
    assert "real_prefix_steps" not in train_grpo(
        ActionChunkWrapper(envs.make_vec(TASKS, 2, seed=0, image_size=32, max_episode_steps=8,
                                         autoreset_mode="same_step"), 2),
        policy(), GRPOConfig(iterations=1, group_size=2, max_chunks=4), progress=False,
    )[0]  # a real env reports none


def test_shared_prefix_runs_one_real_prefix_per_group_and_rl_trains_on_the_branches():
    """share_prefix=G: in the real prefix every member of a group of G executes its leader's action, so the
    group reaches one real state (the leader's real trajectory, counted once); after it the members branch
    in the model with their own actions. The prefix steps are flagged (``untrained``, OR-ed over a
    chunk), and the rollout leaves those chunks out of ``trainable``; bad groups are one-line errors."""
    from imagination.grpo import GRPOConfig, grpo_update, trajectory_scores
    from imagination.rollout_buffer import collect_first_episodes
    from kernels.advantages import compute_group_advantages
    from policies.vla.configuration_vla import VLAConfig
    from policies.vla.modeling_vla import VLAPolicy

    tasks, seeds, k = ["PushCube-v0"] * 2 + ["LiftCube-v0"] * 2, [5, 5, 9, 9], 3
    env = StateModelVectorEnv(envs.make_vec(tasks, 4, seed=0, autoreset_mode="same_step"), _model(), real_steps=k,
                              share_prefix=2)
    real = envs.make_vec(tasks, 4, seed=0, autoreset_mode="same_step")
    env.reset(seed=seeds)
    real.reset(seed=seeds)
    for t in range(k + 2):
        a = _actions(4, t)
        obs, _, _, _, info = env.step(a)
        assert info["untrained"].tolist() == [t < k] * 4
        if t < k:  # the members are where their leader's actions took the physics
            robs, *_ = real.step(np.repeat(a[::2], 2, 0))
            for key in ("image", "state"):
                np.testing.assert_array_equal(obs[key], robs[key])
                np.testing.assert_array_equal(obs[key][0::2], obs[key][1::2])
    assert not np.allclose(obs["state"][0], obs["state"][1])  # then each branches with its own actions
    assert env.real_sim_calls["prefix_steps"] == 2 * k and env.real_sim_calls["physics_steps"] == 4 * k
    env.close()

    chunked = ActionChunkWrapper(StateModelVectorEnv(
        envs.make_vec(tasks, 4, seed=0, image_size=32, autoreset_mode="same_step", max_episode_steps=8), _model(),
        real_steps=k, share_prefix=2, prefix_after_autoreset=False), 2)
    torch.manual_seed(0)
    policy = VLAPolicy(VLAConfig(image_size=32, channels=(8, 8, 8), hidden_dim=32, chunk_size=2)).eval()
    batch = collect_first_episodes(chunked, policy, 4, seeds=seeds)
    assert not batch.trainable[:2].any()  # chunks 1-2 hold prefix steps (steps 0-2)
    assert torch.equal(batch.trainable[2:], batch.valid[2:]) and batch.trainable[2:].any()
    scored = []
    evaluate = policy.evaluate_actions
    policy.evaluate_actions = lambda o, i, a: scored.append(len(a)) or evaluate(o, i, a)
    cfg = GRPOConfig(group_size=2, update_epochs=1, minibatch_size=1024)
    keep = torch.ones(4, dtype=torch.bool)
    adv, _ = compute_group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.arange(4) // 2, keep, True)
    grpo_update(policy, torch.optim.SGD(policy.parameters(), lr=0.0), batch, adv, keep, cfg, torch.Generator())
    assert scored == [int(batch.trainable.sum())]
    assert trajectory_scores(batch, "success", "mask")[2].tolist() == batch.valid.sum(0).tolist()  # lengths: all
    chunked.close()

    with pytest.raises(WmrlError, match=r"share_prefix=2: sub-envs 0-1 do not start from one state"):
        env = StateModelVectorEnv(envs.make_vec(tasks, 4, seed=0, autoreset_mode="same_step"), _model(),
                                  real_steps=k, share_prefix=2)
        env.reset(seed=[5, 6, 9, 9])
    for bad, msg in (({"share_prefix": 0}, r"share_prefix=0; expected an integer group size >= 1"),
                     ({"share_prefix": 3}, r"share_prefix=3 needs real_steps > 0 \(got 3\) and num_envs \(4\) a multiple"),
                     ({"share_prefix": 2, "real_steps": 0}, r"share_prefix=2 needs real_steps > 0 \(got 0\)")):
        with pytest.raises(WmrlError, match=msg):
            StateModelVectorEnv(envs.make_vec(tasks, 4, autoreset_mode="same_step"), _model(),
                                **{"real_steps": k, **bad})


def test_train_on_splits_an_episode_at_its_real_prefix():
    """train_on="prefix": the RL update trains on the real prefix's chunks only (the model's steps are
    marked untrained); "branch": on the model's only; "all" marks nothing; bad choices are one-line errors."""
    from imagination.rollout_buffer import collect_first_episodes
    from policies.vla.configuration_vla import VLAConfig
    from policies.vla.modeling_vla import VLAPolicy

    tasks, k = ["PushCube-v0", "LiftCube-v0"], 4
    torch.manual_seed(0)
    policy = VLAPolicy(VLAConfig(image_size=32, channels=(8, 8, 8), hidden_dim=32, chunk_size=2)).eval()
    for train_on in ("all", "prefix", "branch"):
        env = ActionChunkWrapper(StateModelVectorEnv(
            envs.make_vec(tasks, 2, seed=0, image_size=32, autoreset_mode="same_step", max_episode_steps=10), _model(),
            real_steps=k, prefix_after_autoreset=False, train_on=train_on), 2)
        batch = collect_first_episodes(env, policy, 5, seeds=[3, 4])
        in_prefix = torch.arange(batch.num_steps)[:, None] < k // 2  # chunks 1-2 are the 4 real steps
        want = {"all": batch.valid, "prefix": batch.valid & in_prefix, "branch": batch.valid & ~in_prefix}[train_on]
        assert torch.equal(batch.trainable, want) and want.any(), train_on
        env.close()
    for kw, msg in (({"train_on": "model"}, r"train_on='model'; expected 'all', 'prefix' or 'branch'"),
                    ({"train_on": "prefix", "real_steps": 0}, r"train_on='prefix' splits an episode .* real_steps > 0"),
                    ({"share_prefix": 2, "train_on": "all"}, r"share_prefix=2 with train_on='all': .*train_on='branch'")):
        with pytest.raises(WmrlError, match=msg):
            StateModelVectorEnv(envs.make_vec(tasks, 2, autoreset_mode="same_step"), _model(), **{"real_steps": k, **kw})


def test_the_fixed_start_branch_world_trains_on_the_pool_and_counts_its_real_prefixes(tmp_path):
    """benchmarks.fixed_starts' sm_branch arm: GRPO with rl.start_pool=P in the state model world resets
    the real env to exactly the pool's starts, and every trained episode's first real_steps steps are
    real ones, counted as its real env steps."""
    from test_rl import grpo_resets

    from benchmarks.fixed_starts import pool_starts, state_model_world
    from imagination.grpo import GRPOConfig
    from imagination.pipeline import rl_task_layout

    _model().save_pretrained(tmp_path / "sm")
    tasks, k = TASKS[:2], 4
    layout = rl_task_layout(tasks, 8, 4)
    world = state_model_world([tmp_path / "sm"], real_steps=k, max_disagreement=None)
    env = ActionChunkWrapper(
        world(envs.make_vec(layout, 8, image_size=32, autoreset_mode="same_step", seed=0)), 2, frames="chunk_end"
    )
    hist, resets = grpo_resets(env, GRPOConfig(iterations=3, group_size=4, max_chunks=4, start_pool=4, seed=7))
    task_ids, seeds = pool_starts(tasks, 2, 7)
    assert {(layout[i], s) for r in resets for i, s in enumerate(r)} == set(zip(task_ids, seeds, strict=True))
    assert [h["real_prefix_steps"] for h in hist] == [8 * k] * 3


def test_warm_refit_recipe_names_its_problems_and_records_only_what_differs_from_the_default():
    """``WarmRefit`` lists every bad field in one message, and records only the options away from their defaults,
    so a work folder written before an option existed still resumes."""
    from benchmarks.fixed_starts import WarmRefit

    assert WarmRefit(1000).problems() == []
    assert WarmRefit(1000).record() == {"steps": 1000, "lr": 3e-4}
    assert WarmRefit(1000, 3e-4, 3.0, "latest").record() == {"steps": 1000, "lr": 3e-4, "failure_weight": 3.0,
                                                             "data": "latest"}
    assert WarmRefit(1000, renderer_steps=200).record() == {"steps": 1000, "lr": 3e-4, "renderer_steps": 200}
    assert WarmRefit(0, float("nan"), 0.0, "newest", -1).problems() == [
        "steps 0 must be >= 1", "renderer_steps -1 must be >= 0", "lr nan must be > 0",
        "failure_weight 0.0 must be > 0", "data 'newest' must be one of all, latest"]


def _pool_rollouts(outcomes: str, length: int = 3):
    """Pool rollouts without frames, one ``length``-step episode per character of ``outcomes`` (1: success)."""
    from wmrl.data import Trajectories

    e = len(outcomes)
    n = e * length
    succ, last = np.zeros(n, bool), np.zeros(n, bool)
    succ[length - 1 :: length] = [c == "1" for c in outcomes]
    last[length - 1 :: length] = True
    return Trajectories(images=np.zeros((n, 1, 1, 3), np.uint8), wrist_images=None, states=np.zeros((n, 9), np.float32),
                        actions=np.zeros((n, 7), np.float32), rewards=succ.astype(np.float32), successes=succ,
                        dones=last,
                        episode_index=np.repeat(np.arange(e), length), frame_index=np.tile(np.arange(length), e),
                        instructions=["lift"] * n, task_ids=["Lift-v0"] * n, fps=10)


@pytest.mark.parametrize("data", ["all", "latest"])
@pytest.mark.parametrize("weight", [1.0, 3.0])
def test_warm_refit_fine_tunes_on_every_round_or_the_newest_with_failures_weighted(data, weight):
    """Each round's fine-tune reads the line's rollouts of every round so far (``all``) or of the newest round alone
    (``latest``); every failed episode weighs ``failure_weight``, every success 1, as it did in the round it came."""
    from benchmarks.fixed_starts import WarmRefit

    recipe = WarmRefit(1000, failure_weight=weight, data=data)
    rounds = [_pool_rollouts("101"), _pool_rollouts("0011"), _pool_rollouts("1")]
    read: list = []
    for r, newest in enumerate(rounds):
        read = recipe.fine_tune_data(read, newest)
        expect = rounds[: r + 1] if data == "all" else [newest]
        assert [t.num_episodes for t in read] == [t.num_episodes for t in expect]
        for got, src in zip(read, expect, strict=True):
            want = np.where(src.episode_success, 1.0, weight)
            np.testing.assert_array_equal(got.episode_weights, want)
            np.testing.assert_array_equal(got.episode_success, src.episode_success)


def test_fixed_starts_sm_branch_options_give_one_line_errors_before_any_work(tmp_path):
    from benchmarks.fixed_starts import main

    out = ["--runs", str(tmp_path / "run"), "--work", str(tmp_path / "w"), "--out", str(tmp_path / "r.json")]
    for args, msg in (
        (["--train-on", "branch"], r"--train-on branch splits the sm_branch arm's episodes; it needs --state-models"),
        (["--renderer", "renderer"], r"--renderer renderer draws the sm_branch arm's branches; it needs --state-models"),
        (["--quick", "--renderer", "renderer"], r"--renderer renderer: --quick fits its own tiny renderer; pass --renderer quick"),
        (["--quick", "--state-models", "od"], r"--state-models od: --quick fits its own tiny state model"),
        (["--real-steps", "0"], r"--real-steps 0 must be >= 1"),
        (["--coevolution-rounds", "1"], r"--coevolution-rounds 1 must be >= 0, and > 0 goes on from the sm_branch arm"),
        (["--quick", "--coevolution-rounds", "0", "--data-control"],
         r"--data-control adds an arm to each co-evolution round; it needs --coevolution-rounds >= 1"),
        (["--quick", "--coevolution-rounds", "0", "--gate-control", "0.03"],
         r"--gate-control 0.03 must be a number of metres > 0, and gates an ensemble's world .* 2 or more"),
        (["--state-models", "a", "--coevolution-rounds", "1", "--gate-control", "0.03"],
         r"--gate-control 0.03 .* 2 or more --state-models \(or --quick, which fits two\)"),
        (["--state-models", "a", "b", "--coevolution-rounds", "1", "--gate-control", "-1"],
         r"--gate-control -1.0 must be a number of metres > 0"),
        (["--state-models", "a", "--warm-refit", "100"],
         r"--warm-refit 100 must be >= 1 steps and --warm-refit-lr 0.0003 > 0, .* it needs --coevolution-rounds >= 1"),
        (["--quick", "--warm-refit", "0"], r"--warm-refit 0 must be >= 1 steps"),
        (["--quick", "--warm-refit", "5", "--warm-refit-lr", "nan"], r"--warm-refit-lr nan > 0"),
        (["--quick", "--coevolution-rounds", "0", "--warm-refit-failure-weight", "3"],
         r"--warm-refit-failure-weight 3.0 weights --warm-refit's fine-tunes; it needs --warm-refit STEPS"),
        (["--quick", "--warm-refit-failure-weight", "0"], r"--warm-refit-failure-weight 0.0 must be a number > 0"),
        (["--quick", "--coevolution-rounds", "0", "--warm-refit-data", "latest"],
         r"--warm-refit-data latest chooses --warm-refit's data; it needs --warm-refit STEPS"),
        (["--quick", "--warm-refit-renderer", "10"],
         r"--warm-refit-renderer 10 must be >= 1 steps, .* it needs --warm-refit STEPS and --renderer NAME"),
        (["--quick", "--renderer", "quick", "--warm-refit", "5", "--warm-refit-renderer", "-2"],
         r"--warm-refit-renderer -2 must be >= 1 steps"),
        (["--quick", "--lines", "sm_warm", "sm_boost"],
         r"--lines sm_warm sm_boost: expected some of this run's co-evolution lines sm_coevo, sm_more, sm_demos, "
         r"sm_gate, sm_warm"),
        (["--state-models", "a", "b", "--coevolution-rounds", "1", "--lines", "sm_gate"],
         r"--lines sm_gate: expected some of this run's co-evolution lines sm_coevo, sm_more \(sm_demos needs"),
    ):
        with pytest.raises(WmrlError, match=msg):
            main(out + args)
    assert not (tmp_path / "r.json").exists() and not (tmp_path / "w").exists()


def test_refit_state_models_fits_every_member_again_on_demos_and_rollouts_and_resumes(tmp_path, monkeypatch):
    """benchmarks.fixed_starts' co-evolution rounds: each ensemble member is fitted again with its own config
    and seed on the demos plus the real rollouts; a finished refit is kept."""
    import benchmarks.fixed_starts as fs
    from imagination.coevolution import record_rollouts
    from worldmodels.object_dynamics import fit_object_dynamics

    env = envs.make_vec(TASKS * 2, 4, image_size=32, autoreset_mode="same_step", seed=0)
    expert = envs.make_expert(env, noise=0.3, seed=0)
    demos, _ = record_rollouts(env, lambda obs, instr: expert.act()[:, None], 8, 1, seed=0)
    rollouts, _ = record_rollouts(env, lambda obs, instr: expert.act()[:, None], 4, 1, seed=50)
    env.close()
    dirs = []
    for seed in (1, 2):
        c = ObjectDynamicsConfig(arm=True, hidden=8, layers=1, steps=5, batch_size=16, bootstrap=True, seed=seed)
        model, metrics = fit_object_dynamics(demos, c, progress=False)
        model.save_pretrained(tmp_path / f"m{seed}", metrics)
        dirs.append(tmp_path / f"m{seed}")
    new = fs.refit_state_models(demos, dirs, [rollouts], tmp_path / "refit")
    assert new == [tmp_path / "refit" / "m1", tmp_path / "refit" / "m2"]
    for old, d in zip(dirs, new, strict=True):
        a, b = ObjectDynamics.from_pretrained(old), ObjectDynamics.from_pretrained(d)
        assert a.config == b.config
        meta = [json.loads((x / "config.json").read_text())["metrics"] for x in (old, d)]
        assert (meta[0]["test_episodes"] + meta[0]["train_episodes"], meta[1]["test_episodes"] + meta[1]["train_episodes"]) == (8, 12)
        assert not torch.equal(a.arm[-1].weight, b.arm[-1].weight)
    # fixed_starts keeps the refits' datasets without their frames: the same fits, weight for weight
    bare = fs.refit_state_models(lambda: demos.without_frames(), dirs, [rollouts.without_frames()], tmp_path / "bare")
    for d, e in zip(new, bare, strict=True):
        a, b = ObjectDynamics.from_pretrained(d).state_dict(), ObjectDynamics.from_pretrained(e).state_dict()
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # the warm refit: each member fine-tuned from its own weights, its normalisation and seed kept, on the same data
    warm = fs.refit_state_models(demos, dirs, [rollouts], tmp_path / "warm", fine_tune=(3, 1e-4))
    for old, d in zip(dirs, warm, strict=True):
        a, b = ObjectDynamics.from_pretrained(old), ObjectDynamics.from_pretrained(d)
        assert (b.config.steps, b.config.lr, b.config.seed) == (3, 1e-4, a.config.seed)
        assert torch.equal(a.feat_mean, b.feat_mean) and not torch.equal(a.arm[-1].weight, b.arm[-1].weight)
        assert json.loads((d / "config.json").read_text())["metrics"]["fine_tuned_from"] == str(old)
    monkeypatch.setattr("worldmodels.object_dynamics.fit_object_dynamics", lambda *a, **k: pytest.fail("refitted"))
    assert fs.refit_state_models(lambda: pytest.fail("loaded the demos"), dirs, [rollouts], tmp_path / "refit") == new
    assert fs.refit_state_models(demos, dirs, [rollouts], tmp_path / "warm", fine_tune=(3, 1e-4)) == warm


class _ExpertPolicy:
    """The scripted expert of a real env as a one-step-chunk policy (``act(obs, instructions, deterministic)``)."""

    chunk_size = 1

    def __init__(self, real, seed: int = 0):
        self.expert = envs.make_expert(real, noise=0.5, seed=seed)

    def act(self, obs, instructions, deterministic=True):
        from types import SimpleNamespace

        return SimpleNamespace(actions=torch.from_numpy(np.asarray(self.expert.act(), np.float32))[:, None])


def test_coevolution_fidelity_plays_each_start_once_in_the_world_it_is_given():
    """benchmarks.coevolution_fidelity.world_outcomes: a branch whose real prefix covers the episode is the
    real simulator, start by start (a noisy expert succeeds on some starts and fails on others); a model
    that lifts every cube makes LiftCube succeed in the world wherever it is handed over at once."""
    from benchmarks.coevolution_fidelity import world_outcomes

    tasks, seeds = ["LiftCube-v0", "PushCube-v0"] * 4, list(range(40, 48))

    def play(make_world):
        real = envs.make_vec(tasks, len(tasks), autoreset_mode="same_step", max_episode_steps=60)
        try:
            return world_outcomes(_ExpertPolicy(real), make_world, real, seeds, 60)
        finally:
            real.close()

    real, gated = play(lambda r: r)
    prefix, _ = play(lambda r: StateModelVectorEnv(r, _model(), real_steps=60))
    np.testing.assert_array_equal(prefix, real)
    assert 0 < real.sum() < len(seeds) and gated == 0.0
    lifted, _ = play(lambda r: StateModelVectorEnv(r, _drift(cube_dz_cm=2.0)))
    assert lifted[0::2].all()  # LiftCube: the task's rule on the model's raised cubes


def test_coevolution_fidelity_summary_counts_agreement_false_and_missed_successes():
    from benchmarks.coevolution_fidelity import coevolution_names, summarize

    policies, worlds = coevolution_names(1)
    assert (policies, worlds) == (["sm_branch", "sm_coevo_1", "sm_more_1"], ["original", "refit_1"])
    ol = {"one_step_error_moving_mean_m": 0.002, "open_loop_error_step_16_m": 0.01, "open_loop_error_step_32_m": None}

    def entry(real, original, refit):
        return {"real": real, "worlds": {"original": original, "refit_1": refit}, "gated": {"original": 0.5, "refit_1": 0.0},
                "open_loop": {"original": ol, "refit_1": ol}}

    run = {s: {p: entry("1100", "1010", "1101") for p in policies} for s in ("pool", "held_out")}
    out = summarize([run, run], policies, worlds)
    orig, refit = out["summary"]["pool"]["sm_coevo_1"]["original"], out["summary"]["pool"]["sm_coevo_1"]["refit_1"]
    assert (orig["real_success"], orig["world_success"], orig["agreement"]) == (0.5, 0.5, 0.5)
    assert (orig["false_success_rate"], orig["missed_success_rate"], orig["gated_share"]) == (0.5, 0.5, 0.5)
    assert (refit["world_success"], refit["agreement"], refit["false_success_rate"], refit["missed_success_rate"]) == (0.75, 0.75, 0.5, 0.0)
    assert orig["open_loop_error_step_16_m"] == 0.01 and orig["open_loop_error_step_32_m"] is None
    d = out["paired"]["held_out"]["sm_more_1"]["refit_1-original"]
    assert d["diff"] == 0.25 and d["starts"] == 8 and d["se"] == pytest.approx(np.std([0, 1, 1, -1] * 2, ddof=1) / np.sqrt(8))
    assert set(out["paired"]["pool"]["sm_branch"]) == {"refit_1-original"}


def test_coevolution_fidelity_with_the_data_control_pairs_the_refit_against_the_expert_refit():
    from benchmarks.coevolution_fidelity import coevolution_names, summarize, world_folder

    policies, worlds = coevolution_names(2, data_control=True)
    assert policies == ["sm_branch", "sm_coevo_1", "sm_more_1", "sm_demos_1", "sm_coevo_2", "sm_more_2", "sm_demos_2"]
    assert worlds == ["original", "refit_1", "refit_2", "demos_1", "demos_2"]
    assert [world_folder(w) for w in worlds[1:]] == ["sm_coevo_1", "sm_coevo_2", "sm_demos_1", "sm_demos_2"]
    ol = dict.fromkeys(("one_step_error_moving_mean_m", "open_loop_error_step_16_m", "open_loop_error_step_32_m"), 0.01)
    picked = ["original", "refit_2", "demos_2"]
    outcomes = {"original": "0000", "refit_2": "1100", "demos_2": "1000"}
    entry = {"real": "1100", "worlds": outcomes, "gated": dict.fromkeys(picked, 0.0), "open_loop": dict.fromkeys(picked, ol)}
    run = {s: {"sm_coevo_2": entry} for s in ("pool", "held_out")}
    paired = summarize([run], ["sm_coevo_2"], picked)["paired"]["pool"]["sm_coevo_2"]
    assert set(paired) == {"refit_2-original", "demos_2-original", "refit_2-demos_2"}
    assert (paired["refit_2-original"]["diff"], paired["demos_2-original"]["diff"], paired["refit_2-demos_2"]["diff"]) == (0.5, 0.25, 0.25)


def test_coevolution_fidelity_with_the_gate_control_scores_the_original_models_behind_its_gate():
    from benchmarks.coevolution_fidelity import coevolution_names, summarize, world_folder

    policies, worlds = coevolution_names(1, gate_control=True)
    assert policies == ["sm_branch", "sm_coevo_1", "sm_more_1", "sm_gate_1"]
    assert worlds == ["original", "refit_1", "gate"]
    assert [world_folder(w) for w in worlds] == [None, "sm_coevo_1", None]
    ol = dict.fromkeys(("one_step_error_moving_mean_m", "open_loop_error_step_16_m", "open_loop_error_step_32_m"), 0.01)
    entry = {"real": "1100", "worlds": {"original": "0000", "refit_1": "1100", "gate": "1110"},
             "gated": {"original": 0.5, "refit_1": 0.0, "gate": 0.25}, "open_loop": dict.fromkeys(worlds, ol)}
    out = summarize([{s: {"sm_gate_1": entry} for s in ("pool", "held_out")}], ["sm_gate_1"], worlds)
    paired = out["paired"]["pool"]["sm_gate_1"]
    assert set(paired) == {"refit_1-original", "gate-original", "refit_1-gate"}
    assert (paired["gate-original"]["diff"], paired["refit_1-gate"]["diff"]) == (0.25, 0.25)
    assert out["summary"]["pool"]["sm_gate_1"]["gate"]["gated_share"] == 0.25


def test_coevolution_fidelity_with_the_warm_refit_scores_its_fine_tuned_worlds_against_the_refits():
    from benchmarks.coevolution_fidelity import coevolution_names, summarize, world_folder

    policies, worlds = coevolution_names(2, gate_control=True, warm_refit=True)
    assert policies == ["sm_branch"] + [f"{k}_{r}" for r in (1, 2) for k in ("sm_coevo", "sm_more", "sm_gate", "sm_warm")]
    assert worlds == ["original", "refit_1", "refit_2", "gate", "warm_1", "warm_2"]
    assert [world_folder(w) for w in worlds] == [None, "sm_coevo_1", "sm_coevo_2", None, "sm_warm_1", "sm_warm_2"]
    ol = dict.fromkeys(("one_step_error_moving_mean_m", "open_loop_error_step_16_m", "open_loop_error_step_32_m"), 0.01)
    entry = {"real": "1100", "worlds": {"original": "0000", "refit_1": "1100", "refit_2": "1000", "gate": "0000",
                                        "warm_1": "1000", "warm_2": "1100"},
             "gated": dict.fromkeys(worlds, 0.0), "open_loop": dict.fromkeys(worlds, ol)}
    out = summarize([{s: {"sm_warm_2": entry} for s in ("pool", "held_out")}], ["sm_warm_2"], worlds)
    paired = out["paired"]["held_out"]["sm_warm_2"]
    assert {"refit_1-warm_1", "refit_2-warm_2", "warm_2-original", "refit_2-gate"} <= set(paired)
    assert (paired["refit_1-warm_1"]["diff"], paired["refit_2-warm_2"]["diff"]) == (0.25, -0.25)
    # fixed_starts --lines sm_warm: that line alone, and only its worlds
    assert coevolution_names(2, gate_control=True, warm_refit=True, lines=["sm_warm"]) == (
        ["sm_branch", "sm_warm_1", "sm_warm_2"], ["original", "warm_1", "warm_2"])


def test_coevolution_fidelity_asks_a_warm_refit_folder_for_its_line_and_models(tmp_path):
    from benchmarks.coevolution_fidelity import finished_runs

    run = tmp_path / "seed_0"
    for d in ("sm_branch/policy", "sm_coevo_1/policy", "sm_more_1/policy", "sm_coevo_1/state_models", "sm_warm_1/policy"):
        (run / d).mkdir(parents=True)
    arm = {"coevolution_rounds": 1, "warm_refit": {"steps": 1000, "lr": 3e-4}}
    (run / "result.json").write_text(json.dumps({"state_model_arm": arm}))
    with pytest.raises(WmrlError, match=r"seed_0 lacks sm_warm_1/state_models; expected a finished run folder"):
        finished_runs(tmp_path)
    (run / "sm_warm_1" / "state_models").mkdir()
    assert list(finished_runs(tmp_path)) == ["seed_0"]
    other = tmp_path / "seed_1"
    (other / "sm_branch").mkdir(parents=True)
    (other / "result.json").write_text(json.dumps({"state_model_arm": {**arm, "warm_refit": {"steps": 500, "lr": 3e-4}}}))
    with pytest.raises(WmrlError, match=r"its runs have different \(co-evolution rounds, data control, gate control, warm"):
        finished_runs(tmp_path)


def test_coevolution_fidelity_asks_a_gate_control_folder_for_its_line_but_no_models(tmp_path):
    from benchmarks.coevolution_fidelity import finished_runs

    run = tmp_path / "seed_0"
    for d in ("sm_branch/policy", "sm_coevo_1/policy", "sm_more_1/policy", "sm_coevo_1/state_models"):
        (run / d).mkdir(parents=True)
    (run / "result.json").write_text(json.dumps({"state_model_arm": {"coevolution_rounds": 1, "gate_control": 0.035}}))
    with pytest.raises(WmrlError, match=r"seed_0 lacks sm_gate_1; expected a finished run folder"):
        finished_runs(tmp_path)
    (run / "sm_gate_1" / "policy").mkdir(parents=True)
    assert list(finished_runs(tmp_path)) == ["seed_0"]


def test_coevolution_fidelity_bad_work_folders_give_one_line_errors(tmp_path):
    from benchmarks.coevolution_fidelity import main

    out = ["--out", str(tmp_path / "r.json")]
    with pytest.raises(WmrlError, match=r"--work is needed"):
        main(out)
    with pytest.raises(WmrlError, match=r"--held-out-starts-per-task 0 and --jobs 1 must be >= 1"):
        main(out + ["--work", str(tmp_path), "--held-out-starts-per-task", "0"])
    with pytest.raises(WmrlError, match=r"no finished run with co-evolution rounds"):
        main(out + ["--work", str(tmp_path)])
    run = tmp_path / "seed_0"
    (run / "sm_branch" / "policy").mkdir(parents=True)
    (run / "result.json").write_text(json.dumps({"state_model_arm": {"coevolution_rounds": 1}}))
    with pytest.raises(WmrlError, match=r"seed_0 lacks sm_coevo_1, sm_more_1, sm_coevo_1/state_models; expected a finished"):
        main(out + ["--work", str(tmp_path)])
    (run / "result.json").write_text(json.dumps({"state_model_arm": {"coevolution_rounds": 1, "data_control": True}}))
    with pytest.raises(WmrlError, match=r"lacks sm_coevo_1, sm_more_1, sm_demos_1, sm_coevo_1/state_models, "
                       r"sm_demos_1/state_models; expected"):
        main(out + ["--work", str(tmp_path)])
    for d in ("sm_coevo_1/policy", "sm_more_1/policy", "sm_demos_1/policy", "sm_coevo_1/state_models",
              "sm_demos_1/state_models"):
        (run / d).mkdir(parents=True)
    with pytest.raises(WmrlError, match=r"--worlds refit_9: not in this work folder; expected some of original, "
                       r"refit_1, demos_1"):
        main(out + ["--work", str(tmp_path), "--worlds", "refit_9"])
    with pytest.raises(WmrlError, match=r"--policies sm_coevo_2: not in this work folder"):
        main(out + ["--work", str(tmp_path), "--policies", "sm_coevo_2"])
    (run / "result.json").write_text("{not json")
    with pytest.raises(WmrlError, match=r"result.json: not a readable benchmarks.fixed_starts run result"):
        main(out + ["--work", str(tmp_path)])
    assert not (tmp_path / "r.json").exists()


def test_expert_pool_plays_every_start_once_at_the_demos_noise_levels():
    """benchmarks.fixed_starts' data control: the scripted expert from each pool start (its first episode,
    in start order, from the start's own scene), the pool split over the noise levels, seeded."""
    from benchmarks.fixed_starts import play_expert_pool, pool_starts

    task_ids, seeds = pool_starts(TASKS[:2], 3, 7)
    kw = {"image_size": 32}
    traj, st = play_expert_pool(task_ids, seeds, kw, [0.0, 1.0], seed=3)
    ends = np.flatnonzero(traj.dones)
    starts = np.r_[0, ends[:-1] + 1]
    assert len(ends) == 6 and st["episodes"] == 6 and st["first_episode_steps"] == len(traj.actions)
    assert [traj.task_ids[i] for i in starts] == task_ids
    env = envs.make_vec(task_ids, 6, image_size=32, autoreset_mode="same_step")
    env.reset(seed=seeds)
    np.testing.assert_allclose(traj.env_states[starts], env.unwrapped.environment_state(), atol=1e-6)
    env.close()
    assert traj.episode_success[:3].all()  # the competent expert's part
    again, _ = play_expert_pool(task_ids, seeds, kw, [0.0, 1.0], seed=3)
    np.testing.assert_array_equal(again.actions, traj.actions)
    other, _ = play_expert_pool(task_ids, seeds, kw, [0.0, 1.0], seed=4)
    first = int(ends[2]) + 1  # the noise-0 part is the same expert whatever the seed; the noisy part is not
    np.testing.assert_array_equal(other.actions[:first], traj.actions[:first])
    assert not np.array_equal(other.actions[first:first + 5], traj.actions[first:first + 5])
    with pytest.raises(ValueError, match=r"noise_levels is empty"):
        play_expert_pool(task_ids, seeds, kw, [], seed=3)


def test_fixed_starts_summary_pairs_policies_with_sft_and_averages_the_experts_pool_success():
    """benchmarks.fixed_starts.summarize: each policy's paired difference from SFT over the runs' pool
    episodes, and the data control's expert pool success by round (mean over runs; absent without it)."""
    from benchmarks.fixed_starts import summarize

    def run(sft: str, arm: str, expert: list[float] | None) -> dict:
        out = {"pool_success": {"sft": sft.count("1") / len(sft), "arm": arm.count("1") / len(arm)},
               "pool_outcomes": {"sft": sft, "arm": arm}, "held_out": {}}
        return {**out, "expert_pool_success": expert} if expert is not None else out

    s = summarize([run("0011", "0111", [0.5, 0.75]), run("1100", "1111", [1.0, 0.25])])
    assert s["pool_success"] == {"sft": 0.5, "arm": 0.875}
    assert s["pool_vs_sft"]["arm"]["diff"] == pytest.approx(3 / 8) and s["pool_vs_sft"]["arm"]["episodes"] == 8
    assert s["pool_vs_sft"]["arm"]["se"] == pytest.approx(np.std([0, 1, 0, 0, 0, 0, 1, 1], ddof=1) / np.sqrt(8))
    assert s["expert_pool_success"] == [0.75, 0.5]
    assert "expert_pool_success" not in summarize([run("0011", "0111", None), run("1100", "1111", [1.0])])


def test_held_out_scores_are_kept_beside_the_policy_until_it_or_the_protocol_changes(tmp_path):
    """benchmarks.fixed_starts.held_out_eval: the real-simulator evaluation of a work folder's policy is
    written beside it and read back while the weights and the evaluation protocol are unchanged."""
    import dataclasses

    from benchmarks.fixed_starts import held_out_eval
    from imagination.pipeline import EvalConfig, RunConfig, evaluate_in_sim
    from policies import load_policy
    from policies.vla import VLAConfig, VLAPolicy

    torch.manual_seed(0)
    VLAPolicy(VLAConfig(image_size=32, channels=(8, 8, 8), hidden_dim=32, chunk_size=3)).save_pretrained(
        tmp_path / "arm" / "policy")
    cfg = RunConfig(suite="PushCube-v0", image_size=32, eval=EvalConfig(episodes_per_task=2, num_envs=2))
    ev = held_out_eval(tmp_path / "arm" / "policy", cfg)
    assert ev == json.loads(json.dumps(evaluate_in_sim(load_policy(tmp_path / "arm" / "policy"), cfg)))
    kept = json.loads((tmp_path / "arm" / "held_out.json").read_text())
    kept["eval"]["success"] = 0.5  # a kept score is read back, not recomputed
    (tmp_path / "arm" / "held_out.json").write_text(json.dumps(kept))
    assert held_out_eval(tmp_path / "arm" / "policy", cfg)["success"] == 0.5
    more = dataclasses.replace(cfg, eval=EvalConfig(episodes_per_task=3, num_envs=3))
    assert len(held_out_eval(tmp_path / "arm" / "policy", more)["outcomes"]["PushCube-v0"]) == 3
    kept["eval"]["success"] = 0.5  # the same protocol, other weights: scored again
    kept.update(json.loads((tmp_path / "arm" / "held_out.json").read_text()), eval=kept["eval"])
    (tmp_path / "arm" / "held_out.json").write_text(json.dumps(kept))
    torch.manual_seed(1)
    VLAPolicy(VLAConfig(image_size=32, channels=(8, 8, 8), hidden_dim=32, chunk_size=3)).save_pretrained(
        tmp_path / "arm" / "policy")
    again = held_out_eval(tmp_path / "arm" / "policy", more)
    assert again == json.loads(json.dumps(evaluate_in_sim(load_policy(tmp_path / "arm" / "policy"), more)))
    assert json.loads((tmp_path / "arm" / "held_out.json").read_text())["policy_sha256"] != kept["policy_sha256"]


def test_pool_plays_are_kept_and_played_again_only_when_the_policy_or_the_pool_changes(tmp_path, monkeypatch):
    """benchmarks.fixed_starts.play_pool_kept: a policy's pool play (states, outcomes, stats; no frames) is written
    to the work folder and read back while the weights, starts and env options are unchanged, so a resumed run
    does not play its finished policies again; other weights, other starts or a damaged keep play again."""
    import benchmarks.fixed_starts as fs
    from policies import load_policy
    from policies.vla import VLAConfig, VLAPolicy

    torch.manual_seed(0)
    pdir = tmp_path / "arm" / "policy"
    VLAPolicy(VLAConfig(image_size=32, channels=(8, 8, 8), hidden_dim=32, chunk_size=3)).save_pretrained(pdir)
    task_ids, seeds = fs.pool_starts(["PushCube-v0", "LiftCube-v0"], 1, 7)
    kw = {"image_size": 32}
    played = []
    play = fs.play_pool

    def counting(*args, **kwargs):
        played.append(args[2])
        return play(*args, **kwargs)

    monkeypatch.setattr(fs, "play_pool", counting)
    traj, stats = fs.play_pool_kept(pdir, "arm", task_ids, seeds, kw, tmp_path / "work")
    fresh, fresh_stats = play(load_policy(pdir), task_ids, seeds, kw)
    assert played == [seeds] and stats == fresh_stats and traj.terminal is None
    assert traj.images.shape[1:] == (1, 1, 3) and traj.num_episodes == 2  # no frames
    for k in ("states", "actions", "successes", "episode_index", "env_states"):
        assert np.array_equal(getattr(traj, k), getattr(fresh, k)), k
    again, again_stats = fs.play_pool_kept(pdir, "arm", task_ids, seeds, kw, tmp_path / "work")
    assert played == [seeds] and again_stats == stats  # read back, not played
    assert np.array_equal(again.env_states, traj.env_states) and list(again.episode_success) == list(traj.episode_success)
    other_seeds = [s + 1 for s in seeds]
    fs.play_pool_kept(pdir, "arm", task_ids, other_seeds, kw, tmp_path / "work")
    assert played == [seeds, other_seeds]  # another pool: played (and kept in its place)
    (tmp_path / "work" / fs.POOL_KEPT / "arm.npz").write_bytes(b"not an npz")
    fs.play_pool_kept(pdir, "arm", task_ids, other_seeds, kw, tmp_path / "work")
    assert played == [seeds, other_seeds, other_seeds]  # a damaged keep: played again
    torch.manual_seed(1)
    VLAPolicy(VLAConfig(image_size=32, channels=(8, 8, 8), hidden_dim=32, chunk_size=3)).save_pretrained(pdir)
    fs.play_pool_kept(pdir, "arm", task_ids, other_seeds, kw, tmp_path / "work")
    assert len(played) == 4  # other weights: played again
    fs.play_pool_kept(pdir, "arm", task_ids, other_seeds, kw, tmp_path / "work")
    assert len(played) == 4
