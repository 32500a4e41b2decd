"""The learner's JupyterLab shows the learner's tools only; one command gives an instructor nbgrader's full view.

nbgrader enables all its lab plugins and server extensions when installed. `pip install -r requirements.txt`
(`-e .`) installs jupyter-config/learner/ into {prefix}/etc/jupyter (pyproject.toml, shared-data), which turns
off the instructor's tools and keeps the Validate button; `JUPYTER_CONFIG_PATH=$PWD/jupyter-config/instructor
jupyter lab` turns them back on (jupyter-config/README.md). Tested here three ways, in this test environment: the
installed files, what `jupyter labextension list` / `jupyter server extension list` report, and what a running
server serves (the page config JupyterLab hands the browser, and which nbgrader handlers answer).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from lab_server import (
    INSTRUCTOR_CONFIG,
    INSTRUCTOR_PLUGINS,
    INSTRUCTOR_SERVER_EXTENSIONS,
    REPO,
    VALIDATE_PLUGIN,
    VALIDATE_SERVER_EXTENSION,
    jupyter_env,
    running_lab,
)

LEARNER_CONFIG = REPO / "jupyter-config" / "learner"
LEARNER_FILES = sorted(p.relative_to(LEARNER_CONFIG) for p in LEARNER_CONFIG.rglob("*.json"))
PREFIX_CONFIG = Path(sys.prefix) / "etc" / "jupyter"
BIN = Path(sys.executable).parent
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# JupyterLab's "Would you like to get notified about official Jupyter news?" toast, on every first start: off in
# both views (the plugin that asks and fetches the news)
NEWS_PLUGIN = "@jupyterlab/apputils-extension:announcements"


def jupyter(tool: str, *args: str, tmp_path: Path, config_path: Path | None = None) -> str:
    """`jupyter-<tool> args` from this environment; stdout and stderr together, colours stripped."""
    proc = subprocess.run(
        [str(BIN / f"jupyter-{tool}"), *args],
        env=jupyter_env(tmp_path, config_path),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, (
        f"jupyter {tool} {' '.join(args)}: {proc.returncode}\n{proc.stdout}{proc.stderr}"
    )
    return ANSI.sub("", proc.stdout + proc.stderr)


def disabled_labextensions(listing: str) -> set[str]:
    """The 'Disabled extensions:' block of `jupyter labextension list`."""
    _, found, rest = listing.partition("Disabled extensions:")
    if not found:
        return set()
    names = set()
    for line in rest.splitlines()[1:] if rest.startswith("\n") else rest.splitlines():
        if not line.startswith(" ") or not line.strip():
            break
        names.add(line.split()[0])
    return names


def server_extension_states(listing: str, config_dir: Path) -> dict[str, bool]:
    """`jupyter server extension list`'s section for one config folder: {module: enabled}."""
    states, inside = {}, False
    for line in listing.splitlines():
        if line.startswith("Config dir:"):
            inside = Path(line.partition(":")[2].strip()) == config_dir
        elif inside and re.match(r"^\s{4}\S+ (enabled|disabled)$", line):
            name, state = line.split()
            states[name] = state == "enabled"
    return states


# ---- the files ---------------------------------------------------------------------------------------------------


def test_learner_config_is_installed_into_the_environment():
    """requirements.txt's `-e .` copied jupyter-config/learner/ into {prefix}/etc/jupyter, unchanged."""
    assert LEARNER_FILES, "jupyter-config/learner/ has no .json file"
    for relative in LEARNER_FILES:
        installed = PREFIX_CONFIG / relative
        assert installed.is_file(), (
            f"{installed} is missing: the learner's JupyterLab would show nbgrader's instructor tools. "
            "Install the project as requirements.txt does (`pip install -e .`)."
        )
        assert installed.read_text() == (LEARNER_CONFIG / relative).read_text(), (
            f"{installed} differs from jupyter-config/learner/{relative}: run `pip install -e .` again"
        )


def test_learner_config_turns_off_exactly_the_instructor_tools():
    """Every name is one nbgrader 0.9.6 really has (a renamed plugin would silently come back), and the learner
    file turns off exactly the instructor's plugins and server extensions; the instructor file turns them on."""
    labext = BIN.parent / "share" / "jupyter" / "labextensions" / "@jupyter" / "nbgrader"
    shipped_plugins = set(re.findall(r'"(@jupyter/nbgrader:[a-z-]+)"', _read_js(labext)))
    assert {*INSTRUCTOR_PLUGINS, VALIDATE_PLUGIN} <= shipped_plugins, shipped_plugins
    lab_core = BIN.parent / "share" / "jupyter" / "lab" / "static"
    assert any(f'"{NEWS_PLUGIN}"' in p.read_text(errors="replace") for p in lab_core.glob("jlab_core*.js"))
    nbgrader_json = json.loads((PREFIX_CONFIG / "jupyter_server_config.d" / "nbgrader.json").read_text())
    shipped_extensions = set(nbgrader_json["ServerApp"]["jpserver_extensions"])
    assert {*INSTRUCTOR_SERVER_EXTENSIONS, VALIDATE_SERVER_EXTENSION} == shipped_extensions

    for view, on in (("learner", False), ("instructor", True)):
        root = REPO / "jupyter-config" / view
        page = json.loads((root / "labconfig" / "page_config.d" / "memlab-course.json").read_text())
        assert page["disabledExtensions"] == {
            **dict.fromkeys(INSTRUCTOR_PLUGINS, not on),
            NEWS_PLUGIN: True,
        }, view
        server = json.loads((root / "jupyter_server_config.d" / "zz-memlab-course.json").read_text())
        expected = {**dict.fromkeys(INSTRUCTOR_SERVER_EXTENSIONS, on), VALIDATE_SERVER_EXTENSION: True}
        assert server["ServerApp"]["jpserver_extensions"] == expected, view
    # merged in name order within a folder: the learner file must come after nbgrader's own
    assert "zz-memlab-course.json" > "nbgrader.json"


def _read_js(labext: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted((labext / "static").glob("*.js")))


# ---- what Jupyter's own commands report ----------------------------------------------------------------------------


def test_labextension_list_learner_and_instructor(tmp_path):
    learner = jupyter("labextension", "list", tmp_path=tmp_path)
    assert "@jupyter/nbgrader" in learner and "enabled" in learner
    assert disabled_labextensions(learner) == {*INSTRUCTOR_PLUGINS, NEWS_PLUGIN}, learner
    instructor = jupyter("labextension", "list", tmp_path=tmp_path, config_path=INSTRUCTOR_CONFIG)
    assert not {n for n in disabled_labextensions(instructor) if n.startswith("@jupyter/nbgrader")}, (
        instructor
    )


def test_server_extension_list_learner(tmp_path):
    """`jupyter server extension list` shows each config folder of the environment and the user (not
    JUPYTER_CONFIG_PATH's), so it shows the learner's default; the instructor's is tested on a running server."""
    listing = jupyter("server", "extension", "list", tmp_path=tmp_path)
    states = server_extension_states(listing, PREFIX_CONFIG)
    assert states, listing
    assert states[VALIDATE_SERVER_EXTENSION] is True, listing
    for name in INSTRUCTOR_SERVER_EXTENSIONS:
        assert states[name] is False, f"{name}:\n{listing}"


# ---- what a running server serves -----------------------------------------------------------------------------


@pytest.mark.parametrize("view", ["learner", "instructor"])
def test_running_server_serves_the_view(view, tmp_path):
    """The page config JupyterLab hands the browser, and which nbgrader handlers answer: the learner's server has
    Validate's endpoints only; the instructor's (one env var) has formgrader and the lists as well."""
    lessons = tmp_path / "course" / "lessons"
    lessons.mkdir(parents=True)
    config_path = INSTRUCTOR_CONFIG if view == "instructor" else None
    with running_lab(lessons, tmp_path / "work", cwd=lessons.parent, config_path=config_path) as lab:
        disabled = set(lab.page_config()["disabledExtensions"])
        nbgrader_version = lab.get("/nbgrader_version?version=0.9.6")
        formgrader, courses = lab.get("/formgrader"), lab.get("/courses")
    assert VALIDATE_PLUGIN not in disabled
    assert NEWS_PLUGIN in disabled, "JupyterLab would ask about Jupyter news in a toast"
    assert nbgrader_version == (200, '{"success": true}'), "Validate's server extension is not answering"
    if view == "learner":
        assert disabled >= set(INSTRUCTOR_PLUGINS), disabled
        assert formgrader[0] == 404 and courses[0] == 404, "an instructor's server extension is loaded"
    else:
        assert not {n for n in disabled if n.startswith("@jupyter/nbgrader")}, disabled
        assert formgrader[0] == 200 and "formgrade" in formgrader[1], formgrader
        assert courses[0] == 200, courses
