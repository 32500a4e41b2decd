#!/usr/bin/env python
"""`python scripts/translations.py --help`: the work is coursetools/translations.py's (installed as `memlab-translations` too)."""

from coursetools.translations import main

if __name__ == "__main__":
    raise SystemExit(main())
