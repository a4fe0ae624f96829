"""The Discover page in a real browser, against the fake Hub: search, files with the fit, download live."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakehub import FakeHub, serve, standard_repos
from server.console.helpers import PASSWORD, screenshot, sign_in, signed_in_client
from server.helpers import LiveServer, live_server, server_settings

Q8 = "TinyLlama-Q8_0.gguf"
F16 = "TinyLlama-F16.gguf"


@pytest.fixture(scope="module")
def hub(hub_files: dict[str, bytes]) -> Iterator[FakeHub]:
    fake = FakeHub()
    standard_repos(fake, hub_files)
    with serve(fake):
        yield fake


@pytest.fixture(scope="module")
def discover(tmp_path_factory: pytest.TempPathFactory, hub: FakeHub) -> Iterator[LiveServer]:
    """A server whose Hub is the fake one (and whose library starts empty but for the bundled model)."""
    home = tmp_path_factory.mktemp("discover-home")
    settings = server_settings(home, SPARK_ADMIN_PASSWORD=PASSWORD, SPARK_HF_ENDPOINT=hub.url)
    with live_server(settings, key_name=None) as live:
        yield live


def test_search_then_a_repositorys_files_with_size_quant_and_the_fit(page: Any, discover: LiveServer) -> None:
    sign_in(page, discover, "/discover")
    page.get_by_label("Search Hugging Face").fill("tiny")
    page.get_by_role("button", name="Search").click()
    page.wait_for_url("**/discover?q=tiny")
    found = page.locator("tbody tr", has_text="tiny/TinyLlama-GGUF")
    assert "5000" in found.inner_text() and "llama" in found.inner_text()
    page.get_by_role("link", name="tiny/TinyLlama-GGUF").click()
    page.wait_for_url("**/discover/tiny/TinyLlama-GGUF")
    row = page.locator(f"tr[data-file='{Q8}']")
    text = row.inner_text()
    assert "Q8_0" in text and "KiB" in text
    assert "fits" in row.locator(".badge").last.inner_text()
    assert "needs" in row.locator(".arithmetic").inner_text() and "free" in row.locator(".arithmetic").inner_text()


def test_a_download_shows_its_bar_reach_100_and_the_model_lands_in_models(
    page: Any, discover: LiveServer, hub: FakeHub, hub_files: dict[str, bytes]
) -> None:
    hub.throttle[Q8] = len(hub_files["q8_0"]) // 3  # about three seconds: the bar is seen moving
    try:
        sign_in(page, discover, "/discover/tiny/TinyLlama-GGUF")
        page.get_by_role("button", name=f"Download {Q8}").click()
        pull = page.locator("li.pull", has_text="tinyllama-q8_0")
        pull.wait_for(timeout=10_000)
        page.wait_for_function(
            "() => { const p = document.querySelector('li.pull progress'); return p && p.value > 0 && p.value < 100; }",
            timeout=20_000,
        )  # part way, over the page's event stream
        page.wait_for_function(
            "() => document.querySelector('li.pull[data-state=done] .percent')?.textContent === '100 %'",
            timeout=60_000,
        )
    finally:
        del hub.throttle[Q8]
    page.locator("li.pull[data-state=done]").get_by_role("link", name="tinyllama-q8_0").click()
    page.wait_for_url("**/models/tinyllama-q8_0")
    page.goto(f"{discover.url}/models")
    assert page.locator("tbody tr", has_text="tinyllama-q8_0").count() == 1


def test_a_download_can_be_cancelled(page: Any, discover: LiveServer, hub: FakeHub) -> None:
    hub.throttle[F16] = 2_000  # slow enough to cancel
    try:
        sign_in(page, discover, "/discover/tiny/TinyLlama-GGUF")
        page.get_by_role("button", name=f"Download {F16}").click()
        page.get_by_role("button", name=f"Cancel tiny/TinyLlama-GGUF/{F16}").click()
        page.locator("li.pull[data-state=cancelled]").wait_for(timeout=30_000)
    finally:
        del hub.throttle[F16]
    assert "tinyllama-f16" not in {m.id for m in discover.state.library.list()}


def test_a_lora_adapter_from_the_hub_is_attached_on_the_model_page_and_taken_off(
    page: Any, browser: Any, discover: LiveServer, tiny_llama: Path
) -> None:
    discover.state.library.add_local(tiny_llama, model_id="tiny-tuned")
    sign_in(page, discover, "/models/tiny-tuned")
    section = page.locator("section", has=page.get_by_role("heading", name="LoRA adapters"))
    assert "None: it answers with its own weights" in section.inner_text()
    page.get_by_label("Adapter").fill("tiny/TinyLlama-GGUF:F16")  # a model, not an adapter
    page.get_by_role("button", name="Attach adapter").click()
    page.get_by_text("Downloading tiny/TinyLlama-GGUF:F16").wait_for()
    for bad in ("lots", "1e999"):
        page.get_by_label("Scale").fill(bad)
        page.get_by_label("Adapter").fill("tiny/TinyLlama-SQL-LoRA-GGUF")
        page.get_by_role("button", name="Attach adapter").click()
        page.get_by_role("alert").filter(has_text=f"scale must be a number, not '{bad}'").wait_for()

    page.get_by_label("Scale").fill("0.5")
    page.get_by_label("Adapter").fill("tiny/TinyLlama-SQL-LoRA-GGUF")
    page.get_by_role("button", name="Attach adapter").click()
    page.get_by_text("Downloading tiny/TinyLlama-SQL-LoRA-GGUF").wait_for()
    page.goto(f"{discover.url}/discover")
    done = page.locator("li.pull[data-state=done]", has_text="LoRA adapter tiny/TinyLlama-SQL-LoRA-GGUF for tiny-tuned")
    done.wait_for(timeout=30_000)
    failed = page.locator("li.pull[data-state=failed]", has_text="tiny/TinyLlama-GGUF:F16 for tiny-tuned")
    assert "is not a LoRA adapter" in failed.inner_text()
    done.get_by_role("link", name="tiny-tuned").click()
    page.wait_for_url("**/models/tiny-tuned")
    section = page.locator("section", has=page.get_by_role("heading", name="LoRA adapters"))
    assert "TinyLlama-SQL-LoRA-F32.gguf at scale 0.5" in section.inner_text()
    for shot in screenshot(browser, discover, "/models/tiny-tuned", "model-lora-attached"):
        assert shot.stat().st_size > 5_000

    page.get_by_role("button", name="Take the adapters off").click()
    page.get_by_text("The adapters are off").wait_for()
    assert discover.state.library.get("tiny-tuned").lora == []


def test_hub_errors_and_bad_repositories_are_shown(discover: LiveServer) -> None:
    with signed_in_client(discover) as client:
        missing = client.get("/discover/tiny/Nothing-Here")
        assert missing.status_code == 404 and 'role="alert"' in missing.text
        assert "no GGUF model file" in client.get("/discover/tiny/NoGGUF").text
        csrf = client.get("/discover").text.split('name="csrf" value="')[1].split('"')[0]
        bad = client.post("/discover/pulls", data={"spec": "", "csrf": csrf}, headers={"HX-Request": "true"})
        assert bad.status_code == 400 and 'role="alert"' in bad.text


def test_screenshots_of_discover(browser: Any, discover: LiveServer) -> None:
    for path, name in (("/discover?q=tiny", "discover"), ("/discover/tiny/TinyLlama-GGUF", "discover-repo")):
        for shot in screenshot(browser, discover, path, name):
            assert shot.stat().st_size > 5_000
