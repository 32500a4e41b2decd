"""memlab.formats: the layouts agree with torch, bit patterns of known values, the coloured bit table."""

import re

import pytest
import torch

from memlab import formats
from memlab.formats import FORMATS, bit_fields, show_bits, to_bits


@pytest.mark.parametrize("name", list(FORMATS))
def test_layouts_agree_with_torch(name):
    f = FORMATS[name]
    assert f.bits == torch.finfo(f.dtype).bits == 8 * torch.tensor([], dtype=f.int_dtype).element_size()
    assert f.bias == 2 ** (f.exponent_bits - 1) - 1
    assert torch.finfo(f.dtype).eps == 2.0**-f.mantissa_bits
    assert torch.finfo(f.dtype).smallest_normal == 2.0 ** (1 - f.bias)


def test_to_bits_of_known_values():
    assert to_bits(1.0, "bf16") == 0x3F80
    assert to_bits(1.0, "fp32") == 0x3F800000
    assert to_bits(-2.5, "fp16") == 0xC100
    assert to_bits(65504, "fp16") == 0x7BFF
    assert to_bits(65520, "fp16") == 0x7C00  # rounds up to inf
    assert to_bits(-0.0, "fp16") == 0x8000
    assert to_bits(448, "fp8_e4m3") == 0x7E
    assert to_bits(float("inf"), "fp8_e5m2") == 0x7C
    assert to_bits(-1.0, "fp8_e5m2") == 0xBC
    assert to_bits(1.0, "fp64") == 0x3FF0000000000000
    assert to_bits(-1.0, "fp64") == 0xBFF0000000000000


def test_to_bits_of_a_tensor_is_non_negative_and_keeps_the_shape():
    x = torch.tensor([[1.0, -1.0], [-0.0, float("-inf")]])
    bits = to_bits(x, "fp16")
    assert bits.shape == (2, 2) and bits.dtype == torch.int64
    assert bits.tolist() == [[0x3C00, 0xBC00], [0x8000, 0xFC00]]
    assert to_bits(torch.tensor([-1.0]), "fp32").tolist() == [0xBF800000]


def test_bit_fields():
    assert bit_fields(to_bits(-2.5, "fp16"), "fp16") == ("1", "10000", "0100000000")
    assert bit_fields(0x3F800000, "fp32") == ("0", "01111111", "0" * 23)
    assert bit_fields(0x7F, "fp8_e4m3") == ("0", "1111", "111")
    with pytest.raises(ValueError, match="not a 8-bit pattern"):
        bit_fields(0x100, "fp8_e4m3")


def test_torch_reads_e4m3_nan_and_max():
    """What the lesson's bit tables (and lesson 02's check, `torch_decode`) take torch to read from these bits."""
    from autograders.lesson02 import torch_decode

    def value(bits, name):
        return float(torch_decode([bits], FORMATS[name])[0])

    assert value(0x7E, "fp8_e4m3") == 448.0
    for nan in (0x7F, 0xFF):
        assert value(nan, "fp8_e4m3") != value(nan, "fp8_e4m3")
    assert value(0x78, "fp8_e4m3") == 256.0  # exponent field 1111 is a normal binade
    assert value(0xFBFF, "fp16") == -65504.0


def test_a_bit_table_shows_the_value_the_bits_mean():
    """Each cell's value is the cast value, which is what torch reads back from the cell's bits."""
    from autograders.lesson02 import torch_decode

    values = [1.0, -2.5, 0.1, -0.0, 1e-40, 1e6, float("inf"), float("-inf")]
    table = show_bits(values, fmts=["fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"])
    for v, row in zip(values, table.cells):
        for f, (fields, shown) in zip(table.fmts, row):
            read = float(torch_decode([int("".join(fields), 2)], f)[0])
            assert shown == read or (shown != shown and read != read), (v, f.name)
            assert str(shown) == str(read) or shown != shown, (v, f.name)  # the sign of zero too


def test_show_bits_text():
    table = show_bits([1.0, -2.5], fmts=["fp32", "fp16"])
    text = repr(table)
    assert "fp32      0 | 01111111 | 00000000000000000000000" in text
    assert "fp16      1 | 10000 | 0100000000" in text
    assert "= -2.5" in text


def test_show_bits_html_colours_three_fields_per_value():
    values, fmts = [1.0, float("nan"), 65504.0], ["fp16", "bf16", "fp8_e4m3"]
    page = show_bits(values, fmts=fmts)._repr_html_()
    spans = re.findall(r"<span style='color:(#[0-9A-F]{6})'>([01]+)</span>", page)
    assert len(spans) == 3 * len(values) * len(fmts)
    assert {colour for colour, _ in spans} == set(formats.FIELD_COLOURS)
    assert "<th style='text-align:left'>fp8_e4m3</th>" in page
    assert "= nan" in page  # NaN in every format
    # 65504 cast to E4M3 saturates to its max (torch 2.13, 2.14) or becomes NaN (torch 2.11): see cast_overflow
    assert ("= 448" in page) == (formats.cast_overflow("fp8_e4m3") == "saturates")


def test_show_bits_labels_and_unknown_formats():
    assert repr(show_bits([2.0**-24], ["fp16"], labels=["2^-24"])).startswith("2^-24\n")
    with pytest.raises(ValueError, match="unknown format 'fp4'"):
        show_bits([1.0], ["fp4"])


def test_layout_table_lists_every_format():
    text = formats.layout_table()
    for name in FORMATS:
        assert name in text
    assert "fn: no inf, S.1111.111 = NaN" in text


def test_cast_overflow_says_what_this_torch_does():
    for name in ("fp64", "fp32", "fp16", "bf16", "fp8_e5m2"):
        assert formats.cast_overflow(name) == "inf", name
    e4m3 = formats.cast_overflow("fp8_e4m3")
    # the answer agrees with the bits of real casts: 1e6 and inf both give E4M3's max (0x7E) or its NaN (0x7F)
    assert {to_bits(torch.tensor([v]), "fp8_e4m3").item() for v in (1e6, float("inf"))} == {
        "saturates": {0x7E},
        "nan": {0x7F},
    }[e4m3]
    assert to_bits(torch.tensor([464.0]), "fp8_e4m3").item() == 0x7E  # rounds down to 448 in every version
    # measured on the CPU: torch 2.11.0 -> NaN; 2.13.0 and 2.14.1 -> saturate to ±448
    version = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    if version == (2, 11):
        assert e4m3 == "nan"
    elif version in ((2, 13), (2, 14)):
        assert e4m3 == "saturates"
