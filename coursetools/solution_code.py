"""The solution notebooks' own answers, for the tests and the benchmarks: each model answer lives in one place, its
notebook.

`solution(slug, *names)` gives those names' values (in that order): it loads from solutions/<slug>/<slug>.ipynb what those names need (the solution's functions,
the helpers and constants they read, the imports), chosen as the grader chooses what a rerun loads
(`grading.rerun.definitions`), runs those statements in a fresh namespace and returns it. As a rerun does, it
passes over a statement that fails (one needed only because a local name of a function is also a lesson's name, and
which reads what a skipped cell made), and then asks that every name is there. The lesson checks' tests
take the right answers from here and build their wrong variants from them, so no test holds a second copy of an
answer that could drift from the notebook's.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from types import SimpleNamespace

from grading.rerun import definitions

ROOT = Path(__file__).resolve().parents[1]


def _cells(slug: str) -> list[list]:
    """[code, is the lesson's own cell] of the solution notebook's code cells, in order."""
    notebook = json.loads((ROOT / "solutions" / slug / f"{slug}.ipynb").read_text(encoding="utf-8"))
    return [
        ["".join(cell["source"]), not cell.get("metadata", {}).get("nbgrader", {}).get("solution", False)]
        for cell in notebook["cells"]
        if cell["cell_type"] == "code"
    ]


def solution(slug: str, *names: str) -> tuple:
    """The values of `names` in the solution of `slug`, in that order."""
    namespace = _namespace(slug, names)
    return tuple(getattr(namespace, name) for name in names)


@functools.cache
def _namespace(slug: str, names: tuple[str, ...]) -> SimpleNamespace:
    """The namespace in which the solution's statements that `names` need have run; each name must be there."""
    namespace: dict = {"__name__": f"solution_{slug.replace('-', '_')}"}
    for code, _seconds in definitions(_cells(slug), set(names)):
        try:
            exec(compile(code, f"<solution {slug}>", "exec"), namespace)  # noqa: S102 - the course's own notebook
        except Exception:  # noqa: BLE001, S112 - needed by a name's coincidence only; the names are asserted below
            continue
    missing = [name for name in names if name not in namespace]
    assert not missing, f"solutions/{slug} defines no {missing}"
    return SimpleNamespace(**{k: v for k, v in namespace.items() if not k.startswith("__")})
