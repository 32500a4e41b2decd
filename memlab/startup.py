"""What importing memlab does first, before anything else of the course is imported: without torch, so that a
program that only reads the course's messages (scripts/grade.py refusing a wrong argument, the grader's notes) does
not pay for it. `memlab/__init__.py` calls both:

- `quiet_optional_kernels`: keeps the log line of an optional speed-up that bitsandbytes cannot load offline out
  of the lessons' outputs (before anything imports bitsandbytes);
- `ensure_offline_if_no_network`: sets Hugging Face's offline variables when the Hub is unreachable, so that no
  later load wastes time on retries (memlab.data's loaders then fall back at once).
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import sys

HUB_HOST = ("huggingface.co", 443)


#: {logger name: start of a message} of log lines about optional speed-ups the lessons never use, kept out of the
#: lessons' outputs by `quiet_optional_kernels`. bitsandbytes (0.49+) on a CPU with AVX512-BF16 tries, when it is
#: imported, to fetch a faster 4-bit CPU matmul from the Hugging Face Hub with the `kernels` package, and logs a
#: warning when it cannot ("... Please make sure you already `pip install kernels` ...",
#: bitsandbytes/backends/cpu/ops.py); it then uses its own implementation, so nothing is lost.
QUIET_LOG_MESSAGES = {
    "bitsandbytes.backends.cpu.ops": "Failed to load CPU gemm_4bit_forward from kernels-community",
}


class _DropMessage(logging.Filter):
    """Drops the records whose message (format string) starts with `prefix`; lets every other record through."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefix)


def quiet_optional_kernels() -> None:
    """Keep the QUIET_LOG_MESSAGES out of every output. Idempotent; call it before the package is imported (a logger
    keeps its filters, so it also works when the logger is created later, by the package's own `getLogger`)."""
    for logger_name, prefix in QUIET_LOG_MESSAGES.items():
        logger = logging.getLogger(logger_name)
        if not any(isinstance(f, _DropMessage) and f.prefix == prefix for f in logger.filters):
            logger.addFilter(_DropMessage(prefix))


@functools.lru_cache(maxsize=1)
def _hub_reachable(timeout: float = 1.5) -> bool:
    """True if a TCP connection to huggingface.co:443 opens within ``timeout`` seconds (cached per process)."""
    try:
        with socket.create_connection(HUB_HOST, timeout=timeout):
            return True
    except OSError:
        return False


def ensure_offline_if_no_network() -> bool:
    """Set ``HF_HUB_OFFLINE=1`` and ``HF_DATASETS_OFFLINE=1`` when the Hub is unreachable; return True if offline.

    Variables that are already set are left alone. If ``HF_HUB_OFFLINE`` is already "1" the network
    check is skipped. Without these variables, ``datasets``/``transformers`` retry HTTP requests before
    giving up; with them they fail in milliseconds, which is what lets the fallbacks be instant.
    If ``huggingface_hub``/``datasets`` were imported before this ran, their cached flags are updated too.
    """
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        offline = True
    else:
        offline = not _hub_reachable()
    if offline:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        if os.environ["HF_HUB_OFFLINE"] == "1":  # respect an explicit HF_HUB_OFFLINE=0
            _update_already_imported_flags()
    return offline


def _update_already_imported_flags() -> None:
    """The HF libraries cache the offline flag at import; patch it if they were imported before us."""
    if "huggingface_hub.constants" in sys.modules:
        sys.modules["huggingface_hub.constants"].HF_HUB_OFFLINE = True
    if "datasets.config" in sys.modules:
        config = sys.modules["datasets.config"]
        config.HF_HUB_OFFLINE = True
        config.HF_DATASETS_OFFLINE = True
