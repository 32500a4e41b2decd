"""The course installs from the course's folder and from any other: its dependencies are declared once, in
pyproject.toml, so `pip install -e PATH` brings them wherever it runs (requirements.txt's `-e .` is read by pip against
the folder pip runs in, not the file's: pypa/pip#8765), and the learner release declares the same ones."""

from __future__ import annotations

import json
import shutil
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


#: run in a process that imports the course from a regular install's copy: where grade.py finds the course
FIND_THE_COURSE = """
import sys
from pathlib import Path

from grading.batch import parse_args, plan
from grading.course import course_root

print(course_root())
the_plan = plan(parse_args([sys.argv[1], "--out", sys.argv[2]]), Path(sys.argv[2]))
print(the_plan.solutions, len(the_plan.lessons))
"""


def test_a_regular_install_grades_the_course_of_the_folder_it_runs_in(tmp_path):
    """`pip install .` puts the packages in site-packages, where no lessons are: grade.py then looked for
    site-packages/solutions ("no such lesson") and for its nbgrader_config.py there. It finds the course in the
    working folder, and, where that holds none either, says what to do."""
    site = tmp_path / "site-packages"  # what a regular install holds of the course: its packages alone
    for package in ("grading", "memlab", "autograders"):
        shutil.copytree(ROOT / package, site / package, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "subs" / "s1").mkdir(parents=True)

    def find(cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            # -P: not the working folder on sys.path, so that the packages come from the install even in the course
            [
                sys.executable,
                "-P",
                "-c",
                FIND_THE_COURSE,
                str(tmp_path / "subs"),
                str(tmp_path / "grades.csv"),
            ],
            cwd=cwd,
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "HOME": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=300,
        )

    in_the_course = find(ROOT)
    assert in_the_course.returncode == 0, in_the_course.stderr[-2000:]
    root, solutions = in_the_course.stdout.splitlines()[:2]
    assert Path(root) == ROOT.resolve()
    assert solutions == f"{ROOT.resolve() / 'solutions'} 8"

    elsewhere = find(tmp_path)
    assert elsewhere.returncode == 2
    assert "no course found" in elsewhere.stderr and "run it from the course's folder" in elsewhere.stderr
