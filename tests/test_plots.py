"""memlab.plots draws what it is given: labelled axes, one bar segment per component, the peak marked."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from memlab import plots  # noqa: E402
from memlab.measure import measure_training_step  # noqa: E402
from memlab.models import mlp  # noqa: E402


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
    apart) are labelled without any two labels overlapping and without a label leaving the axes."""
    model = mlp([64, 256, 256, 10])
    trace = measure_training_step(
        model, (torch.randn(8, 64), torch.randint(0, 10, (8,))), torch.optim.AdamW(model.parameters())
    )
    ax = plots.memory_timeline(trace)
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    assert len(boxes) == len(trace.marks) >= 3
    frame = ax.get_window_extent(renderer)
    for box in boxes:
        assert frame.y0 <= box.y0 and box.y1 <= frame.y1, (box, frame)
    for k, a in enumerate(boxes):
        for b in boxes[k + 1 :]:
            assert not a.overlaps(b), (a, b)
    plt.close("all")


def test_stacked_components_stacks_every_component():
    rows = {"a": {"x": 2 * 2**20, "y": 1 * 2**20}, "b": {"x": 1 * 2**20}}
    ax = plots.stacked_components(rows, limits={"GPU": 3 * 2**20})
    heights = sorted(round(p.get_height(), 6) for p in ax.patches)
    assert heights == [0.0, 1.0, 1.0, 2.0]  # b has no y: a zero-height segment
    assert ax.get_ylabel() == "MiB"
    plt.close("all")


def test_tradeoff_labels_every_point():
    ax = plots.tradeoff({"fp32": (10.0, 1.0), "bf16": (6.0, 0.5)}, "peak (GiB)", "step time (s)")
    assert {t.get_text() for t in ax.texts} == {"fp32", "bf16"}
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
