"""The thin application layer: atomic writes, run folders, typed configs, CLI, videos."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from wmrl.config import to_dataclass
from wmrl.errors import CheckpointError, ConfigError, NonFiniteError
from wmrl.io import atomic_save_safetensors, atomic_write, atomic_write_json
from wmrl.runs import RunDir, check_finite, seed_everything
from wmrl.video import grid, side_by_side, write_video


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    path = tmp_path / "a.json"
    atomic_write_json(path, {"x": 1})

    def broken(p):
        p.write_text("partial")
        raise RuntimeError("crash mid-write")

    with pytest.raises(RuntimeError):
        atomic_write(path, broken)
    assert json.loads(path.read_text()) == {"x": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_safetensors_with_several_metadata_entries_are_written_byte_for_byte_alike(tmp_path):
    """safetensors orders metadata entries as a Rust HashMap does (differently on every save); the
    same tensors and metadata must give the same file, which safetensors reads back unchanged."""
    import torch
    from safetensors import safe_open

    meta = {f"{i:02x}-key": f"instruction \u00e9 {i}" for i in range(27)}
    tensors = {"w": torch.arange(6.0).view(2, 3), "n": torch.ones(3, dtype=torch.int64), "h": torch.ones(5).half()}
    files = [atomic_save_safetensors(tmp_path / f"f{j}.safetensors", tensors, meta) for j in range(4)]
    assert len({f.read_bytes() for f in files}) == 1
    raw = files[0].read_bytes()
    assert (8 + int.from_bytes(raw[:8], "little")) % 8 == 0  # the tensor data stays 8-byte aligned
    with safe_open(str(files[0]), framework="pt") as f:
        assert f.metadata() == meta
        for k, v in tensors.items():
            got = f.get_tensor(k)
            assert got.dtype == v.dtype and torch.equal(got, v)


def test_run_dir_metrics_checkpoints_and_resume(tmp_path):
    run = RunDir(tmp_path / "run", {"lr": 1e-3})
    assert (run.path / "config.yaml").read_text().startswith("lr:")
    run.log(1, {"loss": 0.5})
    for step in (10, 20, 30):
        run.save_checkpoint(step, lambda d, s=step: (d / "w.txt").write_text(str(s)), keep=2)
    latest = run.latest_checkpoint()
    assert latest.name == "step_000030" and RunDir.step_of(latest) == 30
    assert sorted(p.name for p in run.checkpoints.glob("step_*")) == ["step_000020", "step_000030"]
    # A failing checkpoint write leaves the previous one as latest.
    with pytest.raises(RuntimeError):
        run.save_checkpoint(40, lambda d: (_ for _ in ()).throw(RuntimeError("disk full")))
    assert RunDir(tmp_path / "run").latest_checkpoint().name == "step_000030"
    with pytest.raises(NonFiniteError, match="loss"):
        run.log(2, {"loss": float("nan")})
    assert [r["step"] for r in run.read_metrics()] == [1, 2]
    (run.checkpoints / "latest").write_text("step_999999\n")
    with pytest.raises(CheckpointError, match="does not exist"):
        run.latest_checkpoint()


def test_check_finite_and_seeding():
    import torch

    check_finite("ok", np.ones(3))
    with pytest.raises(NonFiniteError, match="reward is not finite"):
        check_finite("reward", torch.tensor([1.0, float("inf")]))
    seed_everything(3)
    a = torch.rand(3), np.random.rand(3)
    seed_everything(3)
    b = torch.rand(3), np.random.rand(3)
    assert torch.equal(a[0], b[0]) and np.array_equal(a[1], b[1])


@dataclasses.dataclass
class _Inner:
    width: int = 4


@dataclasses.dataclass
class _Cfg:
    lr: float = 1e-3
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    sizes: tuple[int, ...] = (1, 2)

    def __post_init__(self):
        if self.lr <= 0:
            raise ConfigError(f"{self.lr=} must be > 0")


def test_to_dataclass_is_strict():
    cfg = to_dataclass({"lr": 0.1, "inner": {"width": 8}, "sizes": [3]}, _Cfg)
    assert cfg.inner.width == 8 and cfg.sizes == (3,)
    with pytest.raises(ConfigError, match="unknown config key\\(s\\) inner.widht.*valid keys: width"):
        to_dataclass({"inner": {"widht": 8}}, _Cfg)
    with pytest.raises(ConfigError, match="self.lr=-1"):
        to_dataclass({"lr": -1}, _Cfg)


def test_videos(tmp_path):
    a = np.zeros((5, 16, 16, 3), np.uint8)
    b = np.full((3, 16, 16, 3), 200, np.uint8)
    sbs = side_by_side(a, b)
    assert sbs.shape == (5, 16, 34, 3) and (sbs[4, :, 20:] == 200).all()
    assert grid([a, b, a], ncols=2).shape == (5, 34, 34, 3)
    path = write_video(tmp_path / "v.mp4", sbs, fps=5)
    import imageio.v3 as iio

    frames = iio.imread(path)
    assert frames.shape[0] == 5 and frames.shape[1:3] == (64, 136)


def test_videos_without_imageio_ffmpeg_go_through_pyav(tmp_path, monkeypatch):
    """Where ``imageio-ffmpeg`` is not installed, PyAV writes the same H.264 mp4."""
    import av
    import imageio.v3 as iio

    import wmrl.video

    monkeypatch.setattr(wmrl.video, "_has_ffmpeg_plugin", lambda: False)
    a = np.zeros((4, 16, 16, 3), np.uint8)
    a[:, 4:12, 4:12] = 255
    path = write_video(tmp_path / "v.mp4", a, fps=5, scale=2)
    with av.open(str(path)) as c:
        assert c.streams.video[0].codec_context.name == "h264" and c.streams.video[0].average_rate == 5
    frames = iio.imread(path, plugin="pyav")
    assert frames.shape == (4, 32, 32, 3) and frames[:, 12:20, 12:20].mean() > 200 and frames[:, :4, :4].mean() < 30


def test_cli_help_and_unknown_command():
    r = subprocess.run([sys.executable, "-m", "wmrl.cli", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "collect" in r.stdout and "run" in r.stdout
    r = subprocess.run([sys.executable, "-m", "wmrl.cli", "frobnicate"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip() == (
        "error: unknown command 'frobnicate'; valid commands: collect, train-world-model, train-policy, "
        "train-rewards, imagine, evaluate, run"
    )


def test_train_speed_refuses_bad_arguments_before_any_work(tmp_path):
    from benchmarks import train_speed
    from wmrl.errors import WmrlError

    out = tmp_path / "ts.json"
    with pytest.raises(WmrlError, match=r"--repeats=0 must be >= 1"):
        train_speed.main(["--quick", "--repeats", "0", "--out", str(out)])
    with pytest.raises(WmrlError, match=r"--dataset=.*nowhere does not exist"):
        train_speed.main(["--quick", "--dataset", str(tmp_path / "nowhere"), "--out", str(out)])
    assert not out.exists()


def test_determinism_benchmark_refuses_bad_arguments_and_compares_weights(tmp_path):
    """``benchmarks.determinism``: a bad ``--steps`` / ``--run`` is a one-line error before any work; its
    weight comparison tells identical files from ones that differ in one tensor."""
    import torch
    from safetensors.torch import save_file

    from benchmarks import determinism
    from wmrl.errors import WmrlError

    out = tmp_path / "det.json"
    with pytest.raises(WmrlError, match=r"--steps=0 must be >= 1"):
        determinism.main(["--steps", "0", "--out", str(out)])
    with pytest.raises(WmrlError, match=r"--run .*nowhere: no demos at"):
        determinism.main(["--run", str(tmp_path / "nowhere"), "--out", str(out)])
    assert not out.exists()
    w = {"a": torch.zeros(3), "b": torch.ones(2)}
    for name, tensors in (("x", w), ("y", w), ("z", {**w, "b": torch.tensor([1.0, 1.5])})):
        save_file(tensors, str(tmp_path / f"{name}.safetensors"))
    same = determinism.compare_weights(str(tmp_path / "x.safetensors"), str(tmp_path / "y.safetensors"))
    assert same["identical"] and same["tensors_differing"] == 0 and same["max_abs_diff"] == 0.0
    diff = determinism.compare_weights(str(tmp_path / "x.safetensors"), str(tmp_path / "z.safetensors"))
    assert not diff["identical"] and diff["tensors_differing"] == 1 and diff["max_abs_diff"] == 0.5


def test_sim_throughput_quick_writes_json(tmp_path):
    from benchmarks import sim_throughput

    out = tmp_path / "st.json"
    assert sim_throughput.main(["--quick", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    for key in ("batched_1", "batched_16", "batched_64", "sync_vector_16", "pusher_v5"):
        assert res["steps_per_s"][key] > 0
    assert res["ratio_vs_sync_vector_16"] > 0 and "machine" in res and "versions" in res
    assert set(res["render_option_cost"]) == {"shadows", "supersample2", "untiled", "untiled_64"}
    assert all(v > 0 for v in res["render_option_cost"].values())
