"""The TUI against a real `spark serve` on a real port: every screen, a request live and in the log,
its timeline, a pull from the fake Hub, a key created and revoked, a model loaded and unloaded,
a batch listed and cancelled, a file listed and deleted."""

from __future__ import annotations

import asyncio
import threading
from contextlib import suppress
from typing import Any

import anthropic
import openai
import pytest
from textual.widgets import Input

from spark.tui.app import SparkApp
from spark.tui.screens import files
from spark.tui.screens.batches import NONE_YET
from spark.tui.screens.dialogs import AskDialog, ConfirmDialog, SecretDialog
from spark.tui.screens.nodes import STANDALONE
from spark.tui.screens.request import RequestView
from spark.tui.screens.requests import LIVE
from spark.tui.widgets import StatusLine
from tui.helpers import Served, app_for, cells, connected, keys, shown, table, until

pytestmark = pytest.mark.anyio


def refused(app: SparkApp) -> str:
    """Why the dialog on screen refused what was typed ("" before it has)."""
    if not isinstance(app.screen, AskDialog):
        return ""
    return shown(app, "#problem").strip()


async def test_every_screen_shows_the_server(served: Served) -> None:
    app = app_for(served.live.url)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: connected(app), "the first answer")
        assert "Spark" in shown(app, "#status")
        await pilot.press("3")
        await until(pilot, lambda: served.chat in keys(app, "models"), "the library")
        await pilot.press("4")
        await until(pilot, lambda: "tests" in keys(app, "keys"), "the server's key")
        await pilot.press("5")
        await until(pilot, lambda: STANDALONE in shown(app, "#empty"), "standalone")
        await pilot.press("tab")
        assert app.current_mode == "batches"
        await pilot.press("tab")
        assert app.current_mode == "files"
        await pilot.press("tab")
        assert app.current_mode == "overview"
        await pilot.press("shift+tab", "shift+tab", "shift+tab", "shift+tab")
        assert app.current_mode == "keys"
        await pilot.press("question_mark")
        assert "New key" in shown(app, "#keys-help")  # the help lists this screen's keys
        await pilot.press("escape", "q")
    assert app.return_code == 0


@pytest.mark.slow  # the slow model and the chat model: two runners
async def test_a_request_runs_live_then_opens_with_its_timeline(served: Served) -> None:
    app = app_for(served.live.url)
    stop = threading.Event()

    def long_stream() -> None:
        body = {
            "model": served.slow,
            "messages": [{"role": "user", "content": "go on"}],
            "max_tokens": 12000,
            "stream": True,
        }
        with served.live.http() as client, client.stream("POST", "/v1/chat/completions", json=body) as response:
            for _ in response.iter_lines():
                if stop.is_set():
                    return  # the client goes away: the server cancels it

    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        await until(pilot, lambda: connected(app), "the first answer")
        streaming = threading.Thread(target=long_stream)
        streaming.start()
        try:
            await until(pilot, lambda: any(k.startswith(LIVE) for k in keys(app, "requests")), "the live row")
            live_key = next(k for k in keys(app, "requests") if k.startswith(LIVE))
            assert "▶ live" in cells(app, "requests", live_key)
        finally:
            stop.set()
            streaming.join(30)
        await until(pilot, lambda: not any(k.startswith(LIVE) for k in keys(app, "requests")), "the end")

        with served.live.http() as client:
            answer = client.post(
                "/v1/chat/completions",
                json={"model": served.chat, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
            )
        assert answer.status_code == 200
        # the events stream can show the answered request live for a moment after its answer (a row
        # that Enter does not open): wait for both in the log and none live
        await until(
            pilot,
            lambda: len(keys(app, "requests")) >= 2 and not any(k.startswith(LIVE) for k in keys(app, "requests")),
            "both requests in the log",
        )
        rows = keys(app, "requests")
        assert cells(app, "requests", rows[0])[1] == served.chat  # newest on top
        assert cells(app, "requests", rows[1])[1] == served.slow
        requests = table(app, "requests")
        requests.focus()  # takes effect on a later turn of the app: wait for it, as a user would
        await until(pilot, lambda: app.focused is requests, "the table to take the focus")
        requests.move_cursor(row=0)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RequestView) and app.screen.record is not None, "a timeline")
        page = shown(app, "#detail")
        assert "finished" in page and "first token" in page and "user: hi" in page
        await pilot.press("escape")
        assert app.screen.MODE == "requests" and not isinstance(app.screen, RequestView)


@pytest.mark.slow  # a model pulled and loaded beside the others
async def test_pull_from_the_hub_load_unload_and_remove(served: Served) -> None:
    app = app_for(served.live.url)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        await until(pilot, lambda: served.chat in keys(app, "models"), "the library")
        await pilot.press("p")
        await pilot.press(*"tiny/TinyLlama-GGUF:Q8_0", "enter")
        await until(pilot, lambda: "tinyllama-q8_0" in keys(app, "models"), "the pulled model")
        # the library can list the model a refresh before its job reads "done"
        await until(pilot, lambda: app.screen.jobs[0].state == "done", "the pull's end")
        job = app.screen.jobs[0]
        assert job.bytes_done == job.bytes_total
        await until(pilot, lambda: "100%" in " ".join(cells(app, "pulls", job.id)), "the bar at 100 %")

        models = table(app, "models")
        models.move_cursor(row=keys(app, "models").index("tinyllama-q8_0"))
        await pilot.press("l")
        # the load's own answer: the table may say "loaded" a refresh before the load has ended
        await until(pilot, lambda: any("is loaded" in n.message for n in app._notifications), "the load", 60)
        await until(pilot, lambda: "loaded" in " ".join(cells(app, "models", "tinyllama-q8_0")), "the table")
        assert any(r.model == "tinyllama-q8_0" for r in served.live.runners())
        await pilot.press("u")
        await until(pilot, lambda: "loaded" not in " ".join(cells(app, "models", "tinyllama-q8_0")), "the unload")
        assert not any(r.model == "tinyllama-q8_0" for r in served.live.runners())

        await pilot.press("y", *served.chat, "enter")  # an id taken: said in the dialog, which stays
        await until(pilot, lambda: refused(app), "the error")
        assert "id" in refused(app) and served.chat in refused(app)
        await pilot.press(*["backspace"] * len(served.chat), *"tiny-copy", "enter")  # put right
        await until(pilot, lambda: not isinstance(app.screen, AskDialog), "the copy to be made")
        await until(pilot, lambda: "tiny-copy" in keys(app, "models"), "the copy")
        assert served.live.state.library.get("tiny-copy").path == served.live.state.library.get("tinyllama-q8_0").path
        models.move_cursor(row=keys(app, "models").index("tinyllama-q8_0"))
        await pilot.press("d")
        await pilot.press("y")
        await until(pilot, lambda: "tinyllama-q8_0" not in keys(app, "models"), "the removal")
        assert any(n.message == "Removed tinyllama-q8_0." for n in app._notifications)  # the copy keeps the files
        models.move_cursor(row=keys(app, "models").index("tiny-copy"))
        await pilot.press("d")
        await pilot.press("y")
        await until(pilot, lambda: "tiny-copy" not in keys(app, "models"), "the copy's removal")
        assert any(n.message == "Removed tiny-copy and its files." for n in app._notifications)


async def test_a_lora_adapter_from_the_hub_is_attached_and_taken_off(served: Served) -> None:
    app = app_for(served.live.url)
    library = served.live.state.library
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        await until(pilot, lambda: served.chat in keys(app, "models"), "the library")
        table(app, "models").move_cursor(row=keys(app, "models").index(served.chat))
        await pilot.press("a", *"tiny/TinyLlama-SQL-LoRA-GGUF lots", "enter")
        await until(pilot, lambda: "must be a number" in refused(app), "the refusal")
        await pilot.press(*["backspace"] * 4, *"0.5", "enter")

        await until(pilot, lambda: not isinstance(app.screen, AskDialog), "the pull to start")
        await until(pilot, lambda: "llama+lora" in cells(app, "models", served.chat), "the adapter", 30)
        (adapter,) = library.get(served.chat).lora
        assert adapter.scale == 0.5 and adapter.path.endswith("TinyLlama-SQL-LoRA-F32.gguf")
        (job,) = [j for j in app.screen.jobs if j.attach_to == served.chat]
        assert cells(app, "pulls", job.id)[0].startswith("tiny/TinyLlama-SQL-LoRA-GGUF (LoRA for")  # cut at 80 wide
        await pilot.press("x")
        await pilot.press("y")
        await until(pilot, lambda: "llama+lora" not in cells(app, "models", served.chat), "the adapter off")
        assert library.get(served.chat).lora == []


async def test_create_and_revoke_a_key(served: Served) -> None:
    app = app_for(served.live.url)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        await until(pilot, lambda: "tests" in keys(app, "keys"), "the keys")
        await pilot.press("n", *"from-tui", "enter")
        await until(pilot, lambda: isinstance(app.screen, SecretDialog), "the new key")
        secret = app.screen.secret
        assert secret.startswith("sk-spark-")
        await pilot.press("enter")
        await until(pilot, lambda: "from-tui" in keys(app, "keys"), "the key listed")
        with served.live.http(key=secret) as client:
            assert client.get("/v1/models").status_code == 200

        table(app, "keys").move_cursor(row=keys(app, "keys").index("from-tui"))
        await pilot.press("d")
        await pilot.press("n")  # asked, and said no: still there
        await pilot.pause(0.6)
        assert "from-tui" in keys(app, "keys")
        await pilot.press("d", "y")
        await until(pilot, lambda: "from-tui" not in keys(app, "keys"), "the key revoked")
        with served.live.http(key=secret) as client:
            assert client.get("/v1/models").status_code == 401


@pytest.mark.slow  # the slow model, beside the chat model other tests loaded
async def test_a_batch_is_listed_with_its_key_and_cancelled(served: Served) -> None:
    client = served.live.anthropic()
    # two requests, each many seconds long on the slow model (one slot): the batch runs until cancelled
    params: Any = {"model": served.slow, "max_tokens": 12_000, "messages": [{"role": "user", "content": "go on"}]}
    app = app_for(served.live.url)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("6")
        await until(pilot, lambda: connected(app) and NONE_YET in shown(app, "#empty"), "no batch yet")
        batch = await asyncio.to_thread(
            client.messages.batches.create, requests=[{"custom_id": f"r{i}", "params": params} for i in range(2)]
        )
        try:
            await until(pilot, lambda: batch.id in keys(app, "batches"), "the batch listed")
            row = cells(app, "batches", batch.id)
            assert row[1:4] == ["tests", "messages", "in_progress"]  # its key, its route, running
            assert row[4].endswith("/2") and shown(app, "#empty").strip() == ""

            table(app, "batches").move_cursor(row=keys(app, "batches").index(batch.id))
            await pilot.press("c")
            await until(pilot, lambda: isinstance(app.screen, ConfirmDialog), "the question")
            assert batch.id in app.screen.question
            await pilot.press("n")  # asked, and said no: it runs on
            await pilot.pause(0.6)
            assert (await asyncio.to_thread(client.messages.batches.retrieve, batch.id)).cancel_initiated_at is None
            await pilot.press("c", "y")
            await until(pilot, lambda: any("is cancelling" in n.message for n in app._notifications), "the cancel")
            seen = await asyncio.to_thread(client.messages.batches.retrieve, batch.id)
            assert seen.cancel_initiated_at is not None  # the key sees the admin's cancel
            await until(pilot, lambda: cells(app, "batches", batch.id)[3] == "cancelled", "the batch ended")
        finally:
            with suppress(anthropic.APIError):  # not to leave the slow model busy for the next tests
                await asyncio.to_thread(client.messages.batches.cancel, batch.id)
        assert (await asyncio.to_thread(client.messages.batches.retrieve, batch.id)).processing_status == "ended"

        await pilot.press("c")  # an ended batch: refused, and nothing asked
        await until(pilot, lambda: any("has ended" in n.message for n in app._notifications), "the refusal")
        assert not isinstance(app.screen, ConfirmDialog)

        await pilot.press("slash", *"no-such", "enter")
        await until(pilot, lambda: not keys(app, "batches"), "the filter")
        await pilot.press("slash", *["backspace"] * 7, "enter")
        await until(pilot, lambda: batch.id in keys(app, "batches"), "every batch again")


async def test_a_file_is_listed_with_its_key_and_deleted(served: Served) -> None:
    client = served.live.openai()
    notes = b"Invoice 7\nTotal: 42 EUR\n"
    app = app_for(served.live.url)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("7")
        await until(pilot, lambda: connected(app) and app.current_mode == "files", "the files")
        view = app.view()
        assert view is not None
        await app.reload(view)  # drawn at least once: the hint says whether there are any
        assert (files.NONE_YET in shown(app, "#empty")) == (not keys(app, "files"))
        uploaded = await asyncio.to_thread(
            client.files.create, file=("tui-notes.txt", notes, "text/plain"), purpose="user_data"
        )
        await until(pilot, lambda: uploaded.id in keys(app, "files"), "the file listed")
        assert keys(app, "files")[0] == uploaded.id  # newest first
        row = cells(app, "files", uploaded.id)  # at 80 columns the id and name give way: the rest is whole
        assert row[2:6] == ["tests", "user_data", "text/plain", f"{len(notes)}B"]
        assert row[6].endswith("s ago") and shown(app, "#empty").strip() == ""

        await pilot.press("slash", *"no-such", "enter")
        await until(pilot, lambda: not keys(app, "files"), "the filter")
        await pilot.press("slash", *["backspace"] * 7, *"tui-notes", "enter")  # by its name
        await until(pilot, lambda: keys(app, "files") == [uploaded.id], "the file by its name")
        table(app, "files").move_cursor(row=0)
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog), "the question")
        question = app.screen.question
        assert uploaded.id in question and "tui-notes.txt" in question and "key tests" in question
        assert "refused" in question
        await pilot.press("n")  # asked, and said no: still there
        await pilot.pause(0.6)
        assert uploaded.id in keys(app, "files")
        assert (await asyncio.to_thread(client.files.retrieve, uploaded.id)).id == uploaded.id
        await pilot.press("d", "y")
        await until(pilot, lambda: any(uploaded.id in n.message for n in app._notifications), "the deletion")
        await until(pilot, lambda: uploaded.id not in keys(app, "files"), "the file gone")
        with pytest.raises(openai.NotFoundError):  # the key that uploaded it has it no more
            await asyncio.to_thread(client.files.retrieve, uploaded.id)

        await pilot.press("d")  # nothing left under the filter: nothing to delete, nothing asked
        await until(pilot, lambda: any("No file selected" in n.message for n in app._notifications), "the refusal")
        assert not isinstance(app.screen, ConfirmDialog)


async def test_a_refused_action_says_why(served: Served) -> None:
    app = app_for(served.live.url)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        await until(pilot, lambda: served.chat in keys(app, "models"), "the library")
        await pilot.press("p", *"bad..org/x", "enter")
        await until(pilot, lambda: bool(refused(app)), "the error")
        assert "spec" in refused(app) or "repo" in refused(app)
        await pilot.press("escape")
        table(app, "models").move_cursor(row=keys(app, "models").index(served.chat))
        await pilot.press("y", *"Bad Id!", "enter")
        # said in the dialog, which stays open with what was typed, to put it right
        await until(pilot, lambda: bool(refused(app)), "the refusal")
        assert "not a valid model id" in refused(app) and app.screen.query_one("#answer", Input).value == "Bad Id!"
        assert isinstance(app.screen, AskDialog) and not app._notifications
        await pilot.press("escape")
        assert not isinstance(app.screen, AskDialog)


async def test_a_wrong_password_is_said_in_the_status_line(served: Served) -> None:
    app = app_for(served.live.url, secret="not-the-password")
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.problem is not None and "refused" in app.problem, "the refusal")
        assert app.screen.query_one(StatusLine).has_class("-down")
