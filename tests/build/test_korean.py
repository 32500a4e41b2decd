"""The Korean edition's machinery (scripts/translations.py, the Korean part of scripts/build_lessons.py, memlab.i18n,
memlab.plots' Hangul font):

- extract writes one catalogue per lesson with every message; a changed English cell's message becomes fuzzy and
  keeps its Korean, a removed cell's becomes obsolete, and then build_lessons --check fails naming the lesson;
- a built Korean code cell differs from the English only in comment and string tokens (plus the one inserted
  `memlab.i18n.use("ko")`), and a translation that drops an f-string's field is refused, naming the cell;
- ko/lessons/ is the nbgrader render of ko/solutions/, byte for byte, and the English build is unchanged;
- no markdown cell of a built Korean notebook is English prose (lessons without a complete catalogue: skipped);
- memlab.i18n.use("ko") makes memlab's messages and the check kit's Korean; a Korean figure renders without
  missing glyphs.

Every Korean solution is executed and graded (and every Korean learner version graded to 0) by the grading round
trip, tests/grader/test_grading_roundtrip.py: demonstrations left out in the full tier, every cell run in CI's drift check.

The build is tested on a copy of the fixture lesson with a small catalogue made here; the real catalogues are
filled by translators.
"""

from __future__ import annotations

import json
import re
import shutil
import tokenize
import warnings
from pathlib import Path

import nbformat
import pytest
from nbgrader_pipeline import (
    FIXTURE_SOLUTIONS,
    ROOT,
    SOLUTIONS,
    build_lessons,
    lesson_slugs,
    row_for,
    run_grade,
)

import memlab.i18n as i18n
from coursetools import translations as tr
from memlab import hardware, notebook, plots
from memlab.notebook import MODEL_OUTPUTS, cell_key

KO = ROOT / "ko"
SLUG = "00-fixture"
# the fixture lesson's setup cell, given a comment, an f-string and prose, and a cell that calls needs(...)
SETUP = (
    "import torch\n\nimport memlab.hardware  # the course's toolkit\n\nDEVICE = memlab.hardware.pick_device()\n"
    'print(f"running on {DEVICE} today")'
)
NEEDS = 'from memlab.notebook import needs\n\nneeds("add", exercise="Exercise 0.2")\nprint(f"add(2, 3) is {add(2, 3)} here")'

#: the fixture's Korean, by English message (markdown cells whole, code tokens as written)
KOREAN = {
    "# the course's toolkit": "# 이 강의의 도구 모음",
    'f"running on {DEVICE} today"': 'f"오늘은 {DEVICE}에서 실행합니다"',
    '"Exercise 0.2"': '"연습 0.2"',
    'f"add(2, 3) is {add(2, 3)} here"': 'f"add(2, 3)의 값은 {add(2, 3)}입니다"',
    '"""x times itself."""': '"""x를 자기 자신과 곱한 값."""',
    '"hidden case: square(7)"': '"숨겨진 경우: square(7)"',
    '"""The sum of a and b."""': '"""a와 b의 합."""',
    '"""n float32 ones on `device` (the first CUDA GPU unless told otherwise)."""': (
        '"""`device`에 있는 float32 1 n개(따로 정하지 않으면 첫 번째 CUDA GPU)."""'
    ),
}
KOREAN_MARKDOWN = [  # in cell order
    "# 레슨 00 — 픽스처\n\n실제 형식으로 된 작은 레슨으로, 채점 파이프라인의 테스트(`tests/grader/test_grading_mechanics.py`)가 "
    "사용합니다. 검사는 옆에 있는 `fixture_checks.py`에 있으며 실제 검사 도구(`autograders.kit`)로 만들었습니다.",
    "### 연습 0.1 — 제곱 (4점)\n\n`x * x`를 돌려주는 `square(x)`를 작성하세요.",
    "### 연습 0.2 — 덧셈 (4점)\n\n`a + b`를 돌려주는 `add(a, b)`를 작성하세요.",
    '### 연습 0.3 — GPU 위의 1 (2점)\n\n`device`에 `n`개의 1(float32)을 돌려주는 `gpu_ones(n, device="cuda")`를 '
    "작성하세요. 검사는 어디서든 CPU에서 작게 한 번 실행한 다음, 나머지에는 CUDA GPU가 필요합니다: 그 밖의 곳에서는 "
    "NOT CHECKED HERE라고 표시합니다.",
    "### 질문 0.4 — 자신의 말로 (2점, 사람이 채점)\n\n왜 `square(-3)`이 `square(3)`과 같을까요? 한 문장으로.",
    "수를 자기 자신과 곱하면 부호가 상쇄되기 때문입니다: (-3) x (-3) = 3 x 3 = 9.\n\n**채점 기준** (2점): 곱에서 "
    "부호가 상쇄된다고 하면 2점, 이유 없이 올바른 예만 들면 1점, 그 밖에는 0점.",
    "## 요약\n\n연습 세 개에 10점, 서술형 답 하나에 2점.",
]


@pytest.fixture(autouse=True)
def english_afterwards():
    yield
    i18n.use("en")


def fixture_course(tmp_path: Path) -> Path:
    """A course in tmp_path: the fixture lesson (with SETUP and NEEDS, and an output recorded for NEEDS)."""
    solutions = tmp_path / "solutions"
    shutil.copytree(FIXTURE_SOLUTIONS / SLUG, solutions / SLUG)
    path = solutions / SLUG / f"{SLUG}.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].source = SETUP
    nb.cells[9].source = NEEDS
    nb.cells[9].outputs = [nbformat.v4.new_output("stream", name="stdout", text="add(2, 3) is 5 here\n")]
    nbformat.write(nb, path)
    return solutions


def translate(po: Path, markdown: list[str] = KOREAN_MARKDOWN, tokens: dict[str, str] = KOREAN) -> None:
    """Fill the catalogue at `po` with the fixture's Korean."""
    catalog = tr.read_catalog(po)
    english_markdown = [m for m in catalog if m.id and "(markdown" in " ".join(m.auto_comments)]
    for message, korean in zip(english_markdown, markdown, strict=True):
        message.string = korean
    for message in catalog:
        if message.id in tokens:
            message.string = tokens[message.id]
    po.write_bytes(tr.catalog_bytes(catalog))


def build(solutions: Path, *extra: str) -> int:
    return build_lessons.main(
        ["--solutions", str(solutions), "--lessons", str(solutions.parent / "lessons"), *extra]
    )


@pytest.fixture
def built(tmp_path):
    """The fixture course with a complete Korean catalogue, built: its solutions folder."""
    solutions = fixture_course(tmp_path)
    tr.extract([SLUG], solutions=solutions, translations=tmp_path / "translations")
    translate(tmp_path / "translations" / "ko" / f"{SLUG}.po")
    assert build(solutions) == 0
    return solutions


# ---- extract ------------------------------------------------------------------------------------------------------


def test_extract_writes_every_message_once_and_deterministically(tmp_path, capsys):
    solutions = fixture_course(tmp_path)
    (status,) = tr.extract([SLUG], solutions=solutions, translations=tmp_path / "translations")
    po = tmp_path / "translations" / "ko" / f"{SLUG}.po"
    catalog = tr.read_catalog(po)
    ids = [m.id for m in catalog if m.id]
    assert len(ids) == status.messages == len(KOREAN_MARKDOWN) + len(KOREAN)
    assert set(KOREAN) <= set(ids)
    assert not any("BEGIN SOLUTION" in i or "YOUR CODE HERE" in i for i in ids)
    assert '"add"' not in ids  # no space: not prose
    assert all(m.context == "cell " + cell_key(_source_of(solutions, m)) for m in catalog if m.id)
    assert not status.complete and len(status.untranslated) == len(ids)
    setup = next(m for m in catalog if m.id == "# the course's toolkit")
    assert setup.locations == [(f"{SLUG}.ipynb", 1)] and "line 3" in " ".join(setup.auto_comments)
    before = po.read_bytes()
    assert b"POT-Creation-Date: 2026-01-01" in before
    capsys.readouterr()
    tr.extract([SLUG], solutions=solutions, translations=tmp_path / "translations")
    assert po.read_bytes() == before and "wrote" not in capsys.readouterr().out


def _source_of(solutions: Path, message) -> str:
    nb = nbformat.read(solutions / SLUG / f"{SLUG}.ipynb", as_version=4)
    (location,) = {line for _, line in message.locations}
    return nb.cells[location or 0].source  # Babel writes no number for cell 0 ("00-fixture.ipynb")


def test_changed_cell_is_fuzzy_removed_cell_obsolete_and_check_fails(built, capsys):
    solutions = built
    tmp = solutions.parent
    po = tmp / "translations" / "ko" / f"{SLUG}.po"
    path = solutions / SLUG / f"{SLUG}.ipynb"
    nb = nbformat.read(path, as_version=4)
    old_markdown = nb.cells[2].source
    nb.cells[2].source = old_markdown.replace("which returns", "which must return")
    nb.cells[1].source = SETUP.replace("pick_device()", "pick_device()  ")  # code changed, its comment not
    del nb.cells[15]  # the summary
    nbformat.write(nb, path)
    capsys.readouterr()

    # the catalogue is stale: --check fails, naming the lesson and what is missing
    assert build(solutions, "--check") == 1
    out = capsys.readouterr().out
    assert SLUG in out and "missing" in out and "not complete" in out

    (status,) = tr.extract([SLUG], solutions=solutions, translations=tmp / "translations")
    catalog = tr.read_catalog(po)
    changed = catalog.get(nb.cells[2].source, "cell " + cell_key(nb.cells[2].source))
    assert changed.fuzzy and changed.string == KOREAN_MARKDOWN[1] and changed.previous_id == [old_markdown]
    comment = catalog.get("# the course's toolkit", "cell " + cell_key(nb.cells[1].source))
    assert comment.string == KOREAN["# the course's toolkit"] and not comment.fuzzy  # only the code changed
    assert any(m.id.startswith("## Summary") and m.string for m in catalog.obsolete.values())
    assert [text for _, text in status.fuzzy] == ["### Exercise 0.1 — square (4 points)"]
    assert not status.missing and not status.untranslated

    assert build(solutions, "--check") == 1
    out = capsys.readouterr().out
    assert f"{SLUG} has an edition" in out and "1 fuzzy" in out and "fuzzy: cell 2" in out
    assert build(solutions) == 1  # the stale edition is kept, not rebuilt or removed
    assert (tmp / "ko" / "solutions" / SLUG / f"{SLUG}.ipynb").is_file()

    catalog = tr.read_catalog(po)
    catalog.get(nb.cells[2].source, "cell " + cell_key(nb.cells[2].source)).flags.discard("fuzzy")
    po.write_bytes(tr.catalog_bytes(catalog))
    assert build(solutions) == 0 and build(solutions, "--check") == 0
    korean = nbformat.read(tmp / "ko" / "solutions" / SLUG / f"{SLUG}.ipynb", as_version=4)
    assert len(korean.cells) == len(nb.cells)


def test_an_unchanged_multi_line_docstring_keeps_its_translation_when_its_cells_code_changes(tmp_path):
    """A docstring of several lines is one message, like a one-line comment: when only the code around it changes
    (its cell's key does), it keeps its translation and is not fuzzy."""
    docstring = '"""The toolkit helper.\n\n    It returns one."""'
    korean = '"""이 강의의 도우미.\n\n    1을 돌려줍니다."""'
    solutions = fixture_course(tmp_path)
    path = solutions / SLUG / f"{SLUG}.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].source = SETUP + f"\n\n\ndef helper():\n    {docstring}\n    return 1\n"
    nbformat.write(nb, path)
    translations = tmp_path / "translations"
    tr.extract([SLUG], solutions=solutions, translations=translations)
    po = translations / "ko" / f"{SLUG}.po"
    translate(po, tokens={**KOREAN, docstring: korean})
    nb.cells[1].source = nb.cells[1].source.replace("return 1", "return 1  # always")
    nbformat.write(nb, path)
    (status,) = tr.extract([SLUG], solutions=solutions, translations=translations)
    kept = tr.read_catalog(po).get(docstring, "cell " + cell_key(nb.cells[1].source))
    assert kept is not None and kept.string == korean and not kept.fuzzy
    assert [text for _, text in status.untranslated] == ["# always"]
    assert not status.fuzzy


def test_an_obsolete_translation_comes_back_when_its_english_does(built):
    tmp = built.parent
    path = built / SLUG / f"{SLUG}.ipynb"
    original = path.read_bytes()
    nb = nbformat.read(path, as_version=4)
    del nb.cells[15]
    nbformat.write(nb, path)
    tr.extract([SLUG], solutions=built, translations=tmp / "translations")
    path.write_bytes(original)
    (status,) = tr.extract([SLUG], solutions=built, translations=tmp / "translations")
    assert status.complete


# ---- the build ----------------------------------------------------------------------------------------------------


def test_incomplete_catalogue_is_listed_not_built(tmp_path, capsys):
    solutions = fixture_course(tmp_path)
    tr.extract([SLUG], solutions=solutions, translations=tmp_path / "translations")
    capsys.readouterr()
    assert build(solutions) == 0 and build(solutions, "--check") == 0
    assert "not built, catalogue incomplete" in capsys.readouterr().out
    assert not (tmp_path / "ko").exists()


def test_korean_solution_and_lesson(built):
    tmp = built.parent
    english = nbformat.read(built / SLUG / f"{SLUG}.ipynb", as_version=4)
    korean = nbformat.read(tmp / "ko" / "solutions" / SLUG / f"{SLUG}.ipynb", as_version=4)
    assert korean.metadata["memlab"] == {"language": "ko"}
    assert {k: v for k, v in korean.metadata.items() if k != "memlab"} == english.metadata
    assert [c.id for c in korean.cells] == [c.id for c in english.cells]
    assert [c.metadata for c in korean.cells] == [c.metadata for c in english.cells]
    assert all(not c.get("outputs") for c in korean.cells)
    assert [c.source for c in korean.cells if c.cell_type == "markdown"] == KOREAN_MARKDOWN
    assert korean.cells[1].source.splitlines()[2:4] == [
        "import memlab.hardware  # 이 강의의 도구 모음",
        'memlab.i18n.use("ko")',
    ]
    for en, ko in zip(english.cells, korean.cells, strict=True):
        if en.cell_type == "code":
            inserted = 'memlab.i18n.use("ko")' if "memlab.i18n.use" in ko.source else None
            assert tr.code_differences(en.source, ko.source, inserted) == []
    assert tr.code_differences(english.cells[1].source, korean.cells[1].source) != []  # the use() is counted

    # the learner version: nbgrader's render of the Korean solution, with the recorded outputs re-keyed
    lesson = tmp / "ko" / "lessons" / SLUG
    rendered = build_lessons.render(tmp / "ko" / "solutions")
    assert {rel: (tmp / "ko" / "lessons" / rel).read_bytes() for rel in rendered} == rendered
    learner = nbformat.read(lesson / f"{SLUG}.ipynb", as_version=4)
    assert "raise NotImplementedError()" in learner.cells[3].source
    assert "raises-exception" in learner.cells[4].metadata.get("tags", [])
    assert "fixture_checks.py" in {p.name for p in lesson.iterdir()}
    record = json.loads((lesson / MODEL_OUTPUTS).read_text(encoding="utf-8"))
    shown = {"output_type": "stream", "name": "stdout", "text": "add(2, 3) is 5 here\n"}  # English, re-keyed
    assert record["cells"] == {cell_key(korean.cells[9].source): [shown]}
    assert "English solution's run" in record["about"]


def test_the_korean_runs_own_outputs_replace_the_english_ones(built, capsys):
    """Once the Korean solution's run is kept (execute_solutions.py --edition ko), a stuck Korean learner is shown its
    outputs; a cell translated since that run falls back to the English run's, with a warning naming the command."""
    tmp = built.parent
    korean = nbformat.read(tmp / "ko" / "solutions" / SLUG / f"{SLUG}.ipynb", as_version=4)
    key = cell_key(korean.cells[9].source)
    own = [{"output_type": "stream", "name": "stdout", "text": "add(2, 3)의 값은 5입니다\n"}]
    kept = tr.outputs_path(SLUG, "ko", tmp / "translations")
    assert build(built) == 0
    assert "1 recorded output(s) are the English run's" in capsys.readouterr().out
    kept.parent.mkdir(parents=True)
    kept.write_text(json.dumps({"cells": {key: own}}, ensure_ascii=False))
    assert build(built) == 0
    assert "English run's" not in capsys.readouterr().out
    for folder in ("solutions", "lessons"):
        record = json.loads((tmp / "ko" / folder / SLUG / MODEL_OUTPUTS).read_text(encoding="utf-8"))
        assert record["cells"] == {key: own}
    kept.write_text(json.dumps({"cells": {"a cell translated since": own}}))
    assert build(built) == 0
    assert "1 recorded output(s) are the English run's" in capsys.readouterr().out


def test_english_build_is_unchanged_by_the_korean_one(built, tmp_path):
    english_only = fixture_course(tmp_path / "plain")
    assert build(english_only) == 0
    ours = {
        p.relative_to(built.parent / "lessons"): p.read_bytes()
        for p in (built.parent / "lessons").rglob("*")
        if p.is_file()
    }
    theirs = {
        p.relative_to(tmp_path / "plain" / "lessons"): p.read_bytes()
        for p in (tmp_path / "plain" / "lessons").rglob("*")
        if p.is_file()
    }
    assert ours == theirs


def test_check_fails_when_ko_differs(built, capsys):
    checkpoints = built.parent / "ko" / "solutions" / SLUG / ".ipynb_checkpoints"
    checkpoints.mkdir()
    (checkpoints / f"{SLUG}-checkpoint.ipynb").write_text("{}")  # JupyterLab's: neither compared nor removed
    assert build(built, "--check") == 0
    notebook_path = built.parent / "ko" / "lessons" / SLUG / f"{SLUG}.ipynb"
    notebook_path.write_bytes(notebook_path.read_bytes().replace("연습 0.2".encode(), "연습 0.9".encode()))
    (built.parent / "ko" / "lessons" / SLUG / "stray.txt").write_text("x")
    capsys.readouterr()
    assert build(built, "--check") == 1
    out = capsys.readouterr().out
    assert f"out of date: {notebook_path}" in out and "stray.txt" in out
    assert build(built) == 0 and build(built, "--check") == 0
    assert not (built.parent / "ko" / "lessons" / SLUG / "stray.txt").exists()
    assert (checkpoints / f"{SLUG}-checkpoint.ipynb").exists()


def test_fstring_translation_that_drops_a_field_is_refused(tmp_path, capsys):
    solutions = fixture_course(tmp_path)
    tr.extract([SLUG], solutions=solutions, translations=tmp_path / "translations")
    broken = KOREAN | {'f"running on {DEVICE} today"': 'f"오늘은 GPU에서 실행합니다"'}
    translate(tmp_path / "translations" / "ko" / f"{SLUG}.po", tokens=broken)
    capsys.readouterr()
    assert build(solutions) == 1
    captured = capsys.readouterr()
    assert f"{SLUG}.po, cell 1, line 6" in captured.err and "{...} fields" in captured.err
    assert not (tmp_path / "ko" / "solutions" / SLUG).exists()


@pytest.mark.parametrize(
    "korean, why",
    [
        ('f"오늘은 {DEVICE!r}에서"', "{...} fields"),  # a field changed
        ('f"{DEVICE}" f"오늘"', "exactly one STRING"),  # two tokens
        ("'오늘은 {DEVICE}에서'", "prefix and quotes"),  # no longer an f-string
        ('F"오늘은 {DEVICE}에서"', "prefix and quotes"),
        ('f"""오늘은 {DEVICE}에서"""', "prefix and quotes"),
        ('f"오늘은 {DEVICE}에서', "exactly one STRING"),  # unterminated
        ("오늘은 {DEVICE}에서", "exactly one STRING"),
    ],
)
def test_a_replacement_must_be_the_same_kind_of_token(korean, why):
    source = 'print(f"running on {DEVICE} today")'
    with pytest.raises(tr.TranslationError, match="cell 7, line 1") as error:
        tr.translate_code(source, {'f"running on {DEVICE} today"': korean}.get, "00-fixture.po, cell 7")
    assert why in str(error.value)
    assert tr.translate_code(source, {'f"running on {DEVICE} today"': 'f"{DEVICE}에서"'}.get, "x") == (
        'print(f"{DEVICE}에서")'
    )


def test_a_comment_stays_a_comment():
    source = "x = 1  # one\ny = 2"
    for bad in ("one", "# one\nz = 3", '"# one"'):
        with pytest.raises(tr.TranslationError):
            tr.translate_code(source, {"# one": bad}.get, "here")
    assert tr.translate_code(source, {"# one": "# 하나"}.get, "here") == "x = 1  # 하나\ny = 2"


def test_what_is_extracted():
    source = (
        "def f(x):\n"
        '    """Twice x, as a float."""\n'
        "    ### BEGIN SOLUTION\n"
        "    return 2 * x  # noqa: E731\n"
        "    ### END SOLUTION\n"
        "# YOUR CODE HERE\n"
        "# ----\n"
        "# plot it\n"
        'SUMMARY["peak memory"] = {"fp32": "4 GiB", "mode": "cuda", "b": b"raw bytes"}\n'
        "print(f\"{'label with spaces':<9} {x}\")\n"
        'print(pad("peak", ">8") + pad("x", ">3") + pad(name, "<9") + "rank")\n'
    )
    extracted = [(tokenize.tok_name[t.type], t.string, hint) for t, hint in tr.code_messages(source)]
    assert [text for _, text, _ in extracted] == [
        '"""Twice x, as a float."""',
        "# plot it",
        '"peak memory"',
        '"4 GiB"',  # prose by the rule (a space, a word): a translator keeps it by copying it
        '"peak"',  # one word, but a table header's text (memlab.notebook.pad keeps its column in Korean)
    ]
    assert "subscript" in extracted[2][2] and extracted[3][2] is None


def test_markdown_structure_is_kept():
    english = "## 1. Memory\n\nThe peak is $2N$ bytes, `torch.cuda` says so ([docs](https://pytorch.org)).\n"
    assert tr.markdown_differences(
        english,
        "## 1. 메모리\n\n최대는 $2N$ 바이트이며 `torch.cuda`가 알려 줍니다 ([문서](https://pytorch.org)).\n",
    ) == ([], [])
    errors, _ = tr.markdown_differences(
        english, "### 1. 메모리\n\n최대는 $2M$ 바이트, `torch.cuda` ([문서](https://pytorch.org))."
    )
    assert errors == [
        "headings differ (missing ['##']) (new ['###'])",
        "math differ (missing ['$2N$']) (new ['$2M$'])",
    ]
    _, notes = tr.markdown_differences(
        english, "## 1. 메모리\n\n최대는 $2N$ 바이트 ([문서](https://pytorch.kr))."
    )
    assert len(notes) == 2 and notes[0].startswith("code spans differ")


def test_a_python_fence_keeps_its_code_and_may_translate_its_comments():
    english = "From TE:\n\n```python\nsf = fp8_max / amax          # amax 0: keep the scale\nx = 1\n```\n"
    commented = (
        "TE의 소스:\n\n```python\nsf = fp8_max / amax          # amax가 0이면 스케일 유지\nx = 1\n```\n"
    )
    assert tr.markdown_differences(english, commented) == ([], [])
    changed = commented.replace("x = 1", "x = 2")
    assert tr.markdown_differences(english, changed)[0][0].startswith("fenced code differ")
    shell = "Run:\n\n```bash\npip install torch  # the CPU build\n```\n"
    assert tr.markdown_differences(shell, shell.replace("the CPU build", "CPU 빌드"))[
        0
    ]  # only Python's comments


# ---- the real lessons' editions ------------------------------------------------------------------------------------


def _edition(slug: str) -> Path:
    path = KO / "solutions" / slug / f"{slug}.ipynb"
    if not path.is_file():
        status = tr.catalog_status(
            tr.read_catalog(tr.catalogue_path(slug)),
            tr.lesson_template(
                nbformat.read(SOLUTIONS / slug / f"{slug}.ipynb", as_version=4), slug, path.name
            ),
            slug,
            tr.catalogue_path(slug),
        )
        pytest.skip(f"no Korean edition of {slug} yet, its catalogue is incomplete: {status.summary()}")
    return path


def test_every_lesson_has_a_catalogue_with_every_message():
    for slug in lesson_slugs():
        nb = nbformat.read(SOLUTIONS / slug / f"{slug}.ipynb", as_version=4)
        status = tr.catalog_status(
            tr.read_catalog(tr.catalogue_path(slug)),
            tr.lesson_template(nb, slug, f"{slug}.ipynb"),
            slug,
            tr.catalogue_path(slug),
        )
        assert status.exists and not status.missing and not status.obsolete_used, (
            f"{status.summary()}: run python scripts/translations.py extract {slug}"
        )


def padded_headers(nb) -> list[tuple[str, str]]:
    """(text, spec) of every `pad("text", "spec")` in the notebook's code: its tables' headers."""
    import ast

    found = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(
                "\n".join(line for line in cell.source.splitlines() if not line.startswith(("%", "!")))
            )
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "pad" and len(node.args) == 2:
                text, spec = node.args
                if isinstance(text, ast.Constant) and isinstance(spec, ast.Constant) and text.value.strip():
                    found.append((text.value, spec.value))
    return found


@pytest.mark.parametrize("slug", lesson_slugs())
def test_table_headers_are_translated_and_fit_their_columns(slug):
    """A header is written `pad(text, spec)` (memlab.notebook): the Korean text replaces the English one and must
    leave its column a space, counted in display columns (a Hangul syllable takes two)."""
    english = padded_headers(nbformat.read(SOLUTIONS / slug / f"{slug}.ipynb", as_version=4))
    korean = padded_headers(nbformat.read(KO / "solutions" / slug / f"{slug}.ipynb", as_version=4))
    assert [spec for _, spec in english] == [spec for _, spec in korean]
    assert any(notebook.display_width(text) > len(text) for text, _ in korean), f"{slug}: no header in Korean"
    for (original, spec), (text, _) in zip(english, korean):
        width, columns = int(spec.lstrip("<>^")), notebook.display_width(text)
        assert columns < width or columns <= len(
            original
        ), (  # no worse than the English, where that overflows
            f"{slug}: the header {text!r} ({original!r}) takes {columns} display columns of its {width}"
        )


@pytest.mark.parametrize("slug", lesson_slugs())
def test_prose_that_quotes_a_header_quotes_it_in_korean(slug):
    """English prose that names a column by its header in quotes ("bound / u" in the table) names it by the header
    the Korean table prints ("한계 / u"), not by the English one or a third wording."""
    english_nb = nbformat.read(SOLUTIONS / slug / f"{slug}.ipynb", as_version=4)
    korean_nb = nbformat.read(KO / "solutions" / slug / f"{slug}.ipynb", as_version=4)
    headers = {
        en.strip(): ko.strip()
        for (en, _), (ko, _) in zip(padded_headers(english_nb), padded_headers(korean_nb))
        if en.strip() != ko.strip()
    }
    quoted = re.compile(r'"([^"\n]+)"')
    missing = []
    for index, (en, ko) in enumerate(zip(english_nb.cells, korean_nb.cells)):
        if en.cell_type != "markdown":
            continue
        prose = re.sub(r"`[^`]*`", "", en.source)  # a quoted string inside code is code
        for text in quoted.findall(prose):
            if text in headers and headers[text] not in ko.source:
                missing.append((index, text, headers[text]))
    assert not missing, (
        f"{slug}: (cell, the English header quoted, the Korean one its translation lacks): {missing}"
    )


def test_rows_padded_by_characters_are_found_ragged_and_rows_padded_by_pad_are_not():
    """tests/tables.py, which the drift check runs over every Korean solution's printed tables (test_grading_roundtrip):
    an f-string pads a Korean label by characters, `pad` by display columns."""
    from tables import ragged_rows

    labels = {
        "fp32": (0.2139, 0.1266),
        "fp16, 스케일러 없음": (0.2139, 0.2084),
        "순수 bf16": (0.2139, 0.1266),
    }
    by_characters = "\n".join(f"{name:<28}{a:>8.4f}{b:>8.4f}" for name, (a, b) in labels.items())
    by_columns = "\n".join(
        notebook.pad(name, "<28") + f"{a:>8.4f}{b:>8.4f}" for name, (a, b) in labels.items()
    )
    header = notebook.pad("구성", "<28") + notebook.pad("처음", ">8") + notebook.pad("끝", ">8")
    assert len(ragged_rows(by_characters)) == 2
    assert ragged_rows(header + "\n" + by_columns) == []
    assert (
        ragged_rows("스텝 1은 6.17 MiB로 시작해 32.32 MiB까지 올라갑니다.\nfp8_e5m2     99.9%     0.1%") == []
    )
    # a last column written to the left ends where its text does: two labels of as many characters are not a
    # ragged edge (lesson 04's kinds of saved tensor, lesson 06's fields)
    kinds = "\n".join(
        f"MmBackward0  {n:>8,}  " + notebook.pad(k, "<12") for n, k in ((4096, "매개변수"), (2048, "(중복)"))
    )
    assert ragged_rows(kinds) == []
    # and a right-aligned last column ends on one display column: summary_table's rows line up
    summary = notebook.summary_table(
        [
            ("§4 체크포인팅 없음: 최대 MiB / MFLOPs / ms", "11.39 / 797 / 13.8"),
            ("§4 체크포인팅 선택적: 최대 MiB", "7.71"),
        ]
    )
    assert ragged_rows(summary) == []


@pytest.mark.parametrize("slug", lesson_slugs())
def test_korean_markdown_is_not_english_prose(slug):
    nb = nbformat.read(_edition(slug), as_version=4)
    english = [
        (i, cell.source.strip().splitlines()[0][:60])
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "markdown"
        and (share := tr.hangul_share(cell.source)) is not None
        and share < 0.4
    ]
    assert not english, f"markdown cells of {slug} that read as English (under 40% Hangul letters): {english}"


def test_cited_titles_and_links_do_not_count_as_prose():
    """A reading list cites English titles as they are: only the Korean around them is prose."""
    cell = (
        "더 읽을거리: [Reducing Activation Recomputation in Large Transformer Models](https://arxiv.org/abs/2205.05198)"
        ", *Training Compute-Optimal Large Language Models* (2022), [한국어 번역](https://example.org) **중요**"
    )
    assert tr.prose_letters(cell) == "더읽을거리한국어번역중요"
    assert tr.hangul_share("This paragraph is English prose, with a [link](x) in it.") == 0.0


@pytest.mark.parametrize("slug", lesson_slugs())
def test_korean_code_differs_only_in_comments_and_strings(slug):
    korean = nbformat.read(_edition(slug), as_version=4)
    english = nbformat.read(SOLUTIONS / slug / f"{slug}.ipynb", as_version=4)
    assert len(korean.cells) == len(english.cells)
    uses = 0
    for index, (en, ko) in enumerate(zip(english.cells, korean.cells, strict=True)):
        if en.cell_type == "code":
            inserted = 'memlab.i18n.use("ko")' if 'memlab.i18n.use("ko")' in ko.source else None
            uses += inserted is not None
            assert tr.code_differences(en.source, ko.source, inserted) == [], f"cell {index}"
    assert uses == 1


def test_ko_lessons_are_the_render_of_ko_solutions():
    if not (KO / "solutions").is_dir():
        pytest.skip("no Korean edition is built yet (no catalogue is complete)")
    rendered = build_lessons.render(KO / "solutions")
    differ = [
        rel
        for rel, data in rendered.items()
        if not (KO / "lessons" / rel).is_file() or (KO / "lessons" / rel).read_bytes() != data
    ]
    assert not differ, f"ko/lessons/ is out of date for {differ}: run python scripts/build_lessons.py"


# ---- memlab speaks Korean -----------------------------------------------------------------------------------------


def test_use_ko_translates_memlab_messages():
    assert i18n.language() == "en" and i18n._("offline") == "offline"
    i18n.use("ko")
    assert i18n.language() == "ko"
    assert i18n._("offline") == "오프라인"
    assert i18n._("a message nobody translated") == "a message nobody translated"
    report = {"python": "3", "torch": "2", **dict.fromkeys(hardware.REPORTED_PACKAGES), "gpu": None}
    assert "CPU만 사용" in hardware.format_preflight(report)
    i18n.use("en")
    assert i18n._("offline") == "offline"
    with pytest.raises(ValueError, match="unknown language"):
        i18n.use("fr")


def test_needs_and_name_error_speak_korean():
    i18n.use("ko")
    with pytest.raises(notebook.ExerciseNeeded) as stop:
        notebook.needs("NOT_DEFINED_ANYWHERE", exercise="연습 1.5")
    assert (
        str(stop.value)
        == "연습 1.5 먼저 끝내세요(해당 셀을 실행하세요): `NOT_DEFINED_ANYWHERE` 아직 정의되지 않음."
    )
    try:
        exec("undefined_name_here", {"__name__": "__main__"})
    except NameError as error:
        (line,) = notebook.message_lines(NameError, error, error.__traceback__)
    assert "`undefined_name_here`: 정의되지 않았습니다" in line


@pytest.mark.parametrize("domain", tr.CODE_CATALOGUES)
def test_code_catalogue_is_complete_compiled_and_keeps_fields(domain):
    status = tr.code_status(domain, ROOT / "translations")
    assert status.complete, (
        f"{status.summary()}: python scripts/translations.py extract {domain}, then translate"
    )
    catalog = tr.read_catalog(tr.catalogue_path(domain))
    for message in catalog:
        if message.id:
            assert tr.fields(repr(message.id)) == tr.fields(repr(message.string)), message.id
    compiled = ROOT / domain / "locale" / "ko" / "LC_MESSAGES" / f"{domain}.mo"
    shipped = tr.mo_messages(compiled.read_bytes())
    assert shipped == tr.mo_messages(tr.compiled_messages(ROOT / "translations", "ko", domain)), (
        f"{domain}/locale is out of date: run python scripts/build_lessons.py"
    )
    assert len(shipped) == status.messages


# ---- figures ------------------------------------------------------------------------------------------------------


def test_korean_figure_has_no_missing_glyphs(tmp_path):
    if plots.language_font("ko") is None:
        pytest.skip(
            "no font with Hangul here: pip install koreanize-matplotlib (or apt-get install fonts-nanum)"
        )
    import matplotlib.pyplot as plt

    i18n.use("ko")
    fig, ax = plt.subplots()
    ax.plot([0, 1], [-1, 1])
    ax.set_title("학습 단계별 메모리 (MiB)")
    ax.set_xlabel("연산자 번호")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig.savefig(tmp_path / "ko.png")
    plt.close(fig)
    assert not [w for w in caught if "Glyph" in str(w.message) or "missing" in str(w.message)]
    i18n.use("en")
    import matplotlib as mpl

    assert list(mpl.rcParams["font.family"]) == plots._font_state["family"]


def test_missing_hangul_font_is_said_once_in_one_line(monkeypatch, capsys):
    monkeypatch.setattr(plots, "_LANGUAGE_FONTS", {"ko": ("No Such Font Family",)})
    monkeypatch.setattr(plots, "FONT_PACKAGES", ())
    monkeypatch.setitem(plots._font_state, "warned", set())
    i18n.use("ko")
    i18n.use("ko")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "koreanize-matplotlib" in err and "한글" in err


# ---- slow: the Korean solution runs ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_korean_fixture_solution_executes_in_korean(built):
    from nbclient import NotebookClient

    path = built.parent / "ko" / "solutions" / SLUG / f"{SLUG}.ipynb"
    nb = nbformat.read(path, as_version=4)
    nb.cells.insert(
        2,
        nbformat.v4.new_code_cell(
            "import memlab.i18n\nprint(memlab.i18n.language(), memlab.i18n._('offline'))"
        ),
    )
    NotebookClient(nb, timeout=120, resources={"metadata": {"path": str(path.parent)}}).execute()
    assert nb.cells[2].outputs[0]["text"] == "ko 오프라인\n"
    assert nb.cells[1].outputs[0]["text"].startswith("오늘은 ")
    assert nb.cells[10].outputs[0]["text"] == "add(2, 3)의 값은 5입니다\n"


def test_relative_links_still_name_the_same_file_from_the_deeper_edition_folder():
    assert tr.deeper_links("see [distributed](../../memlab/distributed.py) and ![fig](img.png)") == (
        "see [distributed](../../../memlab/distributed.py) and ![fig](../img.png)"
    )
    kept = "[paper](https://arxiv.org/abs/1) [above](#setup) [root](/etc/x) [mail](mailto:a@b)"
    assert tr.deeper_links(kept) == kept
    built = (ROOT / "ko" / "solutions" / "05-accumulation" / "05-accumulation.ipynb").read_text()
    assert "](../../../memlab/distributed.py)" in built
    assert (
        (ROOT / "ko" / "solutions" / "05-accumulation" / "../../../memlab/distributed.py").resolve().is_file()
    )


@pytest.mark.slow
def test_a_class_of_both_editions_is_graded_each_against_its_own(built, tmp_path):
    """grade.py on Korean and English notebooks of the same lesson: each graded against its edition's sources (the
    Korean in the run's course-ko), the same columns and points, the Korean verdicts and the grader's own notes in
    Korean, a note naming the edition; a Korean learner version gets zero."""
    from nbgrader_pipeline import graded_cells

    korean = built.parent / "ko"
    subs = tmp_path / "subs"
    for student, source in {
        "ada": korean / "solutions" / SLUG,
        "bob": built / SLUG,
        "cho": korean / "lessons" / SLUG,
    }.items():
        (subs / student / SLUG).mkdir(parents=True)
        shutil.copy(source / f"{SLUG}.ipynb", subs / student / SLUG / f"{SLUG}.ipynb")
    proc, rows = run_grade(
        subs,
        tmp_path / "grades.csv",
        "--solutions",
        str(built),
        "--keep",
        str(tmp_path / "run"),
        "--seed",
        "5",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    auto = {g: p for g, p in graded_cells(built / SLUG / f"{SLUG}.ipynb").items() if g.endswith("_check")}
    ada, bob, cho = (row_for(rows, s, SLUG) for s in ("ada", "bob", "cho"))
    assert list(ada) == list(bob) == list(cho)
    for row in (
        ada,
        bob,
    ):  # every point but a GPU check's, which is not graded on this machine (in either edition)
        here = {g: p for g, p in auto.items() if f"{g}: NotGradedHere" not in row["notes"]}
        assert {g: float(row[g]) for g in here} == here and len(here) >= len(auto) - 1, row["notes"]
    assert all(float(cho[g]) == 0 for g in auto) and float(cho["total"]) == 0
    # the grader's own notes speak the edition's language too: the edition, the answer to grade by hand
    assert (
        "한국어판(ko) 기준으로 채점했습니다(ko/solutions/)" in ada["notes"] and "한국어판(ko)" in cho["notes"]
    )
    assert "w1_square_sign: 수동 채점 필요" in ada["notes"] and "needs manual grading" not in ada["notes"]
    assert "edition" not in bob["notes"] and "w1_square_sign: needs manual grading" in bob["notes"]

    def check_outputs(course: str, student: str) -> str:
        path = tmp_path / "run" / course / "autograded" / student / SLUG / f"{SLUG}.ipynb"
        nb = nbformat.read(path, as_version=4)
        cells = [
            c for c in nb.cells if (c.metadata.get("nbgrader") or {}).get("grade_id", "").endswith("_check")
        ]
        return "\n".join(o.get("text", "") + o.get("evalue", "") for c in cells for o in c.get("outputs", []))

    assert "케이스" in check_outputs("course-ko", "ada") and "통과" in check_outputs("course-ko", "ada")
    assert "cases passed" in check_outputs("course", "bob")
    failed = check_outputs("course-ko", "cho")
    assert "아직 작성되지 않았습니다" in failed and "not written yet" not in failed, failed


@pytest.mark.parametrize("domain", ["autograders", "memlab", "grading"])
def test_the_korean_messages_of_the_code_follow_one_template(domain):
    """What a learner reads when a check fails, in one shape: "케이스 C: 무엇 — 기대하는 것. 실제: 값." The learner's
    value is always introduced as "실제: " (not "받은 것", "실제로는", ", 실제 X"); the tolerance sits with what was
    expected, never right after the learner's value, where "(정확히 일치)" read as if the value matched; and no
    particle is written in both forms after a placeholder ("{name}이(가)"): a fixed noun or a colon carries it."""
    from babel.messages.pofile import read_po

    with open(ROOT / "translations" / "ko" / f"{domain}.po", "rb") as fh:
        catalog = read_po(fh)
    wrong = []
    for message in catalog:
        if not message.id or not message.string:
            continue
        english, korean = message.id, message.string
        problems = [
            why
            for why, found in (
                ("a particle in both forms", re.search(r"\((?:가|를|는|과|이|을|은|와)\)", korean)),
                (
                    "another way to say what the learner got",
                    re.search(r"받은 (?:것|값|예외)|실제로는|, 실제 ", korean),
                ),
                (
                    "the tolerance after the learner's value",
                    re.search(r"\{got[^}]*\}\s*\(\{tolerance\}\)|정확히 일치", korean),
                ),
                ("'; got {…}' without '실제: '", re.search(r"; got \{", english) and "실제: " not in korean),
                ("an untranslated 'case'", korean.startswith("case ")),
            )
            if found
        ]
        if problems:
            wrong.append((english[:70], korean[:90], problems))
    assert wrong == []


# ---- what memlab prints and draws, in Korean --------------------------------------------------------------------


def _step_trace():
    import torch

    from memlab.measure import measure_training_step
    from memlab.models import mlp

    model = mlp([16, 32, 4])
    return measure_training_step(
        model, (torch.randn(8, 16), torch.randint(0, 4, (8,))), torch.optim.AdamW(model.parameters())
    )


def test_the_trackers_table_speaks_korean_and_lines_up():
    """The tracker's table: Korean headers, category names and `measure_training_step`'s mark names (the keys stay
    English), lined up by display columns; in English it is as before."""
    from korean_text import english_lines
    from tables import ragged_rows

    from memlab.measure import CATEGORIES, display_name

    trace = _step_trace()
    english = trace.table()
    assert english.splitlines()[0].split() == ["point", "live", "MiB", "peak", "since", "last"]
    assert [line.strip()[: len(c)] for line, c in zip(english.splitlines()[-4:], CATEGORIES)] == list(
        CATEGORIES
    )
    i18n.use("ko")
    korean = trace.table()
    assert not english_lines(korean), english_lines(korean)
    assert (
        "역전파 후" in korean and [m.name for m in trace.marks][1] == "after backward"
    )  # shown Korean, kept English
    assert not ragged_rows(trace.table()), trace.table()
    assert [display_name(c) for c in CATEGORIES] == [
        "매개변수",
        "변화도",
        "옵티마이저 상태",
        "활성화 값과 임시 텐서",
    ]
    assert set(trace.peak_by_category) == set(CATEGORIES)  # the data keeps its keys


def test_the_format_table_speaks_korean_and_lines_up():
    """Lesson 02's table of formats (memlab.formats.layout_table): Korean headers and NaN column, by display columns."""
    from korean_text import english_lines
    from tables import ragged_rows

    from memlab import formats

    assert formats.layout_table().split()[:3] == ["format", "torch", "dtype"]
    i18n.use("ko")
    table = formats.layout_table()
    assert not english_lines(table) and not ragged_rows(table), table
    assert table.split()[:4] == ["형식", "torch", "dtype", "비트"]


def test_memlabs_figures_speak_korean():
    """Every text memlab.plots writes itself (axis labels, title, the peak's legend, the components' legend) is Korean
    in the Korean edition: none of it is an English word to the Korean reader."""
    import matplotlib.pyplot as plt
    from korean_text import english_words

    from memlab.measure import CATEGORIES

    trace = _step_trace()
    i18n.use("ko")
    timeline = plots.memory_timeline(trace)
    stacked = plots.stacked_components(
        {"fp32": {c: 1.0 for c in CATEGORIES}, "bf16": {"weights": 1.0, "master weights": 2.0}}
    )
    texts = [timeline.get_xlabel(), timeline.get_ylabel(), timeline.get_title(), stacked.get_ylabel()]
    texts += [t.get_text() for ax in (timeline, stacked) for t in ax.get_legend().get_texts()]
    plt.close("all")
    found = {text: english_words(text) for text in texts if english_words(text)}
    assert not found, found
    assert "변화도" in texts and "마스터 가중치" in texts


def test_english_words_are_found_and_names_units_and_identifiers_are_not():
    from korean_text import english_words

    assert english_words("최대 지점에서 parameters 12.58 GiB") == ["parameters"]
    assert english_words("RTX 4090: fits / does not fit") == ["fits", "does", "not", "fit"]
    assert english_words("Train longer, or see the notes") == ["longer", "see", "the", "notes"]
    assert english_words("AdamW와 LoRA, GPU 0, sdpa, cpu, 12 MiB") == []
    assert english_words("model.config.pad_token_id, `logits_to_keep`, torch.bfloat16, bf16, fp32") == []
    assert english_words("aten::mm, _log_softmax_backward_data.default, mul.Tensor") == []
    # a library's message quoted after its class name is the library's; the words before it are not
    assert (
        english_words(
            "마이크로 배치마다 update(): AssertionError: No inf checks were recorded prior to update."
        )
        == []
    )
    assert (
        english_words("  UserWarning: torch.cuda.amp.GradScaler is enabled, but CUDA is not available.") == []
    )
    assert english_words("skipped the step: RuntimeError: boom") == ["skipped", "the", "step"]
    assert english_words("compute capability 8.0 이상, bf16 autocast") == []
    # code: a backquoted command, a numbered line of a library's source, a config string, **kwargs, an issue number
    assert english_words("torchao가 없습니다(`pip install torchao`): 건너뜁니다") == []
    assert english_words("   2119              loss = loss / self.current_gradient_accumulation_steps") == []
    assert english_words("bf16+ckpt+8bit        36.70, **kwargs 인자 여부, pytorch#178817 이후") == []
    assert english_words("2119 steps then loss") == ["steps", "then", "loss"]


def test_a_bracketed_library_message_is_the_librarys_over_every_line_it_takes():
    from korean_text import english_lines

    wrapped = (
        "  requires_grad 없는 입력:   출력이 grad를 요구하지 않음  [UserWarning: None\n"
        "                                 of the inputs have requires_grad=True. Gradients will be None]\n"
        "transformers 로그: [WARNING:transformers.modeling_utils:`use_cache=True` is incompatible\n"
        "    with gradient checkpointing. Setting `use_cache=False`.]\n"
        "  keyword argument scale=2.0: ok"
    )
    assert english_lines(wrapped) == [("  keyword argument scale=2.0: ok", ["keyword", "argument"])]
    broken_after_the_class = (
        "0번 계층: True; [FutureWarning:\n   `enable` is deprecated and will be removed in v6.]"
    )
    assert english_lines(broken_after_the_class) == []
    assert english_lines("[warning: the weights are frozen]") == [
        ("[warning: the weights are frozen]", ["warning", "the", "weights", "are", "frozen"])
    ]


#: spellings the glossary (translations/ko/GLOSSARY.md) rules out, and the one it keeps
NEVER_WRITTEN = {"최대값": "최댓값", "최소값": "최솟값", "그래디언트": "변화도"}


def test_the_korean_text_keeps_the_glossarys_spellings():
    """Every Korean message of the catalogues, and the Korean documents, spell a term as the glossary does."""
    from babel.messages.pofile import read_po

    texts = {}
    for po in sorted((ROOT / "translations" / "ko").glob("*.po")):
        with open(po, "rb") as f:
            texts[po.name] = "\n".join(str(m.string) for m in read_po(f) if m.string)
    for doc in [ROOT / "README.ko.md", *sorted((ROOT / "docs").glob("*.ko.md"))]:
        texts[doc.name] = doc.read_text(encoding="utf-8")
    assert len(texts) > 10 and any("최댓값" in text for text in texts.values())
    found = [
        (name, wrong, right)
        for name, text in texts.items()
        for wrong, right in NEVER_WRITTEN.items()
        if wrong in text
    ]
    assert not found, f"(file, written, the glossary's spelling): {found}"
