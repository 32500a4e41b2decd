"""memlab.distributed: DDP, ZeRO-1 and FSDP2 run for real on 2 CPU processes (gloo), started by torchrun.

One launch runs every job (about 20 s on 2 cores); the tests read its results. The numbers asserted are exact
consequences of the set-up: the allreduce count is DDP's buckets times the micro-batches that sync, the per-rank
bytes are ZeRO's partitions of the model's tensors (fp32 AdamW: 4 B per parameter for weights and gradients, 8 B
for the moments, 4 B per `step` counter)."""

import math

import pytest

from memlab.distributed import LaunchFailed, launch

pytestmark = pytest.mark.slow  # starts process groups (gloo) for every test: the full tier

WIDTHS = (256, 512, 512, 10)  # every first dimension even: ZeRO-3 splits each tensor exactly in two
SHAPES = [(512, 256), (512,), (512, 512), (512,), (10, 512), (10,)]
PSI = sum(math.prod(s) for s in SHAPES)


@pytest.fixture(scope="module")
def runs():
    return launch(
        {
            "no_sync": dict(accumulation=4, steps=2),
            "scaler_order": {},
            "zero_memory": dict(widths=WIDTHS),
            "zero_memory#unwatched": dict(widths=WIDTHS, strategies=["fsdp2"], watch_resizes=False),
            "token_normalisation": {},
            "sync_memory": dict(widths=WIDTHS, accumulation=3),
        }
    )


def test_no_sync_skips_the_allreduce_of_all_but_the_last_micro_batch(runs):
    for rank in runs["no_sync"]:
        every = rank["allreduce every micro-batch"]["allreduce_calls_per_step"]
        once = rank["no_sync"]["allreduce_calls_per_step"]
        assert every == 4 * once and once >= 1  # DDP's buckets, once per step instead of once per micro-batch
        assert rank["max_grad_difference_between_loops"] <= 1e-6 * rank["max_abs_grad"]
        assert rank["max_grad_error_vs_global_batch"] <= 1e-6 * rank["max_abs_grad"]


def test_the_inf_check_after_the_allreduce_keeps_ranks_in_step(runs):
    rank0, rank1 = runs["scaler_order"]  # rank 1's loss is inf
    for rank in (rank0, rank1):
        ddp = rank["DDP"]
        assert ddp["skipped_step"] and ddp["non_finite_parameters"] == 0 and ddp["same_parameters_as_rank0"]
        assert ddp["scale_after"] == 2.0**15
    before = "unscale_ before the allreduce"
    assert not rank0[before]["skipped_step"] and rank0[before]["non_finite_parameters"] > 0
    assert rank1[before]["skipped_step"] and not rank1[before]["same_parameters_as_rank0"]


def test_per_rank_bytes_follow_zero(runs):
    for rank in runs["zero_memory"]:
        by = {name: s["after_step"] for name, s in rank["strategies"].items()}
        steps = 4 * len(SHAPES)
        state = ("parameters", "gradients", "optimizer state")
        assert [by["ddp"][key] for key in state] == [by["ddp_bucket_view"][key] for key in state]
        assert [by["ddp"][key] for key in state[:2]] == [by["zero1"][key] for key in state[:2]]
        assert by["ddp"]["parameters"] == by["ddp"]["gradients"] == 4 * PSI
        assert by["ddp"]["optimizer state"] == 8 * PSI + steps
        # DDP's gradient buckets are a second copy of the gradients, unless the gradients are views of them
        assert (
            by["ddp"]["activations & temporaries"] - by["ddp_bucket_view"]["activations & temporaries"]
            == 4 * PSI
        )
        assert by["fsdp2"]["parameters"] == by["fsdp2"]["gradients"] == 4 * PSI // 2
        assert by["fsdp2"]["optimizer state"] == 8 * PSI // 2 + steps
        assert by["fsdp2"]["activations & temporaries"] == rank["strategies"]["fsdp2"]["input_bytes"]
    # ZeRO-1: whole tensors, largest first to the rank holding fewer elements: the 512x512 weight alone on rank 0
    zero1 = [rank["strategies"]["zero1"]["after_step"]["optimizer state"] for rank in runs["zero_memory"]]
    assert zero1 == [8 * 512 * 512 + 4, 8 * (PSI - 512 * 512) + 4 * (len(SHAPES) - 1)]


def test_tracker_sees_fsdp2_free_its_gathered_parameters(runs):
    """The tracker fix: without re-measuring, FSDP2's gathered (unsharded) parameters look alive after the step."""
    for watched, unwatched in zip(runs["zero_memory"], runs["zero_memory#unwatched"]):
        good = watched["strategies"]["fsdp2"]
        bad = unwatched["strategies"]["fsdp2"]
        assert good["after_step"]["activations & temporaries"] == good["input_bytes"]
        assert bad["after_step"]["activations & temporaries"] > good["input_bytes"] + 4 * PSI // 2
        assert good["peak_bytes"] < bad["peak_bytes"]


def test_token_normalisation_under_ddp_needs_the_global_count_times_the_ranks(runs):
    for rank in runs["token_normalisation"]:
        assert rank["global_tokens"] == sum(r["local_tokens"] for r in runs["token_normalisation"])
        ways = rank["ways"]
        # DDP averages the ranks' gradients: dividing by the global count leaves them world_size times too small
        assert abs(ways["global token count"]["grad_norm_ratio"] - 1 / rank["world_size"]) < 1e-6
        assert (
            ways["global count x ranks"]["relative_difference"] < 1e-5
        )  # Trainer's way: the global token mean
        assert ways["rank's own token count"]["relative_difference"] > 0.1  # every rank weighed alike: wrong
    assert runs["token_normalisation"][0]["local_tokens"] != runs["token_normalisation"][1]["local_tokens"]


def test_skipping_the_sync_keeps_unsharded_gradients_under_fsdp2(runs):
    for rank in runs["sync_memory"]:
        ddp, fsdp2 = rank["ddp"], rank["fsdp2"]
        # DDP holds whole gradients and their buckets either way: no_sync() costs no memory
        assert ddp["sync every micro-batch"]["held"] == ddp["sync on the last only"]["held"] == 2 * 4 * PSI
        # FSDP2 keeps its gradient shard when it reduce-scatters, the whole (unsharded) gradient when it does not
        assert fsdp2["sync every micro-batch"]["held"] == 4 * PSI // 2
        assert fsdp2["sync on the last only"]["held"] == 4 * PSI


def test_a_failing_job_says_why():
    with pytest.raises(ValueError, match="jobs must be among"):
        launch({"no_such_job": {}})
    with pytest.raises(LaunchFailed, match="strategy must be one of"):
        launch({"zero_memory": dict(strategies=["zero9"])})


def test_a_progress_bar_counts_the_jobs_as_rank_0_finishes_them(capsys):
    """Lesson 05 launches five jobs in one torchrun (about 20 s on 2 idle cores, minutes on a busy laptop): with
    `progress`, a tqdm bar (stderr outside a notebook) counts them as rank 0 finishes each."""
    results = launch({"scaler_order": {}, "token_normalisation": {}}, progress="jobs done")
    assert set(results) == {"scaler_order", "token_normalisation"}
    bar = capsys.readouterr().err.replace("\r", "\n").splitlines()
    counts = [line for line in bar if line.startswith("jobs done:")]
    assert counts and "2/2" in counts[-1], bar
