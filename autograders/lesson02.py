"""Checks for lesson 02 — numeric formats.

Every reference is torch's own reading of the bits (`Tensor.view` of an integer tensor as the float dtype), torch's
`finfo`, or torch's own cast (`.to(torch.bfloat16)`); for fp16 and fp32 numpy's reading is compared with torch's as
well (tests/lesson_checks/test_autograders_lesson02.py for the public cases, the grading reference for the drawn ones). None is a
copy of a solution. The limits and ulps of the public cases are stored values (autograders/data/lesson02.json, made
from autograders/references/lesson02.py, which is not in the learner release). Every expected value is computed in a
reference step (autograders/kit.py), so under grading only the judge ever has it; the learner's results are taken
as plain data (floats, dicts, tensors). Under grading every check also draws cases of its own
(`drawn_cases`): fp32 bit patterns, formats torch does not have, random tensors and values. The messages say which
bit pattern / case is wrong and what the learner returned, never the value the exercise asks for.
"""

from __future__ import annotations

import functools
import json
import math
import numbers
from pathlib import Path

import numpy as np
import torch

from autograders import kit
from autograders.kit import _
from memlab.formats import FORMATS, LESSON_FORMATS, FloatFormat, bit_fields, to_bits

# ---- torch's (and numpy's) reading of bit patterns ---------------------------------------------------------------

_NUMPY_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
_NUMPY_INT = {16: np.int16, 32: np.int32, 64: np.int64}


def _as_unsigned(patterns, f: FloatFormat) -> np.ndarray:
    return np.asarray(patterns, dtype=np.uint64).astype(_NUMPY_UINT[f.bits])


def torch_decode(patterns, f: FloatFormat) -> np.ndarray:
    """float64 values torch gives these bit patterns (non-negative ints) of format `f`."""
    raw = _as_unsigned(patterns, f)
    if f.int_dtype.is_signed:
        raw = raw.view(_NUMPY_INT[f.bits])
    return torch.from_numpy(raw).view(f.dtype).to(torch.float64).numpy()


def _same_values(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise: both NaN (any NaN), or the same float64 bits (so +0.0 and -0.0 differ)."""
    return np.where(np.isnan(a), np.isnan(b), a.view(np.uint64) == b.view(np.uint64))


# ---- Exercise 2.1: decode ------------------------------------------------------------------------------------------

DECODE_FORMATS = ("fp16", "bf16", "fp8_e5m2", "fp8_e4m3", "fp32")
FP32_RANDOM = 50_000

FP32_EDGES = [
    0x00000000,  # +0
    0x80000000,  # -0
    0x00000001,  # smallest subnormal
    0x80000001,
    0x00400000,  # a subnormal with only the top mantissa bit
    0x007FFFFF,  # largest subnormal
    0x00800000,  # smallest normal
    0x3F800000,  # 1.0
    0xBF800000,
    0x7F7FFFFF,  # max
    0xFF7FFFFF,
    0x7F800000,  # +inf
    0xFF800000,  # -inf
    0x7FC00000,  # quiet NaN
    0x7F800001,  # signalling NaN, lowest payload
    0x7FA00000,  # signalling NaN
    0xFFC00001,  # negative quiet NaN with a payload
    0x7FFFFFFF,
    0xFFFFFFFF,
]


def _fp32_patterns() -> list[int]:
    """The edge list, then every exponent with four mantissas and both signs, then seeded random 32-bit patterns."""
    every_exponent = [
        (s << 31) | (e << 23) | m for e in range(256) for s in (0, 1) for m in (0, 1, 0x400000, 0x7FFFFF)
    ]
    rng = np.random.default_rng(2)
    random = rng.integers(0, 1 << 32, size=FP32_RANDOM, dtype=np.uint64).tolist()
    return list(dict.fromkeys(FP32_EDGES + every_exponent + random))


@functools.cache
def _decode_patterns(name: str) -> tuple[int, ...]:
    """The bit patterns the check decodes in `name`: every one, or for fp32 the edges, exponents and a sample."""
    return tuple(_fp32_patterns() if name == "fp32" else range(1 << FORMATS[name].bits))


def pattern_class(bits: int, f: FloatFormat) -> str:
    """What a bit pattern's fields make it, in words, without its value."""
    _sign, exponent, mantissa = bit_fields(bits, f)
    ones_e, ones_m = "1" * f.exponent_bits, "1" * f.mantissa_bits
    zero_m = "0" * f.mantissa_bits
    if exponent == "0" * f.exponent_bits:
        return _("a zero exponent with a zero mantissa") if mantissa == zero_m else _("a subnormal")
    if exponent == ones_e:
        if f.nan_encoding == "fn":
            if mantissa == ones_m:
                return _("an all-ones exponent with an all-ones mantissa")
            return _(
                "a normal number: in {format}'s fn variant the all-ones exponent is an ordinary binade"
            ).format(format=f.name)
        if mantissa == zero_m:
            return _("an all-ones exponent with a zero mantissa")
        return _("an all-ones exponent with a nonzero mantissa")
    return _("a normal number")


def _decode_failure(
    f: FloatFormat, bits: int, got: float, expected: float, n_wrong: int, n: int, label: str = ""
) -> str:
    sign, exponent, mantissa = bit_fields(bits, f)
    head = _("case {case}: {n_wrong:,} of {n:,} bit patterns decode wrongly.").format(
        case=label or f.name, n_wrong=n_wrong, n=n
    )
    fields = dict(
        pattern=f"0x{bits:0{f.bits // 4}X}",
        sign=sign,
        exponent=exponent,
        mantissa=mantissa,
        kind=pattern_class(bits, f),
        got=repr(got),
    )
    if math.isfinite(expected) and expected != 0:
        if not math.isfinite(got):
            first = _(
                "The first is {pattern} = sign {sign} | exponent {exponent} | mantissa {mantissa} ({kind}); "
                "your decode returned {got}, but this pattern is a finite number."
            ).format(**fields)
        else:
            first = _(
                "The first is {pattern} = sign {sign} | exponent {exponent} | mantissa {mantissa} ({kind}); "
                "your decode returned {got}, which is {how_far}."
            ).format(**fields, how_far=kit.how_far(got, expected))
    else:
        first = _(
            "The first is {pattern} = sign {sign} | exponent {exponent} | mantissa {mantissa} ({kind}); "
            "your decode returned {got}. Look again at what this pattern means in {format}, sign included."
        ).format(**fields, format=f.name)
    return f"{head} {first}"


def _expect_float(got, case: str) -> None:
    if not isinstance(got, float):
        name = type(got).__name__
        text = repr(got) if len(repr(got)) <= 60 else repr(got)[:57] + "..."
        message = (
            _("case {case}: the decoded value should be a Python float; got an {type} ({value}).")
            if name[0] in "aeiou"
            else _("case {case}: the decoded value should be a Python float; got a {type} ({value}).")
        )
        raise kit.CheckFailed(message.format(case=case, type=name, value=text))


def _drawn_decode_case(rng, i: int) -> tuple[str, str, list[int]]:
    """20,000 fp32 bit patterns drawn at grading time."""
    patterns = [rng.getrandbits(32) for _ in range(20_000)]
    return kit.drawn(i, kit.Case("fp32, 20,000 random bit patterns")), "fp32", patterns


def _decode_all(decode, patterns, name: str) -> torch.Tensor:
    """Inside a learner step: the learner's decode of every pattern, each checked to be a Python float (numpy's
    and torch's scalars are not, and plain data would turn them into one), as a float64 tensor (NaN as NaN, the
    sign of zero kept)."""
    f = FORMATS[name]
    values = []
    for bits in patterns:
        case = kit.Case("{name}, bits 0x{bits:0{width}X}", name=name, bits=bits, width=f.bits // 4)
        got = kit.call(decode, bits, name, case=case)
        if type(got) is not float:
            _expect_float(got, case)
        values.append(got)
    return torch.tensor(values, dtype=torch.float64)


def _expected_decode(name: str, patterns: list[int], public: bool) -> list[float]:
    """torch's values of the patterns: for a drawn run, the grading reference's (torch's, cross-checked with numpy
    where numpy has the format); tests/lesson_checks/test_autograders_lesson02.py cross-checks the public patterns."""
    if public:
        return torch_decode(patterns, FORMATS[name]).tolist()
    return kit.references("lesson02").decode(patterns, name)


@kit.check("e1_decode", points=3)
def check_decode(decode) -> int:
    kit.expect_callable(decode, "decode")
    first_case = kit.Case("{name}, bits 0x{bits:0{width}X}", name="fp16", bits=0x3C00, width=4)
    kit.learner(
        first_case, lambda: _expect_float(kit.call(decode, 0x3C00, "fp16", case=first_case), first_case)
    )
    runs = [(name, name, list(_decode_patterns(name))) for name in DECODE_FORMATS]
    runs += kit.drawn_cases("e1_decode", 1, _drawn_decode_case)
    for label, name, patterns in runs:
        f = FORMATS[name]
        got = kit.learner(label, lambda: _decode_all(decode, patterns, name))  # noqa: B023 - called at once
        expected = kit.reference(lambda: _expected_decode(name, patterns, label == name))  # noqa: B023 - called at once
        if not kit.judging():
            continue
        # the same float64 value (so +0.0 and -0.0 differ), or both NaN (any NaN)
        wrong = ~_same_values(np.asarray(expected, dtype=np.float64), got.numpy())
        n_wrong = int(wrong.sum())
        if n_wrong:
            i = int(np.flatnonzero(wrong)[0])
            first = (patterns[i], float(got[i].item()), float(expected[i]))
            raise kit.CheckFailed(_decode_failure(f, *first, n_wrong, len(patterns), label))
    return len(runs)


# ---- Exercise 2.2: format_limits ----------------------------------------------------------------------------------

LIMIT_KEYS = ("max", "min_normal", "min_subnormal", "eps")
LIMIT_CASES = [
    ("fp32", (8, 23)),
    ("fp16", (5, 10)),
    ("bf16", (8, 7)),
    ("fp8_e4m3", (4, 3, "fn")),
    ("fp8_e5m2", (5, 2)),
    ("fp64", (11, 52)),
]


DATA = Path(__file__).resolve().parent / "data" / "lesson02.json"


@functools.cache
def public_limits() -> dict[str, dict[str, float]]:
    """{format: limits} of the public formats: torch's `finfo` and smallest subnormal, stored
    (scripts/make_check_data.py)."""
    stored = json.loads(DATA.read_text())["limits"]
    return kit.read_only(
        {name: {key: float.fromhex(h) for key, h in table.items()} for name, table in stored.items()}
    )


def _drawn_limits_case(rng, i: int) -> tuple[str, tuple, None]:
    """A format no dtype of torch has, drawn at grading time (its limits come from the grading reference)."""
    e, m = rng.randint(2, 9), rng.randint(1, 12)
    encoding = rng.choice(["ieee", "fn"]) if m >= 2 else "ieee"
    args = (e, m, encoding)
    return kit.drawn(i, kit.Case("format_limits{args}", args=args)), args, None


def _expected_limits(name: str | None, args: tuple) -> dict[str, float]:
    """torch's limits of a public format (`name`, stored), the grading reference's of a drawn one (name None)."""
    return public_limits()[name] if name is not None else kit.references("lesson02").limits(*args)


@kit.check("e2_format_limits", points=2)
def check_format_limits(format_limits) -> int:
    kit.expect_callable(format_limits, "format_limits")
    cases = [(f"format_limits{args} ({name})", args, name) for name, args in LIMIT_CASES]
    cases += kit.drawn_cases("e2_format_limits", 4, _drawn_limits_case)
    for case, args, name in cases:
        expected = kit.reference(lambda: _expected_limits(name, args))  # noqa: B023 - called at once
        got = kit.call(format_limits, *args, case=case)
        kit.expect_keys(got, LIMIT_KEYS, case=case, what=_("the returned dict"))
        for key in LIMIT_KEYS:
            want = kit.DEFERRED if expected is kit.DEFERRED else expected[key]
            kit.expect_close(got[key], want, case=case, what=f'"{key}"', reveal=False)
    return len(cases)


# ---- Exercise 2.3: round_to_bf16 ----------------------------------------------------------------------------------


def _fp32(*patterns: int) -> torch.Tensor:
    signed = [p - (1 << 32) if p >= 1 << 31 else p for p in patterns]
    return torch.tensor(signed, dtype=torch.int32).view(torch.float32)


def _round_cases() -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(2)
    random_bits = torch.randint(-(2**31), 2**31, (1000, 1000), dtype=torch.int32, generator=g)
    return [
        (
            kit.Case("ordinary values"),
            torch.tensor([1.0, -2.5, 0.1, 3.14159265, 65504.0, -1e-3, 1e30, -7e-30]),
        ),
        (
            kit.Case("exact ties that round down to even"),
            _fp32(0x3F808000, 0xBF808000, 0x40408000, 0x3F828000),
        ),
        (kit.Case("exact ties that round up to even"), _fp32(0x3F818000, 0xC0218000, 0x3F838000)),
        (kit.Case("just below and just above a tie"), _fp32(0x3F807FFF, 0x3F808001, 0x3F817FFF, 0xBF818001)),
        (kit.Case("a carry into the next exponent"), _fp32(0x3FFF8000, 0x3FFFC000, 0xBFFFFFFF, 0x407FFFFF)),
        (kit.Case("the largest fp32 values"), _fp32(0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F7FFF, 0x7F7F8000)),
        (
            kit.Case("fp32 subnormals"),
            _fp32(0x00000001, 0x00008000, 0x00018000, 0x007FFFFF, 0x80000001, 0x80400000),
        ),
        (kit.Case("signed zeros"), _fp32(0x00000000, 0x80000000)),
        (kit.Case("infinities"), _fp32(0x7F800000, 0xFF800000)),
        (
            kit.Case("NaNs with a payload only in the low 16 bits"),
            _fp32(0x7F800001, 0xFF800001, 0x7F807FFF, 0x7F808000),
        ),
        (kit.Case("NaNs with every bit set"), _fp32(0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00000, 0xFFC00001)),
        (kit.Case("1,000 x 1,000 random 32-bit patterns"), random_bits.view(torch.float32)),
        (kit.Case("a randn tensor"), torch.randn(64, 4096, generator=g)),
    ]


def _fp32_hex(bits: int) -> str:
    return f"0x{bits & 0xFFFFFFFF:08X}"


def fp32_rounding_class(bits: int) -> str:
    """An fp32 input, from bf16 rounding's point of view, in words (no rounded value)."""
    bits &= 0xFFFFFFFF
    exponent, mantissa = (bits >> 23) & 0xFF, bits & 0x7FFFFF
    if exponent == 0xFF:
        if not mantissa:
            return _("an infinity")
        if mantissa >> 16 == 0:
            return _("a NaN with a payload only in the low 16 bits")
        return _("a NaN")
    if exponent == 0 and mantissa == 0:
        return _("a zero with the sign bit set") if bits >> 31 else _("a zero")
    low = bits & 0xFFFF
    if low == 0:
        if exponent == 0:
            return _("an fp32 subnormal already exact in bf16 (low 16 bits zero)")
        return _("a normal number already exact in bf16 (low 16 bits zero)")
    kind = _("an fp32 subnormal") if exponent == 0 else _("a normal number")
    kept_last = _("odd") if bits >> 16 & 1 else _("even")
    if low == 0x8000:
        where = _("an exact tie")
    else:
        where = _("above halfway") if low > 0x8000 else _("below halfway")
    text = _("{kind}, low 16 bits 0x{low:04X}: {where}, last kept bit {parity}").format(
        kind=kind, low=low, where=where, parity=kept_last
    )
    if (bits >> 16) & 0x7F == 0x7F and low >= 0x8000:
        text += _("; the 7 kept mantissa bits are all ones")
    return text


def _drawn_round_cases(rng, i: int) -> list[tuple[str, torch.Tensor]]:
    """Two tensors drawn at grading time from one generator (so one draw, `i` = 1, gives both cases)."""
    g = torch.Generator().manual_seed(rng.getrandbits(62))
    bits = torch.randint(-(2**31), 2**31, (500, 300), dtype=torch.int32, generator=g)
    scales = torch.tensor([rng.uniform(-30, 30) for _ in range(300)], dtype=torch.float64).exp2()
    return [
        (kit.drawn(1, kit.Case("150,000 random 32-bit patterns")), bits.view(torch.float32)),
        (
            kit.drawn(2, kit.Case("a randn tensor with random column scales")),
            (torch.randn(500, 300, generator=g, dtype=torch.float64) * scales).float(),
        ),
    ]


@kit.check("e3_round_to_bf16", points=3)
def check_round_to_bf16(round_to_bf16) -> int:
    kit.expect_callable(round_to_bf16, "round_to_bf16")
    cases = _round_cases()
    cases += [case for pair in kit.drawn_cases("e3_round_to_bf16", 1, _drawn_round_cases) for case in pair]
    for name, x in cases:
        x_bits = x.view(torch.int32).clone()
        # the learner's copy, which its code may change; `x` stays the input of the reference
        learner_x = x.clone()
        got = kit.call(round_to_bf16, learner_x, case=name)
        changed = kit.learner(
            kit.Case("{case}: the input after the call", case=name),
            lambda: int((learner_x.view(torch.int32) != x_bits).sum()),  # noqa: B023 - called at once
        )
        kit.expect_type(got, torch.Tensor, case=name, what=_("the result"))
        if got.dtype != torch.float32:
            raise kit.CheckFailed(
                _(
                    "case {case}: the result should be a float32 tensor (bf16 values held in fp32); got {dtype}."
                ).format(case=name, dtype=got.dtype)
            )
        if got.shape != x.shape:
            raise kit.CheckFailed(
                _("case {case}: the result should have shape {expected}; got {got}.").format(
                    case=name, expected=tuple(x.shape), got=tuple(got.shape)
                )
            )
        if changed:
            raise kit.CheckFailed(
                _(
                    "case {case}: your function changed its input ({changed:,} of {total:,} elements): "
                    "leave x as it is and return a new tensor."
                ).format(case=name, changed=changed, total=x.numel())
            )
        expected = kit.reference(lambda: x.to(torch.bfloat16).float())  # noqa: B023 - called at once
        if not kit.judging():
            continue
        got = got.cpu()
        got_bits = got.view(torch.int32)
        ok = torch.where(
            torch.isnan(expected),
            torch.isnan(got) & (got_bits & 0xFFFF == 0),
            got_bits == expected.view(torch.int32),
        )
        n_wrong = int((~ok).sum())
        if n_wrong:
            i = int((~ok).flatten().nonzero()[0])
            in_bits, out_bits = int(x_bits.flatten()[i]), int(got_bits.flatten()[i])
            out_value = got.flatten()[i].item()
            note = ""
            if out_value != out_value and out_bits & 0xFFFF:
                note = " " + _("That is a NaN, but not a bf16 one: its low 16 bits must be zero too.")
            elif out_bits & 0xFFFF:
                note = " " + _("Its low 16 bits are not zero, so it is not a bf16 value.")
            message = _(
                "case {case}: {n_wrong:,} of {total:,} elements are wrong. The first: input {input_bits} "
                "({input_kind}) -> you returned {output_bits} ({output_value})."
            ).format(
                case=name,
                n_wrong=n_wrong,
                total=x.numel(),
                input_bits=_fp32_hex(in_bits),
                input_kind=fp32_rounding_class(in_bits),
                output_bits=_fp32_hex(out_bits),
                output_value=repr(out_value),
            )
            raise kit.CheckFailed(message + note)
    return len(cases)


# ---- Exercise 2.4: ulp --------------------------------------------------------------------------------------------


def _ulp_cases(name: str) -> list[tuple[str, float]]:
    f = FORMATS[name]

    def value(bits: int) -> float:
        return float(torch_decode([bits], f)[0])

    return [
        (kit.Case("one"), 1.0),
        (kit.Case("a power of two"), 4.0),
        (kit.Case("a power of two below 1"), 0.25),
        (kit.Case("just below a power of two"), value(to_bits(4.0, f) - 1)),
        (kit.Case("a negative number"), -3.0),
        (kit.Case("a negative number"), value(to_bits(-0.1, f))),
        (kit.Case("the largest subnormal"), value((1 << f.mantissa_bits) - 1)),
        (kit.Case("the smallest subnormal"), value(1)),
        (kit.Case("the smallest normal number"), value(1 << f.mantissa_bits)),
        (kit.Case("the largest finite number"), torch.finfo(f.dtype).max),
        (kit.Case("zero"), 0.0),
        (kit.Case("not a {name} number", name=name), 0.1),
        (
            kit.Case("a float64 just below a power of two, not a {name} number", name=name),
            math.nextafter(8.0, 0.0),
        ),
        (
            kit.Case("a float64 just below a power of two, not a {name} number", name=name),
            -math.nextafter(256.0, 0.0),
        ),
    ]


@functools.cache
def public_ulps() -> dict[str, dict[str, float]]:
    """{format: {x.hex(): ulp}} of the public cases, stored (scripts/make_check_data.py)."""
    stored = json.loads(DATA.read_text())["ulp"]
    return kit.read_only(
        {name: {x: float.fromhex(u) for x, u in table.items()} for name, table in stored.items()}
    )


#: per format, the drawn values: three random finite bit patterns, then one float64 just below a power of two
ULP_DRAWS_PER_FORMAT = 4


def _drawn_ulp_case(rng, i: int) -> tuple[str, float, str, bool]:
    """(case, x, format, drawn) for the i-th value drawn at grading time: per format (in LESSON_FORMATS' order)
    three random finite bit patterns, then a float64 just below a random power of two within the format's range
    (from 2^3 up, math.log2 rounds it up to the power)."""
    name = LESSON_FORMATS[(i - 1) // ULP_DRAWS_PER_FORMAT]
    f = FORMATS[name]
    if (i - 1) % ULP_DRAWS_PER_FORMAT < ULP_DRAWS_PER_FORMAT - 1:
        x = math.nan
        while not math.isfinite(x):
            x = float(torch_decode([rng.getrandbits(f.bits)], f)[0])
    else:
        top = math.frexp(torch.finfo(f.dtype).max)[1] - 1  # the largest power of two in range
        x = rng.choice([-1, 1]) * math.nextafter(2.0 ** rng.randint(3, top), 0.0)
    return kit.drawn(i, kit.Case("ulp({x}, {name})", x=repr(x), name=repr(name))), x, name, True


def _expected_ulp(x: float, name: str, is_drawn: bool) -> float:
    """The stored ulp of a public case, the grading reference's of a drawn one."""
    return kit.references("lesson02").ulp(x, name) if is_drawn else public_ulps()[name][float(x).hex()]


@kit.check("e4_ulp", points=2)
def check_ulp(ulp) -> int:
    kit.expect_callable(ulp, "ulp")
    cases = [
        (
            kit.Case("ulp({x}, {name}), {description}", x=repr(x), name=repr(name), description=description),
            x,
            name,
            False,
        )
        for name in LESSON_FORMATS
        for description, x in _ulp_cases(name)
    ]
    cases += kit.drawn_cases("e4_ulp", ULP_DRAWS_PER_FORMAT * len(LESSON_FORMATS), _drawn_ulp_case)
    for case, x, name, is_drawn in cases:
        expected = kit.reference(lambda: _expected_ulp(x, name, is_drawn))  # noqa: B023 - called at once
        got = kit.call(ulp, x, name, case=case)
        kit.expect_type(got, numbers.Real, case=case, what=_("the ulp"))
        kit.expect_close(got, expected, case=case, what=_("the ulp"), reveal=False)
    return len(cases)


__all__ = [
    "check_decode",
    "check_format_limits",
    "check_round_to_bf16",
    "check_ulp",
]
