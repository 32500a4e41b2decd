#!/usr/bin/env python
"""`python scripts/bench_capstone.py --help`: the work is coursetools/bench_capstone.py's (installed as `memlab-bench-grading` too)."""

from coursetools.bench_capstone import main

if __name__ == "__main__":
    raise SystemExit(main())
