"""Shared pytest setup: the test suite never touches the network.

Hugging Face libraries read these variables once, at import, so they are set here, before any test
module imports ``datasets``/``transformers`` (https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables).
"""

import os
import shutil
import sys
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

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1] / "scripts")
)  # the scripts import as modules in tests
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


# ---- the grading mode and the GPU, as a check sees them ----------------------------------------------------------


@pytest.fixture
def learner_mode(monkeypatch):
    """A learner's notebook: a check whose hardware is missing prints NOT CHECKED HERE, no cases are drawn."""
    monkeypatch.delenv(kit.GRADING_ENV, raising=False)
    monkeypatch.setattr(kit, "_MODE", kit.LEARNER)
    monkeypatch.setattr(kit, "_SEED", None)


@pytest.fixture
def strict_mode(monkeypatch):
    """scripts/grade.py's kernel: a check whose hardware is missing raises NotGradedHere; cases are drawn from a
    grading seed. The kit reads both once, at import, so the fixture sets what the import would have read."""
    monkeypatch.setenv(kit.GRADING_ENV, "strict")
    monkeypatch.setattr(kit, "_MODE", kit.STRICT)
    monkeypatch.setattr(kit, "_SEED", 20261123)


@pytest.fixture
def no_gpu(monkeypatch):
    """Behave as this CPU machine does, even where the suite runs on a GPU box."""
    monkeypatch.setattr(hardware, "gpu_info", lambda index=0: None)


# ---- the nbgrader pipeline: one grading run of the real lessons, shared by test_grading_roundtrip.py and
# test_learner_versions.py (each lesson is executed twice in all: solved and blank). Under pytest-xdist the two files
# may run on different workers: the first to ask grades, under a file lock in the run's shared temporary folder, and
# the other reads what it kept, so the lessons are graded once per test run. ----------------------------------------


#: CI's drift check grades with --run-demonstrations: every cell of every solution then runs once there, graded (no
#: cell may error: tests/test_grading_roundtrip.py), instead of once executed and once graded
RUN_DEMONSTRATIONS = os.environ.get("MEMLAB_TEST_RUN_DEMONSTRATIONS") == "1"


def _shared_tmp(tmp_path_factory) -> Path:
    """The temporary folder every xdist worker of this run shares (the run's own folder without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def real_grading(tmp_path_factory):
    """scripts/grade.py on every lesson in solutions/ with two students: `solved` submits the solution notebook (and
    lesson 08's run), `blank` the learner version (built from the same snapshot of solutions/). Kept: the CSV rows,
    the nbgrader course with every submission (`course`; `autograded(student, lesson)` is the path of an autograded
    notebook) and the script's output."""
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
    course = tmp / "course" / "course"
    return SimpleNamespace(
        run_demonstrations=RUN_DEMONSTRATIONS,
        slugs=graded["slugs"],
        solutions=tmp / "solutions",
        rows=graded["rows"],
        course=course,
        autograded=lambda student, slug: next(
            (course / "autograded").glob(f"s*-{student}/{slug}/{slug}.ipynb")
        ),
        stdout=graded["stdout"],
        stderr=graded["stderr"],
    )


def _grade_real_lessons(tmp: Path) -> dict:
    """Grade the real lessons into `tmp`; what `real_grading` keeps, as JSON-able data."""
    from execute_solutions import hand_in
    from nbgrader_pipeline import SOLUTIONS, build_lessons, lesson_slugs, run_grade

    from grading.course import HANDED_IN

    slugs = lesson_slugs()
    if not slugs:
        return {"skip": "no lesson in solutions/ yet"}
    snapshot = tmp / "solutions"  # lessons are being edited while tests run: grade exactly what was built
    for slug in slugs:
        shutil.copytree(
            SOLUTIONS / slug, snapshot / slug, ignore=shutil.ignore_patterns(".ipynb_checkpoints", *HANDED_IN)
        )
    released = build_lessons.render(snapshot)
    submissions = tmp / "submissions"
    for slug in slugs:
        (submissions / "solved" / slug).mkdir(parents=True)
        shutil.copy(snapshot / slug / f"{slug}.ipynb", submissions / "solved" / slug / f"{slug}.ipynb")
        hand_in(
            slug, submissions / "solved" / slug
        )  # lesson 08: the run the solution trained, handed in with it
        (submissions / "blank" / slug).mkdir(parents=True)
        (submissions / "blank" / slug / f"{slug}.ipynb").write_bytes(released[f"{slug}/{slug}.ipynb"])
    if "02-numeric-formats" in slugs:  # a learner whose ulp calls the grader's own reference implementation
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


# ---- tiers: `-m "not slow"` is the fast tier (README, Develop) ----------------------------------------------------


def pytest_collection_modifyitems(config, items):
    """nbval's items execute a solution notebook: they belong to the full tier, with every test marked slow."""
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.slow)
