"""Every relative link of every lesson, in both editions, opens in the JupyterLab the README starts.

The README's command (`jupyter lab`, run from the repository's root) decides the folder JupyterLab serves; a link
of a notebook (a markdown link or an image: the GPU results a lesson cites, a file of the toolkit) must name a file
inside that folder, or JupyterLab answers 404. The learner release is checked the same way in test_release.py.
"""

from __future__ import annotations

import pytest
from links import broken_links, notebook_links, relative_links, served_folder
from nbgrader_pipeline import ROOT

#: each edition's README, and the folders of its notebooks: learner versions and solutions
EDITIONS = {
    "README.md": ("lessons", "solutions"),
    "README.ko.md": ("ko/lessons", "ko/solutions"),
}


@pytest.mark.parametrize("readme", sorted(EDITIONS))
def test_every_link_of_every_lesson_opens_in_the_jupyterlab_the_readme_starts(readme):
    served = served_folder(ROOT / readme)
    notebooks = sorted(nb for folder in EDITIONS[readme] for nb in (ROOT / folder).glob("*/*.ipynb"))
    assert len(notebooks) >= 16, notebooks
    assert sum(len(notebook_links(nb)) for nb in notebooks) > 0  # the lessons do link to files
    assert broken_links(notebooks, served) == []


def test_links_are_read_as_jupyterlab_reads_them():
    text = (
        "[a](../../results/x.json) ![b](../../results/p%20q.png) [c](https://x.org/y) [d](#section)\n"
        '<img src="r.png" width=300> [e](f.md#part) [g][ref]\n\n[ref]: ../h.txt\n'
    )
    assert relative_links(text) == [
        "../../results/x.json",
        "../../results/p q.png",
        "r.png",
        "f.md",
        "../h.txt",
    ]


def test_a_link_above_the_served_folder_or_to_no_file_is_broken(tmp_path):
    import nbformat

    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.json").write_text("{}")
    lesson = tmp_path / "lessons" / "01-x" / "01-x.ipynb"
    lesson.parent.mkdir(parents=True)
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_markdown_cell("[r](../../results/r.json) [s](../../results/missing.json)")]
    )
    nbformat.write(nb, lesson)
    assert broken_links([lesson], tmp_path) == [f"{lesson}: ../../results/missing.json (no such file)"]
    assert len(broken_links([lesson], tmp_path / "lessons")) == 2
