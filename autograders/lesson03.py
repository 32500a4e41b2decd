"""Checks for lesson 03 — AMP and GradScaler.

No check holds an answer, and every expected value is computed in a reference step (autograders/kit.py), so under
grading only the judge ever has it. `underflow_fraction`: stored fractions for the public cases
(autograders/data/lesson03.json, made from torch's own casts by autograders/references/lesson03.py, which is not in
the learner release), the reference itself for drawn ones. `DynamicLossScaler`: `torch.amp.GradScaler` driven
through the same steps on an identical model (a reference step); the learner's scaler, its model and optimizer live
only in learner steps, which hand out what each step did (the scaled loss, what step() returned, whether the
optimizer stepped, the parameters, the scale). `amp_train_step`: watched, not compared with a reference step: the
gradients right after backward, the gradients the optimizer applies, the forward pass's dtype and the scaler's calls
(facts a learner step hands out) must agree with each other as the recipe requires; the expected loss is the check's
own forward pass at the parameters before the step. `measure_amp_step` (GPU): compared with what the check sees
from outside the call (the allocator's peak, the time between optimizer steps), measured in the same learner step
as the call (`rerun`: under grading it is collected again in a fresh process). Under grading every check but the GPU
one also draws cases of its own (`drawn_cases`). The checks run on the CPU at tiny sizes, except
`check_measure_amp_step`, which needs a CUDA GPU with bf16 tensor cores; its logic is
`run_measure_amp_step_check(fn, device)`, which the tests also run on the CPU.
"""

from __future__ import annotations

import functools
import json
import math
import numbers
import random
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from autograders import kit
from autograders.kit import _
from memlab.measure import track_memory
from memlab.models import mlp

MiB = 1024**2
INF, NAN = math.inf, math.nan


def _fmt(x: float) -> str:
    """A scale or a count, readably: 65,536 / 2^127 / 0.25."""
    if x != 0 and math.isfinite(x) and abs(x) >= 2**40 and math.log2(abs(x)).is_integer():
        return f"2^{int(math.log2(x))}"
    if float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return f"{x:.6g}"


# ---- e1: underflow_fraction -------------------------------------------------------------------------------------


DATA = Path(__file__).resolve().parent / "data" / "lesson03.json"


def _log_uniform(n: int, low: int, high: int, rng: random.Random) -> torch.Tensor:
    """n normal fp32 values with random signs and mantissas whose binary exponent is uniform in [low, high), built
    from their bits (exactly the same on every machine and torch version)."""
    assert -126 <= low < high <= 128
    bits = []
    for _draw in range(n):
        word = (rng.getrandbits(1) << 31) | ((rng.randrange(low, high) + 127) << 23) | rng.getrandbits(23)
        bits.append(word - (1 << 32) if word >= 1 << 31 else word)
    return torch.tensor(bits, dtype=torch.int32).view(torch.float32)


def _underflow_cases():
    rng = random.Random(3)
    edge = torch.tensor([2.0**-24, 2.0**-25, 1.5 * 2.0**-25, 2.0**-26, 1.0, -(2.0**-25), -(2.0**-24)])
    realistic = _log_uniform(4000, -44, -8, rng).reshape(40, 100)
    with_zeros = _log_uniform(600, -30, -10, rng)
    with_zeros[::2] = 0.0  # half of the entries are exact zeros (a ReLU's dead units, say)
    return [
        (
            kit.Case("values at fp16's subnormal edge (2^-24, 2^-25, 1.5*2^-25, ...), scale 1"),
            [edge],
            1.0,
            torch.float16,
        ),
        (
            kit.Case("three tensors of 1000, 10 and 10 elements, scale 1"),
            [
                _log_uniform(1000, -20, -10, rng),
                _log_uniform(10, -40, -30, rng),
                _log_uniform(10, -5, 0, rng),
            ],
            1.0,
            torch.float16,
        ),
        (kit.Case("a tensor with exact zeros in it, scale 2^4"), [with_zeros], 2.0**4, torch.float16),
        (
            kit.Case("a list with None in it (a frozen parameter), scale 2^10"),
            [realistic, None, with_zeros[:50]],
            2.0**10,
            torch.float16,
        ),
        (
            kit.Case("log-uniform gradients from 2^-44 to 2^-8, scale 2^16"),
            [realistic],
            2.0**16,
            torch.float16,
        ),
        (kit.Case("the same gradients in bf16, scale 1"), [realistic], 1.0, torch.bfloat16),
        (
            kit.Case("a scale that overflows the largest values to inf (inf is not zero), scale 2^16"),
            [_log_uniform(500, -44, 4, rng)],
            2.0**16,
            torch.float16,
        ),
    ]


@functools.cache
def public_underflow() -> dict[str, float]:
    """{case name: fraction} of the public cases, stored (scripts/make_check_data.py)."""
    return kit.read_only(
        {name: float.fromhex(v) for name, v in json.loads(DATA.read_text())["underflow_fraction"].items()}
    )


def _drawn_underflow_case(rng: random.Random, i: int):
    """Gradients, a scale and a format drawn at grading time."""
    low = rng.randint(-60, -20)
    sizes = [rng.randint(1, 300) for _ in range(rng.randint(1, 3))]
    grads = [_log_uniform(n, max(low, -126), rng.randint(-10, 2), rng) for n in sizes]
    scale, dtype = 2.0 ** rng.randint(0, 20), rng.choice([torch.float16, torch.float16, torch.bfloat16])
    name = kit.drawn(
        i,
        kit.Case(
            "{count} tensor(s) of {sizes} elements, scale 2^{power}, {dtype}",
            count=len(grads),
            sizes=sizes,
            power=int(math.log2(scale)),
            dtype=dtype,
        ),
    )
    return name, grads, scale, dtype


def _expected_underflow(name: str, grads, scale: float, dtype: torch.dtype) -> float:
    """A public case's stored fraction; a drawn case's from the grading reference."""
    stored = public_underflow()
    if name in stored:
        return stored[name]
    return kit.references("lesson03").underflow_fraction(grads, scale, dtype)


@kit.check("e1_underflow_fraction", points=2)
def check_underflow_fraction(underflow_fraction) -> int:
    kit.expect_callable(underflow_fraction, "underflow_fraction")
    cases = _underflow_cases() + kit.drawn_cases("e1_underflow_fraction", 3, _drawn_underflow_case)
    for name, grads, scale, dtype in cases:
        expected = kit.reference(lambda: _expected_underflow(name, grads, scale, dtype))  # noqa: B023 - called at once
        copies = [None if t is None else t.clone() for t in grads]
        got = kit.call(underflow_fraction, copies, scale, dtype=dtype, case=name)
        kit.expect_type(got, float, case=name, what=_("the fraction"))
        if not 0.0 <= got <= 1.0:
            raise kit.CheckFailed(
                _("case {case}: the fraction should be between 0 and 1; got {got}.").format(
                    case=name, got=got
                )
            )
        unchanged = kit.learner(
            kit.Case("{case} (the gradients it was given, after the call)", case=name),
            lambda: [b is None or torch.equal(b, a) for b, a in zip(grads, copies)],  # noqa: B023
        )
        if not all(unchanged):
            raise kit.CheckFailed(
                _("case {case}: your function changed the gradients it was given (in place).").format(
                    case=name
                )
            )
        kit.expect_close(
            got, expected, case=name, what=_("the underflow fraction"), rtol=1e-6, atol=1e-9, reveal=False
        )
    return len(cases)


# ---- e2: DynamicLossScaler ----------------------------------------------------------------------------------------

SCALER_METHODS = ("scale", "unscale_", "step", "update", "get_scale")
DEFAULTS = dict(init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000)


def _scaler_cases():
    """(name, hyper-parameters (None: the defaults), steps, {step: injected value}, options)."""
    return [
        (
            kit.Case("default hyper-parameters"),
            None,
            12,
            {3: INF, 6: NAN, 7: INF, 10: -INF},  # two overflows in a row at steps 6 and 7
            dict(optimizer="adam"),
        ),
        (
            kit.Case("growth_interval=3, growth_factor=4, backoff_factor=0.25, init_scale=1024"),
            dict(init_scale=1024.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=3),
            14,
            {6: INF, 10: NAN, 11: NAN},
            dict(optimizer="adam"),
        ),
        (
            kit.Case("unscale_ + clip_grad_norm_ before step, growth_interval=2"),
            dict(init_scale=2.0**12, growth_factor=2.0, backoff_factor=0.5, growth_interval=2),
            8,
            {3: INF},
            dict(optimizer="sgd", clip=0.05),
        ),
        (
            kit.Case("a frozen parameter (its .grad is None), growth_interval=2"),
            dict(init_scale=2.0**8, growth_factor=2.0, backoff_factor=0.5, growth_interval=2),
            6,
            {4: NAN},
            dict(optimizer="adam", frozen=True),
        ),
        (
            kit.Case("init_scale=2^127: growing would overflow float32 to inf, growth_interval=1"),
            dict(init_scale=2.0**127, growth_factor=2.0, backoff_factor=0.5, growth_interval=1),
            6,
            {3: INF},
            dict(optimizer="sgd", loss_weight=2.0**-100),
        ),
    ]


def _scaler_setup(options: dict):
    """A small model, its optimizer and the per-step batches (fixed seeds: identical on every call)."""
    torch.manual_seed(0)
    model = mlp([6, 12, 3])
    if options.get("frozen"):
        model[0].weight.requires_grad_(False)  # still in the optimizer: its .grad stays None
    if options["optimizer"] == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return model, optimizer


def _scaler_batches(n_steps: int):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(8, 6, generator=g), torch.randn(8, 3, generator=g)) for _ in range(n_steps)]


def _inject(model: torch.nn.Module, value: float) -> None:
    """Put a non-finite value into one (already scaled) gradient, as an overflow in backward would."""
    model[2].weight.grad[0, 0] = value


def _kind(value: float) -> str:
    return "NaN" if math.isnan(value) else ("-inf" if value < 0 else "inf")


def _a(event: str) -> str:
    """'an inf', 'a -inf' or 'a NaN', in the kernel's language."""
    return {"inf": _("an inf"), "-inf": _("a -inf"), "NaN": _("a NaN")}[event]


def _first_param_mismatch(params, reference):
    """The first of `params` ([name, tensor] pairs: the learner's model after step()) that differs from the
    reference model's (tensors, in the same order): (name, max abs difference, whether it is not finite), or None."""
    for (name, p), q in zip(params, reference):
        if not torch.allclose(p, q, rtol=1e-6, atol=1e-7, equal_nan=False):
            return name, (p - q).abs().max().item(), not bool(torch.isfinite(p).all())
    return None


def _expected_scale_text(label, prev, expected, got, event, clean, hp) -> str:
    """Why the scale should be `expected` after this step, in words: the whole message for case `label`."""
    fields = dict(
        case=label,
        prev=_fmt(prev),
        expected=_fmt(expected),
        got=_fmt(got),
        clean=clean,
        growth_interval=hp["growth_interval"],
        growth_factor=hp["growth_factor"],
        backoff_factor=hp["backoff_factor"],
    )
    if event is not None:
        return _(
            "case {case}: after update(), the step had {event} gradient, so the scale should go from {prev} to "
            "{expected} (x backoff_factor {backoff_factor:g}) and the count of clean steps restart; got {got}."
        ).format(event=_a(event), **fields)
    if clean == hp["growth_interval"] and expected != prev:
        return _(
            "case {case}: after update(), it was clean step number {clean} in a row "
            "(growth_interval={growth_interval}), so the scale should grow from {prev} to {expected} "
            "(x growth_factor {growth_factor:g}); got {got}."
        ).format(**fields)
    if clean == hp["growth_interval"]:
        return _(
            "case {case}: after update(), it was clean step number {clean} in a row, but {prev} x growth_factor "
            "overflows float32 to inf, so the scale should stay {prev} (keep the scale in float32 as torch does, "
            "and grow it only to a finite value); got {got}."
        ).format(**fields)
    return _(
        "case {case}: after update(), it was clean step number {clean} in a row since the last growth or overflow "
        "(growth_interval={growth_interval}), so the scale should stay {prev}; got {got}."
    ).format(**fields)


class _ReferenceScalerRun:
    """torch.amp.GradScaler driving an identical model through the same steps (a reference step's state)."""

    def __init__(self, hyper: dict, options: dict):
        self.scaler = torch.amp.GradScaler("cpu", **hyper)
        self.model, self.optimizer = _scaler_setup(options)
        self.options = options
        self.stepped = 0
        self.optimizer.register_step_post_hook(lambda *_: self._count())

    def _count(self) -> None:
        self.stepped += 1

    def iteration(self, x, y, injected: float | None) -> dict:
        """One step as the check drives the learner's scaler: the scale before it, whether the optimizer stepped,
        the parameters right after step() and the scale after update()."""
        prev = self.scaler.get_scale()
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(self.options.get("loss_weight", 1.0) * F.mse_loss(self.model(x), y)).backward()
        if injected is not None:
            _inject(self.model, injected)
        if "clip" in self.options:
            self.scaler.unscale_(self.optimizer)
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.options["clip"])
        before = self.stepped
        self.scaler.step(self.optimizer)
        should_step = self.stepped > before
        params = [p.detach().clone() for p in self.model.parameters()]
        self.scaler.update()
        return dict(prev=prev, should_step=should_step, params=params, scale=self.scaler.get_scale())


class _LearnerScalerRun:
    """The learner's scaler, its model and optimizer: built and used only inside learner steps (the judge never has
    them). Each method is one learner step's body and returns plain data."""

    def __init__(self, DynamicLossScaler, name: str, hyper: dict, defaults: bool, options: dict):  # noqa: N803
        self.cls, self.name, self.hyper, self.defaults, self.options = (
            DynamicLossScaler,
            name,
            hyper,
            defaults,
            options,
        )
        self.scaler = self.model = self.optimizer = self.scaled = None
        self.stepped = self.before = 0

    def _count(self) -> None:
        self.stepped += 1

    def start(self):
        """Build the learner's scaler (it must not be torch's), the model and optimizer; get_scale()'s first value."""
        name = self.name
        if self.defaults:
            scaler = kit.call(self.cls, case=name)
        else:
            scaler = kit.call(self.cls, **self.hyper, case=name)
        for method in SCALER_METHODS:
            if not callable(getattr(scaler, method, None)):
                raise kit.CheckFailed(
                    _(
                        "case {case}: your DynamicLossScaler has no method `{method}`; it needs {methods}."
                    ).format(case=name, method=method, methods=", ".join(m + "()" for m in SCALER_METHODS))
                )
        if isinstance(scaler, torch.amp.GradScaler) or any(
            isinstance(value, torch.amp.GradScaler) for value in getattr(scaler, "__dict__", {}).values()
        ):
            raise kit.CheckFailed(
                _(
                    "case {case}: your DynamicLossScaler uses torch.amp.GradScaler; the exercise is to write its "
                    "rules yourself."
                ).format(case=name)
            )
        self.scaler = scaler
        self.model, self.optimizer = _scaler_setup(self.options)
        self.optimizer.register_step_post_hook(lambda *_: self._count())
        return kit.call(scaler.get_scale, case=name)

    def scale(self, x, y, label: str) -> dict:
        """scale(loss) on this step's loss: what it returned (its type, whether backward() can run on it, its value)
        and the loss itself."""
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.options.get("loss_weight", 1.0) * F.mse_loss(self.model(x), y)
        scaled = kit.call(self.scaler.scale, loss, case=label)
        self.scaled = scaled
        tensor = isinstance(scaled, torch.Tensor)
        return {
            "type": type(scaled).__name__,
            "tensor": tensor,
            "requires_grad": tensor and bool(scaled.requires_grad),
            "value": scaled.detach() if tensor else None,
            "loss": loss.item(),
        }

    def backward(self, injected: float | None) -> None:
        """backward() on the scaled loss, then the injected overflow (if this step has one)."""
        self.scaled.backward()
        self.scaled = None
        if injected is not None:
            _inject(self.model, injected)

    def step(self, label: str):
        """unscale_ and clip (where the case asks for it), then step(optimizer): what it returned."""
        if "clip" in self.options:
            kit.call(self.scaler.unscale_, self.optimizer, case=kit.Case("{case} (unscale_)", case=label))
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.options["clip"])
        self.before = self.stepped
        return kit.call(self.scaler.step, self.optimizer, case=label)

    def after_step(self) -> dict:
        """Whether optimizer.step() really ran, and the parameters after it."""
        return {
            "stepped": self.stepped > self.before,
            "params": [[name, p.detach().clone()] for name, p in self.model.named_parameters()],
        }

    def update(self, label: str):
        """update(), then get_scale()."""
        kit.call(self.scaler.update, case=kit.Case("{case} (update)", case=label))
        return kit.call(self.scaler.get_scale, case=label)


def _run_scaler_case(DynamicLossScaler, name, hp, n_steps, injections, options) -> None:  # noqa: N803
    hyper = dict(DEFAULTS) if hp is None else dict(hp)
    side = []  # the learner's run (_LearnerScalerRun), put there by the first learner step: never in the judge
    ref = kit.reference(lambda: _ReferenceScalerRun(hyper, options))

    def start():
        side.append(_LearnerScalerRun(DynamicLossScaler, name, hyper, hp is None, options))
        return side[0].start()

    got_scale = kit.learner(name, start)
    kit.expect_type(got_scale, numbers.Real, case=name, what=_("get_scale() before the first step"))
    init = kit.reference(lambda: ref.scaler.get_scale())
    if kit.judging() and float(got_scale) != init:
        raise kit.CheckFailed(
            _(
                "case {case}: before the first step get_scale() should be init_scale = {init}; got {got}."
            ).format(case=name, init=_fmt(init), got=_fmt(float(got_scale)))
        )

    clean = 0  # clean steps in a row since the last growth (or growth refused) or overflow
    for step, (x, y) in enumerate(_scaler_batches(n_steps), start=1):
        label = kit.Case("{case}, step {step}", case=name, step=step)
        injected = injections.get(step)
        event = None if injected is None else _kind(injected)
        # the reference, on an identical model: the whole step at once
        expected = kit.reference(lambda: ref.iteration(x, y, injected))  # noqa: B023 - called at once
        prev = kit.DEFERRED if expected is kit.DEFERRED else expected["prev"]
        # the learner's scaler
        scaled = kit.learner(kit.Case("{case} (scale)", case=label), lambda: side[0].scale(x, y, label))  # noqa: B023
        if not scaled["tensor"] or not scaled["requires_grad"]:
            raise kit.CheckFailed(
                _(
                    "case {case}: scale(loss) should return a tensor that backward() can be called on (the loss "
                    "times the scale); got a {type}."
                ).format(case=label, type=scaled["type"])
            )
        kit.expect_close(
            scaled["value"].item(),
            kit.DEFERRED if prev is kit.DEFERRED else scaled["loss"] * prev,
            case=label,
            what=_("scale(loss), the loss times the scale"),
            rtol=1e-6,
        )
        kit.learner(kit.Case("{case} (backward)", case=label), lambda: side[0].backward(injected))  # noqa: B023
        returned = kit.learner(label, lambda: side[0].step(label))  # noqa: B023
        after = kit.learner(kit.Case("{case} (after step)", case=label), lambda: side[0].after_step())
        if not isinstance(returned, bool):
            raise kit.CheckFailed(
                _(
                    "case {case}: step(optimizer) should return True or False (whether the optimizer stepped); got "
                    "{got}."
                ).format(case=label, got=repr(returned))
            )
        if returned != after["stepped"]:
            text = (
                _("case {case}: step() returned {returned}, but optimizer.step() was called.")
                if after["stepped"]
                else _("case {case}: step() returned {returned}, but optimizer.step() was not called.")
            )
            raise kit.CheckFailed(text.format(case=label, returned=returned))
        if kit.judging() and returned != expected["should_step"]:
            if event is not None:
                raise kit.CheckFailed(
                    _(
                        "case {case}: the gradients held {event}, so step() should skip optimizer.step() and return "
                        "False; it stepped."
                    ).format(case=label, event=_a(event))
                )
            raise kit.CheckFailed(
                _(
                    "case {case}: the gradients were all finite, so step() should call optimizer.step() and return "
                    "True; it skipped the step."
                ).format(case=label)
            )
        mismatch = _first_param_mismatch(after["params"], expected["params"]) if kit.judging() else None
        if mismatch is not None:
            param, diff, nonfinite = mismatch
            hint = (
                _("Your parameters are not finite: an inf or NaN gradient reached the optimizer.")
                if nonfinite
                else _("Were the gradients divided by the scale exactly once before optimizer.step()?")
            )
            raise kit.CheckFailed(
                _(
                    "case {case}: after step() the parameter {param} differs from torch.amp.GradScaler's run on an "
                    "identical model (max abs difference {diff:.3g}; tolerance ±1e-06 relative + ±1e-07 absolute). "
                    "{hint}"
                ).format(case=label, param=param, diff=diff, hint=hint)
            )
        got_scale = kit.learner(label, lambda: side[0].update(label))  # noqa: B023
        clean = 0 if event is not None else clean + 1
        kit.expect_type(got_scale, numbers.Real, case=label, what=_("get_scale()"))
        if kit.judging() and float(got_scale) != expected["scale"]:
            raise kit.CheckFailed(
                _expected_scale_text(label, prev, expected["scale"], float(got_scale), event, clean, hyper)
            )
        if clean == hyper["growth_interval"]:
            clean = 0  # grown (or growth refused): the count restarts


def _drawn_scaler_case(rng: random.Random, i: int):
    """Hyper-parameters and an overflow schedule drawn at grading time."""
    hp = dict(
        init_scale=2.0 ** rng.randint(0, 20),
        growth_factor=rng.choice([2.0, 3.0, 4.0]),
        backoff_factor=rng.choice([0.5, 0.25, 0.125]),
        growth_interval=rng.randint(1, 4),
    )
    n_steps = rng.randint(6, 12)
    injections = {step: rng.choice([INF, -INF, NAN]) for step in rng.sample(range(1, n_steps + 1), 3)}
    options = dict(optimizer=rng.choice(["adam", "sgd"]))
    if rng.random() < 0.5:
        options["clip"] = rng.choice([0.05, 1.0])
    label = ", ".join(f"{k}={_fmt(v)}" for k, v in hp.items())
    name = kit.Case("{hyper}, overflows at steps {steps}", hyper=label, steps=sorted(injections))
    return kit.drawn(i, name), hp, n_steps, injections, options


@kit.check("e2_dynamic_loss_scaler", points=4)
def check_dynamic_loss_scaler(DynamicLossScaler) -> int:  # noqa: N803 - the learner's class
    kit.expect_callable(DynamicLossScaler, "DynamicLossScaler")
    cases = _scaler_cases() + kit.drawn_cases("e2_dynamic_loss_scaler", 2, _drawn_scaler_case)
    for name, hp, n_steps, injections, options in cases:
        _run_scaler_case(DynamicLossScaler, name, hp, n_steps, injections, options)
    return len(cases)


# ---- e3: amp_train_step --------------------------------------------------------------------------------------------


class _WatchedScaler:
    """What the learner's step gets as its scaler: torch.amp.GradScaler's public methods, forwarded to a real one
    (so only that API may be used), each call recorded in order."""

    def __init__(self, scaler: torch.amp.GradScaler):
        self._inner = scaler
        self.calls: list[str] = []

    def scale(self, outputs):
        self.calls.append("scale")
        return self._inner.scale(outputs)

    def unscale_(self, optimizer):
        self.calls.append("unscale_")
        return self._inner.unscale_(optimizer)

    def step(self, optimizer, *args, **kwargs):
        self.calls.append("step")
        return self._inner.step(optimizer, *args, **kwargs)

    def update(self, new_scale=None):
        self.calls.append("update")
        return self._inner.update(new_scale)

    def get_scale(self):
        return self._inner.get_scale()

    def is_enabled(self):
        return self._inner.is_enabled()


def _train_cases():
    """(name, dtype, max_norm, GradScaler keyword arguments, n_steps, overflow step or None, widths, batch)."""
    widths, batch = [16, 32, 32, 4], 32
    return [
        (
            kit.Case("fp16, max_norm=0.05 (clipping active), GradScaler growth_interval=1"),
            torch.float16,
            0.05,
            dict(growth_interval=1),
            2,
            None,
            widths,
            batch,
        ),
        (kit.Case("fp16, max_norm=100 (no clipping)"), torch.float16, 100.0, {}, 2, None, widths, batch),
        (
            kit.Case("bf16, max_norm=0.05, a disabled GradScaler (bf16 needs none)"),
            torch.bfloat16,
            0.05,
            dict(enabled=False),
            2,
            None,
            widths,
            batch,
        ),
        (
            kit.Case("fp16, an input beyond fp16's range at step 2 (overflow)"),
            torch.float16,
            0.05,
            {},
            3,
            2,
            widths,
            batch,
        ),
        (
            kit.Case("bf16, max_norm=0.05, GradScaler init_scale=2^10, growth_interval=1"),
            torch.bfloat16,
            0.05,
            dict(init_scale=2.0**10, growth_interval=1),
            2,
            None,
            widths,
            batch,
        ),
    ]


def _drawn_train_case(rng: random.Random, i: int):
    dtype = rng.choice([torch.float16, torch.bfloat16])
    max_norm = rng.choice([0.01, 0.05, 0.5, 1000.0])
    options = dict(init_scale=2.0 ** rng.randint(4, 16), growth_interval=rng.randint(1, 3))
    if dtype == torch.bfloat16 and rng.random() < 0.5:
        options = dict(enabled=False)
    n_steps = rng.randint(2, 3)
    overflow = rng.choice([None, n_steps]) if dtype == torch.float16 else None
    widths = [rng.randint(4, 24), rng.randint(8, 40), rng.randint(2, 6)]
    batch = rng.randint(4, 40)
    fields = dict(
        dtype=dtype, max_norm=max_norm, options=options, widths=widths, batch=batch, overflow=overflow
    )
    name = kit.drawn(
        i,
        kit.Case(
            "{dtype}, max_norm={max_norm}, GradScaler({options}), mlp({widths}), batch {batch}, overflow at step "
            "{overflow}",
            **fields,
        )
        if overflow
        else kit.Case(
            "{dtype}, max_norm={max_norm}, GradScaler({options}), mlp({widths}), batch {batch}", **fields
        ),
    )
    return name, dtype, max_norm, options, n_steps, overflow, widths, batch


def _train_batches(n_steps: int, overflow_step: int | None, widths: list[int], batch: int, seed: int = 2):
    g = torch.Generator().manual_seed(seed)
    batches = []
    for step in range(1, n_steps + 1):
        x, y = torch.randn(batch, widths[0], generator=g), torch.randint(0, widths[-1], (batch,), generator=g)
        if step == overflow_step:
            x[0, 0] = 1e5  # beyond fp16's largest value, 65504: inf in the fp16 forward pass
        batches.append((x, y))
    return batches


def _train_model(widths: list[int]) -> torch.nn.Sequential:
    """The model the learner's step trains (seed 0: the same on every call)."""
    torch.manual_seed(0)
    return mlp(widths)


def _autocast_loss(widths: list[int], params, batch, dtype) -> float:
    """The loss of `batch` under autocast on the model at `params`: what the step's forward pass should compute."""
    x, y = batch
    with torch.random.fork_rng(
        devices=[]
    ):  # the check's own copy: the learner's code sees the same random state
        model = mlp(widths)
    with torch.no_grad():
        for p, value in zip(model.parameters(), params):
            p.copy_(value)
        with torch.autocast(device_type=x.device.type, dtype=dtype):
            return F.cross_entropy(model(x), y).item()


def _compare_number(got, expected, scale, *, case, what, rtol, hint_scaled):
    # an overflow step: any non-finite value is right, and so is a finite one (not known in the grading kernel)
    if expected is kit.DEFERRED or not math.isfinite(expected):
        kit.expect_type(got, numbers.Real, case=case, what=what)
        return
    try:
        kit.expect_close(got, expected, case=case, what=what, rtol=rtol, atol=1e-6, reveal=False)
    except kit.CheckFailed as failure:
        ratio = float(got) / expected if expected else math.nan
        if scale > 1 and math.isfinite(ratio) and abs(ratio / scale - 1) < 1e-2:
            raise kit.CheckFailed(
                _("{failure} That is the loss scale ({scale}) times too big: {hint}").format(
                    failure=failure, scale=_fmt(scale), hint=hint_scaled
                )
            ) from None
        raise


def _norm(tensors) -> float:
    return math.sqrt(sum(float(t.double().pow(2).sum()) for t in tensors))


class _WatchedTraining:
    """The model, optimizer and scaler the learner's step mutates, and the hooks that watch it: built and used only
    inside learner steps (the judge never has them). Each method is one learner step's body."""

    def __init__(self, widths: list[int], options: dict, lr: float):
        self.model = _train_model(widths)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)
        self.scaler = _WatchedScaler(torch.amp.GradScaler("cpu", **options))
        self.seen_dtypes, self.raw, self.applied = [], {}, []
        self.scale_before, self.stale = 1.0, False
        model = self.model
        model[0].register_forward_hook(lambda module, args, out: self.seen_dtypes.append(out.dtype))
        for p in model.parameters():  # this backward's gradient, before it is added to whatever .grad holds
            p.register_hook(lambda g, p=p: self.raw.__setitem__(p, g.detach().clone()))
        self.optimizer.register_step_pre_hook(
            lambda opt, args, kwargs: self.applied.append(
                [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]
            )
        )

    def step(self, amp_train_step, batch, max_norm: float, dtype: torch.dtype, label: str):
        """The learner's step on this batch: what it returned."""
        self.scale_before = self.scaler.get_scale()
        self.seen_dtypes.clear(), self.raw.clear(), self.applied.clear(), self.scaler.calls.clear()
        self.stale = any(p.grad is not None for p in self.model.parameters())  # the previous step's gradients
        return kit.call(
            amp_train_step, self.model, batch, self.optimizer, self.scaler, max_norm, dtype=dtype, case=label
        )

    def seen(self) -> dict:
        """What the hooks saw of the step: the scale before it, whether .grad held the previous step's gradients,
        the forward pass's dtypes, the scaler's calls, each parameter's gradient from this backward (None where it
        got none), the gradients each optimizer step applied, and the parameters after the step."""
        params = list(self.model.parameters())
        return {
            "scale": self.scale_before,
            "stale": self.stale,
            "dtypes": [str(d) for d in self.seen_dtypes],
            "calls": list(self.scaler.calls),
            "raw": [self.raw.get(p) for p in params],
            "n_raw": len(self.raw),
            "applied": self.applied,
            "params": [p.detach().clone() for p in params],
        }


def _run_train_case(
    amp_train_step, name, dtype, max_norm, options, n_steps, overflow_step, widths, batch
) -> None:
    """Drive the learner's step and watch it: the gradients right after backward (a post-accumulate hook), the
    gradients the optimizer applies (a step pre-hook), the forward pass's dtype (a forward hook) and the scaler's
    calls. From the first, the check derives what the others must be: unscaled by the scale, clipped to max_norm
    as torch.nn.utils.clip_grad_norm_ does, applied by SGD. No reference step is run: the learner's steps hand out
    what the hooks saw; the expected loss is a reference step's forward pass at the parameters before the step."""
    lr = 0.1
    initial = _train_model(widths)
    names = [n for n, _ in initial.named_parameters()]
    params = [
        p.detach().clone() for p in initial.parameters()
    ]  # before each step: the previous step's result
    side = []  # the learner's side (_WatchedTraining), put there by the first learner step: never in the judge

    def run_step(batch_, label):
        if not side:
            side.append(_WatchedTraining(widths, options, lr))
        return side[0].step(amp_train_step, batch_, max_norm, dtype, label)

    for step, batch_ in enumerate(_train_batches(n_steps, overflow_step, widths, batch), start=1):
        label = kit.Case("{case}, step {step}", case=name, step=step)
        params_before = params
        expected_loss = kit.reference(lambda: _autocast_loss(widths, params_before, batch_, dtype))  # noqa: B023
        stale_message = _(
            "case {case}: the gradients of the previous step were still in .grad and were added to this step's: "
            "clear them with optimizer.zero_grad(set_to_none=True), at the end of each step or at its start."
        ).format(case=label)
        got = kit.learner(label, lambda: run_step(batch_, label))  # noqa: B023 - called at once
        seen = kit.learner(kit.Case("{case} (what the check saw)", case=label), lambda: side[0].seen())
        params, scale_before, stale = seen["params"], seen["scale"], seen["stale"]
        kit.expect_type(got, tuple, case=label, what=_("the result"))
        if len(got) != 2:
            raise kit.CheckFailed(
                _("case {case}: the result should be a pair (loss, grad_norm); got {count} values.").format(
                    case=label, count=len(got)
                )
            )
        loss, norm = got
        for value, what in ((loss, _("the loss")), (norm, _("the gradient norm"))):
            if isinstance(value, torch.Tensor):
                raise kit.CheckFailed(
                    _("case {case}: {what} should be a Python float (use .item()); got a tensor.").format(
                        case=label, what=what
                    )
                )
        seen_dtypes = seen["dtypes"]
        if not seen_dtypes:
            raise kit.CheckFailed(_("case {case}: the model's forward pass was not run.").format(case=label))
        if seen_dtypes[0] != str(dtype):
            raise kit.CheckFailed(
                _(
                    "case {case}: the forward pass should run under torch.autocast(device_type=x.device.type, "
                    "dtype={dtype}); the first Linear layer's output was {got}."
                ).format(case=label, dtype=dtype, got=seen_dtypes[0])
            )
        calls = seen["calls"]
        if calls.count("scale") != 1 or seen["n_raw"] != len(params_before):
            raise kit.CheckFailed(
                _(
                    "case {case}: call scaler.scale(loss).backward() once per step (scale() was called {calls} "
                    "times; {with_grad} of {count} parameters got a gradient)."
                ).format(
                    case=label, calls=calls.count("scale"), with_grad=seen["n_raw"], count=len(params_before)
                )
            )
        if calls.count("update") != 1 or calls[-1] != "update" or "step" not in calls:
            raise kit.CheckFailed(
                _(
                    "case {case}: the scaler's calls were {calls}: call scaler.step(optimizer) and then "
                    "scaler.update() once, at the end of the step."
                ).format(case=label, calls=calls)
            )
        true_grads = [g / scale_before for g in seen["raw"]]  # what backward gave, unscaled
        finite = all(bool(torch.isfinite(g).all()) for g in true_grads)
        expected_norm = _norm(true_grads) if finite else math.inf
        _compare_number(
            loss,
            expected_loss,
            scale_before,
            case=label,
            what=_("the returned loss"),
            rtol=1e-3,
            hint_scaled=_("return the loss itself (loss.item()), not the scaled loss."),
        )
        try:
            _compare_number(
                norm,
                expected_norm,
                scale_before,
                case=label,
                what=_("the returned gradient norm"),
                rtol=1e-3,
                hint_scaled=_(
                    "clip_grad_norm_ measured the still-scaled gradients. Call scaler.unscale_(optimizer) before "
                    "clip_grad_norm_."
                ),
            )
        except kit.CheckFailed:
            if stale:
                raise kit.CheckFailed(stale_message) from None
            raise
        applied = seen["applied"]
        if not finite:  # an overflow: GradScaler must have skipped the optimizer step
            if applied or any(not torch.equal(p, p0) for p, p0 in zip(params, params_before)):
                raise kit.CheckFailed(
                    _(
                        "case {case}: this step overflowed (an inf in the fp16 forward pass), so the optimizer step "
                        "should have been skipped (scaler.step does that) and the parameters left as they were."
                    ).format(case=label)
                )
            continue
        if len(applied) != 1:
            raise kit.CheckFailed(
                _("case {case}: the optimizer should step once; it stepped {count} times.").format(
                    case=label, count=len(applied)
                )
            )
        coefficient = min(1.0, max_norm / (expected_norm + 1e-6))
        for pname, used, g in zip(names, applied[0], true_grads):
            if used is None or not torch.allclose(used, g * coefficient, rtol=1e-4, atol=1e-7):
                if stale:
                    raise kit.CheckFailed(stale_message)
                if used is not None and torch.allclose(used, g, rtol=1e-4, atol=1e-7) and coefficient < 1:
                    text = _(
                        "case {case}: the gradient the optimizer applied to {param} is wrong: they were not clipped "
                        "(max_norm={max_norm:g}; the norm was {norm:.4g})."
                    )
                elif used is not None and torch.allclose(used * scale_before, g, rtol=1e-3, atol=1e-7):
                    text = _(
                        "case {case}: the gradient the optimizer applied to {param} is wrong: they were still "
                        "multiplied by the loss scale: unscale before the optimizer step."
                    )
                else:
                    text = _(
                        "case {case}: the gradient the optimizer applied to {param} is wrong: they are not the "
                        "unscaled gradients clipped to max_norm: unscale_ first, then "
                        "clip_grad_norm_(model.parameters(), max_norm), then scaler.step(optimizer)."
                    )
                raise kit.CheckFailed(
                    text.format(case=label, param=pname, max_norm=max_norm, norm=expected_norm)
                )
        for pname, p, p0, used in zip(names, params, params_before, applied[0]):
            if not torch.allclose(p, p0 - lr * used, rtol=1e-5, atol=1e-7):
                raise kit.CheckFailed(
                    _(
                        "case {case}: after the step the parameter {param} is not what one optimizer.step() with the "
                        "clipped gradients gives: let scaler.step(optimizer) do the step, once."
                    ).format(case=label, param=pname)
                )


@kit.check("e3_amp_train_step", points=3)
def check_amp_train_step(amp_train_step) -> int:
    kit.expect_callable(amp_train_step, "amp_train_step")
    cases = _train_cases() + kit.drawn_cases("e3_amp_train_step", 2, _drawn_train_case)
    for case in cases:
        _run_train_case(amp_train_step, *case)
    return len(cases)


# ---- e4: measure_amp_step (GPU) -----------------------------------------------------------------------------------

#: the check's set-ups. "cuda" is what is graded; "cpu" exists so that the tests can run the same logic on a CPU,
#: where a step of a tiny model takes milliseconds and a busy machine can stall one run: hence the loose time factor
#: there (it still catches seconds reported as milliseconds).
E4_PROFILES = {
    "cuda": dict(widths=[512, 2048, 2048, 2048, 512], batch=32768, time_factor=2.0),
    "cpu": dict(widths=[32, 64, 64, 10], batch=256, time_factor=20.0),
}
E4_DTYPES = (torch.bfloat16, None)
E4_STEPS = 12  # timed steps asked for; the check times steps 2..12 itself, from outside, through a step hook


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def amp_setup(device: torch.device, widths: list[int], batch: int, seed: int = 0):
    """A fresh model (fp32 weights), its AdamW and a batch on `device`, the same for the same seed."""
    torch.manual_seed(seed)
    model = mlp(widths).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(seed)
    data = (
        torch.randn(batch, widths[0], generator=g).to(device),
        torch.randint(0, widths[-1], (batch,), generator=g).to(device),
    )
    return model, optimizer, data


def _free(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _watch(measure_amp_step, device, profile, dtype, steps: int, case: str):
    """Call the learner's function on a fresh set-up while watching it from outside: (its result, the peak bytes the
    allocator saw after the warm-up step, the clock at the end of every optimizer step). An optimizer step hook does
    the watching: after the first step (the warm-up) it restarts the peak (on CUDA the caching allocator's counter;
    on the CPU a storage tracker around the call, which sees the same allocations as the learner's), and after every
    step it reads the clock (on CUDA after torch.cuda.synchronize(), so that the times are the GPU's). The call and
    the watching are one learner step (its result); what the check saw comes out of a second one, as plain data."""
    side = {}

    def run():
        model, optimizer, data = amp_setup(device, profile["widths"], profile["batch"])
        seen, clock = [], []
        model[0].register_forward_hook(lambda module, args, out: seen.append(out.dtype))
        _sync(device)
        if device.type == "cuda":

            def after_step(*_):
                _sync(device)
                clock.append(time.perf_counter())
                if len(clock) == 1:
                    torch.cuda.reset_peak_memory_stats(device)

            optimizer.register_step_post_hook(after_step)
            torch.cuda.reset_peak_memory_stats(device)
            got = kit.call(measure_amp_step, model, data, optimizer, dtype, steps=steps, case=case)
            _sync(device)
            peak = torch.cuda.max_memory_allocated(device)
        else:
            with track_memory(model=model, optimizer=optimizer, inputs=data) as trace:

                def after_step(*_):
                    clock.append(time.perf_counter())
                    trace.mark(f"after step {len(clock)}")

                optimizer.register_step_post_hook(after_step)
                got = kit.call(measure_amp_step, model, data, optimizer, dtype, steps=steps, case=case)
            after_warm_up = [m.peak_bytes for m in trace.marks[1:]]
            peak = max(after_warm_up + [trace.current_bytes]) if after_warm_up else trace.peak_bytes
        del model, optimizer, data
        _free(device)
        side["seen"] = {"dtypes": [str(d) for d in seen], "peak": int(peak), "clock": list(clock)}
        return got

    got = kit.learner(case, run)
    seen = kit.learner(kit.Case("{case} (what the check saw)", case=case), lambda: side["seen"])
    _expect_result(got, case)
    wanted = str(dtype or torch.float32)
    if not seen["dtypes"]:
        raise kit.CheckFailed(
            _("case {case}: your function never ran the model's forward pass.").format(case=case)
        )
    if any(d != wanted for d in seen["dtypes"]):
        wrong = next(d for d in seen["dtypes"] if d != wanted)
        text = (
            _(
                "case {case}: the training steps should run under torch.autocast(device.type, dtype={dtype}); the "
                "first Linear layer's output was {got}."
            )
            if dtype
            else _(
                "case {case}: the training steps should run in fp32, without autocast; the first Linear layer's "
                "output was {got}."
            )
        )
        raise kit.CheckFailed(text.format(case=case, dtype=dtype, got=wrong))
    clock = seen["clock"]
    if len(clock) != steps + 1:
        raise kit.CheckFailed(
            _(
                "case {case}: with steps={steps} the optimizer should step {expected} times (one warm-up step, then "
                "the timed ones); it stepped {count} times."
            ).format(case=case, steps=steps, expected=steps + 1, count=len(clock))
        )
    return got, seen["peak"], clock


def _expect_result(got, case: str) -> None:
    kit.expect_keys(got, ("step_ms", "peak_bytes"), case=case, what=_("the returned dict"))
    for key in ("step_ms", "peak_bytes"):
        kit.expect_type(got[key], numbers.Real, case=case, what=key)
        if not math.isfinite(float(got[key])) or float(got[key]) <= 0:
            raise kit.CheckFailed(
                _("case {case}: {key} should be a positive number; got {got}.").format(
                    case=case, key=key, got=repr(got[key])
                )
            )


def run_measure_amp_step_check(measure_amp_step: Callable, device: torch.device | str) -> int:
    """The logic of check_measure_amp_step on `device` with that device's profile; returns the number of cases.

    No reference measurement: the learner's numbers are compared with what the check sees from outside the call
    (`_watch`): the time between the ends of optimizer steps 2 and 12, per step, and the allocator's peak after the
    warm-up step.
    """
    device = torch.device(device)
    profile = E4_PROFILES[device.type]
    kit.expect_callable(measure_amp_step, "measure_amp_step")
    for dtype in E4_DTYPES:
        case = kit.Case(
            "{precision}, mlp({widths}), batch {batch} on {device}, steps={steps}",
            precision=kit.Case("bf16 autocast") if dtype else "fp32",
            widths=profile["widths"],
            batch=profile["batch"],
            device=device.type,
            steps=E4_STEPS,
        )
        got, peak, clock = _watch(measure_amp_step, device, profile, dtype, E4_STEPS, case)
        kit.expect_close(
            got["peak_bytes"],
            peak,
            case=case,
            what=_("peak_bytes (the peak over the timed steps, from memlab.measure.track_memory)"),
            rtol=0.05,
            atol=MiB if device.type == "cuda" else 1024,
            reveal=False,
        )
        seen_ms = 1000 * (clock[-1] - clock[1]) / (len(clock) - 2)  # steps 2..12: no warm-up, no set-up
        ratio = float(got["step_ms"]) / seen_ms
        factor = profile["time_factor"]
        if not (1 / factor <= ratio <= factor):
            raise kit.CheckFailed(
                _(
                    "case {case}: step_ms = {step_ms:.3g} ms is {how_far} of what the check saw from outside your "
                    "function (tolerance: a factor of {factor:g}). Milliseconds per step, averaged over the timed "
                    "steps after a warm-up step, with torch.cuda.synchronize() before each reading of the clock."
                ).format(
                    case=case,
                    step_ms=float(got["step_ms"]),
                    how_far=kit.how_far(float(got["step_ms"]), seen_ms),
                    factor=factor,
                )
            )
    return len(E4_DTYPES)


@kit.check("e4_measure_amp_step", points=1, rerun=True)
def check_measure_amp_step(measure_amp_step) -> int:
    kit.expect_callable(measure_amp_step, "measure_amp_step")
    # what runs anywhere: two steps of a tiny model on the CPU return the right dict
    case = kit.Case("a 2-step run of a tiny model on the CPU")
    model, optimizer, data = amp_setup(torch.device("cpu"), [8, 16, 4], 32)
    _expect_result(
        kit.call(measure_amp_step, model, data, optimizer, torch.bfloat16, steps=2, case=case), case
    )
    kit.needs_hardware(
        cuda=True, min_capability=(8, 0), passed=_("a 2-step run on the CPU returned positive numbers")
    )
    return run_measure_amp_step_check(measure_amp_step, torch.device("cuda", torch.cuda.current_device()))


__all__ = [
    "check_underflow_fraction",
    "check_dynamic_loss_scaler",
    "check_amp_train_step",
    "check_measure_amp_step",
    "amp_setup",
    "run_measure_amp_step_check",
    "E4_PROFILES",
]
