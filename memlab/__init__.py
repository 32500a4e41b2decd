"""memlab — the small toolkit the course's lessons measure with.

Submodules: `hardware` (device, preflight, requirements), `measure` (track_memory), `estimate` (formulas and the
FakeTensorMode simulator), `data` (IMDB / LM text / tokenizer with offline fallbacks), `models` (tiny and 7B
configs), `plots`, `formats` (float bit layouts), `notebook` (how a lesson's errors are shown). Importing memlab
first sets Hugging Face's offline variables when the Hub is unreachable, so that no later load wastes time on
retries, and, inside a notebook, shows the lessons' own errors (a failed check, an exercise not done yet) as one
message instead of a traceback. It also keeps the log line of an optional speed-up that bitsandbytes cannot load
offline (`startup.quiet_optional_kernels`) out of the lessons' outputs. None of that imports torch
(memlab/startup.py): a submodule is imported when it is first named (`from memlab import data`, or
`memlab.hardware` after `import memlab`).
"""

import importlib
import importlib.util

from memlab.notebook import install_display
from memlab.startup import ensure_offline_if_no_network, quiet_optional_kernels

quiet_optional_kernels()  # before anything imports bitsandbytes
ensure_offline_if_no_network()
install_display()


def __getattr__(name: str):
    """`memlab.hardware` and the other submodules, imported when first named."""
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
