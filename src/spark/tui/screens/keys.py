"""Keys: the API keys with their last day's use; create one (its secret shown once), revoke one."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static

from spark.tui import text, wire
from spark.tui.client import AdminAPI
from spark.tui.screens.base import View
from spark.tui.screens.dialogs import Answer, AskDialog, SecretDialog
from spark.tui.widgets import Table, set_text


class KeysView(View):
    MODE = "keys"
    FILTER_HINT = "filter: part of a key name or prefix (Enter applies, empty clears)"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("n", "create", "New key"),
        Binding("d,delete", "revoke", "Revoke"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.filter = ""

    def body(self) -> ComposeResult:
        keys = Table("NAME", "PREFIX", "CREATED", "LAST USED", "CONTENT", "24H REQ", "TOKENS", id="keys")
        keys.border_title = "API keys"
        yield keys
        yield Static(id="empty", classes="hint")

    async def reload(self, api: AdminAPI) -> None:
        keys = await api.keys()
        now = self.spark.clock()
        shown = [k for k in keys if self.filter in k.name or self.filter in k.prefix]
        self.query_one("#keys", Table).replace_rows([(k.name, _cells(k, now)) for k in shown])
        set_text(
            self.query_one("#empty", Static),
            "" if keys else "No API keys yet: clients need one. Press n to create one.",
        )

    def apply_filter(self, text_line: str) -> None:
        self.filter = text_line

    def action_create(self) -> None:
        dialog = AskDialog(
            "New API key: its name", self._create, "e.g. laptop", option="zero retention (log no content)"
        )
        self.ask(dialog, self._show_secret)

    async def _create(self, answer: Answer) -> wire.NewKey:
        return await self.spark.api.create_key(answer.text, zero_retention=answer.option)

    def _show_secret(self, created: wire.NewKey) -> None:
        """After the name's dialog has closed: the secret shows over the keys, not over that dialog."""
        self.spark.push_screen(SecretDialog(f"The key {created.record.name}:", created.key))

    def action_revoke(self) -> None:
        name = self.query_one("#keys", Table).selected_key()
        if name is None:
            self.spark.notify("No key selected.", severity="warning")
            return
        self.confirm(f"Revoke the key {name}? Requests with it are refused.", lambda: self._revoke(name), "revoke key")

    async def _revoke(self, name: str) -> None:
        await self.spark.api.revoke_key(name)
        self.spark.notify(f"Revoked {name}.")


def _cells(k: wire.Key, now: float) -> list[str | Text]:
    return [
        k.name,
        k.prefix,
        text.ago(k.created_at, now),
        text.ago(k.last_used_at, now),
        Text("not kept", "yellow") if k.zero_retention else "logged",
        text.count(k.requests_24h),
        f"{text.count(k.prompt_tokens_24h)}→{text.count(k.completion_tokens_24h)}",
    ]
