"""coursetools/gpu/gpu_evidence.py and coursetools/gpu/make_wheelhouse.py on the CPU: the rehearsal of every part, the merge, the
plan's GPU commands, the budget, the pytest plugin, the plots, and the wheelhouse's own checks.

The rehearsal (`--rehearse`, about 2 minutes on 2 cores, marked slow) runs every part's plumbing here with CUDA
hidden: a CUDA-only measurement must come out as "skipped: ..." with its reason, never as a number, and the merge
must go to a temporary folder, never to results/.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from coursetools.gpu import gpu_evidence, make_wheelhouse

ROOT = Path(__file__).resolve().parents[2]
STATUS = ("measured", "skipped: ", "failed: ")


def records_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ---- the rehearsal --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rehearsal")
    before = sorted(p.name for p in (ROOT / "results").iterdir())
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "coursetools.gpu.gpu_evidence",
            "--rehearse",
            "--out",
            str(tmp / "out"),
            "--results",
            str(tmp / "results"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    after = sorted(p.name for p in (ROOT / "results").iterdir())
    return proc, tmp, before, after


@pytest.mark.slow
def test_the_rehearsal_records_every_part_measured_or_skipped_with_a_reason(rehearsal):
    proc, tmp, _, _ = rehearsal
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    for part in gpu_evidence.PART_TITLES:
        path = tmp / "out" / gpu_evidence.RECORDS.format(part=part)
        records = records_of(path)
        assert records, f"part {part} wrote no record"
        for record in records:
            assert {"name", "part", "status", "values", "units", "config", "command"} <= set(record)
            assert record["part"] == part and record["rehearsal"] is True and record["device"] == "cpu"
            assert record["status"] == "measured" or record["status"].startswith("skipped: "), record
            if record["status"].startswith("skipped: "):
                assert len(record["status"]) > len("skipped: ") + 3, record
        names = {r["name"]: r for r in records}
        for nodeid in gpu_evidence.tests_of_part(part):  # every GPU test of the part has its record, skipped
            found = [r for n, r in names.items() if n.startswith(gpu_evidence.record_name_of_test(nodeid))]
            assert found, f"part {part}: no record for {nodeid}"
            assert all(r["status"].startswith("skipped: no CUDA") for r in found), found


@pytest.mark.slow
def test_the_rehearsal_measures_no_gpu_number_and_runs_the_cpu_plumbing(rehearsal):
    _, tmp, _, _ = rehearsal
    records = {
        r["name"]: r
        for part in gpu_evidence.PART_TITLES
        for r in records_of(tmp / "out" / f"records-part{part}.jsonl")
    }
    assert records["environment"]["values"]["cuda_available"] is False
    assert records["rehearsal_notebook_runner"]["values"]["checks_passed"], (
        "the fixture notebook's checks ran"
    )
    assert records["torchao_float8_linear/all"]["status"] == "skipped: no CUDA"
    assert records["profiling_snapshot_files"]["status"].startswith("skipped: no CUDA")
    simulated = [r for n, r in records.items() if n.startswith("simulated_7b_lora/")]
    assert len(simulated) == 4 and all(r["values"]["simulated_peak_gib"] > 0 for r in simulated)
    graded = records["grading/00-fixture"]["values"]
    assert graded["solved"]["e1_square_check"] == "4" and graded["blank"]["total"] == "0"
    assert records["grading_gpu_checks/00-fixture"]["status"].startswith("skipped: no CUDA")
    assert records["grading_gpu_checks/00-fixture"]["values"]["needs"] == {"e3_gpu_ones_check": ["cuda"]}


@pytest.mark.slow
def test_the_rehearsal_merges_every_part_into_a_temporary_folder(rehearsal):
    _, tmp, before, after = rehearsal
    assert before == after, "the rehearsal wrote into results/"
    merged = json.loads((tmp / "results" / "cpu-rehearsal.json").read_text())
    assert set(merged["_parts"]) == {str(p) for p in gpu_evidence.PART_TITLES}
    assert merged["environment"]["status"] == "measured"
    assert merged["gpu_tests"], "the tests' records are merged under gpu_tests/"
    assert not list((tmp / "results").glob("*.png")), "no plot without a measured GPU number"


# ---- the plan -------------------------------------------------------------------------------------------------------


def test_the_plan_proves_the_gpu_path_in_its_first_call():
    """Call 1 grades every lesson (part 5, one grade.py run) beside lesson 07 at GPU sizes with TE (part 3); call 2
    is the class benchmark (part 6)."""
    calls = gpu_evidence.plan_calls()
    first = calls[0]["specs"]
    assert "3" in first and f"5:{','.join(gpu_evidence.lesson_slugs())}" in first
    assert calls[1]["specs"] == ["6"]
    ran = {spec.split(":")[0].split("@")[0] for call in calls for spec in call["specs"]}
    assert ran == {str(part) for part in gpu_evidence.PART_TITLES}, "every part is in some call"
    for call in calls:
        assert len(call["command"]) < 2000, call["command"]
        assert call["carry"] == [".whl"] and 0 < call["timeout_s"] <= 600
        budget = int(call["command"].split()[0].removeprefix("BUDGET="))
        # the script kills a part 60 s after its budget; the install and the packing need the rest
        assert call["timeout_s"] >= budget + gpu_evidence.KILL_AFTER_S + gpu_evidence.CALL_OVERHEAD_S
    wheels = make_wheelhouse.WHEELHOUSE
    carried = make_wheelhouse.folder_bytes(wheels) if wheels.is_dir() else make_wheelhouse.EXPECTED_BYTES
    assert make_wheelhouse.tree_bytes() + carried < make_wheelhouse.CARRY_LIMIT


def test_the_pieces_and_the_first_two_calls_fit_one_allowance_at_worst(monkeypatch):
    """15 minutes of GPU time: the machine's start, TE's six pieces (66 s measured), then the proof and the
    benchmark, each until its timeout. A machine is not started with under 4 minutes left: the rest of the
    plan waits for a later allowance, and --plan says which calls fit."""
    pieces = [{"title": f"piece {n}", "command": "bash coursetools/gpu/gpu_te.sh receive", "carry": [], "timeout_s": 60}
              for n in range(6)]  # fmt: skip
    monkeypatch.setattr(gpu_evidence, "te_piece_calls", lambda: pieces)
    plan = gpu_evidence.allowance_plan()
    assert [c["fits"] for c in plan] == [True] * 8 + [False]
    assert plan[7]["device_s"] <= gpu_evidence.ALLOWANCE_S
    assert plan[5]["device_s"] == gpu_evidence.MACHINE_START_S + 6 * gpu_evidence.PIECE_S


def test_the_plan_prints(capsys):
    assert gpu_evidence.main(["--plan"]) == 0
    out = capsys.readouterr().out
    calls = len(gpu_evidence.plan_calls()) + len(gpu_evidence.te_piece_calls())
    assert out.count('"command"') == calls and "--merge" in out
    assert out.count("fits the allowance") >= 2 and "a later allowance" in out


# ---- the call script ------------------------------------------------------------------------------------------------

#: a stand-in for the GPU machine's python3. pip succeeds, writing its arguments to $FAKE_LOG and taking
#: $FAKE_PIP_SECONDS; `-c` (gpu_te.sh's import of Transformer Engine) fails while the file $TE_IMPORT_FAILS holds a
#: count above 0, counting it down; gpu_evidence.py writes one record (its arguments, what it shares the GPU with, the
#: TE install's log as it found it) and its output
FAKE_PYTHON = """#!/bin/bash
if [ "$2" = pip ]; then echo "pip $*" >> "${FAKE_LOG:-/dev/null}"; sleep "${FAKE_PIP_SECONDS:-0}"; exit 0; fi
if [ "$1" = -c ]; then
  n=$(cat "${TE_IMPORT_FAILS:-/dev/null}" 2>/dev/null)
  if [ "${n:-0}" -gt 0 ]; then
    echo $((n - 1)) > "$TE_IMPORT_FAILS"; echo "ImportError: undefined symbol" >&2; exit 1
  fi
  echo "transformer_engine 2.20.2 imports"; exit 0
fi
out=""; prev=""; for a in "$@"; do [ "$prev" = --out ] && out=$a; prev=$a; done
mkdir -p "$out"
te_log=$(tr '\\n' '|' < "${GPU_EVIDENCE_TE_LOG:-/dev/null}")
printf '{"name": "args", "part": 0, "status": "measured", "values": {"args": "%s", "shared": "%s", "te_log": "%s"}}\\n' \\
    "$*" "$GPU_EVIDENCE_CONCURRENT" "$te_log" > "$out/records-part0.jsonl"
[[ $out == */p2 ]] && echo snapshot > "$out/lesson06_llama_step.pickle.gz"
echo "[part 0] args: measured"
"""


def write_fake_python(folder: Path) -> Path:
    """FAKE_PYTHON as `folder`/python3, for a PATH that puts `folder` first."""
    folder.mkdir(exist_ok=True)
    python = folder / "python3"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return python


def run_call_script(tmp_path: Path, specs: list[str], env: dict) -> subprocess.CompletedProcess:
    """coursetools/gpu/gpu_evidence_call.sh SPECS in a checkout of its own: the tooling, none of this one's .te/ or .whl/."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "coursetools").symlink_to(ROOT / "coursetools")
    command = ["bash", gpu_evidence.CALL_SCRIPT, *specs]
    return subprocess.run(command, cwd=checkout, env=env, capture_output=True, text=True, timeout=120)


def test_the_call_script_runs_its_specs_side_by_side_and_packs_every_record(tmp_path):
    """coursetools/gpu/gpu_evidence_call.sh with a stand-in python3: each spec becomes one gpu_evidence.py process with its
    own --out, every record and log ends up in $OUT/evidence.tgz, the snapshot files in snapshots.tgz."""
    import tarfile

    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    write_fake_python(bin_dir)
    out.mkdir()
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "OUT": str(out),
        "BUDGET": "5",
        "EVIDENCE_WORK": str(tmp_path / "work"),
        "TE_STORE": str(tmp_path / "no-te"),  # no Transformer Engine pieces (tests/tooling/test_gpu_te.py)
    }
    specs = [
        "1",
        "2",
        "5:03-amp-gradscaler,04-checkpointing",
        "4@tests/gpu/test_capstone_gpu.py::test_qlora_7b_peak",
    ]
    proc = run_call_script(tmp_path, specs, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["evidence.tgz", "snapshots.tgz"]
    with tarfile.open(out / "evidence.tgz") as archive:
        names = archive.getnames()
    assert {"./machine.txt", "./p1.log", "./p2.log", "./p5-03-04.log", "./p4-tests4.log"} <= set(names)
    records = gpu_evidence.record_files([out / "evidence.tgz", out / "snapshots.tgz"], tmp_path / "unpacked")
    args = {path.parent.name: records_of(path)[0]["values"] for path in records}
    assert args["p5-03-04"]["args"].endswith(
        "--part 5 --lessons 03-amp-gradscaler 04-checkpointing --budget 5 --out "
        + str(tmp_path / "work" / "p5-03-04")
    )
    assert "--part 4 --tests tests/gpu/test_capstone_gpu.py::test_qlora_7b_peak" in args["p4-tests4"]["args"]
    assert all(a["shared"].startswith(" ".join(specs)) for a in args.values()), "every part knows it shares"
    assert (tmp_path / "unpacked" / "out" / "p2" / "lesson06_llama_step.pickle.gz").is_file()


def test_only_the_named_tests_run_with_tests(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(gpu_evidence, "step_pytest", lambda ctx, name, selection: ran.append(selection))
    monkeypatch.setattr(gpu_evidence, "step_environment", lambda ctx: ran.append("environment"))
    gpu_evidence.run_part(1, tmp_path, 60, rehearsal=True, tests=["tests/gpu/test_amp_gpu.py"])
    assert ran == [["tests/gpu/test_amp_gpu.py"]]


# ---- budget, plugin, merge --------------------------------------------------------------------------------------------


def test_a_spent_budget_skips_what_remains_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    recorder = gpu_evidence.run_part(4, tmp_path, budget_s=1e-6, rehearsal=True)
    records = records_of(recorder.path)
    assert records and all(r["status"].startswith("skipped: budget: ") for r in records), records


PLUGIN_CONFTEST = """
import pytest

@pytest.fixture(scope="session")
def gpu_results():
    return {}
"""
PLUGIN_TESTS = """
import pytest

def test_measures(gpu_results):
    gpu_results["thing"] = {"peak_mib": 1.5, "step_ms": 2.0}

def test_per_lesson(gpu_results):
    gpu_results.setdefault("solutions_on_gpu", {})["01-a"] = {"seconds": 2}
    gpu_results["solutions_on_gpu"]["02-b"] = {"seconds": 3}

def test_fails_after_measuring(gpu_results):
    gpu_results["partial"] = {"peak_gib": 4.0}
    assert 1 == 2, "the check failed"

@pytest.mark.skip(reason="needs a CUDA GPU; none here")
def test_skipped():
    pass
"""


def _run_plugin(tmp_path: Path, deadline: float) -> list[dict]:
    (tmp_path / "conftest.py").write_text(PLUGIN_CONFTEST)
    (tmp_path / "test_fake_gpu.py").write_text(PLUGIN_TESTS)
    records = tmp_path / "records.jsonl"
    env = gpu_evidence.child_env(
        GPU_EVIDENCE_RECORDS=records,
        GPU_EVIDENCE_PART=9,
        GPU_EVIDENCE_DEVICE="cpu",
        GPU_EVIDENCE_REHEARSAL=1,
        GPU_EVIDENCE_DEADLINE=deadline,
        GPU_EVIDENCE_COLLECTED=tmp_path / "collected.txt",
        CUDA_VISIBLE_DEVICES="",
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "coursetools.gpu.gpu_evidence",
            "-p",
            "no:cacheprovider",
            "-q",
            "test_fake_gpu.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert len((tmp_path / "collected.txt").read_text().split()) == 4
    return records_of(records)


def test_the_plugin_records_what_each_test_measured_as_it_ends(tmp_path):
    records = {r["name"]: r for r in _run_plugin(tmp_path, time.time() + 3600)}
    assert records["thing"]["status"] == "measured"
    assert records["thing"]["values"] == {"peak_mib": 1.5, "step_ms": 2.0}
    assert records["thing"]["units"] == {"peak_mib": "MiB", "step_ms": "ms"}
    assert records["solutions_on_gpu/01-a"]["values"] == {"seconds": 2}
    assert records["solutions_on_gpu/02-b"]["values"] == {"seconds": 3}
    assert records["partial"]["status"] == "measured", "what a failing test measured is kept"
    failed = records["gpu_tests/test_fake_gpu.py::test_fails_after_measuring"]
    assert failed["status"].startswith("failed: ") and "the check failed" in failed["status"]
    skipped = records["gpu_tests/test_fake_gpu.py::test_skipped"]["status"]
    assert skipped == "skipped: no CUDA (needs a CUDA GPU; none here)"
    assert records["gpu_tests/test_fake_gpu.py::test_measures"]["status"] == "measured"


def test_the_plugin_starts_no_test_past_the_deadline(tmp_path):
    records = _run_plugin(tmp_path, time.time() - 1)
    assert len(records) == 4 and all(r["status"].startswith("skipped: budget: ") for r in records[:3])


def _fake_records(path: Path, gpu: str = "Test GPU 80GB") -> Path:
    recorder = gpu_evidence.Recorder(path, 1, gpu, rehearsal=False)
    recorder.measured(
        "environment",
        {"gpu": {"name": gpu, "capability": [9, 0], "total_gib": 79.2}, "torch": "0.0-test", "cuda": "0.0"},
    )
    recorder.measured(
        "fp8_gemm_sweep",
        {
            str(n): {"bf16_tflops": 1.0 * n, "fp8_gemm_tflops": 1.5 * n, "fp8_with_quantize_tflops": 1.2 * n}
            for n in (1024, 2048)
        },
    )
    recorder.measured("torchao_float8_linear/eager-1024", {"n": 1024, "fp8_tflops": 3.0, "bf16_tflops": 2.0})
    row = {"peak_gib": 10.0, "simulated_gib": 9.5, "reserved_gib": 11.0, "error": 0.05, "step_s": 1.0}
    recorder.measured("capstone_7b_lora_seq1024_mb1_eager", {"ckpt=True": row, "ckpt=False": row})
    recorder.measured("capstone_qlora_7b_seq1024_mb1", {"peak_gib": 6.0})
    recorder.measured(
        "checkpointing_7b_shaped_layers",
        {
            "layers": 4,
            "seq": 2048,
            "peak_mib_without": 9.0,
            "peak_mib_with": 3.0,
            "step_ms_without": 1,
            "step_ms_with": 2,
        },
    )
    recorder.measured(
        "amp_bf16_vs_fp32_mlp", {"fp32_peak_mib": 8, "bf16_peak_mib": 5, "fp32_step_ms": 2, "bf16_step_ms": 1}
    )
    return recorder.path


def test_the_merge_writes_one_file_per_gpu_and_its_plots(tmp_path):
    """Made-up records of a made-up GPU, merged into a temporary folder: the plots are drawn from what is there."""
    files = [_fake_records(tmp_path / "a" / "records-part1.jsonl")]
    written = gpu_evidence.merge(files, tmp_path / "results")
    merged = json.loads((tmp_path / "results" / "test-gpu-80gb.json").read_text())
    assert merged["_device"]["name"] == "Test GPU 80GB" and merged["_parts"]["1"]["measured"] == 7
    assert merged["torchao_float8_linear"]["eager-1024"]["values"]["fp8_tflops"] == 3.0
    pngs = sorted(p.name for p in written if p.suffix == ".png")
    assert pngs == ["test-gpu-80gb-fp8-gemm.png", "test-gpu-80gb-lora-7b.png", "test-gpu-80gb-tradeoffs.png"]

    later = gpu_evidence.Recorder(tmp_path / "b" / "records-part1.jsonl", 1, "Test GPU 80GB", rehearsal=False)
    later.skipped("fp8_gemm_sweep", "budget: 480 of 480 s used")
    later.measured("capstone_qlora_7b_seq1024_mb1", {"peak_gib": 7.0})
    gpu_evidence.merge([later.path], tmp_path / "results")
    merged = json.loads((tmp_path / "results" / "test-gpu-80gb.json").read_text())
    assert merged["fp8_gemm_sweep"]["status"] == "measured", (
        "a measured record is never replaced by a skipped one"
    )
    assert merged["capstone_qlora_7b_seq1024_mb1"]["values"]["peak_gib"] == 7.0, (
        "a newer measurement replaces"
    )


def test_plots_of_times_taken_on_a_shared_gpu_say_so(tmp_path, monkeypatch):
    monkeypatch.setenv(gpu_evidence.CONCURRENT_ENV, "1 2 3")
    files = [_fake_records(tmp_path / "a" / "records-part1.jsonl")]
    merged = json.loads(json.dumps(gpu_evidence.read_records(files)[1]))
    assert merged["config"]["concurrent_with"] == "1 2 3"
    drawn = []
    monkeypatch.setattr(gpu_evidence, "_note_shared", lambda fig: drawn.append(fig))
    gpu_evidence.merge(files, tmp_path / "results")
    assert len(drawn) == 2, "the FP8 GEMM and the trade-off plots are timings; the 7B peaks plot is not"


def test_the_merge_keeps_rehearsals_out_of_results(tmp_path):
    recorder = gpu_evidence.Recorder(tmp_path / "records-part1.jsonl", 1, "cpu", rehearsal=True)
    recorder.skipped("x", "no CUDA")
    with pytest.raises(SystemExit, match="rehearsal"):
        gpu_evidence.merge([recorder.path], gpu_evidence.RESULTS)


def test_a_record_cut_off_by_a_kill_loses_only_itself(tmp_path):
    recorder = gpu_evidence.Recorder(tmp_path / "records-part2.jsonl", 2, "cpu", rehearsal=True)
    recorder.measured("kept", {"seconds": 1.0})
    with open(recorder.path, "a") as fh:
        fh.write('{"name": "cut')
    assert [r["name"] for r in gpu_evidence.read_records([recorder.path])] == ["kept"]


def test_a_status_is_measured_skipped_or_failed_with_a_reason(tmp_path):
    recorder = gpu_evidence.Recorder(tmp_path / "r.jsonl", 1, "cpu", rehearsal=True)
    for status in ("ok", "skipped", "skipped: ", "failed:"):
        with pytest.raises(ValueError):
            recorder.add("x", status)


def test_the_gpu_checks_of_each_lesson_are_graded_cells():
    from grading.course import graded_cells

    found = 0
    for slug in gpu_evidence.lesson_slugs():
        cells = {gid for gid, _, _ in graded_cells(gpu_evidence.SOLUTIONS / slug)}
        checks = set(gpu_evidence.gpu_checks(gpu_evidence.SOLUTIONS, slug))
        assert checks <= cells, slug
        found += len(checks)
    assert found >= 6  # 03 e4, 04 e3, 06 e3 e5, 07 e4, 08 e5: read through `kit.needs_hardware` as well
    assert gpu_evidence.gpu_checks(gpu_evidence.FIXTURE_SOLUTIONS, "00-fixture") == {
        "e3_gpu_ones_check": ["cuda"]
    }


# ---- the wheelhouse -----------------------------------------------------------------------------------------------------


def test_wheelhouse_is_git_ignored():
    ignored = subprocess.run(["git", "check-ignore", "-q", ".whl/x.whl"], cwd=ROOT)
    assert ignored.returncode == 0


def _wheel(path: Path, files: dict[str, bytes], requires: list[str]) -> Path:
    meta = "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("demo-1.0.dist-info/METADATA", meta)
        zf.writestr("demo-1.0.dist-info/RECORD", "")
    return path


def test_slimming_drops_the_files_and_rewrites_the_record(tmp_path):
    wheel = _wheel(
        tmp_path / "demo-1.0-py3-none-any.whl",
        {"demo/libdemo_cuda128.so": b"x" * 1000, "demo/libdemo_cuda130.so": b"y", "demo/__init__.py": b""},
        [],
    )
    make_wheelhouse.slim(wheel, r"^demo/libdemo_cuda1[0-2]\d\.so$")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        record = zf.read("demo-1.0.dist-info/RECORD").decode()
    assert "demo/libdemo_cuda128.so" not in names and "demo/libdemo_cuda130.so" in names
    assert "demo/libdemo_cuda130.so,sha256=" in record and "cuda128" not in record


def test_requirements_are_read_for_python_3_12_on_linux(tmp_path):
    wheel = _wheel(
        tmp_path / "demo-1.0-py3-none-any.whl",
        {},
        [
            "a>=1",
            'b; python_version < "3.12"',
            'c; sys_platform == "win32"',
            'd; extra == "docs"',
            'e; python_version >= "3.12" and platform_machine == "x86_64"',
        ],
    )
    assert [r.name for r in make_wheelhouse.requirements_of(wheel, set())] == ["a", "e"]
    assert [r.name for r in make_wheelhouse.requirements_of(wheel, {"docs"})] == ["a", "d", "e"]


@pytest.mark.skipif(
    not make_wheelhouse.WHEELHOUSE.is_dir(),
    reason="no .whl/ here (python -m coursetools.gpu.make_wheelhouse)",
)
def test_the_wheelhouse_here_is_complete_for_the_gpu_image():
    assert make_wheelhouse.verify(make_wheelhouse.WHEELHOUSE) == []
