"""The analytic memory model, and a simulator that runs one real training step without allocating it.

Every formula names its source. The conventions differ on what they count; lesson 01 compares them:
- ZeRO (Rajbhandari et al. 2020, §3.1, https://arxiv.org/abs/1910.02054): mixed-precision Adam keeps fp16 weights
  (2 B) + fp16 gradients (2 B) + fp32 master weights, momentum and variance (4 + 4 + 4 B) = 16 B per parameter.
- Hugging Face "Model training anatomy" (https://huggingface.co/docs/transformers/model_memory_anatomy): mixed
  precision = 6 B weights (fp32 + fp16 copy) + 4 B fp32 gradients + 8 B AdamW = 18 B per parameter.
- EleutherAI "Transformer Math 101" (https://blog.eleuther.ai/transformer-math/): 12 B/param of optimizer state for
  mixed-precision AdamW (fp32 copy + momentum + variance), plus 2 B weights, plus the gradients (2 or 4 B).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from memlab.measure import MemoryTrace, chunked_lm_loss, loss_of, measure_training_step

#: bytes per value of each storage format ("int4": two values per byte)
FORMAT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "int4": 0.5, None: 0}

#: optimizer state in bytes per trainable parameter, for the usual fp32 state
OPTIMIZER_STATE_BYTES = {
    "sgd": 0,  # plain SGD keeps nothing
    "sgd-momentum": 4,  # one momentum buffer
    "adamw": 8,  # exp_avg + exp_avg_sq (Loshchilov & Hutter 2019)
    "adamw-8bit": 2,  # both moments blockwise-quantised to 1 B (Dettmers et al. 2022, arXiv:2110.02861), + tiny absmax
    "lion": 4,  # one momentum buffer (Chen et al. 2023, arXiv:2302.06675)
    "adafactor": 0,  # factored second moment: O(rows + cols) per matrix, ~0 per parameter (Shazeer & Stern 2018)
    "lomo": 0,  # LOMO fuses the update into backward: no state, no full gradient kept (Lv et al. 2023)
}


def count_parameters(config_or_builder, trainable_only: bool = False) -> int:
    """Parameters of a model, built on the meta device (no memory, seconds even for 7B).

    `config_or_builder` is a transformers config (built with AutoModelForCausalLM.from_config) or a callable that
    returns an nn.Module. Shared (tied) parameters are counted once, as `model.parameters()` yields them once.
    The Llama-2-7B config gives 6,738,415,616.
    """
    with torch.device("meta"):
        model = _build(config_or_builder)
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def _build(config_or_builder) -> torch.nn.Module:
    if callable(config_or_builder):
        return config_or_builder()
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_config(config_or_builder)


def model_state_bytes(
    n_params: int,
    weights: str = "bf16",
    grads: str | None = "bf16",
    master_weights: str | None = "fp32",
    optimizer: str = "adamw",
    n_trainable: int | None = None,
) -> dict[str, float]:
    """Bytes of the model state during training, per component, and the total.

    Weights are stored for all `n_params`; gradients, master weights and optimizer state only for the
    `n_trainable` ones (default: all; with LoRA, just the adapters). The default (bf16 weights and grads, fp32
    master weights, AdamW) is ZeRO's mixed-precision Adam: 2 + 2 + 4 + 8 = 16 B per parameter.
    """
    trainable = n_params if n_trainable is None else n_trainable
    parts = {
        "weights": n_params * FORMAT_BYTES[weights],
        "gradients": trainable * FORMAT_BYTES[grads],
        "master weights": trainable * FORMAT_BYTES[master_weights],
        "optimizer state": trainable * OPTIMIZER_STATE_BYTES[optimizer],
    }
    parts["total"] = sum(parts.values())
    return parts


def activation_bytes(
    seq: int, batch: int, hidden: int, heads: int, layers: int, recompute: str = "none"
) -> float:
    """Activation memory of a GPT-style transformer's layers in 16-bit training, no tensor/sequence parallelism.

    Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
    (https://arxiv.org/abs/2205.05198), §4.1: per layer s·b·h·(34 + 5·a·s/h) bytes, where the 5·a·s²·b term is the
    softmax output (2 bytes per score), the dropout mask (1 byte) and the dropout output (2 bytes); the scores QKᵀ
    themselves are not stored (the backward of QKᵀ needs Q and K). "selective" recomputation (recompute only that core)
    keeps 34·s·b·h; "full" recomputation keeps only each layer's 16-bit input, 2·s·b·h.
    Embeddings, the final norm and the logits are not included (the paper's §4.3 covers them).
    """
    s, b, h, a, n = seq, batch, hidden, heads, layers
    per_layer = {
        "none": s * b * h * (34 + 5 * a * s / h),
        "selective": 34 * s * b * h,
        "full": 2 * s * b * h,
    }
    if recompute not in per_layer:
        raise ValueError(f"recompute must be one of {sorted(per_layer)}, not {recompute!r}")
    return n * per_layer[recompute]


def simulate_training_step(
    build_model: Callable[[], torch.nn.Module],
    make_batch: Callable[[], object],
    make_optimizer: Callable[[list], torch.optim.Optimizer] = lambda params: torch.optim.AdamW(params),
    loss_fn=loss_of,
) -> MemoryTrace:
    """Run one real forward / backward / step / zero_grad under FakeTensorMode and return its tracked trace.

    `build_model()` runs on the meta device (so it may build a 7B model, wrap it with peft, cast it, enable
    checkpointing), then every parameter and buffer is replaced by a fake CPU tensor of the same shape and dtype:
    no memory is allocated, yet every operator runs its shape logic, so the tracker sees every tensor the real
    step would create. `make_batch()` and `make_optimizer(trainable_params)` run under the fake mode too.
    The tensors are replaced in place rather than with `Module.to()`/`to_empty()`, which raise "Couldn't swap" on
    fake tensors in torch 2.13 (and peft calls them).
    """
    with torch.device("meta"):
        model = build_model()
    with FakeTensorMode(allow_non_fake_inputs=True):
        materialize_fake(model)
        batch = make_batch()
        optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad])
        return measure_training_step(model, batch, optimizer, loss_fn=loss_fn, device="cpu")


def materialize_fake(model: torch.nn.Module) -> None:
    """Replace each meta parameter and buffer of `model` by an empty tensor of the active (fake) mode, on the CPU;
    tied tensors stay tied."""
    replaced: dict[int, torch.Tensor] = {}

    def fake(t: torch.Tensor, is_param: bool) -> torch.Tensor:
        if id(t) not in replaced:
            new = torch.empty_like(t, device="cpu")
            replaced[id(t)] = torch.nn.Parameter(new, requires_grad=t.requires_grad) if is_param else new
        return replaced[id(t)]

    for module in model.modules():
        for name, p in module._parameters.items():
            if p is not None:
                module._parameters[name] = fake(p, True)
        for name, b in module._buffers.items():
            if b is not None:
                module._buffers[name] = fake(b, False)


def simulate_layer_stack(
    build_model: Callable[[int], torch.nn.Module],
    make_batch: Callable[[], object],
    layers: int,
    make_optimizer: Callable[[list], torch.optim.Optimizer] = lambda params: torch.optim.AdamW(params),
    loss_fn=loss_of,
    probes: tuple[int, int] = (2, 4),
) -> dict:
    """The peak of one training step of a `layers`-deep model, from simulations of two shallow ones.

    `build_model(n)` builds the model with n identical layers (e.g. a 7B config with `num_hidden_layers=n`). For such
    a stack every byte count at the peak is affine in the depth: parameters, gradients, optimizer state and saved
    activations grow by the same amount per layer; embeddings, head and logits do not. So two simulations
    (`simulate_training_step`) at `probes` depths a < b give any depth L exactly, x(L) = x(a) + (x(b) - x(a)) *
    (L - a) / (b - a), provided the peak is at the same operator in both (else ValueError: simulate deeper probes).
    A 7B plan then costs two simulations of 2 and 4 layers (seconds) instead of one of 32.

    Returns {"peak_bytes", "by_category", "per_layer_bytes", "peak_op", "probes"}.
    """
    a, b = probes
    traces = {
        n: simulate_training_step(lambda n=n: build_model(n), make_batch, make_optimizer, loss_fn)
        for n in probes
    }
    ops = {n: t.peak_event[1] for n, t in traces.items()}
    if ops[a] != ops[b]:
        raise ValueError(
            f"the peak moves between {a} and {b} layers ({ops[a]} vs {ops[b]}): use deeper probes"
        )

    def at_depth(x_a: int, x_b: int) -> int:
        per_layer, rest = divmod((x_b - x_a) * (layers - a), b - a)
        if rest:
            raise ValueError("the byte counts are not affine in the depth: are the layers identical?")
        return x_a + per_layer

    by_category = {
        name: at_depth(traces[a].peak_by_category[name], traces[b].peak_by_category[name])
        for name in traces[a].peak_by_category
    }
    return {
        "peak_bytes": at_depth(traces[a].peak_bytes, traces[b].peak_bytes),
        "by_category": by_category,
        "per_layer_bytes": (traces[b].peak_bytes - traces[a].peak_bytes) // (b - a),
        "peak_op": ops[a],
        "probes": {n: t.peak_bytes for n, t in traces.items()},
    }


#: LoRA's usual targets in a Llama: the four attention projections
ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


# ---- the simulations' disk cache ------------------------------------------------------------------------------------

#: the folder of the disk cache of the 7B simulations; "off" switches it off. Default: $XDG_CACHE_HOME/memlab (or
#: ~/.cache/memlab)/simulations. A grading sandbox has its own empty home, so a submission never reads or writes the
#: grader's; the grader's judge reads what the grader's own processes wrote.
CACHE_ENV = "MEMLAB_SIMULATION_CACHE"


def simulation_cache() -> Path | None:
    """The folder of the simulations' disk cache (None when switched off)."""
    setting = os.environ.get(CACHE_ENV, "")
    if setting.lower() == "off":
        return None
    if setting:
        return Path(setting)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "memlab" / "simulations"


@functools.cache
def _code_key() -> str:
    """What a cached simulation depends on besides its arguments: the versions of torch, transformers and peft and
    the source of the simulator and the models it builds."""
    import importlib.metadata as metadata

    from memlab import measure, models

    parts = [f"{name} {metadata.version(name)}" for name in ("torch", "transformers", "peft")]
    parts += [Path(module.__file__).read_text() for module in (sys.modules[__name__], measure, models)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _cache_path(name: str, args: tuple) -> Path | None:
    folder = simulation_cache()
    if folder is None:
        return None
    key = hashlib.sha256(json.dumps([name, list(args), _code_key()]).encode()).hexdigest()
    return folder / f"{name}-{key[:32]}.json"


def _read_cached(name: str, args: tuple) -> LoraStepPeak | None:
    path = _cache_path(name, args)
    try:
        data = json.loads(path.read_text()) if path is not None and path.is_file() else None
        if data is None:
            return None
        result = LoraStepPeak(
            int(data["peak_bytes"]),
            str(data["peak_op"]),
            tuple((str(k), int(v)) for k, v in data["by_category"]),
            int(data["per_layer_bytes"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None  # unreadable or malformed: simulate again (and write it anew)
    return result


def _write_cached(name: str, args: tuple, result: LoraStepPeak) -> None:
    path = _cache_path(name, args)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as out:
            json.dump({"args": list(args), **result._asdict()}, out)
        os.replace(out.name, path)  # atomic: a reader sees the whole file or none
    except OSError:
        pass  # a read-only or missing home (a sandbox): the simulation is simply not kept


class LoraStepPeak(NamedTuple):
    """What `simulate_7b_lora_step` found: the step's peak, the operator at it, and the bytes at it by category."""

    peak_bytes: int
    peak_op: str
    by_category: tuple[tuple[str, int], ...]
    per_layer_bytes: int


@functools.cache
def simulate_7b_lora_step(
    seq: int,
    micro_batch: int,
    checkpointing: bool,
    rank: int = 16,
    targets: tuple[str, ...] = ATTENTION_PROJECTIONS,
    attn_implementation: str = "sdpa",
    layers: int = 32,
    loss_chunk: int | None = None,
) -> LoraStepPeak:
    """The simulated peak of one LoRA training step of Llama-2-7B: bf16 base weights, LoRA of `rank` (alpha 2 x rank)
    on the `targets` of every layer, causal-LM loss on `micro_batch` sequences of `seq` tokens, AdamW on the adapters
    (fp32 state, as torch keeps it for bf16 parameters), activation checkpointing of every decoder layer if
    `checkpointing` (transformers' non-reentrant default).

    `attn_implementation` defaults to what transformers builds a Llama with when none is asked for: "sdpa"
    (`PreTrainedModel.get_correct_attn_implementation` in transformers/modeling_utils.py, transformers 5.x).
    LlamaModel then passes no mask for a causal batch, and SDPA runs a fused kernel that saves no seq x seq matrix: on
    a CPU, and so under this simulation, `aten._scaled_dot_product_flash_attention_for_cpu`; on a CUDA GPU flash or
    memory-efficient attention. "eager" (memlab.models' default) computes the b·heads·s·s scores with ordinary ops and
    keeps their fp32 softmax and its bf16 copy for backward.

    `loss_chunk` (tokens) computes the loss by chunks instead of through the model's whole fp32 logits
    (`memlab.measure.chunked_lm_loss`: each chunk's logits made, upcast and reduced inside a checkpoint); None, the
    default, is the model's own loss, `model(**batch).loss`.

    It runs `simulate_layer_stack` (two shallow simulations, exact for `layers` identical layers): about a second on a
    laptop, allocating nothing. Results are cached by argument, and immutable, so that a plan search and its check
    can share them: in this process, and on disk (`simulation_cache`) for the next process on this machine with the
    same torch, transformers, peft and simulator code.
    """
    args = (seq, micro_batch, checkpointing, rank, tuple(targets), attn_implementation, layers, loss_chunk)
    cached = _read_cached("simulate_7b_lora_step", args)
    if cached is not None:
        return cached
    result = _simulate_7b_lora_step(*args)
    _write_cached("simulate_7b_lora_step", args, result)
    return result


def _simulate_7b_lora_step(
    seq, micro_batch, checkpointing, rank, targets, attn_implementation, layers, loss_chunk
) -> LoraStepPeak:
    from peft import LoraConfig, get_peft_model

    from memlab.models import build_model, llama2_7b_config

    def build(n: int) -> torch.nn.Module:
        config = llama2_7b_config(num_hidden_layers=n, use_cache=False)
        model = build_model(
            config, dtype=torch.bfloat16, device="meta", attn_implementation=attn_implementation
        )
        model = get_peft_model(
            model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=list(targets), lora_dropout=0.0)
        )
        if checkpointing:
            model.get_base_model().activation_checkpointing_enable()
        return model

    def batch() -> dict:
        ids = torch.zeros(micro_batch, seq, dtype=torch.long)
        return {"input_ids": ids, "labels": ids}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # peft's "no weights on meta" notes, transformers' deprecations
        loss_fn = loss_of if loss_chunk is None else functools.partial(chunked_lm_loss, chunk=loss_chunk)
        result = simulate_layer_stack(build, batch, layers, loss_fn=loss_fn)
    return LoraStepPeak(
        peak_bytes=result["peak_bytes"],
        peak_op=result["peak_op"],
        by_category=tuple(result["by_category"].items()),
        per_layer_bytes=result["per_layer_bytes"],
    )
