"""Reward models (IDM, executability reward, success model): contract, bad input, training, save/load."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from rewards import (
    IDM,
    ExecutabilityConfig,
    ExecutabilityReward,
    IDMConfig,
    SuccessModelConfig,
    SuccessRewardModel,
    frame_success_labels,
    idm_r2,
    train_idm,
    train_success_model,
)
from rewards.train import RewardModelsConfig, TrainRewardsConfig, auroc, real_clips, train_reward_models
from wmrl.data import Trajectories
from wmrl.errors import CheckpointError, ConfigError, NonFiniteError, WmrlError

SIZE = 32
IDM_TINY = IDMConfig(image_size=SIZE, channels=(8, 16, 16), hidden_dim=32, arch="stack", context=1, future=1)
SUCC_TINY = SuccessModelConfig(image_size=SIZE, channels=(8, 8, 8), hidden_dim=32)
INSTR = ["move the square to the left", "move the square to the right"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Small convs: one torch thread is several times faster than two on a busy 2-core CPU."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _square(p: np.ndarray) -> np.ndarray:
    img = np.zeros((SIZE, SIZE, 3), np.uint8)
    img[:, :, 2] = 60
    y, x = int(round(p[1])), int(round(p[0]))
    img[max(0, y - 2) : y + 3, max(0, x - 2) : x + 3] = 255
    return img


def toy_trajectories(episodes: int = 8, length: int = 12, seed: int = 0, terminal: bool = False) -> Trajectories:
    """A white square on a blue background moved by actions (3 px per unit) towards a goal column
    named by the instruction; random action noise so the IDM sees varied actions. Success: within
    2 px of the goal (the episode goes on, so there are several success frames). ``terminal``:
    also each episode's terminal observation (the frame after its last action)."""
    from wmrl.data import TerminalObs

    rng = np.random.default_rng(seed)
    imgs, acts, succ, ep, fr, ins = [], [], [], [], [], []
    term_imgs = []
    for e in range(episodes):
        goal = np.array([6.0 if e % 2 == 0 else SIZE - 7.0, SIZE / 2])
        p = rng.uniform(8, SIZE - 9, 2)
        for t in range(length):
            img = _square(p)
            a = np.zeros(7, np.float32)
            a[:2] = np.clip((goal - p) / 6.0 + rng.normal(0, 0.4, 2), -1, 1)
            a[6] = 1.0 if np.linalg.norm(goal - p) < 2 else -1.0
            imgs.append(img)
            acts.append(a)
            p = np.clip(p + 3.0 * a[:2], 2, SIZE - 3)
            succ.append(bool(np.linalg.norm(goal - p) < 2))
            ep.append(e)
            fr.append(t)
            ins.append(INSTR[e % 2])
        term_imgs.append(_square(p))
    n = len(imgs)
    succ_arr = np.asarray(succ)
    term = TerminalObs(images=np.stack(term_imgs), wrist_images=None, states=np.zeros((episodes, 8), np.float32),
                       successes=succ_arr[length - 1 :: length].copy())
    return Trajectories(
        images=np.stack(imgs), wrist_images=None, states=np.zeros((n, 8), np.float32), actions=np.stack(acts),
        rewards=np.asarray(succ, np.float32), successes=succ_arr, dones=np.zeros(n, bool),
        episode_index=np.asarray(ep, np.int64), frame_index=np.asarray(fr, np.int64), instructions=ins,
        task_ids=["toy"] * n, terminal=term if terminal else None,
    )


@pytest.fixture(scope="module")
def traj() -> Trajectories:
    return toy_trajectories()


@pytest.fixture(scope="module")
def trained_idm(traj) -> IDM:
    return train_idm(traj, IDM_TINY, steps=120, batch_size=32, lr=2e-3, seed=0, augment_shift=4)


# ------------------------------------------------------------------ IDM
def test_idm_predict_shapes_and_errors():
    idm = IDM(IDM_TINY)
    frames = torch.randint(0, 256, (2, 5, SIZE, SIZE, 3), dtype=torch.uint8)
    out = idm.predict(frames)
    assert out.shape == (2, 4, 7) and out.dtype == torch.float32 and torch.isfinite(out).all()
    with pytest.raises(WmrlError, match=r"expected \(B, T, 32, 32, 3\)"):
        idm.predict(frames[:, 0])
    with pytest.raises(WmrlError, match="dtype"):
        idm.predict(frames.float())
    with pytest.raises(WmrlError, match="at least 2 frames"):
        idm.predict(frames[:, :1])
    with pytest.raises(ConfigError, match="context=7"):
        IDMConfig(context=7)


def test_idm_learns_actions(traj, trained_idm):
    """Training reduces the loss and the held-in R^2 of the moving dims is clearly positive."""
    r2 = idm_r2(trained_idm, traj)
    assert r2["per_dim"][2] is None  # constant dim: undefined, not a fake number
    assert r2["per_dim"][0] > 0.3 and r2["per_dim"][1] > 0.3, r2


def test_idm_save_load_and_wrong_checkpoint(tmp_path, trained_idm):
    frames = torch.randint(0, 256, (1, 4, SIZE, SIZE, 3), dtype=torch.uint8)
    trained_idm.save_pretrained(tmp_path / "idm")
    loaded = IDM.from_pretrained(tmp_path / "idm")
    torch.testing.assert_close(loaded.predict(frames), trained_idm.predict(frames))
    torch.testing.assert_close(loaded.action_std, trained_idm.action_std)
    SuccessRewardModel(SUCC_TINY).save_pretrained(tmp_path / "succ")
    with pytest.raises(CheckpointError, match="expected 'idm'"):
        IDM.from_pretrained(tmp_path / "succ")
    with pytest.raises(CheckpointError, match="expected 'success'"):
        SuccessRewardModel.from_pretrained(tmp_path / "idm")
    meta = json.loads((tmp_path / "idm" / "config.json").read_text())
    meta["config"]["hidden_dim"] = 64
    (tmp_path / "idm" / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="does not match"):
        IDM.from_pretrained(tmp_path / "idm")


def test_idm_keypoints_arch(traj):
    """The keypoint IDM (shared per-frame CNN + soft-argmax) has the same contract and learns the toy motion."""
    cfg = IDMConfig(image_size=SIZE, channels=(8, 16), hidden_dim=32, arch="keypoints", keypoints=8,
                    context=0, future=0)
    assert cfg.strides == (2, 2) and cfg.window == 2
    idm = train_idm(traj, cfg, steps=150, batch_size=32, lr=3e-3, seed=0, augment_shift=0)
    out = idm.predict(torch.from_numpy(traj.images[:10][None]))
    assert out.shape == (1, 9, 7) and torch.isfinite(out).all()
    r2 = idm_r2(idm, traj)
    assert r2["per_dim"][0] > 0.3 and r2["per_dim"][1] > 0.3, r2
    with pytest.raises(ConfigError, match="arch='bogus'"):
        IDMConfig(arch="bogus")
    with pytest.raises(ConfigError, match="strides"):
        IDMConfig(arch="keypoints", channels=(8, 16), strides=(2, 3))
    with pytest.raises(ConfigError, match="stack"):
        IDM(IDMConfig(channels=(8, 16, 16), strides=(1, 1, 1), arch="stack"))


def test_idm_nan_stops_training(traj):
    bad = toy_trajectories(episodes=2)
    bad.actions[:, 0] = np.nan
    with pytest.raises(NonFiniteError):
        train_idm(bad, IDM_TINY, steps=3, batch_size=4)


# ------------------------------------------------------------------ executability
def test_executability_penalties_rank_motion():
    """Smooth decoded motion scores higher than jerky motion; mismatch with commands lowers the reward."""
    exe = ExecutabilityReward(IDM(IDM_TINY), ExecutabilityConfig(scale=1.0, step_scale=0.1))
    t = torch.linspace(0, 1, 7)
    smooth = torch.zeros(1, 7, 7)
    smooth[0, :, 0] = 0.3 * t
    jerky = smooth.clone()
    jerky[0, ::2, 0] += 0.8
    p_smooth, p_jerky = exe.penalties(smooth), exe.penalties(jerky)
    assert p_smooth.shape == (1, 7) and float(p_jerky.sum()) > 5 * float(p_smooth.sum())
    assert float(exe.penalties(smooth, smooth).sum()) == pytest.approx(float(p_smooth.sum()))
    assert float(exe.penalties(smooth, -smooth + 0.5).sum()) > float(p_smooth.sum())
    over = smooth.clone()
    over[0, 3, 1] = 3.0  # velocity-limit violation
    assert float(exe.penalties(over).sum()) > float(p_smooth.sum()) + 2.0


def test_executability_contract(trained_idm, traj):
    exe = ExecutabilityReward(trained_idm)
    frames, cmd, _ = real_clips(traj, 6, 9, seed=0)
    out = exe(frames, cmd)
    assert out.reward.shape == (9,) and out.per_step_score.shape == (9, 5) and out.decoded_actions.shape == (9, 5, 7)
    assert (out.reward > 0).all() and (out.reward <= 10).all()
    assert (out.per_step_score > 0).all() and (out.per_step_score <= 1).all()
    cal = exe.calibrate(frames, cmd)
    assert cal["scale"] > 0 and len(cal["residual_std"]) == 7 and min(cal["residual_std"]) > 0
    assert float(exe(frames, cmd).reward.median()) == pytest.approx(10 / np.sqrt(2), rel=1e-4)
    with pytest.raises(WmrlError, match=r"commanded_actions have shape \(9, 4, 7\)"):
        exe(frames, cmd[:, :4])
    with pytest.raises(ConfigError, match="out of range"):
        ExecutabilityReward(trained_idm, ExecutabilityConfig(smooth_dims=(9,)))
    with pytest.raises(ConfigError, match="w_jerk=-1"):
        ExecutabilityConfig(w_jerk=-1)


def test_executability_detects_shuffled_clips(trained_idm, traj):
    """Real clips score above the same clips with their frames shuffled (AUROC well above chance)."""
    exe = ExecutabilityReward(trained_idm)
    frames, cmd, _ = real_clips(traj, 6, 40, seed=1)
    rng = np.random.default_rng(0)
    shuffled = np.stack([f[rng.permutation(len(f))] for f in frames])
    assert auroc(exe(frames, cmd).reward.numpy(), exe(shuffled, cmd).reward.numpy()) > 0.7


def test_executability_save_load(tmp_path, trained_idm):
    exe = ExecutabilityReward(trained_idm, ExecutabilityConfig(scale=3.5))
    exe.save_pretrained(tmp_path / "exe")
    loaded = ExecutabilityReward.from_pretrained(tmp_path / "exe")
    assert loaded.config.scale == 3.5 and loaded.config.smooth_dims == (0, 1, 2)
    frames = torch.randint(0, 256, (2, 4, SIZE, SIZE, 3), dtype=torch.uint8)
    torch.testing.assert_close(loaded(frames).reward, exe(frames).reward)
    with pytest.raises(CheckpointError, match="no executability.json"):
        ExecutabilityReward.from_pretrained(tmp_path)


# ------------------------------------------------------------------ success model
def test_frame_success_labels():
    t = toy_trajectories(episodes=2, length=4)
    t.successes[:] = [False, False, True, False, False, False, False, True]
    labels = frame_success_labels(t)
    # frame t shows the scene after action t-1; the last frame of a successful episode is positive
    assert labels.tolist() == [False, False, False, True, False, False, False, True]


def test_success_model_contract_and_training(tmp_path, traj):
    model = SuccessRewardModel(SUCC_TINY)
    frames = torch.from_numpy(traj.images[:6])
    p = model.predict(frames, INSTR * 3)
    assert p.shape == (6,) and ((p >= 0) & (p <= 1)).all()
    with pytest.raises(WmrlError, match="one per element"):
        model.predict(frames, INSTR)
    with pytest.raises(WmrlError, match="expected a string"):
        model.predict(frames, [0] * 6)
    with pytest.raises(WmrlError, match=r"expected \(B, 32, 32, 3\)"):
        model.predict(frames[None], INSTR * 3)
    model = train_success_model(traj, SUCC_TINY, steps=120, batch_size=32, lr=2e-3, seed=0)
    labels = frame_success_labels(traj)
    prob = model.predict(traj.images, list(traj.instructions)).numpy()
    assert auroc(prob[labels], prob[~labels]) > 0.8
    model.save_pretrained(tmp_path / "s")
    loaded = SuccessRewardModel.from_pretrained(tmp_path / "s")
    torch.testing.assert_close(loaded.predict(frames, INSTR * 3), model.predict(frames, INSTR * 3))
    # fine-tuning on new episodes with per-episode weights continues the same model
    before = [p.detach().clone() for p in model.parameters()]
    weights = np.ones(traj.num_episodes)
    weights[0] = 5.0
    same = model.finetune(traj, steps=3, weights=weights, batch_size=8)
    assert same is model and any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_success_frames_use_terminal_observations():
    """With terminal observations (dataset sidecar) the pool gains one frame per episode with its
    true label, and the stored last frame is no longer a stand-in positive."""
    from rewards.success import success_frames
    from rewards.train import success_eval

    t = toy_trajectories(episodes=6, length=10, seed=3, terminal=True)
    plain = success_frames(t, use_terminal=False)
    pool = success_frames(t)
    assert len(plain.labels) == t.num_frames and not plain.terminal.any()
    assert len(pool.labels) == t.num_frames + 6 and pool.terminal.sum() == 6
    assert pool.labels[pool.terminal].tolist() == t.terminal.successes.tolist()
    np.testing.assert_array_equal(pool.images[pool.terminal], t.terminal.images)
    last = t.episode_bounds[:, 1] - 1
    assert pool.labels[last].tolist() == t.successes[last - 1].tolist()  # truthful: scene after action t-1
    assert pool.instructions[t.num_frames :] == [t.instructions[s] for s in t.episode_bounds[:, 0]]
    # train on the toy set with terminal frames; evaluation reports the pool and terminal-only AUROC
    t = toy_trajectories(episodes=8, length=12, terminal=True)
    model = train_success_model(t, SUCC_TINY, steps=80, batch_size=32, lr=2e-3, seed=0)
    ev = success_eval(model, t)
    assert ev["success_eval_frames"]["terminal_frames"] == 8 and ev["success_auroc"] > 0.8
    with pytest.raises(WmrlError, match="one per episode"):
        train_success_model(t, SUCC_TINY, steps=1, weights=np.ones(3))


def test_success_model_needs_both_classes():
    t = toy_trajectories(episodes=2)
    t.successes[:] = False
    with pytest.raises(WmrlError, match="positive and negative"):
        train_success_model(t, SUCC_TINY, steps=2)


def test_train_reward_models_job(tmp_path, traj):
    cfg = TrainRewardsConfig(out=str(tmp_path / "run"), idm_steps=5, success_steps=5, batch_size=8, clip_len=4,
                             rewards=RewardModelsConfig(idm=IDM_TINY, success=SUCC_TINY))
    res = train_reward_models(cfg, traj, progress=False)
    assert len(res["idm_r2"]["per_dim"]) == 7 and 0 <= res["success_auroc"] <= 1
    assert (tmp_path / "run" / "executability" / "idm" / "model.safetensors").exists()
    assert (tmp_path / "run" / "success" / "model.safetensors").exists()
    assert (tmp_path / "run" / "eval.json").exists()
    # a second call finds both models and only re-evaluates (resume at stage level)
    res2 = train_reward_models(cfg, traj, progress=False)
    assert res2["idm_r2"] == res["idm_r2"]


def test_train_rewards_config_via_hydra():
    from wmrl.config import load_config, to_dataclass

    cfg = to_dataclass(load_config("train_rewards", ["idm_steps=11"]), TrainRewardsConfig)
    assert cfg.idm_steps == 11 and cfg.rewards.idm.channels == (16, 32, 32) and cfg.rewards.idm.arch == "keypoints"
    assert cfg.rewards.executability.smooth_dims == (0, 1, 2)
    with pytest.raises(ConfigError, match="clip_len=2"):
        to_dataclass(load_config("train_rewards", ["clip_len=2"]), TrainRewardsConfig)
    with pytest.raises(ConfigError):
        to_dataclass(load_config("train_rewards", ["+rewards.idm.bogus=1"]), TrainRewardsConfig)
