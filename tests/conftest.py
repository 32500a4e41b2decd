"""Shared pytest setup: the test suite never touches the network.

Hugging Face libraries read these variables once, at import, so they are set here, before any test
module imports ``datasets``/``transformers`` (https://huggingface.co/docs/huggingface_hub/package_reference/environment_variables).
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
