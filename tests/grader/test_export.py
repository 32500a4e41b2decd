"""grading/export.py and the ids grade.py gives students: the per-student table an LMS imports, due dates, the
grades entered in formgrader brought back into grade.py's CSV."""

from __future__ import annotations

import pytest

from grading.batch import student_ids
from grading.export import apply_manual_grades, cell_text, parse_due_dates, student_table

CELLS = {
    "01-a": [("e1_x_check", 4.0, False), ("w1_why", 2.0, True)],
    "02-b": [("e1_y_check", 6.0, False), ("w1_how", 2.0, True)],
}
MANUAL = {lesson: [g for g, _p, m in cells if m] for lesson, cells in CELLS.items()}


def _row(student, lesson, auto, written, **extra):
    (auto_id, _p, _m), (written_id, points, _m2) = CELLS[lesson]
    return {
        "student": student,
        "lesson": lesson,
        auto_id: f"{auto:g}",
        written_id: "" if written is None else f"{written:g}",
        "total": f"{auto + (written or 0):g}",
        "max": f"{sum(p for _g, p, _m in CELLS[lesson]):g}",
        "needs_manual": f"{points if written is None else 0:g}",
        "handed_in": extra.get("handed_in", ""),
        "seconds_late": extra.get("seconds_late", ""),
        "late_penalty": "0",
        "flags": extra.get("flags", ""),
        "notes": f"{written_id}: needs manual grading" if written is None else "",
    }


def test_student_ids_keep_plain_names_and_never_collide():
    names = ["alice", "bob.smith", "s0002-x_y", "x y", "éva", ".hidden", "=cmd"]
    ids = student_ids(names)
    assert ids["alice"] == "alice" and ids["bob.smith"] == "bob.smith" and ids["s0002-x_y"] == "s0002-x_y"
    assert ids["x y"] == "s0003-x_y" and ids["éva"] == "s0004-va" and ids[".hidden"] == "s0005-hidden"
    assert ids["=cmd"] == "s0006-cmd"
    assert len(set(ids.values())) == len(names)
    clash = student_ids(["x y", "s0000-x_y"])  # a folder named like another's generated id
    assert clash["s0000-x_y"] == "s0000-x_y" and clash["x y"] != "s0000-x_y"


def test_one_row_per_student_a_column_per_lesson_and_written_answer():
    rows = [
        _row("ada", "01-a", 4, 2, handed_in="2026-12-01T10:00:00+00:00", seconds_late="0"),
        _row(
            "ada", "02-b", 6, None, handed_in="2026-12-09T12:00:00+00:00", seconds_late="9000", flags="e1: x"
        ),
        _row("=HYPERLINK(1)", "01-a", 0, 0),
    ]
    table, columns = student_table(rows, MANUAL)
    assert columns == [
        "student",
        "01-a",
        "01-a/w1_why",
        "01-a handed in",
        "01-a late (h)",
        "02-b",
        "02-b/w1_how",
        "02-b handed in",
        "02-b late (h)",
        "lessons",
        "total",
        "max",
        "needs_manual",
        "flagged_lessons",
    ]
    ada = next(r for r in table if r["student"] == "ada")
    assert ada["01-a"] == "6" and ada["01-a/w1_why"] == "2" and ada["01-a late (h)"] == "0.00"
    assert ada["02-b"] == "6" and ada["02-b/w1_how"] == "" and ada["02-b late (h)"] == "2.50"
    assert ada["02-b handed in"] == "2026-12-09T12:00:00+00:00"
    assert (ada["lessons"], ada["total"], ada["max"], ada["needs_manual"], ada["flagged_lessons"]) == (
        2,
        "12",
        "14",
        "2",
        "02-b",
    )
    assert [r["student"] for r in table] == ["'=HYPERLINK(1)", "ada"]  # never a formula in a spreadsheet
    assert cell_text("-1+2") == "'-1+2" and cell_text("bob") == "bob"


def test_grades_entered_in_formgrader_fill_the_written_answers_and_the_totals():
    rows = [_row("ada", "01-a", 4, None), _row("bea", "01-a", 0, None), _row("ada", "02-b", 3, None)]
    rows[2]["notes"] = "w1_how: 수동 채점 필요; e1_y_check: CheckFailed"
    changed = apply_manual_grades(
        rows, {("ada", "01-a"): {"w1_why": 1.5}, ("ada", "02-b"): {"w1_how": 2.0, "e1_y_check": 5.0}}, CELLS
    )
    assert changed == 3
    assert (rows[0]["w1_why"], rows[0]["total"], rows[0]["needs_manual"], rows[0]["notes"]) == (
        "1.5",
        "5.5",
        "0",
        "",
    )
    assert (rows[1]["w1_why"], rows[1]["total"], rows[1]["needs_manual"]) == ("", "0", "2")  # not graded yet
    assert (rows[2]["e1_y_check"], rows[2]["total"], rows[2]["notes"]) == (
        "5",
        "7",
        "e1_y_check: CheckFailed",
    )


def test_due_dates_are_read_as_nbgrader_reads_them(tmp_path):
    due = tmp_path / "due.csv"
    due.write_text("name,duedate\n01-a,2026-12-01 23:59:00 UTC\n02-b,2026-12-08T23:59:00+09:00\n03-c,\n")
    assert parse_due_dates(due) == {"01-a": "2026-12-01T23:59:00", "02-b": "2026-12-08T14:59:00"}
    due.write_text("name,duedate\n01-a,next tuesday\n")
    with pytest.raises(ValueError, match="line 2: the due date 'next tuesday' does not read"):
        parse_due_dates(due)
    due.write_text("lesson,date\n01-a,2026-12-01\n")
    with pytest.raises(ValueError, match="the header must name the columns name and duedate"):
        parse_due_dates(due)
