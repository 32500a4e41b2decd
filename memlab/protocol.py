"""The grading protocol every floor shares (grading → autograders → memlab): how a process is told that it runs
under grading, and how a student's seed of drawn cases comes from a class's seed. Written once, here, at the bottom
floor, so that the grader that starts a process, the check kit in it and the toolkit read the same names.

A grading kernel and the judge's fresh process for a measurement are started with `grading_environment(seed)`; the
kit reads it when it is imported (autograders.kit.Context.from_environment). Without it a process is a learner's.
"""

from __future__ import annotations

import hashlib

#: the mode of a process's checks: "collect" (the grading kernel), "strict" (tests); unset or else: a learner's
GRADING_ENV = "COURSE_GRADING"
#: the student's seed of the cases drawn at grading time (`student_seed`), only under grading
SEED_ENV = "COURSE_GRADING_SEED"
COLLECT, STRICT = "collect", "strict"


def student_seed(seed: int, student: str, lesson: str) -> int:
    """The seed of one student's drawn cases in one lesson, from the class's seed: all a grading kernel is told of the
    class's seed, and the same for every process that grades this student's lesson."""
    return int(hashlib.sha256(f"{seed}/{student}/{lesson}".encode()).hexdigest()[:12], 16)


def grading_environment(seed: int) -> tuple[tuple[str, str], ...]:
    """The variables a process that collects under grading is started with: collect mode and the student's `seed`."""
    return ((GRADING_ENV, COLLECT), (SEED_ENV, str(seed)))
