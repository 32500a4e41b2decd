"""The few plots the lessons share: a memory timeline, stacked component bars, a trade-off curve, and readable ticks
on a log axis; and, for the Korean edition, a font with Hangul (`use_language_font`, called by memlab.i18n.use)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import matplotlib as mpl
import matplotlib.pyplot as plt
from matplotlib import font_manager
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from memlab.i18n import N_, _
from memlab.measure import CATEGORIES, MemoryTrace, display_name

MiB = 1024**2
#: seaborn's "deep" palette: ten colours that stay apart from each other (matplotlib's default cycle puts its orange
#: next to this orange)
PALETTE = (
    "#4C72B0",
    "#DD8452",
    "#55A868",
    "#C44E52",
    "#8172B3",
    "#937860",
    "#DA8BC3",
    "#8C8C8C",
    "#CCB974",
    "#64B5CD",
)
#: the colour of each component the lessons stack, the same in every figure: the tracker's categories, and the
#: copies of a mixed-precision budget (16-bit weights, fp32 master weights); any other component gets a colour of
#: PALETTE that no component of its figure has
COLORS = {
    **dict(zip(CATEGORIES, PALETTE[:4], strict=True)),
    N_("weights"): PALETTE[0],
    N_("master weights"): PALETTE[4],
}
LABEL_BOX = dict(
    boxstyle="square,pad=0.15", fc="white", ec="none", alpha=0.85
)  # text over a curve stays readable


# ---- a font for the lesson's language ------------------------------------------------------------------------

#: font families with Hangul, preferred first, as matplotlib's font manager names them: Nanum Gothic (shipped by the
#: pip package koreanize-matplotlib, and Debian's fonts-nanum), Noto Sans KR / CJK (pylopdf-fonts-ko, Debian's
#: fonts-noto-cjk), then the ones Windows and macOS come with. DejaVu Sans, matplotlib's own, has no Hangul.
HANGUL_FONTS = (
    "NanumGothic",
    "Noto Sans KR",
    "Noto Sans CJK KR",
    "Noto Sans CJK JP",
    "Malgun Gothic",
    "Apple SD Gothic Neo",
    "AppleGothic",
    "UnDotum",
)
#: pip packages that ship a Hangul font: (import name, the font folder inside it). Only their files are used: the
#: package is found, never imported (koreanize_matplotlib's import changes rcParams and needs distutils, gone in
#: Python 3.12).
FONT_PACKAGES = (("koreanize_matplotlib", "fonts"), ("pylopdf_fonts_ko", "."))
_LANGUAGE_FONTS = {"ko": HANGUL_FONTS}
_font_state: dict = {"family": None, "warned": set()}


def _packaged_font_files() -> list[Path]:
    files = []
    for package, folder in FONT_PACKAGES:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        for location in (spec.submodule_search_locations or []) if spec else []:
            files += sorted(p for p in (Path(location) / folder).glob("*.[ot]tf"))
    return files


def language_font(language: str) -> str | None:
    """The name of an installed font family with the letters of `language` (None for English, which needs none,
    and when there is none), after registering the fonts of FONT_PACKAGES with matplotlib."""
    wanted = _LANGUAGE_FONTS.get(language)
    if not wanted:
        return None
    known = {font.name for font in font_manager.fontManager.ttflist}
    if not known.intersection(wanted):
        for path in _packaged_font_files():
            try:
                font_manager.fontManager.addfont(str(path))
            except (OSError, RuntimeError, ValueError):
                continue
        known = {font.name for font in font_manager.fontManager.ttflist}
    return next((name for name in wanted if name in known), None)


def use_language_font(language: str) -> str | None:
    """Draw text in a font that has `language`'s letters: its family goes after matplotlib's own in
    rcParams["font.family"], so Latin letters, digits and the minus sign keep DejaVu Sans and only the missing
    glyphs (Hangul) come from it (matplotlib's per-glyph font fallback). English restores the family as it was.
    Without such a font it prints one line, once, saying what to install. Returns the family used (or None)."""
    if _font_state["family"] is None:
        _font_state["family"] = list(mpl.rcParams["font.family"])
    original = _font_state["family"]
    if language not in _LANGUAGE_FONTS:
        mpl.rcParams["font.family"] = original
        return None
    font = language_font(language)
    if font is None:
        mpl.rcParams["font.family"] = original
        if language not in _font_state["warned"]:
            _font_state["warned"].add(language)
            message = _(
                "memlab.plots: no font with Korean letters found, so the figures' Korean text shows as boxes; "
                "install one (pip install koreanize-matplotlib, or apt-get install fonts-nanum), then restart "
                "the kernel"
            )
            print(message, file=sys.stderr, flush=True)
        return None
    mpl.rcParams["font.family"] = [*original, font]
    return font


def memory_timeline(
    trace: MemoryTrace, ax=None, title: str | None = None, unit: float = MiB, unit_name: str = "MiB"
):
    """Live tensor bytes after every operator of a tracked block, with the marks as labelled vertical lines.

    Each mark's label reads upwards, on a white ground so that the curve under it does not hide it, right of its
    line; left of it when the next mark is close. A label whose neighbour would stand too close (an optimizer step
    and `zero_grad(set_to_none=True)`, which runs no operator, are a few operators apart) hangs from the top of the
    axes instead of standing on the bottom, so two labels are never side by side."""
    ax = ax or plt.subplots(figsize=(8, 3.2))[1]
    steps = [event[0] for event in trace.timeline]
    live = [event[2] / unit for event in trace.timeline]
    ax.plot(steps, live, lw=1.5, color=PALETTE[0])
    ax.fill_between(steps, live, alpha=0.15, color=PALETTE[0])
    marks = [(i, display_name(name[6:])) for i, name, _bytes in trace.timeline if name.startswith("mark: ")]
    for i, _label in marks:
        ax.axvline(i, color="grey", lw=0.8, ls="--")
    _label_marks(ax, marks)
    peak_at = trace.peak_event
    ax.scatter(
        [peak_at[0]],
        [peak_at[2] / unit],
        color=PALETTE[3],
        zorder=3,
        label=_("peak {value:.2f} {unit}").format(value=peak_at[2] / unit, unit=unit_name),
    )
    ax.set_xlabel(_("operator index"))
    ax.set_ylabel(_("live tensor memory ({unit})").format(unit=unit_name))
    ax.set_title(title or _("memory timeline ({device})").format(device=trace.device))
    ax.legend(loc="upper left", fontsize=8)
    return ax


def _label_marks(ax, marks: list[tuple[int, str]], fontsize: float = 8, gap: float = 3) -> None:
    """Label the vertical lines at `marks` ([(x, label)]) as memory_timeline says, measuring distances in points."""
    x0, x1 = ax.get_xlim()
    width = ax.get_window_extent().width * 72 / ax.figure.dpi  # the axes' width in points

    def points(x: float) -> float:
        return (x - x0) / (x1 - x0) * width

    thick = 1.5 * fontsize  # a label read upwards is a line of text wide, its box included
    right_edge = {"bottom": -math.inf, "top": -math.inf}  # where the last label of each row ends, in points
    for k, (x, label) in enumerate(marks):
        at = points(x)
        left = k + 1 < len(marks) and points(marks[k + 1][0]) - at < thick + 2 * gap
        start = at - gap - thick if left else at + gap
        row = "bottom" if start - right_edge["bottom"] >= 2 * thick else "top"  # two labels' room between
        right_edge[row] = start + thick
        ax.annotate(
            label,
            (x, 0 if row == "bottom" else 1),
            xycoords=("data", "axes fraction"),
            xytext=(-gap if left else gap, 4 if row == "bottom" else -4),
            textcoords="offset points",
            fontsize=fontsize,
            rotation=90,
            ha="right" if left else "left",
            va="bottom" if row == "bottom" else "top",
            bbox=LABEL_BOX,
        )


def component_colors(components: list[str]) -> dict[str, str]:
    """{component: colour}: COLORS' for the components it names, unused colours of PALETTE for the others, in order."""
    taken = {COLORS[c] for c in components if c in COLORS}
    free = iter([c for c in PALETTE if c not in taken] + list(PALETTE))
    return {c: COLORS[c] if c in COLORS else next(free) for c in components}


def legend_outside(ax, **kwargs):
    """The legend of `ax` right of the axes, where it covers no data; its entries in reverse order when `reverse` (a
    stack's, read top down). A figure made with layout="constrained", or shown inline, makes room for it."""
    reverse = kwargs.pop("reverse", False)
    handles, labels = ax.get_legend_handles_labels()
    if reverse:
        handles, labels = handles[::-1], labels[::-1]
    options = dict(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8, frameon=False)
    return ax.legend(handles, labels, **{**options, **kwargs})


def wrap_label(label: str, columns: float) -> str:
    """`label` broken at spaces into lines of at most `columns` display columns (a Hangul syllable takes two); its
    own line breaks kept, a longer word left whole."""
    from memlab.notebook import display_width

    lines = []
    for paragraph in label.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            if line and display_width(f"{line} {word}") > columns:
                lines.append(line)
                line = word
            else:
                line = f"{line} {word}" if line else word
        lines.append(line)
    return "\n".join(lines)


def stacked_components(
    rows: dict[str, dict[str, float]],
    ax=None,
    unit: float = MiB,
    unit_name: str = "MiB",
    title: str = "",
    limits: dict[str, float] | None = None,
):
    """One stacked bar per row (e.g. a training set-up), one segment per component, each component in its own
    colour (COLORS, component_colors) and the legend right of the axes, top component first; optional horizontal
    lines (e.g. GPU sizes) in `limits` (same unit as the data, before scaling). The rows' names are written
    level, broken into lines as narrow as a bar's slot."""
    ax = ax or plt.subplots(figsize=(9, 3.5), layout="constrained")[1]
    names = list(rows)
    components = list(dict.fromkeys(c for row in rows.values() for c in row))
    colors = component_colors(components)
    bottoms = [0.0] * len(names)
    for component in components:
        heights = [rows[n].get(component, 0) / unit for n in names]
        ax.bar(
            range(len(names)), heights, bottom=bottoms, label=display_name(component), color=colors[component]
        )
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
    ax.set_ylabel(_("memory ({unit})").format(unit=unit_name))
    ax.set_title(title)
    legend_outside(ax, reverse=True)
    ax.figure.draw_without_rendering()  # the axes' width once the legend has its room
    slot = ax.get_window_extent().width * 72 / ax.figure.dpi / max(len(names), 1)  # points per bar
    size = mpl.rcParams["xtick.labelsize"]
    size = font_manager.FontProperties(size=size).get_size_in_points()
    columns = max(6, int(slot / (0.6 * size)))
    ax.set_xticks(range(len(names)), [wrap_label(n, columns) for n in names])
    return ax


def tradeoff(points: dict[str, tuple[float, float]], xlabel: str, ylabel: str, ax=None, title: str = ""):
    """A labelled scatter of set-ups on two axes (e.g. peak memory vs step time). Each label stands beside its
    point, level with it, on the side towards the middle of the axes (so an error bar drawn through the point does
    not cross it and no label leaves the axes)."""
    ax = ax or plt.subplots(figsize=(5, 3.5), layout="constrained")[1]
    xs = [x for x, _y in points.values()]
    middle = (min(xs) + max(xs)) / 2 if xs else 0.0
    for label, (x, y) in points.items():
        ax.scatter([x], [y], zorder=3)
        right = len(xs) > 1 and x > middle
        ax.annotate(
            label,
            (x, y),
            xytext=(-7 if right else 7, 0),
            textcoords="offset points",
            ha="right" if right else "left",
            va="center",
            fontsize=8,
            bbox=LABEL_BOX,
        )
    ax.margins(x=0.1, y=0.12)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return ax


#: the mantissas tried for the ticks of a log axis, coarsest first: the first set that gives `min_ticks` ticks wins
_LOG_MANTISSAS = (
    (1,),
    (1, 2, 5),
    (1, 2, 3, 5),
    (1, 1.5, 2, 3, 4, 5, 6, 8),
    (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9),
)


def readable_log_axis(ax, axis: str = "y", min_ticks: int = 3) -> list[float]:
    """Put the `axis` ("x" or "y") of `ax` on a log scale with at least `min_ticks` labelled ticks inside its current
    limits, written as plain numbers (20, 50, 100; not 10^2), and no unlabelled minor ticks. Matplotlib's own log
    locator labels only powers of ten, so a range like 12 to 140 shows a single label. Call it after plotting: the
    ticks are chosen from the limits the data set. Returns the ticks."""
    set_scale, get_lim, set_lim = (
        (ax.set_yscale, ax.get_ylim, ax.set_ylim)
        if axis == "y"
        else (ax.set_xscale, ax.get_xlim, ax.set_xlim)
    )
    set_scale("log")
    lo, hi = sorted(get_lim())
    ticks: list[float] = []
    for mantissas in _LOG_MANTISSAS:
        ticks = [
            m * 10.0**e
            for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            for m in mantissas
            if lo <= m * 10.0**e <= hi
        ]
        if len(ticks) >= min_ticks:
            break
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_major_locator(FixedLocator(ticks))
    target.set_major_formatter(FuncFormatter(lambda v, _position: f"{v:g}"))
    target.set_minor_locator(NullLocator())
    set_lim(lo, hi)
    return ticks
