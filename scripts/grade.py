#!/usr/bin/env python
"""Grade a folder of submissions and write a CSV: the instructor's entry point.

    python scripts/grade.py SUBMISSIONS_DIR --out grades.csv [--lessons SLUG ...] [--jobs N] [--shard K/N]
                            [--seed S] [--timeout SECONDS] [--memory-limit GB] [--keep DIR]
    python scripts/grade.py --merge shard-1.csv shard-2.csv ... --out grades.csv

SUBMISSIONS_DIR holds one folder per student: SUBMISSIONS_DIR/<student>/<lesson-slug>/<lesson-slug>.ipynb (plus
whatever else the student saved next to it). Every folder in it is a student, hidden ones included (with a note).
Nothing under SUBMISSIONS_DIR or in this repository is written.

1. A run folder (temporary, or --keep DIR) gets an nbgrader course made from the lessons' solutions/ folders
   (`generate_assignment` records every graded cell in a gradebook), a copy of the grading kit (memlab,
   autograders) and a kernelspec that starts scripts/grade_sandbox.py.
2. Each (student, lesson) is graded by its own process, scripts/grade_worker.py, `--jobs` at a time: nbgrader
   autogrades a private copy of the course in strict mode; the submitted code runs in the sandboxed kernel (no
   access to the repository, the solutions, the gradebook, other students or the CSV; memory and process limits;
   every process it starts killed when the notebook ends), and a check cell earns its points only on a verified
   pass reported by the sandbox. Under strict grading every check also runs cases drawn from a seed (`--seed`,
   random by default, printed), derived per student and lesson.
3. Each result is appended to the CSV as soon as it is known (a crash loses nothing); at the end the CSV is
   rewritten in order (identical for any --jobs), and a per-student file of totals is written next to it
   (`grades.csv` -> `grades-students.csv`).

CSV columns: student, lesson, the points of every graded cell (a written answer is empty until graded by hand),
total (points earned so far), max (every point of the lesson, written answers included), needs_manual (points still
to grade by hand), flags (evidence of tampering found at run time: read them), notes (why points were lost, what
was repaired, code worth a look).

`--shard K/N` grades every N-th student starting at the K-th (1-based) in sorted order, so N machines (a Slurm job
array, a CI matrix) grade a class together; `--merge` joins their CSVs. Exit status: 0 when the batch was graded,
whatever the students scored; 2 for a mistake in the command; 1 when the course itself could not be prepared.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
sys.path.insert(0, str(SCRIPTS))
from build_lessons import ROOT, lesson_dirs, load_config  # noqa: E402
from grade_worker import THREAD_VARIABLES  # noqa: E402

KERNEL_NAME = "memlab-grading"
FIXED_COLUMNS_END = ["total", "max", "needs_manual", "flags", "notes"]
DEFAULT_MEMORY_GB = 8.0
DEFAULT_NPROC = 256


class CourseError(RuntimeError):
    """The course itself (not a submission) could not be prepared for grading."""


def fail(message: str) -> None:
    """An instructor's mistake: one line, no traceback, exit status 2."""
    print(f"grade.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


# ---- the lessons: points of every graded cell ------------------------------------------------------------------


def graded_cells(lesson: Path) -> list[tuple[str, float]]:
    """(grade_id, points) of every graded cell of a lesson's notebooks, in notebook order."""
    import nbformat
    from grade_worker import graded_cells as notebook_cells

    return [
        (grade_id, points)
        for path in sorted(lesson.glob("*.ipynb"))
        for grade_id, points, _ in notebook_cells(nbformat.read(path, as_version=4))
    ]


def check_modules(lesson: Path) -> list[str]:
    """The modules the lesson's graded cells import their checks from (`from X import check_...`)."""
    import ast

    import nbformat

    modules = []
    for path in sorted(lesson.glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "code" or not cell.metadata.get("nbgrader", {}).get("grade"):
                continue
            source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith("%"))
            try:
                tree = ast.parse(source)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module and node.module not in modules:
                    modules.append(node.module)
    return modules


# ---- the run folder ------------------------------------------------------------------------------------------


def prepare_course(run: Path, solutions: Path, lessons: list[str]) -> Path:
    """An nbgrader course in run/course with the lessons' sources and a gradebook that knows every graded cell."""
    import warnings

    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    bindir = os.path.dirname(sys.executable)  # nbgrader shells out to `alembic` when it creates a gradebook
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    warnings.filterwarnings("ignore", message=".* not in session", module="nbgrader")
    course = run / "course"
    course.mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    for slug in lessons:
        ignore = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")
        shutil.copytree(solutions / slug, course / "solutions" / slug, ignore=ignore)
    config = load_config(course)
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.db_url = "sqlite:///" + str(course / "gradebook.db")
    config.NbGraderAPI.log_level = "WARN"
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    for slug in lessons:
        result = api.generate_assignment(slug, force=True, create=True)
        if not result["success"]:
            raise CourseError(
                f"nbgrader generate_assignment {slug} failed:\n{result.get('error') or result.get('log')}"
            )
    return course


def prepare_kit(run: Path) -> Path:
    """A copy of the grading kit (memlab, autograders with its references): what the kernels import."""
    kit = run / "kit"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("memlab", "autograders"):
        shutil.copytree(ROOT / package, kit / package, ignore=ignore)
    return kit


def prepare_kernelspec(run: Path) -> Path:
    """A Jupyter data folder with the grading kernelspec: an IPython kernel started by grade_sandbox.py."""
    folder = run / "jupyter"
    spec = folder / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, str(SCRIPTS / "grade_sandbox.py"), "-f", "{connection_file}"],
                "display_name": "Python 3 (sandboxed grading)",
                "language": "python",
                "interrupt_mode": "signal",
            },
            indent=1,
        )
    )
    return folder


def isolation_problem() -> str | None:
    """Why this machine cannot isolate submissions (None when it can)."""
    if not sys.platform.startswith("linux"):
        return f"grading isolates each submission with Linux Landlock; this is {sys.platform}"
    from grade_sandbox import landlock_abi

    if landlock_abi() < 1:
        return "this Linux kernel has no Landlock (needs Linux >= 5.13 with landlock in its LSM list)"
    return None


# ---- students, tasks, workers ----------------------------------------------------------------------------------


def kernel_threads(jobs: int) -> int:
    """Threads for each kernel's torch when `jobs` kernels share this machine's CPUs: its CPUs split between them.

    torch starts as many intra-op threads as the machine has cores in *every* kernel, so --jobs 2 on 2 cores ran
    4 spinning OpenMP threads on 2 cores: lessons 04 and 05 graded 2.6-6.3 times slower. OMP_NUM_THREADS (or
    MKL_NUM_THREADS) set by the instructor wins."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // jobs)


def list_students(submissions: Path) -> list[str]:
    return sorted(p.name for p in submissions.iterdir() if p.is_dir() or p.is_symlink())


def student_id(index: int, name: str) -> str:
    """nbgrader's id of a student folder: ASCII letters, digits, - and _ only, unique by its index."""
    safe = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "-_") else "_" for ch in name).strip("_")
    return f"s{index:04d}-{safe[:40] or 'student'}"


def task_seed(seed: int, student: str, lesson: str) -> int:
    digest = hashlib.sha256(f"{seed}/{student}/{lesson}".encode()).hexdigest()
    return int(digest[:12], 16)


def run_worker(task: dict, deadline: float) -> dict:
    """Grade one submission in its own process; a worker past `deadline` seconds is killed with its kernel."""
    task_path = Path(task["work_dir"]) / "task.json"
    task_path.write_text(json.dumps(task))
    log = open(Path(task["work_dir"]) / "worker.log", "wb")  # noqa: SIM115 - closed below
    try:
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPTS / "grade_worker.py"), str(task_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=deadline)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return {
                "scores": {},
                "manual": [],
                "flags": [],
                "seconds": deadline,
                "notes": [f"grading was stopped after {deadline:g} s (--notebook-timeout)"],
            }
    finally:
        log.close()
    result_path = Path(task["result_path"])
    if not result_path.exists():
        tail = (Path(task["work_dir"]) / "worker.log").read_text(errors="replace")[-300:]
        return {
            "scores": {},
            "manual": [],
            "flags": [],
            "seconds": 0.0,
            "grader_error": True,
            "notes": [f"the grader's worker ended without a result (exit {proc.returncode}): {tail}"],
        }
    return json.loads(result_path.read_text())


def make_row(student: str, lesson: str, cells: list[tuple[str, float]], result: dict) -> dict:
    """A CSV row; a score of None is a written answer still to grade by hand."""
    scores = result.get("scores", {})
    row = {"student": student, "lesson": lesson}
    total = needs_manual = 0.0
    for grade_id, points in cells:
        score = scores.get(grade_id, 0.0)
        if score is None:
            row[grade_id] = ""
            needs_manual += points
        else:
            row[grade_id] = f"{float(score):g}"
            total += float(score)
    row.update(
        total=f"{total:g}",
        max=f"{sum(p for _, p in cells):g}",
        needs_manual=f"{needs_manual:g}",
        flags="; ".join(result.get("flags", [])),
        notes="; ".join(result.get("notes", [])),
    )
    return row


# ---- the CSV ---------------------------------------------------------------------------------------------------


class CsvWriter:
    """Rows appended as they come (a crash loses nothing), then rewritten in order at the end."""

    def __init__(self, path: Path, columns: list[str]):
        self.path, self.columns, self.rows = path, columns, []
        self._lock = threading.Lock()
        with open(path, "w", newline="", encoding="utf-8") as fh:
            csv.DictWriter(fh, fieldnames=columns).writeheader()

    def append(self, row: dict) -> None:
        with self._lock:
            self.rows.append(row)
            with open(self.path, "a", newline="", encoding="utf-8") as fh:
                csv.DictWriter(fh, fieldnames=self.columns, restval="").writerow(row)

    def finish(self, order) -> list[dict]:
        rows = sorted(self.rows, key=order)
        write_csv(self.path, rows, self.columns)
        return rows


def write_csv(path: Path, rows: list[dict], columns: list[str]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def totals_path(out: Path) -> Path:
    return out.with_name(f"{out.stem}-students{out.suffix or '.csv'}")


def write_totals(out: Path, rows: list[dict]) -> Path:
    """One row per student: lessons graded, total, max, points still to grade by hand, flagged lessons."""
    students: dict[str, dict] = {}
    for row in rows:
        s = students.setdefault(
            row["student"],
            {
                "student": row["student"],
                "lessons": 0,
                "total": 0.0,
                "max": 0.0,
                "needs_manual": 0.0,
                "flagged_lessons": [],
            },
        )
        s["lessons"] += 1
        for key in ("total", "max", "needs_manual"):
            s[key] += float(row[key] or 0)
        if row.get("flags"):
            s["flagged_lessons"].append(row["lesson"])
    table = [
        {
            **s,
            **{k: f"{s[k]:g}" for k in ("total", "max", "needs_manual")},
            "flagged_lessons": " ".join(s["flagged_lessons"]),
        }
        for s in students.values()
    ]
    path = totals_path(out)
    write_csv(
        path,
        sorted(table, key=lambda s: s["student"]),
        ["student", "lessons", "total", "max", "needs_manual", "flagged_lessons"],
    )
    return path


def print_summary(rows: list[dict]) -> None:
    width = max([len("student"), *(len(r["student"]) for r in rows)])
    lesson_width = max([len("lesson"), *(len(r["lesson"]) for r in rows)])
    print(f"{'student':<{width}}  {'lesson':<{lesson_width}}  {'score':>9}  notes")
    for r in rows:
        score = f"{r['total']}/{r['max']}"
        flag = "FLAGGED: " + r["flags"] + "; " if r.get("flags") else ""
        print(f"{r['student']:<{width}}  {r['lesson']:<{lesson_width}}  {score:>9}  {flag}{r['notes']}")


# ---- --keep: one gradebook with every submission, for formgrader -------------------------------------------------


def import_into_gradebook(course: Path, student: str, sid: str, lesson: str, result: dict) -> None:
    """Put a worker's autograded notebook into the run's main gradebook (formgrader reads it)."""
    import nbformat
    from nbgrader.api import Gradebook
    from nbgrader.preprocessors import SaveAutoGrades

    autograded = Path(result["autograded"])
    for stage, src in (
        ("submitted", autograded.parents[3] / "submitted" / sid / lesson),
        ("autograded", autograded.parent),
    ):
        dest = course / stage / sid / lesson
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(src, dest)
    db_url = "sqlite:///" + str(course / "gradebook.db")
    with Gradebook(db_url) as gradebook:
        gradebook.update_or_create_student(sid, first_name=student)
        gradebook.update_or_create_submission(lesson, sid)
    resources = {"nbgrader": {"notebook": lesson, "assignment": lesson, "student": sid, "db_url": db_url}}
    SaveAutoGrades().preprocess(nbformat.read(autograded, as_version=4), resources)


# ---- main --------------------------------------------------------------------------------------------------------


def merge(paths: list[Path], out: Path) -> int:
    """Join the CSVs of several shards into one (and its per-student totals)."""
    columns, rows, seen = None, [], {}
    for path in paths:
        if not path.is_file():
            fail(f"--merge: {path} is not a file")
        with open(path, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames is None or reader.fieldnames[:2] != ["student", "lesson"]:
                fail(f"--merge: {path} is not a CSV written by grade.py")
            if columns is None:
                columns = list(reader.fieldnames)
            elif list(reader.fieldnames) != columns:
                fail(f"--merge: {path} has other columns than {paths[0]} (graded with other lessons?)")
            for row in reader:
                key = (row["student"], row["lesson"])
                if key in seen:
                    fail(f"--merge: {row['student']} / {row['lesson']} is in both {seen[key]} and {path}")
                seen[key] = path
                rows.append(row)
    rows.sort(key=lambda r: (r["student"], r["lesson"]))
    write_csv(out, rows, columns)
    totals = write_totals(out, rows)
    print(f"merged {len(paths)} files, {len(rows)} rows: wrote {out} and {totals}", file=sys.stderr)
    return 0


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description="Grade SUBMISSIONS_DIR/<student>/<lesson>/<lesson>.ipynb with nbgrader, isolated; write a CSV.",
    )
    parser.add_argument("submissions", type=Path, metavar="SUBMISSIONS_DIR", nargs="?")
    parser.add_argument("--out", type=Path, required=True, help="the CSV to write")
    parser.add_argument("--lessons", nargs="+", metavar="SLUG", help="default: every lesson in solutions/")
    parser.add_argument("--timeout", type=float, help="seconds per cell (default: nbgrader_config.py's)")
    parser.add_argument(
        "--notebook-timeout",
        type=float,
        default=1800.0,
        help="seconds for one notebook in all (default: %(default)s)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="submissions graded at the same time, the CPUs split between them (default: 1)",
    )
    parser.add_argument(
        "--shard", metavar="K/N", help="grade only every N-th student, from the K-th (1-based)"
    )
    parser.add_argument("--seed", type=int, help="seed of the cases drawn at grading time (default: random)")
    parser.add_argument(
        "--memory-limit",
        type=float,
        default=DEFAULT_MEMORY_GB,
        metavar="GB",
        help="memory of one submission's processes (default: %(default)s GiB)",
    )
    parser.add_argument("--solutions", type=Path, default=ROOT / "solutions", help="default: %(default)s")
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="grade in DIR (empty) and keep it: one nbgrader course with every submission",
    )
    parser.add_argument("--merge", type=Path, nargs="+", metavar="CSV", help="join shard CSVs into --out")
    parser.add_argument(
        "--no-isolation",
        action="store_true",
        help="grade without the sandbox (only on a machine without Landlock, never for credit)",
    )
    return parser.parse_args(argv)


def check_out(out: Path) -> Path:
    if out.exists() and out.is_dir():
        fail(f"--out {out} is a folder; give the path of the CSV file to write")
    if not out.resolve().parent.is_dir():
        fail(f"--out {out}: the folder {out.resolve().parent} does not exist")
    if not os.access(out.resolve().parent, os.W_OK):
        fail(f"--out {out}: the folder {out.resolve().parent} is not writable")
    return out.resolve()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = check_out(args.out)
    if args.merge:
        return merge(args.merge, out)
    if args.submissions is None:
        fail("give SUBMISSIONS_DIR (or --merge CSV ...)")
    submissions = args.submissions.resolve()
    if not submissions.exists():
        fail(f"{args.submissions} does not exist")
    if not submissions.is_dir():
        fail(f"{args.submissions} is not a folder")
    if args.timeout is not None and args.timeout <= 0:
        fail(f"--timeout must be a positive number of seconds; got {args.timeout:g}")
    if args.notebook_timeout <= 0:
        fail(f"--notebook-timeout must be positive; got {args.notebook_timeout:g}")
    if args.jobs < 1:
        fail(f"--jobs must be at least 1; got {args.jobs}")
    if args.memory_limit <= 0:
        fail(f"--memory-limit must be positive; got {args.memory_limit:g}")
    shard = None
    if args.shard:
        try:
            k, n = (int(x) for x in args.shard.split("/"))
            assert 1 <= k <= n
        except (ValueError, AssertionError):
            fail(f"--shard must be K/N with 1 <= K <= N (e.g. 2/8); got {args.shard!r}")
        shard = (k, n)
    solutions = args.solutions.resolve()
    available = [p.name for p in lesson_dirs(solutions)]
    lessons = sorted(args.lessons or available)
    unknown = [slug for slug in lessons if slug not in available]
    if unknown or not lessons:
        fail(
            f"no such lesson in {solutions}: {', '.join(unknown) or '(none at all)'}"
            + (f" (lessons: {', '.join(available)})" if available else "")
        )
    students = list_students(submissions)
    if not students:
        fail(f"{args.submissions} has no student folders (expected {args.submissions}/<student>/<lesson>/)")
    indexed = list(enumerate(students))
    if shard:
        indexed = [(i, s) for i, s in indexed if i % shard[1] == shard[0] - 1]
    problem = isolation_problem()
    if problem is None and not args.no_isolation:
        from grade_sandbox import namespaces_available

        if not namespaces_available():
            print(
                "grade.py: warning: this machine refuses user/PID namespaces: a submission's processes are "
                "tracked and killed by the monitor instead (Landlock still confines them)",
                file=sys.stderr,
            )
    if problem and not args.no_isolation:
        fail(
            f"{problem}. Grade on a Linux machine with Landlock, or pass --no-isolation (a submission could "
            "then read and change what you can)"
        )
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    timeout = args.timeout
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        if any(args.keep.iterdir()):
            fail(f"--keep {args.keep}: the folder must be empty")

    threads = kernel_threads(args.jobs)
    print(
        f"grading {len(indexed)} students x {len(lessons)} lessons, --jobs {args.jobs}"
        + ("" if any(v in os.environ for v in THREAD_VARIABLES) else f" ({threads} torch threads each)")
        + f", seed {seed}"
        + (f", shard {shard[0]}/{shard[1]}" if shard else ""),
        file=sys.stderr,
    )
    with run_folder(args.keep) as run:
        try:
            course = prepare_course(run, solutions, lessons)
        except CourseError as error:
            print(f"grade.py: error: {error}", file=sys.stderr)
            return 1
        kit = prepare_kit(run)
        jupyter = prepare_kernelspec(run)
        cells = {slug: graded_cells(course / "solutions" / slug) for slug in lessons}
        if timeout is None:
            timeout = load_config(course).Execute.timeout
        columns = ["student", "lesson"]
        for slug in lessons:
            columns += [g for g, _ in cells[slug] if g not in columns]
        columns += FIXED_COLUMNS_END
        writer = CsvWriter(out, columns)
        protected = [str(ROOT), str(submissions), str(run), str(out.parent / out.name)]
        tasks = []
        for index, student in indexed:
            sid = student_id(index, student)
            for slug in lessons:
                work = run / "work" / f"{sid}-{slug}"
                work.mkdir(parents=True)
                tasks.append(
                    {
                        "student": student,
                        "student_id": sid,
                        "lesson": slug,
                        "submission": str(submissions / student / slug),
                        "template": str(course),
                        "work_dir": str(work),
                        "result_path": str(work / "result.json"),
                        "kit_dir": str(kit),
                        "jupyter_path": str(jupyter),
                        "timeout": timeout,
                        "seed": task_seed(seed, student, slug),
                        "memory_bytes": int(args.memory_limit * 2**30),
                        "nproc": DEFAULT_NPROC,
                        "threads": threads,
                        "isolate": not args.no_isolation,
                        "check_modules": check_modules(course / "solutions" / slug),
                        "reference_modules": _reference_modules(kit, slug),
                        "protected_roots": protected,
                    }
                )
        results = {}
        try:
            with ThreadPoolExecutor(max_workers=args.jobs) as pool:
                futures = {pool.submit(run_worker, t, args.notebook_timeout): t for t in tasks}
                for future in as_completed(futures):
                    task = futures[future]
                    result = future.result()
                    result["notes"] = _student_notes(task["student"]) + result.get("notes", [])
                    results[(task["student"], task["lesson"])] = (task, result)
                    row = make_row(task["student"], task["lesson"], cells[task["lesson"]], result)
                    writer.append(row)
                    flagged = " FLAGGED" if row["flags"] else ""
                    print(
                        f"  {task['student']:<20} {task['lesson']}: {row['total']}/{row['max']}{flagged} "
                        f"({result.get('seconds', 0):.1f} s)",
                        file=sys.stderr,
                    )
        except KeyboardInterrupt:
            print("interrupted: the CSV holds the rows graded so far", file=sys.stderr)
            writer.finish(_order(lessons))
            return 130
        rows = writer.finish(_order(lessons))
        if args.keep is not None:
            for (student, slug), (task, result) in sorted(results.items()):
                if result.get("autograded"):
                    import_into_gradebook(course, student, task["student_id"], slug, result)
    totals = write_totals(out, rows)
    print_summary(rows)
    print(f"wrote {out} and {totals}", file=sys.stderr)
    return 0


def _reference_modules(kit: Path, slug: str) -> list[str]:
    number = slug.split("-")[0]
    return (
        [f"autograders.references.lesson{number}"]
        if (kit / "autograders" / "references" / f"lesson{number}.py").exists()
        else []
    )


def _student_notes(student: str) -> list[str]:
    return (
        ["the student folder's name starts with '.' (hidden on most systems): check it is a student"]
        if student.startswith(".")
        else []
    )


def _order(lessons: list[str]):
    return lambda row: (row["student"], lessons.index(row["lesson"]))


@contextlib.contextmanager
def run_folder(keep: Path | None):
    if keep is None:
        with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
            yield Path(tmp)
        return
    yield keep.resolve()


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
