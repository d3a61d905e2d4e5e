"""Shared helpers for the site's tests: one strict build per test session, the local server,
Debian's Chromium, and a page that records every request and console message."""

from __future__ import annotations

import fcntl
import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import calc
from conftest import ROOT
from scripts import site_browser

ARTIFACTS = ROOT / "test-artifacts"
CATEGORIES = list(calc.CATEGORIES)
PARTS = [*CATEGORIES, "peak"]
LIVE_TIMEOUT_MS = 90_000  # Pyodide's first start on a busy 2-core machine
# Awaits the redraw promise a test set up in window.__drawn, failing (not hanging) if none comes.
AWAIT_DRAWN = """() => Promise.race([window.__drawn, new Promise((_, reject) =>
    setTimeout(() => reject(new Error("no redraw within 30 s")), 30000))])"""


def settled_url(page) -> str:
    """The page's address once the calculator has written it: typing is written once the reader pauses
    (docs/javascripts/calculator/address.js), a choice at once."""
    page.wait_for_function("() => !document.querySelector('[data-calc]')?.dataset.address", timeout=30_000)
    return page.url


@functools.cache
def built_site() -> Path:
    """The site as `mkdocs build --strict` makes it, built once per test run into build/site-tests. Under
    pytest-xdist (make test runs two workers) the first worker builds it and the others wait for it: a
    second build would empty the directory while the first worker's server reads it."""
    out = ROOT / "build" / "site-tests"
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # the same in every worker of one run; None: no workers
    out.parent.mkdir(parents=True, exist_ok=True)
    with (out.parent / "site-tests.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        mark = out.parent / "site-tests.run"
        if run and mark.is_file() and mark.read_text() == run:
            return out
        mark.unlink(missing_ok=True)
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
        result = subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr[-4000:]}"
        if run:
            mark.write_text(run)
    return out


def require_chromium() -> None:
    if not Path(site_browser.CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail(f"{site_browser.CHROMIUM} is missing: `make setup-browser` installs it")
        pytest.skip(f"{site_browser.CHROMIUM} is missing: `make setup-browser` installs it")


def answer_for(inputs: dict[str, str]) -> dict:
    """What the CPython calculator answers for the page's inputs."""
    result = json.loads(calc.web.handle(json.dumps({"inputs": inputs, "sweep": True})))
    assert result["ok"], result
    return result


@dataclass
class Recorder:
    """Every request a page makes, every worker it starts and every console error or page error it raises."""

    base: str
    requests: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    workers: list[str] = field(default_factory=list)

    def attach(self, page) -> None:
        page.on("request", lambda request: self.requests.append(request.url))
        page.on("worker", lambda worker: self.workers.append(worker.url))
        page.on("console", lambda msg: msg.type == "error" and self.errors.append(msg.text))
        page.on("pageerror", lambda error: self.errors.append(str(error)))

    def runtimes(self) -> int:
        """How many Pyodide runtimes the page started: its calc workers, and its fetches of the WebAssembly."""
        workers = sum(url.split("?")[0].endswith("/calc-worker.mjs") for url in self.workers)
        wasm = sum(url.split("?")[0].endswith("/pyodide.asm.wasm") for url in self.requests)
        return max(workers, wasm)

    def foreign(self) -> list[str]:
        return [url for url in self.requests if not (url.startswith(self.base) or url.startswith("data:"))]


def rendered_table(page) -> dict[str, dict[str, int]]:
    """{recipe id: {part: bytes}} from the four-recipe table's data attributes."""
    return page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('tr[data-recipe]')].map(tr => [
             tr.dataset.recipe,
             Object.fromEntries([...tr.querySelectorAll('[data-part]')]
               .map(td => [td.dataset.part, Number(td.dataset.bytes)]))
           ]))"""
    )


def rendered_text(page) -> dict[str, dict[str, str]]:
    """{recipe id: {part: the cell's text}}."""
    return page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('tr[data-recipe]')].map(tr => [
             tr.dataset.recipe,
             Object.fromEntries([...tr.querySelectorAll('[data-part]')]
               .map(td => [td.dataset.part, td.textContent.trim()]))
           ]))"""
    )


def expected_table(answer: dict) -> dict[str, dict[str, int]]:
    return {row["id"]: {**row["bytes"], "peak": row["peak"]} for row in answer["table"]}
