#!/usr/bin/env python
"""`python scripts/bench_grading.py --help`: the work is coursetools/bench_grading.py's (installed as `memlab-bench-grading` too)."""

from coursetools.bench_grading import main

if __name__ == "__main__":
    raise SystemExit(main())
