"""memlab — the small toolkit the course's lessons measure with.

Submodules: `hardware` (device, preflight, requirements), `measure` (track_memory), `estimate` (formulas and the
FakeTensorMode simulator), `data` (IMDB / LM text / tokenizer with offline fallbacks), `models` (tiny and 7B
configs), `plots`. Importing memlab first sets Hugging Face's offline variables when the Hub is unreachable, so
that no later load wastes time on retries.
"""

from memlab.data import ensure_offline_if_no_network

ensure_offline_if_no_network()
