#!/usr/bin/env python
"""`python scripts/release.py --help`: the work is coursetools/release.py's (installed as `memlab-release` too)."""

from coursetools.release import main

if __name__ == "__main__":
    raise SystemExit(main())
