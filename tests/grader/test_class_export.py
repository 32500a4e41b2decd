"""A class graded with nbgrader's own commands: the late-penalty hook nbgrader_config.py documents, and
`nbgrader export` (grading.export_plugin.ClassExport) writing one row per student with when each lesson was handed
in, how late, and the exchange's other submissions of it (a late resubmission never silently replaces an on-time
one: the export shows both)."""

from __future__ import annotations

import csv
import subprocess
import sys

import nbformat
import pytest
from nbgrader_pipeline import FIXTURE_SOLUTIONS, cli_env, copy_course, write_notebook

SLUG = "00-fixture"
DUE = "2026-12-01 12:00:00 UTC"
ON_TIME, LATE = "2026-12-01 11:00:00.000000 UTC", "2026-12-01 14:30:00.000000 UTC"

pytestmark = pytest.mark.slow


def test_a_late_resubmission_its_penalty_and_the_on_time_one_in_the_export(tmp_path):
    course = copy_course(FIXTURE_SOLUTIONS, tmp_path / "course", [SLUG])
    exchange = tmp_path / "exchange"
    with open(course / "nbgrader_config.py", "a", encoding="utf-8") as fh:
        fh.write(
            '\nc.LateSubmissionPlugin.penalty_method = "zero"\n'  # the hook: a late notebook scores 0
            'c.CourseDirectory.course_id = "memlab"\n'
            f"c.Exchange.root = {str(exchange)!r}\n"
        )
    solution = nbformat.read(FIXTURE_SOLUTIONS / SLUG / f"{SLUG}.ipynb", as_version=4)
    for student, stamp in (("alice", LATE), ("bob", ON_TIME)):
        folder = course / "submitted" / student / SLUG
        write_notebook(solution, folder, f"{SLUG}.ipynb")
        (folder / "timestamp.txt").write_text(stamp)
    # what nbgrader's exchange holds: alice handed in on time, then again after the due date (collect took the last)
    for student, stamp in (("alice", ON_TIME), ("alice", LATE), ("bob", ON_TIME)):
        (exchange / "memlab" / "inbound" / f"{student}+{SLUG}+{stamp}+x1y2").mkdir(parents=True)
    env = cli_env(tmp_path)
    for step in (
        ["generate_assignment", SLUG, "--force"],
        ["db", "assignment", "add", SLUG, f"--duedate={DUE}"],
        ["autograde", SLUG, "--force"],
        ["export", "--to", str(tmp_path / "class.csv")],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "nbgrader", *step],
            cwd=course,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    with open(tmp_path / "class.csv", newline="", encoding="utf-8") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    alice, bob = rows["alice"], rows["bob"]
    assert float(bob[SLUG]) >= 8 and bob[f"{SLUG} late (h)"] == "0.00" and bob[f"{SLUG} also handed in"] == ""
    assert alice[SLUG] == "0" and alice[f"{SLUG} late (h)"] == "2.50"  # the course's penalty: zero
    assert alice[f"{SLUG} handed in"] == "2026-12-01T14:30:00.000000+00:00"
    assert alice[f"{SLUG} also handed in"] == "2026-12-01T11:00:00.000000+00:00 (on time)"
    assert alice["needs_manual"] == "2" and alice[f"{SLUG}/w1_square_sign"] == ""
