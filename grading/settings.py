"""How submissions are graded: one type, `Settings`, that grade.py's command line, nbgrader's configuration, a worker's
task and the judge's request all carry, each field and its default written once, here.

`GradingSettings` is the same settings as nbgrader configuration (`c.GradingSettings.seed = 1234` in
nbgrader_config.py, `--GradingSettings.memory_gb=16` on nbgrader's command line), its defaults taken from `Settings`.
Without a configured seed a course makes one the first time it grades and keeps it (`course_seed`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import sys
from pathlib import Path

from traitlets import Bool, Float, Int, Unicode
from traitlets.config import Configurable

from grading import isolation


@dataclasses.dataclass(frozen=True)
class Settings:
    """How a submission is graded (plain data: it crosses between the grader's processes as JSON)."""

    #: the class's seed of the cases drawn at grading time (each student's is derived: memlab.protocol.student_seed);
    #: None: the course's own (`course_seed`)
    seed: int | None = None
    timeout: float = 300.0  # seconds per cell; a cell past it is interrupted
    memory_gb: float = 8.0  # memory of one submission's processes together, GiB
    processes: int = 256  # processes of one submission at a time
    threads: int = 0  # torch threads per kernel (0: all CPUs; OMP_NUM_THREADS set by the instructor wins)
    isolate: bool = True  # run submissions sandboxed (never switch off for credit)
    run_demonstrations: bool = False  # also run the cells a lesson tags skip-when-grading
    kit_dir: str = ""  # a prepared copy of the kit the sandboxes import ("": made per process)
    #: judge in this process (grade.py's worker, which grades one notebook and ends) instead of a new one per notebook
    judge_in_process: bool = False

    def limits(self) -> isolation.Limits:
        return isolation.Limits(memory_bytes=int(self.memory_gb * 2**30), processes=self.processes)

    def to_data(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_data(cls, data: dict) -> Settings:
        return cls(**data)

    def as_config(self) -> dict[str, object]:
        """nbgrader configuration for these settings ("Section.name": value): the per-cell timeout is nbgrader's
        Execute.timeout, the rest GradingSettings'."""
        config: dict[str, object] = {"Execute.timeout": int(self.timeout)}
        for field in dataclasses.fields(self):
            if field.name != "timeout":
                config[f"GradingSettings.{field.name}"] = getattr(self, field.name)
        return config


_DEFAULT = Settings()


class GradingSettings(Configurable):
    """`Settings` as nbgrader configuration (`c.GradingSettings.seed = 1234`, ...); the timeout is Execute.timeout."""

    seed = Int(
        _DEFAULT.seed,
        allow_none=True,
        help="seed of the cases drawn at grading time (default: the course's own, made once and kept in "
        "grading_seed.json in the course's root folder)",
    ).tag(config=True)
    memory_gb = Float(_DEFAULT.memory_gb, help="memory of one submission's processes together, GiB").tag(
        config=True
    )
    processes = Int(_DEFAULT.processes, help="processes of one submission at a time").tag(config=True)
    threads = Int(_DEFAULT.threads, help="torch threads per kernel (0: all CPUs; OMP_NUM_THREADS wins)").tag(
        config=True
    )
    isolate = Bool(_DEFAULT.isolate, help="run submissions sandboxed (never switch off for credit)").tag(
        config=True
    )
    run_demonstrations = Bool(
        _DEFAULT.run_demonstrations,
        help="also run the cells a lesson tags skip-when-grading (grading/demonstrations.py)",
    ).tag(config=True)
    kit_dir = Unicode(
        _DEFAULT.kit_dir, help="a prepared copy of the kit the kernels import (default: made per process)"
    ).tag(config=True)
    judge_in_process = Bool(
        _DEFAULT.judge_in_process,
        help="judge in this process (grade.py's worker, which grades one notebook and ends) instead of a new one "
        "per notebook (a plain `nbgrader autograde`, which grades many in one process)",
    ).tag(config=True)

    def settings(self) -> Settings:
        """These settings as `Settings`, the seed the course's own where none is configured."""
        from nbgrader.coursedir import CourseDirectory

        seed = (
            self.seed
            if self.seed is not None
            else course_seed(Path(CourseDirectory(config=self.config).root))
        )
        timeout = float(self.config.Execute.timeout) if "timeout" in self.config.Execute else _DEFAULT.timeout
        return Settings(
            seed=seed,
            timeout=timeout,
            memory_gb=self.memory_gb,
            processes=self.processes,
            threads=self.threads,
            isolate=self.isolate,
            run_demonstrations=self.run_demonstrations,
            kit_dir=self.kit_dir,
            judge_in_process=self.judge_in_process,
        )


#: where a course keeps the seed of its drawn cases when no seed is configured: in its root folder (nbgrader's
#: CourseDirectory.root), so that every process that grades the course, kernel side and judge side, every re-grade
#: and formgrader's Autograde button draw the same cases for a student
SEED_FILE = "grading_seed.json"


def course_seed(root: Path) -> int:
    """The seed kept in `root`/SEED_FILE, made (at random) by the first process that needs it: written to a new
    file that appears whole (a process that loses the race reads the winner's)."""
    path = root / SEED_FILE
    try:
        return int(json.loads(path.read_text(encoding="utf-8"))["seed"])
    except FileNotFoundError:
        pass
    seed = secrets.randbelow(2**31)
    tmp = path.with_name(f".{SEED_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"seed": seed}) + "\n", encoding="utf-8")
    try:
        os.link(tmp, path)  # fails if another process made it first: its seed is the course's
    except FileExistsError:
        seed = int(json.loads(path.read_text(encoding="utf-8"))["seed"])
    else:
        print(f"grading seed {seed} (made for this course, kept in {path})", file=sys.stderr)
    finally:
        tmp.unlink(missing_ok=True)
    return seed
