"""`python -m classroom prepare ...` and `python -m classroom image ...` (run from the course folder): see
classroom/prepare.py and classroom/image.py."""

import sys

from classroom.prepare import main

sys.exit(main())
