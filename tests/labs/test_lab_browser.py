"""The lab command works in a browser: JupyterLab started as scripts/lab.sh starts it (on the
labs folder, loopback only, with a token this test sets), lab 02 opened in headless Chromium,
Run > Run All Cells, and no error in any output.

A learner notebook's untouched exercises print "not attempted yet" and the lab prints errors it
catches on purpose (the race detector's RaceError) to stdout; neither is an error here. An error
is an uncaught exception (a traceback) or anything on stderr that says Error. To prove the check
can fail, the test then adds a cell that raises (in the browser only, never saved) and requires
the check to find it. Autosave is off and the notebook file must be unchanged afterwards.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
LABS = ROOT / "labs"
LAB = "02_first_kernel.ipynb"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SERVER_START_TIMEOUT_S = 90
UI_TIMEOUT_MS = 60_000
RUN_ALL_TIMEOUT_MS = 180_000  # the notebook runs in under 60 s; headroom for a slow machine
PROBE = "npulab browser-test probe"

# JupyterLab user settings for the test: every cell attached to the page (so every output is
# in the DOM), no autosave (the learner notebook must stay as committed), no news or update
# checks (no request leaves the machine).
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false", "checkForUpdates": False},
}

# Every output as JupyterLab rendered it: mime type and text.
OUTPUTS_JS = """() => [...document.querySelectorAll('.jp-OutputArea-output')].map(o => ({
    mime: o.getAttribute('data-mime-type') || '', text: o.innerText }))"""
# True once no cell is queued or running ("[*]") and the kernel reports idle.
SETTLED_JS = """() => {
    const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
    const busy = prompts.some(p => p.innerText.includes('*'));
    const status = document.querySelector('.jp-Notebook-ExecutionIndicator');
    return !busy && status && status.getAttribute('data-status') === 'idle';
}"""
# True once every code cell shows an execution count, or the run settled with an error output
# (Run All stops at the first exception, leaving later cells unnumbered).
DONE_JS = """() => {
    const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
    const numbered = prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.innerText));
    const failed = document.querySelector('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]');
    return (numbered || failed) && (""" + SETTLED_JS + """)();
}"""


def error_outputs(outputs: list[dict]) -> list[str]:
    """The outputs that show an error: a traceback anywhere, or stderr that mentions Error."""
    bad = []
    for out in outputs:
        text = out["text"]
        stderr = out["mime"] == "application/vnd.jupyter.stderr"
        if "Traceback" in text or (stderr and "Error" in text):
            bad.append(f"[{out['mime']}] {text[:1500]}")
    return bad


def menu(page, top: str, item: str) -> None:
    """Choose a JupyterLab main-menu item, as a learner would."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{top}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{item}$")).click()


def wait_kernel_ready(page, base: str, token: str, timeout_s: float) -> None:
    """Wait until the notebook's kernel is idle with the page's websocket attached.

    The toolbar indicator alone says "idle" before the kernel is connected, and a Run All
    issued then is lost; the server's kernel list shows the connection.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        with urllib.request.urlopen(f"{base}/api/kernels?token={token}", timeout=10) as r:
            kernels = json.load(r)
        attached = [k for k in kernels if k.get("connections", 0) >= 1
                    and k.get("execution_state") == "idle"]
        if attached and page.evaluate(SETTLED_JS):
            return
        assert time.monotonic() < deadline, f"kernel not ready after {timeout_s:.0f} s: {kernels}"
        page.wait_for_timeout(250)


def move_occupancy_slider(page) -> None:
    """The occupancy widget redraws when its cycle slider moves: type a cycle into the slider's
    readout, as a learner can, and wait for the widget's picture to change."""
    slider = page.locator(".widget-hslider", has=page.locator(".widget-label", has_text="cycle")).first
    slider.scroll_into_view_if_needed()
    view = slider.locator("xpath=ancestor::div[contains(@class, 'widget-vbox')][1]")
    img = view.locator("img").first
    img.wait_for()
    before = img.get_attribute("src")
    cycles = int(float(slider.locator(".noUi-handle").get_attribute("aria-valuemax")))
    assert cycles > 2, f"the occupancy slider spans {cycles} cycles"
    readout = slider.locator(".widget-readout")
    readout.click()
    page.keyboard.press("Control+A")
    page.keyboard.type(str(cycles // 2))
    page.keyboard.press("Enter")
    page.wait_for_function("([el, src]) => el.src !== src", arg=[img.element_handle(), before],
                           timeout=UI_TIMEOUT_MS)
    assert int(readout.inner_text().replace(",", "")) == cycles // 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def jupyterlab(tmp_path):
    """JupyterLab on labs/ at a free loopback port with a fresh token; terminated at the end."""
    assert (LABS / LAB).is_file(), f"labs/{LAB} missing (generate the labs first)"
    settings = tmp_path / "lab-settings"
    for rel, values in LAB_SETTINGS.items():
        path = settings / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    env = {
        **os.environ,
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "lab-workspaces"),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "jupyter-config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "jupyter-runtime"),
        "JUPYTER_DATA_DIR": str(tmp_path / "jupyter-data"),  # only the venv's python3 kernel
        "IPYTHONDIR": str(tmp_path / "ipython"),
    }
    port, token = free_port(), secrets.token_hex(16)
    log = open(tmp_path / "jupyterlab.log", "w")
    # the README's lab command (its install step finds the venv up to date and skips)
    cmd = ["bash", str(ROOT / "scripts" / "lab.sh"), "--ip=127.0.0.1", f"--port={port}",
           "--no-browser", f"--IdentityProvider.token={token}", "--ServerApp.port_retries=0",
           f"--FileCheckpoints.root_dir={tmp_path / 'checkpoints'}"]  # not labs/.ipynb_checkpoints
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        while True:
            assert proc.poll() is None, "JupyterLab exited:\n" + (tmp_path / "jupyterlab.log").read_text()
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, (
                f"JupyterLab not up after {SERVER_START_TIMEOUT_S} s:\n"
                + (tmp_path / "jupyterlab.log").read_text())
            time.sleep(0.5)
        yield base, token
    finally:
        proc.terminate()  # SIGTERM: the server shuts its kernels down and exits
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()


def test_lab_02_runs_in_jupyterlab_without_errors(jupyterlab, tmp_path):
    from playwright.sync_api import sync_playwright

    base, token = jupyterlab
    before = hashlib.sha256((LABS / LAB).read_bytes()).hexdigest()
    assert Path(CHROMIUM).is_file(), f"{CHROMIUM} missing: run scripts/install-system-deps.sh"
    problems: list[str] = []

    def only_loopback(route):
        if urlsplit(route.request.url).hostname == "127.0.0.1" or route.request.url.startswith(
                ("data:", "blob:")):
            route.continue_()
        else:
            problems.append(f"request to another host: {route.request.url}")
            route.abort()

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS,
                                     timeout=UI_TIMEOUT_MS)
        try:
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            context.route("**/*", only_loopback)
            page = context.new_page()
            page.set_default_timeout(UI_TIMEOUT_MS)
            page.on("pageerror", lambda err: problems.append(f"page error: {err}"))

            t0 = time.monotonic()
            page.goto(f"{base}/lab/tree/{LAB}?reset&token={token}")
            page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for()
            wait_kernel_ready(page, base, token, UI_TIMEOUT_MS / 1000)
            n_code = page.locator(".jp-NotebookPanel .jp-CodeCell").count()
            assert n_code > 0

            # start from a notebook with no stored outputs or counts, then run everything
            menu(page, "Edit", "Clear Outputs of All Cells")
            page.wait_for_function(
                "() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]"
                ".every(p => !/\\d/.test(p.innerText))", timeout=UI_TIMEOUT_MS)
            menu(page, "Run", "Run All Cells")
            try:
                page.wait_for_function(DONE_JS, timeout=RUN_ALL_TIMEOUT_MS)
            except Exception:
                page.screenshot(path=str(tmp_path / "run-all.png"), full_page=True)
                raise AssertionError(
                    f"Run All did not finish in {RUN_ALL_TIMEOUT_MS / 1000:.0f} s; prompts: "
                    f"{page.locator('.jp-CodeCell .jp-InputPrompt').all_inner_texts()}; "
                    f"screenshot {tmp_path / 'run-all.png'}") from None
            print(f"\n{LAB}: {n_code} code cells run in JupyterLab in {time.monotonic() - t0:.1f} s")

            outputs = page.evaluate(OUTPUTS_JS)
            prompts = page.locator(".jp-NotebookPanel .jp-CodeCell .jp-InputPrompt").all_inner_texts()
            unrun = [i for i, p in enumerate(prompts) if not re.search(r"\[\d+\]", p)]
            errors = error_outputs(outputs)
            assert outputs, "Run All produced no output at all"
            assert not errors, f"{LAB} shows errors after Run All:\n" + "\n---\n".join(errors)
            assert not unrun, f"{LAB}: code cells {unrun} did not run (prompts {prompts})"

            move_occupancy_slider(page)

            # the check can fail: a raising cell, added in the browser only, is caught
            page.locator(".jp-NotebookPanel .jp-CodeCell").last.locator(".jp-InputPrompt").click()
            page.keyboard.press("Escape")
            page.keyboard.press("b")
            page.keyboard.press("Enter")
            page.keyboard.type(f'raise ValueError("{PROBE}")')
            page.keyboard.press("Shift+Enter")
            page.wait_for_function(
                f"() => document.body.innerText.includes('ValueError: {PROBE}')",
                timeout=UI_TIMEOUT_MS)
            page.wait_for_function(SETTLED_JS, timeout=UI_TIMEOUT_MS)
            caught = error_outputs(page.evaluate(OUTPUTS_JS))
            assert len(caught) == 1 and PROBE in caught[0], caught
            context.close()
        finally:
            browser.close()

    assert not problems, "\n".join(problems)
    after = hashlib.sha256((LABS / LAB).read_bytes()).hexdigest()
    assert after == before, f"labs/{LAB} was modified by the browser run"
