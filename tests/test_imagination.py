"""ImaginedVectorEnv, keyframes, gating and the `wmrl run` pipeline, with real (tiny, quickly
trained) world / reward models on real episodes of the built-in MuJoCo suite."""

from __future__ import annotations

import copy
import json
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from imagination.coevolution import failure_weights, record_rollouts
from imagination.grpo import GRPOConfig, train_grpo
from imagination.imagined_env import ImaginedEnvConfig, ImaginedVectorEnv
from imagination.keyframes import KeyframeConfig, KeyframeSampler
from wmrl.errors import ConfigError, DatasetError, NonFiniteError, WmrlError
from wmrl.runs import RunDir

SIZE = 32


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def data():
    """Real PushCube episodes (expert, noise 0.5: successes and failures) at 32x32."""
    import envs

    torch.set_num_threads(1)
    env = envs.make_vec("PushCube-v0", 8, image_size=SIZE, autoreset_mode="same_step", seed=0)
    expert = envs.make_expert(env, noise=0.5, seed=0)
    traj, stats = record_rollouts(env, lambda obs, instr: expert.act()[:, None], 12, 1, seed=0)
    env.close()
    assert stats["episodes"] == 12 and stats["env_steps"] >= traj.num_frames
    return traj



def _expert_rollouts(num: int, **kw):
    import envs

    env = envs.make_vec("PushCube-v0", 8, image_size=SIZE, autoreset_mode="same_step", seed=0)
    expert = envs.make_expert(env, noise=0.5, seed=0)
    try:
        return record_rollouts(env, lambda obs, instr: expert.act()[:, None], num, 1, seed=0, **kw)
    finally:
        env.close()


def test_record_rollouts_keeps_only_successes(data):
    """successes_only keeps exactly the successful episodes of the same play, in order; max_finished caps it."""
    full = data  # the first 12 finished episodes, successes and failures
    ok = np.flatnonzero(full.episode_success)
    assert 0 < len(ok) < full.num_episodes
    kept, st = _expert_rollouts(len(ok), successes_only=True, max_finished=full.num_episodes)
    assert kept.episode_success.all() and kept.num_episodes == len(ok)
    # it stops once it holds them; episodes that finish on that same step are counted too
    assert ok[-1] + 1 <= st["finished"] <= full.num_episodes and st["episodes"] == len(ok)
    n = int(st["finished"])
    assert st["finished_success_rate"] == pytest.approx(full.episode_success[:n].mean())
    ref = full.select_episodes(ok)
    np.testing.assert_array_equal(kept.images, ref.images)
    np.testing.assert_array_equal(kept.actions, ref.actions)
    few, st2 = _expert_rollouts(100, successes_only=True, max_finished=5)  # stops at 5 finished episodes
    assert st2["finished"] == 5 and few.num_episodes == int(full.episode_success[:5].sum())


def test_record_rollouts_without_a_success_returns_none_and_counts_the_steps():
    import envs

    env = envs.make_vec("PushCube-v0", 4, image_size=SIZE, autoreset_mode="same_step", seed=0)
    try:
        traj, st = record_rollouts(env, lambda obs, instr: np.zeros((len(instr), 1, 7), np.float32), 2, 1, seed=0,
                                   successes_only=True, max_finished=4)
        assert traj is None and st["episodes"] == 0 and st["finished"] == 4 and st["env_steps"] >= 4 * 10
        with pytest.raises(WmrlError, match="max_finished=0"):
            record_rollouts(env, lambda obs, instr: np.zeros((len(instr), 1, 7), np.float32), 2, 1, max_finished=0)
    finally:
        env.close()


def test_record_rollouts_provenance_groups_samples_of_one_start():
    """Sub-envs reset with a shared seed start their k-th episodes alike; provenance says which is which."""
    import envs

    env = envs.make_vec("PushCube-v0", 8, image_size=SIZE, autoreset_mode="same_step", seed=0)
    expert = envs.make_expert(env, noise=0.5, seed=0)  # each sub-env draws its own action noise
    try:
        traj, st = record_rollouts(env, lambda obs, instr: expert.act()[:, None], 24, 1, seed=[11] * 4 + [22] * 4,
                                   provenance=True)
    finally:
        env.close()
    kept, fin = st["kept_from"], st["finished_from"]
    assert len(kept) == traj.num_episodes == 24 and len(fin) == st["finished"] >= 24
    assert [ok for (i, k, ok) in fin if (i, k) in set(kept)] == list(traj.episode_success)
    first = traj.episode_bounds[:, 0]
    by_start: dict[tuple[int, int], list[int]] = {}
    for e, (i, k) in enumerate(kept):
        by_start.setdefault((i // 4, k), []).append(e)
    shared = [eps for eps in by_start.values() if len(eps) > 1]
    assert shared  # several samples of one start
    for eps in shared:
        for e in eps[1:]:
            np.testing.assert_array_equal(traj.env_states[first[e]], traj.env_states[first[eps[0]]])
            np.testing.assert_array_equal(traj.images[first[e]], traj.images[first[eps[0]]])
    a, b = by_start[(0, 0)][0], by_start[(1, 0)][0]  # two seeds: two starts
    assert not np.array_equal(traj.env_states[first[a]], traj.env_states[first[b]])
    assert len({k for (_, k) in kept}) > 1 and any(
        not np.array_equal(traj.env_states[first[by_start[(0, 0)][0]]], traj.env_states[first[eps[0]]])
        for (g, k), eps in by_start.items() if g == 0 and k > 0
    )  # a sub-env's next episode starts elsewhere


def test_first_episodes_only_plays_one_given_start_per_sub_env_in_order():
    """A fixed pool of starts: sub-env i plays the start of seed i once, kept in sub-env order."""
    import envs

    seeds = [101, 202, 303, 404]

    def play(seed_list):
        env = envs.make_vec("PushCube-v0", len(seed_list), image_size=SIZE, autoreset_mode="same_step", seed=0)
        expert = envs.make_expert(env, noise=0.5, seed=0)
        try:
            return record_rollouts(env, lambda obs, instr: expert.act()[:, None], len(seed_list), 1,
                                   seed=seed_list, first_episodes_only=True, provenance=True)
        finally:
            env.close()

    traj, st = play(seeds)
    assert traj.num_episodes == 4 and st["kept_from"] == [(i, 0) for i in range(4)]
    assert st["first_episode_steps"] == traj.num_frames <= st["env_steps"]
    first = traj.episode_bounds[:, 0]
    for i, s in enumerate(seeds):  # each episode starts where a lone reset with its seed starts
        alone, _ = play([s])
        np.testing.assert_array_equal(traj.env_states[first[i]], alone.env_states[0])
        np.testing.assert_array_equal(traj.images[first[i]], alone.images[0])
    with pytest.raises(WmrlError, match="num_episodes=3 must equal num_envs=4"):
        env = envs.make_vec("PushCube-v0", 4, image_size=SIZE, autoreset_mode="same_step", seed=0)
        try:
            record_rollouts(env, lambda obs, instr: np.zeros((len(instr), 1, 7), np.float32), 3, 1,
                            first_episodes_only=True)
        finally:
            env.close()


def test_hard_start_successes_keeps_one_per_mostly_failed_start():
    from benchmarks.self_imitation import hard_start_successes

    # group 2: sub-envs 0, 1 share starts (0, k); 2, 3 share (1, k)
    fin = [(0, 0, True), (1, 0, False),  # start (0,0): rate 0.5
           (0, 1, True), (1, 1, True),  # (0,1): 1.0, solved: not kept with hard_max 0.5
           (2, 0, False), (3, 0, True),  # (1,0): 0.5
           (2, 1, False), (3, 1, False),  # (1,1): 0.0, nothing to keep
           (2, 2, True)]  # (1,2): only one of two samples finished: not kept
    kept = [(0, 0), (0, 1), (1, 1), (3, 0), (2, 2)]
    keep, rates = hard_start_successes(fin, kept, 2, 0.5, 10)
    assert rates == {(0, 0): 0.5, (0, 1): 1.0, (1, 0): 0.5, (1, 1): 0.0}
    assert keep == [(0, 0.5), (3, 0.5)]
    assert hard_start_successes(fin, kept, 2, 1.0, 10)[0] == [(0, 0.5), (3, 0.5), (1, 1.0)]
    assert hard_start_successes(fin, kept, 2, 1.0, 1)[0] == [(0, 0.5)]


def test_self_imitation_collection_seeds_the_policys_noise(monkeypatch):
    """The same seed samples the same actions whatever the process drew before; the caller's RNG is untouched."""
    import imagination.coevolution as coevolution
    from benchmarks.self_imitation import collect_successes
    from policies.vla.configuration_vla import VLAConfig
    from policies.vla.modeling_vla import VLAPolicy

    torch.manual_seed(0)
    pol = VLAPolicy(VLAConfig(image_size=SIZE, channels=(8, 8, 8), hidden_dim=32, chunk_size=2)).eval()
    seen: list[np.ndarray] = []

    def first_chunks(env, chunk_fn, *args, **kwargs):  # the real env's first observation, the policy's chunks
        obs, _ = env.reset(seed=0)
        seen.append(chunk_fn(obs, ["push the red cube onto the target"] * env.num_envs))
        return None, {"finished": 0, "episodes": 0, "finished_success_rate": 0.0, "env_steps": 0}

    monkeypatch.setattr(coevolution, "record_rollouts", first_chunks)
    for draws in (0, 5):  # other draws from the process's RNG before the collection
        torch.rand(draws)
        state = torch.get_rng_state()
        collect_successes(pol, "PushCube-v0", 1, 2, 0.1, 7, {"image_size": SIZE}, num_envs=2)
        assert torch.equal(torch.get_rng_state(), state)
    collect_successes(pol, "PushCube-v0", 1, 2, 0.1, 8, {"image_size": SIZE}, num_envs=2)
    np.testing.assert_array_equal(seen[0], seen[1])
    assert not np.allclose(seen[0], seen[2])


def test_self_imitation_collects_in_the_state_model_world_drawn_by_a_learned_renderer(monkeypatch):
    """--renderer: the state model's world the successes come from is drawn by the learned renderer (the frames the
    policy acts on and clones), not by the simulator, from the same real start and the same dynamics."""
    import imagination.coevolution as coevolution
    from benchmarks.self_imitation import collect_successes
    from policies.vla.configuration_vla import VLAConfig
    from policies.vla.modeling_vla import VLAPolicy
    from worldmodels.object_dynamics import ObjectDynamics, ObjectDynamicsConfig
    from worldmodels.state_renderer import StateRenderer, StateRendererConfig

    torch.manual_seed(0)
    pol = VLAPolicy(VLAConfig(image_size=SIZE, channels=(8, 8, 8), hidden_dim=32, chunk_size=2)).eval()
    model = ObjectDynamics(ObjectDynamicsConfig(arm=True, hidden=8, layers=1)).eval()
    drawer = StateRenderer(StateRendererConfig(image_size=SIZE, channels=[8, 16, 16, 16])).eval()
    frames: list[np.ndarray] = []

    def first_step(env, chunk_fn, *args, **kwargs):  # the world's frames at reset and after one step
        obs, _ = env.reset(seed=0)
        frames.append(obs["image"].copy())
        obs = env.step(np.zeros((env.num_envs, 7), np.float32))[0]
        frames.append(obs["image"].copy())
        return None, {"finished": 0, "episodes": 0, "finished_success_rate": 0.0, "env_steps": 0}

    monkeypatch.setattr(coevolution, "record_rollouts", first_step)
    for r in (None, drawer):
        _, st = collect_successes(pol, "PushCube-v0", 1, 2, 0.1, 7, {"image_size": SIZE}, num_envs=2,
                                  state_model=model, renderer=r)
        assert st["real_env_steps"] == 0.0  # no real physics beyond the resets
    np.testing.assert_array_equal(frames[0], frames[2])  # the same real first frame
    assert not np.array_equal(frames[1], frames[3])  # then drawn by the renderer, not the simulator


def test_imagined_overrating_is_the_worlds_rate_minus_the_real_one_of_the_collecting_policy():
    """Per task: the collection's success rate in the model's world minus the entering policy's real success,
    read from an ``eval_sft`` marker (top level) or a round marker (its ``eval`` block); tasks without a finished
    episode or a real figure are left out, and no marker gives {}."""
    from imagination.self_imitation import imagined_overrating

    stats = {"A": {"finished": 10.0, "finished_success_rate": 0.5}, "B": {"finished": 0.0, "finished_success_rate": 0.0},
             "C": {"finished": 4.0, "finished_success_rate": 0.25}}
    assert imagined_overrating(stats, {"success": 0.3, "per_task": {"A": 0.2, "B": 0.4}}) == pytest.approx({"A": 0.3})
    assert imagined_overrating(stats, {"round": 2, "eval": {"per_task": {"A": 0.6, "C": 0.5}}}) == pytest.approx(
        {"A": -0.1, "C": -0.25})
    assert imagined_overrating(stats, None) == {}


def test_self_imitation_renderer_needs_a_state_model(tmp_path):
    from benchmarks.self_imitation import main

    with pytest.raises(WmrlError, match="--renderer renderer draws a state model's world; it needs --object-dynamics"):
        main(["--runs", str(tmp_path / "missing"), "--renderer", "renderer", "--out", str(tmp_path / "o.json")])
    assert not (tmp_path / "o.json").exists()


def test_self_imitation_refit_world_is_the_cli_policy_fit_counts_its_steps_and_resumes(data, tmp_path, monkeypatch):
    """--refit-episodes: the state model fitted again (its config and seed) on the demos plus the policy's real
    episodes is the fit `python -m worldmodels.object_dynamics --policy` makes, weight for weight; a finished
    refit is kept without playing or fitting again."""
    import benchmarks.self_imitation as si
    import worldmodels.object_dynamics as od
    from policies.vla.configuration_vla import VLAConfig
    from policies.vla.modeling_vla import VLAPolicy
    from wmrl.data import Trajectories

    torch.manual_seed(0)
    VLAPolicy(VLAConfig(image_size=SIZE, channels=(8, 8, 8), hidden_dim=32, chunk_size=2)).save_pretrained(tmp_path / "pol")
    c = od.ObjectDynamicsConfig(arm=True, hidden=8, layers=1, steps=5, batch_size=16, seed=3,
                                proprio_dim=int(data.states.shape[1]))
    od.fit_object_dynamics(data, c, progress=False)[0].save_pretrained(tmp_path / "od_arm")
    rec = si.refit_world(lambda: data, tmp_path / "od_arm", tmp_path / "pol", 4, 0.1, 9001, tmp_path / "world_0")
    roll, st = od.policy_rollouts(tmp_path / "pol", ["PushCube-v0"], SIZE, 4, 0.1, 9001)
    assert rec == {"model": str(tmp_path / "world_0" / "od_arm"), "real_env_steps": st["env_steps"], "episodes": 4,
                   "real_success_rate": st["success_rate"]}
    assert st["env_steps"] > 0
    cli, _ = od.fit_object_dynamics(Trajectories.concat([data, roll]), c, progress=False)
    new = od.ObjectDynamics.from_pretrained(rec["model"])
    assert new.config == c
    assert all(torch.equal(v, cli.state_dict()[k]) for k, v in new.state_dict().items())
    for name in ("policy_rollouts", "fit_object_dynamics"):
        monkeypatch.setattr(od, name, lambda *a, **k: pytest.fail("played or fitted again"))
    again = si.refit_world(lambda: pytest.fail("loaded the demos"), tmp_path / "od_arm", tmp_path / "pol", 4, 0.1, 9001,
                           tmp_path / "world_0")
    assert again == rec


def test_self_imitation_refit_needs_a_state_model(tmp_path):
    from benchmarks.self_imitation import main

    for bad in (["--refit-episodes", "10"], ["--refit-episodes", "-1", "--object-dynamics", "od_arm"],
                ["--refit-episodes", "5", "--object-dynamics", "od_arm", "--demos-only"]):
        with pytest.raises(WmrlError, match=f"--refit-episodes {bad[1]} must be >= 0 and needs --object-dynamics"):
            main(["--runs", str(tmp_path / "missing"), *bad, "--out", str(tmp_path / "o.json")])
    assert not (tmp_path / "o.json").exists()


def test_self_imitation_rejects_a_group_that_does_not_divide_the_sub_envs(tmp_path):
    from benchmarks.self_imitation import check_group, main
    from wmrl.errors import WmrlError

    check_group(8)
    with pytest.raises(WmrlError, match=r"--group 3 must divide the 16 sub-envs .*\(1, 2, 4, 8, 16\)"):
        main(["--runs", str(tmp_path / "missing"), "--group", "3", "--out", str(tmp_path / "o.json")])
    with pytest.raises(WmrlError, match="--group 0"):
        check_group(0)
    assert not (tmp_path / "o.json").exists()


@pytest.fixture(scope="module")
def wm(data):
    """A small deterministic world model trained for a few steps on the real episodes."""
    from worldmodels import make_world_model

    torch.manual_seed(0)
    m = make_world_model(
        "deterministic",
        image_size=SIZE,
        context_frames=2,
        chunk_size=2,
        block_out_channels=[16, 32],
        head_hidden=32,
        autocast_bf16=False,
    )
    m.fit_stats(data.states, data.actions, data.rewards)
    losses = m.finetune(data, 40, batch_size=8, lr=2e-3)
    assert np.mean(losses[-8:]) < np.mean(losses[:8]), losses  # it learns
    return m.eval()


@pytest.fixture(scope="module")
def exec_reward(data):
    from rewards import ExecutabilityReward, IDMConfig, train_idm

    idm = train_idm(
        data, IDMConfig(image_size=SIZE, channels=(8, 8, 8), hidden_dim=32), steps=20, batch_size=32
    )
    return ExecutabilityReward(idm)


def make_env(wm, data, **kw):
    return ImaginedVectorEnv(wm, data, **{"num_envs": 8, "horizon": 3, **kw})


def test_contract_shapes_seeds_and_autoreset(wm, data):
    env = make_env(wm, data)
    assert env.chunk_size == 2 and env.action_space.shape == (8, 2, 7)
    obs, info = env.reset(seed=[3] * 4 + [4] * 4)
    assert obs["image"].shape == (8, SIZE, SIZE, 3) and obs["image"].dtype == np.uint8
    assert obs["state"].shape == (8, 8) and obs["state"].dtype == np.float32
    assert len(info["instruction"]) == 8 and env.task_ids == ["PushCube-v0"] * 8
    # a group shares its start; the keyframe's real frame is the first observation
    assert (env.keyframe_rows[:4] == env.keyframe_rows[0]).all() and env.keyframe_rows[
        0
    ] != env.keyframe_rows[4]
    np.testing.assert_array_equal(obs["image"][0], data.images[env.keyframe_rows[0]])
    rng = np.random.default_rng(0)
    dones = []
    for t in range(4):
        prev = obs
        obs, r, term, trunc, info = env.step(rng.uniform(-1, 1, (8, 2, 7)).astype(np.float32))
        assert r.shape == term.shape == trunc.shape == (8,) and info["success"].shape == (8,)
        assert info["chunk_valid"].shape == (8, 2) and info["chunk_frames"].shape == (8, 2, SIZE, SIZE, 3)
        assert info["gate_ok"].dtype == bool and info["reward_confidence"].shape == (8,)
        dones.append(term | trunc)
        if t == 3:  # NEXT_STEP: the step after an end resets (action ignored, reward 0, not done)
            ended = dones[2]
            assert ended.all() or (r[ended] == 0).all()
            assert not (term[ended] | trunc[ended]).any()
        assert not np.array_equal(prev["image"], obs["image"]) or t == 3
    assert dones[2][~dones[0] & ~dones[1]].all()  # truncation at the horizon (3 chunks)


def test_reset_mask_and_same_step(wm, data):
    env = make_env(wm, data, autoreset_mode="same_step")
    obs, _ = env.reset(seed=0)
    mask = np.array([True] + [False] * 7)
    obs2, _ = env.reset(seed=[50] + [None] * 7, options={"reset_mask": mask})
    np.testing.assert_array_equal(obs2["image"][1:], obs["image"][1:])
    env2 = make_env(wm, data, autoreset_mode="same_step", horizon=1)
    env2.reset(seed=1)
    _, _, term, trunc, info = env2.step(np.zeros((8, 2, 7), np.float32))
    assert (term | trunc).all() and info["_final_obs"].all() and "final_obs" in info
    with pytest.raises(WmrlError, match="reset_mask"):
        env.reset(options={"reset_mask": np.ones(3, bool)})
    with pytest.raises(WmrlError, match="action chunk has shape"):
        env.step(np.zeros((8, 4, 7), np.float32))


def test_success_termination_and_rewards(wm, data):
    env = make_env(wm, data, success_threshold=1e-6)  # the WM success head always crosses it
    env.reset(seed=0)
    _, r, term, trunc, info = env.step(np.zeros((8, 2, 7), np.float32))
    assert term.all() and info["success"].all() and (r == 1.0).all() and not trunc.any()
    assert info["chunk_valid"][:, 0].all() and not info["chunk_valid"][:, 1].any()
    env = make_env(wm, data, reward="relative", horizon=5)
    env.reset(seed=0)
    p0 = env._prev_p.copy()
    _, r, *_, info = env.step(np.zeros((8, 2, 7), np.float32))
    np.testing.assert_allclose(r, info["success_prob"] - p0, atol=1e-5)  # telescoping p_t - p_{t-1}


def test_success_source_picks_the_success_model_the_world_model_head_or_both(wm, data):
    """success_source: the success reward model's probability, the world model's own success head,
    or the lower of the two; the same actions from the same keyframes give the same frames."""
    from rewards import SuccessModelConfig, SuccessRewardModel

    torch.manual_seed(0)
    sm = SuccessRewardModel(SuccessModelConfig(image_size=SIZE, channels=(8, 8, 8), hidden_dim=32)).eval()
    acts = np.random.default_rng(1).uniform(-1, 1, (8, 2, 7)).astype(np.float32)
    probs = {}
    for src in ("success_model", "world_model", "min"):
        env = make_env(wm, data, success_model=sm, success_source=src, success_threshold=0.999)
        env.reset(seed=3)
        obs, *_, info = env.step(acts)
        probs[src] = info["success_prob"]
    head_only = make_env(wm, data, success_threshold=0.999)  # no success model: the head
    head_only.reset(seed=3)
    np.testing.assert_allclose(probs["world_model"], head_only.step(acts)[-1]["success_prob"], atol=1e-6)
    p_model = sm.predict(obs["image"], info["instruction"]).float().numpy()
    np.testing.assert_allclose(probs["success_model"], p_model, atol=1e-5)
    np.testing.assert_allclose(
        probs["min"], np.minimum(probs["success_model"], probs["world_model"]), atol=1e-5
    )
    assert not np.allclose(probs["success_model"], probs["world_model"])
    with pytest.raises(ConfigError, match="success_source='both'"):
        make_env(wm, data, success_source="both")


def test_success_persistence_needs_consecutive_frames_above_the_threshold(wm, data):
    """success_persistence=m: the episode succeeds at the frame where the probability has stayed >=
    threshold for m frames in a row, counted across chunks; the same actions from the same keyframes
    give the same frames, so a never-succeeding env's probabilities predict where."""
    from rewards import SuccessModelConfig, SuccessRewardModel

    torch.manual_seed(0)
    sm = SuccessRewardModel(SuccessModelConfig(image_size=SIZE, channels=(8, 8, 8), hidden_dim=32)).eval()
    acts = np.random.default_rng(2).uniform(-1, 1, (3, 8, 2, 7)).astype(np.float32)
    ref = make_env(wm, data, success_model=sm, success_threshold=0.999, autoreset_mode="same_step")
    ref.reset(seed=5)
    trace = np.concatenate([ref.step(a)[-1]["chunk_success_prob"] for a in acts], 1)  # (8, 6)
    thr = float(np.median(trace))
    expects = {}
    for m in (1, 2, 3):
        above = trace >= thr
        run = np.zeros_like(trace, dtype=int)
        for j in range(trace.shape[1]):
            run[:, j] = np.where(above[:, j], (run[:, j - 1] if j else 0) + 1, 0)
        expect = np.where((run >= m).any(1), (run >= m).argmax(1), -1)  # the success frame, or none
        env = make_env(wm, data, success_model=sm, success_threshold=thr, success_persistence=m,
                       autoreset_mode="same_step")
        env.reset(seed=5)
        got = np.full(8, -1)
        done = np.zeros(8, bool)
        for c, a in enumerate(acts):
            _, _, term, trunc, info = env.step(a)
            new = term & ~done
            got[new] = c * 2 + info["chunk_valid"][new].sum(1) - 1
            done |= term | trunc
        np.testing.assert_array_equal(got, expect)
        expects[m] = expect
    assert not np.array_equal(expects[1], expects[3])  # persistence moved or removed some success
    with pytest.raises(ConfigError, match="success_persistence=0"):
        make_env(wm, data, success_persistence=0)


def test_gating_mask_terminate_off(wm, data, exec_reward):
    acts = np.random.default_rng(0).uniform(-1, 1, (8, 2, 7)).astype(np.float32)
    for gate, expect_ok, expect_trunc in (
        ("mask", False, False),
        ("terminate", False, True),
        ("off", True, False),
    ):
        env = make_env(wm, data, exec_reward=exec_reward, gate=gate, exec_threshold=1.01)  # nothing passes
        env.reset(seed=0)
        _, _, term, trunc, info = env.step(acts)
        assert ((info["exec_score"] >= 0) & (info["exec_score"] <= 1)).all()
        assert (info["gate_ok"] == expect_ok)[~term].all()
        assert (trunc == expect_trunc)[~term].all()
    env = make_env(wm, data, exec_reward=exec_reward, exec_threshold=0.0, confidence_threshold=0.0)
    env.reset(seed=0)
    assert env.step(acts)[-1]["gate_ok"].all()


def test_confidence_agreement_and_outcome_scope(wm, data):
    """The reward confidence with and without the success model / world-model head agreement, and
    a confidence gate that judges every chunk (``step``) or only the episode's outcome."""
    from rewards import SuccessModelConfig, SuccessRewardModel

    torch.manual_seed(0)
    sm = SuccessRewardModel(SuccessModelConfig(image_size=SIZE, channels=(8, 8, 8), hidden_dim=32)).eval()
    acts = np.random.default_rng(1).uniform(-1, 1, (8, 2, 7)).astype(np.float32)
    thr = 0.999  # nothing succeeds: every frame of the chunk is executed
    conf = {}
    for agree in (True, False):
        env = make_env(wm, data, success_model=sm, success_threshold=thr, confidence_agreement=agree)
        env.reset(seed=3)
        info = env.step(acts)[-1]
        conf[agree] = info["reward_confidence"]
    expected = (np.abs(info["chunk_success_prob"] - thr) / thr).min(1)  # p < thr everywhere
    np.testing.assert_allclose(conf[False], expected, rtol=1e-5)
    assert (conf[True] <= conf[False] + 1e-6).all() and not np.allclose(conf[True], conf[False])

    gate_ok = {}
    for scope in ("step", "outcome"):
        env = make_env(
            wm,
            data,
            success_model=sm,
            success_threshold=thr,
            confidence_threshold=1.01,
            confidence_scope=scope,
        )  # no confidence passes
        env.reset(seed=3)
        gate_ok[scope] = np.stack([env.step(acts)[-1]["gate_ok"] for _ in range(3)])  # horizon 3
    assert not gate_ok["step"].any()  # every chunk judged
    assert gate_ok["outcome"][:2].all() and not gate_ok["outcome"][2].any()  # the failure, at its end
    with pytest.raises(ConfigError, match="confidence_scope='episode'"):
        make_env(wm, data, confidence_scope="episode")


def test_keyframe_strategies(data):
    ep_of = data.episode_index
    fails = set(np.flatnonzero(~np.asarray(data.episode_success)).tolist())
    assert fails, "the noisy expert should fail sometimes"
    rng = np.random.default_rng(0)
    start = KeyframeSampler(data, 2, KeyframeConfig("start"))
    assert all(data.frame_index[start.sample(rng)] == 0 for _ in range(50))
    late = KeyframeSampler(data, 2, KeyframeConfig("late", late_fraction=0.6))
    uni = KeyframeSampler(data, 2, KeyframeConfig("uniform"))
    assert (
        np.mean([data.frame_index[late.sample(rng)] for _ in range(200)])
        > np.mean([data.frame_index[uni.sample(rng)] for _ in range(200)]) + 5
    )
    nf = KeyframeSampler(data, 2, KeyframeConfig("near_failure", failure_mix=1.0, failure_window=5))
    rows = [nf.sample(rng) for _ in range(100)]
    assert all(ep_of[r] in fails for r in rows) and not nf.fallback
    ok_only = data.select_episodes(np.flatnonzero(np.asarray(data.episode_success)))
    assert KeyframeSampler(ok_only, 2, KeyframeConfig("near_failure")).fallback
    # no keyframe after an episode's first success; contexts stay inside the episode
    succ_rows = [r for r in (uni.sample(rng) for _ in range(300)) if data.successes[r]]
    for r in succ_rows:
        s = np.flatnonzero(data.episode_index == ep_of[r])[0]
        assert not data.successes[s:r].any()
    frames, states = uni.context(int(np.flatnonzero(data.frame_index == 0)[3]))
    assert frames.shape == (2, SIZE, SIZE, 3) and np.array_equal(frames[0], frames[1])
    with pytest.raises(ConfigError, match="strategy='sideways'"):
        KeyframeConfig("sideways")


def test_pinned_starts_start_each_seed_from_its_own_episode(wm, data):
    """LIBERO-style fixed starts: a pinned seed starts from its episode (frame 0 under ``start``, a
    keyframe inside it otherwise); other seeds and autoresets draw as before."""
    first = data.episode_bounds[:, 0]
    env = make_env(wm, data, keyframe_strategy="start")
    env.pin_starts({1000 + e: e for e in range(data.num_episodes)})
    seeds = [1000 + 5] * 4 + [1000 + 2] * 4
    env.reset(seed=seeds)
    assert list(env.keyframe_rows) == [first[5]] * 4 + [first[2]] * 4
    env.reset(seed=[7] * 8)  # not pinned: a keyframe of any episode, alike within the group
    assert len(set(env.keyframe_rows.tolist())) == 1
    uni = make_env(wm, data, keyframe_strategy="uniform")
    uni.pin_starts({3: 4})
    rows = set()
    for _ in range(12):
        uni.reset(seed=[3] * 8)
        assert len(set(uni.keyframe_rows.tolist())) == 1  # one seed: one keyframe, every time
        rows.add(int(uni.keyframe_rows[0]))
    assert rows == {int(uni.keyframe_rows[0])}
    assert all(data.episode_index[r] == 4 for r in rows)
    draws = {KeyframeSampler(data, 2).sample(np.random.default_rng(s), episode=4) for s in range(40)}
    assert len(draws) > 3 and all(data.episode_index[r] == 4 for r in draws)
    with pytest.raises(DatasetError, match="pinned start seed 9 names keyframe episode 99"):
        env.pin_starts({9: 99})


def test_bad_inputs(wm, data):
    big = copy.copy(data)
    big.images = np.repeat(np.repeat(data.images, 2, 1), 2, 2)
    with pytest.raises(DatasetError, match="64x64 frames; the world model expects 32x32"):
        make_env(wm, big)
    with pytest.raises(DatasetError, match="no episodes of \\['LiftCube-v0'\\]"):
        make_env(wm, data, task_ids=["LiftCube-v0"])
    with pytest.raises(ConfigError, match="gate='sometimes'"):
        ImaginedEnvConfig(gate="sometimes")
    with pytest.raises(ConfigError, match="multiple of the world model's chunk size"):
        make_env(wm, data, chunk_size=3)
    from test_rl import TinyGaussianPolicy

    with pytest.raises(WmrlError, match="action_dim=6"):
        train_grpo(
            make_env(wm, data),
            TinyGaussianPolicy(state_dim=8, action_dim=6),
            GRPOConfig(group_size=4),
            progress=False,
        )
    broken = copy.deepcopy(wm)
    with torch.no_grad():
        for p in broken.parameters():
            p.fill_(float("nan"))
    env = make_env(broken, data)
    with pytest.raises(NonFiniteError):
        env.reset(seed=0)
        env.step(np.zeros((8, 2, 7), np.float32))


def test_grpo_in_imagination_checkpoints(wm, data, exec_reward, tmp_path):
    from test_rl import TinyGaussianPolicy

    env = make_env(wm, data, exec_reward=exec_reward, keyframe_strategy="late")
    policy = TinyGaussianPolicy(state_dim=8, chunk_size=2, image_size=SIZE)
    run = RunDir(tmp_path / "rl")
    hist = train_grpo(
        env,
        policy,
        GRPOConfig(iterations=2, group_size=4, max_chunks=3, checkpoint_every=1),
        run=run,
        progress=False,
    )
    assert len(hist) == 2 and env.imagined_steps > 0
    assert 0.0 <= hist[-1]["valid_frac"] <= 1.0 and hist[-1]["env_steps"] > 0
    assert RunDir.step_of(run.latest_checkpoint()) == 2


def test_failure_weights(data):
    w = failure_weights(data, 3.0)
    assert w.shape == (data.num_episodes,) and set(np.unique(w)) <= {1.0, 3.0}
    assert (w[~np.asarray(data.episode_success)] == 3.0).all()


def test_coevolution_rollouts_sample_or_take_the_mean_action():
    from imagination.coevolution import CoevolutionConfig, policy_chunk_fn
    from policies.vla.configuration_vla import VLAConfig
    from policies.vla.modeling_vla import VLAPolicy

    torch.manual_seed(0)
    pol = VLAPolicy(VLAConfig(image_size=SIZE, channels=(8, 8, 8), hidden_dim=32, chunk_size=2)).eval()
    obs = {"image": np.zeros((3, SIZE, SIZE, 3), np.uint8), "state": np.zeros((3, 8), np.float32)}
    instr = ["push the red cube onto the target"] * 3
    mean = policy_chunk_fn(
        pol, deterministic=CoevolutionConfig(deterministic_rollouts=True).deterministic_rollouts
    )
    np.testing.assert_array_equal(mean(obs, instr), mean(obs, instr))
    sampled = policy_chunk_fn(pol, deterministic=CoevolutionConfig().deterministic_rollouts)
    assert not np.allclose(sampled(obs, instr), sampled(obs, instr))


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """``(run folder, its arguments)`` of a finished `wmrl run` quick preset on one task."""
    from imagination.pipeline import main

    rd = tmp_path_factory.mktemp("quick_run") / "run"
    args = [
        "--config-name",
        "run_quick",
        "--no-progress",
        f"run_dir={rd}",
        "suite=PushCube-v0",
        "demos.episodes_per_task=4",
        "demos.num_envs=4",
        "world_model_train.steps=8",
        "world_model_train.videos=0",
        "rewards.idm_steps=8",
        "rewards.success_steps=8",
        "sft.steps=10",
        "rl.iterations=1",
        "eval.episodes_per_task=2",
        "eval.num_envs=2",
        "videos=1",
        "success_calibration.episodes_per_task=2",
        "success_calibration.persistence_frames=[1,2]",
    ]
    n = torch.get_num_threads()  # module fixtures start before the per-test one-thread fixture
    torch.set_num_threads(1)
    try:
        assert main(args) == 0
    finally:
        torch.set_num_threads(n)
    return rd, args


@pytest.mark.slow
def test_pipeline_quick_runs_and_resumes(quick_run):
    """`wmrl run` quick preset end to end on one task, then a resume that skips every stage."""
    from imagination.pipeline import main

    rd, args = quick_run
    res = json.loads((rd / "results.json").read_text())
    for k in (
        "sft_success",
        "imagination_rl_success",
        "coevolution_success_by_round",
        "real_env_steps_used",
        "real_rl_same_budget_success",
        "wall_time_s",
    ):
        assert k in res
    assert len(res["coevolution_success_by_round"]) == 1 and res["real_env_steps_used"] > 0
    cal = json.loads((rd / "round_0" / "success_calibration.json").read_text())
    # round 0 spent real steps on the paired calibration episodes, and they count in the budget
    r0 = json.loads((rd / "stages" / "round_0.json").read_text())
    assert r0["real_env_steps"] == cal["real_env_steps"] > 0 and 0 < cal["threshold"] < 1
    assert cal["success_persistence"] in (1, 2)
    assert (rd / "plots" / "success_per_round.png").stat().st_size > 0
    assert (rd / "videos" / "real_vs_imagined_0.mp4").stat().st_size > 0
    assert "| SFT" in (rd / "results.md").read_text()
    # how many RL iterations updated the policy, per round and for real RL (GRPO logs a loss when it does)
    assert len(res["rl_updates_by_round"]) == 2 and all(0 <= u <= 1 for u in res["rl_updates_by_round"])
    assert res["rl_iterations_by_round"] == [1, 1] and res["real_rl_updates"][0] <= res["real_rl_updates"][1]
    # every phase played the same evaluation starts: its lift over SFT is read episode by episode
    assert set(res["lift_vs_sft"]) == {"round_0", "round_1", "real_rl"}
    assert res["lift_vs_sft"]["round_0"]["diff"] == pytest.approx(res["imagination_rl_success"] - res["sft_success"])
    assert res["lift_vs_sft"]["real_rl"]["episodes"] == 2
    assert set(res["lift_vs_round_0"]) == {"round_1", "real_rl"}  # the goals' comparisons
    assert res["lift_vs_round_0"]["real_rl"]["diff"] == pytest.approx(
        res["real_rl_same_budget_success"] - res["imagination_rl_success"])
    marker = (rd / "stages" / "round_0.json").read_text()
    assert main(args) == 0  # resume: every stage is skipped, nothing is recomputed
    assert (rd / "stages" / "round_0.json").read_text() == marker


def test_a_finished_stage_runs_again_only_when_its_recorded_inputs_change():
    """changed_inputs names what differs from a marker's recorded inputs (a key at the marker's top level
    stands in for one recorded before inputs were kept); takes_iterations says whether a run to a budget
    would take every iteration of a history (so it can resume from it)."""
    from imagination.pipeline import changed_inputs
    from imagination.trainer_utils import takes_iterations

    old = {"real_env_steps_budget": 600.0, "eval": {}}  # a marker from before inputs were kept
    assert changed_inputs(old, {"real_env_steps_budget": 600.0}) == []
    assert changed_inputs(old, {"real_env_steps_budget": 900.0}) == ["real_env_steps_budget: 600.0 -> 900.0"]
    assert changed_inputs(old, None) == []
    marker = {"inputs": {"stages": {"round_0": "a", "round_1": "b"}}}
    assert changed_inputs(marker, {"stages": {"round_0": "a", "round_1": "b"}}) == []
    assert changed_inputs(marker, {"stages": {"round_0": "a", "round_1": "c", "round_2": "d"}}) == [
        "stages: round_1, round_2"]
    assert changed_inputs(marker, {"stages": {"round_0": "a"}}) == ["stages: round_1"]
    assert changed_inputs({}, {"stages": {"round_0": "a"}}) == ["stages: not recorded before"]

    hist = [{"env_steps": 100.0}] * 3  # a run stops before an iteration that would pass its budget
    assert takes_iterations(hist, 300.0) and takes_iterations(hist, 1e9) and takes_iterations(hist, None)
    assert not takes_iterations(hist, 299.0)  # it would have stopped after two
    assert takes_iterations(hist[:1], 1.0)  # the first iteration always runs


@pytest.mark.slow
def test_a_resumed_run_with_other_rounds_redoes_the_baseline_and_the_report(quick_run, tmp_path):
    """A finished run resumed with more co-evolution rounds runs the new round, trains its real-RL
    baseline on from its checkpoint to the new real budget and writes the report again; resumed with
    fewer, it sets aside the baseline that ran past the smaller budget (kept, with its marker) and
    trains a new one, and the report covers the rounds asked for."""
    import shutil

    from imagination.pipeline import main
    from imagination.trainer_utils import takes_iterations

    src, args = quick_run
    rd = tmp_path / "run"
    shutil.copytree(src, rd, symlinks=True)
    args = [a for a in args if not a.startswith("run_dir=")] + [f"run_dir={rd}", "videos=0"]

    def marker(name):
        return json.loads((rd / "stages" / f"{name}.json").read_text())

    def history():
        ckpt = rd / "real_rl" / "rl" / "checkpoints"
        return torch.load(ckpt / (ckpt / "latest").read_text().strip() / "trainer.pt", weights_only=False)["history"]

    before, hist1 = marker("real_rl"), history()
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        # round 2 collects more real episodes, so the larger budget buys real RL another iteration
        assert main([*args, "coevolution.rounds=2", "coevolution.episodes_per_round=16"]) == 0
        budget2 = sum(marker(f"round_{r}")["real_env_steps"] for r in range(3))
        after = marker("real_rl")
        assert after["real_env_steps_budget"] == after["inputs"]["real_env_steps_budget"] == budget2
        assert budget2 > before["real_env_steps_budget"]
        # trained on from the checkpoint: the earlier iterations are the same ones
        hist2 = history()
        assert len(hist2) > len(hist1) and hist2[: len(hist1)] == hist1
        assert after["real_env_steps"] == sum(h["env_steps"] for h in hist2)
        res = json.loads((rd / "results.json").read_text())
        assert len(res["coevolution_success_by_round"]) == 2 and res["real_env_steps_used"] == budget2
        assert set(marker("report")["inputs"]["stages"]) >= {"round_2", "real_rl"}

        # fewer rounds: a baseline past round 0's budget is set aside, not trained on
        budget0 = marker("round_0")["real_env_steps"]
        assert not takes_iterations(hist2, budget0)
        assert main([*args, "coevolution.rounds=0"]) == 0
    finally:
        torch.set_num_threads(n)
    again = marker("real_rl")
    assert again["real_env_steps_budget"] == budget0
    kept = rd / f"real_rl.budget_{budget2:.0f}"
    assert json.loads((kept / "stage_real_rl.json").read_text()) == after
    # a fresh run to round 0's budget: the first iteration again (its own timing aside)
    assert (kept / "policy").is_dir() and len(history()) == len(hist1) == 1
    assert {k: v for k, v in history()[0].items() if k != "iter_time_s"} == {
        k: v for k, v in hist1[0].items() if k != "iter_time_s"}
    res = json.loads((rd / "results.json").read_text())
    assert len(res["coevolution_success_by_round"]) == 0 and res["real_env_steps_used"] == budget0
    assert "round_0" in res["stage_time_s"] and "round_1" not in res["stage_time_s"]  # the rounds reported
    report = (rd / "stages" / "report.json").read_text()
    assert main([*args, "coevolution.rounds=0"]) == 0  # nothing changed: nothing is redone
    assert (rd / "stages" / "report.json").read_text() == report

    # benchmarks.real_rl does not resume a work folder's real RL at another --budget (its checkpoints ran to one)
    from benchmarks.real_rl import run_pair

    with pytest.raises(ConfigError, match=rf"holds real RL run to a budget of {budget0} real env steps, not --budget "
                                          "480; use another --work folder"):
        run_pair(src, rd, [], 480.0, 8, progress=False, config_name="run_quick")


@pytest.mark.slow
def test_fixed_starts_without_state_models_scores_the_pixel_and_real_arms(quick_run, tmp_path):
    """benchmarks.fixed_starts on a finished run without ``state_models``: the pixel-world arms and real
    GRPO on the pool only (no sm_branch, no co-evolution), every policy scored on the same pool starts; and
    a second call returns the written result (resumable)."""
    from benchmarks.fixed_starts import ARMS, run_one

    rd, _ = quick_run
    res = run_one(rd, tmp_path / "fs", 4, 1, 1, held_out=False, progress=False)
    assert res["state_model_arm"] is None and set(res["arms"]) == set(ARMS)
    assert {"sft", *ARMS} <= set(res["pool_success"]) and res["held_out"] == {}
    starts = len(res["pool_seeds"])
    assert starts == res["starts"] == 4 and all(len(v) == starts for v in res["pool_outcomes"].values())
    assert res["real_env_steps"]["real_pool"] > 0
    assert run_one(rd, tmp_path / "fs", 4, 1, 1, held_out=False, progress=False) == res


@pytest.mark.slow
def test_the_deterministic_switch_runs_the_whole_loop_and_keeps_cpu_bits(tmp_path, restore_determinism):
    """``wmrl run deterministic=true`` on the CPU: every stage has a deterministic kernel, and every weight
    file equals the default run's byte for byte (CPU runs repeat anyway; the switch is for CUDA)."""
    from imagination.pipeline import main

    args = ["--config-name", "run_quick", "--no-progress", "suite=PushCube-v0", "demos.episodes_per_task=4",
            "demos.num_envs=4", "world_model_train.steps=8", "world_model_train.videos=0", "rewards.idm_steps=8",
            "rewards.success_steps=8", "sft.steps=10", "rl.iterations=1", "eval.episodes_per_task=2",
            "eval.num_envs=2", "videos=0", "success_calibration.episodes_per_task=2", "num_threads=1"]
    assert main([*args, f"run_dir={tmp_path / 'a'}"]) == 0
    assert main([*args, f"run_dir={tmp_path / 'b'}", "deterministic=true"]) == 0
    assert torch.are_deterministic_algorithms_enabled()
    files = sorted(f.relative_to(tmp_path / "a") for f in (tmp_path / "a").rglob("*.safetensors"))
    assert len(files) > 10
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f


def test_run_only_runs_the_named_stages_and_checks_their_inputs(tmp_path, capsys):
    """``wmrl run --only demos,world_model`` runs just those stages (a later ``wmrl run`` goes on from their
    markers); an unknown stage, or one whose inputs are not finished, is a one-line error before any work."""
    from imagination.pipeline import main

    rd = tmp_path / "run"
    tiny = ["--config-name", "run_quick", "--no-progress", f"run_dir={rd}", "suite=PushCube-v0",
            "demos.episodes_per_task=4", "demos.num_envs=4", "world_model_train.steps=4", "world_model_train.videos=0"]
    with pytest.raises(ConfigError, match=r"--only 'reward': expected one of demos, world_model, object_dynamics, sft, idm, rewards"):
        main([*tiny[:3], "--only", "reward", f"run_dir={tmp_path / 'other'}"])
    assert not (tmp_path / "other").exists()
    with pytest.raises(ConfigError, match=r"--only rewards: stage\(s\) demos, world_model of .* are not finished"):
        main([*tiny, "--only", "rewards"])
    assert main([*tiny, "--only", "world_model,demos"]) == 0  # run in the pipeline's order
    assert sorted(f.stem for f in (rd / "stages").glob("*.json")) == ["demos", "world_model"]
    assert (rd / "world_model" / "model" / "model.safetensors").exists()
    assert "world_model: done in" in capsys.readouterr().out
    marker = (rd / "stages" / "world_model.json").read_text()
    assert main([*tiny, "--only", "world_model"]) == 0  # done: skipped, not trained again
    assert (rd / "stages" / "world_model.json").read_text() == marker


def test_ranking_statistics():
    from benchmarks.wm_policy_ranking import rank_stats

    real = np.array([0.2, 0.4, 0.1, 0.8, 0.0, 0.3])
    same = rank_stats(real * 0.5 + 0.1, real)  # a world model that orders policies like the real sim
    assert same["spearman"] == pytest.approx(1.0) and same["mmrv"] == 0.0
    imag = np.array([0.1, 0.5, 0.5, 0.9, 0.0, 0.3])
    st = rank_stats(imag, real)
    assert st["spearman"] == pytest.approx(0.7537, abs=1e-3) and st["pearson"] == pytest.approx(
        0.8484, abs=1e-3
    )
    assert st["mmrv"] > 0
    assert rank_stats(np.zeros(6), real)["spearman"] is None  # undefined for a constant estimate


def test_threshold_sweep_reads_success_as_max_probability_reaching_t():
    from benchmarks.wm_policy_ranking import SWEEP_THRESHOLDS, threshold_sweep

    real = {"good": np.array([1, 1, 1, 0], bool), "bad": np.array([0, 0, 0, 1], bool)}
    max_p = {"good": np.array([0.99, 0.96, 0.6, 0.2]), "bad": np.array([0.6, 0.6, 0.6, 0.4])}
    sw = threshold_sweep({n: {"real": real[n], "imagined_max_p": max_p[n]} for n in real})
    assert set(sw) == {str(t) for t in SWEEP_THRESHOLDS}
    assert sw["0.5"]["mean_imagined_success"] == pytest.approx((3 / 4 + 3 / 4) / 2)
    assert sw["0.5"]["episode_agreement"] == pytest.approx((4 / 4 + 0 / 4) / 2)
    assert sw["0.95"]["mean_imagined_success"] == pytest.approx((2 / 4 + 0) / 2)
    assert sw["0.95"]["episode_agreement"] == pytest.approx((3 / 4 + 3 / 4) / 2)
    assert sw["0.98"]["pearson"] == pytest.approx(1.0)  # 2 policies, ordered as in the real sim


def test_success_threshold_calibration_picks_the_best_separating_threshold():
    from imagination.calibration import calibrate_success_threshold

    # imagined max probabilities on a scale where real successes sit at 0.8-0.97 and failures at
    # 0.3-0.75 (the naive 0.5 threshold would call most failures successes)
    max_p = np.array([0.97, 0.9, 0.85, 0.8, 0.75, 0.7, 0.6, 0.3, 0.5, 0.65])
    real = np.array([1, 1, 1, 1, 0, 0, 0, 0, 0, 0], bool)
    cal = calibrate_success_threshold(max_p, real)
    assert cal.threshold == pytest.approx((0.8 + 0.75) / 2)  # halfway between the classes
    assert cal.tpr == 1.0 and cal.fpr == 0.0 and cal.youden_j == 1.0 and cal.auroc == 1.0
    assert (cal.episodes, cal.positives) == (10, 4)
    # one failure above two successes: the best J keeps all successes and admits that failure
    max_p2 = np.array([0.9, 0.8, 0.6, 0.7, 0.5, 0.4, 0.3, 0.2])
    real2 = np.array([1, 1, 1, 0, 0, 0, 0, 0], bool)
    cal2 = calibrate_success_threshold(max_p2, real2)
    assert cal2.threshold == pytest.approx(0.55) and cal2.tpr == 1.0 and cal2.fpr == pytest.approx(0.2)
    # scores that carry no information: the threshold stays above them all (no imagined success)
    cal3 = calibrate_success_threshold(np.array([0.6, 0.6, 0.6, 0.6]), np.array([1, 0, 1, 0], bool))
    assert cal3.threshold > 0.6 and cal3.youden_j == 0.0
    assert 0.05 <= calibrate_success_threshold(np.array([0.01, 0.0]), np.array([1, 0], bool)).threshold
    with pytest.raises(WmrlError, match="need both real successes and real failures"):
        calibrate_success_threshold(np.array([0.2, 0.9]), np.array([1, 1], bool))
    with pytest.raises(WmrlError, match="two equal shapes"):
        calibrate_success_threshold(np.zeros(3), np.zeros(4, bool))
    with pytest.raises(WmrlError, match="non-finite"):
        calibrate_success_threshold(np.array([np.nan, 0.5]), np.array([1, 0], bool))


def test_isotonic_success_probability_and_expected_success_ranking():
    from benchmarks.wm_policy_ranking import expected
    from imagination.calibration import SuccessProbabilityCalibration

    # calibration pairs: scores below 0.5 never succeed in the real sim, 0.5-0.8 half of the time,
    # above 0.8 always; an isotonic fit gives exactly those rates (pooled where they would decrease)
    score = np.array([0.1, 0.2, 0.3, 0.55, 0.6, 0.7, 0.75, 0.85, 0.9, 0.95])
    real = np.array([0, 0, 0, 1, 0, 1, 0, 1, 1, 1], bool)
    cal = SuccessProbabilityCalibration().fit(score, real)
    p = cal.predict(np.array([0.0, 0.15, 0.65, 0.9, 1.0]))
    assert p[0] == 0.0 and p[1] == 0.0 and p[-1] == 1.0 and p[-2] == 1.0  # ends clip to the fitted range
    assert 0.0 < p[2] < 1.0
    assert np.all(np.diff(cal.predict(np.linspace(0, 1, 50))) >= 0)  # monotone
    assert (cal.episodes, cal.positives) == (10, 5)
    assert cal.brier < cal.base_rate * (1 - cal.base_rate)  # better than a constant on informative scores
    # a policy's expected success is the mean calibrated probability over its episodes
    pairs = {"good": {"real": np.array([1, 1, 0], bool), "imagined_max_p": np.array([0.9, 0.95, 0.65])},
             "bad": {"real": np.array([0, 0, 1], bool), "imagined_max_p": np.array([0.1, 0.65, 0.9])}}
    out = expected(pairs, "imagined_max_p", cal)
    mid = float(cal.predict(np.array([0.65]))[0])
    assert out["imagined_success"]["good"] == pytest.approx((1 + 1 + mid) / 3)
    assert out["imagined_success"]["bad"] == pytest.approx((0 + mid + 1) / 3)
    assert out["spearman"] == pytest.approx(1.0)
    assert out["brier"] == pytest.approx(2 * mid**2 / 6)  # one miss of size mid in each policy
    with pytest.raises(WmrlError, match="need both real successes and real failures"):
        SuccessProbabilityCalibration().fit(np.array([0.2, 0.9]), np.array([1, 1], bool))
    with pytest.raises(WmrlError, match="before fit"):
        SuccessProbabilityCalibration().predict(np.array([0.5]))


def test_paired_episodes_start_both_worlds_from_the_same_real_frames(wm, data, exec_reward):
    from test_rl import TinyGaussianPolicy

    import envs
    from imagination.calibration import paired_episodes

    torch.manual_seed(0)
    policy = TinyGaussianPolicy(state_dim=8, chunk_size=2, image_size=SIZE)
    kw = dict(image_size=SIZE, imagination=ImaginedEnvConfig(), success_model=None, exec_reward=exec_reward)
    pairs = paired_episodes(policy, wm, data, ["PushCube-v0"], 3, 5, 4, **kw)
    assert set(pairs) == {"real", "imagined", "gate_ok", "imagined_max_p", "imagined_p_trace", "real_env_steps"}
    # the trace holds every executed imagined frame's probability (4 chunks x 2 frames); its max is max_p
    assert pairs["imagined_p_trace"].shape == (3, 8) and not np.isnan(pairs["imagined_p_trace"]).any()
    np.testing.assert_allclose(pairs["imagined_p_trace"].max(1), pairs["imagined_max_p"], atol=1e-6)
    assert pairs["real"].shape == pairs["imagined_max_p"].shape == (3,) and pairs["real"].dtype == bool
    assert ((pairs["imagined_max_p"] >= 0) & (pairs["imagined_max_p"] <= 1)).all()
    # 4 chunks of 2 steps each in the real simulator (no episode ends that early)
    assert envs.task_spec("PushCube-v0").max_episode_steps > 8
    np.testing.assert_array_equal(pairs["real_env_steps"], [8, 8, 8])
    again = paired_episodes(policy, wm, data, ["PushCube-v0"], 3, 5, 4, gated_pass=False, **kw)
    assert set(again) == {"real", "imagined_max_p", "imagined_p_trace", "real_env_steps"}
    np.testing.assert_allclose(again["imagined_max_p"], pairs["imagined_max_p"], atol=1e-6)  # same starts
    other = paired_episodes(policy, wm, data, ["PushCube-v0"], 3, 50, 4, gated_pass=False, **kw)
    assert not np.allclose(other["imagined_max_p"], pairs["imagined_max_p"])  # other seeds, other starts


def test_imagined_replays_keep_real_labels(wm, data):
    from imagination.coevolution import imagined_replays

    rep = imagined_replays(wm, data)
    T = wm.config.context_frames
    long_eps = [e for e, (s, t) in enumerate(data.episode_bounds) if t - s > T]
    assert rep.num_episodes == len(long_eps)
    s, t = rep.episode_bounds[0]
    s0, _ = data.episode_bounds[long_eps[0]]
    np.testing.assert_array_equal(rep.images[s : s + T], data.images[s0 : s0 + T])  # the real context
    assert not np.array_equal(rep.images[s + T : t], data.images[s0 + T : s0 + (t - s)])  # then imagined
    np.testing.assert_array_equal(
        rep.successes[s:t], data.successes[s0 : s0 + (t - s)]
    )  # real outcome labels
    assert rep.terminal is None  # the fixture's episodes carry no terminal observations

    # with terminal observations, the replay's terminal frame is imagined too (one more step)
    from dataclasses import replace

    from wmrl.data import TerminalObs

    ends = np.asarray(data.episode_bounds)[:, 1] - 1
    term = TerminalObs(
        images=data.images[ends].copy(),
        wrist_images=None,
        states=data.states[ends].copy(),
        successes=np.asarray(data.episode_success, bool).copy(),
    )
    rep2 = imagined_replays(wm, replace(data, terminal=term))
    # the same replay (frames of the last chunk may move slightly: its padding is now a real action)
    assert np.abs(rep2.images.astype(np.int16) - rep.images.astype(np.int16)).mean() < 0.5
    np.testing.assert_array_equal(rep2.terminal.successes, term.successes[long_eps])
    assert not np.array_equal(rep2.terminal.images, term.images[long_eps])
    with torch.no_grad():
        s1, t1 = np.asarray(data.episode_bounds)[long_eps[0]]
        one = (
            wm.rollout(
                data.images[s1 : s1 + T][None],
                data.states[s1 : s1 + T][None],
                data.actions[s1 + T - 1 : t1][None],
            )
            .frames[0, -1]
            .cpu()
            .numpy()
        )
    np.testing.assert_array_equal(rep2.terminal.images[0], one)


def test_rollout_frames_batches_episodes_of_different_lengths(wm, data):
    """Each episode's frames are its own rollout's: exactly so one at a time, and up to float
    rounding (which an autoregressive model carries forward) when batched with longer ones."""
    from imagination.coevolution import rollout_frames

    T = wm.config.context_frames
    bounds = np.asarray(data.episode_bounds)[:6]
    lengths = [3, 7, 1, 5, 2, 7]  # not multiples of the chunk (2), and unsorted
    ctx = [data.images[s : s + T] for s, _ in bounds]
    st = [data.states[s : s + T] for s, _ in bounds]
    acts = [data.actions[s : s + n] for (s, _), n in zip(bounds, lengths)]
    with torch.no_grad():
        own = [wm.rollout(c[None], x[None], a[None]).frames[0].cpu().numpy() for c, x, a in zip(ctx, st, acts)]
    one = rollout_frames(wm, ctx, st, acts, batch_size=1)
    batched = rollout_frames(wm, ctx, st, acts, batch_size=4)
    for n, o, f1, fb in zip(lengths, own, one, batched):
        assert f1.shape == fb.shape == (n, SIZE, SIZE, 3) and f1.dtype == np.uint8
        np.testing.assert_array_equal(f1, o)
        assert np.abs(fb.astype(np.int16) - o.astype(np.int16)).mean() < 0.5
    assert rollout_frames(wm, [], [], []) == []


def test_imagined_random_failures_are_labelled_failures(wm, data):
    from imagination.coevolution import imagined_random_failures
    from wmrl.data import Trajectories

    neg = imagined_random_failures(wm, data, episodes=5, seed=0)
    assert neg.num_episodes == 5 and not neg.successes.any() and not neg.rewards.any()
    assert neg.terminal is None or not neg.terminal.successes.any()
    used = wm.action_dim_mask().numpy().astype(bool)
    assert (neg.actions[:, ~used] == 0).all() and np.abs(neg.actions[:, used]).max() <= 1.0
    assert neg.actions[:, used].std() > 0.3  # uniform in [-1, 1], not the demos' actions
    firsts = {data.images[s].tobytes() for s, _ in data.episode_bounds}
    for s, t in neg.episode_bounds:
        assert neg.images[s].tobytes() in firsts  # starts at a real reset frame ...
        assert not (neg.images[s + 1 : t] == neg.images[s]).all()  # ... then imagined
    both = Trajectories.concat([data, neg])
    assert both.num_episodes == data.num_episodes + 5
    assert imagined_random_failures(wm, data, episodes=0) is None
    again = imagined_random_failures(wm, data, episodes=5, seed=0)
    np.testing.assert_array_equal(again.actions, neg.actions)  # seeded


def test_dims_constant_in_data_do_not_steer_the_world_model(wm, data):
    """The built-in suite ignores the rotation dims (constant 0 in every demo). Exploration noise on
    them must not change what the world model imagines (it once read 0.2 as 20 sigma and produced
    garbage frames that the success model scored as success)."""
    assert np.allclose(np.asarray(data.actions)[:, 3:6], 0.0)
    outs = []
    for rot in (0.0, 0.3):
        env = make_env(wm, data, gate="off")
        env.reset(seed=3)
        a = np.zeros((8, env.chunk_size, 7), np.float32)
        a[..., 0] = 0.5
        a[..., 3:6] = rot
        obs, *_ = env.step(a)
        outs.append(obs["image"].astype(np.int16))
    assert np.array_equal(outs[0], outs[1])
    # the dims the data did vary still steer it
    env = make_env(wm, data, gate="off")
    env.reset(seed=3)
    a[..., 3:6], a[..., 0] = 0.0, -0.5
    obs, *_ = env.step(a)
    assert not np.array_equal(obs["image"].astype(np.int16), outs[0])


# a whole main job in seconds: the imagination_lift benchmark's variant tests run it on one task
LIFT_TINY = ["suite=PushCube-v0", "demos.episodes_per_task=4", "demos.num_envs=4", "world_model_train.steps=8",
             "world_model_train.videos=0", "rewards.idm_steps=8", "rewards.success_steps=8", "sft.steps=10",
             "rl.iterations=1", "eval.episodes_per_task=2", "eval.num_envs=2", "videos=0"]


def test_imagination_lift_coevolution_variant_reruns_the_rounds_from_the_same_round_0(tmp_path):
    """A co-evolution variant shares the seed's round-0 policy and models, runs the rounds again with its
    overrides, and is read round by round against the default; one that changes the world model is a
    one-line error before any work."""
    from benchmarks.imagination_lift import main
    from wmrl.errors import ConfigError

    tiny, runs, out = LIFT_TINY, tmp_path / "runs", tmp_path / "lift.json"
    with pytest.raises(ConfigError, match="--coevolution-variant wm: world_model_train.steps=4 changes the models"):
        main([*tiny, "--quick", "--runs-dir", str(runs), "--no-progress", "--out", str(out),
              "--coevolution-variant", "wm", "world_model_train.steps=4"])  # variants come last
    with pytest.raises(ConfigError, match="bad config override.*coevolution.no_such_key"):
        main([*tiny, "--quick", "--runs-dir", str(runs), "--no-progress", "--out", str(out),
              "--coevolution-variant", "typo", "coevolution.no_such_key=1"])
    assert not runs.exists()
    assert main([*tiny, "--quick", "--runs-dir", str(runs), "--no-progress", "--no-ablations", "--out", str(out),
                 "--coevolution-variant", "noft", "coevolution.wm_finetune_steps=0",
                 "coevolution.success_finetune_steps=0"]) == 0
    base, var = runs / "seed_0", runs / "seed_0" / "coevolution_noft"
    assert (var / "round_0" / "policy" / "model.safetensors").read_bytes() == (
        base / "round_0" / "policy" / "model.safetensors").read_bytes()
    assert (var / "data").is_symlink() and (var / "round_1" / "policy").is_dir()
    res = json.loads(out.read_text())["coevolution_variants"]["noft"]
    assert len(res["coevolution_success_by_round"]) == 1 and set(res["vs_default"]) == {"round_1"}
    assert res["vs_default"]["round_1"]["diff_per_seed"] == [pytest.approx(
        json.loads((var / "stages" / "round_1.json").read_text())["eval"]["success"]
        - json.loads((base / "stages" / "round_1.json").read_text())["eval"]["success"])]


def test_imagination_lift_full_variant_reruns_every_phase_after_sft(tmp_path):
    """A full variant shares the seed's data, models and SFT policy, runs RL in imagination, the rounds and
    real RL again with its overrides, and reads each phase against the default run's same phase; a bad
    key is a one-line error before any work."""
    from benchmarks.imagination_lift import main
    from wmrl.errors import ConfigError

    tiny, runs, out = LIFT_TINY, tmp_path / "runs", tmp_path / "lift.json"
    with pytest.raises(ConfigError, match="bad config override.*rl.no_such_key"):
        main([*tiny, "--quick", "--runs-dir", str(runs), "--no-progress", "--out", str(out),
              "--full-variant", "typo", "rl.no_such_key=1"])
    assert not runs.exists()
    assert main([*tiny, "--quick", "--runs-dir", str(runs), "--no-progress", "--no-ablations", "--out", str(out),
                 "--full-variant", "maxkl", "rl.max_kl=0.001"]) == 0
    base, var = runs / "seed_0", runs / "seed_0" / "full_maxkl"
    assert (var / "sft").is_symlink() and (var / "round_0" / "policy").is_dir() and (var / "real_rl").is_dir()
    res = json.loads(out.read_text())
    full = res["full_variants"]["maxkl"]
    assert full["sft_success"] == res["sft_success"]  # the same SFT policy and evaluation
    assert set(full["vs_default"]) == {"round_0", "round_1", "real_rl"} and "goals" in full
    for ph in ("round_0", "real_rl"):
        assert full["vs_default"][ph]["diff_per_seed"] == [pytest.approx(
            json.loads((var / "stages" / f"{ph}.json").read_text())["eval"]["success"]
            - json.loads((base / "stages" / f"{ph}.json").read_text())["eval"]["success"])]
    assert "max_kl: 0.001" in (var / "config.yaml").read_text()  # the variant's setting took effect
    assert "max_kl: 0.01\n" in (base / "config.yaml").read_text()  # the default
    # --full-reference: another full variant (PPO in every phase) read against this one, phase by phase
    # (this one resumes)
    with pytest.raises(ConfigError, match="--full-reference 'nope' is not a --full-variant"):
        main([*tiny, "--quick", "--runs-dir", str(runs), "--no-progress", "--no-ablations", "--out", str(out),
              "--full-variant", "maxkl", "rl.max_kl=0.001", "--full-reference", "nope"])
    assert main([*tiny, "--quick", "--runs-dir", str(runs), "--no-progress", "--no-ablations", "--out", str(out),
                 "--full-variant", "maxkl", "rl.max_kl=0.001", "--full-variant", "ppo", "rl=ppo",
                 "rl.max_kl=0.001", "--full-reference", "maxkl"]) == 0
    res = json.loads(out.read_text())
    assert "algo: ppo" in (base / "full_ppo" / "config.yaml").read_text()  # every phase with PPO
    assert "ppo/update_kl_full" in (base / "full_ppo" / "round_0" / "rl" / "metrics.jsonl").read_text()
    vs_ref = res["full_variants"]["ppo"]["vs_reference"]
    assert vs_ref["reference"] == "maxkl" and "vs_reference" not in res["full_variants"]["maxkl"]
    for ph in ("round_0", "round_1", "real_rl"):
        assert vs_ref[ph]["diff_per_seed"] == [pytest.approx(
            json.loads((base / "full_ppo" / "stages" / f"{ph}.json").read_text())["eval"]["success"]
            - json.loads((var / "stages" / f"{ph}.json").read_text())["eval"]["success"])]


def test_real_rl_benchmark_inputs_and_summary(tmp_path):
    """benchmarks.real_rl: an unfinished run folder and a malformed --variant are clear errors;
    the summary's lift is RL minus SFT per seed, averaged."""
    from benchmarks.real_rl import DEFAULT_VARIANTS, _link_run, _parse_variants, run_pair, summarize
    from wmrl.errors import ConfigError, WmrlError

    (tmp_path / "half" / "stages").mkdir(parents=True)
    with pytest.raises(WmrlError, match="not a finished wmrl run"):
        _link_run(tmp_path / "half", tmp_path / "dst")
    for st in ("demos", "world_model", "idm", "rewards", "sft", "eval_sft"):
        (tmp_path / "half" / "stages" / f"{st}.json").write_text("{}")
    with pytest.raises(WmrlError, match="no integer seed"):  # finished stages but no config.yaml
        run_pair(tmp_path / "half", tmp_path / "dst", [], 10.0, 8, progress=False)
    assert not (tmp_path / "dst").exists()  # nothing written on bad input
    from benchmarks.real_rl import main as real_rl_main

    with pytest.raises(WmrlError, match="--rl-seed -1 must be >= 0"):
        real_rl_main(["--runs", str(tmp_path / "half"), "--rl-seed", "-1", "--out", str(tmp_path / "o.json")])
    for bad in (["1e5"], ["9e5", "8e5"]):  # a curve goes on past --budget (3.8e5), in increasing steps
        with pytest.raises(WmrlError, match="must increase and start above --budget 380000"):
            real_rl_main(["--runs", str(tmp_path / "half"), "--curve", *bad, "--out", str(tmp_path / "o.json")])
    with pytest.raises(WmrlError, match=r"--init-policy .*nowhere/seed_0/policy: no saved policy there"):
        real_rl_main(["--runs", str(tmp_path / "seed_0"), "--init-policy", str(tmp_path / "nowhere/{run}/policy"),
                      "--out", str(tmp_path / "o.json")])
    assert not (tmp_path / "o.json").exists() and not (tmp_path / "seed_0").exists()
    # a work folder remembers the policy its RL started from, and is not resumed from another
    from benchmarks.real_rl import check_start_policy

    pol = tmp_path / "pol"
    pol.mkdir()
    (pol / "model.safetensors").write_bytes(b"weights")
    first = check_start_policy(tmp_path / "w", pol)
    assert first["path"] == str(pol) and len(first["sha256"]) == 64
    assert check_start_policy(tmp_path / "w", pol) == first  # the same start resumes
    with pytest.raises(WmrlError, match=r"holds RL started from .*pol, not from SFT; use another --work"):
        check_start_policy(tmp_path / "w", None)
    (pol / "model.safetensors").write_bytes(b"other weights")
    with pytest.raises(WmrlError, match=r"holds RL started from .*pol, not from .*pol; use another --work"):
        check_start_policy(tmp_path / "w", pol)
    assert check_start_policy(tmp_path / "sft_w", None) == {"path": None, "sha256": None}
    (tmp_path / "old" / "real_rl").mkdir(parents=True)  # RL from before start policies were recorded: SFT's
    with pytest.raises(WmrlError, match=r"holds RL started from SFT, not from"):
        check_start_policy(tmp_path / "old", pol)
    assert _parse_variants(None) == DEFAULT_VARIANTS
    assert _parse_variants([["lr3", "rl.lr=0.0003"]]) == {"lr3": ["rl.lr=0.0003"]}
    with pytest.raises(ConfigError, match="expected a new NAME"):
        _parse_variants([["rl.lr=0.0003"]])
    from benchmarks._variants import parse_variants  # the same parser serves imagination_lift --variant

    for bad in ([["it128", "rl.iterations"]], [["a", "x=1"], ["a", "y=2"]], [["kir_off", "x=1"]]):
        with pytest.raises(ConfigError, match="expected a new NAME"):
            parse_variants(bad, taken=("kir_off",))
    from benchmarks._stats import run_keys  # result keys of run folders that share a name stay apart

    assert run_keys([tmp_path / "seed_0", tmp_path / "seed_1"]) == ["seed_0", "seed_1"]
    assert run_keys(["r/seed_0/ablation_x", "r/seed_1/ablation_x"]) == ["seed_0/ablation_x", "seed_1/ablation_x"]
    with pytest.raises(ValueError, match="same folder twice"):
        run_keys(["r/a", "r/a"])
    # an imagination_lift variant that changes the world model trains its own world and reward models
    from benchmarks.imagination_lift import link_shared_stages, retrained_stages

    assert retrained_stages(["rl.iterations=128"]) == ()
    assert retrained_stages(["world_model.state_conditioned_frames=true"]) == ("world_model", "rewards")
    assert retrained_stages(["+world_model_train.steps=10"]) == ("world_model", "rewards")
    assert retrained_stages(["rewards.success_steps=5"]) == ("rewards",)
    assert retrained_stages(["rewards.success.hidden_dim=64", "rewards.imagined_replays=false"]) == ("rewards",)
    assert retrained_stages(["rewards.idm_steps=5"]) == ("idm", "rewards")
    assert retrained_stages(["rewards.batch_size=8", "world_model_train.steps=5"]) == ("world_model", "idm", "rewards")
    for sub in ("data", "world_model", "rewards/executability", "rewards/success", "sft"):
        (tmp_path / "half" / sub).mkdir(parents=True)
    link_shared_stages(tmp_path / "half", tmp_path / "var", ("world_model", "rewards"))
    assert (tmp_path / "var" / "data").is_symlink() and (tmp_path / "var" / "sft").is_symlink()
    assert not (tmp_path / "var" / "world_model").exists() and not (tmp_path / "var" / "rewards").is_symlink()
    # the IDM needs no world model: the variant links it and retrains the success model alone
    assert (tmp_path / "var" / "rewards" / "executability").is_symlink()
    assert not (tmp_path / "var" / "rewards" / "success").exists()
    assert sorted(p.stem for p in (tmp_path / "var" / "stages").iterdir()) == ["demos", "eval_sft", "idm", "sft"]
    link_shared_stages(tmp_path / "half", tmp_path / "var2")  # nothing retrained: the whole folder is linked
    assert (tmp_path / "var2" / "rewards").is_symlink() and len(list((tmp_path / "var2" / "stages").iterdir())) == 6
    (tmp_path / "half" / "stages" / "idm.json").unlink()  # a run from before the IDM had its own stage
    link_shared_stages(tmp_path / "half", tmp_path / "var3", ("world_model", "rewards"))
    assert list((tmp_path / "var3" / "rewards").iterdir()) == []  # its rewards stage trained both: both retrain
    assert sorted(p.stem for p in (tmp_path / "var3" / "stages").iterdir()) == ["demos", "eval_sft", "sft"]
    def pt(budget: float, success: float) -> dict:
        return {"budget_real_env_steps": budget, "rl_success": success, "rl_iterations": int(budget)}

    res = summarize(
        {
            "v": {
                "seed_0": {"sft_success": 0.4, "rl_success": 0.5, "lift": 0.1, "curve": [pt(1, 0.5), pt(2, 0.6)]},
                "seed_1": {"sft_success": 0.3, "rl_success": 0.2, "lift": -0.1, "curve": [pt(1, 0.2), pt(2, 0.4)]},
            }
        }
    )["v"]
    assert (
        res["lift"] == pytest.approx(0.0)
        and res["seeds_lifted"] == 1
        and res["rl_success"] == pytest.approx(0.35)
    )
    assert [c["budget_real_env_steps"] for c in res["curve"]] == [1.0, 2.0]
    assert [c["rl_success"] for c in res["curve"]] == pytest.approx([0.35, 0.5])
    assert res["curve"][1]["rl_success_per_seed"] == [0.6, 0.4]
    assert res["lift_vs_sft"] is None and res["curve"][0]["lift_vs_sft"] is None  # no outcomes kept: no pairing
    # episode by episode against SFT's evaluation of the same starts, per seed, then over the seeds
    from benchmarks.real_rl import episode_fields, paired_text, seed_mean_lift

    sft = {"outcomes": {"a": "0101", "b": "0011"}}
    e0 = episode_fields({"outcomes": {"a": "1101", "b": "0011"}}, sft)  # one more success of 8
    e1 = episode_fields({"outcomes": {"a": "0100", "b": "1011"}}, sft)  # one gained, one lost
    assert e0["outcomes"] == {"a": "1101", "b": "0011"}
    assert e0["lift_vs_sft"]["diff"] == pytest.approx(0.125) and e0["lift_vs_sft"]["episodes"] == 8
    assert e1["lift_vs_sft"]["diff"] == pytest.approx(0.0)
    both = seed_mean_lift([e0, e1])
    assert both["diff"] == pytest.approx(0.0625) and both["diff_per_seed"] == pytest.approx([0.125, 0.0])
    assert both["se"] == pytest.approx((e0["lift_vs_sft"]["se"] ** 2 + e1["lift_vs_sft"]["se"] ** 2) ** 0.5 / 2)
    assert paired_text({"lift_vs_sft": both}).startswith(", paired [") and paired_text({"lift_vs_sft": None}) == ""
    assert episode_fields({"success": 0.5}, sft) == {"outcomes": None, "lift_vs_sft": None}  # an old evaluation
    assert seed_mean_lift([e0, {"lift_vs_sft": None}]) is None
    with_eps = summarize({"v": {"s0": {"sft_success": 0.5, "rl_success": 0.625, "lift": 0.125, "curve": [], **e0},
                                "s1": {"sft_success": 0.5, "rl_success": 0.5, "lift": 0.0, "curve": [], **e1}}})["v"]
    assert with_eps["lift_vs_sft"] == both


class _NoisePolicy:
    """Zero-mean chunks plus the global RNG's noise when sampled; records every chunk it returns."""

    chunk_size, action_dim, image_size = 2, 7, SIZE

    def __init__(self):
        self.chunks: list[np.ndarray] = []

    def act(self, obs, instructions, deterministic=False):
        from types import SimpleNamespace

        b = len(instructions)
        a = torch.zeros(b, 2, 7) if deterministic else (torch.randn(b, 2, 7) * 0.3).clamp(-1, 1)
        self.chunks.append(a.numpy().copy())
        return SimpleNamespace(actions=a)


def test_paired_episodes_score_more_models_record_frames_and_share_policy_noise(wm, data):
    from imagination.calibration import paired_episodes
    from rewards import SuccessModelConfig, SuccessRewardModel

    torch.manual_seed(0)
    sm = SuccessRewardModel(SuccessModelConfig(image_size=SIZE, channels=(8, 8, 8), hidden_dim=32)).eval()
    kw = dict(image_size=SIZE, imagination=ImaginedEnvConfig(), success_model=sm, exec_reward=None)
    pol = _NoisePolicy()
    pairs = paired_episodes(pol, wm, data, ["PushCube-v0"], 3, 5, 4, gated_pass=False, deterministic=False,
                            score_models={"same": sm}, record_frames=True, **kw)
    # another model scoring the same imagined frames: the same model gives the same statistic
    np.testing.assert_allclose(pairs["imagined_max_p_same"], pairs["imagined_max_p"], atol=1e-5)
    # every executed imagined frame, with the number of actions before it (4 chunks x 2, no episode ends)
    assert pairs["frames"].shape == (3 * 8, SIZE, SIZE, 3) and pairs["frames"].dtype == np.uint8
    for e in range(3):
        np.testing.assert_array_equal(np.sort(pairs["frame_step"][pairs["frame_episode"] == e]), np.arange(1, 9))
    assert len(pairs["instruction"]) == 3 and all(str(s).startswith("push the") for s in pairs["instruction"])
    # common random numbers: the real pass and the imagined pass drew the same policy noise
    assert len(pol.chunks) == 8
    for c in range(4):
        np.testing.assert_array_equal(pol.chunks[c], pol.chunks[4 + c])
    assert np.abs(pol.chunks[0]).max() > 0
    again = paired_episodes(_NoisePolicy(), wm, data, ["PushCube-v0"], 3, 5, 4, gated_pass=False,
                            deterministic=False, **kw)
    np.testing.assert_allclose(again["imagined_max_p"], pairs["imagined_max_p"], atol=1e-6)  # reproducible
    mean = paired_episodes(_NoisePolicy(), wm, data, ["PushCube-v0"], 3, 5, 4, gated_pass=False, **kw)
    assert not np.allclose(mean["imagined_max_p"], pairs["imagined_max_p"])  # the noise changed the rollout


def test_paired_success_frames_label_imagined_frames_by_the_real_outcome():
    from imagination.calibration import paired_success_frames

    pairs = {
        "real": np.array([True, False]),
        "real_env_steps": np.array([5, 8]),
        "frame_episode": np.array([0, 0, 0, 1, 1]),
        "frame_step": np.array([4, 5, 6, 5, 8]),
        "frames": np.zeros((5, SIZE, SIZE, 3), np.uint8),
        "instruction": np.array(["a", "b"], dtype=object),
    }
    pool = paired_success_frames(pairs)
    # the real success came after 5 actions: imagined frames from step 5 on are successes; a real failure's none
    np.testing.assert_array_equal(pool.labels, [False, True, True, False, False])
    assert pool.instructions == ["a", "a", "a", "b", "b"] and not pool.terminal.any()
    with pytest.raises(WmrlError, match="record_frames=True"):
        paired_success_frames({k: v for k, v in pairs.items() if k != "frames"})


def test_success_model_finetune_on_paired_imagined_frames(data):
    from imagination.calibration import finetune_success_on_pairs
    from rewards import SuccessModelConfig, SuccessRewardModel
    from rewards.success import SuccessFrames, _class_probs

    p = _class_probs(np.array([1.0, 1.0, 2.0, 4.0]), np.array([False, False, True, True]), 0.25)
    np.testing.assert_allclose(p, [0.375, 0.375, 0.25 / 3, 0.5 / 3])
    np.testing.assert_allclose(_class_probs(np.array([1.0, 3.0]), np.array([True, True]), 0.25), [0.25, 0.75])
    torch.manual_seed(0)
    sm = SuccessRewardModel(SuccessModelConfig(image_size=SIZE, channels=(8, 8, 8), hidden_dim=32)).eval()
    before = {k: v.clone() for k, v in sm.state_dict().items()}
    n = 6
    pairs = {
        "real": np.array([True, False]),
        "real_env_steps": np.array([2, 3]),
        "frame_episode": np.array([0, 0, 0, 1, 1, 1]),
        "frame_step": np.array([1, 2, 3, 1, 2, 3]),
        "frames": data.images[:n],
        "instruction": np.array([data.instructions[0]] * 2, dtype=object),
    }
    ft = finetune_success_on_pairs(sm, data, pairs, steps=3)
    assert all(torch.equal(before[k], v) for k, v in sm.state_dict().items())  # the original is untouched
    assert any(not torch.equal(before[k], v) for k, v in ft.state_dict().items())
    bad = SuccessFrames(np.zeros((2, 8, 8, 3), np.uint8), np.array([True, False]), ["a", "b"], np.arange(2),
                        np.zeros(2, bool))
    with pytest.raises(WmrlError, match="extra frames have shape"):
        sm.finetune(data, steps=1, extra=bad)


def test_spearman_bootstrap_interval_and_noise_ceiling():
    from benchmarks.wm_policy_ranking import noise_ceiling, spearman_ci95

    rng = np.random.default_rng(0)
    real = [rng.random(72) < p for p in (0.05, 0.3, 0.6, 0.9)]
    assert spearman_ci95(real, real) == [1.0, 1.0]  # a world that agrees episode by episode
    coin = [rng.random(72) < 0.5 for _ in range(4)]  # outcomes unrelated to the real ones
    lo, hi = spearman_ci95(coin, real)
    assert lo < 0 < hi
    assert spearman_ci95([np.zeros(5, bool)] * 3, [np.ones(5, bool)] * 3) is None  # constant rates
    ceil = noise_ceiling(np.array([0.1, 0.4, 0.5]), np.array([0.1, 0.5, 0.4]))
    assert ceil["spearman"] == pytest.approx(0.5) and ceil["retest_success"] == [0.1, 0.5, 0.4]


def test_resolved_pairs_count_only_policies_the_real_simulator_tells_apart(tmp_path):
    import json

    from benchmarks.wm_policy_ranking import pair_order_accuracy, rescore, resolved_pairs

    e = 60
    real = {"strong": np.arange(e) % 10 < 9, "weak": np.arange(e) % 10 < 1}
    real["twin"] = real["strong"].copy()  # differs from "strong" on 12 starts, 6 each way
    real["twin"][:6] = False
    real["twin"][9::10] = True
    pairs = resolved_pairs(real)
    assert sorted(pairs) == [("strong", "weak"), ("twin", "weak")]  # the near-twins are not a pair
    assert pair_order_accuracy({"strong": 0.9, "twin": 0.2, "weak": 0.1}, pairs)["accuracy"] == 1.0
    flipped = pair_order_accuracy({"strong": 0.1, "twin": 0.1, "weak": 0.1}, pairs)
    assert flipped == {"accuracy": 0.5, "agree": 0, "ties": 2, "pairs": 2}  # ties count half
    assert pair_order_accuracy({"strong": 0.0, "twin": 0.0, "weak": 1.0}, pairs)["accuracy"] == 0.0
    assert pair_order_accuracy({}, [])["accuracy"] is None
    # --rescore adds the block to a finished result from its per-episode pairs, keeping the rest
    rows = {n: {"imagined_success": float(v.mean()), "imagined_success_gated": 0.0, "real_success_retest": float(v.mean())}
            for n, v in real.items()}
    out = tmp_path / "rank.json"
    out.write_text(json.dumps({"policies": rows, "spearman": 0.5, "calibrated": {"error": "x"},
                               "expected": {"max_p": {"imagined_success": {"strong": 0.3, "twin": 0.3, "weak": 0.4}}}}))
    np.savez_compressed(tmp_path / "rank.pairs.npz", **{f"{n}/real": v for n, v in real.items()})
    block = rescore(out)["resolved_pairs"]
    saved = json.loads(out.read_text())
    assert saved["spearman"] == 0.5 and saved["resolved_pairs"] == block
    assert (block["num_pairs"], block["of_pairs"]) == (2, 3)
    assert set(block["accuracy"]) == {"plain", "gated", "expected_max_p", "real_retest"}
    assert block["accuracy"]["plain"]["accuracy"] == 1.0 and block["accuracy"]["gated"]["accuracy"] == 0.5
    assert block["accuracy"]["expected_max_p"]["accuracy"] == 0.0
    (tmp_path / "rank.pairs.npz").write_bytes(b"not a zip")
    with pytest.raises(WmrlError, match="rank.pairs.npz is not a readable .npz"):
        rescore(out)
    (tmp_path / "rank.pairs.npz").unlink()
    with pytest.raises(WmrlError, match="rank.pairs.npz does not exist"):
        rescore(out)
    out.write_text("{not json")
    np.savez_compressed(tmp_path / "rank.pairs.npz", **{f"{n}/real": v for n, v in real.items()})
    with pytest.raises(WmrlError, match="rank.json is not a wm_policy_ranking result"):
        rescore(out)
    assert out.read_text() == "{not json"  # nothing written over a bad input


def test_persisted_max_needs_the_probability_held_for_consecutive_frames():
    from imagination.calibration import persisted_max

    nan = np.nan
    trace = np.array([[0.1, 0.9, 0.2, 0.8, 0.85, nan], [0.6, 0.7, nan, nan, nan, nan], [nan] * 6])
    np.testing.assert_allclose(persisted_max(trace, 1), [0.9, 0.7, 0.0])  # the plain max
    np.testing.assert_allclose(persisted_max(trace, 2), [0.8, 0.6, 0.0])  # one-frame spike 0.9 no longer counts
    np.testing.assert_allclose(persisted_max(trace, 3), [0.2, 0.6, 0.0])  # short episode: min of its frames
    np.testing.assert_allclose(persisted_max(trace, 8), [0.1, 0.6, 0.0])
    with pytest.raises(WmrlError, match="frames >= 1"):
        persisted_max(trace, 0)


def test_a_rounds_policy_averages_the_last_rounds_trained_policies(tmp_path):
    """`coevolution.average_rounds=K`: round r's policy is the weight average of rounds r-K+1..r's trained
    policies (self-imitation's fine-tunes, an RL round's `policy_trained`), never of averaged ones; round 0 and
    K=1 keep the trained policy as it is; K < 1 is a one-line ConfigError."""
    from imagination.pipeline import Pipeline, load_run_config
    from policies import load_policy
    from policies.vla import VLAConfig, VLAPolicy

    tiny = dict(image_size=32, channels=(8, 8, 8), hidden_dim=32, chunk_size=3, num_bins=16)
    pipe = Pipeline(load_run_config([f"run_dir={tmp_path / 'run'}", "coevolution.average_rounds=2"], "run_quick"),
                    progress=False)
    trained = []
    for r, phase in enumerate(["self_imitation", "self_imitation", "rl"]):
        torch.manual_seed(r)
        pol = VLAPolicy(VLAConfig(**tiny))
        if phase == "self_imitation":  # the phase's fine-tune writes it there first
            pol.save_pretrained(tmp_path / "run" / f"round_{r}" / "self_imitation" / "policy")
        trained.append(pol.state_dict())
        got, rounds = pipe.save_round_policy(r, pol, phase)
        assert rounds == ([0] if r == 0 else [r - 1, r])
        saved = load_policy(tmp_path / "run" / f"round_{r}" / "policy").state_dict()
        for k, v in saved.items():
            want = trained[r][k] if r == 0 else (trained[r - 1][k] + trained[r][k]) / 2
            torch.testing.assert_close(v, want, rtol=0, atol=1e-6)
            assert torch.equal(got.state_dict()[k], v)
    assert pipe.trained_policy_dir(2) == tmp_path / "run" / "round_2" / "policy_trained"
    assert pipe.trained_policy_dir(1) == tmp_path / "run" / "round_1" / "self_imitation" / "policy"
    plain = Pipeline(load_run_config([f"run_dir={tmp_path / 'plain'}"], "run_quick"), progress=False)
    pol = VLAPolicy(VLAConfig(**tiny))
    got, rounds = plain.save_round_policy(3, pol, "rl")
    assert got is pol and rounds == [3] and not (tmp_path / "plain" / "round_3" / "policy_trained").exists()
    with pytest.raises(ConfigError, match=r"average_rounds=0 must be an integer >= 1"):
        load_run_config(["coevolution.average_rounds=0"], "run_quick")


def test_run_render_options_reach_every_real_env(tmp_path):
    """`render.supersample` / `render.shadows` / `render.tiled` of `wmrl run`: checked at config time, the first two
    recorded with the demos, and handed to the evaluation and paired-episode envs."""
    from benchmarks.policy_eval import evaluate_policy
    from imagination.pipeline import Pipeline, load_run_config
    from wmrl.data import read_episode_meta

    base = ["suite=PushCube-v0", "demos.episodes_per_task=2", "demos.num_envs=2", "demos.noise=[0.0]"]
    cfg = load_run_config([*base, f"run_dir={tmp_path / 'run'}", "render.supersample=2", "render.shadows=true"],
                          "run_quick")
    pipe = Pipeline(cfg, progress=False)
    assert pipe.env_kwargs() == {"image_size": 32, "supersample": 2, "shadows": True}
    pipe.s_demos()
    meta = list(read_episode_meta(pipe.data_root).values())
    assert len(meta) == 2 and all(r["supersample"] == 2 and r["shadows"] for r in meta)
    pipe.check_demo_render()
    resumed = load_run_config([*base, f"run_dir={tmp_path / 'run'}", "render.supersample=2"], "run_quick")
    with pytest.raises(ConfigError, match=r"rendered with \(supersample, shadows\)=\[\(2, True\)\]"):
        Pipeline(resumed, progress=False).check_demo_render()  # a resume may not switch the frames
    plain = load_run_config([*base, f"run_dir={tmp_path / 'plain'}"], "run_quick")
    assert Pipeline(plain, progress=False).env_kwargs() == {"image_size": 32}  # defaults pass nothing
    untiled = load_run_config([*base, f"run_dir={tmp_path / 'untiled'}", "render.tiled=false"], "run_quick")
    assert Pipeline(untiled, progress=False).env_kwargs() == {"image_size": 32, "supersample": 1, "shadows": False,
                                                              "tiled_frames": False}
    # the evaluation's envs take the options (a bad one reaches the env and is refused there)
    with pytest.raises(WmrlError, match="supersample"):
        evaluate_policy("random", "PushCube-v0", 1, num_envs=1, render={"supersample": 0})
    with pytest.raises(ConfigError, match=r"render.supersample=0"):
        load_run_config([*base, "render.supersample=0"], "run_quick")
    with pytest.raises(ConfigError, match="render.shadows='yes'"):
        load_run_config([*base, "render.shadows=yes"], "run_quick")
    with pytest.raises(ConfigError, match="render.tiled=2"):
        load_run_config([*base, "render.tiled=2"], "run_quick")
    with pytest.raises(ConfigError, match="is for the built-in suite"):
        load_run_config(["suite=PickCube-v1", "render.shadows=true"], "run_quick")


def test_environment_state_success_matches_the_simulator_and_every_task():
    """The task's own success test on (state, environment state) reproduces the simulator's success
    flag on every step of every built-in task (scripted experts succeed often)."""
    import envs
    from envs.tabletop.environment_state import ENV_STATE_DIM, success_from_environment_state

    tasks = envs.resolve_tasks("builtin") * 2
    env = envs.make_vec(tasks, len(tasks), image_size=SIZE, autoreset_mode="next_step", seed=0)
    expert = envs.make_expert(env, noise=0.0, seed=0)
    env.reset(seed=0)
    pending, hits, checked = np.zeros(len(tasks), bool), 0, 0
    for _ in range(130):
        obs, _, te, tr, info = env.step(expert.act())
        es = env.unwrapped.environment_state()
        assert es.shape == (len(tasks), ENV_STATE_DIM) and es.dtype == np.float32
        got = success_from_environment_state(env.unwrapped.task_ids, obs["state"], es)
        live = ~pending  # sub-envs that did not just restart
        np.testing.assert_array_equal(got[live], info["success"][live])
        hits += int(info["success"][live].sum())
        checked += int(live.sum())
        pending = te | tr
    env.close()
    assert hits >= len(tasks) and checked > 1000  # successes of every kind were compared
    with pytest.raises(WmrlError, match="no state-based success test"):
        success_from_environment_state(["PickCube-v1"], np.zeros((1, 8)), np.zeros((1, ENV_STATE_DIM)))


def test_world_model_predicts_the_environment_state_and_imagination_judges_success_on_it(data, wm):
    """A world model with env_state_dim=9 reads and predicts the cubes' poses; success_source=state
    judges imagined frames by the task's rule on them; inputs without environment states are refused."""
    from dataclasses import replace

    from worldmodels import make_world_model
    from worldmodels.modeling_common import model_states

    assert data.env_states is not None and data.env_states.shape == (data.num_frames, 13)
    torch.manual_seed(0)
    m = make_world_model("deterministic", image_size=SIZE, context_frames=2, chunk_size=2,
                         block_out_channels=[16, 32], head_hidden=32, autocast_bf16=False, env_state_dim=9)
    assert m.state_dim == 17 and m.env_state_dim == 9
    full = model_states(data, m.config)
    np.testing.assert_array_equal(full[:, 8:], data.env_states[:, :9])
    m.fit_stats(full, data.actions, data.rewards)
    # before training the head predicts "no change" of the cube poses (a residual from the context)
    ctx = m.init_context(data.images[None, :2], full[None, :2])
    out = m.step(ctx, np.zeros((1, 2, 7), np.float32))
    assert out.states.shape == (1, 2, 17)
    losses = m.finetune(data, 40, batch_size=8, lr=2e-3)
    assert np.mean(losses[-8:]) < np.mean(losses[:8])
    m.eval()

    env = ImaginedVectorEnv(m, data, num_envs=4, horizon=3, success_source="state")
    obs, _ = env.reset(seed=0)
    assert obs["state"].shape == (4, 8)  # the policy still sees the proprio state only
    row = env.keyframe_rows[0]
    np.testing.assert_array_equal(env.environment_state()[0], data.env_states[row])
    obs, _, term, _, info = env.step(np.zeros((4, env.chunk_size, 7), np.float32))
    p = info["chunk_success_prob"]
    assert obs["state"].shape == (4, 8) and set(np.unique(p[~np.isnan(p)])) <= {0.0, 1.0}
    assert np.isfinite(env.environment_state()).all()
    np.testing.assert_array_equal(env.environment_state()[:, 9:], data.env_states[env.keyframe_rows][:, 9:])
    frames, states = data.images[None, :2].repeat(4, 0), data.states[None, :2].repeat(4, 0)
    with pytest.raises(WmrlError, match="needs env_states"):
        env.reset_to(frames, states, [""] * 4, ["PushCube-v0"] * 4)
    env.reset_to(frames, states, [""] * 4, ["PushCube-v0"] * 4, env_states=data.env_states[None, :2].repeat(4, 0))
    # refused: state success without a state-predicting world model, and keyframes without env states
    with pytest.raises(ConfigError, match="success_source='state' needs"):
        ImaginedVectorEnv(wm, data, num_envs=2, success_source="state")
    with pytest.raises(DatasetError, match="observation.environment_state"):
        ImaginedVectorEnv(m, replace(data, env_states=None), num_envs=2)
    with pytest.raises(ConfigError, match="environment_state\\(\\) needs"):
        ImaginedVectorEnv(wm, data, num_envs=2).environment_state()
    # co-evolution data keeps the environment state through select / concat
    from wmrl.data import Trajectories

    both = Trajectories.concat([data, data.select_episodes([0, 1])])
    assert both.env_states.shape == (both.num_frames, 13)


def test_contact_gate_keeps_far_cubes_still_and_misses_little_real_motion(data, tmp_path):
    """env_state_contact_radius: a cube's predicted change survives only near the tcp or while the
    cube already moves. On real episodes (true futures as the prediction) the gate closes on many
    cube-windows yet drops under 2% of the cubes' real displacement; far, still cubes stay put."""
    from worldmodels import make_world_model
    from worldmodels.modeling_common import model_states

    with pytest.raises(ConfigError, match="env_state_contact_radius=0.06 needs env_state_dim > 0"):
        make_world_model("deterministic", env_state_contact_radius=0.06)
    with pytest.raises(ConfigError, match="env_state_momentum=-1"):
        make_world_model("deterministic", env_state_dim=9, env_state_momentum=-1)
    m = make_world_model("deterministic", image_size=SIZE, context_frames=2, chunk_size=2, block_out_channels=[16, 32],
                         head_hidden=32, autocast_bf16=False, env_state_dim=9, env_state_contact_radius=0.06)
    full = model_states(data, m.config)
    m.fit_stats(full, data.actions, data.rewards)
    t, k = 2, 2
    ep = data.episode_index
    starts = [i for i in range(len(ep) - t - k + 1) if ep[i] == ep[i + t + k - 1]]
    win = torch.as_tensor(np.stack([full[i : i + t + k] for i in starts]))
    ctx, fut = m.norm_states(win[:, :t]), m.norm_states(win[:, t:])
    gate = m.contact_gate(fut, ctx).numpy().astype(bool)  # (W, 3)
    cubes = win[..., 8:].reshape(len(starts), t + k, 3, 3).numpy()
    disp = np.linalg.norm(cubes[:, -1] - cubes[:, t - 1], axis=-1)
    on_table = np.abs(cubes[:, t - 1, :, :2]).max(-1) < 1.0
    assert disp[on_table].sum() > 0.1  # the expert moved the cube
    assert disp[on_table & ~gate].sum() < 0.02 * disp[on_table].sum()
    assert (~gate[on_table]).mean() > 0.2
    # a head that predicts change everywhere: only the gated cubes move
    noisy = fut + torch.randn_like(fut)
    noisy[..., :8] = fut[..., :8]
    out = m.absolute_states(noisy, ctx)
    still = torch.as_tensor(~gate).repeat_interleave(3, dim=-1)[:, None].expand(-1, k, -1)
    np.testing.assert_allclose(out[..., 8:][still].numpy(), ctx[:, -1:, 8:].expand(-1, k, -1)[still].numpy())
    assert not torch.allclose(out[..., 8:][~still], ctx[:, -1:, 8:].expand(-1, k, -1)[~still])
    # residual_states: the proprio dims too are a change from the last context state (the gate
    # then reads the absolute tcp), and the setting survives save / load
    from worldmodels import load_world_model

    r = make_world_model("deterministic", image_size=SIZE, context_frames=2, chunk_size=2, block_out_channels=[16, 32],
                         head_hidden=32, autocast_bf16=False, env_state_dim=9, env_state_contact_radius=0.06,
                         residual_states=True)
    r.fit_stats(full, data.actions, data.rewards)
    delta = noisy.clone()
    delta[..., :8] = fut[..., :8] - ctx[:, -1:, :8]
    np.testing.assert_allclose(r.absolute_states(delta, ctx).numpy(), out.numpy(), atol=1e-5)
    r.save_pretrained(tmp_path / "wm")
    assert load_world_model(tmp_path / "wm").config.residual_states is True


def test_run_config_checks_state_success_settings():
    """`imagination.success_source=state` needs `world_model.env_state_dim`; that is for the built-in suite."""
    from imagination.pipeline import load_run_config

    with pytest.raises(ConfigError, match="set world_model.env_state_dim"):
        load_run_config(["imagination.success_source=state"], "run_quick")
    with pytest.raises(ConfigError, match="env_state_dim=9 is for the built-in suite"):
        load_run_config(["suite=PickCube-v1", "world_model.env_state_dim=9"], "run_quick")
    with pytest.raises(ConfigError, match="env_state_dim=-1"):
        load_run_config(["world_model.env_state_dim=-1"], "run_quick")
    cfg = load_run_config(["world_model.env_state_dim=9", "imagination.success_source=state"], "run_quick")
    assert cfg.world_model["env_state_dim"] == 9


def test_real_rl_baseline_gives_every_task_a_group():
    """The real-RL baseline's sub-envs keep their task, so each task needs a GRPO group: the layout
    cycles tasks per group, and too few sub-envs is a config error before any work."""
    from imagination.pipeline import load_run_config, rl_task_layout

    tasks = ["A", "B", "C"]
    assert rl_task_layout(tasks, 6, 2) == ["A", "A", "B", "B", "C", "C"]
    assert rl_task_layout(tasks, 8, 2)[6:] == ["A", "A"]
    assert set(rl_task_layout(tasks, 3, 1)) == set(tasks)
    with pytest.raises(ConfigError, match="real_rl_num_envs=4.*use >= 6"):
        rl_task_layout(tasks, 4, 2)
    with pytest.raises(ConfigError, match="multiple of the group size 2"):
        rl_task_layout(tasks, 7, 2)
    with pytest.raises(ConfigError, match="real_rl_num_envs=16.*6 tasks.*use >= 48"):
        load_run_config(["real_rl_num_envs=16"], "run")
    assert load_run_config(["real_rl_num_envs=16", "real_rl_baseline=false"], "run").real_rl_num_envs == 16
    import envs

    cfg = load_run_config([], "run")  # the main job's default covers the whole built-in suite
    builtin = envs.resolve_tasks(cfg.suite)
    assert set(rl_task_layout(builtin, cfg.real_rl_num_envs, cfg.rl["group_size"])) == set(builtin)


def test_real_rl_reward_is_checked_and_reaches_the_real_env(tmp_path):
    from imagination.pipeline import Pipeline, load_run_config

    with pytest.raises(ConfigError, match="real_rl_reward='shaped'; expected 'sparse' or 'dense'"):
        load_run_config(["real_rl_reward=shaped"], "run_quick")
    with pytest.raises(ConfigError, match="real_rl_reward=dense is the built-in suite's.*maniskill"):
        load_run_config(["suite=PickCube-v1", "real_rl_reward=dense"], "run_quick")
    for reward in ("sparse", "dense"):
        cfg = load_run_config([f"run_dir={tmp_path / reward}", f"real_rl_reward={reward}"], "run_quick")
        env = Pipeline(cfg, progress=False).real_rl_env(["PushCube-v0", "PushCube-v0"])
        assert env.reward_type == reward and env.num_envs == 2
        env.reset(seed=0)
        _, r, *_ = env.step(np.zeros((2, 7), np.float32))
        assert (r > 0).all() == (reward == "dense")  # the staged shaping pays for reaching; sparse only success
        env.close()


def test_object_dynamics_learns_real_pushes_and_moves_the_world_models_cubes(data, tmp_path):
    """The state-space object model beats "the cube stays put" on held-out real pushes, keeps parked
    cubes still, and, attached to a world model, replaces its predicted cube poses by its own rollout
    on the predicted proprio; it is saved and loaded with the world model."""
    from dataclasses import replace

    from worldmodels import load_world_model, make_world_model
    from worldmodels.modeling_common import WorldModelInputError, model_states
    from worldmodels.object_dynamics import (
        ObjectDynamics,
        ObjectDynamicsConfig,
        _tensors,
        fit_object_dynamics,
        one_step_error,
        transitions,
    )

    cfg = ObjectDynamicsConfig(steps=300, batch_size=256, hidden=64, layers=2, lr=3e-3, test_fraction=0.25)
    od, metrics = fit_object_dynamics(data, cfg, progress=False)
    assert metrics["test_episodes"] == 3 and metrics["train_transitions"] > 0
    assert metrics["one_step_error_moving_mean_m"] < metrics["stay_put_error_moving_mean_m"], metrics
    fit = one_step_error(od, _tensors(transitions(data, cfg, np.arange(data.num_episodes))))
    assert fit["one_step_error_moving_mean_m"] < 0.5 * fit["stay_put_error_moving_mean_m"], fit
    assert np.isfinite(metrics["open_loop_error_step_16_m"])
    objs = torch.tensor([[[0.0, 0.0, 0.02], [0.7, -3.0, 0.025], [0.1, 0.1, 0.02]]])  # the 2nd is parked
    s = torch.zeros(1, 8)
    nxt = od(s, s, torch.ones(1, 7), objs, objs)
    assert nxt.shape == (1, 3, 3) and torch.equal(nxt[0, 1], objs[0, 1])

    torch.manual_seed(0)
    m = make_world_model("deterministic", image_size=SIZE, context_frames=2, chunk_size=2,
                         block_out_channels=[16, 32], head_hidden=32, autocast_bf16=False, env_state_dim=9)
    full = model_states(data, m.config)
    m.fit_stats(full, data.actions, data.rewards)
    m.eval()
    act = np.random.default_rng(0).uniform(-1, 1, (1, 2, 7)).astype(np.float32)
    ctx = m.init_context(data.images[None, 3:5], full[None, 3:5])
    plain = m.step(ctx, act).states
    m.attach_object_dynamics(od)
    out = m.step(ctx, act).states
    torch.testing.assert_close(out[..., :8], plain[..., :8])  # the proprio stays the pixel model's
    prop = torch.cat([torch.from_numpy(full[None, 4:5, :8]), plain[..., :8]], dim=1)
    cubes = torch.from_numpy(full[None, 3:5, 8:]).view(1, 2, 3, 3)
    want = od.rollout(prop, torch.from_numpy(act), cubes[:, 1], cubes[:, 0])[1].flatten(2)
    torch.testing.assert_close(out[..., 8:], want, atol=1e-5, rtol=1e-5)
    m.save_pretrained(tmp_path / "wm")
    back = load_world_model(tmp_path / "wm")
    assert isinstance(back.object_dynamics, ObjectDynamics)
    assert not any(k.startswith("object_dynamics") for k in back.state_dict())
    torch.testing.assert_close(back.step(back.init_context(data.images[None, 3:5], full[None, 3:5]), act).states, out)
    # with an arm model the proprio is the object model's too, stepped from the real context
    arm, arm_metrics = fit_object_dynamics(data, replace(cfg, arm=True, steps=400), progress=False)
    assert arm_metrics["arm_one_step_tcp_error_mean_m"] < arm_metrics["arm_constant_velocity_tcp_error_mean_m"]
    m.attach_object_dynamics(arm)
    out = m.step(ctx, act).states
    prop, cubes_next = arm.rollout(torch.from_numpy(full[None, 4:5, :8]), torch.from_numpy(act), cubes[:, 1],
                                   cubes[:, 0], torch.from_numpy(full[None, 3, :8]))
    torch.testing.assert_close(out, torch.cat([prop, cubes_next.flatten(2)], -1), atol=1e-5, rtol=1e-5)
    with pytest.raises(WorldModelInputError, match="proprio_dim=5"):
        m.attach_object_dynamics(ObjectDynamics(replace(cfg, arm=True, proprio_dim=5)))
    # a world model whose frames follow the chunk's states draws them where the arm model put them
    from worldmodels.modeling_common import quantize, to_unit

    torch.manual_seed(0)
    sc = make_world_model("deterministic", image_size=SIZE, context_frames=2, chunk_size=2, block_out_channels=[16, 32],
                          head_hidden=32, autocast_bf16=False, env_state_dim=9, state_conditioned_frames=True)
    sc.fit_stats(full, data.actions, data.rewards)
    torch.nn.init.normal_(sc.net.unet.conv_out.weight, std=0.05)  # untrained, the residual output is zero
    sc.eval()
    ctx = sc.init_context(data.images[None, 3:5], full[None, 3:5])
    alone = sc.step(ctx, act)
    sc.attach_object_dynamics(arm)
    o = sc.step(ctx, act)
    torch.testing.assert_close(o.states, torch.cat([prop, cubes_next.flatten(2)], -1), atol=1e-5, rtol=1e-5)
    drawn = sc._predict(ctx, sc.norm_actions(torch.from_numpy(act)), sc.norm_states(o.states))[0]
    torch.testing.assert_close(to_unit(o.frames), quantize(drawn), atol=1.01 / 127.5, rtol=0)
    assert (o.frames.float() - alone.frames.float()).abs().mean() > 0.5  # the given states change the frames
    sc.attach_object_dynamics(od)  # an object-only model gives no proprio: the frames are drawn without states
    assert torch.equal(sc.step(ctx, act).frames, alone.frames)

    with pytest.raises(WorldModelInputError, match="needs env_state_dim=9"):
        make_world_model("deterministic", image_size=SIZE, block_out_channels=[16, 32]).attach_object_dynamics(od)
    with pytest.raises(DatasetError, match="environment_state"):
        fit_object_dynamics(replace(data, env_states=None), cfg, progress=False)
    with pytest.raises(ConfigError, match="reach=0"):
        ObjectDynamicsConfig(reach=0)
    (tmp_path / "wm" / "object_dynamics" / "model.safetensors").write_bytes(b"garbage")
    from wmrl.errors import CheckpointError

    with pytest.raises(CheckpointError, match="corrupt"):
        load_world_model(tmp_path / "wm")


def test_pipeline_fits_object_dynamics_and_rl_sees_it_attached(tmp_path):
    """`object_dynamics.enabled=true`: a stage after the world model fits the object model on the
    demos (resumable like the others) and every world model RL in imagination loads carries it."""
    from imagination.pipeline import Pipeline, load_run_config
    from worldmodels.object_dynamics import ObjectDynamics

    args = [
        "suite=PushCube-v0", "demos.episodes_per_task=4", "demos.num_envs=4",
        "world_model_train.steps=4", "world_model_train.videos=0", "rewards.idm_steps=4",
        "rewards.success_steps=4", "rewards.imagined_random_failures=4", "world_model.env_state_dim=9",
        "object_dynamics.enabled=true", "object_dynamics.arm=true", "+object_dynamics.steps=20",
        "+object_dynamics.batch_size=64", "+object_dynamics.hidden=32", "+object_dynamics.test_fraction=0.25",
        "sft.steps=4", "rl.iterations=1", "eval.episodes_per_task=1", "eval.num_envs=1", "videos=0",
    ]
    cfg = load_run_config([f"run_dir={tmp_path / 'run'}", *args, "object_dynamics.warm_refit_steps=0"], "run_quick")
    assert load_run_config(args, "run_quick").object_dynamics_warm_refit() == (1000, 3e-4)  # the default
    pipe = Pipeline(cfg, progress=False)
    for name in ("demos", "world_model", "object_dynamics", "idm", "rewards", "sft"):
        pipe.stage(name, getattr(pipe, f"s_{name}"))
    fit = pipe.done("object_dynamics")
    assert fit["train_transitions"] > 0 and np.isfinite(fit["arm_one_step_tcp_error_mean_m"])
    wm = pipe.load_models(0)[0]
    assert isinstance(wm.object_dynamics, ObjectDynamics) and wm.object_dynamics.config.arm
    assert wm.object_dynamics.config.steps == 20 and wm.object_dynamics.config.proprio_dim == 8
    # a co-evolution round refits it (from scratch here) on the demos and that round's real rollouts; later rounds
    # use the refit
    for r in (0, 1):
        pipe.stage(f"round_{r}", lambda r=r: pipe.s_round(r))
    r1 = pipe.done("round_1")
    rollouts = np.load(tmp_path / "run" / "round_1" / "rollouts.npz")
    refit = ObjectDynamics.from_pretrained(tmp_path / "run" / "round_1" / "object_dynamics")
    first = ObjectDynamics.from_pretrained(tmp_path / "run" / "object_dynamics")
    assert r1["object_dynamics_train_episodes"] + r1["object_dynamics_test_episodes"] == (
        fit["train_episodes"] + fit["test_episodes"] + len(np.unique(rollouts["episode_index"]))
    )
    later = pipe.load_models(1)[0].object_dynamics
    assert torch.equal(later.arm[0].weight, refit.arm[0].weight)
    assert not torch.equal(later.arm[0].weight, first.arm[0].weight)
    assert torch.equal(pipe.load_models(0)[0].object_dynamics.arm[0].weight, first.arm[0].weight)
    # object_dynamics.warm_refit_steps: the round fine-tunes the model it started from instead, on the same episodes
    warm_root = tmp_path / "warm"
    shutil.copytree(tmp_path / "run", warm_root, ignore=shutil.ignore_patterns("round_1", "round_1.json"))
    warm_cfg = load_run_config([f"run_dir={warm_root}", *args, "object_dynamics.warm_refit_steps=7",
                                "object_dynamics.warm_refit_lr=0.0005"], "run_quick")
    assert warm_cfg.object_dynamics_warm_refit() == (7, 0.0005) and cfg.object_dynamics_warm_refit() is None
    warm = Pipeline(warm_cfg, progress=False)
    warm.stage("round_1", lambda: warm.s_round(1))
    tuned = ObjectDynamics.from_pretrained(warm_root / "round_1" / "object_dynamics")
    w1 = warm.done("round_1")
    assert tuned.config.steps == 7 and tuned.config.lr == 0.0005 and tuned.config.hidden == first.config.hidden
    assert w1["object_dynamics_train_episodes"] == r1["object_dynamics_train_episodes"]
    assert json.loads((warm_root / "round_1" / "object_dynamics" / "config.json").read_text())["metrics"][
        "fine_tuned_from"] == str(warm_root / "object_dynamics")
    assert torch.equal(tuned.feat_mean, first.feat_mean) and not torch.equal(tuned.feat_mean, refit.feat_mean)
    assert not torch.equal(tuned.arm[0].weight, first.arm[0].weight)
    for bad, why in (("warm_refit_steps=-1", "warm_refit_steps=-1; expected an integer >= 0"),
                     ("warm_refit_steps=1.5", "warm_refit_steps=1.5; expected an integer >= 0"),
                     ("warm_refit_lr=0", "warm_refit_lr=0; expected a learning rate > 0")):
        with pytest.raises(ConfigError, match=why):
            load_run_config([*args, f"object_dynamics.{bad}"], "run_quick")
    with pytest.raises(ConfigError, match="object_dynamics.refit_each_round='no'; expected true or false"):
        load_run_config(["world_model.env_state_dim=9", "object_dynamics.enabled=true",
                         "object_dynamics.refit_each_round=no"], "run_quick")
    off = load_run_config([f"run_dir={tmp_path / 'run'}", "world_model.env_state_dim=9"], "run_quick")
    assert off.object_dynamics_config() is None and Pipeline(off, progress=False).load_models(0)[0].object_dynamics is None
    with pytest.raises(ConfigError, match="set world_model.env_state_dim=9"):
        load_run_config(["object_dynamics.enabled=true"], "run_quick")


def test_pipeline_self_imitation_phase_fits_round_zeros_world_counts_its_steps_and_clones_every_rounds_successes(
    tmp_path, monkeypatch
):
    """`self_imitation.enabled=true`: round 0 fits the state model on the demos plus the SFT policy's real
    episodes (their steps are round 0's budget), each round collects in its model's world (no real physics
    beyond resets) and fine-tunes the previous round's policy on the demos plus every round's successes so far;
    a co-evolution round refits the model on every real episode so far; each round sets its world against the
    simulator on the evaluation's own starts of the policy entering it; a finished collection (and check) is not
    played again; what the phase needs is checked before any work."""
    import benchmarks.self_imitation as bsi
    from imagination.pipeline import Pipeline, load_run_config, round_object_dynamics
    from policies import load_policy
    from wmrl.data import load_trajectories_npz, save_trajectories_npz
    from worldmodels.object_dynamics import ObjectDynamics

    base = [
        "suite=PushCube-v0", "demos.episodes_per_task=4", "demos.num_envs=4", "world_model_train.steps=4",
        "world_model_train.videos=0", "rewards.idm_steps=4", "rewards.success_steps=4",
        "rewards.imagined_random_failures=4", "sft.steps=4", "eval.episodes_per_task=2", "eval.num_envs=2", "videos=0",
    ]
    od = ["world_model.env_state_dim=9", "object_dynamics.enabled=true", "object_dynamics.arm=true",
          "+object_dynamics.steps=20", "+object_dynamics.batch_size=64", "+object_dynamics.hidden=32",
          "+object_dynamics.test_fraction=0.25"]
    si = ["self_imitation.enabled=true", "self_imitation.target=2", "self_imitation.max_episodes=8",
          "self_imitation.policy_episodes=4", "self_imitation.num_envs=4", "self_imitation.steps=3"]
    cfg = load_run_config([f"run_dir={tmp_path / 'run'}", *base, *od, *si], "run_quick")
    pipe = Pipeline(cfg, progress=False)
    pipe.stage("demos", pipe.s_demos)
    pipe.world_models()  # the world model; no state model fitted on the demos alone: round 0 fits its own
    for name in ("idm", "rewards", "sft", "eval_sft"):
        pipe.stage(name, getattr(pipe, f"s_{name}"))
    root = tmp_path / "run"
    assert not cfg.fits_object_dynamics_on_demos() and pipe.done("object_dynamics") is None
    assert not (root / "object_dynamics").exists()
    demos = pipe.trajectories()
    demos_ok = int(np.sum(demos.episode_success))
    r0 = pipe.stage("round_0", lambda: pipe.s_round(0))
    rec = json.loads((root / "round_0" / "policy_rollouts.json").read_text())
    assert rec["episodes"] == 4 and rec["env_steps"] > 0
    assert r0["imagination_phase"] == "self_imitation" and r0["prefix_real_env_steps"] == 0.0
    assert r0["real_env_steps"] == r0["policy_episodes_real_env_steps"] == rec["env_steps"]
    def episodes_fitted(r: int) -> int:
        m = json.loads((round_object_dynamics(root, r) / "config.json").read_text())["metrics"]
        return m["train_episodes"] + m["test_episodes"]

    assert round_object_dynamics(root, 0) == root / "round_0" / "object_dynamics"
    assert ObjectDynamics.from_pretrained(round_object_dynamics(root, 0)).config.arm
    assert episodes_fitted(0) == demos.num_episodes + 4
    col = r0["self_imitation"]["PushCube-v0"]
    assert col["finished"] >= 1 and col["real_env_steps"] == 0.0 and r0["imagined_steps"] == col["env_steps"] > 0
    kept0 = int(col["kept"])
    # the world's rating of the SFT policy against its real success in the run's evaluation of it
    assert r0["imagined_overrating_by_task"]["PushCube-v0"] == pytest.approx(
        col["finished_success_rate"] - pipe.done("eval_sft")["per_task"]["PushCube-v0"])
    assert r0["successes_kept"] == kept0 and (root / "round_0" / "successes.npz").is_file() == (kept0 > 0)
    assert r0["episodes_cloned"] == demos_ok + kept0 and r0["fine_tune_steps"] == 3
    # the world against the simulator on the evaluation's own starts, start by start: its real side is the
    # evaluation's outcomes, which the same seeds reproduce
    import envs
    from benchmarks.state_model_ranking import episode_successes

    wr, ev = r0["world_vs_real_on_eval_starts"], pipe.done("eval_sft")
    assert wr == json.loads((root / "round_0" / "world_vs_real.json").read_text()) and r0["gated_tasks"] == []
    push = wr["PushCube-v0"]
    assert push["episodes"] == 2 and push["real"] == ev["per_task"]["PushCube-v0"]
    assert push["overrating"] == pytest.approx(push["imagined"] - push["real"]) and wr["all"]["episodes"] == 2
    assert push["false_successes"] - push["missed_successes"] == pytest.approx(2 * push["overrating"])
    sft_pol = pipe.policy_after(-1)
    again_real = episode_successes(
        sft_pol, lambda t, n: envs.make_vec(t, n, autoreset_mode="same_step", **pipe.env_kwargs()), ["PushCube-v0"],
        2, cfg.eval.seed, envs.full_episode_chunks(["PushCube-v0"], sft_pol.chunk_size))
    assert "".join(str(int(x)) for x in again_real) == ev["outcomes"]["PushCube-v0"]
    sft, pol0 = pipe.policy_after(-1), pipe.policy_after(0)
    assert any(not torch.equal(a, b) for a, b in zip(sft.state_dict().values(), pol0.state_dict().values()))
    same = load_policy(root / "round_0" / "self_imitation" / "policy")
    assert all(torch.equal(a, b) for a, b in zip(same.state_dict().values(), pol0.state_dict().values()))

    # the next round clones round 0's successes too (three demo episodes stand in for them when none was found)
    if kept0 == 0:
        save_trajectories_npz(root / "round_0" / "successes.npz", demos.select_episodes([0, 1, 2]))
        kept0 = 3
    r1 = pipe.stage("round_1", lambda: pipe.s_round(1))
    kept1 = int(r1["successes_kept"])
    assert r1["episodes_cloned"] == demos_ok + kept0 + kept1
    if r1["self_imitation"]["PushCube-v0"]["finished"] > 0:  # round 1's collector is round 0's policy
        assert r1["imagined_overrating_by_task"]["PushCube-v0"] == pytest.approx(
            r1["self_imitation"]["PushCube-v0"]["finished_success_rate"] - r0["eval"]["per_task"]["PushCube-v0"])
    rollouts = load_trajectories_npz(root / "round_1" / "rollouts.npz")
    assert round_object_dynamics(root, 1) == root / "round_1" / "object_dynamics"
    assert episodes_fitted(1) == demos.num_episodes + 4 + rollouts.num_episodes
    assert r1["real_env_steps"] == r1["env_steps"] > 0  # the round's real rollouts; its collection took none

    # benchmarks.world_vs_real reads the rounds' checks back; refit_checks sets round 1's own policy against its
    # world as it is (0 fresh episodes) and fine-tuned on 2 fresh real episodes of it
    from benchmarks.world_vs_real import main as world_vs_real_main
    from benchmarks.world_vs_real import refit_checks
    from imagination.self_imitation import world_vs_real_on_eval_starts

    assert world_vs_real_main(["--runs", str(root), "--no-progress", "--out", str(tmp_path / "wvr.json")]) == 0
    wvr = json.loads((tmp_path / "wvr.json").read_text())
    assert wvr["rounds"] == [0, 1] and wvr["per_run"][str(root)]["1"] == r1["world_vs_real_on_eval_starts"]
    assert wvr["by_round"]["0"]["PushCube-v0"]["imagined"] == wr["PushCube-v0"]["imagined"]
    # benchmarks.multi_step_dynamics fits round 0's state model again with the multi-step loss (K=2) and checks it
    # on the SFT evaluation's starts; K=0 at round 0's steps is round 0's own model and check, read back; at other
    # steps (21) it is fitted again, on the same data and seed as round 0's
    from benchmarks.multi_step_dynamics import main as msd_main

    assert msd_main(["--runs", str(root), "--rollout-steps", "0", "2", "--steps", "20", "--work", str(tmp_path / "msd"),
                     "--out", str(tmp_path / "msd.json")]) == 0
    msd = json.loads((tmp_path / "msd.json").read_text())
    got = msd["per_run"][str(root)]
    assert got["0"]["model"] == str(round_object_dynamics(root, 0)) and got["0"]["check"] == wr
    assert not (tmp_path / "msd" / "run" / "k0").exists() and got["0"]["fit"]["rollout_windows"] is None
    r0_model = ObjectDynamics.from_pretrained(round_object_dynamics(root, 0))
    k2 = ObjectDynamics.from_pretrained(tmp_path / "msd" / "run" / "k2")
    assert k2.config.rollout_steps == 2 and k2.config.steps == 20 and got["2"]["fit"]["rollout_windows"] > 0
    assert not torch.allclose(k2.state_dict()["mlp.0.weight"], r0_model.state_dict()["mlp.0.weight"])
    assert got["2"]["fit"]["train_episodes"] == got["0"]["fit"]["train_episodes"]  # the same data and split
    assert got["2"]["check"]["PushCube-v0"]["episodes"] == 2 == msd["pooled"]["2"]["PushCube-v0"]["episodes"]
    assert got["2"]["check"]["PushCube-v0"]["real"] == wr["PushCube-v0"]["real"]
    paired = msd["paired"]["2 - 0"]["PushCube-v0"]  # K=2 against K=0 start by start, from the checks' own outcomes
    assert paired["episodes"] == 2 and len(got["2"]["check"]["PushCube-v0"]["imagined_outcomes"]) == 2
    assert paired["agreement_base"] == 1 - (wr["PushCube-v0"]["false_successes"] + wr["PushCube-v0"]["missed_successes"]) / 2
    assert msd_main(["--runs", str(root), "--rollout-steps", "0", "--steps", "21", "--work", str(tmp_path / "msd"),
                     "--out", str(tmp_path / "msd21.json")]) == 0
    k0 = ObjectDynamics.from_pretrained(tmp_path / "msd" / "run" / "k0")
    assert k0.config.steps == 21 and k0.config.seed == r0_model.config.seed and k0.config.rollout_steps == 0
    assert msd_main(["--runs", str(root), "--rollout-steps", "1", "--out", str(tmp_path / "bad.json")]) == 2
    rc = refit_checks(root, 1, [0, 2])
    as_is = world_vs_real_on_eval_starts(pipe.policy_after(1), ObjectDynamics.from_pretrained(round_object_dynamics(root, 1)),
                                         ["PushCube-v0"], r1, cfg.eval.seed, pipe.env_kwargs())
    assert {k: v for k, v in rc["0"].items() if k in as_is} == as_is and rc["0"]["real_env_steps"] == 0
    assert rc["2"]["real_env_steps"] > 0 and rc["2"]["PushCube-v0"]["real"] == r1["eval"]["per_task"]["PushCube-v0"]

    # the gate's real cost counts in the round's budget. Reading the evaluation: the entering policy's
    # evaluation steps, with a gate only
    from imagination.self_imitation import (
        GATE_CHECK,
        check_seed,
        fresh_check,
        gate_check,
        gated_tasks,
        pool_check_rows,
        precision_lower_bound,
    )

    def pipe_with(*over: str) -> Pipeline:
        return Pipeline(load_run_config([f"run_dir={root}", *base, *od, *si, *over], "run_quick"), progress=False)

    pol0, world1 = pipe.policy_after(0), ObjectDynamics.from_pretrained(round_object_dynamics(root, 1))
    wr1 = r1["world_vs_real_on_eval_starts"]
    assert gate_check(pipe, 1, root / "round_1", pol0, world1, wr1) == (wr1, 0.0) and r1["gate_real_env_steps"] == 0.0
    gated_eval = pipe_with("self_imitation.min_precision=0.5")
    assert gate_check(gated_eval, 1, root / "round_1", pol0, world1, wr1) == (wr1, r0["eval"]["eval_env_steps"])
    # ... or, with check_episodes, fresh real episodes of its own, played in the simulator and in the world;
    # pool_checks pools them with rounds 0-1's checks on their evaluations' starts, whose evaluations (SFT's
    # and round 0's) no gate counted then, so they count now; gate_confidence reads each pooled precision's
    # one-sided Wilson lower bound
    gated = pipe_with("self_imitation.min_precision=0.5", "self_imitation.check_episodes=3", "self_imitation.pool_checks=true",
                      "self_imitation.gate_confidence=0.9")
    r2 = gated.stage("round_2", lambda: gated.s_round(2))
    rec = json.loads((root / "round_2" / GATE_CHECK).read_text())
    assert rec["seed"] == check_seed(cfg.seed, 2) != check_seed(cfg.seed, 1) and rec["episodes_per_task"] == 3
    assert len(rec["real"]["outcomes"]["PushCube-v0"]) == 3 and r2["gate_check"] == rec["check"]
    assert r2["gate_check"]["PushCube-v0"]["real"] == rec["real"]["per_task"]["PushCube-v0"]
    earlier = ev["eval_env_steps"] + r0["eval"]["eval_env_steps"]
    assert r2["gate_real_env_steps"] == pytest.approx(rec["real_env_steps"] + earlier) and rec["real_env_steps"] > 0
    assert r2["real_env_steps"] == pytest.approx(r2["env_steps"] + rec["real_env_steps"] + earlier)
    assert r2["gate_pooled"] == pool_check_rows([wr, wr1, rec["check"]]) and r2["gate_pooled"]["PushCube-v0"]["episodes"] == 7
    assert r2["gated_tasks"] == gated_tasks(r2["gate_pooled"], 0.5, 0.9) and r1["gate_lower_bounds"] is None
    assert r2["gate_lower_bounds"] == {"PushCube-v0": precision_lower_bound(r2["gate_pooled"]["PushCube-v0"], 0.9)}
    pol1 = pipe.policy_after(1)
    again_check = episode_successes(
        pol1, lambda t, n: envs.make_vec(t, n, autoreset_mode="same_step", **pipe.env_kwargs()), ["PushCube-v0"],
        3, rec["seed"], envs.full_episode_chunks(["PushCube-v0"], pol1.chunk_size))
    assert "".join(str(int(x)) for x in again_check) == rec["real"]["outcomes"]["PushCube-v0"]
    assert gate_check(gated, 2, root / "round_2", None, None, {}) == (rec["check"], rec["real_env_steps"])  # read back
    # benchmarks.gate_check_cost sets round 2's kept check (every start) beside the world's successes only
    from benchmarks.gate_check_cost import main as cost_main

    assert cost_main(["--runs", str(root), "--no-progress", "--out", str(tmp_path / "cost.json")]) == 0
    cost = json.loads((tmp_path / "cost.json").read_text())
    c2 = cost["per_run"][str(root)]["2"]  # the only round that kept a gate check of its own
    assert list(cost["per_run"][str(root)]) == ["2"] and c2["seconds_all"] is None and c2["steps_all"] == rec["real_env_steps"]
    assert c2["world_outcomes_same"] == 1 and c2["real_reproduced"] == c2["real_played"] <= 3
    assert c2["decisions_same"] == c2["decisions"] == 2 and c2["steps_world_successes"] <= c2["steps_all"]
    assert cost["summary"]["step_share"] == c2["step_share"] and cost["summary"]["episodes"] == 3
    assert cost_main(["--runs", str(tmp_path), "--out", str(tmp_path / "bad.json")]) == 2  # not a run folder
    # check_real=world_successes: the simulator plays only the starts the world calls a success, and the gate
    # reads the same precision for the real steps of those alone. This tiny world calls few successes, so three
    # fixed starts are added to its calls (both checks read the same calls; the simulator's side is real)
    import imagination.self_imitation as sim_mod

    world_calls = sim_mod.world_outcomes
    with monkeypatch.context() as m:
        m.setattr(sim_mod, "world_outcomes", lambda *a: world_calls(*a) | np.isin(np.arange(a[3]), [1, 4, 6])[None])
        world2 = ObjectDynamics.from_pretrained(round_object_dynamics(root, 2))
        full = fresh_check(pol1, world2, cfg, ["PushCube-v0"], 8, rec["seed"])
        part = fresh_check(pol1, world2, cfg, ["PushCube-v0"], 8, rec["seed"], "world_successes")
        fr, pr = full["check"]["PushCube-v0"], part["check"]["PushCube-v0"]
        hits = [e for e, c in enumerate(fr["imagined_outcomes"]) if c == "1"]
        assert pr["imagined_outcomes"] == fr["imagined_outcomes"] and {1, 4, 6} <= set(hits)
        assert part["real"]["PushCube-v0"]["played"] == hits and pr["real_played"] == len(hits)
        assert part["real"]["PushCube-v0"]["outcomes"] == "".join(full["real"]["outcomes"]["PushCube-v0"][e] for e in hits)
        assert all(pr[k] == fr[k] for k in ("episodes", "imagined", "false_successes", "precision"))
        assert pr["real"] is None and pr["missed_successes"] is None and part["check_real"] == "world_successes"
        assert 0 < part["real_env_steps"] == sum(part["real"]["PushCube-v0"]["lengths"])
        assert part["real_env_steps"] < full["real_env_steps"] or len(hits) == 8
        assert gated_tasks(part["check"], 0.5, 0.9) == gated_tasks(full["check"], 0.5, 0.9)
        assert pool_check_rows([wr, part["check"]])["PushCube-v0"]["real"] is None
        partial = pipe_with("self_imitation.min_precision=0.5", "self_imitation.check_episodes=8",
                            "self_imitation.check_real=world_successes")
        (tmp_path / "r2ws").mkdir()
        got_rows, got_steps = gate_check(partial, 2, tmp_path / "r2ws", pol1, world2, {})
        assert got_rows == part["check"] and got_steps == part["real_env_steps"]
        assert json.loads((tmp_path / "r2ws" / GATE_CHECK).read_text())["check_real"] == "world_successes"
        # check_real=until_decided: the world's successes in start order, only until the gate's decision (0.5 on
        # the point estimate) is settled; the same outcomes on the starts it plays, the same decision, the real
        # steps of those alone
        decided = fresh_check(pol1, world2, cfg, ["PushCube-v0"], 8, rec["seed"], "until_decided", 0.5)
        dr, got = decided["check"]["PushCube-v0"], decided["real"]["PushCube-v0"]
        n = len(got["played"])
        assert got["played"] == hits[:n] and got["outcomes"] == part["real"]["PushCube-v0"]["outcomes"][:n]
        assert got["lengths"] == part["real"]["PushCube-v0"]["lengths"][:n] and dr["real_played"] == n
        assert decided["real_env_steps"] == sum(got["lengths"]) <= part["real_env_steps"]
        assert decided["min_precision"] == 0.5 and decided["confidence"] is None
        assert dr["imagined_outcomes"] == pr["imagined_outcomes"] and dr["precision"] == got["outcomes"].count("1") / n
        assert gated_tasks(decided["check"], 0.5) == gated_tasks(full["check"], 0.5)
        from benchmarks.gate_check_cost import kept_until_decided_same

        assert kept_until_decided_same(decided, part, ["PushCube-v0"])  # what the benchmark replays, played
        settled = pipe_with("self_imitation.min_precision=0.5", "self_imitation.check_episodes=8",
                            "self_imitation.check_real=until_decided", "self_imitation.gate_confidence=0.9")
        (tmp_path / "r2ud").mkdir()
        got_rows, got_steps = gate_check(settled, 2, tmp_path / "r2ud", pol1, world2, {})
        kept_ud = json.loads((tmp_path / "r2ud" / GATE_CHECK).read_text())
        assert kept_ud["check_real"] == "until_decided" and kept_ud["confidence"] == 0.9 and got_rows == kept_ud["check"]
        assert gated_tasks(got_rows, 0.5, 0.9) == gated_tasks(full["check"], 0.5, 0.9) and got_steps <= part["real_env_steps"]
    with pytest.raises(ConfigError, match="check_real='nope'; expected one of all, world_successes, until_decided"):
        pipe_with("self_imitation.check_real=nope")
    with pytest.raises(ConfigError, match="check_real=world_successes plays the gate's own check .*check_episodes > 0"):
        pipe_with("self_imitation.check_real=world_successes")
    with pytest.raises(ConfigError, match="self_imitation.check_episodes=1001; expected 0"):
        pipe_with("self_imitation.check_episodes=1001")
    with pytest.raises(ConfigError, match="gate_confidence=0.9 sets the confidence .* needs self_imitation.min_precision"):
        pipe_with("self_imitation.gate_confidence=0.9")

    # clone_real: a round's fine-tune also clones the successes among the real episodes already played for data
    # (round 0's SFT episodes, each co-evolution round's rollouts), whatever the gate, on a copy of the run. Three
    # demo episodes stand in for round 0's SFT episodes, as this tiny SFT policy rarely succeeds
    import shutil

    from imagination.self_imitation import REAL_SUCCESSES, REAL_SUCCESSES_RECORD

    clone = tmp_path / "clone"
    shutil.copytree(root, clone)
    shutil.rmtree(clone / "round_1" / "self_imitation")
    stand_in = demos.select_episodes([0, 1, 2])
    save_trajectories_npz(clone / "round_0" / "policy_rollouts.npz", stand_in)
    cl = Pipeline(load_run_config([f"run_dir={clone}", *base, *od, *si, "self_imitation.clone_real=true"], "run_quick"),
                  progress=False)
    with monkeypatch.context() as m:  # the gate leaves every world's success out
        m.setattr(sim_mod, "reads_below", lambda reads, floor: ["PushCube-v0"])
        got = sim_mod.self_imitation_round(cl, 1, clone / "round_1", round_object_dynamics(clone, 1))
    n0 = int(np.sum(stand_in.episode_success))
    n1 = int(np.sum(rollouts.episode_success))
    assert got["gated_tasks"] == ["PushCube-v0"] and got["real_successes"] == {"PushCube-v0": n1}
    assert got["real_successes_cloned"] == n0 + n1 and got["episodes_cloned"] == demos_ok + n0 + n1
    rec0 = json.loads((clone / "round_0" / REAL_SUCCESSES_RECORD).read_text())
    assert rec0 == {"source": "policy_rollouts.npz", "episodes": 3, "successes": {"PushCube-v0": n0}}
    assert json.loads((clone / "round_1" / REAL_SUCCESSES_RECORD).read_text())["source"] == "rollouts.npz"
    assert (clone / "round_1" / REAL_SUCCESSES).is_file() == (n1 > 0) and n0 > 0
    won = load_trajectories_npz(clone / "round_0" / REAL_SUCCESSES)
    assert np.array_equal(won.images, stand_in.select_episodes(np.flatnonzero(stand_in.episode_success)).images)
    assert won.episode_success.all() and np.all(won.episode_weights == 1)
    assert not (root / "round_0" / REAL_SUCCESSES_RECORD).exists() and r1["real_successes_cloned"] == 0
    with pytest.raises(ConfigError, match="self_imitation.clone_real='yes'; expected true or false"):
        pipe_with("self_imitation.clone_real=yes")

    # a finished collection is read back, not played again
    def no_play(*a, **k):
        raise AssertionError("collected again")

    monkeypatch.setattr(bsi, "collect_successes", no_play)
    import benchmarks.state_model_ranking as bsmr

    monkeypatch.setattr(bsmr, "episode_successes", no_play)  # nor is the world's check
    from imagination.self_imitation import self_imitation_round

    again = self_imitation_round(pipe, 1, root / "round_1", round_object_dynamics(root, 1))
    assert again["self_imitation"] == r1["self_imitation"]
    assert again["world_vs_real_on_eval_starts"] == r1["world_vs_real_on_eval_starts"]
    assert r1["world_vs_real_on_eval_starts"]["PushCube-v0"]["real"] == r0["eval"]["per_task"]["PushCube-v0"]

    with pytest.raises(ConfigError, match="set object_dynamics.enabled=true object_dynamics.arm=true"):
        load_run_config([*si[:1]], "run_quick")
    with pytest.raises(ConfigError, match="set object_dynamics.enabled=true object_dynamics.arm=true"):
        load_run_config([*od[:3], "object_dynamics.arm=false", *si[:1]], "run_quick")
    with pytest.raises(ConfigError, match="self_imitation.target=0 must be >= 1"):
        load_run_config([*od, *si, "self_imitation.target=0"], "run_quick")
    with pytest.raises(ConfigError, match="self_imitation.std=0.0 must be > 0"):
        load_run_config([*od, *si, "self_imitation.std=0.0"], "run_quick")
    with pytest.raises(ConfigError, match="stepz"):
        load_run_config([*od, *si, "+self_imitation.stepz=3"], "run_quick")
    # without the SFT policy's episodes round 0 reads the demos' fit, so the run makes one
    assert load_run_config([*od, *si, "self_imitation.policy_episodes=0"], "run_quick").fits_object_dynamics_on_demos()
    assert load_run_config(od, "run_quick").fits_object_dynamics_on_demos()
    assert not load_run_config([], "run_quick").fits_object_dynamics_on_demos()


def test_state_heatmaps_draw_the_cubes_where_their_states_put_them(data, tmp_path):
    """``state_heatmaps``: the projection fitted on real frames puts a cube's blob on the cube, a
    parked cube gets none, the frame generator's input channels get the gradient, and the projection
    is saved with the weights."""
    from worldmodels import load_world_model, make_world_model
    from worldmodels.modeling_common import WindowSampler, model_states
    from worldmodels.object_projection import mask_centroids

    colours = [[0.85, 0.1, 0.1], [0.1, 0.75, 0.2], [0.15, 0.3, 0.9]]
    kw = dict(image_size=SIZE, context_frames=2, chunk_size=2, block_out_channels=[16, 32], head_hidden=32,
              autocast_bf16=False, env_state_dim=9, object_colors=colours, state_conditioned_frames=True)
    m = make_world_model("deterministic", state_heatmaps=True, **kw)
    full = model_states(data, m.config)
    with pytest.raises(WmrlError, match="images has None rows"):
        m.fit_stats(full, data.actions, data.rewards)
    m.fit_stats(full, data.actions, data.rewards, images=data.images)
    from worldmodels.modeling_common import object_masks, to_unit

    f = to_unit(torch.from_numpy(data.images))
    masks = torch.cat([object_masks(f, (c,), m.config.object_color_cos) for c in colours], dim=-3).numpy()
    cen, vis = mask_centroids(masks)
    vis &= (np.abs(full[:, -9:].reshape(-1, 3, 3)[..., :2]) <= 1.0).all(-1)  # parked cubes are not the ones seen
    assert (vis.sum(0) >= 20).all()  # PushCube: every cube is in view in some episodes
    states = torch.from_numpy(full[:, None]).expand(-1, 2, -1)
    heat = m.future_heatmaps(m.norm_states(states))  # (N, 2*3, H, W): chunk step major, cube minor
    assert heat.shape == (len(full), 6, SIZE, SIZE)
    parked = np.abs(full[:, -9:].reshape(-1, 3, 3)[..., 1]) > 1.0
    assert parked.any() and float(heat[:, :3][torch.from_numpy(parked)].max()) == 0.0  # parked cubes: no blob
    for j in range(3):
        rows = np.flatnonzero(vis[:, j])
        peak = heat[rows, j].flatten(1).argmax(1)
        at = np.stack([(peak // SIZE).numpy(), (peak % SIZE).numpy()], -1)
        assert np.median(np.linalg.norm(at - cen[rows, j], axis=-1)) < 1.5  # the blob sits on the drawn cube
    m.train()
    batch = WindowSampler(data, m.config, seed=0).sample(4)
    m.config.state_cond_dropout = 0.0
    m.training_loss(batch)[0].backward()
    g = m.net.unet.conv_in.weight.grad  # patch 2: each input channel is 4 unshuffled channels
    assert g[:, -4 * m.heatmap_channels :].abs().sum() > 0
    m.save_pretrained(tmp_path / "wm")
    back = load_world_model(tmp_path / "wm")
    assert torch.equal(back.object_projection, m.object_projection)
    with pytest.raises(ConfigError, match="state_heatmaps=true needs state_conditioned_frames=true"):
        make_world_model("deterministic", state_heatmaps=True, **{**kw, "state_conditioned_frames": False})
    # tcp_heatmap: a fourth blob per chunk step, on the gripper (the frames' dark pixels)
    t = make_world_model("deterministic", state_heatmaps=True, tcp_heatmap=True, **kw)
    t.fit_stats(full, data.actions, data.rewards, images=data.images)
    assert t.object_projection.shape == (4, 10, 2) and t.heatmap_channels == 8
    assert torch.equal(t.object_projection[:3], m.object_projection)  # the cubes' fit is unchanged
    th = t.future_heatmaps(t.norm_states(states))  # (N, 2*4, H, W)
    dark = ((to_unit(torch.from_numpy(data.images)) + 1) * 0.5 <= t.config.tcp_dark_max).all(dim=-3, keepdim=True)
    dcen, dvis = mask_centroids(dark.numpy())
    peak = th[:, 3].flatten(1).argmax(1)
    at = np.stack([(peak // SIZE).numpy(), (peak % SIZE).numpy()], -1)
    assert dvis.mean() > 0.9 and np.median(np.linalg.norm(at - dcen[:, 0], axis=-1)[dvis[:, 0]]) < 1.5
    assert t.net.unet.conv_in.weight.shape[1] == m.net.unet.conv_in.weight.shape[1] + 4 * 2  # 2 more blobs
    with pytest.raises(ConfigError, match="tcp_heatmap=true needs state_heatmaps=true"):
        make_world_model("deterministic", tcp_heatmap=True, **kw)
    with pytest.raises(ConfigError, match=r"tcp_dims=\[0, 1, 9\] must name 3 proprio dims in \[0, 8\)"):
        make_world_model("deterministic", state_heatmaps=True, tcp_heatmap=True, tcp_dims=[0, 1, 9], **kw)


def test_object_dynamics_fits_on_fresh_policy_rollouts_too(data, tmp_path, capsys):
    """``python -m worldmodels.object_dynamics --policy P --policy-episodes N``: N real episodes of a
    saved policy, with environment states, join the demos the state model is fitted on."""
    from dataclasses import replace

    from policies.vla.configuration_vla import VLAConfig
    from policies.vla.modeling_vla import VLAPolicy
    from wmrl.data import Trajectories
    from worldmodels.object_dynamics import ObjectDynamicsConfig, fit_object_dynamics, main, policy_rollouts

    torch.manual_seed(0)
    VLAPolicy(VLAConfig(image_size=SIZE, channels=(8, 8, 8), hidden_dim=32, chunk_size=2)).save_pretrained(tmp_path / "pol")
    roll, st = policy_rollouts(tmp_path / "pol", ["PushCube-v0"], SIZE, 3, std=0.1, seed=5, num_envs=2)
    assert st["episodes"] == 3 and st["env_steps"] >= roll.num_frames > 0  # unfinished episodes count too
    assert roll.env_states is not None and roll.env_states.shape[1] == data.env_states.shape[1]
    twin, _ = policy_rollouts(tmp_path / "pol", ["PushCube-v0"], SIZE, 3, std=0.1, seed=5, num_envs=2)
    np.testing.assert_array_equal(twin.actions, roll.actions)  # the seed fixes the policy's noise too
    both = Trajectories.concat([data, roll])
    cfg = ObjectDynamicsConfig(steps=20, batch_size=64, hidden=32, layers=2, test_fraction=0.25)
    _, metrics = fit_object_dynamics(both, replace(cfg, arm=True), progress=False)
    assert metrics["train_episodes"] + metrics["test_episodes"] == data.num_episodes + 3
    for bad in (["--policy-episodes", "2"], ["--policy", str(tmp_path / "pol")]):
        with pytest.raises(SystemExit):
            main(["--data", str(tmp_path / "nodata"), "--out", str(tmp_path / "od"), *bad])
        assert "needs --policy" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--data", str(tmp_path / "nodata"), "--out", str(tmp_path / "od"), "--save-rollouts", "x.npz"])
    assert "writes the --policy episodes; there are none" in capsys.readouterr().err


def test_object_dynamics_bootstrap_resamples_training_episodes_only(data):
    """``bootstrap=True`` fits on as many training episodes drawn with replacement (some twice, some
    left out) from the same split: the held-out episodes, and so the reported baseline, are the plain
    fit's; another seed draws another resample."""
    from dataclasses import replace

    from worldmodels.object_dynamics import ObjectDynamicsConfig, fit_object_dynamics

    cfg = ObjectDynamicsConfig(steps=20, batch_size=64, hidden=16, layers=1, test_fraction=0.25, seed=3)
    _, plain = fit_object_dynamics(data, cfg, progress=False)
    _, boot = fit_object_dynamics(data, replace(cfg, bootstrap=True), progress=False)
    _, other = fit_object_dynamics(data, replace(cfg, bootstrap=True, seed=4), progress=False)
    assert plain["train_distinct_episodes"] == plain["train_episodes"] == boot["train_episodes"]
    assert boot["train_distinct_episodes"] < boot["train_episodes"]
    assert boot["train_transitions"] != plain["train_transitions"]
    assert boot["test_episodes"] == plain["test_episodes"]
    assert boot["stay_put_error_moving_mean_m"] == plain["stay_put_error_moving_mean_m"]  # same held-out episodes
    assert other["train_transitions"] != boot["train_transitions"]


def test_object_dynamics_draws_transitions_by_their_episodes_weights(data):
    """Each transition carries its episode's ``episode_weights`` (``transitions(...)["weights"]``); weights of
    one fit bit for bit as an unweighted fit; up-weighting some episodes (co-evolution's failures) changes the
    draws of both the object and the arm model, and the fit is closer on those episodes than the unweighted one."""
    from dataclasses import replace

    import numpy as np

    from worldmodels.object_dynamics import (
        ObjectDynamicsConfig,
        _tensors,
        fit_object_dynamics,
        one_step_error,
        transitions,
    )

    cfg = ObjectDynamicsConfig(arm=True, steps=150, batch_size=64, hidden=16, layers=1, test_fraction=0.0, seed=3)
    n = data.num_episodes
    w = np.ones(n, np.float32)
    w[: max(1, n // 4)] = 50.0
    eps = np.arange(n)
    rows = transitions(data.with_weights(w), cfg, eps)
    lengths = [hi - lo - 1 for lo, hi in data.episode_bounds]
    assert np.array_equal(rows["weights"], np.repeat(w, lengths))
    assert np.array_equal(transitions(data, cfg, eps)["weights"], np.ones(sum(lengths), np.float32))

    plain, _ = fit_object_dynamics(data, cfg, progress=False)
    ones, _ = fit_object_dynamics(data.with_weights(np.ones(n, np.float32)), cfg, progress=False)
    up, _ = fit_object_dynamics(data.with_weights(w), cfg, progress=False)
    for k, v in plain.state_dict().items():
        assert torch.equal(v, ones.state_dict()[k])
    assert not torch.equal(up.state_dict()["arm.0.weight"], plain.state_dict()["arm.0.weight"])
    heavy = _tensors(transitions(data, cfg, np.flatnonzero(w > 1)))
    err_up, err_plain = one_step_error(up, heavy), one_step_error(plain, heavy)
    assert err_up["arm_one_step_tcp_error_mean_m"] < err_plain["arm_one_step_tcp_error_mean_m"]
    no_arm = replace(cfg, arm=False)
    a, _ = fit_object_dynamics(data.with_weights(w), no_arm, progress=False)
    b, _ = fit_object_dynamics(data, no_arm, progress=False)
    assert any(not torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())


def replace_config(model, config):
    """A shallow copy of ``model`` (its parameters shared) with ``config``, of the same architecture: the loss
    functions read their settings from it."""
    import copy

    out = copy.copy(model)
    out.config = config
    return out


def test_object_dynamics_multi_step_loss_unrolls_windows_inside_episodes(data, tmp_path):
    """``rollout_steps=K`` windows are every K consecutive transitions of one episode; ``rollout_loss`` is the
    squared error (cm^2) of the model's own K-step unroll on the real proprio and actions (what ``rollout`` gives);
    the fit with it draws otherwise and lowers that unroll error on the training windows below the one-step fit's
    at the same steps; a warm fine-tune takes the caller's multi-step settings; bad values are one-line errors."""
    from dataclasses import replace

    import numpy as np

    from wmrl.errors import ConfigError, DatasetError
    from worldmodels.object_dynamics import (
        CM,
        ObjectDynamicsConfig,
        _rollout_windows,
        _tensors,
        fine_tune_object_dynamics,
        fit_object_dynamics,
        rollout_loss,
        transitions,
    )

    k = 6
    cfg = ObjectDynamicsConfig(steps=200, batch_size=64, hidden=32, layers=2, test_fraction=0.0, seed=3)
    multi = replace(cfg, rollout_steps=k, rollout_batch=32)
    eps = np.arange(data.num_episodes)
    tr = _tensors(transitions(data, multi, eps))
    starts, w = _rollout_windows(data, multi, eps, tr)
    lengths = [hi - lo - 1 for lo, hi in data.episode_bounds]
    assert len(starts) == sum(max(n - k + 1, 0) for n in lengths) == len(w)
    ends = np.cumsum(lengths)  # a window ends inside the episode it starts in
    assert all(np.searchsorted(ends, s, side="right") == np.searchsorted(ends, s + k - 1, side="right")
               for s in starts.tolist())
    assert set(np.unique(w.numpy())) <= {1.0, multi.moving_weight} and (w == multi.moving_weight).any()

    plain, _ = fit_object_dynamics(data, cfg, progress=False)
    first = starts[:5]
    with torch.no_grad():
        got = rollout_loss(plain, tr, first, k)
        rows = first[:, None] + torch.arange(k + 1)
        prop = torch.cat([tr["proprio0"][rows[:, :k]], tr["proprio1"][rows[:, k - 1:k]]], 1)
        _, pred = plain.rollout(prop, tr["actions"][rows[:, :k]], tr["objs"][first], tr["objs_prev"][first])
    scene = (tr["objs"][rows[:, :k]].abs() < multi.active_bound).all(-1)  # (5, k, O): parked objects left out
    assert 0 < int(scene.sum()) < scene.numel()
    want = (((pred - tr["objs_next"][rows[:, :k]]) * CM) ** 2)[scene].mean()
    assert float(got) == pytest.approx(float(want), rel=1e-5)

    trained, m = fit_object_dynamics(data, multi, progress=False)
    assert m["rollout_windows"] == len(starts)
    assert not torch.equal(trained.state_dict()["mlp.0.weight"], plain.state_dict()["mlp.0.weight"])
    with torch.no_grad():
        assert rollout_loss(trained, tr, starts, k) < rollout_loss(plain, tr, starts, k)
    plain.save_pretrained(tmp_path / "plain")
    _, warm = fine_tune_object_dynamics(data, tmp_path / "plain", 5, loss=multi)
    assert warm["rollout_windows"] == len(starts)
    assert "rollout_windows" not in fine_tune_object_dynamics(data, tmp_path / "plain", 5)[1]  # the saved model's: none
    with pytest.raises(ConfigError, match="rollout_steps=1 must be 0"):
        replace(cfg, rollout_steps=1)
    with pytest.raises(DatasetError, match="rollout_steps=999: no training episode has 999 transitions"):
        fit_object_dynamics(data, replace(multi, rollout_steps=999), progress=False)
    with pytest.raises(ConfigError, match="rollout_arm=true .* needs arm=true and rollout_steps >= 2"):
        replace(multi, rollout_arm=True)

    # rollout_arm: the arm model steps the proprio too, from the real one, as the world's ``rollout`` does; the
    # objects move on its proprio and the tcp's squared error joins the loss
    arm, arm_multi = replace(cfg, arm=True), replace(multi, arm=True, rollout_arm=True)
    plain_arm, _ = fit_object_dynamics(data, arm, progress=False)
    with torch.no_grad():
        got = rollout_loss(replace_config(plain_arm, arm_multi), tr, first, k)
        props, pred = plain_arm.rollout(tr["proprio0"][first][:, None], tr["actions"][rows[:, :k]], tr["objs"][first],
                                        tr["objs_prev"][first], proprio_prev=tr["proprio_prev"][first])
    tcp = (((props - tr["proprio1"][rows[:, :k]])[..., arm.tcp_dims] * CM) ** 2).mean()
    want = (((pred - tr["objs_next"][rows[:, :k]]) * CM) ** 2)[scene].mean() + tcp
    assert float(got) == pytest.approx(float(want), rel=1e-5) and float(tcp) > 0
    trained_arm, m = fit_object_dynamics(data, arm_multi, progress=False)
    assert m["rollout_windows"] == len(starts)
    with torch.no_grad():
        before = rollout_loss(replace_config(plain_arm, arm_multi), tr, starts, k)
        assert rollout_loss(trained_arm, tr, starts, k) < before
    plain_arm.save_pretrained(tmp_path / "plain_arm")
    warm_arm, _ = fine_tune_object_dynamics(data, tmp_path / "plain_arm", 5, loss=arm_multi)
    assert warm_arm.config.rollout_arm and warm_arm.config.rollout_steps == k


def test_object_dynamics_fine_tunes_from_a_model_keeping_its_normalisation(data):
    """``fit_object_dynamics(init=model)`` starts from ``model``'s weights and keeps its input / output
    normalisation (a fresh fit on other data would set other statistics), leaves ``model`` itself unchanged,
    lowers the loss a fresh model of the same short schedule reaches, and refuses a config that changes the
    architecture (a one-line ConfigError)."""
    from dataclasses import replace

    from wmrl.errors import ConfigError
    from worldmodels.object_dynamics import ObjectDynamicsConfig, fit_object_dynamics

    cfg = ObjectDynamicsConfig(arm=True, steps=300, batch_size=64, hidden=16, layers=1, test_fraction=0.25, seed=3)
    half = data.select_episodes(range(data.num_episodes // 2))
    base, _ = fit_object_dynamics(half, cfg, progress=False)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    short = replace(cfg, steps=5, lr=3e-4)
    tuned, tm = fit_object_dynamics(data, short, progress=False, init=base)
    fresh, fm = fit_object_dynamics(data, short, progress=False)
    assert all(torch.equal(before[k], v) for k, v in base.state_dict().items())  # the init is copied, not trained
    t, b, f = tuned.state_dict(), base.state_dict(), fresh.state_dict()
    for k in ("feat_mean", "feat_std", "arm_mean", "arm_std", "arm_out_std"):
        assert torch.equal(t[k], b[k]) and not torch.equal(f[k], b[k])
    assert not torch.equal(t["arm.0.weight"], b["arm.0.weight"])  # it trained
    assert tm["final_loss_cm2"] < fm["final_loss_cm2"]
    with pytest.raises(ConfigError, match=r"fine-tuning config changes the model's hidden, layers"):
        fit_object_dynamics(data, replace(short, hidden=32, layers=2), progress=False, init=base)


def test_object_dynamics_cli_saves_and_reuses_policy_rollouts(tmp_path, capsys):
    """``--save-rollouts F`` writes the --policy episodes (wmrl.data.save_trajectories_npz, which
    round-trips them exactly); ``--extra-rollouts F`` fits on them again without collecting; a
    missing or corrupt file is a one-line DatasetError and leaves nothing written."""
    from policies.vla.configuration_vla import VLAConfig
    from policies.vla.modeling_vla import VLAPolicy
    from wmrl.collect import collect
    from wmrl.data import load_trajectories_npz
    from worldmodels.object_dynamics import main

    collect(str(tmp_path / "data"), "PushCube-v0", 4, [0.3], num_envs=4, image_size=SIZE, progress=False)
    torch.manual_seed(0)
    VLAPolicy(VLAConfig(image_size=SIZE, channels=(8, 8, 8), hidden_dim=32, chunk_size=2)).save_pretrained(tmp_path / "pol")
    base = ["--data", str(tmp_path / "data"), "--steps", "10", "--arm", "--no-progress"]
    assert main([*base, "--out", str(tmp_path / "od1"), "--policy", str(tmp_path / "pol"), "--policy-episodes", "3",
                 "--save-rollouts", str(tmp_path / "roll.npz")]) == 0
    first = json.loads(capsys.readouterr().out)
    roll = load_trajectories_npz(tmp_path / "roll.npz")
    assert roll.num_episodes == 3 and roll.env_states is not None
    assert main([*base, "--out", str(tmp_path / "od2"), "--extra-rollouts", str(tmp_path / "roll.npz")]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["extra_rollout_episodes"] == 3
    for k in ("train_transitions", "train_episodes", "test_episodes", "final_loss_cm2"):
        assert again[k] == first[k]  # the same data, the same seed: the same fit
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    for bad, msg in ((tmp_path / "bad.npz", "not a readable trajectories .npz"), (tmp_path / "none.npz", "not found")):
        with pytest.raises(DatasetError, match=msg):
            main([*base, "--out", str(tmp_path / "od3"), "--extra-rollouts", str(bad)])
    assert not (tmp_path / "od3").exists()


@pytest.mark.parametrize("replays", ["none", "all", "failures"])
def test_coevolve_models_grows_data_and_refits_on_replays_only_when_asked(wm, data, replays):
    import copy

    from imagination.coevolution import CoevolutionConfig, coevolve_models, imagined_replays
    from rewards import SuccessModelConfig, SuccessRewardModel

    assert CoevolutionConfig().imagined_success_labels is False  # the default: real frames only
    with pytest.raises(ConfigError, match="replay_outcomes='successes'; expected 'all' or 'failures'"):
        CoevolutionConfig(replay_outcomes="successes")
    torch.manual_seed(0)
    sm = SuccessRewardModel(SuccessModelConfig(image_size=SIZE, channels=(8, 8, 8), hidden_dim=32)).eval()
    before = [p.detach().clone() for p in sm.parameters()]
    model = copy.deepcopy(wm)
    cfg = CoevolutionConfig(
        wm_finetune_steps=2,
        success_finetune_steps=2,
        wm_batch_size=4,
        imagined_success_labels=replays != "none",
        replay_outcomes="failures" if replays == "failures" else "all",
    )
    grown, stats = coevolve_models(model, sm, data, data, cfg, seed=0)
    assert grown.num_episodes == 2 * data.num_episodes == stats["dataset_episodes"]
    assert stats["new_failures"] == (~np.asarray(data.episode_success)).sum()
    assert np.isfinite(stats["wm_finetune_loss"])
    assert any(not torch.equal(a, b) for a, b in zip(before, sm.parameters()))  # the success model moved
    if replays == "none":
        assert "imagined_replay_episodes" not in stats
        return
    rep = imagined_replays(model, data)  # the refit world model's replays, as the refit used them
    n_fail = int((~np.asarray(rep.episode_success, bool)).sum())
    assert 0 < n_fail < rep.num_episodes  # the fixture has both outcomes
    expect = rep.num_episodes if replays == "all" else n_fail
    assert stats["imagined_replay_episodes"] == expect


def test_thread_shares_split_the_threads_between_the_two_jobs():
    from imagination.background_stage import thread_shares

    assert thread_shares(2) == (1, 1) and thread_shares(5) == (3, 2) and thread_shares(16) == (8, 8)
    with pytest.raises(ValueError, match="total=1"):
        thread_shares(1)


def test_a_background_stage_killed_without_a_report_fails_in_one_line(tmp_path):
    """A child that dies without writing its report (here by SIGKILL, as from the OS's out-of-memory
    killer) raises a one-line WmrlError naming the signal and the resume."""
    import signal

    from imagination.background_stage import BackgroundStage, _exit_reason

    stage = BackgroundStage("sft", signal.raise_signal, (signal.SIGKILL,), 1, tmp_path / "background.json")
    with pytest.raises(WmrlError, match=r"^the background sft stage was killed by SIGKILL \(out of memory\?\) "
                       r"without a report; re-run to resume it from its last checkpoint$"):
        stage.join(show=False)
    assert not (tmp_path / "background.json").exists()
    assert _exit_reason(-6) == "was killed by SIGABRT" and _exit_reason(3) == "exited with code 3"


@pytest.mark.slow
def test_sft_takes_extra_episodes_as_a_list_concatenated_once_with_the_demos(tmp_path):
    """`Pipeline.train_sft(extra=[a, b])`, or a generator of them, clones the demos plus a and b, as a single
    concatenated set does: the same episodes, and the same weights after a few steps. Given a list of their
    files (self-imitation's rounds of successes, decompressed straight into the concatenation), it clones the
    episodes those files load as."""
    from imagination.pipeline import Pipeline, load_run_config
    from policies.vla import VLAPolicy
    from wmrl.data import Trajectories, load_trajectories_npz, save_trajectories_npz

    cfg = load_run_config(["suite=PushCube-v0", "demos.episodes_per_task=4", "demos.num_envs=4", "num_threads=1",
                           "sft.steps=3", f"run_dir={tmp_path / 'run'}"], "run_quick")
    pipe = Pipeline(cfg, progress=False)
    pipe.stage("demos", pipe.s_demos)
    demos = pipe.trajectories()
    a, b = demos.select_episodes(np.array([0, 1])), demos.select_episodes(np.array([3]))
    base = pipe.sft_trajectories()  # the demos SFT clones (the successful ones: sft_successful_only)
    both = pipe.sft_trajectories([a, b])
    ref = Trajectories.concat([base, a, b])
    assert both.num_episodes == base.num_episodes + 3
    for field in ("images", "states", "actions", "episode_index", "frame_index"):
        assert np.array_equal(getattr(both, field), getattr(ref, field)), field
    assert both.instructions == ref.instructions
    files = [tmp_path / "a.npz", tmp_path / "b.npz"]  # self_imitation_round's: each round's successes file
    save_trajectories_npz(files[0], a)
    save_trajectories_npz(files[1], b)
    from_files = pipe.sft_trajectories(files)
    ref = pipe.sft_trajectories([load_trajectories_npz(f) for f in files])
    for field in ("images", "states", "actions", "episode_index", "frame_index", "env_states", "episode_weights"):
        assert np.array_equal(getattr(from_files, field), getattr(ref, field)), field
    assert from_files.instructions == ref.instructions and from_files.wrist_images is None
    for given in (files, [a, b]):  # self-imitation's gate leaves a task's successes out, the demos whole
        only_demos = pipe.sft_trajectories(given, drop_tasks={"PushCube-v0"})
        assert only_demos.num_episodes == base.num_episodes and np.array_equal(only_demos.images, base.images)
    # ... but never the files of whole_files (self_imitation.clone_real's real successes), with or without extra
    real_kept = pipe.sft_trajectories(files[:1], drop_tasks={"PushCube-v0"}, whole_files=files[1:])
    ref = Trajectories.concat([base, b])
    for field in ("images", "states", "actions", "episode_index"):
        assert np.array_equal(getattr(real_kept, field), getattr(ref, field)), field
    alone = pipe.sft_trajectories(None, drop_tasks={"PushCube-v0"}, whole_files=files)
    assert alone.num_episodes == base.num_episodes + 3
    with pytest.raises(TypeError, match="whole_files goes with extra given as a list of .npz files"):
        pipe.sft_trajectories([a], whole_files=files)
    pipe.train_sft(tmp_path / "list", extra=[a, b])
    pipe.train_sft(tmp_path / "one", extra=Trajectories.concat([a, b]))
    pipe.train_sft(tmp_path / "gen", extra=(t for t in (a, b)))  # self_imitation_round's: loaded as reached
    x = VLAPolicy.from_pretrained(tmp_path / "list" / "policy").state_dict()
    for other in ("one", "gen"):
        y = VLAPolicy.from_pretrained(tmp_path / other / "policy").state_dict()
        assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x), other


@pytest.mark.slow
def test_sft_beside_the_world_model_trains_the_same_policy_and_reports_a_child_error(tmp_path, monkeypatch):
    """`sft_beside_world_model` (2 threads: 1 + 1): the background child runs SFT, then its evaluation
    and the IDM unless the parent, done with the world model, claimed the IDM first; either way their
    weights equal those trained in this process on 1 thread. A failure in the child raises its error
    class here, naming the stage, keeps the finished stages, and a re-run resumes from them."""
    from imagination.pipeline import Pipeline, load_run_config
    from imagination.report import stage_wall_times
    from policies.vla import VLAPolicy

    base = [
        "suite=PushCube-v0", "demos.episodes_per_task=4", "demos.num_envs=4", "world_model_train.steps=4",
        "world_model_train.videos=0", "sft.steps=12", "num_threads=2",
    ]
    cfg = load_run_config([*base, f"run_dir={tmp_path / 'run'}"], "run_quick")
    pipe = Pipeline(cfg, progress=False)
    pipe.stage("demos", pipe.s_demos)
    torch.set_num_threads(2)
    pipe.world_models_beside_background_stages(2)
    assert torch.get_num_threads() == 2  # given back after the world model
    sft, ev, idm = pipe.done("sft"), pipe.done("eval_sft"), pipe.done("idm")
    assert sft["background"] is True and sft["num_threads"] == 1 and sft["steps"] == 12 and sft["stage_cpu_s"] > 0
    assert ev["background"] is True and ev["waited_s"] == 0.0 and 0 <= ev["success"] <= 1  # after SFT, in the child
    # 4 world-model steps end long before the child's 12 SFT steps: the parent took the IDM, on 1 thread
    assert "background" not in idm and idm["num_threads"] == 1 and idm["exec_scale"] > 0
    assert not list((tmp_path / "run" / "stages").glob("background*"))  # the child's report is no stage
    own, waited, wall = stage_wall_times(tmp_path / "run" / "stages")
    assert set(own) == {"demos", "world_model", "sft", "eval_sft", "idm"} and set(waited) == {"sft", "eval_sft"}
    assert wall == pytest.approx(own["demos"] + own["world_model"] + own["idm"] + sft["waited_s"])
    pipe.train_sft(tmp_path / "here", num_threads=1)
    a = VLAPolicy.from_pretrained(tmp_path / "run" / "sft" / "policy").state_dict()
    b = VLAPolicy.from_pretrained(tmp_path / "here" / "policy").state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    idm_file = Path("rewards", "executability", "idm", "model.safetensors")
    parent_idm = (tmp_path / "run" / idm_file).read_bytes()

    # the world model waits until the child has claimed the IDM: the child trains it, to the same bytes
    pipe = Pipeline(load_run_config([*base, f"run_dir={tmp_path / 'slow'}"], "run_quick"), progress=False)
    pipe.stage("demos", pipe.s_demos)
    world_models = pipe.world_models

    def slow_world_models() -> None:
        claimed = tmp_path / "slow" / "stages_claimed" / "idm"
        for _ in range(1200):
            if claimed.exists():
                break
            time.sleep(0.1)
        world_models()

    monkeypatch.setattr(pipe, "world_models", slow_world_models)
    pipe.world_models_beside_background_stages(2)
    idm = pipe.done("idm")
    assert idm["background"] is True and idm["waited_s"] == 0.0 and idm["num_threads"] == 1
    assert (tmp_path / "slow" / idm_file).read_bytes() == parent_idm

    # a bad value only SFT reads: the child's ConfigError surfaces here; the world model's stage stays done
    bad = load_run_config([*base, f"run_dir={tmp_path / 'bad'}", "sft.max_episodes=999"], "run_quick")
    pipe = Pipeline(bad, progress=False)
    pipe.stage("demos", pipe.s_demos)
    with pytest.raises(ConfigError, match=r"background sft/eval_sft/idm stage failed: sft: .*max_episodes=999"):
        pipe.world_models_beside_background_stages(2)
    assert pipe.done("sft") is None and pipe.done("world_model") is not None
    marker = (tmp_path / "bad" / "stages" / "world_model.json").read_text()
    fixed = load_run_config([*base, f"run_dir={tmp_path / 'bad'}"], "run_quick")
    Pipeline(fixed, progress=False).world_models_beside_background_stages(2)  # resumes: only the child's stages run
    assert (tmp_path / "bad" / "stages" / "world_model.json").read_text() == marker
    assert Pipeline(fixed, progress=False).done("sft")["background"] is True


@pytest.mark.slow
def test_a_failing_world_model_stops_the_background_sft(tmp_path, monkeypatch):
    """The world model fails while SFT trains beside it: its error reaches the caller, the child is
    stopped (no orphan keeps training), and no SFT stage is marked. Bad `sft` / `world_model_train`
    keys fail when the config is read, before any work."""
    import multiprocessing as mp

    from imagination.pipeline import Pipeline, load_run_config

    base = ["suite=PushCube-v0", "demos.episodes_per_task=4", "demos.num_envs=4", "sft.steps=100000", "num_threads=2"]
    pipe = Pipeline(load_run_config([*base, f"run_dir={tmp_path / 'run'}"], "run_quick"), progress=False)
    pipe.stage("demos", pipe.s_demos)

    def fail() -> dict:
        time.sleep(3)  # SFT is under way in the child
        raise NonFiniteError("world-model loss is nan at step 3")

    monkeypatch.setattr(pipe, "s_world_model", fail)
    with pytest.raises(NonFiniteError, match="step 3"):
        pipe.world_models_beside_background_stages(2)
    assert not [p for p in mp.active_children() if p.name.startswith("wmrl-")]
    assert pipe.done("sft") is None and pipe.done("world_model") is None
    with pytest.raises(ConfigError, match="sft.bogus"):
        load_run_config(["+sft.bogus=1"], "run_quick")
    with pytest.raises(ConfigError, match="world_model_train.bogus"):
        load_run_config(["+world_model_train.bogus=1"], "run_quick")


@pytest.mark.slow
def test_more_co_evolution_rounds_resume_without_playing_the_finished_policies_again(quick_run, tmp_path, monkeypatch):
    """benchmarks.fixed_starts given one more co-evolution round in a finished work folder: every finished policy's
    pool play is read from the folder's keep (pool_kept), so only SFT (its frames start the imagination arms) and
    the new round's policy are played, and the earlier rounds' scores and real-step counts are unchanged."""
    import benchmarks.fixed_starts as fs

    rd, _ = quick_run
    work = tmp_path / "fs"
    kw = dict(held_out=False, quick_state_model=True, warm_refit=fs.WarmRefit(5), only_lines=("sm_warm",),
              progress=False)
    one = fs.run_one(rd, work, 4, 1, 1, coevolution_rounds=1, **kw)
    (work / "result.json").rename(work / "result_round1.json")
    played = []
    play = fs.play_pool

    def counting(policy, *args, **kwargs):
        played.append(policy)
        return play(policy, *args, **kwargs)

    monkeypatch.setattr(fs, "play_pool", counting)
    two = fs.run_one(rd, work, 4, 1, 1, coevolution_rounds=2, **kw)
    assert len(played) == 2  # SFT and sm_warm_2
    assert set(two["pool_outcomes"]) == {*one["pool_outcomes"], "sm_warm_2"}
    assert all(two["pool_outcomes"][k] == v for k, v in one["pool_outcomes"].items())
    assert all(two["real_env_steps"][k] == v for k, v in one["real_env_steps"].items())
    assert two["real_env_steps"]["sm_warm_2"] > two["real_env_steps"]["sm_warm_1"]
    assert (work / fs.POOL_KEPT / "sm_warm_2.json").is_file()


@pytest.mark.slow
def test_the_warm_line_fine_tunes_its_renderer_each_round_and_draws_that_rounds_world_with_it(quick_run, tmp_path,
                                                                                             monkeypatch):
    """benchmarks.fixed_starts with ``WarmRefit(renderer_steps=...)`` in a renderer-drawn world: each round of the
    fine-tuned line fine-tunes the previous round's renderer (round 1: the fitted one) on the round's pool
    rollouts, and GRPO in that round's world reads frames drawn by it, while the branched world keeps the
    fitted renderer; a second call returns the written result."""
    import benchmarks.fixed_starts as fs

    rd, _ = quick_run
    drawn_by: list[Path | None] = []
    make_world = fs.state_model_world

    def recording(*args, **kw):
        drawn_by.append(args[4] if len(args) > 4 else kw.get("renderer_dir"))
        return make_world(*args, **kw)

    monkeypatch.setattr(fs, "state_model_world", recording)
    work = tmp_path / "fs"
    recipe = fs.WarmRefit(5, renderer_steps=4)
    res = fs.run_one(rd, work, 4, 1, 1, held_out=False, quick_state_model=True, renderer="quick",
                     coevolution_rounds=2, warm_refit=recipe, only_lines=("sm_warm",), progress=False)
    assert drawn_by == [work / "renderer_quick", work / "sm_warm_1" / "renderer", work / "sm_warm_2" / "renderer"]
    assert res["state_model_arm"]["warm_refit"] == {"steps": 5, "lr": fs.WARM_REFIT_LR, "renderer_steps": 4}
    weights = {}
    for prev, d in zip(drawn_by, drawn_by[1:], strict=False):
        meta = json.loads((d / "config.json").read_text())["metrics"]
        assert meta["fine_tuned"] and meta["fine_tuned_from"] == str(prev), meta
        weights[d] = (d / "model.safetensors").read_bytes()
    assert len(set(weights.values())) == 2 and (work / "renderer_quick" / "model.safetensors").read_bytes() not in set(
        weights.values())
    assert fs.run_one(rd, work, 4, 1, 1, held_out=False, quick_state_model=True, renderer="quick",
                      coevolution_rounds=2, warm_refit=recipe, only_lines=("sm_warm",), progress=False) == res
