"""GPU tests: marked `gpu`, skipped where there is no CUDA device. Each test adds its measured numbers to
results/<gpu-name>.json, which is committed when it has been measured on a real GPU."""

import json
import re
from pathlib import Path

import pytest
import torch

RESULTS_DIR = Path(__file__).resolve().parents[2] / "results"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.gpu)
            if not torch.cuda.is_available():
                item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU; none here"))


@pytest.fixture(scope="session")
def gpu_results():
    """A dict the tests fill; written to results/<gpu-name>.json at the end of the session."""
    results: dict = {}
    yield results
    if not results or not torch.cuda.is_available():
        return
    name = torch.cuda.get_device_name(0)
    path = RESULTS_DIR / (re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower() + ".json")
    previous = json.loads(path.read_text()) if path.exists() else {}
    previous.update(results)
    previous["_device"] = {
        "name": name,
        "capability": list(torch.cuda.get_device_capability(0)),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    RESULTS_DIR.mkdir(exist_ok=True)
    path.write_text(json.dumps(previous, indent=2, sort_keys=True) + "\n")
