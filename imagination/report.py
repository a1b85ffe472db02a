"""The report of a ``wmrl run``: results.json, results.md table, success-per-round plot and
side-by-side real | imagined videos (the world model replaying real actions from a real context)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wmrl.io import atomic_write, atomic_write_json, atomic_write_text


def collect_results(pipe: Any) -> dict[str, Any]:
    """Gather the figures of every finished stage into one dict (the benchmark's fields)."""
    rounds = pipe.cfg.coevolution_config().rounds
    sft = pipe.done("eval_sft")
    rs = [pipe.done(f"round_{r}") for r in range(rounds + 1)]
    real = pipe.done("real_rl")
    out: dict[str, Any] = {
        "sft_success": sft["success"],
        "imagination_rl_success": rs[0]["eval"]["success"],
        "coevolution_success_by_round": [r["eval"]["success"] for r in rs[1:]],
        "real_env_steps_used": float(sum(r["real_env_steps"] for r in rs)),
        "real_env_steps_by_round": [r["real_env_steps"] for r in rs],
        "imagined_steps_by_round": [r["imagined_steps"] for r in rs],
        "gated_frac_by_round": [r.get("gated_frac", 0.0) for r in rs],
        "rl_updates_by_round": [r.get("policy_updates") for r in rs],  # None: a run made before they were counted
        "rl_iterations_by_round": [r.get("rl_iterations") for r in rs],
        # "rl" (GRPO/PPO in the world model) or "self_imitation" (imagination.self_imitation)
        "imagination_phase": rs[0].get("imagination_phase", "rl"),
        "per_task": {
            "sft": sft["per_task"],
            **{f"round_{i}": r["eval"]["per_task"] for i, r in enumerate(rs)},
        },
        "ci95": {"sft": sft.get("ci95"), **{f"round_{i}": r["eval"].get("ci95") for i, r in enumerate(rs)}},
    }
    checks = [r.get("world_vs_real_on_eval_starts", {}).get("all") for r in rs]
    if any(checks):  # self-imitation rounds: each world against the simulator on the entering policy's starts
        out["world_vs_real_by_round"] = checks
    if any(r.get("gate_real_env_steps") for r in rs):  # self_imitation.min_precision: what each round's gate read
        out["gated_tasks_by_round"] = [r.get("gated_tasks", []) for r in rs]
        out["gate_real_env_steps_by_round"] = [r.get("gate_real_env_steps", 0.0) for r in rs]
    if real is not None:
        out["real_rl_same_budget_success"] = real["eval"]["success"]
        out["real_rl_env_steps"] = real["real_env_steps"]
        out["real_rl_updates"] = [real.get("policy_updates"), real.get("rl_iterations")]
        out["ci95"]["real_rl"] = real["eval"].get("ci95")
    evals = {f"round_{i}": r["eval"] for i, r in enumerate(rs)} | ({"real_rl": real["eval"]} if real else {})
    out["lift_vs_sft"] = paired_lifts(sft, evals)
    # the goals' comparisons: each co-evolution round and real RL against RL in imagination (round 0)
    out["lift_vs_round_0"] = paired_lifts(rs[0]["eval"], {k: v for k, v in evals.items() if k != "round_0"})
    out["stage_time_s"], waited, out["wall_time_s"] = stage_wall_times(pipe.root / "stages", rounds)
    if waited:
        out["background_stages_waited_s"] = waited
    cpu = {p.stem: _stage_time(p, "stage_cpu_s") for p in stage_markers(pipe.root / "stages", rounds)}
    if all(v is not None for v in cpu.values()):
        out["stage_cpu_s"] = cpu
        out["cpu_time_s"] = float(sum(cpu.values()))
    return out


def paired_lifts(ref: dict[str, Any], phases: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each phase's real success minus the ``ref`` evaluation's (SFT's, say), episode by episode on the
    same evaluation starts (``benchmarks._stats.paired_outcome_difference``: ``diff``, ``se``, ``ci95``,
    ``episodes``). Phases evaluated without per-episode outcomes (runs made before they were kept) are
    left out, and all are when ``ref`` has none."""
    from benchmarks._stats import paired_outcome_difference

    out: dict[str, dict[str, Any]] = {}
    for name, ev in phases.items():
        try:
            out[name] = paired_outcome_difference(ev["outcomes"], ref["outcomes"])
        except (KeyError, ValueError):  # no outcomes kept, or a resumed run evaluated other episodes
            continue
    return out


def stage_markers(stages: Path, rounds: int | None = None) -> list[Path]:
    """The stage marker files in ``stages``, sorted; with ``rounds``, without those of co-evolution
    rounds past it (a run resumed with fewer rounds keeps them, but its report is of rounds 0..rounds)."""
    def used(p: Path) -> bool:
        r = p.stem.removeprefix("round_")
        return rounds is None or not (p.stem.startswith("round_") and r.isdigit() and int(r) > rounds)

    return [p for p in sorted(stages.glob("*.json")) if used(p)]


def stage_wall_times(
    stages: Path, rounds: int | None = None
) -> tuple[dict[str, float | None], dict[str, float], float]:
    """The stage markers in ``stages`` (:func:`stage_markers`): each stage's own time, the time the run
    waited for each stage that ran in a child process beside others (``background``), and the run's
    wall time, which counts such a stage by its wait only."""
    import json

    markers = {p.stem: json.loads(p.read_text()) for p in stage_markers(stages, rounds)}
    own = {k: m.get("stage_time_s") for k, m in markers.items()}
    waited = {k: float(m.get("waited_s") or 0.0) for k, m in markers.items() if m.get("background")}
    return own, waited, float(sum(waited.get(k, v or 0.0) for k, v in own.items()))


def _stage_time(p: Path, key: str = "stage_time_s") -> float | None:
    import json

    return json.loads(p.read_text()).get(key)


def results_table(res: dict[str, Any]) -> str:
    """Markdown table of real-simulator success per phase, with its 95% interval and, where the
    episodes were kept, its paired difference from SFT on the same starts."""
    n_rounds = len(res["coevolution_success_by_round"]) + 1
    upd = list(zip(res.get("rl_updates_by_round") or [None] * n_rounds,
                   res.get("rl_iterations_by_round") or [None] * n_rounds))
    rows = [
        ("SFT (behaviour cloning)", "sft", res["sft_success"], 0.0, (None, None)),
        ("self-imitation in the state model's world (round 0)" if res.get("imagination_phase") == "self_imitation"
         else "RL in imagination (round 0)", "round_0", res["imagination_rl_success"], res["real_env_steps_by_round"][0],
         upd[0]),
    ]
    for i, s in enumerate(res["coevolution_success_by_round"], start=1):
        rows.append((f"co-evolution round {i}", f"round_{i}", s, res["real_env_steps_by_round"][i], upd[i]))
    if "real_rl_same_budget_success" in res:
        rows.append(
            (
                "RL in the real simulator (same real budget)",
                "real_rl",
                res["real_rl_same_budget_success"],
                res["real_rl_env_steps"],
                tuple(res.get("real_rl_updates") or (None, None)),
            )
        )
    ci, lifts = res.get("ci95", {}), res.get("lift_vs_sft", {})

    def interval(x: list[float] | None, signed: bool = False) -> str:
        return "" if not x else ("[{:+.3f}, {:+.3f}]" if signed else "[{:.3f}, {:.3f}]").format(*x)

    def lift(key: str) -> str:
        d = lifts.get(key)
        return "" if d is None else f"{d['diff']:+.3f} {interval(d['ci95'], signed=True)}"

    def updates(u: tuple[Any, Any]) -> str:
        return "" if u[0] is None or u[1] is None else f"{int(u[0])} / {int(u[1])}"

    lines = [
        "| phase | real-sim success [95% CI] | vs SFT, paired by episode [95% CI] | real env steps (RL data) "
        "| RL updates / iterations |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {name} | {f'{s:.3f} {interval(ci.get(key))}'.rstrip()} | {lift(key)} | {int(steps)} | {updates(u)} |"
        for name, key, s, steps, u in rows
    ]
    lines += [
        "",
        "Every phase is evaluated on the same real starts, so a difference from SFT is read episode by episode; "
        "a paired interval that holds 0 is no measured change. A GRPO iteration updates the policy only when "
        "some group of trajectories has mixed outcomes (dynamic sampling; `rl.min_kept_groups`), and each GRPO "
        "or PPO update moves it by at most `rl.max_kl` (the trust region; 0: unbounded): a phase with few updates "
        "is close to the policy it started from.",
        "",
        *world_check_lines(res.get("world_vs_real_by_round")),
        *gate_lines(res.get("gated_tasks_by_round"), res.get("gate_real_env_steps_by_round")),
        f"Total real-env steps used by imagination + co-evolution: {int(res['real_env_steps_used'])}",
        f"Wall time of all stages: {res['wall_time_s']:.0f} s"
        + (f" (CPU time {res['cpu_time_s']:.0f} s)" if "cpu_time_s" in res else ""),
    ]
    return "\n".join(lines) + "\n"


def world_check_lines(checks: list[dict[str, Any] | None] | None) -> list[str]:
    """The report's lines on how far each self-imitation round's world rated the policy it trained against the
    simulator, start by start on the run's evaluation starts (the rounds' ``world_vs_real_on_eval_starts``;
    none without them)."""
    if not checks or not any(checks):
        return []
    rows = [
        f"round {r}: {c['imagined']:.3f} / {c['real']:.3f} ({c['overrating']:+.3f}; {int(c['false_successes'])} / "
        f"{int(c['missed_successes'])})"
        for r, c in enumerate(checks) if c
    ]
    return [
        "How far each round's state-model world flatters the policy it trains (that policy with its mean action in "
        "the world, set against its real evaluation start by start: world / simulator success (over-rating; false / "
        "missed successes); `world_vs_real_on_eval_starts` per task in `stages/round_R.json`): " + "; ".join(rows)
        + ". The kept successes of a world that over-rates hold false ones.",
        "",
    ]


def gate_lines(gated: list[list[str]] | None, steps: list[float] | None) -> list[str]:
    """The report's line on the self-imitation gate (``self_imitation.min_precision``): the tasks each round
    cloned none of and the real steps of the outcomes its check read (in the rounds' real env steps above);
    none without a gate."""
    if not gated or steps is None:
        return []
    rows = [f"round {r}: {', '.join(g) if g else 'none'} ({int(n)} real steps)" for r, (g, n) in enumerate(zip(gated, steps))]
    return ["Tasks the precision gate kept out of each round's cloning (`gated_tasks`; the real steps of the "
            "outcomes its check read count in the round's real env steps): " + "; ".join(rows) + ".", ""]


def success_plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ys = [res["sft_success"], res["imagination_rl_success"], *res["coevolution_success_by_round"]]
    xs = ["SFT", "imag. RL"] + [f"round {i}" for i in range(1, len(ys) - 1)]
    keys = ["sft"] + [f"round_{i}" for i in range(len(ys) - 1)]
    ci = res.get("ci95", {})
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if all(ci.get(k) for k in keys):  # 95% intervals of each evaluation as error bars
        err = np.array([[y - ci[k][0], ci[k][1] - y] for y, k in zip(ys, keys)]).T.clip(min=0)
        ax.errorbar(range(len(ys)), ys, yerr=err, fmt="o-", capsize=3, label="policy (imagination + co-evolution)")
    else:
        ax.plot(range(len(ys)), ys, "o-", label="policy (imagination + co-evolution)")
    if "real_rl_same_budget_success" in res:
        ax.axhline(
            res["real_rl_same_budget_success"],
            color="tab:red",
            ls="--",
            label="real-sim RL, same real budget",
        )
    ax.set_xticks(range(len(ys)), xs)
    ax.set_ylim(0, 1)
    ax.set_ylabel("real-simulator success")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()

    def _w(p: Path) -> None:
        fig.savefig(p, format="png", dpi=120)

    atomic_write(path, _w)
    plt.close(fig)


@torch.no_grad()
def real_vs_imagined_videos(pipe: Any, count: int, horizon: int = 32) -> list[str]:
    """Replay real episodes' actions in the (final) world model from their real first frames; write
    ``videos/real_vs_imagined_<i>.mp4`` (left real, right imagined)."""
    from wmrl.video import side_by_side, write_video

    if count <= 0:
        return []
    rounds = pipe.cfg.coevolution_config().rounds
    wm, _, _ = pipe.load_models(rounds)
    traj = pipe.trajectories()
    T = int(wm.config.context_frames)
    from worldmodels.modeling_common import model_states

    states = model_states(traj, wm.config)
    rng = np.random.default_rng(pipe.cfg.seed)
    bounds = np.asarray(traj.episode_bounds)
    long = [b for b in bounds if b[1] - b[0] >= T + 8]
    paths = []
    for i, j in enumerate(rng.choice(len(long), size=min(count, len(long)), replace=False)):
        s, e = long[j]
        h = int(min(horizon, e - s - T))
        ctx = slice(s, s + T)
        out = wm.rollout(
            traj.images[ctx][None], states[ctx][None], traj.actions[s + T - 1 : s + T - 1 + h][None]
        )
        real = traj.images[s + T : s + T + h]
        imag = out.frames[0].cpu().numpy()
        p = write_video(pipe.run.videos / f"real_vs_imagined_{i}.mp4", side_by_side(real, imag))
        paths.append(str(p))
    return paths


def write_report(pipe: Any) -> dict[str, Any]:
    """Write results.json, results.md, plots/success_per_round.png and the videos; returns a summary."""
    t = time.perf_counter()
    res = collect_results(pipe)
    res["videos"] = real_vs_imagined_videos(pipe, pipe.cfg.videos)
    success_plot(res, pipe.run.plots / "success_per_round.png")
    atomic_write_json(pipe.root / "results.json", res)
    atomic_write_text(pipe.root / "results.md", "# wmrl run results\n\n" + results_table(res))
    return {"results": str(pipe.root / "results.json"), "report_time_s": time.perf_counter() - t}
