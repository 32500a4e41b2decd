"""scripts/bench_grading.py's bookkeeping: what it reads from grade.py's progress lines, and what it concludes from
runs of which some were stopped (a run cut short by --deadline says what it graded and estimates nothing)."""

from __future__ import annotations

from types import SimpleNamespace

from coursetools import bench_grading


def test_a_progress_line_is_one_graded_notebook():
    graded = bench_grading.notebook_line("  learner02            03-amp-gradscaler: 0/12 (9.3 s)\n")
    assert graded == {
        "learner": "learner02",
        "kind": "blank",
        "lesson": "03-amp-gradscaler",
        "total": 0.0,
        "seconds": 9.3,
    }
    flagged = bench_grading.notebook_line("  learner04  08-capstone-7b-lora: 10/12 FLAGGED (53.0 s)")
    assert flagged["kind"] == "solved" and flagged["total"] == 10.0
    assert bench_grading.notebook_line("--jobs 2 (1 torch threads each), seed 2026") is None


def run(cuda, jobs, wall, complete=True):
    return {"cuda": cuda, "jobs": jobs, "torch_threads_per_kernel": 1, "wall_s": wall, "complete": complete}


def test_only_complete_runs_are_compared_and_estimated():
    result = {
        "runs": [run("visible", 16, 200.0), run("hidden", 16, 90.0), run("hidden", 8, 50.0, complete=False)],
    }
    csvs = {("visible", 16): "a", ("hidden", 16): "b"}  # a GPU check earns points only with CUDA visible
    args = SimpleNamespace(cuda=["visible", "hidden"], class_size=300, cores=16)
    bench_grading.summarize(result, csvs, 48, args, 8)
    assert result["csv_identical_across_jobs"] is True and result["complete"] is False
    visible, hidden = result["class_estimate"]["visible"], result["class_estimate"]["hidden"]
    assert visible["core_seconds_per_notebook"] == round(200 * 16 / 48, 1)
    assert hidden["from_run_with_jobs"] == 16  # not the run stopped at the deadline
    assert "speedup_vs_first" not in result["runs"][2]


def test_different_csvs_of_one_cuda_setting_fail_the_benchmark():
    result = {"runs": [run("hidden", 1, 100.0), run("hidden", 2, 60.0)]}
    args = SimpleNamespace(cuda=["hidden"], class_size=300, cores=16)
    bench_grading.summarize(result, {("hidden", 1): "a", ("hidden", 2): "a, but not quite"}, 24, args, 8)
    assert result["csv_identical_across_jobs"] is False
