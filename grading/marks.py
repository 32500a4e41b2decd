"""A submission's grading marks (nbgrader's cell metadata) put back as the course has them, before nbgrader reads them.

A learner can edit a cell's nbgrader metadata in JupyterLab: turn a check cell's `grade` off, mark a solution cell as
graded with points, unlock a cell. nbgrader's OverwriteCells then recomputes the cell's checksum from the edited marks,
finds it differs from the gradebook's, and stops the whole notebook ("Inconsistent checksums"): every exercise lost.
The marks are the course's, not the learner's: grading.autograde.RestoreGradingMarks, a sanitizing preprocessor that runs before
OverwriteCells (nbgrader_config.py), writes them back from the gradebook for every cell whose grade id the lesson
has, and drops the marks of a cell whose grade id it does not have (as scripts/grade.py does before nbgrader runs).
`changed_marks` says, for the notes, which cells a submission had marked otherwise.
"""

from __future__ import annotations

from grading.i18n import _

#: the marks that decide how a cell is graded (nbgrader's checksum covers the first three and the grade id)
MARKS = ("grade", "solution", "locked", "task", "points")


def course_marks(gradebook, notebook: str, assignment: str) -> dict[str, dict]:
    """{grade id: the nbgrader metadata the course gives that cell} for one notebook of a lesson."""
    source = gradebook.find_notebook(notebook, assignment)
    graded = {cell.name: cell.max_score for cell in source.grade_cells}
    solutions = {cell.name for cell in source.solution_cells}
    tasks = {cell.name: cell.max_score for cell in source.task_cells}
    marks = {}
    for cell in source.source_cells:
        meta = {
            "grade_id": cell.name,
            "grade": cell.name in graded,
            "solution": cell.name in solutions,
            "locked": bool(cell.locked),
            "schema_version": 3,
            "checksum": cell.checksum,
        }
        if cell.name in tasks:
            meta["task"] = True
            meta["points"] = tasks[cell.name]
        if cell.name in graded:
            meta["points"] = graded[cell.name]
        marks[cell.name] = meta
    return marks


def changed_marks(submitted, source) -> list[str]:
    """'grade_id (grade, points)' for every cell of the `submitted` notebook whose marks differ from the cell of the
    same grade id in the lesson's `source` notebook (nbformat notebooks)."""
    wanted = {}
    for cell in source.cells:
        meta = cell.get("metadata", {}).get("nbgrader") or {}
        if meta.get("grade_id"):
            wanted[meta["grade_id"]] = meta
    changed = []
    for cell in submitted.cells:
        meta = cell.get("metadata", {}).get("nbgrader") or {}
        gid = meta.get("grade_id")
        if gid not in wanted:
            continue
        which = [m for m in MARKS if m != "points" and _mark(meta, m) != _mark(wanted[gid], m)]
        if _graded(meta) and _graded(wanted[gid]) and _mark(meta, "points") != _mark(wanted[gid], "points"):
            which.append("points")  # (a cell graded on one side only differs in `grade` already)
        if which:
            changed.append(f"{gid} ({', '.join(which)})")
    return changed


def _graded(meta: dict) -> bool:
    return bool(meta.get("grade") or meta.get("task"))


def _mark(meta: dict, name: str):
    value = meta.get(name)
    return float(value or 0) if name == "points" else bool(value)


def marks_note(changed: list[str]) -> str:
    return _("grading marks changed in the notebook, graded as the course's cells: {cells}").format(
        cells="; ".join(changed)
    )
