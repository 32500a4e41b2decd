"""Checks for lesson 04 — activation checkpointing.

No check holds an answer. Every expected value is computed in a reference step (autograders/kit.py), so under
grading only the judge ever has it; what the learner's code returned, and what the check saw of it while it ran,
comes out of learner steps as plain data.

- `llama_layer_saved_bytes` (Exercise 4.1) is compared with a *measurement*: real `LlamaDecoderLayer`s of the
  check's own shapes run forward under `torch.autograd.graph.saved_tensors_hooks`, and the distinct storages that
  autograd saves are counted (`measure_layer_saved_bytes`, what the exercise defines). The public cases' measured
  values are stored (autograders/data/lesson04.json, scripts/make_check_data.py); the cases drawn at grading time
  are measured then (by the judge). The learner's function must not run a model itself (a formula, not a
  measurement): `kit.call_predicting` records the model ops torch ran during the call next to its result, and
  under grading the check is collected again in a fresh process (`rerun=True`), where nothing else of the notebook
  ran first.
- `plan_checkpointing` (Exercise 4.2): the learner's function gets its own copy of the blocks; the plan it returns
  is run and measured on the check's own copy (`measure_plan`, the tracker, a reference step), and its recomputed
  FLOPs are compared with the least that fits, found by the check's own search over every plan (stored for the
  public cases; for drawn cases the search is autograders/references/lesson04.py, not in the learner release). A
  drawn case's budget is an input: it is chosen among the measured peaks of its model's plans (`_plan_peaks`),
  computed the same way wherever the check runs.
- `measure_checkpointed_stack` (Exercise 4.3, GPU): watched from outside the call (forward calls counted by hooks,
  the peak from the tracker or the caching allocator, the wall time), all inside the learner step that makes the
  call: a measurement of the learner's code, which the judge collects again in a fresh process (`rerun=True`). Its
  CPU stage runs tiny layers; the GPU stage needs a CUDA GPU; its logic is `run_checkpointed_stack_check(fn,
  device)`, which the tests also run on the CPU.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import math
import numbers
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import FlopCounterMode

from autograders import kit
from autograders.kit import _
from memlab.measure import track_memory
from memlab.models import tiny_llama_config

MiB = 1024**2
DATA = Path(__file__).resolve().parent / "data" / "lesson04.json"


@functools.cache
def stored() -> dict:
    return kit.read_only(json.loads(DATA.read_text()))


# ---- e1: llama_layer_saved_bytes ----------------------------------------------------------------------------------

#: relative tolerance of Exercise 4.1: the per-token tensors (RMSNorm's fp32 rsqrt, 4 bytes per token per norm) may
#: be left out; they are under 0.5% of a layer at the check's widths. Everything of b*s*h or more must be counted.
E1_RTOL = 0.005
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def layer_parts(config, batch: int, seq: int, dtype: torch.dtype, seed: int = 0):
    """One eager-attention `LlamaDecoderLayer` of `config` in `dtype` and what a LlamaModel would hand it: an input
    that requires grad (as the embedding output does), the rotary (cos, sin) and an additive causal mask."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    config = copy.deepcopy(config)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    layer = LlamaDecoderLayer(config, layer_idx=0).to(dtype)
    x = torch.randn(batch, seq, config.hidden_size, dtype=dtype, requires_grad=True)
    position_ids = torch.arange(seq)[None].expand(batch, seq)
    cos, sin = LlamaRotaryEmbedding(config)(x, position_ids)
    mask = (
        torch.full((seq, seq), torch.finfo(dtype).min, dtype=dtype)
        .triu(1)[None, None]
        .expand(batch, 1, seq, seq)
    )
    return layer, x, (cos, sin), mask


def measure_layer_saved_bytes(config, batch: int, seq: int, dtype: torch.dtype) -> int:
    """What Exercise 4.1 asks for, measured: the bytes of the distinct storages that autograd saves for backward in
    one forward pass of a real `LlamaDecoderLayer`, except the layer's parameters and the rotary cos/sin and the
    attention mask (computed once per model and shared by every layer). The layer's input counts where autograd saves
    it (in fp32 the first RMSNorm saves the input itself)."""
    layer, x, (cos, sin), mask = layer_parts(config, batch, seq, dtype)
    shared = {t.untyped_storage()._cdata for t in (*layer.parameters(), cos, sin, mask)}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor):
        storage = t.untyped_storage()
        if storage._cdata not in shared:
            saved[storage._cdata] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = layer(x, attention_mask=mask, position_embeddings=(cos, sin))
    del out
    return sum(saved.values())


def _e1_public_cases():
    """(name, config, batch, seq, dtype name)."""
    return [
        (
            kit.Case("tiny Llama (hidden 64, 4 heads, intermediate 172), batch 2, seq 32, fp32"),
            tiny_llama_config(),
            2,
            32,
            "fp32",
        ),
        (
            kit.Case("tiny Llama (hidden 64, 4 heads, intermediate 172), batch 2, seq 32, bf16"),
            tiny_llama_config(),
            2,
            32,
            "bf16",
        ),
        (
            kit.Case("hidden 96, 6 heads, intermediate 256, batch 1, seq 64, bf16"),
            tiny_llama_config(
                hidden_size=96, num_attention_heads=6, num_key_value_heads=6, intermediate_size=256
            ),
            1,
            64,
            "bf16",
        ),
        (
            kit.Case(
                "grouped-query attention: 8 heads, 2 key/value heads, hidden 128, batch 3, seq 16, fp32"
            ),
            tiny_llama_config(
                hidden_size=128, num_attention_heads=8, num_key_value_heads=2, intermediate_size=344
            ),
            3,
            16,
            "fp32",
        ),
        (
            kit.Case(
                "grouped-query attention in bf16: 4 heads, 1 key/value head, hidden 64, batch 2, seq 48"
            ),
            tiny_llama_config(num_key_value_heads=1),
            2,
            48,
            "bf16",
        ),
    ]


def _describe_config(config, batch: int, seq: int, dtype: str) -> kit.Case:
    return kit.Case(
        "hidden {hidden}, {heads} heads, {kv} key/value heads, intermediate {intermediate}, batch {batch}, seq {seq}, "
        "{dtype}",
        hidden=config.hidden_size,
        heads=config.num_attention_heads,
        kv=config.num_key_value_heads,
        intermediate=config.intermediate_size,
        batch=batch,
        seq=seq,
        dtype=dtype,
    )


def _e1_drawn_case(rng: random.Random, i: int):
    """(name, config, batch, seq, dtype name) of a case drawn at grading time."""
    head_dim = rng.choice([8, 16, 32])
    heads = rng.choice([2, 4, 6, 8])
    kv = rng.choice([d for d in range(1, heads + 1) if heads % d == 0])
    hidden = head_dim * heads
    intermediate = rng.randint(hidden, 4 * hidden)
    config = tiny_llama_config(
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        intermediate_size=intermediate,
    )
    # batch >= 2 with a single key/value head: at batch 1 repeat_kv's expand of one head is a free view that
    # matmul saves as it is (the one shape where the keys and values are not saved at the full head count)
    batch = rng.randint(2 if kv == 1 else 1, 3)
    seq, dtype = rng.choice([8, 16, 24, 40, 64]), rng.choice(["fp32", "bf16"])
    name = kit.drawn(i, _describe_config(config, batch, seq, dtype))
    return name, config, batch, seq, dtype


def _e1_expected(name: str, config, batch: int, seq: int, dtype: str) -> int:
    """The measured bytes of a case (a reference step): stored for a public case, measured for a drawn one."""
    public = stored()["llama_layer_saved_bytes"]
    if name in public:
        return public[name]
    return measure_layer_saved_bytes(config, batch, seq, DTYPES[dtype])


@kit.check("e1_llama_layer_saved_bytes", points=4, rerun=True)
def check_llama_layer_saved_bytes(llama_layer_saved_bytes) -> int:
    kit.expect_callable(llama_layer_saved_bytes, "llama_layer_saved_bytes")
    cases = _e1_public_cases() + kit.drawn_cases("e1_llama_layer_saved_bytes", 3, _e1_drawn_case)
    for name, config, batch, seq, dtype in cases:
        bytes_per_value = torch.finfo(DTYPES[dtype]).bits // 8
        expected = kit.reference(lambda: _e1_expected(name, config, batch, seq, dtype))  # noqa: B023 - called at once
        got = kit.call_predicting(
            llama_layer_saved_bytes, copy.deepcopy(config), batch, seq, bytes_per_value, case=name
        )
        if isinstance(got, torch.Tensor) or not isinstance(got, numbers.Real) or isinstance(got, bool):
            kit.expect_type(got, int, case=name, what=_("the number of bytes"))
        kit.expect_close(
            got,
            expected,
            case=name,
            what=_("the bytes one layer saves for backward (bytes_per_value={bytes_per_value})").format(
                bytes_per_value=bytes_per_value
            ),
            rtol=E1_RTOL,
            reveal=False,
        )
    return len(cases)


# ---- e2: plan_checkpointing ---------------------------------------------------------------------------------------


class Block(nn.Sequential):
    """Linear(d, width) -> `depth` pointwise GELU/tanh steps -> Linear(width, d): the FLOPs depend on the width only,
    the saved activations on the width and the depth."""

    def __init__(self, d: int, width: int, depth: int):
        layers: list[nn.Module] = [nn.Linear(d, width)]
        for k in range(depth):
            layers.append(nn.GELU() if k % 2 == 0 else nn.Tanh())
        layers.append(nn.Linear(width, d))
        super().__init__(*layers)


def budget_stack(d: int, blocks: list[tuple[int, int]], batch: int, seed: int = 0):
    """(an nn.Sequential of Blocks, an input of `batch` rows): the models of Exercise 4.2."""
    torch.manual_seed(seed)
    stack = nn.Sequential(*[Block(d, width, depth) for width, depth in blocks])
    x = torch.randn(batch, d, generator=torch.Generator().manual_seed(seed + 1))
    return stack, x


def run_plan(blocks: nn.Sequential, x: torch.Tensor, plan) -> torch.Tensor:
    """The forward pass of Exercise 4.2 with the blocks in `plan` checkpointed (non-reentrant); returns the loss."""
    plan = set(plan or ())
    h = x
    for i, block in enumerate(blocks):
        h = checkpoint(block, h, use_reentrant=False) if i in plan else block(h)
    return h.square().mean()


def block_flops(blocks: nn.Sequential, x: torch.Tensor) -> list[int]:
    """The forward FLOPs of each block (torch.utils.flop_counter.FlopCounterMode): what recomputing it costs."""
    flops = []
    h = x
    with torch.no_grad():
        for block in blocks:
            counter = FlopCounterMode(display=False)
            with counter:
                h = block(h)
            flops.append(counter.get_total_flops())
    return flops


def measure_plan(blocks: nn.Sequential, x: torch.Tensor, plan) -> tuple[int, int]:
    """(peak bytes of one forward + backward with `plan`, FLOPs it recomputes): how the check measures a plan.
    The peak is `track_memory(model=blocks, inputs=x)`'s: parameters, gradients and activations."""
    blocks.zero_grad(set_to_none=True)
    with track_memory(model=blocks, inputs=x) as trace:
        run_plan(blocks, x, plan).backward()
    blocks.zero_grad(set_to_none=True)
    flops = block_flops(blocks, x)
    return trace.peak_bytes, sum(flops[i] for i in set(plan or ()))


E2_MODELS = {
    "A": dict(d=32, blocks=[(128, 1), (64, 5), (256, 1), (96, 3), (160, 2)], batch=256),
    "B": dict(d=48, blocks=[(96, 4), (192, 1), (48, 6), (144, 2)], batch=192),
}


#: the public budgets of Exercise 4.2, by name (the grading reference makes them: references/lesson04.py, `e2_budgets`)
E2_BUDGETS = {
    str(name): name
    for name in (
        kit.Case("a budget that the plan without checkpointing fits"),
        kit.Case("a budget a third of the way down from no checkpointing"),
        kit.Case("a tight budget, just above the lowest peak of any plan"),
        kit.Case("a budget below the peak of every plan (return None)"),
    )
}


def _stored_least_flops(model_name: str, budget_name: str) -> int | None:
    return stored()["plan_checkpointing"][model_name][budget_name]["least_flops"]


def _e2_public_cases():
    """(name, model spec, budget, least FLOPs): budgets and least FLOPs stored by make_check_data; the least FLOPs
    (None when no plan fits) as a function, for a reference step."""
    cases = []
    for model_name, entries in stored()["plan_checkpointing"].items():
        for budget_name, entry in sorted(entries.items(), key=lambda item: -item[1]["budget"]):
            cases.append(
                (
                    kit.Case("model {model}, {budget}", model=model_name, budget=E2_BUDGETS[budget_name]),
                    E2_MODELS[model_name],
                    entry["budget"],
                    functools.partial(_stored_least_flops, model_name, budget_name),
                )
            )
    return cases


def _describe_model(spec, budget: int) -> kit.Case:
    return kit.Case(
        "{count} blocks (width, depth) {blocks}, d={d}, batch {batch}, budget {budget:,} bytes",
        count=len(spec["blocks"]),
        blocks=spec["blocks"],
        d=spec["d"],
        batch=spec["batch"],
        budget=budget,
    )


def _plan_peaks(blocks: nn.Sequential, x: torch.Tensor) -> list[int]:
    """The distinct measured peaks of every plan of `blocks`, lowest first (`measure_plan` on each subset, in the
    order of references/lesson04.py's `plan_table`): what a drawn case's budget is chosen among. An input of the
    case, not an expected value: computed the same way in the grading kernel and in the judge."""
    n = len(blocks)
    plans = [plan for k in range(n + 1) for plan in itertools.combinations(range(n), k)]
    return sorted({measure_plan(blocks, x, plan)[0] for plan in plans})


def _least_flops_drawn(blocks: nn.Sequential, x: torch.Tensor, budget: int) -> int | None:
    """The least recomputed FLOPs of a plan that fits `budget` (a reference step): the grading references' search."""
    refs = kit.references("lesson04")
    return refs.least_flops_within(refs.plan_table(blocks, x), budget)


def _e2_drawn_case(rng: random.Random, i: int):
    """(name, model spec, budget, least FLOPs as a function) of a case drawn at grading time."""
    spec = dict(
        d=rng.choice([16, 24, 32]),
        blocks=[(rng.choice([32, 64, 96, 128, 192]), rng.randint(1, 6)) for _ in range(rng.randint(4, 5))],
        batch=rng.choice([64, 128, 192]),
    )
    blocks, x = budget_stack(spec["d"], spec["blocks"], spec["batch"], seed=i)
    peaks = _plan_peaks(blocks, x)
    budget = rng.choice(peaks[1:-1] or peaks) + rng.randint(0, 512)
    name = kit.drawn(i, _describe_model(spec, budget))
    return name, spec, budget, functools.partial(_least_flops_drawn, blocks, x, budget)


def _normalise_plan(got, n: int, case: str):
    if got is None:
        return None
    if isinstance(got, (str, bytes)) or not hasattr(got, "__iter__"):
        raise kit.CheckFailed(
            _(
                "case {case}: the plan should be a list of block indices (or None when no plan fits); got {type}."
            ).format(case=case, type=type(got).__name__)
        )
    plan = list(got)
    for i in plan:
        if isinstance(i, bool) or not isinstance(i, numbers.Integral) or not 0 <= int(i) < n:
            raise kit.CheckFailed(
                _("case {case}: the plan should hold block indices 0..{last}; it holds {got}.").format(
                    case=case, last=n - 1, got=repr(i)
                )
            )
    return sorted({int(i) for i in plan})


def _judge_plan(name: str, blocks: nn.Sequential, x: torch.Tensor, plan, budget: int, least) -> None:
    """The verdict on one case's plan: measured on the check's own blocks, in reference steps."""
    if least is None:
        if plan is not None:
            peak, _flops = kit.reference(lambda: measure_plan(blocks, x, plan))
            raise kit.CheckFailed(
                _(
                    "case {case}: no plan fits this budget, so the function should return None; it returned "
                    "{plan}, whose measured peak is {peak:,} bytes, over the budget of {budget:,}."
                ).format(case=name, plan=plan, peak=peak, budget=budget)
            )
        return
    if plan is None:
        raise kit.CheckFailed(
            _(
                "case {case}: your function returned None, but a plan that fits the budget of {budget:,} bytes "
                "exists."
            ).format(case=name, budget=budget)
        )
    peak, flops = kit.reference(lambda: measure_plan(blocks, x, plan))
    if peak > budget:
        raise kit.CheckFailed(
            _(
                "case {case}: with your plan {plan} the measured peak is {peak:,} bytes, {over:,} over the "
                "budget of {budget:,}: checkpoint more (or other) blocks."
            ).format(case=name, plan=plan, peak=peak, over=peak - budget, budget=budget)
        )
    if flops > least:
        # least == 0: how_far(flops, 0) is "too high" (flops > 0)
        message = (
            _(
                "case {case}: your plan {plan} fits, but it recomputes {flops:,} FLOPs, and a plan that fits with "
                "fewer exists: your recompute is {how_far}."
            )
            if least
            else _(
                "case {case}: your plan {plan} fits, but it recomputes {flops:,} FLOPs, and a plan that fits with "
                "fewer exists (no checkpointing at all fits this budget): your recompute is {how_far}."
            )
        )
        raise kit.CheckFailed(
            message.format(case=name, plan=plan, flops=flops, how_far=kit.how_far(flops, least))
        )


@kit.check("e2_plan_checkpointing", points=4)
def check_plan_checkpointing(plan_checkpointing) -> int:
    kit.expect_callable(plan_checkpointing, "plan_checkpointing")
    cases = _e2_public_cases() + kit.drawn_cases("e2_plan_checkpointing", 2, _e2_drawn_case)
    for name, spec, budget, least_flops in cases:
        # the check's own blocks, measured only in reference steps; the learner's function gets a copy of its own
        blocks, x = budget_stack(spec["d"], spec["blocks"], spec["batch"])
        got = kit.learner(
            name,
            lambda: kit.call(plan_checkpointing, copy.deepcopy(blocks), x.clone(), budget, case=name),  # noqa: B023
        )
        plan = _normalise_plan(got, len(blocks), name)
        if kit.judging():
            _judge_plan(name, blocks, x, plan, budget, kit.reference(least_flops))
    return len(cases)


# ---- e3: measure_checkpointed_stack (GPU) -------------------------------------------------------------------------

#: the check's set-ups: "cuda" is graded (Llama-2-7B's layer shape, bf16); "cpu" runs the same logic at tiny sizes
E3_PROFILES = {
    "cuda": dict(
        config=dict(
            hidden_size=4096, intermediate_size=11008, num_attention_heads=32, num_key_value_heads=32
        ),
        layers=4,
        batch=1,
        seq=2048,
        dtype=torch.bfloat16,
        steps=3,
        time_factor=2.0,
    ),
    "cpu": dict(
        config=dict(hidden_size=64, intermediate_size=172, num_attention_heads=4, num_key_value_heads=4),
        layers=3,
        batch=2,
        seq=64,
        dtype=torch.float32,
        steps=2,
        time_factor=20.0,
    ),
}
E3_MIN_GPU_GB = 20


def stack_setup(device, config: dict, layers: int, batch: int, seq: int, dtype: torch.dtype, seed: int = 0):
    """(nn.ModuleList of eager-attention LlamaDecoderLayers, hidden states, (cos, sin)) on `device`."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    cfg = tiny_llama_config(**config, num_hidden_layers=layers)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    with torch.device(device):
        stack = nn.ModuleList([LlamaDecoderLayer(cfg, layer_idx=i) for i in range(layers)]).to(dtype)
        hidden = torch.randn(batch, seq, cfg.hidden_size, dtype=dtype)
        position_ids = torch.arange(seq)[None].expand(batch, seq)
        cos, sin = LlamaRotaryEmbedding(cfg)(hidden, position_ids)
    return stack, hidden, (cos, sin)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _expect_stack_result(got, case: str) -> None:
    kit.expect_keys(got, ("peak_bytes", "step_ms"), case=case, what=_("the returned dict"))
    for key in ("peak_bytes", "step_ms"):
        kit.expect_type(got[key], numbers.Real, case=case, what=key)
        if not math.isfinite(float(got[key])) or float(got[key]) <= 0:
            raise kit.CheckFailed(
                _("case {case}: {key} should be a positive number; got {got}.").format(
                    case=case, key=key, got=repr(got[key])
                )
            )


def _watch_stack(fn, device, profile, use_checkpoint: bool, case: str):
    """Call the learner's function on a fresh stack, watching from outside: (result, peak over the whole call,
    seconds of the whole call); fails unless every layer ran forward once per step (twice when checkpointed).

    The call and the watching are one learner step (the result, as plain data), and what the check saw is a second
    (plain numbers: the peak, the seconds, the forward calls per layer): the judge never runs the learner's code."""
    seen = {}

    def watch():
        stack, hidden, pe = stack_setup(
            device, profile["config"], profile["layers"], profile["batch"], profile["seq"], profile["dtype"]
        )
        calls = [0] * len(stack)
        for i, layer in enumerate(stack):
            # a pre-hook on the layer's first module: a recompute may stop early, before the layer's last module ends
            layer.input_layernorm.register_forward_pre_hook(
                lambda *_, i=i: calls.__setitem__(i, calls[i] + 1)
            )
        _sync(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            start = time.perf_counter()
            got = kit.call(fn, stack, hidden, pe, use_checkpoint, steps=profile["steps"], case=case)
            _sync(device)
            seconds = time.perf_counter() - start
            peak = torch.cuda.max_memory_allocated(device)
        else:
            with track_memory(model=stack, inputs=(hidden, pe)) as trace:
                start = time.perf_counter()
                got = kit.call(fn, stack, hidden, pe, use_checkpoint, steps=profile["steps"], case=case)
                seconds = time.perf_counter() - start
            peak = trace.peak_bytes
        del stack, hidden, pe
        if device.type == "cuda":
            torch.cuda.empty_cache()
        seen.update(peak=int(peak), seconds=float(seconds), calls=[int(c) for c in calls])
        return got

    got = kit.learner(case, watch)
    saw = kit.learner(kit.Case("{case}: what the check saw of the call", case=case), lambda: seen)
    _expect_stack_result(got, case)
    steps, calls = profile["steps"], saw["calls"]
    per_layer = (steps + 1) * (2 if use_checkpoint else 1)
    if any(c != per_layer for c in calls):
        message = (
            _(
                "case {case}: with steps={steps} (one warm-up step, then {steps} timed) and each layer "
                "checkpointed: its forward runs twice per step (again in backward), every layer should run "
                "{per_layer} times; it ran {calls} times."
            )
            if use_checkpoint
            else _(
                "case {case}: with steps={steps} (one warm-up step, then {steps} timed) and each layer "
                "not checkpointed: its forward runs once per step, every layer should run {per_layer} times; "
                "it ran {calls} times."
            )
        )
        raise kit.CheckFailed(message.format(case=case, steps=steps, per_layer=per_layer, calls=calls))
    return got, saw["peak"], saw["seconds"]


def run_checkpointed_stack_check(fn: Callable, device) -> int:
    """The logic of check_measure_checkpointed_stack on `device` with that device's profile; returns the cases."""
    device = torch.device(device)
    profile = E3_PROFILES[device.type]
    kit.expect_callable(fn, "measure_checkpointed_stack")
    peaks = {}
    for use_checkpoint in (False, True):
        case = kit.Case(
            "{layers} layers {config}, batch {batch}, seq {seq}, {dtype} on {device}, checkpoint={checkpoint}",
            layers=profile["layers"],
            config=profile["config"],
            batch=profile["batch"],
            seq=profile["seq"],
            dtype=str(profile["dtype"]).removeprefix("torch."),
            device=device.type,
            checkpoint=use_checkpoint,
        )
        got, peak, seconds = _watch_stack(fn, device, profile, use_checkpoint, case)
        kit.expect_close(
            got["peak_bytes"],
            peak,
            case=case,
            what=_("peak_bytes (what the check saw from outside your function)"),
            rtol=0.05,
            atol=MiB if device.type == "cuda" else 1024,
            reveal=False,
        )
        upper_ms = 1000 * seconds / profile["steps"]  # the whole call, warm-up included, per timed step
        lower_ms = upper_ms / (profile["steps"] + 1) / profile["time_factor"]
        if not lower_ms <= float(got["step_ms"]) <= upper_ms:
            raise kit.CheckFailed(
                _(
                    "case {case}: step_ms = {step_ms:.3g} ms does not fit the time your call took "
                    "({call_ms:.3g} ms for one warm-up and {steps} timed steps): milliseconds per "
                    "timed step, with torch.cuda.synchronize() before each reading of the clock."
                ).format(
                    case=case, step_ms=float(got["step_ms"]), call_ms=1000 * seconds, steps=profile["steps"]
                )
            )
        peaks[use_checkpoint] = float(got["peak_bytes"])
    if not peaks[True] < peaks[False]:
        raise kit.CheckFailed(
            _(
                "checkpointing should lower the peak of this stack: your peak with checkpoint=True is not below the "
                "one with checkpoint=False."
            )
        )
    return 2


@kit.check("e3_measure_checkpointed_stack", points=2, rerun=True)
def check_measure_checkpointed_stack(measure_checkpointed_stack) -> int:
    kit.expect_callable(measure_checkpointed_stack, "measure_checkpointed_stack")
    n = run_checkpointed_stack_check(measure_checkpointed_stack, "cpu")
    kit.needs_hardware(
        cuda=True,
        min_gpu_gb=E3_MIN_GPU_GB,
        passed=_("the tiny stack on the CPU: forward calls, peak and step time as the check saw them"),
    )
    return n + run_checkpointed_stack_check(
        measure_checkpointed_stack, torch.device("cuda", torch.cuda.current_device())
    )


__all__ = [
    "check_llama_layer_saved_bytes",
    "check_plan_checkpointing",
    "check_measure_checkpointed_stack",
    "measure_layer_saved_bytes",
    "layer_parts",
    "budget_stack",
    "run_plan",
    "measure_plan",
    "block_flops",
    "E2_MODELS",
    "E3_PROFILES",
    "stack_setup",
    "run_checkpointed_stack_check",
]
