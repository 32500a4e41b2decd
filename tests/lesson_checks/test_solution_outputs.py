"""The committed solution notebooks are executed with their plots (they are committed executed)."""

import ast
import re

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


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
TQDM_CALL = re.compile(r"\btqdm\(")


@pytest.mark.parametrize("slug", lesson_slugs())
def test_progress_bars_are_committed_as_their_last_line(slug):
    """A progress bar (tqdm.auto: a widget in a kernel) is committed as the last line tqdm would leave in a terminal,
    on stderr (scripts/execute_solutions.py: settle_progress_bars): no widget, no widget state in the metadata (a
    widget's state is noise in the file, and without it JupyterLab cannot draw the widget)."""
    nb = nbformat.read(SOLUTIONS / slug / f"{slug}.ipynb", as_version=4)
    has_state = "widgets" in nb.metadata
    assert not has_state, f"{slug}: widget state in the notebook's metadata"
    widgets = [
        i for i, c in enumerate(nb.cells) for o in c.get("outputs", []) if WIDGET_VIEW in o.get("data", {})
    ]
    assert not widgets, f"{slug}: cells {widgets} show a widget"


@pytest.mark.parametrize("slug", lesson_slugs())
def test_every_progress_bar_says_what_it_counts(slug):
    """Every bar is tqdm.auto's (a widget in JupyterLab, stderr elsewhere: never a line of a printed table) and has a
    description (desc=...), the prose the Korean edition translates."""
    nb = nbformat.read(SOLUTIONS / slug / f"{slug}.ipynb", as_version=4)
    sources = [c.source for c in nb.cells if c.cell_type == "code"]
    for source in sources:
        for line in source.splitlines():
            if "import" in line and "tqdm" in line:
                assert line.strip() == "from tqdm.auto import tqdm", f"{slug}: {line.strip()}"
    calls = [
        node
        for source in sources
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "tqdm"
    ]
    assert len(calls) == sum(len(TQDM_CALL.findall(source)) for source in sources)
    for call in calls:
        assert "desc" in {k.arg for k in call.keywords}, f"{slug}: a bar without desc=: {ast.unparse(call)}"


def _bar_widgets(left: str, value: float, total: float | None, right: str, style: str = "success") -> dict:
    """The widget state tqdm.notebook leaves for one bar (an HBox of an HTML, a FloatProgress and an HTML), as nbclient
    stores it, with tqdm's figure spaces and HTML escapes."""
    pad = "\u2007"
    models = {
        "box": ("HBoxModel", {"children": ["IPY_MODEL_left", "IPY_MODEL_bar", "IPY_MODEL_right"]}),
        "left": ("HTMLModel", {"value": left.replace(" ", pad)}),
        "bar": ("FloatProgressModel", {"value": value, "max": total or 1, "bar_style": style}),
        "right": ("HTMLModel", {"value": right.replace(" ", pad).replace("<", "&lt;")}),
        "layout": ("LayoutModel", {}),
    }
    state = {key: {"model_name": name, "state": values} for key, (name, values) in models.items()}
    return {"application/vnd.jupyter.widget-state+json": {"state": state, "version_major": 2}}


def test_settle_progress_bars_writes_a_bar_as_tqdm_ends_it_in_a_terminal():
    from coursetools.execute_solutions import settle_progress_bars

    view = {"model_id": "box", "version_major": 2, "version_minor": 0}
    widget = nbformat.v4.new_output(
        "display_data", data={WIDGET_VIEW: view, "text/plain": "steps:   0%|          | 0/40"}
    )
    printed = nbformat.v4.new_output("stream", name="stdout", text="done\n")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("...", outputs=[widget, printed])])
    nb.metadata.widgets = _bar_widgets("steps (fp32): 100%", 40, 40, " 40/40 [00:12<00:00,  3.2it/s]")
    assert settle_progress_bars(nb) == 1
    assert "widgets" not in nb.metadata
    bar, done = nb.cells[0].outputs
    assert (bar.output_type, bar.name) == ("stream", "stderr")
    assert bar.text == "steps (fp32): 100%|██████████| 40/40 [00:12<00:00,  3.2it/s]\n"
    assert done == printed

    nb.cells[0].outputs = [widget]
    nb.metadata.widgets = _bar_widgets(
        "sizes tried: ", 1, None, " 7/? [00:03<00:00,  2.1it/s]"
    )  # closed: success
    settle_progress_bars(nb)
    assert nb.cells[0].outputs[0].text == "sizes tried: 7/? [00:03<00:00,  2.1it/s]\n"  # no total: no bar
