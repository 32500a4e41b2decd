"""A real JupyterLab server for the tests: 127.0.0.1, a free port, a random token, its own user folders.

`running_lab(root_dir, work)` starts `python -m jupyter lab` from this test environment (the same one a learner gets
from requirements.txt) and yields a `Lab` with its URL, token and a `get` helper; on exit it stops the server and
the kernels it started. User-level Jupyter state (settings, workspaces, runtime files) lives under `work`, so
nothing in ~/.jupyter changes what the tests see, and JupyterLab's news and update prompts are off.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

NBGRADER_PLUGINS = (
    "menu",
    "formgrader",
    "create-assignment",
    "assignment-list",
    "course-list",
    "validate-assignment",
)
# what a learner must not see (nbgrader's instructor tools), and the one tool they need
INSTRUCTOR_PLUGINS = tuple(f"@jupyter/nbgrader:{p}" for p in NBGRADER_PLUGINS if p != "validate-assignment")
VALIDATE_PLUGIN = "@jupyter/nbgrader:validate-assignment"
INSTRUCTOR_SERVER_EXTENSIONS = tuple(
    f"nbgrader.server_extensions.{name}" for name in ("formgrader", "assignment_list", "course_list")
)
VALIDATE_SERVER_EXTENSION = "nbgrader.server_extensions.validate_assignment"

REPO = Path(__file__).resolve().parent.parent
INSTRUCTOR_CONFIG = REPO / "jupyter-config" / "instructor"


@dataclass
class Lab:
    url: str
    token: str
    log: Path

    def get(self, path: str, timeout: float = 30) -> tuple[int, str]:
        """GET url/path with the token; (status, body), also for 4xx/5xx."""
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"token {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode("utf-8", "replace")

    def page_config(self) -> dict:
        """The page config JupyterLab's /lab page hands the browser (disabledExtensions, federated_extensions...)."""
        status, html = self.get("/lab")
        assert status == 200, f"GET /lab: {status}"
        found = re.search(
            r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', html, re.S
        )
        assert found, "no jupyter-config-data in /lab"
        return json.loads(found.group(1))

    def log_tail(self, n: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def jupyter_env(work: Path, config_path: Path | None = None) -> dict[str, str]:
    """The environment of a Jupyter command: this venv's config (plus `config_path` first, if given), user state
    under `work`, Hugging Face offline, matplotlib's backend left to the kernel (inline, as a learner has it)."""
    env = dict(os.environ)
    for name in ("JUPYTER_CONFIG_PATH", "JUPYTER_NO_CONFIG", "MPLBACKEND", "JUPYTER_PREFER_ENV_PATH"):
        env.pop(name, None)
    if config_path is not None:
        env["JUPYTER_CONFIG_PATH"] = str(config_path)
    env["JUPYTER_CONFIG_DIR"] = str(work / "jupyter-user")
    env["JUPYTER_RUNTIME_DIR"] = str(work / "jupyter-runtime")
    env["JUPYTER_PLATFORM_DIRS"] = "1"
    env["HF_HUB_OFFLINE"] = env["HF_DATASETS_OFFLINE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    # JupyterLab's "receive Jupyter news?" toast and update check: off, they would cover the page
    settings = work / "jupyter-user" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    return env


@contextlib.contextmanager
def running_lab(
    root_dir: Path,
    work: Path,
    *,
    cwd: Path | None = None,
    config_path: Path | None = None,
    startup_timeout: float = 90,
):
    """JupyterLab serving `root_dir`; `cwd` is the server's working folder (nbgrader's Validate reads
    nbgrader_config.py from it)."""
    work.mkdir(parents=True, exist_ok=True)
    port, token = free_port(), secrets.token_hex(16)
    log = work / f"jupyter-lab-{port}.log"
    command = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root_dir}",
        "--LabApp.news_url=None",
    ]  # fmt: skip
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")  # CI and this machine run as root
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            command, cwd=cwd or root_dir, env=jupyter_env(work, config_path), stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    lab = Lab(url=f"http://127.0.0.1:{port}", token=token, log=log)
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n{lab.log_tail()}")
            try:
                if lab.get("/api/status", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"jupyter lab did not answer in {startup_timeout:.0f} s:\n{lab.log_tail()}"
                )
            time.sleep(0.3)
        yield lab
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM (jupyter_server shuts its kernels down), then SIGKILL to the server's own process group."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # the group this test started (start_new_session): stray kernels
    proc.wait(timeout=10)
