"""The playground in a real browser: a streamed chat over /v1 with the console's key, its request in the log."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import tiny_gguf
from server.console.helpers import capture, screenshot, sign_in, signed_in_client
from server.helpers import LiveServer, add_slow_model
from spark.library import Library
from spark.server.console.playground import CONSOLE_KEY_NAME, ConsoleKey
from spark.store.keys import KeyTable
from tiny_pdf import make_pdf

SMOLLM2 = "smollm2-135m-instruct-q4_1"
HOSTILE = "<script>window.pwned = 1</script>"

# counts every change of the answer's text, to tell a streamed answer from one that arrives whole
WATCH_ANSWER = """() => {
  window.answerChanges = 0;
  new MutationObserver(() => { window.answerChanges += 1; })
    .observe(document.getElementById("pg-log"), {subtree: true, characterData: true, childList: true});
}"""


@pytest.fixture(scope="module", autouse=True)
def vision_model(console: LiveServer, tiny_llama: Path, tiny_mmproj: Path) -> None:
    """A model with a vision projector in the console's library."""
    with Library(console.settings) as library:
        if "tiny-vision" not in {m.id for m in library.list()}:
            library.add_local(tiny_llama, model_id="tiny-vision", mmproj=tiny_mmproj)


@pytest.fixture(scope="module")
def slow_model(console: LiveServer, slow_llama: Path) -> Iterator[str]:
    """A model that writes until stopped, one answer at a time (one slot): a stream surely still running,
    and a next answer that comes only once the earlier one was cancelled."""
    with Library(console.settings) as library:
        known = {m.id for m in library.list()}
        model = "slow-llama" if "slow-llama" in known else add_slow_model(library, slow_llama)
    yield model
    console.unload(model)


def _sent(page: Any) -> list[dict[str, Any]]:
    """The bodies the page posts to /playground/chat, in order, as they leave the browser."""
    bodies: list[dict[str, Any]] = []
    page.on("request", lambda r: bodies.append(r.post_data_json) if r.url.endswith("/playground/chat") else None)
    return bodies


def _start_long(page: Any, console: LiveServer, model: str, prompt: str) -> list[dict[str, Any]]:
    """Sign in to the Playground, send `prompt` to `model` for a long answer and wait until some of it
    has arrived (it is still being written); the chat bodies the page sends from then on."""
    sent = _sent(page)
    sign_in(page, console, "/playground")
    page.get_by_label("Model", exact=True).select_option(model)
    page.get_by_label("Max tokens").fill("4000")
    _start(page, prompt)
    return sent


def _start(page: Any, prompt: str) -> None:
    """Send `prompt` and wait until some of its answer has arrived, several tokens (it is still being
    written): a stop after one token has no speed to show, and on a busy machine the click can come
    before the second."""
    page.get_by_label("Message").fill(prompt)
    page.get_by_role("button", name="Send").click()
    page.wait_for_function(
        "() => { const a = document.querySelector('.turn.answer[aria-busy] .text');"
        " return !!a && a.textContent.length > 40; }",
        timeout=60_000,
    )


def _stats(page: Any) -> list[str]:
    return [page.locator(f"#pg-{name}").inner_text() for name in ("ttft", "speed", "tokens", "cached")]


def _chat(page: Any, prompt: str) -> str:
    """Send `prompt` and wait for the answer; returns the answer's text."""
    answers = page.locator(".turn.answer").count()  # a new one must come: an earlier request's link proves nothing
    page.get_by_label("Message").fill(prompt)
    page.get_by_role("button", name="Send").click()
    page.wait_for_function(
        f"() => document.querySelectorAll('.turn.answer').length > {answers} && "
        "document.getElementById('pg-submit').disabled === false && "
        "document.getElementById('pg-request-link') !== null",
        timeout=120_000,
    )
    page.wait_for_function("() => !document.querySelector('.turn.answer[aria-busy]')", timeout=120_000)
    assert page.locator("#pg-error").is_hidden(), page.locator("#pg-error").inner_text()
    return str(page.locator(".turn.answer .text").last.inner_text())


@pytest.mark.slow  # SmolLM2 answers
def test_a_chat_streams_token_by_token_and_links_to_its_request(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/playground")
    page.get_by_label("Model", exact=True).select_option(SMOLLM2)
    page.get_by_label("System prompt").fill("You are a geography teacher.")
    page.get_by_label("Temperature").fill("0")
    page.get_by_label("Max tokens").fill("24")
    page.evaluate(WATCH_ANSWER)
    answer = _chat(page, "What is the capital of France?")
    assert len(answer) > 10
    assert page.evaluate("window.answerChanges") > 5  # the text grew piece by piece, not in one go
    assert page.locator("#pg-ttft").inner_text().endswith(" ms")
    assert "tokens/s" in page.locator("#pg-speed").inner_text()
    assert page.locator("#pg-tokens").inner_text().endswith(" out")
    assert page.locator("#pg-cached").inner_text().isdigit()

    # the next turn carries the conversation, so the model's cache serves its start
    second = _chat(page, "And of Italy?")
    assert int(page.locator("#pg-cached").inner_text()) > 0
    assert page.locator(".turn.question").count() == 2

    page.locator("#pg-request-link").click()
    page.wait_for_url(f"{console.url}/requests/**")
    facts = page.locator("dl.facts").inner_text()
    assert f"Key\n{CONSOLE_KEY_NAME}" in facts and SMOLLM2 in facts and "(streamed)" in facts
    steps = page.locator("table.timeline tbody tr td:first-child").all_inner_texts()
    assert steps[0] == "received" and steps[-1] == "finished" and "first token" in steps
    assert page.locator("table.timeline svg.bar rect").count() == len(steps)
    turns = page.locator(".content .turn").all_inner_texts()
    assert any("geography teacher" in t for t in turns) and any("And of Italy?" in t for t in turns)
    assert page.locator("#output").inner_text() == second  # what the page showed is what was logged


@pytest.mark.slow  # SmolLM2 answers
def test_a_script_in_the_prompt_or_the_output_is_shown_not_run(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/playground")
    page.get_by_label("Model", exact=True).select_option(SMOLLM2)
    page.get_by_label("Max tokens").fill("40")
    page.get_by_label("JSON schema mode").check()
    # the grammar makes the model write the script: the output is hostile for sure
    schema = {"type": "object", "properties": {"answer": {"enum": [HOSTILE]}}, "required": ["answer"]}
    page.get_by_label("JSON schema", exact=True).fill(json.dumps(schema))
    answer = _chat(page, f"Say {HOSTILE}")
    assert json.loads(answer) == {"answer": HOSTILE}
    assert HOSTILE in page.locator(".turn.question .text").last.inner_text()
    assert page.evaluate("typeof window.pwned") == "undefined"
    page.locator("#pg-request-link").click()
    page.wait_for_url(f"{console.url}/requests/**")
    assert HOSTILE in page.locator("#output").inner_text()
    assert f"Say {HOSTILE}" in page.locator(".content").inner_text()
    assert page.evaluate("typeof window.pwned") == "undefined"


def test_errors_are_shown_in_the_page(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/playground")
    page.get_by_label("JSON schema mode").check()
    page.get_by_label("JSON schema", exact=True).fill("{not json")
    page.get_by_label("Message").fill("hello")
    page.get_by_role("button", name="Send").click()
    assert "not valid JSON" in page.get_by_role("alert").inner_text()
    page.get_by_label("JSON schema mode").uncheck()
    page.get_by_label("Temperature").fill("7")  # the /v1 route refuses it, naming the parameter
    page.get_by_role("button", name="Send").click()
    page.wait_for_function("() => document.getElementById('pg-error').textContent.includes('temperature')")
    assert page.locator(".turn.answer").count() == 0


def test_a_stopped_answer_settles_the_stats_and_stays_in_the_conversation(
    page: Any, console: LiveServer, slow_model: str
) -> None:
    sent = _start_long(page, console, slow_model, "Tell me a long story.")
    page.get_by_role("button", name="Stop").click()
    page.wait_for_function("() => !document.querySelector('.turn.answer[aria-busy]')")
    assert page.locator("#pg-error").is_hidden()  # a stop is no error
    stopped = page.locator(".turn.answer.stopped")
    note = stopped.locator(".note").inner_text()
    assert note.startswith("Stopped after ") and note.split()[2].isdigit() and int(note.split()[2]) > 0, note
    partial = page.locator(".turn.answer .text").last.text_content()
    ttft, speed, tokens, cached = _stats(page)
    # what came is counted: the tokens received, their speed; the prompt's tokens are not known here
    assert ttft.endswith(" ms") and speed.endswith(" tokens/s") and cached == "–"
    assert tokens == f"{note.split()[2]} out"
    assert page.locator("#pg-request-link").count() == 1
    assert page.locator(".turn.left-out").count() == 0  # the stopped turn is part of the chat
    capture(page, "playground-just-stopped-light.png", full_page=True)

    # the next message carries the stopped turn as the page shows it; it is answered at once, as the
    # stopped answer was cancelled in the model's one slot
    page.get_by_label("Max tokens").fill("2")
    _chat(page, "And then?")
    assert sent[-1]["messages"] == [
        {"role": "user", "content": "Tell me a long story."},
        {"role": "assistant", "content": partial},
        {"role": "user", "content": "And then?"},
    ]
    assert _stats(page)[1] != "…" and _stats(page)[3].isdigit()
    capture(page, "playground-stopped-light.png", full_page=True)


def test_a_failed_turn_is_marked_and_left_out_of_the_conversation(page: Any, console: LiveServer) -> None:
    sent = _sent(page)
    sign_in(page, console, "/playground")
    page.get_by_label("Model", exact=True).select_option("tiny-chat")
    page.get_by_label("Max tokens").fill("2")
    page.get_by_label("Temperature").fill("7")  # the /v1 route refuses it
    page.get_by_label("Message").fill("Too hot")
    page.get_by_role("button", name="Send").click()
    page.wait_for_function("() => document.getElementById('pg-error').textContent.includes('temperature')")
    assert _stats(page) == ["–", "–", "–", "–"]
    failed = page.locator(".turn.question.left-out")
    assert failed.count() == 1 and "Too hot" in failed.inner_text()
    assert "Failed: not sent with the next message." in failed.inner_text()

    # stopped before its answer began: marked and left out in the same way
    def hold(route: Any) -> None:  # the answer never comes (a bound builtin is no handler for Playwright)
        held.append(route)

    held: list[Any] = []
    page.route("**/playground/chat", hold)
    page.get_by_label("Temperature").fill("")
    page.get_by_label("Message").fill("Never answered")
    page.get_by_role("button", name="Send").click()
    page.wait_for_function("() => document.getElementById('pg-stop').disabled === false")
    page.get_by_role("button", name="Stop").click()
    page.wait_for_function("() => document.getElementById('pg-submit').disabled === false")
    assert page.locator("#pg-error").is_hidden()
    assert _stats(page) == ["–", "–", "–", "–"]
    assert "Stopped before the answer began" in page.locator(".turn.question.left-out").last.inner_text()
    assert page.locator(".turn.answer").count() == 0
    page.unroute("**/playground/chat")

    _chat(page, "Hello?")
    assert sent[-1]["messages"] == [{"role": "user", "content": "Hello?"}]  # only what the chat holds
    assert page.locator(".turn.question").count() == 3 and page.locator(".turn.left-out").count() == 2
    capture(page, "playground-left-out-light.png", full_page=True)


def test_new_chat_or_another_model_mid_answer_stops_it_and_starts_empty(
    page: Any, console: LiveServer, slow_model: str
) -> None:
    sent = _start_long(page, console, slow_model, "Write a poem about the sea.")
    page.get_by_role("button", name="New chat").click()
    assert page.locator(".turn").count() == 0 and page.locator("#pg-submit").is_enabled()
    assert page.locator("#pg-stop").is_disabled() and _stats(page) == ["–", "–", "–", "–"]
    page.wait_for_timeout(300)  # the old answer's end has come by now: it changes nothing in the new chat
    assert page.locator("#pg-error").is_hidden() and page.locator(".turn").count() == 0
    page.get_by_label("Max tokens").fill("2")
    _chat(page, "What did I just ask you?")  # the one slot is free: the old answer was cancelled
    assert sent[-1]["messages"] == [{"role": "user", "content": "What did I just ask you?"}]

    page.get_by_label("Max tokens").fill("4000")
    _start(page, "Write a poem about the sea.")
    page.get_by_label("Model", exact=True).select_option("tiny-chat")  # starts a new chat too
    page.get_by_label("Max tokens").fill("2")
    _chat(page, "Hello?")
    assert sent[-1]["model"] == "tiny-chat"
    assert sent[-1]["messages"] == [{"role": "user", "content": "Hello?"}]
    assert page.locator(".turn").count() == 2 and page.locator("#pg-error").is_hidden()


def test_an_image_goes_with_the_message_to_a_model_with_a_projector(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/playground")
    assert page.locator("#pg-image-box").is_hidden() or page.get_by_label("Model", exact=True).input_value() == (
        "tiny-vision"
    )
    page.get_by_label("Model", exact=True).select_option("tiny-vision")
    image = page.get_by_label("Image (this model has a vision projector)")
    assert image.is_visible()
    image.set_input_files(files=[{"name": "cat.png", "mimeType": "image/png", "buffer": tiny_gguf.tiny_png()}])
    page.get_by_label("Max tokens").fill("3")
    _chat(page, "What is in the picture?")
    page.locator("#pg-request-link").click()
    page.wait_for_url(f"{console.url}/requests/**")
    assert "What is in the picture?\n[image]" in page.locator(".content .turn").first.inner_text()
    assert "tiny-vision" in page.locator("dl.facts").inner_text()
    page.goto(f"{console.url}/playground")
    page.get_by_label("Model", exact=True).select_option("tiny-chat")
    assert page.locator("#pg-image-box").is_hidden()


@pytest.mark.slow  # SmolLM2 answers
def test_a_document_goes_with_the_message_and_stays_in_the_conversation(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/playground")
    page.get_by_label("Model", exact=True).select_option(SMOLLM2)
    page.get_by_label("Max tokens").fill("30")
    document = page.get_by_label("Document (PDF or text file; the model reads its text)")
    scanned = {"name": "scan.pdf", "mimeType": "application/pdf", "buffer": make_pdf("")}
    document.set_input_files(files=[scanned])
    page.get_by_label("Message").fill("What does it say?")
    page.get_by_role("button", name="Send").click()
    page.wait_for_function("() => document.getElementById('pg-error').textContent.includes('no text layer')")
    assert document.evaluate("input => input.files.length") == 1  # kept, to send again or replace

    notes = make_pdf("Team meeting notes", "The next meeting is in Lisbon on Friday.")
    document.set_input_files(files=[{"name": "notes.pdf", "mimeType": "application/pdf", "buffer": notes}])
    assert "Lisbon" in _chat(page, "Where is the next meeting?")
    assert page.locator(".turn.question .text").last.inner_text().endswith("[notes.pdf]")
    assert document.evaluate("input => input.files.length") == 0  # sent once, held by the conversation
    page.locator("#pg-request-link").click()
    page.wait_for_url(f"{console.url}/requests/**")
    asked = page.locator(".content .turn").all_inner_texts()
    assert any("notes.pdf" in t and "Lisbon on Friday" in t and "Where is the next meeting?" in t for t in asked)


def test_the_chat_route_needs_a_session_and_the_csrf_token(console: LiveServer) -> None:
    body = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    with httpx.Client(base_url=console.url, timeout=30) as anonymous:
        r = anonymous.post("/playground/chat", json=body)
        assert r.status_code == 401 and "Sign in to the console" in r.json()["error"]["message"]
        assert anonymous.get("/playground").status_code == 303
        # an API key is no console session either
        r = anonymous.post("/playground/chat", json=body, headers={"authorization": f"Bearer {console.key}"})
        assert r.status_code == 401
    with signed_in_client(console) as client:
        r = client.post("/playground/chat", json=body, headers={"x-csrf-token": "forged"})
        assert r.status_code == 403 and r.json()["error"]["param"] == "x-csrf-token"
        assert client.get("/playground/chat").status_code == 405


def test_the_console_key_stays_on_the_server_and_is_remade_when_revoked(console: LiveServer) -> None:
    with signed_in_client(console) as client:
        page = client.get("/playground").text
        csrf = page.split('data-csrf="')[1].split('"')[0]
        body = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        first = client.post("/playground/chat", json=body, headers={"x-csrf-token": csrf})
        assert first.status_code == 200 and first.json()["object"] == "chat.completion"
        holder: ConsoleKey = console.app.state.console_key
        secret = holder.secret()
        keys = KeyTable(console.state.db)
        assert CONSOLE_KEY_NAME in {k.name for k in keys.list()}
        for path in ("/playground", "/requests", f"/requests/{first.headers['x-request-id']}", "/activity"):
            assert secret not in client.get(path).text, path
        assert secret not in first.text and "authorization" not in first.headers
        keys.remove(CONSOLE_KEY_NAME)  # revoked from the Keys page or `spark keys revoke console`
        again = client.post("/playground/chat", json=body, headers={"x-csrf-token": csrf})
        assert again.status_code == 200 and holder.secret() != secret
        logged = client.get(f"/requests/{again.headers['x-request-id']}")
        assert logged.status_code == 200 and f"<dd>{CONSOLE_KEY_NAME} (" in logged.text
        # the answer carries one request id, the one of the logged request
        assert len(again.headers.get_list("x-request-id")) == 1


def test_screenshots_of_the_playground(browser: Any, console: LiveServer) -> None:
    for shot in screenshot(browser, console, "/playground", "playground"):
        assert shot.stat().st_size > 5_000


@pytest.mark.slow  # SmolLM2 answers
def test_screenshot_of_a_chat(console: LiveServer, page: Any) -> None:
    sign_in(page, console, "/playground")
    page.get_by_label("Model", exact=True).select_option(SMOLLM2)
    page.get_by_label("Temperature").fill("0")
    page.get_by_label("Max tokens").fill("40")
    _chat(page, "Write a haiku about the sea.")
    capture(page, "playground-chat-light.png", full_page=True)


# where the composer's parts and the conversation are, and whether anything scrolls that must not
LAYOUT = """() => {
  const box = (id) => { const r = document.getElementById(id).getBoundingClientRect();
    return {x: r.x, y: r.y, width: r.width, height: r.height}; };
  const log = document.getElementById("pg-log");
  return {stop: box("pg-stop"), send: box("pg-submit"), clear: box("pg-clear"), prompt: box("pg-prompt"),
    log: box("pg-log"), fromBottom: log.scrollHeight - log.scrollTop - log.clientHeight,
    overflows: log.scrollHeight > log.clientHeight, text: document.querySelector(".turn.answer .text").textContent.length,
    pageWidth: document.scrollingElement.scrollWidth, pageHeight: document.scrollingElement.scrollHeight};
}"""


@pytest.mark.parametrize(
    ("device", "viewport"), [("desktop", {"width": 1400, "height": 900}), ("phone", {"width": 390, "height": 844})]
)
def test_the_composer_stays_put_while_an_answer_streams_and_stop_takes_a_real_click(
    browser: Any, console: LiveServer, slow_model: str, device: str, viewport: dict[str, int]
) -> None:
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    # the tiny model writes faster than a person reads: the answer comes to the browser at 40 kB/s
    # (about 200 tokens a second), so that it is still coming when the test clicks Stop
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 0, "downloadThroughput": 40_000, "uploadThroughput": -1},
    )
    sign_in(page, console, "/playground")
    if device == "phone":  # the settings open over the conversation, from a button by Send
        assert page.locator("#chat-form").is_hidden()
        page.get_by_role("button", name="Settings").click()
    page.get_by_label("Model", exact=True).select_option(slow_model)
    page.get_by_label("Max tokens").fill("16000")
    if device == "phone":
        capture(page, "playground-settings-phone-light.png")
        page.get_by_role("button", name="Settings").click()
        assert page.locator("#chat-form").is_hidden()
    before = page.evaluate(LAYOUT.replace('document.querySelector(".turn.answer .text").textContent.length', "0"))
    _start(page, "Tell me a very long story.")
    page.wait_for_function(
        "() => { const l = document.getElementById('pg-log'); return l.scrollHeight > l.clientHeight; }"
    )
    samples = []
    for _ in range(6):
        samples.append(page.evaluate(LAYOUT))
        page.wait_for_timeout(250)
    assert samples[-1]["text"] > samples[0]["text"]  # the answer grew all along
    for sample in samples:
        for part in ("stop", "send", "clear", "prompt"):
            assert sample[part] == before[part], (part, before[part], sample[part])  # not a pixel moved
        assert sample["log"] == before["log"]  # the conversation scrolls inside its own box
        assert sample["fromBottom"] < 30, sample  # which follows the newest text
        assert sample["pageWidth"] <= viewport["width"] and sample["pageHeight"] <= viewport["height"], sample
    stop = samples[-1]["stop"]
    assert stop["y"] + stop["height"] <= viewport["height"]  # on screen, at the bottom of the window
    assert stop["y"] > viewport["height"] * 0.6

    # scrolled up to read, the conversation stays where the reader is while the answer goes on
    log = samples[-1]["log"]
    page.mouse.move(log["x"] + log["width"] / 2, log["y"] + log["height"] / 2)
    page.mouse.wheel(0, -200)
    page.wait_for_function(
        "() => { const l = document.getElementById('pg-log');"
        " return l.scrollHeight - l.scrollTop - l.clientHeight > 150; }"
    )
    held = page.evaluate("() => document.getElementById('pg-log').scrollTop")
    page.wait_for_timeout(500)
    assert page.evaluate("() => document.getElementById('pg-log').scrollTop") == held

    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        capture(page, f"playground-streaming-{device}-{scheme}.png")

    # a real click, where the button is on screen, stops the answer
    page.mouse.click(stop["x"] + stop["width"] / 2, stop["y"] + stop["height"] / 2)
    page.wait_for_function("() => !document.querySelector('.turn.answer[aria-busy]')", timeout=10_000)
    ended = page.evaluate(
        "() => [document.getElementById('pg-error').textContent, document.getElementById('pg-log').innerText.slice(-300), document.querySelector('.turn.answer').className]"
    )
    assert page.locator(".turn.answer.stopped").count() == 1, ended
    note = page.locator(".turn.answer.stopped .note").inner_text()
    assert note.startswith("Stopped after "), note
    assert page.locator("#pg-stop").is_disabled() and page.locator("#pg-submit").is_enabled()
    assert page.evaluate(LAYOUT)["stop"] == before["stop"]
    context.close()
