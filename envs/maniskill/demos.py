"""ManiSkill motion-planning demos -> LeRobotDataset (the core's :class:`wmrl.data.DatasetRecorder`).

Usage::

    python -m envs.maniskill.demos --task PickCube-v1 --num 5 --image-size 64 --out data/ms_pickcube

Steps (all offline): (1) ManiSkill's motion planner (``mani_skill.examples.motionplanning.panda
.run``, CPU, only successful episodes) writes ``pd_joint_pos`` trajectories; (2) ManiSkill's
``replay_trajectory`` re-executes them with the controller we train with, ``pd_ee_delta_pose``,
rendering the 128x128 base camera; (3) a script in the ManiSkill venv reads the replayed .h5,
resizes frames (area interpolation) to ``--image-size``, flattens the state exactly like the
env backend (qpos, qvel, task extras) and flips the gripper sign to the core convention (+1
closes); (4) the core writes the LeRobotDataset. Reward per step is ManiSkill's success flag.
Steps 1-2 run in the ManiSkill venv (mplib needs numpy < 2).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from envs.maniskill import TASKS
from envs.maniskill.vector_env import SETUP_SCRIPT, maniskill_worker_env
from envs.subproc_vec import venv_python
from wmrl.errors import WmrlError

_EXTRACT = r"""
import sys, json, h5py, numpy as np, cv2
h5, out, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
f = h5py.File(h5)
meta = json.load(open(h5[:-3] + ".json"))
eps = {}
for k, ep in enumerate(meta["episodes"]):
    g = f[f"traj_{ep['episode_id']}"]
    o = g["obs"]
    parts = [np.asarray(o["agent"][k2], np.float32).reshape(len(o["agent"]["qpos"]), -1) for k2 in o["agent"]]
    parts += [np.asarray(o["extra"][k2], np.float32).reshape(len(o["agent"]["qpos"]), -1) for k2 in o["extra"]]
    state = np.concatenate(parts, 1)[:-1]
    rgb = np.asarray(o["sensor_data"]["base_camera"]["rgb"])[:-1]
    img = np.stack([cv2.resize(x, (size, size), interpolation=cv2.INTER_AREA) for x in rgb]) if rgb.shape[1] != size else rgb
    act = np.asarray(g["actions"], np.float32).copy()
    act[:, 6] = -act[:, 6]
    succ = np.asarray(g["success"], bool)
    eps[f"ep{k}_image"] = img; eps[f"ep{k}_state"] = state; eps[f"ep{k}_action"] = act
    eps[f"ep{k}_success"] = succ; eps[f"ep{k}_seed"] = np.array(ep["episode_seed"])
np.savez(out, n=np.array(len(meta["episodes"])), **eps)
"""


def generate(task: str, num: int, image_size: int, out: str | Path, overwrite: bool = False) -> Path:
    """Generate ``num`` successful motion-planning demos of ``task`` and write them to ``out``
    as a LeRobotDataset (``observation.image`` (S,S,3), ``observation.state`` (29 for
    PickCube), ``action`` (7) in pd_ee_delta_pose with gripper +1 = close).

    ``task`` is a registered ManiSkill task id, or a variant such as ``PickCube-v1-mp100`` (the
    planner runs its ManiSkill env; episodes are recorded under the variant id)."""
    from envs.maniskill import VARIANTS

    valid = [*TASKS, *VARIANTS]
    if task not in valid:
        raise WmrlError(f"unknown ManiSkill task {task!r}; valid: {', '.join(valid)}")
    if not isinstance(num, int) or num < 1:
        raise WmrlError(f"num={num!r} demos must be an integer >= 1")
    ms_task = VARIANTS[task][0] if task in VARIANTS else task
    from envs.base import check_image_size

    image_size = check_image_size(image_size)
    py = str(venv_python("maniskill", "WMRL_MANISKILL_PYTHON", SETUP_SCRIPT, "mani-skill 3.0.1, mplib"))
    import os

    env = {**os.environ, **maniskill_worker_env()}
    env.pop("PYTHONPATH", None)
    with tempfile.TemporaryDirectory(prefix="wmrl-msdemos-") as tmp:

        def run(args: list[str]) -> None:
            r = subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True)
            if r.returncode != 0:
                raise WmrlError(f"{' '.join(args[1:4])} failed (exit {r.returncode}): {r.stderr.strip()[-400:]}")

        run([py, "-m", "mani_skill.examples.motionplanning.panda.run", "-e", ms_task, "-n", str(num), "-b", "cpu",
             "--only-count-success", "--record-dir", tmp])
        raw = sorted(Path(tmp).glob(f"{ms_task}/motionplanning/*.h5"))
        if not raw:
            raise WmrlError(f"the motion planner wrote no trajectory for {ms_task}")
        run([py, "-m", "mani_skill.trajectory.replay_trajectory", "--traj-path", str(raw[0]),
             "--target-control-mode", "pd_ee_delta_pose", "--obs-mode", "rgb", "--save-traj",
             "--use-first-env-state", "--sim-backend", "cpu", "--num-envs", "1"])
        replayed = sorted(Path(tmp).glob(f"{ms_task}/motionplanning/*.rgb.pd_ee_delta_pose.*.h5"))
        if not replayed:
            raise WmrlError(f"replay_trajectory wrote no pd_ee_delta_pose trajectory for {ms_task}")
        npz = Path(tmp) / "eps.npz"
        run([py, "-c", _EXTRACT, str(replayed[0]), str(npz), str(image_size)])
        data = np.load(npz)
        from wmrl.data import DatasetRecorder

        n = int(data["n"])
        state_dim = data["ep0_state"].shape[1]
        rec = DatasetRecorder(out, fps=20, image_size=image_size, state_dim=state_dim, overwrite=overwrite)
        for k in range(n):
            succ = data[f"ep{k}_success"]
            steps = {
                "image": data[f"ep{k}_image"],
                "state": data[f"ep{k}_state"],
                "action": data[f"ep{k}_action"],
                "reward": succ.astype(np.float32),
                "success": succ,
                "done": np.arange(len(succ)) == len(succ) - 1,
            }
            rec.add_episode(steps, TASKS[ms_task][1], {"task_id": task, "seed": int(data[f"ep{k}_seed"]),
                                                    "source": "maniskill motionplanning"})
        return rec.finalize()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m envs.maniskill.demos", description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="PickCube-v1")
    p.add_argument("--num", type=int, default=5)
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    try:
        root = generate(a.task, a.num, a.image_size, a.out, a.overwrite)
    except WmrlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {a.num} {a.task} demos to {root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
