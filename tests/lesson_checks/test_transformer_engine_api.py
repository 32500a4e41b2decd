"""Lesson 07's Transformer Engine cells against TE's own rules, without a GPU.

TE runs only on a GPU, and GPUs come rarely: on 2026-11-28 the first Hopper GPU to run lesson 07 with TE installed
stopped in §7, where `te.TransformerLayer(...)` built inside `te.quantized_model_init(...)` raised "Splitting
QuantizedTensor into multiple params is not supported". The rule behind it, in TE 2.20's source:

- `LayerNormLinear.__init__` and `Linear.__init__` (transformer_engine/pytorch/module/) raise it when
  `parameters_split` makes a weight a view of part of a larger one and the module holds FP8 weights
  (`with_fp8_params`, which `quantized_model_init` / `fp8_model_init` switches on);
- `MultiheadAttention.__init__` (transformer_engine/pytorch/attention/multi_head_attention.py) passes
  `parameters_split` for query, key and value unless `fuse_qkv_params=True`; `TransformerLayer` builds one, with
  `fuse_qkv_params=False` by default.

So inside `quantized_model_init`, a TransformerLayer or MultiheadAttention needs `fuse_qkv_params=True`, and a Linear
or LayerNormLinear no `parameters_split`. This test reads every TE call of the lessons' code cells (both editions:
the Korean code is the English code token for token, but the test reads what a learner runs) and holds them to it.
TE cannot be imported without CUDA ("TransformerEngine needs CUDA", also in the environment
coursetools/gpu/make_te_wheelhouse.py builds), so TE's own code decides only on a GPU: tests/gpu/test_fp8_gpu.py builds the
layer both ways there, and tests/gpu/test_solutions_on_gpu.py requires every row of lesson 07's §7."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "solutions").glob("*/*.ipynb")) + sorted(
    (ROOT / "ko" / "solutions").glob("*/*.ipynb")
)
FP8_WEIGHTS = ("quantized_model_init", "fp8_model_init")
ATTENTION = ("TransformerLayer", "MultiheadAttention")
LINEAR = ("Linear", "LayerNormLinear")


def code_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def te_calls(source: str) -> list[ast.Call]:
    """Calls of `te.<Module>(...)` in a cell."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython magics: not a TE cell
        return []
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "te"
    ]


def violations(source: str) -> list[str]:
    """What in a cell that builds FP8-weight modules breaks TE's rule (the module docstring)."""
    if not any(name in source for name in FP8_WEIGHTS):
        return []
    found = []
    for call in te_calls(source):
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        module = call.func.attr
        fused = keywords.get("fuse_qkv_params")
        if module in ATTENTION and not (isinstance(fused, ast.Constant) and fused.value is True):
            found.append(f"line {call.lineno}: te.{module}(...) without fuse_qkv_params=True")
        if module in LINEAR and "parameters_split" in keywords:
            found.append(f"line {call.lineno}: te.{module}(..., parameters_split=...)")
    return found


def test_the_rule_finds_what_stopped_lesson_07_on_a_hopper_gpu():
    """The check is not blind: the cell as it was on 2026-11-28 breaks the rule, the fixed one does not."""
    before = (
        "with te.quantized_model_init(enabled=True, recipe=recipe):\n"
        '    layer = te.TransformerLayer(hidden, ffn, heads, params_dtype=torch.bfloat16, device="cuda")\n'
    )
    assert violations(before) == ["line 2: te.TransformerLayer(...) without fuse_qkv_params=True"]
    assert violations(before.replace('device="cuda"', 'device="cuda", fuse_qkv_params=True')) == []
    assert violations("with te.fp8_model_init():\n    te.Linear(8, 24, parameters_split=('q', 'k', 'v'))\n")
    assert violations('te.TransformerLayer(1, 2, 3, device="cuda")\n') == []  # bf16 weights: no rule


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_lesson_builds_fp8_weight_modules_as_transformer_engine_allows(path):
    broken = {i: v for i, source in enumerate(code_cells(path)) if (v := violations(source))}
    assert not broken, f"{path.relative_to(ROOT)}: code cells {broken}"


def test_lesson_07_builds_a_te_transformer_layer_inside_quantized_model_init():
    """The rule above has something to hold: lesson 07's §7 builds its layer where FP8 weights are made."""
    sources = code_cells(ROOT / "solutions" / "07-fp8-transformer-engine" / "07-fp8-transformer-engine.ipynb")
    assert any(
        "quantized_model_init" in s and "TransformerLayer" in {c.func.attr for c in te_calls(s)}
        for s in sources
    )


def test_the_gpu_test_requires_every_te_row_of_lesson_07():
    """tests/gpu/test_solutions_on_gpu.py fails lesson 07 on a GPU with TE installed when §7 printed a row fewer
    than it declares (bf16; FP8 with bf16 weights; quantized_model_init; frozen): here, with its SUMMARY made up."""
    import nbformat
    from gpu.test_solutions_on_gpu import TE_ROW, missing_te_rows, te_runs

    nb = nbformat.read(
        ROOT / "solutions" / "07-fp8-transformer-engine" / "07-fp8-transformer-engine.ipynb", 4
    )
    labels = te_runs(nb)
    assert len(labels) == 4 and any("quantized_model_init" in label for label in labels)
    rows = {f"{TE_ROW}{label}: weights MiB / ms / peak MiB": "1 / 2 / 3" for label in labels}
    assert missing_te_rows(nb, rows) == []
    assert missing_te_rows(nb, {k: v for k, v in rows.items() if "frozen" not in k}) == [labels[-1]]
    assert missing_te_rows(nb, {}) == labels
