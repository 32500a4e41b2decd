#!/usr/bin/env python
"""`python scripts/build_lessons.py --help`: the work is coursetools/build_lessons.py's (installed as `memlab-build-lessons` too)."""

from coursetools.build_lessons import main

if __name__ == "__main__":
    raise SystemExit(main())
