"""`python scripts/bench_capstone.py`: how accurate lesson 08's graded run is, seed after seed.

Exercise 8.3 draws a seed for each learner's run (`RUN_SEED`), so each honest run is one draw from a distribution,
and the check's accuracy bar (`autograders.lesson08.ACCURACY_BAR`) must sit below all of it, and far enough above
chance (0.5 on `N_EVAL` reviews) that an untrained adapter cannot reach it. This runs the solution's own
`run_capstone` (coursetools.solution_code) with the lesson's CPU profile for `--seeds` seeds, `--jobs` at a time
(one thread each), and writes every accuracy, their range and the bar's distance from chance to
results/capstone_accuracy.json.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLUG = "08-capstone-7b-lora"


def _run(seed: int) -> dict:
    """One graded run with `seed`, in this (worker) process."""
    import torch

    from coursetools.solution_code import solution

    torch.set_num_threads(1)
    run_capstone, capstone = solution(SLUG, "run_capstone", "CAPSTONE")  # the dict run_capstone reads
    capstone["seed"] = seed
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        run = run_capstone(Path(folder))
    profile = {key: value for key, value in run["config"].items() if key != "seed"}
    return {
        "seed": seed,
        "accuracy": run["eval"]["accuracy"],
        "seconds": round(time.perf_counter() - start, 1),
        "profile": profile,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=16, help="how many runs (seeds 1..N)")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)), help="runs at a time")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "capstone_accuracy.json")
    args = parser.parse_args(argv)

    from autograders.lesson08 import ACCURACY_BAR, N_EVAL

    runs = []
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        for run in pool.imap_unordered(_run, range(1, args.seeds + 1)):
            runs.append(run)
            print(
                f"seed {run['seed']:>3}: accuracy {run['accuracy']:.3f} ({run['seconds']:.0f} s)", flush=True
            )
    profile = runs[0].pop("profile")  # the lesson's, the same in every run
    for run in runs[1:]:
        run.pop("profile")
    accuracies = sorted(r["accuracy"] for r in runs)
    # a coin's accuracy on N_EVAL reviews: 0.5 with this standard deviation
    chance_sd = math.sqrt(0.25 / N_EVAL)
    record = {
        "what": "lesson 08's graded run (the solution's run_capstone, CPU profile), one run per seed",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {args.jobs} runs at a time, 1 thread each",
        "profile": profile,
        "runs": sorted(runs, key=lambda r: r["seed"]),
        "accuracy": {
            "min": accuracies[0],
            "median": statistics.median(accuracies),
            "mean": round(statistics.fmean(accuracies), 4),
            "max": accuracies[-1],
            "stdev": round(statistics.stdev(accuracies), 4) if len(accuracies) > 1 else None,
        },
        "bar": ACCURACY_BAR,
        "n_eval": N_EVAL,
        "bar_above_chance_in_sd": round((ACCURACY_BAR - 0.5) / chance_sd, 2),
        "runs_below_the_bar": sum(a < ACCURACY_BAR for a in accuracies),
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(
        f"{len(runs)} runs: accuracy {accuracies[0]:.3f} to {accuracies[-1]:.3f} (median "
        f"{record['accuracy']['median']:.3f}); the bar {ACCURACY_BAR} is "
        f"{record['bar_above_chance_in_sd']} standard deviations above chance; {record['runs_below_the_bar']} "
        f"run(s) below it; written to {args.out}"
    )
    return 0
