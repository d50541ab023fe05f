"""The web page in headless Chromium (Debian's package, driven by Playwright): speak a sentence, get audio."""

from __future__ import annotations

import pytest
from server_support import ARTIFACTS, Server, chromium_path

pytestmark = pytest.mark.browser

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PAGE_TIMEOUT_MS = 120_000  # the tiny random model is slow on a shared CPU


@pytest.fixture(scope="module")
def page():
    executable = chromium_path()
    if executable is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            yield page
        finally:
            browser.close()


def test_page_speaks_a_sentence(page, kokoro_server: Server) -> None:
    page.goto(kokoro_server.url + "/")
    page.wait_for_function("document.querySelectorAll('#voice option').length > 0")
    assert page.locator("#model").input_value() == "tiny"
    page.select_option("#voice", "v_two")
    page.fill("#text", "hello from the browser.")
    page.click("#speak")
    page.wait_for_function("document.querySelector('#player').src.startsWith('blob:')")
    duration = page.evaluate(
        """() => new Promise((resolve, reject) => {
            const player = document.querySelector('#player');
            if (player.readyState >= 1) return resolve(player.duration);
            player.addEventListener('loadedmetadata', () => resolve(player.duration));
            player.addEventListener('error', () => reject(new Error('the audio element could not read it')));
        })"""
    )
    assert duration > 0.05
    assert page.locator("#error").is_hidden()
    assert "first audio after" in page.locator("#status").inner_text()
    assert page.locator("#download").get_attribute("href").startswith("blob:")
    # Kokoro times its words: each one is shown, and lit up once the audio clock reaches it
    assert page.locator("#captions span").all_inner_texts() == ["hello", "from", "the", "browser"]
    page.wait_for_function("document.querySelectorAll('#captions span.said').length === 4")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "server-page.png"), full_page=True)


def test_page_shows_errors_readably(page, kokoro_server: Server) -> None:
    page.goto(kokoro_server.url + "/")
    page.wait_for_function("document.querySelectorAll('#voice option').length > 0")
    page.fill("#text", "x" * 5000)  # over the server's default limit of 4096 characters
    page.click("#speak")
    error = page.locator("#error")
    error.wait_for(state="visible")
    assert "4096" in error.inner_text() and "HTTP 413" in error.inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "server-page-error.png"), full_page=True)
