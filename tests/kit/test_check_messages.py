"""The check kit speaks the learner's language: every message a check can show a learner is a gettext template of
the `autograders` catalogue (translations/<language>/autograders.po), and in a Korean kernel a check's messages are
Korean, with the same cases, tolerances and verdicts as in English.

The static test reads autograders/kit.py and autograders/lessonNN.py: the text given to CheckFailed, NotGradedHere
and NotCheckedHere, and every `what=` and `passed=` phrase, must come from `_("...")` (or be assembled from such
texts and fields alone). A new English message written as an f-string fails it, naming the file and the line.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import autograders.kit as kit
import memlab.i18n as i18n

ROOT = Path(__file__).resolve().parents[2]
MODULES = [ROOT / "autograders" / "kit.py", *sorted((ROOT / "autograders").glob("lesson[0-9][0-9].py"))]
MESSAGE_CLASSES = {"CheckFailed", "NotGradedHere", "NotCheckedHere"}
PHRASE_KEYWORDS = {"what", "passed"}
HANGUL = re.compile("[가-힣]")
#: prose: two English words in a row ("the peak"); a code name written as a what= phrase (`x_fp8`,
#: `run.json["config"]`) stays as it is in every language
WORD = re.compile(r"[A-Za-z]{2,}\s+[A-Za-z]{2,}")


def _english_literals(node: ast.AST) -> list[str]:
    """The English words written literally in an expression outside `_()` (a string constant or an f-string's text);
    `_("...")` and what it formats are translated, names and calls are values made elsewhere."""
    found = []

    def visit(n: ast.AST) -> None:
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "_":
            return  # a template of the catalogue
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "format":
            visit(n.func.value)  # the template; its arguments are values (checked where they are made)
            return
        if isinstance(n, ast.Call):
            return  # a value computed by a function (its own messages are checked where it writes them)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and WORD.search(n.value):
            found.append(n.value)
            return
        if isinstance(n, ast.JoinedStr):
            for part in n.values:
                if isinstance(part, ast.Constant) and WORD.search(str(part.value)):
                    found.append(str(part.value))
                elif isinstance(part, ast.FormattedValue):
                    visit(part.value)
            return
        for child in ast.iter_child_nodes(n):
            visit(child)

    visit(node)
    return found


def _untranslated(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    problems = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        texts = list(node.args[:1]) if name in MESSAGE_CLASSES and name != "NotCheckedHere" else []
        texts += [k.value for k in node.keywords if k.arg in PHRASE_KEYWORDS]
        for text in texts:
            for literal in _english_literals(text):
                problems.append(f"{path.name}:{node.lineno}: {literal!r}")
    return problems


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_every_message_a_learner_reads_is_a_catalogue_template(path):
    problems = _untranslated(path)
    assert not problems, (
        'English written outside _() in a learner\'s message (wrap it: _("... {field} ...").format(field=...)):\n'
        + "\n".join(problems)
    )


def test_the_static_test_sees_an_fstring_message(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        'raise CheckFailed(f"case {case}: the peak is wrong")\nexpect_close(1, 2, what="the peak")\n'
    )
    assert len(_untranslated(probe)) == 2
    probe.write_text(
        'raise CheckFailed(_("case {case}: the peak is wrong").format(case=case))\nx(what=_("peak"))\n'
    )
    assert _untranslated(probe) == []


@pytest.fixture
def korean():
    i18n.use("ko")
    yield
    i18n.use("en")


def test_a_failed_comparison_says_case_direction_got_and_tolerance_in_korean(korean):
    with pytest.raises(kit.CheckFailed) as failed:
        kit.expect_close(3.0, 2.0, case="tiny MLP", what="the peak", rtol=0.01, reveal=False)
    text = str(failed.value)
    assert text == "케이스 tiny MLP: the peak — 10%~2배 큼(허용 오차 상대 ±0.01). 실제: 3.", text
    with pytest.raises(kit.CheckFailed) as failed:
        kit.expect_close(3.0, 2.0, case="tiny MLP", what="the peak", rtol=0.01)
    assert str(failed.value) == "케이스 tiny MLP: the peak — 예상: 2(허용 오차 상대 ±0.01). 실제: 3."


def test_the_success_line_and_not_written_yet_are_korean(korean, capsys):
    @kit.check("e9_demo", points=1)
    def demo(fn):
        kit.expect_callable(fn, "fn")
        kit.expect_equal(kit.call(fn, 2, case="2"), 4, case="2", what="fn(2)")
        return 1

    demo(lambda x: x * 2)
    assert capsys.readouterr().out == "✓ e9_demo: 케이스 1개 통과\n"

    def stub(x):
        raise NotImplementedError()

    with pytest.raises(kit.CheckFailed) as failed:
        demo(stub)
    assert str(failed.value) == (
        "e9_demo: `fn`: 아직 작성되지 않았습니다. 여전히 NotImplementedError를 발생시킵니다."
    )


def test_english_stays_as_written():
    assert i18n.language() == "en"
    assert kit.success_line("e1_x", 1) == "✓ e1_x: 1 case passed"
    assert kit.success_line("e1_x", 3) == "✓ e1_x: 3 cases passed"


def test_a_case_shows_its_korean_name_and_keeps_its_english_key(korean):
    """A case's name is recorded and replayed by its English text (the key), and shown in the kernel's language: a
    Korean learner reads '케이스 모멘텀 있는 SGD', the transcript holds 'SGD with momentum' whichever language
    collected it, and a name composed of names is composed the same way on both sides."""
    import copy
    import pickle

    case = kit.Case("SGD with momentum")
    assert case == "SGD with momentum" and str(case) == "SGD with momentum" and hash(case) == hash(str(case))
    assert f"{case}" == "모멘텀 있는 SGD"
    with pytest.raises(kit.CheckFailed) as failed:
        kit.expect_equal(3, 2, case=case, what="x")
    assert str(failed.value).startswith("케이스 모멘텀 있는 SGD: x")
    drawn = kit.drawn(2, kit.Case("shapes {shapes}, min_8bit_size={min_size}", shapes=[(3, 4)], min_size=100))
    assert drawn == "drawn at grading time #2, shapes [(3, 4)], min_8bit_size=100"
    assert f"{drawn}" == "채점 때 뽑은 #2(shape [(3, 4)], min_8bit_size=100)"
    for copied in (copy.deepcopy(drawn), pickle.loads(pickle.dumps(drawn))):
        assert copied == drawn and f"{copied}" == f"{drawn}"

    @kit.check("e9_cases", points=1)
    def two_cases(fn):
        for name in (case, drawn):
            kit.expect_equal(kit.call(fn, 2, case=name), 4, case=name, what="fn(2)")
        return 2

    transcript = kit.collect(two_cases.check, (lambda x: x * 2,), {})
    assert [r.label for r in transcript.records] == [str(case), str(drawn)]  # English, from a Korean kernel
    assert json.loads(json.dumps(transcript.to_data()))["records"][0]["label"] == "SGD with momentum"


#: where a case's name is written: `case=` of every kit helper, the label of `learner`, the description of `drawn`,
#: and the variables the checks keep names in
CASE_KEYWORDS = {"case"}
CASE_VARIABLES = {"case", "label", "name", "desc", "first_case"}


def _cases_written_as_text(path: Path) -> list[str]:
    """Case names written as an f-string or a string with words in it, instead of `kit.Case(...)`: shown in English to a
    Korean learner, or (an f-string of a Case) recorded under a translated key."""
    tree = ast.parse(path.read_text(), filename=str(path))
    problems = []

    def text(node) -> bool:
        return isinstance(node, ast.JoinedStr) or (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and WORD.search(node.value)
        )

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            written = [k.value for k in node.keywords if k.arg in CASE_KEYWORDS]
            if name == "learner" and node.args:
                written.append(node.args[0])
            if name == "drawn" and len(node.args) > 1:
                written.append(node.args[1])
            problems += [f"{path.name}:{node.lineno}: {name}(...)" for value in written if text(value)]
        if isinstance(node, ast.Assign) and text(node.value):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            problems += [f"{path.name}:{node.lineno}: {t} = ..." for t in targets if t in CASE_VARIABLES]
    return problems


@pytest.mark.parametrize("path", MODULES[1:], ids=lambda p: p.name)
def test_every_case_name_is_a_case(path):
    """A lesson's case names are `kit.Case` templates, never text: a Korean learner reads them in Korean, and the key
    the judge replays stays English (see test_a_case_shows_its_korean_name_and_keeps_its_english_key)."""
    problems = _cases_written_as_text(path)
    assert not problems, "case names written as text, not kit.Case(...):\n" + "\n".join(problems)
