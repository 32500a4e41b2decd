"""Checks for lesson 08 — the capstone: a LoRA fine-tune of a 7B model, planned, proved to fit, run and handed in.

No check holds an answer. Every expected value is computed in a reference step (autograders/kit.py), so under grading
only the judge ever has it; what the learner's code returned or wrote is taken as plain data (dicts, numbers, names,
shapes, tensors, the bytes of files).

- `plan_for` (Exercise 8.1): the check simulates the learner's plan itself (`memlab.estimate.simulate_7b_lora_step`,
  Llama-2-7B on the meta device under FakeTensorMode, with transformers' default attention, sdpa) and requires the lesson's rules: the peak fits the budget
  (90% of the GPU), micro-batch x accumulation is the batch, no checkpointing where a plan fits without it, and no
  smaller micro-batch than the budget allows. What fits is decided by the check's own simulations (reference steps),
  never by the learner's numbers; cases too close to the budget to be decided robustly are not drawn (`E1_TOO_CLOSE`
  lists them, so that drawing a case needs no simulation; the tests hold the list against the simulation). The
  lesson's rule applied to the simulations is the exercise's answer: it is the grading reference's
  (autograders/references/lesson08.py, `expected_plan`), whose plans for the public cases are stored
  (autograders/data/lesson08.json, scripts/make_check_data.py).
- `add_lora` (Exercise 8.2): a learner step builds the case's base, calls `add_lora` and returns what the check
  inspects of the peft model: its kind, its LoRA layers (name, rank, scaling), its trainable parameters (name,
  shape), and then its logits on a fixed input. A reference step builds an identical base for the expected facts:
  the attention projections, the adapters' parameter count (+ a classifier's head), the base's logits (LoRA's B
  starts at zero, so the adapted model must compute them). Cases include Llama-2-7B on the meta device, counted
  without memory.
- `check_graded_run` (Exercise 8.3): the run is trained once, in the learner's notebook (the cell that calls
  `run_capstone(RUN_DIR)`), and handed in with it: the folder `capstone-run/` next to the notebook
  (grading.course.HANDED_IN). The check never trains: a learner step reads the folder (run.json, the adapter's config
  and weights), in the learner's notebook as in grading, where the training cell is skipped
  (grading/demonstrations.py) and the handed-in run is evaluated. The judge re-creates what it can on its own: it
  loads the adapter onto its own copy of the base, counts its parameters, evaluates the accuracy on its own test
  reviews, simulates one training step of the run's configuration and compares the reported peak with it, and
  names what the adapter learned by a signature (`kit.signature`, `adapter_signature`) so that the same adapter
  handed in by different students, even one changed in a last digit or padded with an unused tensor, is flagged.
- `merged_weight` (Exercise 8.4): the learner's merge of LoRA layers with random A and B, against peft's own
  `get_delta_weight` on an identical layer built by the check.
- `measure_lora_step` (Exercise 8.5): the learner's measurement of a one-layer Llama-2-7B on the CPU (the tracker's
  exact bytes against the simulation), then, on a GPU with 20 GiB, the full 32 layers (the allocator's peak against
  the simulation). It measures, so under grading it is collected again in a fresh process (`rerun=True`).
"""

from __future__ import annotations

import functools
import gc
import json
import math
import numbers
import tempfile
import warnings
from pathlib import Path
from typing import NamedTuple

import torch

from autograders import kit
from autograders.kit import _
from memlab import data
from memlab.estimate import ATTENTION_PROJECTIONS, simulate_7b_lora_step, simulate_training_step
from memlab.models import TINY_BASE, build_model, llama2_7b_config, load_tiny_base, tiny_llama_config

GiB = 1024**3
DATA = Path(__file__).resolve().parent / "data" / "lesson08.json"
#: the lesson's rules (Exercise 8.1)
BATCH = 16
HEADROOM = 0.10
MICRO_BATCHES = (1, 2, 4, 8, 16)
#: the graded run (Exercise 8.3)
N_EVAL = 256
ACCURACY_BAR = 0.60


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
#: the pairs of the drawn grid whose plan is decided within 3% of the budget (`expected_plan(gpu, seq)[1] < 0.03`,
#: autograders/references/lesson08.py): never drawn. Listed, so that the grading kernel draws its cases without simulating anything; the tests hold the
#: list against the simulation.
E1_TOO_CLOSE = frozenset({(16, 256), (16, 768), (16, 1536), (20, 1024), (20, 2048)})


def _peak(seq: int, micro_batch: int, checkpointing: bool) -> int:
    return simulate_7b_lora_step(seq, micro_batch, checkpointing).peak_bytes


@functools.cache
def stored() -> dict:
    """The expected values of the public cases (scripts/make_check_data.py, from autograders/references/)."""
    return kit.read_only(json.loads(DATA.read_text()))


def _expected_plan(case: str, gpu: float, seq: int, public: bool) -> dict | None:
    """A reference step: the lesson's plan for a public case, stored; for a drawn one, the grading reference's."""
    if public:
        return stored()["plan_for"][case]
    return kit.references("lesson08").expected_plan(gpu, seq)[0]


def _e1_cases(rng) -> list[tuple[str, float, int, bool]]:
    """(case, GPU GiB, sequence length, public)"""
    cases = [(kit.Case("{gpu} GiB, seq {seq}", gpu=gpu, seq=seq), gpu, seq, True) for gpu, seq in E1_PUBLIC]
    if rng is not None:
        found, tries = 0, 0
        while found < 2 and tries < 12:
            tries += 1
            gpu, seq = rng.choice(E1_DRAWN_GPUS), rng.choice(E1_DRAWN_SEQS)
            if (gpu, seq) in E1_TOO_CLOSE or (gpu, seq) in E1_PUBLIC:
                continue  # too close to the budget to be decided robustly: draw again
            cases.append(
                (kit.drawn(found, kit.Case("{gpu} GiB, seq {seq}", gpu=gpu, seq=seq)), gpu, seq, False)
            )
            found += 1
    return cases


def _describe_plan(plan: dict) -> str:
    return _("checkpointing={checkpointing}, micro-batch {micro_batch}").format(
        checkpointing=plan["checkpointing"], micro_batch=plan["micro_batch"]
    )


@kit.check("e1_plan_for", points=3)
def check_plan_for(plan_for) -> int:
    kit.expect_callable(plan_for, "plan_for")
    n = 0
    for case, gpu, seq, public in _e1_cases(kit.grading_rng("e1_plan_for")):
        budget = (1 - HEADROOM) * gpu * GiB
        want = kit.reference(lambda: _expected_plan(case, gpu, seq, public))  # noqa: B023 - called at once
        plan = kit.call(plan_for, gpu, seq, case=case)
        if plan is None:
            if kit.judging() and want is not None:
                raise kit.CheckFailed(
                    _(
                        "case {case}: you returned None (nothing fits), but a plan fits the budget of "
                        "{budget_gib:.1f} GiB (90% of {gpu_gib} GiB)."
                    ).format(case=case, budget_gib=budget / GiB, gpu_gib=gpu)
                )
            n += 1
            continue
        kit.expect_keys(
            plan, ("checkpointing", "micro_batch", "accumulation", "peak_gib"), case=case, what=_("the plan")
        )
        kit.expect_type(plan["checkpointing"], bool, case=case, what='plan["checkpointing"]')
        for key in ("micro_batch", "accumulation"):
            if not isinstance(plan[key], numbers.Integral) or isinstance(plan[key], bool) or plan[key] < 1:
                raise kit.CheckFailed(
                    _("case {case}: plan[{key}] should be a positive int; got {got}.").format(
                        case=case, key=repr(key), got=repr(plan[key])
                    )
                )
        if plan["micro_batch"] not in MICRO_BATCHES:
            raise kit.CheckFailed(
                _("case {case}: the micro-batch should be one of {choices}; got {got}.").format(
                    case=case, choices=MICRO_BATCHES, got=plan["micro_batch"]
                )
            )
        if plan["micro_batch"] * plan["accumulation"] != BATCH:
            raise kit.CheckFailed(
                _(
                    "case {case}: micro-batch x accumulation should be the batch of {batch} sequences per optimizer "
                    "step; got {micro_batch} x {accumulation}."
                ).format(
                    case=case, batch=BATCH, micro_batch=plan["micro_batch"], accumulation=plan["accumulation"]
                )
            )
        peak = kit.reference(lambda: _peak(seq, plan["micro_batch"], plan["checkpointing"]))  # noqa: B023
        kit.expect_type(plan["peak_gib"], numbers.Real, case=case, what='plan["peak_gib"]')
        kit.expect_close(
            float(plan["peak_gib"]),
            peak if peak is kit.DEFERRED else peak / GiB,
            case=case,
            what=_('plan["peak_gib"], the simulated peak of your plan ({plan})').format(
                plan=_describe_plan(plan)
            ),
            rtol=1e-3,
            reveal=False,
        )
        if kit.judging():
            _judge_plan(plan, want, peak, case=case, gpu=gpu, seq=seq)
        n += 1
    return n


def _judge_plan(plan: dict, want: dict | None, peak: int, *, case: str, gpu: float, seq: int) -> None:
    """The lesson's rules, on the learner's plan (plain data) against the check's own simulations."""
    budget = (1 - HEADROOM) * gpu * GiB
    if peak > budget:
        raise kit.CheckFailed(
            _(
                "case {case}: your plan ({plan}) simulates to {peak_gib:.2f} GiB, more than the "
                "budget of {budget_gib:.1f} GiB (90% of {gpu_gib} GiB)."
            ).format(
                case=case,
                plan=_describe_plan(plan),
                peak_gib=peak / GiB,
                budget_gib=budget / GiB,
                gpu_gib=gpu,
            )
        )
    if want is None:
        raise kit.CheckFailed(
            _("case {case}: the check's simulation says nothing fits here; your plan says it does.").format(
                case=case
            )
        )
    if plan["checkpointing"] and not want["checkpointing"]:
        raise kit.CheckFailed(
            _(
                "case {case}: checkpointing is on, but a micro-batch fits without it: every step would recompute "
                "its forward for nothing."
            ).format(case=case)
        )
    if plan["micro_batch"] < want["micro_batch"]:
        raise kit.CheckFailed(
            _(
                "case {case}: micro-batch {micro_batch} wastes the budget: it is not the largest of "
                "{choices} whose simulated peak fits {budget_gib:.1f} GiB (90% of {gpu_gib} GiB) with "
                "checkpointing={checkpointing}."
            ).format(
                case=case,
                micro_batch=plan["micro_batch"],
                choices=MICRO_BATCHES,
                budget_gib=budget / GiB,
                gpu_gib=gpu,
                checkpointing=plan["checkpointing"],
            )
        )


# ---- e2: add_lora ------------------------------------------------------------------------------------------------

#: the class of every case's base, by task (all are Llamas): what the message names when the result's kind is wrong
BASE_CLASSES = {"causal-lm": "LlamaForCausalLM", "seq-cls": "LlamaForSequenceClassification"}
PEFT_CLASSES = {"causal-lm": "PeftModelForCausalLM", "seq-cls": "PeftModelForSequenceClassification"}


class LoraCase(NamedTuple):
    """One case of `add_lora`: `build()` gives an untouched base, the same every time it is called (each side of the
    check builds its own: the learner's `add_lora` changes the one it is given)."""

    case: str
    build: object
    rank: int
    task: str  # "causal-lm" or "seq-cls"
    on_meta: bool = False  # shapes only: no logits to compare


def _seeded(build):
    """`build` after seeding torch, so that a new random part (the tiny base's classifier head) is the same on every
    call."""

    def seeded():
        torch.manual_seed(0)
        return build()

    return seeded


def _drawn_lora_case(rng, i: int) -> LoraCase:
    layers, rank = rng.randint(1, 3), rng.choice((2, 4, 32, 64))
    task = rng.choice(("causal-lm", "seq-cls"))
    seed = rng.randrange(1000)
    return LoraCase(
        kit.drawn(
            i - 1,
            kit.Case(
                "a random {layers}-layer Llama ({task}), rank {rank}", layers=layers, task=task, rank=rank
            ),
        ),
        lambda: build_model(tiny_llama_config(num_hidden_layers=layers), task, seed=seed),
        rank,
        task,
    )


def _e2_cases() -> list[LoraCase]:
    cases = [
        LoraCase(
            kit.Case("the tiny pretrained base as a causal LM, rank 16"),
            _seeded(lambda: load_tiny_base("causal-lm")[0]),
            16,
            "causal-lm",
        ),
        LoraCase(
            kit.Case("the tiny pretrained base as a classifier, rank 8"),
            _seeded(lambda: load_tiny_base("seq-cls")[0]),
            8,
            "seq-cls",
        ),
        LoraCase(
            kit.Case("a random 2-layer Llama classifier with 3 labels, rank 4"),
            lambda: build_model(tiny_llama_config(), "seq-cls", num_labels=3),
            4,
            "seq-cls",
        ),
        LoraCase(
            kit.Case("Llama-2-7B on the meta device (bf16), rank 16"),
            lambda: build_model(llama2_7b_config(), dtype=torch.bfloat16, device="meta"),
            16,
            "causal-lm",
            on_meta=True,
        ),
    ]
    return cases + kit.drawn_cases("e2_add_lora", 2, _drawn_lora_case)


def _is_target(name: str) -> bool:
    return name.rsplit(".", 1)[-1] in ATTENTION_PROJECTIONS


def _probe_ids(base, index: int) -> torch.Tensor:
    """The fixed input of the `index`-th case (its tokens, drawn from the base's vocabulary)."""
    generator = torch.Generator().manual_seed(index)
    return torch.randint(3, base.config.vocab_size, (2, 12), generator=generator)


def _lora_facts(add_lora, lora_case: LoraCase, index: int, side: dict) -> dict:
    """Learner step: the case's base, adapted by the learner's `add_lora`; what the check inspects of the result.
    The model and the fixed input stay in `side` for the logits (`_adapted_logits`)."""
    from peft import PeftModel, PeftModelForCausalLM, PeftModelForSequenceClassification
    from peft.tuners.lora import LoraLayer

    with _Quiet():
        base = lora_case.build()
    if not lora_case.on_meta:
        base.eval()
        side["ids"] = _probe_ids(base, index)
    with _Quiet():
        model = kit.call(add_lora, base, lora_case.rank, case=lora_case.case)
    kit.expect_type(
        model, PeftModel, case=lora_case.case, what=_("the result (a peft model, from get_peft_model)")
    )
    side["model"] = model
    lora_layers = []
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            adapter = module.active_adapters[0]
            lora_layers.append([name, module.r[adapter], module.scaling[adapter]])
    return {
        "class": type(model).__name__,
        "causal-lm": isinstance(model, PeftModelForCausalLM),
        "seq-cls": isinstance(model, PeftModelForSequenceClassification),
        "lora_layers": lora_layers,
        "trainable": [[name, list(p.shape)] for name, p in model.named_parameters() if p.requires_grad],
    }


def _adapted_logits(side: dict) -> torch.Tensor:
    """Learner step: the adapted model's logits on the case's fixed input, before any training."""
    model = side["model"]
    model.eval()
    with torch.no_grad():
        return model(input_ids=side["ids"]).logits


def _expected_lora(lora_case: LoraCase, index: int) -> dict:
    """Reference step: on the check's own copy of the case's base, the number of attention projections, the
    trainable count of rank-r adapters on them (+ a classifier's head), and the base's logits on the fixed input."""
    with _Quiet():
        base = lora_case.build()
    targets = {
        name: m for name, m in base.named_modules() if isinstance(m, torch.nn.Linear) and _is_target(name)
    }
    trainable = sum(lora_case.rank * (m.in_features + m.out_features) for m in targets.values())
    if lora_case.task == "seq-cls":
        trainable += base.score.weight.numel()
    logits = None
    if not lora_case.on_meta:
        base.eval()
        with torch.no_grad():
            logits = base(input_ids=_probe_ids(base, index)).logits.clone()
    return {"targets": len(targets), "trainable": trainable, "logits": logits}


@kit.check("e2_add_lora", points=2)
def check_add_lora(add_lora) -> int:
    kit.expect_callable(add_lora, "add_lora")
    n = 0
    for index, lora_case in enumerate(_e2_cases()):
        case, rank = lora_case.case, lora_case.rank
        classifier = lora_case.task == "seq-cls"
        side: dict = {}
        facts = kit.learner(case, lambda: _lora_facts(add_lora, lora_case, index, side))  # noqa: B023
        expected = kit.reference(lambda: _expected_lora(lora_case, index))  # noqa: B023
        if not facts[lora_case.task]:
            raise kit.CheckFailed(
                _(
                    "case {case}: for a {base_class} the result should be a "
                    "{peft_class} (LoraConfig's task_type says which); got {got}."
                ).format(
                    case=case,
                    base_class=BASE_CLASSES[lora_case.task],
                    peft_class=PEFT_CLASSES[lora_case.task],
                    got=facts["class"],
                )
            )
        lora_layers = facts["lora_layers"]
        wrong_place = [name for name, _rank, _scaling in lora_layers if not _is_target(name)]
        if wrong_place:
            raise kit.CheckFailed(
                _(
                    "case {case}: LoRA should adapt only the attention projections {projections}; it is also "
                    "on {name}."
                ).format(case=case, projections=ATTENTION_PROJECTIONS, name=wrong_place[0])
            )
        if kit.judging() and len(lora_layers) != expected["targets"]:
            raise kit.CheckFailed(
                _(
                    "case {case}: there should be a LoRA layer on each of the {expected} attention "
                    "projections; found {found}."
                ).format(case=case, expected=expected["targets"], found=len(lora_layers))
            )
        for name, layer_rank, scaling in lora_layers:
            if layer_rank != rank:
                raise kit.CheckFailed(
                    _("case {case}: {name} has rank {got}; asked for {rank}.").format(
                        case=case, name=name, got=layer_rank, rank=rank
                    )
                )
            if not math.isclose(scaling, 2.0):
                raise kit.CheckFailed(
                    _(
                        "case {case}: {name} scales its update by alpha / r = {scaling:g}; the lesson's "
                        "alpha is twice the rank (a scaling of 2)."
                    ).format(case=case, name=name, scaling=scaling)
                )
        trainable = facts["trainable"]
        for name, _shape in trainable:
            if "lora_" not in name and not (classifier and ".score." in f".{name}"):
                text = (
                    _(
                        "case {case}: {name} is trainable; only the LoRA matrices and the classifier's head "
                        "should be."
                    )
                    if classifier
                    else _("case {case}: {name} is trainable; only the LoRA matrices should be.")
                )
                raise kit.CheckFailed(text.format(case=case, name=name))
        if classifier and not any("score" in name for name, _shape in trainable):
            raise kit.CheckFailed(
                _(
                    "case {case}: the classifier's head (score) is frozen: it is new and random, so it must train "
                    "with the adapters (peft does this for task_type SEQ_CLS)."
                ).format(case=case)
            )
        count = sum(math.prod(shape) for _name, shape in trainable)
        if kit.judging() and count != expected["trainable"]:
            text = (
                _(
                    "case {case}: {count:,} trainable parameters; expected exactly the rank-{rank} A and B matrices "
                    "of every attention projection plus the head ({how_far})."
                )
                if classifier
                else _(
                    "case {case}: {count:,} trainable parameters; expected exactly the rank-{rank} A and B matrices "
                    "of every attention projection ({how_far})."
                )
            )
            raise kit.CheckFailed(
                text.format(
                    case=case, count=count, rank=rank, how_far=kit.how_far(count, expected["trainable"])
                )
            )
        if not lora_case.on_meta:
            logits = kit.Case("{case}: the adapted model's logits", case=case)
            got = kit.learner(logits, lambda: _adapted_logits(side))  # noqa: B023
            if kit.judging():
                base_logits = expected["logits"]
                if not torch.allclose(got, base_logits, atol=1e-5, rtol=1e-5):
                    raise kit.CheckFailed(
                        _(
                            "case {case}: the adapted model should compute exactly what the base computed before "
                            "training (LoRA's B starts at zero); its logits differ by up to {difference:.3g}."
                        ).format(case=case, difference=(got - base_logits).abs().max())
                    )
        side.clear()
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
#: the sizes a run of the tiny base can have (whole numbers, inclusive): the judge evaluates the run at its `seq` and
#: simulates its step, so a size past these would cost the grader, outside any sandbox, what the run never did
#: (an evaluation at seq 10^6 held 3.2 GiB for a 1.3 MB submission). `seq`: the tiny base's positions.
RUN_LIMITS = {
    "seq": (1, 512),
    "micro_batch": (1, 256),
    "accumulation": (1, 1024),
    "rank": (1, 128),
    "steps": (1, 100_000),
}


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
        raise kit.CheckFailed(
            _("case {case}: {what} should be a finite number; got {got}.").format(
                case=case, what=what, got=repr(value)
            )
        )
    if positive and value <= 0:
        raise kit.CheckFailed(
            _("case {case}: {what} should be positive; got {got}.").format(
                case=case, what=what, got=repr(value)
            )
        )
    return float(value)


def _adapter_weights(adapter_dir: Path) -> tuple[dict | None, str | None]:
    """The weights `save_pretrained` wrote in `adapter_dir` (name -> tensor; None if it wrote none), or why they do
    not read."""
    try:
        if (adapter_dir / "adapter_model.safetensors").is_file():
            from safetensors.torch import load_file

            return load_file(adapter_dir / "adapter_model.safetensors"), None
        if (adapter_dir / "adapter_model.bin").is_file():  # save_pretrained(..., safe_serialization=False)
            return torch.load(adapter_dir / "adapter_model.bin", map_location="cpu", weights_only=True), None
    except Exception as error:
        return None, str(error)
    return None, None


#: the devices a run may report (memlab.hardware.pick_device's choices); its peak is compared with a simulated step
#: only where it was measured on the CPU (a GPU's allocator peak is not the simulation's)
RUN_DEVICES = ("cpu", "cuda")


def _run_files(run_dir: Path) -> dict:
    """Learner step: what the run left in `run_dir` (run.json's and the adapter config's bytes, the adapter's
    weights)."""
    path, adapter_dir = run_dir / "run.json", run_dir / "adapter"
    adapter_config = adapter_dir / "adapter_config.json"
    weights, weights_error = _adapter_weights(adapter_dir)
    return {
        "run_json_path": str(path),
        "run_json": path.read_bytes() if path.is_file() else None,
        "adapter_dir": str(adapter_dir),
        "adapter_config": adapter_config.read_bytes() if adapter_config.is_file() else None,
        "adapter_weights": weights,
        "adapter_weights_error": weights_error,
    }


#: the length of an adapter's signature: a random projection of what it learned (fixed, seeded), which keeps the
#: distance between two adapters to within a few per cent (Johnson-Lindenstrauss) and costs a few hundred bytes
SIGNATURE_SIZE = 256


def adapter_signature(model) -> list[float]:
    """What a loaded adapter learned, as SIGNATURE_SIZE floats: its LoRA weights as peft loaded them (any other tensor
    a file held is not in the model), in the order of their names, in float64, projected on fixed random directions.
    Two copies of one run, one of them changed in a last digit, are a relative distance of about 1e-7 apart; two runs
    trained apart, of order 1."""
    named = sorted((n, p) for n, p in model.named_parameters() if "lora_" in n)
    flat = torch.cat([p.detach().to("cpu", torch.float64).reshape(-1) for _n, p in named])
    generator = torch.Generator().manual_seed(8)
    projected = torch.zeros(SIGNATURE_SIZE, dtype=torch.float64)
    for start in range(0, len(flat), 65_536):  # the projection a block at a time: a few MiB at most
        chunk = flat[start : start + 65_536]
        directions = torch.randn(SIGNATURE_SIZE, len(chunk), generator=generator, dtype=torch.float64)
        projected += directions @ chunk
    return (projected / SIGNATURE_SIZE**0.5).tolist()


def adapter_config_problem(config) -> str | None:
    """Why an adapter_config.json is not one a LoRA of the tiny base writes (None when it is one): what peft would
    build from it must stay what such a run built. A rank past RUN_LIMITS, per-module ranks past it
    (`rank_pattern`), replicated layers, or an initialisation that computes (PiSSA's SVD, LoftQ) would cost the
    grader, outside any sandbox, what the run never did."""
    low, high = RUN_LIMITS["rank"]

    def rank_ok(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high

    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        return "adapter_config.json is not a LoRA adapter's (peft_type LORA)"
    if not rank_ok(config.get("r")):
        return f"adapter_config.json has r={config.get('r')!r}, not a whole number from {low} to {high}"
    pattern = config.get("rank_pattern") or {}
    if not isinstance(pattern, dict) or not all(rank_ok(v) for v in pattern.values()):
        return f"adapter_config.json has a rank_pattern past r={high}"
    if config.get("layer_replication") or config.get("trainable_token_indices"):
        return (
            "adapter_config.json replicates layers or trains token rows: a LoRA of the tiny base does neither"
        )
    if config.get("init_lora_weights", True) not in (True, False, "gaussian"):
        return f"adapter_config.json initialises with {config.get('init_lora_weights')!r}"
    return None


def _reload_adapter(files: dict):
    """Reference step: the handed-in adapter (its config and weights, as the run wrote them) loaded onto the check's
    own copy of the tiny base, as (model, tokenizer); or, as a string, why it does not load. What the loaded adapter
    learned is its signature, so that the same adapter handed in by different students can be flagged."""
    from peft import PeftModel
    from safetensors.torch import save_file

    weights = files["adapter_weights"]
    with tempfile.TemporaryDirectory() as folder:
        try:
            if files["adapter_weights_error"] is not None:
                raise ValueError(files["adapter_weights_error"])
            problem = adapter_config_problem(json.loads(files["adapter_config"]))
            if problem:  # before peft allocates, or computes, what the configuration asks
                raise ValueError(problem)
            (Path(folder) / "adapter_config.json").write_bytes(files["adapter_config"])
            if weights is not None:
                save_file(weights, Path(folder) / "adapter_model.safetensors")
            with _Quiet():
                base, tokenizer = load_tiny_base("seq-cls")
                model = PeftModel.from_pretrained(base, folder, is_trainable=True)
        except Exception as error:
            return str(error)
    kit.signature(adapter_signature(model))
    return model, tokenizer


@kit.check("e3_graded_run", points=3)
def check_graded_run(run_dir) -> int:
    case = kit.Case("your run")
    files = kit.learner(kit.Case("the run handed in"), lambda: _run_files(Path(run_dir)))
    path = files["run_json_path"]
    if files["run_json"] is None:
        raise kit.CheckFailed(
            _(
                "case {case}: there is no {path}. Run the cell above that calls run_capstone(RUN_DIR): it trains and "
                "writes the run into {run_dir}, next to this notebook. Hand that folder in with the notebook: the "
                "grader evaluates the run you hand in, it does not train again."
            ).format(case=case, path=path, run_dir=run_dir)
        )
    try:
        written = json.loads(files["run_json"].decode("utf-8"))
    except ValueError as error:
        raise kit.CheckFailed(
            _("case {case}: {path} is not valid JSON ({error}).").format(case=case, path=path, error=error)
        ) from None
    kit.expect_type(written, dict, case=case, what="run.json")
    kit.expect_keys(written, RUN_KEYS, case=case, what="run.json")
    config = written["config"]
    kit.expect_keys(config, CONFIG_KEYS, case=case, what='run.json["config"]')
    targets = config["target_modules"]
    if not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
        raise kit.CheckFailed(
            _(
                'case {case}: run.json["config"]["target_modules"] should be a list of module names; got {got}.'
            ).format(case=case, got=repr(targets)[:80])
        )
    for key, (low, high) in RUN_LIMITS.items():
        value = config[key]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise kit.CheckFailed(
                _(
                    'case {case}: run.json["config"]["{key}"] is {value}; a run of the tiny base has a whole number '
                    "from {low} to {high} there."
                ).format(case=case, key=key, value=repr(value)[:40], low=low, high=f"{high:,}")
            )
    device = written["device"]
    if device not in RUN_DEVICES:
        raise kit.CheckFailed(
            _('case {case}: run.json["device"] is {device}; it should be one of {devices}.').format(
                case=case, device=repr(device), devices=RUN_DEVICES
            )
        )
    if written["model"] != TINY_BASE.name or written["task"] != "imdb":
        raise kit.CheckFailed(
            _(
                'case {case}: the graded run fine-tunes {model} on the task "imdb"; run.json says '
                "{got_model} / {got_task}."
            ).format(
                case=case,
                model=repr(TINY_BASE.name),
                got_model=repr(written["model"]),
                got_task=repr(written["task"]),
            )
        )

    # the loss curve: one finite value per optimizer step, going down
    curve = written["loss_curve"]
    kit.expect_type(curve, list, case=case, what='run.json["loss_curve"]')
    if len(curve) != config["steps"]:
        raise kit.CheckFailed(
            _(
                "case {case}: the loss curve should have one value per optimizer step ({steps}); it has {count}."
            ).format(case=case, steps=config["steps"], count=len(curve))
        )
    for value in curve:
        _expect_number(value, case=case, what=_("every loss"))
    fifth = max(1, len(curve) // 5)
    if sum(curve[-fifth:]) / fifth >= sum(curve[:fifth]) / fifth:
        raise kit.CheckFailed(
            _(
                "case {case}: the loss did not go down (mean of the last fifth >= mean of the first fifth)."
            ).format(case=case)
        )
    _expect_number(written["step_time_s"], case=case, what='run.json["step_time_s"]')

    # the adapter: loaded onto the check's own base, and counted
    adapter_dir = files["adapter_dir"]
    if files["adapter_config"] is None:
        raise kit.CheckFailed(
            _("case {case}: no adapter in {adapter_dir}: save it there with save_pretrained.").format(
                case=case, adapter_dir=adapter_dir
            )
        )
    reloaded = kit.reference(lambda: _reload_adapter(files))
    if kit.judging():
        if isinstance(reloaded, str):
            raise kit.CheckFailed(
                _(
                    "case {case}: the adapter in {adapter_dir} does not load onto the tiny base ({error})."
                ).format(case=case, adapter_dir=adapter_dir, error=reloaded)
            )
        model = reloaded[0]
        lora = model.peft_config["default"]
        if (
            lora.r != config["rank"]
            or lora.lora_alpha != config["alpha"]
            or set(lora.target_modules) != set(config["target_modules"])
        ):
            raise kit.CheckFailed(
                _(
                    "case {case}: the saved adapter (r={rank}, alpha={alpha}, on {targets}) "
                    "is not the configuration run.json reports."
                ).format(case=case, rank=lora.r, alpha=lora.lora_alpha, targets=sorted(lora.target_modules))
            )
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in model.parameters())
        for key, value in (("trainable_parameters", trainable), ("total_parameters", total)):
            if written[key] != value:
                difference = (
                    kit.how_far(written[key], value)
                    if isinstance(written[key], numbers.Real)
                    else _("not a number")
                )
                raise kit.CheckFailed(
                    _(
                        'case {case}: run.json["{key}"] is {got}; the reloaded adapter on the base has a '
                        "different count ({how_far})."
                    ).format(case=case, key=key, got=repr(written[key]), how_far=difference)
                )

    # accuracy: evaluated again, by the check
    reported = written["eval"]
    kit.expect_keys(reported, ("accuracy", "n"), case=case, what='run.json["eval"]')
    if reported["n"] != N_EVAL:
        raise kit.CheckFailed(
            _("case {case}: evaluate on the first {n_eval} test reviews; run.json says n={n}.").format(
                case=case, n_eval=N_EVAL, n=reported["n"]
            )
        )
    accuracy = kit.reference(lambda: eval_accuracy(*reloaded, config["seq"]))
    kit.expect_close(
        _expect_number(reported["accuracy"], case=case, what=_("the accuracy")),
        accuracy,
        case=case,
        what=_("the reported accuracy against the check's own evaluation of your saved adapter"),
        atol=3 / N_EVAL,
    )
    if kit.judging() and accuracy < ACCURACY_BAR:
        raise kit.CheckFailed(
            _(
                "case {case}: your adapter reaches {accuracy:.3f} accuracy on the {n_eval} test reviews; the bar is "
                "{bar}. Train longer or with another learning rate."
            ).format(case=case, accuracy=accuracy, n_eval=N_EVAL, bar=ACCURACY_BAR)
        )

    # memory: the reported train peak against a simulated step of the same configuration
    peaks = written["peak_bytes"]
    kit.expect_keys(peaks, ("train", "eval"), case=case, what='run.json["peak_bytes"]')
    train_peak = _expect_number(peaks["train"], case=case, what='run.json["peak_bytes"]["train"]')
    _expect_number(peaks["eval"], case=case, what='run.json["peak_bytes"]["eval"]')
    if device == "cpu":
        simulated = kit.reference(lambda: simulated_run_peak(config))
        if kit.judging() and not 0.9 * simulated <= train_peak <= 1.25 * simulated:
            raise kit.CheckFailed(
                _(
                    "case {case}: the reported training peak is {how_far} from a simulated step of the same "
                    "configuration (allowed: -10% to +25%): measure it with track_memory around the training."
                ).format(case=case, how_far=kit.how_far(train_peak, simulated))
            )
    model = reloaded = None  # the judge's copy of the base, freed
    gc.collect()
    return 1


# ---- e4: merged_weight -------------------------------------------------------------------------------------------

#: the projections the case's one-layer Llama adapts: one LoRA layer each, in the model's order
E4_TARGETS = ("q_proj", "o_proj")


def _drawn_merge_case(rng, i: int) -> tuple[str, int, int, torch.dtype, int]:
    rank, alpha = rng.choice((2, 4, 8, 32)), rng.choice((1, 8, 16, 64))
    name = kit.Case("rank {rank}, alpha {alpha}", rank=rank, alpha=alpha)
    return kit.drawn(i - 1, name), rank, alpha, torch.float32, rng.randrange(1000)


def _e4_cases() -> list[tuple[str, int, int, torch.dtype, int]]:
    """(case, rank, alpha, base dtype, seed)"""
    cases = [
        (kit.Case("rank 8, alpha 16, fp32 base"), 8, 16, torch.float32, 0),
        (kit.Case("rank 4, alpha 32 (scaling 8), fp32 base"), 4, 32, torch.float32, 1),
        (kit.Case("rank 16, alpha 32, bf16 base"), 16, 32, torch.bfloat16, 2),
    ]
    return cases + kit.drawn_cases("e4_merged_weight", 2, _drawn_merge_case)


def _trained_lora_layers(rank: int, alpha: int, dtype: torch.dtype, seed: int) -> list:
    """The case's LoRA layers (a one-layer Llama's `E4_TARGETS`) with random A and B, as after training (B is no
    longer zero): the same on every call."""
    from peft import LoraConfig, get_peft_model
    from peft.tuners.lora import LoraLayer

    model = build_model(tiny_llama_config(num_hidden_layers=1), dtype=dtype, seed=seed)
    model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(E4_TARGETS)))
    generator = torch.Generator().manual_seed(seed)
    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    for layer in layers:
        with torch.no_grad():
            for weights in (layer.lora_A["default"].weight, layer.lora_B["default"].weight):
                weights.copy_(torch.randn(weights.shape, generator=generator) * 0.2)
    return layers


def _expected_merges(rank: int, alpha: int, dtype: torch.dtype, seed: int) -> list[torch.Tensor]:
    """Reference step: W + peft's own `get_delta_weight`, in the base's dtype, for each layer of the case."""
    return [
        (layer.base_layer.weight.float() + layer.get_delta_weight("default").float()).to(dtype)
        for layer in _trained_lora_layers(rank, alpha, dtype, seed)
    ]


def _learner_merge(merged_weight, side: dict, k: int, case: str, args: tuple) -> dict:
    """Learner step: the learner's merge of the k-th layer of the case (the check's layers, built on first use), and
    whether it left the layer's base weight as it was."""
    if "layers" not in side:
        side["layers"] = _trained_lora_layers(*args)
    layer = side["layers"][k]
    base = layer.base_layer.weight
    before = base.detach().clone()
    got = kit.call(merged_weight, layer, case=case)
    return {"merged": got, "base_unchanged": bool(torch.equal(base, before))}


@kit.check("e4_merged_weight", points=1)
def check_merged_weight(merged_weight) -> int:
    kit.expect_callable(merged_weight, "merged_weight")
    n = 0
    for case, rank, alpha, dtype, seed in _e4_cases():
        args = (rank, alpha, dtype, seed)
        side: dict = {}
        wants = kit.reference(lambda: _expected_merges(*args))  # noqa: B023
        for k in range(len(E4_TARGETS)):
            result = kit.learner(case, lambda: _learner_merge(merged_weight, side, k, case, args))  # noqa: B023
            got = result["merged"]
            kit.expect_type(got, torch.Tensor, case=case, what=_("the result"))
            want = None if wants is kit.DEFERRED else wants[k]
            if want is not None and (got.shape != want.shape or got.dtype != want.dtype):
                raise kit.CheckFailed(
                    _(
                        "case {case}: the merged weight should have the base weight's shape {shape} and dtype "
                        "{dtype}; got {got_shape} {got_dtype}."
                    ).format(
                        case=case,
                        shape=tuple(want.shape),
                        dtype=want.dtype,
                        got_shape=tuple(got.shape),
                        got_dtype=got.dtype,
                    )
                )
            if not result["base_unchanged"]:
                raise kit.CheckFailed(
                    _(
                        "case {case}: merged_weight changed the layer's base weight; it should return a new tensor."
                    ).format(case=case)
                )
            if want is not None:
                tol = 1e-5 if dtype == torch.float32 else 1e-2
                error = (got.float() - want.float()).abs().max().item()
                if not torch.allclose(got.float(), want.float(), atol=tol, rtol=tol):
                    raise kit.CheckFailed(
                        _(
                            "case {case}: the merged weight differs from W + (alpha / r) * B @ A by up to {error:.3g} "
                            "(tolerance {tolerance:g})."
                        ).format(case=case, error=error, tolerance=tol)
                    )
            n += 1
    return n


# ---- e5: measure_lora_step ---------------------------------------------------------------------------------------


def _expect_measurement(result, *, case: str) -> tuple[int, float]:
    kit.expect_keys(result, ("peak_bytes", "step_time_s"), case=case, what=_("the result"))
    peak = _expect_number(result["peak_bytes"], case=case, what='result["peak_bytes"]')
    seconds = _expect_number(result["step_time_s"], case=case, what='result["step_time_s"]')
    return int(peak), seconds


@kit.check("e5_measure_lora_step", points=1, rerun=True)
def check_measure_lora_step(measure_lora_step) -> int:
    kit.expect_callable(measure_lora_step, "measure_lora_step")
    case = kit.Case("one layer of Llama-2-7B on the CPU, seq 64, micro-batch 1, checkpointing")
    with _Quiet():
        result = kit.call(measure_lora_step, 64, 1, True, layers=1, device="cpu", case=case)
    peak, _seconds = _expect_measurement(result, case=case)
    simulated = kit.reference(lambda: simulate_7b_lora_step(64, 1, True, layers=1).peak_bytes)
    kit.expect_close(
        peak,
        simulated,
        case=case,
        what=_("the peak (the tracker's bytes against the simulation)"),
        rtol=0.01,
        reveal=False,
    )
    gc.collect()

    # the GPU stage needs the simulated 13.25 GiB (seq 1024, micro-batch 1, checkpointing) plus the CUDA context:
    # 20 GiB of reported capacity
    kit.needs_hardware(cuda=True, min_gpu_gb=20, passed=_("the one-layer CPU stage passed"))
    case = kit.Case("Llama-2-7B on the GPU, seq 1024, micro-batch 1, checkpointing")
    result = kit.call(measure_lora_step, 1024, 1, True, layers=32, device="cuda", case=case)
    peak, _seconds = _expect_measurement(result, case=case)
    simulated = kit.reference(lambda: simulate_7b_lora_step(1024, 1, True).peak_bytes)
    kit.expect_close(
        peak,
        simulated,
        case=case,
        what=_(
            "the allocator's peak against the simulation (cuBLAS workspaces and rounding explain a few per cent)"
        ),
        rtol=0.10,
        reveal=False,
    )
    gc.collect()
    torch.cuda.empty_cache()
    return 2
