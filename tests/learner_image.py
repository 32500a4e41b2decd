"""The students' image of a class in containers, built for the tests the way docs/class.md says, on a machine with
neither Docker Hub nor PyPI's torch within reach.

- The base: an image with python3 and its venv module. `MEMLAB_TEST_DOCKER_BASE` names one; otherwise the test base,
  a Debian bookworm made by debootstrap from Debian's own archive and imported (`memlab-test-base:bookworm`, about a
  minute, once per machine).
- The wheels: `pip download` of the release's dependencies for the base's Python, with .ci/constraints.txt (the CPU
  torch), served to the build over HTTP on Docker's bridge gateway.
- The image: `python -m classroom image --base BASE --build-arg PIP_NO_INDEX=1 --build-arg PIP_FIND_LINKS=...`,
  tagged with a hash of what it is built from, so that a machine builds each version once.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import tomllib
from lab_server import REPO

BASE = os.environ.get("MEMLAB_TEST_DOCKER_BASE", "memlab-test-base:bookworm")
DEBIAN = "http://deb.debian.org/debian"


def docker(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *argv], capture_output=True, text=True, timeout=timeout)


def why_no_docker() -> str | None:
    if shutil.which("docker") is None:
        return "no docker command (apt-get install docker.io)"
    info = docker("info", "--format", "{{.ServerVersion}}", timeout=60)
    if info.returncode != 0:
        return f"no Docker daemon answers ({(info.stderr or info.stdout).strip()[:200]})"
    for module in ("dockerspawner", "jupyterhub"):
        try:
            importlib.metadata.version(module)
        except importlib.metadata.PackageNotFoundError:
            return f"no {module} in this environment: pip install -r requirements-test.txt"
    if docker("image", "inspect", BASE).returncode != 0 and shutil.which("debootstrap") is None:
        return f"no base image {BASE} and no debootstrap to make one (apt-get install debootstrap)"
    return None


def gateway() -> str:
    done = docker("network", "inspect", "bridge", "--format", "{{(index .IPAM.Config 0).Gateway}}")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def base_image() -> str:
    """BASE, made from Debian's archive where it is not on this machine."""
    if docker("image", "inspect", BASE).returncode == 0:
        return BASE
    with tempfile.TemporaryDirectory(prefix="memlab-rootfs-") as scratch:
        rootfs = Path(scratch) / "rootfs"
        done = subprocess.run(
            ["debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates", "bookworm",
             str(rootfs), DEBIAN],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            ["docker", "import", "-", BASE], stdin=tar.stdout, capture_output=True, text=True
        )
        tar.wait()
        assert imported.returncode == 0, imported.stderr
    return BASE


def _python_version(base: str) -> str:
    done = docker("run", "--rm", "--network", "none", base, "python3", "-c",
                  "import platform; print(platform.python_version())")  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _tag(release: Path, base: str) -> str:
    digest = hashlib.sha256()
    for path in sorted(release.rglob("*")):
        if path.is_file() and path.name != "RELEASE.json":  # its commit changes with every commit
            digest.update(path.relative_to(release).as_posix().encode() + path.read_bytes())
    digest.update((REPO / "classroom" / "Dockerfile").read_bytes())
    digest.update(f"{base} {importlib.metadata.version('jupyterhub')}".encode())
    return f"memlab-test-learner:{digest.hexdigest()[:12]}"


@functools.cache
def learner_image() -> str:
    """The students' image of the course as it is now (built on the first call on this machine)."""
    base = base_image()
    with tempfile.TemporaryDirectory(prefix="memlab-image-test-") as scratch:
        scratch = Path(scratch)
        release = scratch / "release"
        done = subprocess.run([sys.executable, str(REPO / "scripts" / "release.py"), str(release)],
                              capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr
        tag = _tag(release, base)
        if docker("image", "inspect", tag).returncode == 0:
            return tag
        wheels = scratch / "wheels"
        project = tomllib.loads((release / "pyproject.toml").read_text())
        wanted = scratch / "wanted.txt"
        wanted.write_text(
            "\n".join([*project["project"]["dependencies"], f"jupyterhub=={importlib.metadata.version('jupyterhub')}",
                       *project["build-system"]["requires"]])
            + "\n"
        )  # fmt: skip
        constraints = REPO / ".ci" / "constraints.txt"
        download = [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(wheels),
                    "--python-version", _python_version(base), "--only-binary=:all:",
                    "-r", str(wanted), "-r", str(release / "requirements-ko.txt")]  # fmt: skip
        if constraints.is_file():
            download += ["-c", str(constraints)]
        done = subprocess.run(download, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        host = gateway()
        handler = functools.partial(QuietHandler, directory=str(wheels))
        with http.server.ThreadingHTTPServer((host, 0), handler) as server:
            threading.Thread(target=server.serve_forever, daemon=True).start()
            port = server.server_address[1]
            build = [sys.executable, "-m", "classroom", "image", "--tag", tag, "--base", base,
                     "--build-arg", "PIP_NO_INDEX=1", "--build-arg", f"PIP_FIND_LINKS=http://{host}:{port}/",
                     "--build-arg", f"PIP_TRUSTED_HOST={host}"]  # fmt: skip
            done = subprocess.run(build, cwd=REPO, capture_output=True, text=True, timeout=1800)
            server.shutdown()
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return tag


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass
