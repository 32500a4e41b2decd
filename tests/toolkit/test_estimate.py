"""memlab.estimate: formulas against known numbers, and the FakeTensorMode simulator against real runs."""

import time

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

from memlab import estimate
from memlab.measure import measure_training_step
from memlab.models import build_model, llama2_7b_config, tiny_llama_config


def test_llama2_7b_parameter_count_on_meta_is_fast():
    start = time.perf_counter()
    assert estimate.count_parameters(llama2_7b_config()) == 6_738_415_616
    assert time.perf_counter() - start < 10


def test_count_parameters_trainable_only():
    def frozen_body():
        model = torch.nn.Sequential(torch.nn.Linear(10, 10), torch.nn.Linear(10, 2))
        model[0].requires_grad_(False)
        return model

    assert estimate.count_parameters(frozen_body) == 110 + 22
    assert estimate.count_parameters(frozen_body, trainable_only=True) == 22


def test_model_state_bytes_conventions():
    zero = estimate.model_state_bytes(1_000)  # bf16 weights + grads, fp32 master, AdamW
    assert zero == {
        "weights": 2000,
        "gradients": 2000,
        "master weights": 4000,
        "optimizer state": 8000,
        "total": 16000,
    }
    fp32 = estimate.model_state_bytes(1_000, weights="fp32", grads="fp32", master_weights=None)
    assert fp32["total"] == 16_000  # 4 + 4 + 8: same total, no master copy
    lora = estimate.model_state_bytes(1_000_000, n_trainable=1_000)
    assert lora["weights"] == 2_000_000 and lora["total"] == 2_000_000 + 14 * 1_000
    assert estimate.model_state_bytes(10, optimizer="adamw-8bit")["optimizer state"] == 20


def test_activation_bytes_korthikanti():
    # Llama-2-7B shape, s=2048, b=1: per layer s*b*h*(34 + 5*a*s/h) = 2048*4096*(34 + 80) bytes
    dims = dict(seq=2048, batch=1, hidden=4096, heads=32, layers=32)
    assert estimate.activation_bytes(**dims) == 32 * 2048 * 4096 * 114
    assert estimate.activation_bytes(**dims, recompute="selective") == 32 * 2048 * 4096 * 34
    assert estimate.activation_bytes(**dims, recompute="full") == 32 * 2048 * 4096 * 2
    with pytest.raises(ValueError):
        estimate.activation_bytes(**dims, recompute="some")


def _tiny_batch():
    ids = torch.randint(0, 2048, (4, 32))
    return {"input_ids": ids, "labels": ids}


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointed"])
def test_simulated_step_equals_the_real_tracked_step(checkpointing):
    def build():
        model = build_model(tiny_llama_config(use_cache=False))
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return model.train()

    torch.manual_seed(0)
    model = build()
    real = measure_training_step(model, _tiny_batch(), torch.optim.AdamW(model.parameters()))
    simulated = estimate.simulate_training_step(build, _tiny_batch)
    assert simulated.peak_bytes == real.peak_bytes
    assert [m.current_bytes for m in simulated.marks] == [m.current_bytes for m in real.marks]
    assert [m.peak_bytes for m in simulated.marks] == [m.peak_bytes for m in real.marks]
    assert simulated.peak_by_category == real.peak_by_category


def test_checkpointing_lowers_the_simulated_forward_memory():
    def build(checkpointing):
        model = build_model(tiny_llama_config(use_cache=False, num_hidden_layers=4))
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        return model.train()

    plain = estimate.simulate_training_step(lambda: build(False), _tiny_batch)
    ckpt = estimate.simulate_training_step(lambda: build(True), _tiny_batch)
    assert ckpt.marks[0].current_bytes < plain.marks[0].current_bytes


@pytest.mark.slow
def test_llama2_7b_lora_step_simulates_on_cpu_in_under_a_minute():
    from peft import LoraConfig, get_peft_model

    def build():
        base = build_model(llama2_7b_config(use_cache=False), dtype=torch.bfloat16, device="meta")
        return get_peft_model(
            base, LoraConfig(r=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
        )

    def batch():
        ids = torch.randint(0, 32000, (1, 256))
        return {"input_ids": ids, "labels": ids}

    start = time.perf_counter()
    trace = estimate.simulate_training_step(build, batch)
    assert time.perf_counter() - start < 60
    weights_bf16 = 2 * 6_738_415_616
    # bf16 base weights + the fp32 adapters; activations of 256 tokens come on top (about 1.4 GiB by Korthikanti)
    assert weights_bf16 < trace.peak_bytes < weights_bf16 + 3 * 1024**3
    assert trace.marks[-1].by_category["optimizer state"] == pytest.approx(8 * 8_388_608, rel=0.001)


def test_simulation_allocates_fake_tensors_only():
    seen = []

    def build():
        model = build_model(tiny_llama_config(use_cache=False))
        seen.append(model)
        return model

    estimate.simulate_training_step(build, _tiny_batch)
    assert all(isinstance(p, FakeTensor) for p in seen[0].parameters())


@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointing"])
def test_a_deep_stack_extrapolated_from_two_shallow_ones_equals_its_direct_simulation(checkpointing):
    """simulate_layer_stack's affine rule is exact for identical layers: 6 layers from 2 and 4, to the byte."""

    def build(n):
        model = build_model(
            tiny_llama_config(num_hidden_layers=n, hidden_size=128, intermediate_size=344), device="meta"
        )
        if checkpointing:
            model.config.use_cache = False
            model.activation_checkpointing_enable()
        return model

    def batch():
        ids = torch.randint(0, 2048, (2, 64))
        return {"input_ids": ids, "labels": ids}

    stacked = estimate.simulate_layer_stack(build, batch, layers=6)
    direct = estimate.simulate_training_step(lambda: build(6), batch)
    assert stacked["peak_bytes"] == direct.peak_bytes
    assert stacked["by_category"] == direct.peak_by_category
    assert stacked["per_layer_bytes"] > 0 and stacked["probes"][4] > stacked["probes"][2]


def test_the_7b_lora_simulation_is_the_direct_simulation_of_that_model():
    """simulate_7b_lora_step(..., layers=3) is, to the byte, a direct simulation of a 3-layer Llama-2-7B with LoRA r=16
    on q/k/v/o (bf16 base, AdamW, sdpa attention): its cached result is immutable and shared by equal calls."""
    from peft import LoraConfig, get_peft_model

    def build():
        model = build_model(
            llama2_7b_config(num_hidden_layers=3, use_cache=False),
            dtype=torch.bfloat16,
            device="meta",
            attn_implementation="sdpa",
        )
        model = get_peft_model(
            model, LoraConfig(r=16, lora_alpha=32, target_modules=list(estimate.ATTENTION_PROJECTIONS))
        )
        model.get_base_model().activation_checkpointing_enable()
        return model

    def batch():
        ids = torch.zeros(1, 256, dtype=torch.long)
        return {"input_ids": ids, "labels": ids}

    result = estimate.simulate_7b_lora_step(256, 1, True, layers=3)
    assert result.peak_bytes == estimate.simulate_training_step(build, batch).peak_bytes
    assert estimate.simulate_7b_lora_step(256, 1, True, layers=3) is result
    assert isinstance(result.by_category, tuple)
    without = estimate.simulate_7b_lora_step(256, 1, False, layers=3)
    assert without.peak_bytes > result.peak_bytes


def test_the_7b_lora_simulation_uses_the_attention_transformers_builds_by_default():
    """Lesson 08 plans with the library's default: the simulator's default attention is what transformers picks when
    none is asked for ("sdpa" in 5.x), and it keeps no seq x seq tensor, so at a long sequence it peaks far below
    eager attention without checkpointing."""
    import inspect

    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        default = AutoModelForCausalLM.from_config(
            llama2_7b_config(num_hidden_layers=1)
        ).config._attn_implementation
    assert (
        inspect.signature(estimate.simulate_7b_lora_step).parameters["attn_implementation"].default == default
    )
    sdpa = estimate.simulate_7b_lora_step(1024, 1, False, layers=3)
    eager = estimate.simulate_7b_lora_step(1024, 1, False, layers=3, attn_implementation="eager")
    scores = 3 * 32 * 1024 * 1024 * (4 + 2)  # per layer: the fp32 softmax and its bf16 copy, b·heads·s·s each
    # sdpa keeps its output and a log-sum-exp per row in their place: a few per cent of the scores at this length
    assert 0.9 * scores <= eager.peak_bytes - sdpa.peak_bytes <= scores


def test_a_simulation_is_kept_on_disk_for_the_next_process(monkeypatch, tmp_path):
    """The 7B simulation's result is written to the disk cache and read back instead of simulating again; a damaged
    file is simulated again and rewritten; "off" keeps nothing."""
    monkeypatch.setenv(estimate.CACHE_ENV, str(tmp_path))
    args = (64, 1, True, 16, estimate.ATTENTION_PROJECTIONS, "sdpa", 1)
    calls = []
    fake = estimate.LoraStepPeak(123, "aten::mm", (("activations", 100), ("weights", 23)), 7)
    monkeypatch.setattr(estimate, "_simulate_7b_lora_step", lambda *a: calls.append(a) or fake)
    simulate = estimate.simulate_7b_lora_step.__wrapped__  # past the in-process cache

    assert simulate(*args) == fake and len(calls) == 1
    (kept,) = tmp_path.glob("simulate_7b_lora_step-*.json")
    assert simulate(*args) == fake and len(calls) == 1  # read back, not simulated
    assert simulate(128, *args[1:]) == fake and len(calls) == 2  # other arguments: another entry
    kept.write_text('{"peak_bytes": "lots"')
    assert simulate(*args) == fake and len(calls) == 3  # damaged: simulated again
    assert simulate(*args) == fake and len(calls) == 3  # and rewritten
    monkeypatch.setenv(estimate.CACHE_ENV, "off")
    assert estimate.simulation_cache() is None
    assert simulate(*args) == fake and len(calls) == 4


def test_the_cache_key_holds_the_library_versions_and_the_simulator_code(monkeypatch, tmp_path):
    monkeypatch.setenv(estimate.CACHE_ENV, str(tmp_path))
    before = estimate._cache_path("simulate_7b_lora_step", (64, 1, True))
    estimate._code_key.cache_clear()
    import importlib.metadata as metadata

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "0.0" if name == "peft" else real(name))
    try:
        assert estimate._cache_path("simulate_7b_lora_step", (64, 1, True)) != before
    finally:
        monkeypatch.setattr(metadata, "version", real)
        estimate._code_key.cache_clear()
    assert estimate._cache_path("simulate_7b_lora_step", (64, 1, True)) == before


def test_a_loss_by_chunks_is_the_models_own_loss_and_gradients():
    """memlab.measure.chunked_lm_loss gives a causal LM's own loss and gradients, ignored labels included, at any chunk
    size (one that does not divide the tokens too), on the model and on a peft model around it."""
    from peft import LoraConfig, get_peft_model

    from memlab.measure import chunked_lm_loss

    torch.manual_seed(0)
    model = build_model(tiny_llama_config(num_hidden_layers=2, vocab_size=500))
    ids = torch.randint(3, 500, (3, 40))
    labels = ids.clone()
    labels[0, :7] = -100  # a prompt the loss leaves out
    batch = {"input_ids": ids, "labels": labels}

    own = model(**batch).loss
    own.backward()
    own_grads = [p.grad.clone() for p in model.parameters()]
    for chunk in (16, 37, 1000):
        model.zero_grad(set_to_none=True)
        loss = chunked_lm_loss(model, batch, chunk)
        loss.backward()
        assert torch.allclose(loss, own, rtol=1e-5), (chunk, loss.item(), own.item())
        for p, g in zip(model.parameters(), own_grads):
            assert torch.allclose(p.grad, g, rtol=1e-4, atol=1e-6), chunk
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj"]))
    assert torch.allclose(chunked_lm_loss(peft_model, batch, 16), peft_model(**batch).loss, rtol=1e-5)


def test_the_7b_simulation_with_a_chunked_loss_keeps_no_whole_logits():
    """With `loss_chunk` the simulated step no longer peaks at the loss's log-softmax backward, and its peak is lower by
    about one batch x sequence x vocabulary fp32 tensor (at 1024 tokens x 2 sequences, checkpointing on)."""
    own = estimate.simulate_7b_lora_step(1024, 2, True, layers=3)
    chunked = estimate.simulate_7b_lora_step(1024, 2, True, layers=3, loss_chunk=256)
    fp32_logits = 2 * 1024 * 32_000 * 4
    assert own.peak_op.startswith("_log_softmax_backward_data")
    assert not chunked.peak_op.startswith("_log_softmax_backward_data")
    assert 0.9 * fp32_logits <= own.peak_bytes - chunked.peak_bytes <= 2 * fp32_logits
