"""A class whose students' servers run in containers (docs/class.md, "Students in containers"), without Docker: what
each student's container is given, the spawner the hub makes for each user, what the image is built from.

tests/grader/test_class_hub.py runs the whole class with Docker (alice's server in a container), where a daemon
answers.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import pwd
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from classroom import image, prepare

REPO = Path(__file__).resolve().parents[2]


def _entry(name: str, uid: int, home: Path) -> pwd.struct_passwd:
    return pwd.struct_passwd((name, "x", uid, uid, "", str(home), "/bin/bash"))


def _settings(tmp_path: Path) -> dict:
    views = tmp_path / "class" / "jupyter"
    return {
        "course": str(tmp_path / "home" / "teacher" / "memlab-course"),
        "instructor": "teacher",
        "exchange": str(tmp_path / "exchange"),
        "etc_dir": str(tmp_path / "etc"),
        "python_bin": "/opt/memlab-class/venv/bin",
        "jupyter_config_path": {
            "learner": [str(views / "learner"), str(tmp_path / "etc")],
            "instructor": [str(views / "instructor"), str(tmp_path / "etc")],
        },
        "pythonpath": {"instructor": str(tmp_path / "home" / "teacher" / "memlab-course"), "learner": ""},
        "docker": {
            "image": "memlab-learner",
            "hub_ip": "172.17.0.1",
            "jupyterhub_version": "6.1.1",
            "accounts": str(tmp_path / "class" / "containers"),
            "containers": {},
        },
    }


def test_a_students_container_sees_her_home_the_exchange_and_the_class_files_only(tmp_path):
    settings = _settings(tmp_path)
    alice = _entry("alice", 2001, tmp_path / "home" / "alice")
    spec = prepare.container(alice, settings)
    etc = str(tmp_path / "etc")
    accounts = tmp_path / "class" / "containers" / "alice"
    expected = {
        alice.pw_dir: "rw",
        settings["exchange"]: "rw",
        f"{etc}/nbgrader_config.py": "ro",
        str(tmp_path / "class" / "jupyter" / "learner"): "ro",
        etc: "ro",
        str(accounts / "passwd"): "ro",
        str(accounts / "group"): "ro",
    }
    assert {host: mount["mode"] for host, mount in spec["volumes"].items()} == expected
    binds = {host: mount["bind"] for host, mount in spec["volumes"].items()}
    assert binds[str(accounts / "passwd")] == "/etc/passwd" and binds[str(accounts / "group")] == "/etc/group"
    assert all(binds[h] == h for h in expected if "containers" not in h), "mounted where the machine has them"
    assert not any(h.startswith(settings["course"]) or "teacher" in h for h in binds), (
        "the course is never mounted"
    )
    assert spec["create"] == {"user": "2001:2001", "working_dir": alice.pw_dir}
    # the image's own PATH and Python, nothing of the machine's
    assert spec["environment"] == {
        "HOME": alice.pw_dir,
        "USER": "alice",
        "JUPYTER_CONFIG_PATH": os.pathsep.join(settings["jupyter_config_path"]["learner"]),
        "LANG": spec["environment"]["LANG"],
    }


def test_each_container_knows_only_its_own_student(tmp_path):
    """nbgrader names the user from /etc/passwd (nbgrader.utils.get_osusername): each container's holds root, nobody
    and its student, and no classmate."""
    folder = tmp_path / "containers"
    alice = _entry("alice", 2001, tmp_path / "alice")
    bob = _entry("bob", 2002, tmp_path / "bob")
    prepare.container_accounts(folder, [alice, bob])
    passwd = (folder / "alice" / "passwd").read_text().splitlines()
    assert [line.split(":")[0] for line in passwd] == ["root", "nobody", "alice"]
    assert passwd[-1] == f"alice:x:2001:2001::{alice.pw_dir}:/bin/bash"
    assert "bob" not in (folder / "alice" / "passwd").read_text() + (folder / "alice" / "group").read_text()
    assert (folder / "alice" / "group").read_text().splitlines()[-1].endswith(":x:2001:")
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    prepare.container_accounts(folder, [alice, bob])  # run again: nothing rewritten
    assert before == {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}
    prepare.container_accounts(folder, [alice])  # bob left the class
    assert sorted(p.name for p in folder.iterdir()) == ["alice"]


def _hub_config(tmp_path: Path, settings: dict):
    """classroom/jupyterhub_config.py loaded as JupyterHub loads it, beside a class.json of `settings`."""
    from traitlets.config.loader import PyFileConfigLoader

    folder = tmp_path / "class"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "class.json").write_text(json.dumps(settings))
    shutil.copy(REPO / "classroom" / "jupyterhub_config.py", folder / "jupyterhub_config.py")
    return PyFileConfigLoader("jupyterhub_config.py", path=str(folder)).load_config()


def _user(name: str):
    return SimpleNamespace(name=name, escaped_name=name, url=f"/user/{name}/", id=1)


def test_the_hub_gives_each_student_a_container_and_the_instructor_a_process(tmp_path):
    pytest.importorskip("dockerspawner")
    from dockerspawner import DockerSpawner
    from jupyterhub.spawner import LocalProcessSpawner

    settings = _settings(tmp_path)
    alice = _entry("alice", 2001, tmp_path / "home" / "alice")
    settings["docker"]["containers"] = {"alice": prepare.container(alice, settings)}
    settings.update(students=["alice"], subdomain_host="")
    config = _hub_config(tmp_path, settings)

    assert config.JupyterHub.hub_ip == "172.17.0.1"
    make = config.JupyterHub.spawner_class
    student = make(user=_user("alice"), config=config)
    teacher = make(user=_user("teacher"), config=config)
    assert type(student) is DockerSpawner and type(teacher) is LocalProcessSpawner
    assert student.image == "memlab-learner" and student.pull_policy == "never" and student.remove
    assert teacher.cmd == ["/opt/memlab-class/venv/bin/jupyterhub-singleuser"]

    config.Spawner.pre_spawn_hook(student)
    spec = settings["docker"]["containers"]["alice"]
    assert student.volumes == spec["volumes"] and student.notebook_dir == alice.pw_dir
    assert student.environment["HOME"] == alice.pw_dir and "PYTHONPATH" not in student.environment
    assert config.DockerSpawner.extra_create_kwargs(student) == {
        "user": "2001:2001",
        "working_dir": alice.pw_dir,
    }
    assert config.DockerSpawner.extra_host_config == {
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
    }

    config.Spawner.pre_spawn_hook(teacher)
    assert teacher.environment["PYTHONPATH"] == settings["pythonpath"]["instructor"]


def test_without_docker_every_server_is_a_process(tmp_path):
    settings = _settings(tmp_path)
    settings.update(docker=None, students=["alice"], subdomain_host="")
    config = _hub_config(tmp_path, settings)
    assert "spawner_class" not in config.JupyterHub  # JupyterHub's default, LocalProcessSpawner


def test_the_image_is_built_from_the_learner_release_and_the_hubs_version(tmp_path, monkeypatch):
    seen = {}
    real_run = subprocess.run

    def fake_run(command, **kwargs):
        if command[0] != "/usr/bin/docker":
            return real_run(command, **kwargs)  # the release's own (git rev-parse)
        context = Path(command[-1])
        seen["command"] = command
        seen["files"] = sorted(p.relative_to(context).as_posix() for p in context.rglob("*") if p.is_file())
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(image.subprocess, "run", fake_run)
    monkeypatch.setattr(image.shutil, "which", lambda name: f"/usr/bin/{name}")
    args = image.parser().parse_args(
        ["--tag", "memlab-learner:test", "--base", "debian-with-python", "--build-arg", "PIP_NO_INDEX=1"]
    )
    assert image.build(args) == "memlab-learner:test"
    command, files = seen["command"], seen["files"]
    assert command[:6] == ["/usr/bin/docker", "build", "--file", str(REPO / "classroom" / "Dockerfile"), "--tag",
                           "memlab-learner:test"]  # fmt: skip
    version = importlib.metadata.version("jupyterhub")
    assert f"JUPYTERHUB_VERSION={version}" in command and "BASE=debian-with-python" in command
    assert "PIP_NO_INDEX=1" in command
    assert "pyproject.toml" in files and "memlab/__init__.py" in files and "autograders/kit.py" in files
    assert not [f for f in files if f.startswith(("solutions/", "tests/", "coursetools/", "classroom/"))], (
        files
    )
    assert not [f for f in files if "/references/" in f], "the grading references reached the image's context"


def test_a_build_argument_that_is_not_pips_is_refused():
    with pytest.raises(image.ImageError, match="PIP_INDEX_URL"):
        image.build_arguments(["JUPYTERHUB_VERSION=1.0"], None)
    with pytest.raises(image.ImageError, match="NAME=VALUE"):
        image.build_arguments(["PIP_NO_INDEX"], None)
