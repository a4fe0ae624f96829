"""A model's page in a real browser: its memory estimate here, its own settings changed, copying and removing it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from server.console.helpers import capture, screenshot, sign_in, signed_in_client
from server.helpers import LiveServer
from spark.library import Library
from spark.server.console.pages import _duration
from spark.types import SamplingParams


def test_the_page_shows_the_memory_estimate_with_its_arithmetic(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/models/tiny-chat")
    memory = page.locator("section", has=page.get_by_role("heading", name="Memory on this machine"))
    text = memory.inner_text()
    assert "fits" in text and "Weights" in text and "KV cache" in text and "Grammar sampler" in text
    assert "needs" in memory.locator(".arithmetic").inner_text()


def test_changing_a_models_settings_is_saved_and_a_bad_value_named(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/models/tiny-chat")
    page.get_by_label("System prompt").fill("You answer in French.")
    page.get_by_label("Context per slot").fill("256")
    page.get_by_label("Parallel slots").fill("2")
    page.get_by_label("Flash attention").select_option("on")
    page.get_by_label("Draft model").select_option("hostile")  # the same vocabulary
    page.get_by_role("button", name="Save settings").click()
    page.get_by_text("Saved.").wait_for()
    saved = console.state.library.get("tiny-chat").settings
    assert saved.system_prompt == "You answer in French." and saved.context_length == 256 and saved.parallel == 2
    assert saved.flash_attention == "on" and saved.draft_model == "hostile"
    page.reload()
    assert page.get_by_label("Context per slot").input_value() == "256"
    assert page.get_by_label("Flash attention").input_value() == "on"
    assert page.get_by_label("Draft model").input_value() == "hostile"
    memory = page.locator("section", has=page.get_by_role("heading", name="Memory on this machine"))
    assert "Draft model" in memory.inner_text()

    page.get_by_label("Draft model").select_option("smollm2-135m-instruct-q4_1")  # another vocabulary
    page.get_by_role("button", name="Save settings").click()
    page.get_by_role("alert").wait_for()
    assert "draft_model" in page.get_by_role("alert").inner_text()
    page.reload()

    page.get_by_label("KV cache type").select_option("q8_0")  # the tiny model's heads are too small for it
    page.get_by_role("button", name="Save settings").click()
    page.get_by_role("alert").wait_for()
    assert "kv_type" in page.get_by_role("alert").inner_text()
    page.reload()

    page.get_by_label("Parallel slots").fill("lots")
    page.get_by_role("button", name="Save settings").click()
    alert = page.get_by_role("alert")
    alert.wait_for()
    assert "parallel must be a whole number, not 'lots'" in alert.inner_text()  # no msgspec type names
    assert "`" not in alert.inner_text()
    # back to the server's settings: empty fields
    for label in ("System prompt", "Context per slot", "Parallel slots"):
        page.get_by_label(label).fill("")
    page.get_by_label("KV cache type").select_option("")
    page.get_by_label("Flash attention").select_option("")
    page.get_by_label("Draft model").select_option("")
    page.get_by_role("button", name="Save settings").click()
    page.get_by_text("Saved.").wait_for()
    saved = console.state.library.get("tiny-chat").settings
    assert saved.system_prompt is None and saved.context_length is None and saved.kv_type is None
    assert saved.flash_attention is None and saved.draft_model is None


def test_a_models_sampling_defaults_are_set_cleared_and_a_bad_value_named(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/models/tiny-chat")
    page.get_by_text("Sampling defaults").click()  # folded while the model has none
    assert page.get_by_label("Temperature").get_attribute("placeholder") == "0.8"  # Spark's default, shown
    page.get_by_label("Temperature").fill("0.3")
    page.get_by_label("Top-k").fill("20")
    page.get_by_label("Mirostat (0, 1, 2)").fill("2")
    page.get_by_label("Stop strings").fill("END\nUser:")
    page.get_by_role("button", name="Save settings").click()
    page.get_by_text("Saved.").wait_for()
    sampling = console.state.library.get("tiny-chat").settings.sampling
    assert (sampling.temperature, sampling.top_k, sampling.mirostat, sampling.stop) == (0.3, 20, 2, ["END", "User:"])
    page.reload()  # unfolded now, with the values
    assert page.get_by_label("Top-k").input_value() == "20"
    assert page.get_by_label("Stop strings").input_value() == "END\nUser:"

    page.get_by_label("Top-p").fill("lots")
    page.get_by_role("button", name="Save settings").click()
    page.get_by_role("alert").wait_for()
    assert "sampling.top_p must be a number, not 'lots'" in page.get_by_role("alert").inner_text()
    page.reload()

    page.get_by_label("Top-k").fill("")  # back to Spark's default; the others stay
    page.get_by_label("Stop strings").fill("")
    page.get_by_role("button", name="Save settings").click()
    page.get_by_text("Saved.").wait_for()
    sampling = console.state.library.get("tiny-chat").settings.sampling
    assert (sampling.temperature, sampling.top_k, sampling.mirostat, sampling.stop) == (0.3, None, 2, None)
    page.get_by_label("Temperature").fill("")
    page.get_by_label("Mirostat (0, 1, 2)").fill("")
    # the last save's "Saved." is still shown: wait for this save's answer, not for the words
    with page.expect_response(lambda r: r.url.endswith("/models/tiny-chat/settings")):
        page.get_by_role("button", name="Save settings").click()
    page.get_by_text("Saved.").wait_for()
    assert console.state.library.get("tiny-chat").settings.sampling == SamplingParams()


def test_removing_a_model_returns_to_the_library_without_it(page: Any, console: LiveServer, tiny_llama: Path) -> None:
    with Library(console.settings) as library:
        library.add_local(tiny_llama, model_id="throwaway")
    sign_in(page, console, "/models/throwaway")
    assert "stays where it is" in page.locator("section", has_text="Remove").last.inner_text()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Remove throwaway").click()
    page.wait_for_url(f"{console.url}/models")
    assert page.locator("tbody tr", has_text="throwaway").count() == 0
    assert tiny_llama.exists()  # a user's own file is kept


def test_a_copy_is_made_under_a_new_id_and_keeps_the_files_of_its_original(
    page: Any, console: LiveServer, tiny_llama: Path
) -> None:
    with Library(console.settings) as library:
        owned = Path(library.add_local(tiny_llama, model_id="original", copy=True).path)
    sign_in(page, console, "/models/original")
    page.get_by_label("New model id").fill("original")  # taken
    page.get_by_role("button", name="Copy original").click()
    page.get_by_role("alert").wait_for()
    assert "id" in page.get_by_role("alert").inner_text() and "original" in page.get_by_role("alert").inner_text()

    page.get_by_label("New model id").fill("gpt-4o-mini")
    page.get_by_role("button", name="Copy original").click()
    page.wait_for_url(f"{console.url}/models/gpt-4o-mini")
    assert "copy:original" in page.locator("dl.facts").first.inner_text()
    remove = page.locator("section", has_text="Remove").last
    assert "Its files stay: original uses them" in remove.inner_text()
    with Library(console.settings) as library:
        assert library.get("gpt-4o-mini").path == library.get("original").path

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Remove gpt-4o-mini").click()
    page.wait_for_url(f"{console.url}/models")
    assert page.locator("tbody tr", has_text="gpt-4o-mini").count() == 0
    assert page.locator("tbody tr", has_text="original").count() == 1 and owned.exists()


def test_removing_a_model_that_is_gone_says_so(console: LiveServer) -> None:
    with signed_in_client(console) as client:
        csrf = client.get("/models").text.split('name="csrf" value="')[1].split('"')[0]
        r = client.post("/models/no-such-model/remove", data={"csrf": csrf})
        assert r.status_code == 404 and "no-such-model" in r.text


def test_screenshots_of_a_model_page_with_its_forms(browser: Any, console: LiveServer, tiny_llama: Path) -> None:
    for shot in screenshot(browser, console, "/models/tiny-chat", "model-tiny"):
        assert shot.stat().st_size > 5_000
    with Library(console.settings) as library:  # one with sampling defaults: the section unfolded
        entry = library.add_local(tiny_llama, model_id="tiny-sampled")
        sampling = SamplingParams(temperature=0.3, top_k=20, mirostat=2, stop=["END"])
        library.update_settings(entry.id, msgspec.structs.replace(entry.settings, sampling=sampling))
    for shot in screenshot(browser, console, "/models/tiny-sampled", "model-sampling"):
        assert shot.stat().st_size > 5_000


def test_a_models_lora_adapters_are_listed_with_their_memory(
    browser: Any, page: Any, console: LiveServer, tiny_llama: Path, tiny_lora: Path
) -> None:
    with Library(console.settings) as library:
        library.add_local(tiny_llama, model_id="tiny-tuned")
        library.attach("tiny-tuned", tiny_lora, scale=0.75)
    sign_in(page, console, "/models/tiny-tuned")
    files = page.locator("section", has=page.get_by_role("heading", name="Files")).inner_text()
    assert f"{tiny_lora} (LoRA adapter)" in files
    adapters = page.locator("section", has=page.get_by_role("heading", name="LoRA adapters")).inner_text()
    assert f"{tiny_lora} at scale 0.75" in adapters
    memory = page.locator("section", has=page.get_by_role("heading", name="Memory on this machine")).inner_text()
    assert "LoRA adapters" in memory
    for shot in screenshot(browser, console, "/models/tiny-tuned", "model-lora"):
        assert shot.stat().st_size > 5_000


def _in_view(page: Any, locator: Any) -> bool:
    """Whether the element is wholly inside the window as scrolled now."""
    box = locator.bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= page.viewport_size["height"]


def test_a_refused_save_is_shown_by_the_field_and_keeps_what_was_typed(
    page: Any, console: LiveServer, tiny_llama: Path
) -> None:
    with Library(console.settings) as library:
        library.add_local(tiny_llama, model_id="tiny-typed")
    sign_in(page, console, "/models/tiny-typed")
    page.get_by_label("System prompt").fill("Be brief.")
    page.get_by_text("Sampling defaults").click()
    page.get_by_label("Top-k").fill("20")
    page.get_by_label("Mirostat (0, 1, 2)").fill("7")
    page.get_by_role("button", name="Save settings").click()
    alert = page.get_by_role("alert")
    alert.wait_for()
    assert "sampling.mirostat must be between 0 and 2" in alert.inner_text()
    assert page.evaluate("window.scrollY") > 500  # the form's end, far down the page
    mirostat = page.get_by_label("Mirostat (0, 1, 2)")
    assert _in_view(page, alert) and _in_view(page, mirostat)  # by the field, where the person is
    assert mirostat.input_value() == "7" and mirostat.get_attribute("aria-invalid") == "true"
    assert page.evaluate("document.activeElement.id") == "ms-mirostat"  # focused, to be fixed
    # nothing was saved, and nothing typed was lost
    assert page.get_by_label("System prompt").input_value() == "Be brief."
    assert page.get_by_label("Top-k").input_value() == "20"
    assert console.state.library.get("tiny-typed").settings.system_prompt is None
    capture(page, "model-refused-light.png")  # what the person sees: the window

    mirostat.fill("2")
    page.get_by_role("button", name="Save settings").click()
    saved = page.locator("form.model-settings [role=status]")
    saved.wait_for()
    assert saved.inner_text() == "Saved." and _in_view(page, saved)  # by the Save button
    capture(page, "model-saved-light.png")
    assert page.get_by_role("alert").count() == 0 and page.get_by_label("Mirostat (0, 1, 2)").input_value() == "2"
    settings = console.state.library.get("tiny-typed").settings
    assert settings.system_prompt == "Be brief." and (settings.sampling.top_k, settings.sampling.mirostat) == (20, 2)

    page.get_by_label("Keep loaded when idle").fill("forever-ish")  # an error with no field of the sampling
    page.get_by_role("button", name="Save settings").click()
    page.get_by_role("alert").wait_for()
    assert page.locator("details.sampling").get_attribute("open") is not None  # still unfolded, with its values
    assert page.get_by_label("Keep loaded when idle").input_value() == "forever-ish"
    assert _in_view(page, page.get_by_role("alert"))


def test_a_refused_copy_keeps_the_id_typed_and_says_why_by_its_button(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/models/tiny-chat")
    page.get_by_label("New model id").fill("hostile")  # taken
    page.get_by_role("button", name="Copy tiny-chat").click()
    alert = page.get_by_role("alert")
    alert.wait_for()
    assert "hostile" in alert.inner_text() and _in_view(page, alert)
    assert page.get_by_label("New model id").input_value() == "hostile"


def _csrf(client: Any) -> str:
    return str(client.get("/models").text.split('name="csrf" value="')[1].split('"')[0])


def test_a_negative_number_of_tokens_or_slots_is_refused_with_its_range(console: LiveServer) -> None:
    with signed_in_client(console) as client:
        csrf = _csrf(client)
        r = client.post("/models/tiny-chat/settings", data={"csrf": csrf, "context_length": "-5"})
        assert r.status_code == 400 and "context_length must be a positive number of tokens, not -5" in r.text
        assert 'value="-5"' in r.text  # kept, to be fixed
        r = client.post("/models/tiny-chat/settings", data={"csrf": csrf, "parallel": "-2"})
        assert r.status_code == 400 and "parallel must be between 1 and 256, not -2" in r.text
        assert "Expected" not in r.text
    assert console.state.library.get("tiny-chat").settings.context_length is None


@pytest.mark.parametrize(
    ("typed", "shown"),
    [
        ("5m", "5m"),
        ("1h", "1h"),
        ("90", "1m30s"),
        ("1h30m", "1h30m"),
        ("2d", "2d"),
        ("-1", "-1"),
        ("0", "0"),
        ("45s", "45"),
    ],
)
def test_keep_alive_comes_back_as_a_duration(console: LiveServer, tiny_llama: Path, typed: str, shown: str) -> None:
    with Library(console.settings) as library:
        if not library.exists("tiny-kept"):
            library.add_local(tiny_llama, model_id="tiny-kept")
    with signed_in_client(console) as client:
        r = client.post("/models/tiny-kept/settings", data={"csrf": _csrf(client), "keep_alive": typed})
        assert r.status_code == 200, r.text
        page = client.get("/models/tiny-kept").text
        assert f'name="keep_alive" value="{shown}"' in page


def test_keep_alive_seconds_as_people_write_them() -> None:
    assert [_duration(s) for s in (None, 300.0, 3600.0, -1.0, 0.0, 1.5, 90.0, 86400.0 + 61, -600.0)] == [
        "",
        "5m",
        "1h",
        "-1",
        "0",
        "1.5",
        "1m30s",
        "1d1m1s",
        "-10m",
    ]
