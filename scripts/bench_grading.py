#!/usr/bin/env python
"""Benchmark scripts/grade.py on a class: wall time of N learners x every lesson at --jobs 1 and at --jobs 2.

    python scripts/bench_grading.py [--learners 12] [--jobs 1 2] [--lessons SLUG ...] [--out results/grading_benchmark.json]

The class is made from the lessons themselves: a third of the learners submit the solution notebook, a third the
blank learner version, a third the solution with its first exercise's solution replaced by the stub. Each --jobs
value grades the same class with the same seed; the CSVs must be identical. The result (wall times, per-notebook
time, the machine) is written as JSON; nothing is asserted about speed (speed belongs in results/, not in tests).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_lessons import ROOT, lesson_dirs, render  # noqa: E402

from grading.batch import kernel_threads  # noqa: E402


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
    parser.add_argument("--learners", type=int, default=12)
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
            )
            seconds = time.perf_counter() - start
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                return 1
            csvs[jobs] = out.read_text()
            notebooks = args.learners * len(lessons)
            runs.append(
                {
                    "jobs": jobs,
                    "torch_threads_per_kernel": kernel_threads(jobs),
                    "wall_s": round(seconds, 1),
                    "per_notebook_s": round(seconds / notebooks, 2),
                }
            )
            print(f"--jobs {jobs}: {seconds:.0f} s for {notebooks} notebooks", flush=True)
            shutil.copy(out, Path(tmp) / f"kept-{jobs}.csv")
    identical = len(set(csvs.values())) == 1
    base = runs[0]["wall_s"]
    for run in runs:
        run["speedup_vs_first"] = round(base / run["wall_s"], 2)
    result = {
        "what": f"scripts/grade.py on {args.learners} learners x {len(lessons)} lessons ({', '.join(lessons)}): a "
        "third solved, a third blank, a third with the first exercise unwritten; every notebook executed in the "
        "sandboxed kernel",
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
    }
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}; CSVs identical: {identical}")
    return 0 if identical else 1


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
