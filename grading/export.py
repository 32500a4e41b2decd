"""A class's grades as a learning-management system imports them, whichever way the class was graded.

- `student_table`: one row per student (the student's own folder or nbgrader name as the id), a column per lesson
  (its points after any late penalty), per written answer, for when each lesson was handed in and how late, then
  the totals. grade.py writes it next to its CSV (`grades.csv` -> `grades-students.csv`).
- `add_manual_grades`: the grades entered in formgrader (written answers, and any autograded score a grader
  changed there), read from the gradebooks of the courses `grade.py --keep DIR` kept, written into grade.py's CSV
  and its per-student table (`grade.py --manual-grades DIR --out grades.csv`).
- `ClassExport`: the same table from an nbgrader course's own gradebook, for a class graded with nbgrader's
  collect and autograde (`nbgrader export`, configured in nbgrader_config.py). It also lists, from the exchange, the
  submissions that were not the one graded (a late resubmission collected over an on-time one, or the reverse).

Late penalties are nbgrader's: its `AssignLatePenalties` runs in the course's autograde with the course's
`LateSubmissionPlugin` (nbgrader_config.py says how to choose one), and each lesson's due date comes from the
gradebook (formgrader, `nbgrader db assignment import`, or `grade.py --due-dates`, which reads the same file).
"""

from __future__ import annotations

import csv
import datetime
import json
import re
from collections.abc import Iterable
from pathlib import Path

from grading.course import graded_cells
from grading.i18n import _
from grading.submission import escaped

TOTALS = ["lessons", "total", "max", "needs_manual", "flagged_lessons"]
#: a spreadsheet runs a cell that starts with one of these as a formula (CSV injection): such text gets a leading '
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def cell_text(text: str, limit: int = 200) -> str:
    """Text for a cell a spreadsheet or an LMS reads: escaped, bounded, never a formula."""
    text = escaped(text, limit)
    return "'" + text if text.startswith(FORMULA_START) else text


def utc_text(stamp: datetime.datetime | None) -> str:
    """A time nbgrader stores (naive, UTC) as grade.py writes it: ISO 8601, microseconds, +00:00."""
    if stamp is None:
        return ""
    return stamp.replace(tzinfo=datetime.timezone.utc).isoformat(timespec="microseconds")


def hours(seconds) -> str:
    return "" if seconds in ("", None) else f"{float(seconds) / 3600:.2f}"


def lesson_columns(lesson: str, manual: list[str], exchange: bool) -> list[str]:
    columns = [lesson, *(f"{lesson}/{gid}" for gid in manual), f"{lesson} handed in", f"{lesson} late (h)"]
    return columns + ([f"{lesson} also handed in"] if exchange else [])


def student_table(
    rows: Iterable[dict], manual: dict[str, list[str]], others: dict[tuple[str, str], str] | None = None
) -> tuple[list[dict], list[str]]:
    """(one row per student, the columns) from rows of grade.py's CSV (student, lesson, each cell's points, total,
    max, needs_manual, handed_in, seconds_late, flags); `manual` is each lesson's written answers' grade ids;
    `others`, the submissions of a (student, lesson) that were not graded, where an exchange says so."""
    rows = list(rows)
    lessons = sorted({r["lesson"] for r in rows})
    columns = ["student"]
    for lesson in lessons:
        columns += lesson_columns(lesson, manual.get(lesson, []), others is not None)
    columns += TOTALS
    students: dict[str, dict] = {}
    for r in rows:
        s = students.setdefault(
            r["student"],
            {"student": cell_text(r["student"]), "lessons": 0, "total": 0.0, "max": 0.0, "needs_manual": 0.0},
        )
        s.setdefault("flagged", [])
        lesson = r["lesson"]
        s["lessons"] += 1
        for key in ("total", "max", "needs_manual"):
            s[key] += float(r.get(key) or 0)
        s[lesson] = r.get("total", "")
        for gid in manual.get(lesson, []):
            s[f"{lesson}/{gid}"] = r.get(gid, "")
        s[f"{lesson} handed in"] = r.get("handed_in", "")
        s[f"{lesson} late (h)"] = hours(r.get("seconds_late"))
        if others is not None:
            s[f"{lesson} also handed in"] = others.get((r["student"], lesson), "")
        if r.get("flags"):
            s["flagged"].append(lesson)
    table = []
    for s in sorted(students.values(), key=lambda s: s["student"]):
        flagged = s.pop("flagged")
        table.append(
            {
                **s,
                **{k: f"{s[k]:g}" for k in ("total", "max", "needs_manual")},
                "flagged_lessons": " ".join(flagged),
            }
        )
    return table, columns


def manual_cells(solutions: Path, lessons: Iterable[str]) -> dict[str, list[str]]:
    """{lesson: the grade ids of its written answers (graded by hand)}, from the lesson's source."""
    return {
        lesson: [gid for gid, _points, manual in graded_cells(solutions / lesson) if manual]
        for lesson in lessons
        if (solutions / lesson).is_dir()
    }


def write_table(path: Path, table: list[dict], columns: list[str]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(table)
    tmp.replace(path)


# ---- grades entered in formgrader, back into grade.py's CSV -------------------------------------------------------


def manual_grades(kept: Path) -> dict[tuple[str, str], dict[str, float]]:
    """{(student folder name, lesson): {grade id: points}} for every score a grader entered in formgrader in the
    courses `grade.py --keep` kept in `kept` (course/, and course-ko/ for the Korean edition)."""
    from nbgrader.api import Gradebook

    found: dict[tuple[str, str], dict[str, float]] = {}
    for course in sorted(p for p in kept.glob("course*") if (p / "gradebook.db").is_file()):
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
            for assignment in gradebook.assignments:
                for submission in assignment.submissions:
                    name = (
                        submission.student.first_name or submission.student.id
                    )  # grade.py: the folder's name
                    for notebook in submission.notebooks:
                        for grade in notebook.grades:
                            if grade.manual_score is not None:
                                found.setdefault((name, assignment.name), {})[grade.name] = float(
                                    grade.manual_score
                                )
    return found


def apply_manual_grades(
    rows: list[dict], grades: dict[tuple[str, str], dict[str, float]], cells: dict[str, list]
) -> int:
    """Write `grades` into grade.py's `rows` (totals and the points still to grade by hand follow; the note that a
    cell needs manual grading goes); the number of cells changed. `cells`: each lesson's (grade id, points, manual)."""
    changed = 0
    for row in rows:
        entered = grades.get((row["student"], row["lesson"]), {})
        lesson_cells = cells.get(row["lesson"], [])
        for gid, score in entered.items():
            if gid in row and row[gid] != f"{score:g}":
                row[gid] = f"{score:g}"
                changed += 1
        earned = sum(float(row[g]) for g, _p, _m in lesson_cells if row.get(g, "") != "")
        penalty = float(row.get("late_penalty") or 0)
        row["total"] = f"{max(0.0, earned - penalty):g}"
        row["needs_manual"] = f"{sum(p for g, p, m in lesson_cells if m and row.get(g, '') == ''):g}"
        graded = {g for g, _p, m in lesson_cells if m and row.get(g, "") != ""}
        if graded and row.get("notes"):
            stale = {
                _("{grade_id}: needs manual grading", language).format(grade_id=g)
                for g in graded
                for language in ("en", "ko")
            }
            row["notes"] = "; ".join(n for n in row["notes"].split("; ") if n not in stale)
    return changed


# ---- nbgrader export ----------------------------------------------------------------------------------------------


def exchange_submissions(inbound: Path) -> dict[tuple[str, str], list[datetime.datetime]]:
    """{(nbgrader student id, assignment): [the time of every submission]} in an nbgrader exchange's inbound folder
    (<exchange>/<course_id>/inbound/<student>+<assignment>+<time>+<random>)."""
    from nbgrader.utils import parse_utc

    found: dict[tuple[str, str], list[datetime.datetime]] = {}
    if not inbound.is_dir():
        return found
    for entry in inbound.iterdir():
        parts = entry.name.split("+")
        if len(parts) < 3:
            continue
        try:
            stamp = parse_utc(parts[2])
        except (ValueError, OverflowError):
            continue
        found.setdefault((parts[0], parts[1]), []).append(stamp)
    return found


def gradebook_rows(gradebook, autograded=None) -> tuple[list[dict], dict[str, list]]:
    """grade.py-like rows from an nbgrader gradebook (every student and assignment; one not handed in: its row
    has no points), and each assignment's cells; flags from the autograded notebooks where `autograded(student,
    assignment)` gives their folder."""
    from nbgrader.api import MissingEntry

    from grading.autograde import FINDINGS_KEY

    rows, cells = [], {}
    for assignment in gradebook.assignments:
        cells[assignment.name] = [
            (
                c.name,
                float(c.max_score),
                c.name in {s.name for s in [*notebook.solution_cells, *notebook.task_cells]},
            )
            for notebook in assignment.notebooks
            for c in notebook.grade_cells
        ]
        for student in gradebook.students:
            row = {"student": student.id, "lesson": assignment.name, "max": f"{assignment.max_score:g}"}
            try:
                submission = gradebook.find_submission(assignment.name, student.id)
            except MissingEntry:
                rows.append({**row, "total": "0", "needs_manual": "0"})
                continue
            earned = needs = 0.0
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    if grade.score is None or grade.needs_manual_grade:
                        row[grade.name] = ""
                        needs += float(grade.max_score)
                    else:
                        row[grade.name] = f"{float(grade.score):g}"
                        earned += float(grade.score)
                flags = []
                if autograded is not None:
                    path = Path(autograded(student.id, assignment.name)) / f"{notebook.name}.ipynb"
                    try:
                        flags = (
                            json.loads(path.read_text())["metadata"].get(FINDINGS_KEY, {}).get("flags", [])
                        )
                    except (OSError, ValueError, KeyError, AttributeError):
                        flags = []
                row["flags"] = "; ".join(str(f) for f in flags)
            penalty = float(submission.late_submission_penalty or 0.0)
            late = submission.total_seconds_late if submission.duedate and submission.timestamp else None
            row.update(
                total=f"{max(0.0, earned - penalty):g}",
                needs_manual=f"{needs:g}",
                handed_in=utc_text(submission.timestamp),
                seconds_late="" if late is None else f"{late:g}",
                late_penalty=f"{penalty:g}",
            )
            rows.append(row)
    return rows, cells


def other_submissions(gradebook, exchange: dict) -> dict[tuple[str, str], str]:
    """{(student, assignment): the exchange's submissions other than the one graded, each 'time (on time|late)'}."""
    from nbgrader.api import MissingEntry

    found = {}
    for (student, assignment), stamps in exchange.items():
        try:
            submission = gradebook.find_submission(assignment, student)
        except MissingEntry:
            graded, due = None, None
        else:
            graded, due = submission.timestamp, submission.duedate
        rest = sorted(s for s in stamps if graded is None or abs((s - graded).total_seconds()) >= 1)
        if rest:
            marks = []
            for stamp in rest:
                state = "" if due is None else (_("on time") if stamp <= due else _("late"))
                marks.append(utc_text(stamp) + (f" ({state})" if state else ""))
            found[(student, assignment)] = ", ".join(marks)
    return found


def parse_due_dates(path: Path) -> dict[str, str]:
    """{lesson: due date as nbgrader stores it} from a CSV with the columns `name` and `duedate`, the file
    `nbgrader db assignment import` reads; ValueError naming the line where it does not read."""
    from nbgrader.utils import parse_utc

    due = {}
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if not reader.fieldnames or not {"name", "duedate"} <= set(reader.fieldnames):
            raise ValueError(f"{path}: the header must name the columns name and duedate")
        for line, row in enumerate(reader, start=2):
            name, text = (row.get("name") or "").strip(), (row.get("duedate") or "").strip()
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
                raise ValueError(f"{path}, line {line}: {name!r} is not a lesson's name")
            try:
                due[name] = parse_utc(text).isoformat() if text else ""
            except (ValueError, OverflowError) as error:
                raise ValueError(
                    f"{path}, line {line}: the due date {text!r} does not read ({error})"
                ) from None
    return {k: v for k, v in due.items() if v}
