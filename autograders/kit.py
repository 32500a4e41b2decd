"""The check kit every lesson's autograder is built from: one check, two ways to run it.

A check is a function decorated with `@check("eK_slug", points=P)` that takes the learner's object(s), runs them on
its own cases and returns how many cases it ran. Every failure becomes one `CheckFailed` whose message says which
case, what was expected, what was got and the tolerance (in a notebook it is shown as that message alone, still as
an error, so nbgrader, Validate and nbval count the cell as failed). On success it prints one line and returns None
(nbgrader would read a returned value as partial credit).

**Where the verdict is reached.** A check's body is written once, in three kinds of step:

- *learner steps* run the learner's code and observe what it did: `call(fn, *args, case=...)` (the learner's
  function on one input) and `learner(label, step)` (anything more: build an object, call its methods, read what
  it changed). What a learner step returns must be plain data (autograders/wire.py);
- *reference steps*, `reference(compute)`: the expected values (a measurement, a reference implementation, drawn
  answers);
- everything else, the check's own inputs and its comparisons (`expect_close`, ..., or code under `judging()`).

The mode decides where each kind runs:

| mode | where | learner steps | reference steps | comparisons |
|---|---|---|---|---|
| learner (default) | a learner's JupyterLab | run | run | at once: the verdict in the kernel |
| collect (`COURSE_GRADING=collect`) | the grading kernel | run, recorded | skipped | only those on learner data |
| judge | a process of the grader that never runs submitted code | replayed from the record | run | all: the verdict |
| strict (`COURSE_GRADING=strict`) | tests | collect, then judge, in one process | | |

Under grading the kernel that runs the submission only *collects*: the check cell shows its record (a transcript of
plain data, `TRANSCRIPT_MIME`) and nothing else; expected values, grading references and drawn answers are never
computed there. The judge (grading/judge.py) runs the same check again with the learner's objects replaced by
`Absent` placeholders: each learner step returns what the transcript says the learner's code returned, each
reference step computes the expected value, and the comparisons decide. A transcript that does not match the
check's own steps (another label, a missing record) fails. What this guarantees against submitted code, and what it
does not: docs/trust-model.md.

Stages, in this order, so that an unwritten exercise never passes on any machine: `expect_callable` (defined, a
function or class, not the lesson's stub), then whatever runs here (a tiny run on the CPU, the type of the result),
then `needs_hardware(...)` before the part that needs a GPU or a package. Where that is missing, a learner sees
`NOT CHECKED HERE: needs ..., found ...`; under grading the check raises `NotGradedHere` with the same text, so the
instructor sees why the cell scored 0.

Under grading a check also runs cases drawn from the grading seed (`drawn_cases`), so that an answer hard-coded to
the public cases fails. The mode and the seed are a `Context`: the process's own, read from its environment when the
kit is imported (a grading kernel, a rerun), or a `context(mode, seed)` block's (the judge, tests).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import json
import math
import numbers
import os
import random
import traceback
import types
from pathlib import Path

from autograders import wire
from memlab.hardware import unmet_requirements
from memlab.i18n import translator
from memlab.notebook import LessonMessage, fill, unwritten_parts
from memlab.protocol import GRADING_ENV, SEED_ENV

#: what a lesson's check module (autograders/lessonNN.py) is written with, as `from autograders import kit` and
#: `kit.check(...)`, `kit.expect_close(...)`, ... (`_` alone is imported bare, `from autograders.kit import _`, so
#: that Babel's extractor finds its messages); tests/kit/test_kit_surface.py holds the lesson modules to it. The
#: grader's side (collect, judge, context, Transcript, REGISTRY, ...) is read as `kit.<name>` and not listed here.
__all__ = [
    "DEFERRED",
    "Case",
    "CheckFailed",
    "_",
    "call",
    "call_predicting",
    "check",
    "drawn",
    "drawn_cases",
    "expect_callable",
    "expect_close",
    "expect_equal",
    "expect_finite",
    "expect_keys",
    "expect_type",
    "grading_rng",
    "how_far",
    "judging",
    "learner",
    "needs_hardware",
    "op_recorder",
    "read_only",
    "reference",
    "references",
    "signature",
]

#: the check kit's messages in the kernel's language (memlab.i18n.use; the judge uses the graded lesson's):
#: translations/<language>/autograders.po, compiled into autograders/locale/. A case's name is a `Case`: the kernel
#: records a step under its English text and the judge replays it by that text, whatever language either side
#: speaks; only where a message shows it is it translated.
_ = translator("autograders", Path(__file__).resolve().parent / "locale")


class Case(str):
    """A case's name: `Case("SGD with momentum")`, `Case("{name} on mlp({widths})", name=..., widths=...)`.

    As a string it is the English name, its template filled: the key under which the grading kernel records a learner
    step and the judge finds it again, the same in every language (the transcript holds it, and a stored expected value
    may be filed under it). Formatted into a message (`"case {case}: ...".format(case=case)`), it reads in the
    language of the process: its template translated (`translations/<language>/autograders.po`; Babel finds the
    template as it finds `_`'s messages), then filled, a field that is a Case itself shown the same way. So a label is
    composed with `Case("{case} (unscale_)", case=case)`, never with an f-string, which would fill in the translation.
    """

    template: str
    fields: dict

    def __new__(cls, template: str, **fields):
        key = template.format(**{k: str(v) if isinstance(v, Case) else v for k, v in fields.items()})
        case = super().__new__(cls, key)
        case.template, case.fields = template, fields
        return case

    def __format__(self, spec: str) -> str:
        return format(_(self.template).format(**self.fields), spec)

    def __reduce__(self):  # a copy or a pickle keeps what it shows, not only the key
        return _case, (self.template, self.fields)


def _case(template: str, fields: dict) -> Case:
    return Case(template, **fields)


TRANSCRIPT_MIME = "application/vnd.memlab.transcript+json"

LEARNER, COLLECT, JUDGE, STRICT = "learner", "collect", "judge", "strict"


@dataclasses.dataclass(frozen=True)
class Context:
    """Where a check runs: the mode (learner, collect, judge, strict) and the grading seed of the drawn cases (None
    for a learner, whose checks run the public cases only)."""

    mode: str = LEARNER
    seed: int | None = None

    @classmethod
    def from_environment(cls, environ=None) -> Context:
        """The context a process is started in: COURSE_GRADING (collect or strict; anything else is a learner) and,
        under grading, COURSE_GRADING_SEED. The grading kernel and a rerun's process are started so."""
        environ = os.environ if environ is None else environ
        mode = {"collect": COLLECT, "strict": STRICT}.get(environ.get(GRADING_ENV, "").lower(), LEARNER)
        seed = environ.get(SEED_ENV, "")
        return cls(mode, int(seed) if mode != LEARNER and seed.isdigit() else None)


#: the process's context, as it was started (read once, when the kit is imported); `context` changes it for a block
_STARTED = Context.from_environment()
_CONTEXT: contextvars.ContextVar[Context] = contextvars.ContextVar("autograders.kit.context")


def current_context() -> Context:
    """The context checks run in here: the innermost `context(...)` block's, else the process's own."""
    return _CONTEXT.get(_STARTED)


@contextlib.contextmanager
def context(mode: str, seed: int | None = None):
    """Run the checks of a block in `mode` with `seed` (the judge around its verdicts; tests): a context variable,
    so nothing outside the block, and no other thread, sees it."""
    token = _CONTEXT.set(Context(mode, seed))
    try:
        yield current_context()
    finally:
        _CONTEXT.reset(token)


class CheckFailed(LessonMessage, AssertionError):
    """The learner's answer is wrong; the message says how."""


class NotGradedHere(LessonMessage, RuntimeError):
    """Grading on a machine that lacks what the check needs."""


class NotCheckedHere(Exception):
    """Raised by `needs_hardware` inside a check; `@check` turns it into the learner's line or NotGradedHere."""

    def __init__(self, needs: str, found: str, passed: str):
        super().__init__(_("NOT CHECKED HERE: needs {needs}, found {found}").format(needs=needs, found=found))
        self.needs, self.found, self.passed = needs, found, passed


class TranscriptMismatch(Exception):
    """The judge's replay met a record that is not the one its own step expects (or none)."""


def grading_seed() -> int | None:
    """The seed of the cases drawn at grading time (None for a learner)."""
    return current_context().seed


def grading_rng(check_name: str) -> random.Random | None:
    """Under grading, the random generator of the cases `check_name` draws on top of its public ones (its own
    stream of the grading seed); None for a learner, whose checks run the public cases only."""
    seed = current_context().seed
    if seed is None:
        return None
    return random.Random(f"{seed}/{check_name}")


def drawn_cases(check_name: str, count: int, draw) -> list:
    """`count` cases drawn at grading time, `draw(rng, i)` for i = 1..count, all from `check_name`'s stream of the
    grading seed; [] for a learner."""
    rng = grading_rng(check_name)
    return [] if rng is None else [draw(rng, i) for i in range(1, count + 1)]


def references(lesson: str):
    """The grading references of a lesson (autograders/references/lessonNN.py). Call it only inside a reference
    step: they are not in the learner release, and a grading kernel cannot import them."""
    import importlib

    try:
        return importlib.import_module(f"autograders.references.{lesson}")
    except ModuleNotFoundError:
        raise RuntimeError(
            "grading for credit needs autograders/references/, which the learner release leaves out: grade with "
            "the instructor's copy of the course"
        ) from None


def read_only(value):
    """`value` with every dict made a read-only mapping and every list a tuple, all the way down (a check's cached
    tables, shared between its cases)."""
    if isinstance(value, dict):
        return types.MappingProxyType({k: read_only(v) for k, v in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(read_only(v) for v in value)
    return value


def drawn(i: int, description: str) -> Case:
    """The name of a case drawn at grading time, as the messages show it (`description` a `Case` where it has words
    to translate)."""
    return Case("drawn at grading time #{i}, {description}", i=i, description=description)


# ---- the record of one run of a check: what the learner's code returned, step by step ----------------------------


@dataclasses.dataclass
class Record:
    """One learner step: its label and either the plain value it returned (`value`, encoded by autograders.wire),
    the CheckFailed message it ended with (`failed`), or the requirement it found missing (`missing`:
    needs, found, passed)."""

    label: str
    value: object = None
    failed: str | None = None
    missing: tuple[str, str, str] | None = None

    def to_data(self) -> dict:
        data = {"label": str(self.label), "value": self.value, "failed": self.failed}  # a Case's English key
        data["missing"] = None if self.missing is None else list(self.missing)
        return {k: v for k, v in data.items() if v is not None or k == "label"}

    @classmethod
    def from_data(cls, data) -> Record:
        if type(data) is not dict or type(data.get("label")) is not str:
            raise ValueError("a record without a label")
        failed, missing = data.get("failed"), data.get("missing")
        if failed is not None and type(failed) is not str:
            raise ValueError("a malformed failure")
        if missing is not None:
            if type(missing) is not list or len(missing) != 3 or not all(type(m) is str for m in missing):
                raise ValueError("a malformed missing requirement")
            missing = tuple(missing)
        return cls(data["label"], data.get("value"), failed, missing)


@dataclasses.dataclass
class Transcript:
    """What one check cell collected under grading: the check's name and its learner steps, in order."""

    check: str
    records: list[Record]

    def to_data(self) -> dict:
        return {"check": self.check, "records": [r.to_data() for r in self.records]}

    @classmethod
    def from_data(cls, data) -> Transcript:
        if (
            type(data) is not dict
            or type(data.get("check")) is not str
            or type(data.get("records")) is not list
        ):
            raise ValueError("not a transcript")
        return cls(data["check"], [Record.from_data(r) for r in data["records"]])


class Absent:
    """The learner's object in the judge, which never has it: any use outside a learner step is a bug of the check."""

    def __init__(self, name: str):
        object.__setattr__(self, "_name", name)

    def __repr__(self) -> str:
        return f"<the learner's {object.__getattribute__(self, '_name')}, absent from the judge>"

    def _misuse(self, *args, **kwargs):
        raise RuntimeError(f"check bug: {self!r} was used outside a learner step")

    __call__ = __getattr__ = __setattr__ = __getitem__ = __iter__ = __len__ = __bool__ = _misuse


class _Run:
    """The state of one run of a check in one mode."""

    def __init__(self, mode: str, transcript: Transcript | None = None):
        self.mode = mode
        self.records: list[Record] = [] if transcript is None else list(transcript.records)
        self.position = 0
        self.depth = 0  # > 0 inside a learner step: nested steps run as plain code
        self.signature: tuple[float, ...] = ()

    def step(self, label: str, fn):
        if self.depth or self.mode == LEARNER:
            return self._live(label, fn)
        if self.mode == COLLECT:
            return self._collect(label, fn)
        return self._replay(label)

    def _live(self, label: str, fn):
        if self.depth:
            return fn()
        self.depth += 1
        try:
            value = fn()
        finally:
            self.depth -= 1
        return _plain(value, label)

    def _collect(self, label: str, fn):
        self.depth += 1
        try:
            value = fn()
        except CheckFailed as failure:
            self.records.append(Record(label, failed=str(failure)))
            raise
        except NotCheckedHere as missing:
            self.records.append(Record(label, missing=(missing.needs, missing.found, missing.passed)))
            raise
        except (
            Exception
        ) as bug:  # the check's own code broke on what the learner's code did: recorded as such,
            # so that the judge says what a learner would be told, not that the record was cut short
            self.records.append(Record(label, failed=_crashed(bug)))
            raise
        finally:
            self.depth -= 1
        try:
            encoded = wire.encode(value, what=_what(label))
        except wire.NotPlainData as refused:
            failure = _not_plain(refused, label)
            self.records.append(Record(label, failed=str(failure)))
            raise failure from None
        self.records.append(Record(label, value=encoded))
        return wire.decode(encoded)

    def _replay(self, label: str):
        if self.position >= len(self.records):
            raise TranscriptMismatch(f"the record ends before the step {label!r}")
        record = self.records[self.position]
        self.position += 1
        if record.label != label:
            raise TranscriptMismatch(f"the step {label!r} was recorded as {record.label!r}")
        if record.failed is not None:
            raise CheckFailed(record.failed)
        if record.missing is not None:
            raise NotCheckedHere(*record.missing)
        try:
            return wire.decode(record.value)
        except (ValueError, TypeError, OverflowError) as bad:
            raise TranscriptMismatch(f"the value recorded for {label!r} is malformed ({bad})") from None


def _crashed(bug: Exception) -> str:
    return _("the check itself crashed ({error}: {message}).").format(error=type(bug).__name__, message=bug)


def _what(label: str) -> str:
    return _("what your code gave in case {case}").format(case=label)


def _not_plain(refused: wire.NotPlainData, label: str) -> CheckFailed:
    return CheckFailed(
        _(
            "case {case}: {refused}; a check takes only numbers, strings, bool, None, lists, tuples and dicts of "
            "them, and torch tensors (graded outside your notebook, a value is passed on as plain data)."
        ).format(case=label, refused=refused)
    )


def _plain(value, label: str):
    """What the judge would see of `value`: the same refusal in a learner's notebook as under grading."""
    try:
        return wire.roundtrip(value, what=_what(label))
    except wire.NotPlainData as refused:
        raise _not_plain(refused, label) from None


_RUN: list[_Run] = []  # the run of the check in progress (a stack: a check may call another's helpers)


def _current() -> _Run:
    return _RUN[-1] if _RUN else _Run(LEARNER)


@contextlib.contextmanager
def _running(run: _Run):
    _RUN.append(run)
    try:
        yield run
    finally:
        _RUN.pop()


def learner(label: str, step):
    """A learner step: `step()` runs the learner's code (build an object, call its methods, read what it changed)
    and returns what the check needs of it, as plain data. In the judge it is not run: the recorded value is
    returned (or the recorded CheckFailed raised). Labels name the case, as messages do."""
    return _current().step(label, step)


def reference(compute):
    """A reference step: `compute()` gives expected values. Skipped in the grading kernel (it returns `DEFERRED`,
    which the `expect_*` helpers ignore); run by the judge and in a learner's notebook."""
    if _current().mode == COLLECT:
        return DEFERRED
    return compute()


def signature(vector) -> None:
    """In a reference or judging step: name what the learner handed in (e.g. what a trained adapter learned) by a short
    vector of floats, so that the grader can flag the same work handed in by different students: within a tolerance,
    so that a copy changed in a last digit, or padded with an unused tensor, is still the same work
    (grading/batch.py, `flag_copies`)."""
    _current().signature = tuple(float(x) for x in vector)


def judging() -> bool:
    """False only in the grading kernel: guard a comparison written by hand (`if judging() and got != ...:`)."""
    return _current().mode != COLLECT


class _Deferred:
    def __repr__(self) -> str:
        return "DEFERRED"


DEFERRED = _Deferred()  # what a reference step gives in the grading kernel


# ---- the decorator: one declaration of a check ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Check:
    """A check as the grader, the judge, the build and the tests know it: declared once, by `@check`."""

    name: str
    points: float
    function: object  # the undecorated check
    module: str
    #: a measurement of the learner's code (memory, time): under grading the judge collects it again in a fresh
    #: process that holds only the learner's definitions (grading/rerun.py), not from the kernel's transcript
    rerun: bool = False

    @property
    def cell(self) -> str:
        """The grade id of the notebook cell that runs this check."""
        return f"{self.name}_check"


REGISTRY: dict[str, Check] = {}  # "module:name" -> Check, filled as check modules are imported


@dataclasses.dataclass
class Verdict:
    """How a check ended: `passed` with `cases`, or not with the learner's `message`; `not_checked` (a learner's
    machine) or `not_graded` (grading) when the machine lacks what the check needs."""

    passed: bool
    cases: int = 0
    message: str = ""
    not_checked: bool = False
    not_graded: bool = False
    signature: tuple[float, ...] = ()  # see `signature()`
    #: the record does not follow the check's own steps (another check's, or not this one's): honest code cannot
    #: produce it, so the grader flags it for a human
    forged: bool = False


def check(name: str, points: float, *, rerun: bool = False):
    """Declare a check: its name (the grade id of its exercise), its points, and whether it measures the learner's
    code (`rerun`, see `Check.rerun`)."""

    def decorate(check_fn):
        declared = Check(name, float(points), check_fn, check_fn.__module__, rerun)
        REGISTRY[f"{declared.module}:{name}"] = declared

        @functools.wraps(check_fn)
        def run(*args, **kwargs):
            mode = current_context().mode
            if mode == COLLECT:
                return _collect_and_show(declared, args, kwargs)
            if mode == STRICT:
                verdict = _strict(declared, args, kwargs)
            else:
                verdict = _outcome(declared, _Run(LEARNER), args, kwargs)
            if verdict.not_graded:
                raise NotGradedHere(verdict.message) from None
            if verdict.not_checked:
                print(fill(verdict.message))
                return None
            if not verdict.passed:
                raise CheckFailed(verdict.message) from None
            print(success_line(name, verdict.cases))
            return None

        run.check_name = name
        run.check = declared
        return run

    return decorate


def success_line(name: str, cases: int) -> str:
    line = _("✓ {name}: {cases} case passed") if cases == 1 else _("✓ {name}: {cases} cases passed")
    return line.format(name=name, cases=cases)


def _outcome(declared: Check, run: _Run, args, kwargs) -> Verdict:
    """Run the check in `run`'s mode; its verdict (a bug of the check itself propagates as RuntimeError)."""
    name = declared.name
    with _running(run):
        try:
            n_cases = declared.function(*args, **kwargs)
        except CheckFailed as failure:
            return Verdict(False, message=f"{name}: {failure}")
        except NotCheckedHere as missing:
            if run.mode != LEARNER:
                return Verdict(False, message=str(missing), not_graded=True)
            passed = (
                " " + _("What can be checked here passed: {passed}.").format(passed=missing.passed)
                if missing.passed
                else ""
            )
            return Verdict(False, message=f"{name}: {missing}.{passed}", not_checked=True)
        except NotGradedHere as not_graded:
            return Verdict(False, message=str(not_graded), not_graded=True)
        except TranscriptMismatch:
            raise
        except Exception as bug:  # a bug in the check itself: say so plainly, never blame the learner
            raise RuntimeError(f"{name}: {_crashed(bug)}") from bug
    if run.mode == COLLECT:
        return Verdict(True)
    if isinstance(n_cases, bool) or not isinstance(n_cases, int) or n_cases < 1:
        raise RuntimeError(f"{name}: the check itself is broken (it returned {n_cases!r}, not a count).")
    if run.mode == JUDGE and run.position != len(run.records):
        raise TranscriptMismatch(
            f"the record has {len(run.records) - run.position} step(s) the check never took"
        )
    return Verdict(True, cases=n_cases, signature=run.signature)


def collect(declared: Check, args, kwargs) -> Transcript:
    """Run a check the grading kernel's way: the learner's code on the check's inputs, recorded; no verdict."""
    run = _Run(COLLECT)
    try:
        _outcome(declared, run, args, kwargs)
    except RuntimeError:
        pass  # the judge will meet the same crash, or the end of the record, and say so
    return Transcript(declared.name, run.records)


def judge(declared: Check, transcript: Transcript, n_args: int = 1, kwarg_names=()) -> Verdict:
    """The verdict on a transcript, reached without the learner's objects (`Absent` in their place)."""
    if transcript.check != declared.name:
        other = _("the record is of another check ({other})").format(other=repr(transcript.check))
        return Verdict(False, message=f"{declared.name}: {other}", forged=True)
    args = [Absent(f"argument {i + 1}") for i in range(n_args)]
    kwargs = {k: Absent(k) for k in kwarg_names}
    run = _Run(JUDGE, transcript)
    try:
        return _outcome(declared, run, args, kwargs)
    except TranscriptMismatch as mismatch:
        text = _("the record of this check does not match it: {mismatch}").format(mismatch=mismatch)
        return Verdict(False, message=f"{declared.name}: {text}", forged=True)


def _strict(declared: Check, args, kwargs) -> Verdict:
    """The tests' strict mode: collect with the learner's objects, then judge the record, in this process."""
    transcript = collect(declared, args, kwargs)
    data = Transcript.from_data(json.loads(json.dumps(transcript.to_data())))  # as it travels under grading
    return judge(declared, data, len(args), tuple(kwargs))


def _collect_and_show(declared: Check, args, kwargs) -> None:
    transcript = collect(declared, args, kwargs)
    text = _(
        "{name}: collected for grading ({steps} step(s)); the verdict is reached outside this notebook"
    ).format(name=declared.name, steps=len(transcript.records))
    try:
        from IPython.display import display

        display({TRANSCRIPT_MIME: transcript.to_data(), "text/plain": text}, raw=True)
    except ImportError:
        print(text)
    return None


def needs_hardware(
    cuda: bool = False,
    min_capability: tuple[int, int] | None = None,
    min_gpu_gb: float | None = None,
    packages: tuple[str, ...] = (),
    *,
    passed: str = "",
) -> None:
    """Inside a check, after the stages that run anywhere: stop here unless this machine has what the rest needs.

    `passed` says in a few words what was already checked (shown to the learner next to NOT CHECKED HERE). Under
    grading both the kernel's machine (a learner step) and the judge's must have it.
    """
    requirement = (cuda, min_capability, min_gpu_gb, tuple(packages))

    def here() -> None:
        unmet = unmet_requirements(*requirement)
        if unmet is not None:
            raise NotCheckedHere(*unmet, passed)

    if _current().mode == JUDGE:
        here()
    learner(f"needs {requirement}", here)


# ---- the stages of a check: exists / callable -> type, shape, dtype, device -> values --------------------------


def expect_callable(obj, name: str) -> None:
    """Stage one: `name` is defined, is a function or a class, and is not (entirely or partly) the lesson's stub.
    A learner step: the judge replays what the kernel found."""
    learner(f"`{name}{_WRITTEN}", lambda: _expect_callable(obj, name))


_WRITTEN = "` is written"  # how the label of stage one's learner step ends


def stopped_unwritten(transcript: Transcript) -> bool:
    """The check stopped at stage one (`expect_callable`): what it calls is not defined, not callable, or still
    (partly) the lesson's stub. The judge does not collect a measurement again for such a record (grading/rerun.py):
    the same definitions, loaded again, give the same answer. A forged one only costs its forger the points."""
    last = transcript.records[-1] if transcript.records else None
    return last is not None and last.failed is not None and last.label.endswith(_WRITTEN)


def _expect_callable(obj, name: str) -> None:
    if obj is None or obj is ...:
        raise CheckFailed(
            _("`{name}` is not defined yet (it is None): write it, run its cell, then this one.").format(
                name=name
            )
        )
    if not callable(obj):
        raise CheckFailed(
            _("`{name}` should be a function; got a {type}.").format(name=name, type=type(obj).__name__)
        )
    parts = unwritten_parts(obj)
    methods = [v for v in vars(obj).values() if callable(v)] if isinstance(obj, type) else [obj]
    if parts and len(parts) >= len(methods):
        raise CheckFailed(
            _("`{name}` is not written yet: it still raises NotImplementedError.").format(name=name)
        )
    if parts:
        listed = ", ".join(f"`{p}`" for p in parts)
        text = (
            _("`{name}` is not finished: {parts} still raises NotImplementedError.")
            if len(parts) == 1
            else _("`{name}` is not finished: {parts} still raise NotImplementedError.")
        )
        raise CheckFailed(text.format(name=name, parts=listed))


def call(fn, *args, case: str, **kwargs):
    """The learner's function on one input, as a learner step: its result, as plain data (autograders/wire.py).
    If it raises, fail with its error and the line of their code that raised. Inside a `learner` step it is a plain
    call and returns the result itself."""
    return learner(case, lambda: _call(fn, args, kwargs, case))


def _call(fn, args, kwargs, case: str):
    try:
        return fn(*args, **kwargs)
    except Exception as error:
        # only the lesson stub's bare `raise NotImplementedError()` means "not written yet"; torch raises
        # NotImplementedError with a message for a missing kernel (e.g. "sum_cpu" not implemented for 'Float8_e4m3fn')
        if type(error) is NotImplementedError and not str(error):
            message = _("case {case}: your function raised NotImplementedError: it is not written yet.")
            raise CheckFailed(message.format(case=case)) from None
        raise CheckFailed(
            _("case {case}: your function raised {error}: {message}{where}").format(
                case=case, error=type(error).__name__, message=error, where=_learner_line(error)
            )
        ) from None


#: the aten ops of running a model: a function that runs any of them while it is asked for a prediction measured
MODEL_OPS = frozenset({"mm", "bmm", "addmm", "matmul", "_softmax", "linear"})


def call_predicting(fn, *args, case: str, **kwargs):
    """`call` for an exercise that asks the learner to *predict* what a model does from its numbers: the model ops
    (`MODEL_OPS`) torch ran during the call are recorded beside its result, as a second learner step, and a function
    that ran one fails, since it measured instead (on real tensors, or on the meta device or fake tensors: torch
    dispatches those ops too). A check that calls it is declared `rerun=True`: under grading both steps are taken
    again in a fresh process where none of the notebook's other code ran first (tests/grader/test_judge.py holds
    the lessons to it), so a patch of the recording made earlier in the kernel counts for nothing."""
    seen: dict[str, list[str]] = {}

    def run():
        recorder = op_recorder()
        with recorder:
            got = call(fn, *args, case=case, **kwargs)
        seen["ran"] = sorted(recorder.ops & MODEL_OPS)
        return got

    got = learner(case, run)
    ran = learner(Case("{case}: the model ops torch ran during the call", case=case), lambda: seen["ran"])
    if ran:
        raise CheckFailed(
            _(
                "case {case}: your function ran a model (torch ran {ops}): the exercise asks for a formula in the "
                "numbers it is given, not a measurement."
            ).format(case=case, ops=", ".join(ran))
        )
    return got


def op_recorder():
    """A torch dispatch mode that records the name of every aten op run inside it, in `.ops` (imported here: the kit
    itself does not need torch). `call_predicting` watches with one; lesson 07 asks whether `_scaled_mm` ran."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpRecorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops: set[str] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.add(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    return OpRecorder()


def _learner_line(error: BaseException) -> str:
    """' (at <file>:<line>: <code>)' for the innermost frame outside this kit and outside site-packages."""
    frames = traceback.extract_tb(error.__traceback__)
    own = [f for f in frames if f.filename != __file__ and "site-packages" not in f.filename]
    if not own:
        return ""
    frame = own[-1]
    where = (
        _("your code") if frame.filename.startswith("<") or "ipykernel" in frame.filename else frame.filename
    )
    code = f": {frame.line.strip()}" if frame.line else ""
    return " " + _("(at line {line} of {where}{code})").format(line=frame.lineno, where=where, code=code)


def _type_name(t: type) -> str:
    """'an int', 'a number', ... (in the kernel's language) for a type a check asks for."""
    names = {
        numbers.Integral: _("an int"),
        numbers.Real: _("a number"),
        int: _("an int"),
        float: _("a float"),
        dict: _("a dict"),
    }
    return names.get(t) or _("a {type}").format(type=t.__name__)


def expect_type(got, types, *, case: str, what: str) -> None:
    types = types if isinstance(types, tuple) else (types,)
    if isinstance(got, bool) and bool not in types:
        ok = False
    else:
        ok = isinstance(got, types)
    if not ok:
        wanted = _(" or ").join(_type_name(t) for t in types)
        raise CheckFailed(
            _("case {case}: {what} should be {wanted}; got {got}.").format(
                case=case, what=what, wanted=wanted, got=_describe(got)
            )
        )


def expect_finite(got, *, case: str, what: str) -> None:
    value = float(got)
    if not math.isfinite(value):
        raise CheckFailed(
            _("case {case}: {what} should be a finite number; got {got}.").format(
                case=case, what=what, got=value
            )
        )


def expect_close(
    got,
    expected,
    *,
    case: str,
    what: str,
    rtol: float = 0.0,
    atol: float = 0.0,
    reveal: bool = True,
) -> None:
    """Fail unless |got - expected| <= atol + rtol*|expected|.

    `reveal=False` for the value an exercise asks for: the message then says how far off and in which direction,
    not the answer itself.
    """
    expect_type(got, numbers.Real, case=case, what=what)
    expect_finite(got, case=case, what=what)
    if expected is DEFERRED:
        return
    got, expected = float(got), float(expected)
    tolerance = atol + rtol * abs(expected)
    if abs(got - expected) <= tolerance:
        return
    tol_text = _tolerance_text(rtol, atol)
    if reveal:
        text = _("case {case}: expected {what} = {expected} ({tolerance}); got {got}.")
        raise CheckFailed(
            text.format(case=case, what=what, expected=_num(expected), tolerance=tol_text, got=_num(got))
        )
    text = _("case {case}: {what} is {how_far}: you got {got} ({tolerance}).")
    raise CheckFailed(
        text.format(case=case, what=what, how_far=how_far(got, expected), got=_num(got), tolerance=tol_text)
    )


def how_far(got: float, expected: float) -> str:
    """How far `got` is from `expected`, in words that do not give `expected` away ("too high, by less than 1%")."""
    if expected == 0:
        return _("too high") if got > 0 else _("too low")
    if got == 0:
        return _("zero where it should not be")
    if (got > 0) != (expected > 0):
        return _("of the wrong sign")
    high = abs(got) > abs(expected)
    factor = max(abs(got / expected), abs(expected / got))
    for limit, words in (
        (1.01, (_("too high, by less than 1%"), _("too low, by less than 1%"))),
        (1.1, (_("too high, by 1% to 10%"), _("too low, by 1% to 10%"))),
        (2, (_("too high, by 10% to a factor of 2"), _("too low, by 10% to a factor of 2"))),
        (10, (_("too high, by a factor of 2 to 10"), _("too low, by a factor of 2 to 10"))),
        (math.inf, (_("too high, by more than a factor of 10"), _("too low, by more than a factor of 10"))),
    ):
        if factor < limit:
            return words[0] if high else words[1]
    return words[0] if high else words[1]  # factor is inf or nan


def expect_equal(got, expected, *, case: str, what: str, reveal: bool = True) -> None:
    if expected is DEFERRED or got == expected:
        return
    if reveal:
        text = _("case {case}: expected {what} = {expected}; got {got}.")
        raise CheckFailed(text.format(case=case, what=what, expected=repr(expected), got=repr(got)))
    raise CheckFailed(
        _("case {case}: {what} is not right: got {got}.").format(case=case, what=what, got=repr(got))
    )


def expect_keys(got: dict, keys, *, case: str, what: str) -> None:
    expect_type(got, dict, case=case, what=what)
    missing = [k for k in keys if k not in got]
    if missing:
        text = _("case {case}: {what} is missing the key(s) {missing}; it has {keys}.")
        raise CheckFailed(text.format(case=case, what=what, missing=missing, keys=sorted(got)))


def _tolerance_text(rtol: float, atol: float) -> str:
    if not rtol and not atol:
        return _("exactly")
    parts = []
    if rtol:
        parts.append(_("±{rtol} relative").format(rtol=f"{rtol:.3g}"))
    if atol:
        parts.append(_("±{atol} absolute").format(atol=_num(atol)))
    return _("tolerance {parts}").format(parts=" + ".join(parts))


def _num(x: float) -> str:
    if float(x).is_integer() and abs(x) < 1e18:
        return f"{int(x):,}"
    return f"{x:.6g}"


def _describe(obj) -> str:
    text = repr(obj)
    if len(text) > 60:
        text = text[:57] + "..."
    return _("a {type} ({value})").format(type=type(obj).__name__, value=text)
