"""The few plots the lessons share: a memory timeline, stacked component bars, a trade-off curve."""

from __future__ import annotations

import matplotlib.pyplot as plt

from memlab.measure import CATEGORIES, MemoryTrace

MiB = 1024**2
COLORS = dict(zip(CATEGORIES, ["#4C72B0", "#DD8452", "#55A868", "#C44E52"], strict=True))


def memory_timeline(
    trace: MemoryTrace, ax=None, title: str | None = None, unit: float = MiB, unit_name: str = "MiB"
):
    """Live tensor bytes after every operator of a tracked block, with the marks as labelled vertical lines."""
    ax = ax or plt.subplots(figsize=(8, 3.2))[1]
    steps = [i for i, _, _ in trace.timeline]
    live = [b / unit for _, _, b in trace.timeline]
    ax.plot(steps, live, lw=1.5, color="#4C72B0")
    ax.fill_between(steps, live, alpha=0.15, color="#4C72B0")
    for i, name, b in trace.timeline:
        if name.startswith("mark: "):
            ax.axvline(i, color="grey", lw=0.8, ls="--")
            ax.annotate(
                name[6:], (i, b / unit), xytext=(3, 6), textcoords="offset points", fontsize=8, rotation=90
            )
    peak_at = trace.peak_event
    ax.scatter(
        [peak_at[0]],
        [peak_at[2] / unit],
        color="#C44E52",
        zorder=3,
        label=f"peak {peak_at[2] / unit:.2f} {unit_name}",
    )
    ax.set_xlabel("operator index")
    ax.set_ylabel(f"live tensor memory ({unit_name})")
    ax.set_title(title or f"memory timeline ({trace.device})")
    ax.legend(loc="upper left", fontsize=8)
    return ax


def stacked_components(
    rows: dict[str, dict[str, float]],
    ax=None,
    unit: float = MiB,
    unit_name: str = "MiB",
    title: str = "",
    limits: dict[str, float] | None = None,
):
    """One stacked bar per row (e.g. a training set-up), one segment per component; optional horizontal lines
    (e.g. GPU sizes) in `limits` (same unit as the data, before scaling)."""
    ax = ax or plt.subplots(figsize=(8, 3.5))[1]
    names = list(rows)
    components = list(dict.fromkeys(c for row in rows.values() for c in row))
    bottoms = [0.0] * len(names)
    for component in components:
        heights = [rows[n].get(component, 0) / unit for n in names]
        ax.bar(names, heights, bottom=bottoms, label=component, color=COLORS.get(component))
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    for label, value in (limits or {}).items():
        ax.axhline(value / unit, color="black", lw=1, ls=":")
        ax.annotate(
            label,
            (len(names) - 0.5, value / unit),
            xytext=(0, 3),
            textcoords="offset points",
            ha="right",
            fontsize=8,
        )
    ax.set_ylabel(unit_name)
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", labelrotation=15)
    return ax


def tradeoff(points: dict[str, tuple[float, float]], xlabel: str, ylabel: str, ax=None, title: str = ""):
    """A labelled scatter of set-ups on two axes (e.g. peak memory vs step time)."""
    ax = ax or plt.subplots(figsize=(5, 3.5))[1]
    for label, (x, y) in points.items():
        ax.scatter([x], [y])
        ax.annotate(label, (x, y), xytext=(4, 4), textcoords="offset points", fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return ax
