"""`import memlab` keeps bitsandbytes' "Failed to load CPU gemm_4bit_forward from kernels-community ... pip install
kernels" warning out of the lessons (memlab.startup.quiet_optional_kernels).

bitsandbytes logs it when it is imported on a CPU with AVX512-BF16 and cannot fetch an optional 4-bit kernel from the
Hugging Face Hub (bitsandbytes/backends/cpu/ops.py); with no logging configured, Python's last-resort handler writes
it to stderr, which a notebook shows under the cell.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from memlab.startup import QUIET_LOG_MESSAGES, quiet_optional_kernels

ROOT = Path(__file__).resolve().parents[2]
MARKERS = ("gemm_4bit_forward", "pip install kernels", "kernels-community")


def run_python(code: str) -> str:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT, env=env
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


def test_bitsandbytes_import_is_quiet_after_memlab():
    pytest.importorskip("bitsandbytes")
    out = run_python("import memlab\nimport bitsandbytes\nprint('imported')")
    assert "imported" in out
    assert not [m for m in MARKERS if m in out], out


#: what bitsandbytes does where it tries its optional CPU kernel (a CPU with AVX512-BF16): log the message through its
#: logger; run here on any CPU, so that the tests below can fail wherever they run
LOG_THE_WARNING = f"""
import logging
logging.basicConfig()
for name, prefix in {QUIET_LOG_MESSAGES!r}.items():
    logging.getLogger(name).warning(prefix + ": pip install kernels (kernels-community)")
print('logged')
"""


def test_the_warning_is_dropped_after_memlab_on_any_cpu():
    out = run_python("import memlab\n" + LOG_THE_WARNING)
    assert "logged" in out
    assert not [m for m in MARKERS if m in out], out


def test_without_memlab_the_logged_warning_is_printed():
    out = run_python(LOG_THE_WARNING)
    assert [m for m in MARKERS if m in out], out


def test_without_memlab_the_warning_is_printed_here():
    """The control: on a CPU with AVX512-BF16 the plain import prints the warning, so the test above means something
    on this machine (elsewhere bitsandbytes prints nothing and this test is skipped)."""
    pytest.importorskip("bitsandbytes")
    from bitsandbytes.functional import has_avx512bf16

    if not has_avx512bf16():
        pytest.skip("this CPU has no AVX512-BF16: bitsandbytes does not try the optional kernel")
    out = run_python("import bitsandbytes")
    assert "Failed to load CPU gemm_4bit_forward" in out, out


def test_only_that_message_is_dropped():
    quiet_optional_kernels()
    quiet_optional_kernels()  # idempotent: one filter per message
    for name, prefix in QUIET_LOG_MESSAGES.items():
        logger = logging.getLogger(name)
        assert len(logger.filters) == len({id(f) for f in logger.filters})
        dropped = logger.makeRecord(name, logging.WARNING, __file__, 1, prefix + ": %s.", ("why",), None)
        kept = logger.makeRecord(name, logging.WARNING, __file__, 1, "something else went wrong", (), None)
        assert not logger.filter(dropped)
        assert logger.filter(kept)


@pytest.mark.parametrize("notebook", sorted((ROOT / "solutions").glob("*/*.ipynb")), ids=lambda p: p.stem)
def test_executed_solutions_do_not_show_it(notebook):
    nb = nbformat.read(notebook, as_version=4)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            text = str(output.get("text", "")) + str(output.get("data", {}).get("text/plain", ""))
            assert not [m for m in MARKERS if m in text], f"{notebook.name}, cell {cell.get('id')}: {text}"
