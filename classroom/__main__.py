"""`python -m classroom prepare ...` (run from the course folder): see classroom/prepare.py."""

import sys

from classroom.prepare import main

sys.exit(main())
