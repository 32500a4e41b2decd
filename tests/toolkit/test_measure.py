"""memlab.measure: the storage tracker is byte-exact against hand counts on small models."""

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from memlab.measure import (
    GRADIENTS,
    OPTIMIZER_STATE,
    OTHER,
    PARAMETERS,
    measure_training_step,
    track_memory,
)
from memlab.models import mlp

F32, I64 = 4, 8


def n_params(widths):
    return sum(a * b + b for a, b in zip(widths[:-1], widths[1:]))


def test_allocations_and_frees_are_counted_exactly():
    with track_memory() as trace:
        a = torch.empty(1000)  # 4,000 B
        b = torch.empty(250, dtype=torch.float64)  # 2,000 B
        trace.mark("a and b")
        del a
        c = torch.empty(100, dtype=torch.int8)  # 100 B
        trace.mark("b and c")
        v = c.view(10, 10)  # a view allocates nothing
        del b, c, v
        trace.mark("nothing")
    assert [m.current_bytes for m in trace.marks] == [6000, 2100, 0]
    assert trace.peak_bytes == 6000
    assert [m.peak_bytes for m in trace.marks] == [6000, 6000, 2100]


def test_in_place_resize_is_followed():
    with track_memory() as trace:
        t = torch.empty(10)
        t.resize_(1000)
        trace.mark("resized")
    assert trace.marks[0].current_bytes == 4000


def test_pre_existing_tensors_are_seeded_by_category():
    model = mlp([10, 20, 3])
    x = torch.randn(7, 10)
    with track_memory(model=model, inputs=(x,)) as trace:
        pass
    assert trace.start_bytes == F32 * n_params([10, 20, 3]) + F32 * 7 * 10
    assert trace.current_by_category[PARAMETERS] == F32 * n_params([10, 20, 3])
    assert trace.current_by_category[OTHER] == F32 * 7 * 10


@pytest.mark.parametrize("optimizer_name", ["sgd", "sgd-momentum", "adamw"])
def test_training_step_marks_equal_hand_count(optimizer_name):
    widths, batch = [30, 50, 40, 6], 12
    torch.manual_seed(0)
    model = mlp(widths)
    optimizer = {
        "sgd": lambda: torch.optim.SGD(model.parameters(), lr=0.1),
        "sgd-momentum": lambda: torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        "adamw": lambda: torch.optim.AdamW(model.parameters()),
    }[optimizer_name]()
    x, y = torch.randn(batch, widths[0]), torch.randint(0, widths[-1], (batch,))
    trace = measure_training_step(model, (x, y), optimizer)

    params = F32 * n_params(widths)
    inputs = F32 * batch * widths[0] + I64 * batch
    # autograd keeps each ReLU output (= the next Linear's input), the log-probabilities, loss and total_weight
    saved = F32 * batch * (50 + 40) + F32 * batch * 6 + 2 * F32
    state = {"sgd": 0, "sgd-momentum": params, "adamw": 2 * params + F32 * 6}[optimizer_name]
    marks = {m.name: m for m in trace.marks}
    assert marks["after forward"].current_bytes == params + inputs + saved
    # the forward peak is at the second ReLU: ReLU 1's output (saved), the second Linear's output and ReLU 2's
    assert marks["after forward"].peak_bytes == params + inputs + F32 * batch * (50 + 40 + 40)
    assert marks["after backward"].current_bytes == params + inputs + params
    assert marks["after optimizer step"].current_bytes == params + inputs + params + state
    assert marks["after zero_grad"].current_bytes == params + inputs + state
    assert marks["after optimizer step"].by_category == {
        PARAMETERS: params,
        GRADIENTS: params,
        OPTIMIZER_STATE: state,
        OTHER: inputs,
    }
    assert trace.peak_bytes == max(b for _, _, b in trace.timeline)
    assert trace.peak_bytes >= max(m.current_bytes for m in trace.marks)
    assert sum(trace.peak_by_category.values()) == trace.peak_bytes


def test_checkpointing_keeps_only_the_segment_input_and_output():
    d, h, c, batch = 32, 64, 5, 16
    torch.manual_seed(0)
    block, head = mlp([d, h, h]), torch.nn.Linear(h, c)
    block = torch.nn.Sequential(*block, torch.nn.ReLU())  # Linear, ReLU, Linear, ReLU
    model = torch.nn.Sequential(block, head)
    x, y = torch.randn(batch, d), torch.randint(0, c, (batch,))
    params = F32 * sum(p.numel() for p in model.parameters())
    inputs = F32 * batch * d + I64 * batch
    log_probs_and_scalars = F32 * batch * c + 2 * F32

    def forward(use_checkpoint: bool):
        model.zero_grad(set_to_none=True)
        with track_memory(model=model, inputs=(x, y)) as trace:
            hidden = checkpoint(block, x, use_reentrant=False) if use_checkpoint else block(x)
            loss = torch.nn.functional.cross_entropy(head(hidden), y)
            trace.mark("after forward")
            loss.backward()
            del loss, hidden
            trace.mark("after backward")
        assert trace.marks[1].current_bytes == params + inputs + params  # both ways end with the gradients
        return trace.marks[0]

    plain, checkpointed = forward(False), forward(True)
    # live after forward. Without checkpointing both ReLU outputs (h each) are saved; with it, only the block's
    # output (the head's input); the block's input x is the batch itself.
    assert plain.current_bytes == params + inputs + F32 * batch * 2 * h + log_probs_and_scalars
    assert checkpointed.current_bytes == params + inputs + F32 * batch * h + log_probs_and_scalars
    # the forward peak is at the second ReLU. Without checkpointing: ReLU 1 (saved) + the second Linear's output +
    # ReLU 2; with it, ReLU 1 is already freed (nothing saves it): only the Linear output and ReLU 2.
    assert plain.peak_bytes == params + inputs + F32 * batch * 3 * h
    assert checkpointed.peak_bytes == params + inputs + F32 * batch * 2 * h


def test_timeline_and_marks_are_recorded():
    model = mlp([8, 8, 2])
    trace = measure_training_step(
        model, (torch.randn(4, 8), torch.randint(0, 2, (4,))), torch.optim.SGD(model.parameters())
    )
    names = [name for _, name, _ in trace.timeline]
    assert names[0] == "start" and names[-1] == "end"
    assert "addmm.default" in names and "mark: after backward" in names
    assert [m.name for m in trace.marks] == [
        "after forward",
        "after backward",
        "after optimizer step",
        "after zero_grad",
    ]
    assert "after backward" in trace.table()


def _replay(events):
    """Live bytes after every alloc/free of an event log, and the live storages at the end."""
    live, sizes, totals = 0, {}, []
    for event in events:
        if event["action"] == "alloc":
            assert event["addr"] not in sizes, "an address is allocated twice without a free"
            sizes[event["addr"]] = event["size"]
            live += event["size"]
        elif event["action"] == "free":
            live -= sizes.pop(event["addr"])
        totals.append(live)
    return totals, sizes


def test_the_event_log_replays_to_the_peak_and_the_end_and_names_ops_and_marks():
    model = mlp([64, 256, 10])
    trace = measure_training_step(
        model, (torch.randn(32, 64), torch.randint(0, 10, (32,))), torch.optim.AdamW(model.parameters())
    )
    totals, live = _replay(trace.events)
    assert max(totals) == trace.peak_bytes
    assert sum(live.values()) == trace.current_bytes
    names = [name for _, name, _ in trace.timeline]
    ops = [e for e in trace.events if e["action"] != "mark"]
    assert all(e["op"] == names[e["op_index"]] for e in ops)
    assert {e["op"] for e in ops if e["action"] == "alloc"} >= {"start", "addmm.default"}
    assert [e["name"] for e in trace.events if e["action"] == "mark"] == [m.name for m in trace.marks]
    marks = [e["op_index"] for e in trace.events if e["action"] == "mark"]
    assert [names[i] for i in marks] == [f"mark: {m.name}" for m in trace.marks]
    # categories are the final labels: AdamW's state and the gradients are named as such
    allocated = {e["category"] for e in ops if e["action"] == "alloc"}
    assert {"parameters", "gradients", "optimizer state", "activations & temporaries"} <= allocated


def test_a_storage_resized_in_place_is_a_free_and_an_alloc_at_the_same_address():
    with track_memory() as trace:
        x = torch.empty(10)
        x.resize_(1000)
    events = [e for e in trace.events if e["action"] != "mark"]
    resized = [e for e in events if e["op"] == "resize_.default"]
    assert [(e["action"], e["size"]) for e in resized] == [("free", 40), ("alloc", 4000)]
    assert len({e["addr"] for e in events}) == 1
    assert _replay(trace.events)[1] == {events[0]["addr"]: 4000} and trace.peak_bytes == 4000
    del x


def test_mark_outside_the_block_is_an_error():
    with track_memory() as trace:
        pass
    with pytest.raises(RuntimeError, match="inside"):
        trace.mark("too late")


def test_a_settled_mark_waits_for_a_storage_another_thread_lets_go():
    """As gloo's worker thread holds a collective's buffer a moment after the wait returns."""
    import threading
    import time

    def hold(tensor, seconds):
        time.sleep(seconds)
        del tensor

    with track_memory() as trace:
        x = torch.empty(1000)  # 4,000 bytes
        threading.Thread(target=hold, args=(x, 0.3)).start()
        del x
        early = trace.mark("at once")
        threading.Thread(target=hold, args=(torch.empty(500), 0.3)).start()
        settled = trace.mark("settled", settle=1.0)
    assert early.current_bytes == 4000  # still held by the thread
    assert settled.current_bytes == 0  # both let go before the mark


def test_cpu_tracker_cannot_be_switched_off():
    with pytest.raises(ValueError):
        track_memory(device="cpu", track_storages=False)


def test_storage_resized_from_python_is_seen_with_watch_resizes():
    """FSDP2 frees a gathered parameter with `untyped_storage().resize_(0)`, which is not an operator: the dispatch
    mode never sees it. With watch_resizes the tracker re-measures live storages after each operator."""
    for watch, expected_after_free in ((True, 0), (False, 4000)):
        with track_memory(watch_resizes=watch) as trace:
            t = torch.empty(1000)
            t.untyped_storage().resize_(0)  # freed from Python, as FSDP2's free_storage does
            one = torch.empty(1)  # any operator afterwards
            trace.mark("after the free")
            del t, one
        assert trace.marks[0].current_bytes == expected_after_free + 4, watch


def test_peak_split_keeps_the_bytes_at_the_peak():
    """A storage that shrinks after the peak still counts with its size at the peak in `peak_by_category`."""
    with track_memory(watch_resizes=True) as trace:
        t = torch.empty(1000)
        t.untyped_storage().resize_(0)
        torch.empty(1)
    assert trace.peak_bytes == 4000
    assert sum(trace.peak_by_category.values()) == 4000


@pytest.mark.parametrize("container", [list, dict])
def test_optimizers_stepped_inside_backward_are_counted_by_category(container):
    """One AdamW per parameter, stepped in a post-accumulate-grad hook (lesson 05): their state is counted as
    optimizer state when they are given as a list or a dict, and at the end of backward no gradient is alive."""
    widths, batch = [30, 50, 40, 6], 12
    model = mlp(widths)
    optimizers = {p: torch.optim.AdamW([p], lr=1e-3) for p in model.parameters()}

    def step_now(p):
        optimizers[p].step()
        optimizers[p].zero_grad(set_to_none=True)

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step_now)
    x, y = torch.randn(batch, widths[0]), torch.randint(0, widths[-1], (batch,))
    torch.nn.functional.cross_entropy(model(x), y).backward()  # creates every AdamW state
    given = list(optimizers.values()) if container is list else optimizers
    with track_memory(model=model, optimizer=given, inputs=(x, y)) as trace:
        torch.nn.functional.cross_entropy(model(x), y).backward()
        trace.mark("after backward")
    mark = trace.marks[0]
    states = 2 * F32 * n_params(widths) + F32 * len(optimizers)  # exp_avg, exp_avg_sq and a float32 step each
    assert mark.by_category.get(OPTIMIZER_STATE) == states
    assert mark.by_category.get(GRADIENTS, 0) == 0
    assert trace.start_bytes == F32 * n_params(widths) + states + F32 * batch * widths[0] + I64 * batch
