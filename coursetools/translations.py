#!/usr/bin/env python
"""The translated editions' catalogues: gettext .po files, one per lesson, keyed to the cells of solutions/.

    python scripts/translations.py extract [--lang ko] [SLUG ...]   create/update translations/ko/SLUG.po
    python scripts/translations.py status [--lang ko] [SLUG ...]    what each catalogue still needs

`solutions/NN-slug/NN-slug.ipynb` stays the only source of a lesson. Its Korean text lives in
`translations/ko/NN-slug.po`, a gettext catalogue read and written with Babel (Poedit, Weblate, `pybabel` and
`msgfmt` open it). Every message carries the context `cell <memlab.notebook.cell_key(English source)>`:

- a markdown cell is one message: the whole English cell, translated as a whole (same headings, lists, math, code
  spans, fenced code);
- a code cell gives one message per comment and per prose string (Python's tokenizer: a string whose text has a
  space and a word of two or more letters: docstrings, printed text, f-strings, plot labels, SUMMARY keys). The
  msgid is the token exactly as written (with `#`, or with its prefix and quotes), the msgstr the token that
  replaces it. nbgrader's markers (`### BEGIN SOLUTION`, `# YOUR CODE HERE`, ...) and pragma comments (`noqa`,
  `type:`, `fmt:`) are not extracted, nor are strings without a space, except a table header's text given to
  `memlab.notebook.pad` (one word is a whole column's header; pad aligns it by display width, so a Korean header
  keeps its column). Only these tokens change, so the code is the English code; scripts/build_lessons.py still
  checks every replacement (one token of the same kind, the same string prefix and quotes, an f-string's `{...}`
  fields unchanged, in order).

A message to keep in English is translated by copying it (msgstr == msgid): a decision, not a gap. A catalogue is
complete when every message has a translation that is not fuzzy; scripts/build_lessons.py builds the edition of
every lesson whose catalogue is complete (ko/solutions/, ko/lessons/) and, with --check, fails when a lesson that
has an edition no longer has a complete catalogue.

`extract` updates a catalogue the way `pybabel update` does (Babel's Catalog.update): a new message is empty, a
message whose English changed keeps its old translation marked fuzzy with the old English as `#| msgid`, a message
that no longer exists becomes obsolete (`#~`, kept while translated). Two refinements: a comment or string whose
text is unchanged keeps its translation (not fuzzy) when only the code around it changed (its cell's key did),
and an obsolete translation of exactly the English needed again comes back. Output is deterministic: messages in
cell order, fixed POT-Creation-Date, no dates written by this tool.

Three catalogues translate code, not notebooks (`CODE_CATALOGUES`): `translations/ko/memlab.po`, memlab's own
printed messages (`memlab.i18n._` in memlab/*.py); `translations/ko/autograders.po`, the check kit's messages (`_` in
autograders/kit.py and autograders/lessonNN.py: every CheckFailed, the ✓ line, NOT CHECKED HERE); and
`translations/ko/grading.po`, the grader's notes in the CSV and its own verdicts (`_` and `N_` in grading/*.py).
`extract memlab`, `extract autograders` and `extract grading` update them with Babel's Python extractor, and
scripts/build_lessons.py compiles each to <package>/locale/ (package data the kernel and the grader's judge read
with the standard library's gettext).
"""

from __future__ import annotations

import argparse
import ast
import copy
import datetime
import io
import json
import re
import string
import sys
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from babel.messages.catalog import Catalog, Message
from babel.messages.mofile import write_mo
from babel.messages.pofile import normalize, read_po, unescape, write_po

from grading import course
from grading.learner_version import model_outputs
from memlab.notebook import MODEL_OUTPUTS, cell_key

ROOT = course.ROOT
LANGUAGES = ("ko",)  # the languages an edition can be built in; English is the source
LANGUAGE_NAMES = {"ko": "Korean"}
MEMLAB = "memlab"  # the catalogue of memlab's own messages (translations/<lang>/memlab.po)
AUTOGRADERS = "autograders"  # the check kit's messages (translations/<lang>/autograders.po)
GRADING = "grading"  # the grader's notes and verdicts (translations/<lang>/grading.po, grading/i18n.py)
#: the catalogues of code: each is the package of that name's `_("...")` messages, compiled into <package>/locale/
CODE_CATALOGUES = (MEMLAB, AUTOGRADERS, GRADING)
FIXED_DATE = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
CONTEXT = "cell "
NBGRADER_MARKERS = {
    "### BEGIN SOLUTION",
    "### END SOLUTION",
    "### BEGIN HIDDEN TESTS",
    "### END HIDDEN TESTS",
    "# YOUR CODE HERE",
}
PRAGMA = re.compile(r"^#\s*(noqa\b|type:|fmt:|pragma\b|pylint:|isort:|ruff:)|#\s*noqa\b")
WORD = re.compile(r"[^\W\d_]{2,}")
LAYOUT = {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
_FSTRING_START = getattr(tokenize, "FSTRING_START", None)  # Python 3.12+ splits an f-string into pieces
_FSTRING_END = getattr(tokenize, "FSTRING_END", None)

HEADER = """\
# {language} translation of the lesson {slug}
# (solutions/{slug}/{slug}.ipynb), written by
# `python scripts/translations.py extract {slug}`.
# Translate the messages, then run `python scripts/build_lessons.py`.
# The context `cell <key>` ties a message to its English cell.
# A markdown message is the whole cell: keep its headings, lists, math,
# code spans, links and fenced code.
# A code message is one comment (keep the #) or one string token: keep its
# prefix and quotes, and an f-string's {{...}} fields exactly, in order.
# Code identifiers, API names and units stay as they are.
# To keep a message in English, copy it unchanged: that is a translation.
# A fuzzy message's English changed (#| shows the old English): check
# the translation, edit it, then remove the fuzzy mark."""

CODE_HEADER = """\
# {language} translation of the messages of {domain}/*.py (its `_`),
# written by `python scripts/translations.py extract {domain}` and
# compiled into {domain}/locale/ by `python scripts/build_lessons.py`.
# Keep every {{name}} and {{name:spec}} field of a message."""


class TranslationError(Exception):
    """A translation that cannot be used: it names the catalogue, the cell and the token."""


# ---- the tokens of a code cell ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Token:
    type: int
    string: str
    start: int  # offset in the cell's source
    end: int
    line: int  # 1-based line in the cell


def code_tokens(source: str) -> list[Token]:
    """Python's tokens of `source`, with character offsets; an f-string is one STRING token on every Python version.
    Raises tokenize.TokenError or SyntaxError (IndentationError) for a source that does not tokenize.

    Offsets are found by looking each token up from the end of the one before, not from tokenize's columns (3.12.1
    reports some wrong after a non-ASCII character); a 3.12+ f-string, which tokenize splits into pieces whose text
    is unescaped, ends at the first closing quote after which its text parses as one f-string."""
    tokens: list[Token] = []
    at, depth = 0, 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if _FSTRING_START is not None and tok.type == _FSTRING_START:
            depth += 1
            if depth > 1:
                continue
            start = source.index(tok.string, at)
            end = _fstring_end(source, start, tok.string)
            tokens.append(Token(tokenize.STRING, source[start:end], start, end, tok.start[0]))
            at = end
            continue
        if depth:
            depth -= tok.type == _FSTRING_END
            continue
        start = source.find(tok.string, at) if tok.string else at
        if start < 0:
            raise tokenize.TokenError(f"cannot place the token {tok.string!r}", tok.start)
        tokens.append(Token(tok.type, tok.string, start, start + len(tok.string), tok.start[0]))
        at = start + len(tok.string)
    return tokens


def _fstring_end(source: str, start: int, opening: str) -> int:
    quote = opening.lstrip("rRbBfFuUtT")
    at = start + len(opening)
    while (found := source.find(quote, at)) >= 0:
        end = found + len(quote)
        try:
            if isinstance(ast.parse(source[start:end], mode="eval").body, ast.JoinedStr):
                return end
        except SyntaxError:
            pass
        at = found + 1
    raise tokenize.TokenError("unterminated f-string", (0, start))


def string_parts(text: str) -> tuple[str, str, ast.expr]:
    """(prefix, quote, parsed expression) of a string token."""
    prefix = re.match(r"[A-Za-z]*", text).group()
    rest = text[len(prefix) :]
    quote = rest[:3] if rest[:3] in ('"""', "'''") else rest[:1]
    return prefix, quote, ast.parse(text, mode="eval").body


def string_text(text: str) -> str | None:
    """The literal text of a string token (an f-string's text outside its {...} fields); None for bytes."""
    _, _, node = string_parts(text)
    if isinstance(node, ast.JoinedStr):
        return "".join(
            v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str)
        )
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def is_prose_string(text: str) -> bool:
    value = string_text(text)
    return value is not None and " " in value and bool(WORD.search(value))


def is_translatable_comment(text: str) -> bool:
    stripped = text.strip()
    return stripped not in NBGRADER_MARKERS and not PRAGMA.search(stripped) and bool(WORD.search(stripped))


def translatable(token: Token) -> bool:
    if token.type == tokenize.COMMENT:
        return is_translatable_comment(token.string)
    return token.type == tokenize.STRING and is_prose_string(token.string)


def _key_hint(tokens: list[Token], i: int) -> str | None:
    """A note for translators when a string is a subscript or a dict key (code may look it up elsewhere)."""
    before = next((t for t in reversed(tokens[:i]) if t.type not in LAYOUT), None)
    after = next((t for t in tokens[i + 1 :] if t.type not in LAYOUT), None)
    if before and after and before.string == "[" and after.string == "]":
        return "a subscript: translate it only together with every place that stores or reads this key"
    if after and after.string == ":" and before and before.string in ("{", ","):
        return "a dict key: translate it only together with every place that reads this key"
    return None


def _padded(tokens: list[Token], i: int) -> bool:
    """The string starts the first argument of `pad(...)` (memlab.notebook): a table header's text, translated even
    when it is one word ("peak", "rank"), since pad keeps its column in any language."""
    before = [t for t in reversed(tokens[:i]) if t.type not in LAYOUT][:2]
    value = string_text(tokens[i].string) if tokens[i].type == tokenize.STRING else None
    return (
        bool(value and WORD.search(value))
        and len(before) == 2
        and before[0].string == "("
        and before[1].string == "pad"
    )


def code_messages(source: str) -> list[tuple[Token, str | None]]:
    """(token, hint) of every comment and prose string of a code cell, and every table header's text given to
    `pad`, in order ([] if it does not tokenize)."""
    try:
        tokens = code_tokens(source)
    except (tokenize.TokenError, SyntaxError):
        return []
    return [(t, _key_hint(tokens, i)) for i, t in enumerate(tokens) if translatable(t) or _padded(tokens, i)]


def fields(text: str) -> list[str]:
    """The `{...}` fields of an f-string token (ast.dump of each, in order), or the format fields of a plain string
    ([] when it has none or is not a valid format string)."""
    _, _, node = string_parts(text)
    if isinstance(node, ast.JoinedStr):
        return [ast.dump(v) for v in node.values if isinstance(v, ast.FormattedValue)]
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and "{" in node.value:
        try:
            parsed = list(string.Formatter().parse(node.value))
        except ValueError:
            return []
        return sorted(f"{{{name}{'!' + conv if conv else ''}{':' + spec if spec else ''}}}"
                      for _, name, spec, conv in parsed if name is not None)  # fmt: skip
    return []


def replacement_error(original: Token, text: str) -> str | None:
    """Why `text` cannot replace the token `original` (None when it can)."""
    try:
        tokens = [t for t in code_tokens(text) if t.type not in LAYOUT]
    except (tokenize.TokenError, SyntaxError) as error:
        return f"does not tokenize ({error})"
    kind = tokenize.tok_name[original.type]
    if len(tokens) != 1 or tokens[0].type != original.type or tokens[0].string != text:
        found = ", ".join(tokenize.tok_name[t.type] for t in tokens) or "nothing"
        return f"must be exactly one {kind} token, is {found}"
    if original.type != tokenize.STRING:
        return None
    try:
        (prefix, quote, _), (prefix2, quote2, _) = string_parts(original.string), string_parts(text)
        if (prefix, quote) != (prefix2, quote2):
            return f"must keep the string's prefix and quotes {prefix}{quote}...{quote}"
        if fields(original.string) != fields(text):
            return "must keep the {...} fields of the English exactly, in the same order"
    except SyntaxError as error:
        return f"is not a valid string ({error})"
    return None


def translate_code(source: str, lookup, where: str) -> str:
    """`source` with each translatable token replaced by `lookup(token text)` (None: left as it is), each
    replacement checked; TranslationError names `where` and the token."""
    pieces, at = [], 0
    for token, _ in code_messages(source):
        text = lookup(token.string)
        if text is None or text == token.string:
            continue
        problem = replacement_error(token, text)
        if problem:
            raise TranslationError(
                f"{where}, line {token.line}: the translation of {token.string!r} {problem}"
            )
        pieces += [source[at : token.start], text]
        at = token.end
    return "".join([*pieces, source[at:]])


def code_differences(english: str, translated: str, inserted: str | None = None) -> list[str]:
    """How a translated code cell differs from its English one other than in comments and strings (and the one
    statement `inserted` after `import memlab`): [] when it does not."""
    theirs = [t for t in code_tokens(translated) if t.type != tokenize.COMMENT]
    if inserted is not None:
        added = [(t.type, t.string) for t in code_tokens(inserted) if t.type not in LAYOUT]
        pairs = [(t.type, t.string) for t in theirs]
        for i in range(len(pairs)):
            if pairs[i : i + len(added)] == added:
                del theirs[i : i + len(added) + 1]  # the statement and its NEWLINE
                break
        else:
            return [f"the statement {inserted!r} is not there"]
    ours = [t for t in code_tokens(english) if t.type != tokenize.COMMENT]
    problems = []
    if len(ours) != len(theirs):
        problems.append(f"{len(theirs)} tokens instead of {len(ours)}")
    for a, b in zip(ours, theirs):
        if a.type != b.type or (a.type != tokenize.STRING and a.string != b.string):
            problems.append(f"line {b.line}: {b.string!r} instead of {a.string!r}")
        elif a.type == tokenize.STRING and a.string != b.string:
            problem = replacement_error(a, b.string)
            if problem:
                problems.append(f"line {b.line}: {b.string!r} {problem}")
    return problems


# ---- markdown -----------------------------------------------------------------------------------------------------

_FENCE = re.compile(r"^(```|~~~)[^\n]*\n.*?^\1[ \t]*$", re.M | re.S)
_MATH = re.compile(r"\$\$.+?\$\$|\$[^$\n]+?\$", re.S)
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
_URL = re.compile(r"\]\(([^)\s]+)[^)]*\)|<(https?://[^>]+)>|(?<![(<])\b(https?://[^\s)>\]]+)")
_HEADING = re.compile(r"^(#{1,6})\s", re.M)
_HTML = re.compile(r"<[^>\n]+>")


def fenced_code(fence: str) -> str:
    """A fenced block as the code a translation keeps: a Python block without its comments, which are prose (a
    comment a lesson adds to a library's source it quotes), each line without the blanks that aligned them."""
    first, _, body = fence.partition("\n")
    if first.strip("`~ \t").lower() not in ("python", "py"):
        return fence
    lines, closing = body.rsplit("\n", 1) if "\n" in body else (body, "")
    try:
        tokens = [
            t
            for t in tokenize.generate_tokens(io.StringIO(lines + "\n").readline)
            if t.type != tokenize.COMMENT
        ]
        code = tokenize.untokenize(tokens)
    except (tokenize.TokenError, SyntaxError):
        return fence
    return "\n".join([first, *(line.rstrip() for line in code.splitlines()), closing])


def markdown_structure(text: str) -> dict[str, list[str]]:
    """What a translation of a markdown cell keeps: heading levels (in order), fenced code (its Python comments
    aside: `fenced_code`), math, code spans and link targets (as multisets)."""
    fences = [fenced_code(m.group(0)) for m in _FENCE.finditer(text)]
    rest = _FENCE.sub("", text)
    spans = [m.group(0) for m in _CODE_SPAN.finditer(rest)]
    rest = _CODE_SPAN.sub("", rest)
    return {
        "headings": [m.group(1) for m in _HEADING.finditer(rest)],
        "fenced code": sorted(fences),
        "math": sorted(m.group(0) for m in _MATH.finditer(rest)),
        "code spans": sorted(spans),
        "links": sorted(next(g for g in m.groups() if g) for m in _URL.finditer(rest)),
    }


#: a markdown translation that changes these is refused; the others are reported as warnings
STRICT_MARKDOWN = ("headings", "fenced code", "math")


def markdown_differences(english: str, translated: str) -> tuple[list[str], list[str]]:
    """(errors, warnings): what the translation of a markdown cell changed of its structure."""
    ours, theirs = markdown_structure(english), markdown_structure(translated)
    errors, warnings = [], []
    for part in ours:
        if ours[part] != theirs[part]:
            lost = [x for x in ours[part] if x not in theirs[part]]
            added = [x for x in theirs[part] if x not in ours[part]]
            what = (
                f"{part} differ"
                + (f" (missing {lost[:3]})" if lost else "")
                + (f" (new {added[:3]})" if added else "")
            )
            (errors if part in STRICT_MARKDOWN else warnings).append(what)
    return errors, warnings


def prose_letters(text: str) -> str:
    """The letters of a markdown cell's prose: without fenced code, code spans, math, HTML tags, links (their text
    too: the title of an English source is cited as it is) and emphasised spans with no Hangul in them (a cited
    work's title, an English term)."""
    for pattern in (_FENCE, _CODE_SPAN, _MATH, _HTML):
        text = pattern.sub(" ", text)
    text = re.sub(
        r"!?\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) if _HANGUL.search(m.group(1)) else " ", text
    )
    text = re.sub(r"https?://\S+", " ", text)
    text = re.sub(
        r"(\*{1,2}|_)([^*_\n]+)\1", lambda m: m.group(2) if _HANGUL.search(m.group(2)) else " ", text
    )
    return "".join(ch for ch in text if ch.isalpha())


_HANGUL = re.compile("[\uac00-\ud7a3]")


def hangul_share(text: str) -> float | None:
    """The share of Hangul among the letters of a markdown cell's prose (None when it has fewer than 10 letters)."""
    letters = prose_letters(text)
    if len(letters) < 10:
        return None
    hangul = sum(
        1
        for ch in letters
        if "\uac00" <= ch <= "\ud7a3" or "\u1100" <= ch <= "\u11ff" or "\u3130" <= ch <= "\u318f"
    )
    return hangul / len(letters)


# ---- catalogues ---------------------------------------------------------------------------------------------------


def catalogue_path(slug: str, language: str = "ko", translations: Path = ROOT / "translations") -> Path:
    return translations / language / f"{slug}.po"


def _notebook(solutions: Path, slug: str):
    import nbformat

    (path,) = sorted((solutions / slug).glob("*.ipynb"))
    return path, nbformat.read(path, as_version=4)


def _grade_id(cell) -> str | None:
    return (cell.get("metadata", {}).get("nbgrader") or {}).get("grade_id")


def new_catalog(language: str, domain: str, header: str) -> Catalog:
    return Catalog(
        locale=language,
        domain=domain,
        header_comment=header,
        project="memlab-course",
        version=domain,
        creation_date=FIXED_DATE,
        revision_date=FIXED_DATE,
        language_team=LANGUAGE_NAMES.get(language, language),
        fuzzy=False,
    )


def lesson_template(nb, slug: str, filename: str, language: str = "ko") -> Catalog:
    """The messages of a lesson notebook (see the module's docstring), in cell order."""
    template = new_catalog(
        language, slug, HEADER.format(language=LANGUAGE_NAMES.get(language, language), slug=slug)
    )
    for index, cell in enumerate(nb.cells):
        grade = f", grade_id {_grade_id(cell)}" if _grade_id(cell) else ""
        context = CONTEXT + cell_key(cell.source)
        if cell.cell_type == "markdown" and cell.source.strip():
            template.add(
                cell.source,
                locations=[(filename, index)],
                auto_comments=[f"cell {index} (markdown{grade})"],
                context=context,
            )
        elif cell.cell_type == "code":
            for token, hint in code_messages(cell.source):
                kind = "comment" if token.type == tokenize.COMMENT else "string"
                notes = [f"cell {index} (code{grade}), line {token.line}: a {kind}"]
                template.add(
                    token.string,
                    locations=[(filename, index)],
                    auto_comments=notes + ([hint] if hint else []),
                    context=context,
                )
    return template


def code_template(domain: str, language: str = "ko", root: Path = ROOT) -> Catalog:
    """The messages of a package's code: every `_("...")`, `N_("...")` and `Case("...")` in <root>/<domain>/*.py
    (Babel's Python extractor)."""
    from babel.messages.extract import extract_from_file

    package = root / domain
    header = CODE_HEADER.format(language=LANGUAGE_NAMES.get(language, language), domain=domain)
    template = new_catalog(language, domain, header)
    for path in sorted(package.glob("*.py")):
        for lineno, message, comments, context in extract_from_file(
            "python",
            str(path),
            keywords={"_": None, "N_": None, "Case": None},
            comment_tags=("Translators:",),
        ):
            flags = ["python-brace-format"] if re.search(r"\{\w*[^{}]*\}", message) else []
            template.add(
                message,
                locations=[(f"{domain}/{path.name}", lineno)],
                auto_comments=comments,
                context=context,
                flags=flags,
            )
    return template


def read_catalog(path: Path, language: str = "ko") -> Catalog | None:
    """The catalogue at `path` (its domain is the file's stem: a lesson's slug, or memlab), None if there is none."""
    if not path.is_file():
        return None
    with path.open("rb") as f:
        catalog = read_po(f, locale=language, domain=path.stem, abort_invalid=True)
    for message in catalog:
        # Babel's reader keeps a fuzzy message's `#| msgid` (the English it translated) as user comments "| ..."
        previous = [c[1:].strip() for c in message.user_comments if c.startswith("|")]
        if previous:
            message.user_comments = [c for c in message.user_comments if not c.startswith("|")]
            quoted = [c.removeprefix("msgid").strip() for c in previous if not c.startswith("msgid_plural")]
            message.previous_id = ["".join(unescape(q) for q in quoted if q.startswith('"'))]
    return catalog


def catalog_bytes(catalog: Catalog) -> bytes:
    for message in [*catalog, *catalog.obsolete.values()]:
        # Babel guesses python-format from any "% x" in a text ("50% of ...") and python-brace-format from any
        # "{...}" (math, f-strings); gettext tools (msgfmt -c, Poedit) would then check format directives that are
        # not there, or refuse an f-string's expressions. No message is a %-format; only the code catalogues' {name}
        # fields are brace formats (code_template flags them), a lesson's tokens are checked by the build instead.
        message.flags.discard("python-format")
        if catalog.domain not in CODE_CATALOGUES:
            message.flags.discard("python-brace-format")
    buffer = io.BytesIO()
    write_po(buffer, catalog, width=76, include_previous=False, sort_output=False)
    return _with_previous(buffer.getvalue().decode("utf-8"), catalog).encode("utf-8")


def _with_previous(text: str, catalog: Catalog) -> str:
    """The written catalogue with each fuzzy message's old English as `#| msgid` lines, as GNU gettext writes them
    (Babel's writer folds a multi-line one into a wrapped comment, and its reader does not read it back)."""
    blocks = text.rstrip("\n").split("\n\n")
    messages = [m for m in catalog if m.id] + list(catalog.obsolete.values())
    if len(blocks) != 1 + len(messages):
        raise RuntimeError(
            f"cannot place the previous msgids: {len(blocks)} blocks for {len(messages)} messages"
        )
    for i, message in enumerate(messages, start=1):
        if not (message.fuzzy and message.previous_id) or i > len([m for m in catalog if m.id]):
            continue
        lines = blocks[i].split("\n")
        at = next(n for n, line in enumerate(lines) if line.startswith(("msgctxt", "msgid")))
        quoted = normalize(message.previous_id[0], width=76).split("\n")
        lines[at:at] = [f"#| msgid {quoted[0]}", *(f"#| {q}" for q in quoted[1:])]
        blocks[i] = "\n".join(lines)
    return "\n\n".join(blocks) + "\n"


def _key(message: Message):
    return (message.id, message.context) if message.context is not None else message.id


def update_catalog(old: Catalog | None, template: Catalog) -> Catalog:
    """`old` updated to `template` (see the module's docstring); a new catalogue when `old` is None."""
    if old is None:
        catalog = copy.deepcopy(template)
        catalog.obsolete.clear()
        return catalog
    needed = {_key(m) for m in template if m.id}
    previous = {_key(m): m.previous_id for m in old if m.id and m.fuzzy and m.previous_id}
    # an obsolete translation of exactly the English needed again comes back
    for key in [k for k in old.obsolete if k in needed]:
        message = old.obsolete.pop(key)
        if old.get(message.id, message.context) is None:
            old[message.id] = message
    # a token whose text is unchanged in a changed cell keeps its translation: take it from the vanished cell
    gone: dict[str, Message] = {}
    for message in [*old, *old.obsolete.values()]:
        if message.id and message.string and not message.fuzzy and _key(message) not in needed:
            gone.setdefault(message.id, message)
    used = set()
    for message in template:
        if not message.id or old.get(message.id, message.context) is not None or message.id not in gone:
            continue
        if not message.context or not message.context.startswith(CONTEXT):
            continue
        source = gone[message.id]
        old.add(message.id, source.string, context=message.context, user_comments=source.user_comments)
        used.add(_key(source))
    for key in used:
        if isinstance(key, tuple):
            old.delete(*key)
        old.obsolete.pop(key, None)
    old.update(template, update_header_comment=True, update_creation_date=True)
    for message in old:
        if message.id and message.fuzzy and not message.previous_id and _key(message) in previous:
            message.previous_id = previous[_key(message)]
    for key in [k for k, m in old.obsolete.items() if not m.string]:
        del old.obsolete[key]  # an obsolete message nobody translated is of no use
    old.header_comment = template.header_comment
    old.fuzzy = False
    return old


@dataclass
class Status:
    """What a catalogue lacks for its notebook: each list holds (cell index, the message's first line)."""

    slug: str
    path: Path
    exists: bool = True
    missing: list = field(default_factory=list)  # not in the catalogue (run extract)
    obsolete_used: list = field(default_factory=list)  # only among the obsolete (#~) entries (run extract)
    fuzzy: list = field(default_factory=list)
    untranslated: list = field(default_factory=list)
    messages: int = 0
    obsolete: int = 0

    @property
    def complete(self) -> bool:
        return self.exists and not (self.missing or self.obsolete_used or self.fuzzy or self.untranslated)

    def summary(self) -> str:
        if not self.exists:
            return f"{self.path} does not exist (run: python scripts/translations.py extract {self.slug})"
        parts = [
            f"{len(v)} {k}"
            for k, v in (
                ("missing (run extract)", self.missing),
                ("obsolete but used (run extract)", self.obsolete_used),
                ("fuzzy", self.fuzzy),
                ("untranslated", self.untranslated),
            )
            if v
        ]
        done = (
            self.messages
            - len(self.fuzzy)
            - len(self.untranslated)
            - len(self.missing)
            - len(self.obsolete_used)
        )
        return f"{self.path}: {done} of {self.messages} messages translated" + (
            f"; {', '.join(parts)}" if parts else ""
        )

    def details(self, limit: int = 5) -> list[str]:
        lines = []
        for name, items in (
            ("missing", self.missing),
            ("obsolete but used", self.obsolete_used),
            ("fuzzy", self.fuzzy),
            ("untranslated", self.untranslated),
        ):
            for where, text in items[:limit]:
                lines.append(f"  {name}: cell {where}: {text}")
            if len(items) > limit:
                lines.append(f"  ... and {len(items) - limit} more {name}")
        return lines


def catalog_status(catalog: Catalog | None, template: Catalog, slug: str, path: Path) -> Status:
    status = Status(slug, path, exists=catalog is not None)
    status.messages = sum(1 for m in template if m.id)
    if catalog is None:
        return status
    status.obsolete = len(catalog.obsolete)
    for message in template:
        if not message.id:
            continue
        where = ",".join(str(line) for _, line in message.locations)
        text = message.id.strip().splitlines()[0][:80]
        found = catalog.get(message.id, message.context)
        if found is None:
            key = _key(message)
            (status.obsolete_used if key in catalog.obsolete else status.missing).append((where, text))
        elif found.fuzzy:
            status.fuzzy.append((where, text))
        elif not found.string:
            status.untranslated.append((where, text))
    return status


# ---- building a translated notebook -------------------------------------------------------------------------------

_IMPORT_MEMLAB = re.compile(r"^import memlab\b")


def use_statement(language: str) -> str:
    return f'memlab.i18n.use("{language}")'


def insert_use(source: str, language: str) -> str | None:
    """`source` with `memlab.i18n.use(language)` on the line after its top-level `import memlab` (None without one)."""
    tokens = code_tokens(source)
    for i, token in enumerate(tokens):
        line_start = source.rfind("\n", 0, token.start) + 1
        if token.type == tokenize.NAME and token.string == "import" and token.start == line_start:
            if _IMPORT_MEMLAB.match(source[token.start :]):
                end = next(t for t in tokens[i:] if t.type == tokenize.NEWLINE)
                at = end.end if end.string else len(source)
                head = source[:at] if source[:at].endswith("\n") else source[:at] + "\n"
                rest = source[at:]
                return head + use_statement(language) + ("\n" + rest if rest else "")
    return None


#: a Markdown link or image whose target is a relative path (not a URL, an anchor or an absolute path)
RELATIVE_LINK = re.compile(r"(!?\[[^\]]*\]\()(?![a-z][a-z0-9+.-]*:|#|/)([^)\s]+)")


def deeper_links(markdown: str) -> str:
    """`markdown` with its relative link targets one folder up: an edition's notebook is one folder deeper than the
    English one (ko/solutions/NN-slug/ against solutions/NN-slug/), so `../../memlab/x.py` becomes
    `../../../memlab/x.py` and still names the same file."""
    return RELATIVE_LINK.sub(lambda m: m.group(1) + "../" + m.group(2), markdown)


def translate_notebook(nb, catalog: Catalog, language: str, where: str):
    """The translated notebook (a copy): translated sources, the same cell ids and metadata, no outputs, notebook
    metadata `memlab.language`, `memlab.i18n.use(language)` after the setup cell's `import memlab`. Raises
    TranslationError for a translation that cannot be used. Returns (notebook, warnings)."""

    def translation(source: str, msgid: str) -> str | None:
        message = catalog.get(msgid, CONTEXT + cell_key(source))
        if message is None or message.fuzzy or not message.string:
            return None
        return message.string

    translated = copy.deepcopy(nb)
    warnings, inserted = [], False
    for index, cell in enumerate(translated.cells):
        here = f"{where}, cell {index}" + (f" ({_grade_id(cell)})" if _grade_id(cell) else "")
        if cell.cell_type == "markdown" and cell.source.strip():
            text = translation(cell.source, cell.source)
            if text is None:
                raise TranslationError(f"{here}: the markdown cell has no translation")
            errors, notes = markdown_differences(cell.source, text)
            if errors:
                raise TranslationError(f"{here}: the translation of the markdown cell: {'; '.join(errors)}")
            warnings += [f"{here}: {note}" for note in notes]
            cell.source = deeper_links(text)
        elif cell.cell_type == "code":
            english, added = cell.source, False
            cell.source = translate_code(english, lambda msgid, s=english: translation(s, msgid), here)
            if not inserted:
                with_use = insert_use(cell.source, language)
                if with_use is not None:
                    cell.source, inserted, added = with_use, True, True
            problems = code_differences(english, cell.source, use_statement(language) if added else None)
            if problems:
                raise TranslationError(
                    f"{here}: the translated code differs from the English: {'; '.join(problems)}"
                )
            cell.outputs = []
            cell.execution_count = None
    if not inserted:
        raise TranslationError(f"{where}: no code cell has a line `import memlab` to set the language after")
    translated.metadata["memlab"] = {"language": language}
    return translated, warnings


def outputs_path(slug: str, language: str = "ko", translations: Path = ROOT / "translations") -> Path:
    """Where the translated solution's own recorded `needs(...)` outputs are kept (written by
    `python scripts/execute_solutions.py --edition <language> SLUG`)."""
    return translations / language / "outputs" / f"{slug}.json"


def translated_outputs(
    english_nb, translated_nb, slug: str, language: str, own: dict | None = None
) -> tuple[bytes, int]:
    """The MODEL_OUTPUTS file of a translated lesson, and how many of its cells show the English run's outputs.

    A cell's outputs are the translated solution's own (`own`: {translated cell key: outputs}, from its executed run)
    where that run recorded this very cell; otherwise the English solution's outputs of the cell at the same place (a
    cell translated since the run, or no run kept yet)."""
    recorded = model_outputs(english_nb)
    own = own or {}
    cells, english = {}, 0
    for english_cell, translated in zip(english_nb.cells, translated_nb.cells, strict=True):
        outputs = recorded.get(cell_key(english_cell.source)) if english_cell.cell_type == "code" else None
        if not outputs:
            continue
        key = cell_key(translated.source)
        if key in own:
            cells[key] = own[key]
        else:
            cells[key], english = outputs, english + 1
    name = LANGUAGE_NAMES.get(language, language)
    record = {
        "about": "what each cell that calls needs(...) shows with the model solution, executed on a CPU; written by "
        f"scripts/build_lessons.py from the {name} solution's own run (python scripts/execute_solutions.py --edition "
        f"{language}), or, for a cell translated since that run, from the English solution's run",
        "language": language,
        "lesson": slug,
        "cells": cells,
    }
    return (json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8"), english


@dataclass
class Edition:
    """A language's edition of the lessons, computed in memory."""

    language: str
    statuses: dict = field(default_factory=dict)  # {slug: Status}
    solutions: dict = field(default_factory=dict)  # {"NN-slug/file": bytes} of <lang>/solutions/
    warnings: list = field(default_factory=list)
    errors: list = field(default_factory=list)  # TranslationError messages of complete catalogues


def build_edition(solutions: Path, translations: Path, language: str = "ko") -> Edition:
    """The translated solutions of every lesson whose catalogue is complete, and the status of every catalogue."""
    import nbformat
    from nbgrader.utils import find_all_files

    ignore = list(course.load_config(ROOT).CourseDirectory.ignore) + ["*.ipynb", MODEL_OUTPUTS]
    ignore += list(getattr(course, "HANDED_IN", ()))
    edition = Edition(language)
    for lesson in course.lesson_dirs(solutions):
        slug = lesson.name
        path, nb = _notebook(solutions, slug)
        po = catalogue_path(slug, language, translations)
        catalog = read_catalog(po, language)
        status = catalog_status(catalog, lesson_template(nb, slug, path.name, language), slug, po)
        edition.statuses[slug] = status
        if not status.complete:
            continue
        try:
            translated, warnings = translate_notebook(nb, catalog, language, str(po))
        except TranslationError as error:
            edition.errors.append(str(error))
            continue
        edition.warnings += warnings
        edition.solutions[f"{slug}/{path.name}"] = (nbformat.writes(translated) + "\n").encode("utf-8")
        kept = outputs_path(slug, language, translations)
        own = json.loads(kept.read_text(encoding="utf-8"))["cells"] if kept.is_file() else {}
        data, english = translated_outputs(nb, translated, slug, language, own)
        edition.solutions[f"{slug}/{MODEL_OUTPUTS}"] = data
        if english:
            edition.warnings.append(
                f"{slug}: {english} recorded output(s) are the English run's (no {language} run of those cells kept): "
                f"python scripts/execute_solutions.py --edition {language} {slug}"
            )
        for filename in sorted(find_all_files(str(lesson), ignore)):
            edition.solutions[f"{slug}/{Path(filename).relative_to(lesson).as_posix()}"] = Path(
                filename
            ).read_bytes()
    return edition


def compiled_messages(translations: Path, language: str = "ko", domain: str = MEMLAB) -> bytes | None:
    """A code catalogue compiled (.mo: translated, non-fuzzy messages only), or None without its .po."""
    catalog = read_catalog(catalogue_path(domain, language, translations), language)
    if catalog is None:
        return None
    buffer = io.BytesIO()
    write_mo(buffer, catalog, use_fuzzy=False)
    return buffer.getvalue()


def mo_messages(data: bytes) -> dict:
    """{(msgid, context): msgstr} of a compiled catalogue, less its header (whose Generated-By names the Babel that
    compiled it): what the kernel reads, so two .mo files that differ only in that header are the same."""
    from babel.messages.mofile import read_mo

    return {(m.id, m.context): m.string for m in read_mo(io.BytesIO(data)) if m.id}


def code_status(domain: str, translations: Path, language: str = "ko", root: Path = ROOT) -> Status:
    path = catalogue_path(domain, language, translations)
    return catalog_status(read_catalog(path, language), code_template(domain, language, root), domain, path)


# ---- the command line ---------------------------------------------------------------------------------------------


def _templates(slugs: list[str], solutions: Path, language: str, root: Path):
    lessons = [p.name for p in course.lesson_dirs(solutions)]
    unknown = [s for s in slugs if s not in lessons and s not in CODE_CATALOGUES]
    if unknown:
        raise SystemExit(
            f"no such lesson in {solutions}: {', '.join(unknown)} (lessons: {', '.join(lessons)})"
        )
    for slug in slugs or [*lessons, *CODE_CATALOGUES]:
        if slug in CODE_CATALOGUES:
            yield slug, code_template(slug, language, root)
        else:
            path, nb = _notebook(solutions, slug)
            yield slug, lesson_template(nb, slug, path.name, language)


def extract(slugs: list[str], language: str = "ko", solutions: Path = ROOT / "solutions",
            translations: Path = ROOT / "translations", root: Path = ROOT) -> list[Status]:  # fmt: skip
    """Create or update the catalogues of `slugs` (every lesson and code catalogue when empty); their status."""
    statuses = []
    for slug, template in _templates(slugs, solutions, language, root):
        path = catalogue_path(slug, language, translations)
        catalog = update_catalog(read_catalog(path, language), template)
        data = catalog_bytes(catalog)
        if not path.is_file() or path.read_bytes() != data:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            print(f"wrote {path}")
        status = catalog_status(catalog, template, slug, path)
        status.obsolete = len(catalog.obsolete)
        statuses.append(status)
    return statuses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["extract", "status"])
    parser.add_argument(
        "slugs",
        nargs="*",
        help=f"lessons (NN-slug) and/or {', '.join(CODE_CATALOGUES)}; default: all of them",
    )
    parser.add_argument("--lang", default="ko", choices=LANGUAGES)
    parser.add_argument("--solutions", type=Path, default=ROOT / "solutions", help="default: %(default)s")
    parser.add_argument(
        "--translations", type=Path, default=ROOT / "translations", help="default: %(default)s"
    )
    args = parser.parse_args(argv)
    root = args.solutions.resolve().parent
    if args.command == "extract":
        statuses = extract(args.slugs, args.lang, args.solutions, args.translations, root)
    else:
        statuses = [
            catalog_status(read_catalog(catalogue_path(slug, args.lang, args.translations), args.lang), template,
                           slug, catalogue_path(slug, args.lang, args.translations))
            for slug, template in _templates(args.slugs, args.solutions, args.lang, root)
        ]  # fmt: skip
    for status in statuses:
        print(("complete    " if status.complete else "incomplete  ") + status.summary())
        if args.command == "status":
            for line in status.details():
                print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
