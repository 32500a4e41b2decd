#!/usr/bin/env python
"""Benchmark scripts/grade.py on a class: wall time of N learners x every lesson at each --jobs, with CUDA visible
and/or hidden.

    python scripts/bench_grading.py [--learners 3] [--jobs 1 2] [--cuda visible hidden] [--lessons SLUG ...]
                                    [--deadline SECONDS] [--class-size 300] [--cores 16]
                                    [--out results/grading_benchmark.json]

The class is made from the lessons themselves, learner by learner in turn: one submits the solution notebook (with
lesson 08's run, as a learner hands it in), the next the blank learner version, the next the solution with its first
exercise's solution replaced by the stub. Each run grades the same class with the same seed: one run per --cuda
setting and --jobs value. `--cuda hidden` grades with CUDA_VISIBLE_DEVICES="" (on a GPU machine: as a grader without
a GPU, its kernels and judges see none); `visible` leaves the machine as it is. The CSVs of runs with the same --cuda
setting must be identical. Runs of a GPU machine with CUDA visible and hidden differ where a GPU check earns its
points only with a GPU.

As it goes it prints each graded notebook (how many of how many, seconds since the run began, the notebook's own
time) and rewrites --out after each one, so a benchmark stopped at a time limit (--deadline, or a killed call)
still says what it measured: a run cut short is `"complete": false` with the notebooks it graded. The result: wall
times, each notebook's grading time as grade.py reports it, per lesson and kind, the machine, its load before each
run, and from the run with one thread per kernel an estimate for a class of --class-size learners x every lesson on
--cores cores. Each run starts with an empty cache of the 7B simulations (memlab.estimate.simulation_cache), which
its judges then share, as a class's do. Nothing is asserted about speed (speed belongs in results/, not in tests).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from coursetools.build_lessons import ROOT, lesson_dirs, render
from coursetools.execute_solutions import hand_in
from grading.batch import kernel_threads
from memlab.estimate import CACHE_ENV


def make_class(folder: Path, learners: int, only: list[str] | None = None) -> list[str]:
    import nbformat

    lessons = [p.name for p in lesson_dirs(ROOT / "solutions") if not only or p.name in only]
    released = render(ROOT / "solutions")
    for i in range(learners):
        student = f"learner{i + 1:02d}"
        for slug in lessons:
            target = folder / student / slug / f"{slug}.ipynb"
            target.parent.mkdir(parents=True)
            kind = KINDS[i % 3]
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
    parser.add_argument(
        "--cuda",
        nargs="+",
        choices=CUDA_SETTINGS,
        default=["visible"],
        help="grade with CUDA as the machine has it (visible) and/or hidden (CUDA_VISIBLE_DEVICES=''); "
        "default: visible",
    )
    parser.add_argument("--lessons", nargs="+", metavar="SLUG", help="default: every lesson in solutions/")
    parser.add_argument(
        "--deadline", type=float, help="seconds for every run together: a run still grading then is stopped"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "grading_benchmark.json")
    args = parser.parse_args(argv)

    started = time.monotonic()
    deadline = started + args.deadline if args.deadline else None
    result = {
        "what": "",
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "runs": [],
        "complete": False,
    }
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        subs = Path(tmp) / "submissions"
        lessons = make_class(subs, args.learners, args.lessons)
        notebooks = args.learners * len(lessons)
        result["what"] = (
            f"scripts/grade.py on {args.learners} learners x {len(lessons)} lessons ({', '.join(lessons)}), in "
            "turn solved (lesson 08 with its run handed in), blank, and with the first exercise unwritten; every "
            "notebook executed in the sandboxed kernel, its demonstrations tagged skip-when-grading left out; each "
            "run starts with an empty 7B-simulation cache, shared by its judges"
        )
        csvs: dict[tuple[str, int], str] = {}
        for cuda in args.cuda:
            for jobs in args.jobs:
                if deadline is not None and time.monotonic() >= deadline:
                    result["runs"].append(
                        {"cuda": cuda, "jobs": jobs, "complete": False, "not_started": "deadline"}
                    )
                    continue
                out = Path(tmp) / f"grades-{cuda}-jobs{jobs}.csv"
                run = {"cuda": cuda, "jobs": jobs, "torch_threads_per_kernel": kernel_threads(jobs)}
                result["runs"].append(run)
                grade_class(
                    subs,
                    out,
                    jobs,
                    cuda,
                    lessons,
                    args.learners,
                    deadline,
                    run,
                    Path(tmp),
                    lambda: save(result, args.out),
                )
                if run["complete"]:
                    csvs[(cuda, jobs)] = out.read_text()
    summarize(result, csvs, notebooks, args, len(lessons))
    save(result, args.out)
    identical = result["csv_identical_across_jobs"]
    print(f"wrote {args.out}; CSVs identical within each --cuda setting: {identical}")
    failed = [r for r in result["runs"] if str(r.get("stopped", "")).startswith("grade.py exited")]
    return 1 if failed or identical is False else 0


CUDA_SETTINGS = ("visible", "hidden")


def grade_class(subs, out, jobs, cuda, lessons, learners, deadline, run, tmp, saved) -> int:
    """One run of grade.py on the class: its progress printed and recorded into `run` as each notebook is graded
    (`saved()` writes the result file each time); stopped at `deadline` (time.monotonic()). grade.py's exit status."""
    env = {**os.environ, CACHE_ENV: str(tmp / f"simulations-{cuda}-jobs{jobs}")}
    # an empty 7B-simulation cache for each run (memlab.estimate.simulation_cache): its judges simulate each plan
    # once and share it, as a class's do; the first run does not warm the next one
    if cuda == "hidden":
        env["CUDA_VISIBLE_DEVICES"] = ""
    command = [sys.executable, str(ROOT / "scripts" / "grade.py"), str(subs), "--out", str(out)]
    command += ["--jobs", str(jobs), "--seed", "2026", "--lessons", *lessons]
    notebooks = learners * len(lessons)
    run["load_average_before"] = [round(x, 2) for x in os.getloadavg()]
    run["notebooks"], run["complete"] = [], False
    label = f"--cuda {cuda} --jobs {jobs}"
    print(f"[bench] {label}: grading {notebooks} notebooks", flush=True)
    start = time.monotonic()
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    timer = None
    if deadline is not None:
        import threading

        timer = threading.Timer(max(0.0, deadline - start), _stop, args=(proc,))
        timer.start()
    tail = []
    for line in proc.stderr:
        tail = (tail + [line])[-40:]
        graded = notebook_line(line)
        if graded is None:
            continue
        run["notebooks"].append(graded)
        elapsed = time.monotonic() - start
        run["wall_s"] = round(elapsed, 1)
        print(
            f"[bench] {label}: {len(run['notebooks'])}/{notebooks} graded, {elapsed:.0f} s: {graded['learner']} "
            f"{graded['lesson']} {graded['total']:g} points ({graded['seconds']:.1f} s)",
            flush=True,
        )
        saved()
    code = proc.wait()
    if timer is not None:
        timer.cancel()
    seconds = time.monotonic() - start
    run["wall_s"] = round(seconds, 1)
    run["notebooks"] = sorted(run["notebooks"], key=lambda r: (r["lesson"], r["learner"]))
    run["per_lesson_s"] = per_lesson(run["notebooks"])
    run["complete"] = code == 0 and len(run["notebooks"]) == notebooks
    if run["complete"]:
        run["per_notebook_s"] = round(seconds / notebooks, 2)
    elif code != 0 and deadline is not None and time.monotonic() >= deadline:
        run["stopped"] = f"at the deadline, {seconds:.0f} s in: {len(run['notebooks'])} of {notebooks} graded"
    else:
        run["stopped"] = f"grade.py exited {code}: " + "".join(tail)[-1500:]
        print("".join(tail)[-3000:], file=sys.stderr)
    print(f"[bench] {label}: {len(run['notebooks'])} of {notebooks} notebooks in {seconds:.0f} s", flush=True)
    saved()
    return code


def _stop(proc: subprocess.Popen) -> None:
    """grade.py and everything it started (its workers, their kernels: grade.py's own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def summarize(result: dict, csvs: dict, notebooks: int, args, lessons: int) -> None:
    """Speed-ups against the first complete run of the same --cuda setting, whether the CSVs agree, the estimate."""
    for cuda in CUDA_SETTINGS:
        complete = [r for r in result["runs"] if r["cuda"] == cuda and r.get("complete")]
        for run in complete:
            run["speedup_vs_first"] = round(complete[0]["wall_s"] / run["wall_s"], 2)
    same = [
        len({text for (cuda, _jobs), text in csvs.items() if cuda == setting}) <= 1
        for setting in CUDA_SETTINGS
    ]
    result["csv_identical_across_jobs"] = all(same) if csvs else None
    result["complete"] = all(r.get("complete") for r in result["runs"])
    result["class_estimate"] = {
        cuda: class_estimate(
            [r for r in result["runs"] if r["cuda"] == cuda and r.get("complete")],
            notebooks,
            args.class_size,
            lessons,
            args.cores,
        )
        for cuda in args.cuda
    }


def save(result: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    os.replace(tmp, path)


def machine() -> dict:
    import torch

    return {
        "cpus": os.cpu_count(),
        "cpu": _cpu_name(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


LINE = re.compile(
    r"^\s+(?P<student>\S+)\s+(?P<lesson>\d\d-[\w-]+): (?P<total>[\d.]+)/[\d.]+(?: FLAGGED)? \((?P<s>[\d.]+) s\)$"
)
KINDS = ("solved", "blank", "one-exercise-unwritten")


def notebook_line(line: str) -> dict | None:
    """One graded notebook from grade.py's progress line ("  learner01  01-memory-anatomy: 10/10 (9.1 s)")."""
    match = LINE.match(line.rstrip("\n"))
    if match is None:
        return None
    index = int(match["student"].removeprefix("learner")) - 1
    return {
        "learner": match["student"],
        "kind": KINDS[index % 3],
        "lesson": match["lesson"],
        "total": float(match["total"]),
        "seconds": float(match["s"]),
    }


def notebook_times(stderr: str) -> list[dict]:
    """Each notebook's grading time, from grade.py's progress lines."""
    found = [graded for line in stderr.splitlines() if (graded := notebook_line(line)) is not None]
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
