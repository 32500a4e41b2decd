#!/usr/bin/env python
"""Grade a folder of submissions and write a CSV: the instructor's entry point (grading/batch.py does the work).

python scripts/grade.py SUBMISSIONS_DIR --out grades.csv [--lessons SLUG ...] [--jobs N] [--shard K/N]
                        [--seed S] [--timeout SECONDS] [--memory-limit GB] [--keep DIR]
python scripts/grade.py --merge shard-1.csv shard-2.csv ... --out grades.csv
"""

import importlib.util
import os
import sys
from pathlib import Path

COURSE = Path(__file__).resolve().parents[1]
FROM_CHECKOUT = "MEMLAB_GRADE_FROM_CHECKOUT"  # set on the one run again with the checkout on PYTHONPATH
OWN = (
    "grading",
    "autograders",
    "memlab",
)  # the course's packages: a module of theirs missing is a bug, not an install
LATE_IMPORTS = ("nbgrader", "nbclient", "torch")


def lacks(name: str) -> None:
    print(
        f"grade.py: this Python ({sys.executable}) lacks the course's dependencies ({name}).\n"
        f"Install the course with the same Python, from any folder:\n    {sys.executable} -m pip install -e {COURSE}\n"
        f"or from the course's folder: pip install -r requirements.txt",
        file=sys.stderr,
    )
    sys.exit(2)


def missing_dependencies() -> list[str]:
    """What grading imports only once it has started (nbgrader, in the workers; torch, in every kernel) and this Python
    lacks: without them every notebook would fail there, one traceback each."""
    return [name for name in LATE_IMPORTS if importlib.util.find_spec(name) is None]


try:
    from grading.batch import main
except ModuleNotFoundError as missing:
    if missing.name == "grading" and not os.environ.get(FROM_CHECKOUT):
        # a Python with the course's dependencies but not the course (pip reads requirements.txt's `-e .` against
        # the folder it runs in): run again from this checkout, on PYTHONPATH so that the workers inherit it
        print(
            f"grade.py: the course is not installed in {sys.executable}; grading from {COURSE}",
            file=sys.stderr,
        )
        path = os.pathsep.join(p for p in (str(COURSE), os.environ.get("PYTHONPATH")) if p)
        flags = ["-S"] if sys.flags.no_site else []
        os.execve(
            sys.executable,
            [sys.executable, *flags, __file__, *sys.argv[1:]],
            {**os.environ, "PYTHONPATH": path, FROM_CHECKOUT: "1"},
        )
    if (missing.name or "").split(".")[0] in OWN and missing.name != "grading":
        raise
    lacks(f"no module named {missing.name!r}")

if __name__ == "__main__":
    if "--merge" not in sys.argv and (missing := missing_dependencies()):
        lacks("no " + ", ".join(missing))
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        raise SystemExit(130) from None
