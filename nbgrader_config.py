"""nbgrader's view of this repository.

    solutions/NN-slug/NN-slug.ipynb   nbgrader's "source" step: the only hand-written version of a lesson
    lessons/NN-slug/NN-slug.ipynb     nbgrader's "release" step: generated, never hand-edited

`python scripts/build_lessons.py` writes lessons/ with nbgrader's own preprocessors and this configuration; the
output is byte-identical to `nbgrader generate_assignment NN-slug --force` run here (tests/build/test_lessons_in_sync.py).
`python scripts/grade.py SUBMISSIONS_DIR --out grades.csv` grades with it in a throwaway course directory, and so does
`nbgrader autograde LESSON` here (the same preprocessors, below).
Option names are those of nbgrader 0.9.6.
"""

import os

from nbgrader.converters import GenerateAssignment

from grading.learner_version import TagCellsThatMayRaise

c = get_config()  # noqa: F821  (injected by traitlets when it loads this file)

# ---- the course directory -------------------------------------------------------------------------------------
# root = the folder this file is in, so the config works from any cwd and in a copy of the course (scripts/grade.py)
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "lessons"
# the gradebook of an ad-hoc `nbgrader` run here lives at <root>/gradebook.db (git-ignored); grade.py uses its own
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(c.CourseDirectory.root, "gradebook.db")

# Never copy these from a lesson folder or a submission. A learner-made `autograders/` or `memlab/` next to the
# notebook would shadow the installed packages (the kernel's cwd comes first on sys.path), so a home-made
# always-passing check would be graded instead of the real one.
c.CourseDirectory.ignore = [
    ".ipynb_checkpoints",
    "*.pyc",
    "__pycache__",
    "feedback",
    "autograders",
    "autograders.py",
    "memlab",
    "memlab.py",
]

# ---- generate_assignment: what the learner version looks like ---------------------------------------------------
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
# besides nbconvert's defaults, drop the per-cell run timings JupyterLab records when "record timing" is on
c.ClearOutput.remove_metadata_fields = {"collapsed", "scrolled", "execution", "ExecuteTime"}
# and tag every cell that stops on an unfinished lesson (exercises, checks, `needs(...)` cells) `raises-exception`,
# so that JupyterLab's Run All reaches the end of the lesson (grading/learner_version.py)
c.GenerateAssignment.preprocessors = [
    *GenerateAssignment.class_traits()["preprocessors"].make_dynamic_default(),
    TagCellsThatMayRaise,
]

# ---- autograde / validate: running a notebook -------------------------------------------------------------------
# Per cell. A cell that runs past it (an infinite loop) is interrupted: it errors and loses its exercise, and the
# remaining cells still run. scripts/grade.py --timeout overrides it. 300 s: the longest cell grading runs is a
# lesson's exercise or check on a shared 2-core machine (lesson 08's training is not run when grading, below).
c.Execute.timeout = 300
c.Execute.interrupt_on_timeout = True

# ---- autograde: the verdict outside the submission's process (grading/autograde.py) ------------------------------
# `nbgrader autograde`, formgrader's Autograde button and scripts/grade.py all run this list. SandboxedExecute runs
# the notebook in a bubblewrap sandbox, its check cells only collecting what the learner's code returns; JudgeChecks
# decides every check in a separate process that never runs submitted code, and replaces each check cell's outputs
# with the verdict (so stderr or a displayed value costs nothing). The seed of the drawn cases, the memory limit and
# isolation are `c.GradingSettings.*` (scripts/grade.py sets them from its options). nbgrader puts back a check
# cell a learner deleted (OverwriteCells.add_missing_cells) and restores an edited one from the gradebook.
# SkipDemonstrations first comments out the lesson's own cells tagged `skip-when-grading` in its source, where the
# submission's code is exactly theirs: demonstrations no check depends on, such as lesson 08's training of the graded
# run (handed in with the notebook and evaluated, not trained again) (grading/demonstrations.py).
c.Autograde.autograde_preprocessors = [
    "grading.autograde.SkipDemonstrations",
    "grading.autograde.SandboxedExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "grading.autograde.JudgeChecks",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.OverwriteCells.add_missing_cells = True
# The feedback a learner gets is the autograded notebook without the model answers and rubrics JudgeChecks wrote
# into it for the grader (grading/for_graders.py); the grader's notes on the notebook stay.
c.GenerateFeedback.preprocessors = [
    "grading.autograde.DropRubrics",
    "nbgrader.preprocessors.GetGrades",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
# Before nbgrader compares a submission's cells with the gradebook: the cells' grading marks (grade, solution, locked,
# points) are the course's, whatever the notebook's metadata says; an edited mark made nbgrader stop the whole
# notebook ("Inconsistent checksums") (grading/marks.py, grading.autograde.RestoreGradingMarks). The rest is nbgrader's own list.
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "grading.autograde.RestoreGradingMarks",
    "nbgrader.preprocessors.OverwriteCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# ---- late submissions and the export an LMS imports ---------------------------------------------------------------
# A lesson's due date is its assignment's in the gradebook (formgrader, `nbgrader db assignment import due.csv`, or
# `scripts/grade.py --due-dates due.csv`: one file, the columns name and duedate). nbgrader's AssignLatePenalties (in
# the autograde list above) then asks a LateSubmissionPlugin for the penalty of each late notebook: nbgrader's own
# takes nothing off unless told `c.LateSubmissionPlugin.penalty_method = "zero"`; a rule of your own is a subclass
# of nbgrader.plugins.LateSubmissionPlugin named here, e.g. 10 % of the score per day late:
#     c.AssignLatePenalties.plugin_class = "my_rules.TenPercentPerDay"
# `nbgrader export` writes one row per student (a column per lesson, per written answer, when it was handed in, how
# late, and the exchange's other submissions of it: grading/export.py); --exporter=nbgrader.plugins.CsvExportPlugin
# gives nbgrader's own long table.
c.ExportApp.plugin_class = "grading.export_plugin.ClassExport"
