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
