"""`track_memory`: the one memory tracker every lesson measures with.

On a CUDA device the headline numbers come from PyTorch's caching allocator (`torch.cuda.max_memory_allocated`,
`memory_allocated`, `max_memory_reserved`; optionally a `_record_memory_history` snapshot for the memory_viz
viewer). On every device, a `TorchDispatchMode` also follows the *live tensor storages*: each operator's new
outputs are registered by their `untyped_storage()` and removed by a `weakref.finalize` when the storage dies. It
is seeded with the tensors that existed before (parameters, buffers, gradients, optimizer state, inputs), so on
the CPU its peak is the exact number of bytes held by tensors, and it works under `FakeTensorMode` too (that is how
`memlab.estimate.simulate_training_step` predicts a 7B step on a laptop). The tracker also sorts bytes into
categories: parameters (with buffers), gradients, optimizer state, and everything else (activations, inputs and
temporaries).

    with track_memory(model=model, optimizer=opt, inputs=(x,)) as trace:
        loss = model(x).sum();  trace.mark("after forward")
        loss.backward();        trace.mark("after backward")
        opt.step();             trace.mark("after step")
    trace.peak_bytes, trace.peak_by_category, trace.marks, trace.timeline
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from memlab.i18n import N_, _
from memlab.notebook import pad

#: the categories: English keys in every language; `display_name` shows them in the kernel's
PARAMETERS = N_("parameters")
GRADIENTS = N_("gradients")
OPTIMIZER_STATE = N_("optimizer state")
OTHER = N_("activations & temporaries")
CATEGORIES = (PARAMETERS, GRADIENTS, OPTIMIZER_STATE, OTHER)

MiB = 1024**2

try:  # absent from builds of torch without torch.distributed
    from torch.distributed.tensor import DTensor
except ImportError:  # pragma: no cover

    class DTensor:  # noqa: D101 - nothing is an instance of it
        pass


@dataclass
class Mark:
    """Memory at a named point: live bytes now, and the peak since the previous mark (or the start)."""

    name: str
    current_bytes: int
    peak_bytes: int
    by_category: dict[str, int]


@dataclass
class MemoryTrace:
    """What `track_memory` measured. Byte counts are ints; on CUDA `peak_bytes` is the allocator's number."""

    device: str
    start_bytes: int = 0
    peak_bytes: int = 0
    current_bytes: int = 0
    tracked_peak_bytes: int = 0
    tracked_current_bytes: int = 0
    peak_by_category: dict[str, int] = field(default_factory=dict)
    current_by_category: dict[str, int] = field(default_factory=dict)
    marks: list[Mark] = field(default_factory=list)
    timeline: list[tuple[int, str, int]] = field(default_factory=list)  # (op index, op name, live bytes)
    events: list[dict] = field(
        default_factory=list
    )  # every allocation, free and mark, in order (see `track_memory`)
    cuda_peak_reserved_bytes: int | None = None
    snapshot_path: str | None = None
    _session: _Session | None = field(default=None, repr=False)

    def mark(self, name: str, settle: float = 0.0) -> Mark:
        """Record live memory now and the peak since the previous mark under `name`.

        `settle`: first wait until the live bytes have not changed for that many seconds (at most 20 times as long
        in all). A storage can outlive its last reference in this thread: gloo's worker thread drops its reference
        to a collective's buffers a moment after `wait()` returns, later on a loaded machine."""
        if self._session is None:
            raise RuntimeError("mark() only works inside the `with track_memory(...)` block")
        if settle:
            self._session.settle(settle)
        mark = self._session.mark(name)
        self.marks.append(mark)
        return mark

    @property
    def peak_event(self) -> tuple[int, str, int]:
        """The first `timeline` entry at the highest live total: (op index, op name, live bytes)."""
        return max(self.timeline, key=lambda event: event[2])  # max() keeps the first of equal entries

    @property
    def peak_mib(self) -> float:
        return self.peak_bytes / MiB

    def table(self) -> str:
        """The marks and the peak split, as a fixed-width text table (MiB), in the kernel's language and lined up by
        display columns (a mark's name is the caller's, as written)."""
        lines = [pad(_("point"), "<28") + pad(_("live MiB"), ">12") + pad(_("peak since last"), ">18")]
        lines += [
            f"{pad(display_name(m.name), '<28')}{m.current_bytes / MiB:>12.2f}{m.peak_bytes / MiB:>18.2f}"
            for m in self.marks
        ]
        peak = _("peak ({device})").format(device=self.device)
        lines.append(f"{pad(peak, '<28')}{self.peak_bytes / MiB:>12.2f}")
        lines += [
            f"  {pad(display_name(name), '<26')}{self.peak_by_category.get(name, 0) / MiB:>12.2f}"
            for name in CATEGORIES
        ]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def display_name(name: str) -> str:
    """A category's or a mark's name (`CATEGORIES`, the keys of `peak_by_category`; `measure_training_step`'s marks;
    the ways and phases `memlab.distributed`'s jobs name their results by) as the kernel's language says it: a
    lesson prints `display_name(name)` and keeps `name` to look bytes up. A name the catalogue does not know (a
    lesson's own mark, already in its language) is returned as it is."""
    return _(name)


def local_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor whose storage holds `tensor`'s bytes on this process: a DTensor's local shard (FSDP2 parameters
    and gradients, tensor parallelism), else the tensor itself."""
    return tensor._local_tensor if isinstance(tensor, DTensor) else tensor


class _LiveStorages(TorchDispatchMode):
    """Follows every live tensor storage it has seen, and the peak of their total size.

    A storage resized in place by an operator (`resize_`, an `out=` argument) is re-measured when the operator's
    output passes through. `untyped_storage().resize_(n)` called from Python is not an operator: FSDP2 frees and
    re-allocates its gathered parameters that way (torch/distributed/fsdp/_fully_shard/_fsdp_param.py,
    `free_storage` / `alloc_storage`). With `watch_resizes=True` every live storage is re-measured after each
    operator, which costs time proportional to the number of live storages per operator; `track_memory` switches it
    on when the model has DTensor parameters.
    """

    def __init__(self, watch_resizes: bool = False):
        super().__init__()
        # storage key -> [nbytes, category, weak reference to the storage]; the list is shared with snapshots
        self.live: dict[int, list] = {}
        self.live_bytes = 0
        self.peak_bytes = 0
        self.peak_records: list[tuple[int, list]] = []  # (nbytes at the peak, record)
        self.segment_peak = 0
        self.timeline: list[tuple[int, str, int]] = []
        self.events: list[tuple] = []  # (action, op index, nbytes, record or mark name); see `event_log`
        self.watch_resizes = watch_resizes
        self._finalizers: list[weakref.finalize] = []

    def add(self, tensor: torch.Tensor, category: str | None = None) -> None:
        try:
            storage = local_tensor(tensor).untyped_storage()
        except (NotImplementedError, RuntimeError):  # sparse or storage-less tensors
            return
        key = storage._cdata
        record = self.live.get(key)
        if record is None:
            record = [storage.nbytes(), category, weakref.ref(storage)]
            self.live[key] = record
            self.live_bytes += record[0]
            self.events.append(("alloc", len(self.timeline), record[0], record))
            finalizer = weakref.finalize(storage, self._free, key, record)
            finalizer.atexit = False
            self._finalizers.append(finalizer)
        else:
            self._resized(record, storage.nbytes())  # resized in place (resize_, out= arguments)
            if category is not None:
                record[1] = category

    def _free(self, key: int, record: list) -> None:
        if self.live.get(key) is record:
            del self.live[key]
            self.live_bytes -= record[0]
            self.events.append(("free", len(self.timeline), record[0], record))

    def _remeasure(self) -> None:
        for record in self.live.values():
            storage = record[2]()
            if storage is not None:
                self._resized(record, storage.nbytes())

    def _resized(self, record: list, size: int) -> None:
        if size == record[0]:
            return
        self.events.append(("free", len(self.timeline), record[0], record))  # a resize: the old size goes,
        self.events.append(("alloc", len(self.timeline), size, record))  # the new one comes, same address
        self.live_bytes += size - record[0]
        record[0] = size

    def note(self, name: str) -> None:
        if self.watch_resizes:
            self._remeasure()
        self.timeline.append((len(self.timeline), name, self.live_bytes))
        self.segment_peak = max(self.segment_peak, self.live_bytes)
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self.peak_records = [(record[0], record) for record in self.live.values()]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self.add(leaf)
        self.note(func.__name__)
        return out

    def detach_all(self) -> None:
        for finalizer in self._finalizers:
            finalizer.detach()
        self._finalizers.clear()


def split_by_category(sizes: Iterable[tuple[int, list]]) -> dict[str, int]:
    """Bytes per category of (nbytes, record) pairs; a record's category is read now, so a storage labelled after
    the peak (a gradient, optimizer state) counts under its label."""
    split = dict.fromkeys(CATEGORIES, 0)
    for nbytes, record in sizes:
        split[record[1] or OTHER] += nbytes
    return split


def event_log(storages: _LiveStorages) -> list[dict]:
    """The tracker's allocations, frees and marks in the order they happened, as plain dicts (the shape of the
    `device_traces` of a CUDA memory snapshot, `torch.cuda.memory._snapshot()`, with the op and the category added):

        {"action": "alloc" | "free", "addr": int, "size": bytes, "op": name, "op_index": int, "category": str}
        {"action": "mark", "name": str, "op_index": int}

    `addr` numbers the storages in the order they were first seen (the same number for an alloc and its free; a
    storage resized in place is a free of its old size and an alloc of its new one at the same addr). `op` is the
    operator during which it happened: the entry of `trace.timeline` at `op_index` ("start" for the tensors that
    existed before the block). `category` is the storage's label at the end of the block (a gradient is created by
    an operator and recognised as a gradient just after). A mark comes after every event before it and before every
    event after it; the seeded tensors are "alloc" events of op "start".
    """
    names = [event[1] for event in storages.timeline]
    addresses: dict[int, int] = {}
    log = []
    for action, index, nbytes, what in storages.events:
        if action == "mark":
            log.append({"action": "mark", "name": what, "op_index": index})
            continue
        log.append(
            {
                "action": action,
                "addr": addresses.setdefault(id(what), len(addresses)),
                "size": nbytes,
                "op": names[index] if index < len(names) else "end",
                "op_index": index,
                "category": what[1] or OTHER,
            }
        )
    return log


def _live_sizes(live: dict[int, list]) -> list[tuple[int, list]]:
    return [(record[0], record) for record in live.values()]


def _stepped(optimizer) -> list:
    """The optimizers whose step() the caller calls: `optimizer`, or each of a list, tuple or dict of them (one per
    parameter, stepped inside backward)."""
    if optimizer is None:
        return []
    if isinstance(optimizer, dict):
        return list(optimizer.values())
    return list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer]


def _optimizers(optimizer) -> list:
    """The optimizers that hold state: each stepped one (`_stepped`), and the local optimizer it wraps if it is a
    wrapper that keeps the state there (`torch.distributed.optim.ZeroRedundancyOptimizer.optim`: the AdamW of this
    rank's shard)."""
    found = []
    for each in _stepped(optimizer):
        inner = getattr(each, "optim", None)
        found += [each, inner] if isinstance(inner, torch.optim.Optimizer) else [each]
    return found


class _Session:
    """The state of one `track_memory` block: the storage tracker, the hooks, the CUDA bookkeeping."""

    def __init__(
        self, trace: MemoryTrace, model, optimizer, inputs, cuda: bool, watch_resizes: bool | None = None
    ):
        self.trace, self.model, self.optimizer, self.cuda = trace, model, optimizer, cuda
        if watch_resizes is None:  # FSDP2 shards parameters as DTensors and resizes the gathered ones itself
            watch_resizes = any(isinstance(t, DTensor) for t in self._model_tensors())
        self.storages = _LiveStorages(watch_resizes)
        self.hooks = []
        self.cuda_segment_peaks: list[int] = []
        for t in self._model_tensors():
            self.storages.add(t, PARAMETERS)
        self.classify()
        for t in tree_leaves(inputs):
            if isinstance(t, torch.Tensor):
                self.storages.add(t)
        self.storages.note("start")
        self.storages.segment_peak = self.storages.live_bytes
        if model is not None:
            for p in model.parameters():
                if p.requires_grad:
                    self.hooks.append(p.register_post_accumulate_grad_hook(self._grad_ready))
        for each in _stepped(optimizer):
            self.hooks.append(each.register_step_post_hook(lambda *_: self.classify()))

    def _model_tensors(self):
        if self.model is None:
            return []
        return [*self.model.parameters(), *self.model.buffers()]

    def _grad_ready(self, param: torch.Tensor) -> None:
        if param.grad is not None:
            self.storages.add(param.grad, GRADIENTS)

    def classify(self) -> None:
        """(Re)label the storages we can name now: gradients and optimizer state."""
        if self.model is not None:
            for p in self.model.parameters():
                if p.grad is not None:
                    self.storages.add(p.grad, GRADIENTS)
        for optimizer in _optimizers(self.optimizer):
            for state in optimizer.state.values():
                for value in tree_leaves(state):
                    if isinstance(value, torch.Tensor):
                        self.storages.add(value, OPTIMIZER_STATE)

    def settle(self, quiet: float, poll: float = 0.01) -> None:
        """Wait until the live bytes have not changed for `quiet` seconds, or 20 times that has passed."""
        start = time.monotonic()
        last, since = None, start
        while time.monotonic() - start < 20 * quiet:
            if self.storages.watch_resizes:
                self.storages._remeasure()
            if self.storages.live_bytes != last:
                last, since = self.storages.live_bytes, time.monotonic()
            elif time.monotonic() - since >= quiet:
                return
            time.sleep(poll)

    def mark(self, name: str) -> Mark:
        self.classify()
        self.storages.events.append(("mark", len(self.storages.timeline), 0, name))
        self.storages.note(f"mark: {name}")
        live = split_by_category(_live_sizes(self.storages.live))
        if self.cuda:
            torch.cuda.synchronize()
            segment_peak = torch.cuda.max_memory_allocated()
            self.cuda_segment_peaks.append(segment_peak)
            torch.cuda.reset_peak_memory_stats()
            mark = Mark(name, torch.cuda.memory_allocated(), segment_peak, live)
        else:
            mark = Mark(name, self.storages.live_bytes, self.storages.segment_peak, live)
        self.storages.segment_peak = self.storages.live_bytes
        return mark

    def close(self) -> None:
        self.classify()
        self.storages.note("end")
        trace, storages = self.trace, self.storages
        trace.tracked_peak_bytes = storages.peak_bytes
        trace.tracked_current_bytes = storages.live_bytes
        trace.peak_by_category = split_by_category(storages.peak_records)
        trace.current_by_category = split_by_category(_live_sizes(storages.live))
        trace.timeline = storages.timeline
        trace.events = event_log(storages)
        if self.cuda:
            torch.cuda.synchronize()
            trace.peak_bytes = max([*self.cuda_segment_peaks, torch.cuda.max_memory_allocated()])
            trace.current_bytes = torch.cuda.memory_allocated()
            trace.cuda_peak_reserved_bytes = torch.cuda.max_memory_reserved()
        else:
            trace.peak_bytes = storages.peak_bytes
            trace.current_bytes = storages.live_bytes
        for hook in self.hooks:
            hook.remove()
        storages.detach_all()


class track_memory:  # noqa: N801 - used as a context manager, reads like a function
    """Measure the memory of the code in a `with` block; see the module docstring.

    Args:
        model: its parameters and buffers are seeded as "parameters"; its gradients are recognised as they appear.
        optimizer: its state is recognised as "optimizer state" after each step and at each mark; a list or dict of
            optimizers (one per parameter, stepped inside backward) too.
        inputs: tensors (any nesting) that exist before the block and count as activations.
        device: where the work runs; default: the device of the model's first parameter, else the CPU.
        record_history: on CUDA, record an allocator history and dump a snapshot for https://pytorch.org/memory_viz
            to `snapshot_path` (default "memory_snapshot.pickle").
        track_storages: follow live storages with the dispatch mode (always on for the CPU; on CUDA it adds the
            category split and the timeline at some Python overhead per operator).
        watch_resizes: re-measure every live storage after each operator, to see storages resized from Python
            (`untyped_storage().resize_`), as FSDP2 frees its gathered parameters. Default: on when the model has
            DTensor parameters (`fully_shard`), off otherwise (it costs time per operator and live storage).
    """

    def __init__(
        self,
        model: torch.nn.Module | None = None,
        optimizer: torch.optim.Optimizer | list | dict | None = None,
        inputs=(),
        device: str | torch.device | None = None,
        record_history: bool = False,
        snapshot_path: str = "memory_snapshot.pickle",
        track_storages: bool = True,
        watch_resizes: bool | None = None,
    ):
        if device is None:
            first = next(iter(model.parameters()), None) if model is not None else None
            device = first.device if first is not None else torch.device("cpu")
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if not self.cuda and not track_storages:
            raise ValueError(
                "on the CPU the storage tracker is the only measurement: keep track_storages=True"
            )
        self.model, self.optimizer, self.inputs = model, optimizer, inputs
        self.record_history, self.snapshot_path = record_history and self.cuda, snapshot_path
        self.track_storages, self.watch_resizes = track_storages, watch_resizes
        self.trace: MemoryTrace | None = None

    def __enter__(self) -> MemoryTrace:
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            if self.record_history:
                torch.cuda.memory._record_memory_history(max_entries=200_000)
        self.trace = MemoryTrace(device=str(self.device))
        session = _Session(self.trace, self.model, self.optimizer, self.inputs, self.cuda, self.watch_resizes)
        self.trace._session = session
        self.trace.start_bytes = torch.cuda.memory_allocated() if self.cuda else session.storages.live_bytes
        if self.track_storages:
            session.storages.__enter__()
        return self.trace

    def __exit__(self, *exc) -> None:
        session = self.trace._session
        if self.track_storages:
            session.storages.__exit__(*exc)
        session.close()
        if self.record_history:
            torch.cuda.memory._dump_snapshot(self.snapshot_path)
            torch.cuda.memory._record_memory_history(enabled=None)
            self.trace.snapshot_path = self.snapshot_path
        self.trace._session = None
        return None


def loss_of(model: torch.nn.Module, batch) -> torch.Tensor:
    """The training loss of `model` on `batch`: a dict goes to a Hugging Face model (`model(**batch).loss`), a
    tuple `(x, y)` to a classifier (`cross_entropy(model(x), y)`)."""
    if isinstance(batch, dict):
        return model(**batch).loss
    x, y = batch
    return torch.nn.functional.cross_entropy(model(x), y)


def chunked_lm_loss(model: torch.nn.Module, batch: dict, chunk: int) -> torch.Tensor:
    """A causal LM's loss on `batch` (a dict with "input_ids" and "labels") made `chunk` tokens at a time: each chunk's
    logits are projected, upcast to fp32 and reduced to a sum of losses inside an activation checkpoint, so backward
    recomputes them and at most one chunk's logits (and their gradient) are alive, never the whole
    batch x sequence x vocabulary. The same mean as `model(**batch).loss` (position t predicts label t + 1, -100
    ignored). `model` is a Hugging Face `...ForCausalLM` or a peft model around one. Lesson 06 has the learner write
    this; the 7B simulator (`memlab.estimate.simulate_7b_lora_step(..., loss_chunk=...)`) uses this copy."""
    from torch.utils.checkpoint import checkpoint

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    hidden = base.model(input_ids=batch["input_ids"]).last_hidden_state
    weight = base.lm_head.weight
    h = hidden[:, :-1].reshape(-1, hidden.shape[-1])
    y = batch["labels"][:, 1:].reshape(-1)

    def chunk_loss(h_chunk, y_chunk):
        logits = (h_chunk @ weight.T).float()
        return torch.nn.functional.cross_entropy(logits, y_chunk, ignore_index=-100, reduction="sum")

    total = sum(
        checkpoint(chunk_loss, h[i : i + chunk], y[i : i + chunk], use_reentrant=False)
        for i in range(0, len(y), chunk)
    )
    return total / (y != -100).sum()


def measure_training_step(
    model: torch.nn.Module, batch, optimizer: torch.optim.Optimizer, loss_fn=loss_of, **track_kwargs
) -> MemoryTrace:
    """Run one forward / backward / optimizer step / zero_grad on `batch` inside `track_memory`, with a mark after
    each phase. The same function runs the real step and, under FakeTensorMode, the simulated one."""
    with track_memory(model=model, optimizer=optimizer, inputs=batch, **track_kwargs) as trace:
        loss = loss_fn(model, batch)
        trace.mark(N_("after forward"))
        loss.backward()
        del loss
        trace.mark(N_("after backward"))
        optimizer.step()
        trace.mark(N_("after optimizer step"))
        optimizer.zero_grad(set_to_none=True)
        trace.mark(N_("after zero_grad"))
    return trace
