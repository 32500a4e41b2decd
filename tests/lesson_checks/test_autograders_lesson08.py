"""Lesson 08's checks pass the solution and fail realistic wrong answers with a helpful message.

The right answers are the solution notebook's own (solutions/08-capstone-7b-lora/08-capstone-7b-lora.ipynb,
loaded by tests/solution_code.py). The graded run (Exercise
8.3) is never trained here: the check evaluates the run handed in, and the tests hand in the one the solution notebook
wrote (tests/fixtures/handed-in/, kept by scripts/execute_solutions.py), or a copy of it with a wrong detail. Every check is also run the grading way (collect in
the kernel, then judge without the learner's objects: the `strict_mode` fixture), with its right answer and with wrong
ones that must fail with the message a learner sees.
"""

from __future__ import annotations

import ast
import inspect
import json
import shutil
import tempfile
import textwrap
import time
from pathlib import Path

import nbformat
import pytest
import torch
from check_helpers import failure
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file, save_file
from solution_code import solution

import autograders.kit as kit
import autograders.lesson08 as l08
from autograders.kit import CheckFailed, NotGradedHere
from autograders.lesson08 import (
    BATCH,
    HEADROOM,
    MICRO_BATCHES,
    check_add_lora,
    check_graded_run,
    check_measure_lora_step,
    check_merged_weight,
    check_plan_for,
)
from autograders.references import lesson08 as ref08
from memlab import estimate, models
from memlab.measure import measure_training_step

#: the solution's own answers (tests/solution_code.py): the right answers every wrong variant below starts from
(
    plan_for,
    add_lora,
    merged_weight,
    measure_lora_step,
) = solution("08-capstone-7b-lora", "plan_for", "add_lora", "merged_weight", "measure_lora_step")

pytestmark = pytest.mark.usefixtures("learner_mode")

GiB = 1024**3
ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "solutions" / "08-capstone-7b-lora" / "08-capstone-7b-lora.ipynb"
HANDED_IN_RUN = ROOT / "tests" / "fixtures" / "handed-in" / "08-capstone-7b-lora" / "capstone-run"
DEVICE = torch.device("cpu")
TARGETS = list(estimate.ATTENTION_PROJECTIONS)


def stub(*args, **kwargs):
    # YOUR CODE HERE
    raise NotImplementedError()


# ---- e1: plan_for ------------------------------------------------------------------------------------------------


# every plan_for case simulates a 7B step (over 10 s on 2 cores): the full tier; the wrong plans below stay fast
@pytest.mark.slow
def test_e1_the_solution_passes(capsys):
    check_plan_for(plan_for)
    assert "✓ e1_plan_for: 5 cases passed" in capsys.readouterr().out


def test_e1_the_stub_fails():
    assert "is not written yet" in failure(check_plan_for, stub)


def _variant(**changes):
    """plan_for with one rule changed: `checkpointing` forced, `micro_batch` forced, `headroom`, `units`."""

    def wrong(gpu_gb, seq):
        budget = (1 - changes.get("headroom", HEADROOM)) * gpu_gb * GiB
        for checkpointing in changes.get("order", (False, True)):
            best = None
            for micro_batch in changes.get("micro_batches", MICRO_BATCHES):
                peak = estimate.simulate_7b_lora_step(seq, micro_batch, checkpointing).peak_bytes
                if peak > budget:
                    break
                best = (micro_batch, peak)
            if best is not None:
                micro_batch, peak = best
                return {
                    "checkpointing": checkpointing,
                    "micro_batch": micro_batch,
                    "accumulation": changes.get("accumulation", BATCH // micro_batch),
                    "peak_gib": peak / changes.get("unit", GiB),
                }
        return None

    return wrong


@pytest.mark.parametrize(
    ("wrong", "expected"),
    [
        (_variant(order=(True,)), "checkpointing is on, but a micro-batch fits without it"),
        (_variant(micro_batches=(1,)), "micro-batch 1 wastes the budget: it is not the largest"),
        (_variant(headroom=0.0), "more than the budget of 36.0 GiB (90% of 40 GiB)"),
        (_variant(unit=1e9), 'plan["peak_gib"]'),
        (_variant(accumulation=1), "micro-batch x accumulation should be the batch of 16"),
        (lambda gpu_gb, seq: None, "you returned None (nothing fits), but a plan fits"),
        (_variant(order=(False,)), "case 16 GiB, seq 512: you returned None"),
    ],
    ids=[
        "always-checkpointing",
        "micro-batch-1",
        "no-headroom",
        "decimal-GB",
        "no-accumulation",
        "none",
        "never-ckpt",
    ],
)
def test_e1_wrong_plans_fail_with_a_reason(wrong, expected):
    assert expected in failure(check_plan_for, wrong)


def test_e1_the_expected_plans_are_decided_far_from_the_budget():
    """The public cases are robust to small changes of the simulator between library versions: 3% at least."""
    for gpu, seq in l08.E1_PUBLIC:
        assert ref08.expected_plan(gpu, seq)[1] > 0.03, (gpu, seq)
    assert ref08.expected_plan(16, 4096)[0] is None
    assert ref08.expected_plan(24, 1024)[0] == {"checkpointing": False, "micro_batch": 1, "accumulation": 16}
    for case, gpu, seq, _public in l08._e1_cases(None):  # what the public cases compare with
        assert l08.stored()["plan_for"][case] == ref08.expected_plan(gpu, seq)[0], case


@pytest.mark.slow
def test_e1_the_pairs_never_drawn_are_those_the_simulation_decides_within_3_percent():
    """E1_TOO_CLOSE lets the grading kernel draw its cases without simulating: it must be what the simulation says
    (about a minute and a half: 60 simulations of a 7B step, cached)."""
    too_close = {
        (gpu, seq)
        for gpu in l08.E1_DRAWN_GPUS
        for seq in l08.E1_DRAWN_SEQS
        if ref08.expected_plan(gpu, seq)[1] < 0.03
    }
    assert too_close == l08.E1_TOO_CLOSE


# ---- e2: add_lora ------------------------------------------------------------------------------------------------


def test_e2_the_solution_passes(capsys):
    check_add_lora(add_lora)
    assert "✓ e2_add_lora: 4 cases passed" in capsys.readouterr().out


def _lora(**overrides):
    def wrong(model, rank):
        classifier = type(model).__name__.endswith("ForSequenceClassification")
        fields = dict(
            r=rank,
            lora_alpha=2 * rank,
            lora_dropout=0.05,
            target_modules=TARGETS,
            task_type="SEQ_CLS" if classifier else "CAUSAL_LM",
        )
        fields.update(overrides)
        return get_peft_model(model, LoraConfig(**fields))

    return wrong


@pytest.mark.parametrize(
    ("wrong", "expected"),
    [
        (_lora(task_type=None), "(LoraConfig's task_type says which)"),
        (_lora(lora_alpha=16), "alpha / r"),
        (_lora(target_modules="all-linear"), "LoRA should adapt only the attention projections"),
        (_lora(target_modules=["q_proj", "v_proj"]), "there should be a LoRA layer on each of the"),
        (lambda model, rank: model, "the result (a peft model, from get_peft_model)"),
        (_lora(use_dora=True), "trainable parameters; expected exactly the rank-16 A and B matrices"),
        (_lora(init_lora_weights=False), "the adapted model should compute exactly what the base computed"),
    ],
    ids=["no-task-type", "alpha-16", "all-linear", "q-v-only", "unwrapped", "dora", "random-B"],
)
def test_e2_wrong_adapters_fail_with_a_reason(wrong, expected):
    assert expected in failure(check_add_lora, wrong)


def test_e2_a_frozen_head_fails():
    def frozen_head(model, rank):
        peft_model = add_lora(model, rank)
        for name, p in peft_model.named_parameters():
            if "score" in name:
                p.requires_grad_(False)
        return peft_model

    assert "the classifier's head (score) is frozen" in failure(check_add_lora, frozen_head)


def test_e2_each_side_of_a_case_builds_the_same_base(strict_mode):
    """The learner's base and the check's own are built apart (add_lora changes the one it is given): the same
    class, as the messages name it, and the same weights, drawn cases included."""
    cases = l08._e2_cases()
    assert len(cases) == 6
    for lora_case in cases:
        first, second = lora_case.build(), lora_case.build()
        assert type(first).__name__ == l08.BASE_CLASSES[lora_case.task], lora_case.case
        assert next(first.parameters()).is_meta == lora_case.on_meta
        if not lora_case.on_meta:
            for (name, a), b in zip(first.state_dict().items(), second.state_dict().values()):
                assert torch.equal(a, b), (lora_case.case, name)


# ---- e3: the graded run --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def good_run():
    """The model solution's run, as the solution notebook wrote it and a learner hands it in (kept by
    scripts/execute_solutions.py in tests/fixtures/handed-in/): nothing is trained here."""
    assert HANDED_IN_RUN.joinpath("run.json").is_file(), (
        f"no {HANDED_IN_RUN}: run python scripts/execute_solutions.py 08-capstone-7b-lora"
    )
    return HANDED_IN_RUN


def _handed_in(good_run, run_dir: Path, edit=None) -> Path:
    """A copy of the good run in `run_dir`, its run.json changed by `edit`."""
    shutil.copytree(good_run, run_dir, dirs_exist_ok=True, copy_function=shutil.copyfile)
    if edit is not None:
        run = json.loads((run_dir / "run.json").read_text())
        edit(run)
        (run_dir / "run.json").write_text(json.dumps(run))
    return run_dir


def _check_fails(run_dir: Path) -> str:
    with pytest.raises(CheckFailed) as caught:
        check_graded_run(run_dir)
    return str(caught.value)


def test_e3_the_solution_passes(good_run, tmp_path, capsys):
    check_graded_run(_handed_in(good_run, tmp_path / "run"))
    assert "✓ e3_graded_run: 1 case passed" in capsys.readouterr().out


def test_e3_the_handed_in_run_is_the_committed_solution_s(good_run):
    """The fixture is the run the committed solution notebook printed (same accuracy), with the lesson's config."""
    run = json.loads((good_run / "run.json").read_text())
    nb = nbformat.read(SOLUTION, as_version=4)
    printed = "".join(
        o.get("text", "")
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "stream"
    )
    assert f"accuracy {run['eval']['accuracy']:.3f} on {run['eval']['n']} test reviews" in printed
    assert run["config"]["rank"] == 16 and run["model"] == models.TINY_BASE.name


def _set(path, value):
    def edit(run):
        target = run
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value(target[path[-1]]) if callable(value) else value

    return edit


E3_EDITS = [
    (
        _set(("eval", "accuracy"), lambda a: a + 0.1),
        "the reported accuracy against the check's own evaluation",
    ),
    (_set(("trainable_parameters",), lambda n: n * 2), 'run.json["trainable_parameters"]'),
    (_set(("total_parameters",), lambda n: n - 65_792), 'run.json["total_parameters"]'),
    (_set(("peak_bytes", "train"), lambda b: b * 3), "from a simulated step of the same configuration"),
    (_set(("loss_curve",), lambda c: c[:10]), "one value per optimizer step"),
    (_set(("loss_curve",), lambda c: c[::-1]), "the loss did not go down"),
    (_set(("config", "rank"), 8), "is not the configuration run.json reports"),
    (_set(("device",), "tpu"), "it should be one of ('cpu', 'cuda')"),
    (_set(("eval", "n"), 100), "evaluate on the first 256 test reviews"),
]
E3_IDS = ["accuracy", "trainable", "total", "peak", "short-curve", "rising-curve", "rank", "device", "n"]


@pytest.mark.parametrize(("edit", "expected"), E3_EDITS, ids=E3_IDS)
def test_e3_a_run_that_does_not_match_what_it_reports_fails(good_run, tmp_path, edit, expected):
    assert expected in _check_fails(_handed_in(good_run, tmp_path / "run", edit))


@pytest.mark.parametrize(
    "path, value",
    [
        (("config", "seq"), 1_000_000),
        (("config", "micro_batch"), 10**9),
        (("config", "steps"), "150"),
        (("config", "rank"), True),
    ],
    ids=["seq", "micro-batch", "steps-as-text", "rank-as-bool"],
)
def test_e3_a_run_s_sizes_are_the_tiny_base_s_before_the_judge_works_on_them(
    good_run, tmp_path, strict_mode, path, value, monkeypatch
):
    """The judge evaluates the run at its `seq` and simulates its step: a size no run of the tiny base has (a seq of
    10^6 held 3.2 GiB of the grader's) fails the check before any of that work starts."""
    from autograders import lesson08

    monkeypatch.setattr(lesson08, "eval_accuracy", lambda *a, **k: pytest.fail("evaluated"))
    monkeypatch.setattr(lesson08, "simulated_run_peak", lambda *a, **k: pytest.fail("simulated"))
    message = _check_fails(_handed_in(good_run, tmp_path / "run", _set(path, value)))
    assert (
        f'run.json["config"]["{path[-1]}"] is' in message
        and "a run of the tiny base has a whole number" in message
    )


@pytest.mark.parametrize(
    "change, said",
    [
        ({"r": 100_000}, "r=100000"),
        ({"rank_pattern": {"q_proj": 10**9}}, "rank_pattern"),
        ({"layer_replication": [[0, 4]] * 1000}, "replicates layers"),
        ({"init_lora_weights": "pissa_niter_100000"}, "initialises with 'pissa_niter_100000'"),
        ({"peft_type": "PROMPT_TUNING", "num_virtual_tokens": 10**9}, "not a LoRA adapter's"),
    ],
    ids=["rank", "rank-pattern", "replication", "pissa", "other-peft-type"],
)
def test_e3_an_adapter_config_is_a_tiny_lora_s_before_peft_builds_it(
    good_run, tmp_path, strict_mode, change, said
):
    """The judge loads the handed-in adapter with peft, outside any sandbox: what its adapter_config.json asks peft to
    allocate or compute is bounded to what a LoRA of the tiny base writes, before peft sees it."""
    run_dir = _handed_in(good_run, tmp_path / "run")
    config = json.loads((run_dir / "adapter" / "adapter_config.json").read_text())
    (run_dir / "adapter" / "adapter_config.json").write_text(json.dumps({**config, **change}))
    message = _check_fails(run_dir)
    assert "does not load onto the tiny base" in message and said in message


def test_e3_the_handed_in_adapter_config_is_one_the_bounds_accept(good_run):
    from autograders.lesson08 import adapter_config_problem

    assert (
        adapter_config_problem(json.loads((good_run / "adapter" / "adapter_config.json").read_text())) is None
    )


def test_e3_a_run_made_on_a_gpu_is_evaluated_on_the_cpu(good_run, tmp_path, capsys):
    """A run trained on a GPU and graded on a CPU: its allocator peak is not compared with the CPU simulation, the
    rest is checked as for any run."""
    check_graded_run(_handed_in(good_run, tmp_path / "run", _set(("device",), "cuda")))
    assert "✓ e3_graded_run" in capsys.readouterr().out


def test_e3_no_run_handed_in_says_what_to_run_and_hand_in(tmp_path):
    message = _check_fails(tmp_path / "capstone-run")
    assert "run_capstone(RUN_DIR)" in message and "Hand that folder in with the notebook" in message


def test_e3_a_run_json_that_is_not_json_or_not_a_dict_fails(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "run.json").write_text("{not json")
    assert "is not valid JSON" in _check_fails(tmp_path / "run")
    (tmp_path / "run" / "run.json").write_text("[1, 2]")
    assert "run.json" in _check_fails(tmp_path / "run")


def test_e3_an_accuracy_below_the_bar_fails(good_run, tmp_path, monkeypatch):
    """An honest run below the bar: every count matches, the accuracy is re-evaluated, and it is too low."""
    monkeypatch.setattr(l08, "ACCURACY_BAR", 0.99)
    assert "the bar is 0.99" in _check_fails(_handed_in(good_run, tmp_path / "run"))


def test_e3_an_adapter_other_than_the_one_evaluated_fails(good_run, tmp_path):
    """The check evaluates the weights handed in, not the reported accuracy: untrained adapters (B = 0) next to the
    trained run's run.json."""
    run_dir = _handed_in(good_run, tmp_path / "run")
    weights_file = run_dir / "adapter" / "adapter_model.safetensors"
    weights = load_file(weights_file)
    save_file({k: torch.zeros_like(v) if "lora_B" in k else v for k, v in weights.items()}, weights_file)
    message = _check_fails(run_dir)
    assert "the reported accuracy against the check's own evaluation of your saved adapter" in message


def test_e3_the_lesson_trains_in_a_cell_grading_skips_and_the_check_never_trains():
    """The notebook's one training cell is tagged skip-when-grading (grading/demonstrations.py), and the check
    module never calls the learner's run_capstone."""
    nb = nbformat.read(SOLUTION, as_version=4)
    (training,) = [c for c in nb.cells if c.cell_type == "code" and "run_capstone(RUN_DIR)" in c.source]
    assert "skip-when-grading" in training.metadata.get("tags", [])
    tree = ast.parse(textwrap.dedent(inspect.getsource(l08.check_graded_run.__wrapped__)))
    called = {  # a name called, or the attribute called on a module (`kit.call`)
        n.func.id if isinstance(n.func, ast.Name) else n.func.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, (ast.Name, ast.Attribute))
    }
    assert list(inspect.signature(l08.check_graded_run.__wrapped__).parameters) == ["run_dir"]
    assert "run_capstone" not in called and "call" not in called  # the kit's `call` runs a learner's function


# ---- e4: merged_weight ---------------------------------------------------------------------------------------------


def test_e4_the_solution_passes(capsys):
    check_merged_weight(merged_weight)
    assert "✓ e4_merged_weight: 6 cases passed" in capsys.readouterr().out


def _no_scaling(layer):
    weight = layer.base_layer.weight
    return (
        weight.float() + layer.lora_B["default"].weight.float() @ layer.lora_A["default"].weight.float()
    ).to(weight.dtype)


def _in_place(layer):
    with torch.no_grad():
        layer.base_layer.weight += layer.get_delta_weight("default")
    return layer.base_layer.weight.clone()


def _fp32_out(layer):
    weight = layer.base_layer.weight
    return weight.float() + layer.scaling["default"] * (
        layer.lora_B["default"].weight.float() @ layer.lora_A["default"].weight.float()
    )


@pytest.mark.parametrize(
    ("wrong", "expected"),
    [
        (_no_scaling, "differs from W + (alpha / r) * B @ A"),
        (_in_place, "merged_weight changed the layer's base weight"),
        (_fp32_out, "dtype torch.bfloat16"),
    ],
    ids=["no-scaling", "in-place", "fp32-result"],
)
def test_e4_wrong_merges_fail(wrong, expected):
    assert expected in failure(check_merged_weight, wrong)


# ---- e5: measure_lora_step -----------------------------------------------------------------------------------------


# a 7B layer built and stepped on the CPU, its peak against the simulation (over 10 s on 2 cores): the full tier
@pytest.mark.slow
def test_e5_passes_what_a_cpu_can_check(capsys, no_gpu):
    check_measure_lora_step(measure_lora_step)
    out = " ".join(capsys.readouterr().out.split())  # the kit wraps long messages
    assert out.startswith("e5_measure_lora_step: NOT CHECKED HERE: needs a CUDA GPU (>= 20 GiB)")


# a 7B layer built and stepped on the CPU, its peak against the simulation (over 10 s on 2 cores): the full tier
@pytest.mark.slow
def test_e5_a_step_without_lora_fails(no_gpu):
    def full_model(seq, micro_batch, checkpointing, layers=32, device="cuda"):
        model = models.build_model(
            models.llama2_7b_config(num_hidden_layers=layers, use_cache=False),
            dtype=torch.bfloat16,
            device=device,
        )
        ids = torch.randint(3, 32_000, (micro_batch, seq))
        trace = measure_training_step(
            model, {"input_ids": ids, "labels": ids}, torch.optim.SGD(model.parameters())
        )
        return {"peak_bytes": trace.peak_bytes, "step_time_s": 1.0}

    assert "the peak (the tracker's bytes against the simulation)" in failure(
        check_measure_lora_step, full_model
    )


def test_e5_a_result_without_a_peak_fails(no_gpu):
    message = failure(check_measure_lora_step, lambda *a, **k: {"step_time_s": 1.0})
    assert "missing the key(s) ['peak_bytes']" in message


# ---- graded: collect in the kernel, judge without the learner's objects ----------------------------------------------


@pytest.mark.parametrize(
    ("check_fn", "right", "count", "wrongs"),
    [
        # e1 and e2 collect then judge a right answer and every wrong one (over 10 s each on 2 cores): the full tier
        pytest.param(
            check_plan_for,
            plan_for,
            7,
            [_variant(micro_batches=(1,)), _variant(accumulation=1), _variant(unit=1e9), lambda g, s: None],
            marks=pytest.mark.slow,
        ),
        pytest.param(
            check_add_lora,
            add_lora,
            6,
            [
                _lora(lora_alpha=16),
                _lora(target_modules=["q_proj", "v_proj"]),
                _lora(use_dora=True),
                _lora(init_lora_weights=False),
                lambda model, rank: model,
            ],
            marks=pytest.mark.slow,
        ),
        (check_merged_weight, merged_weight, 10, [_no_scaling, _in_place, _fp32_out]),
    ],
    ids=["e1", "e2", "e4"],
)
def test_graded_a_right_answer_passes_and_wrong_ones_fail_as_a_learner_sees(
    kit_context, check_fn, right, count, wrongs, monkeypatch, capsys
):
    seen = [failure(check_fn, wrong) for wrong in wrongs]  # learner mode: public cases only
    kit_context(kit.STRICT, 20261123)
    assert check_fn(right) is None
    assert f"✓ {check_fn.check_name}: {count} cases passed" in capsys.readouterr().out
    for wrong, message in zip(wrongs, seen):
        assert failure(check_fn, wrong) == message


@pytest.mark.slow  # a 7B plan simulated and an adapter evaluated in a judge: the full tier
def test_graded_e5_runs_its_cpu_stage_then_needs_a_gpu(kit_context, no_gpu, monkeypatch):
    wrong = lambda *a, **k: {"step_time_s": 1.0}  # noqa: E731
    seen = failure(check_measure_lora_step, wrong)
    kit_context(kit.STRICT, 20261123)
    assert (
        check_measure_lora_step.check.rerun
    )  # it measures: under grading, collected again in a fresh process
    with pytest.raises(NotGradedHere, match="needs a CUDA GPU"):
        check_measure_lora_step(measure_lora_step)
    assert failure(check_measure_lora_step, wrong) == seen


@pytest.mark.parametrize(
    ("edit", "expected"),
    [E3_EDITS[i] for i in (0, 1, 3, 5, 6)],
    ids=["accuracy", "trainable", "peak", "rising-curve", "rank"],
)
def test_graded_e3_a_run_that_does_not_match_what_it_reports_fails_as_a_learner_sees(
    kit_context, good_run, tmp_path, monkeypatch, edit, expected
):
    seen = _check_fails(_handed_in(good_run, tmp_path / "learner", edit))
    assert expected in seen
    kit_context(kit.STRICT, 20261123)
    graded = _check_fails(_handed_in(good_run, tmp_path / "graded", edit))
    assert graded == seen.replace(str(tmp_path / "learner"), str(tmp_path / "graded"))


@pytest.mark.slow  # a 7B plan simulated and an adapter evaluated in a judge: the full tier
def test_graded_e3_the_judge_evaluates_the_adapter_it_is_handed_and_signs_it(good_run, tmp_path, strict_mode):
    """The judge never reads the run folder: it loads the recorded adapter onto its own base (the folder is gone by
    then), and names what the adapter learned by its signature: the same for two copies."""
    transcript = kit.collect(check_graded_run.check, (_handed_in(good_run, tmp_path / "first"),), {})
    assert [r.label for r in transcript.records] == ["the run handed in"]
    shutil.rmtree(tmp_path / "first")
    travelled = kit.Transcript.from_data(json.loads(json.dumps(transcript.to_data())))
    verdict = kit.judge(check_graded_run.check, travelled, n_args=1)
    assert verdict.passed and verdict.cases == 1, verdict.message
    assert len(verdict.signature) == l08.SIGNATURE_SIZE
    second = kit._strict(check_graded_run.check, (_handed_in(good_run, tmp_path / "second"),), {})
    assert second.passed and second.signature == verdict.signature


def _signature_of(weights: dict) -> list[float]:
    from peft import PeftModel

    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(HANDED_IN_RUN / "adapter" / "adapter_config.json", folder)
        save_file(weights, f"{folder}/adapter_model.safetensors")
        base, _tokenizer = models.load_tiny_base("seq-cls")
        return l08.adapter_signature(PeftModel.from_pretrained(base, folder))


def test_graded_e3_a_copy_changed_in_a_last_digit_or_padded_is_the_same_work():
    """A friend's adapter with one element moved by one ulp, or with an extra tensor peft does not load, earned 3 of
    3 unflagged (the fingerprint hashed the file's bytes); what the adapter learned is the same, within SAME_WORK.
    Another run's adapter is far from it."""
    from grading.batch import same_work

    weights = load_file(HANDED_IN_RUN / "adapter" / "adapter_model.safetensors")
    original = _signature_of(weights)
    name = sorted(k for k in weights if "lora_B" in k)[0]
    nudged = dict(weights)
    nudged[name] = weights[name].clone()
    nudged[name].view(-1)[0] = torch.nextafter(nudged[name].view(-1)[0], torch.tensor(float("inf")))
    padded = dict(weights, **{"unused.extra.weight": torch.randn(16, 16)})
    generator = torch.Generator().manual_seed(1)
    other = {
        k: v + 0.05 * v.abs().mean() * torch.randn(v.shape, generator=generator) for k, v in weights.items()
    }
    assert _signature_of(nudged) != original  # the ulp is there...
    assert same_work(_signature_of(nudged), original)  # ...and it is the same work
    assert same_work(_signature_of(padded), original)
    assert not same_work(_signature_of(other), original)


@pytest.mark.slow  # a 7B plan simulated and an adapter evaluated in a judge: the full tier
def test_graded_the_kernel_computes_no_expected_value(good_run, tmp_path, strict_mode, no_gpu, monkeypatch):
    """Collect mode (the grading kernel) runs every case's learner steps and none of the reference steps: the
    grading references and every helper that computes an expected value raise here, and collecting still
    completes, with a record for every case."""

    def forbidden(*args, **kwargs):
        raise AssertionError("an expected value was computed in the grading kernel")

    monkeypatch.setattr(kit, "references", forbidden)
    for name in (
        "_expected_plan",
        "stored",
        "_peak",
        "simulate_7b_lora_step",
        "_expected_lora",
        "_reload_adapter",
        "eval_accuracy",
        "simulated_run_peak",
        "_expected_merges",
    ):
        monkeypatch.setattr(l08, name, forbidden)
    for check_fn, args, records in (
        (check_plan_for, (plan_for,), 1 + 7),
        (check_add_lora, (add_lora,), 1 + 6 + 5),  # facts for every case, logits for all but the 7B on meta
        (check_merged_weight, (merged_weight,), 1 + 5 * 2),
        (check_graded_run, (_handed_in(good_run, tmp_path / "run"),), 1),
        (check_measure_lora_step, (measure_lora_step,), 3),  # the CPU stage, then the GPU it lacks
    ):
        transcript = kit.collect(check_fn.check, args, {})
        assert len(transcript.records) == records, (check_fn.check_name, transcript.records)
        assert all(r.failed is None for r in transcript.records), check_fn.check_name
        assert all(r.missing is None for r in transcript.records[:-1]), check_fn.check_name


# ---- each learner's run is their own: a seed drawn per run ---------------------------------------------------------


def _lesson_code(marker: str) -> str:
    """The source of the solution's one code cell that contains `marker`."""
    nb = nbformat.read(SOLUTION, as_version=4)
    (source,) = [c.source for c in nb.cells if c.cell_type == "code" and marker in c.source]
    return source


def _lesson_functions(marker: str, *names: str) -> dict:
    """The functions `names` defined in the cell that contains `marker`, run in a namespace of the lesson's names."""
    import statistics

    from tqdm.auto import tqdm

    tree = ast.parse(_lesson_code(marker))
    defs = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names]
    namespace = {"torch": torch, "time": time, "statistics": statistics, "tqdm": tqdm, "DEVICE": DEVICE}
    exec(compile(ast.Module(body=defs, type_ignores=[]), str(SOLUTION), "exec"), namespace)
    return namespace


def test_e3_each_run_of_the_lesson_draws_its_own_seed():
    """The cell that sets CAPSTONE draws a seed each time it runs: honest runs of the lesson as written are not the
    same run (the grader flags one adapter handed in by two students as copied work)."""
    import os

    seeds = set()
    for _ in range(3):
        namespace = {"SIZES": {"seq": 128, "micro_batch": 8, "accumulation": 2, "lr": 2e-3, "steps": 80}}
        namespace.update(TARGETS=TARGETS, Path=Path, os=os, print=lambda *args, **kwargs: None)
        exec(_lesson_code("CAPSTONE = dict("), namespace)
        seeds.add(namespace["CAPSTONE"]["seed"])
    assert len(seeds) == 3, seeds


def test_e3_runs_with_two_seeds_are_not_the_same_work():
    """Two short runs the lesson's way (torch seeded with the run's seed, train_lora drawing its batches from it):
    with two seeds their adapters are far apart for the grader's comparison, with one seed they are the same work."""
    from grading.batch import same_work

    lesson = _lesson_functions("def train_lora(", "encode", "train_lora")
    reviews = {
        "text": ["a fine film, I loved it"] * 8 + ["dull and far too long"] * 8,
        "label": [1] * 8 + [0] * 8,
    }

    def run(seed: int) -> list[float]:
        torch.manual_seed(seed)
        base, tokenizer = models.load_tiny_base("seq-cls", device=DEVICE)
        model = add_lora(base, 4)
        tensors = lesson["encode"](reviews, tokenizer, 16)
        lesson["train_lora"](
            model, tensors, micro_batch=2, accumulation=1, checkpointing=False, steps=3, lr=1e-2, seed=seed
        )
        return l08.adapter_signature(model)

    first, again, other = run(11), run(11), run(12)
    assert same_work(first, again)
    assert not same_work(first, other)
