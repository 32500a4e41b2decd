"""Checks for lesson 08 — the capstone: a LoRA fine-tune of a 7B model, planned, proved to fit, run and handed in.

No check holds an answer.

- `plan_for` (Exercise 8.1): the check simulates the learner's plan itself (`memlab.estimate.simulate_7b_lora_step`,
  Llama-2-7B on the meta device under FakeTensorMode) and requires the lesson's rules: the peak fits the budget
  (90% of the GPU), micro-batch x accumulation is the batch, no checkpointing where a plan fits without it, and no
  smaller micro-batch than the budget allows. What fits is decided by the check's own simulations, never by the
  learner's numbers; cases too close to the budget to be decided robustly are not drawn.
- `add_lora` (Exercise 8.2): the LoRA layers are counted and inspected (rank, alpha, where they are), every other
  weight must be frozen except a classifier's head, the trainable count must be the adapters' (+ the head), and the
  adapted model must compute what the base computed (LoRA's B starts at zero). Cases include Llama-2-7B on the meta
  device, counted without memory.
- `check_graded_run` (Exercise 8.3) calls the learner's `run_capstone`, reads the run folder it wrote and re-creates
  what it can: it reloads the saved adapter onto the base, counts its parameters, evaluates the accuracy itself, simulates
  one training step of the run's configuration and compares the reported peak with it, and requires the files to
  have been written by this kernel (not copied in).
- `merged_weight` (Exercise 8.4) is compared with peft's own `get_delta_weight` on LoRA layers with random A and B.
- `measure_lora_step` (Exercise 8.5): a one-layer Llama-2-7B on the CPU (the tracker's exact bytes against the
  simulation), then, on a GPU with 24 GB, the full 32 layers (the allocator's peak against the simulation).
"""

from __future__ import annotations

import gc
import json
import math
import numbers
import time
import warnings
from pathlib import Path

import torch

from autograders.kit import (
    CheckFailed,
    call,
    check,
    drawn,
    expect_callable,
    expect_close,
    expect_keys,
    expect_type,
    grading_rng,
    how_far,
    needs_hardware,
)
from memlab import data
from memlab.estimate import ATTENTION_PROJECTIONS, simulate_7b_lora_step, simulate_training_step
from memlab.models import TINY_BASE, build_model, llama2_7b_config, load_tiny_base, tiny_llama_config

GiB = 1024**3
#: the lesson's rules (Exercise 8.1)
BATCH = 16
HEADROOM = 0.10
MICRO_BATCHES = (1, 2, 4, 8, 16)
#: the graded run (Exercise 8.3)
N_EVAL = 256
ACCURACY_BAR = 0.65
#: when this module was imported: before any submitted code under scripts/grade.py
IMPORTED_AT = time.time()


class _Quiet(warnings.catch_warnings):
    """peft's and transformers' warnings about meta tensors and deprecated names: not the learner's business here."""

    def __enter__(self):
        super().__enter__()
        warnings.simplefilter("ignore")


# ---- e1: plan_for ------------------------------------------------------------------------------------------------

#: (gpu GiB, sequence length): public cases, each decided with a margin of more than 3% from the budget
E1_PUBLIC = [(24, 1024), (80, 1024), (40, 2048), (16, 512), (16, 4096)]
E1_DRAWN_GPUS = (12, 16, 20, 24, 32, 40, 48, 64, 80, 96)
E1_DRAWN_SEQS = (256, 512, 768, 1024, 1536, 2048)


def _peak(seq: int, micro_batch: int, checkpointing: bool) -> int:
    return simulate_7b_lora_step(seq, micro_batch, checkpointing).peak_bytes


def expected_plan(gpu_gb: float, seq: int) -> tuple[dict | None, float]:
    """The lesson's rule, by simulation: the plan, and how close (relative) its deciding peaks came to the budget."""
    budget = (1 - HEADROOM) * gpu_gb * GiB
    closest = math.inf
    for checkpointing in (False, True):
        best = None
        for micro_batch in MICRO_BATCHES:
            peak = _peak(seq, micro_batch, checkpointing)
            closest = min(closest, abs(peak - budget) / budget)
            if peak > budget:
                break
            best = micro_batch
        if best is not None:
            return {
                "checkpointing": checkpointing,
                "micro_batch": best,
                "accumulation": BATCH // best,
            }, closest
    return None, closest


def _e1_cases(rng) -> list[tuple[str, float, int]]:
    cases = [(f"{gpu} GiB, seq {seq}", gpu, seq) for gpu, seq in E1_PUBLIC]
    if rng is not None:
        found, tries = 0, 0
        while found < 2 and tries < 12:
            tries += 1
            gpu, seq = rng.choice(E1_DRAWN_GPUS), rng.choice(E1_DRAWN_SEQS)
            if expected_plan(gpu, seq)[1] < 0.03 or (gpu, seq) in E1_PUBLIC:
                continue  # too close to the budget to be decided robustly: draw again
            cases.append((drawn(found, f"{gpu} GiB, seq {seq}"), gpu, seq))
            found += 1
    return cases


def _describe_plan(plan: dict) -> str:
    return f"checkpointing={plan['checkpointing']}, micro-batch {plan['micro_batch']}"


@check("e1_plan_for", points=3)
def check_plan_for(plan_for) -> int:
    expect_callable(plan_for, "plan_for")
    n = 0
    for case, gpu, seq in _e1_cases(grading_rng("e1_plan_for")):
        budget = (1 - HEADROOM) * gpu * GiB
        want, _ = expected_plan(gpu, seq)
        plan = call(plan_for, gpu, seq, case=case)
        if plan is None:
            if want is not None:
                raise CheckFailed(
                    f"case {case}: you returned None (nothing fits), but a plan fits the budget of "
                    f"{budget / GiB:.1f} GiB (90% of {gpu} GiB)."
                )
            n += 1
            continue
        expect_keys(
            plan, ("checkpointing", "micro_batch", "accumulation", "peak_gib"), case=case, what="the plan"
        )
        expect_type(plan["checkpointing"], bool, case=case, what='plan["checkpointing"]')
        for key in ("micro_batch", "accumulation"):
            if not isinstance(plan[key], numbers.Integral) or isinstance(plan[key], bool) or plan[key] < 1:
                raise CheckFailed(f"case {case}: plan[{key!r}] should be a positive int; got {plan[key]!r}.")
        if plan["micro_batch"] not in MICRO_BATCHES:
            raise CheckFailed(
                f"case {case}: the micro-batch should be one of {MICRO_BATCHES}; got {plan['micro_batch']}."
            )
        if plan["micro_batch"] * plan["accumulation"] != BATCH:
            raise CheckFailed(
                f"case {case}: micro-batch x accumulation should be the batch of {BATCH} sequences per optimizer "
                f"step; got {plan['micro_batch']} x {plan['accumulation']}."
            )
        peak = _peak(seq, plan["micro_batch"], plan["checkpointing"])
        expect_type(plan["peak_gib"], numbers.Real, case=case, what='plan["peak_gib"]')
        expect_close(
            float(plan["peak_gib"]),
            peak / GiB,
            case=case,
            what=f'plan["peak_gib"], the simulated peak of your plan ({_describe_plan(plan)})',
            rtol=1e-3,
            reveal=False,
        )
        if peak > budget:
            raise CheckFailed(
                f"case {case}: your plan ({_describe_plan(plan)}) simulates to {peak / GiB:.2f} GiB, more than the "
                f"budget of {budget / GiB:.1f} GiB (90% of {gpu} GiB)."
            )
        if want is None:
            raise CheckFailed(
                f"case {case}: the check's simulation says nothing fits here; your plan says it does."
            )
        if plan["checkpointing"] and not want["checkpointing"]:
            raise CheckFailed(
                f"case {case}: checkpointing is on, but a micro-batch fits without it: every step would recompute "
                "its forward for nothing."
            )
        if plan["micro_batch"] < want["micro_batch"]:
            bigger = 2 * plan["micro_batch"]
            raise CheckFailed(
                f"case {case}: micro-batch {plan['micro_batch']} wastes the budget: micro-batch {bigger} fits too "
                f"({_peak(seq, bigger, plan['checkpointing']) / GiB:.2f} GiB <= {budget / GiB:.1f} GiB), with half "
                "the accumulation steps."
            )
        n += 1
    return n


# ---- e2: add_lora ------------------------------------------------------------------------------------------------


def _e2_cases(rng) -> list[tuple[str, object, int]]:
    """(case, model builder, rank): builders, so that each case starts from an untouched model."""
    cases = [
        ("the tiny pretrained base as a causal LM, rank 16", lambda: load_tiny_base("causal-lm")[0], 16),
        ("the tiny pretrained base as a classifier, rank 8", lambda: load_tiny_base("seq-cls")[0], 8),
        (
            "a random 2-layer Llama classifier with 3 labels, rank 4",
            lambda: build_model(tiny_llama_config(), "seq-cls", num_labels=3),
            4,
        ),
        (
            "Llama-2-7B on the meta device (bf16), rank 16",
            lambda: build_model(llama2_7b_config(), dtype=torch.bfloat16, device="meta"),
            16,
        ),
    ]
    if rng is not None:
        for i in range(2):
            layers, rank = rng.randint(1, 3), rng.choice((2, 4, 32, 64))
            task = rng.choice(("causal-lm", "seq-cls"))
            seed = rng.randrange(1000)
            cases.append(
                (
                    drawn(i, f"a random {layers}-layer Llama ({task}), rank {rank}"),
                    lambda layers=layers, task=task, seed=seed: build_model(
                        tiny_llama_config(num_hidden_layers=layers), task, seed=seed
                    ),
                    rank,
                )
            )
    return cases


def _is_target(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in ATTENTION_PROJECTIONS


@check("e2_add_lora", points=2)
def check_add_lora(add_lora) -> int:
    from peft import PeftModel, PeftModelForCausalLM, PeftModelForSequenceClassification
    from peft.tuners.lora import LoraLayer

    expect_callable(add_lora, "add_lora")
    n = 0
    for case, build, rank in _e2_cases(grading_rng("e2_add_lora")):
        with _Quiet():
            base = build()
        classifier = type(base).__name__.endswith("ForSequenceClassification")
        on_meta = next(base.parameters()).is_meta
        targets = {
            name: m for name, m in base.named_modules() if isinstance(m, torch.nn.Linear) and _is_target(name)
        }
        expected_trainable = sum(rank * (m.in_features + m.out_features) for m in targets.values())
        if classifier:
            expected_trainable += base.score.weight.numel()
        reference_output = None
        if not on_meta:
            base.eval()
            ids = torch.randint(
                3, base.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(n)
            )
            with torch.no_grad():
                reference_output = base(input_ids=ids).logits.clone()

        with _Quiet():
            model = call(add_lora, base, rank, case=case)
        expect_type(model, PeftModel, case=case, what="the result (a peft model, from get_peft_model)")
        kind = PeftModelForSequenceClassification if classifier else PeftModelForCausalLM
        if not isinstance(model, kind):
            raise CheckFailed(
                f"case {case}: for a {type(base).__name__} the result should be a {kind.__name__} (LoraConfig's "
                f"task_type says which); got {type(model).__name__}."
            )
        lora_layers = {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}
        wrong_place = [name for name in lora_layers if not _is_target(name)]
        if wrong_place:
            raise CheckFailed(
                f"case {case}: LoRA should adapt only the attention projections {ATTENTION_PROJECTIONS}; it is also "
                f"on {wrong_place[0]}."
            )
        if len(lora_layers) != len(targets):
            raise CheckFailed(
                f"case {case}: there should be a LoRA layer on each of the {len(targets)} attention projections; "
                f"found {len(lora_layers)}."
            )
        for name, layer in lora_layers.items():
            adapter = layer.active_adapters[0]
            if layer.r[adapter] != rank:
                raise CheckFailed(f"case {case}: {name} has rank {layer.r[adapter]}; asked for {rank}.")
            if not math.isclose(layer.scaling[adapter], 2.0):
                raise CheckFailed(
                    f"case {case}: {name} scales its update by alpha / r = {layer.scaling[adapter]:g}; the lesson's "
                    "alpha is twice the rank (a scaling of 2)."
                )
        trainable = {name: p for name, p in model.named_parameters() if p.requires_grad}
        for name in trainable:
            if "lora_" not in name and not (classifier and ".score." in f".{name}"):
                raise CheckFailed(
                    f"case {case}: {name} is trainable; only the LoRA matrices"
                    + (" and the classifier's head" if classifier else "")
                    + " should be."
                )
        if classifier and not any("score" in name for name in trainable):
            raise CheckFailed(
                f"case {case}: the classifier's head (score) is frozen: it is new and random, so it must train with "
                "the adapters (peft does this for task_type SEQ_CLS)."
            )
        count = sum(p.numel() for p in trainable.values())
        if count != expected_trainable:
            raise CheckFailed(
                f"case {case}: {count:,} trainable parameters; expected exactly the rank-{rank} A and B matrices of "
                "every attention projection"
                + (" plus the head" if classifier else "")
                + f" ({how_far(count, expected_trainable)})."
            )
        if reference_output is not None:
            model.eval()
            with torch.no_grad():
                got = model(input_ids=ids).logits
            if not torch.allclose(got, reference_output, atol=1e-5, rtol=1e-5):
                raise CheckFailed(
                    f"case {case}: the adapted model should compute exactly what the base computed before training "
                    f"(LoRA's B starts at zero); its logits differ by up to {(got - reference_output).abs().max():.3g}."
                )
        n += 1
    return n


# ---- e3: the graded run ------------------------------------------------------------------------------------------

RUN_KEYS = (
    "model",
    "task",
    "device",
    "config",
    "trainable_parameters",
    "total_parameters",
    "peak_bytes",
    "step_time_s",
    "loss_curve",
    "eval",
)
CONFIG_KEYS = (
    "rank",
    "alpha",
    "target_modules",
    "seq",
    "micro_batch",
    "accumulation",
    "checkpointing",
    "dtype",
    "lr",
    "steps",
)


def eval_accuracy(model, tokenizer, seq: int, n: int = N_EVAL, batch: int = 64) -> float:
    """Accuracy on the first `n` test reviews (`data.load_imdb("test", n=n)`), fp32, sequences of `seq` tokens."""
    test = data.load_imdb("test", n=n)
    tokenizer.truncation_side = "left"  # as the lesson: a review's end, its verdict, survives
    enc = tokenizer(
        list(test["text"]), max_length=seq, truncation=True, padding="max_length", return_tensors="pt"
    )
    labels = torch.tensor(list(test["label"]))
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, n, batch):
            logits = model(
                input_ids=enc["input_ids"][i : i + batch], attention_mask=enc["attention_mask"][i : i + batch]
            ).logits
            correct += int((logits.argmax(-1) == labels[i : i + batch]).sum())
    return correct / n


def simulated_run_peak(config: dict) -> int:
    """The simulated peak of one training step of the run's configuration on the tiny base (the check's own)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig

    def build():
        base_config = AutoConfig.from_pretrained(TINY_BASE)
        model = build_model(base_config, "seq-cls", device="meta", dtype=torch.float32)
        model = get_peft_model(
            model,
            LoraConfig(
                r=config["rank"],
                lora_alpha=config["alpha"],
                target_modules=list(config["target_modules"]),
                task_type="SEQ_CLS",
                lora_dropout=0.0,
            ),
        )
        if config["checkpointing"]:
            model.get_base_model().activation_checkpointing_enable()
        model.train()
        return model

    def batch():
        ids = torch.full((config["micro_batch"], config["seq"]), 5, dtype=torch.long)
        return {"input_ids": ids, "labels": torch.zeros(config["micro_batch"], dtype=torch.long)}

    def loss_fn(model, batch):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=config["dtype"] == "bf16"):
            return model(**batch).loss

    with _Quiet():
        return simulate_training_step(build, batch, loss_fn=loss_fn).peak_bytes


def _expect_number(value, *, case: str, what: str, positive: bool = True) -> float:
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value):
        raise CheckFailed(f"case {case}: {what} should be a finite number; got {value!r}.")
    if positive and value <= 0:
        raise CheckFailed(f"case {case}: {what} should be positive; got {value!r}.")
    return float(value)


@check("e3_graded_run", points=3)
def check_graded_run(run_capstone, run_dir) -> int:
    from peft import PeftModel

    expect_callable(run_capstone, "run_capstone")
    case = "your run"
    run_dir = Path(run_dir)
    run = call(run_capstone, run_dir, case=case)
    expect_type(run, dict, case=case, what="the result of run_capstone")
    path = run_dir / "run.json"
    if not path.is_file():
        raise CheckFailed(f"case {case}: run_capstone did not write {path}.")
    if path.stat().st_mtime < IMPORTED_AT:
        raise CheckFailed(
            f"case {case}: {path} was written before this kernel checked anything: run `run_capstone` again."
        )
    try:
        written = json.loads(path.read_text())
    except ValueError as error:
        raise CheckFailed(f"case {case}: {path} is not valid JSON ({error}).") from None
    expect_keys(written, RUN_KEYS, case=case, what="run.json")
    if run != written:
        raise CheckFailed(f"case {case}: the dict `run_capstone` returned is not what it wrote to run.json.")
    config = written["config"]
    expect_keys(config, CONFIG_KEYS, case=case, what='run.json["config"]')
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if written["device"] != device:
        raise CheckFailed(
            f'case {case}: run.json["device"] is {written["device"]!r}; this run was on {device!r}.'
        )
    if written["model"] != TINY_BASE.name or written["task"] != "imdb":
        raise CheckFailed(
            f'case {case}: the graded run fine-tunes {TINY_BASE.name!r} on the task "imdb"; run.json says '
            f"{written['model']!r} / {written['task']!r}."
        )

    # the loss curve: one finite value per optimizer step, going down
    curve = written["loss_curve"]
    expect_type(curve, list, case=case, what='run.json["loss_curve"]')
    if len(curve) != config["steps"]:
        raise CheckFailed(
            f"case {case}: the loss curve should have one value per optimizer step ({config['steps']}); it has "
            f"{len(curve)}."
        )
    for value in curve:
        _expect_number(value, case=case, what="every loss")
    fifth = max(1, len(curve) // 5)
    if sum(curve[-fifth:]) / fifth >= sum(curve[:fifth]) / fifth:
        raise CheckFailed(
            f"case {case}: the loss did not go down (mean of the last fifth >= mean of the first fifth)."
        )
    _expect_number(written["step_time_s"], case=case, what='run.json["step_time_s"]')

    # the adapter: reload it onto the base and count
    adapter_dir = run_dir / "adapter"
    if not (adapter_dir / "adapter_config.json").is_file():
        raise CheckFailed(f"case {case}: no adapter in {adapter_dir}: save it there with save_pretrained.")
    stale = [p.name for p in adapter_dir.iterdir() if p.is_file() and p.stat().st_mtime < IMPORTED_AT]
    if stale:
        raise CheckFailed(
            f"case {case}: {stale[0]} in {adapter_dir} was not written by this run: run it again."
        )
    try:
        with _Quiet():
            base, tokenizer = load_tiny_base("seq-cls")
            model = PeftModel.from_pretrained(base, adapter_dir, is_trainable=True)
    except Exception as error:
        raise CheckFailed(
            f"case {case}: the adapter in {adapter_dir} does not load onto the tiny base ({error})."
        ) from None
    lora = model.peft_config["default"]
    if (
        lora.r != config["rank"]
        or lora.lora_alpha != config["alpha"]
        or set(lora.target_modules) != set(config["target_modules"])
    ):
        raise CheckFailed(
            f"case {case}: the saved adapter (r={lora.r}, alpha={lora.lora_alpha}, on {sorted(lora.target_modules)}) "
            "is not the configuration run.json reports."
        )
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    for key, value in (("trainable_parameters", trainable), ("total_parameters", total)):
        if written[key] != value:
            raise CheckFailed(
                f'case {case}: run.json["{key}"] is {written[key]!r}; the reloaded adapter on the base has a '
                f"different count ({how_far(written[key], value) if isinstance(written[key], numbers.Real) else 'not a number'})."
            )

    # accuracy: evaluated again, here
    reported = written["eval"]
    expect_keys(reported, ("accuracy", "n"), case=case, what='run.json["eval"]')
    if reported["n"] != N_EVAL:
        raise CheckFailed(
            f"case {case}: evaluate on the first {N_EVAL} test reviews; run.json says n={reported['n']}."
        )
    accuracy = eval_accuracy(model, tokenizer, config["seq"])
    expect_close(
        _expect_number(reported["accuracy"], case=case, what="the accuracy"),
        accuracy,
        case=case,
        what="the reported accuracy against the check's own evaluation of your saved adapter",
        atol=3 / N_EVAL,
    )
    if accuracy < ACCURACY_BAR:
        raise CheckFailed(
            f"case {case}: your adapter reaches {accuracy:.3f} accuracy on the {N_EVAL} test reviews; the bar is "
            f"{ACCURACY_BAR}. Train longer or with another learning rate."
        )

    # memory: the reported train peak against a simulated step of the same configuration
    peaks = written["peak_bytes"]
    expect_keys(peaks, ("train", "eval"), case=case, what='run.json["peak_bytes"]')
    train_peak = _expect_number(peaks["train"], case=case, what='run.json["peak_bytes"]["train"]')
    _expect_number(peaks["eval"], case=case, what='run.json["peak_bytes"]["eval"]')
    if device == "cpu":
        simulated = simulated_run_peak(config)
        if not 0.9 * simulated <= train_peak <= 1.25 * simulated:
            raise CheckFailed(
                f"case {case}: the reported training peak is {how_far(train_peak, simulated)} from a simulated step "
                "of the same configuration (allowed: -10% to +25%): measure it with track_memory around the training."
            )
    del model, base
    gc.collect()
    return 1


# ---- e4: merged_weight -------------------------------------------------------------------------------------------


def _e4_cases(rng) -> list[tuple[str, int, int, torch.dtype, int]]:
    """(case, rank, alpha, base dtype, seed)"""
    cases = [
        ("rank 8, alpha 16, fp32 base", 8, 16, torch.float32, 0),
        ("rank 4, alpha 32 (scaling 8), fp32 base", 4, 32, torch.float32, 1),
        ("rank 16, alpha 32, bf16 base", 16, 32, torch.bfloat16, 2),
    ]
    if rng is not None:
        for i in range(2):
            rank, alpha = rng.choice((2, 4, 8, 32)), rng.choice((1, 8, 16, 64))
            cases.append(
                (drawn(i, f"rank {rank}, alpha {alpha}"), rank, alpha, torch.float32, rng.randrange(1000))
            )
    return cases


@check("e4_merged_weight", points=1)
def check_merged_weight(merged_weight) -> int:
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import LoraLayer

    expect_callable(merged_weight, "merged_weight")
    n = 0
    for case, rank, alpha, dtype, seed in _e4_cases(grading_rng("e4_merged_weight")):
        model = build_model(tiny_llama_config(num_hidden_layers=1), dtype=dtype, seed=seed)
        model = get_peft_model(
            model, LoraConfig(r=rank, lora_alpha=alpha, target_modules=["q_proj", "o_proj"])
        )
        generator = torch.Generator().manual_seed(seed)
        for layer in (m for m in model.modules() if isinstance(m, LoraLayer)):
            with torch.no_grad():  # a trained adapter: B is no longer zero
                for weights in (layer.lora_A["default"].weight, layer.lora_B["default"].weight):
                    weights.copy_(torch.randn(weights.shape, generator=generator) * 0.2)
            base = layer.base_layer.weight
            before = base.detach().clone()
            want = (base.float() + layer.get_delta_weight("default").float()).to(dtype)
            got = call(merged_weight, layer, case=case)
            expect_type(got, torch.Tensor, case=case, what="the result")
            if got.shape != base.shape or got.dtype != base.dtype:
                raise CheckFailed(
                    f"case {case}: the merged weight should have the base weight's shape {tuple(base.shape)} and dtype "
                    f"{base.dtype}; got {tuple(got.shape)} {got.dtype}."
                )
            if not torch.equal(base, before):
                raise CheckFailed(
                    f"case {case}: merged_weight changed the layer's base weight; it should return a new tensor."
                )
            tol = 1e-5 if dtype == torch.float32 else 1e-2
            error = (got.float() - want.float()).abs().max().item()
            if not torch.allclose(got.float(), want.float(), atol=tol, rtol=tol):
                raise CheckFailed(
                    f"case {case}: the merged weight differs from W + (alpha / r) * B @ A by up to {error:.3g} "
                    f"(tolerance {tol:g})."
                )
            n += 1
    return n


# ---- e5: measure_lora_step ---------------------------------------------------------------------------------------


def _expect_measurement(result, *, case: str) -> tuple[int, float]:
    expect_keys(result, ("peak_bytes", "step_time_s"), case=case, what="the result")
    peak = _expect_number(result["peak_bytes"], case=case, what='result["peak_bytes"]')
    seconds = _expect_number(result["step_time_s"], case=case, what='result["step_time_s"]')
    return int(peak), seconds


@check("e5_measure_lora_step", points=1)
def check_measure_lora_step(measure_lora_step) -> int:
    expect_callable(measure_lora_step, "measure_lora_step")
    case = "one layer of Llama-2-7B on the CPU, seq 64, micro-batch 1, checkpointing"
    with _Quiet():
        result = call(measure_lora_step, 64, 1, True, layers=1, device="cpu", case=case)
    peak, _ = _expect_measurement(result, case=case)
    simulated = simulate_7b_lora_step(64, 1, True, layers=1).peak_bytes
    expect_close(
        peak,
        simulated,
        case=case,
        what="the peak (the tracker's bytes against the simulation)",
        rtol=0.01,
        reveal=False,
    )
    gc.collect()

    needs_hardware(cuda=True, min_gpu_gb=24, passed="the one-layer CPU stage passed")
    case = "Llama-2-7B on the GPU, seq 1024, micro-batch 1, checkpointing"
    result = call(measure_lora_step, 1024, 1, True, layers=32, device="cuda", case=case)
    peak, _ = _expect_measurement(result, case=case)
    simulated = simulate_7b_lora_step(1024, 1, True).peak_bytes
    expect_close(
        peak,
        simulated,
        case=case,
        what="the allocator's peak against the simulation (cuBLAS workspaces and rounding explain a few per cent)",
        rtol=0.10,
        reveal=False,
    )
    gc.collect()
    torch.cuda.empty_cache()
    return 2
