"""scripts/release.py: the learner release holds lessons, toolkit and checks, and nothing that gives answers away.

A learner graded for credit gets this folder instead of the repository: no solutions/, no grading references, no
hidden tests, no model answers of the written questions, no tests/; its checks still work (the public cases compare
with stored values), and under strict grading they say that grading needs the instructor's copy.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import nbformat
import pytest
from links import broken_links, notebook_links, served_folder
from nbgrader_pipeline import ROOT, SCRIPTS, SOLUTIONS, lesson_slugs


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    out = tmp_path_factory.mktemp("release") / "memlab-course"
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "release.py"), str(out), "--zip"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return out


def test_it_holds_the_lessons_the_toolkit_and_the_checks(release):
    top = sorted(p.name for p in release.iterdir())
    assert top == [
        "README.ko.md",
        "README.md",
        "RELEASE.json",
        "autograders",
        "docs",
        "environment.yml",
        "grading",
        "jupyter-config",
        "ko",
        "lessons",
        "memlab",
        "pyproject.toml",
        "requirements-ko.txt",
        "requirements.txt",
        "results",
    ]
    for slug in lesson_slugs():
        assert (release / "lessons" / slug / f"{slug}.ipynb").is_file()
        korean = release / "ko" / "lessons" / slug / f"{slug}.ipynb"
        assert nbformat.read(korean, as_version=4).metadata["memlab"] == {"language": "ko"}
    assert (release / "autograders" / "locale" / "ko" / "LC_MESSAGES" / "autograders.mo").is_file()
    assert sorted(p.name for p in (release / "docs").iterdir()) == ["learn.ko.md", "learn.md"]
    assert (release / "autograders" / "kit.py").is_file() and (release / "autograders" / "data").is_dir()
    assert release.with_suffix(".zip").is_file()
    manifest = json.loads((release / "RELEASE.json").read_text())
    assert set(manifest["files"]) == {
        p.relative_to(release).as_posix()
        for p in release.rglob("*")
        if p.is_file() and p.name != "RELEASE.json"
    }


def test_its_pyproject_installs_only_what_it_holds(release):
    """The repository's pyproject.toml also installs coursetools/ and its commands, which the release has not: the
    released one packages memlab, autograders and grading, and names only commands of theirs."""
    import tomllib

    project = tomllib.loads((release / "pyproject.toml").read_text())
    packages = project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    assert packages == ["memlab", "autograders", "grading"] and all((release / p).is_dir() for p in packages)
    commands = project["project"].get("scripts", {})
    assert all(target.split(".")[0] in packages for target in commands.values()), commands
    repository = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "coursetools" in repository["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]


def test_nothing_that_gives_answers_away(release):
    names = {p.relative_to(release).as_posix() for p in release.rglob("*")}
    assert not any(n.startswith(("solutions", "tests", "scripts", "coursetools", ".ci")) for n in names)
    # of results/, only what a lesson or a guide links to (the GPU results its GPU sections cite, the install sizes)
    from coursetools.release import document_links

    cited = {
        (doc.parent / link).resolve().relative_to(release.resolve()).as_posix()
        for doc in [*release.rglob("*.ipynb"), *release.rglob("*.md")]
        for link in document_links(doc)
    }
    results = {p.relative_to(release).as_posix() for p in (release / "results").rglob("*") if p.is_file()}
    assert results and results <= cited, results - cited
    assert not any("references" in n for n in names)
    for path in release.rglob("*.ipynb"):
        text = path.read_text()
        for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "BEGIN MARK SCHEME", "Rubric"):
            assert marker not in text, (path, marker)
    editions = [
        (SOLUTIONS, release / "lessons"),
        (SOLUTIONS.parent / "ko" / "solutions", release / "ko" / "lessons"),
    ]
    for (solutions, lessons), slug in itertools.product(editions, lesson_slugs()):
        # no line of a solution that the lesson does not also show elsewhere
        source = nbformat.read(solutions / slug / f"{slug}.ipynb", as_version=4)
        released = nbformat.read(lessons / slug / f"{slug}.ipynb", as_version=4)
        released_text = "\n".join(cell.source for cell in released.cells)
        shown = "\n".join(
            c.source for c in source.cells if not c.metadata.get("nbgrader", {}).get("solution")
        )
        for cell in source.cells:
            if cell.metadata.get("nbgrader", {}).get("solution"):
                body = cell.source.split("### BEGIN SOLUTION")[-1].split("### END SOLUTION")[0]
                own = [line.strip() for line in body.splitlines() if len(line.strip()) > 20]
                own = [line for line in own if line not in shown]
                leaked = [line for line in own if line in released_text]
                assert own and not leaked, (slug, cell.metadata["nbgrader"]["grade_id"], leaked)
    readme = (release / "README.md").read_text()
    assert "git clone" not in readme and "## Teach" not in readme and "jupyter lab" in readme
    korean = (release / "README.ko.md").read_text()
    assert "git clone" not in korean and "scripts/grade.py" not in korean and "ko/lessons" in korean
    assert "docs/learn.md" in readme and "docs/learn.ko.md" in korean


def test_every_link_of_every_lesson_opens_in_the_jupyterlab_its_readme_starts(release):
    """The release's README starts JupyterLab in the release's own folder: every relative link and image of every
    lesson (the GPU results a lesson cites, a file of the toolkit) is a file in that folder (tests/links.py)."""
    for readme, lessons in (("README.md", "lessons"), ("README.ko.md", "ko/lessons")):
        notebooks = sorted((release / lessons).glob("*/*.ipynb"))
        assert len(notebooks) == len(lesson_slugs()), notebooks
        assert sum(len(notebook_links(nb)) for nb in notebooks) > 0
        assert broken_links(notebooks, served_folder(release / readme)) == []


def test_every_link_of_the_released_guides_opens_in_the_release(release):
    """The front pages and learner's guides the release ships link only to files and folders it holds (docs/learn.md
    cites results/install_sizes.json and jupyter-config/README.md: copied as a lesson's cited results are)."""
    from coursetools.release import relative_links

    guides = ["README.md", "README.ko.md", "docs/learn.md", "docs/learn.ko.md"]
    missing = [
        (guide, link)
        for guide in guides
        for link in relative_links((release / guide).read_text(encoding="utf-8"))
        if not ((release / guide).parent / link).exists()
    ]
    assert missing == []


def _run_in_release(release, code: str, **env) -> subprocess.CompletedProcess:
    import os

    environment = {**os.environ, "PYTHONPATH": str(release), "HF_HUB_OFFLINE": "1", **env}
    environment.pop("COURSE_GRADING", None) if "COURSE_GRADING" not in env else None
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=release,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


CHECK_ULP = (
    "import sys, math; sys.path.insert(0, '.');"
    "import autograders.lesson02 as l; assert 'references' not in str(l.__file__);"
    "from tests_ulp import ulp; l.check_ulp(ulp)"
)
ULP = """
import math
from memlab.formats import FORMATS
def ulp(x, fmt):
    f = FORMATS[fmt]
    bias = 2 ** (f.exponent_bits - 1) - 1
    emin = 1 - bias
    if x == 0:
        return 2.0 ** (emin - f.mantissa_bits)
    e = math.floor(math.log2(abs(x)))
    if 2.0 ** (e + 1) <= abs(x):
        e += 1
    if 2.0**e > abs(x):  # log2 rounds up just below a power of two
        e -= 1
    e = max(e, emin)
    return 2.0 ** (e - f.mantissa_bits)
"""


def test_its_checks_work_for_a_learner(release):
    (release / "tests_ulp.py").write_text(ULP)
    try:
        proc = _run_in_release(release, CHECK_ULP)
    finally:
        (release / "tests_ulp.py").unlink()
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "✓ e4_ulp: 70 cases passed" in proc.stdout


def test_grading_for_credit_from_it_says_it_needs_the_instructors_copy(release):
    (release / "tests_ulp.py").write_text(ULP)
    try:
        proc = _run_in_release(release, CHECK_ULP, COURSE_GRADING="strict", COURSE_GRADING_SEED="5")
    finally:
        (release / "tests_ulp.py").unlink()
    assert proc.returncode != 0
    assert "grading for credit needs autograders/references/" in proc.stderr


def test_an_existing_folder_is_refused(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPTS / "release.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "already exists" in proc.stderr


def test_a_lesson_linking_to_what_the_release_must_not_hold_stops_the_build(tmp_path):
    """Only files of release.CITED (results/) are copied for a link; a link to a solution stops the build."""
    from coursetools import release

    lesson = tmp_path / "lessons" / "01-x" / "01-x.ipynb"
    lesson.parent.mkdir(parents=True)
    for link, copied in (("../../results/nvidia-h200.json", True), ("../../solutions/README.md", False)):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"[it]({link})")])
        nbformat.write(nb, lesson)
        if copied:
            assert release.copy_cited(tmp_path) == ["results/nvidia-h200.json"]
            assert (tmp_path / "results" / "nvidia-h200.json").is_file()
        else:
            with pytest.raises(SystemExit, match="which the release does not hold"):
                release.copy_cited(tmp_path)
