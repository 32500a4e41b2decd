"""Grade a folder of submissions and write a CSV: the batch driver behind scripts/grade.py.

    python scripts/grade.py SUBMISSIONS_DIR --out grades.csv [--lessons SLUG ...] [--jobs N] [--shard K/N]
                            [--seed S] [--timeout SECONDS] [--memory-limit GB] [--keep DIR]
                            [--due-dates CSV]
    python scripts/grade.py --merge shard-1.csv shard-2.csv ... --out grades.csv
    python scripts/grade.py --manual-grades DIR --out grades.csv   (the grades entered in formgrader in DIR)

SUBMISSIONS_DIR holds one folder per student: SUBMISSIONS_DIR/<student>/<lesson-slug>/<lesson-slug>.ipynb (plus
whatever else the student saved next to it). Every folder in it is a student, hidden ones included (with a note).
Nothing under SUBMISSIONS_DIR or in this repository is written.

1. A run folder (temporary, or --keep DIR) gets an nbgrader course made from the lessons' solutions/ folders
   (`generate_assignment` records every graded cell in a gradebook) and a copy of the kit the sandboxes import
   (memlab, autograders without its grading references). A submission made from a translated edition (its
   notebook's metadata says `memlab.language: ko`) is graded against that edition's sources (ko/solutions/, next
   to solutions/) in a second course, course-ko: the same checks, cases and points, its messages in Korean; its
   row is the same as any other, with a note naming the edition.
2. Each (student, lesson) is graded by its own process, grading/worker.py, `--jobs` at a time: nbgrader's own
   autograde with the course's nbgrader_config.py (grading/autograde.py): the kernel runs sandboxed and only
   collects what the learner's code returns; a judge process that never runs submitted code decides every check.
   Every check also runs cases drawn from a seed (`--seed`, by default the course's own, kept in grading_seed.json and printed), derived per student and
   lesson.
3. Each result is appended to the CSV as soon as it is known (a crash loses nothing); at the end identical work
   handed in by different students (lesson 08's adapter) is flagged, the CSV is rewritten in order (identical for
   any --jobs), and a per-student file of totals is written next to it (`grades.csv` -> `grades-students.csv`).

CSV columns: student, lesson, the points of every graded cell (a written answer is empty until graded by hand),
total (points earned so far, after any late penalty), max (every point of the lesson, written answers included),
needs_manual (points still to grade by hand), handed_in (nbgrader's timestamp.txt, UTC), seconds_late (against
--due-dates), late_penalty, flags (evidence of tampering or copying: read them), notes (why points were lost, what was
repaired, code worth a look). Every text a submission can produce is escaped (control characters, lone surrogates)
and cut to a length; a submission that breaks its worker costs that row only.

`--shard K/N` grades every N-th student starting at the K-th (1-based) in sorted order, so N machines (a Slurm job
array, a CI matrix) grade a class together; `--merge` joins their CSVs. Exit status: 0 when the batch was graded,
whatever the students scored; 2 for a mistake in the command; 1 when the course itself could not be prepared.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from grading import isolation
from grading.course import (
    CourseError,
    copy_regular_files,
    course_root,
    editions,
    graded_cells,
    lesson_dirs,
    load_config,
    prepare_course,
    prepare_kit,
)
from grading.export import (
    apply_manual_grades,
    manual_cells,
    manual_grades,
    parse_due_dates,
    student_table,
    write_table,
)
from grading.i18n import _
from grading.settings import Settings, course_seed
from grading.submission import declared_language, escaped
from grading.types import Result, Task
from memlab.i18n import ENGLISH

FIXED_COLUMNS_END = [
    "total",
    "max",
    "needs_manual",
    "handed_in",
    "seconds_late",
    "late_penalty",
    "flags",
    "notes",
]
FIELD_CHARS = 4000  # a CSV field a submission's text can fill


def fail(message: str) -> None:
    """An instructor's mistake: one line, no traceback, exit status 2."""
    print(f"grade.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def csv_text(text: str, limit: int = FIELD_CHARS) -> str:
    """`text` safe for a CSV cell: lone surrogates and control characters escaped, at most `limit` characters."""
    return escaped(text, limit)


def kernel_threads(jobs: int) -> int:
    """Threads for each kernel's torch when `jobs` kernels share this machine's CPUs: its CPUs split between them.

    torch starts as many intra-op threads as the machine has cores in *every* kernel, so --jobs 2 on 2 cores ran
    4 spinning OpenMP threads on 2 cores: lessons 04 and 05 graded 2.6-6.3 times slower. OMP_NUM_THREADS (or
    MKL_NUM_THREADS) set by the instructor wins."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cpus // jobs)


def list_students(submissions: Path) -> list[str]:
    return sorted(p.name for p in submissions.iterdir() if p.is_dir() or p.is_symlink())


#: a student folder's name that is also a good nbgrader student id: the id formgrader and the kept course show, and
#: the one the drawn cases derive from, as for the same student graded by nbgrader's own collect and autograde
NBGRADER_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def student_ids(names: list[str]) -> dict[str, str]:
    """nbgrader's id of each student folder: its own name where that is a plain id (letters, digits, _ . -), else
    `s<index>-` and the name's ASCII letters and digits, never the same as another's."""
    ids: dict[str, str] = {}
    taken = {name for name in names if NBGRADER_ID.fullmatch(name)}
    for index, name in enumerate(names):
        if NBGRADER_ID.fullmatch(name):
            ids[name] = name
            continue
        safe = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "-_") else "_" for ch in name).strip("_")
        sid = f"s{index:04d}-{safe[:40] or 'student'}"
        while sid in taken:
            sid += "_"
        taken.add(sid)
        ids[name] = sid
    return ids


def grading_order(indexed: list[tuple[int, str]], lessons: list[str]) -> list[tuple[int, str, str]]:
    """The order submissions start in: lesson by lesson, the last lesson first, each lesson's students in order.
    This course's later lessons are the slow ones to grade (a solved lesson 08 or 06 takes several times lesson 02's
    time: results/grading_benchmark.json); started first, they do not leave one long notebook running alone at the
    end of a batch while the other jobs have nothing left to do."""
    return [(index, student, slug) for slug in reversed(lessons) for index, student in indexed]


def worker_server(lesson_notebooks: list[Path]):
    """The server grade.py forks its workers from (multiprocessing's forkserver, started on first use), with what
    grading these lessons needs imported once: on a machine where a CUDA device may be present, nothing that touches
    CUDA (`grading.worker.preload_for`; why in grading/worker.py)."""
    import multiprocessing.forkserver

    from grading.worker import SERVER_SAFE_PATH, preload_for

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(preload_for(lesson_notebooks, cuda=isolation.cuda_device_present()))
    # The server starts as `python -c ...`, which puts the working folder first on sys.path (the forkserver of the
    # Pythons the course supports imports its preload before it takes the driver's sys.path, fixed in later CPython):
    # a memlab/ or grading/ folder where grade.py is run would be imported instead of the course's. PYTHONSAFEPATH
    # (-P) leaves it out; the workers drop it again (grading.worker.SERVER_SAFE_PATH).
    if os.environ.get("PYTHONSAFEPATH"):
        multiprocessing.forkserver.ensure_running()  # it imports while the courses are prepared
        return context
    os.environ["PYTHONSAFEPATH"] = SERVER_SAFE_PATH
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        del os.environ["PYTHONSAFEPATH"]
    return context


def run_worker(task: Task, deadline: float, server) -> Result:
    """Grade one submission in its own process, forked from `server` (`worker_server`); a worker past `deadline`
    seconds is killed with its kernel."""
    from grading.worker import forked

    task_path = Path(task.work_dir) / "task.json"
    task.save(task_path)
    log_path = Path(task.work_dir) / "worker.log"
    proc = server.Process(target=forked, args=(str(task_path), str(log_path)))
    proc.start()
    proc.join(timeout=deadline)
    if proc.exitcode is None:  # still running: kill it, its session (its kernel) and what is left of its tree
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        isolation.kill_tree(proc.pid)
        proc.join()
        text = _("grading was stopped after {seconds} s (--notebook-timeout)", task.language)
        return Result(seconds=deadline, notes=[text.format(seconds=f"{deadline:g}")])
    try:
        return Result.load(task.result_path)
    except (OSError, ValueError, TypeError):
        try:
            tail = log_path.read_text(errors="replace")[-300:]
        except OSError:  # it ended before it opened its log (an import that failed): its error went to stderr
            tail = _("no worker.log: it ended before grading (its error is printed above)", task.language)
        return Result(
            grader_error=True,
            notes=[
                _("the grader's worker ended without a result (exit {code}): {tail}", task.language).format(
                    code=proc.exitcode, tail=tail
                )
            ],
        )


def make_row(
    student: str, lesson: str, cells: list[tuple[str, float, bool]], result: Result, handed_in: str = ""
) -> dict:
    """A CSV row; a score of None is a written answer still to grade by hand. Every text is escaped. The total is
    after the late penalty nbgrader's AssignLatePenalties took (the course's LateSubmissionPlugin)."""
    row = {"student": csv_text(student, 200), "lesson": lesson}
    total = needs_manual = 0.0
    for gid, points, _manual in cells:
        score = result.scores.get(gid, 0.0)
        if score is None:
            row[gid] = ""
            needs_manual += points
        else:
            row[gid] = f"{float(score):g}"
            total += float(score)
    row.update(
        total=f"{max(0.0, total - result.late_penalty):g}",
        max=f"{sum(p for _gid, p, _manual in cells):g}",
        needs_manual=f"{needs_manual:g}",
        handed_in=handed_in,
        seconds_late="" if result.seconds_late is None else f"{result.seconds_late:g}",
        late_penalty=f"{result.late_penalty:g}",
        flags=csv_text("; ".join(result.flags)),
        notes=csv_text("; ".join(result.notes)),
    )
    return row


#: two signatures (kit.signature) name the same work when they are closer than this, relative to the larger: a copy
#: changed in a last digit is about 1e-7 away, two runs trained apart about 1
SAME_WORK = 1e-3


def same_work(a: list[float], b: list[float]) -> bool:
    if len(a) != len(b) or not a:
        return False
    distance = sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5
    size = max(sum(x * x for x in a) ** 0.5, sum(y * y for y in b) ** 0.5)
    return distance <= SAME_WORK * size


def flag_copies(results: dict) -> None:
    """The same work (close signatures, kit.signature) handed in by different students. Where every one of them
    says when it was handed in (nbgrader's timestamp.txt), the first is not blamed: its row says who handed in the same
    work after it, and the later ones are flagged, naming the first; where a time is missing, every one is flagged."""
    for gid in sorted({g for _task, result in results.values() for g in result.signatures}):
        owners = sorted(
            (task.student, task.submitted_at, task.language, result)
            for task, result in results.values()
            if gid in result.signatures
        )
        for student, submitted, language, result in owners:
            same = [
                o
                for o in owners
                if o[0] != student and same_work(result.signatures[gid], o[3].signatures[gid])
            ]
            if not same:
                continue
            times = [submitted, *(o[1] for o in same)]
            if all(times) and submitted < min(o[1] for o in same):
                text = _(
                    "{grade_id}: handed in first ({time}); the same work was handed in after it by {students}",
                    language,
                )
                result.notes.append(
                    text.format(grade_id=gid, time=submitted, students=", ".join(o[0] for o in same[:5]))
                )
                continue
            if all(times):
                first = min(same, key=lambda o: o[1])
                text = _(
                    "{grade_id}: the same work as {first}'s, handed in earlier ({earlier}; this one {time})",
                    language,
                )
                result.flags.append(
                    text.format(grade_id=gid, first=first[0], earlier=first[1], time=submitted)
                )
                continue
            text = _(
                "{grade_id}: the same work as {students} (what it learned, within {tolerance}: copied, or the same "
                "code run with the same seeds); no submission time tells who handed it in first",
                language,
            )
            result.flags.append(
                text.format(
                    grade_id=gid, students=", ".join(o[0] for o in same[:5]), tolerance=f"{SAME_WORK:g}"
                )
            )


def submission_time(folder: Path) -> str:
    """When a lesson folder was handed in, from the timestamp.txt nbgrader's exchange writes into it ("2026-11-28
    10:00:00.000000 UTC"), as ISO 8601 in UTC; "" when there is none or it does not read."""
    import datetime

    path = folder / "timestamp.txt"
    try:
        if path.is_symlink() or not path.is_file():
            return ""
        text = path.read_text(encoding="utf-8").strip()[:64]
    except (OSError, UnicodeDecodeError):
        return ""
    try:
        from dateutil import parser

        stamp = parser.parse(text)
    except (ImportError, ValueError, OverflowError):
        return ""
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.timezone.utc)
    return stamp.astimezone(datetime.timezone.utc).isoformat(timespec="microseconds")


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


def write_totals(out: Path, rows: list[dict], solutions: Path) -> Path:
    """The per-student table an LMS imports (grading/export.py), next to the CSV: grades.csv -> grades-students.csv."""
    table, columns = student_table(rows, manual_cells(solutions, {r["lesson"] for r in rows}))
    path = totals_path(out)
    write_table(path, table, columns)
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


def import_into_gradebook(
    course: Path, student: str, sid: str, lesson: str, result: Result, handed_in: str = ""
) -> None:
    """Put a worker's autograded notebook into the gradebook of the course it was graded in (course, or course-ko for
    the Korean edition), with when it was handed in and its late penalty: formgrader and `nbgrader export` read
    them there."""
    import datetime

    import nbformat
    from nbgrader.api import Gradebook
    from nbgrader.preprocessors import AssignLatePenalties, SaveAutoGrades

    autograded = Path(result.autograded)
    for stage, src in (
        ("submitted", autograded.parents[3] / "submitted" / sid / lesson),
        ("autograded", autograded.parent),
    ):
        dest = course / stage / sid / lesson
        if dest.exists():
            shutil.rmtree(dest)
        copy_regular_files(src, dest)  # a link a kernel made in its folder is never followed
    db_url = "sqlite:///" + str(course / "gradebook.db")
    stamp = (
        datetime.datetime.fromisoformat(handed_in).replace(tzinfo=None) if handed_in else None
    )  # UTC, as nbgrader
    with Gradebook(db_url) as gradebook:
        gradebook.update_or_create_student(sid, first_name=student)
        gradebook.update_or_create_submission(lesson, sid, **({"timestamp": stamp} if stamp else {}))
    resources = {"nbgrader": {"notebook": lesson, "assignment": lesson, "student": sid, "db_url": db_url}}
    notebook = nbformat.read(autograded, as_version=4)
    SaveAutoGrades().preprocess(notebook, resources)
    AssignLatePenalties(config=load_config(course)).preprocess(notebook, resources)


# ---- main --------------------------------------------------------------------------------------------------------


def merge(paths: list[Path], out: Path, solutions: Path) -> int:
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
    totals = write_totals(out, rows, solutions)
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
    parser.add_argument(
        "--seed",
        type=int,
        help="seed of the cases drawn at grading time (default: the course's, kept in grading_seed.json)",
    )
    parser.add_argument(
        "--memory-limit",
        type=float,
        default=Settings.memory_gb,
        metavar="GB",
        help="memory of one submission's processes (default: %(default)s GiB)",
    )
    parser.add_argument(
        "--solutions",
        type=Path,
        help="the lessons' sources (default: solutions/ of the course's folder: the checkout the grader runs from, or "
        "the working folder)",
    )
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="grade in DIR (empty) and keep it: one nbgrader course with every submission",
    )
    parser.add_argument("--merge", type=Path, nargs="+", metavar="CSV", help="join shard CSVs into --out")
    parser.add_argument(
        "--due-dates",
        type=Path,
        metavar="CSV",
        help="each lesson's due date: a CSV with the columns name and duedate, as `nbgrader db assignment import` "
        "reads it; a row then says how late its lesson was handed in (nbgrader's timestamp.txt) and its total is "
        "after the course's late penalty (nbgrader_config.py, LateSubmissionPlugin)",
    )
    parser.add_argument(
        "--manual-grades",
        type=Path,
        metavar="DIR",
        help="read the grades entered in formgrader in DIR (a --keep folder) into --out (a CSV grade.py wrote) and "
        "its per-student table; grades nothing",
    )
    parser.add_argument(
        "--run-demonstrations",
        action="store_true",
        help="also run the lessons' demonstrations that grading leaves out (cells tagged skip-when-grading): "
        "slower, the same scores; CI's drift check uses it to run every cell of every solution once",
    )
    parser.add_argument(
        "--no-isolation",
        action="store_true",
        help="grade without the sandbox (only where bubblewrap cannot run, never for credit)",
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


@dataclasses.dataclass
class Plan:
    """What a grading run was asked to do, checked: the command's mistakes are found here, before any work."""

    args: argparse.Namespace
    out: Path
    submissions: Path
    solutions: Path
    lessons: list[str]
    students: list[tuple[int, str]]  # (index among every student, folder name): this shard's
    settings: Settings
    shard: tuple[int, int] | None
    due: dict[str, str] = dataclasses.field(default_factory=dict)  # lesson -> due date (nbgrader's, UTC)


def plan(args: argparse.Namespace, out: Path) -> Plan:
    """The run `args` ask for; a mistake in them ends it here (`fail`, exit status 2)."""
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
    root = course_root()
    if args.solutions is None and not (root / "nbgrader_config.py").is_file():
        fail(
            "no course found: grade.py reads nbgrader_config.py and solutions/ from the course's folder, the checkout "
            "it runs from or, where the course was installed as a regular package, the working folder: run it from "
            "the course's folder, or install the course in place (pip install -e PATH)"
        )
    solutions = (args.solutions or root / "solutions").resolve()
    available = [p.name for p in lesson_dirs(solutions)]
    lessons = sorted(args.lessons or available)
    unknown = [slug for slug in lessons if slug not in available]
    if unknown or not lessons:
        fail(
            f"no such lesson in {solutions}: {', '.join(unknown) or '(none at all)'}"
            + (f" (lessons: {', '.join(available)})" if available else "")
        )
    due = {}
    if args.due_dates is not None:
        try:
            due = parse_due_dates(args.due_dates)
        except (OSError, ValueError) as error:
            fail(f"--due-dates: {error}")
        unknown = sorted(set(due) - set(available))
        if unknown:
            fail(f"--due-dates: no such lesson in {solutions}: {', '.join(unknown)}")
    students = list_students(submissions)
    if not students:
        fail(f"{args.submissions} has no student folders (expected {args.submissions}/<student>/<lesson>/)")
    indexed = list(enumerate(students))
    if shard:
        indexed = [(i, s) for i, s in indexed if i % shard[1] == shard[0] - 1]
    problem = None if args.no_isolation else isolation.unavailable()
    if problem:
        fail(f"{problem}. Or pass --no-isolation (a submission could then read and change what you can)")
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        if any(args.keep.iterdir()):
            fail(f"--keep {args.keep}: the folder must be empty")
    settings = Settings(
        # the class's seed: the one given, else the course's own, kept with it (grading/settings.py)
        seed=args.seed if args.seed is not None else course_seed(solutions.parent),
        timeout=args.timeout if args.timeout is not None else load_config(root).Execute.timeout,
        memory_gb=args.memory_limit,
        threads=kernel_threads(args.jobs),
        isolate=not args.no_isolation,
        run_demonstrations=args.run_demonstrations,
    )
    return Plan(args, out, submissions, solutions, lessons, indexed, settings, shard, due)


def prepare(plan: Plan, run: Path) -> tuple[dict[str, Path], dict[tuple[str, str], str], Settings]:
    """The courses a run grades in, in `run`: each submission is graded against the edition it was made from
    (English, or ko/solutions/ for one whose notebook says it is Korean), one nbgrader course per edition in use,
    English first; ({language: course}, {(student, lesson): language}, the settings with the kit's copy)."""
    sources = editions(plan.solutions)
    chosen = {}
    for _index, student in plan.students:
        for slug in plan.lessons:
            language = declared_language(plan.submissions / student / slug, slug)
            has_lesson = language in sources and (sources[language] / slug).is_dir()
            chosen[(student, slug)] = language if has_lesson else ENGLISH
    courses = {}
    for language in [ENGLISH, *sorted(set(chosen.values()) - {ENGLISH})]:
        name = "course" if language == ENGLISH else f"course-{language}"
        wanted = sorted({s for (_student, s), lang in chosen.items() if lang == language})
        courses[language] = prepare_course(
            run, sources[language], plan.lessons if language == ENGLISH else wanted, name, plan.due
        )
    kit = prepare_kit(run / "kit")
    return courses, chosen, dataclasses.replace(plan.settings, kit_dir=str(kit))


def grade_all(plan: Plan, tasks: list[Task], cells: dict, chosen: dict, writer: CsvWriter, server) -> dict:
    """Every task graded, `jobs` at a time, each row appended to the CSV and printed as it is known; the results."""
    results = {}
    with ThreadPoolExecutor(max_workers=plan.args.jobs) as pool:
        futures = {pool.submit(run_worker, t, plan.args.notebook_timeout, server): t for t in tasks}
        for future in as_completed(futures):
            task = futures[future]
            result = future.result()
            edition = chosen[(task.student, task.lesson)]
            result.notes = _student_notes(task.student, edition) + _edition_notes(edition) + result.notes
            results[(task.student, task.lesson)] = (task, result)
            row = make_row(task.student, task.lesson, cells[task.lesson], result, task.submitted_at)
            writer.append(row)
            flagged = " FLAGGED" if row["flags"] else ""
            print(
                f"  {csv_text(task.student, 40):<20} {task.lesson}: {row['total']}/{row['max']}{flagged} "
                f"({result.seconds:.1f} s)",
                file=sys.stderr,
            )
    return results


def add_manual(kept: Path, out: Path) -> int:
    """--manual-grades: the grades entered in formgrader in `kept` (a --keep folder), into the CSV `out` grade.py
    wrote and its per-student table; the lessons' cells are those of the course kept there."""
    solutions = kept / "course" / "solutions"
    if not (kept / "course" / "gradebook.db").is_file():
        fail(f"--manual-grades {kept}: not a folder grade.py --keep kept (no course/gradebook.db in it)")
    if not out.is_file():
        fail(f"--manual-grades: --out {out} does not exist (give the CSV grade.py wrote)")
    with open(out, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        columns, rows = list(reader.fieldnames or []), list(reader)
    if columns[:2] != ["student", "lesson"]:
        fail(f"--manual-grades: {out} is not a CSV written by grade.py")
    cells = {lesson: graded_cells(solutions / lesson) for lesson in {r["lesson"] for r in rows}}
    changed = apply_manual_grades(rows, manual_grades(kept), cells)
    write_csv(out, rows, columns)
    totals = write_totals(out, rows, solutions)
    print(f"{changed} grades entered in formgrader written into {out} and {totals}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """grade.py: plan the run, prepare its courses, grade every submission, report (docs/teach.md)."""
    args = parse_args(argv)
    out = check_out(args.out)
    if args.merge:
        return merge(args.merge, out, (args.solutions or course_root() / "solutions").resolve())
    if args.manual_grades:
        return add_manual(args.manual_grades, out)
    the_plan = plan(args, out)
    lessons, settings = the_plan.lessons, the_plan.settings
    shard = the_plan.shard
    print(
        f"grading {len(the_plan.students)} students x {len(lessons)} lessons, --jobs {args.jobs}"
        + (
            ""
            if any(v in os.environ for v in isolation.THREAD_VARIABLES)
            else f" ({settings.threads} torch threads each)"
        )
        + f", seed {settings.seed}"
        + (f", shard {shard[0]}/{shard[1]}" if shard else ""),
        file=sys.stderr,
    )
    server = worker_server([the_plan.solutions / slug / f"{slug}.ipynb" for slug in lessons])
    with run_folder(args.keep) as run:
        try:
            courses, chosen, settings = prepare(the_plan, run)
        except CourseError as error:
            print(f"grade.py: error: {error}", file=sys.stderr)
            return 1
        cells = {slug: graded_cells(courses[ENGLISH] / "solutions" / slug) for slug in lessons}
        columns = ["student", "lesson"]
        for slug in lessons:
            columns += [g for g, _points, _manual in cells[slug] if g not in columns]
        writer = CsvWriter(out, columns + FIXED_COLUMNS_END)
        tasks = []
        ids = student_ids(
            list_students(the_plan.submissions)
        )  # every student's, so a shard's ids are the class's
        for _index, student, slug in grading_order(the_plan.students, lessons):
            sid = ids[student]
            work = run / "work" / f"{sid}-{slug}"
            work.mkdir(parents=True)
            folder = the_plan.submissions / student / slug
            language = chosen[(student, slug)]
            tasks.append(
                Task(student, sid, slug, str(folder), str(courses[language]), str(work), settings, language,
                     submitted_at=submission_time(folder))
            )  # fmt: skip
        try:
            results = grade_all(the_plan, tasks, cells, chosen, writer, server)
        except KeyboardInterrupt:
            print("interrupted: the CSV holds the rows graded so far", file=sys.stderr)
            writer.finish(_order(lessons))
            return 130
        flag_copies(results)
        writer.rows = [
            make_row(t.student, t.lesson, cells[t.lesson], r, t.submitted_at) for t, r in results.values()
        ]
        rows = writer.finish(_order(lessons))
        if args.keep is not None:
            for (student, slug), (task, result) in sorted(results.items()):
                if result.autograded:
                    import_into_gradebook(
                        Path(task.template), student, task.student_id, slug, result, task.submitted_at
                    )
    totals = write_totals(out, rows, the_plan.solutions)
    print_summary(rows)
    print(f"wrote {out} and {totals}", file=sys.stderr)
    return 0


def _edition_notes(language: str) -> list[str]:

    if language == ENGLISH:
        return []
    return [
        _("graded against the {language} edition ({language}/solutions/)", language).format(language=language)
    ]


def _student_notes(student: str, language: str) -> list[str]:
    text = _(
        "the student folder's name starts with '.' (hidden on most systems): check it is a student", language
    )
    return [text] if student.startswith(".") else []


def _order(lessons: list[str]):
    return lambda row: (row["student"], lessons.index(row["lesson"]))


@contextlib.contextmanager
def run_folder(keep: Path | None):
    if keep is None:
        with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
            yield Path(tmp)
        return
    yield keep.resolve()
