"""The grader: how a folder of submitted notebooks becomes a CSV of scores that can be trusted both ways.

The trust model. A submitted notebook is untrusted code: it runs only in a sandboxed Jupyter kernel, and that kernel
never decides a verdict. Its check cells *collect*: they run the learner's code on the check's inputs (public cases
and cases drawn from the student's seed) and show what it returned as plain data (autograders/wire.py, a transcript
per check: autograders/kit.py). A judge process that never runs submitted code replays each transcript through the
same check, computes the expected values itself and decides. Expected values, grading references and answers of
the drawn cases never exist in the kernel; nothing the kernel does (patch torch, replace a check, read a frame,
forge a transcript) changes what the judge expects.

One module per concern:

| module | what it does |
|---|---|
| `types` | the task and result dataclasses that cross between processes |
| `course` | the nbgrader course: its configuration, lessons, graded cells, a prepared copy |
| `submission` | a submission read as data: refused files, other files copied without links, a static review |
| `isolation` | bubblewrap + prlimit sandboxes and a watch on their processes |
| `autograde` | nbgrader's preprocessors: `SandboxedExecute` (collect) and `JudgeChecks` (the verdict) |
| `judge` | the judge: in the notebook's worker under grade.py, its own process (`python -m grading.judge`) under `nbgrader autograde` |
| `rerun` | measurements of the learner's code collected again in a fresh sandbox from its definitions only |
| `worker` | one submission: nbgrader's own autograde in a private course copy, in a process forked from a preloaded server |
| `batch` | the batch and parallel driver behind scripts/grade.py: tasks, shards, the CSV |
| `learner_version` | what `nbgrader generate_assignment` adds to a learner version: `raises-exception` tags, the model solution's recorded outputs |

Because the preprocessors are configured in nbgrader_config.py, `nbgrader autograde` grades exactly as
scripts/grade.py does; grade.py adds batching, parallelism, shards and the CSV.
"""

import sys

# jsonschema, which nbformat imports, imports rfc3987_syntax when it is installed (nbformat's jsonschema[format-nongpl]
# extra brings it) and that compiles about 38 Lark grammars at import: about 1 s of every grading process (the
# driver, each worker), for the "iri" format checks that no notebook schema uses (python-jsonschema/jsonschema#1428,
# closed unchanged). Any process that imports the grader before nbformat skips it; jsonschema then checks "iri" not.
sys.modules.setdefault("rfc3987_syntax", None)
