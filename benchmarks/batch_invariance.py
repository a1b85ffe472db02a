"""Does a policy play the same real episodes whatever starts it is batched with?

``python -m benchmarks.batch_invariance --policy DIR [--run RUN] [--tasks T ...] [--episodes 50] [--seed S]
[--batch-sizes 1 3 20] --out FILE.json`` plays the same real starts (episode ``e`` of task ``i`` from seed
``S + 1000 i + e``, as a gate check's :func:`imagination.self_imitation.fresh_check` plays them) with
``benchmarks.policy_eval.play_seeds`` once per batch size: ``num_envs=b`` sub-envs at a time, so a start
shares its policy calls with the ``b - 1`` starts beside it (and the last batch of a task with fewer).

Four arms, side by side in one run on the same policy weights: the policy's layers

* ``row_stable``: as they are (``policies.row_stable``: a call on fewer than ``MIN_ROWS`` rows is computed
  as part of a batch of ``MIN_ROWS``), or
* ``plain``: with ``MIN_ROWS = 1``, so each call is computed at its own size. Its actions are those of the
  ``nn.Linear`` / ``nn.Conv2d`` layers the policy had before session 87 (its value head's floats are not,
  and they play no part in an episode),

with the simulator's frames ``tiled`` (the default, ``envs.tabletop.render``: a frame can differ by a pixel
with its sub-env's place in the batch) or ``untiled`` (``tiled_frames=False``: each frame drawn alone).
``plain_tiled`` is how every episode was played before session 87.

Per arm: ``action_max_diff`` (the largest difference of the mean action chunk of any of the first 16
starts of a task between a call on 1-15 of them and a call on all 16), each batch size's successes and
steps, and for each batch size against the largest: ``outcomes_differ`` and ``lengths_differ`` with the
starts that differ. ``--run`` takes the frame size and renderer settings of a ``wmrl run`` folder (its
``config.yaml``), as its gate checks and evaluations play; without it the suite's defaults. ``--quick``:
an untrained policy of the default architecture (seed 0) on two tasks, 6 starts, batch sizes 1 and 4 (CI).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

#: arm -> (policies.row_stable.MIN_ROWS, or None for the layers' own; tiled_frames)
ARMS: dict[str, tuple[int | None, bool]] = {"row_stable_untiled": (None, False), "row_stable_tiled": (None, True),
                                            "plain_untiled": (1, False), "plain_tiled": (1, True)}


def action_max_diff(policy: Any, task: str, seed: int, render: dict[str, Any], rows: int = 16) -> float:
    """Largest |difference| of the mean action chunk (K, A) of any of ``rows`` starts of ``task`` (seeds ``seed`` to
    ``seed + rows - 1``, their first observations) between a call on the first 1 to ``rows - 1`` starts and a call
    on all ``rows``."""
    import torch

    import envs

    env = envs.make_vec(task, num_envs=rows, image_size=policy.image_size,
                        wrist_image=bool(getattr(policy.config, "use_wrist", False)), **render)
    try:
        obs, _ = env.reset(seed=[seed + j for j in range(rows)])
        instructions = list(env.instructions)
    finally:
        env.close()
    with torch.no_grad():
        full = policy.act(obs, instructions, deterministic=True).actions
        worst = 0.0
        for n in range(1, rows):
            part = policy.act({k: v[:n] for k, v in obs.items()}, instructions[:n], deterministic=True).actions
            worst = max(worst, float((part - full[:n]).abs().max()))
    return worst


def compare_batchings(outcomes: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]], tasks: list[str],
                      seed: int) -> dict[str, Any]:
    """``outcomes[b][task] = (success bool (E,), length int (E,))`` for each batch size ``b`` -> per batch size the
    successes and steps, and against the largest batch size the starts whose outcome or length differ."""
    ref_b = max(outcomes)
    per_batch: dict[str, Any] = {}
    for b, by_task in sorted(outcomes.items()):
        row: dict[str, Any] = {"successes": int(sum(s.sum() for s, _ in by_task.values())),
                               "steps": int(sum(ln.sum() for _, ln in by_task.values()))}
        if b != ref_b:
            differ = []
            for i, task in enumerate(tasks):
                (s, ln), (rs, rln) = by_task[task], outcomes[ref_b][task]
                for e in np.flatnonzero((s != rs) | (ln != rln)):
                    differ.append({"task": task, "start": int(e), "seed": seed + 1000 * i + int(e),
                                   "success": bool(s[e]), "length": int(ln[e]),
                                   f"success_at_{ref_b}": bool(rs[e]), f"length_at_{ref_b}": int(rln[e])})
            row.update({"against": ref_b, "outcomes_differ": sum(d["success"] != d[f"success_at_{ref_b}"] for d in differ),
                        "lengths_differ": len(differ), "differ": differ})
        per_batch[str(b)] = row
    return per_batch


def run_arm(policy: Any, min_rows: int, tasks: list[str], episodes: int, seed: int, batch_sizes: list[int],
            render: dict[str, Any], progress: Any) -> dict[str, Any]:
    """One arm: the policy with ``policies.row_stable.MIN_ROWS = min_rows`` (restored after), the built-in suite's
    frames drawn with ``render`` (``envs.make_vec`` keyword arguments)."""
    import policies.row_stable as row_stable
    from benchmarks.policy_eval import play_seeds

    kept = row_stable.MIN_ROWS
    row_stable.MIN_ROWS = min_rows
    try:
        diffs = {t: action_max_diff(policy, t, seed + 1000 * i, render) for i, t in enumerate(tasks)}
        outcomes: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
        for b in batch_sizes:
            outcomes[b] = {}
            for i, task in enumerate(tasks):
                outcomes[b][task] = play_seeds(policy, task, [seed + 1000 * i + e for e in range(episodes)],
                                               num_envs=b, render=render)
                progress.update(1)
    finally:
        row_stable.MIN_ROWS = kept
    return {"min_rows": min_rows, "tiled_frames": bool(render.get("tiled_frames", True)),
            "action_max_diff": max(diffs.values()), "action_max_diff_per_task": diffs,
            "per_batch": compare_batchings(outcomes, tasks, seed)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--policy", type=Path, help="policy checkpoint folder (save_pretrained)")
    p.add_argument("--run", type=Path, default=None, help="wmrl run folder whose frame size and renderer to play with")
    p.add_argument("--tasks", nargs="+", default=None, help="task ids (default: the suite's, or --run's)")
    p.add_argument("--episodes", type=int, default=50, help="starts per task")
    p.add_argument("--seed", type=int, default=0, help="episode e of task i starts from seed + 1000 i + e")
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 3, 20])
    p.add_argument("--quick", action="store_true", help="an untrained policy, 2 tasks, 6 starts, batch sizes 1 and 4")
    p.add_argument("--out", required=True)
    p.add_argument("--no-progress", action="store_true")
    a = p.parse_args(argv)
    import torch
    from tqdm import tqdm

    import envs
    import policies.row_stable as row_stable
    from benchmarks.imagination_lift import environment_info
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    t0 = time.perf_counter()
    torch.set_num_threads(1)
    try:
        if a.quick:
            from policies.vla import VLAConfig, VLAPolicy

            torch.manual_seed(0)
            policy, source = VLAPolicy(VLAConfig()).eval(), "untrained VLAPolicy(VLAConfig()), seed 0"
            tasks, episodes, batch_sizes = a.tasks or ["PushCube-v0", "LiftCube-v0"], 6, [1, 4]
        else:
            if a.policy is None:
                raise WmrlError("give --policy DIR (a policy checkpoint folder) or --quick")
            from policies import load_policy

            policy, source = load_policy(a.policy).eval(), str(a.policy)
            tasks, episodes, batch_sizes = a.tasks, a.episodes, sorted(set(a.batch_sizes))
        if not 1 <= episodes <= 1000:
            raise WmrlError(f"--episodes {episodes}: expected 1 to 1000 starts per task")
        if len(batch_sizes) < 2 or min(batch_sizes) < 1:
            raise WmrlError(f"--batch-sizes {a.batch_sizes}: expected two or more sizes, each >= 1")
        render: dict[str, Any] = {}
        if a.run is not None:
            from imagination.pipeline import run_config_of

            cfg = run_config_of(a.run)
            if cfg.image_size != policy.image_size:
                raise WmrlError(f"--run {a.run} plays {cfg.image_size}-pixel frames; --policy {a.policy} expects "
                                f"{policy.image_size}")
            render = cfg.render.env_kwargs()
            tasks = tasks or envs.resolve_tasks(cfg.suite)
        tasks = envs.resolve_tasks(tasks or "builtin")  # an unknown task id: a one-line error naming it
        with tqdm(total=len(ARMS) * len(batch_sizes) * len(tasks), desc="batchings", disable=a.no_progress) as bar:
            arms = {arm: run_arm(policy, row_stable.MIN_ROWS if min_rows is None else min_rows, tasks, episodes,
                                 a.seed, batch_sizes, {**render, "tiled_frames": tiled}, bar)
                    for arm, (min_rows, tiled) in ARMS.items()}
    except WmrlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    summary = {arm: {"min_rows": r["min_rows"], "tiled_frames": r["tiled_frames"], "action_max_diff": r["action_max_diff"],
                     **{f"outcomes_differ_at_{b}": r["per_batch"][b]["outcomes_differ"] for b in r["per_batch"]
                        if "against" in r["per_batch"][b]},
                     **{f"lengths_differ_at_{b}": r["per_batch"][b]["lengths_differ"] for b in r["per_batch"]
                        if "against" in r["per_batch"][b]}}
               for arm, r in arms.items()}
    res = {"benchmark": "batch_invariance", "policy": source, "run": None if a.run is None else str(a.run),
           "tasks": tasks, "episodes_per_task": episodes, "seed": a.seed, "batch_sizes": batch_sizes,
           "image_size": policy.image_size, "render": render, "summary": summary, "arms": arms, "quick": a.quick,
           "wall_time_s": time.perf_counter() - t0, "machine": environment_info()}
    atomic_write_json(a.out, res)
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
