"""Reference implementations that the checks need only when grading for credit: NOT part of the learner release.

Where a reference *is* the answer to an exercise (an algorithm a learner is asked to write), it lives here instead
of in `autograders/lessonNN.py`. The public cases of a check compare with stored values (`autograders/data/`, made
by `python scripts/make_check_data.py` from these references and tested against them); the cases drawn at grading
time (`autograders.kit.drawn_cases`) are computed with them, in reference steps only: the grading judge
(grading/judge.py) has them, the sandboxed kernel that runs a submission does not (its copy of the kit leaves this
folder out), and neither does the learner release.
"""
