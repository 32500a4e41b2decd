"""`nbgrader export` for this course (nbgrader_config.py: `ExportApp.plugin_class`): the per-student table of
grading/export.py, from the course's own gradebook. A module of its own because it imports nbgrader, which
grade.py's driver does not.
"""

from __future__ import annotations

from pathlib import Path

from nbgrader.coursedir import CourseDirectory
from nbgrader.plugins import ExportPlugin

from grading.export import exchange_submissions, gradebook_rows, other_submissions, student_table, write_table


class ClassExport(ExportPlugin):
    """One row per student: a column per lesson, per written answer, for when it was handed in, how late, and the
    submissions in the exchange other than the one graded; to `--to` (default grades-students.csv)."""

    def export(self, gradebook) -> None:
        coursedir = CourseDirectory(config=self.config)
        rows, cells = gradebook_rows(
            gradebook,
            lambda student, assignment: coursedir.format_path(
                coursedir.autograded_directory, student, assignment
            ),
        )
        if self.assignment:
            rows = [r for r in rows if r["lesson"] in self.assignment]
        if self.student:
            rows = [r for r in rows if r["student"] in self.student]
        manual = {a: [g for g, _p, m in c if m] for a, c in cells.items()}
        root = self.config.Exchange.get("root", "/srv/nbgrader/exchange")
        exchange = (
            exchange_submissions(Path(root) / coursedir.course_id / "inbound") if coursedir.course_id else {}
        )
        table, columns = student_table(rows, manual, other_submissions(gradebook, exchange))
        dest = Path(self.to or "grades-students.csv")
        write_table(dest, table, columns)
        self.log.info("wrote %s: %d students", dest, len(table))
