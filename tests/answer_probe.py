"""Run by tests/build/test_released_answers.py in a process of its own, with only a learner release's packages on its path:

    python answer_probe.py RELEASE_DIR CASES.pt OUT.json

Imports every module of the released `autograders` and `memlab` packages, and calls every function defined in them
whose signature accepts an exercise case's arguments, on each case; writes which calls returned the case's answer
(or a part of it). CASES.pt (torch.save: FP8 tensors do not survive pickle) holds {exercise: {"cases": [(args,
kwargs, [answer parts])], "rtol": float}}. Each call has a time limit, and the process an address-space limit a little above what the imports
take, so that a function asked for a 7B-sized allocation fails instead of taking the machine.
"""

from __future__ import annotations

import copy
import inspect
import json
import math
import numbers
import resource
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path

#: a function's time, over all the cases it is called on: past it, the function is not called again, and is named
#: in the output ("over_budget") for the test to hold against the functions it knows to be slow on such inputs
FUNCTION_SECONDS = 20
MEMORY_HEADROOM = 6 * 1024**3


class _TimeUp(BaseException):  # not an Exception: the code under test must not catch it
    pass


def _time_up(signum, frame):
    raise _TimeUp()


def released_modules(release: Path) -> list[str]:
    names = []
    for package in ("autograders", "memlab"):
        for path in sorted((release / package).glob("*.py")):
            names.append(package if path.stem == "__init__" else f"{package}.{path.stem}")
    return names


def trivial(part) -> bool:
    """An answer any function might return by chance: None, a bool, zero, a non-finite number, an empty container."""
    import torch

    if part is None or isinstance(part, bool):
        return True
    if isinstance(part, numbers.Real):
        return part == 0 or not math.isfinite(part)
    if isinstance(part, torch.Tensor):
        return part.numel() == 0
    if isinstance(part, (str, list, tuple, Mapping)):
        return len(part) == 0
    return False


def as_number(value):
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        return float(value.detach().cpu().double())
    if isinstance(value, (np.ndarray, np.generic)) and value.size == 1 and value.dtype.kind in "iuf":
        return float(np.asarray(value).reshape(-1)[0])
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


def same(result, part, rtol: float) -> bool:
    """`result` is `part`: numbers within `rtol`, tensors element for element (NaN where NaN), containers alike."""
    import torch

    if isinstance(part, torch.Tensor):
        if not isinstance(result, torch.Tensor) or result.shape != part.shape or result.dtype != part.dtype:
            return False
        a, b = result.detach().cpu().double(), part.detach().cpu().double()
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    if isinstance(part, numbers.Real) and not isinstance(part, bool):
        number = as_number(result)
        return number is not None and math.isclose(number, float(part), rel_tol=rtol, abs_tol=0.0)
    if isinstance(part, str):
        return isinstance(result, str) and result == part
    if isinstance(part, Mapping):
        try:
            return all(key in result and same(result[key], value, rtol) for key, value in part.items())
        except Exception:
            return False
    if isinstance(part, (list, tuple)):
        return (
            isinstance(result, (list, tuple))
            and len(result) == len(part)
            and all(same(r, p, rtol) for r, p in zip(result, part))
        )
    return result == part


def reveals(result, part, rtol: float) -> bool:
    """`result` is the answer (part), or a tuple or list one of whose items is."""
    if same(result, part, rtol):
        return True
    if isinstance(result, (list, tuple)) and len(result) <= 8:
        return any(same(item, part, rtol) for item in result)
    return False


def main(release: Path, cases_path: Path, out: Path) -> None:
    import importlib

    import torch

    exercises = torch.load(cases_path, weights_only=False)
    modules = {}
    for name in released_modules(release):
        module = importlib.import_module(name)
        if not Path(module.__file__).resolve().is_relative_to(release.resolve()):
            raise SystemExit(f"{name} was imported from {module.__file__}, not from the release")
        modules[name] = module
    functions = []
    for name, module in modules.items():
        for attribute, value in sorted(vars(module).items()):
            if isinstance(value, type) or not callable(value) or getattr(value, "__module__", None) != name:
                continue  # a class makes an instance, not an answer; imported names are probed where defined
            try:
                signature = inspect.signature(value)
            except (TypeError, ValueError):
                continue
            functions.append((f"{name}.{attribute}", value, signature))

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    in_use = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (in_use + MEMORY_HEADROOM, hard))
    signal.signal(signal.SIGALRM, _time_up)
    torch.manual_seed(0)

    found, over_budget, calls, spent = [], [], 0, {}
    for exercise, spec in exercises.items():
        rtol = spec["rtol"]
        for index, (args, kwargs, parts) in enumerate(spec["cases"]):
            given = (*args, *kwargs.values())
            # an answer the case's own arguments hold (the ulp of the smallest subnormal is itself) is no find
            parts = [p for p in parts if not trivial(p) and not any(reveals(a, p, rtol) for a in given)]
            if not parts:
                continue
            for qualified, function, signature in functions:
                if qualified in over_budget:
                    continue
                try:
                    signature.bind(*args, **kwargs)
                except TypeError:
                    continue
                calls += 1
                start = time.monotonic()
                try:
                    try:
                        left = max(0.1, FUNCTION_SECONDS - spent.get(qualified, 0.0))
                        signal.setitimer(signal.ITIMER_REAL, left, 1.0)  # again each second, if swallowed
                        result = function(*copy.deepcopy(args), **copy.deepcopy(kwargs))
                    finally:  # the timer may go off here too, just as the call ends: the outer handlers see it
                        signal.setitimer(signal.ITIMER_REAL, 0)
                except _TimeUp:
                    over_budget.append(qualified)
                    continue
                except BaseException:  # noqa: BLE001 - whatever the call raised, it gave no answer
                    continue
                finally:
                    spent[qualified] = spent.get(qualified, 0.0) + time.monotonic() - start
                try:
                    hit = any(reveals(result, part, rtol) for part in parts)
                except BaseException:  # noqa: BLE001 - a result that cannot be compared is not the answer
                    hit = False
                if hit:
                    found.append({"function": qualified, "exercise": exercise, "case": index})
    out.write_text(
        json.dumps(
            {
                "modules": sorted(modules),
                "functions": [qualified for qualified, _f, _s in functions],
                "calls": calls,
                "found": found,
                "over_budget": over_budget,
                "seconds": dict(sorted(spent.items(), key=lambda item: -item[1])[:30]),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
    sys.stdout.flush()
    import os

    os._exit(0)  # a thread a probed function started does not keep the process
