"""Every solution notebook, executed on the GPU at GPU sizes: the same run a learner with a GPU
makes, in learner mode. Each graded cell must pass, and no check may say NOT CHECKED HERE for want of a GPU: on a
GPU machine the GPU-only exercises are checked for real (a missing *package*, e.g. Transformer Engine, is reported
in the results, not failed). The run time, the check lines and the lesson's SUMMARY (where it keeps one) of each
lesson go to results/<gpu-name>.json.

On the device machine (no nbclient / ipykernel there): `python -m coursetools.gpu.gpu_evidence --plan` prints the calls
(the wheelhouse of coursetools/gpu/make_wheelhouse.py carried, these tests run by part).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
from pathlib import Path

import nbformat
import pytest

from autograders.kit import GRADING_ENV
from coursetools.execute_solutions import execute_notebook
from coursetools.gpu.probes import SUMMARY_MARK, SUMMARY_PROBE
from coursetools.gpu.probes import cell_text as _text
from grading.submission import is_test_cell

ROOT = Path(__file__).resolve().parents[2]
SLUGS = sorted(p.parent.name for p in (ROOT / "solutions").glob("*/*.ipynb"))
CELL_TIMEOUT = 600
TE_LESSON = "07-fp8-transformer-engine"
TE_ROW = "te.TransformerLayer step, "  # how lesson 07's §7 names each of its rows in SUMMARY


def te_runs(nb) -> list[str]:
    """The labels of lesson 07's §7 runs (its `RUNS = {label: ...}`), read from the notebook's code."""
    for cell in nb.cells:
        if cell.cell_type != "code" or "RUNS" not in cell.source:
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "RUNS" for t in node.targets):
                return [key.value for key in node.value.keys]
    return []


def missing_te_rows(nb, summary: dict) -> list[str]:
    """The §7 runs with no row in the lesson's SUMMARY: where TE is installed on an FP8 GPU, every one must run."""
    rows = [key for key in summary if key.startswith(TE_ROW)]
    return [
        label for label in te_runs(nb) if not any(row[len(TE_ROW) :].startswith(f"{label}:") for row in rows)
    ]


def transformer_engine_runs_here() -> bool:
    import torch

    return importlib.util.find_spec(
        "transformer_engine"
    ) is not None and torch.cuda.get_device_capability() >= (8, 9)


@pytest.mark.parametrize("slug", SLUGS)
def test_solution_runs_on_the_gpu_and_every_gpu_check_is_checked(slug, tmp_path, monkeypatch, gpu_results):
    folder = tmp_path / slug
    shutil.copytree(ROOT / "solutions" / slug, folder)
    monkeypatch.delenv(GRADING_ENV, raising=False)  # learner mode: a missing package prints, never raises
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", os.environ.get("HF_HUB_OFFLINE", "1"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", os.environ.get("HF_DATASETS_OFFLINE", "1"))
    monkeypatch.setenv("MPLBACKEND", "Agg")

    nb = nbformat.read(folder / f"{slug}.ipynb", as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(SUMMARY_PROBE))
    seconds = execute_notebook(nb, folder, CELL_TIMEOUT)  # raises CellExecutionError on the first error
    probe = nb.cells.pop()
    summary = json.loads(_text(probe).split(SUMMARY_MARK, 1)[1]) if SUMMARY_MARK in _text(probe) else {}

    texts = [_text(cell) for cell in nb.cells if cell.cell_type == "code"]
    lines = [line for text in texts for line in text.splitlines()]
    not_checked = [line for line in lines if "NOT CHECKED HERE" in line]
    gpu_results.setdefault("solutions_on_gpu", {})[slug] = {
        "seconds": round(seconds, 1),
        "checks_passed": [line for line in lines if line.startswith("✓ ")],
        "not_checked_here": not_checked,
        "summary": summary,  # the lesson's SUMMARY (the numbers its last section prints), where it keeps one
    }
    assert not any("CPU only" in text for text in texts), "the kernel did not see the GPU"
    for cell in nb.cells:
        if not is_test_cell(cell):
            continue  # written answers (w*) are graded by hand and print nothing
        text = _text(cell)
        # a library may warn on stderr before the check's verdict (torchao's SyntaxWarning on Python 3.12, memlab's
        # "IMDB not reachable" fallback): the verdict is the line that starts with ✓
        passed = any(line.startswith("✓ ") for line in text.splitlines())
        assert passed or "NOT CHECKED HERE" in text, f"{slug} {cell.metadata.nbgrader['grade_id']}: {text!r}"
    wanting_a_gpu = [line for line in not_checked if "GPU" in line.split("found")[0] or "capability" in line]
    assert not wanting_a_gpu, f"{slug}: GPU checks not run on this GPU: {wanting_a_gpu}"
    if slug == TE_LESSON and transformer_engine_runs_here():
        assert te_runs(nb), "lesson 07 no longer declares its §7 runs (RUNS)"
        missing = missing_te_rows(nb, summary)
        assert not missing, f"Transformer Engine is installed, but §7 printed no row for {missing}"
