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
stays English. `use` also asks memlab.plots for a font that has the language's letters (Hangul for "ko").
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
_translation: gettext.NullTranslations = gettext.NullTranslations()


def use(language: str) -> None:
    """Speak `language` ("en" or "ko") from now on in this process: memlab's messages and the plots' font."""
    global _language, _translation
    if language not in LANGUAGES:
        raise ValueError(f"memlab.i18n.use: unknown language {language!r}; one of {', '.join(LANGUAGES)}")
    _language = language
    _translation = (
        gettext.NullTranslations()
        if language == ENGLISH
        else gettext.translation(DOMAIN, localedir=LOCALE_DIR, languages=[language], fallback=True)
    )
    from memlab import plots  # here, not at the top: plots imports matplotlib, i18n is imported by everything

    plots.use_language_font(language)


def language() -> str:
    """The language `use` set ("en" until it is called)."""
    return _language


def _(message: str) -> str:
    """`message` (English, as written in memlab's code) in the language `use` set; English where untranslated."""
    return _translation.gettext(message)
