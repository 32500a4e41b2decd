"""scripts/grade.py for a class: --jobs gives the same CSV as one at a time, --shard K/N + --merge the same as one
machine, and the CSV is written as grading goes (a grader killed half-way leaves every row graded so far)."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time

import nbformat
import pytest
from nbgrader_pipeline import FIXTURE_SOLUTIONS, SCRIPTS, build_lessons, run_grade, write_notebook

SLUG = "00-fixture"
NOTEBOOK = f"{SLUG}.ipynb"
COMMON = ["--solutions", str(FIXTURE_SOLUTIONS), "--seed", "11", "--timeout", "20"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def class_folder(tmp_path_factory):
    """Five students: solved, blank, one exercise wrong, an unreadable notebook, a name with a space."""
    subs = tmp_path_factory.mktemp("class") / "submissions"
    solution = nbformat.read(FIXTURE_SOLUTIONS / SLUG / NOTEBOOK, as_version=4)
    learner = nbformat.reads(
        build_lessons.render(FIXTURE_SOLUTIONS)[f"{SLUG}/{NOTEBOOK}"].decode(), as_version=4
    )
    partial = nbformat.read(FIXTURE_SOLUTIONS / SLUG / NOTEBOOK, as_version=4)
    for cell in partial.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "e2_add":
            cell.source = cell.source.replace("return a + b", "return a * b")
    write_notebook(solution, subs / "ada" / SLUG, NOTEBOOK)
    write_notebook(learner, subs / "bea" / SLUG, NOTEBOOK)
    write_notebook(partial, subs / "cy" / SLUG, NOTEBOOK)
    (subs / "dan" / SLUG).mkdir(parents=True)
    (subs / "dan" / SLUG / NOTEBOOK).write_text("not a notebook")
    write_notebook(solution, subs / "eve n" / SLUG, NOTEBOOK)
    return subs


def _lines(path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def one_at_a_time(class_folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("jobs1") / "grades.csv"
    proc, rows = run_grade(class_folder, out, *COMMON, "--jobs", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out, rows


def test_the_class_is_graded(one_at_a_time):
    _, rows = one_at_a_time
    totals = {r["student"]: r["total"] for r in rows}
    assert [r["student"] for r in rows] == ["ada", "bea", "cy", "dan", "eve n"]
    assert totals["ada"] == totals["eve n"] and float(totals["ada"]) >= 8
    assert totals["bea"] == "0" and totals["dan"] == "0"
    assert float(totals["cy"]) == float(totals["ada"]) - 4


def test_jobs_gives_the_same_csv(class_folder, one_at_a_time, tmp_path):
    out, _ = one_at_a_time
    proc, _ = run_grade(class_folder, tmp_path / "grades.csv", *COMMON, "--jobs", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert _lines(tmp_path / "grades.csv") == _lines(out)
    assert _lines(tmp_path / "grades-students.csv") == _lines(out.with_name("grades-students.csv"))


def test_shards_merged_give_the_same_csv(class_folder, one_at_a_time, tmp_path):
    out, _ = one_at_a_time
    shards = []
    for k in (1, 2):
        shard = tmp_path / f"shard-{k}.csv"
        proc, rows = run_grade(class_folder, shard, *COMMON, "--shard", f"{k}/2")
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert rows and len(rows) < 5  # each shard grades part of the class
        shards.append(shard)
    merged = tmp_path / "grades.csv"
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "grade.py"),
            "--merge",
            *map(str, shards),
            "--out",
            str(merged),
            *COMMON[:2],
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert _lines(merged) == _lines(out)
    assert _lines(tmp_path / "grades-students.csv") == _lines(out.with_name("grades-students.csv"))


def test_merging_the_same_shard_twice_is_refused(one_at_a_time, tmp_path):
    out, _ = one_at_a_time
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "grade.py"),
            "--merge",
            str(out),
            str(out),
            "--out",
            str(tmp_path / "m.csv"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "is in both" in proc.stderr
    assert not (tmp_path / "m.csv").exists()


def test_rows_are_written_as_they_are_graded(class_folder, tmp_path):
    """Kill the grader after its first graded row: the CSV keeps the header and that row."""
    out = tmp_path / "grades.csv"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "grade.py"), str(class_folder), "--out", str(out), *COMMON],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and not (out.exists() and len(_lines(out)) >= 2):
            time.sleep(0.2)
    finally:
        import os

        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    with open(out, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and rows[0]["student"] == "ada" and rows[0]["total"] != ""


# ---- the same work handed in by different students (grading.batch.flag_copies) -------------------------------------


def _results(*students):
    """{(student, lesson): (task, result)} for (name, submitted_at, signature) triples."""
    from grading.settings import Settings
    from grading.types import Result, Task

    out = {}
    for name, submitted, vector in students:
        task = Task(name, name, "08-x", "", "", "", Settings(), submitted_at=submitted)
        out[(name, "08-x")] = (task, Result(signatures={"e3_check": vector}))
    return out


ONE_RUN = [1.0, -2.0, 0.5] * 10
NUDGED = [ONE_RUN[0] * (1 + 1e-7), *ONE_RUN[1:]]  # one value moved in its last digits
ANOTHER_RUN = [0.9, -2.2, 0.4] * 10


def test_the_first_to_hand_in_is_not_blamed_for_those_who_copied_it():
    from grading.batch import flag_copies

    results = _results(
        ("ada", "2026-11-20T10:00:00+00:00", ONE_RUN),
        ("bo", "2026-11-21T09:00:00+00:00", NUDGED),
        ("cy", "2026-11-20T12:00:00+00:00", ANOTHER_RUN),
    )
    flag_copies(results)
    ada, bo, cy = (results[(s, "08-x")][1] for s in ("ada", "bo", "cy"))
    assert ada.flags == [] and ada.notes == [
        "e3_check: handed in first (2026-11-20T10:00:00+00:00); the same work was handed in after it by bo"
    ]
    assert bo.flags == [
        "e3_check: the same work as ada's, handed in earlier (2026-11-20T10:00:00+00:00; this one "
        "2026-11-21T09:00:00+00:00)"
    ]
    assert cy.flags == [] and cy.notes == []


def test_without_submission_times_every_one_handing_in_the_same_work_is_flagged():
    from grading.batch import flag_copies

    results = _results(("ada", "", ONE_RUN), ("bo", "2026-11-21T09:00:00+00:00", ONE_RUN))
    flag_copies(results)
    for student, other in (("ada", "bo"), ("bo", "ada")):
        (flag,) = results[(student, "08-x")][1].flags
        assert flag.startswith(f"e3_check: the same work as {other} (what it learned, within 0.001")
        assert "no submission time tells who handed it in first" in flag


def test_a_submission_time_is_read_from_nbgrader_s_timestamp(tmp_path):
    from grading.batch import submission_time

    (tmp_path / "timestamp.txt").write_text("2026-11-28 10:00:00.123456 UTC\n")
    assert submission_time(tmp_path) == "2026-11-28T10:00:00.123456+00:00"
    (tmp_path / "timestamp.txt").unlink()
    (tmp_path / "timestamp.txt").symlink_to("/etc/hostname")
    assert submission_time(tmp_path) == ""
    assert submission_time(tmp_path / "missing") == ""


def _ends_before_its_log(task_path: str, log_path: str) -> None:
    os._exit(1)  # as a worker whose imports fail: it never opens its log


def test_a_worker_that_ends_before_its_log_is_a_row_that_says_so(tmp_path, monkeypatch):
    """A worker that dies before it writes anything (an import that failed) is a grader-error row, not a crash of
    the whole run with FileNotFoundError on its missing worker.log and an empty CSV."""
    import multiprocessing

    import grading.worker
    from grading import batch
    from grading.settings import Settings
    from grading.types import Task

    monkeypatch.setattr(grading.worker, "forked", _ends_before_its_log)
    task = Task("ada", "s0000-ada", "00-fixture", "", "", str(tmp_path), Settings())
    result = batch.run_worker(task, deadline=60, server=multiprocessing.get_context("fork"))
    assert result.grader_error
    assert result.notes == [
        "the grader's worker ended without a result (exit 1): no worker.log: it ended before grading "
        "(its error is printed above)"
    ]
