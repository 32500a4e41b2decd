"""The repository's own code imports its packages, never by editing sys.path (issue 37, item 4), and scripts/ holds
only thin entry points: the tools' code is in coursetools/ (the GPU-evidence tooling in coursetools/gpu/).

A `sys.path.insert(...)`/`sys.path.append(...)`/`sys.path.extend(...)`, an assignment to `sys.path` or to a slice or
item of it is found by parsing each file (ast), so a string that builds a hostile submission for a test (one that
plants a module and puts its folder on sys.path) is data, not an edit.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the repository's own Python code
OWN = [
    "memlab",
    "autograders",
    "grading",
    "classroom",
    "coursetools",
    "scripts",
    "tests",
    "nbgrader_config.py",
]
#: lines a file of scripts/ may have: a docstring, an import, the call of the tool's main
THIN = 15
#: the instructor's entry point also grades from its checkout when this Python lacks the course, and says what to
#: install when it lacks the dependencies (at import or those grading imports later): that code cannot live in a
#: package the Python does not have
GUARDED = {"grade.py": 70}


def own_python_files(root: Path = ROOT) -> list[Path]:
    files = []
    for name in OWN:
        path = root / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [
                p
                for p in path.rglob("*.py")
                if not any(
                    part.startswith(".") or part == "__pycache__" for part in p.relative_to(root).parts
                )
            ]
    return sorted(files)


def _is_sys_path(node: ast.AST) -> bool:
    """`sys.path` itself, or an item or slice of it (`sys.path[:0]`)."""
    if isinstance(node, ast.Subscript):
        node = node.value
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    )


def sys_path_edits(source: str) -> list[int]:
    """The lines of `source` that change sys.path."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("insert", "append", "extend") and _is_sys_path(node.func.value):
                lines.append(node.lineno)
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        if any(_is_sys_path(t) for t in targets):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_finder_finds_each_kind_of_edit_and_no_string():
    source = (
        "import sys\n"
        "sys.path.insert(0, 'x')\n"
        "sys.path.append('x')\n"
        "sys.path[:0] = ['x']\n"
        "sys.path = ['x']\n"
        "sys.path += ['x']\n"
        "code = \"import sys; sys.path.insert(0, '')\"\n"
        "sys.modules.pop('x', None)\n"
    )
    assert sys_path_edits(source) == [2, 3, 4, 5, 6]


def test_no_code_of_the_repository_edits_sys_path():
    found = {
        str(path.relative_to(ROOT)): edits
        for path in own_python_files()
        if (edits := sys_path_edits(path.read_text(encoding="utf-8")))
    }
    assert not found, (
        f"sys.path edited at {found}: import the package (coursetools.X, grading.X), load a file with "
        "importlib.util.spec_from_file_location, or use pytest's pythonpath option"
    )


def test_scripts_are_thin_entry_points():
    fat = {
        p.name: n
        for p in sorted((ROOT / "scripts").glob("*.py"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > GUARDED.get(p.name, THIN)
    }
    assert not fat, (
        f"scripts/ holds code ({fat} lines): move it into coursetools/ and call its main from there"
    )
