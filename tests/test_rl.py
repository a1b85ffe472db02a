"""GRPO and PPO learn on a small real task honouring the wmrl env contract; resume, errors.

``ReachEnv`` is a real (tiny) batched 2-D reaching task with rendered frames and chunk stepping,
and ``TinyGaussianPolicy`` a real tanh-Gaussian MLP policy with the ``policies.Policy`` surface:
the tests check that the trainers raise its success rate, not that they call things.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from imagination.grpo import GRPOConfig, train_grpo, trajectory_scores
from imagination.ppo import PPOConfig, ValueNet, train_ppo
from imagination.rollout_buffer import collect_first_episodes
from wmrl.errors import ConfigError, NonFiniteError, WmrlError
from wmrl.runs import RunDir


class ReachEnv(gym.vector.VectorEnv):
    """N point agents reach goals in [-1, 1]^2; steps action chunks ``(N, K, 7)`` natively.

    Task: move the point (dims 0-1 of each action, 0.15 per step) within 0.15 of the goal.
    Randomisation: start in [-0.4, 0.4]^2, goal 0.25-0.55 away, drawn from the sub-env's seed.
    Success: distance < 0.15 (terminates, reward 1). Truncation after ``max_chunks`` chunks.
    """

    def __init__(
        self,
        num_envs: int,
        chunk_size: int = 2,
        max_chunks: int = 6,
        autoreset: str = "next_step",
        nan_reward_after: int | None = None,
    ):
        self.num_envs, self.chunk_size, self.max_chunks = num_envs, chunk_size, max_chunks
        self.single_observation_space = gym.spaces.Dict(
            {
                "image": gym.spaces.Box(0, 255, (32, 32, 3), np.uint8),
                "state": gym.spaces.Box(-np.inf, np.inf, (6,), np.float32),
            }
        )
        self.single_action_space = gym.spaces.Box(-1, 1, (7,), np.float32)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.spaces.Box(-1, 1, (num_envs, chunk_size, 7), np.float32)
        mode = (
            gym.vector.AutoresetMode.NEXT_STEP
            if autoreset == "next_step"
            else gym.vector.AutoresetMode.SAME_STEP
        )
        self.metadata = {"autoreset_mode": mode}
        self.pos = np.zeros((num_envs, 2), np.float32)
        self.goal = np.zeros((num_envs, 2), np.float32)
        self.t = np.zeros(num_envs, int)
        self.prev_done = np.zeros(num_envs, bool)
        self.rngs = [np.random.default_rng(i) for i in range(num_envs)]
        self.instructions = ["reach the green dot"] * num_envs
        self.nan_reward_after, self.steps = nan_reward_after, 0

    def _reset_one(self, i: int) -> None:
        r = self.rngs[i]
        self.pos[i] = r.uniform(-0.4, 0.4, 2)
        ang, rad = r.uniform(0, 2 * math.pi), r.uniform(0.25, 0.55)
        self.goal[i] = np.clip(self.pos[i] + rad * np.array([math.cos(ang), math.sin(ang)]), -1, 1)
        self.t[i] = 0

    def _obs(self) -> dict:
        img = np.zeros((self.num_envs, 32, 32, 3), np.uint8)
        for i in range(self.num_envs):
            for p, c in ((self.goal[i], 1), (self.pos[i], 0)):
                x, y = np.clip(((p + 1) * 15.5).astype(int), 0, 31)
                img[i, max(0, y - 1) : y + 2, max(0, x - 1) : x + 2, c] = 255
        state = np.concatenate([self.pos, self.goal, self.goal - self.pos], 1).astype(np.float32)
        return {"image": img, "state": state}

    def _info(self, success: np.ndarray) -> dict:
        return {"success": success, "instruction": list(self.instructions)}

    def reset(self, *, seed=None, options=None):
        mask = (
            np.ones(self.num_envs, bool)
            if not options or options.get("reset_mask") is None
            else options["reset_mask"]
        )
        seeds = (
            [None] * self.num_envs
            if seed is None
            else ([seed + i for i in range(self.num_envs)] if isinstance(seed, int) else list(seed))
        )
        for i in np.nonzero(mask)[0]:
            if seeds[i] is not None:
                self.rngs[i] = np.random.default_rng(seeds[i])
            self._reset_one(i)
        self.prev_done[mask] = False
        return self._obs(), self._info(np.zeros(self.num_envs, bool))

    def step(self, actions):
        a = np.asarray(actions, np.float32)
        if a.shape != (self.num_envs, self.chunk_size, 7):
            raise WmrlError(f"action has shape {a.shape}; expected ({self.num_envs}, {self.chunk_size}, 7)")
        self.steps += 1
        reward = np.zeros(self.num_envs, np.float32)
        term = np.zeros(self.num_envs, bool)
        trunc = np.zeros(self.num_envs, bool)
        success = np.zeros(self.num_envs, bool)
        reset_now = self.prev_done.copy()
        final = None
        for i in range(self.num_envs):
            if reset_now[i]:
                self._reset_one(i)
                continue
            for k in range(self.chunk_size):
                self.pos[i] = np.clip(self.pos[i] + 0.15 * np.clip(a[i, k, :2], -1, 1), -1, 1)
                if np.linalg.norm(self.pos[i] - self.goal[i]) < 0.15:
                    success[i] = term[i] = True
                    reward[i] = 1.0
                    break
            self.t[i] += 1
            trunc[i] = not term[i] and self.t[i] >= self.max_chunks
        if self.nan_reward_after is not None and self.steps > self.nan_reward_after:
            reward[:] = np.nan
        done = term | trunc
        info = self._info(success)
        if self.metadata["autoreset_mode"] == gym.vector.AutoresetMode.SAME_STEP:
            if done.any():
                final = self._obs()
                for i in np.nonzero(done)[0]:
                    self._reset_one(i)
                info["final_obs"] = final
            self.prev_done[:] = False
        else:
            self.prev_done = done
        return self._obs(), reward, term, trunc, info


class TinyGaussianPolicy(nn.Module):
    """tanh-Gaussian MLP policy on the state with the ``policies.Policy`` surface (chunks (B, K, 7))."""

    def __init__(
        self,
        state_dim: int = 6,
        chunk_size: int = 2,
        action_dim: int = 7,
        image_size: int = 32,
        hidden: int = 64,
        log_std: float = -0.3,
        seed: int = 0,
        value_head: bool = False,
    ):
        super().__init__()
        torch.manual_seed(seed)
        self.chunk_size, self.action_dim, self.image_size = chunk_size, action_dim, image_size
        self.net = nn.Sequential(
            nn.Linear(state_dim, hidden), nn.Tanh(), nn.Linear(hidden, chunk_size * action_dim)
        )
        nn.init.zeros_(self.net[2].bias)
        self.net[2].weight.data.mul_(0.1)
        self.log_std = nn.Parameter(torch.full((chunk_size * action_dim,), log_std))
        self.value = (
            nn.Sequential(nn.Linear(state_dim, hidden), nn.Tanh(), nn.Linear(hidden, 1))
            if value_head
            else None
        )

    def _logp_dims(self, mu, std, a):
        a = a.clamp(-0.999999, 0.999999)
        u = torch.atanh(a)
        return torch.distributions.Normal(mu, std).log_prob(u) - torch.log1p(-a.pow(2) + 1e-6)

    def _logp(self, mu, std, a):
        return self._logp_dims(mu, std, a).sum(-1)

    def _forward(self, obs):
        s = torch.as_tensor(obs["state"]).float()
        mu = self.net(s)
        std = self.log_std.exp().expand_as(mu)
        v = self.value(s).squeeze(-1) if self.value is not None else None
        ent = torch.distributions.Normal(mu, std).entropy().sum(-1)
        return mu, std, v, ent

    def act(self, obs, instructions, deterministic=False):
        from types import SimpleNamespace

        mu, std, v, ent = self._forward(obs)
        u = mu if deterministic else mu + std * torch.randn_like(mu)
        a = torch.tanh(u)
        return SimpleNamespace(
            actions=a.reshape(-1, self.chunk_size, self.action_dim),
            log_prob=self._logp(mu, std, a),
            entropy=ent,
            value=v,
        )

    def evaluate_actions(self, obs, instructions, actions):
        from types import SimpleNamespace

        mu, std, v, ent = self._forward(obs)
        lp = self._logp_dims(mu, std, actions.reshape(actions.shape[0], -1))
        return SimpleNamespace(
            log_prob=lp.sum(-1),
            entropy=ent,
            value=v,
            log_prob_dims=lp.view(-1, self.chunk_size, self.action_dim),
            dim_mask=torch.ones(self.action_dim),
        )


def success_rate(policy, episodes: int = 128, seed: int = 10_000) -> float:
    env = ReachEnv(episodes)
    batch = collect_first_episodes(env, policy, env.max_chunks, seeds=[seed + i for i in range(episodes)])
    return float((batch.success & batch.valid).any(0).float().mean())


@pytest.mark.parametrize("ratio", ["chunk", "dim"])
def test_grpo_raises_success(ratio):
    torch.manual_seed(0)
    policy = TinyGaussianPolicy()
    before = success_rate(policy)
    cfg = GRPOConfig(
        iterations=25, group_size=8, max_chunks=6, update_epochs=2, minibatch_size=128, lr=3e-3, ratio=ratio
    )
    hist = train_grpo(ReachEnv(64), policy, cfg, progress=False)
    after = success_rate(policy)
    assert len(hist) == 25 and all(0.0 <= h["kept_frac"] <= 1.0 for h in hist)
    assert after > before + 0.25, (before, after)


@pytest.mark.parametrize(
    "autoreset,critic,ratio",
    [("next_step", "value_head", "chunk"), ("same_step", "value_net", "chunk"), ("next_step", "value_head", "dim")],
)
def test_ppo_raises_success(autoreset, critic, ratio):
    """PPO with the policy's value head (NEXT_STEP autoreset) and with a separate conv critic
    on the rendered frames (SAME_STEP autoreset, bootstrapping truncations from final_obs)."""
    policy = TinyGaussianPolicy(seed=1, value_head=critic == "value_head")
    before = success_rate(policy)
    cfg = PPOConfig(
        iterations=20, num_steps=6, update_epochs=4, minibatch_size=96, lr=3e-3, critic_lr=3e-3, ratio=ratio
    )
    value_net = ValueNet(6, width=8) if critic == "value_net" else None
    train_ppo(ReachEnv(32, autoreset=autoreset), policy, cfg, critic=value_net, progress=False)
    after = success_rate(policy)
    assert after > before + 0.25, (before, after)


def test_per_dim_surrogate_matches_chunk_gradient_and_clips_per_dim():
    """At ratio 1 the per-dim loss is the chunk loss over the active-dim count (same gradient
    direction); away from 1 it clips only the dims that drifted, where the chunk ratio clips all."""
    from imagination.trainer_utils import clipped_surrogate

    torch.manual_seed(0)
    adv = torch.tensor([1.0, -0.5])
    mask = torch.tensor([1.0, 1.0, 0.0])  # dim 2 inactive: zero log-prob terms, left out of the mean
    lp = torch.randn(2, 4, 3) * mask
    lp.requires_grad_(True)
    old = lp.detach().clone()
    pg_dim, _ = clipped_surrogate(lp - old, adv, 0.2, mask)
    (g_dim,) = torch.autograd.grad(pg_dim.sum(), lp)
    pg_chunk, _ = clipped_surrogate(lp.flatten(1).sum(-1) - old.flatten(1).sum(-1), adv, 0.2, None)
    (g_chunk,) = torch.autograd.grad(pg_chunk.sum(), lp)
    torch.testing.assert_close(g_dim * 8, g_chunk * mask)  # 8 active dims per chunk
    drift = torch.zeros(2, 4, 3)
    drift[:, 0, 0] = 0.5  # one dim's ratio e^0.5 = 1.65, beyond 1 + 0.2
    _, frac_dim = clipped_surrogate(drift, adv, 0.2, mask)
    _, frac_chunk = clipped_surrogate(drift.flatten(1).sum(-1), adv, 0.2, None)
    assert float(frac_dim) == pytest.approx(1 / 8) and float(frac_chunk) == 1.0


def test_group_shared_starts_and_masking():
    env = ReachEnv(8)
    policy = TinyGaussianPolicy()
    batch = collect_first_episodes(env, policy, 6, seeds=[5] * 4 + [6] * 4)
    s0 = batch.obs["state"][0]
    assert torch.equal(s0[0], s0[3]) and not torch.equal(s0[0], s0[4])
    # steps after the first episode end are invalid, valid steps are a prefix
    v = batch.valid.int()
    assert (v[1:] <= v[:-1]).all()
    scores, ok, lengths = trajectory_scores(batch, "success", "mask")
    assert ok.all() and (lengths >= 1).all() and (lengths <= 6).all()
    batch.gate_ok[0, 2] = False  # an unreliable imagined step masks that trajectory out
    _, ok, _ = trajectory_scores(batch, "success", "mask")
    assert not ok[2] and ok.sum() == 7
    _, ok, _ = trajectory_scores(batch, "success", "off")
    assert ok.all()


def test_progress_score_ranks_failures_by_their_peak_and_never_above_a_success():
    batch = collect_first_episodes(ReachEnv(4), TinyGaussianPolicy(), 3, seeds=[1] * 4)
    assert batch.valid.shape == (3, 4)
    batch.valid[:] = True
    batch.success[:] = False
    batch.executed[:] = 4.0
    # chunk sums of a staged dense reward (4 single steps each)
    batch.rewards[:] = torch.tensor(
        [[0.4, 2.8, 2.8, 0.8], [2.4, 2.8, 2.0, 0.8], [1.2, 2.8, 2.8, 3.6]]
    )
    batch.success[1, 1] = True  # sub-env 1 succeeds in its second chunk, which ends after 2 steps
    batch.executed[1, 1] = 2.0
    batch.rewards[1, 1] = 1.6  # 0.6 + 1.0
    batch.valid[2, 1] = False  # ...and its third chunk is not part of the episode
    batch.valid[2, 3] = False  # sub-env 3's best chunk lies after its episode
    scores, ok, _ = trajectory_scores(batch, "progress", "off")
    torch.testing.assert_close(scores, torch.tensor([0.6, 1.0, 0.7, 0.2]))
    returns, _, _ = trajectory_scores(batch, "return", "off")
    assert returns[2] > returns[1]  # a dense return ranks a long failure above the quick success
    assert ok.all()
    batch.rewards[:] = batch.success.float()  # the sparse reward: progress is success
    sparse, _, _ = trajectory_scores(batch, "progress", "off")
    torch.testing.assert_close(sparse, trajectory_scores(batch, "success", "off")[0])
    with pytest.raises(ConfigError, match="score='peak'"):
        GRPOConfig(score="peak")


def test_grpo_resume_equals_uninterrupted(tmp_path):
    cfg4 = GRPOConfig(
        iterations=4, group_size=4, max_chunks=4, minibatch_size=32, lr=3e-3, checkpoint_every=2
    )
    p_full = TinyGaussianPolicy(seed=3)
    train_grpo(ReachEnv(16), p_full, cfg4, run=RunDir(tmp_path / "full"), progress=False)
    p_int = TinyGaussianPolicy(seed=3)
    cfg2 = GRPOConfig(**{**cfg4.__dict__, "iterations": 2})
    train_grpo(ReachEnv(16), p_int, cfg2, run=RunDir(tmp_path / "int"), progress=False)
    p_res = TinyGaussianPolicy(seed=99)  # a fresh process: weights come from the checkpoint
    hist = train_grpo(ReachEnv(16), p_res, cfg4, run=RunDir(tmp_path / "int"), progress=False)
    assert len(hist) == 4 and RunDir(tmp_path / "int").latest_checkpoint().name == "step_000004"
    for a, b in zip(p_full.parameters(), p_res.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_grpo_budget_stop_resumes_where_it_stopped(tmp_path):
    """A run stopped by its env-step budget between periodic checkpoints is checkpointed there, so
    resuming it with a larger budget equals one run at that budget (a learning curve over budgets)."""
    cfg = GRPOConfig(iterations=50, group_size=4, max_chunks=4, minibatch_size=32, lr=3e-3, checkpoint_every=4)
    p_full = TinyGaussianPolicy(seed=3)
    full = train_grpo(ReachEnv(16), p_full, cfg, run=RunDir(tmp_path / "full"), progress=False, max_env_steps=1e9)
    assert len(full) == 50
    steps = [h["env_steps"] for h in full]
    small, big = sum(steps[:3]), sum(steps[:7])  # stops after 3, then after 7: neither a multiple of 4
    part = RunDir(tmp_path / "part")
    hist = train_grpo(ReachEnv(16), TinyGaussianPolicy(seed=3), cfg, run=part, progress=False, max_env_steps=small)
    assert len(hist) == 3 and part.latest_checkpoint().name == "step_000003"
    p_res = TinyGaussianPolicy(seed=99)  # a fresh process: weights come from the checkpoint
    hist = train_grpo(ReachEnv(16), p_res, cfg, run=part, progress=False, max_env_steps=big)
    assert len(hist) == 7 and part.latest_checkpoint().name == "step_000007"
    p_ref = TinyGaussianPolicy(seed=3)
    train_grpo(ReachEnv(16), p_ref, cfg, run=RunDir(tmp_path / "ref"), progress=False, max_env_steps=big)
    for a, b in zip(p_ref.parameters(), p_res.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    assert not any(torch.equal(a, b) for a, b in zip(p_ref.parameters(), p_full.parameters(), strict=True))


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_a_budgeted_run_shows_the_budget_spent_not_its_open_ended_iterations(tmp_path, capsys, algo):
    """Under an env-step budget the pipeline sets a million iterations; the progress bar counts the
    env steps spent of the budget instead (a resumed run's bar starts from those already spent)."""
    desc = algo.upper()

    def train(budget: int) -> list[dict[str, float]]:
        if algo == "grpo":
            cfg = GRPOConfig(iterations=1_000_000, group_size=4, max_chunks=4, checkpoint_every=100)
            return train_grpo(ReachEnv(16), TinyGaussianPolicy(seed=3), cfg, run=run, max_env_steps=budget)
        cfg = PPOConfig(iterations=1_000_000, num_steps=4, checkpoint_every=100)
        return train_ppo(ReachEnv(16), TinyGaussianPolicy(seed=3), cfg, run=run, max_env_steps=budget)

    run = RunDir(tmp_path / "run")
    for budget in (300, 700):
        hist = train(budget)
        spent = int(sum(h["env_steps"] for h in hist))
        last = capsys.readouterr().err.strip().split("\r")[-1]
        assert 0 < spent <= budget and len(hist) >= 2, (spent, len(hist))
        assert f"{desc} (env steps of the budget)" in last and f"{spent}/{budget} " in last, last
        assert "1000000" not in last


def test_nan_reward_stops_and_keeps_last_checkpoint(tmp_path):
    run = RunDir(tmp_path / "run")
    cfg = GRPOConfig(iterations=10, group_size=4, max_chunks=3, checkpoint_every=1)
    with pytest.raises(NonFiniteError, match="reward"):
        train_grpo(
            ReachEnv(8, max_chunks=3, nan_reward_after=7), TinyGaussianPolicy(), cfg, run=run, progress=False
        )
    ckpt = run.latest_checkpoint()
    assert ckpt is not None and (ckpt / "modules.safetensors").exists() and RunDir.step_of(ckpt) >= 1


def test_bad_inputs_are_one_line_errors():
    with pytest.raises(WmrlError, match="action_dim=6"):
        train_grpo(ReachEnv(8), TinyGaussianPolicy(action_dim=6), GRPOConfig(group_size=4), progress=False)
    with pytest.raises(WmrlError, match="chunk_size=3"):
        train_ppo(ReachEnv(8), TinyGaussianPolicy(chunk_size=3), PPOConfig(), progress=False)
    with pytest.raises(ConfigError, match="multiple of group_size"):
        train_grpo(ReachEnv(6), TinyGaussianPolicy(), GRPOConfig(group_size=4), progress=False)
    with pytest.raises(ConfigError, match="group_size=1"):
        GRPOConfig(group_size=1)
    with pytest.raises(ConfigError, match="score='reward'"):
        GRPOConfig(score="reward")
    with pytest.raises(ConfigError, match="ratio='token'"):
        GRPOConfig(ratio="token")

    class NoDimsPolicy(TinyGaussianPolicy):
        def evaluate_actions(self, obs, instructions, actions):
            ev = super().evaluate_actions(obs, instructions, actions)
            ev.log_prob_dims = None
            return ev

    with pytest.raises(ConfigError, match="rl.ratio='dim' needs per-dimension log-probs, which NoDimsPolicy"):
        train_grpo(ReachEnv(16), NoDimsPolicy(), GRPOConfig(iterations=5, group_size=4, ratio="dim"), progress=False)
    with pytest.raises(ConfigError, match="gamma=1.5"):
        PPOConfig(gamma=1.5)


@pytest.fixture(autouse=True)
def _one_thread():
    """These tiny models run faster on one thread than fighting for two busy cores."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_grpo_and_ppo_run_on_the_real_builtin_env(tmp_path):
    """Both trainers run unchanged on the real MuJoCo suite behind ActionChunkWrapper (the baseline)."""
    import envs
    from envs.wrappers import ActionChunkWrapper

    env = ActionChunkWrapper(
        envs.make_vec(
            ["PushCube-v0"] * 4 + ["LiftCube-v0"] * 4, 8, image_size=32, autoreset_mode="same_step", seed=0
        ),
        4,
    )
    policy = TinyGaussianPolicy(state_dim=8, chunk_size=4, image_size=32)
    batch = collect_first_episodes(env, policy, 2, seeds=[7] * 4 + [8] * 4)
    s0 = batch.obs["state"][0]
    assert torch.equal(batch.obs["image"][0, 0], batch.obs["image"][0, 3])  # a group shares the real start
    assert batch.executed.sum() == 2 * 8 * 4 and s0.shape == (8, 8)
    hist = train_grpo(
        env, policy, GRPOConfig(iterations=1, group_size=4, max_chunks=2), progress=False, max_env_steps=10
    )
    assert len(hist) == 1 and hist[0]["env_steps"] == 64
    hist = train_ppo(
        env,
        TinyGaussianPolicy(state_dim=8, chunk_size=4, image_size=32, value_head=True),
        PPOConfig(iterations=1, num_steps=2, minibatch_size=16),
        progress=False,
    )
    assert hist[0]["env_steps"] == 2 * 8 * 4
    env.close()


def test_grpo_collection_with_frames_at_chunk_ends_only_records_the_same_batch():
    """The real-RL baseline's GRPO collection skips the frames inside a chunk (``frames="chunk_end"``):
    every recorded observation, reward and mask is the one drawing every frame gives."""
    import envs
    from envs.wrappers import ActionChunkWrapper

    batches = []
    for frames in ("all", "chunk_end"):
        env = ActionChunkWrapper(envs.make_vec(["PushCube-v0", "LiftCube-v0"] * 2, 4, image_size=32,
                                               autoreset_mode="same_step", max_episode_steps=10, seed=0), 4, frames)
        torch.manual_seed(0)
        batches.append(collect_first_episodes(env, TinyGaussianPolicy(state_dim=8, chunk_size=4, image_size=32), 4,
                                              seeds=[3, 3, 4, 4]))
        env.close()
    a, b = batches
    for k in a.obs:
        assert torch.equal(a.obs[k], b.obs[k])
    for f in ("actions", "rewards", "terminated", "truncated", "success", "valid", "executed"):
        assert torch.equal(getattr(a, f), getattr(b, f)), f
    assert a.valid.sum() > 4  # more than one chunk step was recorded


@pytest.mark.parametrize("head", ["gaussian", "tokens"])
def test_ignored_action_dims_are_not_sampled_or_scored(head):
    """Dims the env ignores (its metadata["action_dims_used"]) carry no RL noise: the trainers
    make them deterministic and leave them out of log-probs and entropies."""
    from imagination.rollout_buffer import match_policy_to_env_dims
    from policies.heads import HEADS

    class _Env:
        metadata = {"action_dims_used": [0, 1, 2, 6]}

    class _Pol(nn.Module):
        action_dim = 7

        def __init__(self):
            super().__init__()
            self.head = HEADS[head](8, 4, 7)

    pol = _Pol()
    torch.manual_seed(0)
    feat = torch.randn(5, 8)
    _, _, ent_all = pol.head.sample(feat)
    assert match_policy_to_env_dims(_Env(), pol) == [0, 1, 2, 6]
    a, lp, ent = pol.head.sample(feat)
    mode, _, _ = pol.head.sample(feat, deterministic=True)
    assert torch.allclose(a[..., 3:6], mode[..., 3:6])  # no noise on ignored dims
    assert not torch.allclose(a[..., :3], mode[..., :3])  # noise on the used ones
    moved = a.clone()
    moved[..., 3:6] = -mode[..., 3:6] + 0.5
    assert torch.allclose(pol.head.evaluate(feat, moved)[0], lp)  # ignored dims do not score
    assert torch.allclose(pol.head.evaluate(feat, a)[0], lp)
    assert (ent < ent_all).all()
    match_policy_to_env_dims(type("E", (), {"metadata": {}})(), pol)  # an env using every dim
    assert pol.head.dim_mask.all()


class _HeadPolicy(nn.Module):
    """State MLP -> the real ``policies.heads`` head (Gaussian or tokens), with the Policy surface."""

    def __init__(self, head: str = "gaussian", seed: int = 0, **head_kw):
        from policies.heads import HEADS

        super().__init__()
        torch.manual_seed(seed)
        self.chunk_size, self.action_dim, self.image_size = 2, 7, 32
        self.trunk = nn.Sequential(nn.Linear(6, 32), nn.Tanh())
        self.head = HEADS[head](32, 2, 7, **head_kw)

    def act(self, obs, instructions, deterministic=False):
        from types import SimpleNamespace

        a, lp, ent = self.head.sample(self.trunk(torch.as_tensor(obs["state"]).float()), deterministic)
        return SimpleNamespace(actions=a, log_prob=lp, entropy=ent, value=None)

    def evaluate_actions(self, obs, instructions, actions):
        from types import SimpleNamespace

        lp, ent = self.head.evaluate(self.trunk(torch.as_tensor(obs["state"]).float()), actions)
        return SimpleNamespace(log_prob=lp, entropy=ent, value=None)


@pytest.mark.parametrize("mode", ["state_independent", "state_dependent"])
def test_exploration_std_sets_the_starting_noise_once(tmp_path, mode):
    """``exploration_std`` replaces the SFT-fitted std when RL starts (both log-std modes), and a
    resumed run keeps the std it trained instead of resetting it (resume == uninterrupted)."""
    from imagination.trainer_utils import set_exploration_std

    pol = _HeadPolicy(log_std_mode=mode, init_log_std=-1.0)
    set_exploration_std(0.05, pol)
    _, std = pol.head.params(torch.randn(3, 32))
    torch.testing.assert_close(std, torch.full_like(std, 0.05))
    cfg = GRPOConfig(
        iterations=4,
        group_size=4,
        max_chunks=4,
        minibatch_size=256,
        lr=3e-3,
        checkpoint_every=2,
        exploration_std=0.5,
    )
    full = _HeadPolicy(log_std_mode=mode)
    hist = train_grpo(ReachEnv(16), full, cfg, run=RunDir(tmp_path / "full"), progress=False)
    assert sum(h["kept_frac"] > 0 for h in hist) >= 2  # it trained (the std moved from 0.5)
    _, std = full.head.params(torch.zeros(1, 32))
    assert ((std - 0.5).abs() < 0.1).all() and not torch.allclose(std, torch.full_like(std, 0.5))
    part = _HeadPolicy(log_std_mode=mode)
    train_grpo(
        ReachEnv(16),
        part,
        GRPOConfig(**{**cfg.__dict__, "iterations": 2}),
        run=RunDir(tmp_path / "r"),
        progress=False,
    )
    resumed = _HeadPolicy(log_std_mode=mode, seed=5)
    train_grpo(ReachEnv(16), resumed, cfg, run=RunDir(tmp_path / "r"), progress=False)
    for a, b in zip(full.parameters(), resumed.parameters(), strict=True):
        torch.testing.assert_close(a, b)


def test_exploration_std_bad_values_fail_and_other_heads_keep_their_sampling():
    from imagination.trainer_utils import set_exploration_std

    for bad in (0.0, -0.1):
        with pytest.raises(ConfigError, match="exploration_std"):
            GRPOConfig(exploration_std=bad)
        with pytest.raises(ConfigError, match="exploration_std"):
            PPOConfig(exploration_std=bad)
    tokens = _HeadPolicy("tokens")
    before = [t.clone() for t in tokens.parameters()]
    with pytest.warns(UserWarning, match="no Gaussian action head"):  # keeps its own sampling
        set_exploration_std(0.1, tokens)
    assert all(torch.equal(a, b) for a, b in zip(before, tokens.parameters(), strict=True))
    with pytest.warns(UserWarning, match="TinyGaussianPolicy has no Gaussian action head"):
        set_exploration_std(0.1, TinyGaussianPolicy())
    with pytest.raises(ConfigError, match="must lie in"):
        set_exploration_std(10.0, _HeadPolicy())


def test_rl_headroom_counts_learnable_groups():
    """benchmarks.rl_headroom: pass@k and group outcomes match brute-force enumeration, and the
    failed-start figure only looks at starts where the mean action fails."""
    import itertools

    from benchmarks.rl_headroom import group_outcome_probs, pass_at_k, summarize_counts

    n, g = 6, 3
    for c in range(n + 1):
        outcomes = [1] * c + [0] * (n - c)
        groups = [sum(x) for x in itertools.combinations(outcomes, g)]
        fail, succ, mixed = group_outcome_probs(n, c, g)
        assert fail == pytest.approx(np.mean([s == 0 for s in groups]))
        assert succ == pytest.approx(np.mean([s == g for s in groups]))
        assert mixed == pytest.approx(np.mean([0 < s < g for s in groups]))
        assert pass_at_k(n, c, g) == pytest.approx(1 - fail)
    assert pass_at_k(n, 2, 1) == pytest.approx(2 / 6)
    with pytest.raises(ValueError, match="k <= n"):
        pass_at_k(4, 1, 5)
    row = summarize_counts(np.array([0, 3, 6, 1]), np.array([False, True, True, False]), n=6, g=3)
    assert row["sample_success"] == pytest.approx(10 / 24)
    assert row["failed_starts"]["count"] == 2
    assert row["failed_starts"]["never_solved_in_n"] == pytest.approx(0.5)
    assert row["failed_starts"]["learnable"] == pytest.approx(group_outcome_probs(6, 1, 3)[2] / 2)
    assert row["group"]["all_success"] == pytest.approx((1 / 20 + 1) / 4)  # C(3,3)/C(6,3) and 1


def test_imagination_agreement_reads_the_grpo_signal():
    """benchmarks.rl_headroom.imagination_agreement: imagined outcomes equal to the real ones give
    advantage cosine 1, inverted ones -1; gated-out samples carry no advantage; imagined signal on
    groups the real simulator finds flat counts as noise; the shuffled chance level is near 0."""
    from benchmarks.rl_headroom import imagination_agreement

    rng = np.random.default_rng(0)
    real = rng.random((40, 8)) < 0.5
    ok = np.ones_like(real)
    mean_ok = real[:, 0]
    same = imagination_agreement(real, real, ok, mean_ok, mean_ok, group_size=4)
    assert same["advantage"]["cosine"] == pytest.approx(1.0)
    assert same["advantage"]["real_signal_recovered"] == pytest.approx(1.0)
    assert same["samples"]["agreement"] == 1.0 and same["samples"]["precision"] == 1.0
    assert same["start_rate_pearson"] == pytest.approx(1.0)
    assert abs(same["advantage"]["cosine_shuffled"]["mean"]) < 0.1
    assert same["advantage"]["imagined_energy_on_flat_real_groups"] == 0.0
    flipped = imagination_agreement(real, ~real, ok, mean_ok, ~mean_ok, group_size=4)
    assert flipped["advantage"]["cosine"] == pytest.approx(-1.0)
    assert flipped["mean_action"]["agreement"] == 0.0
    # gating out every imagined sample of a start leaves that start no imagined advantage
    gated = ok.copy()
    gated[:20] = False
    half = imagination_agreement(real, real, gated, mean_ok, mean_ok, group_size=4)
    assert half["samples"]["gated_out"] == pytest.approx(0.5)
    assert 0.0 < half["advantage"]["real_signal_recovered"] < 1.0
    # real groups flat (all fail), imagined ones mixed: all imagined signal is noise
    flat_real = np.zeros((2, 4), bool)
    flat_real[1] = [True, False, False, False]
    imag = np.array([[True, False, True, False], [True, False, False, False]])
    noise = imagination_agreement(flat_real, imag, np.ones_like(imag), flat_real[:, 0], imag[:, 0], 4, shuffles=0)
    assert noise["advantage"]["imagined_energy_on_flat_real_groups"] == pytest.approx(0.5)
    assert noise["start_categories"]["rows_real_cols_imagined"] == [[0, 1, 0], [0, 1, 0], [0, 0, 0]]
    with pytest.raises(ValueError, match="share a"):
        imagination_agreement(real, real[:, :4], ok, mean_ok, mean_ok, 4)


def test_replayed_start_lands_on_the_recorded_keyframe():
    """benchmarks.rl_headroom._ReplayedStart: resetting to the seeds and replaying a pass's actions one
    step at a time reaches that pass's state (the simulator is deterministic), with the last frames,
    proprio and environment states as the imagined env's context."""
    import envs
    from benchmarks.rl_headroom import _ReplayedStart
    from envs.wrappers import ActionChunkWrapper

    env = ActionChunkWrapper(envs.make_vec("PushCube-v0", 2, seed=0, image_size=32, autoreset_mode="same_step"), 4)
    rng = np.random.default_rng(0)
    acts = rng.uniform(-0.5, 0.5, (3, 2, 4, 7)).astype(np.float32)
    env.reset(seed=[11, 12])
    for a in acts:
        obs, *_ = env.step(a)
    want_state, want_env = obs["state"].copy(), env.unwrapped.environment_state().copy()
    start = _ReplayedStart(env, [11, 12], ["PushCube-v0"] * 2, acts, keep=5)
    obs2, _ = start.reset()
    np.testing.assert_array_equal(obs2["state"], want_state)
    ctx = start.context
    assert ctx["frames"].shape == (2, 5, 32, 32, 3) and ctx["states"].shape[:2] == (2, 5)
    np.testing.assert_array_equal(ctx["states"][:, -1], want_state)
    np.testing.assert_array_equal(ctx["env_states"][:, -1], want_env)
    assert not start.ended.any() and start.replayed_steps == 3 * 4 * 2
    first, _ = _ReplayedStart(env, [11, 12], ["PushCube-v0"] * 2).reset()  # no prefix: the plain reset
    np.testing.assert_array_equal(first["state"], env.reset(seed=[11, 12])[0]["state"])
    env.close()


def test_rendered_state_model_world_steps_the_model_and_draws_its_states():
    """benchmarks._split_worlds: from a real start, the policy's state is the state model's
    proprio and its frame the simulator's drawing of the model's states; a model that predicts no
    motion draws the start frame again; the task's rule on the model's states ends an episode; the
    real env is never stepped; an object-only model is an error."""
    import torch

    import envs
    from benchmarks._split_worlds import RenderedStateModelWorld
    from benchmarks.rl_headroom import _ReplayedStart
    from envs.tabletop.environment_state import success_from_environment_state
    from envs.wrappers import ActionChunkWrapper
    from worldmodels.object_dynamics import ObjectDynamics, ObjectDynamicsConfig

    tasks = ["PushCube-v0", "LiftCube-v0"]
    env = ActionChunkWrapper(envs.make_vec(tasks, 2, seed=0, image_size=32, autoreset_mode="same_step"), 4)
    start = _ReplayedStart(env, [21, 22], tasks)
    torch.manual_seed(0)
    model = ObjectDynamics(ObjectDynamicsConfig(arm=True, proprio_dim=8)).eval()
    world = RenderedStateModelWorld(model, start, tasks)
    obs0, info0 = world.reset(seed=123)
    real0, _ = start.reset()
    np.testing.assert_array_equal(obs0["image"], real0["image"])
    qpos = np.array(env.unwrapped._qpos, copy=True)
    acts = np.random.default_rng(0).uniform(-1.5, 1.5, (2, 4, 7)).astype(np.float32)
    ctx = start.context
    objs = torch.as_tensor(ctx["env_states"][:, -1, :9]).unflatten(-1, (3, 3))
    now = torch.as_tensor(ctx["states"][:, -1])
    with torch.no_grad():
        props, moved = model.rollout(now[:, None], torch.as_tensor(acts).clamp(-1, 1), objs, objs, now)
    obs, rew, term, trunc, info = world.step(acts)
    np.testing.assert_allclose(obs["state"], props[:, -1].numpy(), rtol=1e-6)
    np.testing.assert_array_equal(obs["image"], env.unwrapped.render_states(props[:, -1].numpy(), moved[:, -1].numpy()))
    env_now = ctx["env_states"][:, -1].copy()
    want = np.zeros(2, bool)
    for k in range(4):
        env_now[:, :9] = moved[:, k].flatten(1).numpy()
        want |= success_from_environment_state(tasks, props[:, k].numpy(), env_now)
    np.testing.assert_array_equal(term, want)
    np.testing.assert_array_equal(info["success"], want)
    assert not trunc.any() and info["instruction"] == list(ctx["instructions"])
    np.testing.assert_array_equal(env.unwrapped._qpos, qpos)  # the real env only draws
    for head in (model.mlp[-1], model.arm[-1]):  # no predicted motion: the start again, no success
        torch.nn.init.zeros_(head.weight)
        torch.nn.init.zeros_(head.bias)
    world.reset()
    obs, rew, term, *_ = world.step(acts)
    np.testing.assert_array_equal(obs["image"], real0["image"])
    np.testing.assert_allclose(obs["state"], real0["state"], atol=1e-6)
    assert not term.any()
    with pytest.raises(WmrlError, match="needs an arm-and-object state model"):
        RenderedStateModelWorld(ObjectDynamics(ObjectDynamicsConfig()), start, tasks)
    env.close()


def test_model_drawn_real_world_steps_the_simulator_and_draws_the_real_states(tmp_path):
    """benchmarks._split_worlds.ModelDrawnRealWorld: the real simulator moves (proprio and success as a
    plain real pass of the same actions gives them) and the world model draws the frames from the
    real states of every chunk, from a context of the start's real frames."""
    import torch

    import envs
    from benchmarks._split_worlds import ModelDrawnRealWorld
    from benchmarks.rl_headroom import _ReplayedStart
    from envs.wrappers import ActionChunkWrapper
    from worldmodels import make_world_model

    tasks = ["PushCube-v0", "PushCube-v0"]
    env = ActionChunkWrapper(envs.make_vec(tasks, 2, seed=0, image_size=32, autoreset_mode="same_step"), 4)
    twin = ActionChunkWrapper(envs.make_vec(tasks, 2, seed=0, image_size=32, autoreset_mode="same_step"), 4)
    torch.manual_seed(0)
    wm = make_world_model("deterministic", image_size=32, context_frames=2, chunk_size=2, block_out_channels=[16, 32],
                          head_hidden=32, autocast_bf16=False, env_state_dim=9).eval()
    world = ModelDrawnRealWorld(wm, _ReplayedStart(env, [31, 32], tasks), record=True)
    obs0, _ = world.reset()
    real0, _ = twin.reset(seed=[31, 32])
    np.testing.assert_array_equal(obs0["image"], real0["image"])
    ctx = world.ctx
    rng = np.random.default_rng(0)
    for _ in range(3):
        acts = rng.uniform(-1, 1, (2, 4, 7)).astype(np.float32)
        raw = twin.env
        states = []
        for j in range(4):  # the same actions one step at a time in the twin: the states the model is given
            o, *_ = raw.step(acts[:, j])
            states.append(np.concatenate([o["state"], raw.unwrapped.environment_state()[:, :9]], 1))
        states = torch.as_tensor(np.stack(states, 1))
        with torch.no_grad():
            want = wm.step(ctx, torch.as_tensor(acts[:, :2]), states=states[:, :2])
            want = wm.step(want.context, torch.as_tensor(acts[:, 2:]), states=states[:, 2:])
        ctx = want.context
        obs, rew, term, trunc, info = world.step(acts)
        np.testing.assert_array_equal(obs["image"], want.frames[:, -1].numpy())
        np.testing.assert_array_equal(obs["state"], o["state"])
        np.testing.assert_array_equal(world.real_frames[-1], o["image"])
        np.testing.assert_array_equal(world.drawn_frames[-1], obs["image"])
        assert not term.any() and not trunc.any()
    assert not np.array_equal(obs["image"], o["image"])  # an untrained model's drawing, not the real frame
    assert len(world.real_frames) == len(world.drawn_frames) == 4  # the start and 3 chunks
    from benchmarks.rl_headroom import _write_drawn_video

    _write_drawn_video(tmp_path / "drawn.mp4", world, samples=1)
    assert (tmp_path / "drawn.mp4").stat().st_size > 0
    env.close()
    twin.close()


def test_rl_headroom_needs_a_finished_run(tmp_path):
    from benchmarks.rl_headroom import main

    with pytest.raises(WmrlError, match="config.yaml not found"):
        main(["--runs", str(tmp_path / "nope"), "--out", str(tmp_path / "x.json")])
    with pytest.raises(WmrlError, match="--stds 0.0 must be > 0"):
        main(["--runs", str(tmp_path), "--stds", "0", "--out", str(tmp_path / "x.json")])
    with pytest.raises(WmrlError, match="--horizon 0 must be >= 1"):
        main(["--runs", str(tmp_path), "--horizon", "0", "--out", str(tmp_path / "x.json")])
    with pytest.raises(WmrlError, match="--world-round -1 must be >= 0"):
        main(["--runs", str(tmp_path), "--imagined", "--world-round", "-1", "--out", str(tmp_path / "x.json")])
    with pytest.raises(WmrlError, match="--object-dynamics changes the imagined world; it needs --imagined"):
        main(["--runs", str(tmp_path), "--object-dynamics", "od", "--out", str(tmp_path / "x.json")])
    with pytest.raises(WmrlError, match="--rendered-state-model runs the --object-dynamics model"):
        main(["--runs", str(tmp_path), "--imagined", "--rendered-state-model", "--out", str(tmp_path / "x.json")])
    with pytest.raises(WmrlError, match="--model-drawn-real draws with the run's world model; it needs --imagined"):
        main(["--runs", str(tmp_path), "--model-drawn-real", "--out", str(tmp_path / "x.json")])
    with pytest.raises(WmrlError, match="--twin-pixel-noise -1.0 must be >= 0"):
        main(["--runs", str(tmp_path), "--twin-pixel-noise", "-1", "--out", str(tmp_path / "x.json")])


def test_pixel_noise_twin_changes_only_the_frames_and_pools_like_imagination():
    """The twin's policy sees the frames with small rounded noise (type, dtype and the other keys
    kept; torch's RNG untouched); a twin whose outcomes equal the real ones pools to cosine 1."""
    from benchmarks.rl_headroom import _PixelNoise, aggregate_twin

    seen = {}

    class Spy:
        def act(self, obs, instructions, deterministic=False):
            seen.update(obs)
            return "acted"

    img = torch.full((2, 8, 8, 3), 128, dtype=torch.uint8)
    state = torch.randn(2, 8)
    rng = torch.get_rng_state()
    assert _PixelNoise(Spy(), 2.0, seed=0).act({"image": img, "state": state}, ["", ""]) == "acted"
    assert torch.equal(torch.get_rng_state(), rng)
    assert isinstance(seen["image"], torch.Tensor) and seen["image"].dtype == torch.uint8
    diff = seen["image"].int() - 128
    assert diff.abs().max() <= 12 and (diff != 0).float().mean() > 0.5 and torch.equal(seen["state"], state)
    _PixelNoise(Spy(), 1e-9, seed=0).act({"image": img.numpy()}, ["", ""])
    assert np.array_equal(seen["image"], img.numpy())

    real = np.random.default_rng(0).random((2, 3, 8)) < 0.4
    run = {"outcomes": {"0.1": real.astype(int).tolist()}, "twin": {"outcomes": {"0.1": real.astype(int).tolist()}},
           "counts": {}, "mean_action_ok": np.zeros((2, 3), int).tolist()}
    row = aggregate_twin({"a": run}, [0.1], 4)["0.1"]
    assert "mean_action" not in row and row["samples"]["agreement"] == 1.0
    assert row["advantage"]["cosine"] == pytest.approx(1.0)


def test_state_model_refit_needs_two_rounds_of_rollouts(tmp_path):
    from benchmarks.state_model_refit import main

    with pytest.raises(WmrlError, match="config.yaml not found"):
        main(["--runs", str(tmp_path / "nope"), "--out", str(tmp_path / "x.json")])
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("seed: 0\n")
    with pytest.raises(WmrlError, match=r"round_1/rollouts.npz not found; expected a run with >= 2 co-evolution rounds"):
        main(["--runs", str(tmp_path / "run"), "--out", str(tmp_path / "x.json")])
    with pytest.raises(WmrlError, match="--steps 0 and --num-threads 1 must be >= 1"):
        main(["--runs", str(tmp_path / "run"), "--steps", "0", "--out", str(tmp_path / "x.json")])
    assert not (tmp_path / "x.json").exists()


def test_freeze_keeps_named_parameters_out_of_grpo_and_ppo():
    """rl.freeze: the parameters under the prefixes stay exactly as they were, the rest train, and
    requires_grad is restored afterwards; a prefix that names nothing is a one-line config error."""
    for algo in ("grpo", "ppo"):
        policy = TinyGaussianPolicy(seed=1)
        before = {n: p.detach().clone() for n, p in policy.named_parameters()}
        if algo == "grpo":
            cfg = GRPOConfig(iterations=2, group_size=4, max_chunks=4, minibatch_size=32, lr=3e-3, freeze=["net.0"])
            train_grpo(ReachEnv(8), policy, cfg, progress=False)
        else:
            cfg = PPOConfig(iterations=2, num_steps=4, minibatch_size=16, lr=3e-3, critic_warmup=0, freeze=["net.0"])
            train_ppo(ReachEnv(8), policy, cfg, progress=False)
        for n, p in policy.named_parameters():
            assert torch.equal(p, before[n]) == n.startswith("net.0."), (algo, n)
            assert p.requires_grad
    with pytest.raises(ConfigError, match=r"freeze: 'net.9' names no parameter of TinyGaussianPolicy; its parts: .*net.0"):
        train_grpo(ReachEnv(8), TinyGaussianPolicy(), GRPOConfig(iterations=1, group_size=4, freeze=["net.9"]),
                   progress=False)
    with pytest.raises(ConfigError, match=r"freeze='net.0'; expected a list"):
        PPOConfig(freeze="net.0")


def test_start_pool_cycles_a_fixed_set_of_group_starts():
    """rl.start_pool=P: iteration i's group g starts from start (i * groups + g) mod P, so the same scenes
    come back every P / groups iterations, each group slot with its own; 0 draws new starts throughout."""

    class SeedLog(ReachEnv):
        def reset(self, *, seed=None, options=None):
            self.seeds.append(list(seed))
            return super().reset(seed=seed, options=options)

    def starts(pool: int) -> list[list[int]]:
        env = SeedLog(8)
        env.seeds = []
        train_grpo(env, TinyGaussianPolicy(), GRPOConfig(iterations=4, group_size=4, max_chunks=2, start_pool=pool),
                   progress=False)
        return [s[::4] for s in env.seeds]  # one seed per group

    fresh, pooled = starts(0), starts(4)
    assert len({tuple(s) for s in fresh}) == 4 and len({x for s in fresh for x in s}) == 8
    assert pooled[0] == pooled[2] == fresh[0] and pooled[1] == pooled[3] == fresh[1] and pooled[0] != pooled[1]
    with pytest.raises(ConfigError, match=r"start_pool=3 must be a multiple of the 2 groups per iteration"):
        starts(3)
    with pytest.raises(ConfigError, match=r"start_pool=-1 must be an integer >= 0"):
        GRPOConfig(start_pool=-1)


def test_the_fixed_start_pool_is_the_one_real_grpo_with_start_pool_trains_on():
    """benchmarks.fixed_starts scores policies on pool start x = (task x % T, seed rl.seed * 1_000_003 + x):
    every (task, seed) that real GRPO with rl.start_pool=P resets its groups to is one of those, and
    all P come up."""
    import envs
    from benchmarks.fixed_starts import pool_starts
    from envs.wrappers import ActionChunkWrapper
    from imagination.pipeline import rl_task_layout

    tasks = ["PushCube-v0", "LiftCube-v0"]
    layout = rl_task_layout(tasks, 8, 4)
    env = ActionChunkWrapper(
        envs.make_vec(layout, 8, image_size=32, autoreset_mode="same_step", seed=0), 2, frames="chunk_end"
    )
    _, resets = grpo_resets(env, GRPOConfig(iterations=3, group_size=4, max_chunks=1, start_pool=4, seed=7))
    task_ids, seeds = pool_starts(tasks, 2, 7)
    used = {(layout[i], s) for r in resets for i, s in enumerate(r)}
    assert used == set(zip(task_ids, seeds, strict=True)) and len(resets) == 3


def grpo_resets(env, cfg: GRPOConfig) -> tuple[list[dict], list[list[int]]]:
    """GRPO with ``cfg`` from a TinyGaussianPolicy in ``env`` (closed after): its history, and the seeds of
    every reset it asked for (one list per reset)."""
    resets: list[list[int]] = []
    reset = env.reset
    env.reset = lambda **kw: (resets.append(list(kw["seed"])), reset(**kw))[1]
    try:
        hist = train_grpo(env, TinyGaussianPolicy(state_dim=env.single_observation_space["state"].shape[0]), cfg,
                          progress=False)
    finally:
        env.close()
    return hist, resets


class _FrameSpy(TinyGaussianPolicy):
    """Records the frames the policy acts on and the frames the RL update scores it on."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.acted, self.scored = [], []

    def act(self, obs, instructions, deterministic=False):
        self.acted.extend(np.asarray(obs["image"]))
        return super().act(obs, instructions, deterministic)

    def evaluate_actions(self, obs, instructions, actions):
        self.scored.extend(np.asarray(obs["image"]))
        return super().evaluate_actions(obs, instructions, actions)


def _translates(frames: list[np.ndarray], shift: int) -> set[bytes]:
    """Every frame moved by (dy, dx) in [-shift, shift]^2, its edge rows/columns repeated."""
    out = set()
    for f in frames:
        h, w = f.shape[:2]
        for dy in range(-shift, shift + 1):
            for dx in range(-shift, shift + 1):
                rows, cols = np.clip(np.arange(h) + dy, 0, h - 1), np.clip(np.arange(w) + dx, 0, w - 1)
                out.add(np.ascontiguousarray(f[rows][:, cols]).tobytes())
    return out


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_augment_shift_adds_a_consistency_pass_on_shifted_frames(algo):
    """rl.augment_shift=s: the update scores the acted-on frames (the policy gradient) and, as often,
    copies of them moved by at most s pixels (the consistency KL, logged as augment_kl); s=0 scores
    the acted-on frames only; a negative shift or a non-positive coefficient is a config error."""
    seen = {}
    for shift in (0, 3):
        policy = _FrameSpy(seed=1, value_head=algo == "ppo")
        if algo == "grpo":
            cfg = GRPOConfig(iterations=2, group_size=4, max_chunks=4, minibatch_size=32, augment_shift=shift)
            hist = train_grpo(ReachEnv(8), policy, cfg, progress=False)
        else:
            cfg = PPOConfig(iterations=2, num_steps=4, minibatch_size=16, critic_warmup=0, augment_shift=shift)
            hist = train_ppo(ReachEnv(8), policy, cfg, progress=False)
        acted = {f.tobytes() for f in policy.acted}
        scored, moved = [f.tobytes() for f in policy.scored], _translates(policy.acted, shift)
        assert scored and all(s in moved for s in scored)
        seen[shift] = np.mean([s in acted for s in scored])
        assert all(("augment_kl" in h) == (shift > 0) for h in hist)
        assert all(math.isfinite(h["augment_kl"]) for h in hist if shift)
    assert seen[0] == 1.0 and 0.5 <= seen[3] < 0.75, seen
    make = GRPOConfig if algo == "grpo" else PPOConfig
    with pytest.raises(ConfigError, match=r"augment_shift=-1; expected an integer number of pixels >= 0"):
        make(augment_shift=-1)
    with pytest.raises(ConfigError, match=r"augment_coef=0.0; expected a number > 0"):
        make(augment_shift=4, augment_coef=0.0)


def test_min_kept_groups_skips_updates_on_too_few_kept_groups():
    """rl.min_kept_groups=k: an iteration with fewer than k kept groups (mixed outcomes among its valid
    members) leaves the policy exactly as it was and logs update_skipped; with k=1 the same
    iterations update it. Every iteration logs how many groups were kept."""
    hists, params = {}, {}
    for k in (1, 9):  # 8 groups of 8 on 64 sub-envs: 9 can never be reached
        policy = TinyGaussianPolicy(seed=1)
        before = [p.detach().clone() for p in policy.parameters()]
        cfg = GRPOConfig(iterations=3, group_size=8, max_chunks=6, minibatch_size=128, lr=3e-3, min_kept_groups=k)
        hists[k] = train_grpo(ReachEnv(64), policy, cfg, progress=False)
        params[k] = all(torch.equal(p, b) for p, b in zip(policy.parameters(), before))
    kept = [h["kept_groups"] for h in hists[1]]
    assert all(1 <= g <= 8 for g in kept) and kept[0] == hists[9][0]["kept_groups"]  # the same first batch
    assert not params[1] and all("update_skipped" not in h and "loss" in h for h in hists[1])
    assert params[9] and all(h["update_skipped"] == 1.0 and "loss" not in h for h in hists[9])
    with pytest.raises(ConfigError, match=r"min_kept_groups=0 must be an integer >= 1"):
        GRPOConfig(min_kept_groups=0)


def test_max_kl_scales_each_update_back_into_the_trust_region():
    """rl.max_kl: with a learning rate large enough that an update moves the policy by far more than
    max_kl, every update is halved back until the KL from the behaviour policy, measured again on the
    trained chunks, is within it; without it the same first update moves the policy further. A loose
    max_kl leaves the update whole (scale 1)."""
    from imagination.rollout_buffer import collect_first_episodes as collect
    from imagination.trainer_utils import update_kl

    def first_update(max_kl: float) -> tuple[dict, float]:
        policy = TinyGaussianPolicy(seed=1)
        cfg = GRPOConfig(iterations=1, group_size=8, max_chunks=6, minibatch_size=128, lr=3e-2, max_kl=max_kl)
        behaviour = TinyGaussianPolicy(seed=1)
        hist = train_grpo(ReachEnv(64), policy, cfg, progress=False)
        # the KL between the behaviour policy and the trained one, measured outside the trainer
        batch = collect(ReachEnv(64), behaviour, 6, seeds=[s for g in range(8) for s in [g] * 8])
        t_idx, n_idx = torch.nonzero(batch.valid, as_tuple=True)
        kl = update_kl(policy, batch, t_idx, n_idx, batch.log_probs[t_idx, n_idx], 256)
        return hist[0], kl

    free, kl_free = first_update(0.0)
    tight, kl_tight = first_update(0.01)
    loose, _ = first_update(1e6)
    assert "update_kl" not in free and kl_free > 0.05
    assert tight["update_kl_full"] > 0.05 and tight["update_kl"] <= 0.01 and 0 < tight["trust_region_scale"] < 1
    assert kl_tight < kl_free / 3
    assert loose["trust_region_scale"] == 1.0 and loose["update_kl"] == loose["update_kl_full"] > 0
    with pytest.raises(ConfigError, match=r"max_kl=-0.1; expected a number of nats per chunk >= 0"):
        GRPOConfig(max_kl=-0.1)


def test_ppo_max_kl_holds_the_action_distribution_and_leaves_the_value_head_whole():
    """PPO's rl.max_kl: a large-lr update is halved back until the KL from the behaviour policy on the
    iteration's chunks is within it, and only the parameters the action distribution depends on are
    scaled: the policy's own value head takes the same step as without a trust region."""

    def first_update(max_kl: float) -> tuple[dict, TinyGaussianPolicy]:
        policy = TinyGaussianPolicy(seed=1, value_head=True)
        cfg = PPOConfig(iterations=1, num_steps=6, update_epochs=4, minibatch_size=64, lr=3e-2, max_kl=max_kl)
        return train_ppo(ReachEnv(32), policy, cfg, progress=False)[0], policy

    free, p_free = first_update(0.0)
    tight, p_tight = first_update(0.01)
    assert "update_kl" not in free
    assert tight["update_kl_full"] > 0.05 and tight["update_kl"] <= 0.01 and 0 < tight["trust_region_scale"] < 1
    for (name, a), b in zip(p_free.named_parameters(), p_tight.parameters(), strict=True):
        assert torch.equal(a, b) == name.startswith("value."), name  # value head: same step; the rest: scaled
    with pytest.raises(ConfigError, match=r"max_kl=True; expected a number of nats per chunk >= 0"):
        PPOConfig(max_kl=True)


def test_backtrack_to_kl_restores_the_start_when_no_step_is_small_enough():
    """A KL that never falls within the bound (here it ignores the step: a policy whose
    behaviour changed some other way) leaves the parameters exactly at the start, scale 0."""
    from imagination.trainer_utils import backtrack_to_kl

    p = nn.Parameter(torch.tensor([1.0, 2.0]))
    start = [torch.zeros(2)]
    full, kept, scale = backtrack_to_kl([p], start, lambda: 1.0, 0.1, max_halvings=3)
    assert (full, kept, scale) == (1.0, 0.0, 0.0) and torch.equal(p.detach(), torch.zeros(2))
    p2 = nn.Parameter(torch.tensor([4.0]))
    full, kept, scale = backtrack_to_kl([p2], [torch.zeros(1)], lambda: float(p2.detach() ** 2), 1.0)
    assert full == 16.0 and scale == 0.25 and kept == 1.0 and float(p2.detach()) == 1.0
