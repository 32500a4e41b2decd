"""Every lesson's check module is written with the check kit as one surface: `from autograders import kit` and
`kit.<name>` at each use, the gettext function `_` alone imported bare (Babel's extractor looks for `_(...)`), and
only the names the kit lists as lesson-facing (`kit.__all__`). A module that imports the kit name by name again
(the 15-20-name block each lesson once began with) fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from nbgrader_pipeline import FIXTURE_SOLUTIONS

from autograders import kit

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted((ROOT / "autograders").glob("lesson[0-9][0-9].py")) + [
    FIXTURE_SOLUTIONS / "00-fixture" / "fixture_checks.py"
]
MOST_NAMES = 3  # `from autograders.kit import _` is one; a block of more is the old surface


def test_the_lesson_modules_are_found():
    assert len(MODULES) >= 9


def test_the_kit_lists_only_what_it_defines():
    assert sorted(set(kit.__all__)) == sorted(kit.__all__)
    assert [name for name in kit.__all__ if not hasattr(kit, name)] == []


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_a_lesson_module_uses_the_kit_as_one_surface(path):
    tree = ast.parse(path.read_text(), str(path))
    by_name = [
        (node.lineno, [a.name for a in node.names])
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "autograders.kit"
    ]
    assert [(line, names) for line, names in by_name if len(names) > MOST_NAMES] == [], (
        "import the kit as `from autograders import kit` and write kit.<name>"
    )
    assert [(line, names) for line, names in by_name if set(names) - {"_"}] == [], "only `_` is imported bare"
    imports_kit = any(
        (
            isinstance(node, ast.ImportFrom)
            and node.module == "autograders"
            and any(a.name == "kit" for a in node.names)
        )
        or (
            isinstance(node, ast.Import)
            and any(a.name == "autograders.kit" and a.asname == "kit" for a in node.names)
        )
        for node in ast.walk(tree)
    )
    assert imports_kit
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "kit"
    }
    assert used, "the module uses no kit.<name>"
    assert sorted(used - set(kit.__all__)) == [], (
        "a lesson module uses a kit name that kit.__all__ does not list"
    )
