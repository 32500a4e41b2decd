"""Plain data: what a check may take out of the process that ran the learner's code.

Under grading, a check cell runs the learner's code on the check's inputs and hands what it observed to a judge in
another process (autograders/kit.py). What crosses is *data*, never objects: a value the learner returned could be
anything (an object whose `__float__`, `__eq__` or tensor operations say whatever the check compares against), so
`encode` accepts only

- `None`, `bool`, `int`, `float`, `str`, `bytes`, and `list`, `tuple` and `dict` of them (exact types: a subclass
  is refused; numpy scalars are read as the Python number they hold),
- tensors (`torch.Tensor` or `torch.nn.Parameter` exactly, no subclass), as dtype, shape, device type and the bytes
  of their elements (a decoded tensor is a fresh one on that device type where this process has it, else on the
  CPU; it carries no autograd history: a check that needs to know whether a tensor required grad records that
  fact itself),

and refuses anything else with a message that says what was found and where. `decode` builds fresh values from
that data (fresh tensors on the CPU), so nothing of the learner's process survives the trip. The encoded form is
JSON-compatible (tagged lists; floats as `float.hex`, bytes as base64), within size and depth limits.

In a learner's notebook the same round trip runs on every value a check observes, so a value that grading would
refuse is refused the moment the learner runs the check, with the same message.
"""

from __future__ import annotations

import base64
import math
import sys

MAX_DEPTH = 32
MAX_ITEMS = 1_000_000  # values in one encoded value, nested ones included
MAX_BYTES = 256 * 2**20  # bytes of tensor data and of bytes values in one encoded value


class NotPlainData(ValueError):
    """A value that cannot leave the learner's process: the message says what it is and where."""


def _numpy_scalar(value):
    """The Python number a numpy scalar holds, or None when `value` is no numpy scalar."""
    module = type(value).__module__
    if module != "numpy":
        return None
    import numpy as np

    if isinstance(value, np.bool_):
        return ["bool", bool(value)]
    if isinstance(value, np.integer):
        return ["int", str(int(value))]
    if isinstance(value, np.floating):
        return ["float", float(value).hex()]
    return None


def _is_tensor(value) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and type(value) in (torch.Tensor, torch.nn.Parameter)


def _tensor_data(value):
    import torch

    t = value.detach()
    if t.is_sparse or t.layout != torch.strided:
        raise NotPlainData("a sparse tensor")
    if t.is_complex():
        raise NotPlainData("a complex tensor")
    flat = t.to("cpu").contiguous().reshape(-1)
    raw = flat.view(torch.uint8)
    return [
        "tensor",
        str(t.dtype).removeprefix("torch."),
        list(t.shape),
        str(value.device.type),
        base64.b64encode(raw.numpy().tobytes()).decode("ascii"),
    ]


def encode(value, *, what: str = "the value"):
    """`value` as plain, JSON-compatible data; NotPlainData (saying where, in `what`) for anything else."""
    budget = {"items": 0, "bytes": 0}
    return _encode(value, what, 0, budget)


def _encode(value, where: str, depth: int, budget: dict):
    if depth > MAX_DEPTH:
        raise NotPlainData(f"{where} is nested more than {MAX_DEPTH} levels deep")
    budget["items"] += 1
    if budget["items"] > MAX_ITEMS:
        raise NotPlainData(f"{where} holds more than {MAX_ITEMS:,} values")
    kind = type(value)
    if value is None:
        return ["none"]
    if kind is bool:
        return ["bool", value]
    if kind is int:
        return ["int", str(value)]
    if kind is float:
        return ["float", value.hex()]
    if kind is str:
        return ["str", value]
    if kind is bytes:
        budget["bytes"] += len(value)
        if budget["bytes"] > MAX_BYTES:
            raise NotPlainData(f"{where} holds more than {MAX_BYTES // 2**20} MiB")
        return ["bytes", base64.b64encode(value).decode("ascii")]
    if kind in (list, tuple):
        tag = "list" if kind is list else "tuple"
        return [tag, [_encode(v, f"{where}[{i}]", depth + 1, budget) for i, v in enumerate(value)]]
    if kind is dict:
        items = []
        for k, v in value.items():
            key = _encode(k, f"a key of {where}", depth + 1, budget)
            if key[0] in ("list", "dict", "tensor", "bytes"):
                raise NotPlainData(f"a key of {where} is a {type(k).__name__}")
            items.append([key, _encode(v, f"{where}[{k!r}]", depth + 1, budget)])
        return ["dict", items]
    if _is_tensor(value):
        try:
            data = _tensor_data(value)
        except NotPlainData as refused:
            raise NotPlainData(f"{where} is {refused}") from None
        except Exception as error:  # a meta tensor, a tensor of a device this process cannot read...
            raise NotPlainData(
                f"{where} is a tensor that cannot be read ({type(error).__name__}: {error})"
            ) from None
        budget["bytes"] += len(data[-1]) * 3 // 4
        if budget["bytes"] > MAX_BYTES:
            raise NotPlainData(f"{where} holds more than {MAX_BYTES // 2**20} MiB of tensor data")
        return data
    scalar = _numpy_scalar(value)
    if scalar is not None:
        return scalar
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    base = next((b for b in (bool, int, float, str, bytes, list, tuple, dict) if isinstance(value, b)), None)
    if base is None and "torch" in sys.modules and isinstance(value, sys.modules["torch"].Tensor):
        base = sys.modules["torch"].Tensor
    article = "an" if name[:1].lower() in "aeiou" else "a"
    if base is not None:
        raise NotPlainData(
            f"{where} is {article} {name}, a subclass of {base.__name__} (a check takes a plain {base.__name__})"
        )
    raise NotPlainData(f"{where} is {article} {name}")


def decode(data):
    """The value `data` (from `encode`, possibly forged) stands for: fresh objects only; ValueError if malformed."""
    budget = {"items": 0, "bytes": 0}
    return _decode(data, 0, budget)


def _decode(data, depth: int, budget: dict):
    if depth > MAX_DEPTH:
        raise ValueError("nested too deep")
    budget["items"] += 1
    if budget["items"] > MAX_ITEMS:
        raise ValueError("too many values")
    if type(data) is not list or not data or type(data[0]) is not str:
        raise ValueError(f"not an encoded value: {str(data)[:60]}")
    tag, args = data[0], data[1:]
    if tag == "none" and not args:
        return None
    if tag == "bool" and len(args) == 1 and type(args[0]) is bool:
        return args[0]
    if tag == "int" and len(args) == 1 and type(args[0]) is str and len(args[0]) < 5000:
        return int(args[0])
    if tag == "float" and len(args) == 1 and type(args[0]) is str:
        return _float(args[0])
    if tag == "str" and len(args) == 1 and type(args[0]) is str:
        return args[0]
    if tag == "bytes" and len(args) == 1 and type(args[0]) is str:
        raw = base64.b64decode(args[0], validate=True)
        budget["bytes"] += len(raw)
        if budget["bytes"] > MAX_BYTES:
            raise ValueError("too many bytes")
        return raw
    if tag in ("list", "tuple") and len(args) == 1 and type(args[0]) is list:
        values = [_decode(v, depth + 1, budget) for v in args[0]]
        return values if tag == "list" else tuple(values)
    if tag == "dict" and len(args) == 1 and type(args[0]) is list:
        out = {}
        for pair in args[0]:
            if type(pair) is not list or len(pair) != 2:
                raise ValueError("a malformed dict item")
            out[_decode(pair[0], depth + 1, budget)] = _decode(pair[1], depth + 1, budget)
        return out
    if tag == "tensor" and len(args) == 4:
        return _tensor(*args, budget=budget)
    raise ValueError(f"not an encoded value (tag {tag!r})")


def _float(text: str) -> float:
    if text in ("inf", "-inf", "nan"):
        return float(text)
    value = float.fromhex(text)
    if not (math.isfinite(value) or text in ("inf", "-inf", "nan")):
        raise ValueError("a malformed float")
    return value


def _tensor(dtype: str, shape, device: str, payload: str, *, budget: dict):
    import torch

    if type(dtype) is not str or not dtype.isidentifier():
        raise ValueError("a malformed tensor dtype")
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype):
        raise ValueError(f"an unknown tensor dtype {dtype!r}")
    if type(shape) is not list or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError("a malformed tensor shape")
    if type(device) is not str or type(payload) is not str:
        raise ValueError("a malformed tensor")
    raw = base64.b64decode(payload, validate=True)
    budget["bytes"] += len(raw)
    if budget["bytes"] > MAX_BYTES:
        raise ValueError("too many bytes of tensor data")
    numel = math.prod(shape)
    item = torch.empty((), dtype=torch_dtype).element_size()
    if len(raw) != numel * item:
        raise ValueError("a tensor whose bytes do not match its shape")
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
    tensor = flat.view(torch_dtype).reshape(shape).clone()
    if device == "cuda" and torch.cuda.is_available():
        tensor = tensor.to("cuda")
    return tensor


def roundtrip(value, *, what: str = "the value"):
    """`decode(encode(value))`: what a judge in another process would see of `value`."""
    return decode(encode(value, what=what))
