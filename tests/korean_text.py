"""English words in what a Korean learner reads: the Korean edition's printed lines and its figures' text.

A word counts when it is three or more Latin letters standing alone in running text: not part of a code identifier
(joined to `_`, `.`, `(`, `/`, `+`, `::`, a digit or a backquote, after `*` as in `**kwargs`, or followed by `=` or `#` as in
`pytorch#123`), not a name (an acronym in capitals: GPU, IMDB; mixed
case: AdamW, LoRA; or capitalised: Llama, Adafactor, Korthikanti, since Korean text has no capitals, a capitalised
English word in it is a name), and not one of `ALLOWED`: units, the libraries and the values of library options a
learner types as they are. Keep `ALLOWED` short: a word the learner is meant to read is translated.

A library's own message quoted as it is (`UserWarning: ...`, `RuntimeError: ...`: the glossary keeps warnings and
errors untranslated) is not counted from its class name to the end of the line, or to its closing bracket over several
lines when it is bracketed (`[UserWarning: ...]`, `[WARNING:transformers:...]`), nor are the English terms the glossary
keeps that are two words (`PHRASES`), nor code: a span in backquotes, or a line of source printed with its line number
(`   2119   loss = loss / ...`, as `inspect` shows a library's code).
"""

from __future__ import annotations

import re

#: a run of three or more letters not joined to an identifier's characters on either side
WORD = re.compile(r"(?<![\w.`'/\\(+*-])(?<!::)[A-Za-z]{3,}(?![\w.`'(/\\=+#-])(?!::)")
ALLOWED = frozenset(
    {
        # units
        "MiB", "GiB", "KiB", "TiB", "bytes",
        # the libraries and the API words a learner types as they are (torch.finfo's eps, an optimizer's foreach)
        "python", "torch", "transformers", "peft", "bitsandbytes", "torchtune", "dtype", "shape", "eps", "foreach", "fused",
        # terms translations/ko/GLOSSARY.md keeps in English
        "ulp", "amax", "binade", "autocast", "allreduce",
        # devices and library option values, written as the learner passes them
        "cpu", "cuda", "meta", "sdpa", "eager",
        # Python's own values
        "nan", "inf",
    }
)  # fmt: skip


#: two-word terms translations/ko/GLOSSARY.md keeps in English
PHRASES = re.compile(r"\bcompute capability\b")
#: an exception's or a warning's class name and what follows it: a library's message, quoted
QUOTED_MESSAGE = re.compile(r"\b[A-Z]\w*(?:Warning|Error|Exception): .*")
#: a library's message in brackets, which may run over several lines: `[UserWarning: ...]`, or a log record as
#: logging's default format writes it, `[WARNING:transformers.trainer:...]`
BRACKETED_MESSAGE = re.compile(
    r"\[(?:[A-Z]\w*(?:Warning|Error|Exception):\s|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:)[^\]]*\]"
)
#: code in a line: a backquoted span, or the whole of a numbered source line
CODE = re.compile(r"`[^`]*`|^\s*\d+\s{2,}\S.*$")


def _is_name(word: str) -> bool:
    """An acronym (GPU), a mixed-case name (AdamW, LoRA) or a capitalised one (Llama): a name in Korean text too."""
    return any(c.isupper() for c in word)


def english_words(line: str) -> list[str]:
    """The English words of `line` a Korean reader would have to read as English."""
    line = PHRASES.sub("", QUOTED_MESSAGE.sub("", CODE.sub("", line)))
    return [w for w in WORD.findall(line) if w not in ALLOWED and not _is_name(w)]


def english_lines(text: str) -> list[tuple[str, list[str]]]:
    """(line, its English words) for every line of `text` that has any."""
    text = BRACKETED_MESSAGE.sub(lambda m: "[" + "\n" * m.group().count("\n") + "]", text)  # lines stay lines
    return [(line, words) for line in text.splitlines() if (words := english_words(line))]
