"""Data parallelism for real, on the CPU: several processes talking through gloo, started with `torchrun`.

A notebook cannot be a distributed worker: each rank is its own Python process, and `torch.multiprocessing.spawn`
can only start a function that the new process can import (a function defined in a notebook cell is pickled by
name, `__main__.worker`, which the new process does not have). So the workers live here, and `launch` starts them
the way one starts any multi-GPU job:

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m memlab.distributed JOBS_JSON OUT_DIR

(`torchrun` is the same program: it starts the processes and gives each its RANK, WORLD_SIZE and a rendezvous
address). Every rank calls `init_process_group("gloo")`, runs each job `JOBS[name](**kwargs)` of JOBS_JSON
({name: kwargs}) and writes what it measured to `OUT_DIR/rank<r>.json`; `launch` returns the results by job, each
a list in rank order.

Jobs:
- `no_sync`: DDP with gradient accumulation, with and without `DistributedDataParallel.no_sync()`: allreduce calls
  (counted by a communication hook), gradients compared with each other and with the whole global batch on one
  process, time per optimizer step.
- `scaler_order`: `torch.amp.GradScaler` when one rank's gradients overflow: the inf check after DDP's allreduce
  (what DDP does) against a check before it.
- `zero_memory`: per-rank bytes of parameters, gradients and optimizer state (`memlab.measure.track_memory`) for
  one AdamW step of an MLP under DDP, ZeRO-1 (`ZeroRedundancyOptimizer`) and ZeRO-3 (FSDP2 `fully_shard`).
- `token_normalisation`: DDP with token counts that differ between ranks: the summed token loss divided by the
  rank's own count, by the global count, and by the global count times the number of ranks (what Trainer does),
  against one process on every rank's tokens.
- `sync_memory`: the memory cost of skipping the gradient sync during accumulation (DDP's `no_sync()`, FSDP2's
  `set_requires_gradient_sync(False)`): this rank's bytes between micro-batches, with and without the sync.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from memlab.i18n import N_  # the names of ways and phases a lesson shows with memlab.measure.display_name

STRATEGIES = ("ddp", "ddp_bucket_view", "zero1", "fsdp2")


class LaunchFailed(RuntimeError):
    """A distributed job did not finish; the message holds the end of the workers' output."""


def launch(
    jobs: dict[str, dict], world_size: int = 2, timeout: float = 180.0, progress: str | None = None
) -> dict[str, list[dict]]:
    """Run each job of `jobs` ({job name: keyword arguments}) in turn on `world_size` CPU processes (gloo), all in
    one torchrun launch; return {job name: [rank 0's result, rank 1's, ...]}. A name may carry a tag after "#"
    ("zero_memory#small") to run the same job twice with different arguments. With `progress` (a description),
    a progress bar (tqdm.auto) counts the jobs done as rank 0 finishes them."""
    unknown = {job.split("#")[0] for job in jobs} - set(JOBS)
    if unknown:
        raise ValueError(f"jobs must be among {sorted(JOBS)}, got {sorted(unknown)}")
    with tempfile.TemporaryDirectory(prefix="memlab-dist-") as out:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={world_size}",
            "-m",
            "memlab.distributed",
            json.dumps(jobs),
            out,
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
        log = Path(out, "torchrun.log")  # a file, not a pipe: nothing blocks while this process waits
        with open(log, "w") as sink, _progress_bar(progress, len(jobs)) as bar:
            run = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env)
            deadline = time.monotonic() + timeout
            while run.poll() is None:
                if time.monotonic() > deadline:
                    run.kill()
                    run.wait()
                    raise LaunchFailed(f"{sorted(jobs)} on {world_size} processes ran past {timeout:.0f} s")
                if bar is not None:
                    bar.update(len(list(Path(out).glob(DONE + "*"))) - bar.n)
                time.sleep(0.1)
            if bar is not None and run.returncode == 0:
                bar.update(len(jobs) - bar.n)
        paths = [Path(out, f"rank{rank}.json") for rank in range(world_size)]
        if run.returncode != 0 or not all(path.exists() for path in paths):
            errors = sorted(
                Path(out).glob("rank*.error")
            )  # a worker's own traceback says more than torchrun's
            text = errors[0].read_text() if errors else log.read_text(errors="replace")
            tail = "\n".join(text.strip().splitlines()[-25:])
            raise LaunchFailed(
                f"{sorted(jobs)} on {world_size} processes failed (exit {run.returncode}):\n{tail}"
            )
        ranks = [json.loads(path.read_text()) for path in paths]
        return {job: [rank[job] for rank in ranks] for job in jobs}


DONE = "done-"  # rank 0 leaves OUT_DIR/done-<n> when its n-th job (from 1) has finished on every rank


def _progress_bar(description: str | None, total: int):
    if description is None:
        return contextlib.nullcontext()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=description)


# ---- the jobs (run inside each rank) -------------------------------------------------------------------------------


def _mlp(widths, seed: int = 0) -> torch.nn.Sequential:
    from memlab.models import mlp

    torch.manual_seed(seed)
    return mlp(list(widths))


def _batch(rank: int, size: int, widths, step: int, seed: int = 0):
    """Rank `rank`'s micro-batch number `step`: the same on every run, different on every rank."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + rank * 10_007 + step)
    return torch.randn(size, widths[0], generator=g), torch.randint(0, widths[-1], (size,), generator=g)


def _counting_allreduce(counter: dict):
    """A DDP communication hook that does DDP's default allreduce and counts the calls and bytes."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    def hook(state, bucket):
        counter["calls"] += 1
        counter["bytes"] += bucket.buffer().numel() * bucket.buffer().element_size()
        return allreduce_hook(state, bucket)

    return hook


def no_sync(
    widths=(256, 1024, 1024, 10), micro_batch: int = 8, accumulation: int = 4, steps: int = 4
) -> dict:
    """One model, two accumulation loops over the same micro-batches: allreduce after every micro-batch's
    backward, or only after the last one (`no_sync()` around the others). Each micro-batch's loss is divided by
    `accumulation`, so the accumulated gradient is the mean over the rank's micro-batches and DDP's average makes it
    the mean over the global batch. Returns allreduce counts and bytes, time per optimizer step, and the largest
    gradient difference (between the two loops; against one process on the whole global batch)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = dist.get_rank(), dist.get_world_size()
    result = {"rank": rank, "world_size": world, "accumulation": accumulation, "micro_batch": micro_batch}
    grads = {}
    for variant in (N_("allreduce every micro-batch"), "no_sync"):  # no_sync: DDP's own name
        model = DDP(_mlp(widths))
        counter = {"calls": 0, "bytes": 0}
        model.register_comm_hook(None, _counting_allreduce(counter))
        opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: every step sees the same weights
        times = []
        for step in range(steps + 1):  # step 0 warms up and is not timed
            if step == 1:
                counter.update(calls=0, bytes=0)
            dist.barrier()
            start = time.perf_counter()
            for i in range(accumulation):
                x, y = _batch(rank, micro_batch, widths, i)
                last = i == accumulation - 1
                if variant == "no_sync" and not last:
                    with model.no_sync():
                        (F.cross_entropy(model(x), y) / accumulation).backward()
                else:
                    (F.cross_entropy(model(x), y) / accumulation).backward()
            if step == steps:
                grads[variant] = [p.grad.clone() for p in model.parameters()]
            opt.step()
            opt.zero_grad(set_to_none=True)
            times.append(time.perf_counter() - start)
        result[variant] = {
            "allreduce_calls_per_step": counter["calls"] / steps,
            "allreduce_mib_per_step": counter["bytes"] / steps / 2**20,
            "step_ms": 1000 * sum(times[1:]) / steps,
        }
    reference = _mlp(widths)  # one process, the whole global batch: every rank's micro-batches
    xs, ys = zip(*(_batch(r, micro_batch, widths, i) for r in range(world) for i in range(accumulation)))
    F.cross_entropy(reference(torch.cat(xs)), torch.cat(ys)).backward()
    a, b = grads["allreduce every micro-batch"], grads["no_sync"]
    result["max_grad_difference_between_loops"] = max(float((g - h).abs().max()) for g, h in zip(a, b))
    result["max_grad_error_vs_global_batch"] = max(
        float((g - p.grad).abs().max()) for g, p in zip(b, reference.parameters())
    )
    result["max_abs_grad"] = max(float(p.grad.abs().max()) for p in reference.parameters())
    result["n_parameters"] = sum(p.numel() for p in reference.parameters())
    return result


def scaler_order(widths=(16, 32, 4), micro_batch: int = 8, overflow_rank: int = 1) -> dict:
    """One fp32 training step with `torch.amp.GradScaler` where rank `overflow_rank`'s loss is inf (its
    gradients overflow, as an fp16 backward does), done two ways:

    - "DDP": gradients allreduced during backward, then `scaler.unscale_` finds the inf on every rank (the sum of
      an inf and a finite gradient is inf), so every rank skips the step;
    - "unscale_ before the allreduce": each rank unscales and checks its own gradients, then allreduces them by
      hand: only the rank that overflowed knows, the others step with inf gradients.

    Returns, per way: whether this rank skipped the step, its scale after `update()`, how many of its parameters
    are not finite, and whether its parameters still equal rank 0's."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = dist.get_rank(), dist.get_world_size()
    result = {"rank": rank, "overflow_rank": overflow_rank}
    for way in ("DDP", N_("unscale_ before the allreduce")):
        net = _mlp(widths)
        model = DDP(net) if way == "DDP" else net
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
        x, y = _batch(rank, micro_batch, widths, 0)
        loss = F.cross_entropy(model(x), y) * (float("inf") if rank == overflow_rank else 1.0)
        scaler.scale(loss).backward()
        scaler.unscale_(
            opt
        )  # checks this rank's gradients for inf: under DDP, already averaged over the ranks
        if way != "DDP":  # ... here averaged only now, after the check
            for p in net.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
        before = [p.detach().clone() for p in net.parameters()]
        scaler.step(opt)
        scaler.update()
        flat = torch.cat([p.detach().flatten() for p in net.parameters()])
        rank0 = flat.clone()
        dist.broadcast(rank0, src=0)
        result[way] = {
            "skipped_step": all(torch.equal(b, p) for b, p in zip(before, net.parameters())),
            "scale_after": float(scaler.get_scale()),
            "non_finite_parameters": int((~torch.isfinite(flat)).sum()),
            "same_parameters_as_rank0": bool(torch.equal(flat.nan_to_num(), rank0.nan_to_num())),
        }
    return result


def _wrap(strategy: str, model: torch.nn.Sequential):
    """`model` prepared for `strategy` on the default process group: (module to call, optimizer), AdamW."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    if strategy == "ddp":
        module = DDP(model)
        return module, torch.optim.AdamW(module.parameters())
    if strategy == "ddp_bucket_view":
        module = DDP(model, gradient_as_bucket_view=True)
        return module, torch.optim.AdamW(module.parameters())
    if strategy == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        module = DDP(model)
        return module, ZeroRedundancyOptimizer(module.parameters(), optimizer_class=torch.optim.AdamW)
    if strategy == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model, torch.optim.AdamW(model.parameters())
    raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")


def zero_memory(
    widths=(256, 512, 512, 10),
    micro_batch: int = 16,
    strategies=STRATEGIES,
    watch_resizes: bool | None = None,
) -> dict:
    """Per strategy, this rank's memory in one AdamW training step of `memlab.models.mlp(widths)` (fp32), after a
    warm-up step that creates the optimizer state: bytes by category at rest after `optimizer.step()` (before
    `zero_grad`), and the peak of each phase, from `memlab.measure.track_memory` (`watch_resizes` is passed on:
    None lets the tracker decide; False shows what it would count without seeing FSDP2's frees)."""
    from memlab.measure import track_memory

    rank, world = dist.get_rank(), dist.get_world_size()
    result = {"rank": rank, "world_size": world, "widths": list(widths), "strategies": {}}
    x, y = _batch(rank, micro_batch, widths, 0)
    for strategy in strategies:
        module, opt = _wrap(strategy, _mlp(widths))
        F.cross_entropy(module(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        with track_memory(model=module, optimizer=opt, inputs=(x, y), watch_resizes=watch_resizes) as trace:
            # settle: gloo's worker thread lets a collective's buffers go a moment after the wait (sync_memory);
            # once in CI, under load, FSDP2's 514 KiB of them were still held at the mark after the step
            loss = F.cross_entropy(module(x), y)
            trace.mark(N_("forward"), settle=0.1)
            loss.backward()
            del loss
            trace.mark(N_("backward"), settle=0.1)
            opt.step()
            after_step = trace.mark(N_("optimizer step"), settle=0.1)
        result["strategies"][strategy] = {
            "after_step": after_step.by_category,
            "peak_bytes": trace.peak_bytes,
            "phase_peaks": {m.name: m.peak_bytes for m in trace.marks},
            "phase_ends": {m.name: m.current_bytes for m in trace.marks},
            "input_bytes": x.nbytes + y.nbytes,
        }
        del module, opt
    return result


def _token_batch(rank: int, step: int, widths, rows: int, seq: int, keep: float):
    """Rank `rank`'s micro-batch `step` of "tokens": inputs (rows, seq, widths[0]) and labels (rows, seq), a
    fraction 1 - `keep` of them -100 (padding, prompts)."""
    g = torch.Generator().manual_seed(7_919 * rank + step)
    x = torch.randn(rows, seq, widths[0], generator=g)
    labels = torch.randint(0, widths[-1], (rows, seq), generator=g)
    labels[torch.rand(rows, seq, generator=g) >= keep] = -100
    labels[0, 0] = 0  # at least one target per micro-batch
    return x, labels


def token_normalisation(
    widths=(16, 32, 8), rows: int = 4, seq: int = 16, accumulation: int = 2, keep=(0.9, 0.2)
) -> dict:
    """One accumulated DDP step (`no_sync()` on all but the last micro-batch) of a token-level loss, where rank r
    keeps a fraction `keep[r]` of its labels (the others are -100), so the ranks see different numbers of target
    tokens. The summed token cross-entropy of each micro-batch is divided three ways before `backward()`:

    - "rank's own token count": each rank's token mean; DDP's average then weighs every rank alike;
    - "global token count": the count allreduced over the ranks; DDP's average divides once more by the ranks;
    - "global count x ranks": what `transformers.Trainer` does (`average_tokens_across_devices`): the global
      count, and the loss multiplied by the number of processes to undo DDP's average.

    Returns, per way, the gradient's norm against one process's token mean over every rank's tokens, and the
    relative difference of the two gradients; and the token counts."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = dist.get_rank(), dist.get_world_size()
    keep_rank = keep[rank % len(keep)]
    batches = [_token_batch(rank, i, widths, rows, seq, keep_rank) for i in range(accumulation)]
    local = sum(int((labels != -100).sum()) for _, labels in batches)
    count = torch.tensor(local)
    # the one extra collective: every rank needs the global count before its first backward
    dist.all_reduce(count)
    total = int(count)

    def loss_sum(model, x, labels):
        return F.cross_entropy(model(x).flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")

    reference = _mlp(widths)  # one process: every rank's micro-batches, the token mean over all of them
    everything = [
        _token_batch(r, i, widths, rows, seq, keep[r % len(keep)])
        for r in range(world)
        for i in range(accumulation)
    ]
    (sum(loss_sum(reference, x, labels) for x, labels in everything) / total).backward()
    g_ref = torch.cat([p.grad.flatten() for p in reference.parameters()])

    divisors = {
        N_("rank's own token count"): local,
        N_("global token count"): total,
        N_("global count x ranks"): total / world,  # loss / total * world
    }
    result = {"rank": rank, "world_size": world, "local_tokens": local, "global_tokens": total, "ways": {}}
    for way, divisor in divisors.items():
        model = DDP(_mlp(widths))
        for i, (x, labels) in enumerate(batches):
            last = i == accumulation - 1
            with contextlib.nullcontext() if last else model.no_sync():
                (loss_sum(model, x, labels) / divisor).backward()
        g = torch.cat([p.grad.flatten() for p in model.parameters()])
        result["ways"][way] = {
            "grad_norm_ratio": float(g.norm() / g_ref.norm()),
            "relative_difference": float((g - g_ref).norm() / g_ref.norm()),
        }
    return result


def sync_memory(widths=(256, 512, 512, 10), micro_batch: int = 16, accumulation: int = 4) -> dict:
    """What skipping the gradient sync during accumulation costs in memory. For DDP and FSDP2 (every `Linear`
    and the root `fully_shard`ed, as in `zero_memory`), an AdamW step over `accumulation` micro-batches, after a
    warm-up step that creates the optimizer state, with the gradient sync on every backward or only on the last
    (DDP: `no_sync()`; FSDP2: `set_requires_gradient_sync(False)`, which skips the reduce-scatter).

    Returns, per strategy and way, this rank's live bytes after each micro-batch's backward
    (`memlab.measure.track_memory`), and "held": the fewest bytes, after a micro-batch that is not the last, that
    are neither parameters, optimizer state nor the inputs. After a backward no activation is left, so that is the
    gradient memory kept from one micro-batch to the next: `.grad` (sharded under FSDP2 with the sync), DDP's
    buckets, FSDP2's unsharded gradients without the sync. Each mark first lets the collectives' buffers go
    (`settle`: gloo's worker thread holds them a moment after the wait, longer on a loaded machine, where once all
    three all-gather buffers were still alive at every mark); the fewest is taken all the same."""

    from memlab.measure import track_memory

    rank, world = dist.get_rank(), dist.get_world_size()
    batches = [_batch(rank, micro_batch, widths, i) for i in range(accumulation)]
    result = {"rank": rank, "world_size": world, "accumulation": accumulation, "widths": list(widths)}
    for strategy in ("ddp", "fsdp2"):
        result[strategy] = {}
        for way in (N_("sync every micro-batch"), N_("sync on the last only")):
            module, opt = _wrap(strategy, _mlp(widths))
            F.cross_entropy(module(batches[0][0]), batches[0][1]).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            after = []
            with track_memory(model=module, optimizer=opt, inputs=batches) as trace:
                for i, (x, y) in enumerate(batches):
                    skip = way == "sync on the last only" and i < accumulation - 1  # the last one syncs
                    if strategy == "fsdp2":
                        module.set_requires_gradient_sync(not skip)
                        context = contextlib.nullcontext()
                    else:
                        context = module.no_sync() if skip else contextlib.nullcontext()
                    with context:
                        (F.cross_entropy(module(x), y) / accumulation).backward()
                    after.append(trace.mark(f"micro-batch {i}", settle=0.1))  # gloo lets its buffers go
                opt.step()
                opt.zero_grad(set_to_none=True)
            fixed = sum(x.nbytes + y.nbytes for x, y in batches)  # the inputs, alive throughout
            held = [
                m.current_bytes - m.by_category["parameters"] - m.by_category["optimizer state"] - fixed
                for m in after[:-1]
            ]
            result[strategy][way] = {
                "live_after_backward": [m.current_bytes for m in after],
                "held": min(held),
            }
            del module, opt
    return result


JOBS = {
    "no_sync": no_sync,
    "scaler_order": scaler_order,
    "zero_memory": zero_memory,
    "token_normalisation": token_normalisation,
    "sync_memory": sync_memory,
}


def _main(argv: list[str]) -> None:
    jobs, out = json.loads(argv[0]), Path(argv[1])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        results = {}
        for n, (job, kwargs) in enumerate(jobs.items(), start=1):
            torch.manual_seed(0)
            results[job] = JOBS[job.split("#")[0]](**kwargs)
            dist.barrier()
            if rank == 0:
                (out / f"{DONE}{n}").touch()  # for launch's progress bar
    except BaseException:
        (out / f"rank{rank}.error").write_text(traceback.format_exc())
        raise
    finally:
        dist.destroy_process_group()
    (out / f"rank{rank}.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    _main(sys.argv[1:])
