#!/usr/bin/env python3
"""Draws benches/results/peers.svg from the figures `cargo bench --bench peers` writes
(benches/results/peers.json by default): the latency each configuration adds to a Pod CREATE
(p50 and p99, sequential and with 8 clients, against the namespace no webhook selects), and
each server's RSS at start and at the memory phase's namespace count. Python standard library
only; the SVG is written by hand, like benches/plot.py.

Usage: python3 benches/plot_peers.py [RESULTS.json ...] [OUT.svg]
Several JSON files (e.g. runs of different `--phases`) are merged, later ones winning.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = sys.argv[1:]
OUT = ARGS.pop() if ARGS and ARGS[-1].endswith(".svg") else None
RESULTS = ARGS or [os.path.join(HERE, "results", "peers.json")]
OUT = OUT or os.path.join(os.path.dirname(RESULTS[0]), "peers.svg")

CONFIGS = ["floor", "floor-patch", "cheiron", "go", "kyverno"]
COLOURS = {
    "floor": "#7f7f7f",
    "floor-patch": "#bcbd22",
    "cheiron": "#1f77b4",
    "go": "#2ca02c",
    "kyverno": "#d62728",
}
PANEL_W, PANEL_H, MARGIN = 420, 260, 60


def esc(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def bars(x0, y0, title, groups, unit):
    """One panel: `groups` is [(group label, [(config, value or None)])]."""
    values = [v for _, row in groups for _, v in row if v is not None]
    top = max([v for v in values if v > 0] + [1e-9]) * 1.15
    bottom = min([v for v in values] + [0.0])
    span = top - bottom
    out = [f'<text x="{x0 + PANEL_W / 2}" y="{y0 - 25}" text-anchor="middle" '
           f'font-weight="bold">{esc(title)}</text>']

    def y(v):
        return y0 + PANEL_H - (v - bottom) / span * PANEL_H

    out.append(f'<line x1="{x0}" y1="{y(0)}" x2="{x0 + PANEL_W}" y2="{y(0)}" stroke="black"/>')
    out.append(f'<line x1="{x0}" y1="{y0}" x2="{x0}" y2="{y0 + PANEL_H}" stroke="black"/>')
    for i in range(5):
        v = bottom + span * i / 4
        out.append(f'<text x="{x0 - 5}" y="{y(v) + 4}" text-anchor="end" font-size="10">'
                   f'{v:.1f}</text>')
    out.append(f'<text x="{x0 - 45}" y="{y0 + PANEL_H / 2}" font-size="11" '
               f'transform="rotate(-90 {x0 - 45} {y0 + PANEL_H / 2})" '
               f'text-anchor="middle">{esc(unit)}</text>')
    group_w = PANEL_W / max(len(groups), 1)
    for g, (label, row) in enumerate(groups):
        bar_w = (group_w - 20) / max(len(row), 1)
        for k, (config, value) in enumerate(row):
            if value is None:
                continue
            bx = x0 + g * group_w + 10 + k * bar_w
            top_y, base_y = sorted([y(value), y(0)])
            out.append(f'<rect x="{bx:.1f}" y="{top_y:.1f}" width="{bar_w - 2:.1f}" '
                       f'height="{max(base_y - top_y, 0.5):.1f}" fill="{COLOURS[config]}">'
                       f'<title>{esc(config)}: {value:.2f} {esc(unit)}</title></rect>')
            out.append(f'<text x="{bx + bar_w / 2:.1f}" y="{top_y - 3:.1f}" font-size="9" '
                       f'text-anchor="middle">{value:.1f}</text>')
        out.append(f'<text x="{x0 + g * group_w + group_w / 2}" y="{y0 + PANEL_H + 15}" '
                   f'text-anchor="middle" font-size="11">{esc(label)}</text>')
    return out


def main():
    data = {}
    for path in RESULTS:
        with open(path) as f:
            data.update(json.load(f))
    memory_names = set(data.get("memory_idle", {})) | {"cheiron"}
    present = [c for c in CONFIGS
               if c in data.get("latency", {}).get("sequential", {}) or c in memory_names]
    panels = []
    for mode in ["sequential", "concurrent"]:
        table = data.get("latency", {}).get(mode)
        if not table:
            continue
        groups = [(f"added {q}", [(c, table.get(c, {}).get(f"added_{q}_ms")) for c in present])
                  for q in ["p50", "p99"]]
        clients = table.get("clients", 1)
        panels.append((f"Pod CREATE, added latency, {clients} client(s)", groups, "ms"))
    memory = []
    for phase, label in [("memory_idle", "at start"), ("memory_namespaces", "namespaces")]:
        if phase not in data:
            continue
        if phase == "memory_namespaces":
            label = f"{data[phase].get('namespaces', '?')} namespaces"
        rows = []
        for c in present:
            name = "cheiron-webhook" if c == "cheiron" else c
            entry = data[phase].get(name)
            rows.append((c, entry["rss_kib"] / 1024 if entry else None))
        memory.append((label, rows))
    if memory:
        panels.append(("RSS of the admission server", memory, "MiB"))

    cols = 2
    rows = (len(panels) + cols - 1) // cols
    width = cols * (PANEL_W + 2 * MARGIN)
    height = rows * (PANEL_H + 2 * MARGIN) + 40
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    for i, (title, groups, unit) in enumerate(panels):
        x0 = (i % cols) * (PANEL_W + 2 * MARGIN) + MARGIN
        y0 = (i // cols) * (PANEL_H + 2 * MARGIN) + MARGIN
        svg += bars(x0, y0, title, groups, unit)
    lx = MARGIN
    for c in present:
        svg.append(f'<rect x="{lx}" y="{height - 25}" width="12" height="12" fill="{COLOURS[c]}"/>')
        svg.append(f'<text x="{lx + 16}" y="{height - 15}">{esc(c)}</text>')
        lx += 110
    svg.append("</svg>")
    with open(OUT, "w") as f:
        f.write("\n".join(svg) + "\n")
    print(OUT)


if __name__ == "__main__":
    main()
