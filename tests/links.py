"""Whether JupyterLab can open a lesson's relative links from the folder it serves.

A learner starts JupyterLab with the command the README gives (`jupyter lab ...`, in a code block of the learner
part, run from the README's folder). JupyterLab serves that folder and nothing above it: a markdown link or an image
of a notebook is resolved against the notebook's folder, and a target outside the served folder is a 404, like a
file that does not exist. The links are read by scripts/release.py's `notebook_links` (mistune, nbconvert's markdown
parser), which also decides what the learner release copies.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from coursetools.release import README_END, notebook_links, relative_links

__all__ = ["broken_links", "notebook_links", "relative_links", "served_folder"]


def served_folder(readme: Path) -> Path:
    """The folder JupyterLab serves when a learner runs the README's command from the README's folder: the one
    `jupyter lab` line in a code block of its learner part, and the folder it names (none: where it runs)."""
    text = readme.read_text(encoding="utf-8").split(README_END)[0]
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    commands = [
        line.split("#")[0].strip()
        for block in blocks
        for line in block.splitlines()
        if line.strip().startswith("jupyter lab")
    ]
    assert len(commands) == 1, f"{readme}: one `jupyter lab` command for learners expected, found {commands}"
    folders = [word for word in shlex.split(commands[0])[2:] if not word.startswith("-")]
    return (readme.parent / (folders[0] if folders else ".")).resolve()


def broken_links(notebooks: list[Path], served: Path) -> list[str]:
    """'notebook: link (why)' for every relative link of `notebooks` that JupyterLab serving `served` cannot open."""
    served = served.resolve()
    broken = []
    for notebook in notebooks:
        for link in notebook_links(notebook):
            target = (notebook.parent / link).resolve()
            if not target.is_relative_to(served):
                why = f"outside the served folder {served}"
            elif not target.is_file():
                why = "no such file"
            else:
                continue
            broken.append(f"{notebook}: {link} ({why})")
    return broken
