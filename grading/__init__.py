"""The grader: how a folder of submitted notebooks becomes a CSV of scores that can be trusted both ways.

A submitted notebook runs only in a sandboxed kernel that collects plain data; a judge that never runs submitted
code decides. What that guarantees and what it does not: docs/trust-model.md (the one description of it).

One module per concern:

| module | what it does |
|---|---|
| `settings` | `Settings`: how submissions are graded, each default written once; the course's stored seed |
| `types` | the task and result dataclasses that cross between processes |
| `course` | the nbgrader course: its configuration, lessons, graded cells, a prepared copy |
| `submission` | a submission read as data: refused files, other files copied without links, a static review |
| `marks` | the grading marks of a submission's cells put back as the course has them |
| `demonstrations` | lesson cells grading does not run: demonstrations no check depends on |
| `isolation` | bubblewrap + prlimit sandboxes and a watch on their processes |
| `kernels` | the one adapter over jupyter_client's, nbclient's and nbconvert's private methods |
| `autograde` | nbgrader's preprocessors: `SandboxedExecute` (collect), `JudgeChecks` (the verdict), `RestoreGradingMarks`, `SkipDemonstrations` |
| `judge` | the judge: in the notebook's worker under grade.py, its own process (`python -m grading.judge`) under `nbgrader autograde` |
| `rerun` | measurements of the learner's code collected again in a fresh sandbox from the statements they need |
| `worker` | one submission: nbgrader's own autograde in a private course copy, in a process forked from a preloaded server |
| `batch` | the batch and parallel driver behind scripts/grade.py: tasks, shards, the CSV, copied runs |
| `i18n` | the grader's own messages in the language of the lesson graded |
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
