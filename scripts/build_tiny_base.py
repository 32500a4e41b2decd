#!/usr/bin/env python
"""`python scripts/build_tiny_base.py --help`: the work is coursetools/build_tiny_base.py's (installed as `memlab-build-tiny-base` too)."""

from coursetools.build_tiny_base import main

if __name__ == "__main__":
    raise SystemExit(main())
