"""The floating-point formats of the course, as layouts: which bits are the sign, the exponent and the mantissa.

This module describes formats and shows bit patterns; it does not decode, round or compute limits (those are
lesson 02's exercises). Every value it prints is the value *torch* gives a bit pattern (via `Tensor.view`).

- `FORMATS`: "fp32", "fp16", "bf16", "fp8_e4m3" (torch.float8_e4m3fn), "fp8_e5m2" (torch.float8_e5m2), "fp64".
- `to_bits(x, fmt)`: the bit pattern of `x` after torch's cast to the format, as a non-negative int (or an int64
  tensor of them). A Python float is cast from fp64; torch (2.11, 2.13 and 2.14 checked) on the CPU casts fp64 to the
  16- and 8-bit formats through fp32 (two roundings), so pass an fp32 tensor when that matters.
- `cast_overflow(fmt)`: what torch's cast does with a value beyond the format's range: "inf", "nan" or "saturates".
  For E4M3 it depends on the torch version (torch 2.11: NaN; since torch 2.12, pytorch#178817, the largest finite
  value, ±448; 2.13 and 2.14 checked).
- `bit_fields(bits, fmt)`: the sign, exponent and mantissa fields as strings of 0s and 1s.
- `show_bits(values, fmts)`: a table of coloured bit strings (HTML in Jupyter, plain text elsewhere).

Layouts: IEEE 754-2019 (binary64, binary32, binary16); bfloat16 (Kalamkar et al. 2019,
https://arxiv.org/abs/1905.12322); E4M3 and E5M2 from the OCP 8-bit Floating Point Specification (OFP8) 2023 and
Micikevicius et al. 2022 (https://arxiv.org/abs/2209.05433). E4M3 is the "fn" variant (finite, one NaN per sign):
no infinities, and only S.1111.111 is NaN; torch calls it float8_e4m3fn.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import torch

from memlab.i18n import _
from memlab.notebook import pad

#: colours of the three fields in `show_bits` (sign, exponent, mantissa)
FIELD_COLOURS = ("#C44E52", "#4C72B0", "#55A868")


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point layout: 1 sign bit, `exponent_bits`, `mantissa_bits` (the stored fraction).

    `nan_encoding`: "ieee" — the all-ones exponent holds inf (zero mantissa) and NaN (any other mantissa);
    "fn" — finite only: the all-ones exponent is an ordinary binade except S.1…1.1…1, the only NaN (E4M3FN).
    `int_dtype` is the integer dtype of the same width that `Tensor.view` reinterprets the bits as (uint8 for fp8).
    """

    name: str
    dtype: torch.dtype
    int_dtype: torch.dtype
    exponent_bits: int
    mantissa_bits: int
    bias: int
    nan_encoding: str = "ieee"

    @property
    def bits(self) -> int:
        return 1 + self.exponent_bits + self.mantissa_bits


FORMATS: dict[str, FloatFormat] = {
    f.name: f
    for f in [
        FloatFormat("fp32", torch.float32, torch.int32, 8, 23, 127),
        FloatFormat("fp16", torch.float16, torch.int16, 5, 10, 15),
        FloatFormat("bf16", torch.bfloat16, torch.int16, 8, 7, 127),
        FloatFormat("fp8_e4m3", torch.float8_e4m3fn, torch.uint8, 4, 3, 7, "fn"),
        FloatFormat("fp8_e5m2", torch.float8_e5m2, torch.uint8, 5, 2, 15),
        FloatFormat("fp64", torch.float64, torch.int64, 11, 52, 1023),
    ]
}

#: the five formats lesson 02 is about (fp64 is there for comparison)
LESSON_FORMATS = ("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2")


def get_format(fmt: str | FloatFormat) -> FloatFormat:
    if isinstance(fmt, FloatFormat):
        return fmt
    try:
        return FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}") from None


def to_bits(x, fmt: str | FloatFormat):
    """The bit pattern of `x` after torch's cast to `fmt`: a non-negative int for a number, an int64 tensor of
    non-negative ints (same shape) for a tensor. `to_bits(1.0, "bf16") == 0x3F80`."""
    f = get_format(fmt)
    tensor = x if isinstance(x, torch.Tensor) else torch.tensor(float(x), dtype=torch.float64)
    raw = tensor.to(f.dtype).view(f.int_dtype)
    if f.bits == 64:  # int64 has no wider type: fold the sign back in Python
        if isinstance(x, torch.Tensor):
            raise ValueError("to_bits on an fp64 tensor: use x.view(torch.int64) (signed) instead")
        return int(raw.item()) & 0xFFFF_FFFF_FFFF_FFFF
    bits = raw.to(torch.int64) & ((1 << f.bits) - 1)
    return bits if isinstance(x, torch.Tensor) else int(bits.item())


def cast_overflow(fmt: str | FloatFormat) -> str:
    """What torch's cast to `fmt` makes of a finite value far beyond the format's largest: "inf", "nan", or
    "saturates" (the largest finite value, with the sign kept). Measured with this torch, on the CPU.

    The IEEE formats and E5M2 overflow to inf. E4M3FN has no inf, and torch changed its cast: torch 2.11 gives NaN
    for anything that rounds above 448 (and for ±inf); since torch 2.12 (pytorch#178817) it saturates to ±448 (±inf
    too; 2.13 and 2.14 checked). Either way
    a value that rounds down to the largest (E4M3: up to 464) gives it. Text that says what the cast does should
    ask this function rather than assume one torch version.
    """
    f = get_format(fmt)
    beyond = torch.tensor([4 * torch.finfo(f.dtype).max], dtype=torch.float64)  # inf for fp64 itself
    value = beyond.to(f.dtype).to(torch.float64).item()
    if value != value:
        return "nan"
    if value == float("inf"):
        return "inf"
    if value == torch.finfo(f.dtype).max:
        return "saturates"
    raise RuntimeError(
        f"torch cast {beyond.item():g} to {f.dtype} as {value!r}: not inf, NaN or the largest value"
    )


def _cast_value(x, f: FloatFormat) -> float:
    """`x` after torch's cast to `f`, as a Python float: the value its bits (`to_bits`) mean."""
    tensor = x if isinstance(x, torch.Tensor) else torch.tensor(float(x), dtype=torch.float64)
    return tensor.to(f.dtype).to(torch.float64).item()


def bit_fields(bits: int, fmt: str | FloatFormat) -> tuple[str, str, str]:
    """(sign, exponent, mantissa) of a bit pattern as strings of 0s and 1s: fp16 -2.5 is ('1', '10000', '0100000000')."""
    f = get_format(fmt)
    text = format(bits, f"0{f.bits}b")
    if len(text) != f.bits:
        raise ValueError(f"{bits:#x} is not a {f.bits}-bit pattern")
    return text[0], text[1 : 1 + f.exponent_bits], text[1 + f.exponent_bits :]


def _value_text(value: float) -> str:
    return f"{value:.9g}"


class BitTable:
    """Rows of values, columns of formats: each cell the bits of the value after torch's cast to the format (sign,
    exponent, mantissa in three colours) and the value torch reads back. Jupyter shows the HTML; print() the text."""

    def __init__(self, values, fmts=LESSON_FORMATS, labels=None):
        self.fmts = [get_format(f) for f in fmts]
        self.values = [float(v) for v in values]
        self.labels = list(labels) if labels is not None else [_value_text(v) for v in self.values]
        if len(self.labels) != len(self.values):
            raise ValueError("one label per value")
        self.cells = [
            [(bit_fields(to_bits(v, f), f), _cast_value(v, f)) for f in self.fmts] for v in self.values
        ]

    def __repr__(self) -> str:
        lines, width = [], max(f.bits for f in self.fmts) + 6
        for label, row in zip(self.labels, self.cells):
            lines.append(f"{label}")
            for f, (fields, value) in zip(self.fmts, row):
                lines.append(f"  {f.name:<9} {' | '.join(fields):<{width}} = {_value_text(value)}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = "".join(f"<th style='text-align:left'>{html.escape(f.name)}</th>" for f in self.fmts)
        rows = []
        for label, row in zip(self.labels, self.cells):
            cells = []
            for fields, value in row:
                spans = "".join(
                    f"<span style='color:{colour}'>{text}</span>"
                    for colour, text in zip(FIELD_COLOURS, fields)
                    if text
                )
                cells.append(
                    "<td style='text-align:left;font-family:monospace;white-space:nowrap'>"
                    f"{spans}<br><small>= {html.escape(_value_text(value))}</small></td>"
                )
            rows.append(f"<tr><th style='text-align:left'>{html.escape(label)}</th>{''.join(cells)}</tr>")
        legend = " ".join(
            f"<span style='color:{c}'>{name}</span>"
            for c, name in zip(FIELD_COLOURS, ("sign", "exponent", "mantissa"))
        )
        return (
            f"<div><small>{legend}; below the bits: the value torch reads back</small>"
            f"<table><tr><th>value</th>{head}</tr>{''.join(rows)}</table></div>"
        )


def show_bits(values, fmts=LESSON_FORMATS, labels=None) -> BitTable:
    """The bits of each value in each format, coloured by field (a `BitTable`: displayed as HTML in Jupyter)."""
    return BitTable(values, fmts, labels)


def layout_table(fmts=(*LESSON_FORMATS, "fp64")) -> str:
    """One line per format: torch dtype, total bits, sign / exponent / mantissa widths, bias, NaN encoding."""
    header = [(_("format"), "<10"), (_("torch dtype"), "<22"), (_("bits"), ">5"), (_("sign"), ">6")]
    header += [(_("exp"), ">5"), (_("mant"), ">6"), (_("bias"), ">9")]
    lines = ["".join(pad(text, spec) for text, spec in header) + "  nan/inf"]
    for name in fmts:
        f = get_format(name)
        special = _("IEEE: inf and NaN") if f.nan_encoding == "ieee" else _("fn: no inf, S.1111.111 = NaN")
        lines.append(
            f"{f.name:<10}{str(f.dtype):<22}{f.bits:>5}{1:>6}{f.exponent_bits:>5}{f.mantissa_bits:>6}{f.bias:>9}  {special}"
        )
    return "\n".join(lines)
