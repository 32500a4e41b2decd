"""Transformer Engine's way to the GPU machine, on the CPU: coursetools/gpu/make_te_wheelhouse.py's pieces and checks,
coursetools/gpu/gpu_te.sh receiving them one call at a time and installing them, the plan's piece calls, and
coursetools/gpu/gpu_evidence_call.sh installing TE before part 3 measures it.

The real build and its rehearsal (torch 2.11 and CUDA's wheels, about 5 GB, and 10 minutes of compiling) run in
`python -m coursetools.gpu.make_te_wheelhouse`, not here; results/transformer_engine_carry.json holds its last outcome.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from test_gpu_evidence import run_call_script, write_fake_python

from coursetools.gpu import gpu_evidence, make_wheelhouse
from coursetools.gpu import make_te_wheelhouse as te_wh

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "coursetools" / "gpu" / "gpu_te.sh"


@pytest.fixture
def fake_python(tmp_path):
    return write_fake_python(tmp_path / "bin")


@pytest.fixture
def te_dir(tmp_path):
    """A .te/ as make_te_wheelhouse.split leaves it, from stand-in wheels (random bytes) and an sdist."""
    dest = tmp_path / "made" / ".te"
    (dest / "wheels").mkdir(parents=True)
    (dest / "build").mkdir()
    contents = {
        "wheels/transformer_engine_cu13-2.20.2-py3-none-manylinux_2_28_x86_64.whl": os.urandom(250_000),
        "wheels/transformer_engine_torch-2.20.2-cp312-cp312-linux_x86_64.whl": os.urandom(20_000),
        "build/transformer_engine_torch-2.20.2.tar.gz": os.urandom(5_000),
    }
    for name, data in contents.items():
        (dest / name).write_bytes(data)
    pieces = te_wh.split(dest, piece_bytes=100_000)
    return dest, pieces, contents


def call(tmp_path, te_dir, names, command, env):
    """One GPU command: a fresh folder holding only the carried .te/ files, the script run in it."""
    folder = tmp_path / f"call-{len(list(tmp_path.glob('call-*')))}"
    (folder / ".te").mkdir(parents=True)
    for name in names:
        (folder / ".te" / name).write_bytes((te_dir / name).read_bytes())
    return subprocess.run(
        ["bash", SCRIPT, command], cwd=folder, env=env, capture_output=True, text=True, timeout=60
    )


def env_for(tmp_path, fake_python, **extra):
    return {
        "PATH": f"{fake_python.parent}:/usr/bin:/bin",
        "TE_STORE": str(tmp_path / "store"),
        "FAKE_LOG": str(tmp_path / "pip.log"),
        "TE_IMPORT_FAILS": str(tmp_path / "import-fails"),
        "FAKE_PIP_SECONDS": "1",  # slow enough to see who waits for the install
        **{k: str(v) for k, v in extra.items()},
    }


# ---- the pieces -------------------------------------------------------------------------------------------------------


def test_the_pieces_are_the_packed_wheels_cut_to_size_with_their_checksums(te_dir):
    dest, pieces, contents = te_dir
    assert [p["name"] for p in pieces] == ["piece-01", "piece-02", "piece-03"]
    assert all(p["bytes"] <= 100_000 for p in pieces) and pieces[0]["bytes"] == 100_000
    assert not (dest / "te.tar").exists()
    joined = b"".join((dest / p["name"]).read_bytes() for p in pieces)
    sums = dict(reversed(line.split()) for line in (dest / te_wh.SUMS).read_text().splitlines())
    assert sums["te.tar"] == hashlib.sha256(joined).hexdigest()
    assert [sums[p["name"]] for p in pieces] == [p["sha256"] for p in pieces]
    (dest / "joined.tar").write_bytes(joined)
    with tarfile.open(dest / "joined.tar") as tar:
        assert {m.name: tar.extractfile(m).read() for m in tar.getmembers()} == contents
    assert te_wh.pieces_of(dest) == pieces


def test_verify_names_a_missing_or_changed_piece_and_a_call_over_the_carry_limit(te_dir, monkeypatch):
    dest, pieces, _ = te_dir
    assert te_wh.verify(dest) == []
    (dest / "piece-02").write_bytes(b"changed")
    (dest / "piece-03").unlink()
    problems = te_wh.verify(dest)
    assert any("piece-02: checksum differs" in p for p in problems)
    assert any("piece-03: missing" in p for p in problems)
    monkeypatch.setattr(make_wheelhouse, "CARRY_LIMIT", make_wheelhouse.tree_bytes() + 50_000)
    assert any("piece-01: " in p and "split again" in p for p in te_wh.verify(dest))
    assert te_wh.verify(dest.parent / "nothing") == [
        f"{dest.parent / 'nothing'}/{te_wh.SUMS} is missing: run python -m coursetools.gpu.make_te_wheelhouse"
    ]


def test_a_piece_fits_one_call_with_the_working_tree():
    tree = make_wheelhouse.tree_bytes()
    assert tree + te_wh.piece_size(tree) + te_wh.MARGIN == make_wheelhouse.CARRY_LIMIT
    assert te_wh.piece_size(tree) > 40 * 2**20, "fewer than 8 calls carry TE's 280 MiB"


def test_te_is_git_ignored():
    assert subprocess.run(["git", "check-ignore", "-q", ".te/piece-01"], cwd=ROOT).returncode == 0
    assert subprocess.run(["git", "check-ignore", "-q", ".cache/te-build/venv"], cwd=ROOT).returncode == 0


# ---- gpu_te.sh on the GPU machine ---------------------------------------------------------------------------------------


def test_receive_keeps_each_calls_piece_and_says_how_many_are_there(tmp_path, te_dir, fake_python):
    dest, pieces, _ = te_dir
    env = env_for(tmp_path, fake_python)
    first = call(tmp_path, dest, [te_wh.SUMS, "piece-01"], "receive", env)
    assert first.returncode == 2 and "1 of 3" in first.stdout and "missing: piece-02 piece-03" in first.stdout
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "piece-02").write_bytes(b"a broken transfer")
    (broken / te_wh.SUMS).write_bytes((dest / te_wh.SUMS).read_bytes())
    second = call(tmp_path, broken, [te_wh.SUMS, "piece-02"], "receive", env)
    assert "piece-02: checksum differs" in second.stdout and "1 of 3" in second.stdout
    assert not (tmp_path / "store" / "piece-02").exists()
    for name in ("piece-02", "piece-03"):
        last = call(tmp_path, dest, [te_wh.SUMS, name], "receive", env)
    assert last.returncode == 0 and "3 of 3" in last.stdout
    without_sums = call(tmp_path, dest, ["piece-01"], "receive", dict(env, TE_STORE=str(tmp_path / "empty")))
    assert without_sums.returncode == 1 and "pieces.sha256" in without_sums.stdout


def test_install_joins_the_pieces_and_installs_every_wheel_without_dependencies(
    tmp_path, te_dir, fake_python
):
    dest, pieces, contents = te_dir
    env = env_for(tmp_path, fake_python)
    for piece in pieces[:-1]:
        call(tmp_path, dest, [te_wh.SUMS, piece["name"]], "receive", env)
    proc = call(tmp_path, dest, [te_wh.SUMS, pieces[-1]["name"]], "install", env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "installed: the transformer_engine_torch built on the CPU machine" in proc.stdout
    store = tmp_path / "store" / "te"
    assert {f"{p.parent.name}/{p.name}": p.read_bytes() for p in store.glob("*/*")} == contents
    (pip,) = (tmp_path / "pip.log").read_text().splitlines()
    assert "--no-deps" in pip and "--no-index" in pip and pip.count(".whl") == 2 and ".tar.gz" not in pip
    again = call(tmp_path, dest, [], "install", env)  # a later call: nothing to do
    assert again.returncode == 0 and "installed already" in again.stdout
    assert len((tmp_path / "pip.log").read_text().splitlines()) == 1


def test_install_builds_the_extension_from_its_sdist_when_the_prebuilt_one_does_not_import(
    tmp_path, te_dir, fake_python
):
    dest, pieces, _ = te_dir
    env = env_for(tmp_path, fake_python)
    (tmp_path / "import-fails").write_text("1")
    for piece in pieces[:-1]:
        call(tmp_path, dest, [te_wh.SUMS, piece["name"]], "receive", env)
    proc = call(tmp_path, dest, [te_wh.SUMS, pieces[-1]["name"]], "install", env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "installed: transformer_engine_torch built here from its sdist" in proc.stdout
    wheels, sdist = (tmp_path / "pip.log").read_text().splitlines()
    assert "--no-build-isolation" in sdist and sdist.rstrip().endswith(
        "transformer_engine_torch-2.20.2.tar.gz"
    )


def test_install_installs_nothing_while_a_piece_is_missing(tmp_path, te_dir, fake_python):
    dest, pieces, _ = te_dir
    env = env_for(tmp_path, fake_python)
    proc = call(tmp_path, dest, [te_wh.SUMS, pieces[0]["name"]], "install", env)
    assert proc.returncode == 2 and "missing: piece-02 piece-03" in proc.stdout
    assert not (tmp_path / "pip.log").exists()


# ---- the plan and the evidence call -------------------------------------------------------------------------------------


def test_the_plan_brings_each_piece_in_a_call_of_its_own(te_dir, monkeypatch, capsys):
    dest, pieces, _ = te_dir
    monkeypatch.setattr(te_wh, "TE_DIR", dest)
    calls = gpu_evidence.te_piece_calls()
    assert [c["carry"] for c in calls] == [[f".te/{te_wh.SUMS}", f".te/{p['name']}"] for p in pieces]
    for c in calls:
        assert c["command"] == "bash coursetools/gpu/gpu_te.sh receive" and 0 < c["timeout_s"] <= 600
        assert make_wheelhouse.tree_bytes() + c["bytes"] < make_wheelhouse.CARRY_LIMIT
    assert gpu_evidence.main(["--plan"]) == 0
    out = capsys.readouterr().out
    assert out.index("piece 3 of 3") < out.index("# call 1:")
    monkeypatch.setattr(te_wh, "TE_DIR", dest.parent / "nothing")
    assert gpu_evidence.te_piece_calls() == []
    gpu_evidence.main(["--plan"])
    assert "call 1 runs without it" in capsys.readouterr().out


def test_the_evidence_call_installs_te_and_part_3_starts_after_it(tmp_path, te_dir, fake_python):
    dest, pieces, _ = te_dir
    env = env_for(tmp_path, fake_python, OUT=tmp_path / "out", BUDGET=5, EVIDENCE_WORK=tmp_path / "work")
    (tmp_path / "out").mkdir()
    for piece in pieces:
        call(tmp_path, dest, [te_wh.SUMS, piece["name"]], "receive", env)
    proc = run_call_script(tmp_path, ["3", "5:03-amp-gradscaler"], env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = gpu_evidence.record_files([tmp_path / "out" / "evidence.tgz"], tmp_path / "unpacked")
    seen = {path.parent.name: json.loads(path.read_text())["values"] for path in records}
    assert "installed: the transformer_engine_torch" in seen["p3"]["te_log"]
    assert "exit 0" in seen["p3"]["te_log"], "part 3 starts once the install has ended"
    log = (tmp_path / "unpacked" / "out" / "te-install.log").read_text()
    assert "3 of 3" in log and log.rstrip().endswith("exit 0")


def test_the_te_step_says_what_was_tried_when_te_does_not_import(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_te(name, *args, **kwargs):
        if name.startswith("transformer_engine"):
            raise ImportError("libtransformer_engine.so: undefined symbol")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_te)
    recorder = gpu_evidence.Recorder(tmp_path / "records.jsonl", 3, "cpu", rehearsal=True)
    ctx = gpu_evidence.Context(3, tmp_path, gpu_evidence.Budget(60), True, False, recorder)
    monkeypatch.delenv(gpu_evidence.TE_LOG_ENV, raising=False)
    gpu_evidence.step_transformer_engine(ctx)
    log = tmp_path / "te-install.log"
    log.write_text("Transformer Engine pieces: 6 of 6 in /tmp/te-pieces\nexit 1\n")
    monkeypatch.setenv(gpu_evidence.TE_LOG_ENV, str(log))
    gpu_evidence.step_transformer_engine(ctx)
    untried, tried = (json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines())
    assert (
        untried["status"].startswith("skipped: not importable here: ImportError")
        and "no install was tried" in untried["status"]
    )
    assert tried["status"].startswith("failed: not importable here: ImportError")
    assert tried["values"]["install_log"].endswith("6 of 6 in /tmp/te-pieces\nexit 1")
