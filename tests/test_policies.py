"""Contract tests run over every registered policy head (tiny configs, synthetic data, CPU)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from policies import load_policy
from policies.base import Policy
from policies.heads import GaussianHead, TokenHead
from policies.text import InstructionEncoder
from policies.train import TrainPolicyConfig, random_shift, train_policy
from policies.vla import VLAConfig, VLAPolicy
from wmrl.data import Trajectories
from wmrl.errors import CheckpointError, ConfigError, NonFiniteError, WmrlError

SIZE = 32
TINY = dict(image_size=SIZE, channels=(8, 8, 8), hidden_dim=32, chunk_size=3, num_bins=16)
VARIANTS = {
    "gaussian_clipped": dict(head="gaussian", squash=False, log_std_mode="state_independent"),
    "gaussian_squashed": dict(head="gaussian", squash=True, log_std_mode="state_dependent"),
    "tokens": dict(head="tokens"),
    "gaussian_wrist_concat": dict(head="gaussian", use_wrist=True, fusion="concat", value_head=False),
}
INSTR = ["move the square to the left", "move the square to the right"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Small convs: one torch thread is several times faster than two on a busy 2-core CPU."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def toy_trajectories(episodes: int = 8, length: int = 10, size: int = SIZE, seed: int = 0) -> Trajectories:
    """A white square moved by 2-D actions towards a goal column given by the instruction.

    Frames (32x32) show the square; actions = clipped direction to the goal (dims 0, 1), gripper
    +1 once there; the square moves by 3 px per unit action. Success: within 2 px of the goal."""
    rng = np.random.default_rng(seed)
    imgs, states, acts, succ, ep, fr, ins = [], [], [], [], [], [], []
    for e in range(episodes):
        goal = np.array([6.0 if e % 2 == 0 else size - 7.0, size / 2])
        p = rng.uniform(6, size - 7, 2)
        for t in range(length):
            img = np.zeros((size, size, 3), np.uint8)
            img[:, :, 2] = 40
            y, x = int(round(p[1])), int(round(p[0]))
            img[max(0, y - 2) : y + 3, max(0, x - 2) : x + 3] = 255
            a = np.zeros(7, np.float32)
            a[:2] = np.clip((goal - p) / 6.0, -1, 1)
            a[6] = 1.0 if np.linalg.norm(goal - p) < 2 else -1.0
            imgs.append(img)
            states.append(np.concatenate([p / size, np.zeros(6)]).astype(np.float32))
            acts.append(a)
            p = np.clip(p + 3.0 * a[:2], 2, size - 3)
            succ.append(bool(np.linalg.norm(goal - p) < 2))
            ep.append(e)
            fr.append(t)
            ins.append(INSTR[e % 2])
    n = len(imgs)
    return Trajectories(
        images=np.stack(imgs), wrist_images=np.stack(imgs)[:, ::-1].copy(), states=np.stack(states),
        actions=np.stack(acts), rewards=np.asarray(succ, np.float32), successes=np.asarray(succ),
        dones=np.zeros(n, bool), episode_index=np.asarray(ep, np.int64), frame_index=np.asarray(fr, np.int64),
        instructions=ins, task_ids=["toy"] * n,
    )


def make_obs(b: int = 4, wrist: bool = False, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    obs = {"image": torch.randint(0, 256, (b, SIZE, SIZE, 3), dtype=torch.uint8, generator=g),
           "state": torch.randn(b, 8, generator=g)}
    if wrist:
        obs["wrist_image"] = torch.randint(0, 256, (b, SIZE, SIZE, 3), dtype=torch.uint8, generator=g)
    return obs


@pytest.fixture(params=list(VARIANTS))
def policy(request) -> VLAPolicy:
    torch.manual_seed(0)
    return VLAPolicy(VLAConfig(**TINY, **VARIANTS[request.param])).eval()


def _obs_for(p: VLAPolicy, b: int = 4) -> dict:
    return make_obs(b, p.config.use_wrist)


def test_act_shapes_and_bounds(policy):
    out = policy.act(_obs_for(policy), INSTR * 2)
    assert out.actions.shape == (4, 3, 7) and out.actions.dtype == torch.float32
    assert out.actions.abs().max() <= 1.0
    assert out.log_prob.shape == (4,) and out.entropy.shape == (4,)
    assert torch.isfinite(out.log_prob).all() and torch.isfinite(out.entropy).all()
    if policy.config.value_head:
        assert out.value.shape == (4,)
    else:
        assert out.value is None
    assert (policy.chunk_size, policy.action_dim, policy.image_size) == (3, 7, SIZE)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_rows_outputs_do_not_depend_on_its_batch(variant):
    """Each row's action, log-prob, value and evaluated log-prob are the same bits in a batch of 1-9 rows as in a
    batch of 24 (``policies.row_stable``): a lone episode plays as in a full evaluation batch. At the main job's
    layer sizes, where the CPU's kernels for a few rows round otherwise than for many (1-3 rows on session 87's host)."""
    torch.manual_seed(0)
    p = VLAPolicy(VLAConfig(**VARIANTS[variant])).eval()
    g = torch.Generator().manual_seed(1)
    obs = {"image": torch.randint(0, 256, (24, 64, 64, 3), dtype=torch.uint8, generator=g),
           "state": torch.randn(24, 8, generator=g)}
    if p.config.use_wrist:
        obs["wrist_image"] = torch.randint(0, 256, (24, 64, 64, 3), dtype=torch.uint8, generator=g)
    instr = INSTR * 12
    full = p.act(obs, instr, deterministic=True)
    full_lp = p.evaluate_actions(obs, instr, full.actions).log_prob
    for n in range(1, 10):
        for start in (0, 24 - n):
            rows = slice(start, start + n)
            out = p.act({k: v[rows] for k, v in obs.items()}, instr[rows], deterministic=True)
            assert torch.equal(out.actions, full.actions[rows]), (n, start)
            assert torch.equal(out.log_prob, full.log_prob[rows]), (n, start)
            assert out.value is None if full.value is None else torch.equal(out.value, full.value[rows])
            lp = p.evaluate_actions({k: v[rows] for k, v in obs.items()}, instr[rows], full.actions[rows]).log_prob
            assert torch.equal(lp, full_lp[rows]), (n, start)


@pytest.mark.parametrize("deterministic", [False, True])
def test_sampled_log_prob_matches_evaluate(policy, deterministic):
    obs = _obs_for(policy)
    torch.manual_seed(1)
    out = policy.act(obs, INSTR * 2, deterministic=deterministic)
    ev = policy.evaluate_actions(obs, INSTR * 2, out.actions)
    torch.testing.assert_close(ev.log_prob, out.log_prob, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(ev.entropy, out.entropy)
    # per-dim terms (for token-level RL ratios) sum to the chunk's log-prob, zero on inactive dims
    assert ev.log_prob_dims.shape == (4, 3, 7) and ev.dim_mask.shape == (7,)
    torch.testing.assert_close(ev.log_prob_dims.flatten(1).sum(-1), ev.log_prob)
    policy.head.set_active_dims([0, 1, 2, 6])
    try:
        ev = policy.evaluate_actions(obs, INSTR * 2, out.actions)
        assert (ev.log_prob_dims[..., 3:6] == 0).all() and ev.dim_mask.tolist() == [1, 1, 1, 0, 0, 0, 1]
    finally:
        policy.head.set_active_dims(None)


def test_evaluate_is_differentiable(policy):
    obs = _obs_for(policy)
    out = policy.act(obs, INSTR * 2)
    ev = policy.evaluate_actions(obs, INSTR * 2, out.actions)
    loss = -(ev.log_prob.mean() + 0.01 * ev.entropy.mean()) + (ev.value.pow(2).mean() if ev.value is not None else 0)
    loss.backward()
    grads = [p.grad for p in policy.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


def test_instruction_changes_output(policy):
    obs = _obs_for(policy)
    a = policy.act(obs, [INSTR[0]] * 4, deterministic=True)
    policy.net.text_proj[0].weight.data.normal_()  # make the text pathway matter at init
    b = policy.act(obs, [INSTR[0]] * 4, deterministic=True)
    c = policy.act(obs, [INSTR[1]] * 4, deterministic=True)
    assert not torch.equal(a.actions, b.actions) or policy.config.head == "tokens"
    ev_b = policy.evaluate_actions(obs, [INSTR[0]] * 4, b.actions).log_prob
    ev_c = policy.evaluate_actions(obs, [INSTR[1]] * 4, b.actions).log_prob
    assert not torch.allclose(ev_b, ev_c) or torch.equal(b.actions, c.actions)


def test_save_load_round_trip(policy, tmp_path):
    obs = _obs_for(policy)
    policy.net.state_mean.fill_(0.5)  # normalisation stats must travel
    policy.known_instructions = list(INSTR)
    policy.save_pretrained(tmp_path / "p")
    meta = json.loads((tmp_path / "p" / "config.json").read_text())
    assert meta["policy_type"] == "vla" and meta["config"]["head"] == policy.config.head
    loaded = load_policy(tmp_path / "p")
    assert isinstance(loaded, VLAPolicy) and loaded.config == policy.config
    torch.testing.assert_close(loaded.net.state_mean, policy.net.state_mean)
    a = policy.act(obs, INSTR * 2, deterministic=True)
    b = loaded.act(obs, INSTR * 2, deterministic=True)
    torch.testing.assert_close(a.actions, b.actions)
    torch.testing.assert_close(a.log_prob, b.log_prob)
    assert (tmp_path / "p" / "instructions.safetensors").exists()


def test_average_policies_is_the_mean_of_every_weight_and_keeps_shared_buffers(tmp_path):
    """`policies.weight_average.average_policies`: each parameter the mean of the folders', the normalisation
    buffers they share kept, one folder a copy; a policy of another config is refused by name, nothing written."""
    from policies.weight_average import average_policies

    folders = []
    for seed in range(3):
        torch.manual_seed(seed)
        p = VLAPolicy(VLAConfig(**TINY))
        p.net.state_mean.fill_(0.25)
        folders.append(p.save_pretrained(tmp_path / f"p{seed}"))
    sds = [load_policy(f).state_dict() for f in folders]
    avg = load_policy(average_policies(folders, tmp_path / "avg")).state_dict()
    assert avg.keys() == sds[0].keys()
    for k, v in avg.items():
        torch.testing.assert_close(v, (sds[0][k] + sds[1][k] + sds[2][k]) / 3, rtol=0, atol=1e-6)
    assert torch.equal(avg["net.state_mean"], sds[0]["net.state_mean"])
    assert any(not torch.equal(avg[k], sds[0][k]) for k in avg)  # not a copy of one of them
    one = load_policy(average_policies(folders[1:2], tmp_path / "one")).state_dict()
    assert all(torch.equal(one[k], sds[1][k]) for k in one)
    VLAPolicy(VLAConfig(**{**TINY, "hidden_dim": 16})).save_pretrained(tmp_path / "other")
    with pytest.raises(CheckpointError, match=r"other is not a policy of .*p0's architecture and config"):
        average_policies([folders[0], tmp_path / "other"], tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    with pytest.raises(CheckpointError, match="no config.json"):
        average_policies([folders[0], tmp_path / "missing"], tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    with pytest.raises(CheckpointError, match="at least one"):
        average_policies([], tmp_path / "none")
    from policies.weight_average import main

    assert main([*map(str, folders), "--out", str(tmp_path / "cli")]) == 0  # python -m policies.weight_average
    cli = load_policy(tmp_path / "cli").state_dict()
    assert all(torch.equal(cli[k], avg[k]) for k in cli)


def test_bad_inputs(policy):
    obs = _obs_for(policy)
    with pytest.raises(WmrlError, match="lacks key"):
        policy.act({"image": obs["image"]}, INSTR * 2)
    with pytest.raises(WmrlError, match=r"expected \(B, 32, 32, 3\)"):
        policy.act({**obs, "image": torch.zeros(4, 16, 16, 3, dtype=torch.uint8)}, INSTR * 2)
    with pytest.raises(WmrlError, match="dtype"):
        policy.act({**obs, "image": obs["image"].float()}, INSTR * 2)
    with pytest.raises(WmrlError, match=r"state.*expected \(B, 8\)"):
        policy.act({**obs, "state": torch.zeros(4, 5)}, INSTR * 2)
    with pytest.raises(WmrlError, match="single string"):
        policy.act(obs, "move the square")
    with pytest.raises(WmrlError, match="expected a string"):
        policy.act(obs, [1, 2, 3, 4])
    with pytest.raises(WmrlError, match="one per element"):
        policy.act(obs, INSTR)
    with pytest.raises(WmrlError, match=r"expected chunks of shape \(4, 3, 7\)"):
        policy.evaluate_actions(obs, INSTR * 2, torch.zeros(4, 5, 7))
    with pytest.raises(WmrlError, match="NaN"):
        policy.evaluate_actions(obs, INSTR * 2, torch.full((4, 3, 7), float("nan")))


def test_checkpoint_of_another_architecture(tmp_path):
    VLAPolicy(VLAConfig(**TINY, head="gaussian")).save_pretrained(tmp_path / "g")
    cfg = json.loads((tmp_path / "g" / "config.json").read_text())
    cfg["config"]["head"] = "tokens"  # weights of a Gaussian head under a tokens config
    (tmp_path / "g" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="another architecture"):
        load_policy(tmp_path / "g")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "config.json").write_text(json.dumps({"reward_model_type": "idm", "config": {}}))
    with pytest.raises(CheckpointError, match="not a policy checkpoint"):
        load_policy(tmp_path / "r")
    with pytest.raises(CheckpointError, match="no config.json"):
        load_policy(tmp_path / "missing")


@pytest.mark.parametrize(
    "bad, match",
    [({"chunk_size": 0}, "chunk_size=0"), ({"head": "mlp"}, "head='mlp'"), ({"fusion": "sum"}, "fusion='sum'"),
     ({"image_size": 30}, "image_size=30"), ({"num_bins": 1}, "num_bins=1")],
)
def test_config_errors_name_the_value(bad, match):
    with pytest.raises(ConfigError, match=match):
        VLAConfig(**{**TINY, **bad})


def test_censored_gaussian_is_a_distribution():
    """Density inside (-1, 1) integrates with the boundary masses to 1 (1-D, K=A=1)."""
    head = GaussianHead(4, 1, 1, init_log_std=math.log(0.7))
    feat = torch.randn(1, 4)
    head.mean.bias.data.fill_(0.6)
    xs = torch.linspace(-1 + 1e-5, 1 - 1e-5, 20001)
    feats = feat.expand(len(xs), 4)
    dens = head.evaluate(feats, xs.view(-1, 1, 1))[0].exp()
    inside = torch.trapezoid(dens, xs)
    lo = head.evaluate(feat, torch.full((1, 1, 1), -1.0))[0].exp()
    hi = head.evaluate(feat, torch.full((1, 1, 1), 1.0))[0].exp()
    assert abs(float((inside + lo + hi).detach()) - 1.0) < 1e-3


def test_token_head_probabilities_sum_to_one():
    head = TokenHead(4, 1, 1, num_bins=9)
    feat = torch.randn(1, 4).expand(9, 4)
    lp, ent = head.evaluate(feat, head.centres.view(9, 1, 1))
    assert abs(float(lp.exp().sum()) - 1.0) < 1e-5
    assert float(ent[0]) > 0


def test_instruction_encoder_cache(tmp_path):
    enc = InstructionEncoder()
    e = enc.encode(INSTR + INSTR[:1])
    assert e.shape == (3, 384) and e.dtype == torch.float32
    torch.testing.assert_close(e[0], e[2])
    assert float((e[0] - e[1]).norm()) > 1e-3
    enc.save_cache(tmp_path / "c.safetensors", INSTR)
    enc2 = InstructionEncoder(tmp_path / "c.safetensors")
    torch.testing.assert_close(enc2.encode(INSTR), e[:2])


@pytest.mark.parametrize("head", ["gaussian", "tokens"])
def test_sft_reduces_loss_and_resumes(tmp_path, head):
    traj = toy_trajectories()
    pol_cfg = VLAConfig(**TINY, head=head)
    cfg = TrainPolicyConfig(out=str(tmp_path / "run"), steps=40, batch_size=32, lr=2e-3, log_every=10, ckpt_every=20,
                            val_frac=0.0, augment_shift=1, policy=pol_cfg)
    policy, summary = train_policy(cfg, traj, progress=False)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 40 and rows[-1]["loss"] < 0.8 * rows[0]["loss"]
    assert (tmp_path / "run" / "policy" / "model.safetensors").exists()
    assert (tmp_path / "run" / "plots" / "loss.png").exists()
    # resume: a longer job continues from the step-40 checkpoint
    cfg2 = TrainPolicyConfig(**{**cfg.__dict__, "steps": 50})
    train_policy(cfg2, traj, progress=False)
    steps = [json.loads(x)["step"] for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [10, 20, 30, 40, 50]
    assert isinstance(load_policy(tmp_path / "run" / "policy"), Policy)


def test_random_shift_is_an_edge_padded_crop_of_the_chosen_rows():
    """Against the definition: replicate-pad by ``shift`` and crop back at the drawn offset."""
    images = torch.randint(0, 256, (10, 12, 9, 3), dtype=torch.uint8)
    ids = torch.tensor([7, 0, 7, 3, 9])
    out = random_shift(images, 2, torch.Generator().manual_seed(1), ids)
    gen = torch.Generator().manual_seed(1)  # the same draws, in the same order
    oy, ox = torch.randint(-2, 3, (5, 1), generator=gen), torch.randint(-2, 3, (5, 1), generator=gen)
    padded = torch.nn.functional.pad(images[ids].permute(0, 3, 1, 2).float(), (2, 2, 2, 2), mode="replicate")
    for i in range(5):
        y, x = 2 + int(oy[i]), 2 + int(ox[i])
        ref = padded[i, :, y : y + 12, x : x + 9].permute(1, 2, 0).to(torch.uint8)
        assert torch.equal(out[i], ref)
    assert (oy != 0).any() or (ox != 0).any()  # the check saw a real shift
    # without ids: every row, in order; shift 0: the rows themselves
    assert random_shift(images, 1, torch.Generator()).shape == images.shape
    assert torch.equal(random_shift(images, 0, None, ids), images[ids])


def test_chunk_dataset_over_some_episodes_samples_them_in_place_as_from_their_copy():
    """`ChunkDataset(traj, episodes=E)` holds traj's frames without copying them and draws, for the same ids
    and generator, the same batches as a dataset over `traj.select_episodes(E)`; bad positions are refused."""
    from policies.train import ChunkDataset
    from wmrl.errors import DatasetError

    traj = toy_trajectories(episodes=6)
    eps = np.array([0, 2, 3, 5])
    sub, copy = ChunkDataset(traj, 4, None, True, episodes=eps), ChunkDataset(traj.select_episodes(eps), 4, None, True)
    assert np.shares_memory(sub.images.numpy(), traj.images) and len(sub) == len(copy) == 40
    assert torch.equal(sub.sampled_states(), copy.states)
    code = {s: torch.randn(384) for s in INSTR}
    for ds in (sub, copy):
        ds.texts = torch.stack([code[s] for s in ds.instructions])
    ids = torch.tensor([0, 39, 17, 9, 10, 25])
    a, b = sub.batch(ids, 2, torch.Generator().manual_seed(3)), copy.batch(ids, 2, torch.Generator().manual_seed(3))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for bad in (np.array([6]), np.array([-1, 2]), np.zeros(0, np.int64)):
        with pytest.raises(DatasetError, match="episodes must be"):
            ChunkDataset(traj, 4, episodes=bad)


def test_chunk_dataset_over_every_episode_in_another_order_samples_that_order():
    """Episodes given in another order than the data's are sampled in the order given, even when they cover
    every frame."""
    from policies.train import ChunkDataset

    traj = toy_trajectories(episodes=3)
    order = np.array([2, 0, 1])
    sub, copy = ChunkDataset(traj, 4, episodes=order), ChunkDataset(traj.select_episodes(order), 4)
    assert len(sub) == len(copy) == traj.num_frames and torch.equal(sub.sampled_states(), copy.states)


@pytest.mark.parametrize("max_episodes", [None, 8])
def test_sft_with_validation_trains_as_on_a_copy_of_its_training_episodes(tmp_path, max_episodes):
    """SFT samples its training episodes in place (only the validation ones are copied out): the weights equal
    those of SFT without validation on a copy of the same training episodes."""
    from wmrl.data import split_episode_positions

    traj = toy_trajectories(episodes=10)
    common = dict(steps=6, batch_size=8, log_every=3, ckpt_every=6, augment_shift=1, policy=VLAConfig(**TINY))
    held_in, _ = train_policy(TrainPolicyConfig(out=str(tmp_path / "val"), val_frac=0.25, max_episodes=max_episodes,
                                                **common), traj, progress=False)
    pool = np.arange(max_episodes or 10)
    keep, _ = split_episode_positions(len(pool), 0.25, 0)
    copied, _ = train_policy(TrainPolicyConfig(out=str(tmp_path / "copy"), val_frac=0.0, **common),
                             traj.select_episodes(pool[keep]), progress=False)
    x, y = held_in.state_dict(), copied.state_dict()
    assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
    rows = [json.loads(r) for r in (tmp_path / "val" / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(r["val_loss"]) for r in rows)


def test_sft_is_reproducible(tmp_path):
    traj = toy_trajectories(episodes=4)
    losses = []
    for k in range(2):
        cfg = TrainPolicyConfig(out=str(tmp_path / f"r{k}"), steps=5, batch_size=8, log_every=5, ckpt_every=5,
                                val_frac=0.0, policy=VLAConfig(**TINY))
        _, s = train_policy(cfg, traj, progress=False)
        losses.append(s["loss"])
    assert losses[0] == losses[1]


def test_sft_weight_average_is_the_final_policy_and_resumes(tmp_path):
    from wmrl.errors import CheckpointError

    with pytest.raises(ConfigError, match="ema_decay"):
        TrainPolicyConfig(ema_decay=1.0)
    traj = toy_trajectories(episodes=4)
    cfg = TrainPolicyConfig(out=str(tmp_path / "run"), steps=20, batch_size=8, log_every=10, ckpt_every=10,
                            val_frac=0.0, ema_decay=0.9, policy=VLAConfig(**TINY))
    policy, summary = train_policy(cfg, traj, progress=False)
    assert summary["ema_decay"] == 0.9
    ckpt = tmp_path / "run" / "checkpoints" / "step_000020"
    state = torch.load(ckpt / "trainer.pt", weights_only=False)
    raw = load_policy(ckpt / "policy").state_dict()
    final = load_policy(tmp_path / "run" / "policy").state_dict()
    names = [n for n in state["ema"] if raw[n].numel() > 1]
    for n in names:
        torch.testing.assert_close(final[n], state["ema"][n])
    assert any(float((final[n] - raw[n]).abs().max()) > 1e-6 for n in names)  # the average, not the last step
    # resume continues the average from the checkpoint
    train_policy(TrainPolicyConfig(**{**cfg.__dict__, "steps": 30}), traj, progress=False)
    state30 = torch.load(tmp_path / "run" / "checkpoints" / "step_000030" / "trainer.pt", weights_only=False)
    assert set(state30["ema"]) == set(state["ema"])
    # a run trained without an average cannot silently start one from its last weights
    plain = TrainPolicyConfig(**{**cfg.__dict__, "out": str(tmp_path / "plain"), "ema_decay": 0.0})
    train_policy(plain, traj, progress=False)
    with pytest.raises(CheckpointError, match="ema_decay=0"):
        train_policy(TrainPolicyConfig(**{**plain.__dict__, "steps": 30, "ema_decay": 0.9}), traj, progress=False)


def test_sft_from_init_starts_at_its_weights(tmp_path):
    """init= fine-tunes: training starts from the saved policy's weights and state normalisation."""
    from wmrl.errors import CheckpointError

    traj = toy_trajectories(episodes=4)
    base = TrainPolicyConfig(out=str(tmp_path / "base"), steps=30, batch_size=8, lr=2e-3, log_every=10,
                             ckpt_every=30, val_frac=0.0, policy=VLAConfig(**TINY))
    trained, _ = train_policy(base, traj, progress=False)
    shifted = toy_trajectories(episodes=4, seed=1)
    shifted.states[:] += 5.0  # other data statistics: the init's normalisation must be kept
    tiny_lr = {**base.__dict__, "steps": 1, "lr": 1e-9, "log_every": 1, "ckpt_every": 1}
    ft, _ = train_policy(TrainPolicyConfig(**{**tiny_lr, "out": str(tmp_path / "ft"),
                                              "init": str(tmp_path / "base" / "policy")}), shifted, progress=False)
    fresh, _ = train_policy(TrainPolicyConfig(**{**tiny_lr, "out": str(tmp_path / "fresh")}), shifted, progress=False)
    want = trained.state_dict()
    for name, w in ft.state_dict().items():
        torch.testing.assert_close(w, want[name], atol=1e-5, rtol=0)
    assert not torch.allclose(fresh.net.state_mean, want["net.state_mean"])
    with pytest.raises(CheckpointError, match="not a saved policy folder"):
        train_policy(TrainPolicyConfig(**{**tiny_lr, "out": str(tmp_path / "x"), "init": str(tmp_path)}), traj,
                     progress=False)
    other = VLAConfig(**{**TINY, "hidden_dim": TINY.get("hidden_dim", 128) * 2})
    with pytest.raises(ConfigError, match="has architecture"):
        train_policy(TrainPolicyConfig(**{**tiny_lr, "out": str(tmp_path / "y"), "policy": other,
                                          "init": str(tmp_path / "base" / "policy")}), traj, progress=False)


def test_non_finite_loss_stops_training(tmp_path):
    traj = toy_trajectories(episodes=2)
    traj.actions[:] = np.nan
    cfg = TrainPolicyConfig(out=str(tmp_path / "run"), steps=5, batch_size=8, val_frac=0.0, policy=VLAConfig(**TINY))
    with pytest.raises(NonFiniteError):
        train_policy(cfg, traj, progress=False)


def test_train_config_via_hydra(tmp_path):
    from wmrl.config import load_config, to_dataclass

    for name in ("vla_gaussian", "vla_tokens", "vla_squashed"):
        cfg = to_dataclass(load_config("train_policy", [f"policy={name}", "steps=7"]), TrainPolicyConfig)
        assert cfg.steps == 7 and isinstance(cfg.policy, VLAConfig)
    with pytest.raises(ConfigError):
        to_dataclass(load_config("train_policy", ["+stepz=3"]), TrainPolicyConfig)
    with pytest.raises(ConfigError, match="steps=0"):
        to_dataclass(load_config("train_policy", ["steps=0"]), TrainPolicyConfig)


def test_lerobot_act_adapter(tmp_path):
    from policies.lerobot_adapter import LeRobotAdapterConfig, LeRobotPolicyAdapter

    pol = LeRobotPolicyAdapter(LeRobotAdapterConfig(lerobot_type="act", image_size=SIZE, lerobot_chunk=4))
    obs = make_obs(2)
    out = pol.act(obs, INSTR)
    assert out.actions.shape == (2, 1, 7) and out.actions.abs().max() <= 1
    with pytest.raises(WmrlError, match="log-probability"):
        pol.evaluate_actions(obs, INSTR, out.actions)
    pol.save_pretrained(tmp_path / "lr")
    loaded = load_policy(tmp_path / "lr")
    loaded.reset()
    pol.reset()
    torch.testing.assert_close(loaded.act(obs, INSTR).actions, pol.act(obs, INSTR).actions)


def test_evaluate_policy_in_real_simulator(tmp_path):
    """Expert calibration succeeds; an untrained VLA runs through the same evaluation with CIs and videos."""
    from benchmarks.policy_eval import evaluate_policy, main

    res = evaluate_policy("expert:0.0", "PushCube-v0", episodes_per_task=3, seed=0, num_envs=3)
    task = res["tasks"]["PushCube-v0"]
    assert task["success_rate"] == 1.0 and task["episodes"] == 3 and task["outcomes"] == [1, 1, 1]
    assert 0 < task["ci95"][0] < 1.0 == task["ci95"][1]
    # each episode starts from its own seed, however the episodes are batched
    one_by_one = evaluate_policy("expert:0.0", "PushCube-v0", episodes_per_task=3, seed=0, num_envs=1)
    assert one_by_one["tasks"]["PushCube-v0"]["mean_length"] == task["mean_length"]
    policy = VLAPolicy(VLAConfig(image_size=64, channels=(8, 8, 8), hidden_dim=32, chunk_size=4)).eval()
    res = evaluate_policy(policy, ["PushCube-v0", "LiftCube-v0"], 2, seed=1, num_envs=2, video_dir=tmp_path / "v")
    assert set(res["tasks"]) == {"PushCube-v0", "LiftCube-v0"} and 0 <= res["mean_success"] <= 1
    assert (tmp_path / "v" / "LiftCube-v0.mp4").stat().st_size > 0
    policy.save_pretrained(tmp_path / "p")
    out = tmp_path / "eval.json"
    assert main(["--policy", str(tmp_path / "p"), "--suite", "PushCube-v0", "--episodes-per-task", "2",
                 "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["tasks"]["PushCube-v0"]["episodes"] == 2 and "machine" in saved
    with pytest.raises(WmrlError, match="expert:NOISE"):
        evaluate_policy("expert:abc", "PushCube-v0", 1)
    with pytest.raises(WmrlError, match="episodes_per_task=0"):
        evaluate_policy("random", "PushCube-v0", 0)


def test_policy_compare_pairs_arms_episode_by_episode(tmp_path):
    """Arms play the same held-out starts; the paired difference is per pair and per episode, a re-run
    reads the outcomes back from the cache, and bad arms are one-line errors before any play."""
    from benchmarks.policy_compare import main, paired_difference

    ref = [{"A": [1, 0, 1, 1], "B": [0, 0, 1, 0]}, {"A": [1, 1, 1, 1], "B": [0, 0, 0, 0]}]
    arm = [{"A": [1, 1, 1, 1], "B": [0, 0, 1, 0]}, {"A": [1, 1, 0, 1], "B": [0, 0, 0, 0]}]
    d = paired_difference(arm, ref)
    assert d["diff_per_pair"] == [0.125, -0.125] and d["mean_diff"] == 0.0
    assert d["se_pairs"] == pytest.approx(0.125) and d["se_episodes"] == pytest.approx(np.std([1, -1] + [0] * 14, ddof=1) / 4)
    out = tmp_path / "c.json"
    args = ["--arm", "good", "expert:0.0", "--arm", "bad", "random", "--episodes-per-task", "2", "--num-envs", "2",
            "--work", str(tmp_path / "w"), "--out", str(out)]
    assert main(args) == 0
    res = json.loads(out.read_text())
    assert res["arms"]["good"]["success"] == 1.0 and res["reference"] == "good"
    assert len(res["arms"]["bad"]["outcomes"][0]["PushCube-v0"]) == 2
    assert res["paired"]["bad"]["mean_diff"] == res["arms"]["bad"]["success"] - 1.0
    cached = sorted((tmp_path / "w").glob("*.json"))
    assert len(cached) == 2
    stamp = [c.stat().st_mtime_ns for c in cached]
    assert main(args) == 0 and [c.stat().st_mtime_ns for c in cached] == stamp  # nothing played again
    with pytest.raises(WmrlError, match=r"the arms hold good: 1, bad: 2 policies"):
        main(["--arm", "good", "expert:0.0", "--arm", "bad", "random", "random", "--out", str(out)])
    with pytest.raises(WmrlError, match=r"policy '.*nowhere' is not a policy folder"):
        main(["--arm", "x", str(tmp_path / "nowhere"), "--out", str(out)])
    with pytest.raises(WmrlError, match=r"arm 'sft' \(--reference / --pair\) is not an arm; arms: good"):
        main(["--arm", "good", "expert:0.0", "--reference", "sft", "--out", str(out)])
    with pytest.raises(WmrlError, match=r"arm 'ugly' \(--reference / --pair\) is not an arm; arms: good, bad"):
        main([*args, "--pair", "bad", "ugly"])
    assert main([*args, "--pair", "good", "bad"]) == 0  # an extra pairing, the other way round
    (extra,) = json.loads(out.read_text())["pairs"]
    assert extra["arm"] == "good" and extra["vs"] == "bad" and extra["mean_diff"] == -res["paired"]["bad"]["mean_diff"]

    # an arm read from an earlier result as it was played pairs with new policies as if played here
    again = tmp_path / "again.json"
    before = [c.stat().st_mtime_ns for c in sorted((tmp_path / "w").glob("*.json"))]
    assert main(["--arm", "good", "expert:0.0", "--arm-from", "earlier_bad", str(out), "bad", "--episodes-per-task", "2",
                 "--num-envs", "2", "--work", str(tmp_path / "w"), "--out", str(again)]) == 0
    res2 = json.loads(again.read_text())
    assert res2["arms"]["earlier_bad"]["outcomes"] == res["arms"]["bad"]["outcomes"]
    assert res2["arms"]["earlier_bad"]["policies"] == [f"{out}#bad[0]"]
    assert res2["paired"]["earlier_bad"]["mean_diff"] == res["paired"]["bad"]["mean_diff"]
    assert [c.stat().st_mtime_ns for c in sorted((tmp_path / "w").glob("*.json"))] == before
    with pytest.raises(WmrlError, match=r"--arm-from .*c.json: played another protocol \(episodes_per_task 2, here 3\)"):
        main(["--arm-from", "b", str(out), "bad", "--episodes-per-task", "3", "--num-envs", "2", "--out", str(again)])
    with pytest.raises(WmrlError, match=r"--arm-from .*c.json ugly: no such arm; it holds good, bad"):
        main(["--arm-from", "b", str(out), "ugly", "--episodes-per-task", "2", "--num-envs", "2", "--out", str(again)])
    (tmp_path / "junk.json").write_text("{")
    with pytest.raises(WmrlError, match=r"--arm-from .*junk.json: not a readable benchmarks.policy_compare result"):
        main(["--arm-from", "b", str(tmp_path / "junk.json"), "bad", "--out", str(again)])


def test_run_report_sets_each_phase_against_sft_episode_by_episode():
    """The main job's report reads each phase's lift over SFT pair by pair on the shared evaluation
    starts, with an interval; phases without kept episodes or with other episodes are left out."""
    from benchmarks._stats import paired_outcome_difference
    from imagination.report import paired_lifts, results_table

    d = paired_outcome_difference({"A": "1111", "B": "0010"}, {"A": [1, 0, 1, 1], "B": "0010"})
    per_episode = np.array([0, 1, 0, 0, 0, 0, 0, 0], float)
    assert d["diff"] == 0.125 and d["episodes"] == 8
    assert d["se"] == pytest.approx(per_episode.std(ddof=1) / np.sqrt(8))
    assert d["ci95"] == pytest.approx([0.125 - 1.959964 * d["se"], 0.125 + 1.959964 * d["se"]])
    with pytest.raises(ValueError, match="same tasks"):
        paired_outcome_difference({"A": "1"}, {"B": "1"})
    with pytest.raises(ValueError, match="task A: 2 episodes against 1"):
        paired_outcome_difference({"A": "11"}, {"A": "1"})
    sft = {"success": 0.5, "outcomes": {"A": "0101"}, "ci95": [0.2, 0.8]}
    lifts = paired_lifts(sft, {
        "round_0": {"outcomes": {"A": "1101"}},
        "round_1": {"success": 0.4},  # evaluated before outcomes were kept
        "real_rl": {"outcomes": {"A": "11"}},  # a resumed run that evaluated other episodes
    })
    assert list(lifts) == ["round_0"] and lifts["round_0"]["diff"] == 0.25
    res = {"sft_success": 0.5, "imagination_rl_success": 0.75, "coevolution_success_by_round": [0.4],
           "real_env_steps_by_round": [0.0, 96.0], "real_env_steps_used": 96.0, "wall_time_s": 1.0,
           "ci95": {"sft": [0.2, 0.8]}, "lift_vs_sft": lifts, "rl_updates_by_round": [3, None],
           "rl_iterations_by_round": [16, 16]}
    table = results_table(res)
    assert "| SFT (behaviour cloning) | 0.500 [0.200, 0.800] |  | 0 |  |" in table
    lo, hi = lifts["round_0"]["ci95"]
    assert f"| RL in imagination (round 0) | 0.750 | +0.250 [{lo:+.3f}, {hi:+.3f}] | 0 | 3 / 16 |" in table
    assert "| co-evolution round 1 | 0.400 |  | 96 |  |" in table  # a round made before updates were counted
    del res["rl_updates_by_round"]  # a whole run made before: the column stays empty
    assert "| co-evolution round 1 | 0.400 |  | 96 |  |" in results_table(res)
    si = results_table({**res, "imagination_phase": "self_imitation", "rl_iterations_by_round": [None, None]})
    assert f"| self-imitation in the state model's world (round 0) | 0.750 | +0.250 [{lo:+.3f}, {hi:+.3f}] | 0 |  |" in si
    assert "flatters" not in si  # no round recorded its world's check
    check = {"imagined": 0.6, "real": 0.5, "overrating": 0.1, "false_successes": 12.0, "missed_successes": 2.0}
    si = results_table({**res, "imagination_phase": "self_imitation", "world_vs_real_by_round": [None, check]})
    assert "round 1: 0.600 / 0.500 (+0.100; 12 / 2)" in si and "round 0:" not in si
    assert "precision gate" not in si  # no gate
    gate = results_table({**res, "gated_tasks_by_round": [[], ["PushCube-v0", "StackCube-v0"]],
                          "gate_real_env_steps_by_round": [900.0, 1200.0]})
    assert "round 0: none (900 real steps); round 1: PushCube-v0, StackCube-v0 (1200 real steps)." in gate
    from benchmarks.imagination_lift import mean_paired_lifts

    seeds = [{"round_0": {"diff": 0.1, "se": 0.03}, "real_rl": {"diff": 0.0, "se": 0.02}},
             {"round_0": {"diff": -0.05, "se": 0.04}}]  # a seed without the real-RL phase
    pooled = mean_paired_lifts(seeds)
    assert list(pooled) == ["round_0"] and pooled["round_0"]["diff"] == pytest.approx(0.025)
    assert pooled["round_0"]["se"] == pytest.approx(0.025) and pooled["round_0"]["diff_per_seed"] == [0.1, -0.05]
    from benchmarks.imagination_lift import _paired_ci

    # "imagination RL >= real RL" reads real RL's lift over round 0 the other way round
    assert _paired_ci({"ci95": [-0.01, 0.03]}, negate=True) == {"ci95_paired": [-0.03, 0.01]}
    assert _paired_ci(None) == {}


def test_imagination_lift_reads_each_ablation_against_sft_and_the_full_methods_round_0(tmp_path):
    from benchmarks.imagination_lift import ablation_lift

    def marker(folder, name, body):
        (folder / "stages").mkdir(parents=True, exist_ok=True)
        (folder / "stages" / f"{name}.json").write_text(json.dumps(body))

    for s, (sft, full, abl) in enumerate([("0011", "0111", "0001"), ("1100", "1100", "1000")]):
        seed = tmp_path / f"seed_{s}"
        marker(seed, "eval_sft", {"outcomes": {"t": sft}})  # the SFT stage's marker is its evaluation
        marker(seed, "round_0", {"eval": {"outcomes": {"t": full}}})
        marker(seed / "ablation_x", "round_0", {"eval": {"outcomes": {"t": abl}}})
    vs_sft = ablation_lift(tmp_path, [0, 1], "x")
    vs_full = ablation_lift(tmp_path, [0, 1], "x", reference="round_0")
    assert vs_sft["diff_per_seed"] == [-0.25, -0.25] and vs_sft["diff"] == pytest.approx(-0.25)
    assert vs_full["diff_per_seed"] == [-0.5, -0.25] and vs_full["diff"] == pytest.approx(-0.375)


def test_policy_sft_dataset_rounds(tmp_path):
    """The SFT benchmark's dataset is built in fixed collection rounds; a dataset that is not a
    prefix of those rounds is refused with a one-line error, and the first N demos per task are picked."""
    from benchmarks.policy_sft import ensure_dataset, first_per_task

    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "info.json").write_text(json.dumps({"total_episodes": 7}))
    with pytest.raises(WmrlError, match=r"holds 7 episodes; expected one of \[0, 600, 1320\]"):
        ensure_dataset(tmp_path, [(600, 1), (720, 101)], 0)
    ensure_dataset(tmp_path, [(3, 1), (4, 2)], 0)  # complete: nothing to collect
    traj = toy_trajectories(episodes=6)
    sub = first_per_task(traj, 2)
    assert sub.num_episodes == 2
    with pytest.raises(WmrlError, match="fewer than 9 episodes"):
        first_per_task(traj, 9)
