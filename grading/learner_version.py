"""What the learner version of a lesson carries besides nbgrader's own release steps.

1. `TagCellsThatMayRaise`, a preprocessor of `nbgrader generate_assignment` (nbgrader_config.py appends it to
   `GenerateAssignment.preprocessors`, so scripts/build_lessons.py and nbgrader's command run it alike): every cell
   that stops on an unfinished lesson gets the `raises-exception` tag, so that JupyterLab's Run All (and nbclient,
   which honours the same tag) goes on to the end of the lesson instead of stopping at the first unfinished
   exercise. These are the exercise cells, the check cells and the cells that begin by calling
   `memlab.notebook.needs`. The tag changes nothing else: a failed check is still an error output, which is what
   nbgrader's Validate button, its autograder and nbval read. Solutions are not tagged, so nbval still fails on any
   error there.
2. `model_outputs(nb)`: the outputs of the solution's `needs(...)` cells, keyed by `memlab.notebook.cell_key` of
   their source, written next to the lesson as `memlab.notebook.MODEL_OUTPUTS` by scripts/build_lessons.py. An
   exercise's and a check's outputs are never recorded, and neither is stderr.
"""

from __future__ import annotations

import re

from nbconvert.preprocessors import Preprocessor
from nbgrader.utils import is_grade, is_solution
from traitlets import Bool

from memlab.notebook import cell_key

TAG = "raises-exception"
_NEEDS = re.compile(r"^needs\(", re.MULTILINE)


def uses_needs(cell) -> bool:
    return cell.cell_type == "code" and bool(_NEEDS.search(cell.source))


def is_exercise_or_check(cell) -> bool:
    return cell.cell_type == "code" and bool(is_solution(cell) or is_grade(cell))


class TagCellsThatMayRaise(Preprocessor):
    """Tag the exercise, check and `needs(...)` cells `raises-exception` (see the module's docstring)."""

    enabled = Bool(True, help="on, like nbgrader's own release preprocessors").tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        if is_exercise_or_check(cell) or uses_needs(cell):
            tags = list(cell.metadata.get("tags", []))
            if TAG not in tags:
                cell.metadata["tags"] = [*tags, TAG]
        return cell, resources


def model_outputs(nb) -> dict[str, list[dict]]:
    """{cell_key(source): outputs} of the `needs(...)` cells of an executed solution notebook."""
    recorded: dict[str, list[dict]] = {}
    for cell in nb.cells:
        if not uses_needs(cell) or is_exercise_or_check(cell):
            continue
        outputs = [
            _plain(output)
            for output in cell.get("outputs", [])
            if output.get("output_type") in ("display_data", "execute_result")
            or (output.get("output_type") == "stream" and output.get("name") == "stdout")
        ]
        if outputs:
            recorded[cell_key(cell.source)] = outputs
    return recorded


def _plain(output) -> dict:
    kind = output["output_type"]
    if kind == "stream":
        return {"output_type": "stream", "name": "stdout", "text": output.get("text", "")}
    return {
        "output_type": "display_data",
        "data": dict(output.get("data", {})),
        "metadata": dict(output.get("metadata", {})),
    }
