#!/usr/bin/env python
"""Grade a folder of submissions with nbgrader and write one CSV: the instructor's entry point.

    python scripts/grade.py SUBMISSIONS_DIR --out grades.csv [--lessons 01-memory-anatomy ...] [--timeout SECONDS]

SUBMISSIONS_DIR holds one folder per student: SUBMISSIONS_DIR/<student>/<lesson-slug>/<lesson-slug>.ipynb (plus
whatever else the student saved next to it). Nothing under SUBMISSIONS_DIR or in this repository is written: the
work happens in a fresh temporary nbgrader course directory (kept with --keep DIR), with nbgrader_config.py:

1. the lessons' solutions/ folders are copied there and `generate_assignment` records every graded cell and its
   points in a new gradebook;
2. each submission is copied to submitted/<student>/<lesson>/ and `autograde`d with COURSE_GRADING=strict in the
   kernel's environment. nbgrader puts the locked and graded cells back as they are in the source (a learner who
   edited or emptied a test cell is graded by the original), does not copy a learner-made autograders/ or memlab/
   (CourseDirectory.ignore), and gives each cell --timeout seconds: a cell that runs longer is interrupted and loses
   its exercise, the rest of the notebook still runs. A check that needs hardware this machine lacks raises
   NotGradedHere, so that exercise scores 0 and the notes say why;
3. the scores are read from the gradebook: one CSV row per (student, lesson) with the points of every graded cell
   (a column per grade_id), total, max, and notes (the first line of the error of each cell that lost points; a
   missing notebook is a row of zeros with a note).

It exits 0 whatever the students scored; non-zero only when the course itself could not be prepared.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_lessons import ROOT, lesson_dirs, load_config  # noqa: E402

from autograders.kit import GRADING_ENV  # noqa: E402

STRICT = {GRADING_ENV: "strict"}  # autograders.kit: a missing GPU/package raises NotGradedHere
NOTE_CHARS = 200
EXCEPTION_LINE = re.compile(
    r"^\s*[\w.]*(Error|Exception|Interrupt|Exit)\b.*"
)  # "nbclient...DeadKernelError: Kernel died"


class CourseError(RuntimeError):
    """The course itself (not a submission) could not be prepared for grading."""


def put_alembic_on_path() -> None:
    """nbgrader shells out to the `alembic` command when it creates a gradebook; without an activated venv
    (`.venv/bin/python scripts/grade.py`) that command is not on PATH, so put this interpreter's bin folder first."""
    bindir = os.path.dirname(sys.executable)
    if shutil.which("alembic") is None and os.path.exists(os.path.join(bindir, "alembic")):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


def graded_cells(lesson: Path) -> list[tuple[str, float]]:
    """(grade_id, points) of every graded cell of a lesson's notebooks, in notebook order."""
    import nbformat

    cells = []
    for path in sorted(lesson.glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("grade"):
                cells.append((meta["grade_id"], float(meta.get("points", 0))))
    return cells


def failure_notes(notebook: Path, lost: set[str]) -> list[str]:
    """'grade_id: Error: first line' for each cell of `lost` in an autograded notebook."""
    import nbformat

    notes = []
    for cell in nbformat.read(notebook, as_version=4).cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id not in lost:
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if not errors:
            notes.append(
                f"{grade_id}: partial credit" if cell.cell_type == "code" else f"{grade_id}: not graded"
            )
            continue
        texts = []  # every distinct error, in order (after a timeout: KeyboardInterrupt, then CellTimeoutError)
        for error in errors:
            first_line = ((error.get("evalue") or "").strip().splitlines() or [""])[0]
            text = f"{error.get('ename', 'Error')}: {first_line}".rstrip(": ")
            if text not in texts:
                texts.append(text)
        notes.append(f"{grade_id}: " + " / ".join(texts)[:NOTE_CHARS])
    return notes


def autograde_error(result: dict) -> str:
    """The exception behind a failed nbgrader run (its own NbGraderException only says "see the log")."""
    lines = f"{result.get('log', '')}\n{result.get('error', '')}".splitlines()
    causes = [m.group(0).strip() for line in lines if (m := EXCEPTION_LINE.match(line))]
    causes = [c for c in causes if "NbGraderException" not in c]
    return causes[-1] if causes else "see nbgrader's log (grade.py --keep DIR keeps it)"


def missing_note(folder: Path, slug: str) -> str:
    if not folder.is_dir():
        return f"missing: no {slug}/ folder"
    found = sorted(p.name for p in folder.glob("*.ipynb"))
    return f"missing: no {slug}/{slug}.ipynb" + (f" (found {', '.join(found)})" if found else "")


def grade(course: Path, solutions: Path, submissions: Path, students: list[str], lessons: list[str], timeout):
    """Grade every (student, lesson) in the nbgrader course directory `course`: (one dict per row, grade_ids)."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    put_alembic_on_path()
    # nbgrader 0.9.6 + SQLAlchemy 2 warn "Object of type <SubmittedAssignment> not in session" on every autograde
    warnings.filterwarnings("ignore", message=".* not in session", module="nbgrader")
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    for slug in lessons:
        ignore = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")
        shutil.copytree(solutions / slug, course / "solutions" / slug, ignore=ignore)
    config = load_config(course)
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.db_url = "sqlite:///" + str(course / "gradebook.db")
    if timeout is not None:
        config.Execute.timeout = timeout
    config.NbGraderAPI.log_level = "WARN"
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)

    rows, grade_ids = [], []
    for slug in lessons:
        result = api.generate_assignment(slug, force=True, create=True)
        if not result["success"]:
            raise CourseError(
                f"nbgrader generate_assignment {slug} failed:\n{result.get('error') or result.get('log')}"
            )
        cells = graded_cells(course / "solutions" / slug)
        grade_ids += [grade_id for grade_id, _ in cells if grade_id not in grade_ids]
        for student in students:
            start = time.perf_counter()
            scores, notes = grade_one(api, course, submissions / student / slug, student, slug, cells)
            row = {"student": student, "lesson": slug, **scores}
            row.update(
                total=sum(scores.values()), max=sum(points for _, points in cells), notes="; ".join(notes)
            )
            rows.append(row)
            seconds = time.perf_counter() - start
            print(
                f"  {student:<20} {slug}: {row['total']:g}/{row['max']:g} ({seconds:.1f} s)", file=sys.stderr
            )
    return rows, grade_ids


def grade_one(
    api, course: Path, source: Path, student: str, slug: str, cells
) -> tuple[dict[str, float], list[str]]:
    """Autograde one submission folder; ({grade_id: points}, [notes])."""
    from nbgrader.utils import setenv

    scores = {grade_id: 0.0 for grade_id, _ in cells}
    if not (source / f"{slug}.ipynb").is_file():
        return scores, [missing_note(source, slug)]
    shutil.copytree(source, course / "submitted" / student / slug, symlinks=True)
    with setenv(**STRICT):
        result = api.autograde(slug, student, force=True, create=True)
    if not result["success"]:
        # the notebook as a whole could not be graded (unreadable, the kernel died, ...)
        return scores, ["autograde failed: " + autograde_error(result)[:NOTE_CHARS]]

    notes = []
    with api.gradebook as gradebook:
        for notebook in gradebook.find_submission(slug, student).notebooks:
            for grade in notebook.grades:
                if grade.score is None:
                    notes.append(f"{grade.name}: needs manual grading")
                scores[grade.name] = float(grade.score or 0.0)
    lost = {grade_id for grade_id, points in cells if scores[grade_id] < points}
    for path in sorted((course / "autograded" / student / slug).glob("*.ipynb")):
        notes += failure_notes(path, lost)
    return scores, notes


def write_csv(path: Path, rows: list[dict], grade_ids: list[str]) -> None:
    columns = ["student", "lesson", *grade_ids, "total", "max", "notes"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, restval="")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:g}" if isinstance(v, float) else v) for k, v in row.items()})


def print_summary(rows: list[dict]) -> None:
    width = max([len("student"), *(len(r["student"]) for r in rows)])
    lesson_width = max([len("lesson"), *(len(r["lesson"]) for r in rows)])
    print(f"{'student':<{width}}  {'lesson':<{lesson_width}}  {'score':>9}  notes")
    for r in rows:
        score = f"{r['total']:g}/{r['max']:g}"
        print(f"{r['student']:<{width}}  {r['lesson']:<{lesson_width}}  {score:>9}  {r['notes']}")


@contextlib.contextmanager
def course_directory(keep: Path | None):
    if keep is None:
        with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
            yield Path(tmp)
        return
    keep.mkdir(parents=True, exist_ok=True)
    if any(keep.iterdir()):
        raise SystemExit(f"--keep {keep}: the folder must be empty")
    yield keep.resolve()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Grade SUBMISSIONS_DIR/<student>/<lesson>/<lesson>.ipynb with nbgrader; write a CSV.",
    )
    parser.add_argument("submissions", type=Path, metavar="SUBMISSIONS_DIR")
    parser.add_argument("--out", type=Path, required=True, help="the CSV to write")
    parser.add_argument("--lessons", nargs="+", metavar="SLUG", help="default: every lesson in solutions/")
    parser.add_argument(
        "--timeout", type=int, help="seconds per cell (default: Execute.timeout in nbgrader_config.py)"
    )
    parser.add_argument("--solutions", type=Path, default=ROOT / "solutions", help="default: %(default)s")
    parser.add_argument(
        "--keep", type=Path, metavar="DIR", help="grade in DIR (empty) and keep it, to inspect"
    )
    args = parser.parse_args(argv)

    submissions = args.submissions.resolve()
    solutions = args.solutions.resolve()
    if not submissions.is_dir():
        parser.error(f"{args.submissions} is not a folder")
    available = [p.name for p in lesson_dirs(solutions)]
    lessons = args.lessons or available
    unknown = [slug for slug in lessons if slug not in available]
    if unknown or not lessons:
        parser.error(f"no such lesson in {solutions}: {', '.join(unknown) or '(none at all)'}")
    students = sorted(p.name for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not students:
        parser.error(f"{args.submissions} has no student folders")

    print(f"grading {len(students)} students x {len(lessons)} lessons", file=sys.stderr)
    try:
        with course_directory(args.keep) as course:
            rows, grade_ids = grade(course, solutions, submissions, students, lessons, args.timeout)
    except CourseError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    rows.sort(key=lambda row: (students.index(row["student"]), lessons.index(row["lesson"])))
    write_csv(args.out, rows, grade_ids)
    print_summary(rows)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
