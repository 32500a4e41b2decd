"""scripts/execute_solutions.py --check, CI's drift check: it runs notebooks in memory, writes nothing, names the
failing cell with its error, and exits 1 when any notebook fails."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "execute_solutions.py"


def _notebook(folder: Path, name: str, sources: list[tuple[str, dict]]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(source, metadata=metadata) for source, metadata in sources]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_check_reports_the_failing_cell_and_writes_nothing(tmp_path):
    good = _notebook(
        tmp_path / "good",
        "good",
        [
            ("open('written.txt', 'w').write('x')", {}),  # a notebook that writes into its folder
            ("raise ValueError('allowed')", {"tags": ["raises-exception"]}),
        ],
    )
    bad = _notebook(
        tmp_path / "bad",
        "bad",
        [
            ("x = 1", {}),
            ("# the check\nimport math\nmath.sqrt(-x)", {"nbgrader": {"grade_id": "e1_root_check"}}),
            ("never = 'run'", {}),
        ],
    )
    before = {folder: _digest(folder) for folder in (good.parent, bad.parent)}

    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--check", str(good), str(bad)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )

    assert run.returncode == 1, run.stdout + run.stderr
    out = run.stdout
    assert (
        f"ok     {good}" in out and "kernel: torch " in out
    )  # the kernel is this Python, its versions shown
    assert f"FAILED {bad}" in out
    assert "cell 1 (e1_root_check): # the check" in out
    assert "ValueError: math domain error" in out
    assert "1 of 2 notebooks ran without an error" in out
    assert {folder: _digest(folder) for folder in (good.parent, bad.parent)} == before  # nothing written


def test_check_exits_0_when_every_notebook_runs(tmp_path):
    path = _notebook(tmp_path / "fine", "fine", [("print(1 + 1)", {})])
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--check", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 of 1 notebooks ran without an error" in run.stdout
