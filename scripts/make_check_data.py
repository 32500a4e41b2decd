#!/usr/bin/env python
"""`python scripts/make_check_data.py --help`: the work is coursetools/make_check_data.py's (installed as `memlab-make-check-data` too)."""

from coursetools.make_check_data import main

if __name__ == "__main__":
    raise SystemExit(main())
