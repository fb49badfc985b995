"""Plain tables derived from a Report, shared by the pages and the CLI (no UI imports here)."""
from __future__ import annotations


def fmt_sci(x) -> str:
    if x is None:
        return "—"
    return f"{x:.2e}" if (abs(x) < 1e-3 or abs(x) >= 1e4) and x != 0 else f"{x:.4g}"


def overview_rows(report: dict) -> list[dict]:
    rows = []
    for tid, t in report["targets"].items():
        mix = (t.get("precision") or {}).get("mix") or {}
        total = sum(mix.values()) or 1
        worst = ((t.get("drift") or {}).get("worst")) or {}
        ev = t.get("evidence") or {}
        rows.append({
            "target": tid,
            "status": t["status"],
            "ops": (f"{t['op_count_before']} → {t['op_count_after']}" if t.get("op_count_after") is not None
                    else "—"),
            "fused groups": (t.get("fusions") or {}).get("count", "—") if t.get("fusions") else "—",
            "precision": ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in mix.items()) or "—",
            "worst drift (rel L2)": (worst.get("error") or
                                     (f"{fmt_sci(worst.get('rel_l2'))} ({worst.get('output')})"
                                      if worst else "—")),
            "evidence": ", ".join(f"{k}: {v}" for k, v in ev.items()),
            "error": t.get("error"),
        })
    return rows
