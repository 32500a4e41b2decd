"""Reference implementations that the checks need only when grading for credit: NOT part of the learner release.

Where a reference *is* the answer to an exercise (an algorithm a learner is asked to write), it lives here instead
of in `autograders/lessonNN.py`. The public cases of a check compare with stored values (`autograders/data/`, made
by `python scripts/make_check_data.py` from these references and tested against them); the cases drawn at grading
time (strict grading, `autograders.kit.grading_rng`) are computed with them.

Every reference begins with `announce(name)`: under scripts/grade.py the sandbox's audit hook refuses, and flags, a
call that comes from submitted code rather than from a check (elsewhere it costs nothing).
"""

from __future__ import annotations

import sys

REFERENCE_EVENT = "memlab.reference.called"  # scripts/grade_sandbox.py listens for it


def announce(name: str) -> None:
    sys.audit(REFERENCE_EVENT, name)
