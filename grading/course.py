"""The nbgrader course: its configuration, its lessons and their graded cells, and a prepared copy for grading."""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from pathlib import Path

#: the folder this package runs from when it is installed in place (a checkout, `pip install -e`): the course's own
_PACKAGE_PARENT = Path(__file__).resolve().parents[1]


def course_root(working: Path | None = None) -> Path:
    """The course's folder, the one that holds its nbgrader_config.py and solutions/: the checkout this package runs
    from, or, where it was installed as a regular package (site-packages holds no lessons), the working folder
    (`working`, by default the current one) when it holds them. Where neither does, the checkout's place, whose
    missing files the caller then names."""
    for folder in (_PACKAGE_PARENT, Path.cwd() if working is None else working):
        if (folder / "nbgrader_config.py").is_file() and (folder / "solutions").is_dir():
            return folder.resolve()
    return _PACKAGE_PARENT


#: the course's folder, for the course's own tools (coursetools/), which run in a checkout
ROOT = course_root()

#: What a lesson's run writes next to its notebook for the learner to hand in with it: lesson 08's graded run
#: (run.json and the trained adapter), which the grader evaluates instead of training again. Never part of a lesson's
#: source or release: a model solution's run, left in solutions/ by executing the solution there, must not reach
#: learners (scripts/build_lessons.py, scripts/release.py) nor replace a submission's own (`prepare_course`). In a
#: submission it is copied with the notebook like any other file.
HANDED_IN = ("capstone-run",)


class CourseError(Exception):
    """The course itself cannot be prepared (not the fault of any submission)."""


def load_config(root: Path):
    """The nbgrader configuration in `root`/nbgrader_config.py, as nbgrader's converters see it."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()
    config.Exporter.default_preprocessors = []  # what nbgrader's BaseConverter does: only nbgrader's preprocessors
    return config


def lesson_dirs(solutions: Path) -> list[Path]:
    """The lesson folders of `solutions` (as nbgrader globs them: not hidden, with a notebook in them)."""
    if not solutions.is_dir():
        return []
    return sorted(
        p for p in solutions.iterdir() if p.is_dir() and not p.name.startswith(".") and any(p.glob("*.ipynb"))
    )


def graded_cells(lesson: Path) -> list[tuple[str, float, bool]]:
    """(grade_id, points, graded by hand) of every graded cell of a lesson's (only) notebook, in order."""
    import nbformat

    (notebook,) = sorted(lesson.glob("*.ipynb"))
    cells = []
    for cell in nbformat.read(notebook, as_version=4).cells:
        meta = cell.get("metadata", {}).get("nbgrader") or {}
        if meta.get("grade"):
            cells.append((meta["grade_id"], float(meta.get("points", 0)), bool(meta.get("solution"))))
    return cells


def nbgrader_api(course: Path, **settings):
    """nbgrader's API on `course`, configured by its nbgrader_config.py and `settings` ("Section.name": value)."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    warnings.filterwarnings("ignore", message=".* not in session", module="nbgrader")
    bindir = os.path.dirname(sys.executable)  # nbgrader shells out to `alembic` when it creates a gradebook
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    config = load_config(course)
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.db_url = "sqlite:///" + str(course / "gradebook.db")
    config.NbGraderAPI.log_level = "WARN"
    for key, value in settings.items():
        section, name = key.split(".")
        setattr(config[section], name, value)
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def prepare_course(
    run: Path, solutions: Path, lessons: list[str], name: str = "course", due: dict[str, str] | None = None
) -> Path:
    """An nbgrader course in run/`name` with the lessons' sources and a gradebook that knows every graded cell and
    each lesson's due date in `due` (nbgrader then finds how late a submission is, and its late penalty)."""
    course = run / name
    course.mkdir(parents=True)
    shutil.copy(course_root() / "nbgrader_config.py", course / "nbgrader_config.py")
    for slug in lessons:
        ignore = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", *HANDED_IN)
        shutil.copytree(solutions / slug, course / "solutions" / slug, ignore=ignore)
    create_gradebook(course / "gradebook.db")
    api = nbgrader_api(course)
    for slug in lessons:
        result = api.generate_assignment(slug, force=True, create=True)
        if not result["success"]:
            raise CourseError(
                f"nbgrader generate_assignment {slug} failed:\n{result.get('error') or result.get('log')}"
            )
    if due:
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
            for slug in lessons:
                if slug in due:
                    gradebook.update_or_create_assignment(slug, duedate=due[slug])
    return course


def create_gradebook(path: Path) -> None:
    """An empty nbgrader gradebook at `path`, as nbgrader's own `Gradebook` makes one, its schema revision included.
    nbgrader reads that revision by running the `alembic` command in a new process (`nbgrader.api.get_alembic_version`,
    2-3 s of every grading run's start); here alembic's own `ScriptDirectory` reads it from nbgrader's migrations
    in this process. The revision is recorded first, so `Gradebook` finds an existing database and only creates its
    tables (tests/grader/test_grading_startup.py compares the two gradebooks)."""
    from alembic.script import ScriptDirectory
    from nbgrader.api import Gradebook
    from nbgrader.dbutil import ALEMBIC_DIR
    from sqlalchemy import create_engine, text

    url = f"sqlite:///{path}"
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL);"))
        connection.execute(
            text("INSERT INTO alembic_version (version_num) VALUES (:head)"),
            {"head": ScriptDirectory(ALEMBIC_DIR).get_current_head()},
        )
    engine.dispose()
    with Gradebook(url):
        pass


def editions(solutions: Path) -> dict[str, Path]:
    """{language: its solutions folder}: English is `solutions` itself; a translated edition is the folder
    <solutions' parent>/<language>/solutions/ that scripts/build_lessons.py writes (ko/solutions/), where it exists."""
    from memlab.i18n import ENGLISH, LANGUAGES

    found = {ENGLISH: solutions}
    for language in LANGUAGES:
        folder = solutions.parent / language / "solutions"
        if language != ENGLISH and lesson_dirs(folder):
            found[language] = folder
    return found


_KIT: dict[str, str] = {}


def kit_copy(base: str = "") -> str:
    """`base`, or a copy of memlab and autograders without the grading references made once per process: what a
    sandboxed process may import."""
    if base:
        return base
    if "dir" not in _KIT:
        import tempfile

        folder = Path(tempfile.mkdtemp(prefix="memlab-kit-"))
        prepare_kit(folder)
        _KIT["dir"] = str(folder)
    return _KIT["dir"]


def prepare_kit(folder: Path) -> Path:
    """A copy of memlab and autograders in `folder`, without the grading references (autograders/references/)."""
    import autograders
    import memlab

    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "references")
    for package in (memlab, autograders):
        source = Path(package.__file__).parent
        shutil.copytree(source, folder / source.name, ignore=ignore, dirs_exist_ok=True)
    return folder


def copy_regular_files(src: Path, dest: Path) -> None:
    """Copy the regular files under `src` to `dest`: a symbolic link (a file or a folder) is never followed."""
    for root, dirs, files in os.walk(src, followlinks=False):
        root_path = Path(root)
        dirs[:] = [d for d in dirs if not (root_path / d).is_symlink()]
        for name in files:
            path = root_path / name
            if path.is_symlink() or not path.is_file():
                continue
            target = dest / path.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
