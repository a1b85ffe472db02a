"""Frames nobody reads are not drawn (``skip_next_frames``, :mod:`envs.base`): the built-in suite, the
state-model worlds and the renderer-drawn real env skip them on request, ``ActionChunkWrapper(frames=
"chunk_end")`` asks for it inside a chunk, and every frame that is read is the one drawing every frame
gives, to the pixel."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import envs
from benchmarks._split_worlds import RendererDrawnRealEnv, StateModelVectorEnv
from benchmarks.chunk_end_frames import EveryFrame
from envs.tabletop.render import BatchRenderer
from envs.wrappers import ActionChunkWrapper
from wmrl.errors import WmrlError
from worldmodels.object_dynamics import ObjectDynamics, ObjectDynamicsConfig
from worldmodels.state_renderer import StateRenderer, StateRendererConfig

SIZE = 32
TASKS = ["PushCube-v0", "LiftCube-v0", "StackCube-v0"]


def _real(n: int = 6, mode: str = "same_step", **kw):
    return envs.make_vec(TASKS * (n // 3), n, image_size=SIZE, autoreset_mode=mode, max_episode_steps=7, seed=0, **kw)


def _arm_model(seed: int = 0) -> ObjectDynamics:
    """A small random arm-and-object state model (its steps move the tcp and the cubes a little)."""
    torch.manual_seed(seed)
    m = ObjectDynamics(ObjectDynamicsConfig(arm=True, hidden=8, layers=1))
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(0.05)
    return m.eval()


def _renderer() -> StateRenderer:
    torch.manual_seed(0)
    return StateRenderer(StateRendererConfig(image_size=SIZE, channels=[8, 16, 16, 16])).eval()


def test_untiled_frames_draw_a_state_the_same_alone_in_a_subset_and_anywhere_in_the_batch():
    """``tiled_frames=False`` draws each frame alone at the buffer's origin: as tiles, 32 of these 552 frames differed
    by a pixel between places in the batch (session 87), and an episode's outcome could depend on its batch."""
    env = envs.make_vec("PushCube-v0", 24, image_size=64, wrist_image=True, tiled_frames=False).unwrapped
    env.reset(seed=list(range(500, 524)))
    env.step(np.random.default_rng(0).uniform(-1, 1, (24, 7)).astype(np.float32))
    r, q, m = env._renderer, env._qpos, env._mocap
    full = r.render(q, m)
    back = r.render(q[::-1], m[::-1])
    sub = r.render(q[[1, 4, 5]], m[[1, 4, 5]])
    for c in range(2):  # both cameras
        np.testing.assert_array_equal(back[c][::-1], full[c])
        np.testing.assert_array_equal(sub[c], full[c][[1, 4, 5]])
        for i in range(24):
            np.testing.assert_array_equal(r.render(q[i : i + 1], m[i : i + 1])[c][0], full[c][i])
    env.close()


def test_tiled_frames_draw_a_subset_at_its_slots_exactly_as_the_whole_batch():
    """Tiled (the default): a subset drawn in its sub-envs' tiles gets the whole batch's pixels, and the first tile
    (sub-env 0's agent view) is the place where ``tiled_frames=False`` draws every frame."""
    env = _real(6, wrist_image=True).unwrapped
    env.reset(seed=list(range(6)))
    env.step(np.random.default_rng(0).uniform(-1, 1, (6, 7)).astype(np.float32))
    assert env._renderer.tiled
    full = env._renderer.render(env._qpos, env._mocap)
    ids = np.array([1, 4, 5])
    sub = env._renderer.render(env._qpos[ids], env._mocap[ids], ids)
    alone = BatchRenderer(env.model, SIZE, ("agentview", "wrist"), tiled=False).render(env._qpos[:1], env._mocap[:1])
    for f, s in zip(full, sub):  # both cameras
        np.testing.assert_array_equal(s, f[ids])
    np.testing.assert_array_equal(alone[0][0], full[0][0])
    env.close()


@pytest.mark.parametrize("mode", ["same_step", "next_step"])
def test_skipped_frames_hold_the_last_drawn_and_every_other_frame_is_exact(mode):
    wrist = mode == "next_step"
    twin, env = _real(6, mode, wrist_image=wrist), _real(6, mode, wrist_image=wrist)
    twin.reset(seed=list(range(6)))
    obs, _ = env.reset(seed=list(range(6)))
    last = {k: v.copy() for k, v in obs.items() if k.endswith("image")}
    rng = np.random.default_rng(1)
    restarted = np.zeros(6, bool)  # next_step: those that ended last step restart on this one
    drawn_rows = 0
    for t in range(20):
        a = rng.uniform(-1, 1, (6, 7)).astype(np.float32)
        skip = rng.random(6) < 0.6
        env.unwrapped.skip_next_frames(skip)
        o_t, r_t, te_t, tr_t, i_t = twin.step(a)
        o, r, te, tr, i = env.step(a)
        np.testing.assert_array_equal(o["state"], o_t["state"])
        np.testing.assert_array_equal(r, r_t)
        done = te | tr
        fresh = ~skip | (done if mode == "same_step" else restarted)  # restarted: always drawn
        for k in last:
            np.testing.assert_array_equal(o[k][fresh], o_t[k][fresh])
            np.testing.assert_array_equal(o[k][~fresh], last[k][~fresh])
            if "final_obs" in i:  # a same-step final frame is drawn unless skipped
                np.testing.assert_array_equal(i["final_obs"][k][done & ~skip], i_t["final_obs"][k][done & ~skip])
            last[k] = o[k].copy()
        drawn_rows += int(fresh.sum())
        restarted = done
        if t == 9:  # a reset of some sub-envs draws only those
            m = np.array([True, False, False, True, False, False])
            o_t, _ = twin.reset(options={"reset_mask": m})
            o, _ = env.reset(options={"reset_mask": m})
            for k in last:
                np.testing.assert_array_equal(o[k][m], o_t[k][m])
                np.testing.assert_array_equal(o[k][~m], last[k][~m])
                last[k] = o[k].copy()
            restarted[:] = False
    assert 0 < drawn_rows < 6 * 20
    with pytest.raises(WmrlError, match=r"skip has shape \(5,\) and dtype bool; expected bool \(6,\)"):
        env.unwrapped.skip_next_frames(np.zeros(5, bool))
    twin.close()
    env.close()


def _play_chunks(env, frames: str, chunks: int = 6, k: int = 3, seed: int = 0) -> list[tuple]:
    """What a policy sees and gets over ``chunks`` random chunks: per chunk (obs, reward, terminated,
    truncated, success, chunk_valid, final_obs states)."""
    env = ActionChunkWrapper(env, k, frames=frames)
    obs, _ = env.reset(seed=list(range(env.num_envs)))
    rng = np.random.default_rng(seed)
    out = [({kk: v.copy() for kk, v in obs.items()},)]
    for _ in range(chunks):
        a = rng.uniform(-1, 1, (env.num_envs, k, 7)).astype(np.float32)
        obs, r, te, tr, info = env.step(a)
        assert ("chunk_frames" in info) == (frames == "all")
        final = info["final_obs"]["state"].copy() if "final_obs" in info else None
        out.append(({kk: v.copy() for kk, v in obs.items()}, r, te, tr, info["success"], info["chunk_valid"], final))
    env.close()
    return out


def _assert_same_play(a: list[tuple], b: list[tuple]) -> None:
    for x, y in zip(a, b, strict=True):
        for u, v in zip(x, y, strict=True):
            if isinstance(u, dict):
                assert u.keys() == v.keys()
                for kk in u:
                    np.testing.assert_array_equal(u[kk], v[kk])
            elif u is None or v is None:
                assert u is None and v is None
            else:
                np.testing.assert_array_equal(u, v)


def test_chunk_end_frames_give_a_policy_what_every_frame_gives():
    env = _real(6)
    skipped = []
    orig = env.skip_next_frames
    env.skip_next_frames = lambda s: (skipped.append(s.copy()), orig(s))[1]
    _assert_same_play(_play_chunks(_real(6), "all"), _play_chunks(env, "chunk_end"))
    assert skipped and any(s.all() for s in skipped)  # asked: the steps inside a chunk skip every frame
    with pytest.raises(WmrlError, match="frames='some'; expected 'all' or 'chunk_end'"):
        ActionChunkWrapper(_real(3), 2, frames="some")


@pytest.mark.parametrize("world", ["simulator_drawn", "real_prefix", "renderer_drawn", "renderer_drawn_real"])
def test_chunk_end_frames_are_exact_in_the_split_worlds(world):
    renderer = _renderer() if world.startswith("renderer") else None

    def make():
        if world == "renderer_drawn_real":
            return RendererDrawnRealEnv(_real(6), renderer)
        return StateModelVectorEnv(_real(6), _arm_model(), renderer=renderer, gate="terminate",
                                   real_steps=4 if world == "real_prefix" else 0)

    _assert_same_play(_play_chunks(make(), "all", seed=3), _play_chunks(make(), "chunk_end", seed=3))


def test_evaluation_draws_only_what_the_policy_and_the_videos_read():
    from benchmarks.policy_eval import _Actor, _run_batch

    class ChunkActor(_Actor):  # acts on the frame it is given, three steps at a time
        description = "frame actor"

        def chunk(self, obs, info, env):
            m = obs["image"].reshape(len(obs["image"]), -1).mean(1, keepdims=True) / 255.0
            a = np.tanh(np.concatenate([m - 0.5, np.sin(m * 40), np.cos(m * 30), m, m, m, np.sin(m * 90)], 1))
            return np.repeat(a[:, None], 3, axis=1).astype(np.float32)

    want = _run_batch(EveryFrame(_real(6, "next_step")), ChunkActor(), list(range(6)), 7, record=2)
    got = _run_batch(_real(6, "next_step"), ChunkActor(), list(range(6)), 7, record=2)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    for f, g in zip(got[2], want[2], strict=True):  # the video frames
        np.testing.assert_array_equal(np.stack(f), np.stack(g))


def test_chunk_end_frames_benchmark_bad_input_is_a_one_line_error(tmp_path, capsys):
    from benchmarks.chunk_end_frames import main

    out = tmp_path / "r.json"
    assert main(["--run-dir", str(tmp_path / "norun"), "--out", str(out)]) == 2
    assert main(["--repeats", "0", "--out", str(out)]) == 2
    errs = capsys.readouterr().err.strip().splitlines()
    assert len(errs) == 2 and all(e.startswith("error: ") for e in errs)
    assert "is not a wmrl run folder" in errs[0] and "--repeats 0" in errs[1] and not out.exists()
