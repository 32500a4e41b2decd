#!/usr/bin/env python
"""Grade a folder of submissions and write a CSV: the instructor's entry point (grading/batch.py does the work).

python scripts/grade.py SUBMISSIONS_DIR --out grades.csv [--lessons SLUG ...] [--jobs N] [--shard K/N]
                        [--seed S] [--timeout SECONDS] [--memory-limit GB] [--keep DIR]
python scripts/grade.py --merge shard-1.csv shard-2.csv ... --out grades.csv
"""

from grading.batch import main

if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        raise SystemExit(130) from None
