"""Orientation-aware state models: quaternion algebra, cube-symmetric features, fitting and stepping
(``worldmodels.orientation``, ``ObjectDynamicsConfig.orientation``, ``benchmarks.orientation_dynamics``)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from wmrl.errors import ConfigError, DatasetError
from worldmodels.orientation import (
    cube_orientation_features,
    cube_yaw_tilt,
    quat_multiply,
    quat_to_matrix,
    quat_to_rotvec,
    rotation_increment,
    rotvec_to_quat,
    step_quat,
)


def _unit(n: int, seed: int = 0) -> torch.Tensor:
    q = torch.randn(n, 4, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return q / q.norm(dim=-1, keepdim=True)


def _cube_symmetry_quats() -> torch.Tensor:
    """(24, 4) float64: the rotations that map a cube onto itself (``benchmarks.cube_turns.cube_symmetries``'
    matrices), as quaternions."""
    from benchmarks.cube_turns import cube_symmetries

    out = []
    for m in cube_symmetries():
        w = math.sqrt(max(0.0, 1 + np.trace(m))) / 2
        if w > 1e-6:
            q = [w, (m[2, 1] - m[1, 2]) / (4 * w), (m[0, 2] - m[2, 0]) / (4 * w), (m[1, 0] - m[0, 1]) / (4 * w)]
        else:  # a half turn: the axis from the diagonal, signs from the off-diagonal
            axis = np.sqrt(np.clip((np.diag(m) + 1) / 2, 0, None))
            i = int(axis.argmax())
            for j in range(3):
                if j != i:
                    axis[j] = math.copysign(axis[j], m[i, j])
            q = [0.0, *axis]
        out.append(q)
    return torch.tensor(out, dtype=torch.float64)


def test_rotation_vectors_and_quaternions_invert_each_other():
    omega = torch.randn(64, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    omega = omega / omega.norm(dim=-1, keepdim=True) * torch.linspace(0.0, 3.0, 64, dtype=torch.float64)[:, None]
    torch.testing.assert_close(quat_to_rotvec(rotvec_to_quat(omega)), omega)
    q = _unit(64)
    torch.testing.assert_close(rotation_increment(q, step_quat(q, omega)), omega)
    assert torch.allclose(step_quat(q, omega).norm(dim=-1), torch.ones(64, dtype=torch.float64))
    # -q is the same orientation: no increment
    assert rotation_increment(q, -q).abs().max() < 1e-6
    # a quarter turn about z, world frame: x -> y
    qz = rotvec_to_quat(torch.tensor([[0.0, 0.0, math.pi / 2]], dtype=torch.float64))
    v = quat_multiply(quat_multiply(qz, torch.tensor([[0.0, 1.0, 0.0, 0.0]], dtype=torch.float64)), qz * torch.tensor([1.0, -1, -1, -1]))
    torch.testing.assert_close(v[0, 1:], torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64))


def test_cube_yaw_and_tilt_ignore_the_cubes_symmetries_and_read_a_flat_cubes_heading():
    q = _unit(32, seed=2)
    yaw, tilt = cube_yaw_tilt(q)
    rel, move, vel = (torch.randn(32, 3, generator=torch.Generator().manual_seed(k), dtype=torch.float64) for k in (3, 4, 5))
    feats = cube_orientation_features(q, rel, move, vel)
    from benchmarks.cube_turns import cube_symmetries

    syms = _cube_symmetry_quats()
    torch.testing.assert_close(quat_to_matrix(syms), torch.from_numpy(cube_symmetries()))
    for g in syms:  # the same cube after a body-frame symmetry: q * g
        qg = quat_multiply(q, g.expand(32, 4))
        y2, t2 = cube_yaw_tilt(qg)
        torch.testing.assert_close(t2, tilt)
        # yaw in [-45, 45] deg, so +-45 are one heading
        d = torch.remainder(y2 - yaw + math.pi / 4, math.pi / 2) - math.pi / 4
        assert d.abs().max() < 1e-6
        ok = (yaw.abs() < math.pi / 4 - 1e-3)  # away from the +-45 deg seam the features are equal
        torch.testing.assert_close(cube_orientation_features(qg, rel, move, vel)[ok], feats[ok])
    for deg in (0.0, 20.0, 44.0, 60.0, 130.0, -100.0):  # a cube lying flat, turned about z
        qf = rotvec_to_quat(torch.tensor([[0.0, 0.0, math.radians(deg)]], dtype=torch.float64))
        y, t = cube_yaw_tilt(qf)
        want = (deg + 45.0) % 90.0 - 45.0
        assert abs(math.degrees(float(y)) - want) < 1e-6 and abs(float(t)) < 1e-9
    tipped = rotvec_to_quat(torch.tensor([[math.radians(30.0), 0.0, 0.0]], dtype=torch.float64))
    assert abs(float(cube_yaw_tilt(tipped)[1]) - (1 - math.cos(math.radians(30.0)))) < 1e-9


def _spinning_cube_data(episodes: int = 12, length: int = 30, seed: int = 0):
    """Synthetic episodes: cube 0 spins about z by 6 deg x action[0] and slides 1 cm x action[1] along x each
    step; the tcp sits beside it; cubes 1 and 2 stay put. Environment states: 13 dims + 3 quaternions."""
    from wmrl.data import Trajectories

    rng = np.random.default_rng(seed)
    n = episodes * length
    states, actions, env = np.zeros((n, 8), np.float32), np.zeros((n, 7), np.float32), np.zeros((n, 25), np.float32)
    for e in range(episodes):
        pos = np.array([rng.uniform(-0.1, 0.1), rng.uniform(-0.1, 0.1), 0.02])
        q = rotvec_to_quat(torch.tensor([0.0, 0.0, rng.uniform(-1, 1)], dtype=torch.float64))
        for t in range(length):
            i = e * length + t
            a = rng.uniform(-1, 1, 7).astype(np.float32)
            actions[i] = a
            states[i, :3] = pos + np.array([0.0, -0.04, 0.0])
            env[i, :3] = pos
            env[i, 3:6], env[i, 6:9] = [0.2, 0.2, 0.02], [-0.2, 0.2, 0.02]
            env[i, 11] = 0.0  # the target is cube 0
            env[i, 13:17] = q.numpy()
            env[i, 17:21] = env[i, 21:25] = [1.0, 0.0, 0.0, 0.0]
            q = step_quat(q, torch.tensor([0.0, 0.0, math.radians(6.0) * float(a[0])], dtype=torch.float64))
            pos = pos + np.array([0.01 * a[1], 0.0, 0.0])
    dones = np.zeros(n, bool)
    dones[length - 1 :: length] = True
    return Trajectories(images=np.zeros((n, 1, 1, 3), np.uint8), wrist_images=None, states=states, actions=actions,
                        rewards=np.zeros(n, np.float32), successes=np.zeros(n, bool), dones=dones,
                        episode_index=np.repeat(np.arange(episodes), length), frame_index=np.tile(np.arange(length), episodes),
                        instructions=["push"] * n, task_ids=["PushCube-v0"] * n, fps=20, env_states=env)


def test_an_orientation_model_learns_how_a_cube_turns_and_steps_its_orientation(tmp_path):
    from worldmodels.object_dynamics import ObjectDynamics, ObjectDynamicsConfig, fit_object_dynamics

    data = _spinning_cube_data()
    cfg = ObjectDynamicsConfig(steps=400, batch_size=256, hidden=64, layers=2, lr=3e-3, test_fraction=0.25,
                               orientation=True)
    od, metrics = fit_object_dynamics(data, cfg, progress=False)
    assert metrics["one_step_rotation_error_moving_mean_deg"] < 0.3 * metrics["no_turn_rotation_error_moving_mean_deg"], metrics
    assert metrics["one_step_error_moving_mean_m"] < 0.5 * metrics["stay_put_error_moving_mean_m"], metrics
    # one step of +1 on action 0 turns cube 0 by about 6 deg about z, of -0.5 by about -3 deg
    objs = torch.tensor([[[0.0, 0.0, 0.02], [0.2, 0.2, 0.02], [-0.2, 0.2, 0.02]]])
    quats = torch.tensor([[[1.0, 0.0, 0.0, 0.0]] * 3])
    s = torch.zeros(1, 8)
    s[0, 1:3] = torch.tensor([-0.04, 0.02])  # the tcp beside the cube, as in the data
    act = torch.zeros(1, 7)
    for a0, want in ((1.0, 6.0), (-0.5, -3.0)):
        act[0, 0] = a0
        with torch.no_grad():
            turn = rotation_increment(quats, od.step_objects(s, s, act, objs, objs, quats)[1])[0]
        assert abs(math.degrees(float(turn[0, 2])) - want) < 1.0, turn
    # a parked cube keeps its pose
    parked = objs.clone()
    parked[0, 1] = torch.tensor([0.7, -3.0, 0.025])
    nxt, nq = od.step_objects(s, s, act, parked, parked, quats)
    assert torch.equal(nq[0, 1], quats[0, 1]) and torch.equal(nxt[0, 1], parked[0, 1])
    # rollouts carry the orientations; the positions-only API refuses a model that needs them
    prop = s[:, None].expand(1, 4, 8)
    acts = act[:, None].expand(1, 3, 7)
    p, o, q = od.rollout_with_orientations(prop, acts, objs, objs, quats)
    assert p.shape == (1, 3, 8) and o.shape == (1, 3, 3, 3) and q.shape == (1, 3, 3, 4)
    with pytest.raises(ConfigError, match="rollout_with_orientations"):
        od.rollout(prop, acts, objs, objs)
    with pytest.raises(ConfigError, match=r"quats of shape \(1, 3, 4\)"):
        od.rollout_with_orientations(prop, acts, objs, objs, quats[:, :2])
    # saved and loaded with its config
    back = ObjectDynamics.from_pretrained(od.save_pretrained(tmp_path / "od"))
    assert back.config.orientation
    torch.testing.assert_close(back.step_objects(s, s, act, parked, parked, quats)[1], nq)
    # a positions-only model takes no orientations; the data must hold them; fine-tunes keep the architecture
    plain = ObjectDynamics(replace(cfg, orientation=False))
    with pytest.raises(ConfigError, match="reads no orientations"):
        plain.step_objects(s, s, act, objs, objs, quats)
    short = replace(data, env_states=data.env_states[:, :13])
    with pytest.raises(DatasetError, match="columns 13-24"):
        fit_object_dynamics(short, cfg, progress=False)
    with pytest.raises(ConfigError, match="orientation"):
        fit_object_dynamics(data, replace(cfg, orientation=False), progress=False, init=od)
    with pytest.raises(ConfigError, match="quat_column=4"):
        ObjectDynamicsConfig(orientation=True, quat_column=4)


def test_the_worlds_refuse_an_orientation_model():
    from benchmarks._split_worlds import check_state_model
    from wmrl.errors import WmrlError
    from worldmodels import make_world_model
    from worldmodels.modeling_common import WorldModelInputError
    from worldmodels.object_dynamics import ObjectDynamics, ObjectDynamicsConfig

    od = ObjectDynamics(ObjectDynamicsConfig(arm=True, orientation=True, hidden=8, layers=1))
    with pytest.raises(WmrlError, match="orientations"):
        check_state_model(od, 8)
    wm = make_world_model("deterministic", image_size=16, block_out_channels=[8, 16], env_state_dim=9)
    with pytest.raises(WorldModelInputError, match="orientations"):
        wm.attach_object_dynamics(od)



def test_the_benchmarks_batched_branches_match_cube_turns_and_its_fits_resume(tmp_path, monkeypatch):
    """``benchmarks.orientation_dynamics.branch`` (episodes batched and padded) gives ``cube_turns.branch_errors``'
    final errors; the oracle rollout fed the model's own orientations is its rollout; a fit is kept on a rerun."""
    from benchmarks import orientation_dynamics as od
    from benchmarks.cube_turns import branch_errors
    from worldmodels.object_dynamics import ObjectDynamics

    traj = od.expert_episodes(["PushCube-v0", "LiftCube-v0"], 3, [0.0, 0.6], 0, 32, progress=False)
    assert traj.env_states.shape[1] == 25 and traj.num_episodes == 6
    fits = {}
    for v in od.VARIANTS:
        metrics = od.fit_one(traj, v, 0, 30, 0.05, tmp_path / v, progress=False)
        assert metrics["data"] == od.data_fingerprint(traj)
        fits[v] = ObjectDynamics.from_pretrained(tmp_path / v)
    assert fits["orientation"].config.orientation and not fits["position"].config.orientation
    br = od.branch([fits["position"]], traj, 12)
    want = np.array(branch_errors([fits["position"]], traj, 12)["branch_error_m"])[br["episode"]]
    np.testing.assert_allclose(br["final_error_m"][0], want, rtol=1e-4, atol=1e-6)
    assert np.isnan(br["oracle_final_error_m"]).all() and np.isnan(br["final_angle_deg"]).all()

    m = fits["orientation"]
    es = torch.from_numpy(np.asarray(traj.env_states, np.float32))
    lo = int(traj.episode_bounds[0][0])
    s, t = lo + 12, 8
    prop = torch.from_numpy(np.asarray(traj.states[s - 1:s + 1], np.float32))[None]
    act = torch.from_numpy(np.asarray(traj.actions[s:s + t], np.float32))[None]
    cubes, quats = es[:, :9].view(-1, 3, 3), es[:, 13:25].view(-1, 3, 4)
    _, pos, q = m.rollout_with_orientations(prop[:, 1:], act, cubes[s][None], cubes[s - 1][None], quats[s][None],
                                            proprio_prev=prop[:, 0])
    own = torch.cat([quats[s][None, None], q[:, :-1]], 1)  # the orientation before each step
    torch.testing.assert_close(od._oracle_rollout(m, prop, act, cubes[s][None], cubes[s - 1][None], own), pos)

    monkeypatch.setattr("worldmodels.object_dynamics.fit_object_dynamics", lambda *a, **k: pytest.fail("refitted"))
    assert od.fit_one(traj, "orientation", 0, 30, 0.05, tmp_path / "orientation", progress=False)["data"]
    with pytest.raises(BaseException, match="refitted"):  # another schedule is another model
        od.fit_one(traj, "orientation", 0, 31, 0.05, tmp_path / "orientation", progress=False)
