"""A class on JupyterHub, in a real browser: `python -m classroom prepare`, JupyterHub, an instructor and a student.

docs/class.md says how an instructor runs a class on one machine; this test does it, on 127.0.0.1, with the fixture
lesson (tests/fixtures/minicourse/solutions/00-fixture) as the class's only lesson:

- two Linux users made for the test (`useradd`, names with a random part that no user of the machine has, removed
  after it): the instructor, whose home holds the course folder, and alice, a student;
- `python -m classroom prepare` refuses a class whose students would import the toolkit from the repository (its
  solutions and grading references readable next to it), then, given the learner release (scripts/release.py),
  puts the class in place: the exchange, the course folder closed to students, the configuration; run again it
  changes nothing;
- JupyterHub (DummyAuthenticator, LocalProcessSpawner, configurable-http-proxy) with a subdomain per user on
  `*.localhost` (Chromium resolves it to 127.0.0.1), so that formgrader opens inside the instructor's JupyterLab;
- in Chromium, as each of them: the instructor opens Nbgrader > Formgrader, which shows the course, and releases the
  lesson; alice's Nbgrader menu holds only the assignment list, where she fetches the lesson; she solves its
  exercises, writes the written answer, saves, Validate says Success, and she submits; the instructor collects,
  autogrades (formgrader's own button: the course's sandbox and judge, no seed given), grades the written answer by
  hand in formgrader, generates and releases feedback; alice fetches it and reads her score in it.

It runs twice: with alice's server a process of her user (LocalProcessSpawner), and with it a container of the
students' image (DockerSpawner, prepare --docker-image), built as docs/class.md says by tests/learner_image.py; there
prepare first refuses an image without the course, and alice's running container is checked: her user and group ids,
the toolkit from the image, her home in sight and the instructor's (the course folder) not. The instructor's server
is a process both times.

Asserted from what the class really holds, not only from the pages: the exchange, the course's gradebook (every
cell's score), the seed the course made for itself, no gradebook in the instructor's home, the feedback file.

Needs root (it makes users, and the hub starts each server as its user), configurable-http-proxy (npm), chromium and
Playwright (and for the containers, a Docker daemon, dockerspawner and a base image or debootstrap), and user namespaces for a user who is not root (grading sandboxes each submission with bubblewrap as
the instructor); skipped with the reason where one is missing. Where this test environment's Python lives under a
folder other users cannot enter (a pyenv Python under /root), the test's two users are given search permission on
that folder (an ACL entry each, removed after). Timings are printed (`pytest -s`), never asserted.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pwd
import re
import secrets
import shutil
import signal
import sqlite3
import stat
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from lab_server import REPO, free_port
from learner_image import BASE, docker, learner_image, why_no_docker
from run_all import chromium_path, no_chromium

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

SLUG = "00-fixture"
FIXTURE = REPO / "tests" / "fixtures" / "minicourse" / "solutions" / SLUG
COURSE_ID = "memlab-test"
#: what alice types into the learner version's solution cells (found by grade id), and her written answer
ANSWERS = {
    "e1_square": "def square(x):\n    return x * x\n",
    "e2_add": "def add(a, b):\n    return a + b\n",
    "e3_gpu_ones": 'def gpu_ones(n, device="cuda"):\n    return torch.ones(n, device=device)\n',
}
WRITTEN = "The product of two negative numbers is positive."
MANUAL_SCORE = 1  # of the written answer's 2 points, entered in formgrader
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]
STEP_TIMEOUT_MS = 240_000  # a server's first start, Validate's and Autograde's runs, on 2 busy cores


# ---- the machine: users, a folder other users may enter ------------------------------------------------------------


def _why_not_here() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root: it makes Linux users, and JupyterHub starts each user's server as that user"
    for tool in ("useradd", "userdel", "setpriv", "bwrap"):
        if shutil.which(tool) is None:
            return f"needs {tool} (passwd, util-linux, bubblewrap)"
    if shutil.which("configurable-http-proxy") is None:
        return "no configurable-http-proxy (npm install -g configurable-http-proxy), JupyterHub's proxy"
    if no_chromium():
        return no_chromium()
    if importlib.util.find_spec("playwright") is None:
        return "no browser driver: pip install -r requirements-test.txt"
    return None


def _as(user: pwd.struct_passwd, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """argv run as `user` (looked up and started as the user, through env(1))."""
    return subprocess.run(
        [
            "setpriv",
            f"--reuid={user.pw_uid}",
            f"--regid={user.pw_gid}",
            "--init-groups",
            "/usr/bin/env",
            "--",
            *argv,
        ],
        env=env or {"PATH": "/usr/bin:/bin", "HOME": user.pw_dir},
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
    )


@contextlib.contextmanager
def _users(base: Path, roles: tuple[str, ...]):
    """A new Linux user per role, home in base/home, named memlab-<random>-<role>: no user of the machine has that
    name (checked) and useradd refuses an existing one. Removed after, with their processes."""
    for _ in range(10):
        tag = secrets.token_hex(3)
        names = {role: f"memlab-{tag}-{role}" for role in roles}
        if not any(_exists(n) for n in names.values()):
            break
    made: list[str] = []
    try:
        for name in names.values():
            home = base / "home" / name
            subprocess.run(
                [
                    "useradd",
                    "--no-create-home",
                    "--home-dir",
                    str(home),
                    "--shell",
                    "/bin/bash",
                    "--user-group",
                    name,
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            made.append(name)
            home.mkdir(parents=True)
            entry = pwd.getpwnam(name)
            os.chown(home, entry.pw_uid, entry.pw_gid)
            os.chmod(home, 0o755)
        yield {role: pwd.getpwnam(name) for role, name in names.items()}
    finally:
        for name in made:
            _kill_processes_of(pwd.getpwnam(name).pw_uid)
            subprocess.run(["userdel", name], capture_output=True, text=True)


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def _kill_processes_of(uid: int) -> None:
    """SIGKILL what still runs as `uid`, a user this test made: servers and kernels the hub left behind."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if proc.stat().st_uid == uid:
                    os.kill(int(proc.name), signal.SIGKILL)


ACL = "system.posix_acl_access"


@contextlib.contextmanager
def _reachable(paths: list[Path], uids: list[int]):
    """Let `uids` enter every folder above `paths` that others cannot enter (search permission only, through a
    POSIX ACL entry: they cannot list it), and take it back after. Written as the kernel's ACL attribute: setfacl
    need not be installed."""
    blocked = []
    for path in paths:
        for folder in [path, *path.parents]:
            if folder.is_dir() and not stat.S_IMODE(folder.stat().st_mode) & 0o001 and folder not in blocked:
                blocked.append(folder)
    saved = []
    try:
        for folder in blocked:
            mode = stat.S_IMODE(folder.stat().st_mode)
            try:
                old = os.getxattr(folder, ACL)
            except OSError:
                old = None
            if old is not None:
                pytest.skip(f"{folder} has an ACL already; a test does not change it")
            saved.append((folder, mode))
            undefined = 0xFFFFFFFF
            group = (mode >> 3) & 7
            entries = [(0x01, (mode >> 6) & 7, undefined)]  # the owner
            entries += [(0x02, 1, uid) for uid in sorted(uids)]  # each user: search (x) only
            entries += [(0x04, group, undefined), (0x10, group | 1, undefined), (0x20, mode & 7, undefined)]
            os.setxattr(
                folder, ACL, struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)
            )
            print(f"gave the test's users search permission on {folder} (an ACL entry, taken back after)")
        yield
    finally:
        for folder, mode in reversed(saved):
            with contextlib.suppress(OSError):
                os.removexattr(folder, ACL)
            os.chmod(folder, mode)


# ---- the class -------------------------------------------------------------------------------------------------------


def _prepare(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "classroom", "prepare", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _get(url: str, host: str | None = None, timeout: float = 10) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode("utf-8", "replace")


@contextlib.contextmanager
def _hub(config: Path, log: Path, port: int):
    """JupyterHub on 127.0.0.1 (the proxy on `port`, the rest on free ports), the class's configuration with
    DummyAuthenticator for the test; its URL, http://localhost:PORT (the users' servers on <name>.localhost)."""
    api_port, hub_port = free_port(), free_port()
    command = [
        sys.executable, "-m", "jupyterhub", "-f", str(config),
        "--JupyterHub.authenticator_class=dummy",
        "--JupyterHub.ip=127.0.0.1", f"--JupyterHub.port={port}", f"--JupyterHub.hub_port={hub_port}",
        f"--ConfigurableHTTPProxy.api_url=http://127.0.0.1:{api_port}",
    ]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            command, cwd=config.parent / "state", stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://localhost:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"jupyterhub exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                if _get(f"http://127.0.0.1:{port}/hub/api", timeout=5)[0] == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"jupyterhub did not answer in 120 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the hub stops every user's server first
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # the proxy, started in the hub's session
        proc.wait(timeout=10)


def _gradebook_scores(db: Path) -> dict[str, tuple[float | None, float | None]]:
    """{grade cell name: (auto score, manual score)} of the gradebook's only submission, read-only (root must not
    leave a journal file behind in the instructor's folder)."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
        rows = con.execute(
            "SELECT base_cell.name, grade.auto_score, grade.manual_score FROM grade "
            "JOIN base_cell ON grade.cell_id = base_cell.id"
        ).fetchall()
    return {name: (auto, manual) for name, auto, manual in rows}


class Clock:
    def __init__(self):
        self.start = self.last = time.monotonic()

    def __call__(self, what: str) -> None:
        now = time.monotonic()
        print(f"[{now - self.start:6.1f} s] {what} ({now - self.last:.1f} s)", flush=True)
        self.last = now


# ---- driving JupyterLab and formgrader -------------------------------------------------------------------------------


def _log_in(context, hub: str, name: str):
    from playwright.sync_api import expect

    page = context.new_page()
    page.goto(f"{hub}/hub/login")
    page.fill("#username_input", name)
    page.fill("#password_input", "any")  # DummyAuthenticator: any password
    page.click("#login_submit")
    page.wait_for_url(re.compile(r".*/lab.*"), timeout=STEP_TIMEOUT_MS)
    expect(page.locator("#jp-main-dock-panel")).to_be_visible(timeout=STEP_TIMEOUT_MS)
    return page


def _nbgrader_menu(page) -> list[str]:
    page.get_by_role("menuitem", name="Nbgrader").click()
    items = [t.strip() for t in page.locator(".lm-Menu-content .lm-Menu-item:visible").all_inner_texts()]
    page.keyboard.press("Escape")
    return items


def _open_from_menu(page, item: str) -> None:
    page.get_by_role("menuitem", name="Nbgrader").click()
    page.locator(".lm-Menu-content .lm-Menu-item:visible", has_text=item).first.click()


def _wait_for_file(folder: Path, pattern: str, timeout_s: float = STEP_TIMEOUT_MS / 1000) -> Path:
    """The one file matching `pattern` under `folder`, once a fetch has written it."""
    deadline = time.monotonic() + timeout_s
    while not (found := list(folder.glob(pattern))):
        assert time.monotonic() < deadline, (
            f"nothing matches {pattern} under {folder} after {timeout_s:.0f} s"
        )
        time.sleep(0.5)
    (one,) = found
    return one


def _view_feedback(page, attempts: int = 4) -> None:
    """'(view feedback)' takes the file browser to the fetched feedback's folder.

    The assignment list draws itself again after a fetch; on a loaded machine a click can land on the list it is
    replacing and do nothing (seen in CI: the file browser stayed where it was for four minutes). The click is the
    learner's, so it is repeated on the list as drawn now, a few times, before the test gives up.
    """
    from playwright.sync_api import expect

    crumbs = page.locator(".jp-BreadCrumbs")
    for attempt in range(1, attempts + 1):
        page.locator("#submitted_assignments_list").get_by_text("(view feedback)").first.click()
        try:
            expect(crumbs).to_contain_text("feedback", timeout=STEP_TIMEOUT_MS // attempts)
            return
        except AssertionError:
            if attempt == attempts:
                raise
            print(f"'(view feedback)' left the file browser at {crumbs.inner_text()!r}; clicking it again")


def _close_modal(frame, text: str) -> str:
    """Wait for formgrader's dialog after an action, check it says `text`, close it; its message."""
    from playwright.sync_api import expect

    dialog = frame.locator(".modal-dialog:visible")
    message = dialog.locator(".modal-body p").first
    expect(message).to_contain_text(text, timeout=STEP_TIMEOUT_MS)
    said = f"{dialog.locator('.modal-title').inner_text()}: {message.inner_text()}"
    dialog.locator("button.close").first.click()
    expect(dialog).to_have_count(0)
    return said


def _type_into(page, cell, text: str) -> None:
    from playwright.sync_api import expect

    cell.scroll_into_view_if_needed()
    cell.locator(".jp-InputArea-editor .cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(text)
    expect(cell.locator(".jp-InputArea-editor")).to_contain_text(text.strip().splitlines()[-1].strip())


# ---- the test --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("servers", ["processes", "containers"])
def test_a_class_on_jupyterhub(tmp_path, servers):
    why = _why_not_here() or (why_no_docker() if servers == "containers" else None)
    if why:
        pytest.skip(why)
    from playwright.sync_api import expect, sync_playwright

    from memlab.hardware import unmet_requirements

    clock = Clock()
    image = None
    if servers == "containers":
        image = learner_image()
        clock(f"the students' image {image}")
    base = Path(tempfile.mkdtemp(prefix="memlab-class-", dir="/tmp"))
    os.chmod(base, 0o755)  # the users' homes and the release are in it
    try:
        with _users(base, ("teacher", "alice")) as users:
            teacher, alice = users["teacher"], users["alice"]
            uids = [teacher.pw_uid, alice.pw_uid]
            needed = [Path(os.path.realpath(sys.executable)), Path(sys.prefix), Path(sys.base_prefix), REPO]
            with _reachable(needed, uids):
                _run_the_class(
                    base, teacher, alice, tmp_path, clock, expect, sync_playwright, unmet_requirements, image
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _run_the_class(base, teacher, alice, shots, clock, expect, sync_playwright, unmet_requirements, image):
    probe = _as(alice, sys.executable, "-c", "import nbgrader")
    if probe.returncode != 0:
        pytest.skip(f"this environment's Python cannot be run by another user: {probe.stderr.strip()[-300:]}")
    sandbox = _as(
        teacher, "bwrap", "--unshare-all", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"
    )
    if sandbox.returncode != 0:
        pytest.skip(
            f"bubblewrap cannot make a sandbox as a user who is not root ({sandbox.stderr.strip()[:200]}): "
            "grading needs unprivileged user namespaces"
        )

    # the course, as the instructor would have it: the course's configuration and one lesson's source
    course = Path(teacher.pw_dir) / "memlab-course"
    (course / "solutions").mkdir(parents=True)
    shutil.copy(REPO / "nbgrader_config.py", course / "nbgrader_config.py")
    shutil.copytree(FIXTURE, course / "solutions" / SLUG, ignore=shutil.ignore_patterns("__pycache__"))
    release = base / "release"
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "release.py"), str(release)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    clock("users, course and learner release made")

    port = free_port()  # the hub's, known to prepare: a subdomain per user, <name>.localhost:PORT
    args = [
        "--course", str(course), "--instructor", teacher.pw_name, "--students", alice.pw_name,
        "--course-id", COURSE_ID, "--exchange", str(base / "exchange"), "--class-dir", str(base / "class"),
        "--etc-dir", str(base / "etc"), "--python", sys.executable,
        "--subdomain-host", f"http://localhost:{port}",
    ]  # fmt: skip

    # students importing the toolkit from this repository (an editable install): refused, nothing configured
    refused = _prepare(args)
    print(refused.stdout + refused.stderr)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "learner release" in refused.stderr, refused.stderr
    assert not (base / "class" / "class.json").exists() and not (base / "etc" / "nbgrader_config.py").exists()

    if image:
        # students' servers in containers: an image without the course is refused, then the class's image is taken
        # (and the learner release is not needed: the image is one)
        refused = _prepare([*args, "--docker-image", BASE])
        assert refused.returncode == 1 and "cannot import memlab" in refused.stderr, (
            refused.stdout + refused.stderr
        )
        assert not (base / "class" / "class.json").exists()
        args += ["--docker-image", image]
    else:
        args += ["--release", str(release)]
    made = _prepare(args)
    print(made.stdout + made.stderr)
    assert made.returncode == 0, made.stdout + made.stderr
    again = _prepare(args)
    assert again.returncode == 0, again.stderr
    changed = [
        line
        for line in again.stdout.splitlines()
        if not line.startswith("classroom: checked") and "ready" not in line
    ]
    assert not changed, f"prepare changed things when run again:\n{again.stdout}"
    clock("prepare: refused without the learner release, then made the class, then changed nothing")

    # what prepare made: the course closed to alice, the exchange writable by all, sticky, the course's folder the
    # instructor's
    assert stat.S_IMODE(course.stat().st_mode) == 0o700 and course.stat().st_uid == teacher.pw_uid
    assert _as(alice, "ls", str(course / "solutions")).returncode != 0, "alice can list the solutions"
    assert stat.S_IMODE((base / "exchange").stat().st_mode) == 0o1777
    assert (base / "exchange" / COURSE_ID).stat().st_uid == teacher.pw_uid

    gpu = unmet_requirements(cuda=True) is None
    expected = {"e1_square_check": 4.0, "e2_add_check": 4.0, "e3_gpu_ones_check": 2.0 if gpu else 0.0}
    total = sum(expected.values()) + MANUAL_SCORE

    with (
        _hub(base / "class" / "jupyterhub_config.py", shots / "jupyterhub.log", port) as hub,
        sync_playwright() as p,
    ):
        clock(f"JupyterHub answers at {hub} (log: {shots / 'jupyterhub.log'})")
        browser = p.chromium.launch(executable_path=chromium_path(), headless=True, args=CHROMIUM_FLAGS)
        expect.set_options(timeout=60_000)
        viewport = {"width": 1400, "height": 900}
        teacher_context, alice_context = (
            browser.new_context(viewport=viewport),
            browser.new_context(viewport=viewport),
        )

        # -- the instructor: formgrader inside JupyterLab shows the course; the lesson is generated and released
        lab = _log_in(teacher_context, hub, teacher.pw_name)
        clock("the instructor's JupyterLab")
        assert {"Assignment List", "Course List", "Formgrader", "Create assignment"} <= set(
            _nbgrader_menu(lab)
        )
        _open_from_menu(lab, "Formgrader")
        formgrader = lab.frame_locator("#formgrader-iframe iframe")
        row = formgrader.locator("tr", has_text=SLUG)
        expect(row).to_contain_text(
            "draft"
        )  # the course's source, from the course folder the hub config names
        row.locator("td.assign a").click()
        print(_close_modal(formgrader, "Successfully created the student version"))
        row.locator("td.release a").click()
        print(_close_modal(formgrader, f"Successfully released '{SLUG}'"))
        lab.screenshot(path=str(shots / "1-formgrader-released.png"))
        assert (base / "exchange" / COURSE_ID / "outbound" / SLUG / f"{SLUG}.ipynb").is_file()
        clock("formgrader: generated and released")

        # -- alice: the assignment list (and nothing of the instructor's), fetch, solve, Validate, submit
        student = _log_in(alice_context, hub, alice.pw_name)
        clock("alice's JupyterLab")
        assert _nbgrader_menu(student) == ["Assignment List"], _nbgrader_menu(student)
        _open_from_menu(student, "Assignment List")
        student.locator("#released_assignments_list .list_item", has_text=SLUG).get_by_role(
            "button", name="Fetch"
        ).click()
        expect(student.locator("#fetched_assignments_list .list_item", has_text=SLUG).first).to_be_visible()
        fetched = Path(alice.pw_dir) / SLUG / f"{SLUG}.ipynb"
        assert fetched.is_file() and fetched.stat().st_uid == alice.pw_uid
        clock("alice fetched the lesson")
        if image:
            _alice_is_in_her_container(image, alice, teacher)

        cells = json.loads(fetched.read_text())["cells"]
        where = {c.get("metadata", {}).get("nbgrader", {}).get("grade_id"): i for i, c in enumerate(cells)}
        student.goto(f"{_server(hub, alice)}/lab/tree/{SLUG}/{SLUG}.ipynb")
        panel = student.locator(".jp-NotebookPanel:visible")
        on_page = panel.locator(".jp-Notebook .jp-Cell")
        expect(on_page).to_have_count(len(cells))
        for grade_id, code in ANSWERS.items():
            _type_into(student, on_page.nth(where[grade_id]), code)
            student.keyboard.press("Escape")
        written = on_page.nth(where["w1_square_sign"])
        written.scroll_into_view_if_needed()
        written.dblclick()
        _type_into(student, written, WRITTEN)
        student.keyboard.press("Shift+Enter")
        student.keyboard.press("Control+S")
        _wait_for(lambda: WRITTEN in fetched.read_text(), "the saved notebook on disk")
        panel.locator(".jp-Toolbar").get_by_text("Validate", exact=True).click()
        message = student.locator(".jp-Dialog #validation-message")
        message.wait_for(timeout=STEP_TIMEOUT_MS)
        validated = message.inner_text().strip()
        student.screenshot(path=str(shots / "2-alice-validate.png"))
        assert "Success! Your notebook passes all the tests." in validated, validated
        student.locator(".jp-Dialog").get_by_role("button").last.click()
        clock("alice solved, saved and validated (Success)")
        saved = json.loads(fetched.read_text())["cells"]
        assert "return a + b" in "".join(saved[where["e2_add"]]["source"])
        assert WRITTEN in "".join(saved[where["w1_square_sign"]]["source"])

        _open_from_menu(student, "Assignment List")
        student.locator("#fetched_assignments_list .list_item", has_text=SLUG).first.get_by_role(
            "button", name="Submit"
        ).click()
        expect(student.locator("#submitted_assignments_list .list_item", has_text=SLUG).first).to_be_visible()
        inbound = list((base / "exchange" / COURSE_ID / "inbound").glob(f"{alice.pw_name}+{SLUG}+*"))
        assert len(inbound) == 1 and (inbound[0] / f"{SLUG}.ipynb").is_file(), inbound
        clock("alice submitted")

        # -- the instructor: collect, autograde (formgrader's button), grade the written answer, feedback
        lab.bring_to_front()
        _open_from_menu(lab, "Formgrader")
        row = formgrader.locator("tr", has_text=SLUG)
        row.locator("td.collect a").click()
        print(_close_modal(formgrader, "Successfully collected"))
        assert (course / "submitted" / alice.pw_name / SLUG / f"{SLUG}.ipynb").is_file()
        row.locator("td.num-submissions a").click()
        submission = formgrader.locator("tr", has_text=alice.pw_name)
        submission.locator("td.autograde a").click()
        print(_close_modal(formgrader, f"Successfully autograded '{SLUG}' for student '{alice.pw_name}'"))
        clock("collected and autograded from formgrader")
        scores = _gradebook_scores(course / "gradebook.db")
        assert {k: v[0] for k, v in scores.items() if k in expected} == expected, scores
        assert scores["w1_square_sign"] == (None, None), scores  # to be graded by hand
        seed = json.loads((course / "grading_seed.json").read_text())["seed"]
        print(f"the course's own seed, made by the first grading: {seed}")
        assert not (Path(teacher.pw_dir) / "gradebook.db").exists(), "a gradebook in the instructor's home"

        formgrader.get_by_role("link", name="Manual Grading").first.click()
        crumbs = formgrader.locator(".breadcrumb li")
        expect(crumbs).to_have_count(1)
        formgrader.locator("a", has_text=SLUG).first.click()  # the lesson
        expect(crumbs).to_have_count(2)
        formgrader.locator("a", has_text=SLUG).first.click()  # its notebook
        expect(crumbs).to_have_count(3)
        formgrader.locator("a", has_text="Submission #1").click()
        answer = formgrader.locator(".nbgrader_cell", has_text=WRITTEN)
        score = answer.locator("input.score")
        expect(score).to_have_class(re.compile("needs_manual_grade"))
        score.click()
        lab.keyboard.type(str(MANUAL_SCORE))
        with lab.expect_request(lambda r: "/formgrader/api/grade/" in r.url and r.method == "PUT"):
            formgrader.locator("h4").first.click()  # leaving the field saves it
        expect(score).not_to_have_class(re.compile("needs_manual_grade"))
        lab.screenshot(path=str(shots / "3-formgrader-manual-grade.png"))
        clock("the written answer graded by hand in formgrader")

        formgrader.get_by_role("link", name="Manual Grading").first.click()
        formgrader.get_by_role("link", name="Manage Assignments").click()
        row = formgrader.locator("tr", has_text=SLUG)
        row.locator("td.generate-feedback a").click()
        print(_close_modal(formgrader, "Successfully generated feedback"))
        row.locator("td.release-feedback a").click()
        print(_close_modal(formgrader, "Successfully released feedback"))
        assert len(list((base / "exchange" / COURSE_ID / "feedback").glob("*.html"))) == 1
        clock("feedback generated and released")

        # -- alice: fetch the feedback and read it in JupyterLab
        student.bring_to_front()
        student.reload()  # the assignment list reads the exchange when JupyterLab makes it
        expect(student.locator("#jp-main-dock-panel")).to_be_visible(timeout=STEP_TIMEOUT_MS)
        _open_from_menu(student, "Assignment List")
        submitted = student.locator("#submitted_assignments_list .list_item", has_text=SLUG).first
        expect(submitted).to_contain_text("feedback available to fetch")
        submitted.get_by_role("button", name="Fetch Feedback").click()
        fetched_feedback = _wait_for_file(Path(alice.pw_dir) / SLUG / "feedback", f"*/{SLUG}.html")
        _view_feedback(student)
        # opened by its URL: double-clicking it in the listing of a folder named by a timestamp (spaces, colons)
        # timed out on a loaded machine although the listing had been read
        relative = urllib.parse.quote(fetched_feedback.relative_to(alice.pw_dir).as_posix())
        student.goto(f"{_server(hub, alice)}/lab/tree/{relative}")
        headline = f"{SLUG} (Score: {total:.1f} / 12.0)"
        feedback_page = student.frame_locator(".jp-HTMLViewer iframe")
        expect(feedback_page.locator("h4").first).to_contain_text(headline)
        student.screenshot(path=str(shots / "4-alice-feedback.png"))
        clock("alice fetched her feedback and opened it")

        (feedback,) = (Path(alice.pw_dir) / SLUG / "feedback").glob(f"*/{SLUG}.html")
        html = feedback.read_text()
        assert headline in html, re.findall(r"Score: [0-9.]+ / [0-9.]+", html)
        assert f"Score: {MANUAL_SCORE:.1f} / 2.0" in html and WRITTEN in html
        scores = _gradebook_scores(course / "gradebook.db")
        assert scores["w1_square_sign"] == (None, float(MANUAL_SCORE)), scores
        browser.close()
    clock("done")
    print(f"screenshots: {shots}")


def _alice_is_in_her_container(image: str, alice: pwd.struct_passwd, teacher: pwd.struct_passwd) -> None:
    """alice's server runs in a container of the class's image, as her user, seeing her home but not the
    instructor's (the course folder is there), importing the toolkit without the grading references."""
    (name,) = docker("ps", "--filter", f"ancestor={image}", "--format", "{{.Names}}").stdout.split()
    seen = docker(
        "exec", name, "python", "-c",
        "import os, autograders; print(os.getuid(), os.getgid()); print(os.path.dirname(autograders.__file__)); "
        f"print(os.path.isdir({alice.pw_dir!r}), os.path.exists({teacher.pw_dir!r}))",
    )  # fmt: skip
    assert seen.returncode == 0, seen.stderr
    ids, kit, homes = seen.stdout.split("\n")[:3]
    assert ids == f"{alice.pw_uid} {alice.pw_gid}", seen.stdout
    assert kit.startswith("/opt/memlab/venv/") and not os.path.exists(kit), (
        seen.stdout
    )  # the image's, not ours
    assert homes == "True False", f"alice's container sees her home, not the instructor's: {homes}"
    print(f"alice's server: the container {name} of {image}, as {ids}, toolkit from {kit}")


def _wait_for(condition, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.3)


def _server(hub: str, user: pwd.struct_passwd) -> str:
    """A user's server under the hub's subdomains: http://<name>.localhost:<port>/user/<name>"""
    return hub.replace("://", f"://{user.pw_name}.", 1) + f"/user/{user.pw_name}"
