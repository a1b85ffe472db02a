"""Contract tests run over every registered world-model family, with tiny configs and synthetic data.

The synthetic scene: a coloured square on a grey background moved by actions[:2] (so a model
that learns must use the actions); the state is the square's position.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from wmrl.data import Trajectories
from wmrl.errors import CheckpointError, ConfigError, DatasetError, NonFiniteError, WmrlError
from worldmodels import get_family, list_families, load_world_model, make_world_model
from worldmodels.modeling_common import WindowSampler, train_step

FAMILIES = list_families()
TINY = dict(
    image_size=16,
    context_frames=2,
    chunk_size=2,
    state_dim=2,
    patch_size=1,
    block_out_channels=[8, 16],
    norm_num_groups=4,
    head_hidden=16,
    autocast_bf16=False,
)


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def synthetic_trajectories(
    episodes: int = 4, length: int = 10, size: int = 16, seed: int = 0
) -> Trajectories:
    """A 3x3 red square moved by actions[:, :2] (1 px per unit) on grey; state = its position."""
    rng = np.random.default_rng(seed)
    imgs, states, acts = [], [], []
    for _ in range(episodes):
        pos = rng.uniform(4, size - 5, 2)
        for _ in range(length):
            img = np.full((size, size, 3), 128, np.uint8)
            y, x = np.round(pos).astype(int)
            img[y - 1 : y + 2, x - 1 : x + 2] = (216, 25, 25)
            a = np.zeros(7, np.float32)
            a[:2] = rng.uniform(-1, 1, 2)
            imgs.append(img)
            states.append(pos.astype(np.float32).copy())
            acts.append(a)
            pos = np.clip(pos + 1.5 * a[:2], 2, size - 3)
    n = episodes * length
    succ = np.zeros(n, bool)
    succ[length - 1 :: length] = True
    return Trajectories(
        images=np.stack(imgs),
        wrist_images=None,
        states=np.stack(states),
        actions=np.stack(acts),
        rewards=succ.astype(np.float32),
        successes=succ,
        dones=succ.copy(),
        episode_index=np.repeat(np.arange(episodes), length),
        frame_index=np.tile(np.arange(length), episodes),
        instructions=["move the square"] * n,
        task_ids=["Synthetic-v0"] * n,
        fps=10,
    )


def tiny_model(family: str, **kw):
    m = make_world_model(family, **{**TINY, **kw})
    traj = synthetic_trajectories()
    m.fit_stats(traj.states, traj.actions, traj.rewards)
    return m.eval()


def inputs(b: int = 3, h: int = 4, seed: int = 0):
    traj = synthetic_trajectories(seed=seed)
    idx = np.arange(b)[:, None] * 10 + np.arange(2)[None]
    frames = torch.from_numpy(traj.images[idx])
    states = torch.from_numpy(traj.states[idx])
    actions = torch.from_numpy(np.random.default_rng(seed).uniform(-1, 1, (b, h, 7)).astype(np.float32))
    return frames, states, actions


@pytest.mark.parametrize("family", FAMILIES)
def test_shapes_dtypes_and_bounded_context(family):
    m = tiny_model(family)
    frames, states, actions = inputs(b=3, h=5)
    out = m.rollout(frames, states, actions)
    assert out.frames.shape == (3, 5, 16, 16, 3) and out.frames.dtype == torch.uint8
    assert out.states.shape == (3, 5, 2) and out.states.dtype == torch.float32
    assert out.rewards.shape == (3, 5) and out.success_prob.shape == (3, 5)
    assert bool(((out.success_prob >= 0) & (out.success_prob <= 1)).all())
    ctx = m.init_context(frames, states)
    for _ in range(6):  # the context never grows: memory is bounded over any horizon
        o = m.step(ctx, actions[:, :2])
        ctx = o.context
        assert ctx.frames.shape == (3, 2, 3, 16, 16) and ctx.states.shape == (3, 2, 2)
    assert o.frames.shape == (3, 2, 16, 16, 3)


@pytest.mark.parametrize("family", FAMILIES)
def test_rollout_equals_chunked_steps(family):
    m = tiny_model(family)
    frames, states, actions = inputs(b=2, h=4)
    torch.manual_seed(5)
    full = m.rollout(frames, states, actions)
    torch.manual_seed(5)
    ctx = m.init_context(frames, states)
    o1 = m.step(ctx, actions[:, :2])
    o2 = m.step(o1.context, actions[:, 2:])
    assert torch.equal(full.frames, torch.cat([o1.frames, o2.frames], 1))
    torch.testing.assert_close(full.states, torch.cat([o1.states, o2.states], 1))


@pytest.mark.parametrize("family", FAMILIES)
def test_context_index_select_and_assign(family):
    m = tiny_model(family)
    frames, states, _ = inputs(b=3)
    a = m.init_context(frames, states)
    b = m.init_context(frames.flip(0), states.flip(0))
    sub = a.index_select([2, 0])
    assert torch.equal(sub.frames[0], a.frames[2])
    mixed = a.assign(np.array([True, False, False]), b)
    assert torch.equal(mixed.frames[0], b.frames[0]) and torch.equal(mixed.frames[1], a.frames[1])
    partial = a.assign(np.array([False, True, False]), b.index_select([0]))
    assert torch.equal(partial.frames[1], b.frames[0])
    with pytest.raises(WmrlError, match="mask"):
        a.assign(np.array([1, 0, 0]), b)


@pytest.mark.parametrize("family", FAMILIES)
def test_save_load_roundtrip(family, tmp_path):
    m = tiny_model(family)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.01 * torch.randn_like(p))
    m.save_pretrained(tmp_path / "wm")
    assert (tmp_path / "wm" / "config.json").exists() and (tmp_path / "wm" / "model.safetensors").exists()
    m2 = load_world_model(tmp_path / "wm")
    assert type(m2) is type(m) and m2.config == m.config
    for (k, v), (k2, v2) in zip(m.state_dict().items(), m2.state_dict().items(), strict=True):
        assert k == k2 and torch.equal(v, v2), k
    frames, states, actions = inputs()
    torch.manual_seed(0)
    o = m.rollout(frames, states, actions)
    torch.manual_seed(0)
    o2 = m2.rollout(frames, states, actions)
    assert torch.equal(o.frames, o2.frames) and torch.equal(o.rewards, o2.rewards)
    assert torch.equal(m2.state_mean, m.state_mean)  # normalisation travels with the checkpoint


@pytest.mark.parametrize("family", FAMILIES)
def test_bad_inputs_raise_clear_errors(family):
    m = tiny_model(family)
    frames, states, actions = inputs()
    with pytest.raises(WmrlError, match="dtype"):
        m.init_context(frames.float(), states)
    with pytest.raises(WmrlError, match=r"shape \(3, 2, 16, 16\)"):
        m.init_context(frames[..., 0], states)
    with pytest.raises(WmrlError, match="states"):
        m.init_context(frames, states[:, :, :1])
    ctx = m.init_context(frames, states)
    with pytest.raises(WmrlError, match=r"actions has shape \(3, 3, 7\); expected \(3, 2, 7\)"):
        m.step(ctx, actions[:, :3])
    with pytest.raises(WmrlError, match="dtype"):
        m.step(ctx, actions[:, :2].long())
    bad = actions[:, :2].clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(WmrlError, match="NaN"):
        m.step(ctx, bad)
    with pytest.raises(WmrlError, match="WMContext"):
        m.step(frames, actions[:, :2])
    with pytest.raises(WmrlError, match="actions"):
        m.rollout(frames, states, actions[0])


@pytest.mark.parametrize("family", FAMILIES)
def test_checkpoint_errors_and_nothing_overwritten(family, tmp_path):
    m = tiny_model(family)
    d = m.save_pretrained(tmp_path / "wm")
    with pytest.raises(CheckpointError, match="not a world-model checkpoint"):
        load_world_model(tmp_path)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_world_model(tmp_path / "nope")
    # checkpoint from another config: config.json says chunk_size 3, weights are for 2
    meta = json.loads((d / "config.json").read_text())
    other = tmp_path / "other"
    other.mkdir()
    (other / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes())
    meta["config"]["chunk_size"] = 3
    (other / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="another config"):
        load_world_model(other)
    # corrupt / partial weights file
    part = tmp_path / "partial"
    part.mkdir()
    (part / "config.json").write_text((d / "config.json").read_text())
    (part / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:200])
    with pytest.raises(CheckpointError, match="corrupt or partial"):
        load_world_model(part)
    (part / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupt"):
        load_world_model(part)
    # loading through the wrong family class
    wrong = [f for f in FAMILIES if f != family][0]
    with pytest.raises(CheckpointError, match=f"holds a '{family}'"):
        get_family(wrong).from_pretrained(d)


@pytest.mark.parametrize("family", FAMILIES)
def test_training_decreases_loss(family):
    m = tiny_model(family, context_noise_max=0.0)
    batch = WindowSampler(synthetic_trajectories(), m.config, seed=0).sample(8)

    def fixed_loss() -> float:
        torch.manual_seed(123)
        with torch.no_grad():
            return float(m.training_loss(batch)[0])

    before = fixed_loss()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    for i in range(25):
        torch.manual_seed(i)
        train_step(m, opt, batch)
    after = fixed_loss()
    assert after < 0.7 * before, (before, after)


@pytest.mark.parametrize("family", FAMILIES)
def test_nonfinite_loss_stops_training(family):
    m = tiny_model(family)
    batch = WindowSampler(synthetic_trajectories(), m.config, seed=0).sample(4)
    batch["states"][0, 0, 0] = float("nan")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    before = [p.detach().clone() for p in m.parameters()]
    with pytest.raises(NonFiniteError):
        train_step(m, opt, batch)
    assert all(torch.equal(a, b) for a, b in zip(before, m.parameters(), strict=True))


@pytest.mark.parametrize("family", FAMILIES)
def test_finetune_uses_episode_weights(family):
    m = tiny_model(family)
    traj = synthetic_trajectories()
    losses = m.finetune(traj, steps=2, weights=np.array([1.0, 0.0, 0.0, 0.0]), batch_size=2)
    assert len(losses) == 2 and all(np.isfinite(losses))
    with pytest.raises(WmrlError, match="episode weights"):
        m.finetune(traj, steps=1, weights=np.array([1.0, 2.0]))


def test_config_errors_name_the_bad_value():
    with pytest.raises(ConfigError, match="chunk_size=0"):
        make_world_model("deterministic", chunk_size=0)
    with pytest.raises(ConfigError, match="image_size=60"):
        make_world_model("deterministic", image_size=60)
    with pytest.raises(ConfigError, match="sampling_steps=0"):
        make_world_model("diffusion", sampling_steps=0)
    with pytest.raises(ConfigError, match="unknown config key"):
        make_world_model("diffusion", nosuchkey=1)
    with pytest.raises(ConfigError, match="unknown world-model family 'gan'"):
        make_world_model("gan")


def test_dataset_lacking_features_is_refused():
    m = tiny_model("deterministic")
    traj = synthetic_trajectories(size=32)
    with pytest.raises(DatasetError, match=r"\(32, 32, 3\)"):
        WindowSampler(traj, m.config)
    short = synthetic_trajectories(length=3)
    with pytest.raises(DatasetError, match="no episode with 4 frames"):
        WindowSampler(short, m.config)


def test_hydra_config_and_train_job_resume(tmp_path):
    from wmrl.config import load_config, to_dataclass
    from worldmodels.train import TrainWorldModelConfig, main, train_world_model

    cfg = to_dataclass(
        load_config("train_world_model", ["world_model=diffusion", "train.steps=7"]), TrainWorldModelConfig
    )
    fam, mcfg = cfg.model_config()
    assert fam == "diffusion" and mcfg.sampling_steps >= 1 and cfg.train.steps == 7
    with pytest.raises(ConfigError):
        load_config("train_world_model", ["train.nosuch=1"])
    with pytest.raises(ConfigError, match="data.root"):
        main(["train.steps=1"])
    with pytest.raises(DatasetError, match="does not exist"):
        main([f"data.root={tmp_path / 'missing'}", "train.steps=1"])

    traj = synthetic_trajectories(episodes=5)
    train, test = traj.select_episodes([0, 1, 2, 3]), traj.select_episodes([4])
    wm = {"family": "deterministic", **TINY}
    from worldmodels.train import DataConfig, TrainLoopConfig

    def run(steps: int):
        c = TrainWorldModelConfig(
            world_model=wm,
            data=DataConfig(),
            run_dir=str(tmp_path / "run"),
            train=TrainLoopConfig(
                steps=steps,
                batch_size=4,
                checkpoint_every=2,
                log_every=1,
                videos=1,
                video_horizon=4,
                warmup_steps=1,
            ),
        )
        return train_world_model(c, train, test, progress=False)

    _, info = run(3)
    assert info["steps"] == 3
    run_dir = tmp_path / "run"
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_000003"
    assert (run_dir / "model" / "model.safetensors").exists() and (run_dir / "plots" / "loss.png").exists()
    assert list((run_dir / "videos").glob("*.mp4"))
    model, info = run(5)  # resumes from step 3
    steps = [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps[:3] == [1, 2, 3] and 4 in steps and 5 in steps and steps.count(1) == 1
    # resuming a run folder with another model config is refused
    wm["chunk_size"] = 1
    with pytest.raises(CheckpointError, match="another world-model config"):
        run(6)


def test_lr_follows_the_clock_only_when_the_run_falls_behind_its_time_cap():
    from worldmodels.train import TrainLoopConfig, anneal_progress, lr_at

    c = TrainLoopConfig(steps=1001, warmup_steps=1, lr=1.0, max_time_s=100.0)
    by_step = lr_at(501, TrainLoopConfig(steps=1001, warmup_steps=1, lr=1.0), 0.0)
    for elapsed in (0.0, 20.0, 50.0, 54.0):  # ahead of, on, or within the slack of the pace
        assert anneal_progress(501, c, elapsed) == (0.5, False) and lr_at(501, c, elapsed) == by_step
    p, by_time = anneal_progress(501, c, 91.0)  # 0.91 of the cap gone, half the steps done
    assert by_time and p == pytest.approx((0.91 - 0.1) / 0.9) and lr_at(501, c, 91.0) < by_step
    assert lr_at(501, c, 100.0) == pytest.approx(0.1)  # at the cap: fully annealed
    old = dataclasses.replace(c, time_anneal_slack=0.0)  # the larger share, whichever it is
    assert anneal_progress(501, old, 55.0) == (pytest.approx(0.55), True)
    with pytest.raises(ConfigError, match="time_anneal_slack=1.0"):
        TrainLoopConfig(time_anneal_slack=1.0)


def test_capped_training_repeats_bit_for_bit_at_any_pace_that_keeps_within_the_cap(tmp_path, monkeypatch):
    """The trainer's clock is faked: each reading advances by ``dt`` seconds (one reading per step)."""
    import types

    import worldmodels.train as wt

    traj = synthetic_trajectories(episodes=4)
    wm = {"family": "deterministic", **TINY}

    def run(name: str, dt: float, slack: float = 0.1):
        ticks = iter(range(10_000))
        monkeypatch.setattr(wt, "time", types.SimpleNamespace(perf_counter=lambda: dt * next(ticks)))
        c = wt.TrainWorldModelConfig(
            world_model=wm,
            run_dir=str(tmp_path / name),
            train=wt.TrainLoopConfig(
                steps=11, batch_size=4, warmup_steps=1, max_time_s=10.0, time_anneal_slack=slack,
                checkpoint_every=100, log_every=1, videos=0, seed=3,
            ),
        )
        model, info = wt.train_world_model(c, traj, None, progress=False)
        rows = [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        return model.state_dict(), [r["lr"] for r in rows if "lr" in r], info

    fast, lr_fast, info_fast = run("fast", 1e-3)
    near, lr_near, info_near = run("near", 0.85)  # 11 steps in 9.35 s: early steps run behind the step share
    assert info_fast["lr_by_time_from_step"] is None and info_near["lr_by_time_from_step"] is None
    assert lr_near == lr_fast and all(torch.equal(fast[k], near[k]) for k in fast)
    _, lr_old, info_old = run("old", 0.85, slack=0.0)  # annealing by the larger share depends on the pace
    assert lr_old != lr_fast and info_old["lr_by_time_from_step"] is not None
    _, lr_slow, info_slow = run("slow", 1.5)  # would overrun the cap: anneals by the clock and stops
    assert info_slow["stopped_by_time"] and info_slow["lr_by_time_from_step"] is not None
    assert info_slow["steps"] < 11 and lr_slow[-1] < lr_fast[info_slow["steps"] - 1]


@pytest.mark.parametrize("family", FAMILIES)
def test_self_forcing_uses_imagined_context(family):
    m = tiny_model(family, self_forcing_prob=1.0)
    sampler = WindowSampler(synthetic_trajectories(), m.config, seed=0)
    batch = sampler.sample(3)
    assert batch["frames"].shape[1] == 2 + 2 * 2 and batch["actions"].shape[1] == 4
    out = m.prepare_batch(batch)
    assert out["frames"].shape == (3, 4, 16, 16, 3) and out["actions"].shape == (3, 2, 7)
    assert torch.equal(out["frames"][:, 2:], batch["frames"][:, 4:])  # targets: the second chunk
    assert torch.equal(out["actions"], batch["actions"][:, 2:])
    ctx = m.init_context(batch["frames"][:, :2], batch["states"][:, :2])
    torch.manual_seed(0)
    imagined = m.step(ctx, batch["actions"][:, :2]).frames
    torch.manual_seed(0)
    out = m.prepare_batch(batch)
    if family == "deterministic":  # the context is the model's own first chunk, not the real frames
        assert torch.equal(out["frames"][:, :2], imagined)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    loss, _ = train_step(m, opt, batch)
    assert np.isfinite(loss)


def test_context_noise_is_standard_normal_scaled_by_each_windows_level():
    """Training's context augmentation on channels-last frames (as ``to_unit`` makes them)."""
    m = tiny_model("deterministic", context_noise_max=0.3)
    frames = torch.rand(32, 2, 16, 16, 3).movedim(-1, -3)  # (B, T, 3, H, W), not contiguous
    torch.manual_seed(0)
    noisy, level = m._augment_context(frames)
    assert noisy.shape == frames.shape and level.shape == (32,)
    assert ((level >= 0) & (level <= 0.3)).all()
    z = (noisy - frames) / level[:, None, None, None, None]
    assert abs(float(z.mean())) < 0.02 and abs(float(z.std()) - 1.0) < 0.02
    per_window = z.flatten(1).std(dim=1)  # each window's noise has unit std: its level alone scales it
    assert ((per_window - 1.0).abs() < 0.1).all()


def test_fidelity_metrics_are_exact_on_truth_and_see_motion():
    from benchmarks.wm_fidelity import horizon_metrics, shuffled_actions

    rng = np.random.default_rng(0)
    real = np.full((2, 3, 16, 16, 3), 128, np.uint8)
    for h in range(3):  # a red cube moving right by 2 px per step
        real[:, h, 6:10, 2 + 2 * h : 6 + 2 * h] = (216, 25, 25)
    last = np.full((2, 16, 16, 3), 128, np.uint8)
    last[:, 6:10, 0:4] = (216, 25, 25)
    perfect = horizon_metrics(real, real, last)
    assert perfect["object_error_px_by_horizon"] == [0.0, 0.0, 0.0] and perfect["psnr_by_horizon"][0] == 60.0
    copy = horizon_metrics(np.repeat(last[:, None], 3, 1), real, last)
    np.testing.assert_allclose(copy["object_error_px_by_horizon"], [2.0, 4.0, 6.0])
    np.testing.assert_allclose(copy["moving_object_error_px_by_horizon"], [2.0, 4.0, 6.0])
    assert copy["moving_psnr_by_horizon"][0] < 20 and copy["ssim_by_horizon"][2] < 1.0
    w = {"actions": rng.normal(size=(4, 3, 7)), "episode": np.array([0, 0, 1, 2])}
    sh = shuffled_actions(w)
    assert not any(np.array_equal(sh[i], w["actions"][i]) for i in range(4))


CUBES = [[0.85, 0.1, 0.1], [0.1, 0.75, 0.2], [0.15, 0.3, 0.9]]


def test_object_masks_find_cube_colours_only():
    from worldmodels.modeling_common import object_masks, to_unit

    img = np.full((1, 16, 16, 3), 128, np.uint8)
    img[0, 2:5, 2:5] = (216, 25, 25)  # red cube
    img[0, 8:11, 2:5] = (170, 20, 20)  # the same red in shade (shading keeps the chroma direction)
    img[0, 2:5, 8:11] = (242, 217, 51)  # yellow pad: not an object colour
    img[0, 8:11, 8:11] = (140, 90, 51)  # brown bowl: close to red in hue, weaker chroma direction
    img[0, 12:15, 12:15] = (40, 75, 230)  # blue cube
    m = object_masks(to_unit(torch.from_numpy(img)), tuple(map(tuple, CUBES)))
    assert m.shape == (1, 1, 16, 16) and m.dtype == torch.bool
    want = np.zeros((16, 16), bool)
    want[2:5, 2:5] = want[8:11, 2:5] = want[12:15, 12:15] = True
    assert np.array_equal(m[0, 0].numpy(), want)
    assert not object_masks(to_unit(torch.from_numpy(img)), ()).any()


@pytest.mark.parametrize("family", FAMILIES)
def test_object_weight_raises_loss_weight_on_object_pixels(family):
    from worldmodels.modeling_common import to_unit

    traj = synthetic_trajectories()
    m0 = tiny_model(family)
    m1 = tiny_model(family, object_colors=CUBES, object_weight=10.0)
    f = to_unit(torch.from_numpy(traj.images[None, :4]))
    target, last = f[:, 2:], f[:, 1]
    w0, w1 = m0._pixel_weights(target, last), m1._pixel_weights(target, last)
    assert w1.shape == w0.shape == (1, 2, 1, 16, 16)
    red = torch.from_numpy((traj.images[:4, ..., 0] > 200)[None, :, None])
    obj = red[:, 2:] | red[:, 1:2]  # the square in a target frame or where it was in the last context
    assert torch.allclose(w1 - w0, 10.0 * obj.float())
    # the loss with object weight is larger for the same error on the square
    m1.load_state_dict(m0.state_dict())
    batch = WindowSampler(traj, m0.config, seed=0).sample(4)
    torch.manual_seed(0)
    l0 = float(m0.training_loss(batch)[1]["loss_pixel"])
    torch.manual_seed(0)
    l1 = float(m1.training_loss(batch)[1]["loss_pixel"])
    assert l1 > l0


def test_object_oversample_draws_windows_where_objects_move():
    traj = synthetic_trajectories(episodes=4, length=10)
    # episodes 1..3 hold still (every frame is the episode's first): only episode 0 has object motion
    for e in range(1, 4):
        traj.images[e * 10 : (e + 1) * 10] = traj.images[e * 10]
    ep = np.asarray(traj.episode_index)

    def moving_share(oversample: float) -> float:
        m = tiny_model("deterministic", object_colors=CUBES, object_oversample=oversample)
        s = WindowSampler(traj, m.config, seed=0)
        drawn = s.rng.choice(len(s.starts), size=2000, p=s.p)
        return float((ep[s.floor[drawn]] == 0).mean())

    assert moving_share(1.0) == 1.0
    assert 0.55 < moving_share(0.5) < 0.7  # half oversampled + a quarter of the uniform half
    assert 0.15 < moving_share(0.0) < 0.35
    # episode weights still gate: an episode with weight 0 is never drawn, even if its objects move
    m = tiny_model("deterministic", object_colors=CUBES, object_oversample=1.0)
    s = WindowSampler(traj, m.config, episode_weights=np.array([0.0, 1.0, 1.0, 1.0]), seed=0)
    assert (ep[s.floor[s.rng.choice(len(s.starts), size=500, p=s.p)]] != 0).all()


def test_episode_start_windows_pad_the_context_like_a_reset():
    """Windows may begin up to T-1 rows before an episode: their context repeats the first frame
    (as ``init_context`` from a reset does) and their targets and actions are real rows of it."""
    traj = synthetic_trajectories(episodes=3, length=12)
    frame_id = np.arange(len(traj.images))
    traj.images[:] = (frame_id % 251)[:, None, None, None].astype(np.uint8)  # frame row, readable back
    traj.actions[:, 0] = frame_id / 100.0
    m = tiny_model("deterministic")
    t = m.config.context_frames
    s = WindowSampler(traj, m.config, seed=0)
    assert s.padded_windows == 3 * (t - 1)
    batch = s.sample(4000)
    rows = batch["frames"][:, :, 0, 0, 0].numpy().astype(int)
    act_rows = np.rint(batch["actions"][:, :, 0].numpy() * 100).astype(int)
    ep = np.asarray(traj.episode_index)
    padded = rows[:, 0] == rows[:, 1]
    assert padded.any() and (~padded).any()
    for r, a in zip(rows, act_rows):
        assert len(set(ep[r])) == 1  # never crosses an episode boundary
        ctx, tgt = r[:t], r[t:]
        first = ctx[0]
        assert first == ep.tolist().index(ep[first]) or (np.diff(ctx) == 1).all()
        assert (np.diff(tgt) == 1).all() and tgt[0] == ctx[-1] + 1  # real consecutive targets
        assert (a == tgt - 1).all()  # action i produces target frame i
    # a padded window's first target is an episode's frame 1, from a context of frame 0 only
    assert set(rows[padded, t] - rows[padded, 0]) <= set(range(1, t))
    off = dataclasses.replace(m.config, episode_start_windows=False)
    assert WindowSampler(traj, off, seed=0).padded_windows == 0


def test_object_config_checks_and_roundtrip(tmp_path):
    with pytest.raises(ConfigError, match="object_colors"):
        make_world_model("deterministic", object_colors=[[0.5, 0.5]])
    with pytest.raises(ConfigError, match="not grey"):
        make_world_model("deterministic", object_colors=[[0.5, 0.5, 0.5]])
    with pytest.raises(ConfigError, match="object_oversample"):
        make_world_model("deterministic", object_oversample=1.5)
    with pytest.raises(ConfigError, match="object_weight"):
        make_world_model("deterministic", object_weight=-1)
    m = tiny_model("deterministic", object_colors=CUBES, object_weight=5.0, object_oversample=0.5)
    m.save_pretrained(tmp_path / "m")
    m2 = load_world_model(tmp_path / "m")
    assert m2.config == m.config and m2.config.object_colors[0] == (0.85, 0.1, 0.1)


def test_flow_option_starts_as_copy_last_and_warps():
    from worldmodels.deterministic.modeling_deterministic import warp

    f = torch.zeros(1, 1, 1, 8, 8)
    f[0, 0, 0, 3, 4] = 1.0
    assert torch.allclose(warp(f, torch.zeros(1, 1, 2, 8, 8)), f, atol=1e-5)
    flow = torch.zeros(1, 1, 2, 8, 8)
    flow[:, :, 0] = 1.0  # every pixel takes the value one pixel to its right
    assert torch.allclose(warp(f, flow)[0, 0, 0, 3, 3], torch.tensor(1.0), atol=1e-5)
    m = tiny_model("deterministic", predict_flow=True)
    frames, states, actions = inputs(b=2, h=2)
    out = m.rollout(frames, states, actions)
    assert torch.equal(out.frames, frames[:, -1:].expand(-1, 2, -1, -1, -1))  # untrained: copy-last
    batch = WindowSampler(synthetic_trajectories(), m.config, seed=0).sample(4)
    loss, _ = train_step(m, torch.optim.AdamW(m.parameters(), lr=1e-3), batch)
    assert np.isfinite(loss)
    with pytest.raises(ConfigError, match="predict_flow"):
        make_world_model("deterministic", predict_flow=True, predict_residual=False)


def test_residual_deadzone_drops_small_changes_only():
    m = tiny_model("deterministic", residual_deadzone=0.1)
    with torch.no_grad():  # a constant residual of 0.05 everywhere, 0.5 on one pixel
        m.net.unet.conv_out.bias.fill_(0.05)
        m.net.unet.conv_out.weight.zero_()
    frames, states, actions = inputs(b=1, h=2)
    ctx = m.init_context(frames, states)
    out = m.step(ctx, actions).frames
    assert torch.equal(out, frames[:, -1:].expand(-1, 2, -1, -1, -1))  # 0.05 < 0.1: all dropped
    m.config.residual_deadzone = 0.0
    assert not torch.equal(m.step(ctx, actions).frames, out)
    with pytest.raises(ConfigError, match="residual_deadzone"):
        make_world_model("deterministic", residual_deadzone=-0.1)


def test_weight_ema_is_the_final_model_and_resumes(tmp_path):
    from worldmodels.modeling_common import WorldModel
    from worldmodels.train import (
        DataConfig,
        TrainLoopConfig,
        TrainWorldModelConfig,
        WeightEMA,
        train_world_model,
    )

    with pytest.raises(ConfigError, match="ema_decay"):
        TrainLoopConfig(ema_decay=1.0)
    m = tiny_model("deterministic")
    ema = WeightEMA(m, 0.9)
    p = next(m.parameters())
    with torch.no_grad():
        p.add_(1.0)
    ema.update(m, 100)  # decay min(0.9, 101/110) = 0.9: the average moves 10% of the way
    name = next(n for n, _ in m.named_parameters())
    torch.testing.assert_close(ema.shadow[name], p.detach() - 0.9)
    traj = synthetic_trajectories(episodes=5)
    train, test = traj.select_episodes([0, 1, 2, 3]), traj.select_episodes([4])

    def run(steps: int, decay: float, run_dir: str):
        c = TrainWorldModelConfig(
            world_model={"family": "deterministic", **TINY},
            data=DataConfig(),
            run_dir=str(tmp_path / run_dir),
            train=TrainLoopConfig(
                steps=steps, batch_size=4, checkpoint_every=2, videos=0, warmup_steps=1, ema_decay=decay
            ),
        )
        return train_world_model(c, train, test, progress=False)

    raw, _ = run(4, 0.0, "raw")
    avg, info = run(4, 0.5, "ema")
    assert info["ema_decay"] == 0.5
    saved = WorldModel.from_pretrained(tmp_path / "ema" / "model")
    ckpt = WorldModel.from_pretrained(tmp_path / "ema" / "checkpoints" / "step_000004" / "model")
    # same seed and data: the checkpoint keeps the raw weights, the final model is their average
    for (n, a), b in zip(ckpt.named_parameters(), raw.parameters(), strict=True):
        torch.testing.assert_close(a, b, msg=n)
    assert any(not torch.equal(a, c) for a, c in zip(ckpt.parameters(), saved.parameters(), strict=True))
    state = torch.load(
        tmp_path / "ema" / "checkpoints" / "step_000004" / "trainer_state.pt", weights_only=False
    )
    assert set(state["ema"]) == {n for n, _ in saved.named_parameters()}
    resumed, info = run(6, 0.5, "ema")  # resumes at step 4 with the stored average
    assert info["steps"] == 6


def test_fidelity_goals_and_step_budgets():
    from benchmarks.wm_fidelity import _parse_steps, goals

    assert _parse_steps(None, None) is None
    assert _parse_steps(None, {"deterministic": 5}) == {"deterministic": 5}
    assert _parse_steps("7", None) == {"deterministic": 7, "diffusion": 7}
    assert _parse_steps("deterministic=3,diffusion=2", None) == {"deterministic": 3, "diffusion": 2}
    for bad in ("0", "x", "deterministic=-1", "deterministic"):
        with pytest.raises(ConfigError, match="--train-steps"):
            _parse_steps(bad, None)
    r = {
        "goals_h16": {"psnr_minus_copy_last_db": 3.5, "object_error_ratio_to_copy_last": 0.9},
        "action_shuffle_psnr_drop": 2.5,
        "imagined_frames_per_s": 500.0,
    }
    g = goals(r, quick=True)
    assert g["checked"] == ["beats_copy_last_object_error"] and g["all_checked_met"]
    assert not g["object_error_ratio_to_copy_last"]["met"] and not g["all_issue_goals_met"]
    r["goals_h16"]["object_error_ratio_to_copy_last"] = 1.01  # copy-last wins: the quick check fails
    assert not goals(r, quick=True)["all_checked_met"]
    assert goals(r, quick=False)["checked"] == [] and goals(r, quick=False)["all_checked_met"]


@pytest.mark.parametrize("family", FAMILIES)
def test_head_reads_cond_widens_the_head_and_learns_from_the_raw_conditioning(family, tmp_path):
    m = tiny_model(family, head_reads_cond=True)
    plain = tiny_model(family)
    first, first_plain = m.head.mlp[0], plain.head.mlp[0]
    extra = m.cond_size(16 if family == "diffusion" else 0)
    assert first.in_features == first_plain.in_features + extra
    batch = WindowSampler(synthetic_trajectories(), m.config, seed=0).sample(4)
    m.training_loss(batch)[0].backward()
    grad_cond = first.weight.grad[:, -extra:]
    assert torch.isfinite(grad_cond).all() and grad_cond.abs().sum() > 0  # the raw columns are trained
    m.save_pretrained(tmp_path / "wm")
    m2 = load_world_model(tmp_path / "wm")
    assert m2.config.head_reads_cond is True and m2.head.mlp[0].in_features == first.in_features
    frames, states, actions = inputs()
    o = m2.rollout(frames, states, actions)
    assert o.states.shape == (3, actions.shape[1], m.config.full_state_dim)


@pytest.mark.parametrize("family", FAMILIES)
def test_state_conditioned_frames_read_the_chunk_states(family, tmp_path):
    """``state_conditioned_frames`` widens the conditioning by the chunk's states (K*D) and a flag,
    trains on the real target states (withheld for the dropout share) and, without a state model,
    runs with them withheld."""
    m = tiny_model(family, state_conditioned_frames=True, state_cond_dropout=0.0)
    plain = tiny_model(family)
    k, d = m.config.chunk_size, m.config.full_state_dim
    assert m.cond_size(0) == plain.cond_size(0) + k * d + 1
    assert m.net.cond_mlp[0].in_features == plain.net.cond_mlp[0].in_features + k * d + 1
    batch = WindowSampler(synthetic_trajectories(), m.config, seed=0).sample(4)
    ctx_n = m.norm_states(batch["states"][:, :2])
    fut, heat = m._training_future(batch, ctx_n)
    assert heat is None  # no heatmaps without state_heatmaps
    want = m.future_features(ctx_n, m.norm_states(batch["states"][:, 2:4]))
    assert torch.equal(fut, want) and torch.equal(fut[:, -1], torch.ones(4))
    delta = (batch["states"][:, 2:4] - batch["states"][:, 1:2]) / m.state_std  # proprio: spread units
    torch.testing.assert_close(fut[:, :-1], delta.flatten(1).clamp(-10, 10))
    m.config.state_cond_dropout = 1.0
    assert torch.equal(m._training_future(batch, ctx_n)[0], torch.zeros_like(fut))
    m.config.state_cond_dropout = 0.0
    m.train()
    m.training_loss(batch)[0].backward()
    grad = m.net.cond_mlp[0].weight.grad
    n_extra = 16 if family == "diffusion" else 0
    cols = grad[:, grad.shape[1] - n_extra - (k * d + 1) : grad.shape[1] - n_extra]
    assert torch.isfinite(cols).all() and cols.abs().sum() > 0  # the chunk-state columns are trained
    m.eval()
    frames, states, actions = inputs()
    ctx = m.init_context(frames, states)
    torch.manual_seed(0)
    alone = m.step(ctx, actions[:, :2]).frames
    torch.manual_seed(0)
    withheld = m._predict(ctx, m.norm_actions(actions[:, :2]), None)[0]
    from worldmodels.modeling_common import quantize, to_uint8

    assert torch.equal(alone, to_uint8(quantize(withheld)))
    # states given from outside replace the predicted ones and the frames are drawn from them
    given = states[:, -1:].expand(-1, 2, -1) + torch.tensor([3.0, -2.0])
    torch.manual_seed(0)
    o = m.step(ctx, actions[:, :2], states=given)
    torch.testing.assert_close(o.states, given, atol=1e-5, rtol=1e-5)
    torch.manual_seed(0)
    drawn = m._predict(ctx, m.norm_actions(actions[:, :2]), m.norm_states(given))[0]
    torch.testing.assert_close(o.frames, to_uint8(quantize(drawn)), atol=1, rtol=0)
    from worldmodels.modeling_common import WorldModelInputError

    with pytest.raises(WorldModelInputError, match="states"):
        m.step(ctx, actions[:, :2], states=given[:, :1])
    m.save_pretrained(tmp_path / "wm")
    back = load_world_model(tmp_path / "wm")
    assert back.config.state_conditioned_frames is True
    assert back.net.cond_mlp[0].in_features == m.net.cond_mlp[0].in_features
    with pytest.raises(ConfigError, match="state_cond_dropout=1.5"):
        make_world_model(family, state_cond_dropout=1.5)
    with pytest.raises(ConfigError, match="state_conditioned_frames=true needs state_dim"):
        make_world_model(family, state_dim=0, state_conditioned_frames=True)


def test_state_conditioned_frames_learn_motion_the_actions_do_not_explain():
    """The square moves by a hidden random walk (the actions are unrelated noise) and the state is
    its position: a model given the chunk's states learns to draw it where they say, a plain one
    cannot, so its held-out error stays well above."""
    from worldmodels.modeling_common import to_unit

    def walk(seed: int) -> Trajectories:
        traj = synthetic_trajectories(episodes=6, length=10, seed=seed)
        rng = np.random.default_rng(seed + 100)
        for e in range(6):
            pos = rng.uniform(5, 10, 2)
            for t in range(10):
                i = e * 10 + t
                img = np.full((16, 16, 3), 128, np.uint8)
                y, x = np.round(pos).astype(int)
                img[y - 1 : y + 2, x - 1 : x + 2] = (216, 25, 25)
                traj.images[i], traj.states[i] = img, pos
                pos = np.clip(pos + rng.choice([-1.0, 1.0], 2), 2, 13)
        return traj

    train, test = walk(0), walk(1)
    errs = {}
    for given in (True, False):
        torch.manual_seed(0)
        m = tiny_model("deterministic", state_conditioned_frames=given, state_cond_dropout=0.0,
                       context_noise_max=0.0, block_out_channels=[16, 32], norm_num_groups=8, head_hidden=32)
        m.fit_stats(train.states, train.actions, train.rewards)
        opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
        sampler = WindowSampler(train, m.config, seed=0)
        m.train()
        for _ in range(150):
            train_step(m, opt, sampler.sample(16))
        m.eval()
        tb = WindowSampler(test, m.config, seed=1).sample(32)
        ctx = m.init_context(tb["frames"][:, :2], tb["states"][:, :2])
        future = m.norm_states(tb["states"][:, 2:4]) if given else None
        with torch.no_grad():
            pred = m._predict(ctx, m.norm_actions(tb["actions"]), future)[0]
        errs[given] = float((pred - to_unit(tb["frames"][:, 2:4])).pow(2).mean())
    assert errs[True] < 0.6 * errs[False], errs


def test_frames_follow_states_projection_and_gap():
    """benchmarks.frames_follow_states: the fitted projection recovers where the cubes are drawn,
    and the frame-state gap is the distance between a drawn cube and where its state puts it."""
    from benchmarks.frames_follow_states import fit_projection, frame_state_gap, project

    rng = np.random.default_rng(0)
    n = 120
    cubes = np.stack([rng.uniform([-0.2, -0.2, 0.02], [0.2, 0.2, 0.1], (n, 3))], 0)[0]  # (n, 3): x, y, z
    cubes = np.stack([cubes, cubes[::-1], np.roll(cubes, 7, 0)], 1)  # (n, 3 cubes, xyz)
    cols = [(216, 25, 25), (25, 190, 50), (38, 76, 230)]

    def draw(c: np.ndarray) -> np.ndarray:  # row = 32 + 100 y - 50 z, col = 32 + 100 x
        img = np.full((64, 64, 3), 128, np.uint8)
        for j in range(3):
            r, q = int(round(32 + 100 * c[j, 1] - 50 * c[j, 2])), int(round(32 + 100 * c[j, 0]))
            img[r - 1 : r + 2, q - 1 : q + 2] = cols[j]
        return img

    frames = np.stack([draw(c) for c in cubes])
    coef = fit_projection(frames, cubes)
    proj = project(coef, cubes[:5])
    want = np.stack([32 + 100 * cubes[:5, :, 1] - 50 * cubes[:5, :, 2], 32 + 100 * cubes[:5, :, 0]], -1)
    assert np.abs(proj - want).max() < 0.6  # rounding to the pixel grid
    assert np.nanmean(frame_state_gap(frames, cubes, coef)) < 0.5
    moved = cubes.copy()
    moved[..., 0] += 0.04  # every state 4 px to the right of where the frame draws the cube
    gap = frame_state_gap(frames, moved, coef)
    assert 3.4 < np.nanmean(gap) < 4.6
    with pytest.raises(ValueError, match="visible in only"):
        fit_projection(frames[:10], cubes[:10])
    from worldmodels.object_projection import OFFSCREEN
    from worldmodels.object_projection import fit_projection as fit_any

    cen = np.zeros((30, 2, 2))
    vis = np.zeros((30, 2), bool)
    vis[:, 0] = True
    cen[:, 0] = rng.uniform(0, 60, (30, 2))
    xyz = rng.uniform(-0.1, 0.1, (30, 2, 3))
    coef = fit_any(cen, vis, xyz, unseen="offscreen")  # object 1 is never seen: it maps off the image
    assert np.all(coef[1, 0] == OFFSCREEN) and (project(coef, xyz)[:, 1] < -1000).all()
