#!/usr/bin/env python
"""`python scripts/ci_profile.py --help`: the work is coursetools/ci_profile.py's (installed as `memlab-ci-profile` too)."""

from coursetools.ci_profile import main

if __name__ == "__main__":
    raise SystemExit(main())
