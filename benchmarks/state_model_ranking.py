"""Does a state-space world model, drawn by the simulator, rank policies the way the real simulator does?

Usage::

    python -m benchmarks.state_model_ranking --run-dir RUN --object-dynamics od_arm [od_2 ...]
        [--pixel benchmarks/results/wm_policy_ranking_s32.json] [--policy NAME PATH ...] [--episodes-per-task 24]
        [--seed 4242]
        [--success all|any|advanced] [--advance random|first] [--max-disagreement METRES]   # ensembles
        [--renderer NAME]   # also rank in the state model drawn by a learned renderer (fully learned world)
        --out FILE.json [key=value ...]   # the run's Hydra overrides, e.g. seed=S num_threads=1
    python -m benchmarks.state_model_ranking --quick --out FILE.json   # on runs/imagination_lift_quick/seed_0
    python -m benchmarks.state_model_ranking --rescore --pixel PIXEL.json --out FILE.json   # add the pixel block

``benchmarks.wm_policy_ranking`` ranks a run's policies inside its pixel world model. Over four world
models each of its readings orders 21-37% of the policy pairs the simulator tells apart the wrong way on
its worst one, and every pixel world model scores the SFT recipe stopped at 30% of its steps (real
success 0.04-0.10) like the full SFT policy (0.40-0.49). This benchmark asks the same question of the
other world the project has: the arm-and-object state model (:class:`worldmodels.object_dynamics.
ObjectDynamics`, ``--object-dynamics`` folders of the run, fitted with ``python -m
worldmodels.object_dynamics --data RUN/data --out RUN/NAME --arm``) steps the proprio and the three
cubes, the built-in suite's renderer draws those states for the policy, and the task's own rule on the
predicted cube poses is success (:class:`benchmarks._split_worlds.StateModelVectorEnv`). The dynamics
are learned; the drawing is the simulator's, so this is a world model with a perfect renderer, and its
reading says what the dynamics alone allow.

The policies are the pixel ranking's (:func:`benchmarks.wm_policy_ranking.ranking_policies`; ``--policy
NAME PATH`` ranks a saved policy folder beside them, e.g. a checkpoint of one's own) and the starts
too: episode ``e`` of task ``i`` starts from the real reset with seed ``seed + 1000 * i + e`` in both
worlds, the policy acts with its mean action, and a noisy or random policy replays the same noise
stream in both worlds (its generator is reseeded per task and world). Every policy also runs again in
the real simulator alone from other starts (``seed + 700000``): the noise ceiling. With ``--pixel`` (the
same run's ``wm_policy_ranking`` result, same seed and episodes) every pixel reading is scored beside
the state model's on the same policy pairs, and the real outcomes are checked start by start against the
pixel ranking's (the policies that act with their mean action must reproduce them exactly).

``--renderer NAME`` (a :class:`worldmodels.state_renderer.StateRenderer` in the run's folder ``NAME``,
fitted with ``python -m worldmodels.state_renderer --data RUN/data --out RUN/NAME``) ranks every policy
again, from the same starts and noise, in the same state model drawn by that learned renderer from
each episode's real first frame instead of by the simulator: a world of learned parts only (dynamics,
drawing and, through the task's rule on the predicted states, success), whose reading is the
``learned_renderer`` block and the ``learned_renderer`` reading of ``resolved_pairs``. A fourth pass runs
the real simulator with its frames drawn by the same renderer from the real states
(:class:`benchmarks._split_worlds.RendererDrawnRealEnv`; ``learned_renderer.real_dynamics``): what the
learned drawing alone costs.

Fields: ``pearson``, ``spearman``, ``mmrv``, ``spearman_ci95`` (paired bootstrap), ``policies`` (per
policy: real and state-model success, episode agreement, false and missed successes, the real retest),
``noise_ceiling``, ``resolved_pairs`` (the pairs the simulator tells apart start by start, and the share
each reading orders as it does: :func:`benchmarks.wm_policy_ranking.resolved_pairs_block`), ``pixel``
(the pixel readings' Spearman and pair accuracy on these outcomes, and ``real_outcomes_match``), and the
per-episode outcomes beside the JSON (``OUT.pairs.npz``, keys ``policy/real``, ``policy/state_model``).
``--rescore --pixel PIXEL.json`` adds the ``pixel`` block to a finished result ``--out`` from its
``.pairs.npz``, without running an episode (a ranking run before the pixel ranking finished).
``--quick`` fits a tiny state model on 16 real episodes of the quick run's SFT policy (as
``benchmarks.state_model_rl --quick``) and a tiny learned renderer on the quick run's demos, and ranks in
the world drawn by it too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

NOISE_SEED = 7919  # a noisy policy's generator for task i is reseeded to NOISE_SEED * seed + i in each world


def reseed_noise(policy: Any, seed: int) -> None:
    """Reseed the action-noise generator of a noisy or random ranking policy (its ``gen``); a policy that
    acts with its mean action has none and is left as it is."""
    gen = getattr(policy, "gen", None)
    if gen is not None:
        gen.manual_seed(int(seed))


def episode_successes(
    policy: Any,
    make_env: Callable[[str, int], Any],
    tasks: list[str],
    episodes_per_task: int,
    seed: int,
    horizon_chunks: int,
    frames: str = "chunk_end",
) -> np.ndarray:
    """Success of ``policy`` (its mean action; action chunks) in the env ``make_env(task, n)`` returns (a
    not-chunked VectorEnv that autoresets on the same step) from the starts ``seed + 1000 * i + e``. The
    policy reads frames at chunk ends only, so by default no other frame is drawn (``frames`` of
    :class:`envs.wrappers.ActionChunkWrapper`; ``"all"`` draws every one, with the same outcomes).

    Returns bool (E,) over E = len(tasks) x episodes_per_task episodes, task-major: whether each
    episode's first ``horizon_chunks`` chunks reached success."""
    from envs.wrappers import ActionChunkWrapper

    out = []
    for ti, task in enumerate(tasks):
        n = episodes_per_task
        env = ActionChunkWrapper(make_env(task, n), policy.chunk_size, frames=frames)
        try:
            obs, info = env.reset(seed=[seed + 1000 * ti + e for e in range(n)])
            reseed_noise(policy, NOISE_SEED * seed + ti)
            out.append(first_episode_successes(policy, env, obs, info, horizon_chunks))
        finally:
            env.close()
    return np.concatenate(out)


def first_episode_successes(policy: Any, env: Any, obs: Any, info: dict, horizon_chunks: int) -> np.ndarray:
    """``policy``'s mean action in the chunked vector env ``env`` from its reset's ``obs`` / ``info``: whether
    each sub-env's first episode reached success within ``horizon_chunks`` chunks, bool (N,)."""
    from imagination.rollout_buffer import env_instructions

    alive, succ = np.ones(env.num_envs, bool), np.zeros(env.num_envs, bool)
    for _ in range(horizon_chunks):
        a = policy.act(obs, env_instructions(env, info), deterministic=True).actions
        obs, _, term, trunc, info = env.step(np.asarray(a.cpu(), np.float32))
        succ |= alive & np.asarray(info["success"], bool)
        alive &= ~(np.asarray(term) | np.asarray(trunc))
        if not alive.any():
            break
    return succ


def pixel_readings(pixel: dict[str, Any], real_eps: dict[str, np.ndarray], pixel_real: dict[str, np.ndarray] | None,
                   pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """The readings of a ``wm_policy_ranking`` result ``pixel`` on this benchmark's real outcomes
    ``real_eps`` (policy -> bool (E,)) and resolved ``pairs``: per reading its Spearman / Pearson / MMRV and
    pair accuracy over the policies both results ranked (``policies``; a ``--policy`` of this run only is
    left out), and, from ``pixel_real`` (the pixel ranking's own per-episode real outcomes, its
    ``.pairs.npz``), whether each policy's real outcomes match start by start."""
    from benchmarks.wm_policy_ranking import pair_order_accuracy, rank_stats, ranking_readings

    names = [n for n in real_eps if n in pixel["policies"]]
    shared = [(a, b) for a, b in pairs if a in names and b in names]
    real = np.array([real_eps[n].mean() for n in names])
    out: dict[str, Any] = {"policies": names, "readings": {}}
    for key, rates in ranking_readings(pixel).items():
        if key == "real_retest":
            continue
        out["readings"][key] = {**rank_stats(np.array([rates[n] for n in names]), real),
                                "pair_accuracy": pair_order_accuracy(rates, shared)["accuracy"]}
    if pixel_real is not None:
        out["real_outcomes_match"] = {
            n: bool(n in pixel_real and pixel_real[n].shape == real_eps[n].shape and (pixel_real[n] == real_eps[n]).all())
            for n in names
        }
    return out


def load_pixel(path: Path, seed: int, episodes_per_task: int) -> tuple[dict[str, Any], dict[str, np.ndarray] | None]:
    """A ``wm_policy_ranking`` result (and its per-episode real outcomes where its ``.pairs.npz`` is
    beside it); a one-line WmrlError unless it ranked the same starts (``seed``, ``episodes_per_task``)."""
    from wmrl.errors import WmrlError

    try:
        res = json.loads(Path(path).read_text())
        got = (res["seed"], res["episodes_per_task"], list(res["policies"]))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise WmrlError(f"--pixel {path}: not a readable wm_policy_ranking result ({e!r})") from e
    if got[:2] != (seed, episodes_per_task):
        raise WmrlError(f"--pixel {path} ranked seed={got[0]}, episodes_per_task={got[1]}; this run uses "
                        f"seed={seed}, episodes_per_task={episodes_per_task} (pass the same --seed/--episodes-per-task)")
    npz = Path(path).with_suffix(".pairs.npz")
    if not npz.exists():
        return res, None
    with np.load(npz) as z:
        return res, {n: z[f"{n}/real"] for n in got[2] if f"{n}/real" in z.files}


def fit_quick_renderer(run_dir: Path, out: Path) -> Any:
    """A tiny :class:`worldmodels.state_renderer.StateRenderer` fitted on ``run_dir``'s demos (quick mode),
    saved to ``out`` (an earlier one there is loaded)."""
    from wmrl.data import load_trajectories
    from worldmodels.state_renderer import StateRenderer, StateRendererConfig, fit_state_renderer

    if (out / "config.json").exists():
        return StateRenderer.from_pretrained(out)
    traj = load_trajectories(run_dir / "data")
    config = StateRendererConfig(image_size=int(traj.images.shape[1]), channels=[8, 16, 16, 16], steps=40,
                                 batch_size=8, test_fraction=0.25)
    model, metrics = fit_state_renderer(traj, config, progress=False)
    model.save_pretrained(out, metrics)
    return model


def main(argv: list[str] | None = None) -> int:
    from benchmarks._split_worlds import ADVANCE_RULES, SUCCESS_RULES

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="runs/imagination_lift_quick/seed_0 and a tiny state model fitted here")
    p.add_argument("--out", default="benchmarks/results/state_model_ranking.json")
    p.add_argument("--run-dir", type=Path, default=None,
                   help="a finished wmrl run folder (default runs/imagination_lift[_quick]/seed_0)")
    p.add_argument("--object-dynamics", nargs="+", default=["od_arm"], metavar="NAME",
                   help="the arm-and-object state model's folder in the run; several: an ensemble")
    p.add_argument("--policy", nargs=2, action="append", default=[], metavar=("NAME", "PATH"),
                   help="also rank this saved policy folder (repeatable), beside the run's own policies")
    p.add_argument("--pixel", type=Path, default=None, metavar="FILE.json",
                   help="the same run's wm_policy_ranking result, read beside this one")
    p.add_argument("--episodes-per-task", type=int, default=None)
    p.add_argument("--seed", type=int, default=4242)
    p.add_argument("--success", default="all", choices=SUCCESS_RULES)
    p.add_argument("--advance", default="random", choices=ADVANCE_RULES)
    p.add_argument("--max-disagreement", type=float, default=None, metavar="METRES",
                   help="ensemble: an episode ends as a failure once two members' tcp or cube predictions lie "
                   "further apart (MOReL's halt)")
    p.add_argument("--renderer", default=None, metavar="NAME",
                   help="a learned state renderer's folder in the run: also rank in the state model drawn by it")
    p.add_argument("--rescore", action="store_true",
                   help="only add the --pixel block to the finished result --out, from its .pairs.npz")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("overrides", nargs="*", help="Hydra overrides of the run config (as given to the run)")
    a = p.parse_args(argv)
    from wmrl.errors import WmrlError

    try:
        return _rescore(a) if a.rescore else _run(a)
    except WmrlError as e:  # bad input: one line, before any result is written
        print(f"error: {e}", file=sys.stderr)
        return 2


def _rescore(a: argparse.Namespace) -> int:
    """``--rescore``: the ``pixel`` block of ``--pixel`` added to the finished result ``--out`` (atomically)."""
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write_json

    out, npz = Path(a.out), Path(a.out).with_suffix(".pairs.npz")
    if a.pixel is None:
        raise WmrlError("--rescore adds the --pixel block; give --pixel FILE.json")
    for f in (out, npz):
        if not f.exists():
            raise WmrlError(f"--rescore: {f} does not exist; expected a finished state_model_ranking result and its pairs")
    try:
        res = json.loads(out.read_text())
        names, pairs = list(res["policies"]), [tuple(x) for x in res["resolved_pairs"]["pairs"]]
        with np.load(npz) as z:
            real_eps = {n: z[f"{n}/real"] for n in names}
        seed, eps = res["seed"], res["episodes_per_task"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise WmrlError(f"--rescore: {out} or {npz} is not a readable state_model_ranking result ({e!r})") from e
    pixel, pixel_real = load_pixel(a.pixel, seed, eps)
    res["pixel"] = {"file": str(a.pixel), **pixel_readings(pixel, real_eps, pixel_real, pairs)}
    atomic_write_json(out, res)
    print(json.dumps({k: v["spearman"] for k, v in res["pixel"]["readings"].items()}))
    return 0


def _run(a: argparse.Namespace) -> int:
    from tqdm import tqdm

    import envs
    from benchmarks._split_worlds import RendererDrawnRealEnv, StateModelVectorEnv, check_state_model
    from benchmarks.imagination_lift import environment_info
    from benchmarks.state_model_rl import fit_quick_state_model
    from benchmarks.wm_policy_ranking import (
        RETEST_SEED_OFFSET,
        is_run_policy_name,
        noise_ceiling,
        rank_stats,
        ranking_policies,
        resolved_pairs_block,
        spearman_ci95,
    )
    from envs.tabletop.vector_env import STATE_DIM
    from imagination.pipeline import Pipeline, load_run_config
    from policies import load_policy
    from wmrl.errors import WmrlError
    from wmrl.io import atomic_write, atomic_write_json
    from worldmodels.object_dynamics import ObjectDynamics

    t0 = time.perf_counter()
    run_dir = a.run_dir or Path("runs/imagination_lift_quick/seed_0" if a.quick else "runs/imagination_lift/seed_0")
    if not (run_dir / "stages").is_dir():
        raise WmrlError(f"--run-dir {run_dir} is not a wmrl run folder (no stages/); run `wmrl run` first")
    pixel, pixel_real = (None, None)
    eps = a.episodes_per_task or (4 if a.quick else 24)
    if a.pixel is not None:
        pixel, pixel_real = load_pixel(a.pixel, a.seed, eps)  # before any work
    if a.quick:
        if len(a.object_dynamics) > 1:
            raise WmrlError("--quick fits one tiny state model; give one --object-dynamics")
        dirs = [fit_quick_state_model(run_dir, run_dir / "quick_state_model")[0]]
    else:
        dirs = [run_dir / d for d in a.object_dynamics]
        missing = [str(d) for d in dirs if not (d / "config.json").exists()]
        if missing:
            raise WmrlError(f"no state model in {', '.join(missing)}; fit it with `python -m worldmodels.object_dynamics "
                            f"--data {run_dir}/data --out {missing[0]} --arm`")
    renderer = None
    if a.renderer is not None:
        from worldmodels.state_renderer import StateRenderer

        renderer = StateRenderer.from_pretrained(run_dir / a.renderer)  # before any work
    elif a.quick:
        a.renderer = "quick_renderer"
        renderer = fit_quick_renderer(run_dir, run_dir / a.renderer)
    models = [ObjectDynamics.from_pretrained(d) for d in dirs]
    for m in models:
        check_state_model(m, STATE_DIM)
    cfg = load_run_config([*a.overrides, f"run_dir={run_dir}"], "run_quick" if a.quick else "run")
    extra = {name: load_policy(path) for name, path in a.policy}  # before any work
    for name, pol in extra.items():
        if is_run_policy_name(name):
            raise WmrlError(f"--policy {name}: the run's own policies use that name; choose another")
        if (pol.image_size, pol.action_dim) != (cfg.image_size, 7):
            raise WmrlError(f"--policy {name}: image_size={pol.image_size}, action_dim={pol.action_dim}; the run's "
                            f"env has image_size={cfg.image_size}, action_dim=7")
    if renderer is not None and renderer.config.image_size != cfg.image_size:
        raise WmrlError(f"--renderer {a.renderer} draws {renderer.config.image_size}-pixel frames; the run's are "
                        f"{cfg.image_size}")
    pipe = Pipeline(cfg, progress=not a.no_progress)
    pipe.run_all()  # a finished run: every stage is skipped
    tasks = pipe.tasks()
    cands = ranking_policies(pipe)
    cands.update(extra)
    horizon = envs.full_episode_chunks(tasks, cands["sft"].chunk_size)
    kw = pipe.env_kwargs()

    def make_real(task: str, n: int) -> Any:
        return envs.make_vec(task, n, autoreset_mode="same_step", **kw)

    def make_state(task: str, n: int, drawn_by: Any = None) -> Any:
        return StateModelVectorEnv(make_real(task, n), models if len(models) > 1 else models[0], success=a.success,
                                   advance=a.advance, max_disagreement=a.max_disagreement, gate="terminate", seed=a.seed,
                                   renderer=drawn_by)

    def make_drawn(task: str, n: int) -> Any:
        return make_state(task, n, renderer)

    def make_drawn_real(task: str, n: int) -> Any:
        return RendererDrawnRealEnv(make_real(task, n), renderer)

    real_eps, state_eps, retest_eps, drawn_eps, drawn_real_eps = {}, {}, {}, {}, {}
    retest_seed = a.seed + RETEST_SEED_OFFSET
    for name, pol in tqdm(cands.items(), desc="policies", disable=a.no_progress):
        real_eps[name] = episode_successes(pol, make_real, tasks, eps, a.seed, horizon)
        state_eps[name] = episode_successes(pol, make_state, tasks, eps, a.seed, horizon)
        retest_eps[name] = episode_successes(pol, make_real, tasks, eps, retest_seed, horizon)
        if renderer is not None:
            drawn_eps[name] = episode_successes(pol, make_drawn, tasks, eps, a.seed, horizon)
            drawn_real_eps[name] = episode_successes(pol, make_drawn_real, tasks, eps, a.seed, horizon)
    rows = {}
    for n in cands:
        r, s = real_eps[n], state_eps[n]
        rows[n] = {"real_success": float(r.mean()), "imagined_success": float(s.mean()), "episodes": int(len(r)),
                   "episode_agreement": float((r == s).mean()), "imagined_false_successes": int((s & ~r).sum()),
                   "imagined_missed_successes": int((~s & r).sum()), "real_success_retest": float(retest_eps[n].mean())}
    real = np.array([v["real_success"] for v in rows.values()])
    imag = np.array([v["imagined_success"] for v in rows.values()])
    retest = np.array([v["real_success_retest"] for v in rows.values()])
    res: dict[str, Any] = {
        **rank_stats(imag, real),
        "spearman_ci95": spearman_ci95(list(state_eps.values()), list(real_eps.values())),
        "policies": rows,
        "noise_ceiling": {**noise_ceiling(real, retest), "seed": retest_seed,
                          "spearman_ci95": spearman_ci95(list(retest_eps.values()), list(real_eps.values()))},
        "world": {"object_dynamics": [str(d) for d in dirs], "success": a.success, "advance": a.advance,
                  "max_disagreement": a.max_disagreement, "drawn_by": "the simulator's renderer at the model's states"},
        "episode_agreement": float(np.mean([v["episode_agreement"] for v in rows.values()])),
        "num_policies": len(rows), "episodes_per_task": eps, "tasks": tasks, "seed": a.seed,
        "run_dir": str(run_dir), "quick": a.quick, "wall_time_s": None, "machine": environment_info(),
    }
    readings = {"state_model": {n: v["imagined_success"] for n, v in rows.items()}}
    if renderer is not None:
        drawn = {n: float(drawn_eps[n].mean()) for n in cands}
        res["learned_renderer"] = {
            **rank_stats(np.array(list(drawn.values())), real),
            "spearman_ci95": spearman_ci95(list(drawn_eps.values()), list(real_eps.values())),
            "renderer": str(run_dir / a.renderer),
            "policies": {n: {"imagined_success": drawn[n], "episode_agreement": float((drawn_eps[n] == real_eps[n]).mean()),
                             "imagined_false_successes": int((drawn_eps[n] & ~real_eps[n]).sum()),
                             "imagined_missed_successes": int((~drawn_eps[n] & real_eps[n]).sum()),
                             "agreement_with_simulator_drawn": float((drawn_eps[n] == state_eps[n]).mean())}
                         for n in cands},
        }
        dr = {n: float(drawn_real_eps[n].mean()) for n in cands}
        res["learned_renderer"]["real_dynamics"] = {
            **rank_stats(np.array(list(dr.values())), real),
            "success": dr,
            "episode_agreement": {n: float((drawn_real_eps[n] == real_eps[n]).mean()) for n in cands},
        }
        readings["learned_renderer"] = drawn
        readings["learned_renderer_real_dynamics"] = dr
    readings["real_retest"] = {n: v["real_success_retest"] for n, v in rows.items()}
    res["resolved_pairs"] = resolved_pairs_block(res, real_eps, readings)
    pairs = [tuple(x) for x in res["resolved_pairs"]["pairs"]]
    if pixel is not None:
        res["pixel"] = {"file": str(a.pixel), **pixel_readings(pixel, real_eps, pixel_real, pairs)}
    res["goal"] = {"spearman": ">= 0.9", "met": bool(res["spearman"] is not None and res["spearman"] >= 0.9),
                   "real_retest_spearman": res["noise_ceiling"]["spearman"]}
    res["wall_time_s"] = time.perf_counter() - t0
    atomic_write_json(a.out, res)
    arrays = {f"{n}/{k}": v for n in cands for k, v in (("real", real_eps[n]), ("state_model", state_eps[n]),
                                                       ("real_retest", retest_eps[n]), ("learned_renderer", drawn_eps.get(n)),
                                                       ("learned_renderer_real_dynamics", drawn_real_eps.get(n)))
              if v is not None}
    atomic_write(Path(a.out).with_suffix(".pairs.npz"), lambda tmp: np.savez_compressed(tmp, **arrays))
    print(json.dumps({k: res[k] for k in ("pearson", "spearman", "mmrv", "spearman_ci95", "num_policies")}, indent=2))
    if renderer is not None:
        print(json.dumps({"learned_renderer": {k: res["learned_renderer"][k] for k in ("pearson", "spearman", "mmrv")}}))
    print(json.dumps({k: v["accuracy"] for k, v in res["resolved_pairs"]["accuracy"].items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
