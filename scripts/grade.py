#!/usr/bin/env python
"""Grade a folder of submissions and write a CSV: the instructor's entry point (grading/batch.py does the work).

python scripts/grade.py SUBMISSIONS_DIR --out grades.csv [--lessons SLUG ...] [--jobs N] [--shard K/N]
                        [--seed S] [--timeout SECONDS] [--memory-limit GB] [--keep DIR]
python scripts/grade.py --merge shard-1.csv shard-2.csv ... --out grades.csv
"""

import sys
from pathlib import Path

try:
    from grading.batch import main
except ModuleNotFoundError as missing:
    if missing.name != "grading":
        raise
    # the course is a package this Python must have installed (pip reads requirements.txt's `-e .` against the
    # folder pip runs in, so an install from another folder installs nothing of the course): say which install
    course = Path(__file__).resolve().parents[1]
    print(
        f"grade.py: this Python ({sys.executable}) does not have the course installed (no module named 'grading').\n"
        f"Install it with the same Python, from any folder:\n    {sys.executable} -m pip install -e {course}\n"
        f"or from the course's folder: pip install -r requirements.txt",
        file=sys.stderr,
    )
    sys.exit(2)

if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        raise SystemExit(130) from None
