"""The markdown tables of a run, and its JSON without infinities."""

from __future__ import annotations

import math


def vec_text(v) -> str:
    return "—" if v is None else f"{v[0]:.0f} tok/s, {v[1]:.0f} ms, {v[2]:.0f} s"


def markdown(res: dict) -> str:
    budgets, out = res["budgets"], []
    for key, pr in res["problems"].items():
        out += [f"### {key}: {pr['title']}", "", f"Workload: {pr['workload']}. {res['seeds']} seeds.", ""]
        head = ("| scenario | contender | " + " | ".join(f"HV@{n}" for n in budgets) + " | HV@equal h | "
                f"accel-h@{budgets[-1]} | h→90% (seeds) | h→95% (seeds) | wasted | rejected (false) | "
                "aborted (false) | repeat boots | reused |")
        out += [head, "|---" * (len(budgets) + 11) + "|"]
        notes = []
        for scenario, sc in pr["scenarios"].items():
            if "noise" in sc or "watcher" not in sc["true_front"]:
                continue  # the noise cells: their own table (noise_markdown)
            f, w = sc["true_front"], sc["true_front"]["watcher"]
            notes.append(f"{scenario}: {f['points']} configurations, {f['failing']} fail to start, {f['feasible']} "
                         f"feasible, true front {len(f['front'])} points; the warmup abort (prior model) on "
                         f"{w['sampled']} that start aborts {w['false_aborts']} of {w['fit']} that fit and "
                         f"{w['caught']} of {w['over']} over the budget")
            for name, a in sc["contenders"].items():
                if "error" in a:
                    out.append(f"| {scenario} | {name} | {a['error']} |" + " |" * (len(budgets) + 9))
                    continue
                hv = " | ".join(f"{a[f'hv@{n}'][0]:.3f} ± {a[f'hv@{n}'][1]:.3f}" if f"hv@{n}" in a else "—"
                                for n in budgets)
                eq = f"{a['hv@hours'][1]:.3f} @ {a['hv@hours'][0]:.1f} h" if "hv@hours" in a else "—"
                to = [f"{'—' if not math.isfinite(a[x][0]) else f'{a[x][0]:.1f}'} ({a[x][1]}/{a['seeds']})"
                      for x in ("to90", "to95")]
                last = f"h@{budgets[-1]}"
                out.append(f"| {scenario} | {name} | {hv} | {eq} | {a[last]:.1f} | {to[0]} | {to[1]} | "
                           f"{100 * a['wasted_frac']:.0f}% | {a['rejected']:.1f} ({a['false_rejects']:.1f}) | "
                           f"{a['aborted']:.1f} ({a['false_aborts']:.1f}) | {a['repeat_boots']:.1f} | "
                           f"{a['reused']:.1f} |" if last in a else f"| {scenario} | {name} | {hv} | {eq} |")
        out += [""] + [f"* {n}" for n in notes] + [""]
    out += noise_markdown(res)
    if "replay" in res:
        r = res["replay"]
        out += ["### upgrade: 1.21.2 settings replayed unchanged on fork-1.22", "",
                (f"Same reference point: the 1.21.2 true front holds {100 * r['front_1.21.2_vs_1.22']:.0f}% of the "
                 f"1.22 true hypervolume; its configurations replayed on 1.22 hold "
                 f"{100 * r['front_1.21.2_replayed_on_1.22']:.0f}%. The full method's {r['full_picks']} balanced "
                 f"picks (one per seed) land on {r['full_picks_distinct_on_1.22']} distinct 1.22 points; "
                 f"{r['full_picks_dominated_on_1.22']} of the picks are dominated by the 1.22 front there (the "
                 "first four are shown)."), "",
                "| settings | on 1.21.2 | on 1.22 | dominated on 1.22 |", "|---|---|---|---|"]
        out += [f"| {row['label']} | {vec_text(row['on_1.21.2'])} | {vec_text(row['on_1.22'])}"
                f"{' (' + row['failure'][:60] + ')' if row['failure'] else ''} | "
                f"{'yes' if row['dominated_on_1.22'] else 'no'} |" for row in r["rows"]]
        out.append("")
    return "\n".join(out)


def noise_markdown(res: dict) -> list[str]:
    """The noise cells: each contender's front and picks judged on the true figures (noisescore.py)."""
    rows, last = [], res["budgets"][-1]
    for key, pr in res["problems"].items():
        for scenario, sc in pr["scenarios"].items():
            full = sc.get("noise", {}).get("full")
            for name, a in sc.get("noise", {}).items():
                eq, brk = a.get("true_hv@hours"), a["slo_break"]
                extra = f" (+{100 * (a['hours'] / full['hours'] - 1):.0f}%)" if full and "confirm" in name else ""
                rows.append(
                    f"| {key} | {scenario} | {name} | {_pm(a.get(f'true_hv@{last}'))} | "
                    f"{f'{eq[1]:.3f} @ {eq[0]:.1f} h' if eq else '—'} | {a['hours']:.2f}{extra} | "
                    f"{_num(a['regret_balanced'])} | {_num(a['regret_slo'])} | "
                    f"{'—' if brk is None else f'{100 * brk:.0f}%'} |")
    if not rows:
        return []
    return ["### Noise: what each method recommends, judged on the true figures", "",
            f"| problem | scenario | contender | true HV@{last} | true HV at equal h | accel-h (confirmation) | "
            "balanced-pick regret % | SLO-pick regret % | SLO-break rate |", "|---" * 9 + "|", *rows, ""]


def _pm(v) -> str:
    return "—" if v is None else f"{v[0]:.3f} ± {v[1]:.3f}"


def _num(v) -> str:
    return "—" if v is None else f"{v:.1f}"


def finite(o):
    """JSON without Infinity: a target never reached is null."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): finite(v) for k, v in o.items()}
    return [finite(v) for v in o] if isinstance(o, (list, tuple)) else o
