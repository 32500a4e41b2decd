"""scripts/grade.py on the fixture lesson (tests/fixtures/minicourse/solutions/00-fixture): the mechanics of grading
for credit — messy submissions, runaway code, and a class that tries to cheat.

The fixture has three exercises (e1 square 4 points, e2 add 4, e3 gpu_ones 2: GPU only) and one written answer
(w1, 2 points, graded by hand). One grading run (module fixture, --jobs 2) grades every student below; each test
reads that student's CSV row. A cheat edits e2 to a WRONG answer (`a - b`) and then tries to earn its 4 points
anyway: it must not, and where the evidence can be seen at run time the row is flagged.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import time

import nbformat
import pytest
from nbgrader_pipeline import (
    CODE_STUB,
    FIXTURE_SOLUTIONS,
    ROOT,
    SCRIPTS,
    build_lessons,
    graded_cells,
    row_for,
    run_grade,
    tree_digest,
    write_notebook,
)

from memlab.hardware import unmet_requirements

SLUG = "00-fixture"
NOTEBOOK = f"{SLUG}.ipynb"
SOLUTION = FIXTURE_SOLUTIONS / SLUG / NOTEBOOK
AUTO = {"e1_square_check": 4.0, "e2_add_check": 4.0, "e3_gpu_ones_check": 2.0}
MANUAL = "w1_square_sign"
HAS_GPU = unmet_requirements(cuda=True) is None
GPU = AUTO["e3_gpu_ones_check"] if HAS_GPU else 0.0
SOLVED = {"e1_square_check": 4.0, "e2_add_check": 4.0, "e3_gpu_ones_check": GPU}
TIMEOUT = 6  # seconds per cell: the slowest cell of the fixture (import torch) takes ~2 s on 2 cores
WRONG_ADD = ("return a + b", "return a - b")

#: a learner-made check kit that passes everything, shipped next to the notebook
SHADOW_KIT = """
def check(name):
    return lambda fn: (lambda *args, **kwargs: None)

def needs_hardware(**kwargs):
    pass

def _anything(*args, **kwargs):
    return None

call = expect_callable = expect_close = expect_equal = expect_type = _anything
"""
SHADOW_FILES = {
    "autograders/__init__.py": "",
    "autograders/kit.py": SHADOW_KIT,
    "memlab/__init__.py": "raise ImportError('the learner-made memlab was imported')\n",
    "fixture_checks.py": "check_square = check_add = check_gpu_ones = lambda fn: None\n",
}


def cheats(subs, out, course) -> dict[str, str]:
    """Code appended to the (wrong) e2 solution cell: each tries to earn e2's points without a right answer."""
    victim = subs / "solved" / SLUG / NOTEBOOK
    return {
        "cheat_replace_check": "import fixture_checks\nfixture_checks.check_add = lambda fn: None\n",
        "cheat_plant_module": (
            "import sys, types\nfake = types.ModuleType('fixture_checks')\n"
            "fake.check_add = fake.check_square = fake.check_gpu_ones = lambda fn: None\n"
            "sys.modules['fixture_checks'] = fake\n"
        ),
        "cheat_patch_helper": "import fixture_checks\nfixture_checks.expect_close = lambda *a, **k: None\n",
        "cheat_patch_checkfailed": (
            "import autograders.kit as kit, fixture_checks\n"
            "class Quiet(Exception):\n    pass\n"
            "kit.CheckFailed = fixture_checks.CheckFailed = Quiet\n"
        ),
        "cheat_silence_errors": (
            "import builtins\n"
            "get_ipython().set_custom_exc((BaseException,), lambda *a, **k: print('✓ e2_add: 3 cases passed'))\n"
        ),
        "cheat_transformer": (
            "get_ipython().input_transformers_cleanup.append(\n"
            "    lambda lines: ['pass\\n'] if any('check_add' in line for line in lines) else lines)\n"
        ),
        "cheat_reload_kit": (
            "import autograders.kit as kit, importlib, fixture_checks\n"
            "kit.check = lambda name: (lambda fn: (lambda *a, **kw: None))\n"
            "importlib.reload(fixture_checks)\n"
        ),
        "cheat_minus_one": "import fixture_checks\nfixture_checks.check_add = lambda fn: -1\n",
        "cheat_forge_pass": (
            "import sys, fixture_checks\n"
            "fixture_checks.check_add = lambda fn: sys.audit('memlab.check.passed', 'e2_add', 3)\n"
        ),
        "cheat_read_files": (
            "import glob\n"
            f"for path in [{str(FIXTURE_SOLUTIONS / SLUG / NOTEBOOK)!r}, {str(ROOT / 'README.md')!r},\n"
            "             *glob.glob('/tmp/**/gradebook.db', recursive=True)[:3]]:\n"
            "    try:\n        print(open(path).read()[:80])\n    except Exception as error:\n"
            "        print('refused:', type(error).__name__)\n"
        ),
        "cheat_write_files": (
            f"for path in [{str(victim)!r}, {str(ROOT / 'autograders' / 'kit.py')!r},\n"
            f"             {str(out)!r}]:\n"
            "    try:\n        open(path, 'a').write('\\n# tampered\\n')\n    except Exception as error:\n"
            "        print('refused:', type(error).__name__)\n"
            "import shutil\n"
            f"shutil.rmtree({str(course / 'course' / 'solutions')!r}, ignore_errors=True)\n"
        ),
        "cheat_detached": (
            "import subprocess\n"
            f"subprocess.Popen(['sh', '-c', 'sleep 4; echo hacked > {out}; echo hacked >> {victim}'],\n"
            "                 start_new_session=True)\n"
        ),
        "cheat_kill_grader": (
            "import os, signal\n"
            "for pid in [int(p) for p in os.listdir('/proc') if p.isdigit()] + [os.getppid()]:\n"
            "    if pid != os.getpid():\n"
            "        try:\n            os.kill(pid, signal.SIGKILL)\n        except Exception:\n            pass\n"
        ),
    }


def _cell(nb, grade_id: str):
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return cell


def _edit(nb, grade_id: str, old: str, new: str) -> None:
    cell = _cell(nb, grade_id)
    assert old in cell.source
    cell.source = cell.source.replace(old, new)


def _solution():
    return nbformat.read(SOLUTION, as_version=4)


def _with_wrong_add(extra: str = ""):
    nb = _solution()
    _edit(nb, "e2_add", *WRONG_ADD)
    _cell(nb, "e2_add").source += "\n" + extra
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grading-mechanics")
    learner = nbformat.reads(
        build_lessons.render(FIXTURE_SOLUTIONS)[f"{SLUG}/{NOTEBOOK}"].decode(), as_version=4
    )
    subs = tmp / "submissions"
    out = tmp / "grades.csv"
    put = lambda student, nb, name=NOTEBOOK: write_notebook(nb, subs / student / SLUG, name)  # noqa: E731

    put("solved", _solution())
    put("blank", learner)
    put("spaced name é", _solution())
    put(".dotted", _solution())

    tampered = _with_wrong_add()
    for cell in tampered.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            cell.source = "pass"
    put("tampered", tampered)

    looping = _solution()
    _edit(looping, "e1_square", "return x * x", "while True:\n        pass")
    _cell(looping, "e1_square").source += "\n\nsquare(2)"
    put("looping", looping)

    swallowing = _solution()
    _cell(
        swallowing, "e1_square"
    ).source = "import time\nwhile True:\n    try:\n        time.sleep(0.2)\n    except:  # noqa: E722\n        pass\n"
    put("swallowing", swallowing)

    killer = _solution()
    _cell(killer, "e2_add").source += "\nimport os\nos._exit(1)"
    put("killer", killer)

    memory_bomb = _solution()
    _cell(memory_bomb, "e2_add").source = "hog = bytearray(6 * 2**30)\n" + _cell(memory_bomb, "e2_add").source
    put("memory_bomb", memory_bomb)

    process_bomb = _solution()
    # copies of the kernel, each asleep, forked by the kernel itself until a limit stops it: the kernel's own fork
    # fails (RLIMIT_NPROC) or the sandbox's monitor counts more than 256 (root, where RLIMIT_NPROC does not bind).
    # (A doubling bomb, os.fork() ten times, raced: the kernel could finish its ten forks before its children
    # reached the limit, then sleep until the cell's timeout, leaving no evidence of the limit.)
    _cell(process_bomb, "e2_add").source = (
        "import os, time\nfor _ in range(1024):\n    if os.fork() == 0:\n        time.sleep(60)\n"
        "        os._exit(0)\ntime.sleep(60)\n" + _cell(process_bomb, "e2_add").source
    )
    put("process_bomb", process_bomb)

    warning = _solution()
    _edit(
        warning,
        "e2_add",
        "return a + b",
        "import sys, warnings\n    warnings.warn('a harmless warning')\n"
        "    print('to stderr', file=sys.stderr)\n    return a + b",
    )
    put("warning", warning)

    put("shadow", learner)
    for relative, text in SHADOW_FILES.items():
        (subs / "shadow" / SLUG / relative).parent.mkdir(parents=True, exist_ok=True)
        (subs / "shadow" / SLUG / relative).write_text(text)

    put("misnamed", _solution(), "00-fixture-Copy1.ipynb")
    put("wrong_lesson", _solution(), "01-memory-anatomy.ipynb")
    (subs / "corrupt" / SLUG).mkdir(parents=True)
    (subs / "corrupt" / SLUG / NOTEBOOK).write_text('{"cells": [')
    (subs / "empty" / SLUG).mkdir(parents=True)
    (subs / "empty" / SLUG / NOTEBOOK).write_bytes(b"")
    (subs / "v3" / SLUG).mkdir(parents=True)
    (subs / "v3" / SLUG / NOTEBOOK).write_text(nbformat.writes(nbformat.convert(_solution(), 3), version=3))
    (subs / "symlink_etc" / SLUG).mkdir(parents=True)
    (subs / "symlink_etc" / SLUG / NOTEBOOK).symlink_to("/etc/passwd")
    (subs / "symlink_peer" / SLUG).mkdir(parents=True)
    (subs / "symlink_peer" / SLUG / NOTEBOOK).symlink_to(subs / "solved" / SLUG / NOTEBOOK)

    duplicated = _solution()
    index = duplicated.cells.index(_cell(duplicated, "e1_square_check"))
    copy = nbformat.from_dict(dict(_cell(duplicated, "e1_square_check")))
    copy.id = "duplicate-of-e1-check"
    duplicated.cells.insert(index + 1, copy)
    put("duplicated", duplicated)
    deleted_check = _solution()
    deleted_check.cells.remove(_cell(deleted_check, "e2_add_check"))
    put("deleted_check", deleted_check)
    no_cells = _solution()
    no_cells.cells = []
    put("no_cells", no_cells)

    env_gpu = _solution()
    _cell(env_gpu, "e3_gpu_ones").source += (
        "\nimport os, importlib, torch, autograders.kit\nos.environ.pop('COURSE_GRADING', None)\n"
        "torch.cuda.is_available = lambda: False\nimportlib.reload(autograders.kit)\n"
    )
    put("cheat_env_gpu", env_gpu)
    course = tmp / "course"
    for student, code in cheats(subs, out, course).items():
        put(student, _with_wrong_add(code))

    before = tree_digest(subs)
    repo_before = source_digest()
    start = time.perf_counter()
    proc, rows = run_grade(
        subs,
        out,
        "--solutions",
        str(FIXTURE_SOLUTIONS),
        "--timeout",
        str(TIMEOUT),
        "--keep",
        str(course),
        "--jobs",
        "2",
        "--seed",
        "7",
        "--memory-limit",
        "3",
    )
    seconds = time.perf_counter() - start
    time.sleep(5)  # the detached process of cheat_detached would have written by now
    with open(out, newline="", encoding="utf-8") as fh:
        rows_later = list(csv.DictReader(fh))
    return {
        "proc": proc,
        "rows": rows,
        "rows_later": rows_later,
        "seconds": seconds,
        "subs": subs,
        "out": out,
        "course": course,
        "before": before,
        "after": tree_digest(subs),
        "repo_before": repo_before,
        "repo_after": source_digest(),
    }


def source_digest() -> str:
    """The course's own sources that a submission could try to change: the kit and the fixture lesson."""
    import hashlib

    digest = hashlib.sha256()
    for folder in (ROOT / "autograders", FIXTURE_SOLUTIONS):
        for path in sorted(folder.rglob("*")):
            if path.suffix in (".py", ".ipynb") and "__pycache__" not in path.parts:
                digest.update(str(path).encode() + path.read_bytes())
    return digest.hexdigest()


def scores(graded, student: str) -> dict[str, float]:
    row = row_for(graded["rows"], student, SLUG)
    return {grade_id: float(row[grade_id]) for grade_id in AUTO}


def row(graded, student: str) -> dict:
    return row_for(graded["rows"], student, SLUG)


pytestmark = pytest.mark.slow


# ---- the batch ---------------------------------------------------------------------------------------------------


def test_exits_zero_and_prints_a_summary(graded):
    proc = graded["proc"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "student" in proc.stdout and "score" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    print(f"graded {len(graded['rows'])} submissions in {graded['seconds']:.0f} s")


def test_csv_columns_rows_and_totals(graded):
    rows = graded["rows"]
    assert list(rows[0]) == [
        "student",
        "lesson",
        *AUTO,
        MANUAL,
        "total",
        "max",
        "needs_manual",
        "flags",
        "notes",
    ]
    students = sorted(p.name for p in graded["subs"].iterdir())
    assert [r["student"] for r in rows] == students
    for r in rows:
        assert r["lesson"] == SLUG and float(r["max"]) == 12
        earned = sum(float(r[g]) for g in AUTO) + (float(r[MANUAL]) if r[MANUAL] else 0)
        assert float(r["total"]) == earned
        assert float(r["needs_manual"]) == (2 if r[MANUAL] == "" else 0)
    totals = graded["out"].with_name("grades-students.csv")
    with open(totals, newline="", encoding="utf-8") as fh:
        by_student = {r["student"]: r for r in csv.DictReader(fh)}
    assert set(by_student) == set(students)
    assert by_student["solved"]["total"] == f"{8 + GPU:g}" and by_student["solved"]["max"] == "12"
    assert by_student["solved"]["flagged_lessons"] == ""
    assert by_student["cheat_forge_pass"]["flagged_lessons"] == SLUG


def test_solved_gets_its_points_and_the_written_answer_waits_for_a_human(graded):
    assert scores(graded, "solved") == SOLVED
    r = row(graded, "solved")
    assert r[MANUAL] == "" and r["needs_manual"] == "2" and r["flags"] == ""
    assert f"{MANUAL}: needs manual grading" in r["notes"]
    if not HAS_GPU:
        assert "e3_gpu_ones_check: NotGradedHere: NOT CHECKED HERE: needs a CUDA GPU" in r["notes"]


def test_blank_gets_zero_with_reasons_and_no_answer_for_the_written_question(graded):
    assert scores(graded, "blank") == dict.fromkeys(AUTO, 0.0)
    r = row(graded, "blank")
    assert r[MANUAL] == "0" and r["needs_manual"] == "0"
    assert "e1_square_check: CheckFailed: e1_square: `square` is not written yet" in r["notes"]
    assert (
        "e3_gpu_ones_check: CheckFailed: e3_gpu_ones: `gpu_ones` is not written yet" in r["notes"]
    )  # on any machine
    assert f"{MANUAL}: no answer written" in r["notes"]


def test_names_with_spaces_unicode_and_a_leading_dot_are_graded(graded):
    assert scores(graded, "spaced name é") == SOLVED
    assert scores(graded, ".dotted") == SOLVED
    assert "starts with '.'" in row(graded, ".dotted")["notes"]


def test_the_gradebook_of_the_kept_course_holds_every_graded_submission_for_formgrader(graded):
    from nbgrader.api import Gradebook

    with Gradebook("sqlite:///" + str(graded["course"] / "course" / "gradebook.db")) as gradebook:
        names = {s.first_name for s in gradebook.students}
        assert {"solved", "spaced name é", ".dotted", "blank"} <= names
        solved = next(s for s in gradebook.students if s.first_name == "solved")
        submission = gradebook.find_submission(SLUG, solved.id)
        assert submission.score == 8 + GPU and submission.needs_manual_grade


# ---- nbgrader's own repairs and the learner's accidents -----------------------------------------------------------


def test_replaced_test_cells_are_restored_from_the_source(graded):
    assert scores(graded, "tampered") == {
        "e1_square_check": 4.0,
        "e2_add_check": 0.0,
        "e3_gpu_ones_check": GPU,
    }
    assert "e2_add_check: CheckFailed" in row(graded, "tampered")["notes"]


def test_an_infinite_loop_loses_only_its_exercise(graded):
    assert scores(graded, "looping") == {**SOLVED, "e1_square_check": 0.0}


def test_a_loop_that_swallows_the_interrupt_loses_only_its_exercise(graded):
    assert scores(graded, "swallowing") == {**SOLVED, "e1_square_check": 0.0}
    assert "did not stop when interrupted" in row(graded, "swallowing")["notes"]


def test_os_exit_in_one_exercise_loses_only_that_exercise(graded):
    assert scores(graded, "killer") == {**SOLVED, "e2_add_check": 0.0}
    assert "the kernel died while it ran" in row(graded, "killer")["notes"]


def test_a_memory_bomb_is_bounded_and_loses_only_its_exercise(graded):
    assert scores(graded, "memory_bomb") == {**SOLVED, "e2_add_check": 0.0}
    assert "e2_add: MemoryError" in row(graded, "memory_bomb")["notes"]


def test_a_process_bomb_is_bounded_and_loses_only_its_exercise(graded):
    assert scores(graded, "process_bomb") == {**SOLVED, "e2_add_check": 0.0}
    notes = row(graded, "process_bomb")["notes"]
    assert (
        "process limit" in notes or "BlockingIOError" in notes or "Resource temporarily unavailable" in notes
    )


def test_writing_to_stderr_costs_nothing(graded):
    assert scores(graded, "warning") == SOLVED
    assert row(graded, "warning")["flags"] == ""


def test_shipped_autograders_and_memlab_are_not_used(graded):
    assert scores(graded, "shadow") == dict.fromkeys(AUTO, 0.0)


def test_the_shadow_kit_would_have_won(tmp_path):
    """Control for the test above: next to the notebook, the learner-made kit shadows the installed one."""
    for relative, text in SHADOW_FILES.items():
        if relative.startswith("autograders/"):
            (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / relative).write_text(text)
    (tmp_path / "fixture_checks.py").write_bytes(
        (FIXTURE_SOLUTIONS / SLUG / "fixture_checks.py").read_bytes()
    )
    code = "import sys; sys.path.insert(0, ''); from fixture_checks import check_square; check_square(None)"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, (
        proc.stderr
    )  # check_square(None) passes: the real kit would raise CheckFailed


@pytest.mark.parametrize(
    "student, note",
    [
        ("misnamed", f"missing: no {SLUG}/{NOTEBOOK} (found 00-fixture-Copy1.ipynb)"),
        ("wrong_lesson", f"missing: no {SLUG}/{NOTEBOOK} (found 01-memory-anatomy.ipynb)"),
        ("corrupt", f"{NOTEBOOK} is not a notebook (not valid JSON"),
        ("empty", f"{NOTEBOOK} is an empty file (0 bytes)"),
        ("symlink_etc", f"{NOTEBOOK} is a symbolic link: not graded"),
        ("symlink_peer", f"{NOTEBOOK} is a symbolic link: not graded"),
    ],
)
def test_an_ungradable_notebook_is_a_row_of_zeros_that_says_why(graded, student, note):
    assert scores(graded, student) == dict.fromkeys(AUTO, 0.0)
    r = row(graded, student)
    assert r["notes"].startswith(note), r["notes"]
    assert "root:" not in r["notes"] and "def square" not in r["notes"]  # a link's target is never read


def test_an_nbformat_3_notebook_is_converted_and_graded(graded):
    assert scores(graded, "v3") == SOLVED
    assert "converted from nbformat 3 to 4" in row(graded, "v3")["notes"]


def test_a_duplicated_graded_cell_is_graded_once_with_a_note(graded):
    assert scores(graded, "duplicated") == SOLVED
    assert (
        "e1_square_check appears 2 times: only the last copy is graded" in row(graded, "duplicated")["notes"]
    )


def test_a_deleted_check_cell_is_put_back_and_said(graded):
    assert scores(graded, "deleted_check") == SOLVED
    assert (
        "e2_add_check: the check cell was missing and was put back" in row(graded, "deleted_check")["notes"]
    )


def test_a_notebook_with_its_cells_deleted_gets_notes(graded):
    assert scores(graded, "no_cells") == dict.fromkeys(AUTO, 0.0)
    notes = row(graded, "no_cells")["notes"]
    for grade_id in AUTO:
        assert f"{grade_id}: the check cell was missing and was put back" in notes
    assert "e1_square: the cell is missing from the notebook" in notes


# ---- cheating: no points, and the evidence in the flags --------------------------------------------------------


CHEATS_FLAGGED = {
    "cheat_replace_check": "never reported a pass for e2_add",
    "cheat_patch_helper": "changed the grading kit",
    "cheat_minus_one": "never reported a pass for e2_add",
    "cheat_transformer": "never reported a pass for e2_add",
    "cheat_reload_kit": "re-ran the grading kit's module fixture_checks.py",
    "cheat_forge_pass": "without running it (sys.audit called by hand)",
    "cheat_read_files": "tried to open",
    "cheat_write_files": "tried to open",
    "cheat_kill_grader": "sent a signal to a process",
    "cheat_env_gpu": "re-ran the grading kit's module kit.py",
}


@pytest.mark.parametrize(
    "student",
    sorted(
        [
            *CHEATS_FLAGGED,
            "cheat_plant_module",
            "cheat_patch_checkfailed",
            "cheat_detached",
            "cheat_silence_errors",
        ]
    ),
)
def test_a_cheat_earns_nothing(graded, student):
    got = scores(graded, student)
    if (
        student == "cheat_env_gpu"
    ):  # e3 was the target: right, but graded as unchecked wherever the env is patched
        assert got == {**SOLVED, "e3_gpu_ones_check": 0.0}
    else:
        assert got["e2_add_check"] == 0.0, row(graded, student)["notes"]


@pytest.mark.parametrize("student", sorted(CHEATS_FLAGGED))
def test_a_cheat_that_leaves_evidence_is_flagged_with_it(graded, student):
    flags = row(graded, student)["flags"]
    assert CHEATS_FLAGGED[student] in flags, flags


def test_static_review_notes_what_the_code_reaches_for(graded):
    assert "review: e2_add: touches sys.modules" in row(graded, "cheat_plant_module")["notes"]
    assert "review: e2_add: changes how IPython shows errors" in row(graded, "cheat_silence_errors")["notes"]
    assert "review:" not in row(graded, "solved")["notes"]


def test_no_file_outside_the_run_changed(graded):
    assert graded["after"] == graded["before"], "SUBMISSIONS_DIR changed"
    assert graded["repo_after"] == graded["repo_before"], "the repository changed"
    assert "# tampered" not in (ROOT / "autograders" / "kit.py").read_text()
    assert (graded["course"] / "course" / "solutions" / SLUG / NOTEBOOK).is_file()  # rmtree was refused


def test_a_detached_process_cannot_rewrite_the_csv(graded):
    assert graded["rows_later"] == graded["rows"]
    assert "hacked" not in graded["out"].read_text()


def test_killing_everything_in_sight_does_not_stop_the_batch(graded):
    assert scores(graded, "cheat_kill_grader")["e1_square_check"] == 4.0
    assert len(graded["rows"]) == len(list(graded["subs"].iterdir()))


def test_learner_version_of_the_fixture_is_stripped():
    learner = nbformat.reads(
        build_lessons.render(FIXTURE_SOLUTIONS)[f"{SLUG}/{NOTEBOOK}"].decode(), as_version=4
    )
    assert graded_cells(SOLUTION) == {**AUTO, MANUAL: 2.0}
    text = nbformat.writes(learner)
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text and "return x * x" not in text
    assert "cancels its sign" not in text  # the model answer of the written question
    solution_cells = [
        c for c in learner.cells if c.metadata.get("nbgrader", {}).get("solution") and c.cell_type == "code"
    ]
    assert len(solution_cells) == 3 and all(
        line in c.source for c in solution_cells for line in CODE_STUB.split("\n")
    )


# ---- the instructor's mistakes: one clear line, nothing graded -------------------------------------------------


@pytest.mark.parametrize(
    "make_args, message",
    [
        (lambda t: [str(t / "nope"), "--out", str(t / "g.csv")], "does not exist"),
        (lambda t: [str(t / "subs"), "--out", str(t / "g.csv"), "--lessons", "99-nope"], "no such lesson"),
        (lambda t: [str(t / "empty"), "--out", str(t / "g.csv")], "has no student folders"),
        (lambda t: [str(t / "subs"), "--out", str(t)], "is a folder"),
        (lambda t: [str(t / "subs"), "--out", str(t / "missing" / "g.csv")], "does not exist"),
        (
            lambda t: [str(t / "subs"), "--out", str(t / "g.csv"), "--timeout", "0"],
            "--timeout must be a positive",
        ),
        (
            lambda t: [str(t / "subs"), "--out", str(t / "g.csv"), "--timeout", "-5"],
            "--timeout must be a positive",
        ),
        (lambda t: [str(t / "subs"), "--out", str(t / "g.csv"), "--jobs", "0"], "--jobs must be at least 1"),
        (lambda t: [str(t / "subs"), "--out", str(t / "g.csv"), "--shard", "3/2"], "--shard must be K/N"),
        (lambda t: [str(t / "subs"), "--out", str(t / "g.csv"), "--keep", str(t / "subs")], "must be empty"),
        (lambda t: [str(t / "subs" / "ada" / SLUG / NOTEBOOK), "--out", str(t / "g.csv")], "is not a folder"),
    ],
)
def test_bad_arguments_are_refused_with_one_line(tmp_path, make_args, message):
    (tmp_path / "empty").mkdir()
    write_notebook(_solution(), tmp_path / "subs" / "ada" / SLUG, NOTEBOOK)
    before = tree_digest(tmp_path / "subs")
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPTS / "grade.py"),
            *make_args(tmp_path),
            "--solutions",
            str(FIXTURE_SOLUTIONS),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "g.csv").exists()
    assert tree_digest(tmp_path / "subs") == before


def test_without_landlock_grading_refuses_unless_told(tmp_path, monkeypatch):
    import grade

    write_notebook(_solution(), tmp_path / "subs" / "ada" / SLUG, NOTEBOOK)
    monkeypatch.setattr(grade, "isolation_problem", lambda: "this Linux kernel has no Landlock")
    with pytest.raises(SystemExit) as info:
        grade.main(
            [str(tmp_path / "subs"), "--out", str(tmp_path / "g.csv"), "--solutions", str(FIXTURE_SOLUTIONS)]
        )
    assert info.value.code == 2
    assert not (tmp_path / "g.csv").exists()


def test_the_sandbox_is_available_here():
    """CI runs on Linux with Landlock: the isolation the tests above rely on is real here, not skipped."""
    import grade

    assert grade.isolation_problem() is None
    assert os.path.exists("/proc/self/ns/pid")
