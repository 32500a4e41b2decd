"""Shared pytest setup: the test suite never touches the network.

Hugging Face libraries read these variables once, at import, so they are set here, before any test
module imports ``datasets``/``transformers`` (https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables).
"""

import os
import shutil
from pathlib import Path
from types import SimpleNamespace

# Under pytest-xdist the workers share the CPUs: torch in each worker, and in every kernel a worker starts, gets its
# share of them (as grade.py's --jobs does), not one thread per CPU each; 2 workers x 2 threads on 2 cores ran two
# lesson 08 notebooks 4-5 times slower than one after the other. Set before torch is imported; a value you set wins.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    os.environ.setdefault(
        "OMP_NUM_THREADS", str(max(1, _cpus // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    )

import pytest  # noqa: E402

import autograders.kit as kit  # noqa: E402
import memlab.hardware as hardware  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


# ---- the grading mode and the GPU, as a check sees them ----------------------------------------------------------


@pytest.fixture
def kit_context():
    """`kit_context(mode, seed)` runs the rest of the test in that kit context (autograders.kit.context); a later call
    replaces it; the test's end leaves it."""
    import contextlib

    with contextlib.ExitStack() as stack:
        yield lambda mode, seed=None: stack.enter_context(kit.context(mode, seed))


@pytest.fixture
def learner_mode(kit_context):
    """A learner's notebook: a check whose hardware is missing prints NOT CHECKED HERE, no cases are drawn."""
    kit_context(kit.LEARNER)


@pytest.fixture
def strict_mode(kit_context):
    """scripts/grade.py's kernel and judge in one process: a check whose hardware is missing raises NotGradedHere;
    cases are drawn from a grading seed."""
    kit_context(kit.STRICT, 20261123)


@pytest.fixture
def no_gpu(monkeypatch):
    """Behave as this CPU machine does, even where the suite runs on a GPU box."""
    monkeypatch.setattr(hardware, "gpu_info", lambda index=0: None)


# ---- the nbgrader pipeline: one grading run of the real lessons, shared by test_grading_roundtrip.py and
# test_learner_versions.py (each lesson is executed twice in all: solved and blank). Under pytest-xdist the two files
# may run on different workers: the first to ask grades, under a file lock in the run's shared temporary folder, and
# the other reads what it kept, so the lessons are graded once per test run. ----------------------------------------


#: CI's drift check grades with --run-demonstrations: every cell of every solution then runs once there, graded (no
#: cell may error: tests/grader/test_grading_roundtrip.py), instead of once executed and once graded
RUN_DEMONSTRATIONS = os.environ.get("MEMLAB_TEST_RUN_DEMONSTRATIONS") == "1"

#: the students of the grading run: (edition, kind); "solved" hands in the solution, "blank" the learner version.
#: A Korean student's notebook is the Korean edition's (ko/solutions/, ko/lessons/): grade.py grades it against that
#: edition, in Korean. Each solution is graded once per CI run: the full tier grades the English one as an instructor
#: does by default (demonstrations left out: nbval executes every English cell), CI's drift check
#: (MEMLAB_TEST_RUN_DEMONSTRATIONS=1, grade.py --run-demonstrations, the newest releases) the Korean one with every
#: cell run. The Korean code is the English code token for token (scripts/build_lessons.py checks it), so every cell
#: of every lesson runs in full once in each language. The blank learner version is graded to zero once, in the drift
#: check: the Korean one, built by the same pipeline as the English one and graded by the same code, under the
#: releases a learner installs (the pinned CPU torch of the full tier is no learner's); "blank", the English one, is
#: graded where this table is used with it (a run of your own: `GRADED` below).
STUDENTS = {
    "solved": ("en", "solved"),
    "blank": ("en", "blank"),
    "ko-solved": ("ko", "solved"),
    "ko-blank": ("ko", "blank"),
}
GRADED = ("ko-solved", "ko-blank") if RUN_DEMONSTRATIONS else ("solved",)


def _shared_tmp(tmp_path_factory) -> Path:
    """The temporary folder every xdist worker of this run shares (the run's own folder without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def real_grading(tmp_path_factory):
    """scripts/grade.py on every lesson in solutions/ with the students of `GRADED` (`STUDENTS`): `solved` submits
    the solution notebook (and lesson 08's run), `blank` the learner version (built from the same snapshot of
    solutions/), `ko-solved` and `ko-blank` the same from the Korean edition. Kept: the CSV rows (`row(student,
    lesson)`, skipped for a student this run does not grade), the nbgrader courses with every submission (`courses`,
    one per edition; `autograded(student, lesson)` is the path of an autograded notebook) and the script's output."""
    import fcntl
    import json

    tmp = _shared_tmp(tmp_path_factory) / "real-grading"
    tmp.mkdir(exist_ok=True)
    with open(tmp.parent / "real-grading.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        record = tmp / "graded.json"
        if not record.is_file():
            record.write_text(json.dumps(_grade_real_lessons(tmp)))
        graded = json.loads(record.read_text())
    if graded.get("skip"):
        pytest.skip(graded["skip"])
    assert graded["returncode"] == 0, f"scripts/grade.py failed:\n{graded['stdout']}\n{graded['stderr']}"
    courses = {"en": tmp / "course" / "course", "ko": tmp / "course" / "course-ko"}

    def graded_or_skip(student: str) -> None:
        if student not in GRADED:
            pytest.skip(f"{student} is not graded in this run (it grades {', '.join(GRADED)})")

    def student(kind: str) -> str:
        """The student of this run who hands in `kind` ("solved" or "blank"), in whichever edition the run grades."""
        graded_of_kind = [s for s in GRADED if STUDENTS[s][1] == kind]
        if not graded_of_kind:
            pytest.skip(f"no {kind} notebook is graded in this run (it grades {', '.join(GRADED)})")
        return graded_of_kind[0]

    def autograded(student: str, slug: str) -> Path:
        graded_or_skip(student)
        course = courses[STUDENTS[student][0]]
        return course / "autograded" / student / slug / f"{slug}.ipynb"  # a plain name is its own nbgrader id

    def row(student: str, slug: str) -> dict:
        from nbgrader_pipeline import row_for

        graded_or_skip(student)
        return row_for(graded["rows"], student, slug)

    return SimpleNamespace(
        run_demonstrations=RUN_DEMONSTRATIONS,
        graded=GRADED,
        slugs=graded["slugs"],
        solutions=tmp / "solutions",
        editions={"en": tmp / "solutions", "ko": tmp / "ko" / "solutions"},
        rows=graded["rows"],
        row=row,
        courses=courses,
        autograded=autograded,
        student=student,
        # the language of the edition a student is graded against
        language=lambda student: STUDENTS[student][0],
        stdout=graded["stdout"],
        stderr=graded["stderr"],
    )


def _grade_real_lessons(tmp: Path) -> dict:
    """Grade the real lessons into `tmp`; what `real_grading` keeps, as JSON-able data."""
    from nbgrader_pipeline import SOLUTIONS, build_lessons, lesson_slugs, run_grade

    from coursetools.execute_solutions import hand_in
    from grading.course import HANDED_IN

    slugs = lesson_slugs()
    if not slugs:
        return {"skip": "no lesson in solutions/ yet"}
    # lessons are being edited while tests run: grade exactly what was built (the Korean edition next to the English
    # one, where grade.py looks for it)
    snapshots = {"en": tmp / "solutions", "ko": tmp / "ko" / "solutions"}
    ignore = shutil.ignore_patterns(".ipynb_checkpoints", *HANDED_IN)
    for slug in slugs:
        shutil.copytree(SOLUTIONS / slug, snapshots["en"] / slug, ignore=ignore)
        shutil.copytree(SOLUTIONS.parent / "ko" / "solutions" / slug, snapshots["ko"] / slug, ignore=ignore)
    released = {edition: build_lessons.render(folder) for edition, folder in snapshots.items()}
    snapshot = snapshots["en"]
    submissions = tmp / "submissions"
    for student in GRADED:
        edition, kind = STUDENTS[student]
        for slug in slugs:
            folder = submissions / student / slug
            folder.mkdir(parents=True)
            if kind == "solved":
                shutil.copy(snapshots[edition] / slug / f"{slug}.ipynb", folder / f"{slug}.ipynb")
                hand_in(slug, folder)  # lesson 08: the run the solution trained, handed in with it
            else:
                (folder / f"{slug}.ipynb").write_bytes(released[edition][f"{slug}/{slug}.ipynb"])
    if (
        "02-numeric-formats" in slugs and not RUN_DEMONSTRATIONS
    ):  # a learner whose ulp calls the grader's own reference implementation
        import nbformat

        nb = nbformat.read(snapshot / "02-numeric-formats" / "02-numeric-formats.ipynb", as_version=4)
        (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "e4_ulp"]
        cell.source = (
            "from autograders.references.lesson02 import ulp as _grader_ulp\n\n\n"
            "def ulp(x, fmt):\n    return _grader_ulp(x, fmt)\n"
        )
        (submissions / "reference_caller" / "02-numeric-formats").mkdir(parents=True)
        nbformat.write(
            nb, submissions / "reference_caller" / "02-numeric-formats" / "02-numeric-formats.ipynb"
        )
    proc, rows = run_grade(
        submissions,
        tmp / "grades.csv",
        "--solutions",
        str(snapshot),
        "--keep",
        str(tmp / "course"),
        "--jobs",
        "2",
        *(["--run-demonstrations"] if RUN_DEMONSTRATIONS else []),
    )
    return {
        "slugs": slugs,
        "rows": rows,
        "returncode": proc.returncode,
        "stdout": proc.stdout,
        "stderr": proc.stderr,
    }


# ---- the 7B simulations' disk cache: one per test run -------------------------------------------------------------


def pytest_configure(config):
    """The simulations' disk cache (memlab.estimate.simulation_cache) of this run: a fresh folder, shared by the
    xdist workers (started after this, they inherit the variable), the kernels nbval starts and the judges grading
    starts; never the machine's own cache, so that no test depends on what an earlier run left there. And
    pytest-xdist's files in the order `pytest_collection_modifyitems` gives them."""
    import atexit
    import tempfile

    from memlab.estimate import CACHE_ENV

    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: hand out files in our order (see below)
        config.option.loadscopereorder = False
    if CACHE_ENV not in os.environ and not hasattr(config, "workerinput"):
        folder = tempfile.mkdtemp(prefix="memlab-simulations-")
        os.environ[CACHE_ENV] = folder
        atexit.register(shutil.rmtree, folder, ignore_errors=True)


# ---- tiers: `-m "not slow"` is the fast tier (docs/develop.md) ----------------------------------------------------


#: where CI's time went, file by file, in the last profiled run (scripts/ci_profile.py)
CI_PROFILE = Path(__file__).resolve().parents[1] / "results" / "ci_profile.json"


def profiled_seconds() -> dict[str, float]:
    """{test file or notebook, relative to the repository: its seconds in the last profiled CI run}; {} without it."""
    import json

    try:
        return dict(json.loads(CI_PROFILE.read_text())["pytest"]["pinned"]["seconds_by_file"])
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def pytest_collection_modifyitems(config, items):
    """nbval's items execute a solution notebook: they belong to the full tier, with every test marked slow.

    The slowest files run first: items are ordered by their file's seconds in the last profiled CI run, slowest
    first (a stable sort: a file's items keep their order, and files the profile does not know come last, in
    collection order). pytest-xdist's `--dist loadfile` hands files to the workers in this order (`pytest_configure`
    turns off its own order, by number of tests, as `--no-loadscope-reorder` does), so that no long file (the
    grading round trip, lesson 08's notebook) starts last and runs alone on one core at the end."""
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
    seconds = profiled_seconds()
    # a profile taken before tests/ was grouped into folders (issue 37, item 6) names tests/test_kit.py where the file
    # is now tests/kit/test_kit.py: a test file's name is unique in tests/, so it is also looked up by its name
    by_name = {Path(f).name: s for f, s in seconds.items() if f.startswith("tests/") and f.endswith(".py")}
    root = config.rootpath

    def profiled(item) -> float:
        path = item.path.relative_to(root).as_posix()
        return seconds.get(path, by_name.get(item.path.name, 0.0) if path.startswith("tests/") else 0.0)

    items.sort(key=lambda item: -profiled(item))
