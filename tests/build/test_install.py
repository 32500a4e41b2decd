"""The course installs from the course's folder and from any other: its dependencies are declared once, in
pyproject.toml, so `pip install -e PATH` brings them wherever it runs (requirements.txt's `-e .` is read by pip against
the folder pip runs in, not the file's: pypa/pip#8765), and the learner release declares the same ones."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]


def _declared(pyproject: Path) -> list[str]:
    return tomllib.loads(pyproject.read_text())["project"]["dependencies"]


def test_requirements_txt_declares_nothing_of_its_own():
    lines = [line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines()]
    assert [line for line in lines if line] == ["-e ."]
    assert any(d.startswith("torch") for d in _declared(ROOT / "pyproject.toml"))


@pytest.mark.slow
def test_the_course_installs_with_its_dependencies_from_another_folder(tmp_path):
    """What pip would install for `pip install -e PATH` run in an empty folder: the course, requiring every
    dependency pyproject.toml declares (a dry run: nothing is installed)."""
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--quiet", "--report", str(report)]
        + ["-e", str(ROOT)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (course,) = [
        i for i in json.loads(report.read_text())["install"] if i["metadata"]["name"] == "memlab-course"
    ]
    required = {r.split(";")[0].replace(" ", "") for r in course["metadata"].get("requires_dist", [])}
    assert {d.split("#")[0].replace(" ", "") for d in _declared(ROOT / "pyproject.toml")} <= required


def test_the_learner_release_declares_the_same_dependencies(tmp_path):
    from coursetools.release import learner_pyproject

    released = tmp_path / "pyproject.toml"
    released.write_text(learner_pyproject((ROOT / "pyproject.toml").read_text()))
    assert _declared(released) == _declared(ROOT / "pyproject.toml")
