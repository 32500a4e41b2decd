"""The data that crosses between the grader's processes: one task in, one result out (JSON through a file)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from grading.settings import Settings


@dataclasses.dataclass
class Task:
    """One (student, lesson) to grade, as grading/batch.py hands it to grading/worker.py."""

    student: str  # the folder's name, as the CSV shows it
    student_id: str  # nbgrader's id of the student (ASCII, unique)
    lesson: str
    submission: str  # the student's lesson folder
    template: str  # the prepared nbgrader course (sources and gradebook)
    work_dir: str  # this task's private folder
    settings: Settings  # how it is graded: the class's seed, limits, the kit copy (kit_dir), ...
    language: str = "en"  # the edition graded against: the language of the row's notes (grading/i18n.py)
    #: when the student handed the lesson in (nbgrader's timestamp.txt in its folder, UTC, ISO 8601); "" if unknown
    submitted_at: str = ""

    @property
    def result_path(self) -> Path:
        return Path(self.work_dir) / "result.json"

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def load(cls, path: Path) -> Task:
        data = json.loads(path.read_text())
        return cls(**{**data, "settings": Settings.from_data(data["settings"])})


@dataclasses.dataclass
class Result:
    """What grading one (student, lesson) gave."""

    scores: dict[str, float | None] = dataclasses.field(default_factory=dict)  # None: to grade by hand
    manual: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    flags: list[str] = dataclasses.field(default_factory=list)
    #: grade id -> what work handed in learned (kit.signature), compared across the class
    signatures: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    autograded: str = ""  # the autograded notebook (in the task's work folder)
    grader_error: bool = False
    #: past the lesson's due date (nbgrader: the submission's timestamp.txt against the assignment's duedate);
    #: None where either is unknown
    seconds_late: float | None = None
    late_penalty: float = (
        0.0  # taken off by the course's LateSubmissionPlugin (nbgrader's AssignLatePenalties)
    )

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self)))

    @classmethod
    def load(cls, path: Path) -> Result:
        return cls(**json.loads(path.read_text()))
