"""Rebuild the README's results table from the committed JSON under ``benchmarks/results/``.

``python -m benchmarks.report [--check]`` rewrites the block between ``<!-- results:start -->``
and ``<!-- results:end -->`` in README.md (``--check`` exits 1 if it is out of date)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
START, END = "<!-- results:start -->", "<!-- results:end -->"


def _get(d: dict, path: str) -> Any:
    for k in path.split("."):
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def _idm_xyz(d: dict) -> str:
    """IDM R^2 of x / y / z and the position mean, from a reward_models result."""
    return " / ".join(_fmt(v) for v in d["idm_r2"]["per_dim"][:3]) + f" ({_fmt(d['idm_r2']['position_mean'])})"


def _last(v: Any) -> Any:
    return v[-1] if isinstance(v, list) and v else v


def _variant(d: dict, name: str) -> str:
    """``SFT -> after RL (k/n seeds lifted)`` of one real_rl.json variant."""
    v = (d.get("variants") or {}).get(name)
    if not v:
        return "not run"
    return f"{_fmt(v['sft_success'])} -> {_fmt(v['rl_success'])} ({v['seeds_lifted']}/{len(v['lift_per_seed'])})"


def _curve(d: dict, name: str = "default") -> str:
    """``SFT -> success at each budget`` of a real_rl.json variant's learning curve (``--curve``)."""
    v = (d.get("variants") or {}).get(name) or {}
    if not v.get("curve"):
        return "not run"
    return f"{_fmt(v['sft_success'])} -> " + " / ".join(_fmt(c["rl_success"]) for c in v["curve"])


def _pool(d: dict, name: str = "pool64", k: int = 8) -> str:
    """A real_rl.json variant trained on a fixed start pool: held-out ``SFT -> after``, then the sampled
    training success of its first and its last ``k`` iterations (the same starts when ``k`` iterations
    cover the pool), mean over seeds."""
    v = (d.get("variants") or {}).get(name)
    if not v:
        return "not run"
    runs = [r["train_success_by_iteration"] for r in v["per_seed"].values()]
    first, last = (sum(sum(r[sl]) / len(r[sl]) for r in runs) / len(runs) for sl in (slice(0, k), slice(-k, None)))
    return f"{_variant(d, name)}; on the pool's starts, sampled: {_fmt(first)} -> {_fmt(last)}"


def _arm_vs_sft(succ: dict, diff: dict, arm: str) -> str:
    """``success (paired difference from SFT +- s.e.)`` of one fixed_starts arm."""
    return f"{_fmt(succ[arm])} ({diff[arm]['diff']:+.3f} +- {diff[arm]['se']:.3f})"


def _fixed_starts(d: dict, field: str = "pool") -> str:
    """benchmarks.fixed_starts: SFT -> each arm (its paired difference from SFT +- s.e.), on the pool or held out."""
    from benchmarks.fixed_starts import ARMS, STATE_MODEL_ARM

    succ, diff = d.get(f"{field}_success") or {}, d.get(f"{field}_vs_sft") or {}
    if "sft" not in succ:
        return "not run"
    arms = [a for a in (*ARMS, STATE_MODEL_ARM) if a in diff]
    return f"{_fmt(succ['sft'])} -> " + " / ".join(_arm_vs_sft(succ, diff, a) for a in arms)


def _fixed_starts_arm(d: dict, arm: str) -> str:
    """One arm of a fixed_starts result: on the pool and held out, each ``success (paired vs SFT +- s.e.)``,
    and its real env steps per run (mean)."""
    out = []
    for field in ("pool", "held_out"):
        succ, diff = d.get(f"{field}_success") or {}, d.get(f"{field}_vs_sft") or {}
        if arm not in diff:
            return "not run"
        out.append(_arm_vs_sft(succ, diff, arm))
    runs = list((d.get("runs") or {}).values())
    steps = [r["real_env_steps"][arm] for r in runs if arm in r.get("real_env_steps", {})]
    return " / ".join(out) + (f"; {sum(steps) / len(steps):,.0f} real steps per run" if steps else "")


def _sm_branch(d: dict) -> str:
    """The sm_branch arm of a fixed_starts result (:func:`_fixed_starts_arm`)."""
    return _fixed_starts_arm(d, "sm_branch")


def _real_pool(d: dict) -> str:
    """The real_pool arm (real GRPO on the pool) of a fixed_starts result (:func:`_fixed_starts_arm`)."""
    return _fixed_starts_arm(d, "real_pool")


def _fixed_starts_both(d: dict) -> str:
    """Every arm of a fixed_starts result on the pool, then held out (:func:`_fixed_starts`)."""
    return f"{_fixed_starts(d)}; {_fixed_starts(d, 'held_out')}"


def _coevolution(d: dict) -> str:
    """A fixed_starts co-evolution result: its last round's refitted arm | (with ``--data-control``) the arm
    refitted on as many scripted-expert episodes | that round's unchanged control | (with ``--gate-control``) the
    unchanged models' arm behind the other gate | (with ``--warm-refit``) the arm in fine-tuned models
    (:func:`_fixed_starts_arm`)."""
    arm = d.get("state_model_arm") or {}
    lines = (("sm_coevo",) + (("sm_demos",) if arm.get("data_control") else ()) + ("sm_more",)
             + (("sm_gate",) if arm.get("gate_control") is not None else ())
             + (("sm_warm",) if arm.get("warm_refit") else ()))
    return " | ".join(_fixed_starts_arm(d, f"{k}_{arm.get('coevolution_rounds', 1)}") for k in lines)


def _fidelity(d: dict) -> str:
    """A coevolution_fidelity result: for the last round's refitted-line and control policies, the share of
    starts whose real outcome the original models' world reproduces -> the last refit's (paired +- s.e.), on
    the pool, then held out."""
    r = d["rounds"]
    parts = []
    for field in ("pool", "held_out"):
        for arm in (f"sm_coevo_{r}", f"sm_more_{r}"):
            row, pair = d["summary"][field][arm], d["paired"][field][arm][f"refit_{r}-original"]
            parts.append(f"{_fmt(row['original']['agreement'])} -> {_fmt(row[f'refit_{r}']['agreement'])} "
                         f"({pair['diff']:+.3f} +- {pair['se']:.3f})")
    return f"pool {parts[0]} / {parts[1]}; held out {parts[2]} / {parts[3]}"


def _fidelity_table(d: dict, worlds: list[str], pair: str) -> str:
    """A coevolution_fidelity result: for each scored policy, the share of starts whose real outcome each of
    ``worlds`` reproduces and the paired difference ``pair`` (``A-B``, +- s.e.), on the pool, then held out."""
    parts = []
    for field in ("pool", "held_out"):
        rows = []
        for arm in d["policies"]:
            row, diff = d["summary"][field][arm], d["paired"][field][arm][pair]
            rows.append(f"{arm} " + " / ".join(_fmt(row[w]["agreement"]) for w in worlds)
                        + f" ({diff['diff']:+.3f} +- {diff['se']:.3f})")
        parts.append(f"{'pool' if field == 'pool' else 'held out'}: " + ", ".join(rows))
    return "; ".join(parts)


def _fidelity_data(d: dict, other: str | None = None) -> str:
    """A coevolution_fidelity result of a ``--data-control`` work folder: original / last refit on the policy's
    rollouts / ``other`` (default: the last refit on as many expert episodes; ``gate``: the original models
    behind the gate control's gate; ``warm_R``: the last fine-tuned models), and the refit minus ``other``
    (:func:`_fidelity_table`)."""
    r = d["rounds"]
    other = other or f"demos_{r}"
    return _fidelity_table(d, ["original", f"refit_{r}", other], f"refit_{r}-{other}")


def _fidelity_worlds(d: dict) -> str:
    """A coevolution_fidelity result: every scored world in order, and the last minus the original
    (:func:`_fidelity_table`)."""
    return _fidelity_table(d, d["worlds"], f"{d['worlds'][-1]}-original")


def _warm_rounds(d: dict) -> str:
    """The fine-tuned line of a fixed_starts result after round 5 | its last round (:func:`_fixed_starts_arm`)."""
    last = (d.get("state_model_arm") or {}).get("coevolution_rounds", 5)
    return " | ".join(_fixed_starts_arm(d, f"sm_warm_{r}") for r in (5, last))


def _warm_line(d: dict) -> str:
    """A fixed_starts run of the fine-tuned line alone (``--lines sm_warm``): on the pool, paired vs SFT (+- s.e.),
    real GRPO / the branched world / each round of the line; then its last round on the pool / held out, and its
    real steps (held out only where the run scored it)."""
    rounds = (d.get("state_model_arm") or {}).get("coevolution_rounds", 0)
    diff = d.get("pool_vs_sft") or {}
    arms = ["real_pool", "sm_branch", *(f"sm_warm_{r}" for r in range(1, rounds + 1))]
    if any(a not in diff for a in arms):
        return "not run"
    pool = " / ".join(f"{diff[a]['diff']:+.3f} ({diff[a]['se']:.3f})" for a in arms)
    if arms[-1] not in (d.get("held_out_vs_sft") or {}):  # --no-held-out
        return f"pool {pool}"
    return f"pool {pool}; last round {_fixed_starts_arm(d, arms[-1])}"


def _renderer_shift(d: dict) -> str:
    """A renderer_shift.json: PSNR before -> after the fine-tune (mean over runs; the gain per run) on the held-out
    demos, the test policy's pool rollouts and their failed ones, with the anchor frame's PSNR."""
    parts = []
    for key, label in (("demos_held_out", "held-out demos"), ("rollouts", "rollouts"), ("rollouts_failed", "failed")):
        v = (d.get("summary") or {}).get(key)
        if v:
            per = " / ".join(f"{g:+.2f}" for g in v["gain_db_by_run"])
            parts.append(f"{label} {v['before_psnr_db']:.2f} -> {v['after_psnr_db']:.2f} dB ({per}; anchor "
                         f"{v['anchor_psnr_db']:.1f})")
    return "; ".join(parts) or "not run"


def _cube_turns(d: dict) -> str:
    """A cube_turns.json: per policy (pooled over the runs) the share of pool episodes whose target cube turned past
    the threshold and the success of the turned / unturned ones; then per task SFT's turned share."""
    summary = d.get("summary") or {}
    if not summary:
        return "not run"
    f = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    parts = [f"{name} {f(v['turned_share'])} ({f(v['success_turned'])} / {f(v['success_unturned'])})"
             for name, v in summary.items()]
    first = next(iter(summary))
    tasks = ", ".join(f"{t.removesuffix('-v0')} {f(v['turned_share'])}" for t, v in summary[first]["per_task"].items())
    return "; ".join(parts) + f"; {first} by task: {tasks}"


def _cube_turns_branch(d: dict) -> str:
    """A cube_turns.json with --state-models: per policy, the median branch error and members' spread (cm) of
    turned / unturned episodes."""
    summary = d.get("summary") or {}
    if not summary or "branch_error_turned_median_m" not in next(iter(summary.values())):
        return "not run"
    f = lambda x: "-" if x is None else f"{100 * x:.1f}"  # noqa: E731
    return "; ".join(f"{n} {f(v['branch_error_turned_median_m'])} / {f(v['branch_error_unturned_median_m'])} cm "
                     f"(spread {f(v['branch_spread_turned_median_m'])} / {f(v['branch_spread_unturned_median_m'])})"
                     for n, v in summary.items())


def _orientation_dynamics(d: dict) -> str:
    """An orientation_dynamics.json: per test set, the turned share and the median final branch error (cm) of
    turned / unturned episodes for the position-only models, the orientation models and the orientation models
    given the real orientations (oracle), then the orientation models' final angle error against holding it."""
    sets = d.get("test_sets") or []
    if not sets:
        return "not run"
    f = lambda x: "-" if x is None else f"{100 * x:.1f}"  # noqa: E731
    parts = []
    for t in sets:
        s = t["summary"]
        err = {k: f"{f(s['turned'][k])} / {f(s['unturned'][k])}" for k in (
            "position_final_error_median_m", "orientation_final_error_median_m", "oracle_final_error_median_m")}
        name = t["test_set"].split(":")[0]
        parts.append(f"{name} (turned {t['turned_share']:.2f}): position {err['position_final_error_median_m']}, "
                     f"orientation {err['orientation_final_error_median_m']}, oracle "
                     f"{err['oracle_final_error_median_m']} cm; angle {s['all']['orientation_final_angle_median_deg']:.0f}"
                     f" deg vs held {s['all']['no_turn_final_angle_median_deg']:.0f}")
    return "; ".join(parts)


def _self_imitation(d: dict) -> str:
    """A self_imitation.json: ``SFT -> round 0 / round 1 ...`` (mean over seeds), the last round's paired lift
    per seed and the real env steps per seed."""
    seeds = list((d.get("per_seed") or {}).values())
    if not seeds:
        return "not run"
    rounds = " / ".join(_fmt(r["success"]) for r in d["by_round"])
    lifts = ", ".join(f"{r['rounds'][-1]['vs_sft']['diff']:+.3f}" for r in seeds)
    steps = sum(r["real_env_steps"] for r in seeds) / len(seeds)
    return f"{_fmt(d['sft_success'])} -> {rounds} (paired lift per seed {lifts}; {steps:,.0f} real env steps per seed)"


def _gate_agreement(d: dict) -> str:
    """``68 of 72``: a world_vs_real.json's gate decisions alike in its two checks (``gate.agree`` of
    ``gate.decisions``)."""
    return f"{_get(d, 'gate.agree')} of {_get(d, 'gate.decisions')}"


def _lifts(d: dict, *arms: str) -> str:
    """``+0.012 / -0.003 / ...``: each arm's paired difference against a policy_compare.json's reference."""
    return " / ".join(f"{_get(d, f'paired.{k}.mean_diff'):+.3f}" for k in arms)


def _extra_pair(d: dict, arm: str, vs: str) -> str:
    """``+0.012`` of a policy_compare.json extra pairing (``--pair ARM VS``), or ``not run``."""
    hit = [p for p in d.get("pairs") or [] if p["arm"] == arm and p["vs"] == vs]
    return f"{hit[0]['mean_diff']:+.3f}" if hit else "not run"


def _phase_lifts(lifts: dict) -> str:
    """``+0.012 [-0.02, +0.04] / ...``: paired lifts keyed by phase, in phase order (round 0, each
    co-evolution round, real RL); empty when there are none."""
    keys = sorted((k for k in lifts if k.startswith("round_")), key=lambda k: int(k.split("_")[1]))
    return " / ".join(_paired(lifts[k]) for k in [*keys, *(k for k in lifts if k == "real_rl")])


def _run_lifts(d: dict) -> str:
    """An imagination_lift.json's paired lifts over SFT (:func:`_phase_lifts`), or ``not kept`` for runs
    evaluated before episodes were kept."""
    return _phase_lifts(d.get("lift_vs_sft") or {}) or "not kept"


def _ablation(d: dict, name: str) -> str:
    """``0.428 (+0.010 [-0.02, +0.04]; -0.005 [...])``: an imagination_lift.json ablation's success, its paired
    lift over SFT and, where measured, over the full method's round 0."""
    a = d["ablations"][name]
    lifts = [_paired(a[k]) for k in ("lift_vs_sft", "lift_vs_round_0") if a.get(k)]
    return _fmt(a["imagination_rl_success"]) + (f" ({'; '.join(lifts)})" if lifts else "")


def _paired(x: dict | None) -> str:
    """``+0.012 [-0.020, +0.040]`` of a mean paired lift, or ``not run``."""
    return "not run" if not x else f"{x['diff']:+.3f} [{x['ci95'][0]:+.3f}, {x['ci95'][1]:+.3f}]"


#: the fits the multi_step_dynamics.json rows read, in order
MSD_FITS = ("0", "8", "8arm")


def _msd_pair(r: dict | None) -> str:
    """``+0.018 (0.009; 155 / 123); +0.013 [-0.008, +0.034]`` of a multi_step_dynamics.json paired row."""
    if not r:
        return "not run"
    ci = r.get("precision_change_ci95")
    return (f"{r['agreement_change']:+.3f} ({_fmt(r['agreement_change_se'])}; {r['fixed']:.0f} / {r['broken']:.0f}); "
            + ("n/a" if r.get("precision_change") is None else f"{r['precision_change']:+.3f}")
            + ("" if ci is None else f" [{ci[0]:+.3f}, {ci[1]:+.3f}]"))


def _pairs(d: dict, names: list[str]) -> str:
    """``a - b +0.012 [-0.020, +0.040]; ...`` of a paired_arms.json's pairs ``names``."""
    return "; ".join(f"{n} {_paired(d['pairs'].get(n))}" for n in names)


def _smrl_paired(d: dict) -> str:
    """``SFT -> after; real steps; paired lift [CI]`` of a state_model_rl.json's state-model world."""
    return f"{_smrl(d, 'steps')}; {_paired(d['worlds']['state_model'].get('lift_vs_sft'))}"


def _curve_paired(d: dict) -> str:
    """``SFT -> each budget's success; each budget's paired lift [CI]`` of a real_rl.json default variant."""
    return f"{_curve(d)}; " + " / ".join(_paired(c.get("lift_vs_sft")) for c in d["variants"]["default"]["curve"])


def _rl_paired(d: dict) -> str:
    """``SFT -> after; paired lift [CI]`` of a real_rl.json default variant."""
    v = d["variants"]["default"]
    return f"{_fmt(v['sft_success'])} -> {_fmt(v['rl_success'])}; {_paired(v.get('lift_vs_sft'))}"


def _coevolution_variant(d: dict, name: str) -> str:
    """``rounds 1 / 2 vs the default's: +0.021 [...] / +0.017 [...]`` of an imagination_lift.json
    co-evolution variant, or ``not run``."""
    v = (d.get("coevolution_variants") or {}).get(name)
    if not v:
        return "not run"
    return " / ".join(_paired(v["vs_default"].get(k)) for k in sorted(v["vs_default"]))


def _vs_real_rl(d: dict) -> str:
    """``+0.012 [-0.009, +0.033]``: an imagination_lift JSON's round 0 minus real RL at the same budget, paired."""
    g = d["goals"]["imagination_vs_real_rl"]
    return _paired({"diff": g["value"], "ci95": g["ci95_paired"]} if "ci95_paired" in g else None)


def _phase_successes(d: dict) -> str:
    """``0.406 / 0.419 / [0.433, 0.406] / 0.431``: an imagination_lift JSON's SFT, RL in imagination,
    co-evolution rounds and real-RL success."""
    return " / ".join(_fmt(d[k]) for k in ("sft_success", "imagination_rl_success", "coevolution_success_by_round",
                                            "real_rl_same_budget_success"))


def _rounds_vs_round_0(d: dict) -> str:
    """``-0.012 [...] / -0.025 [...]``: co-evolution rounds 1 and 2 against round 0, paired."""
    return " / ".join(_paired(d["lift_vs_round_0"].get(k)) for k in ("round_1", "round_2"))


def _smrl(d: dict, extra: str = "") -> str:
    """``SFT -> after`` of a state_model_rl.json; ``extra``: ``real`` appends `` / `` real GRPO at the same
    iterations, ``steps`` appends ``; `` the real env steps used per seed."""
    out = f"{_fmt(d['sft_success'])} -> {_fmt(d['state_model_rl_success'])}"
    if extra == "real":
        return f"{out} / {_fmt(d['real_rl_same_iterations_success'])}"
    if extra == "steps":
        return f"{out}; {_fmt(d['worlds']['state_model']['real_env_steps_used'])}"
    return out


def _headroom(d: dict, std: str) -> str:
    """``mean-action success / pass@8 / learnable failed starts / never solved`` of rl_headroom.json."""
    row = (d.get("by_std") or {}).get(std) or {}
    return " / ".join(_fmt(v) for v in (d.get("mean_action_success"), _get(row, "pass_at_k.8"),
                                         _get(row, "failed_starts.learnable"),
                                         _get(row, "failed_starts.never_solved_in_n")))


def _agreement(d: dict, std: str = "0.1") -> str:
    """rl_headroom --imagined: sampled success imagined / real, precision of an imagined success,
    per-start success-rate Pearson, and the GRPO advantage cosine imagined vs real (chance p95)."""
    row = (d.get("imagined") or {}).get(std) or {}
    sm, adv = row.get("samples") or {}, row.get("advantage") or {}
    return (f"{_fmt(sm.get('imagined_success'))} / {_fmt(sm.get('real_success'))}; precision "
            f"{_fmt(sm.get('precision'))}; Pearson {_fmt(row.get('start_rate_pearson'))}; cosine "
            f"{_fmt(adv.get('cosine'))} (chance p95 {_fmt(_get(adv, 'cosine_shuffled.p95'))})")


_REPLAY_ROWS = {"state": "state_model_open_loop", "rendered": "state_model_rendered", "drawn": "model_drawn_real"}


def _replay(d: dict, std: str = "0.1", key: str = "twin") -> str:
    """rl_headroom replays of the real sampled groups (``key``: the pixel-noise ``twin``, the ``state``
    model open loop, the state model closed loop ``rendered`` by the simulator, the real dynamics
    ``drawn`` by the world model): success of the replay / real, per-sample agreement, per-start
    Pearson, advantage cosine."""
    per_std = (d.get("twin" if key == "twin" else "imagined") or {}).get(std) or {}
    row = per_std if key == "twin" else per_std.get(_REPLAY_ROWS[key]) or {}
    sm, adv = row.get("samples") or {}, row.get("advantage") or {}
    return (f"{_fmt(sm.get('imagined_success'))} / {_fmt(sm.get('real_success'))}; agreement "
            f"{_fmt(sm.get('agreement'))}; Pearson {_fmt(row.get('start_rate_pearson'))}; cosine "
            f"{_fmt(adv.get('cosine'))} (chance p95 {_fmt(_get(adv, 'cosine_shuffled.p95'))})")


def _gap(d: dict) -> str:
    """frames_follow_states: frame-state gap (px) at h=16 per mode, and the projection floor."""
    m = d.get("mean_over_runs") or {}
    parts = [f"{k.replace('_', ' ')} {_fmt(_get(m, k + '.frame_state_gap_px')[-1])}"
             for k in ("alone", "real_states", "state_model") if _get(m, k + ".frame_state_gap_px")]
    return "; ".join(parts) + f" (floor {_fmt(d.get('projection_error_px'))})"


def _drift(d: dict) -> str:
    """wm_state_drift: closed-loop target-cube error at chunks 1 / 4 / 8 / final (cm), the resting
    cubes' imagined creep (cm), and state-rule success real / imagined."""
    o = d["overall"]
    cm = [_get(o, f"target_error_closed_loop.{c}") for c in ("chunk_1", "chunk_4", "chunk_8", "final")]
    creep = o.get("resting_cube_creep_imagined")
    return (" / ".join(_fmt(None if v is None else 100 * v) for v in cm)
            + f" cm; resting creep {_fmt(None if creep is None else 100 * creep)} cm; success real "
            f"{_fmt(o['success_real'])} / imagined {_fmt(o['success_imagined'])}")


def _best_sweep(d: dict) -> str:
    """The threshold sweep's best Spearman and its threshold, e.g. "0.802 at 0.8"."""
    sweep = [(v["spearman"], t) for t, v in (d.get("threshold_sweep") or {}).items() if v.get("spearman") is not None]
    if not sweep:
        return "n/a"
    rho, t = max(sweep)
    return f"{_fmt(rho)} at {t}"


def _ranking_block(d: dict, key: str, detail: Callable[[dict], str]) -> str:
    """Spearman of one held-out reading of ``wm_policy_ranking.json`` (``d[key]``) followed by
    ``detail(block)``; "not run" before the block existed, its error when it has no Spearman."""
    b = d.get(key)
    if not b:
        return "not run"
    if b.get("spearman") is None:
        return (b.get("error") or b.get("calibration", {}).get("error") or "undefined")[:60]
    return f"{_fmt(b['spearman'])}{detail(b)}"


def _ranking_readings(d: dict, *expected: str) -> str:
    """``0.54 / 0.68 / ...``: a wm_policy_ranking JSON's Spearman at 0.5, calibrated, persistence, the
    ``expected`` blocks named, fine-tuned and the real retest (the noise ceiling)."""
    keys = ("calibrated.spearman", "persistence.spearman", *(f"{e}.spearman" for e in expected),
            "finetuned.spearman", "noise_ceiling.spearman")
    return " / ".join(_fmt(v) for v in (d.get("spearman"), *(_get(d, k) for k in keys)))


def _calibrated(d: dict) -> str:
    """Spearman at the held-out calibrated threshold, e.g. "0.85 at 0.80"."""
    return _ranking_block(d, "calibrated", lambda b: f" at {b['calibration']['threshold']:.2f}")


def _persistence(d: dict) -> str:
    """Spearman when a success must persist, e.g. "0.88 (4 frames at 0.70)"."""
    return _ranking_block(
        d, "persistence", lambda b: f" ({b['frames']} frames at {b['calibration']['threshold']:.2f})"
    )


def _expected(d: dict, tag: str) -> str:
    """Spearman of the expected-success reading ``tag`` and its Brier score against a per-policy
    constant, e.g. "0.90 (Brier 0.20 vs 0.22)"."""
    return _ranking_block(d.get("expected") or {}, tag,
                          lambda b: f" (Brier {_fmt(b['brier'])} vs {_fmt(b['brier_constant'])})")


def _finetuned(d: dict) -> str:
    """Spearman with the success model fine-tuned on paired imagined frames, and its per-episode AUROC
    next to the run model's, e.g. "0.90 at 0.62 (episode AUROC 0.80 vs 0.72)"."""

    def detail(b: dict) -> str:
        auc = (f" (episode AUROC {_fmt(b['episode_auroc'])} vs {_fmt(b['episode_auroc_run_model'])})"
               if "episode_auroc" in b else "")
        return f" at {b['calibration']['threshold']:.2f}{auc}"

    return _ranking_block(d, "finetuned", detail)


RESOLVED_READINGS = ("plain", "calibrated", "persistence", "expected_max_p", "expected_persisted", "finetuned",
                     "real_retest")


def _resolved(d: dict) -> str:
    """A ranking JSON's ``resolved_pairs``: how many policy pairs the real simulator tells apart, and
    the share of them each reading of ``RESOLVED_READINGS`` orders the same way ("-" where the run
    has no such reading), e.g. "50 of 66: 0.79 / 0.80 / ... / 1.00"."""
    b = d.get("resolved_pairs")
    if not b:
        return "not run"
    acc = b["accuracy"]
    vals = " / ".join(_fmt(acc[k]["accuracy"]) if k in acc else "-" for k in RESOLVED_READINGS)
    return f"{b['num_pairs']} of {b['of_pairs']}: {vals}"


def _state_ranking(d: dict, reading: str = "state_model") -> str:
    """A state_model_ranking JSON: Spearman [95% CI] / the resolved pairs it orders right / the real
    retest's Spearman / the weakest SFT budget's success against the full SFT policy's (state model;
    real), e.g. "0.89 [0.8, 0.98] / 51 + 1 tied of 52 / 0.91 / 0.09 vs 0.49 (real 0.04 vs 0.40)".
    ``reading="learned_renderer"``: the same for its world drawn by the learned renderer."""
    acc = _get(d, f"resolved_pairs.accuracy.{reading}") or {}
    block = d if reading == "state_model" else d.get(reading) or {}
    rows, imagined = d.get("policies") or {}, block.get("policies") or {}
    budgets = sorted((int(n.rsplit("_", 1)[1]), n) for n in rows if n.startswith("sft_steps_"))
    weak = ""
    if budgets and "sft" in rows and "sft" in imagined:
        w, f = rows[budgets[0][1]], rows["sft"]
        weak = (f" / {imagined[budgets[0][1]]['imagined_success']:.2f} vs {imagined['sft']['imagined_success']:.2f} "
                f"(real {w['real_success']:.2f} vs {f['real_success']:.2f})")
    ties = f" + {acc['ties']} tied" if acc.get("ties") else ""
    return (f"{_fmt(block.get('spearman'))} {[round(v, 2) for v in block.get('spearman_ci95') or []]} / "
            f"{acc.get('agree', 'n/a')}{ties} of {acc.get('pairs', 'n/a')} / "
            f"{_fmt(_get(d, 'noise_ceiling.spearman'))}{weak}")


def _drawn_real(d: dict) -> str:
    """A state_model_ranking JSON's real simulator drawn by the learned renderer: Spearman / resolved pairs
    ordered right / the SFT policy's success on drawn frames against real ones."""
    rd = _get(d, "learned_renderer.real_dynamics") or {}
    acc = _get(d, "resolved_pairs.accuracy.learned_renderer_real_dynamics") or {}
    ties = f" + {acc['ties']} tied" if acc.get("ties") else ""
    sft = f" / SFT {_fmt(_get(rd, 'success.sft'))} vs {_fmt(_get(d, 'policies.sft.real_success'))}" if rd else ""
    return f"{_fmt(rd.get('spearman'))} / {acc.get('agree', 'n/a')}{ties} of {acc.get('pairs', 'n/a')}{sft}"


def _main_job(d: dict) -> str:
    """A main job's results.json: wall time; SFT -> RL in imagination -> co-evolution rounds; real RL."""
    return (f"{_fmt(d['wall_time_s'])}; {_fmt(d['sft_success'])} -> {_fmt(d['imagination_rl_success'])} -> "
            f"{_fmt(d['coevolution_success_by_round'])}; {_fmt(d['real_rl_same_budget_success'])}")


def _ranking_rows(file: str, where: str) -> list[tuple[str, str, Callable[[dict], Any], str]]:
    """The two README rows of a wm_policy_ranking result on run ``where``: every reading's Spearman, and
    the share of the resolved pairs each orders right."""
    return [
        (file, f"same benchmark on {where}: Spearman at 0.5 / calibrated / persistence / expected (max p) / "
         "expected (persisted) / fine-tuned / real retest",
         lambda d: _ranking_readings(d, "expected.max_p", "expected.persisted"), ">= 0.9"),
        (file, f"same pairs reading, {where}", _resolved, ""),
    ]


# (file, label, path-or-fn, goal)
ROWS: list[tuple[str, str, str | Callable[[dict], Any], str]] = [
    ("sim_throughput.json", "built-in suite, 16 envs, 64x64 render: env-steps/s", "steps_per_s.batched_16", ">= 1,000"),
    ("sim_throughput.json", "built-in suite, 64 envs: env-steps/s", "steps_per_s.batched_64", ""),
    ("sim_throughput.json", "batched 16 / gymnasium SyncVectorEnv 16", "ratio_vs_sync_vector_16", ">= 2"),
    ("sim_throughput.json", "gymnasium Pusher-v5 + 64x64 render: steps/s (peer)", "pusher_v5_steps_per_s", ""),
    ("sim_throughput.json", "built-in render options, 16 envs: slowdown of shadows / supersample 2 / untiled frames "
     "(tiled_frames=False; then at 64 envs)",
     lambda d: " / ".join(f"{_fmt(_get(d, f'render_option_cost.{k}'))}x"
                          for k in ("shadows", "supersample2", "untiled", "untiled_64")), ""),
    ("chunk_end_frames.json", "frames drawn only where read (chunk ends, videos): speedup in the real sim / "
     "state model / learned renderer / renderer-drawn real / main-job evaluation; outcomes identical",
     lambda d: " / ".join(f"{_fmt(_get(d, f'worlds.{w}.speedup'))}x" for w in
                          ("real", "state_model", "learned_renderer", "learned_renderer_real_dynamics"))
     + f" / {_fmt(_get(d, 'evaluation.speedup'))}x; {_fmt(d.get('outcomes_identical'))}", "identical"),
    ("train_speed.json", "main job's hot paths, the replaced implementation against the current one side by side: "
     "speedup of the world model's context-noise draw / its training step / SFT's random shift / an SFT step / "
     "the demos' replays in the world model / the demos' collection with its background writer",
     lambda d: " / ".join(f"{_fmt(_get(d, f'speedup.{k}'))}x" for k in
                          ("context_noise", "wm_train_step", "random_shift", "sft_step", "replays", "demos_writer")), ""),
    ("expert_calibration.json", "scripted experts, worst task at noise 0 (100 episodes each)", "min_success_at_noise_0", ">= 0.95"),
    ("expert_calibration.json", "scripted experts, mean success at noise 0 / 0.25 / 0.5 / 1.0",
     lambda d: " / ".join(_fmt(v) for v in d["mean_success_by_noise"].values()), "graded"),
    ("wm_fidelity.json", "world model family (CPU default)", "family", ""),
    ("wm_fidelity.json", "PSNR at h=16 (model / copy-last)",
     lambda d: f"{_fmt(_last(d.get('psnr_by_horizon')))} / {_fmt(_last(_get(d, 'baseline_copy_last.psnr_by_horizon')))}",
     "model >= copy-last + 3 dB"),
    ("wm_fidelity.json", "object error px at h=16 (model / copy-last)",
     lambda d: f"{_fmt(_last(d.get('object_error_px_by_horizon')))} / "
     f"{_fmt(_last(_get(d, 'baseline_copy_last.object_error_px_by_horizon')))}", "model <= copy-last / 2"),
    ("wm_fidelity.json", "from a reset (context = first frame x4): PSNR at h=16 (model / copy-last)",
     lambda d: f"{_fmt(_last(_get(d, 'from_reset.psnr_by_horizon')))} / "
     f"{_fmt(_last(_get(d, 'from_reset.baseline_copy_last.psnr_by_horizon')))}", ""),
    ("wm_fidelity.json", "action-shuffle moving-PSNR drop (dB)", "action_shuffle_psnr_drop", ">= 2"),
    ("wm_fidelity.json", "imagined frames/s (batch 32, 64x64)", "imagined_frames_per_s", ">= 100"),
    ("policy_sft.json", "SFT success, small demo budget", "small_budget_success", "0.2-0.6"),
    ("policy_sft.json", "SFT success, large demo budget", "large_budget_success", ">= 0.8"),
    ("reward_models.json", "IDM R2 (mean of position dims)", "idm_r2.position_mean", ">= 0.9"),
    ("reward_models_supersample2.json", "IDM R2, anti-aliased frames (supersample 2): x / y / z (position mean)",
     _idm_xyz, ">= 0.9"),
    ("reward_models_shadows.json", "IDM R2, frames with shadows: x / y / z (position mean)",
     _idm_xyz, ">= 0.9"),
    ("reward_models_supersample2_shadows_idm12k.json",
     "IDM R2, supersample 2 + shadows, IDM trained 12k steps (not 3k): x / y / z (position mean)", _idm_xyz, ">= 0.9"),
    ("reward_models_supersample2_shadows_idm12k_ep2160.json",
     "same, 2,160 episodes (not 1,080), split seed 0: x / y / z (position mean)", _idm_xyz, ">= 0.9"),
    ("reward_models_supersample2_shadows_idm12k_ep2160_seed1.json",
     "same, split and training seed 1: x / y / z (position mean)", _idm_xyz, ">= 0.9"),
    ("reward_models.json", "success model AUROC", "success_auroc", ">= 0.95"),
    ("reward_models.json", "executability AUROC", "executability_auroc", ">= 0.9"),
    ("imagination_lift.json", "SFT success (real sim)", "sft_success", ""),
    ("imagination_lift.json", "after RL in imagination", "imagination_rl_success", ">= SFT + 0.30"),
    ("imagination_lift.json", "co-evolution success by round", "coevolution_success_by_round", ""),
    ("imagination_lift.json", "RL in real sim, same real budget", "real_rl_same_budget_success", "imagination RL >= this"),
    ("imagination_lift.json", "lift over SFT paired episode by episode (mean of the seeds [95% CI of the evaluation]): "
     "RL in imagination / co-evolution rounds / real RL, same real budget", _run_lifts, ""),
    ("imagination_lift.json", "seeds", "seeds", ">= 3"),
    ("imagination_lift_s43.json", "the three seeds on the code of session 43 (runs/s43/lift, num_threads=1), "
     "every world model trained all 2,000 steps (900 s cap; no ablations): SFT / RL in imagination / co-evolution rounds / real RL", _phase_successes,
     ">= SFT + 0.30"),
    ("imagination_lift_s43.json", "same runs, lift over SFT paired episode by episode (mean of the seeds [95% CI]): "
     "RL in imagination / co-evolution rounds / real RL, same real budget", _run_lifts, ">= +0.30"),
    ("imagination_lift.json", "whole main job per seed: wall time, default threads, one run at a time on 2 cores "
     "without native bf16 (AVX2 only), the world model stopped by its 900 s cap (s)",
     lambda d: " / ".join(_fmt(v.get("wall_time_s")) for v in (d.get("per_seed") or {}).values()), "<= 1,800 (30 min)"),
    ("imagination_lift.json", "ablation: KIR off (start at t=0), after RL in imagination (paired vs SFT; vs the full method's round 0)",
     lambda d: _ablation(d, "kir_off"), ""),
    ("imagination_lift.json", "ablation: gating off, after RL in imagination (paired vs SFT; vs the full method's round 0)",
     lambda d: _ablation(d, "gating_off"), ""),
    ("imagination_lift_s40.json", "the previous measurement (runs/s40/lift, num_threads=1, the world model's 600 s cap of "
     "then): SFT / RL in imagination / co-evolution rounds / real RL, same real budget; lift over SFT, paired (RL in "
     "imagination / co-evolution rounds / real RL)", lambda d: f"{_phase_successes(d)}; {_run_lifts(d)}", ">= SFT + 0.30"),
    ("imagination_lift_s40.json", "same: whole main job per seed, CPU time on 1 thread, two runs side by side on 2 cores "
     "without native bf16 (AVX2 only; s)",
     lambda d: " / ".join(_fmt(v.get("cpu_time_s")) for v in (d.get("per_seed") or {}).values()), "<= 1,800 (30 min)"),
    ("imagination_lift_s40.json", "same: ablation KIR off / gating off, after RL in imagination (paired vs SFT; vs the "
     "full method's round 0)", lambda d: f"{_ablation(d, 'kir_off')} / {_ablation(d, 'gating_off')}", ""),
    ("imagination_lift_s40.json", "same runs, round 0 again with other keyframe starts: the later half of each demo's "
     "pre-success part (late, imagination.keyframes.strategy=late) / half of them from the last 24 frames of failed "
     "demos (nearfail, near_failure) (paired vs SFT; vs the full method's round 0)",
     lambda d: f"{_ablation(d, 'late')} / {_ablation(d, 'nearfail')}", ""),
    ("imagination_lift_s40.json", "same runs, round 0 again scored by the change in success probability over the episode "
     "(relret: imagination.reward=relative rl.score=return) (paired vs SFT; vs the full method's round 0)",
     lambda d: _ablation(d, "relret"), ""),
    ("imagination_lift_s38.json", "the previous measurement, same recipe before the faster hot paths (runs/s38/lift): "
     "SFT / RL in imagination / co-evolution rounds / real RL, same real budget; rounds 1 / 2 vs round 0 (paired)",
     lambda d: f"{_phase_successes(d)}; {_rounds_vs_round_0(d)}", ""),
    ("imagination_lift_s38.json", "same: lift over SFT, paired (RL in imagination / co-evolution rounds / real RL)",
     _run_lifts, ""),
    ("imagination_lift_s38.json", "same: whole main job per seed, CPU time on 1 thread, two runs side by side (s)",
     lambda d: " / ".join(_fmt(v.get("cpu_time_s")) for v in (d.get("per_seed") or {}).values()), ""),
    ("main_job_default_alone.json", "the README's main job (`wmrl run`, seed 0, sft.steps=10000) alone on a 2-core "
     "AVX-512 machine with native bf16, default threads, current code (runs/s46/new: SFT in a child process beside the "
     "world model, then its evaluation there; the IDM on whichever side is free first): wall time (s); "
     "SFT -> RL in imagination -> co-evolution rounds; real RL", _main_job, "<= 1,800 (30 min)"),
    ("main_job_default_alone.json", "same: its repeat (runs/s46/new2), wall time (s)",
     lambda d: _fmt(d["repeat_wall_time_s"]), "<= 1,800 (30 min)"),
    ("main_job_default_alone_s46_before.json", "the same command on the code before (runs/s46/base and base2, run "
     "alternately with the two above: SFT alone in the child; the IDM and SFT's evaluation after both, on 2 threads): "
     "wall time (s) of the two runs; SFT -> RL in imagination -> co-evolution rounds; real RL",
     lambda d: f"{_fmt(d['wall_time_s'])} / {_fmt(d['repeat_wall_time_s'])}; {_main_job(d).split('; ', 1)[1]}",
     "<= 1,800 (30 min)"),
    ("main_job_default_alone_s85.json", "the same command on a 2-core AVX-512 machine with native bf16, code of "
     "session 85 (runs/s85/main: the world model's 2,000 steps in 385 s, SFT beside it 444 s; the same figures as "
     "session 46's AVX-512 machine)", _main_job, "<= 1,800 (30 min)"),
    ("main_job_default_alone_s77.json", "the same command on the 2-core AVX2-only machine, code of session 76 "
     "(runs/s77/default: a world-model step 0.59 s on one thread, so the 900 s cap stopped it at 1,562 of 2,000 "
     "steps; SFT 885 s)", _main_job, "<= 1,800 (30 min)"),
    ("main_job_default_alone_s75.json", "the same command on the 2-core AVX2-only machine on a slow day, code of "
     "session 74 (runs/s75/default: a world-model step 0.64 s on one thread against 0.36-0.41 s in session 42, so "
     "the 900 s cap stopped it at 1,435 of 2,000 steps; SFT 957 s against 661-672 s)", _main_job, "<= 1,800 (30 min)"),
    ("main_job_default_alone_s42a.json", "the same command on the 2-core AVX2-only machine without native bf16 "
     "(runs/s42/a, SFT alone in a child process on one core beside the world model on the other)",
     _main_job, "<= 1,800 (30 min)"),
    ("main_job_default_alone_s42b.json", "the same command again (runs/s42/b): every checkpoint byte-identical to "
     "runs/s42/a's", _main_job, "<= 1,800 (30 min)"),
    ("main_job_default_alone_s41b.json", "the same command before SFT moved beside the world model (runs/s41/b: the "
     "two one after the other on both cores, world model cap 600 s)", _main_job, "<= 1,800 (30 min)"),
    ("main_job_default_alone_s41a.json", "the same command before the demos' background writer (runs/s41/a): every "
     "checkpoint byte-identical to runs/s41/b's (the world model's lr now anneals by step while it keeps pace)",
     _main_job, "<= 1,800 (30 min)"),
    ("main_job_default_alone_s39.json", "the same command after the faster hot paths, lr annealed by the larger of the "
     "step and time shares (runs/s39/default)", _main_job, "<= 1,800 (30 min)"),
    ("main_job_default_alone_s38.json", "the same run before the faster hot paths (train_speed.json; runs/s38/default)",
     _main_job, "<= 1,800 (30 min)"),
    ("main_job_default_alone_s40.json", "the same command again later that day as s39 (runs/s40/default): the "
     "same SFT and real-RL policies, another world model (its lr schedule followed the time share of its 600 s cap)",
     _main_job, "<= 1,800 (30 min)"),
    ("imagination_lift_s32.json", "the previous main-job measurement (runs/s32, sft.steps=5000, before rl.max_kl): "
     "SFT / RL in imagination / co-evolution rounds / real RL, same real budget", _phase_successes, ""),
    ("imagination_lift_s32.json", "same: lift over SFT, paired (RL in imagination / co-evolution rounds / real RL)",
     _run_lifts, ""),
    ("imagination_lift_s32.json", "same: ablation KIR off / gating off, after RL in imagination (paired vs SFT; vs the "
     "full method's round 0)", lambda d: f"{_ablation(d, 'kir_off')} / {_ablation(d, 'gating_off')}", ""),
    ("imagination_lift_s32.json", "same: whole main job per seed, CPU time on 1 thread, on that faster host (s)",
     lambda d: " / ".join(_fmt(v.get("cpu_time_s")) for v in (d.get("per_seed") or {}).values()), ""),
    ("imagination_lift_s32.json", "same runs: co-evolution rounds 1 / 2 again from the same round 0, the success model "
     "also refit on the world model's replays, against the default's same round (paired): all replays (replayall, the "
     "old default) / failed rollouts' replays only (replayfail, coevolution.replay_outcomes=failures)",
     lambda d: f"{_coevolution_variant(d, 'replayall')}; {_coevolution_variant(d, 'replayfail')}", ""),
    ("imagination_lift_coevolution.json", "the same runs with the previous default coevolution.imagined_success_labels"
     "=true: co-evolution success by round (rounds 1 / 2 vs round 0, paired)",
     lambda d: f"{_fmt(d['coevolution_success_by_round'])} ({_rounds_vs_round_0(d)})", ""),
    ("imagination_lift_coevolution.json", "same runs: ablation KIR off / gating off, after RL in imagination (paired vs "
     "SFT; vs the full method's round 0)", lambda d: f"{_ablation(d, 'kir_off')} / {_ablation(d, 'gating_off')}", ""),
    ("imagination_lift_coevolution.json", "co-evolution rounds 1 / 2 again from the same round 0, each against the "
     "labels=true run's same round (paired): no model fine-tuning (noft)", lambda d: _coevolution_variant(d, "noft"), ""),
    ("imagination_lift_coevolution.json", "same: world model fine-tuned only (wmft) / success model only (smft)",
     lambda d: f"{_coevolution_variant(d, 'wmft')}; {_coevolution_variant(d, 'smft')}", ""),
    ("imagination_lift_coevolution.json", "same: rollouts not up-weighted (failure_weight 1, fw1) / success model "
     "refit without the world model's replays of them (nolabels)",
     lambda d: f"{_coevolution_variant(d, 'fw1')}; {_coevolution_variant(d, 'nolabels')}", ""),
    ("imagination_lift_coevolution.json", "round 0 with 48 GRPO iterations instead of 16 (it48), after RL in "
     "imagination (paired vs SFT; vs the 16-iteration round 0)", lambda d: _ablation(d, "it48"), ""),
    ("imagination_lift_wmgpu.json", "the runs of imagination_lift_s43.json, round 0 again in world models trained on "
     "an H200 (wmgpu: batch 64 for 360 s, 4,336-4,417 steps, 8.7-8.8x the windows; reward models retrained on them): "
     "RL in imagination (paired vs SFT; vs the default round 0)", lambda d: _ablation(d, "wmgpu"), ">= SFT + 0.30"),
    ("imagination_lift_s43_wmdata.json", "seeds 0-1 of imagination_lift_s43.json: co-evolution round 1 again with "
     "600 real rollouts of the round-0 policy and 1,500 world-model fine-tune steps (onpol) / the same steps on "
     "the default 24 rollouts (ft1500), each against the default round 1 (paired)",
     lambda d: f"{_coevolution_variant(d, 'onpol')}; {_coevolution_variant(d, 'ft1500')}", ""),
    ("imagination_lift_minkept.json", "4 seeds, defaults before rl.max_kl: the s32 runs (seeds 0-2) and a fresh seed-3 main job "
     "(runs/s33/seed_3): SFT / RL in imagination / co-evolution rounds / real RL, same budget; rounds 1 / 2 vs round 0 "
     "(paired)",
     lambda d: f"{_phase_successes(d)}; {_rounds_vs_round_0(d)}", "last round >= round 0 + 0.05"),
    ("imagination_lift_minkept.json", "same runs, GRPO updating only when >= 4 groups are kept (rl.min_kept_groups=4; "
     "no iteration of any round kept more than 3, so no update): round 0 (paired vs SFT; vs the default round 0); "
     "rounds 1 / 2 again from the default round 0, against the default's same round",
     lambda d: f"{_ablation(d, 'minkept4')}; {_coevolution_variant(d, 'minkept4')}", ""),
    ("imagination_lift_maxkl.json", "same runs, a trust region on every GRPO update (rl.max_kl=0.01, now the default: "
     "an update's KL from the behaviour policy, 0.17 nats per chunk in imagination (median), halved back to <= 0.01): "
     "round 0 (paired vs SFT; vs the old default round 0); rounds 1 / 2 again from the old round 0, against the old "
     "default's same round",
     lambda d: f"{_ablation(d, 'maxkl01')}; {_coevolution_variant(d, 'maxkl01')}", ""),
    ("imagination_lift_maxkl.json", "same, rl.max_kl=0.05",
     lambda d: f"{_ablation(d, 'maxkl05')}; {_coevolution_variant(d, 'maxkl05')}", ""),
    ("imagination_lift_maxkl.json", "new default end to end (--full-variant maxkl01 rl.max_kl=0.01: every phase after "
     "SFT again, same SFT policies): SFT / RL in imagination / co-evolution rounds / real RL, same budget; rounds 1 / 2 "
     "vs round 0 (paired; old default -0.012 / -0.025)",
     lambda d: f"{_phase_successes(d['full_variants']['maxkl01'])}; "
               f"{_rounds_vs_round_0(d['full_variants']['maxkl01'])}", "last round >= round 0 + 0.05"),
    ("imagination_lift_maxkl.json", "same, each phase against the old default's same phase (paired): round 0 / "
     "round 1 / round 2 / real RL", lambda d: _phase_lifts(d["full_variants"]["maxkl01"]["vs_default"]), ""),
    ("imagination_lift_iters64.json", "same runs, 64 GRPO iterations per round instead of 16 under the trust region "
     "(--full-variant iters64 rl.max_kl=0.01 rl.iterations=64; 239 updates against 66): SFT / RL in imagination / "
     "co-evolution rounds / real RL, same budget; rounds 1 / 2 vs round 0 (paired)",
     lambda d: f"{_phase_successes(d['full_variants']['iters64'])}; "
               f"{_rounds_vs_round_0(d['full_variants']['iters64'])}", "last round >= round 0 + 0.05"),
    ("imagination_lift_iters64.json", "same, each phase against the 16-iteration default's same phase (paired, "
     "--full-reference maxkl01): round 0 / round 1 / round 2 / real RL (the same single real update)",
     lambda d: _phase_lifts(d["full_variants"]["iters64"]["vs_reference"]), ""),
    ("imagination_lift_ppo.json", "same runs, PPO for every phase after SFT (rl=ppo rl.exploration_std=0.1): SFT / "
     "round 0 / rounds 1, 2 / real RL at the same budget without the trust region, then the same with it "
     "(rl.max_kl=0.01)",
     lambda d: f"{_phase_successes(d['full_variants']['ppo'])} / {_phase_successes(d['full_variants']['ppo_maxkl01'])}",
     ""),
    ("imagination_lift_ppo.json", "same, PPO with the trust region against GRPO (the default), each phase paired: "
     "round 0 / round 1 / round 2 / real RL", lambda d: _phase_lifts(d["full_variants"]["ppo_maxkl01"]["vs_reference"]),
     ""),
    ("imagination_lift_ppo_epochs.json", "same runs, PPO with the new defaults (2 epochs of one 512-chunk minibatch, "
     "rl.max_kl=0.01): SFT / round 0 / rounds 1, 2 / real RL at the same budget",
     lambda d: _phase_successes(d["full_variants"]["ppo2"]), ""),
    ("imagination_lift_ppo_epochs.json", "same, against GRPO (the default), each phase paired: round 0 / round 1 / "
     "round 2 / real RL", lambda d: _phase_lifts(d["full_variants"]["ppo2"]["vs_reference"]), ""),
    ("imagination_lift_ppo_epochs_vs_old.json", "same, against PPO's old defaults (4 epochs of 64, with the trust "
     "region), each phase paired", lambda d: _phase_lifts(d["full_variants"]["ppo2"]["vs_reference"]), ""),
    ("imagination_lift_eval120.json", "previous measurement (120 episodes per phase; its real-RL baseline trained on 2 "
     "of the 6 tasks): SFT / RL in imagination / co-evolution rounds / real RL", _phase_successes, ""),
    ("real_rl.json", "GRPO in the real sim from SFT, 380k real steps/seed: SFT -> after (seeds lifted)",
     lambda d: _variant(d, "default"), ""),
    ("real_rl.json", "same, previous settings (SFT-fitted std 0.3, 64-sample minibatches)",
     lambda d: _variant(d, "sft_std_minibatch64"), ""),
    ("real_rl_sweep.json", "same benchmark on the state-rule runs' SFT policies: defaults / exploration_std 0.05 "
     "with 4 update epochs", lambda d: f"{_variant(d, 'default')} / {_variant(d, 'std05_ep4')}", ""),
    ("real_rl_ratio.json", "same benchmark (fresh runs of the same recipe), one clipped importance ratio per action "
     "dimension (rl.ratio=dim) against one per chunk (the default): chunk / dim",
     lambda d: " / ".join(_variant(d, k) for k in ("default", "dim")), ""),
    ("real_rl_ratio_rlseed1.json", "same, repeated with other GRPO starts and noise (--rl-seed 1): chunk / dim",
     lambda d: " / ".join(_variant(d, k) for k in ("default", "dim")), ""),
    ("real_rl_ratio_rlseed2.json", "same, --rl-seed 2: chunk / dim",
     lambda d: " / ".join(_variant(d, k) for k in ("default", "dim")), ""),
    ("real_rl_dense.json", "same benchmark, the real env's staged dense reward (real_rl_reward=dense) with GRPO "
     "scoring failures by their progress (rl.score=progress): advantages divided by the group std / not",
     lambda d: " / ".join(_variant(d, k) for k in ("dense_progress", "dense_progress_nostd")), ""),
    ("real_rl_pool.json", "same benchmark, GRPO cycling a fixed pool of 64 starts (rl.start_pool=64, each seen every 8 "
     "iterations): held-out success; sampled success on the pool's starts, first vs last 8 iterations",
     _pool, ""),
    ("fixed_starts.json", "LIBERO's protocol (benchmarks.fixed_starts): GRPO cycles a fixed pool of 96 starts per "
     "seed (16 per task), 64 iterations, and is scored on the same starts (mean action): SFT -> RL in imagination "
     "from their frame 0 / from keyframes of SFT's real episodes there / real GRPO on the pool (paired +- s.e.)",
     _fixed_starts, ">= +0.30"),
    ("fixed_starts.json", "same policies on the runs' 600 held-out starts",
     lambda d: _fixed_starts(d, "held_out"), ""),
    ("fixed_starts_rlseed1.json", "same, repeated with another pool, GRPO starts and noise (--rl-seed 1): on the "
     "pool / held out", _fixed_starts_both, ">= +0.30"),
    ("fixed_starts_it16.json", "same, 16 iterations of each RL arm (the runs' own): on the pool / held out",
     _fixed_starts_both, ""),
    ("fixed_starts_real25.json", "same pool, real GRPO trained on to 25 iterations (resumed from the 16-iteration "
     "arm; sm_branch's real budget): on the pool / held out (paired vs SFT +- s.e.)",
     _real_pool, ""),
    ("fixed_starts_real128.json", "same, real GRPO to 128 iterations (resumed from the 64-iteration arm): on the "
     "pool / held out", _real_pool, ""),
    ("fixed_starts_real256.json", "same, real GRPO to 256 iterations: on the pool / held out",
     _real_pool, ""),
    ("fixed_starts_im256_real512.json", "same pool, RL in imagination to 256 iterations and real GRPO to 512 "
     "(resumed): on the pool / held out", _fixed_starts_both, ">= +0.30"),
    ("fixed_starts_sm.json", "same pool, GRPO in the branched state-model world (sm_branch: a bootstrap ensemble of 3 "
     "arm-and-object models, each episode's first 24 steps real, ended as a failure past 2.5 cm disagreement), 64 "
     "iterations: on the pool / held out", _sm_branch, ">= +0.30"),
    ("fixed_starts_sm_rlseed1.json", "same, repeated with another pool, GRPO starts and noise (--rl-seed 1): on the "
     "pool / held out", _sm_branch, ">= +0.30"),
    ("fixed_starts_sm_it256.json", "same as fixed_starts_sm.json, sm_branch trained on to 256 iterations (resumed): "
     "on the pool / held out", _sm_branch, ">= +0.30"),
    ("fixed_starts_sm_branch.json", "same as fixed_starts_sm.json, GRPO trained on the model's branches only "
     "(--train-on branch): on the pool / held out", _sm_branch, ""),
    ("fixed_starts_sm_prefix.json", "same, GRPO trained on the real prefixes only, scored by where the model's branch "
     "ends (--train-on prefix): on the pool / held out", _sm_branch, ""),
    ("fixed_starts_sm_k12.json", "same as fixed_starts_sm.json with half the real prefix (--real-steps 12 of about "
     "60): on the pool / held out", _sm_branch, ">= +0.30"),
    ("fixed_starts_sm_k12_rlseed1.json", "same, repeated with another pool, GRPO starts and noise (--rl-seed 1): on the "
     "pool / held out", _sm_branch, ">= +0.30"),
    ("fixed_starts_it16_rlseed1.json", "the --rl-seed 1 pool, 16 iterations of each RL arm (real GRPO at sm_branch "
     "K=12's real budget): on the pool / held out",
     _fixed_starts_both, ""),
    ("fixed_starts_sm_renderer.json", "same as fixed_starts_sm.json, the model's branches drawn by the run's learned "
     "state renderer from the real frame each starts from (--renderer renderer: dynamics and drawing learned): on the "
     "pool / held out", _sm_branch, ">= +0.30"),
    ("fixed_starts_sm_renderer_k12.json", "same, 12 real steps per episode (--real-steps 12): on the pool / held out",
     _sm_branch, ">= +0.30"),
    ("fixed_starts_sm_renderer_k12_rlseed1.json", "same, repeated with another pool, GRPO starts and noise "
     "(--rl-seed 1): on the pool / held out", _sm_branch, ">= +0.30"),
    ("fixed_starts_sm_renderer_k12_it256.json", "same as fixed_starts_sm_renderer_k12.json, trained on to 256 "
     "iterations (resumed; beside real GRPO at 256): on the pool / held out",
     _sm_branch, ">= +0.30"),
    ("fixed_starts_sm_coevo.json", "same pool, co-evolution after fixed_starts_sm.json's sm_branch (--coevolution-rounds "
     "1): 64 more GRPO iterations in the state models fitted again on the demos plus sm_branch's 96 real pool "
     "rollouts / the control, 64 more in the unchanged models: on the pool / held out",
     _coevolution, ">= sm_branch + 0.05"),
    ("fixed_starts_sm_coevo_rlseed1.json", "same, repeated with another pool, GRPO starts and noise (--rl-seed 1): "
     "refitted / control, on the pool / held out",
     _coevolution, ">= sm_branch + 0.05"),
    ("fixed_starts_sm_k12_coevo3.json", "same pool, three co-evolution rounds after fixed_starts_sm_k12.json's "
     "sm_branch (12 real steps; --coevolution-rounds 3): after round 3 (256 GRPO iterations in all), state models "
     "refitted each round on the demos plus every earlier policy's 96 real pool rollouts / the control, unchanged "
     "models: on the pool / held out",
     _coevolution, ">= sm_branch + 0.05"),
    ("fixed_starts_sm_k12_coevo3_rlseed1.json", "same, repeated with another pool, GRPO starts and noise "
     "(--rl-seed 1): refitted / control after round 3, on the pool / held out",
     _coevolution, ">= sm_branch + 0.05"),
    ("fixed_starts_sm_k12_coevo5.json", "same pool, five co-evolution rounds (--coevolution-rounds 5, resumed from "
     "the three-round work folders): after round 5 (384 GRPO iterations in all), refitted / control, on the pool / "
     "held out", _coevolution, ">= sm_branch + 0.05"),
    ("fixed_starts_sm_k12_coevo5_rlseed1.json", "same, --rl-seed 1: refitted / control after round 5, on the pool / "
     "held out", _coevolution, ">= sm_branch + 0.05"),
    ("fixed_starts_sm_k12_demos3.json", "same pool and rounds as fixed_starts_sm_k12_coevo3.json (resumed from its "
     "work folders) with the data control (--data-control): after round 3, models refitted on the policy's pool "
     "rollouts | refitted on as many scripted-expert episodes from the pool starts | unchanged, on the pool / held "
     "out", _coevolution, "sm_coevo > sm_demos"),
    ("fixed_starts_sm_k12_demos3_rlseed1.json", "same, --rl-seed 1 (from fixed_starts_sm_k12_coevo3_rlseed1.json's "
     "work folders)", _coevolution, "sm_coevo > sm_demos"),
    ("fixed_starts_sm_k12_demos5.json", "same pool, five rounds with the data control (resumed from the five-round "
     "and the three-round data-control work folders): after round 5, refitted on the policy's rollouts | on as many "
     "expert episodes | unchanged, on the pool / held out", _coevolution, "sm_coevo > sm_demos"),
    ("fixed_starts_sm_k12_demos5_rlseed1.json", "same, --rl-seed 1", _coevolution, "sm_coevo > sm_demos"),
    ("fixed_starts_sm_k12_gate3.json", "same pool, three rounds with the data control and the gate control "
     "(--gate-control 0.035: a line in the unchanged models behind a looser gate that ends about as many pool "
     "episodes as the refits' 0.025 gate): after round 3, refitted | expert refit | unchanged | unchanged, gate "
     "0.035, on the pool / held out", _coevolution, "sm_coevo > sm_gate"),
    ("fixed_starts_sm_k12_gate3_rlseed1.json", "same, --rl-seed 1", _coevolution, "sm_coevo > sm_gate"),
    ("fixed_starts_sm_k12_gate5.json", "same pool, five rounds with the data control and the gate control (resumed "
     "from the five-round data-control and three-round gate-control work folders): after round 5, refitted | expert "
     "refit | unchanged | unchanged, gate 0.035, on the pool / held out", _coevolution, "sm_coevo > sm_gate"),
    ("fixed_starts_sm_k12_gate5_rlseed1.json", "same, --rl-seed 1", _coevolution, "sm_coevo > sm_gate"),
    ("fixed_starts_sm_k12_warm5.json", "same pool, five rounds with the data and gate controls and a line whose state "
     "models are fine-tuned each round from the previous round's (--warm-refit 1000, from lr 3e-4) on the data the "
     "refit line fits from scratch: after round 5, refitted | expert refit | unchanged | unchanged, gate 0.035 | "
     "fine-tuned, on the pool / held out", _coevolution, "sm_warm ~ sm_coevo"),
    ("fixed_starts_sm_k12_warm5_rlseed1.json", "same, --rl-seed 1", _coevolution, "sm_warm ~ sm_coevo"),
    ("fixed_starts_sm_k12_warm8.json", "same pool, the fine-tuned line alone for eight rounds (--lines sm_warm "
     "--coevolution-rounds 8, resumed from its five-round folders): after round 5 | round 8, on the pool / held out",
     _warm_rounds, ">= +0.30"),
    ("fixed_starts_sm_k12_warm8_rlseed1.json", "same, --rl-seed 1",
     _warm_rounds, ">= +0.30"),
    ("fixed_starts_s55_k12_warm5.json", "LIBERO's protocol on today's main jobs (runs/s55/lift, 3 seeds, 96 pool "
     "starts each, RL seed 0): on the pool, paired vs SFT (s.e.), real GRPO 64 it / branched world (12 real steps, "
     "64 it) / rounds 1-5 of the fine-tuned line (--lines sm_warm --warm-refit 1000); round 5 on the pool / held "
     "out", _warm_line, ">= +0.30"),
    ("fixed_starts_s55_k12_warm1_g20.json", "same pools, the ensemble's gate at 2.0 cm instead of 2.5 "
     "(--max-disagreement 0.020; base arms copied; --no-held-out): real GRPO / branched world / round 1 of the "
     "fine-tuned line, on the pool", _warm_line, ""),
    ("paired_pool_s57.json", "the s55 pools paired start by start (benchmarks.paired_arms; w1 / w5: fine-tuned "
     "line after round 1 / 5; real: real GRPO 64 it; _g20: gate 2.0 cm; H: held out): differences [95% CI]",
     lambda d: _pairs(d, ["w5 - sft_pool", "w5 - w1", "w5 - real", "sm_g20 - sm", "w1_g20 - w1", "w5H - sft",
                          "w5H - realH"]), ">= +0.30"),
    ("fixed_starts_s55_real85.json", "same pools, real GRPO trained on to 85 iterations (resumed from the 64-iteration "
     "arm): the fine-tuned line's real budget after round 5; on the pool / held out",
     _real_pool, ""),
    ("fixed_starts_s55_real128.json", "same, real GRPO to 128 iterations: on the pool / held out",
     _real_pool, ""),
    ("fixed_starts_s55_k12_warm3_ft3000.json", "same pools, the fine-tuned line with 3,000 fine-tuning steps a round "
     "instead of 1,000 (--warm-refit 3000; base arms copied; --no-held-out): real GRPO / branched world / rounds 1-3, "
     "on the pool", _warm_line, ""),
    ("paired_pool_s58.json", "the s55 pools paired start by start (benchmarks.paired_arms; real85 / real128: real GRPO "
     "85 / 128 it; w5: fine-tuned line after round 5; _3k: 3,000 fine-tuning steps; H: held out): differences [95% CI]",
     lambda d: _pairs(d, ["real85 - sft_pool", "w5 - real85", "w5 - real128", "w1_3k - w1", "w2_3k - w2",
                          "w3_3k - w3", "real85H - sft", "w5H - real85H"]), "w5 >= real85"),
    ("fixed_starts_s55_k12_warm3_fw3.json", "same pools, the fine-tuned line with its failed pool rollouts drawn 3 "
     "times as often in each fine-tune (--warm-refit-failure-weight 3, the main job's co-evolution weight; base arms "
     "copied): real GRPO / branched world / rounds 1-3, on the pool; round 3 on the pool / held out", _warm_line, ""),
    ("fixed_starts_s55_k12_warm5_latest.json", "same pools, the fine-tuned line fine-tuned on the demos plus the newest "
     "round's pool rollouts only (--warm-refit-data latest; round 1, the same data, copied): real GRPO / branched "
     "world / rounds 1-5, on the pool; round 5 on the pool / held out", _warm_line, ""),
    ("paired_pool_s59.json", "the s55 pools paired start by start (benchmarks.paired_arms; w: the fine-tuned line, "
     "fw: its failures weighted 3, lt: fine-tuned on the newest rollouts only; the digit: the round; real85: real "
     "GRPO 85 it; H: held out): differences [95% CI]",
     lambda d: _pairs(d, ["fw3 - w3", "lt3 - w3", "lt5 - w5", "lt5 - real85", "fw3H - w3H", "lt5H - w5H",
                          "lt5H - real85H"]),
     ""),
    ("fixed_starts_s55_k12_rend.json", "same pools, every part of the world learned: the branched world and the "
     "fine-tuned line drawn by each run's learned renderer (--renderer renderer; real GRPO and the pixel arms copied): "
     "real GRPO / branched world / each round of the line, on the pool; its last round on the pool / held out",
     _warm_line, ""),
    ("paired_pool_s60.json", "the s55 pools paired start by start (benchmarks.paired_arms; r: drawn by the learned "
     "renderer, else by the simulator; b / sm: the branched world; w1 / wL: the fine-tuned line after round 1 / its "
     "last round here; real: real GRPO 64 it; H: held out): differences [95% CI]",
     lambda d: _pairs(d, ["rb - sm", "rw1 - w1", "rwL - wL", "rwL - rw1", "rwL - real", "rbH - smH", "rwLH - wLH",
                          "rwLH - sft", "rwLH - realH"]),
     ""),
    ("fixed_starts_s55_real27.json", "same pools, real GRPO for 27 iterations (the fine-tuned lines' real budget "
     "after round 1, about 78k steps; the pixel arms copied): on the pool / held out", _real_pool, ""),
    ("fixed_starts_s55_real42.json", "same, real GRPO for 42 iterations (the lines' budget after round 2, about "
     "119k steps)", _real_pool, ""),
    ("paired_pool_s61.json", "the s55 pools paired start by start, each fine-tuned line against real GRPO at its own "
     "real budget (benchmarks.paired_arms; w / rw: the line drawn by the simulator / by the learned renderer, the "
     "digit its round; real27 / real42: real GRPO 27 / 42 it; H: held out): differences [95% CI]",
     lambda d: _pairs(d, ["w1 - real27", "rw1 - real27", "w2 - real42", "rw2 - real42", "real42 - sft_pool",
                          "w1H - real27H", "rw1H - real27H", "w2H - real42H", "rw2H - real42H"]),
     "imagination >= real RL at the same budget"),
    ("fixed_starts_s55_k12_rendft.json", "same pools, the renderer-drawn fine-tuned line with its renderer fine-tuned "
     "too each round (--warm-refit-renderer 500: the demos plus the round's pool rollouts, half the draws; the "
     "branched world and base arms copied from session 60): real GRPO / branched world / each round, on the pool; "
     "its last round on the pool / held out", _warm_line, ""),
    ("paired_pool_s61_rft.json", "the s55 pools paired start by start (benchmarks.paired_arms; rf1: round 1 of the "
     "line whose renderer is fine-tuned; rw1 / w1: round 1 drawn by the renderer as fitted / by the simulator; "
     "real27: real GRPO at the same real budget; H: held out): differences [95% CI]",
     lambda d: _pairs(d, ["rf1 - rw1", "rf1 - w1", "rf1 - real27", "rf1H - rw1H", "rf1H - w1H", "rf1H - real27H"]),
     ""),
    ("renderer_shift_s61.json", "the s55 runs' learned renderers on the renderer-drawn line's own pool rollouts "
     "(benchmarks.renderer_shift; drawn from each episode's real first frame): PSNR before -> after a 500-step "
     "fine-tune on the demos plus round 1's policy's pool rollouts (half the draws), scored on round 2's policy's "
     "(gain per seed)", _renderer_shift, ""),
    ("paired_pool_s62.json", "the s55 pools paired start by start (benchmarks.paired_arms; rw4 / rw5: the renderer-drawn "
     "line after round 4 / 5; real85: real GRPO 85 it, the same 241k real steps as round 5; H: held out): "
     "differences [95% CI]",
     lambda d: _pairs(d, ["rw5 - rw4", "rw5 - real85", "rw5H - rw4H", "rw5H - real85H"]), "rw5 >= real85"),
    ("cube_turns_s55_sim.json", "how far the target cube turns in the s55 pool episodes (benchmarks.cube_turns; the "
     "worlds' environment state holds cube xyz, not orientation): per policy, the share of episodes turned past "
     "15 deg modulo the cube's symmetries (success of the turned / unturned); sft, real GRPO 64 it, the branched "
     "world, the simulator-drawn fine-tuned line's rounds 1 and 5", _cube_turns, ""),
    ("cube_turns_s55_rend.json", "same, the renderer-drawn line: its branched world and rounds 1, 4 and 5",
     _cube_turns, ""),
    ("cube_turns_s55_held_out_sim.json", "same measure on the runs' 600 held-out starts each (--held-out; the "
     "outcomes are the held-out scores', episode for episode): sft, real GRPO 64 it, the simulator-drawn line's "
     "round 5", _cube_turns, ""),
    ("cube_turns_s55_held_out_rend.json", "same, held out: the renderer-drawn line's rounds 1 and 4", _cube_turns, ""),
    ("cube_turns_s55_branch.json", "same pools, each episode branched from its real state at step 12 in the runs' "
     "state models (--state-models od_boot_100 od_boot_101 od_boot_102; each member open loop with the episode's "
     "real actions): median distance of the target cube from the real one at the episode's end, turned / unturned "
     "(the members' largest spread); sft, real GRPO 64 it, the simulator-drawn line's round 5", _cube_turns_branch,
     ""),
    ("cube_turns_s55_held_out_branch.json", "same branches of SFT's 600 held-out episodes per run in the runs' "
     "state models as fitted on the demos", _cube_turns_branch, ""),
    ("cube_turns_s55_held_out_branch_warm5.json", "same, in the simulator-drawn line's state models after five "
     "rounds of fine-tuning on its pool rollouts (runs/s57/fs/warm/{run}/sm_warm_5/state_models)",
     _cube_turns_branch, ""),
    ("orientation_dynamics.json", "do the cubes' orientations help a state model? (benchmarks.orientation_dynamics; "
     "arm-and-object models fitted on 360 expert episodes with the cubes' quaternions, 3 fit seeds, positions only / "
     "also reading and predicting orientation (rotation weight 0.05) / the latter given the real orientation at "
     "every step; branched at step 12, open loop with the real actions): median final target-cube error, turned / "
     "unturned episodes, on 240 expert test episodes and SFT's 600 held-out episodes (runs/s65/base)",
     _orientation_dynamics, ""),
    ("orientation_dynamics_w1.json", "same, the orientation models' rotation loss weighted 1 (--rotation-weight 1; "
     "the same position models)", _orientation_dynamics, ""),
    ("orientation_dynamics_4x.json", "same, fitted on four times the expert episodes (240 per task; "
     "--train-episodes-per-task 240)", _orientation_dynamics, ""),
    ("coevolution_fidelity_k12_coevo3.json", "fixed_starts_sm_k12_coevo3.json's worlds scored against the real "
     "simulator (benchmarks.coevolution_fidelity): the round-3 refit / control policy played from each start in "
     "the real sim and in the branched world, share of starts whose real outcome the world reproduces, original "
     "models -> round-3 refit (paired +- s.e.): on the pool / 96 new starts per seed",
     _fidelity, ""),
    ("coevolution_fidelity_k12_coevo3_rlseed1.json", "same, fixed_starts_sm_k12_coevo3_rlseed1.json's worlds and "
     "policies (--rl-seed 1)", _fidelity, ""),
    ("coevolution_fidelity_k12_demos3.json", "fixed_starts_sm_k12_demos3.json's round-3 policies (refit line, "
     "data control, control) scored in the original models / the round-3 refit on the policy's rollouts / the "
     "round-3 refit on as many expert episodes: share of starts whose real outcome the world reproduces "
     "(refit minus expert refit, paired +- s.e.), on the pool / 96 new starts per seed", _fidelity_data, ""),
    ("coevolution_fidelity_k12_demos3_rlseed1.json", "same, fixed_starts_sm_k12_demos3_rlseed1.json's worlds and "
     "policies (--rl-seed 1)", _fidelity_data, ""),
    ("coevolution_fidelity_k12_demos5.json", "fixed_starts_sm_k12_demos5.json's round-5 policies (refit line, "
     "data control, control) in the original models / the round-5 refit / the round-5 expert refit: share of starts "
     "whose real outcome the world reproduces (refit minus expert refit, paired +- s.e.), on the pool / 96 new "
     "starts per seed", _fidelity_data, ""),
    ("coevolution_fidelity_k12_demos5_rlseed1.json", "same, --rl-seed 1", _fidelity_data, ""),
    ("coevolution_fidelity_k12_gate3.json", "fixed_starts_sm_k12_gate3.json's round-3 policies (refit line, "
     "control, gate control) in the original models / the round-3 refit / the original models behind the 0.035 gate: "
     "share of starts whose real outcome the world reproduces (refit minus gate world, paired +- s.e.), on the "
     "pool / 96 new starts per seed", lambda d: _fidelity_data(d, "gate"), ""),
    ("coevolution_fidelity_k12_gate3_rlseed1.json", "same, --rl-seed 1", lambda d: _fidelity_data(d, "gate"), ""),
    ("coevolution_fidelity_k12_gate5.json", "fixed_starts_sm_k12_gate5.json's round-5 policies (refit line, "
     "control, gate control) in the original models / the round-5 refit / the original models behind the 0.035 gate: "
     "share of starts whose real outcome the world reproduces (refit minus gate world, paired +- s.e.), on the "
     "pool / 96 new starts per seed", lambda d: _fidelity_data(d, "gate"), ""),
    ("coevolution_fidelity_k12_gate5_rlseed1.json", "same, --rl-seed 1", lambda d: _fidelity_data(d, "gate"), ""),
    ("coevolution_fidelity_k12_warm5.json", "fixed_starts_sm_k12_warm5.json's round-5 policies (refit line, control, "
     "fine-tuned line) in the original models / the round-5 refit / the round-5 fine-tuned models: share of starts "
     "whose real outcome the world reproduces (refit minus fine-tuned, paired +- s.e.), on the pool / 96 new starts "
     "per seed", lambda d: _fidelity_data(d, f"warm_{d['rounds']}"), ""),
    ("coevolution_fidelity_k12_warm5_rlseed1.json", "same, --rl-seed 1",
     lambda d: _fidelity_data(d, f"warm_{d['rounds']}"), ""),
    ("coevolution_fidelity_k12_warm8.json", "fixed_starts_sm_k12_warm8.json's fine-tuned line after round 5 / 8 in "
     "the original models / its round-5 / its round-8 fine-tuned models: share of starts whose real outcome the "
     "world reproduces (round-8 world minus original, paired +- s.e.), on the pool / 96 new starts per seed",
     _fidelity_worlds, ""),
    ("coevolution_fidelity_k12_warm8_rlseed1.json", "same, --rl-seed 1", _fidelity_worlds, ""),
    ("real_rl_freeze.json", "same benchmark, the vision encoder frozen in RL (rl.freeze=[net.image_enc]): lr 1e-4 / "
     "lr 3e-4", lambda d: " / ".join(_variant(d, k) for k in ("freeze_enc", "freeze_enc_lr3")), ""),
    ("real_rl_augment_ratio.json", "same benchmark, the clipped ratio scored on 4-pixel-shifted frames (RAD; the "
     "first form of rl.augment_shift, commit eec9276)", lambda d: _variant(d, "augment4"), ""),
    ("real_rl_drac.json", "same benchmark, rl.augment_shift=4: a shift-consistency KL (DrAC) with coefficient 0.1 / 1",
     lambda d: " / ".join(_variant(d, k) for k in ("drac4", "drac4_c1")), ""),
    ("self_imitation.json", "success-filtered self-imitation in the real sim (runs/s35/seed_5, runs/s34/seed_4): "
     "per round, 150 sampled successes per task (std 0.1) cloned with the demos, fine-tuning the policy; SFT -> "
     "round 0 / 1 / 2", _self_imitation, ""),
    ("self_imitation_hard.json", "same, hard starts (--group 8 --hard-max 0.5, 400 episodes per task): each start "
     "sampled 8 times, one success kept per start solved at most half the time; SFT -> round 0", _self_imitation, ""),
    ("self_imitation_demos_only.json", "the control: no collection, the same 5,000-step fine-tune on the demos alone "
     "(--demos-only); SFT -> round 0 / 1", _self_imitation, ""),
    ("self_imitation_demos_only_scratch10k.json", "same runs, SFT trained again from scratch for 10,000 steps instead of "
     "5,000 (--demos-only --init scratch --steps 10000; now the main job's sft.steps): SFT -> 10k", _self_imitation, ""),
    ("real_rl_si_runs.json", "GRPO in the real sim on the same two runs, side by side (the real_rl benchmark, default "
     "settings): SFT -> 380k / 520k real steps (100 / 137 iterations)", _curve, "imagination RL >= real RL at the "
     "same real budget"),
    ("self_imitation_od_arm.json", "self-imitation with the successes collected in the arm-and-object state model's "
     "world (od_arm, drawn by the simulator; the task's rule on its states): no real env steps beyond resets; SFT -> "
     "round 0 / 1 / 2", _self_imitation, ">= +0.30"),
    ("self_imitation_od_arm_hard.json", "same world, hard starts (--group 8 --hard-max 0.5, 800 episodes per task): "
     "one success per start that its group of 8 samples solves at most half the time; SFT -> round 0 / 1",
     _self_imitation, ">= +0.30"),
    ("self_imitation_od_arm_group_all.json", "same grouped play, one success per solved start, easy ones too "
     "(--hard-max 1.0; the control of the row above): SFT -> round 0", _self_imitation, ""),
    ("policy_compare_self_imitation.json", "600 held-out episodes per policy (seed 777000), mean of the two runs, "
     "lift over SFT (paired): real self-imitation round 2 / real hard starts round 0 (118k) / real GRPO 520k / "
     "state-model world round 2 / its hard starts round 0 / its one per solved start / the demos-only control",
     lambda d: _lifts(d, "si_real_r2", "si_real_hard_r0", "grpo_520k", "si_od_r2", "si_od_hard_r0", "si_od_all_r0",
                      "demos_only_r0"),
     ""),
    ("self_imitation_s66_demos_only.json", "today's main-job SFT (10,000 steps; runs/s65/base seed 0, runs/s66/base1 "
     "seed 1): the control, 10,000 more steps on the demos alone (--demos-only); SFT -> round 0", _self_imitation, ""),
    ("self_imitation_s66_demos_only_2k.json", "same, 2,000 more steps (--steps 2000)", _self_imitation, ""),
    ("self_imitation_s66_real_hard.json", "same runs, hard starts in the real sim (--group 8 --hard-max 0.5, 400 "
     "episodes per task), 10,000-step fine-tune; SFT -> round 0", _self_imitation, ""),
    ("self_imitation_s66_od_arm_hard.json", "same, the state model's world (od_arm: fitted on the demos), no real "
     "steps beyond resets; SFT -> round 0", _self_imitation, ">= +0.30"),
    ("self_imitation_s66_od_arm_pol_hard.json", "same, a state model fitted on the demos plus 720 real episodes of "
     "the SFT policy at std 0.1 (od_arm_pol; 28.5k-29.7k real steps for the fit, not counted here); SFT -> round 0",
     _self_imitation, ">= +0.30"),
    ("self_imitation_s66_od_arm_pol_hard_2k.json", "same world, 2,000-step fine-tune (--steps 2000); SFT -> round 0",
     _self_imitation, ">= +0.30"),
    ("self_imitation_s66_real.json", "same runs, plain collection in the real sim (up to 150 successes per task, "
     "--target 150 --max-episodes 1500), 10,000-step fine-tune; SFT -> round 0", _self_imitation, ""),
    ("self_imitation_s66_od_arm_pol.json", "same, plain collection in od_arm_pol's world, two rounds (--rounds 2: "
     "round 1 collects with round 0's policy and clones both rounds' successes); SFT -> round 0 / 1",
     _self_imitation, ">= +0.30"),
    ("policy_compare_self_imitation_s66.json", "these runs' policies on 600 held-out episodes each (seed 777000), "
     "mean of the two runs, lift over SFT (paired): demos-only 10k / real hard starts / od_arm / od_arm_pol / "
     "od_arm_pol 2k / demos-only 2k / plain real / plain od_arm_pol / its round 1",
     lambda d: _lifts(d, "si_ctrl", "si_real", "si_od", "si_pol", "si_pol2k", "si_ctrl2k", "si_realplain",
                      "si_polplain", "si_polplain_r1"), ">= +0.30"),
    ("sampled_success_gap_s66.json", "how far each world's sampled success (std 0.1, the hard-start collections "
     "above, starts from the same seeds) sits from the real sim's, task by task (benchmarks.sampled_success_gap): "
     "mean |gap| and mean gap over tasks and runs",
     lambda d: "; ".join(f"{k} {w['mean_abs_gap']:.3f} ({w['mean_gap']:+.3f})" for k, w in d["worlds"].items()), ""),
    ("self_imitation_s67_real.json", "session 67: the plain real line's further rounds (--rounds N, resuming session "
     "66's round 0: round r's policy collects 150 more successes per task, every round's cloned); SFT -> round 0 / "
     "1 / ...", _self_imitation, ""),
    ("self_imitation_s67_od_arm_pol.json", "same, the plain line in od_arm_pol's world, more rounds (--rounds N: "
     "round r collects with round r-1's policy and clones every round's successes); SFT -> round 0 / 1 / ...",
     _self_imitation, ">= +0.30"),
    ("self_imitation_s67_od_arm_refit.json", "same, the world co-evolving: before each round od_arm is fitted again on "
     "the demos plus 720 real episodes of the policy entering the round (--object-dynamics od_arm --refit-episodes "
     "720; round 0's world is od_arm_pol byte for byte, its round reused); SFT -> round 0 / 1", _self_imitation,
     ">= +0.30"),
    ("policy_compare_self_imitation_s67.json", "these lines' policies on 600 held-out episodes each (seed 777000), mean "
     "of the two runs, lift over SFT (paired), per arm: real rounds (si_realplain[_rR]), od_arm_pol's world's rounds "
     "(si_polplain[_rR]), the refitted world's round 1 (si_refit_r1)",
     lambda d: "; ".join(f"{k} {_lifts(d, k)}" for k in d["arms"] if k != d["reference"]), ">= +0.30"),
    ("self_imitation_s68_od_arm_pol_hardbig.json", "session 68: hard starts at the scale of plain collection, in "
     "od_arm_pol's world (--group 8 --hard-max 0.5 --max-episodes 3200 --target 150: 400 starts per task, each "
     "sampled 8 times, one success kept per start solved at most half the time, 742-805 kept); SFT -> round 0",
     _self_imitation, ">= +0.30"),
    ("policy_compare_self_imitation_s68_hard.json", "the same runs' policies on 600 held-out episodes each (seed "
     "777000), lift over SFT (paired): plain collection (si_polplain, session 66) / hard starts at scale "
     "(si_polhardbig); hard minus plain",
     lambda d: f"{_lifts(d, 'si_polplain', 'si_polhardbig')}; {_extra_pair(d, 'si_polhardbig', 'si_polplain')}",
     ">= +0.30"),
    ("self_imitation_s68_real.json", "session 68: the plain real line on three base runs (runs/s65/base, "
     "runs/s66/base1, a new runs/s68/base2 seed 2); SFT -> round 0 / 1 / 2", _self_imitation, ""),
    ("self_imitation_s68_od_arm_pol.json", "same three runs, the plain line in od_arm_pol's world (no real steps "
     "beyond resets and the model's fit); SFT -> round 0 / 1 / 2 / 3", _self_imitation, ">= +0.30"),
    ("policy_compare_self_imitation_s68.json", "these two lines on 600 held-out episodes per policy (seed 777000), "
     "mean of the three runs, lift over SFT (paired), per arm; then od_arm_pol round 3 minus real round 2",
     lambda d: "; ".join(f"{k} {_lifts(d, k)}" for k in d["arms"] if k != d["reference"])
     + f"; {_extra_pair(d, 'si_polplain_r3', 'si_realplain_r2')}", ">= +0.30"),
    ("self_imitation_s68_od_arm_pol_big600.json", "one big round in od_arm_pol's world instead of four: 600 successes "
     "per task found by SFT (--target 600 --max-episodes 6000), the same three runs; SFT -> round 0",
     _self_imitation, ">= +0.30"),
    ("policy_compare_self_imitation_s68_big.json", "600 held-out episodes per policy (seed 777000), lift over SFT "
     "(paired): one round of 150 per task / two rounds / four rounds / one round of 600 per task; the big round minus "
     "two rounds / minus four",
     lambda d: f"{_lifts(d, 'si_polplain', 'si_polplain_r1', 'si_polplain_r3', 'si_polbig600')}; "
     f"{_extra_pair(d, 'si_polbig600', 'si_polplain_r1')} / {_extra_pair(d, 'si_polbig600', 'si_polplain_r3')}",
     ">= +0.30"),
    ("self_imitation_s69_od_arm_pol_rend.json", "session 69: the plain line's first round in od_arm_pol's world "
     "drawn by each run's learned state renderer (--renderer renderer: every part of the world learned), the same "
     "three runs, starts and noise as si_polplain; SFT -> round 0", _self_imitation, ">= +0.30"),
    ("policy_compare_self_imitation_s69_rend.json", "600 held-out episodes per policy (seed 777000), lift over SFT "
     "(paired): real round 0 / od_arm_pol's world drawn by the simulator / by the learned renderer; renderer minus "
     "simulator-drawn / minus real",
     lambda d: f"{_lifts(d, 'si_realplain', 'si_polplain', 'si_polrend')}; "
     f"{_extra_pair(d, 'si_polrend', 'si_polplain')} / {_extra_pair(d, 'si_polrend', 'si_realplain')}",
     ">= +0.30"),
    ("imagination_lift_self_imitation_s70.json", "session 70: the main job with self_imitation.enabled (round 0 is one "
     "self-imitation round in the arm-and-object state model's world, fitted on the demos + 720 real SFT episodes; "
     "coevolution.rounds=0, world model and reward models cut to 20 steps, num_threads=1, 3 seeds side by side on "
     "the 2-core AVX2 host): SFT / self-imitation / real GRPO at the same real budget",
     lambda d: " / ".join(_fmt(d[k]) for k in ("sft_success", "imagination_rl_success", "real_rl_same_budget_success")),
     ">= SFT + 0.30"),
    ("imagination_lift_self_imitation_s70.json", "same: lift over SFT on the runs' own 600 starts, paired "
     "(self-imitation / real GRPO); self-imitation minus real GRPO; real env steps, mean per seed",
     lambda d: f"{_run_lifts(d)}; {_vs_real_rl(d)}; {_fmt(d['real_env_steps_used'])}", ">= SFT + 0.30; >= real"),
    ("policy_compare_main_self_imitation_s70.json", "same runs, 600 held-out episodes per policy (seed 777000), lift "
     "over SFT (paired): self-imitation / real GRPO at the same real budget; self-imitation minus real GRPO",
     lambda d: f"{_lifts(d, 'si_main', 'real_rl')}; {_extra_pair(d, 'si_main', 'real_rl')}", ">= +0.30"),
    ("imagination_lift_self_imitation_coevolution_s71.json", "session 71: one co-evolution round with the "
     "self-imitation phase from session 70's runs' round 0 (--coevolution-variant si_r1 coevolution.rounds=1: 24 real "
     "episodes, the state model refitted on every real episode so far, 150 successes per task in its world, round 0's "
     "policy fine-tuned on the demos + both rounds' successes); own 600 starts: SFT -> round 0 / round 1; round 1 "
     "over SFT / over round 0 (paired)",
     lambda d: f"{_fmt(d['sft_success'])} -> {_fmt(d['imagination_rl_success'])} / "
     f"{_fmt(d['coevolution_variants']['si_r1']['coevolution_success_by_round'][0])}; "
     f"{_paired(d['coevolution_variants']['si_r1']['lift_vs_sft'].get('round_1'))} / "
     f"{_paired(d['coevolution_variants']['si_r1']['lift_vs_round_0'].get('round_1'))}", ">= +0.05 over round 0"),
    ("imagination_lift_self_imitation_coevolution_s71.json", "same runs, two co-evolution rounds (--coevolution-variant "
     "si_r2 coevolution.rounds=2, from si_r1's round 1; the main job's default round count): own 600 starts, round 1 "
     "/ round 2; round 2 over SFT / over round 0 (paired)",
     lambda d: " / ".join(_fmt(x) for x in d["coevolution_variants"]["si_r2"]["coevolution_success_by_round"])
     + f"; {_paired(d['coevolution_variants']['si_r2']['lift_vs_sft'].get('round_2'))} / "
     f"{_paired(d['coevolution_variants']['si_r2']['lift_vs_round_0'].get('round_2'))}", ">= +0.05 over round 0"),
    ("policy_compare_main_self_imitation_s71.json", "same runs, 600 held-out episodes per policy (seed 777000), lift "
     "over SFT (paired): round 0 / round 1 / real GRPO at round 0's real budget; round 1 minus round 0 / minus real GRPO",
     lambda d: f"{_lifts(d, 'si_main', 'si_r1', 'real_rl')}; {_extra_pair(d, 'si_r1', 'si_main')} / "
     f"{_extra_pair(d, 'si_r1', 'real_rl')}", ">= +0.05 over round 0"),
    ("policy_compare_main_self_imitation_s71.json", "same episodes, co-evolution round 2 (si_r2): lift over SFT; minus "
     "round 0 / minus round 1 / minus real GRPO at round 0's budget",
     lambda d: f"{_lifts(d, 'si_r2')}; {_extra_pair(d, 'si_r2', 'si_main')} / {_extra_pair(d, 'si_r2', 'si_r1')} / "
     f"{_extra_pair(d, 'si_r2', 'real_rl')}", ">= +0.05 over round 0"),
    ("imagination_lift_self_imitation_fast_s72.json", "session 72: session 70's round 0 again with a 2,000-step "
     "fine-tune instead of 10,000 (--variant si2k self_imitation.steps=2000; the same state model and collection): "
     "own 600 starts, success (lift over SFT; over the 10,000-step round 0, paired)",
     lambda d: _ablation(d, "si2k"), ">= SFT + 0.30"),
    ("imagination_lift_self_imitation_fast_s72.json", "same runs, co-evolution round 1 with the state model fine-tuned "
     "from round 0's for 1,000 steps instead of refitted from scratch (8,000) (--coevolution-variant si_r1warm "
     "object_dynamics.warm_refit_steps=1000), beside the scratch refit (si_r1): own 600 starts, round 1 over round 0 "
     "(paired): warm / scratch",
     lambda d: " / ".join(_paired(d["coevolution_variants"][k]["lift_vs_round_0"].get("round_1"))
                          for k in ("si_r1warm", "si_r1")), ">= +0.05 over round 0"),
    ("policy_compare_main_self_imitation_s72.json", "same runs, 600 held-out episodes per policy (seed 777000), lift "
     "over SFT (paired): round 0 (10k fine-tune) / round 0 with a 2k fine-tune / round 1 (scratch refit) / round 1 "
     "(warm refit); 2k minus 10k / warm minus scratch",
     lambda d: f"{_lifts(d, 'si_main', 'si2k', 'si_r1', 'si_r1warm')}; {_extra_pair(d, 'si2k', 'si_main')} / "
     f"{_extra_pair(d, 'si_r1warm', 'si_r1')}", ">= +0.05 over round 0"),
    ("imagination_lift_self_imitation_warm2_s73.json", "session 73: same runs, a second co-evolution round with the "
     "warm refit (--coevolution-variant si_r2warm coevolution.rounds=2 object_dynamics.warm_refit_steps=1000, from a "
     "copy of si_r1warm), beside the scratch-refit rounds (si_r2): own 600 starts, rounds 1 / 2 over round 0 (paired): "
     "warm; scratch",
     lambda d: "; ".join(_phase_lifts(d["coevolution_variants"][k]["lift_vs_round_0"]) for k in ("si_r2warm", "si_r2")),
     ">= +0.05 over round 0"),
    ("imagination_lift_self_imitation_warm2_s73.json", "same runs, round 0 again with a 20,000-step fine-tune instead "
     "of 10,000 (--variant si20k self_imitation.steps=20000; the same state model and collection): own 600 starts, "
     "success (lift over SFT; over the 10,000-step round 0, paired)",
     lambda d: _ablation(d, "si20k"), ">= SFT + 0.30"),
    ("policy_compare_main_self_imitation_s73.json", "same runs, 600 held-out episodes per policy (seed 777000), lift "
     "over SFT (paired): warm round 1 / warm round 2 / real GRPO at round 0's real budget / at round 2's "
     "(benchmarks.real_rl --curve, 28-31k real steps); warm round 2 minus round 0 / minus warm round 1 / minus real "
     "GRPO at its budget; round 0 with a 20,000-step fine-tune over SFT / over the 10,000-step round 0",
     lambda d: f"{_lifts(d, 'si_r1warm', 'si_r2warm', 'real_rl', 'real_rl_r2')}; {_extra_pair(d, 'si_r2warm', 'si_main')}"
     f" / {_extra_pair(d, 'si_r2warm', 'si_r1warm')} / {_extra_pair(d, 'si_r2warm', 'real_rl_r2')}; "
     f"{_lifts(d, 'si20k')} / {_extra_pair(d, 'si20k', 'si_main')}",
     ">= +0.05 over round 0"),
    ("imagination_lift_self_imitation_warm3_s74.json", "session 74: same runs, a third co-evolution round with the "
     "warm refit (--coevolution-variant si_r3warm coevolution.rounds=3 object_dynamics.warm_refit_steps=1000, from a "
     "copy of si_r2warm): own 600 starts, rounds 1 / 2 / 3 over round 0 (paired)",
     lambda d: _phase_lifts(d["coevolution_variants"]["si_r3warm"]["lift_vs_round_0"]), ">= +0.05 over round 0"),
    ("policy_compare_main_self_imitation_s74.json", "same runs, 600 held-out episodes per policy (seed 777000), lift "
     "over SFT (paired): warm round 3 / real GRPO at rounds 0-3's real budget (benchmarks.real_rl --curve, 31.8-33.9k "
     "real steps); warm round 3 minus round 0 / minus warm round 2 / minus real GRPO at its budget",
     lambda d: f"{_lifts(d, 'si_r3warm', 'real_rl_r3')}; {_extra_pair(d, 'si_r3warm', 'si_main')} / "
     f"{_extra_pair(d, 'si_r3warm', 'si_r2warm')} / {_extra_pair(d, 'si_r3warm', 'real_rl_r3')}",
     ">= +0.05 over round 0"),
    ("imagination_lift_self_imitation_warm4_s75.json", "session 75: same runs, a fourth co-evolution round with the "
     "warm refit (--coevolution-variant si_r4warm coevolution.rounds=4 object_dynamics.warm_refit_steps=1000, from a "
     "copy of si_r3warm): own 600 starts, rounds 1 / 2 / 3 / 4 over round 0 (paired)",
     lambda d: _phase_lifts(d["coevolution_variants"]["si_r4warm"]["lift_vs_round_0"]), ">= +0.05 over round 0"),
    ("paired_main_self_imitation_s75.json", "same runs, own 600 starts, paired start by start (benchmarks.paired_arms; "
     "real_r3 / real_r4: real GRPO at rounds 0-3's / 0-4's real budget, benchmarks.real_rl --curve, 31.8-35.1k real "
     "steps): differences [95% CI]",
     lambda d: _pairs(d, ["r4warm - sft", "r4warm - round_0", "r4warm - r3warm", "r4warm - real_r4", "real_r4 - sft"]),
     ">= +0.05 over round 0"),
    ("policy_compare_main_self_imitation_s75.json", "same runs, 600 held-out episodes per policy (seed 777000), lift "
     "over SFT (paired): warm round 4 / real GRPO at rounds 0-4's real budget (33.0-35.1k real steps); warm round 4 "
     "minus round 0 / minus warm round 3 / minus real GRPO at its budget",
     lambda d: f"{_lifts(d, 'si_r4warm', 'real_rl_r4')}; {_extra_pair(d, 'si_r4warm', 'si_main')} / "
     f"{_extra_pair(d, 'si_r4warm', 'si_r3warm')} / {_extra_pair(d, 'si_r4warm', 'real_rl_r4')}",
     ">= +0.05 over round 0"),
    ("imagination_lift_self_imitation_warm5_s76.json", "session 76: same runs, a fifth co-evolution round with the "
     "warm refit (--coevolution-variant si_r5warm coevolution.rounds=5 object_dynamics.warm_refit_steps=1000, from a "
     "copy of si_r4warm): own 600 starts, rounds 1 / 2 / 3 / 4 / 5 over round 0 (paired)",
     lambda d: _phase_lifts(d["coevolution_variants"]["si_r5warm"]["lift_vs_round_0"]), ">= +0.05 over round 0"),
    ("paired_main_self_imitation_s76.json", "same runs, own 600 starts, paired start by start (benchmarks.paired_arms; "
     "real_r5: real GRPO at rounds 0-5's real budget, benchmarks.real_rl --curve, 34.4-36.3k real steps): "
     "differences [95% CI]",
     lambda d: _pairs(d, ["r5warm - sft", "r5warm - round_0", "r5warm - r4warm", "r5warm - real_r5", "real_r5 - sft"]),
     ">= +0.05 over round 0"),
    ("policy_compare_main_self_imitation_s76.json", "same runs, 600 held-out episodes per policy (seed 777000), lift "
     "over SFT (paired): warm round 5 / real GRPO at rounds 0-5's real budget (34.4-36.3k real steps); warm round 5 "
     "minus round 0 / minus warm round 4 / minus real GRPO at its budget",
     lambda d: f"{_lifts(d, 'si_r5warm', 'real_rl_r5')}; {_extra_pair(d, 'si_r5warm', 'si_main')} / "
     f"{_extra_pair(d, 'si_r5warm', 'si_r4warm')} / {_extra_pair(d, 'si_r5warm', 'real_rl_r5')}",
     ">= +0.05 over round 0"),
    ("world_vs_real_self_imitation_s77.json", "session 77: same runs, each round's state-model world against the "
     "simulator start by start, for the policy entering the round, on the run's own evaluation starts "
     "(benchmarks.world_vs_real; 1,800 episodes a round): world / simulator success at round 0 and round 5; "
     "over-rating at rounds 0 / 1 / 2 / 3 / 4 / 5",
     lambda d: f"{_fmt(_get(d, 'by_round.0.all.imagined'))} / {_fmt(_get(d, 'by_round.0.all.real'))} and "
     f"{_fmt(_get(d, 'by_round.5.all.imagined'))} / {_fmt(_get(d, 'by_round.5.all.real'))}; "
     + " / ".join(f"{_get(d, f'by_round.{r}.all.overrating'):+.3f}" for r in range(6)), ""),
    ("world_vs_real_self_imitation_s77.json", "same: share of the world's successes that are real, rounds 0-5 pooled: "
     "PushCube / PushCubeSpatial / LiftCube / PlaceInBowl / PlaceInSpatialBowl / StackCube",
     lambda d: " / ".join(_fmt(_get(d, f"by_task.{t}.precision")) for t in (
         "PushCube-v0", "PushCubeSpatial-v0", "LiftCube-v0", "PlaceInBowl-v0", "PlaceInSpatialBowl-v0", "StackCube-v0")),
     ""),
    ("world_vs_real_self_imitation_s77.json", "same: round 5's world fine-tuned as round 6 would on 0 / 24 / 240 / 720 "
     "fresh real episodes of round 5's policy (up to 28k real steps per run), against that policy: over-rating",
     lambda d: " / ".join(f"{_get(d, f'refit.pooled.{n}.all.overrating'):+.3f}" for n in (0, 24, 240, 720)), ""),
    ("world_vs_real_self_imitation_s77.json", "same: the evaluation's real outcomes the same seeds reproduce in the "
     "simulator (SFT, per run, of 600)",
     lambda d: " / ".join(_fmt(v["reproduced"]) for v in (d.get("real_reproduced") or {}).values()), ""),
    ("paired_self_imitation_gate_s77.json", "session 77: same runs, a sixth warm round with the precision gate "
     "(self_imitation.min_precision=0.5: no successes cloned of a task whose world check counts under half real) and "
     "without it (the control), from copies of si_r5warm; own 600 starts, paired start by start: differences [95% CI]",
     lambda d: _pairs(d, ["r6gate - r6warm", "r6gate - round_0", "r6warm - round_0", "r6gate - r5warm", "r6gate - sft"]),
     ">= +0.05 over round 0"),
    ("policy_compare_self_imitation_gate_s77.json", "same runs, 600 held-out episodes per policy (seed 777000), lift "
     "over SFT (paired): gated round 6 / plain round 6; gated minus plain / gated minus round 0 / plain minus round 0",
     lambda d: f"{_lifts(d, 'si_r6gate', 'si_r6warm')}; {_extra_pair(d, 'si_r6gate', 'si_r6warm')} / "
     f"{_extra_pair(d, 'si_r6gate', 'si_main')} / {_extra_pair(d, 'si_r6warm', 'si_main')}",
     ">= +0.05 over round 0"),
    ("policy_compare_gate_budget_s78.json", "session 78: the same SFT policies re-made bit for bit (runs/s78/gate_seed_S; "
     "the outcomes of session 77's arms read with --arm-from), 600 held-out episodes per policy (seed 777000): real "
     "GRPO at rounds 0-6's real budget without / with the round-5 evaluation the gate read (35.6-37.5k / 61.0-64.0k "
     "real steps) over SFT; gated round 6 minus real GRPO at each; SFT minus session 77's SFT (reproduction)",
     lambda d: f"{_lifts(d, 'real_b6', 'real_be')}; {_extra_pair(d, 'r6gate_s77', 'real_b6')} / "
     f"{_extra_pair(d, 'r6gate_s77', 'real_be')}; {_extra_pair(d, 'sft', 'sft_s77')}",
     "imagination >= real RL at the same real budget"),
    ("policy_compare_gate_budget_s78.json", "same: the gate from round 0 on (self_imitation.min_precision=0.5 "
     "check_episodes=50, runs/s78/gate_seed_S) over SFT; minus session 70's round 0 without the gate",
     lambda d: f"{_lifts(d, 'r0gate')}; {_extra_pair(d, 'r0gate', 'r0_s77')}", ">= +0.05 over round 0"),
    ("paired_gate_budget_s78.json", "same runs, own 600 starts, paired start by start: gated round 0 / real GRPO at "
     "rounds 0-6's budget without / with the gate's evaluation over SFT: differences [95% CI]",
     lambda d: _pairs(d, ["r0gate - sft", "real_b6 - sft", "real_be - sft"]), ""),
    ("world_vs_real_gate_check_s78.json", "same runs, round 0: the gate's own check (50 fresh real starts per task, "
     "13k real steps) against the check on the evaluation's 100: task decisions alike at precision 0.5; precision "
     "PushCube / PushCubeSpatial / LiftCube / PlaceInBowl / PlaceInSpatialBowl / StackCube, fresh check pooled",
     lambda d: f"{_gate_agreement(d)}; " + " / ".join(
         _fmt(_get(d, f"gate.by_round.0.{t}.precision")) for t in (
             "PushCube-v0", "PushCubeSpatial-v0", "LiftCube-v0", "PlaceInBowl-v0", "PlaceInSpatialBowl-v0",
             "StackCube-v0")), ""),
    ("policy_compare_gate_line_s79.json", "session 79: the gated line (runs/s78/gate_seed_S: the gate on 50 fresh real "
     "starts per task from round 0 on), 600 held-out episodes per policy: rounds 1 / 2 / 3 over SFT; round 3 minus "
     "the gated round 0 / the ungated round 0 / the ungated round 3 (sessions 70-76, --arm-from)",
     lambda d: f"{_lifts(d, 'r1gate', 'r2gate', 'r3gate')}; {_extra_pair(d, 'r3gate', 'r0gate')} / "
     f"{_extra_pair(d, 'r3gate', 'r0_s76')} / {_extra_pair(d, 'r3gate', 'r3warm_s76')}", ">= +0.05 over round 0"),
    ("policy_compare_gate_line_s79.json", "same: real GRPO run on to the gated line's rounds 0-3 real budget "
     "(82.3-86.2k real steps, the gate's checks included) over SFT; gated round 3 minus it",
     lambda d: f"{_lifts(d, 'real_b3')}; {_extra_pair(d, 'r3gate', 'real_b3')}",
     "imagination >= real RL at the same real budget"),
    ("paired_gate_line_s79.json", "same runs, own 600 starts, paired start by start: gated round 3 over the gated round "
     "0 / over SFT; real GRPO at rounds 0-3's budget over SFT; gated round 3 over it: differences [95% CI]",
     lambda d: _pairs(d, ["r3gate - r0gate", "r3gate - sft", "real_b3 - sft", "r3gate - real_b3"]), ""),
    ("world_vs_real_gate_line_s79.json", "same runs, rounds 0-3: the gate's own check (50 fresh starts per task) "
     "against the check on the evaluation's 100: task decisions alike at precision 0.5; PushCube's precision by "
     "round, pooled over the runs",
     lambda d: f"{_gate_agreement(d)}; " + " / ".join(
         _fmt(_get(d, f"gate.by_round.{r}.PushCube-v0.precision")) for r in range(4)), ""),
    ("policy_compare_pool_line_s80.json", "session 80: the gated line with pooled checks (runs/s80/pool_seed_S: "
     "branched from the gated line's round 0, self_imitation.pool_checks=true), 600 held-out episodes per policy: "
     "rounds 1 / 2 / 3 over SFT; round 3 minus the gated round 0 / the gated round 3 (session 79, --arm-from)",
     lambda d: f"{_lifts(d, 'r1pool', 'r2pool', 'r3pool')}; {_extra_pair(d, 'r3pool', 'r0gate')} / "
     f"{_extra_pair(d, 'r3pool', 'r3gate')}", ">= +0.05 over round 0"),
    ("policy_compare_pool_line_s80.json", "same: pooled round 3 minus real GRPO at the gated line's rounds 0-3 real "
     "budget (82.3-86.2k real steps, session 79)",
     lambda d: _extra_pair(d, "r3pool", "real_b3"), "imagination >= real RL at the same real budget"),
    ("paired_pool_line_s80.json", "same runs, own 600 starts, paired start by start: pooled round 3 over round 0 / "
     "over SFT: differences [95% CI]",
     lambda d: _pairs(d, ["r3pool - r0", "r3pool - sft"]), ""),
    ("policy_compare_pool20_line_s81.json", "session 81: the pooled gate on 20 fresh starts per task "
     "(runs/s81/pool20_seed_S: branched from the gated line's round 0, self_imitation.check_episodes=20 "
     "pool_checks=true; 6.0-6.9k real steps a round against 13.9-14.8k), 600 held-out episodes per policy: rounds 1 / 2 "
     "over SFT; round 2 minus the gated line's round 2 / the pooled gate on 50's (sessions 79-80, --arm-from)",
     lambda d: f"{_lifts(d, 'r1p20', 'r2p20')}; {_extra_pair(d, 'r2p20', 'r2gate')} / "
     f"{_extra_pair(d, 'r2p20', 'r2pool')}", ""),
    ("policy_compare_pool20_line_s81.json", "same: round 2 minus real GRPO at 61-64k real steps (session 78's real_be; "
     "the line's rounds 0-2 took 53.4-56.3k)",
     lambda d: _extra_pair(d, "r2p20", "real_be"), "imagination >= real RL at the same real budget"),
    ("paired_pool20_line_s81.json", "same runs, paired start by start on the parent runs' own 600 starts "
     "(benchmarks.paired_arms --branch): round 2 minus the gated line's round 2 / over round 0 / over SFT: "
     "differences [95% CI]",
     lambda d: _pairs(d, ["r2p20 - r2gate", "r2p20 - r0", "r2p20 - sft"]), ""),
    ("multi_step_dynamics.json", "sessions 81-82: round 0's state model of the gated runs (runs/s78/gate_seed_S) "
     "fitted with the one-step loss (K=0, round 0's own) / the 8-step unroll loss on the real arm "
     "(object_dynamics.rollout_steps=8) / the arm model unrolled too (8arm: rollout_arm=true), 8,000 steps: open-loop "
     "cube error after 32 steps (held out, median of runs, m); precision of the world's successes for SFT on the "
     "runs' evaluation starts, PushCube / PushCubeSpatial / all tasks (benchmarks.multi_step_dynamics)",
     lambda d: " / ".join(_fmt(_get(d, f"pooled.{k}.open_loop_error_step_32_m")) for k in MSD_FITS) + "; "
     + " and ".join(" / ".join(_fmt(_get(d, f"pooled.{k}.{t}.precision")) for t in (
         "PushCube-v0", "PushCubeSpatial-v0", "all")) for k in MSD_FITS), ""),
    ("multi_step_dynamics.json", "same worlds start by start (same starts, same actions; session 82): 8 - 0 / 8arm - 0 "
     "/ 8arm - 8, all tasks: change in agreement with the simulator (paired s.e.; starts fixed / broken); change in precision "
     "[paired-bootstrap 95% CI]",
     lambda d: " / ".join(_msd_pair(_get(d, f"paired.{k}.all")) for k in ("8 - 0", "8arm - 0", "8arm - 8")), ""),
    ("policy_compare_k8_line_s82.json", "session 82: the gated line on the 8-step-loss state model from round 0 "
     "(runs/s82/k8_seed_S: branched from the gated runs' SFT, round 0's world refitted with "
     "object_dynamics.rollout_steps=8; the gate let both push tasks in for run 1 only), 600 held-out episodes per "
     "policy: round 0 over SFT; minus the gated line's round 0 (one-step loss)",
     lambda d: f"{_lifts(d, 'r0k8')}; {_extra_pair(d, 'r0k8', 'r0gate')}", ""),
    ("paired_k8_line_s82.json", "same runs, paired start by start on the parent runs' own 600 starts: round 0 minus "
     "the gated line's round 0 / over SFT: differences [95% CI]",
     lambda d: _pairs(d, ["r0k8 - r0gate", "r0k8 - sft"]), ""),
    ("policy_compare_conf_gate_s83.json", "session 83: round 0 with the confidence gate "
     "(self_imitation.gate_confidence=0.9: both push tasks gated in every run, StackCube in 5 of 6) on the 8-step world "
     "(runs/s83/k8conf_seed_S; run 0's gate is the point gate's, so its policy is session 82's) / on the arm-unrolled "
     "world (runs/s83/k8armconf_seed_S) / the arm-unrolled world with the point gate (runs/s83/k8arm_seed_S), all "
     "branched from the gated runs' SFT, 600 held-out episodes per policy: round 0 over SFT; the 8-step world's "
     "confidence gate minus its point gate (session 82) / the arm-unrolled world's / the arm-unrolled world's point "
     "gate minus the one-step world's gated round 0",
     lambda d: f"{_lifts(d, 'r0k8conf', 'r0k8armconf', 'r0k8arm')}; {_extra_pair(d, 'r0k8conf', 'r0k8')} / "
     f"{_extra_pair(d, 'r0k8armconf', 'r0k8arm')} / {_extra_pair(d, 'r0k8arm', 'r0gate')}", ""),
    ("paired_conf_gate_s83.json", "same runs, paired start by start on the parent runs' own 600 starts: the 8-step "
     "world's confidence gate minus its point gate / the arm-unrolled world's / the arm-unrolled world's point gate "
     "minus the one-step world's / the arm-unrolled world's confidence gate over SFT: differences [95% CI]",
     lambda d: _pairs(d, ["r0k8conf - r0k8", "r0k8armconf - r0k8arm", "r0k8arm - r0gate", "r0k8armconf - sft"]), ""),
    ("world_vs_real_gate_line_conf90_s84.json", "session 84: the gated line's rounds 0-3 (runs/s78/gate_seed_S) read "
     "as self_imitation.gate_confidence=0.9 reads them (--gate-confidence 0.9): the gate's own check (50 fresh starts "
     "per task) against the check on the evaluation's 100, task decisions alike at 0.5 (at the point estimate: 64 "
     "of 72, world_vs_real_gate_line_s79.json)",
     _gate_agreement, ""),
    ("world_vs_real_k8arm_conf90_s84.json", "same reading, round 0 of the arm-unrolled world (runs/s83/k8armconf_seed_S; "
     "at the point estimate: 14 of 18, world_vs_real_k8arm_s83.json)",
     _gate_agreement, ""),
    ("world_vs_real_k8_conf90_s84.json", "same reading, round 0 of the 8-step world (runs/s82/k8_seed_S; at the point "
     "estimate: 18 of 18, world_vs_real_k8_line_s82.json)",
     _gate_agreement, ""),
    ("policy_compare_armconf_line_s84.json", "session 84: rounds 1-2 of the arm-unrolled world with the 90% gate "
     "(runs/s83/k8armconf_seed_S, coevolution.rounds=2; 68-73k real steps per run), 600 held-out episodes per policy: "
     "rounds 1 / 2 over SFT; round 2 minus round 0 / minus the gated line's round 2 (one-step world, point gate) / "
     "minus real GRPO run on to the gated line's round-3 budget (82-86k real steps)",
     lambda d: f"{_lifts(d, 'r1k8armconf', 'r2k8armconf')}; {_extra_pair(d, 'r2k8armconf', 'r0k8armconf')} / "
     f"{_extra_pair(d, 'r2k8armconf', 'r2gate')} / {_extra_pair(d, 'r2k8armconf', 'real_b3')}", ""),
    ("policy_compare_armconf_line_s84.json", "same line, round 3 (82-88k real steps per run): over SFT; minus round 0 "
     "/ minus the gated line's round 3 / minus real GRPO at the gated line's round-3 budget (82-86k)",
     lambda d: f"{_lifts(d, 'r3k8armconf')}; {_extra_pair(d, 'r3k8armconf', 'r0k8armconf')} / "
     f"{_extra_pair(d, 'r3k8armconf', 'r3gate')} / {_extra_pair(d, 'r3k8armconf', 'real_b3')}", ""),
    ("paired_armconf_line_s84.json", "same runs, paired start by start on the parent runs' own 600 starts: round 2 "
     "minus round 0 / minus round 1 / minus the gated line's round 2 / over SFT: differences [95% CI]",
     lambda d: _pairs(d, ["r2k8armconf - r0k8armconf", "r2k8armconf - r1k8armconf", "r2k8armconf - r2gate",
                          "r2k8armconf - sft"]), ""),
    ("world_vs_real_armconf_line_s84.json", "same runs, rounds 0-3 read at --gate-confidence 0.9: the gate's own check "
     "against the check on the evaluation's starts, task decisions alike; the gate checks' precision PushCube / PushCubeSpatial / "
     "StackCube by round, pooled over the runs",
     lambda d: f"{_gate_agreement(d)}; " + "; ".join(" / ".join(
         _fmt(_get(d, f"gate.by_round.{r}.{t}.precision")) for t in ("PushCube-v0", "PushCubeSpatial-v0", "StackCube-v0"))
         for r in range(4)), ""),
    ("gate_check_cost_s85.json", "session 85: the gate's own check (50 fresh starts per task) with the simulator "
     "playing only the starts the world calls a success (self_imitation.check_real=world_successes) against every "
     "start, rounds 0-1 of three fresh gated runs (runs/s85/gate_seed_S): real env steps, every start / the world's "
     "successes (share); real outcomes reproduced on the starts both play; gate decisions alike (0.5 on the point "
     "estimate and on the 90% bound)",
     lambda d: f"{_fmt(_get(d, 'summary.steps_all'))} / {_fmt(_get(d, 'summary.steps_world_successes'))} "
     f"({_fmt(_get(d, 'summary.step_share'))}); {_get(d, 'summary.real_reproduced')} of {_get(d, 'summary.played')}; "
     f"{_get(d, 'summary.decisions_same')} of {_get(d, 'summary.decisions')}", ""),
    ("gate_check_cost_s85.json", "same benchmark (--kept): the share of the kept gate checks' starts the world calls a "
     "success, so the episodes such a check would have played: the one-step gated line, rounds 0-3 / the arm-unrolled "
     "90% line, rounds 0-3 (3,600 starts each)",
     lambda d: " / ".join(_fmt(((d.get("kept") or {}).get(f"benchmarks/results/{f}") or {}).get("share"))
                          for f in ("world_vs_real_gate_line_conf90_s84.json", "world_vs_real_armconf_line_s84.json")),
     ""),
    ("policy_compare_gate_line_s85.json", "session 85: a gated line on this session's host (runs/s85/gate_seed_S; "
     "round 0 checks every start, rounds 1-3 self_imitation.check_real=world_successes; 62.8k real steps per run at "
     "round 3), 600 held-out episodes per policy: SFT / rounds 0-3 / real GRPO from the same SFT at 63k real steps; "
     "round 3 minus round 0 / minus real GRPO at 63k",
     lambda d: " / ".join(_fmt(_get(d, f"arms.{k}.success")) for k in ("sft", "r0", "r1", "r2", "r3", "real_63k"))
     + f"; {_extra_pair(d, 'r3', 'r0')} / {_extra_pair(d, 'r3', 'real_63k')}", ""),
    ("paired_gate_line_s85.json", "same runs, paired start by start on their own 600 starts: round 3 over SFT / minus "
     "round 0 / minus real GRPO at 63k (62.4k real steps): differences [95% CI]",
     lambda d: _pairs(d, ["r3 - sft", "r3 - r0", "r3 - real_63k"]), ""),
    ("gate_check_cost_s86.json", "session 86: the gate's own check on rounds 0-6 of the session-85 runs (21 checks): "
     "real env steps, every start / the world's successes / until the decision is settled (self_imitation.check_real="
     "until_decided; 0.5 point estimate, then the 90% bound; share of every start's); in-run until_decided checks the "
     "replay reproduces; decisions as every start's, until_decided at 0.5 point / 90% bound",
     lambda d: f"{_fmt(_get(d, 'summary.steps_all'))} / {_fmt(_get(d, 'summary.steps_world_successes'))} / "
     f"{_fmt(_get(d, 'summary.until_decided.point.steps'))} ({_fmt(_get(d, 'summary.until_decided.point.share_of_all'))}) / "
     f"{_fmt(_get(d, 'summary.until_decided.confidence.steps'))}; {_get(d, 'summary.kept_until_decided_same')} of "
     f"{_get(d, 'summary.kept_until_decided')}; {_get(d, 'summary.until_decided.point.decisions_same')} / "
     f"{_get(d, 'summary.until_decided.confidence.decisions_same')} of {_get(d, 'summary.until_decided.point.decisions')}",
     ""),
    ("gate_check_cost_s86_r78.json", "same benchmark on rounds 7-8 of those runs (--rounds 7 8, 6 checks, after they "
     "ran): real env steps, every start / the world's successes / until_decided at 0.5 (share of every start's); in-run "
     "until_decided checks the replay reproduces; real outcomes alike on the starts both play",
     lambda d: f"{_fmt(_get(d, 'summary.steps_all'))} / {_fmt(_get(d, 'summary.steps_world_successes'))} / "
     f"{_fmt(_get(d, 'summary.until_decided.point.steps'))} ({_fmt(_get(d, 'summary.until_decided.point.share_of_all'))}); "
     f"{_get(d, 'summary.kept_until_decided_same')} of {_get(d, 'summary.kept_until_decided')}; "
     f"{_get(d, 'summary.real_reproduced')} of {_get(d, 'summary.played')}", ""),
    ("policy_compare_gate_line_s86.json", "session 86: the session-85 line run on to round 8 (rounds 4-8 "
     "self_imitation.check_real=until_decided; 89.0-93.7k real steps per run at round 8), 600 held-out episodes per "
     "policy: SFT / rounds 0, 3-8 / real GRPO from the same SFT at 91k real steps; round 7 minus round 0 / round 8 "
     "minus round 0 / round 8 minus real GRPO at 91k",
     lambda d: " / ".join(_fmt(_get(d, f"arms.{k}.success"))
                          for k in ("sft", "r0", "r3", "r4", "r5", "r6", "r7", "r8", "real_last"))
     + f"; {_extra_pair(d, 'r7', 'r0')} / {_extra_pair(d, 'r8', 'r0')} / {_extra_pair(d, 'r8', 'real_last')}", ""),
    ("paired_gate_line_s86.json", "same runs, paired start by start on their own 600 starts: round 8 over SFT / "
     "round 7 minus round 0 / round 8 minus round 0 / round 8 minus real GRPO at 91k (90.7k real steps): differences "
     "[95% CI]",
     lambda d: _pairs(d, ["r8 - sft", "r7 - r0", "r8 - r0", "r8 - real_last"]), ""),
    ("batch_invariance_s87.json", "session 87: the same 300 starts (run 2's round-5 check) played alone, in pairs and "
     "20 at a time: starts whose outcome or length differs from the batch of 20, played alone / in pairs, for the "
     "policy's layers plain or row-stable (policies.row_stable) with tiled or untiled frames: plain tiled (before) / "
     "row-stable tiled (default) / row-stable untiled (render.tiled=false)",
     lambda d: " / ".join(f"{_get(d, f'summary.{arm}.lengths_differ_at_1')}, {_get(d, f'summary.{arm}.lengths_differ_at_2')}"
                          for arm in ("plain_tiled", "row_stable_tiled", "row_stable_untiled")), ""),
    ("policy_compare_gate_line_s87.json", "session 87: the same line on to round 10 (99.4-106.8k real steps per run), "
     "600 held-out episodes per policy: SFT / rounds 0, 8, 9, 10 / real GRPO from the same SFT at 100k / 107k real "
     "steps; round 10 minus round 0 / minus real GRPO at 107k",
     lambda d: " / ".join(_fmt(_get(d, f"arms.{k}.success")) for k in ("sft", "r0", "r8", "r9", "r10", "real_100k",
                                                                         "real_107k"))
     + f"; {_extra_pair(d, 'r10', 'r0')} / {_extra_pair(d, 'r10', 'real_107k')}", ""),
    ("paired_gate_line_s87.json", "same runs, paired start by start on their own 600 starts: round 10 over SFT / "
     "round 9 minus round 0 / round 10 minus round 0 / round 10 minus real GRPO at 107k (104.9k real steps): "
     "differences [95% CI]",
     lambda d: _pairs(d, ["r10 - sft", "r9 - r0", "r10 - r0", "r10 - real_107k"]), ""),
    ("policy_compare_averaged_rounds_s88.json", "session 88: the same line, weights averaged "
     "(policies.weight_average; coevolution.average_rounds=5 from round 11), 600 held-out episodes per policy: round 0 / "
     "round 10 / the average of rounds 6-10 (post hoc) / round 11 (average of 7-11) / round 12 (average of 8-12; "
     "109.6-119.4k real steps per run) / real GRPO from the same SFT at 120k real steps; round 12 minus round 0 / "
     "minus round 10 / minus real GRPO at 120k",
     lambda d: " / ".join(_fmt(_get(d, f"arms.{k}.success")) for k in ("r0", "r10", "soup6_10", "avg11", "avg12",
                                                                         "real_120k"))
     + f"; {_extra_pair(d, 'avg12', 'r0')} / {_extra_pair(d, 'avg12', 'r10')} / {_extra_pair(d, 'avg12', 'real_120k')}",
     "last round >= round 0 + 0.05"),
    ("paired_averaged_rounds_s88.json", "same runs, paired start by start on their own 600 starts: round 11 / round 12 "
     "minus round 0 / round 12 minus round 10 / minus real GRPO at 120k (119.1k real steps): differences [95% CI]",
     lambda d: _pairs(d, ["avg11 - r0", "avg12 - r0", "avg12 - r10", "avg12 - real_120k"]),
     "last round >= round 0 + 0.05"),
    ("policy_compare_averaged_from_round6_s88.json", "session 88: the control, the line copied at round 5 and "
     "rounds 6-8 run again with coevolution.average_rounds=5, 600 held-out episodes per policy: the line's rounds "
     "6 / 7 / 8, the averaged rounds 6 / 7 / 8; averaged minus the line's round 6 / 7 / 8",
     lambda d: " / ".join(_fmt(_get(d, f"arms.{k}.success")) for k in ("r6", "r7", "r8", "b6", "b7", "b8"))
     + "; " + " / ".join(_extra_pair(d, f"b{r}", f"r{r}") for r in (6, 7, 8)), ""),
    ("paired_averaged_from_round6_s88.json", "same runs, paired start by start on their own 600 starts: averaged "
     "minus the line's round 6 / 7 / 8: differences [95% CI]",
     lambda d: _pairs(d, ["b6 - r6", "b7 - r7", "b8 - r8"]), ""),
    ("policy_compare_soup_rounds4_8_s88.json", "session 88: the post-hoc weight average of the line's rounds 4-8, 600 "
     "held-out episodes per policy: round 8 / the average; the average minus round 8",
     lambda d: " / ".join(_fmt(_get(d, f"arms.{k}.success")) for k in ("r8", "soup4_8"))
     + f"; {_extra_pair(d, 'soup4_8', 'r8')}", ""),
    ("policy_compare_clone_real_s89.json", "session 89: self_imitation.clone_real (each fine-tune also clones the "
     "successes among the real episodes already played for data), three fresh gated runs (runs/s89/base_S) and their "
     "branches at round 0 with it (runs/s89/real_S), 600 held-out episodes per policy: SFT / rounds 0-2 without / "
     "with it; with minus without at round 0 / 1 / 2",
     lambda d: " / ".join(_fmt(_get(d, f"arms.{k}.success")) for k in ("sft", "r0", "r1", "r2", "r0real", "r1real",
                                                                        "r2real"))
     + "; " + " / ".join(_extra_pair(d, f"r{r}real", f"r{r}") for r in (0, 1, 2)), ""),
    ("paired_clone_real_s89.json", "same runs, paired start by start on their own 600 starts: with minus without "
     "clone_real at round 0 / 1 / 2; with it, round 2 minus SFT: differences [95% CI]",
     lambda d: _pairs(d, ["r0real - r0", "r1real - r1", "r2real - r2", "r2real - sft"]), ""),
    ("policy_compare.json", "600 held-out episodes per policy (100 per task, seed 777000), mean of 3 base seeds: SFT / "
     "real GRPO 380k (GRPO seed 0) / 760k / 1.52M",
     lambda d: " / ".join(_fmt(_get(d, f"arms.{k}.success")) for k in ("sft", "grpo_380k", "grpo_760k", "grpo_1520k")),
     ""),
    ("policy_compare.json", "same episodes, lift over SFT (paired): RL in the pixel world (main job round 0) / "
     "state-model world from t=0 / branched 24 real steps (148k real steps) / real GRPO 150k / branched, 300 "
     "iterations (442k) / real GRPO 380k",
     lambda d: _lifts(d, "imagination_pixel_round0", "state_world_t0", "state_world_branch24", "grpo_150k",
                      "state_world_branch24_it300", "grpo_380k"), ">= +0.30"),
    ("policy_compare.json", "same episodes, co-evolution rounds 1 / 2 of the main job (pixel world), lift over its "
     "round 0 (the single round; paired)",
     lambda d: " / ".join(_extra_pair(d, k, "imagination_pixel_round0") for k in (
         "coevolution_round1", "coevolution_round2")), "last round >= single round + 0.05"),
    ("policy_compare_maxkl.json", "600 held-out episodes per policy (per-episode seeds, so not the starts of "
     "policy_compare.json), mean of 3 base seeds: SFT / real GRPO 380k, GRPO seeds 0, 1, 2, without / with the trust "
     "region (rl.max_kl=0.01) / rl.max_kl=0.05 (seed 0)",
     lambda d: " / ".join(_fmt(_get(d, f"arms.{k}.success")) for k in (
         "sft", "grpo_380k", "grpo_380k_rlseed1", "grpo_380k_rlseed2", "grpo_maxkl01_380k",
         "grpo_maxkl01_380k_rlseed1", "grpo_maxkl01_380k_rlseed2", "grpo_maxkl05_380k")), ""),
    ("policy_compare_maxkl.json", "same episodes, trust region against none, paired (GRPO seeds 0 / 1 / 2; "
     "max_kl 0.05, seed 0)",
     lambda d: " / ".join(_extra_pair(d, a, b) for a, b in (
         ("grpo_maxkl01_380k", "grpo_380k"), ("grpo_maxkl01_380k_rlseed1", "grpo_380k_rlseed1"),
         ("grpo_maxkl01_380k_rlseed2", "grpo_380k_rlseed2"), ("grpo_maxkl05_380k", "grpo_380k"))), ""),
    ("real_rl_ppo.json", "real-sim RL, 380k real steps per seed (real_rl benchmark, the runs' own evaluation), PPO (rl=ppo rl.exploration_std=0.1, value-head critic, sparse success): "
     "without / with the trust region (rl.max_kl=0.01, now PPO's default; a PPO update moved the policy by KL 0.74 "
     "nats per chunk, median)", lambda d: f"{_variant(d, 'ppo')} / {_variant(d, 'ppo_maxkl01')}", ""),
    ("policy_compare_ppo.json", "600 held-out episodes per policy (the starts of policy_compare_maxkl.json), 3 base "
     "seeds: SFT / real GRPO 380k without / with rl.max_kl=0.01 / real PPO 380k without / with it",
     lambda d: " / ".join(_fmt(_get(d, f"arms.{k}.success")) for k in (
         "sft", "grpo_380k", "grpo_maxkl01_380k", "ppo_380k", "ppo_maxkl01_380k")), ""),
    ("policy_compare_ppo.json", "same episodes, paired: PPO with the trust region vs without / vs GRPO with it",
     lambda d: " / ".join(_extra_pair(d, a, b) for a, b in (
         ("ppo_maxkl01_380k", "ppo_380k"), ("ppo_maxkl01_380k", "grpo_maxkl01_380k"))), ""),
    ("real_rl_ppo_epochs.json", "same PPO with the trust region, fewer Adam steps per iteration: 2 epochs of one "
     "512-chunk minibatch (now PPO's default) / 1 epoch of 64", lambda d: f"{_variant(d, 'ppo_e2mb512')} / "
     f"{_variant(d, 'ppo_e1')}", ""),
    ("policy_compare_ppo_epochs.json", "600 held-out episodes per policy, same starts: SFT / PPO 4 epochs of 64 (old "
     "default) / 2 epochs of 512 (new) / 1 epoch of 64 / GRPO, all with rl.max_kl=0.01",
     lambda d: " / ".join(_fmt(_get(d, f"arms.{k}.success")) for k in (
         "sft", "ppo_maxkl01_380k", "ppo_e2mb512_380k", "ppo_e1_380k", "grpo_maxkl01_380k")), ""),
    ("policy_compare_ppo_epochs.json", "same episodes, paired: 2 epochs of 512 / 1 epoch of 64 vs the old default; "
     "the same two vs GRPO",
     lambda d: " / ".join(_extra_pair(d, a, b) for a, b in (
         ("ppo_e2mb512_380k", "ppo_maxkl01_380k"), ("ppo_e1_380k", "ppo_maxkl01_380k"),
         ("ppo_e2mb512_380k", "grpo_maxkl01_380k"), ("ppo_e1_380k", "grpo_maxkl01_380k"))), ""),
    ("real_rl_group4.json", "same benchmark, GRPO groups of 4 (rl.group_size=4: 16 starts per iteration, not 8)",
     lambda d: _variant(d, "group4"), ""),
    ("real_rl_55k.json", "same benchmark stopped at 55.5k real steps (--budget 55500: 14 iterations, 53k steps), the "
     "yardstick of the shared-prefix world", lambda d: _variant(d, "default"), ""),
    ("policy_compare.json", "same episodes, lift over SFT: shared real prefix, trained on the model's branches, 300 "
     "iterations (55k real steps) / real GRPO at 53k / branched, trained on the real prefix only, 100 / 300 "
     "iterations (148k / 442k) / branched, all chunks, 100 / 300 iterations (148k / 442k)",
     lambda d: _lifts(d, "state_world_shared24_it300", "grpo_55k", "state_world_branch24_trainprefix",
                      "state_world_branch24_trainprefix_it300", "state_world_branch24", "state_world_branch24_it300"),
     "imagination RL >= real RL at the same real budget"),
    ("real_rl_curve.json", "learning curve: the GRPO-seed-0 default pairs of real_rl_ratio.json trained on (--curve), "
     "real success at 380k / 760k / 1.52M real steps (100 / 200 / 400 iterations)", _curve, ""),
    ("real_rl_short.json", "learning curve from the start (the same-budget yardstick of --real-steps): real success "
     "at 150k / 220k / 300k / 380k real steps (39 / 58 / 79 / 100 iterations; 380k repeats real_rl_ratio.json)",
     _curve, ""),
    ("real_rl_short_rlseed1.json", "same, --rl-seed 1: 150k / 220k", _curve, ""),
    ("real_rl_sweep_seed0.json", "seed 0 only (SFT 0.342): defaults / lr 3e-4 / lr 1e-3 with 4 epochs / PPO "
     "(sparse success, value-head critic)",
     lambda d: " / ".join(_fmt(_get(d, f"variants.{k}.rl_success")) for k in ("default", "lr3e-4", "lr1e-3_ep4", "ppo")),
     ""),
    ("rl_headroom.json", "SFT policy in the real sim, 144 starts: mean-action success / pass@8 at std 0.1 / "
     "failed starts where a GRPO group of 8 holds a success / never solved in 16 samples",
     lambda d: _headroom(d, "0.1"),
     ""),
    ("rl_headroom_after_real_rl.json", "same starts, the policy after real GRPO (380k steps, real_rl_sweep.json "
     "defaults)", lambda d: _headroom(d, "0.1"), ""),
    ("rl_headroom_imagined.json", "SFT policy from the same 144 real starts in the round-0 world model and the real "
     "sim, the same policy noise (std 0.1): sampled success imagined / real; precision of an imagined success; "
     "per-start success-rate Pearson; cosine of imagined vs real GRPO advantages", _agreement, ""),
    ("rl_headroom_imagined_round2.json", "same, the world model after 2 co-evolution rounds", _agreement, ""),
    ("rl_headroom_imagined_kf3.json", "same, round-0 world, from keyframes: the mean action's real state after 3 "
     "chunks, 8-chunk episodes (the run's imagination horizon)", _agreement, ""),
    *[
        (f"rl_headroom_imagined_s43{tag}_seed{seed}.json", label if seed == 0 else "same, seed 1", _agreement, "")
        for tag, label in (
            ("", "same measurement, 48 starts, on today's default world (success model, round 0; "
             "runs/s43/lift/seed_0)"),
            ("_onpol", "same, seed 0, the world after a round on 600 real rollouts of the round-0 policy with 1,500 "
             "fine-tune steps (imagination_lift_s43_wmdata.json, onpol)"),
            ("_ft1500", "same, seed 0, the control: 1,500 fine-tune steps on the default 24 rollouts (ft1500)"),
        )
        for seed in (0, 1)
    ],
    *[
        (f"rl_headroom_imagined_wmgpu_seed{seed}.json",
         "same measurement, seed 0, in the wmgpu world (world model trained on an H200, 8.8x the windows; "
         "imagination_lift_wmgpu.json)" if seed == 0 else f"same, seed {seed}", _agreement, "")
        for seed in (0, 1, 2)
    ],
    ("rl_headroom_imagined_objdyn.json", "same as rl_headroom_imagined.json, the world model's cubes moved by the "
     "state-space object model (worldmodels.object_dynamics, fitted on the run's demos)", _agreement, ""),
    ("rl_headroom_imagined_objdyn_kf3.json", "same, from the keyframes after 3 chunks", _agreement, ""),
    ("rl_headroom_imagined_objdyn_arm.json", "same as rl_headroom_imagined.json, the object model with an arm "
     "model: cubes and proprio from the state-space model", _agreement, ""),
    ("rl_headroom_imagined_objdyn_arm.json", "that arm-and-object model alone, replaying the real sampled actions "
     "open loop: success / real; agreement; Pearson; advantage cosine", lambda d: _replay(d, key="state"), ""),
    ("rl_headroom_imagined_objdyn_arm_kf3.json", "same arm-and-object world, from the keyframes after 3 chunks",
     _agreement, ""),
    ("rl_headroom_imagined_objdyn_arm_kf3.json", "that model alone, open loop, from the keyframes",
     lambda d: _replay(d, key="state"), ""),
    ("rl_headroom_twin.json", "ceiling: the real sim again, the policy's frames with pixel noise sigma 2 (same "
     "action noise): success twin / real; agreement; Pearson; advantage cosine", _replay, ""),
    ("rl_headroom_twin_kf3.json", "same ceiling, from the keyframes after 3 chunks", _replay, ""),
    ("rl_headroom_twin_sigma8.json", "same ceiling from t=0, pixel noise sigma 8", _replay, ""),
    ("rl_headroom_twin_sigma24.json", "same, pixel noise sigma 24 (PSNR ~20.5 dB, the world model's is 21.2 at h=16)",
     _replay, ""),
    ("frames_follow_states.json", "state-rule runs' world models, held-out demo windows open loop: px between a "
     "cube drawn in the frame and where the world's own state puts it, h=16: alone / real states given / arm-and-object "
     "state model attached", _gap, ""),
    ("frames_follow_states_scframes.json", "same, world models trained with state_conditioned_frames=true (the frames "
     "read the chunk's states)", _gap, ""),
    ("frames_follow_states_schm.json", "same, and the chunk's cube positions also drawn as heatmaps into the frame "
     "generator's input (state_heatmaps=true)", _gap, ""),
    ("frames_follow_states_schm.json", "that world, cube centroid error vs the real frames at h=16 (px): alone / real "
     "states given / state model attached",
     lambda d: " / ".join(_fmt(_get(d, f"mean_over_runs.{k}.object_error_px")[-1])
                          for k in ("alone", "real_states", "state_model")), ""),
    ("rl_headroom_imagined_odarm.json", "rl_headroom t=0, the default pixel model with the pipeline-fitted "
     "arm-and-object model (the runs' ablation_odarm folders; the like-for-like baseline of the next two rows)",
     _agreement, ""),
    ("rl_headroom_imagined_odpolicy.json", "same as rl_headroom_imagined_odarm.json, the state model fitted on the "
     "demos plus 720 fresh SFT-policy episodes at std 0.1 per run (object_dynamics --policy, ~30k real steps)",
     _agreement, ""),
    ("rl_headroom_imagined_odpolicy.json", "that state model alone, open loop", lambda d: _replay(d, key="state"), ""),
    ("rl_headroom_imagined_scframes.json", "rl_headroom t=0 in the world whose frames read the state model's states "
     "(state_conditioned_frames, the runs' ablation_scframes folders)", _agreement, ""),
    ("rl_headroom_imagined_schm.json", "same, frames with cube heatmaps too (state_heatmaps, ablation_schm)",
     _agreement, ""),
    ("rl_headroom_split_odarm.json", "where the closed loop loses it: the pipeline's arm-and-object state model closed "
     "loop, the policy seeing the simulator's own rendering of its states (--rendered-state-model; same runs as "
     "rl_headroom_imagined_odarm.json)", lambda d: _replay(d, key="rendered"), ""),
    ("rl_headroom_split_odarm_drawn.json", "the real simulator closed loop, the policy seeing the default pixel model's "
     "drawing of the real states (--model-drawn-real; ablation_odarm runs)", lambda d: _replay(d, key="drawn"), ""),
    ("rl_headroom_split_schm.json", "the real simulator closed loop, the policy seeing the heatmap world's drawing of "
     "the real states (--model-drawn-real; ablation_schm runs)", lambda d: _replay(d, key="drawn"), ""),
    ("rl_headroom_split_schmtcp.json", "same, the world whose frames also draw the gripper from the tcp as a heatmap "
     "(world_model.tcp_heatmap=true, ablation_schmtcp runs)", lambda d: _replay(d, key="drawn"), ""),
    ("rl_headroom_split_schmtcp.json", "that world with the state model attached, as RL in imagination sees it",
     _agreement, ""),
    ("state_model_refit.json", "the state model refitted on round 1's real rollouts, scored on round 2's (3 runs): "
     "cube one-step error where it moves / open loop after 16 and 32 steps (cm), demos-only fit -> refit",
     lambda d: " -> ".join(
         " / ".join(_fmt(None if v is None else 100 * v) for v in (
             _get(d, f"mean_over_runs.{fit}.one_step_error_moving_mean_m"),
             _get(d, f"mean_over_runs.{fit}.open_loop_error_step_16_m"),
             _get(d, f"mean_over_runs.{fit}.open_loop_error_step_32_m")))
         for fit in ("demos", "demos+round_1")), ""),
    ("state_model_rl.json", "GRPO in the state model's world drawn by the simulator (StateModelVectorEnv), 16 "
     "iterations: real success SFT -> after / real GRPO at the same iterations",
     lambda d: _smrl(d, "real"), ""),
    ("state_model_rl_it100.json", "same, 100 iterations (the real GRPO budget of real_rl.json)",
     lambda d: _smrl(d, "real"), ""),
    ("state_model_rl_ensemble_gate.json", "same, 100 iterations, in a 3-member ensemble world (fit seeds differ; "
     "success on all members, a random member advances, trajectories with members >2.5 cm apart masked): real "
     "success SFT -> after", _smrl, ""),
    ("state_model_rl_ensemble_terminate.json", "same ensemble world, an episode whose members are >2.5 cm apart "
     "ends there as a failure (MOReL's halt)",
     _smrl, ""),
    ("state_model_rl_ensemble_terminate_rlseed1.json", "same (2.5 cm), repeated with other GRPO starts and noise "
     "(--rl-seed 1): real success SFT -> after / real GRPO with the same RL seeds",
     lambda d: _smrl(d, "real"), ""),
    ("state_model_rl_ensemble_terminate_2cm.json", "same, ended at 2 cm",
     _smrl, ""),
    ("state_model_rl_ensemble.json", "same ensemble world without the disagreement gate",
     _smrl, ""),
    ("state_model_rl_bootstrap_terminate.json", "same world (terminate at 2.5 cm), the members fitted on bootstrap "
     "resamples of the demo episodes (object_dynamics --bootstrap, fit seeds 100-102; fresh runs of the same "
     "recipe): real success SFT -> after",
     _smrl, ""),
    ("state_model_rl_bootstrap_terminate_rlseed1.json", "same bootstrap ensemble, --rl-seed 1",
     _smrl, ""),
    ("state_model_rl_branch24.json", "same bootstrap ensemble world (terminate at 2.5 cm), the first 24 steps "
     "of each sub-env's first episode after a reset in the real simulator and the state model branching from the "
     "real state reached (--real-steps 24, MBPO-style): real success SFT -> after; real env steps used per seed",
     lambda d: _smrl(d, "steps"), ""),
    ("state_model_rl_branch24_rlseed1.json", "same, --rl-seed 1",
     lambda d: _smrl(d, "steps"), ""),
    ("state_model_rl_branch24_it300.json", "same, 300 iterations (--iterations 300; one resume on the way): real "
     "success SFT -> after; real env steps used per seed", lambda d: _smrl(d, "steps"), ""),
    ("state_model_rl_shared24_it300.json", "same world, one real prefix of 24 steps per GRPO group (its first "
     "member's actions; --share-prefix), GRPO trained on the model's branches only, 300 iterations: real success "
     "SFT -> after; real env steps used per seed", lambda d: _smrl(d, "steps"), ""),
    ("state_model_rl_branch24_trainprefix.json", "same as state_model_rl_branch24.json, GRPO trained on the real "
     "prefix's chunks only (--train-on prefix)", lambda d: _smrl(d, "steps"), ""),
    ("state_model_rl_branch24_trainprefix_it300.json", "same, 300 iterations", lambda d: _smrl(d, "steps"), ""),
    ("state_model_rl_branch24_allprefix.json", "first run of the same: episodes begun by autoreset (which GRPO "
     "ignores) got real prefixes too, and the physics went on under sub-envs already in the model",
     lambda d: _smrl(d, "steps"), ""),
    ("state_model_rl_branch24_allprefix_rlseed1.json", "same first run, --rl-seed 1",
     lambda d: _smrl(d, "steps"), ""),
    ("state_model_rl_branch24_s55.json", "the branched ensemble world (--real-steps 24, 100 iterations) on today's "
     "main-job runs (runs/s55/lift seeds 0 and 1, 2 x 600 episodes): real success SFT -> after; real env steps used per "
     "seed; lift over SFT paired episode by episode [95% CI]",
     _smrl_paired, ""),
    ("real_rl_s55.json", "real GRPO from SFT on the same runs: real success SFT -> at 150k / 300k real steps; lift "
     "over SFT paired at 150k / 300k", _curve_paired, ""),
    ("real_rl_after_state_model_s55.json", "real GRPO for 150k real steps from the branched world's policy "
     "(--init-policy; about 300k real steps in all): real success SFT -> after; lift over SFT paired",
     _rl_paired, ""),
    ("state_model_rl_branch24_s56_seed2.json", "same branched world on seed 2 of the same runs (session 56): real "
     "success SFT -> after; real env steps used; lift over SFT paired",
     _smrl_paired, ""),
    ("real_rl_s56_seed2.json", "real GRPO from SFT on seed 2: real success SFT -> at 150k / 300k; lift over SFT "
     "paired at 150k / 300k", _curve_paired, ""),
    ("real_rl_after_state_model_s56_seed2.json", "real GRPO 150k from the branched world's policy on seed 2: real "
     "success SFT -> after; lift over SFT paired",
     _rl_paired, ""),
    ("state_model_rl_branch24_s56_rlseed1.json", "same branched world, --rl-seed 1, seeds 0-2: real success SFT -> "
     "after; real env steps used; lift over SFT paired",
     _smrl_paired, ""),
    ("real_rl_s56_rlseed1.json", "real GRPO from SFT, --rl-seed 1, seeds 0-2: real success SFT -> at 150k / 300k; "
     "lift over SFT paired at 150k / 300k", _curve_paired, ""),
    ("real_rl_after_state_model_s56_rlseed1.json", "real GRPO 150k from the branched world's policy, --rl-seed 1, "
     "seeds 0-2: real success SFT -> after; lift over SFT paired",
     _rl_paired, ""),
    ("paired_main_protocol_s56.json", "the main-protocol trio on the s55 runs, 3 seeds x 2 RL seeds, paired start by "
     "start (benchmarks.paired_arms; sm: branched world, 147k real steps; real150 / real300: real GRPO; hybrid: "
     "sm then real GRPO 150k): differences [95% CI]",
     lambda d: _pairs(d, ["sm - sft", "real150 - sft", "real300 - sft", "hybrid - sft", "sm - real150",
                          "hybrid - real300"]), ""),
    ("state_model_rl_branch12_s56_rlseed0.json", "the branched world with half the real prefix (--real-steps 12), "
     "seeds 0-2 of the s55 runs, RL seed 0: real success SFT -> after; real env steps used; lift over SFT paired",
     _smrl_paired, ""),
    ("state_model_rl_branch12_s56_rlseed1.json", "same, --rl-seed 1", _smrl_paired, ""),
    ("real_rl_75k_s56_rlseed0.json", "real GRPO from SFT at the matched budget (75k), seeds 0-2, RL seed 0: real "
     "success SFT -> after; lift over SFT paired", _rl_paired, ""),
    ("real_rl_75k_s56_rlseed1.json", "same, --rl-seed 1", _rl_paired, ""),
    ("paired_half_prefix_s56.json", "half the real prefix against real GRPO, 3 seeds x 2 RL seeds, paired start by "
     "start (sm12: --real-steps 12, 77k real steps; real75: real GRPO at 72k; sm24: 147k): differences [95% CI]",
     lambda d: _pairs(d, ["sm12 - sft", "real75 - sft", "sm12 - real75", "sm12 - sm24"]), ""),
    ("device_h100/main_job_results.json", "default main job with device=cuda on one H100 + 16 cores (code of "
     "2026-11-25; SFT after the world model): wall time of all stages (s)", "wall_time_s", "<= 1800"),
    ("device_h200/main_job_a_results.json", "default main job with device=cuda on one H200 + 16 cores (SFT in a "
     "child beside the world model): wall time of all stages (s)", "wall_time_s", "<= 1800"),
    ("device_h200/main_job_a_results.json", "same run: real success SFT / RL in imagination / co-evolution rounds / "
     "real RL", _phase_successes,
     ""),
    ("device_h200/main_job_b_results.json", "repeat on the same machine (GPU runs are not bit-for-bit repeatable): "
     "wall time of all stages (s)", "wall_time_s", "<= 1800"),
    ("device_h200/main_job_b_results.json", "same repeat: real success SFT / RL in imagination / co-evolution rounds "
     "/ real RL", _phase_successes,
     ""),
    ("device_h200/determinism.json", "world model / SFT trained twice on CUDA from the same seed and data (200 steps, "
     "benchmarks.determinism on an H200): tensors that differ between the two runs, default / deterministic=true",
     lambda d: " / ".join(
         f"{_fmt(_get(d, f'results.{t}/default.tensors_differing'))} of {_fmt(_get(d, f'results.{t}/default.tensors'))}, "
         + ("stopped (" + d["results"][f"{t}/deterministic"]["error"].split(" does not")[0].split(": ", 1)[-1] + ")"
            if "error" in d["results"][f"{t}/deterministic"]
            else f"{_fmt(_get(d, f'results.{t}/deterministic.tensors_differing'))} differ")
         for t in ("world_model", "sft")), ""),
    ("device_h200/determinism_wm_after_pool_fix.json", "same, the world model after the pooling fix "
     "(wmrl.devices.even_adaptive_avg_pool2d; 100 steps), deterministic=true: byte-identical",
     "repeat_bit_for_bit.world_model/deterministic", "True"),
    ("wm_policy_ranking.json", "world-model vs real ranking: Spearman", "spearman", ">= 0.9"),
    ("wm_policy_ranking.json", "paired episodes whose imagined outcome equals the real one", "episode_agreement", ""),
    ("wm_policy_ranking.json", "best Spearman over success thresholds 0.3-0.98 (threshold sweep)",
     lambda d: _best_sweep(d), ""),
    ("wm_policy_ranking.json", "Spearman at the threshold calibrated on SFT episodes from other starts",
     lambda d: _calibrated(d), ">= 0.9"),
    ("wm_policy_ranking.json", "same, success held for m frames in a row (m and threshold calibrated together)",
     lambda d: _persistence(d), ">= 0.9"),
    ("wm_policy_ranking.json", "expected success: mean P(real success given the imagined max probability), isotonic fit "
     "on the same SFT episodes", lambda d: _expected(d, "max_p"), ">= 0.9"),
    ("wm_policy_ranking.json", "same, on the persistence-chosen score",
     lambda d: _expected(d, "persisted"), ">= 0.9"),
    ("wm_policy_ranking.json", "same, success model fine-tuned on paired SFT episodes' imagined frames",
     lambda d: _finetuned(d), ">= 0.9"),
    ("wm_policy_ranking.json", "noise ceiling: Spearman of a real retest from other starts vs the real ranking",
     "noise_ceiling.spearman", ""),
    ("wm_policy_ranking_render.json", "same benchmark on a run with render.supersample=2 render.shadows=true: "
     "Spearman at 0.5 / calibrated / persistence / expected (persisted) / fine-tuned / real retest",
     lambda d: _ranking_readings(d, "expected.persisted"), ">= 0.9"),
    ("wm_policy_ranking_s32.json", "same benchmark on a fresh run of the current defaults (runs/s32/lift/seed_0): "
     "Spearman at 0.5 / calibrated / persistence / expected (max p) / expected (persisted) / fine-tuned / real retest",
     lambda d: _ranking_readings(d, "expected.max_p", "expected.persisted"), ">= 0.9"),
    ("wm_policy_ranking_state.json", "same benchmark with the state-rule success (the imagination_lift_state.json "
     "seed-0 run): Spearman [95% CI] / imagined successes the simulator refutes / real retest",
     lambda d: f"{_fmt(d.get('spearman'))} {[round(v, 2) for v in d.get('spearman_ci95') or []]} / "
     f"{_get(d, 'refuted.all')} of {_get(d, 'refuted.all_imagined_successes')} / {_fmt(_get(d, 'noise_ceiling.spearman'))}",
     ">= 0.9"),
    ("wm_policy_ranking.json", "policy pairs whose real success differs beyond the noise (start by start, 95%), "
     "and the share of them each reading orders as the simulator does: at 0.5 / calibrated / persistence / "
     "expected (max p) / expected (persisted) / fine-tuned / real retest", _resolved, ""),
    ("wm_policy_ranking_render.json", "same pairs reading, render run", _resolved, ""),
    ("wm_policy_ranking_s32.json", "same pairs reading, runs/s32/lift/seed_0", _resolved, ""),
    ("wm_policy_ranking_state.json", "same pairs reading, state-rule run (no fine-tuned reading)", _resolved, ""),
    ("wm_policy_ranking_s32_ep48.json", "same run (runs/s32/lift/seed_0), 48 episodes per task (288 per policy): "
     "Spearman at 0.5 / calibrated / persistence / expected (max p) / expected (persisted) / fine-tuned / real retest",
     lambda d: _ranking_readings(d, "expected.max_p", "expected.persisted"), ">= 0.9"),
    ("wm_policy_ranking_s32_ep48.json", "same pairs reading, 48 episodes per task", _resolved, ""),
    ("wm_policy_ranking_s33.json", "same benchmark on a fresh seed-3 main job (runs/s33/seed_3): Spearman at 0.5 / "
     "calibrated / persistence / expected (max p) / expected (persisted) / fine-tuned / real retest",
     lambda d: _ranking_readings(d, "expected.max_p", "expected.persisted"), ">= 0.9"),
    ("wm_policy_ranking_s33.json", "same pairs reading, runs/s33/seed_3 (expected (persisted) named beforehand, "
     ">= 0.90 predicted)", _resolved, ""),
    ("wm_policy_ranking_s33_ep48.json", "same run (runs/s33/seed_3), 48 episodes per task: Spearman at 0.5 / "
     "calibrated / persistence / expected (max p) / expected (persisted) / fine-tuned / real retest",
     lambda d: _ranking_readings(d, "expected.max_p", "expected.persisted"), ">= 0.9"),
    ("wm_policy_ranking_s33_ep48.json", "same pairs reading, runs/s33/seed_3, 48 episodes per task", _resolved, ""),
    *_ranking_rows("wm_policy_ranking_s32_seed1.json", "runs/s32/lift/seed_1"),
    *_ranking_rows("wm_policy_ranking_s32_seed2.json", "runs/s32/lift/seed_2"),
    *_ranking_rows("wm_policy_ranking_s34.json", "the seed-4 main job run again on this code (runs/s34/seed_4)"),
    *_ranking_rows("wm_policy_ranking_s35.json", "a fresh seed-5 main job (runs/s35/seed_5)"),
    ("state_model_ranking_s32.json", "the same policies and starts ranked in the arm-and-object state model's world "
     "(learned dynamics, drawn by the simulator; runs/s32/lift/seed_0): Spearman [95% CI] / resolved pairs ordered "
     "right / real retest / 30%-step SFT vs SFT, state model (real)", _state_ranking, ">= 0.9"),
    ("state_model_ranking_s33.json", "same, runs/s33/seed_3 (named beforehand: pairs >= 0.95, CI low >= 0.75, "
     "30% SFT >= 0.20 below SFT)", _state_ranking, ">= 0.9"),
    ("state_model_ranking_s32_ens3.json", "same, runs/s32/lift/seed_0, an ensemble of 3 fit seeds (success on all "
     "members, a random member advances)", _state_ranking, ">= 0.9"),
    ("state_model_ranking_s32_seed1.json", "same, runs/s32/lift/seed_1", _state_ranking, ">= 0.9"),
    ("state_model_ranking_s32_seed2.json", "same, runs/s32/lift/seed_2", _state_ranking, ">= 0.9"),
    ("state_model_ranking_s32_ep48.json", "same, runs/s32/lift/seed_0, 48 episodes per task", _state_ranking, ">= 0.9"),
    ("state_model_ranking_s33_ep48.json", "same, runs/s33/seed_3, 48 episodes per task", _state_ranking, ">= 0.9"),
    ("state_model_ranking_s34_renderer.json", "same, runs/s34/seed_4 (drawn by the simulator)", _state_ranking, ">= 0.9"),
    ("state_model_ranking_s34_renderer.json", "same state model drawn by a learned renderer from each episode's real "
     "first frame (worldmodels.state_renderer; every part of the world learned), runs/s34/seed_4",
     lambda d: _state_ranking(d, "learned_renderer"), ">= 0.9"),
    ("state_model_ranking_s34_renderer.json", "the real simulator drawn by that renderer (real dynamics, learned "
     "drawing): Spearman / resolved pairs ordered right / SFT on drawn vs real frames", _drawn_real, ""),
    ("state_model_ranking_s34_renderer_ep48.json", "same run, 48 episodes per task from other starts (seed 5353): "
     "drawn by the simulator", _state_ranking, ">= 0.9"),
    ("state_model_ranking_s34_renderer_ep48.json", "same, drawn by the learned renderer (all learned)",
     lambda d: _state_ranking(d, "learned_renderer"), ">= 0.9"),
    ("state_model_ranking_s34_renderer_ep48.json", "same, the real simulator drawn by the renderer", _drawn_real, ""),
    ("state_model_ranking_s35_renderer.json", "a second run fitted from scratch, runs/s35/seed_5: state model drawn "
     "by the simulator", _state_ranking, ">= 0.9"),
    ("state_model_ranking_s35_renderer.json", "same, drawn by its own learned renderer (all learned)",
     lambda d: _state_ranking(d, "learned_renderer"), ">= 0.9"),
    ("state_model_ranking_s35_renderer.json", "same, the real simulator drawn by the renderer", _drawn_real, ""),
    ("state_renderer_s34/fit.json", "learned renderer (230k parameters, 2,500 steps on the demos): held-out PSNR "
     "drawn from each episode's first frame / that first frame as it is",
     lambda d: f"{_fmt(_get(d, 'metrics.psnr_db'))} / {_fmt(_get(d, 'metrics.anchor_psnr_db'))} dB", ""),
    ("state_renderer_s35/fit.json", "the same recipe fitted on runs/s35/seed_5: held-out PSNR / first frame as it is",
     lambda d: f"{_fmt(_get(d, 'metrics.psnr_db'))} / {_fmt(_get(d, 'metrics.anchor_psnr_db'))} dB", ""),
    ("gate_breakdown.json", "imagined successes the gate masks: default / outcome scope, no agreement",
     lambda d: " / ".join(f"{v['successes_gated']}/{v['successes']}" for k, v in d["settings"].items()
                          if k.startswith("configured")), ""),
    ("wm_state_drift_ungated.json", "predicted cube poses vs the simulator's, SFT policy closed loop from resets, "
     "env_state_dim=9: target error at chunk 1 / 4 / 8 / end", lambda d: _drift(d), ""),
    ("wm_state_drift_gate.json", "same, contact gate (env_state_contact_radius=0.06)", lambda d: _drift(d), ""),
    ("wm_state_drift.json", "same, contact gate and residual_states=true (the tcp predicted as a change)",
     lambda d: _drift(d), ""),
    ("wm_state_drift_loss_scale_0.05.json", "same, and the cube loss in 5 cm units (env_state_loss_scale=0.05, "
     "not 1 cm)", lambda d: _drift(d), ""),
    ("wm_state_drift_head_reads_cond.json", "same, and the outcome head reads the raw context states + actions "
     "(head_reads_cond=true)", lambda d: _drift(d), ""),
    ("imagination_lift_state.json", "main job with the state-rule success (env_state_dim=9, contact gate, residual "
     "tcp, 5 cm cube loss), 3 seeds: SFT -> RL in imagination -> co-evolution rounds; real RL same budget",
     lambda d: f"{_fmt(d['sft_success'])} -> {_fmt(d['imagination_rl_success'])} -> "
     f"{[round(v, 3) for v in d['coevolution_success_by_round']]}; {_fmt(d['real_rl_same_budget_success'])}",
     ">= SFT + 0.30"),
    ("imagination_lift_state.json", "same runs, round 0 again: KIR off / gating off / 8x the GRPO iterations "
     "(--variant it128 rl.iterations=128) / same with KL 0.1 to SFT (it128_kl) / exploration_std 0.05 with 4 "
     "epochs (std05_ep4)",
     lambda d: " / ".join(_fmt(_get(d, f"ablations.{k}.imagination_rl_success"))
                          for k in ("kir_off", "gating_off", "it128", "it128_kl", "std05_ep4")),
     ""),
    ("imagination_lift_state_odarm.json", "same runs, round 0 again in the world with the arm-and-object state model "
     "attached (--variant odarm object_dynamics.enabled=true object_dynamics.arm=true): SFT -> after RL in imagination",
     lambda d: f"{_fmt(d['sft_success'])} -> {_fmt(_get(d, 'ablations.odarm.imagination_rl_success'))}", ">= SFT + 0.30"),
    ("imagination_lift_state_scframes.json", "same runs, round 0 again in a world whose frames follow the "
     "arm-and-object state model (--variant scframes world_model.state_conditioned_frames=true "
     "object_dynamics.enabled=true object_dynamics.arm=true): SFT -> after RL in imagination",
     lambda d: f"{_fmt(d['sft_success'])} -> {_fmt(_get(d, 'ablations.scframes.imagination_rl_success'))}",
     ">= SFT + 0.30"),
    ("imagination_lift_state_schm.json", "same, the frames also read the state model's cube positions as heatmaps "
     "(--variant schm ... world_model.state_heatmaps=true): SFT -> after RL in imagination",
     lambda d: f"{_fmt(d['sft_success'])} -> {_fmt(_get(d, 'ablations.schm.imagination_rl_success'))}",
     ">= SFT + 0.30"),
    ("imagination_lift_state_schmtcp.json", "same, the gripper drawn from the state model's tcp as a heatmap too "
     "(--variant schmtcp ... world_model.tcp_heatmap=true): SFT -> after RL in imagination",
     lambda d: f"{_fmt(d['sft_success'])} -> {_fmt(_get(d, 'ablations.schmtcp.imagination_rl_success'))}",
     ">= SFT + 0.30"),
    ("libero_quick.json", "LIBERO quick slice (random policy, 2 episodes): success", "mean_success", ""),
    ("maniskill_quick.json", "ManiSkill3 quick slice (random policy, 2 episodes): success", "mean_success", ""),
    ("maniskill_pickcube_lift.json", "ManiSkill PickCube whole loop: SFT / RL in imagination / real RL",
     lambda d: f"{_fmt(d.get('sft_success'))} / {_fmt(d.get('imagination_rl_success'))} / "
     f"{_fmt(d.get('real_rl_same_budget_success'))}", ">= SFT + 0.30"),
    ("sim_throughput.json", "ManiSkill3 steps/s, 1 sub-env: state only / 2 cameras at 64 / at 128",
     lambda d: " / ".join(_fmt(_get(d, f"backends.maniskill.{k}.steps_per_second"))
                          for k in ("state_only", "cameras_64", "cameras_128")), ""),
    ("sim_throughput.json", "LIBERO steps/s, 1 sub-env: state only / 2 cameras at 64 / at 128",
     lambda d: " / ".join(_fmt(_get(d, f"backends.libero.{k}.steps_per_second"))
                          for k in ("state_only", "cameras_64", "cameras_128")), ""),
]


def table() -> str:
    lines = ["| benchmark file | figure | value | goal | quick? |", "|---|---|---|---|---|"]
    cache: dict[str, dict | None] = {}
    for fname, label, path, goal in ROWS:
        if fname not in cache:
            p = RESULTS / fname
            cache[fname] = json.loads(p.read_text()) if p.exists() else None
        d = cache[fname]
        if d is None:
            continue
        v = path(d) if callable(path) else _fmt(_get(d, path))
        quick = "quick" if d.get("quick") or (d.get("config") or {}).get("quick") else "full"
        cells = (f"`{fname}`", label, str(v), goal, quick)  # a "|" inside a cell would split it: escaped
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true")
    a = p.parse_args(argv)
    readme = ROOT / "README.md"
    text = readme.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"README.md lacks the {START} ... {END} markers")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{START}\n{table()}\n{END}{tail}"
    if a.check:
        return 0 if new == text else 1
    readme.write_text(new)
    print(table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
