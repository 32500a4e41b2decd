"""The committed solution notebooks are executed with their plots (they are committed executed)."""

import nbformat
import pytest
from nbgrader_pipeline import SOLUTIONS, lesson_slugs


@pytest.mark.parametrize("slug", lesson_slugs())
def test_every_plot_is_in_the_committed_outputs(slug):
    """A cell that shows a figure has an image output: a notebook executed under a non-inline matplotlib backend
    (MPLBACKEND=Agg) would have none, and a reader on GitHub would see no plot at all."""
    nb = nbformat.read(SOLUTIONS / slug / f"{slug}.ipynb", as_version=4)
    missing = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or "plt.show()" not in cell.source:
            continue
        if any("image/png" in output.get("data", {}) for output in cell.outputs):
            continue
        if any(output.get("output_type") == "error" for output in cell.outputs):
            continue  # a failing cell is another test's business
        printed = "".join(output.get("text", "") for output in cell.outputs)
        if "Not run" in printed or "NOT CHECKED HERE" in printed:
            continue  # a GPU-only cell that says it did not run here
        missing.append(index)
    assert not missing, f"{slug}: cells {missing} call plt.show() but have no image output"
