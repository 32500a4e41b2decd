"""scripts/ci_profile.py joins .ci/run's step times and pytest's JUnit reports into one profile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from coursetools import ci_profile

ROOT = Path(__file__).resolve().parents[2]

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.kit.test_kit" name="test_a" time="0.50"/>
<testcase classname="tests.kit.test_kit" name="test_b" time="1.50"><skipped message="no gpu"/></testcase>
<testcase classname="tests.grader.test_grading_roundtrip" name="test_solution_gets_full_points[01]" time="300.25"/>
<testcase classname="solutions.01-memory-anatomy.01-memory-anatomy.ipynb" name="Cell 3" time="2.0">
<failure message="boom"/></testcase>
</testsuite></testsuites>
"""


def test_the_profile_has_every_step_and_each_report_s_slowest_items(tmp_path):
    (tmp_path / "steps.tsv").write_text(
        "install requirements.txt (torch pinned)\t120\t60\npytest (the README's)\t600\t1140\n"
    )
    (tmp_path / "junit-pinned.xml").write_text(JUNIT)
    data = ci_profile.profile(tmp_path)
    assert data["total_seconds"] == 720 and data["busy_core_seconds"] == 1200
    assert [s["step"] for s in data["steps"]] == [
        "install requirements.txt (torch pinned)",
        "pytest (the README's)",
    ]
    assert data["steps"][1]["share"] == round(600 / 720, 3)
    cpus = os.cpu_count()
    assert data["steps"][1]["busy_core_seconds"] == 1140
    assert data["steps"][1]["cores_busy_fraction"] == round(1140 / (600 * cpus), 2)
    report = data["pytest"]["pinned"]
    assert report["items"] == 4 and report["outcomes"] == {"failed": 1, "passed": 2, "skipped": 1}
    assert report["slowest_items"][0] == {
        "file": "tests/grader/test_grading_roundtrip.py",
        "name": "test_solution_gets_full_points[01]",
        "seconds": 300.25,
    }
    assert report["seconds_by_file"]["tests/kit/test_kit.py"] == 2.0
    assert report["seconds_by_file"]["solutions/01-memory-anatomy/01-memory-anatomy.ipynb"] == 2.0


def test_the_command_writes_the_json_and_refuses_a_folder_without_steps(tmp_path):
    (tmp_path / "steps.tsv").write_text("ruff\t3\n")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "ci_profile.py"), str(tmp_path)], text=True)
    assert proc.returncode == 0
    written = json.loads((tmp_path / "ci_profile.json").read_text())
    assert written["steps"] == [{"step": "ruff", "seconds": 3, "share": 1.0}]  # a line without CPU time
    assert "busy_core_seconds" not in written
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "ci_profile.py"), str(empty)], capture_output=True, text=True
    )
    assert proc.returncode == 1 and "run .ci/run first" in proc.stderr
