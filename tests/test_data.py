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
