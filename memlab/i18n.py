"""The language memlab speaks in this kernel: English unless a lesson's setup cell says otherwise.

    memlab.i18n.use("ko")    the Korean edition's setup cell (the one statement scripts/build_lessons.py adds)
    memlab.i18n.language()   "ko"
    memlab.i18n._(message)   the message in that language (gettext), the English message where there is none

The messages memlab prints itself (the preflight line, `needs(...)`'s stop and the header of the recorded outputs,
the friendly NameError and NotImplementedError lines, memlab.data's offline fallbacks, memlab.plots' missing-font
line) go through `_`. Their translations are written in `translations/<language>/memlab.po` (a gettext catalogue,
filled by translators; `python scripts/translations.py extract memlab` adds new messages) and compiled by
scripts/build_lessons.py into `memlab/locale/<language>/LC_MESSAGES/memlab.mo`, next to this module: package data,
so an installed course (editable or not) finds it without the repository, and the kernel reads it with the
standard library's `gettext` (no Babel at run time). A fuzzy or empty translation is not compiled: the message
stays English. The check kit's messages (autograders/kit.py, autograders/lessonNN.py) are a catalogue of their own,
`translations/<language>/autograders.po`, compiled into `autograders/locale/` the same way and read through
`translator("autograders", ...)`: a check speaks the language of the kernel it runs in, and the judge speaks the
language of the lesson it grades (grading/judge.py). The grader's own notes and verdicts are a third catalogue,
`translations/<language>/grading.po` (grading/i18n.py): a Korean submission's row of the CSV is in Korean. `use`
also asks memlab.plots for a font that has the language's letters (Hangul for "ko").
"""

from __future__ import annotations

import gettext
from pathlib import Path

DOMAIN = "memlab"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
ENGLISH = "en"
#: the languages a lesson can be built in (translations/<language>/); English is the source
LANGUAGES = (ENGLISH, "ko")

_language = ENGLISH
_catalogues: dict[
    tuple[str, str, str], gettext.NullTranslations
] = {}  # (domain, folder, language) -> catalogue


def use(language: str) -> None:
    """Speak `language` ("en" or "ko") from now on in this process: memlab's messages and the plots' font."""
    set_language(language)
    from memlab import plots  # here, not at the top: plots imports matplotlib, i18n is imported by everything

    plots.use_language_font(language)


def set_language(language: str) -> None:
    """The messages only (every catalogue's `_`), not the plots' font: what a grader's process that draws nothing
    sets (grading/worker.py)."""
    global _language
    if language not in LANGUAGES:
        raise ValueError(f"memlab.i18n.use: unknown language {language!r}; one of {', '.join(LANGUAGES)}")
    _language = language


def language() -> str:
    """The language `use` set ("en" until it is called)."""
    return _language


def translator(domain: str, localedir: Path):
    """The `_` of a package whose messages are catalogue `domain` compiled under `localedir`
    (<localedir>/<language>/LC_MESSAGES/<domain>.mo): `_(message)` is `message` (English, as written in the code) in
    the language `use` set when it is called, English where untranslated. memlab's own `_` is one, the check kit's
    (autograders/kit.py) another."""

    def _(message: str, language: str | None = None) -> str:
        """`message` in `language`, or in the process's language (`use`) without it: a thread that speaks for one
        row of a class (grading/batch.py) names its language rather than set the process's."""
        language = language or _language
        if language == ENGLISH:
            return message
        key = (domain, str(localedir), language)
        if key not in _catalogues:
            _catalogues[key] = gettext.translation(
                domain, localedir=localedir, languages=[language], fallback=True
            )
        return _catalogues[key].gettext(message)

    return _


_ = translator(DOMAIN, LOCALE_DIR)


def N_(message: str) -> str:  # noqa: N802 - gettext's name for it
    """A message marked for the catalogue where it is written (a table of names: the tracker's categories), translated
    where it is shown (`_(name)`)."""
    return message
