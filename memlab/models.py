"""Model configs and builders: tiny models for CPU, Llama-2-7B's real shape for counting and simulation.

- ``llama2_7b_config``: the numbers of meta-llama/Llama-2-7b-hf's ``config.json``
  (https://huggingface.co/meta-llama/Llama-2-7b-hf; Touvron et al. 2023, "Llama 2", Table 1),
  6,738,415,616 parameters.
- ``tiny_llama_config`` / ``tiny_bert_config``: the same architectures, small enough to train on a CPU,
  with ``vocab_size=2048`` to match ``memlab.data.make_tokenizer``'s offline fallback.
- ``build_model``: a randomly initialised Hugging Face model for a config and a task, built directly on
  ``device`` in ``dtype`` (no ``.to()`` afterwards: under ``FakeTensorMode`` torch 2.13's ``Module.to()``
  raises "Couldn't swap", and building on ``"meta"`` allocates nothing at all).
- ``from_pretrained_or_random``: real weights if they can be loaded, else the same random init, said so.
- ``load_tiny_base``: the course's own small *pretrained* Llama and its tokenizer (memlab/assets/, built by
  scripts/build_tiny_base.py), for LoRA on a CPU: LoRA needs a trained base, and no Hub checkpoint is reachable
  offline.
- ``mlp``: a small ``nn.Sequential`` for the first lesson and the memory-tracking tests.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn
from transformers import (
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    BertConfig,
    LlamaConfig,
    PretrainedConfig,
)

__all__ = [
    "LLAMA2_7B_PARAMETERS",
    "DEFAULT_ATTENTION",
    "llama2_7b_config",
    "tiny_llama_config",
    "tiny_bert_config",
    "build_model",
    "from_pretrained_or_random",
    "load_tiny_base",
    "TINY_BASE",
    "mlp",
]

LLAMA2_7B_PARAMETERS = 6_738_415_616

# "eager" attention. Both "eager" and "sdpa" run under torch's FakeTensorMode on CPU (checked on torch
# 2.13), but eager computes softmax(QK^T/sqrt(d))V with ordinary ops, so the b*a*s*s score and
# probability tensors are real, autograd-saved tensors: activation memory is the same on CPU, under
# FakeTensorMode and on a GPU, and it matches Korthikanti et al. 2022's formula (the 5as/h term).
# With "sdpa" PyTorch picks a fused kernel (flash, memory-efficient or math) by device, dtype and mask,
# so the measured memory would depend on the backend. Pass attn_implementation="sdpa" to see the
# saving of a fused kernel on a GPU. transformers itself defaults to "sdpa" when none is asked for (5.24:
# modeling_utils.get_correct_attn_implementation): the course keeps "eager" on purpose, for the formula, and
# lessons 04 and 08 plan and measure with "sdpa" beside it.
DEFAULT_ATTENTION = "eager"

_AUTO_CLASSES = {
    "causal-lm": AutoModelForCausalLM,
    "seq-cls": AutoModelForSequenceClassification,
    "masked-lm": AutoModelForMaskedLM,
}


def llama2_7b_config(**overrides) -> LlamaConfig:
    """Llama-2-7B's architecture (``meta-llama/Llama-2-7b-hf`` config.json): 6,738,415,616 parameters.

    ``overrides`` change single fields, e.g. ``num_hidden_layers=2`` for a quick simulation.
    """
    fields = dict(
        vocab_size=32_000,
        hidden_size=4096,
        intermediate_size=11_008,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=32,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        hidden_act="silu",
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=2,
    )
    fields.update(overrides)
    return LlamaConfig(**fields)


def tiny_llama_config(**overrides) -> LlamaConfig:
    """A Llama small enough for a CPU (about 0.36M parameters): 2 layers, hidden 64, 4 heads, vocab 2048.

    Token ids match ``memlab.data.make_tokenizer``: ``<unk>``/pad = 0, ``<s>`` = 1, ``</s>`` = 2.
    """
    fields = dict(
        vocab_size=2048,
        hidden_size=64,
        intermediate_size=172,  # about 8/3 * hidden, as in Llama
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    fields.update(overrides)
    return LlamaConfig(**fields)


def tiny_bert_config(**overrides) -> BertConfig:
    """A BERT small enough for a CPU: 2 layers, hidden 64, 4 heads, intermediate 256, vocab 2048, pad id 0."""
    fields = dict(
        vocab_size=2048,
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=512,
        pad_token_id=0,
    )
    fields.update(overrides)
    return BertConfig(**fields)


def _auto_class(task: str):
    if task not in _AUTO_CLASSES:
        raise ValueError(f"task must be one of {sorted(_AUTO_CLASSES)}, got {task!r}")
    return _AUTO_CLASSES[task]


def build_model(
    config: PretrainedConfig,
    task: str = "causal-lm",
    num_labels: int = 2,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    attn_implementation: str = DEFAULT_ATTENTION,
) -> nn.Module:
    """A randomly initialised model for ``config``: ``task`` is "causal-lm", "seq-cls" or "masked-lm".

    The Auto class picks the architecture (``LlamaForCausalLM``, ``LlamaForSequenceClassification``,
    ``BertForSequenceClassification``, ...). Weights are created directly on ``device`` in ``dtype``;
    ``device="meta"`` gives shapes only (no memory), which is how a 7B model is counted on a laptop.
    ``torch.manual_seed(seed)`` runs first, so the same seed gives the same weights on the same device.
    For "seq-cls", ``config.num_labels`` is set and ``config.pad_token_id`` defaults to 0 when unset
    (Llama's classifier uses it to find each row's last real token). ``config`` itself is not modified.
    """
    auto_class = _auto_class(task)
    config = _prepare_config(config, task, num_labels)
    torch.manual_seed(seed)
    with torch.device(device):
        model = auto_class.from_config(config, dtype=dtype, attn_implementation=attn_implementation)
    return model


def _prepare_config(config: PretrainedConfig, task: str, num_labels: int) -> PretrainedConfig:
    """A copy of ``config`` with the classification fields set for "seq-cls"."""
    config = copy.deepcopy(config)
    if task == "seq-cls":
        config.num_labels = num_labels
        if config.pad_token_id is None:
            config.pad_token_id = 0
    return config


def from_pretrained_or_random(
    name: str,
    config_fallback: PretrainedConfig,
    task: str = "causal-lm",
    num_labels: int = 2,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
    attn_implementation: str = DEFAULT_ATTENTION,
) -> nn.Module:
    """Model ``name`` with its pretrained weights if they load, else ``build_model(config_fallback, ...)``.

    The fallback prints one line saying the weights are random, so nobody mistakes its outputs for the
    pretrained model's. Memory is the same either way: it depends on shapes and dtypes, not values.
    Loading uses ``from_pretrained(name, dtype=..., device_map=device)``
    (https://huggingface.co/docs/transformers/main_classes/model#transformers.PreTrainedModel.from_pretrained).
    """
    auto_class = _auto_class(task)
    extra = {"num_labels": num_labels} if task == "seq-cls" else {}
    try:
        model = auto_class.from_pretrained(
            name, dtype=dtype, device_map=str(device), attn_implementation=attn_implementation, **extra
        )
    except Exception as error:
        print(
            f"memlab.models: weights for {name} not available ({type(error).__name__}); "
            f"using random weights built from the fallback {type(config_fallback).__name__} (seed={seed}); "
            "its outputs are not the pretrained model's",
            flush=True,
        )
        return build_model(config_fallback, task, num_labels, device, dtype, seed, attn_implementation)
    if task == "seq-cls" and model.config.pad_token_id is None:
        model.config.pad_token_id = 0
    return model


#: the folder of the course's small pretrained Llama (scripts/build_tiny_base.py says how it was trained)
TINY_BASE = Path(__file__).resolve().parent / "assets" / "tiny-llama-reviews"


def load_tiny_base(
    task: str = "causal-lm",
    num_labels: int = 2,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    attn_implementation: str = DEFAULT_ATTENTION,
):
    """(model, tokenizer) of the course's small pretrained Llama: 4 layers, hidden 128, trained as a causal LM on
    synthetic IMDB reviews, loaded with the same ``from_pretrained`` calls as a Hub checkpoint. For "seq-cls" the
    classification head (``score``) is new, randomly initialised, and ``pad_token_id`` is 0 (the tokenizer's pad).
    """
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(TINY_BASE)
    extra = {"num_labels": num_labels, "pad_token_id": tokenizer.pad_token_id} if task == "seq-cls" else {}
    model = (
        _auto_class(task)
        .from_pretrained(TINY_BASE, dtype=dtype, attn_implementation=attn_implementation, **extra)
        .to(device)
    )
    return model, tokenizer


def mlp(widths: list[int], bias: bool = True) -> nn.Sequential:
    """Linear layers ``widths[0] -> widths[1] -> ... -> widths[-1]`` with a ReLU between consecutive ones.

    ``mlp([784, 512, 10])`` is Linear(784, 512), ReLU, Linear(512, 10): no activation after the last layer.
    """
    if len(widths) < 2:
        raise ValueError(f"need at least an input and an output width, got {widths}")
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        if i > 0:
            layers.append(nn.ReLU())
        layers.append(nn.Linear(fan_in, fan_out, bias=bias))
    return nn.Sequential(*layers)
