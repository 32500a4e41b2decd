#!/usr/bin/env python
"""`python scripts/execute_solutions.py --help`: the work is coursetools/execute_solutions.py's (installed as `memlab-execute-solutions` too)."""

from coursetools.execute_solutions import main

if __name__ == "__main__":
    raise SystemExit(main())
