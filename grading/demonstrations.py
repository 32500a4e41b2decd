"""Lesson cells that grading does not run: demonstrations that no check depends on.

A lesson marks such a cell in its source (solutions/) with the cell tag `skip-when-grading`: lesson 08's training
of the graded run (the run is handed in with the notebook and evaluated, not trained again: grading.course.HANDED_IN)
and its QLoRA and causal-LM demonstrations, minutes of a grader's CPU per notebook that change no score.

Who decides. In a submission, a code cell is skipped only when its code is exactly the code of a tagged cell of the
lesson's source notebook; the submission's own metadata is never read. So a learner can neither skip a check nor a
cell they wrote or changed (a changed cell runs, at the cost of its time), and tagging a cell of their own does
nothing. A skipped cell keeps its code, commented out under one line that says why, and has no outputs.

When it is safe, decided for each submission (`decide`). A tagged cell is skipped only if no later cell that still
runs reads a name it binds at its top level (assigned, defined, imported, deleted, or changed through an attribute or
an item: `tokenizer.truncation_side = ...`), the submission's own cells included: a learner's function that reads a
lesson global (`SEQS` in their `plan_for`) keeps the cell that binds it running. Reads are the global names a cell
uses at its top level or free in its functions (Python's `symtable`); storing into an item of an earlier object
(`SUMMARY[...] = ...`) is not a read. What this cannot see is a name reached dynamically (`globals()["SEQS"]`) or
state changed through a call (a generator drawn from, `model.train()`): a lesson tags only cells whose effects end
with the cell. `unsafe_tags` (tests/grader/test_demonstrations.py, on every lesson) refuses a tag on a graded, solution or
locked cell, or on a cell the model solution itself would have to keep; the grading round trip
(tests/grader/test_grading_roundtrip.py: every solution scores full with its tagged cells skipped) is the final word.
"""

from __future__ import annotations

import ast
import symtable

TAG = "skip-when-grading"
SKIPPED = "# not run when grading: a demonstration no check depends on (grading/demonstrations.py)"


def tagged_sources(source_nb) -> set[str]:
    """The code of the source notebook's cells tagged TAG."""
    return {
        cell.source
        for cell in source_nb.cells
        if cell.cell_type == "code" and TAG in cell.get("metadata", {}).get("tags", [])
    }


def skip(nb, source_nb) -> list[int]:
    """Comment out, in `nb` (a submission), the code cells whose code is exactly a tagged cell's of `source_nb` and
    whose names no later cell that runs reads (`decide`); the indices of the cells skipped."""
    tagged = tagged_sources(source_nb) if source_nb is not None else set()
    skipped, _ = decide(nb, tagged)
    for index in skipped:
        cell = nb.cells[index]
        cell.source = "\n".join([SKIPPED, *("# " + line for line in cell.source.splitlines())])
        cell.outputs = []
        cell.execution_count = None
    return skipped


def decide(nb, tagged: set[str]) -> tuple[list[int], dict[int, str]]:
    """(indices of the cells of `nb` to skip, {index: why it runs} for the other cells whose code is in `tagged`).

    Decided from the last cell to the first: a candidate is skipped only if no later cell that still runs (the
    submission's own cells included: a learner's function may read a lesson's global) reads a name it binds."""
    code_cells = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    skipped: list[int] = []
    kept: dict[int, str] = {}
    reads_after: dict[str, int] = {}  # name -> index of a later running cell that reads it
    for index, cell in reversed(code_cells):
        code = _code(cell.source)
        if cell.source in tagged:
            bound = bound_names(code) if code is not None else None
            clash = sorted(bound & reads_after.keys()) if bound is not None else ["(does not parse)"]
            if not clash:
                skipped.append(index)
                continue
            readers = sorted({reads_after[name] for name in clash if name in reads_after})
            kept[index] = f"binds {clash}, read by the later cell(s) {readers}"
        for name in read_names(code) if code is not None else ():
            reads_after[name] = index
    return sorted(skipped), kept


def _code(source: str) -> str | None:
    """The cell's Python (IPython's `%magic` and `!shell` lines left out), or None if it does not parse."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    try:
        ast.parse(code)
    except SyntaxError:
        return None
    return code


def bound_names(code: str) -> set[str]:
    """The names a cell binds at its top level (assigned, defined, imported, deleted; a comprehension's or a
    function's own names are not), and the names whose attributes or items its top-level code stores to."""
    table = symtable.symtable(code, "<cell>", "exec")
    names = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}
    scoped = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
    stack = list(ast.parse(code).body)
    while stack:
        node = stack.pop()
        if isinstance(node, scoped):
            continue
        if isinstance(node, (ast.Attribute, ast.Subscript)) and isinstance(node.ctx, ast.Store):
            base = node.value
            while isinstance(base, (ast.Attribute, ast.Subscript)):
                base = base.value
            if isinstance(base, ast.Name):
                names.add(base.id)
        stack.extend(ast.iter_child_nodes(node))
    return names


def read_names(code: str) -> set[str]:
    """The global names a cell reads: at its top level, or free in its functions, classes and comprehensions
    (their parameters and locals are theirs); a name that is only the base of an item stored to (`SUMMARY[k] = v`)
    is not read."""
    read: set[str] = set()
    tables = [symtable.symtable(code, "<cell>", "exec")]
    while tables:
        table = tables.pop()
        top = table.get_type() == "module"
        for symbol in table.get_symbols():
            if symbol.is_referenced() and (top or symbol.is_global()):
                read.add(symbol.get_name())
        tables.extend(table.get_children())
    # a name read only as `NAME[...] = value` is not a read of what NAME holds
    nodes = list(ast.walk(ast.parse(code)))
    bases = {
        id(node.value): node.value.id
        for node in nodes
        if isinstance(node, ast.Subscript)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
    }
    loaded = {
        node.id
        for node in nodes
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and id(node) not in bases
    }
    return read - (set(bases.values()) - loaded)


def unsafe_tags(nb) -> list[str]:
    """Why a cell the lesson `nb` (a source notebook) tags would run when grading its own model solution, or could
    change a score: a graded, solution or locked cell, or one whose names a later lesson cell reads. [] when none."""
    problems = []
    tagged_cells = {i: c for i, c in enumerate(nb.cells) if TAG in c.get("metadata", {}).get("tags", [])}
    for index, cell in tagged_cells.items():
        nbgrader = cell.get("metadata", {}).get("nbgrader") or {}
        if (
            cell.cell_type != "code"
            or nbgrader.get("grade")
            or nbgrader.get("solution")
            or nbgrader.get("locked")
        ):
            problems.append(f"cell {index}: only a lesson's own code cell can be skipped")
    _, kept = decide(nb, {c.source for c in tagged_cells.values() if c.cell_type == "code"})
    problems += [f"cell {index}: {why}" for index, why in sorted(kept.items())]
    return problems
