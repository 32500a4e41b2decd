#!/usr/bin/env python
"""Build the learner release: what an instructor hands a class graded for credit.

    python scripts/release.py OUT_DIR [--zip]

The repository itself holds the solutions (solutions/, the single source of every lesson), the grading references
(autograders/references/) and the tests; a self-study learner may clone it as it is. For a class graded for credit,
give learners OUT_DIR instead (or OUT_DIR.zip with --zip). It holds:

    lessons/NN-slug/...      the learner versions, generated now from solutions/ (no solutions, no hidden tests,
                             no model answers of the written questions)
    ko/lessons/NN-slug/...   the Korean edition's learner versions, generated now from ko/solutions/ the same way
    memlab/, autograders/    the toolkit and the checks, without autograders/references/ (the checks' public cases
                             compare with the stored values in autograders/data/)
    grading/                 the grader's code (no secret in it: without the references it cannot grade drawn cases)
    jupyter-config/learner/  the learner's JupyterLab view, installed by pyproject.toml
    results/...              only the files a released lesson links to: the GPU results its GPU sections cite
                             (results/<gpu>.json and the figures made from it)
    README.md, README.ko.md  the front pages (install, open)
    docs/learn.md, docs/learn.ko.md  the learner's guide, in both editions
    requirements.txt, requirements-ko.txt, environment.yml, pyproject.toml
    RELEASE.json             the commit it was built from and a SHA-256 of every file

Nothing else: no solutions/, tests/, scripts/, .ci/, nor the rest of results/. tests/build/test_release.py builds one and
checks it. A learner starts JupyterLab in the release's folder (`jupyter lab`, as in the repository), so a lesson's
relative links (lessons/NN-slug/ -> ../../results/...) open there as they do in the repository: a link to a file
that is neither released nor in CITED stops the build.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

from coursetools.build_lessons import ROOT, render

COPIED = [
    "requirements.txt",
    "requirements-ko.txt",
    "environment.yml",
    "docs/learn.md",
    "docs/learn.ko.md",
]
#: the translated editions' sources (scripts/build_lessons.py writes them): their learner versions are released too
EDITIONS = {"ko": ROOT / "ko" / "solutions"}
READMES = ("README.md", "README.ko.md")
PACKAGES = ["memlab", "autograders", "grading"]  # the released pyproject.toml installs these three
#: what the repository's pyproject.toml installs that the release has not (learner_pyproject leaves it out)
TOOLS = "coursetools"
NEVER = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints", "references")
README_END = "<!-- the learner release's README ends here -->"
CLONE = "git clone <this repository> memlab-course && cd memlab-course"
#: the folders of the repository whose files a released lesson or guide may link to besides the released ones: the
#: GPU results the lessons cite, the note on the JupyterLab views. Only the files linked to are copied.
CITED = ("results", "jupyter-config")
_HTML_URL = re.compile(r"""<(?:img|a|source)\b[^>]*?\b(?:src|href)\s*=\s*["']([^"']+)["']""", re.IGNORECASE)


def _urls(tokens: list[dict]) -> list[str]:
    found = []
    for token in tokens:
        if token.get("type") in ("link", "image"):
            found.append(token["attrs"]["url"])
        if token.get("type") in ("inline_html", "block_html"):
            found += _HTML_URL.findall(token.get("raw", ""))
        found += _urls(token.get("children") or [])
    return found


def relative_links(markdown: str) -> list[str]:
    """The paths of the relative links and images of `markdown` (`[text](url)`, `![alt](url)`, reference links,
    `<img src>` and `<a href>` written as HTML), in order, without #fragment or ?query, unquoted; not a URL with a
    scheme or a host, nor a #fragment of the page itself. Read with mistune, nbconvert's markdown parser."""
    import mistune

    paths = []
    for url in _urls(mistune.create_markdown(renderer=None)(markdown)):
        parts = urlsplit(url)
        if not (parts.scheme or parts.netloc) and parts.path:
            paths.append(unquote(parts.path))
    return paths


def notebook_links(notebook: Path) -> list[str]:
    """The relative links of every markdown cell of the notebook at `notebook`."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    return [
        link
        for cell in nb["cells"]
        if cell["cell_type"] == "markdown"
        for link in relative_links("".join(cell["source"]))
    ]


def document_links(path: Path) -> list[str]:
    """The relative links of a notebook's markdown cells or of a markdown file."""
    if path.suffix == ".ipynb":
        return notebook_links(path)
    return relative_links(path.read_text(encoding="utf-8"))


def copy_cited(out: Path) -> list[str]:
    """Copy into `out` the files of CITED that the notebooks and markdown files under `out` link to, where they are
    in the repository; the paths copied. SystemExit for a link to a file that is neither in `out` nor in CITED."""
    copied = []
    documents = sorted([*out.rglob("*.ipynb"), *out.rglob("*.md")])
    for notebook in documents:
        for link in document_links(notebook):
            target = (notebook.parent / link).resolve()
            if not target.is_relative_to(out.resolve()):
                raise SystemExit(
                    f"release.py: {notebook.relative_to(out)} links to {link}, outside the release"
                )
            relative = target.relative_to(out.resolve())
            if target.exists():
                continue
            source = ROOT / relative
            if relative.parts[0] not in CITED or not source.is_file():
                raise SystemExit(
                    f"release.py: {notebook.relative_to(out)} links to {link}, which the release does not hold "
                    f"(only files of {', '.join(CITED)} that a lesson links to are copied into it)"
                )
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
            copied.append(relative.as_posix())
    return copied


def learner_readme(readme: str) -> str:
    """The README up to the instructors' part, with the release's first step instead of `git clone`."""
    if README_END not in readme or CLONE not in readme:
        raise SystemExit(f"release.py: README.md must contain {README_END!r} and {CLONE!r}")
    text = readme.split(README_END)[0].rstrip() + "\n"
    return text.replace(CLONE, "cd memlab-course    # the folder of this release, unpacked")


def learner_pyproject(text: str) -> str:
    """The repository's pyproject.toml as the release's: its wheel's packages are PACKAGES (coursetools/ is not
    released) and its commands only those that run released code (memlab-grade), so that it installs."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: not checked
        tomllib = None
    lines, section = [], ""
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("["):
            section = stripped
        if section == "[tool.hatch.build.targets.wheel]" and stripped.startswith("packages ="):
            line = "packages = [" + ", ".join(f'"{p}"' for p in PACKAGES) + "]\n"
        if section == "[project.scripts]" and f'"{TOOLS}.' in stripped:
            continue
        lines.append(line)
    released = "".join(lines)
    if tomllib:
        parsed = tomllib.loads(released)
        assert parsed["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == PACKAGES, (
            "pyproject.toml changed"
        )
        assert not any(TOOLS in v for v in parsed["project"].get("scripts", {}).values()), (
            "pyproject.toml changed"
        )
    return released


def build(out: Path) -> list[str]:
    """Write the release into `out` (which must not exist); the list of its files."""
    out.mkdir(parents=True)
    for relative, data in render(ROOT / "solutions").items():
        target = out / "lessons" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    for language, solutions in EDITIONS.items():
        if not solutions.is_dir():
            continue
        for relative, data in render(solutions).items():
            target = out / language / "lessons" / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, out / package, ignore=NEVER)
    shutil.copytree(ROOT / "jupyter-config" / "learner", out / "jupyter-config" / "learner", ignore=NEVER)
    for name in COPIED:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, out / name)
    (out / "pyproject.toml").write_text(learner_pyproject((ROOT / "pyproject.toml").read_text()))
    for name in READMES:
        if (ROOT / name).is_file():
            (out / name).write_text(learner_readme((ROOT / name).read_text()))
    copy_cited(out)
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    manifest = {
        "built_from_commit": commit or None,
        "files": {f: hashlib.sha256((out / f).read_bytes()).hexdigest() for f in files},
    }
    (out / "RELEASE.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, metavar="OUT_DIR", help="a folder that does not exist yet")
    parser.add_argument("--zip", action="store_true", help="also write OUT_DIR.zip")
    args = parser.parse_args(argv)
    if args.out.exists():
        print(f"release.py: error: {args.out} already exists", file=sys.stderr)
        return 2
    files = build(args.out)
    print(f"wrote {args.out}: {len(files)} files")
    if args.zip:
        archive = shutil.make_archive(str(args.out), "zip", root_dir=args.out.parent, base_dir=args.out.name)
        print(f"wrote {archive}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
