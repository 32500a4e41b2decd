"""scripts/grade.py on the fixture lesson (tests/fixtures/minicourse/solutions/00-fixture): the mechanics of grading
for credit — messy submissions, runaway code, and a class that tries to cheat.

The fixture has three exercises (e1 square 4 points, e2 add 4, e3 gpu_ones 2: GPU only) and one written answer
(w1, 2 points, graded by hand); under grading e2 also runs two cases drawn from the student's seed. One grading run
(module fixture, --jobs 2) grades every student below; each test reads that student's CSV row. A cheat edits e2 to
a WRONG answer (`a - b`) and then tries to earn its 4 points anyway: it must not. The kernel only collects what the
learner's code returned and a judge outside it decides (grading/), so most cheats now simply fail the check; where
the judge sees evidence (a check cell that showed no record, a record that does not match the check, two records)
the row is flagged, and the tests assert the flag there only.

Every attack on the old in-kernel sandbox is kept, and the families of attack on the new design each have one: an
object that lies about its value, reading the check's state from inside the learner's function, patching the kit
while the check runs, a forged transcript, code posing as library code, state of torch left behind (a torch function
mode, new attributes), leaks from the environment (the seed, a subprocess, a thread) and /dev/shm.
"""

from __future__ import annotations

import csv
import glob
import hashlib
import importlib.util
import os
import random
import subprocess
import sys
import time
from pathlib import Path

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

from grading import isolation
from grading.batch import FIELD_CHARS, csv_text
from memlab.hardware import unmet_requirements

SLUG = "00-fixture"
NOTEBOOK = f"{SLUG}.ipynb"
SOLUTION = FIXTURE_SOLUTIONS / SLUG / NOTEBOOK
AUTO = {"e1_square_check": 4.0, "e2_add_check": 4.0, "e3_gpu_ones_check": 2.0}
MANUAL = "w1_square_sign"
HAS_GPU = unmet_requirements(cuda=True) is None
GPU = AUTO["e3_gpu_ones_check"] if HAS_GPU else 0.0
SOLVED = {"e1_square_check": 4.0, "e2_add_check": 4.0, "e3_gpu_ones_check": GPU}
#: a real lesson's learner version, handed in as the fixture lesson's notebook
ANOTHER_LESSON = ROOT / "lessons" / "02-numeric-formats" / "02-numeric-formats.ipynb"
#: packages named like the course's in the folder grade.py is run from
SHADOWED_PACKAGES = ("memlab", "grading", "autograders")
#: the fixture lesson's due date (grade.py --due-dates) and when two students handed it in (nbgrader's timestamp.txt)
DUE = "2026-12-01 12:00:00 UTC"
HANDED_IN = {"solved": "2026-12-01 11:00:00.000000 UTC", "late": "2026-12-01 14:30:00.000000 UTC"}
TIMEOUT = 15  # seconds per cell. The slowest cells (import torch; the first import of the kit) take 2-3.5 s alone on
# 2 cores; under CI (two test workers, two grading jobs) one took over 6 s, and a timed-out import leaves torch
# half-registered for the cells after it ("duplicate registrations for aten.linspace").
WRONG_ADD = ("return a + b", "return a - b")
SHM_FILE = f"memlab-leak-{os.getpid()}"  # what one student leaves in /dev/shm and /tmp for the next
VICTIM = "victim.txt"  # a file of the grader's, next to the CSV, that cheat_link_notebook points links at
#: a file name no text field should carry as it is: a lone surrogate (a byte that is not UTF-8), an escape sequence
WEIRD_NAME = os.fsdecode(b"link\xff\x1b[2J\x07")

#: a learner-made check kit that passes everything, shipped next to the notebook
SHADOW_KIT = """
def check(name, **kwargs):
    return lambda fn: (lambda *args, **kwargs: None)

def needs_hardware(**kwargs):
    pass

def _anything(*args, **kwargs):
    return None

call = expect_callable = expect_close = expect_equal = expect_type = drawn = drawn_cases = reference = _anything
"""
SHADOW_FILES = {
    "autograders/__init__.py": "",
    "autograders/kit.py": SHADOW_KIT,
    "memlab/__init__.py": "raise ImportError('the learner-made memlab was imported')\n",
    "fixture_checks.py": "check_square = check_add = check_gpu_ones = lambda fn: None\n",
}

#: in the kernel: show a hand-made transcript of e2's check (what a check cell shows under grading)
FORGE = """
import fixture_checks
from IPython.display import display
from autograders import kit, wire

def forged(records, check="e2_add"):
    data = kit.Transcript(check, [kit.Record(label, value=wire.encode(v)) for label, v in records]).to_data()
    display({kit.TRANSCRIPT_MIME: data, "text/plain": f"{check}: collected for grading"}, raw=True)

# the right values of the public cases (the exercise says what add does; these are no secret)
PUBLIC = [("`add` is written", None), ("add(2, 3)", 5), ("add(-1, 1)", 0), ("add(0.5, 0.25)", 0.75)]
"""

#: shipped in the student's folder at a path that looks like an installed package's: it drops the check's
#: transcript from the display and prints a success line instead
FAKE_LIBRARY = {
    "lib/python3.11/site-packages/IPython/core/display_hooks.py": """
import IPython.display

_display = IPython.display.display

def display(*objs, **kwargs):
    if any(isinstance(o, dict) and any("memlab.transcript" in k for k in o) for o in objs):
        print("✓ e2_add: 5 cases passed")
        return None
    return _display(*objs, **kwargs)

IPython.display.display = display
""",
}


def seed_one_table() -> dict:
    """A hard-coded table of add's answers for the public cases and the cases seed 1 draws: what a learner could
    write after reading the fixture's checks and running them with COURSE_GRADING_SEED=1 at home."""
    spec = importlib.util.spec_from_file_location(
        "fixture_checks_copy", FIXTURE_SOLUTIONS / SLUG / "fixture_checks.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rng = random.Random("1/e2_add")  # kit.grading_rng("e2_add") under COURSE_GRADING_SEED=1
    drawn = [module._drawn_add_case(rng, i)[1:] for i in (1, 2)]
    return {(a, b): a + b for a, b in [(2, 3), (-1, 1), (0.5, 0.25), *drawn]}


def cheats(subs, out, course) -> dict[str, str]:
    """Code appended to the (wrong) e2 solution cell: each tries to earn e2's points without a right answer."""
    victim = subs / "solved" / SLUG / NOTEBOOK
    kept_solutions = course / "course" / "solutions" / SLUG
    return {
        # ---- the attacks on the old in-kernel sandbox (verdicts in the kernel, an audit hook, Landlock)
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
            "kit.check = lambda name, **kw: (lambda fn: (lambda *a, **k: None))\n"
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
        # ---- 1. an object that lies: whatever a comparison asks, it says "equal"
        "cheat_lying_float": (
            "class Liar(float):\n"
            "    __eq__ = __le__ = __ge__ = lambda self, other: True\n"
            "    __ne__ = __lt__ = __gt__ = lambda self, other: False\n"
            "    __sub__ = __rsub__ = __abs__ = lambda self, *other: Liar(0.0)\n"
            "    __hash__ = float.__hash__\n"
            "_wrong_add = add\n"
            "def add(a, b):\n    return Liar(_wrong_add(a, b))\n"
        ),
        "cheat_lying_number": (
            "import numbers\n"
            "class Anything:\n"
            "    def __float__(self):\n        return 5.0\n"
            "    __eq__ = __le__ = __ge__ = lambda self, other: True\n"
            "    __sub__ = __rsub__ = __abs__ = lambda self, *other: 0.0\n"
            "    __hash__ = object.__hash__\n"
            "numbers.Real.register(Anything)\n"
            "def add(a, b):\n    return Anything()\n"
        ),
        "cheat_lying_tensor": (
            "import torch\n"
            "class LyingTensor(torch.Tensor):\n"
            "    @classmethod\n"
            "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
            "        return True  # close, equal, finite: whatever is asked\n"
            "def add(a, b):\n    return torch.tensor(float(a - b)).as_subclass(LyingTensor)\n"
        ),
        # ---- 2. reading the check's state from inside the learner's function: frames and the garbage collector
        "cheat_read_state": (
            "import gc, sys\n"
            "def add(a, b):\n"
            "    frame = sys._getframe(1)\n"
            "    while frame is not None:\n"
            "        for name in ('expected', 'want', 'answer', 'reference'):\n"
            "            if type(frame.f_locals.get(name)) in (int, float):\n"
            "                return frame.f_locals[name]\n"
            "        frame = frame.f_back\n"
            "    for obj in gc.get_objects():\n"
            "        if type(obj) is dict and type(obj.get('expected')) in (int, float):\n"
            "            return obj['expected']\n"
            "    return a - b\n"
        ),
        # ---- 3. patching the kit while the check runs, restored right after
        "cheat_patch_during_call": (
            "import threading, autograders.kit as kit, fixture_checks\n"
            "_saved = (kit.expect_close, fixture_checks.expect_close, kit.CheckFailed)\n"
            "def _restore():\n"
            "    kit.expect_close, fixture_checks.expect_close, kit.CheckFailed = _saved\n"
            "_wrong_add = add\n"
            "def add(a, b):\n"
            "    fixture_checks.expect_close = kit.expect_close = lambda *args, **kwargs: None\n"
            "    threading.Timer(1.0, _restore).start()\n"
            "    return _wrong_add(a, b)\n"
        ),
        # ---- 4. a forged transcript: the public cases only, labels of drawn cases guessed, two records, another
        # check's record (a transcript with the right values of *every* case would pass: it is a right answer)
        "cheat_forge_public": FORGE + "fixture_checks.check_add = lambda fn: forged(PUBLIC)\n",
        "cheat_forge_labels": FORGE
        + (
            "fixture_checks.check_add = lambda fn: forged(\n"
            "    PUBLIC + [('drawn at grading time #1, add(1, 1)', 2), ('drawn at grading time #2, add(2, 2)', 4)])\n"
        ),
        "cheat_forge_twice": FORGE
        + (
            "_real_check = fixture_checks.check_add\n"
            "def _twice(fn):\n    _real_check(fn)\n    forged(PUBLIC)\n"
            "fixture_checks.check_add = _twice\n"
        ),
        "cheat_forge_other_check": FORGE
        + (
            "fixture_checks.check_add = lambda fn: forged(\n"
            "    [('`square` is written', None), ('square(0)', 0), ('square(3)', 9), ('square(-2)', 4),\n"
            "     ('square(1.5)', 2.25)], check='e1_square')\n"
        ),
        # ---- 5. code posing as library code (shipped at a site-packages path, named like IPython's own)
        "cheat_fake_library": (
            "import importlib.util\n"
            "_path = 'lib/python3.11/site-packages/IPython/core/display_hooks.py'\n"
            "_spec = importlib.util.spec_from_file_location('IPython.core.display_hooks', _path)\n"
            "_spec.loader.exec_module(importlib.util.module_from_spec(_spec))\n"
        ),
        # ---- 6. state the old sandbox's watch list did not cover
        "cheat_torch_function_mode": (
            "import torch\n"
            "from torch.overrides import TorchFunctionMode\n"
            "class Agreeable(TorchFunctionMode):\n"
            "    def __torch_function__(self, func, types, args=(), kwargs=None):\n"
            "        name = getattr(func, '__name__', '')\n"
            "        if name in ('isclose', 'allclose', 'equal'):\n"
            "            return True\n"
            "        if name in ('sub', '__sub__', '__rsub__'):\n"
            "            return torch.zeros(())\n"
            "        return func(*args, **(kwargs or {}))\n"
            "Agreeable().__enter__()  # never exited: every later cell runs under it\n"
            "def add(a, b):\n    return float(torch.tensor(float(a)) - torch.tensor(float(b)))\n"
        ),
        "cheat_torch_attributes": (
            "import torch\n"
            "torch.Tensor.__float__ = lambda self: 5.0\n"
            "torch.Tensor.__eq__ = lambda self, other: True\n"
            "torch.Tensor.check_passed = True  # attributes torch never had\n"
            "torch.nn.Module.graded = 'passed'\n"
            "def add(a, b):\n    return torch.tensor(float(a - b))\n"
        ),
        # ---- 7. leaks from the environment: the seed, a subprocess, a thread, the grading mode
        "cheat_seed_swap": (
            "import os, importlib, autograders.kit as kit, fixture_checks\n"
            "print('my seed:', os.environ['COURSE_GRADING_SEED'])\n"
            "os.environ['COURSE_GRADING_SEED'] = '1'  # the seed whose drawn cases I know\n"
            "importlib.reload(kit)\n"
            f"_table = {seed_one_table()!r}\n"
            "def add(a, b):\n    return _table.get((a, b), a - b)\n"
        ),
        "cheat_learner_mode": (
            "import os, importlib, autograders.kit as kit, fixture_checks\n"
            "os.environ['COURSE_GRADING'] = ''\n"
            "importlib.reload(kit)  # learner mode: the check decides in this kernel...\n"
            "kit.expect_close = lambda *a, **k: None  # ...and never fails (the checks call kit.expect_close)\n"
        ),
        "cheat_subprocess_pythonpath": (
            "import os, subprocess, sys\n"
            "os.makedirs('evil/autograders', exist_ok=True)\n"
            "open('evil/autograders/__init__.py', 'w').close()\n"
            "open('evil/autograders/kit.py', 'w').write(\n"
            "    'def check(*a, **k):\\n    return lambda fn: (lambda *a, **k: print(\"\\u2713 e2_add: 5 cases passed\"))\\n'\n"
            "    'def _anything(*a, **k):\\n    return None\\n'\n"
            "    'call = drawn = drawn_cases = expect_callable = expect_close = expect_equal = _anything\\n'\n"
            "    'expect_type = needs_hardware = reference = _anything\\n')\n"
            "# a helper process with the grader's repository first on its path: its grading references?\n"
            f"probe_env = {{**os.environ, 'PYTHONPATH': '{ROOT}:' + os.environ.get('PYTHONPATH', '')}}\n"
            "probe = subprocess.run([sys.executable, '-c', 'import autograders.references.lesson01'],\n"
            "                       env=probe_env, capture_output=True, text=True)\n"
            "print('the grader\\'s references:', probe.returncode, probe.stderr[-200:])\n"
            "os.environ['PYTHONPATH'] = 'evil:' + os.environ.get('PYTHONPATH', '')  # every later process\n"
            "for name in [m for m in sys.modules if m.split('.')[0] in ('autograders', 'fixture_checks')]:\n"
            "    del sys.modules[name]\n"
            "sys.path.insert(0, 'evil')  # the check cell's next import finds the planted kit\n"
        ),
        "cheat_thread": (
            "import threading, time, autograders.kit as kit\n"
            "def _meddle():\n"
            "    while True:\n"
            "        for run in list(kit._RUN):\n"
            "            if run.records and run.records[0].label == '`add` is written':\n"
            "                del run.records[1:]  # only 'add is written' left: nothing to fail\n"
            "        time.sleep(0.0005)\n"
            "threading.Thread(target=_meddle, daemon=True).start()\n"
        ),
        # ---- 8. /dev/shm and /tmp: left for the student graded next (shm_reader, a right answer, must not see it)
        "cheat_shm_writer": (
            "import subprocess\n"
            f"for folder in ('/dev/shm', '/tmp'):\n    open(f'{{folder}}/{SHM_FILE}', 'w').write('add = a + b')\n"
            "subprocess.Popen(['sh', '-c', 'for i in $(seq 300); do "
            f"echo hi > /dev/shm/{SHM_FILE}; sleep 0.1; done'], start_new_session=True)\n"
        ),
        # ---- links the kernel makes in its folder: never copied into the kept course (--keep)
        "cheat_symlink": (
            "import os\n"
            f"os.symlink({str(kept_solutions / NOTEBOOK)!r}, 'solution-link.ipynb')\n"
            f"os.symlink({str(kept_solutions)!r}, 'solutions-link')\n"
            "os.symlink('/etc/passwd', 'passwd-link')\n"
            "print('made the links:', sorted(n for n in os.listdir('.') if os.path.islink(n)))\n"
        ),
        # ---- the notebook turned into a link, and links to the grader's files: nbgrader wrote the autograded notebook
        # through such a link, chmod-ed what it pointed at, and a link to the run's gradebook overwrote it
        "cheat_link_notebook": (
            "import os\n"
            f"os.remove({NOTEBOOK!r})\n"
            f"os.symlink({str(out.parent / VICTIM)!r}, {NOTEBOOK!r})\n"
            f"os.symlink({str(out.parent / VICTIM)!r}, 'notes.txt')\n"
            "os.symlink('../../../gradebook.db', 'gradebook.ipynb')\n"
            "os.symlink('../../../../gradebook.db', 'class-gradebook.ipynb')\n"
        ),
        # ---- texts no CSV field may carry as they are: a lone surrogate, control characters, 10 MB
        "cheat_csv_breaker": FORGE
        + (
            "print('x' * 10_000_000)\n"
            "_label = 'add(2, 3)\\udcff\\x1b[2J\\x00\\x07' + 'z' * 10_000_000\n"
            "fixture_checks.check_add = lambda fn: forged([('`add` is written', None), (_label, 5)])\n"
            "raise ValueError('\\udcff\\x1b[31m\\x00\\x07 ' + 'y' * 10_000)\n"
        ),
    }


#: a right answer to e2 that turns wrong when it finds what cheat_shm_writer left behind
SHM_READER = f"""
import os, time
_seen = []
for _ in range(30):
    _seen = [f for f in ('/dev/shm/{SHM_FILE}', '/tmp/{SHM_FILE}') if os.path.exists(f)]
    if _seen:
        break
    time.sleep(0.1)
print('seen:', _seen)

def add(a, b):
    return a - b if _seen else a + b
"""


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


def _digest(folder: Path) -> str:
    """tree_digest of `folder`, for file names that are not UTF-8 too (a submission may hold any bytes)."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        stat = path.lstat()
        digest.update(os.fsencode(path.relative_to(folder)) + f"|{stat.st_mode}|{stat.st_mtime_ns}|".encode())
        if path.is_file() and not path.is_symlink():
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


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
    (subs / "solved" / SLUG / "timestamp.txt").write_text(HANDED_IN["solved"])
    put("late", _solution())
    (subs / "late" / SLUG / "timestamp.txt").write_text(HANDED_IN["late"])
    (tmp / "due.csv").write_text(f"name,duedate\n{SLUG},{DUE}\n")
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
    # processes started by the kernel, each asleep, until a limit stops it: the kernel's own start of one fails
    # (RLIMIT_NPROC) or the sandbox's watch counts more than 256 (root, where RLIMIT_NPROC does not bind).
    # (Forked copies of the kernel, torch loaded, took 20 ms each: the cell's timeout came first. A doubling bomb,
    # os.fork() ten times, raced: the kernel could finish its forks before its children reached the limit.)
    _cell(process_bomb, "e2_add").source = (
        "import subprocess, time\nfor _ in range(1024):\n    subprocess.Popen(['sleep', '60'])\ntime.sleep(60)\n"
        + _cell(process_bomb, "e2_add").source
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
    put("two_notebooks", _solution(), "00-fixture-Copy1.ipynb")
    put("two_notebooks", _solution(), "00-fixture-Copy2.ipynb")
    put("another_lesson", nbformat.read(ANOTHER_LESSON, as_version=4))
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
    # grading marks edited in the notebook's metadata: a check cell no longer graded, a solution cell made graded
    # with points of its own, a locked cell unlocked (nbgrader stopped the whole notebook on each)
    remarked = _solution()
    _cell(remarked, "e1_square_check").metadata.nbgrader["grade"] = False
    _cell(remarked, "e2_add").metadata.nbgrader.update(grade=True, points=40)
    _cell(remarked, "e2_add_check").metadata.nbgrader["locked"] = False
    put("remarked", remarked)

    env_gpu = _solution()
    _cell(env_gpu, "e3_gpu_ones").source += (
        "\nimport os, importlib, torch, autograders.kit\nos.environ.pop('COURSE_GRADING', None)\n"
        "torch.cuda.is_available = lambda: False\nimportlib.reload(autograders.kit)\n"
    )
    put("cheat_env_gpu", env_gpu)
    course = tmp / "course"
    for student, code in cheats(subs, out, course).items():
        put(student, _with_wrong_add(code))
    for relative, text in FAKE_LIBRARY.items():
        (subs / "cheat_fake_library" / SLUG / relative).parent.mkdir(parents=True, exist_ok=True)
        (subs / "cheat_fake_library" / SLUG / relative).write_text(text)
    (subs / "cheat_csv_breaker" / SLUG / WEIRD_NAME).symlink_to("/etc/hostname")
    reader = _solution()
    _cell(reader, "e2_add").source = SHM_READER
    put("cheat_shm_reader", reader)  # graded after cheat_shm_writer (or beside it: --jobs 2), in order

    # the instructor runs grade.py from a folder that holds packages named like the course's (an old copy of the
    # course, a scratch memlab/): none may be imported by the grader's processes
    instructor = tmp / "instructor"
    for package in SHADOWED_PACKAGES:
        (instructor / package).mkdir(parents=True)
        (instructor / package / "__init__.py").write_text(
            f"open({str(tmp / 'shadowed')!r}, 'a').write({package!r} + '\\n')\nraise ImportError('shadowed')\n"
        )
    (tmp / VICTIM).write_text("the grader's own file")
    os.chmod(tmp / VICTIM, 0o600)
    before = _digest(subs)
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
        "--due-dates",
        str(tmp / "due.csv"),
        cwd=instructor,
    )
    seconds = time.perf_counter() - start
    time.sleep(5)  # the detached process of cheat_detached would have written by now
    with open(out, newline="", encoding="utf-8") as fh:
        rows_later = list(csv.DictReader(fh))
    return {
        "tmp": tmp,
        "proc": proc,
        "rows": rows,
        "rows_later": rows_later,
        "seconds": seconds,
        "subs": subs,
        "out": out,
        "course": course,
        "before": before,
        "after": _digest(subs),
        "repo_before": repo_before,
        "repo_after": source_digest(),
    }


def source_digest() -> str:
    """The course's own sources that a submission could try to change: the kit and the fixture lesson."""
    digest = hashlib.sha256()
    kit = [ROOT / "autograders" / name for name in ("__init__.py", "kit.py", "wire.py")]
    for path in [*kit, *sorted(FIXTURE_SOLUTIONS.rglob("*"))]:
        if path.suffix in (".py", ".ipynb") and "__pycache__" not in path.parts:
            digest.update(str(path).encode() + path.read_bytes())
    return digest.hexdigest()


def scores(graded, student: str) -> dict[str, float]:
    row = row_for(graded["rows"], student, SLUG)
    return {grade_id: float(row[grade_id]) for grade_id in AUTO}


def row(graded, student: str) -> dict:
    return row_for(graded["rows"], student, SLUG)


def student_id(graded, student: str) -> str:
    """nbgrader's id of `student` in the kept course (grading.batch.student_ids)."""
    from grading.batch import student_ids

    return student_ids(sorted(p.name for p in graded["subs"].iterdir()))[student]


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
        "handed_in",
        "seconds_late",
        "late_penalty",
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
    assert (
        by_student["late"][f"{SLUG} late (h)"] == "2.50"
        and by_student["solved"][f"{SLUG} late (h)"] == "0.00"
    )
    assert by_student["blank"][f"{SLUG} handed in"] == "" and by_student["blank"][f"{SLUG} late (h)"] == ""


def test_when_each_lesson_was_handed_in_and_how_late(graded):
    """nbgrader's timestamp.txt against --due-dates: nbgrader's own autograde finds how late (and would take the
    course's late penalty: nbgrader's default plugin takes none)."""
    assert row(graded, "solved")["handed_in"] == "2026-12-01T11:00:00.000000+00:00"
    assert (row(graded, "solved")["seconds_late"], row(graded, "late")["seconds_late"]) == ("0", "9000")
    assert row(graded, "late")["late_penalty"] == "0" and scores(graded, "late") == SOLVED
    assert (row(graded, "blank")["handed_in"], row(graded, "blank")["seconds_late"]) == ("", "")


def test_grades_entered_in_formgrader_come_back_into_the_csv(graded, tmp_path):
    """A written answer graded in the kept course's formgrader (the gradebook's manual score, as formgrader saves
    it) and an autograded score a grader changed there: `grade.py --manual-grades` writes both into the CSV and the
    per-student table; the kept course names each student by the folder's own name where it is a plain id."""
    import shutil

    from nbgrader.api import Gradebook

    kept = tmp_path / "kept"
    shutil.copytree(graded["course"], kept, symlinks=True)
    with Gradebook("sqlite:///" + str(kept / "course" / "gradebook.db")) as gradebook:
        assert {s.id for s in gradebook.students} >= {"solved", "blank", "late"}
        gradebook.find_grade(MANUAL, SLUG, SLUG, "solved").manual_score = 1.5
        gradebook.find_grade("e1_square_check", SLUG, SLUG, "blank").manual_score = 1
        gradebook.db.commit()
    out = tmp_path / "grades.csv"
    shutil.copy(graded["out"], out)
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "grade.py"), "--manual-grades", str(kept), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "2 grades entered in formgrader written into" in proc.stderr
    with open(out, newline="", encoding="utf-8") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    assert (rows["solved"][MANUAL], rows["solved"]["total"], rows["solved"]["needs_manual"]) == (
        "1.5",
        f"{9.5 + GPU:g}",
        "0",
    )
    assert "needs manual grading" not in rows["solved"]["notes"]
    assert (rows["blank"]["e1_square_check"], rows["blank"]["total"]) == ("1", "1")
    with open(out.with_name("grades-students.csv"), newline="", encoding="utf-8") as fh:
        table = {r["student"]: r for r in csv.DictReader(fh)}
    assert table["solved"][f"{SLUG}/{MANUAL}"] == "1.5" and table["solved"]["needs_manual"] == "0"


def test_nbgrader_export_of_the_kept_course_is_the_per_student_table(graded, tmp_path):
    """`nbgrader export` in the kept course (nbgrader_config.py: grading.export_plugin.ClassExport) gives the table
    grade.py wrote, from the gradebook alone: the same students, points, times and flagged lessons."""
    out = tmp_path / "export.csv"
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", "export", "--to", str(out)],
        cwd=graded["course"] / "course",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    with open(out, newline="", encoding="utf-8") as fh:
        exported = {r["student"]: r for r in csv.DictReader(fh)}
    with open(graded["out"].with_name("grades-students.csv"), newline="", encoding="utf-8") as fh:
        written = {r["student"]: r for r in csv.DictReader(fh)}
    ids = {student: student_id(graded, student) for student in written}
    for student in ("solved", "late", "blank", "cheat_forge_pass", "spaced name é"):
        mine, theirs = written[student], exported[ids[student]]
        for column in (
            SLUG,
            f"{SLUG}/{MANUAL}",
            f"{SLUG} late (h)",
            "total",
            "max",
            "needs_manual",
            "flagged_lessons",
        ):
            assert theirs[column] == mine[column], (student, column)


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
    assert f"{MANUAL}: no answer" in r["notes"]
    assert r["flags"] == ""


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
    notes = row(graded, "looping")["notes"]
    assert "e1_square: KeyboardInterrupt" in notes  # interrupted, not stopped: the kernel went on
    assert "was stopped" not in notes


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
        (
            "two_notebooks",
            f"missing: no {SLUG}/{NOTEBOOK} (found 00-fixture-Copy1.ipynb, 00-fixture-Copy2.ipynb)",
        ),
        (
            "another_lesson",
            "not this lesson's notebook: none of its graded cells is this lesson's, and its checks are "
            "autograders.lesson02's (e1_decode, e1_decode_check, e2_format_limits, e2_format_limits_check): "
            "graded 0, not run",
        ),
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


@pytest.mark.parametrize(
    "student, name", [("misnamed", "00-fixture-Copy1"), ("wrong_lesson", "01-memory-anatomy")]
)
def test_a_renamed_notebook_alone_in_its_folder_is_graded_with_a_note(graded, student, name):
    """A lesson folder whose only notebook has another name (a copy JupyterLab made, a wrong name) is graded: it
    scored 0 as missing."""
    assert scores(graded, student) == SOLVED
    assert row(graded, student)["notes"].startswith(
        f"graded {name}.ipynb, the folder's only notebook ({NOTEBOOK} was expected)"
    )


def test_another_lesson_s_notebook_is_not_run_and_asks_for_no_manual_grading(graded):
    """Lesson 02's notebook handed in as the fixture lesson's: one note says so, no check is put back and run
    (there were ten false `review:` notes on lesson 02's own imports of the kit) and nothing waits for a human."""
    r = row(graded, "another_lesson")
    assert r["needs_manual"] == "0" and "review:" not in r["notes"] and ";" not in r["notes"]


def test_packages_named_like_the_course_s_where_grade_py_runs_are_not_imported(graded):
    """grade.py run from a folder holding memlab/, grading/ and autograders/ packages: no grader process imports
    them (the worker server started as `python -c`, with the working folder first on sys.path, imported them)."""
    assert not (graded["tmp"] / "shadowed").exists(), (graded["tmp"] / "shadowed").read_text()
    assert scores(graded, "solved") == SOLVED


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


def test_edited_grading_marks_are_the_course_s_again_and_said(graded):
    """A check cell's `grade` turned off, a solution cell turned into a graded cell worth 40, a check unlocked: graded
    as the course's cells, with a note (nbgrader stopped the whole notebook: "Inconsistent checksums")."""
    assert scores(graded, "remarked") == SOLVED
    notes = row(graded, "remarked")["notes"]
    assert "grading marks changed in the notebook" in notes
    assert "e1_square_check (grade)" in notes and "e2_add (grade)" in notes
    assert "e2_add_check (locked)" in notes
    assert float(row(graded, "remarked")["max"]) == sum(AUTO.values()) + 2  # the course's points, not 40 more


def test_a_notebook_with_its_cells_deleted_gets_notes(graded):
    assert scores(graded, "no_cells") == dict.fromkeys(AUTO, 0.0)
    notes = row(graded, "no_cells")["notes"]
    for grade_id in AUTO:
        assert f"{grade_id}: the check cell was missing and was put back" in notes
    for grade_id in ("e1_square", "e2_add", "e3_gpu_ones"):  # as released: no answer, so nothing to earn
        assert f"{grade_id}: the cell is missing from the notebook (put back as released: no answer)" in notes
    assert "e1_square_check: CheckFailed: e1_square: `square` is not written yet" in notes


# ---- cheating: no points, and the evidence in the flags where the judge has some -----------------------------------

NO_RECORD = "the cell ran without an error, but showed no record of the check"

#: cheats whose check cell showed something the honest check cannot show, with the judge's words for it
CHEATS_FLAGGED = {
    "cheat_replace_check": f"e2_add_check: {NO_RECORD} e2_add",
    "cheat_plant_module": f"e2_add_check: {NO_RECORD} e2_add",
    "cheat_transformer": f"e2_add_check: {NO_RECORD} e2_add",
    "cheat_reload_kit": f"e2_add_check: {NO_RECORD} e2_add",
    "cheat_minus_one": f"e2_add_check: {NO_RECORD} e2_add",
    "cheat_forge_pass": f"e2_add_check: {NO_RECORD} e2_add",
    "cheat_env_gpu": f"e3_gpu_ones_check: {NO_RECORD} e3_gpu_ones",
    "cheat_forge_public": (
        "e2_add_check: e2_add: the record of this check does not match it: "
        "the record ends before the step 'drawn at grading time #1, add("
    ),
    "cheat_forge_labels": "was recorded as 'drawn at grading time #1, add(1, 1)'",
    "cheat_forge_twice": "e2_add_check: the cell showed 2 records of its check (one run shows one)",
    "cheat_forge_other_check": "e2_add_check: e2_add: the record is of another check ('e1_square')",
    "cheat_fake_library": f"e2_add_check: {NO_RECORD} e2_add",
    "cheat_seed_swap": "e2_add_check: e2_add: the record of this check does not match it: the step 'drawn at",
    "cheat_learner_mode": f"e2_add_check: {NO_RECORD} e2_add",
    "cheat_subprocess_pythonpath": f"e2_add_check: {NO_RECORD} e2_add",
    "cheat_csv_breaker": "e2_add_check: e2_add: the record of this check does not match it: the step 'add(2, 3)'",
}

#: cheats that only change what happens in the kernel: the judge sees an honest record of a wrong answer
CHEATS_UNFLAGGED = [
    "cheat_patch_helper",
    "cheat_patch_checkfailed",
    "cheat_silence_errors",
    "cheat_read_files",
    "cheat_write_files",
    "cheat_detached",
    "cheat_kill_grader",
    "cheat_lying_float",
    "cheat_lying_number",
    "cheat_lying_tensor",
    "cheat_read_state",
    "cheat_patch_during_call",
    "cheat_torch_function_mode",
    "cheat_torch_attributes",
    "cheat_thread",  # flagged or not, depending on whether its thread won the race against the check
    "cheat_shm_writer",
    "cheat_symlink",
    "cheat_link_notebook",
]


@pytest.mark.parametrize("student", sorted([*CHEATS_FLAGGED, *CHEATS_UNFLAGGED]))
def test_a_cheat_earns_nothing(graded, student):
    got = scores(graded, student)
    if student == "cheat_env_gpu":  # e3 was the target: right, but it showed no record of its check
        assert got == {**SOLVED, "e3_gpu_ones_check": 0.0}
    else:
        assert got["e2_add_check"] == 0.0, row(graded, student)["notes"]
        assert got["e1_square_check"] == 4.0, row(graded, student)["notes"]  # the cheat costs only itself


def test_every_cheat_is_graded(graded):
    submitted = {p.name for p in graded["subs"].iterdir() if p.name.startswith("cheat_")}
    assert submitted == {*CHEATS_FLAGGED, *CHEATS_UNFLAGGED, "cheat_shm_reader"}


@pytest.mark.parametrize("student", sorted(CHEATS_FLAGGED))
def test_a_cheat_that_leaves_evidence_is_flagged_with_it(graded, student):
    flags = row(graded, student)["flags"]
    assert CHEATS_FLAGGED[student] in flags, flags


@pytest.mark.parametrize(
    "student, note",
    [
        (
            "cheat_lying_float",
            "e2_add: case add(2, 3): what your code gave in case add(2, 3) is a __main__.Liar",
        ),
        (
            "cheat_lying_number",
            "e2_add: case add(2, 3): what your code gave in case add(2, 3) is a __main__.Anything",
        ),
        (
            "cheat_lying_tensor",
            "e2_add: case add(2, 3): what your code gave in case add(2, 3) is a __main__.LyingTensor",
        ),
        ("cheat_read_state", "e2_add: case add(2, 3): add(2, 3) is of the wrong sign: you got -1"),
        ("cheat_patch_during_call", "e2_add: case add(2, 3): add(2, 3) is of the wrong sign: you got -1"),
        ("cheat_torch_function_mode", "e2_add: case add(2, 3): add(2, 3) is zero where it should not be"),
        ("cheat_torch_attributes", "e2_add: case add(2, 3): add(2, 3) should be a number; got a Tensor"),
    ],
)
def test_a_lie_or_a_patch_in_the_kernel_changes_nothing_the_judge_decides(graded, student, note):
    """The judge sees only plain data of what the learner's code returned and compares it itself."""
    assert f"e2_add_check: CheckFailed: {note}" in row(graded, student)["notes"]


def test_a_transcript_forged_with_every_right_value_is_a_right_answer():
    """What the design cannot tell apart, said plainly: the judge grades what the transcript says the learner's code
    returned. A forged transcript that passes has the right value of every case, drawn ones included (their labels
    come from the student's seed, which the kernel knows): it takes computing add, the exercise itself."""
    from autograders import kit, wire

    spec = importlib.util.spec_from_file_location(
        "fixture_checks_forged", FIXTURE_SOLUTIONS / SLUG / "fixture_checks.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    declared = module.check_add.check
    records = [kit.Record("`add` is written", value=wire.encode(None))]
    for a, b in [(2, 3), (-1, 1), (0.5, 0.25)]:
        records.append(kit.Record(f"add({a}, {b})", value=wire.encode(a + b)))
    rng = random.Random("7/e2_add")
    for i in (1, 2):
        label, a, b = module._drawn_add_case(rng, i)
        records.append(kit.Record(label, value=wire.encode(a + b)))
    with kit.context(kit.JUDGE, 7):
        assert kit.judge(declared, kit.Transcript("e2_add", records)).passed
        assert not kit.judge(declared, kit.Transcript("e2_add", records[:4])).passed  # the public cases only


def test_the_kernel_could_not_read_the_grader_s_references(graded):
    """cheat_subprocess_pythonpath put the repository on a subprocess's PYTHONPATH: it is not in the sandbox."""
    sid = student_id(graded, "cheat_subprocess_pythonpath")
    nb = nbformat.read(graded["course"] / "course" / "autograded" / sid / SLUG / NOTEBOOK, as_version=4)
    text = "".join(o.get("text", "") for o in _cell(nb, "e2_add").outputs if o.output_type == "stream")
    assert "the grader's references: 1" in text and "ModuleNotFoundError" in text


def test_static_review_notes_what_the_code_reaches_for(graded):
    assert "review: e2_add: touches sys.modules" in row(graded, "cheat_plant_module")["notes"]
    assert "review: e2_add: changes how IPython shows errors" in row(graded, "cheat_silence_errors")["notes"]
    notes = row(graded, "cheat_read_state")["notes"]
    assert "review: e2_add: reads call-stack frames" in notes
    assert "review: e2_add: searches the garbage collector" in notes
    assert "review: e2_add: reads or changes the grading mode" in row(graded, "cheat_seed_swap")["notes"]
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


def test_dev_shm_and_tmp_are_not_shared_between_students(graded):
    """cheat_shm_writer left a file in /dev/shm and /tmp (and kept writing it from a detached process): the
    student graded next, whose add turns wrong when it sees that file, got every point, and the file is nowhere."""
    assert scores(graded, "cheat_shm_reader") == SOLVED
    assert row(graded, "cheat_shm_reader")["flags"] == ""
    time.sleep(0.5)
    assert glob.glob(f"/dev/shm/{SHM_FILE}*") == [] and glob.glob(f"/tmp/{SHM_FILE}*") == []


def test_the_grader_never_writes_or_chmods_through_what_the_kernel_left(graded):
    """The kernel works in a private copy of its folder: its notebook replaced by a link to a file of the grader's,
    links to the run's gradebook, are never written, chmod-ed or read back; the row is graded, and so are the rows
    graded after it."""
    victim = graded["out"].parent / VICTIM
    assert victim.read_text() == "the grader's own file"
    assert victim.stat().st_mode & 0o777 == 0o600
    assert scores(graded, "cheat_link_notebook") == {**SOLVED, "e2_add_check": 0.0}
    assert not graded["proc"].returncode
    for student in ("solved", "spaced name é", "cheat_shm_reader"):
        assert scores(graded, student) == SOLVED, student


def test_links_the_kernel_made_are_not_copied_into_the_kept_course(graded):
    sid = student_id(graded, "cheat_symlink")
    links = ("solution-link.ipynb", "solutions-link", "passwd-link")
    worker_folder = graded["course"] / "work" / f"{sid}-{SLUG}" / "course" / "autograded" / sid / SLUG
    autograded = nbformat.read(worker_folder / NOTEBOOK, as_version=4)
    printed = "".join(o.get("text", "") for o in _cell(autograded, "e2_add").outputs)
    assert (
        "made the links: ['passwd-link', 'solution-link.ipynb', 'solutions-link']" in printed
    )  # in its own copy
    assert not [
        p for p in worker_folder.rglob("*") if p.is_symlink()
    ]  # never in the folder nbgrader works in
    for stage in ("submitted", "autograded"):
        kept = graded["course"] / "course" / stage / sid / SLUG
        assert kept.is_dir()
        assert not [name for name in links if os.path.lexists(kept / name)]
        assert not [p for p in kept.rglob("*") if p.is_symlink()]


def test_texts_a_submission_controls_are_escaped_and_cut_in_the_csv(graded):
    """cheat_csv_breaker printed 10 MB, raised an error holding a lone surrogate and control characters, showed a
    forged record with a 10 MB label full of them, and handed in a link whose name is not UTF-8: its row is there,
    every field printable and at most FIELD_CHARS long, and the CSV is UTF-8 (run_grade read it strictly)."""
    r = row(graded, "cheat_csv_breaker")
    assert scores(graded, "cheat_csv_breaker") == {**SOLVED, "e2_add_check": 0.0}
    for field in ("flags", "notes"):
        assert 0 < len(r[field]) <= FIELD_CHARS
        assert all(ch.isprintable() for ch in r[field]), r[field][:500]
    assert "ignored symbolic link(s): link\\udcff\\x1b[2J\\x07" in r["notes"]
    assert "e2_add: ValueError:" in r["notes"]
    text = graded["out"].read_bytes().decode("utf-8")
    assert len(text) < 100 * FIELD_CHARS * len(graded["rows"])


def test_csv_text_escapes_and_cuts():
    assert csv_text("a\udcff\x1b[2J\x00\x07\tb") == "a\\udcff\\x1b[2J\\x00\\x07\\tb"
    assert csv_text("é ✓ ok") == "é ✓ ok"
    long = csv_text("z" * 10_000_000)
    assert len(long) <= FIELD_CHARS and long.endswith("(10,000,000 chars)")


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


def test_without_bubblewrap_grading_refuses_unless_told(tmp_path):
    """With no `bwrap` on PATH, grade.py stops with one line before grading anything; --no-isolation grades (never
    for credit: the submission then runs as the grader)."""
    bin_dir = tmp_path / "bin"  # this Python and nothing else: no bwrap
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    write_notebook(_solution(), tmp_path / "subs" / "ada" / SLUG, NOTEBOOK)
    env = {**os.environ, "PATH": str(bin_dir)}
    command = [
        sys.executable,
        str(SCRIPTS / "grade.py"),
        str(tmp_path / "subs"),
        "--solutions",
        str(FIXTURE_SOLUTIONS),
    ]
    proc = subprocess.run(
        [*command, "--out", str(tmp_path / "g.csv")], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 2, proc.stderr
    assert "grading needs `bwrap`" in proc.stderr and "--no-isolation" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "g.csv").exists()

    out = tmp_path / "unisolated.csv"
    proc = subprocess.run(
        [*command, "--out", str(out), "--no-isolation", "--seed", "3", "--timeout", "20"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out, newline="", encoding="utf-8") as fh:
        (ada,) = list(csv.DictReader(fh))
    assert {g: float(ada[g]) for g in AUTO} == SOLVED


def test_the_sandbox_is_available_here():
    """CI runs on Linux with bubblewrap: the isolation the tests above rely on is real here, not skipped."""
    assert isolation.unavailable() is None
    assert os.path.exists("/proc/self/ns/pid")


def test_formgrader_and_the_feedback_show_the_grader_s_notes_and_formgrader_the_rubric(graded):
    """The kept course's autograded notebook (what formgrader shows) opens with the flags and `review:` notes, and
    holds the model answer and rubric after the written answer; nbgrader's own generate_feedback keeps the notes and
    leaves the rubric out (both lived only in grade.py's CSV and the notebook's metadata)."""
    from nbgrader.api import Gradebook

    from grading.course import nbgrader_api

    course = graded["course"] / "course"
    with Gradebook("sqlite:///" + str(course / "gradebook.db")) as gradebook:
        sid = next(s.id for s in gradebook.students if s.first_name == "cheat_replace_check")
    autograded = nbformat.read(course / "autograded" / sid / SLUG / NOTEBOOK, as_version=4)
    notes = autograded.cells[0].source
    assert notes.startswith("**Notes from the grader**")
    assert "**flag:** e2\\_add\\_check:" in notes and "review: e2\\_add:" in notes
    rubric = _cell(nbformat.read(SOLUTION, as_version=4), MANUAL).source
    after_answer = autograded.cells[autograded.cells.index(_cell(autograded, MANUAL)) + 1]
    assert rubric in after_answer.source
    outcome = nbgrader_api(course).generate_feedback(SLUG, sid, force=True)
    assert outcome["success"], outcome
    feedback = (course / "feedback" / sid / SLUG / f"{SLUG}.html").read_text()
    assert "Notes from the grader" in feedback and "e2_add_check:" in feedback
    assert (
        "rubric, for the grader" not in feedback
    )  # its heading: the learner's own answer here is the model's
    assert "rubric, for the grader" in after_answer.source
