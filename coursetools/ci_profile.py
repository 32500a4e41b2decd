#!/usr/bin/env python
"""Where CI's time goes: `.ci/run`'s steps and pytest's slowest items, as one JSON file.

    python scripts/ci_profile.py PROFILE_DIR [--out results/ci_profile.json]

`.ci/run` writes PROFILE_DIR (`.ci-profile/`, git-ignored): `steps.tsv` (each step's name and seconds, as it ran, and
the core-seconds the machine's CPUs were busy meanwhile) and `junit-*.xml` (pytest's JUnit reports: every test item's
time). This script joins them: the steps in order with their share of the run, the total, the tiers' items (`slow`
or not, as `pytest -m "not slow"` selects), the slowest items, and the time by test file. results/ci_profile.json
is this output for a run of `.ci/run` from a clean clone on the machine CI runs on (docs/develop.md says when and
where).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def read_steps(path: Path) -> list[dict]:
    """Each line: the step's name, its wall seconds and (where /proc/stat could be read) the core-seconds the whole
    machine was busy meanwhile, all cores together."""
    steps = []
    for line in path.read_text().splitlines():
        name, seconds, *cpu = line.split("\t")
        step = {"step": name, "seconds": int(seconds)}
        if cpu and cpu[0].strip():
            step["busy_core_seconds"] = int(cpu[0])
        steps.append(step)
    return steps


def read_junit(path: Path) -> list[dict]:
    """Every test item of a JUnit report: its file, name and seconds (setup, call and teardown together)."""
    items = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
        classname = case.get("classname", "")
        items.append(
            {
                "file": _file_of(classname),
                "name": case.get("name", ""),
                "seconds": float(case.get("time", 0)),
                "outcome": outcome,
            }
        )
    return items


def _file_of(classname: str) -> str:
    """The test file of a JUnit classname: `tests.kit.test_kit` (or `tests.kit.test_kit.TestClass`) is tests/kit/test_kit.py; an
    nbval item's classname is the notebook's dotted path (`solutions.01-memory-anatomy.01-memory-anatomy.ipynb`: no
    folder or notebook of the course has a dot in its name), solutions/01-memory-anatomy/01-memory-anatomy.ipynb."""
    if classname.endswith(".ipynb"):
        return classname.removesuffix(".ipynb").replace(".", "/") + ".ipynb"
    parts = classname.split(".")
    while len(parts) > 1 and parts[-1][:1].isupper():
        parts.pop()
    return "/".join(parts) + ".py"


def profile(folder: Path) -> dict:
    steps = read_steps(folder / "steps.tsv")
    total = sum(s["seconds"] for s in steps)
    cpus = os.cpu_count() or 1
    for step in steps:
        step["share"] = round(step["seconds"] / total, 3) if total else 0.0
        if "busy_core_seconds" in step and step["seconds"]:  # 1.0: every core busy for the whole step
            step["cores_busy_fraction"] = round(step["busy_core_seconds"] / (step["seconds"] * cpus), 2)
    reports = {}
    for report in sorted(folder.glob("junit-*.xml")):
        items = read_junit(report)
        by_file: dict[str, float] = {}
        for item in items:
            by_file[item["file"]] = by_file.get(item["file"], 0.0) + item["seconds"]
        reports[report.stem.removeprefix("junit-")] = {
            "items": len(items),
            "outcomes": {
                o: sum(1 for i in items if i["outcome"] == o) for o in sorted({i["outcome"] for i in items})
            },
            "item_seconds": round(sum(i["seconds"] for i in items), 1),
            "slowest_items": [
                {k: i[k] for k in ("file", "name", "seconds")}
                for i in sorted(items, key=lambda i: -i["seconds"])[:25]
            ],
            "seconds_by_file": {f: round(s, 1) for f, s in sorted(by_file.items(), key=lambda kv: -kv[1])},
        }
    return {
        "what": "one run of .ci/run: its steps (wall seconds, in order; the core-seconds the machine was busy "
        "meanwhile, and that as a fraction of all its cores for the step's time) and pytest's items (JUnit times; "
        "under pytest-xdist item seconds add up across workers, so they exceed the step's wall time)",
        "date": datetime.date.today().isoformat(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "total_seconds": total,
        **(
            {"busy_core_seconds": sum(s["busy_core_seconds"] for s in steps)}
            if steps and all("busy_core_seconds" in s for s in steps)
            else {}
        ),
        "steps": steps,
        "pytest": reports,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the profile folder .ci/run wrote (.ci-profile/)")
    parser.add_argument("--out", type=Path, help="default: FOLDER/ci_profile.json")
    args = parser.parse_args(argv)
    if not (args.folder / "steps.tsv").is_file():
        print(f"no {args.folder / 'steps.tsv'}: run .ci/run first", file=sys.stderr)
        return 1
    out = args.out or args.folder / "ci_profile.json"
    data = profile(args.folder)
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {out}: {data['total_seconds']} s in {len(data['steps'])} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
