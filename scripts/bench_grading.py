#!/usr/bin/env python
"""Benchmark scripts/grade.py on a class: wall time of N learners x every lesson at --jobs 1 and at --jobs 2.

    python scripts/bench_grading.py [--learners 3] [--jobs 1 2] [--lessons SLUG ...] [--class-size 300] [--cores 16]
                                    [--out results/grading_benchmark.json]

The class is made from the lessons themselves, learner by learner in turn: one submits the solution notebook (with
lesson 08's run, as a learner hands it in), the next the blank learner version, the next the solution with its first
exercise's solution replaced by the stub. Each --jobs value grades the same class with the same seed; the CSVs must
be identical. The result is written as JSON: wall times, each notebook's grading time as grade.py reports it, per
lesson and kind, the machine, its load before the run, and from the --jobs run with one thread per kernel an estimate
for a class of --class-size learners x every lesson on --cores cores. Each run starts with an empty cache of the 7B
simulations (memlab.estimate.simulation_cache), which its judges then share, as a class's do. Nothing is asserted about speed (speed belongs
in results/, not in tests).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_lessons import ROOT, lesson_dirs, render  # noqa: E402
from execute_solutions import hand_in  # noqa: E402

from grading.batch import kernel_threads  # noqa: E402
from memlab.estimate import CACHE_ENV  # noqa: E402


def make_class(folder: Path, learners: int, only: list[str] | None = None) -> list[str]:
    import nbformat

    lessons = [p.name for p in lesson_dirs(ROOT / "solutions") if not only or p.name in only]
    released = render(ROOT / "solutions")
    for i in range(learners):
        student = f"learner{i + 1:02d}"
        for slug in lessons:
            target = folder / student / slug / f"{slug}.ipynb"
            target.parent.mkdir(parents=True)
            kind = ("solved", "blank", "one-exercise-unwritten")[i % 3]
            if kind == "blank":
                target.write_bytes(released[f"{slug}/{slug}.ipynb"])
                continue
            nb = nbformat.read(ROOT / "solutions" / slug / f"{slug}.ipynb", as_version=4)
            hand_in(
                slug, target.parent
            )  # lesson 08: the run the solution trained, handed in with the notebook
            if kind == "one-exercise-unwritten":
                stubbed = nbformat.reads(released[f"{slug}/{slug}.ipynb"].decode(), as_version=4)
                first = next(c for c in stubbed.cells if c.metadata.get("nbgrader", {}).get("solution"))
                for cell in nb.cells:
                    if (
                        cell.metadata.get("nbgrader", {}).get("grade_id")
                        == first.metadata["nbgrader"]["grade_id"]
                    ):
                        cell.source = first.source
            nbformat.write(nb, target)
    return lessons


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--learners", type=int, default=3)
    parser.add_argument(
        "--class-size", type=int, default=300, help="learners in the estimate (default: %(default)s)"
    )
    parser.add_argument("--cores", type=int, default=16, help="cores in the estimate (default: %(default)s)")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--lessons", nargs="+", metavar="SLUG", help="default: every lesson in solutions/")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "grading_benchmark.json")
    args = parser.parse_args(argv)

    import torch

    runs, csvs = [], {}
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        subs = Path(tmp) / "submissions"
        lessons = make_class(subs, args.learners, args.lessons)
        for jobs in args.jobs:
            out = Path(tmp) / f"grades-jobs{jobs}.csv"
            load = [round(x, 2) for x in os.getloadavg()]
            start = time.perf_counter()
            proc = subprocess.run(
                [
                    sys.executable,
                    str(ROOT / "scripts" / "grade.py"),
                    str(subs),
                    "--out",
                    str(out),
                    "--jobs",
                    str(jobs),
                    "--seed",
                    "2026",
                ],
                capture_output=True,
                text=True,
                # an empty 7B-simulation cache for each run (memlab.estimate.simulation_cache): its judges simulate
                # each plan once and share it, as a class's do; the first run does not warm the next one
                env={**os.environ, CACHE_ENV: str(Path(tmp) / f"simulations-jobs{jobs}")},
            )
            seconds = time.perf_counter() - start
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                return 1
            csvs[jobs] = out.read_text()
            notebooks = args.learners * len(lessons)
            graded = notebook_times(proc.stderr)
            runs.append(
                {
                    "jobs": jobs,
                    "torch_threads_per_kernel": kernel_threads(jobs),
                    "load_average_before": load,
                    "wall_s": round(seconds, 1),
                    "per_notebook_s": round(seconds / notebooks, 2),
                    "per_lesson_s": per_lesson(graded),
                    "notebooks": graded,
                }
            )
            print(f"--jobs {jobs}: {seconds:.0f} s for {notebooks} notebooks", flush=True)
            shutil.copy(out, Path(tmp) / f"kept-{jobs}.csv")
    identical = len(set(csvs.values())) == 1
    base = runs[0]["wall_s"]
    for run in runs:
        run["speedup_vs_first"] = round(base / run["wall_s"], 2)
    result = {
        "what": f"scripts/grade.py on {args.learners} learners x {len(lessons)} lessons ({', '.join(lessons)}), in "
        "turn solved (lesson 08 with its run handed in), blank, and with the first exercise unwritten; every notebook "
        "executed in the sandboxed kernel, its demonstrations tagged skip-when-grading left out; each run starts with an "
        "empty 7B-simulation cache, shared by its judges",
        "date": datetime.date.today().isoformat(),
        "machine": {
            "cpus": os.cpu_count(),
            "cpu": _cpu_name(),
            "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "python": platform.python_version(),
            "torch": torch.__version__,
        },
        "runs": runs,
        "csv_identical_across_jobs": identical,
        "class_estimate": class_estimate(
            runs, args.learners * len(lessons), args.class_size, len(lessons), args.cores
        ),
    }
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}; CSVs identical: {identical}")
    return 0 if identical else 1


LINE = re.compile(
    r"^\s+(?P<student>\S+)\s+(?P<lesson>\d\d-[\w-]+): (?P<total>[\d.]+)/[\d.]+(?: FLAGGED)? \((?P<s>[\d.]+) s\)$"
)
KINDS = ("solved", "blank", "one-exercise-unwritten")


def notebook_times(stderr: str) -> list[dict]:
    """Each notebook's grading time, from grade.py's progress lines ("  learner01  01-memory-anatomy: 10/10 (9.1 s)")."""
    found = []
    for line in stderr.splitlines():
        match = LINE.match(line)
        if match:
            index = int(match["student"].removeprefix("learner")) - 1
            found.append(
                {
                    "learner": match["student"],
                    "kind": KINDS[index % 3],
                    "lesson": match["lesson"],
                    "total": float(match["total"]),
                    "seconds": float(match["s"]),
                }
            )
    return sorted(found, key=lambda r: (r["lesson"], r["learner"]))


def per_lesson(graded: list[dict]) -> dict:
    """{lesson: {kind: mean seconds}} plus each lesson's mean over every kind."""
    table: dict[str, dict] = {}
    for row in graded:
        table.setdefault(row["lesson"], {}).setdefault(row["kind"], []).append(row["seconds"])
    return {
        lesson: {kind: round(sum(v) / len(v), 1) for kind, v in kinds.items()}
        | {"mean": round(sum(sum(v) for v in kinds.values()) / sum(len(v) for v in kinds.values()), 1)}
        for lesson, kinds in sorted(table.items())
    }


def class_estimate(runs: list[dict], notebooks: int, learners: int, lessons: int, cores: int) -> dict | None:
    """The time of `learners` x `lessons` notebooks on `cores` cores, from the run with one torch thread per kernel
    (one core per job): the same work per notebook, spread over `cores` jobs. It assumes the jobs scale to `cores` as
    they did here (compare the runs' speed-up) and that memory holds `cores` kernels (`--memory-gb` each)."""
    single = [r for r in runs if r["torch_threads_per_kernel"] == 1]
    if not single:
        return None
    run = min(single, key=lambda r: r["wall_s"])
    core_seconds_per_notebook = run["wall_s"] * run["jobs"] / notebooks
    seconds = learners * lessons * core_seconds_per_notebook / cores
    return {
        "learners": learners,
        "lessons": lessons,
        "cores": cores,
        "from_run_with_jobs": run["jobs"],
        "core_seconds_per_notebook": round(core_seconds_per_notebook, 1),
        "estimated_minutes": round(seconds / 60, 1),
        "command": f"python scripts/grade.py SUBMISSIONS --out grades.csv --jobs {cores}",
    }


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
