"""worldmodels.state_renderer: a learned renderer that draws the scene at given states from a real anchor
frame, and the state-model world drawn by it (benchmarks._split_worlds.StateModelVectorEnv(renderer=...))."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

import envs
from benchmarks._split_worlds import StateModelVectorEnv
from imagination.coevolution import record_rollouts
from wmrl.errors import CheckpointError, ConfigError, DatasetError, WmrlError
from worldmodels.object_dynamics import ObjectDynamics, ObjectDynamicsConfig
from worldmodels.state_renderer import (
    StateRenderer,
    StateRendererConfig,
    fit_scene_projection,
    fit_state_renderer,
    held_out_video,
    main,
    scene_arrays,
)

SIZE = 32
TASKS = ["PushCube-v0", "LiftCube-v0"]


@pytest.fixture(scope="module")
def data():
    """Real expert episodes (noise 0.3) of two tasks at 32x32, with their environment states."""
    env = envs.make_vec(TASKS * 4, 8, image_size=SIZE, autoreset_mode="same_step", seed=0)
    expert = envs.make_expert(env, noise=0.3, seed=0)
    traj, _ = record_rollouts(env, lambda obs, instr: expert.act()[:, None], 16, 1, seed=0)
    env.close()
    return traj


def _config(**kw) -> StateRendererConfig:
    return StateRendererConfig(image_size=SIZE, channels=[8, 16, 16, 16], **kw)


def test_projection_puts_each_cube_and_the_gripper_where_the_frames_show_them(data):
    from worldmodels.modeling_common import object_masks, to_unit
    from worldmodels.object_projection import mask_centroids, project

    c = _config()
    proprio, objs = scene_arrays(data, c)
    coef = fit_scene_projection(data.images, proprio, objs, c)
    assert coef.shape == (4, 10, 2)
    f = to_unit(torch.from_numpy(data.images))
    masks = torch.cat([object_masks(f, (tuple(col),), c.object_color_cos) for col in c.object_colors], 1).numpy()
    cen, vis = mask_centroids(masks)
    vis &= (np.abs(objs[..., :2]) <= c.workspace_m).all(-1)
    err = np.linalg.norm(project(coef[:3], objs.astype(np.float64)) - cen, axis=-1)[vis]
    assert vis.sum() > 100 and np.median(err) < 1.0  # pixels, at 32x32


def test_fit_learns_to_draw_the_moved_scene_better_than_the_anchor_and_round_trips(data, tmp_path):
    model, metrics = fit_state_renderer(data, _config(steps=150, batch_size=16, test_fraction=0.25), progress=False)
    assert metrics["test_episodes"] == 4 and metrics["test_frames"] > 50
    # drawn from each held-out episode's first frame at the real states: closer to the real frames than
    # that first frame left as it is (the arm and the cubes moved)
    assert metrics["psnr_db"] > metrics["anchor_psnr_db"] + 3.0, metrics
    model.save_pretrained(tmp_path / "r", metrics)
    back = StateRenderer.from_pretrained(tmp_path / "r")
    proprio, objs = scene_arrays(data, model.config)
    a, t = np.zeros(5, np.int64), np.arange(10, 15)
    args = (data.images[a], proprio[a], objs[a], proprio[t], objs[t])
    drawn = model.draw(*args)
    assert drawn.dtype == np.uint8 and drawn.shape == (5, SIZE, SIZE, 3)
    np.testing.assert_array_equal(back.draw(*args), drawn)
    # a state that moves nothing draws (close to) the anchor itself
    same = model.draw(data.images[a], proprio[a], objs[a], proprio[a], objs[a]).astype(float)
    assert np.abs(same - data.images[a]).mean() < np.abs(drawn.astype(float) - data.images[a]).mean()
    assert json.loads((tmp_path / "r" / "config.json").read_text())["metrics"]["psnr_db"] == metrics["psnr_db"]
    video = held_out_video(model, data, metrics["test_episode_indices"], tmp_path / "r" / "held_out.mp4")
    assert video.stat().st_size > 1000


def test_an_interrupted_fit_goes_on_from_its_checkpoint_to_the_uninterrupted_weights(data, tmp_path, monkeypatch):
    """A fit in a run folder killed after its first checkpoint, run again, ends with the weights (and metrics)
    of a fit never stopped; a checkpoint of another config is refused."""
    from wmrl.runs import RunDir

    cfg = _config(steps=12, batch_size=4, test_fraction=0.25)
    whole, m_whole = fit_state_renderer(data, cfg, progress=False)
    save = RunDir.save_checkpoint

    def killed_after_saving(self, step, write, keep=2):
        save(self, step, write, keep)
        raise KeyboardInterrupt(f"killed after step {step}")

    monkeypatch.setattr(RunDir, "save_checkpoint", killed_after_saving)
    with pytest.raises(KeyboardInterrupt, match="killed after step 5"):
        fit_state_renderer(data, cfg, progress=False, run_dir=tmp_path / "fit", checkpoint_every=5)
    monkeypatch.setattr(RunDir, "save_checkpoint", save)
    resumed, m_resumed = fit_state_renderer(data, cfg, progress=False, run_dir=tmp_path / "fit", checkpoint_every=5)
    for (k, a), b in zip(whole.state_dict().items(), resumed.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=k)
    assert m_resumed["psnr_db"] == m_whole["psnr_db"] and m_resumed["final_loss"] == m_whole["final_loss"]
    steps = [r["step"] for r in RunDir(tmp_path / "fit").read_metrics()]
    assert steps == [0, 11] and (tmp_path / "fit" / "checkpoints" / "step_000012").is_dir()
    with pytest.raises(CheckpointError, match="was written for another state-renderer config"):
        fit_state_renderer(data, replace(cfg, lr=1e-3), progress=False, run_dir=tmp_path / "fit")
    (tmp_path / "fit" / "checkpoints" / "step_000012" / "trainer.pt").write_bytes(b"cut short")
    with pytest.raises(CheckpointError, match=r"step_000012/trainer.pt is missing or corrupt \(UnpicklingError\)"):
        fit_state_renderer(data, cfg, progress=False, run_dir=tmp_path / "fit")


def test_a_fine_tune_starts_from_the_fitted_renderer_and_learns_the_episodes_it_is_weighted_to(data, tmp_path):
    """``init``: the fitted weights, projection and normalisation are where a fine-tune starts (a vanishing
    learning rate leaves them as they are); ``episode_weights``: the fine-tune draws only the weighted episodes,
    and draws them better afterwards than the fitted renderer did; a resume refuses another starting renderer."""
    from worldmodels.state_renderer import evaluate_state_renderer

    cfg = _config(steps=40, batch_size=8, test_fraction=0.25)
    base, m_base = fit_state_renderer(data, cfg, progress=False)
    tune = replace(cfg, steps=60, lr=2e-3, test_fraction=0.0)
    frozen, _ = fit_state_renderer(data, replace(tune, steps=3, lr=1e-12), progress=False, init=base)
    for (k, a), b in zip(base.state_dict().items(), frozen.state_dict().values(), strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-6, msg=k)
    lift = np.array([i for i, t in enumerate(data.task_ids[lo] for lo, _ in data.episode_bounds) if t == TASKS[1]])
    weights = np.zeros(data.num_episodes)
    weights[lift] = 1.0
    tuned, m_tuned = fit_state_renderer(data, tune, progress=False, init=base, episode_weights=weights,
                                        run_dir=tmp_path / "ft")
    assert m_tuned["fine_tuned"] and m_tuned["train_episodes"] == data.num_episodes and "psnr_db" not in m_tuned
    for k in ("projection", "finger_stats", "height_stats"):  # fitted once, on the demos, and kept
        torch.testing.assert_close(tuned.state_dict()[k], base.state_dict()[k], rtol=0, atol=0)
    push_tuned, _ = fit_state_renderer(data, tune, progress=False, init=base, episode_weights=1.0 - weights)
    psnr = {m: evaluate_state_renderer(m, data, lift)["psnr_db"] for m in (base, tuned, push_tuned)}
    # the lift episodes drawn better than before, and better than after a fine-tune weighted to the others
    assert psnr[tuned] > psnr[base] + 0.3 and psnr[tuned] > psnr[push_tuned] + 1.0, psnr
    other, _ = fit_state_renderer(data, replace(cfg, seed=1), progress=False)
    with pytest.raises(CheckpointError, match="another state-renderer config or starting renderer"):
        fit_state_renderer(data, tune, progress=False, init=other, episode_weights=weights, run_dir=tmp_path / "ft")
    with pytest.raises(ConfigError, match=r"episode_weights of shape \(3,\): expected \(16,\) finite, >= 0"):
        fit_state_renderer(data, tune, progress=False, init=base, episode_weights=np.ones(3))
    with pytest.raises(ConfigError, match="every training episode has weight 0"):
        fit_state_renderer(data, tune, progress=False, init=base, episode_weights=np.zeros(data.num_episodes))
    with pytest.raises(ConfigError, match="differs from the fitted renderer's"):
        fit_state_renderer(data, replace(tune, channels=[8, 16, 16, 24]), progress=False, init=base)


def test_fine_tune_on_rollouts_draws_them_their_share_by_their_weights_and_leaves_out_the_skipped_demos(data,
                                                                                                        monkeypatch):
    import worldmodels.state_renderer as sr

    seen = {}
    monkeypatch.setattr(sr, "fit_state_renderer", lambda traj, config, **kw: seen.update(traj=traj, config=config, **kw))
    base = StateRenderer(_config())
    demos, rollouts = data.select_episodes(np.arange(10)), data.select_episodes(np.arange(10, 16))
    rollouts = rollouts.with_weights(np.array([1, 1, 3, 3, 1, 1], np.float32))
    sr.fine_tune_state_renderer(base, demos, rollouts, 7, 1e-4, rollout_share=0.4, skip_demo_episodes=[2, 5])
    w = seen["episode_weights"]
    assert seen["traj"].num_episodes == 14 and seen["init"] is base and seen["run_dir"] is None
    assert (seen["config"].steps, seen["config"].lr, seen["config"].test_fraction) == (7, 1e-4, 0.0)
    np.testing.assert_allclose(w[:8], 0.6 / 8)
    np.testing.assert_allclose(w[8:], 0.4 * np.array([1, 1, 3, 3, 1, 1]) / 10)
    lengths = np.diff(demos.episode_bounds, axis=1).ravel()
    assert seen["traj"].num_frames == lengths.sum() - lengths[[2, 5]].sum() + rollouts.num_frames
    lo, hi = demos.episode_bounds[3]  # the third demo episode the fine-tune reads
    np.testing.assert_array_equal(seen["traj"].images[slice(*seen["traj"].episode_bounds[2])], demos.images[lo:hi])
    with pytest.raises(ConfigError, match=r"rollout_share=1.0: expected a share in \(0, 1\)"):
        sr.fine_tune_state_renderer(base, demos, rollouts, 7, 1e-4, rollout_share=1.0)
    with pytest.raises(DatasetError, match="needs demos and rollouts; got 10 demo and 6 rollout episodes"):
        sr.fine_tune_state_renderer(base, demos, rollouts.with_weights(np.zeros(6)), 7, 1e-4)


def test_bad_input_gives_one_line_errors(data, tmp_path, capsys):
    with pytest.raises(DatasetError, match="needs the dataset's observation.environment_state"):
        fit_state_renderer(replace(data, env_states=None), _config(steps=1), progress=False)
    with pytest.raises(DatasetError, match=r"dataset frames are \(32, 32, 3\); the renderer draws \(64, 64, 3\)"):
        fit_state_renderer(data, StateRendererConfig(steps=1), progress=False)
    m = StateRenderer(_config())
    with pytest.raises(WmrlError, match=r"got objs \(2, 2, 3\); expected \(N=2, 3, 3\)"):
        m.draw(data.images[:2], data.states[:2], np.zeros((2, 3, 3)), data.states[:2], np.zeros((2, 2, 3)))
    with pytest.raises(WmrlError, match=r"got proprio \(2, 5\); expected \(N=2, P >= 7\)"):
        m.draw(data.images[:2], data.states[:2], np.zeros((2, 3, 3)), data.states[:2, :5], np.zeros((2, 3, 3)))
    with pytest.raises(WmrlError, match=r"got frames \(2, 16, 16, 3\)"):
        m.draw(np.zeros((2, 16, 16, 3), np.uint8), data.states[:2], np.zeros((2, 3, 3)), data.states[:2], np.zeros((2, 3, 3)))
    with pytest.raises(CheckpointError, match="is not a state-renderer checkpoint"):
        StateRenderer.from_pretrained(tmp_path / "none")
    m.save_pretrained(tmp_path / "r")
    (tmp_path / "r" / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json is corrupt"):
        StateRenderer.from_pretrained(tmp_path / "r")
    ObjectDynamics(ObjectDynamicsConfig()).save_pretrained(tmp_path / "od")  # another kind of checkpoint
    with pytest.raises(CheckpointError, match="has kind=None, format_version=1; expected 'state_renderer', 1"):
        StateRenderer.from_pretrained(tmp_path / "od")
    with pytest.raises(Exception, match="image_size=12 must be a multiple of 8"):
        StateRendererConfig(image_size=12)
    assert main(["--data", str(tmp_path / "nodata"), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and not (tmp_path / "x").exists()
    assert main(["--data", str(tmp_path / "nodata"), "--out", str(tmp_path / "x"), "--device", "tpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert "device='tpu'" in err and "\n" not in err and not (tmp_path / "x").exists()
    from worldmodels.object_dynamics import main as fit_main

    with pytest.raises(SystemExit):
        fit_main(["--data", str(tmp_path / "nodata"), "--out", str(tmp_path / "x"), "--device", "tpu"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "device='tpu'" in err and not (tmp_path / "x").exists()


@pytest.mark.gpu
def test_renderer_and_state_model_fit_on_cuda_as_on_the_cpu_and_move_between_devices(data, tmp_path):
    """Fitted on the GPU (from the same batches: the seed draws them on the CPU), the renderer and an
    arm-and-object state model learn as much as on the CPU, load on the CPU and predict the same there,
    and a renderer left on the GPU draws a CPU state world's frames."""
    from worldmodels.object_dynamics import fit_object_dynamics

    cfg = _config(steps=150, batch_size=16, test_fraction=0.25)
    gpu, m_gpu = fit_state_renderer(data, cfg, progress=False, device="cuda")
    _, m_cpu = fit_state_renderer(data, cfg, progress=False)
    assert gpu.device.type == "cuda" and m_gpu["psnr_db"] > m_gpu["anchor_psnr_db"] + 3.0, m_gpu
    assert abs(m_gpu["psnr_db"] - m_cpu["psnr_db"]) < 1.0, (m_gpu["psnr_db"], m_cpu["psnr_db"])
    gpu.save_pretrained(tmp_path / "r", m_gpu)
    back = StateRenderer.from_pretrained(tmp_path / "r")
    proprio, objs = scene_arrays(data, cfg)
    a, t = np.zeros(5, np.int64), np.arange(10, 15)
    args = (data.images[a], proprio[a], objs[a], proprio[t], objs[t])
    assert np.abs(gpu.draw(*args).astype(int) - back.draw(*args).astype(int)).max() <= 2

    oc = ObjectDynamicsConfig(arm=True, steps=300, batch_size=256, hidden=64, layers=2, test_fraction=0.25)
    od_gpu, o_gpu = fit_object_dynamics(data, oc, progress=False, device="cuda")
    _, o_cpu = fit_object_dynamics(data, oc, progress=False)
    assert od_gpu.device.type == "cuda"
    for k in ("one_step_error_mean_m", "arm_one_step_tcp_error_mean_m"):
        assert o_gpu[k] == pytest.approx(o_cpu[k], rel=0.2), (k, o_gpu[k], o_cpu[k])
    od_gpu.save_pretrained(tmp_path / "od", o_gpu)
    od = ObjectDynamics.from_pretrained(tmp_path / "od")
    x = [torch.from_numpy(np.asarray(v[:64], np.float32)) for v in (data.states, data.states, data.actions)]
    o = torch.from_numpy(objs[:64])
    torch.testing.assert_close(od(*x, o, o), od_gpu(*(v.cuda() for v in x), o.cuda(), o.cuda()).cpu(),
                               atol=1e-5, rtol=1e-4)

    env = StateModelVectorEnv(
        envs.make_vec(TASKS, 2, image_size=SIZE, autoreset_mode="same_step", max_episode_steps=4, seed=0),
        od, renderer=gpu,
    )
    obs, _ = env.reset(seed=[5, 6])
    first, first_state, objs0 = obs["image"].copy(), obs["state"].copy(), env.rollout.objs.numpy().copy()
    obs, *_ = env.step(np.zeros((2, 7), np.float32))
    want = back.draw(first, first_state, objs0, env.rollout.now.numpy(), env.rollout.objs.numpy())
    assert np.abs(obs["image"].astype(int) - want.astype(int)).max() <= 2
    env.close()


def _arm_model() -> ObjectDynamics:
    """An arm-and-object model whose tcp moves 1 cm along x every step and whose cubes stay put."""
    m = ObjectDynamics(ObjectDynamicsConfig(arm=True, hidden=8, layers=1))
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        m.arm[-1].bias[0] = 0.01
    return m.eval()


def test_state_world_drawn_by_the_renderer_draws_from_each_episodes_real_first_frame():
    torch.manual_seed(0)
    renderer = StateRenderer(_config())  # untrained: the wiring, not the quality, is under test
    env = StateModelVectorEnv(
        envs.make_vec(TASKS, 2, image_size=SIZE, autoreset_mode="same_step", max_episode_steps=3, seed=0),
        _arm_model(), renderer=renderer,
    )
    obs, _ = env.reset(seed=[5, 6])
    first, first_state = obs["image"].copy(), obs["state"].copy()
    objs0 = env.rollout.objs.numpy().copy()
    for t in range(3):
        obs, _, term, trunc, info = env.step(np.zeros((2, 7), np.float32))
        if t < 2:
            want = renderer.draw(first, first_state, objs0, env.rollout.now.numpy(), env.rollout.objs.numpy())
            np.testing.assert_array_equal(obs["image"], want)
            np.testing.assert_allclose(obs["state"][:, 0], first_state[:, 0] + 0.01 * (t + 1), atol=1e-5)
    assert trunc.all() and "final_obs" in info
    # the autoreset episode shows its real first frame, and the next draws are anchored on it
    assert env.real_sim_calls["render_states"] == 0
    new_first = obs["image"].copy()
    assert not np.array_equal(new_first, first)
    obs, *_ = env.step(np.zeros((2, 7), np.float32))
    want = renderer.draw(new_first, env.anchors.arrays["proprio"], env.anchors.arrays["objs"], env.rollout.now.numpy(), env.rollout.objs.numpy())
    np.testing.assert_array_equal(obs["image"], want)
    env.close()
    with pytest.raises(WmrlError, match="renderer draws 32x32 frames; the env's are 64x64"):
        StateModelVectorEnv(envs.make_vec(TASKS, 2, seed=0), _arm_model(), renderer=renderer)


def test_a_branch_after_a_real_prefix_is_drawn_from_the_prefixs_last_real_frame():
    """With real_steps=K and a renderer, the model's branch is anchored on the real frame where it starts
    (drawn for the anchor even when the caller skips that step's frames), not on the episode's first."""
    torch.manual_seed(0)
    renderer = StateRenderer(_config())

    def real():
        return envs.make_vec(TASKS, 2, image_size=SIZE, autoreset_mode="same_step", max_episode_steps=8, seed=0)

    twin, env = real(), StateModelVectorEnv(real(), _arm_model(), renderer=renderer, real_steps=2)
    first_t, _ = twin.reset(seed=[5, 6])
    env.reset(seed=[5, 6])
    acts = [np.random.default_rng(t).uniform(-1, 1, (2, 7)).astype(np.float32) for t in range(3)]
    for t in range(2):  # the real prefix, its frames skipped by the caller
        obs_t, *_ = twin.step(acts[t])
        env.skip_next_frames(np.ones(2, bool))
        obs, *_ = env.step(acts[t])
        np.testing.assert_array_equal(obs["state"], obs_t["state"])
    objs = twin.unwrapped.environment_state()[:, :9].reshape(2, 3, 3).astype(np.float32)
    anchor = env.anchors.arrays
    np.testing.assert_array_equal(anchor["image"], obs_t["image"])
    assert not np.array_equal(anchor["image"], first_t["image"])  # the arm moved in the prefix
    np.testing.assert_array_equal(anchor["proprio"], obs_t["state"])
    np.testing.assert_allclose(anchor["objs"], objs, atol=1e-6)
    obs, *_ = env.step(acts[2])  # the model's first step, drawn from the hand-over frame
    want = renderer.draw(obs_t["image"], obs_t["state"], objs, env.rollout.now.numpy(), env.rollout.objs.numpy())
    np.testing.assert_array_equal(obs["image"], want)
    twin.close()
    env.close()


def test_real_env_drawn_by_the_renderer_keeps_the_real_dynamics_and_draws_from_real_states():
    from benchmarks._split_worlds import RendererDrawnRealEnv

    torch.manual_seed(0)
    renderer = StateRenderer(_config())

    def real():
        return envs.make_vec(TASKS, 2, image_size=SIZE, autoreset_mode="same_step", max_episode_steps=3, seed=0)

    twin, env = real(), RendererDrawnRealEnv(real(), renderer)
    obs_t, _ = twin.reset(seed=[3, 4])
    obs, _ = env.reset(seed=[3, 4])
    np.testing.assert_array_equal(obs["image"], obs_t["image"])  # the first frame is real
    first, first_state = obs["image"].copy(), obs["state"].copy()
    objs0 = twin.unwrapped.environment_state()[:, :9].reshape(2, 3, 3).astype(np.float32)
    for t in range(4):
        a = np.random.default_rng(t).uniform(-1, 1, (2, 7)).astype(np.float32)
        obs_t, r_t, term_t, trunc_t, info_t = twin.step(a)
        obs, r, term, trunc, info = env.step(a)
        np.testing.assert_array_equal(obs["state"], obs_t["state"])
        np.testing.assert_array_equal(r, r_t)
        assert (term == term_t).all() and (trunc == trunc_t).all() and (info["success"] == info_t["success"]).all()
        objs = twin.unwrapped.environment_state()[:, :9].reshape(2, 3, 3).astype(np.float32)
        if t < 2:
            np.testing.assert_array_equal(obs["image"], renderer.draw(first, first_state, objs0, obs_t["state"], objs))
        elif t == 2:  # the time limit: autoreset shows the real first frame of the next episode
            assert trunc.all()
            np.testing.assert_array_equal(obs["image"], obs_t["image"])
            first, first_state, objs0 = obs["image"].copy(), obs["state"].copy(), objs
        else:
            np.testing.assert_array_equal(obs["image"], renderer.draw(first, first_state, objs0, obs_t["state"], objs))
    env.close()
    twin.close()
    with pytest.raises(WmrlError, match="autoresets on the same step"):
        RendererDrawnRealEnv(envs.make_vec(TASKS, 2, image_size=SIZE, seed=0), renderer)

