"""memlab.plots draws what it is given: labelled axes, one bar segment per component, the peak marked."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from memlab import plots  # noqa: E402
from memlab.measure import measure_training_step  # noqa: E402
from memlab.models import build_model, mlp, tiny_llama_config  # noqa: E402


def test_memory_timeline_marks_the_peak_and_the_marks():
    model = mlp([16, 32, 4])
    trace = measure_training_step(
        model, (torch.randn(8, 16), torch.randint(0, 4, (8,))), torch.optim.AdamW(model.parameters())
    )
    ax = plots.memory_timeline(trace)
    assert ax.get_ylabel() == "live tensor memory (MiB)"
    assert len(ax.lines) == 1 + len(trace.marks)  # the curve and one dashed line per mark
    assert ax.get_legend().get_texts()[0].get_text() == f"peak {trace.peak_bytes / 2**20:.2f} MiB"
    plt.close("all")


def test_memory_timeline_labels_stay_inside_the_axes_and_apart():
    """The marks of one training step (forward, backward, optimizer step, zero_grad: the last two a few operators
    apart) are labelled without any two labels overlapping or standing side by side (lesson 06's "after optimizer
    step" and "after zero_grad" ran together), and without a label leaving the axes, in a narrow panel too."""
    model = build_model(tiny_llama_config())  # lesson 06's: about 800 operators, the last two marks 4 apart
    ids = torch.randint(3, 100, (2, 16))
    trace = measure_training_step(
        model, {"input_ids": ids, "labels": ids}, torch.optim.AdamW(model.parameters())
    )
    for figsize in ((8, 3.2), (5, 3.2)):
        ax = plots.memory_timeline(trace, ax=plt.subplots(figsize=figsize)[1])
        fig = ax.figure
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        boxes = _boxes(ax.texts, renderer)
        assert len(boxes) == len(trace.marks) >= 4
        frame = ax.get_window_extent(renderer)
        for box in boxes:
            assert frame.x0 <= box.x0 and box.x1 <= frame.x1, (box, frame)
            assert frame.y0 <= box.y0 and box.y1 <= frame.y1, (box, frame)
        for k, a in enumerate(boxes):
            for b in boxes[k + 1 :]:
                side_by_side = min(a.y1, b.y1) > max(a.y0, b.y0)  # some height in common
                apart = max(a.x0, b.x0) - min(a.x1, b.x1)  # the room between them, in pixels
                assert not side_by_side or apart > a.width, (figsize, a, b)
        plt.close("all")


def test_stacked_components_stacks_every_component():
    rows = {"a": {"x": 2 * 2**20, "y": 1 * 2**20}, "b": {"x": 1 * 2**20}}
    ax = plots.stacked_components(rows, limits={"GPU": 3 * 2**20})
    heights = sorted(round(p.get_height(), 6) for p in ax.patches)
    assert heights == [0.0, 1.0, 1.0, 2.0]  # b has no y: a zero-height segment
    assert ax.get_ylabel() == "memory (MiB)"
    plt.close("all")


#: lesson 01's Llama-2-7B budgets, bytes per parameter (its §6)
CONVENTIONS = {
    "ZeRO": {"weights": 2, "gradients": 2, "master weights": 4, "optimizer state": 8},
    "Megatron-LM, bf16": {"weights": 2, "gradients": 4, "master weights": 4, "optimizer state": 8},
    "Megatron-LM, fp16": {"weights": 2, "gradients": 6, "master weights": 4, "optimizer state": 8},
    "Hugging Face": {"weights": 6, "gradients": 4, "optimizer state": 8},
    "EleutherAI (fp16 grads)": {"weights": 2, "gradients": 2, "master weights": 4, "optimizer state": 8},
    "EleutherAI (fp32 grads)": {"weights": 2, "gradients": 4, "master weights": 4, "optimizer state": 8},
}


def _boxes(artists, renderer):
    return [a.get_window_extent(renderer) for a in artists]


def test_stacked_components_legend_covers_no_bar_and_labels_stand_apart():
    """Lesson 01's 7B budgets: the legend is beside the bars (it covered the last one), each component has a colour
    of its own that is not another's look-alike (gradients and master weights were two oranges), and the bars' names
    stand level without touching each other."""
    ax = plots.stacked_components(
        {k: {c: v * 6.7e9 for c, v in parts.items()} for k, parts in CONVENTIONS.items()},
        unit=2**30,
        unit_name="GiB",
    )
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    assert not legend.overlaps(ax.get_window_extent(renderer))
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "optimizer state",
        "master weights",
        "gradients",
        "weights",
    ]  # the stack's order, top down
    colors = {}
    for patch in ax.patches:
        colors.setdefault(patch.get_label(), patch.get_facecolor())
    rgb = [matplotlib.colors.to_rgb(c) for c in colors.values()]
    for k, a in enumerate(rgb):
        for b in rgb[k + 1 :]:
            assert sum(abs(x - y) for x, y in zip(a, b, strict=True)) > 0.3, (colors, a, b)
    ticks = _boxes(ax.get_xticklabels(), renderer)
    assert all(t.get_rotation() == 0 for t in ax.get_xticklabels())
    for a, b in zip(ticks, ticks[1:]):
        assert a.x1 < b.x0, (a, b)
    plt.close("all")


def test_component_colors_are_fixed_for_known_components_and_distinct_for_others():
    colors = plots.component_colors(["parameters", "x", "gradients", "y"])
    assert colors["parameters"] == plots.COLORS["parameters"]
    assert colors["gradients"] == plots.COLORS["gradients"]
    assert len(set(colors.values())) == 4


def test_wrap_label_counts_display_columns():
    assert plots.wrap_label("EleutherAI (fp16 grads)", 12) == "EleutherAI\n(fp16 grads)"
    assert plots.wrap_label("DDP,\nbucket view", 30) == "DDP,\nbucket view"
    assert plots.wrap_label("가나다라 마바", 8) == "가나다라\n마바"  # 8 columns, 4 syllables


def test_tradeoff_labels_every_point():
    ax = plots.tradeoff({"fp32": (10.0, 1.0), "bf16": (6.0, 0.5)}, "peak (GiB)", "step time (s)")
    assert {t.get_text() for t in ax.texts} == {"fp32", "bf16"}
    plt.close("all")


def test_tradeoff_labels_stay_inside_beside_their_points():
    """Lesson 06's trade-off: a label level with its point, clear of it and of an error bar through it (the fp32
    label sat on its marker's bar), inside the axes."""
    points = {"fp32": (119.0, 114.6), "bf16": (100.0, 103.2), "bf16+ckpt+8bit": (37.0, 146.0)}
    ax = plots.tradeoff(points, "peak memory (MiB)", "time per optimizer step (ms)")
    for x, y in points.values():
        ax.errorbar(x, y, yerr=4.0, fmt="none", ecolor="grey")
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    for text in ax.texts:
        box = text.get_window_extent(renderer)
        x, y = ax.transData.transform(points[text.get_text()])
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
        assert box.y0 < y < box.y1  # level with its point
        assert box.x0 - x > 4 or x - box.x1 > 4  # beside it, clear of the marker and the error bar
    plt.close("all")


def _visible_tick_labels(ax, axis):
    ax.figure.canvas.draw()
    target = ax.yaxis if axis == "y" else ax.xaxis
    lo, hi = sorted(ax.get_ylim() if axis == "y" else ax.get_xlim())
    return [
        t.get_text()
        for t in target.get_ticklabels()
        if t.get_text() and lo <= t.get_position()[axis == "y"] <= hi
    ]


def test_matplotlibs_own_log_axis_labels_only_powers_of_ten():
    """What readable_log_axis is for: on 12 to 140, matplotlib's log locator labels a single tick (10^2)."""
    ax = plt.subplots()[1]
    ax.plot([256, 4096], [12.0, 140.0])
    ax.set_yscale("log")
    ax.minorticks_off()
    assert len(_visible_tick_labels(ax, "y")) == 1
    plt.close("all")


def test_readable_log_axis_labels_several_plain_numbers_inside_the_data():
    for low, high in ((12.0, 140.0), (13.0, 40.0), (0.3, 0.9), (1.0, 1e6)):
        ax = plt.subplots()[1]
        ax.plot([1, 2], [low, high])
        ticks = plots.readable_log_axis(ax, "y")
        labels = _visible_tick_labels(ax, "y")
        assert ax.get_yscale() == "log"
        assert len(labels) >= 3 and len(labels) == len(ticks), (low, high, labels)
        assert all(float(label) == float(f"{t:g}") for label, t in zip(labels, ticks, strict=True))
        assert not ax.yaxis.get_minorticklocs().size  # no unlabelled minor ticks
        plt.close("all")
    ax = plt.subplots()[1]
    ax.plot([256, 4096], [1, 2])
    plots.readable_log_axis(ax, "x")
    assert ax.get_xscale() == "log" and len(_visible_tick_labels(ax, "x")) >= 3
    plt.close("all")
