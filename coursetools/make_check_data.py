#!/usr/bin/env python
"""Write the stored answers of the checks' public cases, from the grading references.

    python scripts/make_check_data.py            write autograders/data/lessonNN.json
    python scripts/make_check_data.py --check    write nothing; exit 1 if a stored value differs

Where a check's reference is an answer to its exercise, the reference lives in autograders/references/ (not in the
learner release) and the check compares its public cases with values stored here, so that the learner's copy of
the checks works without it. Values are stored as float.hex() (exact). tests/kit/test_check_data.py runs --check.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def lesson01() -> dict:
    """The public cases' bytes, measured with the grading references (bitsandbytes is needed: a learner who has it
    runs its cases)."""
    import bitsandbytes  # noqa: F401 - every public case, the 8-bit ones included

    from autograders.lesson01 import (
        E2_CASES,
        E3_CASES,
        E4_CASES,
        E5_CASES,
        _live_case_name,
        _state_cases,
        _step,
        kv_config,
    )
    from autograders.references import lesson01 as ref

    state = {}
    for name, model, optimizer, steps in _state_cases():
        _step(model, optimizer, steps)
        state[name] = ref.state_bytes(model, optimizer)
    return {
        "optimizer_state_bytes": state,
        "adamw8bit_state_bytes": {
            name: ref.adamw8bit_state_bytes(shapes, size) for name, shapes, size in E2_CASES
        },
        "live_bytes": {_live_case_name(*case): ref.live_bytes(*case) for case in E3_CASES},
        "kv_cache_bytes": {
            name: ref.kv_cache_bytes(kv_config(heads), batch, seq, dtype)
            for name, heads, batch, seq, dtype in E4_CASES
        },
        "training_state_bytes": {name: ref.zero_convention_bytes(*rest) for name, *rest in E5_CASES},
    }


def lesson02() -> dict:
    from autograders.lesson02 import LIMIT_CASES, _ulp_cases
    from autograders.references.lesson02 import torch_limits, ulp
    from memlab.formats import LESSON_FORMATS

    return {
        "limits": {
            name: {key: float(value).hex() for key, value in torch_limits(name).items()}
            for name, _args in LIMIT_CASES
        },
        "ulp": {
            name: {float(x).hex(): ulp(x, name).hex() for _, x in _ulp_cases(name)} for name in LESSON_FORMATS
        },
    }


def lesson03() -> dict:
    from autograders.lesson03 import _underflow_cases
    from autograders.references.lesson03 import underflow_fraction

    return {
        "underflow_fraction": {
            name: underflow_fraction(grads, scale, dtype).hex()
            for name, grads, scale, dtype in _underflow_cases()
        }
    }


def lesson04() -> dict:
    from autograders.lesson04 import (
        DTYPES,
        E2_MODELS,
        _e1_public_cases,
        budget_stack,
        measure_layer_saved_bytes,
    )
    from autograders.references.lesson04 import e2_budgets, least_flops_within, plan_table

    plans = {}
    for model_name, spec in E2_MODELS.items():
        table = plan_table(*budget_stack(spec["d"], spec["blocks"], spec["batch"]))
        plans[model_name] = {
            name: {"budget": budget, "least_flops": least_flops_within(table, budget)}
            for name, budget in e2_budgets(table).items()
        }
    return {
        "llama_layer_saved_bytes": {
            name: measure_layer_saved_bytes(config, batch, seq, DTYPES[dtype])
            for name, config, batch, seq, dtype in _e1_public_cases()
        },
        "plan_checkpointing": plans,
    }


def lesson05() -> dict:
    """Per-rank bytes of the public ZeRO cases, measured on 2 gloo processes (memlab.distributed, ~10 s), and of the
    two that ZeRO's formulas give."""
    from autograders.lesson05 import ZERO_WIDTHS, _zero_formula_cases, mlp_shapes, zero_key
    from autograders.references.lesson05 import measure_zero_bytes, zero_formula_bytes

    measured = measure_zero_bytes(ZERO_WIDTHS)
    return {
        "zero_bytes_per_rank": {
            zero_key(*case): [dict(rank) for rank in ranks] for case, ranks in measured.items()
        },
        "zero_formula_bytes": {
            name: zero_formula_bytes(mlp_shapes(widths), world, strategy)
            for name, widths, world, strategy in _zero_formula_cases()
        },
    }


def lesson06() -> dict:
    """Exercise 6.1's answers for the public training steps, read from the tracker's own trace of each."""
    from autograders.lesson06 import _e1_public_cases, peak_trace
    from autograders.references.lesson06 import expected_peak

    return {"find_peak": {name: expected_peak(peak_trace(*build())) for name, build in _e1_public_cases()}}


def lesson07() -> dict:
    """The scales of the public DelayedScaler sequences, from Transformer Engine's recipe (the reference), and the
    task's scale of the public tensors of Exercise 7.1."""
    from autograders.lesson07 import E2_PUBLIC, FP8, _e1_cases, scales_of
    from autograders.references.lesson07 import DelayedScaler, expected_scale

    return {
        "delayed_scaler": {
            name: [s.hex() for s in scales_of(DelayedScaler, *rest)] for name, *rest in E2_PUBLIC
        },
        "quantize_fp8_scale": {
            fmt: {name: float(expected_scale(x, fp8_max)).hex() for name, x in _e1_cases()}
            for fmt, (_layout, _dtype, fp8_max) in FP8.items()
        },
    }


def lesson08() -> dict:
    """The lesson's plans for the public cases of Exercise 8.1 (simulated 7B steps, cached by memlab.estimate)."""
    from autograders.lesson08 import _e1_cases
    from autograders.references.lesson08 import expected_plan

    return {"plan_for": {case: expected_plan(gpu, seq)[0] for case, gpu, seq, _public in _e1_cases(None)}}


MAKERS = {
    "lesson01": lesson01,
    "lesson02": lesson02,
    "lesson03": lesson03,
    "lesson04": lesson04,
    "lesson05": lesson05,
    "lesson06": lesson06,
    "lesson07": lesson07,
    "lesson08": lesson08,
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if anything differs")
    args = parser.parse_args(argv)
    stale = []
    for name, make in MAKERS.items():
        path = ROOT / "autograders" / "data" / f"{name}.json"
        text = json.dumps(make(), indent=1, sort_keys=True) + "\n"
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    for path in stale:
        print(f"out of date: {path} (run python scripts/make_check_data.py)")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
