"""The course as a learner meets it: JupyterLab in a real browser (Debian's chromium, headless, driven by Playwright).

A temporary copy of the course as a learner has it (lessons/, ko/lessons/ for the Korean lesson 02, the results/ the
lessons cite, nbgrader_config.py, which Validate reads) is served by JupyterLab from its top folder, as the README's
`jupyter lab` does, from this test environment on 127.0.0.1 with a random port and token (tests/lab_server.py). Exercises are solved by copying their
solution cells from solutions/ into the learner copies, found by nbgrader grade_id, never by cell position. The
tests use the keyboard and the toolbar as a learner does, and read what the page shows:

1. lesson 02: the learner view (Validate button, no nbgrader instructor tools); the setup cell, Exercise 2.1's
   solution and its check run with Shift+Enter, and the check prints `✓ e1_decode: N cases passed`;
2. a wrong `decode` typed into the cell: the check's message is on the page, and no frame of the kit is;
3. lesson 03 solved except the GPU-only Exercise 3.4 (still the stub): nbgrader's Validate button does not say
   "Success" and shows the failed check;
4. every lesson as released: the Run menu's "Run All Cells" reaches the last cell (the cells that stop are tagged
   `raises-exception`), the stopped sections show the model solution's recorded outputs (lesson 07's figures), and
   JupyterLab asks nothing about Jupyter news; every figure on the page (the plots, recorded or drawn, and the
   images a lesson links from results/) is loaded and drawn, and each gets a screenshot; the notebook, saved, then
   passes the learner Run All assertions (run_all.py) for every lesson served unchanged, so that nbclient need not
   run it again;
5. the Korean edition of lesson 02 (ko/lessons/, served next to lessons/): its setup cell speaks Korean,
   the solved Exercise 2.1 passes with the Korean ✓ line, and the same wrong `decode` gets the check's message in
   Korean, with no frame of the kit;
6. JupyterLab's own interface in Korean (jupyterlab-language-pack-ko-KR, requirements-ko.txt): the server offers it,
   and with the language setting a learner picks in Settings -> Language, the menus are Korean.

Screenshots go to the test's tmp folder (paths printed; `pytest -s` shows them), one per figure as well. Skipped, with the reason, where
no browser can be had: chromium not installed (`apt-get install chromium`; MEMLAB_CHROMIUM=/path overrides
where it is looked for) or Playwright not importable (`pip install -r requirements-test.txt`). Playwright's own
browser download is not used.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from lab_server import INSTRUCTOR_PLUGINS, REPO, running_lab
from run_all import SOLVED_IN_THE_BROWSER, assert_run_all_stops_politely, chromium_path, no_chromium

# part of the default run (CI); the timeout covers the server, the browser and Validate's full execution
pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

LESSONS, SOLUTIONS = REPO / "lessons", REPO / "solutions"
KO_LESSONS, KO_SOLUTIONS = REPO / "ko" / "lessons", REPO / "ko" / "solutions"
ENGLISH, KOREAN = (
    "lessons",
    "ko/lessons",
)  # the lessons' folders under the served root: FOLDER/NN-slug/NN-slug.ipynb
HANGUL = re.compile("[가-힣]")
MARKDOWN_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)")
L02, L03 = SOLVED_IN_THE_BROWSER  # served with some exercises solved (the lab fixture)
L07 = "07-fp8-transformer-engine"
GPU_ONLY = "e4_measure_amp_step"  # Exercise 3.4: needs CUDA; this machine has none
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
KIT_FRAMES = ("kit.py", "Traceback", "raise CheckFailed", 'File "')
# a realistic wrong answer: the right decode, minus the sign bit
WRONG_DECODE = (
    "_decode_right = decode\n\n\ndef decode(bits, fmt):\n    return abs(_decode_right(bits, fmt))\n"
)
CELL_TIMEOUT_MS = 120_000
VALIDATE_TIMEOUT_MS = 240_000
RUN_ALL_TIMEOUT_MS = 300_000


def _chromium() -> str:
    if no_chromium():
        pytest.skip(no_chromium())
    return chromium_path()


# ---- the served course -------------------------------------------------------------------------------------------


def _cells_by_grade_id(nb: dict) -> dict[str, dict]:
    return {
        c["metadata"]["nbgrader"]["grade_id"]: c
        for c in nb["cells"]
        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    }


def _solve(
    slug: str,
    dest: Path,
    *,
    except_ids: tuple[str, ...] = (),
    only_ids: tuple[str, ...] | None = None,
    lessons: Path = LESSONS,
    solutions: Path = SOLUTIONS,
):
    """The learner version of `slug` with solution cells copied in from solutions/ (all, or `only_ids`)."""
    learner = json.loads((lessons / slug / f"{slug}.ipynb").read_text())
    solution = _cells_by_grade_id(json.loads((solutions / slug / f"{slug}.ipynb").read_text()))
    solved = []
    for grade_id, cell in _cells_by_grade_id(learner).items():
        if not cell["metadata"]["nbgrader"].get("solution") or grade_id in except_ids:
            continue
        if only_ids is not None and grade_id not in only_ids:
            continue
        cell["source"] = solution[grade_id]["source"]
        solved.append(grade_id)
    dest.write_text(json.dumps(learner, indent=1, ensure_ascii=False) + "\n")
    return solved


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    _chromium()  # skip before starting a server when there is no browser anyway
    pytest.importorskip(
        "playwright.sync_api", reason="no browser driver: pip install -r requirements-test.txt"
    )
    tmp = tmp_path_factory.mktemp("browser-course")
    course = tmp / "course"
    shutil.copytree(LESSONS, course / ENGLISH, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copytree(REPO / "results", course / "results")  # what the lessons link to (../../results/...)
    shutil.copy(REPO / "nbgrader_config.py", course / "nbgrader_config.py")
    assert _solve(L02, course / "lessons" / L02 / f"{L02}.ipynb", only_ids=("e1_decode",)) == ["e1_decode"]
    solved = _solve(L03, course / "lessons" / L03 / f"{L03}.ipynb", except_ids=(GPU_ONLY,))
    assert len(solved) >= 3, solved
    korean = course / KOREAN / L02
    korean.mkdir(parents=True)
    korean_solved = _solve(
        L02, korean / f"{L02}.ipynb", only_ids=("e1_decode",), lessons=KO_LESSONS, solutions=KO_SOLUTIONS
    )
    assert korean_solved == ["e1_decode"]
    with running_lab(course, tmp / "work", cwd=course) as server:
        # the served copies: cell positions are read from them (lessons/ may be regenerated while tests run)
        yield SimpleNamespace(
            url=server.url,
            token=server.token,
            root=course,
            lessons=course / ENGLISH,
            server=server,
            user_settings=tmp / "work" / "jupyter-user" / "lab" / "user-settings",  # lab_server.jupyter_env's
        )


@pytest.fixture(scope="module")
def browser(lab, tmp_path_factory):
    from playwright.sync_api import Error, expect, sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as p:
        try:
            context = p.chromium.launch_persistent_context(
                str(profile),
                executable_path=_chromium(),
                headless=True,
                args=CHROMIUM_FLAGS,
                viewport={"width": 1400, "height": 900},
            )
        except Error as error:
            pytest.skip(f"no browser: chromium did not start ({str(error).splitlines()[0]})")
        context.set_default_timeout(60_000)
        expect.set_options(timeout=60_000)  # JupyterLab renders a notebook's cells in batches; 2 busy cores
        yield context
        context.close()


@pytest.fixture
def page(browser):
    page = browser.new_page()
    yield page
    page.close()


# ---- driving JupyterLab ------------------------------------------------------------------------------------------


def open_notebook(page, lab, slug: str, folder: str = ENGLISH):
    """Open lesson `slug` (in `folder` of the served root: KOREAN for the Korean edition) in a fresh workspace
    (?reset); wait until every cell is on the page (the default windowing mode, contentVisibility, keeps them all in
    the DOM, so a cell's position is its index)."""
    from playwright.sync_api import expect

    page.goto(f"{lab.url}/lab/tree/{folder}/{slug}/{slug}.ipynb?reset&token={lab.token}")
    panel = page.locator(".jp-NotebookPanel:visible")
    expect(panel.locator(".jp-Notebook .jp-Cell")).to_have_count(len(served_cells(lab, slug, folder)))
    return panel


def served_cells(lab, slug: str, folder: str = ENGLISH) -> list[dict]:
    return json.loads((lab.root / folder / slug / f"{slug}.ipynb").read_text())["cells"]


def cell_index(lab, slug: str, pick, folder: str = ENGLISH) -> int:
    """The position of a cell in the served learner notebook, found by content or nbgrader metadata."""
    return next(i for i, c in enumerate(served_cells(lab, slug, folder)) if pick(c))


def by_grade_id(grade_id: str):
    return lambda c: c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id


def setup_cell(c) -> bool:
    return c["cell_type"] == "code" and "pick_device" in "".join(c["source"])


def run_cell(panel, index: int, timeout: int = CELL_TIMEOUT_MS):
    """Select cell `index` (click its prompt: command mode), Shift+Enter, wait for its execution count."""
    from playwright.sync_api import expect

    cell = panel.locator(".jp-Notebook .jp-Cell").nth(index)
    cell.scroll_into_view_if_needed()
    cell.locator(".jp-InputPrompt").click()
    cell.page.keyboard.press("Shift+Enter")
    expect(cell.locator(".jp-InputPrompt")).to_have_text(re.compile(r"\[\d+\]:"), timeout=timeout)
    return cell


def answer_wrong(page, panel, solution, check_index: int) -> str:
    """Type WRONG_DECODE over the `solution` cell and run it (it prints nothing), then run the check at `check_index`:
    the check's message, which must say CheckFailed and show no frame of the kit."""
    from playwright.sync_api import expect

    solution.locator(".jp-InputArea-editor .cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(WRONG_DECODE)
    expect(solution.locator(".jp-InputArea-editor")).to_contain_text("_decode_right")
    page.keyboard.press("Shift+Enter")
    expect(solution.locator(".jp-InputPrompt")).to_have_text(re.compile(r"\[\d+\]:"), timeout=CELL_TIMEOUT_MS)
    assert not solution.locator(".jp-OutputArea-output").count(), solution.locator(
        ".jp-OutputArea"
    ).inner_text()
    output = run_cell(panel, check_index).locator(".jp-OutputArea")
    expect(output).to_contain_text("CheckFailed")
    message = output.inner_text()
    print(f"check output: {message.strip()}")
    for frame in KIT_FRAMES:
        assert frame not in message, f"{frame!r} is visible in the failed check's output:\n{message}"
    return message


def shot(page, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path))
    print(f"screenshot: {path}")
    return path


# ---- the tests --------------------------------------------------------------------------------------------------


def test_check_cells_in_the_browser(lab, page, tmp_path):
    from playwright.sync_api import expect

    panel = open_notebook(page, lab, L02)

    # the learner view: the Validate button, none of nbgrader's instructor tools
    expect(panel.locator(".jp-Toolbar").get_by_text("Validate", exact=True)).to_be_visible()
    menus = page.locator("#jp-menu-panel, .lm-MenuBar").first.inner_text()
    assert "Nbgrader" not in menus, menus
    tabs = " ".join(
        (t.get_attribute("title") or "") + " " + t.inner_text()
        for t in page.locator(".jp-SideBar .lm-TabBar-tab").all()
    )
    assert "Create Assignment" not in tabs, tabs
    disabled = page.evaluate(
        "JSON.parse(document.getElementById('jupyter-config-data').textContent).disabledExtensions"
    )
    assert set(INSTRUCTOR_PLUGINS) <= set(disabled), disabled
    shot(page, tmp_path, "1-lesson02-opened")

    # setup, Exercise 2.1 (solved in this copy) and its check, with the keyboard
    setup = run_cell(panel, cell_index(lab, L02, setup_cell))
    assert "Traceback" not in setup.locator(".jp-OutputArea").inner_text()
    solution = run_cell(panel, cell_index(lab, L02, by_grade_id("e1_decode")))
    check = run_cell(panel, cell_index(lab, L02, by_grade_id("e1_decode_check")))
    expect(check.locator(".jp-OutputArea")).to_contain_text(re.compile(r"✓ e1_decode: \d+ cases passed"))
    passed = check.locator(".jp-OutputArea").inner_text()
    print(f"check output: {passed.strip()}")
    shot(page, tmp_path, "2-lesson02-check-passed")

    # a wrong answer, typed over the solution: the check's message, and nothing of the kit's frames
    message = answer_wrong(page, panel, solution, cell_index(lab, L02, by_grade_id("e1_decode_check")))
    assert "e1_decode" in message and "✓" not in message, message
    shot(page, tmp_path, "3-lesson02-wrong-answer")


def test_a_korean_lesson_speaks_korean_in_the_browser(lab, page, tmp_path):
    """The Korean edition's lesson 02: the setup cell's line, the ✓ line and a wrong answer's message in Korean."""
    from playwright.sync_api import expect

    panel = open_notebook(page, lab, L02, KOREAN)
    index = lambda pick: cell_index(lab, L02, pick, KOREAN)  # noqa: E731
    setup = run_cell(panel, index(setup_cell))
    assert HANGUL.search(setup.locator(".jp-OutputArea").inner_text()), "the setup cell's line is not Korean"
    solution = run_cell(panel, index(by_grade_id("e1_decode")))
    check = run_cell(panel, index(by_grade_id("e1_decode_check")))
    expect(check.locator(".jp-OutputArea")).to_contain_text(re.compile(r"✓ e1_decode: 케이스 \d+개 통과"))
    shot(page, tmp_path, "6-ko-lesson02-check-passed")

    message = answer_wrong(page, panel, solution, index(by_grade_id("e1_decode_check")))
    assert "e1_decode: 케이스 " in message and "✓" not in message, message
    shot(page, tmp_path, "7-ko-lesson02-wrong-answer")


def test_jupyterlab_itself_speaks_korean_when_the_learner_picks_it(lab, page, tmp_path):
    """requirements-ko.txt's language pack: the server offers Korean, and with the setting that Settings -> Language ->
    Korean writes (written here directly, then removed: the other tests read English menus), JupyterLab's own menus
    are Korean."""
    from playwright.sync_api import expect

    status, body = lab.server.get("/lab/api/translations/")
    assert status == 200 and "ko_KR" in json.loads(body)["data"], body[:500]
    setting = lab.user_settings / "@jupyterlab" / "translation-extension" / "plugin.jupyterlab-settings"
    setting.parent.mkdir(parents=True, exist_ok=True)
    setting.write_text(json.dumps({"locale": "ko_KR"}))
    try:
        page.goto(f"{lab.url}/lab?reset&token={lab.token}")
        menubar = page.locator("#jp-menu-panel")
        # Edit, Run, Settings and Help, as the pack's jupyterlab.json translates them
        for label in ("편집", "실행", "설정", "도움말"):
            expect(menubar).to_contain_text(label)
        shot(page, tmp_path, "8-ko-jupyterlab-menus")
    finally:
        setting.unlink()


def test_validate_button_reports_the_unsolved_gpu_exercise(lab, page, tmp_path):
    """Every exercise of lesson 03 solved but the GPU-only one, which is still the stub: Validate (it executes the
    whole notebook on the server) must not say Success, and must show that check's failure."""
    from playwright.sync_api import expect

    panel = open_notebook(page, lab, L03)
    validate = panel.locator(".jp-Toolbar").get_by_text("Validate", exact=True)
    expect(validate).to_be_visible()
    validate.click()
    message = page.locator(".jp-Dialog #validation-message")
    message.wait_for(timeout=VALIDATE_TIMEOUT_MS)
    expect(page.locator(".jp-Dialog .jp-Dialog-header")).to_contain_text("Validation Results")
    text = message.inner_text()
    print(f"validate dialog: {text.strip()}")
    shot(page, tmp_path, "4-lesson03-validate")
    assert "Success" not in text and "passes all the tests" not in text, text
    assert "validation-failed" in (message.get_attribute("class") or ""), text
    assert "The following cell failed:" in text, text
    assert "check_measure_amp_step(measure_amp_step)" in text, text
    assert "CheckFailed" in text and GPU_ONLY in text, text
    assert text.count("The following cell failed:") == 1, f"more than the GPU exercise failed:\n{text}"
    for frame in KIT_FRAMES:
        assert frame not in text, f"{frame!r} is visible in Validate's report:\n{text}"


@pytest.mark.parametrize(
    "slug", sorted(p.name for p in LESSONS.iterdir() if (p / f"{p.name}.ipynb").is_file())
)
def test_run_all_reaches_the_end_of_an_unsolved_lesson(lab, page, tmp_path, slug):
    """Every lesson as released (02 and 03 have a few exercises solved in this copy): the Run menu's "Run All Cells"
    runs every code cell, the stopped sections show the model solution's recorded outputs, and no news toast."""
    from playwright.sync_api import expect

    panel = open_notebook(page, lab, slug)
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    cells = served_cells(lab, slug)
    last = max(i for i, c in enumerate(cells) if c["cell_type"] == "code")
    last_cell = panel.locator(".jp-Notebook .jp-Cell").nth(last)
    expect(last_cell.locator(".jp-InputPrompt")).to_have_text(
        re.compile(r"\[\d+\]:"), timeout=RUN_ALL_TIMEOUT_MS
    )
    shot(page, tmp_path, f"5-{slug}-run-all")
    prompts = panel.locator(".jp-Notebook .jp-CodeCell .jp-InputPrompt").all_text_contents()
    assert all(re.fullmatch(r"\[\d+\]:", p.strip()) for p in prompts), f"cells Run All did not run: {prompts}"
    outputs = " ".join(panel.locator(".jp-Notebook .jp-OutputArea").all_text_contents())
    if slug != L03:  # this copy of lesson 03 is solved but for its GPU exercise: none of its sections stops
        assert "is not finished, so this cell stops" in outputs, (
            "no stopped cell shows the model solution's output"
        )
    if slug == L07:  # its stopped sections are figures
        assert panel.locator(".jp-Notebook .jp-OutputArea img").count() >= 1, "no recorded figure is shown"
    figures = shoot_figures(panel, tmp_path, slug)
    linked = [
        m for c in cells if c["cell_type"] == "markdown" for m in MARKDOWN_IMAGE.findall("".join(c["source"]))
    ]
    assert len(figures) >= len(linked), (
        f"{slug}: {len(figures)} figures drawn, fewer than its images {linked}"
    )
    toasts = " ".join(page.locator(".Toastify__toast").all_inner_texts())
    assert "news" not in toasts.lower(), f"JupyterLab asks about news: {toasts}"
    if slug not in SOLVED_IN_THE_BROWSER:  # served as released: what Run All left must stop only politely
        assert_run_all_stops_politely(saved_after_run_all(page, lab, slug), slug)


def shoot_figures(panel, tmp_path: Path, slug: str) -> list[Path]:
    """A screenshot of every figure of the notebook on the page (a plot in a cell's output, recorded or drawn, or an
    image of a markdown cell), after waiting for it to be loaded and drawn with a size: an image JupyterLab could not
    fetch (a link outside the served folder) has none. The paths, printed."""
    images = panel.locator(".jp-Notebook .jp-OutputArea-output img, .jp-Notebook .jp-RenderedMarkdown img")
    paths = []
    for k in range(images.count()):
        image = images.nth(k)
        image.scroll_into_view_if_needed()
        handle = image.element_handle()
        loaded = "img => img.complete && img.naturalWidth > 0 && img.getBoundingClientRect().height > 0"
        try:
            image.page.wait_for_function(loaded, arg=handle, timeout=30_000)
        except Exception as error:  # Playwright's TimeoutError: say which image
            raise AssertionError(
                f"{slug}: figure {k} ({image.get_attribute('src')[:80]}) is not drawn"
            ) from error
        path = tmp_path / f"figure-{slug}-{k:02d}.png"
        image.screenshot(path=str(path))
        print(f"screenshot: {path}")
        paths.append(path)
    return paths


def saved_after_run_all(page, lab, slug: str):
    """Save the notebook (Ctrl+S) and read it back from the served folder once every code cell's execution count
    is on disk: the run's outputs as JupyterLab keeps them."""
    import time

    import nbformat

    page.locator(".jp-NotebookPanel:visible .jp-Notebook").click(position={"x": 5, "y": 5})
    page.keyboard.press("Escape")
    page.keyboard.press("Control+s")
    path = lab.lessons / slug / f"{slug}.ipynb"
    deadline = time.monotonic() + 60
    while True:
        try:
            nb = nbformat.read(path, as_version=4)
        except nbformat.reader.NotJSONError:
            nb = None  # read while the server writes it (it truncates the file, then writes it in place)
        if nb is not None and all(c.get("execution_count") for c in nb.cells if c.cell_type == "code"):
            return nb
        assert time.monotonic() < deadline, f"{slug}: JupyterLab did not save the notebook after Run All"
        time.sleep(0.5)
