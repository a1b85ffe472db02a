"""LeRobotDataset recording and loading, read back with lerobot's own LeRobotDataset."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from wmrl.collect import collect
from wmrl.data import load_trajectories
from wmrl.errors import DatasetError


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("data") / "demo"
    collect(str(out), "builtin", episodes=8, noise=[0.0, 0.5], num_envs=4, seed=0, wrist=True, progress=False)
    return out


def test_roundtrip_with_our_loader(dataset):
    t = load_trajectories(dataset)
    assert t.num_episodes == 8
    assert t.images.shape[1:] == (64, 64, 3) and t.images.dtype == np.uint8
    assert t.wrist_images is not None and t.wrist_images.shape == t.images.shape
    assert t.states.shape == (t.num_frames, 8) and t.actions.shape == (t.num_frames, 7)
    assert set(t.episode_task_ids()) <= {
        "PushCube-v0",
        "PushCubeSpatial-v0",
        "LiftCube-v0",
        "PlaceInBowl-v0",
        "PlaceInSpatialBowl-v0",
        "StackCube-v0",
    }
    b = t.episode_bounds
    assert (t.dones[b[:, 1] - 1]).all() and t.dones.sum() == t.num_episodes
    assert all(isinstance(s, str) and "cube" in s for s in t.instructions)
    starts = t.window_starts(4, 8)
    assert len(starts) and all(t.episode_index[s] == t.episode_index[s + 11] for s in starts)
    train, test = t.split_episodes(0.25, seed=0)
    assert train.num_episodes + test.num_episodes == 8


def test_lerobot_reads_multiframe_windows(dataset):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    fps = 20
    ds = LeRobotDataset(
        "local/demo",
        root=dataset,
        delta_timestamps={
            "observation.image": [-3 / fps, -2 / fps, -1 / fps, 0.0],
            "action": [k / fps for k in range(8)],
        },
    )
    item = ds[10]
    assert item["observation.image"].shape == (4, 3, 64, 64)
    assert item["action"].shape == (8, 7)
    ours = load_trajectories(dataset)
    np.testing.assert_allclose(item["action"][0].numpy(), ours.actions[10], atol=1e-6)
    img = (item["observation.image"][-1].permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
    np.testing.assert_array_equal(img, ours.images[10])


def test_refuses_to_overwrite_and_appends(dataset):
    before = load_trajectories(dataset).num_episodes
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "wmrl.cli",
            "collect",
            "--suite",
            "builtin",
            "--episodes",
            "2",
            "--out",
            str(dataset),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "already exists" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert load_trajectories(dataset).num_episodes == before
    collect(
        str(dataset),
        "LiftCube-v0",
        episodes=2,
        noise=[0.0],
        num_envs=2,
        wrist=True,
        append=True,
        progress=False,
    )
    assert load_trajectories(dataset).num_episodes == before + 2


def test_missing_or_incomplete_dataset(tmp_path):
    with pytest.raises(DatasetError, match="no dataset at"):
        load_trajectories(tmp_path / "nothing")


def test_cli_unknown_task_exits_nonzero(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "wmrl.cli",
            "collect",
            "--task",
            "Nope-v0",
            "--episodes",
            "1",
            "--out",
            str(tmp_path / "x"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "unknown task or suite 'Nope-v0'" in r.stderr
    assert not (tmp_path / "x").exists()


def test_loads_community_libero_layout(tmp_path):
    """A LIBERO demo dataset in the community LeRobot layout (written here, image features)."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    img = {"dtype": "image", "shape": (32, 32, 3), "names": ["height", "width", "channels"]}
    feats = {
        "observation.images.image": img,
        "observation.images.wrist_image": dict(img),
        "observation.state": {"dtype": "float32", "shape": (8,), "names": None},
        "action": {"dtype": "float32", "shape": (7,), "names": None},
    }
    root = tmp_path / "libero_demo"
    ds = LeRobotDataset.create("local/libero_demo", fps=10, features=feats, root=root, use_videos=False)
    rng = np.random.default_rng(0)
    for ep, task in enumerate(["put the bowl on the plate", "open the top drawer"]):
        for t in range(5 + ep):
            ds.add_frame(
                {
                    "observation.images.image": rng.integers(0, 255, (32, 32, 3), dtype=np.uint8),
                    "observation.images.wrist_image": np.full((32, 32, 3), t, np.uint8),
                    "observation.state": np.full(8, t, np.float32),
                    "action": np.full(7, ep, np.float32),
                    "task": task,
                }
            )
        ds.save_episode()
    ds.finalize()
    with pytest.raises(DatasetError, match="lacks feature"):
        load_trajectories(root)  # not wmrl's layout: no next.* features
    t = load_trajectories(root, successful_demos=True)
    assert t.num_episodes == 2 and t.num_frames == 11 and t.image_size == 32
    assert t.wrist_images is not None and t.wrist_images[3, 0, 0, 0] == 3
    assert t.instructions[0] == "put the bowl on the plate" and t.instructions[-1] == "open the top drawer"
    assert t.successes.tolist() == [False] * 4 + [True] + [False] * 5 + [True]
    assert t.episode_success.all() and (t.actions[5:] == 1).all()


def test_background_writer_records_the_same_dataset_and_stops_on_a_writer_error(tmp_path):
    from wmrl.data import DatasetRecorder, read_episode_meta

    bg, fg = tmp_path / "bg", tmp_path / "fg"
    for out, background in ((bg, True), (fg, False)):
        collect(str(out), "builtin", episodes=8, noise=[0.0, 0.5], num_envs=4, seed=0, wrist=True, progress=False,
                background_writer=background)
    a, b = load_trajectories(bg), load_trajectories(fg)
    for k in ("images", "wrist_images", "states", "actions", "rewards", "successes", "episode_index",
              "frame_index"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k), err_msg=k)
    assert a.instructions == b.instructions and read_episode_meta(bg) == read_episode_meta(fg)
    np.testing.assert_array_equal(a.terminal.images, b.terminal.images)

    import envs

    env = envs.make_vec("PushCube-v0", 2, seed=0, image_size=64, autoreset_mode="same_step")
    rec = DatasetRecorder(tmp_path / "broken", fps=20, image_size=64, state_dim=8)
    calls = []

    def failing_write(*args):
        calls.append(1)
        if len(calls) == 2:
            raise DatasetError("disk full")
        return len(calls) - 1

    rec.add_episode = failing_write  # a writer failure inside the worker thread
    expert = envs.make_expert(env, noise=0.0, seed=0)
    with pytest.raises(DatasetError, match="disk full"):
        rec.record(env, expert.act, 6, progress=False)
    env.close()
    assert not (tmp_path / "broken").exists()  # nothing under the final name


def test_terminal_sidecar_roundtrip(tmp_path):
    """Each episode's terminal observation (never in the frame table) is written to
    meta/wmrl_terminal.npz and read back exactly, also across an append and an episode split."""
    from wmrl.data import TERMINAL_SIDECAR, DatasetRecorder

    rng = np.random.default_rng(0)

    def episode(t_len: int, success: bool) -> tuple[dict, dict]:
        steps = {
            "image": rng.integers(0, 255, (t_len, 32, 32, 3), dtype=np.uint8),
            "wrist_image": rng.integers(0, 255, (t_len, 32, 32, 3), dtype=np.uint8),
            "state": rng.normal(size=(t_len, 8)).astype(np.float32),
            "action": rng.uniform(-1, 1, (t_len, 7)).astype(np.float32),
            "reward": np.zeros(t_len, np.float32),
            "success": np.array([False] * (t_len - 1) + [success]),
            "done": np.array([False] * (t_len - 1) + [True]),
        }
        term = {
            "image": rng.integers(0, 255, (32, 32, 3), dtype=np.uint8),
            "wrist_image": rng.integers(0, 255, (32, 32, 3), dtype=np.uint8),
            "state": rng.normal(size=8).astype(np.float32),
        }
        return steps, term

    root = tmp_path / "ds"
    eps = [episode(4, True), episode(3, False)]
    rec = DatasetRecorder(root, fps=20, image_size=32, state_dim=8, wrist=True)
    for steps, term in eps:
        rec.add_episode(steps, "push the cube", {"task_id": "PushCube-v0"}, terminal=term)
    assert not root.exists()  # an interrupted collection leaves no half dataset under the final name
    rec.finalize()
    assert (root / TERMINAL_SIDECAR).exists() and not root.with_name("ds.tmp-new").exists()
    t = load_trajectories(root)
    assert t.terminal is not None and t.terminal.images.shape == (2, 32, 32, 3)
    for k, (_steps, term) in enumerate(eps):
        np.testing.assert_array_equal(t.terminal.images[k], term["image"])
        np.testing.assert_array_equal(t.terminal.wrist_images[k], term["wrist_image"])
        np.testing.assert_allclose(t.terminal.states[k], term["state"])
    assert t.terminal.successes.tolist() == [True, False]
    np.testing.assert_array_equal(t.images[:4], eps[0][0]["image"])  # the frame table is unchanged

    more = episode(5, True)
    rec = DatasetRecorder(root, fps=20, image_size=32, state_dim=8, wrist=True, append=True)
    rec.add_episode(more[0], "push the cube", {"task_id": "PushCube-v0"}, terminal=more[1])
    rec.finalize()
    t = load_trajectories(root)
    assert t.num_episodes == 3 and t.terminal.successes.tolist() == [True, False, True]
    np.testing.assert_array_equal(t.terminal.images[2], more[1]["image"])
    sub = t.select_episodes([2, 0])
    np.testing.assert_array_equal(sub.terminal.images[0], more[1]["image"])
    np.testing.assert_array_equal(sub.terminal.images[1], eps[0][1]["image"])
    both = type(t).concat([sub, t])
    assert both.terminal is not None and len(both.terminal.images) == both.num_episodes == 5


def test_collect_writes_terminal_and_absent_sidecar_is_none(dataset, tmp_path):
    """`wmrl collect` stores the terminal observations (the success frame of successful episodes);
    a dataset without the sidecar (e.g. recorded before it existed) loads with terminal=None."""
    import shutil

    from wmrl.data import TERMINAL_SIDECAR

    t = load_trajectories(dataset)
    assert t.terminal is not None and len(t.terminal.images) == t.num_episodes
    assert t.terminal.wrist_images is not None and t.terminal.states.shape == (t.num_episodes, 8)
    last = t.episode_bounds[:, 1] - 1
    assert t.terminal.successes.tolist() == t.successes[last].tolist()
    assert t.terminal.successes.any()
    # the terminal frame is a new observation, not a copy of the last stored one
    assert (t.terminal.images != t.images[last]).reshape(t.num_episodes, -1).any(1).all()
    copy = tmp_path / "no_sidecar"
    shutil.copytree(dataset, copy)
    (copy / TERMINAL_SIDECAR).unlink()
    assert load_trajectories(copy).terminal is None


def test_collect_records_supersample_and_shadows_and_refuses_them_for_other_backends(tmp_path):
    from wmrl.data import read_episode_meta
    from wmrl.errors import WmrlError

    out = tmp_path / "ss2"
    collect(str(out), "PushCube-v0", 2, [0.0], num_envs=2, seed=0, supersample=2, progress=False)
    meta = read_episode_meta(out)
    assert sorted(meta) == [0, 1] and {m["supersample"] for m in meta.values()} == {2}
    assert load_trajectories(out).images.shape[1:] == (64, 64, 3)
    with pytest.raises(WmrlError, match="--supersample=2 is for the built-in suite; the maniskill backend"):
        collect(str(tmp_path / "ms"), "PickCube-v1", 2, [0.0], supersample=2, progress=False)
    with pytest.raises(WmrlError, match="--shadows is for the built-in suite; the maniskill backend"):
        collect(str(tmp_path / "ms"), "PickCube-v1", 2, [0.0], shadows=True, progress=False)
    assert not (tmp_path / "ms").exists()
    lit = tmp_path / "shadows"
    collect(str(lit), "PushCube-v0", 1, [0.0], num_envs=1, seed=0, shadows=True, progress=False)
    assert [m["shadows"] for m in read_episode_meta(lit).values()] == [True]
    assert [m["shadows"] for m in meta.values()] == [False, False]


def test_collect_records_the_environment_state_beside_each_observation(dataset):
    """``observation.environment_state`` (cube xyz, goal xy, target / goal index) is recorded for the
    state the frame shows: an episode's first row is its reset layout, the targets are constant, and
    a cube moves only while the episode runs."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from envs.tabletop.environment_state import ENV_STATE_DIM

    t = load_trajectories(dataset)
    assert t.env_states is not None and t.env_states.shape == (t.num_frames, ENV_STATE_DIM)
    for s, e in t.episode_bounds:
        ep = t.env_states[s:e]
        np.testing.assert_array_equal(ep[:, 11:], np.repeat(ep[:1, 11:], e - s, 0))  # target / goal fixed
        np.testing.assert_allclose(ep[0, 2:9:3], 0.025, atol=2e-3)  # every cube rests on the table at reset
    moved = [np.abs(t.env_states[e - 1, :9] - t.env_states[s, :9]).max() for s, e in t.episode_bounds]
    assert max(moved) > 0.02  # the experts moved cubes
    item = LeRobotDataset("local/demo", root=dataset)[3]
    np.testing.assert_allclose(item["observation.environment_state"].numpy(), t.env_states[3], atol=1e-6)


def test_without_frames_keeps_every_array_but_the_pixels_and_concatenates(dataset):
    """Trajectories.without_frames: a (N,1,1,3) black placeholder that takes no memory instead of the frames
    (terminal ones too), no wrist frames, every other array shared; stripped datasets concatenate, and a
    stripped dataset does not concatenate with one that has frames (a one-line error)."""
    from wmrl.data import Trajectories

    t = load_trajectories(dataset)
    assert t.wrist_images is not None and t.terminal is not None
    b = t.without_frames()
    assert b.images.shape == (t.num_frames, 1, 1, 3) and not b.images.any() and b.images.base.nbytes == 3
    assert b.wrist_images is None and b.terminal.images.shape == (t.num_episodes, 1, 1, 3)
    for name in ("states", "actions", "successes", "episode_index", "env_states"):
        assert np.shares_memory(getattr(b, name), getattr(t, name))
    np.testing.assert_array_equal(b.terminal.states, t.terminal.states)
    np.testing.assert_array_equal(b.episode_success, t.episode_success)
    both = Trajectories.concat([b, t.select_episodes([0, 1]).without_frames()])
    assert both.num_episodes == t.num_episodes + 2 and both.images.nbytes == 3 * both.num_frames
    np.testing.assert_array_equal(both.env_states[: t.num_frames], t.env_states)
    with pytest.raises(DatasetError, match=r"cannot concatenate datasets with frames \(64, 64, 3\)"):
        Trajectories.concat([b, t])


def test_concat_with_npz_fills_the_files_frames_in_place_as_concat_of_the_loaded_files(dataset, tmp_path):
    """wmrl.data.concat_with_npz(head, files) equals Trajectories.concat([head, *loaded files]) in every array
    (frames decompressed into the result a chunk at a time, also in chunks that do not divide a frame);
    load_trajectories_npz(frames=False) reads all but the frames; a file whose frames have another size, or a
    truncated one, is a one-line DatasetError."""
    from dataclasses import replace

    from wmrl.data import (
        Trajectories,
        _read_npz_member_into,
        concat_with_npz,
        load_trajectories_npz,
        save_trajectories_npz,
    )

    t = load_trajectories(dataset)
    head = t.select_episodes([0, 1, 2])
    paths = [tmp_path / "a.npz", tmp_path / "b.npz"]
    save_trajectories_npz(paths[0], t.select_episodes([5, 3]))
    save_trajectories_npz(paths[1], t.select_episodes([7]))
    ref = Trajectories.concat([head, *(load_trajectories_npz(p) for p in paths)])
    got = concat_with_npz(head, paths)
    assert got.num_episodes == 6 and got.wrist_images is None and got.terminal is None
    for name in ("images", "states", "actions", "rewards", "successes", "dones", "episode_index", "frame_index",
                 "env_states", "episode_weights"):
        a, b = getattr(got, name), getattr(ref, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert got.instructions == ref.instructions and got.task_ids == ref.task_ids
    assert got.images.flags.c_contiguous and got.images.flags.writeable
    # leaving a task's episodes out: as if they had never been in the files
    t0, t1 = (load_trajectories_npz(p) for p in paths)
    task = t0.episode_task_ids()[0]
    kept = [x.select_episodes([i for i, k in enumerate(x.episode_task_ids()) if k != task]) for x in (t0, t1)]
    ref = Trajectories.concat([head, *kept])
    got = concat_with_npz(head, paths, drop_tasks={task})
    assert got.num_episodes == ref.num_episodes < 6 and task not in got.episode_task_ids()[3:]
    for name in ("images", "states", "actions", "episode_index", "frame_index", "env_states"):
        assert np.array_equal(getattr(got, name), getattr(ref, name)), name
    assert got.instructions == ref.instructions
    small = np.empty_like(load_trajectories_npz(paths[1]).images)
    _read_npz_member_into(paths[1], "images", small, chunk=1000)  # 1000 bytes: not a whole number of frames
    np.testing.assert_array_equal(small, load_trajectories_npz(paths[1]).images)

    light = load_trajectories_npz(paths[0], frames=False)
    assert light.images.shape == (light.num_frames, 1, 1, 3) and light.images.base.nbytes == 3
    np.testing.assert_array_equal(light.states, t.select_episodes([5, 3]).states)

    other = t.select_episodes([4])
    save_trajectories_npz(tmp_path / "small.npz", replace(other, images=other.images[:, ::2, ::2].copy()))
    with pytest.raises(DatasetError, match=r"small.npz holds frames of shape \(\d+, 32, 32, 3\); expected"):
        concat_with_npz(head, [paths[0], tmp_path / "small.npz"])
    data = paths[1].read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match="cut.npz is not a readable trajectories .npz"):
        concat_with_npz(head, [tmp_path / "cut.npz"])
    bad = bytearray(data)  # the frames' compressed bytes come first: damage them, keep the zip's directory
    bad[len(data) // 4 : len(data) // 4 + 64] = bytes(64)
    (tmp_path / "bad.npz").write_bytes(bytes(bad))
    with pytest.raises(DatasetError, match="bad.npz: cannot read images .*corrupt file"):
        concat_with_npz(head, [tmp_path / "bad.npz"])
