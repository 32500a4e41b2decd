"""The grader's own messages in the language of the lesson graded: the notes of a row of the CSV (why a notebook
was refused, a cell stopped, a check cell put back, code to review, an answer to grade by hand) and the judge's
verdicts that are not a check's (a record missing, forged or malformed). A Korean submission is graded against the
Korean edition, and its row and its autograded notebook speak Korean.

The messages are a gettext catalogue, `translations/<language>/grading.po` (`python scripts/translations.py extract
grading`), compiled by scripts/build_lessons.py into `grading/locale/` (memlab/i18n.py says how). A worker grades
one notebook and sets its language once (grading/worker.py); grade.py's own threads, which write notes for many
rows, name the row's language: `_(message, language)`. A message in a table is marked `N_(...)` where it is written
and translated with `_` where it is used.
"""

from __future__ import annotations

from pathlib import Path

from memlab.i18n import N_, translator

_ = translator("grading", Path(__file__).resolve().parent / "locale")
__all__ = ["N_", "_"]
