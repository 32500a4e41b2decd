"""A submission read as data, before and after nbgrader runs it: never executed here.

- `read_submission`: the notebook file, refused with one line for the CSV when it is a link, empty, too large, not
  JSON or not a notebook; nbformat 3 is converted.
- `copy_lesson_folder`: the other files the student handed in, regular files only (links are never followed),
  within a size budget.
- `static_review`: `review:` notes on code the learner wrote that reaches into the grading machinery (frames,
  the garbage collector, ctypes, the kit...): not a verdict, something for a human to read.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
from pathlib import Path

from grading.i18n import N_, _

MAX_NOTEBOOK_BYTES = 100 * 2**20
MAX_FOLDER_BYTES = 500 * 2**20
SKIPPED_FOLDERS = {".ipynb_checkpoints", "__pycache__", "autograders", "memlab"}


def escaped(text: str, limit: int) -> str:
    """Text a submission controls, safe to show (a CSV cell, a verdict, a note): lone surrogates and control
    characters escaped, at most `limit` characters."""
    text = str(text).encode("utf-8", "backslashreplace").decode("utf-8")
    text = "".join(ch if ch.isprintable() or ch == " " else ascii(ch)[1:-1] for ch in text)
    if len(text) <= limit:
        return text
    suffix = f"... ({len(text):,} chars)"
    return text[: limit - len(suffix)] + suffix


def grade_id(cell) -> str | None:
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta.get("grade_id") if isinstance(meta, dict) else None


def is_test_cell(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader") or {}
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


class Refused(Exception):
    """The submission cannot be graded at all; the message is the note."""


def notebook_path(folder: Path, slug: str) -> Path:
    """The notebook of `slug` handed in in `folder`: `slug.ipynb`, or else the folder's only notebook under another
    name (a learner who renamed it, `... - Copy.ipynb`); `slug.ipynb` when there is none or several."""
    path = folder / f"{slug}.ipynb"
    if path.exists() or path.is_symlink() or not folder.is_dir() or folder.is_symlink():
        return path
    found = [p for p in folder.glob("*.ipynb") if p.is_file() or p.is_symlink()]
    return found[0] if len(found) == 1 else path


def read_submission(folder: Path, slug: str):
    """The submitted notebook of `slug` in `folder` as an nbformat-4 notebook, and notes; or Refused."""
    import nbformat

    path = notebook_path(folder, slug)
    name = escaped(path.stem, 120)  # the messages below name the file graded, renamed or not
    if folder.parent.is_symlink():
        raise Refused(_("the student folder is a symbolic link: not graded"))
    if folder.is_symlink():
        raise Refused(_("the {slug}/ folder is a symbolic link: not graded").format(slug=slug))
    if path.is_symlink():
        raise Refused(
            _("{slug}.ipynb is a symbolic link: not graded (submit the notebook itself)").format(slug=name)
        )
    if not path.is_file():
        raise Refused(missing_note(folder, slug))
    size = path.stat().st_size
    if size == 0:
        raise Refused(_("{slug}.ipynb is an empty file (0 bytes)").format(slug=name))
    if size > MAX_NOTEBOOK_BYTES:
        raise Refused(
            _("{slug}.ipynb is {size} MiB, more than {limit} MiB").format(
                slug=name, size=f"{size / 2**20:.0f}", limit=MAX_NOTEBOOK_BYTES // 2**20
            )
        )
    text = path.read_bytes()
    try:
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise Refused(
            _("{slug}.ipynb is not a notebook (not valid JSON: {error})").format(slug=name, error=error)
        ) from None
    if not isinstance(data, dict) or "nbformat" not in data:
        raise Refused(_("{slug}.ipynb is JSON but not a notebook (no nbformat field)").format(slug=name))
    notes = []
    if path.name != f"{slug}.ipynb":
        text_note = _("graded {name}, the folder's only notebook ({slug}.ipynb was expected)")
        notes.append(text_note.format(name=f"{name}.ipynb", slug=slug))
    try:
        nb = nbformat.reads(text.decode("utf-8"), as_version=4)
    except Exception as error:  # nbformat's own validation and conversion errors
        raise Refused(
            _("{slug}.ipynb could not be read as a notebook ({error})").format(
                slug=name, error=f"{type(error).__name__}: {error}"
            )
        ) from None
    if data.get("nbformat") != 4:
        notes.append(_("converted from nbformat {version} to 4").format(version=data.get("nbformat")))
    if not isinstance(nb.get("cells"), list):
        raise Refused(_("{slug}.ipynb has no list of cells").format(slug=name))
    return nb, notes


def declared_language(folder: Path, slug: str) -> str:
    """The language of the edition the submission was made from (its notebook metadata `memlab.language`, written
    by the build of a translated edition), "en" when it says none or cannot be read (the worker then says why). It
    only chooses which of the course's own sources the submission is graded against: the checks, cases and points
    are the same in every edition, so a false claim gains nothing."""
    path = notebook_path(folder, slug)
    try:  # only the metadata is read, as plain JSON: the worker reads, checks and refuses the notebook itself
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_NOTEBOOK_BYTES:
            return "en"
        data = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return "en"
    meta = data.get("metadata") if isinstance(data, dict) else None
    meta = meta.get("memlab") if isinstance(meta, dict) else None
    language = meta.get("language") if isinstance(meta, dict) else None
    return language if isinstance(language, str) else "en"


def missing_note(folder: Path, slug: str) -> str:
    if not folder.is_dir():
        return _("missing: no {slug}/ folder").format(slug=slug)
    found = sorted(p.name for p in folder.glob("*.ipynb"))
    missing = _("missing: no {slug}/{slug}.ipynb").format(slug=slug)
    return missing + (" " + _("(found {names})").format(names=", ".join(found)) if found else "")


def copy_lesson_folder(src: Path, dest: Path, notebook_name: str) -> list[str]:
    """Copy the regular files of a submitted lesson folder (not the notebook: written apart), within a budget."""
    notes, budget = [], MAX_FOLDER_BYTES
    links = []
    for root, dirs, files in os.walk(src, followlinks=False):
        root_path = Path(root)
        for name in list(dirs):
            if (root_path / name).is_symlink():
                links.append((root_path / name).relative_to(src).as_posix())
                dirs.remove(name)
            elif name in SKIPPED_FOLDERS:
                dirs.remove(name)
        for name in files:
            path = root_path / name
            relative = path.relative_to(src)
            if relative.as_posix() == notebook_name:
                continue
            if path.is_symlink():
                links.append(relative.as_posix())
                continue
            if not path.is_file():
                continue
            size = path.stat().st_size
            if size > budget:
                notes.append(
                    _("{path} was not copied ({size} MiB: over the size budget)").format(
                        path=relative.as_posix(), size=f"{size / 2**20:.0f}"
                    )
                )
                continue
            budget -= size
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    if links:
        notes.append(_("ignored symbolic link(s): {paths}").format(paths=", ".join(sorted(links)[:5])))
    return notes


#: names and attributes that reach into the grading machinery rather than solve an exercise
STATIC_PATTERNS = {
    "autograders": N_("imports the grading kit (autograders)"),
    "modules": N_("touches sys.modules"),
    "builtins": N_("touches builtins"),
    "__builtins__": N_("touches builtins"),
    "get_ipython": N_("drives IPython itself (get_ipython)"),
    "set_custom_exc": N_("changes how IPython shows errors (set_custom_exc)"),
    "input_transformers_cleanup": N_("transforms cell sources (IPython input transformers)"),
    "input_transformers_post": N_("transforms cell sources (IPython input transformers)"),
    "ast_transformers": N_("transforms cell code (IPython AST transformers)"),
    "showtraceback": N_("replaces IPython's error display"),
    "_getframe": N_("reads call-stack frames"),
    "currentframe": N_("reads call-stack frames"),
    "f_back": N_("reads call-stack frames"),
    "f_locals": N_("reads call-stack frames"),
    "f_globals": N_("reads call-stack frames"),
    "tb_frame": N_("reads call-stack frames"),
    "__closure__": N_("reads function closures"),
    "__globals__": N_("reads function globals"),
    "__code__": N_("reads or replaces function code"),
    "get_referrers": N_("searches the garbage collector"),
    "get_objects": N_("searches the garbage collector"),
    "ctypes": N_("uses ctypes (raw memory)"),
    "settrace": N_("installs a trace function"),
    "setprofile": N_("installs a profile function"),
    "addaudithook": N_("installs an audit hook"),
    "_exit": N_("exits the process (os._exit)"),
    "reload": N_("reloads modules"),
    "__import__": N_("imports by name at run time"),
    "import_module": N_("imports by name at run time"),
    "COURSE_GRADING": N_("reads or changes the grading mode"),
}


def static_review(nb, source) -> list[str]:
    """'review: <where>: <what>' for code the learner wrote that reaches into the grading machinery."""
    source_texts = {
        c.source for c in source.cells if not (c.get("metadata", {}).get("nbgrader") or {}).get("solution")
    }
    imported_modules: set[str] = set()
    findings = []
    for index, cell in enumerate(nb.cells):
        if cell.get("cell_type") != "code" or cell.source in source_texts:
            continue
        where = grade_id(cell) or _("cell {number}").format(number=index + 1)
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue  # IPython magics; the kernel will say what is wrong
        found = []
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Name):
                names.append(node.id)
            elif isinstance(node, ast.Attribute):
                names.append(node.attr)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                module = getattr(node, "module", None) or ""
                names += [module.split(".")[0], *(a.name.split(".")[0] for a in node.names)]
                imported_modules.update(a.asname or a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                names += [w for w in ("COURSE_GRADING", "autograders") if w in node.value]
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    root = target
                    while isinstance(root, ast.Attribute):
                        root = root.value
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(root, ast.Name)
                        and root.id
                        in {
                            "torch",
                            "np",
                            "numpy",
                            "math",
                            "os",
                            "sys",
                            "builtins",
                            "memlab",
                            *imported_modules,
                        }
                    ):
                        found.append(_("replaces {target}").format(target=ast.unparse(target)))
            found += [_(STATIC_PATTERNS[n]) for n in names if n in STATIC_PATTERNS]
        for text in dict.fromkeys(found):
            findings.append(_("review: {where}: {what}").format(where=where, what=text))
    return findings[:10]
