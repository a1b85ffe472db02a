"""Device placement: ``device`` names, and (with CUDA) every trainer and the whole loop on the GPU.

The CUDA tests compare against the same computation on the CPU where the two must agree (one
GRPO update from the same batch), check that checkpoints move between devices (trained on the
GPU, resumed on the CPU), and run ``wmrl run``'s stages end to end with ``device=cuda``."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from wmrl.devices import resolve_device
from wmrl.errors import ConfigError

SIZE = 32
cuda = pytest.mark.gpu


def test_device_names_resolve_and_bad_ones_fail_in_one_line():
    from imagination.pipeline import load_run_config
    from policies.train import TrainPolicyConfig
    from worldmodels.train import TrainLoopConfig

    assert resolve_device(None) == resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    for bad in ("tpu", "gpu", "cuda:x", 3):
        with pytest.raises(ConfigError, match=r"expected 'auto', 'cpu', 'cuda' or 'cuda:N'"):
            resolve_device(bad)
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="device='cuda' but torch sees no CUDA device"):
            resolve_device("cuda")
    else:
        with pytest.raises(ConfigError, match="CUDA device"):
            resolve_device(f"cuda:{torch.cuda.device_count()}")
    # every config that takes a device checks it before any work
    with pytest.raises(ConfigError, match="device='tpu'"):
        load_run_config(["device=tpu"], "run_quick")
    with pytest.raises(ConfigError, match="device='gpu'"):
        TrainLoopConfig(device="gpu")
    with pytest.raises(ConfigError, match="device='metal'"):
        TrainPolicyConfig(device="metal")
    assert load_run_config([], "run_quick").device == "auto"


def _tiny_policy(seed: int = 0):
    from policies.vla.configuration_vla import VLAConfig
    from policies.vla.modeling_vla import VLAPolicy

    torch.manual_seed(seed)
    return VLAPolicy(VLAConfig(image_size=SIZE, channels=(8, 8, 8), hidden_dim=32, chunk_size=2)).eval()


@cuda
def test_grpo_update_on_cuda_matches_the_cpu():
    """One GRPO update from the same real batch moves a CUDA copy of the policy as it moves the CPU one."""
    import envs
    from envs.wrappers import ActionChunkWrapper
    from imagination.grpo import GRPOConfig, grpo_update, trajectory_scores
    from imagination.rollout_buffer import collect_first_episodes
    from imagination.trainer_utils import set_exploration_std, trainable_parameters
    from kernels.advantages import compute_group_advantages

    cfg = GRPOConfig(group_size=4, minibatch_size=1024, update_epochs=2, kl_coef=0.1, entropy_coef=0.01)
    cpu = _tiny_policy()
    set_exploration_std(0.3, cpu)
    env = ActionChunkWrapper(envs.make_vec("PushCube-v0", 8, image_size=SIZE, autoreset_mode="same_step", seed=0), 2)
    ref = copy.deepcopy(cpu).requires_grad_(False)
    batch = collect_first_episodes(env, cpu, 4, seeds=[0] * 4 + [1] * 4, ref_policy=ref)
    env.close()
    _, valid, _ = trajectory_scores(batch, "success", "off")
    # four steps from a reset rarely succeed, so the scores are set: an update with a real gradient
    adv, _ = compute_group_advantages(torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 1]), torch.arange(8) // 4, valid, True)
    gpu = copy.deepcopy(cpu).to("cuda")
    before = [p.detach().clone() for p in cpu.parameters()]
    for pol in (cpu, gpu):
        opt = torch.optim.SGD(trainable_parameters(pol), lr=0.05)  # plain SGD: the step is the gradient
        grpo_update(pol, opt, batch, adv, valid, cfg, torch.Generator().manual_seed(0))
    step_cpu = torch.cat([(p.detach() - b).flatten() for p, b in zip(cpu.parameters(), before, strict=True)])
    step_gpu = torch.cat([(p.detach().cpu() - b).flatten() for p, b in zip(gpu.parameters(), before, strict=True)])
    assert all(p.is_cuda for p in gpu.parameters()) and step_cpu.norm() > 0
    # the same update up to float rounding (cuDNN's TF32 convolutions): direction and size agree
    assert torch.nn.functional.cosine_similarity(step_cpu, step_gpu, dim=0) > 0.995
    assert step_gpu.norm() / step_cpu.norm() == pytest.approx(1.0, abs=0.02)


@cuda
def test_trainers_run_on_cuda_and_their_checkpoints_resume_on_the_cpu(tmp_path):
    """World model, policy SFT, IDM and success model train on the GPU; the world-model and SFT
    checkpoints written there resume on the CPU."""
    import envs
    from imagination.coevolution import record_rollouts
    from policies.train import TrainPolicyConfig, train_policy
    from policies.vla.configuration_vla import VLAConfig
    from rewards import train_idm, train_success_model
    from worldmodels.train import TrainLoopConfig, TrainWorldModelConfig, train_world_model

    env = envs.make_vec("PushCube-v0", 8, image_size=SIZE, autoreset_mode="same_step", seed=0)
    expert = envs.make_expert(env, noise=0.5, seed=0)
    traj, _ = record_rollouts(env, lambda obs, instr: expert.act()[:, None], 8, 1, seed=0)
    env.close()
    wm_cfg = {"family": "deterministic", "image_size": SIZE, "context_frames": 2, "chunk_size": 2, "state_dim": 8,
              "block_out_channels": [8, 16], "norm_num_groups": 4, "head_hidden": 16}

    def wm_job(steps: int, device: str) -> TrainWorldModelConfig:
        loop = TrainLoopConfig(steps=steps, batch_size=4, checkpoint_every=2, videos=1, video_horizon=4, device=device)
        return TrainWorldModelConfig(world_model=wm_cfg, train=loop, run_dir=str(tmp_path / "wm"))

    wm, info = train_world_model(wm_job(4, "cuda"), traj, traj, progress=False)
    assert next(wm.parameters()).is_cuda and np.isfinite(info["final_loss"]) and np.isfinite(info["test_psnr_h1"])
    wm, info = train_world_model(wm_job(6, "cpu"), traj, traj, progress=False)  # resumes the CUDA checkpoint
    assert not next(wm.parameters()).is_cuda and info["steps"] == 6

    pol = VLAConfig(image_size=SIZE, channels=(8, 8, 8), hidden_dim=32, chunk_size=2)

    def sft_job(steps: int, device: str) -> TrainPolicyConfig:
        return TrainPolicyConfig(out=str(tmp_path / "sft"), steps=steps, batch_size=8, ckpt_every=2, log_every=2,
                                 policy=pol, device=device, val_frac=0.25)

    policy, summary = train_policy(sft_job(4, "cuda"), traj, progress=False)
    assert policy.device.type == "cuda" and np.isfinite(summary["loss"]) and np.isfinite(summary["val_loss"])
    policy, summary = train_policy(sft_job(6, "cpu"), traj, progress=False)
    assert policy.device.type == "cpu" and summary["resumed_from"] == 4

    idm = train_idm(traj, steps=3, batch_size=8, device="cuda")
    decoded = idm.predict(traj.images[None, :4])
    assert idm.device.type == "cuda" and decoded.shape == (1, 3, 7) and torch.isfinite(decoded).all()
    succ = train_success_model(traj, steps=3, batch_size=8, device="cuda")
    p = succ.predict(traj.images[:3], list(traj.instructions[:3]))
    assert succ.device.type == "cuda" and p.shape == (3,) and torch.isfinite(p).all()


@cuda
@pytest.mark.slow
def test_the_whole_loop_runs_on_cuda(tmp_path):
    """``wmrl run`` with ``device=cuda``: every stage (object dynamics, SFT in a child process beside
    the world model, and a co-evolution round included) runs with its models on the GPU, and the
    results are those of a finished run."""
    from imagination.pipeline import Pipeline, load_run_config

    rd = tmp_path / "run"
    cfg = load_run_config(
        [
            f"run_dir={rd}", "device=cuda", "suite=PushCube-v0", "demos.episodes_per_task=4", "demos.num_envs=4",
            "world_model_train.steps=6", "world_model_train.videos=1", "rewards.idm_steps=6",
            "rewards.success_steps=6", "rewards.imagined_random_failures=4", "world_model.env_state_dim=9",
            "object_dynamics.enabled=true", "object_dynamics.arm=true", "+object_dynamics.steps=20",
            "+object_dynamics.batch_size=64", "+object_dynamics.hidden=32", "sft.steps=6", "rl.iterations=2",
            "imagination.success_source=state", "eval.episodes_per_task=2", "eval.num_envs=2", "videos=1",
            "coevolution.rounds=1", "coevolution.episodes_per_round=4", "coevolution.wm_finetune_steps=4",
            "coevolution.success_finetune_steps=4", "success_calibration.episodes_per_task=2",
            "num_threads=2",  # SFT trains on CUDA in a child process beside the world model
        ],
        "run_quick",
    )
    pipe = Pipeline(cfg, progress=False)
    assert pipe.device.type == "cuda"
    pipe.run_all()
    res = json.loads((rd / "results.json").read_text())
    sft = json.loads((rd / "stages" / "sft.json").read_text())
    assert sft["background"] is True and sft["num_threads"] == 1
    assert len(res["coevolution_success_by_round"]) == 1 and res["real_env_steps_used"] > 0
    for k in ("sft_success", "imagination_rl_success", "real_rl_same_budget_success"):
        assert 0.0 <= res[k] <= 1.0
    wm, sm, exe = pipe.load_models(1)
    assert next(wm.parameters()).is_cuda and wm.object_dynamics.device.type == "cuda" and sm.device.type == "cuda"
    assert pipe.policy_after(1).device.type == "cuda"
    assert (rd / "videos" / "real_vs_imagined_0.mp4").stat().st_size > 0


def test_the_deterministic_switch_sets_torch_and_the_cublas_workspace(restore_determinism, tmp_path):
    """``use_deterministic_algorithms`` flips torch's switches and sets cuBLAS's workspace setting; the run
    config's ``deterministic`` key turns it on for the run's process before any work."""
    import os

    from imagination.pipeline import Pipeline, load_run_config
    from wmrl.devices import use_deterministic_algorithms

    use_deterministic_algorithms(True)
    assert torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.deterministic
    assert not torch.backends.cudnn.benchmark and os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    use_deterministic_algorithms(False)
    assert not torch.are_deterministic_algorithms_enabled() and not torch.backends.cudnn.deterministic
    Pipeline(load_run_config([f"run_dir={tmp_path / 'a'}"], "run_quick"), progress=False)
    assert not torch.are_deterministic_algorithms_enabled()  # the default leaves torch as it is
    Pipeline(load_run_config([f"run_dir={tmp_path / 'b'}", "deterministic=true"], "run_quick"), progress=False)
    assert torch.are_deterministic_algorithms_enabled()


@pytest.mark.parametrize("side,size", [(4, 8), (16, 4), (8, 8), (2, 6)])
def test_even_adaptive_pooling_equals_the_adaptive_op_forward_and_backward(side, size):
    """The pooling that replaces ``adaptive_avg_pool2d`` under deterministic CUDA gives its values and gradients."""
    from wmrl.devices import adaptive_avg_pool2d, even_adaptive_avg_pool2d

    x = torch.randn(2, 3, side, side, dtype=torch.float64, requires_grad=True)
    ref = torch.nn.functional.adaptive_avg_pool2d(x, size)
    got = even_adaptive_avg_pool2d(x, size)
    g = torch.randn_like(ref)
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(torch.autograd.grad(got, x, g)[0], torch.autograd.grad(ref, x, g)[0])
    assert torch.equal(adaptive_avg_pool2d(x, size), ref)  # on the CPU it is the adaptive op itself
    assert even_adaptive_avg_pool2d(torch.zeros(1, 1, 5, 5), 8) is None  # uneven: left to the adaptive op


@cuda
@pytest.mark.slow
def test_deterministic_training_repeats_bit_for_bit_on_cuda(tmp_path):
    """With ``deterministic=true``, two CUDA trainings of the world model and of SFT (each in a fresh process,
    as in ``wmrl run``) save byte-identical weights (``benchmarks.determinism``'s measurement)."""
    import argparse

    from benchmarks.determinism import job_of, measure

    args = argparse.Namespace(run=None, quick=True, device="cuda", steps=6, threads=2)
    res = measure(job_of(args, tmp_path), tmp_path, settings=("deterministic",))
    for trainer in ("world_model", "sft"):
        r = res[f"{trainer}/deterministic"]
        assert "error" not in r, r.get("error")
        assert r["identical"] and r["tensors_differing"] == 0
