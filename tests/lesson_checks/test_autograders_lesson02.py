"""Lesson 02's checks pass the reference solution and fail realistic wrong answers with a helpful message.

The right answers are the solution notebook's own (solutions/02-numeric-formats/02-numeric-formats.ipynb, loaded by tests/solution_code.py;
the notebook itself is executed by the notebook tests). Each wrong answer is a mistake a learner is likely to
make; the test asserts the check names the case that exposes it and does not give the expected value away.
"""

import json
import math
import random

import numpy as np
import pytest
import torch
from check_helpers import assert_hidden, failure
from solution_code import solution

from autograders import kit, lesson02
from autograders.kit import CheckFailed
from autograders.lesson02 import check_decode, check_format_limits, check_round_to_bf16, check_ulp
from memlab.formats import FORMATS, LESSON_FORMATS

#: the solution's own answers (tests/solution_code.py): the right answers every wrong variant below starts from
(
    decode,
    format_limits,
    round_to_bf16,
    ulp,
    hex32,
) = solution("02-numeric-formats", "decode", "format_limits", "round_to_bf16", "ulp", "hex32")

#: (exponent bits, mantissa bits, NaN encoding) of each format, for the wrong answers below
LAYOUTS = {
    name: (FORMATS[name].exponent_bits, FORMATS[name].mantissa_bits, FORMATS[name].nan_encoding)
    for name in LESSON_FORMATS
}


ALL_CHECKS = [check_decode, check_format_limits, check_round_to_bf16, check_ulp]
IDS = ["e1", "e2", "e3", "e4"]


pytestmark = pytest.mark.usefixtures("learner_mode")


# ---- the reference solution passes every check ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("check_fn", "solution", "line"),
    [
        (check_decode, decode, "✓ e1_decode: 5 cases passed"),
        (check_format_limits, format_limits, "✓ e2_format_limits: 6 cases passed"),
        (check_round_to_bf16, round_to_bf16, "✓ e3_round_to_bf16: 13 cases passed"),
        (check_ulp, ulp, "✓ e4_ulp: 70 cases passed"),
    ],
    ids=IDS,
)
def test_reference_solution_passes(check_fn, solution, line, capsys):
    assert check_fn(solution) is None
    assert capsys.readouterr().out.splitlines() == [line]


# ---- every check: the stub, an undefined name ----------------------------------------------------------------------


def stub(*args, **kwargs):
    # YOUR CODE HERE
    raise NotImplementedError()


@pytest.mark.parametrize("check_fn", ALL_CHECKS, ids=IDS)
def test_the_learner_stub_fails_every_check_as_not_written_yet(check_fn):
    with pytest.raises(
        CheckFailed,
        match=f"^{check_fn.check_name}: `.*` is not written yet: it still raises NotImplementedError\\.$",
    ):
        check_fn(stub)


@pytest.mark.parametrize("check_fn", ALL_CHECKS, ids=IDS)
def test_an_undefined_answer_fails_every_check(check_fn):
    with pytest.raises(CheckFailed, match=f"^{check_fn.check_name}: `.*` is not defined yet"):
        check_fn(None)


# ---- the references: torch and numpy agree, and the checks would notice if they did not --------------------------


def test_torch_and_numpy_read_fp16_and_fp32_alike():
    """The public runs compare with torch's reading of the bits: numpy reads every one of them alike."""
    from autograders.references import lesson02 as ref

    for name in ("fp16", "fp32"):
        patterns = list(lesson02._decode_patterns(name))
        assert len(patterns) == (65_536 if name == "fp16" else len(set(patterns)))
        assert len(ref.decode(patterns, name)) == len(
            patterns
        )  # it raises where numpy reads a pattern otherwise
    assert len(lesson02._decode_patterns("fp32")) >= 50_000


def test_a_disagreement_between_torch_and_numpy_is_a_check_bug_not_a_learner_error(strict_mode, monkeypatch):
    """The drawn runs are decoded by the grading reference, which cross-checks torch with numpy."""
    from autograders.references import lesson02 as ref

    monkeypatch.setattr(ref, "numpy_decode", lambda patterns, f: -lesson02.torch_decode(patterns, f))
    with pytest.raises(RuntimeError, match="the check itself crashed.*torch and numpy disagree"):
        check_decode(decode)


def test_round_to_bf16_reference_is_torch_even_for_nan():
    """torch's CPU cast turns every fp32 NaN into the bf16 pattern 0xFFFF (a negative NaN): the check accepts any
    NaN whose low 16 bits are zero, so the sign-keeping reference passes."""
    nan = torch.tensor([0x7FC00000], dtype=torch.int32).view(torch.float32)
    assert math.isnan(nan.to(torch.bfloat16).float().item())
    assert round_to_bf16(nan).view(torch.int32).item() == 0x7FC00000


# ---- e1: decode ------------------------------------------------------------------------------------------------------


def _decode_variant(*, subnormals=True, bias_shift=0, e4m3_ieee=False, zero=None, result=float):
    def wrong(bits, fmt):
        e_bits, m_bits, nan_encoding = LAYOUTS[fmt]
        if e4m3_ieee:
            nan_encoding = "ieee"
        sign = -1.0 if bits >> (e_bits + m_bits) & 1 else 1.0
        exponent = bits >> m_bits & ((1 << e_bits) - 1)
        mantissa = bits & ((1 << m_bits) - 1)
        bias = 2 ** (e_bits - 1) - 1 + bias_shift
        if exponent == 2**e_bits - 1:
            if nan_encoding == "ieee":
                return sign * math.inf if mantissa == 0 else math.nan
            if mantissa == 2**m_bits - 1:
                return math.nan
        if exponent == 0 and mantissa == 0 and zero is not None:
            return zero
        if exponent == 0 and subnormals:
            return result(sign * math.ldexp(mantissa, 1 - bias - m_bits))
        return result(sign * math.ldexp(2**m_bits + mantissa, exponent - bias - m_bits))

    return wrong


def test_e1_variant_helper_agrees_with_the_reference():
    for fmt in LAYOUTS:
        for bits in (0, 1, 3, 0x7F, 0x80, 0xFF):
            a, b = _decode_variant()(bits, fmt), decode(bits, fmt)
            assert a == b or (math.isnan(a) and math.isnan(b))


def test_e1_forgetting_subnormals_fails_on_the_first_subnormal():
    """The implicit 1 applied to exponent field 0 (zeros handled apart, as most learners do)."""
    message = failure(check_decode, _decode_variant(subnormals=False, zero=0.0))
    assert message.startswith(
        "e1_decode: case fp16: 2,047 of 65,536 bit patterns decode wrongly. The first is 0x0001 = sign 0 | "
        "exponent 00000 | mantissa 0000000001 (a subnormal); your decode returned "
    )  # 2 x 1,023 subnormals, and -0.0 (returned as 0.0)
    assert "which is too high, by more than a factor of 10." in message  # (1 + 2^-10) 2^-15 / 2^-24
    assert_hidden(message, 2.0**-24)


def test_e1_a_bias_off_by_one_fails():
    message = failure(check_decode, _decode_variant(bias_shift=1))
    assert message.startswith("e1_decode: case fp16: ")
    assert "The first is 0x0001" in message and "too low, by a factor of 2 to 10" in message
    assert_hidden(message, 2.0**-24)


def test_e1_treating_e4m3_as_ieee_fails_on_its_top_binade():
    message = failure(check_decode, _decode_variant(e4m3_ieee=True))
    assert message == (
        "e1_decode: case fp8_e4m3: 14 of 256 bit patterns decode wrongly. The first is 0x78 = sign 0 | "
        "exponent 1111 | mantissa 000 (a normal number: in fp8_e4m3's fn variant the all-ones exponent is an "
        "ordinary binade); your decode returned inf, but this pattern is a finite number."
    )


def test_e1_returning_an_int_fails_on_the_type():
    with pytest.raises(
        CheckFailed,
        match=r"^e1_decode: case fp16, bits 0x0000: the decoded value should be a Python float; got an int \(0\)\.$",
    ):
        check_decode(_decode_variant(zero=0))


def decode_tensor(bits, fmt):
    return torch.tensor(decode(bits, fmt))


def decode_numpy_float32(bits, fmt):
    return np.float32(decode(bits, fmt))


def test_e1_returning_a_tensor_fails_on_the_type():
    with pytest.raises(
        CheckFailed,
        match=r"^e1_decode: case fp16, bits 0x3C00: the decoded value should be a Python float; got a Tensor",
    ):
        check_decode(decode_tensor)


def test_e1_returning_numpy_float32_fails_on_the_type():
    with pytest.raises(CheckFailed, match=r"should be a Python float; got a float32"):
        check_decode(decode_numpy_float32)


def test_e1_decoding_minus_zero_as_zero_fails():
    message = failure(check_decode, _decode_variant(zero=0.0))
    assert message == (
        "e1_decode: case fp16: 1 of 65,536 bit patterns decode wrongly. The first is 0x8000 = sign 1 | exponent "
        "00000 | mantissa 0000000000 (a zero exponent with a zero mantissa); your decode returned 0.0. Look again "
        "at what this pattern means in fp16, sign included."
    )
    assert "-0.0" not in message


def decode_no_inf(bits, fmt):
    value = decode(bits, fmt)
    return math.nan if math.isinf(value) else value


def test_e1_nan_for_infinity_fails_without_saying_infinity():
    message = failure(check_decode, decode_no_inf)
    assert message.startswith(
        "e1_decode: case fp16: 2 of 65,536 bit patterns decode wrongly. The first is 0x7C00"
    )
    assert "(an all-ones exponent with a zero mantissa); your decode returned nan." in message
    assert "inf" not in message


def decode_no_fp32_subnormals(bits, fmt):
    return 0.0 if fmt == "fp32" and bits >> 23 & 0xFF == 0 else decode(bits, fmt)


def test_e1_a_mistake_only_in_fp32_is_found_by_the_sample():
    message = failure(check_decode, decode_no_fp32_subnormals)
    assert message.startswith("e1_decode: case fp32: ")
    assert "The first is 0x80000000" in message  # -0.0 returned as 0.0, before the subnormals


def decode_crashes(bits, fmt):
    if fmt == "fp8_e5m2" and bits == 0x7D:
        raise ValueError("no NaN here")
    return decode(bits, fmt)


def test_e1_an_error_in_the_learner_code_names_the_pattern():
    with pytest.raises(
        CheckFailed,
        match=r"^e1_decode: case fp8_e5m2, bits 0x7D: your function raised ValueError: no NaN here",
    ):
        check_decode(decode_crashes)


# ---- e2: format_limits ---------------------------------------------------------------------------------------------


def limits_ignoring_fn(e, m, nan_encoding="ieee"):
    return format_limits(e, m)


def test_e2_ignoring_fn_fails_on_e4m3():
    message = failure(check_format_limits, limits_ignoring_fn)
    assert message == (
        "e2_format_limits: case format_limits(4, 3, 'fn') (fp8_e4m3): \"max\" is too low, by 10% to a factor of 2: "
        "you got 240 (exactly)."
    )
    assert_hidden(message, 448)


def limits_half_eps(e, m, nan_encoding="ieee"):
    return format_limits(e, m, nan_encoding) | {"eps": 2.0 ** -(m + 1)}


def test_e2_unit_roundoff_instead_of_eps_fails():
    message = failure(check_format_limits, limits_half_eps)
    assert message.startswith(
        'e2_format_limits: case format_limits(8, 23) (fp32): "eps" is too low, by a factor of 2 to 10: '
    )
    assert "too low, by a factor of 2 to 10" in message
    assert_hidden(message, 2.0**-23)


def limits_top_exponent(e, m, nan_encoding="ieee"):
    bias = 2 ** (e - 1) - 1
    return format_limits(e, m, nan_encoding) | {"max": (2 - 2.0**-m) * 2.0 ** (2**e - 1 - bias)}


def test_e2_max_with_the_all_ones_mantissa_of_ieee_fails():
    """IEEE max uses the all-ones exponent minus one: a learner who takes the top exponent gets inf's binade."""
    with pytest.raises(
        CheckFailed,
        match=r'case format_limits\(8, 23\) \(fp32\): "max" is too high, by a factor of 2 to 10: you got',
    ):
        check_format_limits(limits_top_exponent)


def limits_missing_keys(e, m, nan_encoding="ieee"):
    return {"max": 1.0, "eps": 1.0}


def test_e2_missing_keys_are_listed():
    assert failure(check_format_limits, limits_missing_keys) == (
        "e2_format_limits: case format_limits(8, 23) (fp32): the returned dict is missing the key(s) "
        "['min_normal', 'min_subnormal']; it has ['eps', 'max']."
    )


def limits_int_power(e, m, nan_encoding="ieee"):
    limits = format_limits(e, m, nan_encoding)
    return limits | {"max": float(2**1024) if e == 11 else limits["max"]}


def test_e2_an_overflowing_fp64_max_fails_with_the_error():
    with pytest.raises(
        CheckFailed, match=r"case format_limits\(11, 52\) \(fp64\): your function raised OverflowError"
    ):
        check_format_limits(limits_int_power)


# ---- e3: round_to_bf16 ---------------------------------------------------------------------------------------------


def round_truncating(x):
    return (x.view(torch.int32) & -0x10000).view(torch.float32)


def test_e3_truncating_fails_on_ordinary_values():
    message = failure(check_round_to_bf16, round_truncating)
    assert message.startswith("e3_round_to_bf16: case ordinary values: ")
    assert "The first: input 0x3DCCCCCD (a normal number, low 16 bits 0xCCCD: above halfway" in message
    assert "-> you returned 0x3DCC0000 (0.099609375)." in message
    assert "0x3DCD0000" not in message


def round_ties_away(x):
    return ((x.view(torch.int32) + 0x8000) & -0x10000).view(torch.float32)


def test_e3_rounding_ties_away_from_zero_fails_on_a_tie():
    message = failure(check_round_to_bf16, round_ties_away)
    assert message.startswith(
        "e3_round_to_bf16: case exact ties that round down to even: 4 of 4 elements are wrong."
    )
    assert (
        "input 0x3F808000 (a normal number, low 16 bits 0x8000: an exact tie, last kept bit even)" in message
    )
    assert "0x3F800000" not in message


def round_no_nan_care(x):
    bits = x.view(torch.int32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & -0x10000).view(torch.float32)


def test_e3_nan_turned_into_inf_fails():
    message = failure(check_round_to_bf16, round_no_nan_care)
    assert message == (
        "e3_round_to_bf16: case NaNs with a payload only in the low 16 bits: 4 of 4 elements are wrong. The first: "
        "input 0x7F800001 (a NaN with a payload only in the low 16 bits) -> you returned 0x7F800000 (inf)."
    )


def round_wraps(x):
    bits = x.view(torch.int32)
    bits = torch.where(torch.isnan(x), bits | 0x00400000, bits)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) & -0x10000).view(torch.float32)


def test_e3_nan_wrapped_by_the_rounding_bias_fails():
    """Setting the quiet bit first saves the low-payload NaNs; the bias still overflows int32 at 0x7FFFFFFF."""
    message = failure(check_round_to_bf16, round_wraps)
    assert message.startswith("e3_round_to_bf16: case NaNs with every bit set: 2 of 4 elements are wrong.")
    assert "input 0x7FFFFFFF (a NaN) -> you returned 0x80000000 (-0.0)." in message


def round_nan_kept(x):
    return torch.where(torch.isnan(x), x, round_to_bf16(x))


def test_e3_nan_kept_with_its_low_bits_fails():
    message = failure(check_round_to_bf16, round_nan_kept)
    assert message.startswith("e3_round_to_bf16: case NaNs with a payload only in the low 16 bits: 4 of 4 ")
    assert message.endswith("(nan). That is a NaN, but not a bf16 one: its low 16 bits must be zero too.")


def round_bfloat16(x):
    return round_to_bf16(x).to(torch.bfloat16)


def test_e3_returning_bfloat16_fails_on_the_dtype():
    with pytest.raises(
        CheckFailed,
        match=r"^e3_round_to_bf16: case ordinary values: the result should be a float32 tensor .*got torch\.bfloat16",
    ):
        check_round_to_bf16(round_bfloat16)


def round_in_place(x):
    bits = x.view(torch.int32)
    lsb = (bits >> 16) & 1
    bits.add_(0x7FFF).add_(lsb).bitwise_and_(-0x10000)
    return x


def test_e3_modifying_the_input_fails():
    assert failure(check_round_to_bf16, round_in_place) == (
        "e3_round_to_bf16: case ordinary values: your function changed its input (6 of 8 elements): leave x as it "
        "is and return a new tensor."
    )


def round_flattened(x):
    return round_to_bf16(x).flatten()


def test_e3_flattening_fails_on_the_shape():
    with pytest.raises(
        CheckFailed, match=r"case 1,000 x 1,000 random 32-bit patterns: the result should have shape"
    ):
        check_round_to_bf16(round_flattened)


def round_list(x):
    return round_to_bf16(x).tolist()


def test_e3_returning_a_list_fails_on_the_type():
    with pytest.raises(CheckFailed, match=r"case ordinary values: the result should be a Tensor; got a list"):
        check_round_to_bf16(round_list)


def test_e3_the_message_marks_a_carry():
    assert lesson02.fp32_rounding_class(0x3FFF8000).endswith("; the 7 kept mantissa bits are all ones")
    assert lesson02.fp32_rounding_class(0x80000000) == "a zero with the sign bit set"


# ---- e4: ulp ---------------------------------------------------------------------------------------------------------


def ulp_below(x, fmt):
    e_bits, m_bits, _ = LAYOUTS[fmt]
    emin = 2 - 2 ** (e_bits - 1)
    if x == 0:
        return 2.0 ** (emin - m_bits)
    return 2.0 ** (max(math.ceil(math.log2(abs(x))) - 1, emin) - m_bits)


def test_e4_the_ulp_below_at_powers_of_two_fails():
    message = failure(check_ulp, ulp_below)
    assert message == (
        "e4_ulp: case ulp(1.0, 'fp32'), one: the ulp is too low, by a factor of 2 to 10: you got 5.96046e-08 "
        "(exactly)."
    )
    assert_hidden(message, 2.0**-23)


def ulp_log2(x, fmt):
    f = FORMATS[fmt]
    emin = 1 - f.bias
    if x == 0:
        return 2.0 ** (emin - f.mantissa_bits)
    return 2.0 ** (max(math.floor(math.log2(abs(x))), emin) - f.mantissa_bits)


def test_e4_floor_of_math_log2_fails_just_below_a_power_of_two():
    """math.log2 rounds to a float64: for a float64 just below 2^3 it returns exactly 3.0 (the issue's trap)."""
    assert math.log2(math.nextafter(8.0, 0.0)) == 3.0
    message = failure(check_ulp, ulp_log2)
    assert message == (
        "e4_ulp: case ulp(7.999999999999999, 'fp32'), a float64 just below a power of two, not a fp32 number: "
        "the ulp is too high, by a factor of 2 to 10: you got 9.53674e-07 (exactly)."
    )
    assert_hidden(message, 2.0**-21)


def ulp_of_rounded(x, fmt):
    return ulp(torch.tensor(x, dtype=torch.float64).to(FORMATS[fmt].dtype).item(), fmt)


def test_e4_rounding_x_into_the_format_first_fails():
    """The gap is the one around x itself: x rounded to nearest may already sit in the binade above."""
    message = failure(check_ulp, ulp_of_rounded)
    assert message.startswith(
        "e4_ulp: case ulp(7.999999999999999, 'fp32'), a float64 just below a power of two"
    )
    assert "the ulp is too high" in message


def test_e4_drawn_cases_include_a_value_where_math_log2_rounds_up():
    from autograders.lesson02 import ULP_DRAWS_PER_FORMAT, _drawn_ulp_case
    from autograders.references.lesson02 import ulp as reference_ulp

    rng = random.Random(3)
    cases = [_drawn_ulp_case(rng, i) for i in range(1, ULP_DRAWS_PER_FORMAT * len(LESSON_FORMATS) + 1)]
    assert ULP_DRAWS_PER_FORMAT == 4
    assert [name for _, _, name, _ in cases] == [name for name in LESSON_FORMATS for _ in range(4)]
    assert all(is_drawn for _, _, _, is_drawn in cases)
    below_powers = [x for _, x, _, _ in cases[3::4]]
    for x in below_powers:
        assert math.floor(math.log2(abs(x))) == math.frexp(x)[1]  # log2's floor is one too high here
    for case, x, name, _ in cases:
        assert reference_ulp(x, name) == ulp(x, name), case


def ulp_no_subnormals(x, fmt):
    _, m_bits, _ = LAYOUTS[fmt]
    if x == 0:
        return ulp(x, fmt)
    return 2.0 ** (math.frexp(x)[1] - 1 - m_bits)


def test_e4_ignoring_subnormals_fails():
    message = failure(check_ulp, ulp_no_subnormals)
    assert message.startswith("e4_ulp: case ulp(1.1754942106924411e-38, 'fp32'), the largest subnormal: ")
    assert "the ulp is too low" in message
    assert_hidden(message, 2.0**-149)


def test_e4_ulp_of_the_largest_finite_value_is_the_gap_below():
    """The spacing above the largest value would be to inf (or E4M3's NaN): the check uses the gap below."""
    from autograders.references.lesson02 import ulp as reference_ulp

    assert reference_ulp(65504.0, "fp16") == 32.0 == ulp(65504.0, "fp16")
    assert reference_ulp(448.0, "fp8_e4m3") == 32.0 == ulp(448.0, "fp8_e4m3")
    assert reference_ulp(-0.0, "bf16") == 2.0**-133


# ---- graded: collect in the grading kernel, then judge without the learner's objects -------------------------------

#: (check, wrong answer) for every wrong answer above: graded, each fails with the learner's message
WRONG = [
    (check_decode, _decode_variant(subnormals=False, zero=0.0)),
    (check_decode, _decode_variant(bias_shift=1)),
    (check_decode, _decode_variant(e4m3_ieee=True)),
    (check_decode, _decode_variant(zero=0)),
    (check_decode, _decode_variant(zero=0.0)),
    (check_decode, decode_tensor),
    (check_decode, decode_numpy_float32),
    (check_decode, decode_no_inf),
    (check_decode, decode_no_fp32_subnormals),
    (check_decode, decode_crashes),
    (check_format_limits, limits_ignoring_fn),
    (check_format_limits, limits_half_eps),
    (check_format_limits, limits_top_exponent),
    (check_format_limits, limits_missing_keys),
    (check_format_limits, limits_int_power),
    (check_round_to_bf16, round_truncating),
    (check_round_to_bf16, round_ties_away),
    (check_round_to_bf16, round_no_nan_care),
    (check_round_to_bf16, round_wraps),
    (check_round_to_bf16, round_nan_kept),
    (check_round_to_bf16, round_bfloat16),
    (check_round_to_bf16, round_in_place),
    (check_round_to_bf16, round_flattened),
    (check_round_to_bf16, round_list),
    (check_ulp, ulp_below),
    (check_ulp, ulp_log2),
    (check_ulp, ulp_of_rounded),
    (check_ulp, ulp_no_subnormals),
] + [(check_fn, answer) for check_fn in ALL_CHECKS for answer in (stub, None)]


def _wrong_id(case) -> str:
    check_fn, answer = case
    return f"{check_fn.check_name[:2]}-{getattr(answer, '__name__', repr(answer))}"


@pytest.mark.parametrize(
    ("check_fn", "solution", "line"),
    [
        (check_decode, decode, "✓ e1_decode: 6 cases passed"),
        (check_format_limits, format_limits, "✓ e2_format_limits: 10 cases passed"),
        (check_round_to_bf16, round_to_bf16, "✓ e3_round_to_bf16: 15 cases passed"),
        (check_ulp, ulp, "✓ e4_ulp: 90 cases passed"),
    ],
    ids=IDS,
)
def test_graded_the_reference_solution_passes_the_public_and_drawn_cases(
    check_fn, solution, line, strict_mode, capsys
):
    assert check_fn(solution) is None
    assert capsys.readouterr().out.splitlines() == [line]


@pytest.mark.parametrize(("check_fn", "answer"), WRONG, ids=[_wrong_id(c) for c in WRONG])
def test_graded_a_wrong_answer_fails_with_the_learners_message(kit_context, check_fn, answer, monkeypatch):
    learner_message = failure(check_fn, answer)
    kit_context(kit.STRICT, 20261123)
    assert failure(check_fn, answer) == learner_message


#: the learner steps each check records for the reference solution, drawn cases included
RECORDS = {
    "e1_decode": 1 + 1 + 6,
    "e2_format_limits": 1 + 10,
    "e3_round_to_bf16": 1 + 2 * 15,
    "e4_ulp": 1 + 90,
}


def _no_reference(*args, **kwargs):
    raise AssertionError("an expected value was computed in the grading kernel")


@pytest.mark.parametrize(
    ("check_fn", "solution"),
    [
        (check_decode, decode),
        (check_format_limits, format_limits),
        (check_round_to_bf16, round_to_bf16),
        (check_ulp, ulp),
    ],
    ids=IDS,
)
def test_the_grading_kernel_computes_no_expected_value(check_fn, solution, strict_mode, monkeypatch):
    """Collect mode (the grading kernel) runs the learner's code on every case, drawn ones included, and never a
    grading reference, a stored answer or torch's reading of the bits that the judge compares against."""
    for module, name in [
        (kit, "references"),
        (lesson02, "_expected_decode"),
        (lesson02, "public_limits"),
        (lesson02, "_expected_limits"),
        (lesson02, "public_ulps"),
        (lesson02, "_expected_ulp"),
    ]:
        monkeypatch.setattr(module, name, _no_reference)
    computed = []
    reference = kit.reference  # the lesson's reference steps, each replaced by one that records it ran
    monkeypatch.setattr(kit, "reference", lambda compute: reference(lambda: computed.append(1)))
    transcript = kit.collect(check_fn.check, (solution,), {})
    assert computed == []
    assert len(transcript.records) == RECORDS[check_fn.check_name]
    assert all(r.failed is None and r.missing is None for r in transcript.records)
    assert (
        sum("drawn at grading time" in r.label for r in transcript.records)
        == {
            "e1_decode": 1,
            "e2_format_limits": 4,
            "e3_round_to_bf16": 4,
            "e4_ulp": 20,
        }[check_fn.check_name]
    )


def test_the_judge_never_runs_the_learners_code():
    """Judged from the record alone: the learner's function is absent, so a check that touched it would crash."""
    transcript = kit.collect(check_ulp.check, (ulp,), {})
    data = kit.Transcript.from_data(json.loads(json.dumps(transcript.to_data())))
    assert kit.judge(check_ulp.check, data) == kit.Verdict(True, cases=70)


def test_graded_a_forged_record_is_judged_on_what_it_says(monkeypatch):
    """The judge's own reference decides: a record that claims every fp16 pattern decodes to 1.0 fails."""
    transcript = kit.collect(check_decode.check, (decode,), {})
    fp16 = next(r for r in transcript.records if r.label == "fp16")
    fp16.value = kit.wire.encode(torch.ones(65_536, dtype=torch.float64))
    verdict = kit.judge(check_decode.check, kit.Transcript.from_data(transcript.to_data()))
    assert not verdict.passed
    assert verdict.message.startswith("e1_decode: case fp16: 65,535 of 65,536 bit patterns decode wrongly.")
