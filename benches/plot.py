#!/usr/bin/env python3
"""Draws benches/results/scale.svg from the figures `cargo bench --bench scale` writes to
benches/results/scale-N.json: memory and times of the controller and the webhook against the
number of namespaces. Python standard library only; the SVG is written by hand.

Usage: python3 benches/plot.py [RESULTS_DIR] [OUT.svg]
"""

import glob
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "results")
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(RESULTS, "scale.svg")

# (figure key, sub-key or None, label, colour, dashed)
MEMORY = [
    ("webhook_rss_mib", "rss", "webhook RSS", "#1f77b4", False),
    ("controller_idle_rss_mib", None, "controller RSS, idle", "#2ca02c", True),
    ("controller_rss_mib", None, "controller RSS after the backfill", "#d62728", False),
    ("controller_rss_unrelated_mib", None, "controller RSS, + unrelated objects", "#9467bd", True),
    ("wide_controller_rss_mib", None, "controller RSS after the backfill, 1 manager (wide)", "#8c564b", False),
]
TIMES = [
    ("controller_converge_seconds", None, "controller: 100 managers converged", "#d62728", False),
    ("bare_client_seconds", None, "bare client, same writes", "#7f7f7f", True),
    ("webhook_ready_seconds", None, "webhook: start → /readyz (streaming lists)", "#1f77b4", False),
    ("webhook_ready_paged_seconds", None, "webhook: start → /readyz (paged lists)", "#17becf", True),
    ("webhook_namespaces_listed_seconds", None, "webhook: start → Namespaces listed (streaming)", "#9467bd", True),
    ("webhook_secrets_listed_seconds", None, "webhook: start → its Secrets listed", "#ff7f0e", True),
    ("controller_ready_seconds", None, "controller: start → /readyz", "#2ca02c", True),
    ("wide_controller_converge_seconds", None, "controller: 1 manager converged (wide)", "#8c564b", False),
    ("wide_bare_client_seconds", None, "bare client, same writes (wide)", "#bcbd22", True),
]
MEMORY_TARGETS = [
    (64, "webhook target at 100k: 64 MiB"),
    (128, "controller target: 128 MiB"),
    (256, "controller target at 100k (wide): 256 MiB"),
]


def load():
    runs = {}
    for path in sorted(glob.glob(os.path.join(RESULTS, "scale-*.json"))):
        with open(path) as f:
            data = json.load(f)
        runs[int(data["namespaces"])] = data.get("figures", {})
    return runs


def series(runs, key, sub):
    points = []
    for n in sorted(runs):
        value = runs[n].get(key)
        if isinstance(value, dict):
            value = value.get(sub) if sub else None
        if isinstance(value, (int, float)):
            points.append((n, float(value)))
    return points


def nice_max(value):
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        top = step * 10**exponent
        if top >= value:
            return top
    return 10 ** (exponent + 1)


def panel(x0, y0, width, height, title, unit, lines, runs, targets=()):
    out = []
    xs = sorted(runs)
    if not xs:
        return out
    lo, hi = math.log10(min(xs)), math.log10(max(xs))
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    values = [v for key, sub, *_ in lines for _, v in series(runs, key, sub)]
    values += [t for t, _ in targets]
    top = nice_max(max(values) * 1.1 if values else 1)

    def px(n):
        return x0 + (math.log10(n) - lo) / (hi - lo) * width

    def py(v):
        return y0 + height - v / top * height

    out.append(f'<text x="{x0}" y="{y0 - 12}" font-size="14" font-weight="bold">{title}</text>')
    out.append(f'<rect x="{x0}" y="{y0}" width="{width}" height="{height}" fill="none" stroke="#999"/>')
    for i in range(6):
        v = top * i / 5
        y = py(v)
        out.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + width}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end">{v:g}</text>')
    out.append(
        f'<text x="{x0 - 40}" y="{y0 + height / 2}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 {x0 - 40} {y0 + height / 2})">{unit}</text>'
    )
    for n in xs:
        x = px(n)
        out.append(f'<line x1="{x:.1f}" y1="{y0 + height}" x2="{x:.1f}" y2="{y0 + height + 4}" stroke="#999"/>')
        out.append(f'<text x="{x:.1f}" y="{y0 + height + 18}" font-size="11" text-anchor="middle">{n:,}</text>')
    out.append(
        f'<text x="{x0 + width / 2}" y="{y0 + height + 36}" font-size="12" text-anchor="middle">'
        "namespaces (log scale)</text>"
    )
    for value, label in targets:
        y = py(value)
        out.append(
            f'<line x1="{x0}" y1="{y:.1f}" x2="{x0 + width}" y2="{y:.1f}" stroke="#ff7f0e" '
            'stroke-dasharray="2,3"/>'
        )
        out.append(f'<text x="{x0 + width - 4}" y="{y - 4:.1f}" font-size="10" text-anchor="end" fill="#ff7f0e">{label}</text>')
    legend_y = y0 + 14
    for key, sub, label, colour, dashed in lines:
        points = series(runs, key, sub)
        if not points:
            continue
        dash = ' stroke-dasharray="6,4"' if dashed else ""
        path = " ".join(f"{px(n):.1f},{py(v):.1f}" for n, v in points)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
        for n, v in points:
            out.append(f'<circle cx="{px(n):.1f}" cy="{py(v):.1f}" r="3.5" fill="{colour}"/>')
            out.append(f'<text x="{px(n) + 6:.1f}" y="{py(v) - 6:.1f}" font-size="10" fill="{colour}">{v:.1f}</text>')
        out.append(f'<line x1="{x0 + 10}" y1="{legend_y - 4}" x2="{x0 + 34}" y2="{legend_y - 4}" stroke="{colour}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{x0 + 40}" y="{legend_y}" font-size="11">{label}</text>')
        legend_y += 16
    return out


def main():
    runs = load()
    if not runs:
        sys.exit(f"no scale-N.json in {RESULTS}: run `cargo bench --bench scale` first")
    width, height = 980, 440
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    parts += panel(80, 50, 360, 300, "Memory", "MiB", MEMORY, runs, MEMORY_TARGETS)
    parts += panel(580, 50, 360, 300, "Times", "seconds", TIMES, runs)
    parts.append(
        f'<text x="{width / 2}" y="{height - 12}" font-size="11" text-anchor="middle" fill="#555">'
        "cargo bench --bench scale -- --namespaces N; drawn by benches/plot.py from benches/results/scale-N.json"
        "</text>"
    )
    parts.append("</svg>")
    with open(OUT, "w") as f:
        f.write("\n".join(parts) + "\n")
    print(f"wrote {OUT} from {len(runs)} run(s): {', '.join(f'{n:,}' for n in sorted(runs))} namespaces")


if __name__ == "__main__":
    main()
