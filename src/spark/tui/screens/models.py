"""Models: the library; pull from the Hub (with progress, cancel), load, unload, copy, remove."""

from __future__ import annotations

import asyncio
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static

from spark.tui import text, wire
from spark.tui.client import AdminAPI
from spark.tui.screens.base import View
from spark.tui.screens.dialogs import AskDialog
from spark.tui.widgets import Table, set_text

RUNNING = ("queued", "downloading", "verifying")
RECENT_PULLS = 4


class ModelsView(View):
    MODE = "models"
    FILTER_HINT = "filter: part of a model id (Enter applies, empty clears)"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "pull", "Pull"),
        Binding("l", "load", "Load"),
        Binding("u", "unload", "Unload"),
        Binding("y", "copy", "Copy"),
        Binding("d,delete", "remove", "Remove"),
        Binding("c", "cancel", "Cancel pull"),
        Binding("a", "attach", "Attach LoRA", show=False),
        Binding("x", "detach", "Detach LoRA", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.filter = ""
        self.jobs: list[wire.PullJob] = []

    def body(self) -> ComposeResult:
        models = Table("MODEL", "ARCH", "QUANT", "SIZE", "CTX", "LOADED", id="models")
        models.border_title = "Library"
        yield models
        # a failed pull's STATE is its error: it shares the room with the name (Enter shows it in full)
        pulls = Table("PULL", "PROGRESS", "STATE", "RATE", "ETA", flex=("PULL", "STATE"), id="pulls")
        pulls.border_title = "Pulls"
        yield pulls
        yield Static(id="empty", classes="hint")

    async def reload(self, api: AdminAPI) -> None:
        models, jobs = await asyncio.gather(api.models(), api.pulls())
        shown = [m for m in models if self.filter in m.id]
        self.query_one("#models", Table).replace_rows([(m.id, _model_cells(m)) for m in shown])
        self.jobs = [j for j in jobs if j.state in RUNNING] + [j for j in jobs if j.state not in RUNNING][:RECENT_PULLS]
        pulls = self.query_one("#pulls", Table)
        pulls.replace_rows([(j.id, _pull_cells(j)) for j in self.jobs])
        pulls.set_class(not self.jobs, "-none")
        set_text(
            self.query_one("#empty", Static),
            "" if models else "No model installed yet: press p to pull one from the Hugging Face Hub.",
        )

    def apply_filter(self, text_line: str) -> None:
        self.filter = text_line

    def _selected(self) -> str | None:
        model = self.query_one("#models", Table).selected_key()
        if model is None:
            self.spark.notify("No model selected.", severity="warning")
        return model

    def action_pull(self) -> None:
        dialog = AskDialog(
            "Pull a model from the Hugging Face Hub",
            lambda answer: self._pull(answer.text),
            "org/repo[:quant], e.g. unsloth/Qwen3-0.6B-GGUF:Q4_K_M",
        )
        self.ask(dialog)

    async def _pull(self, spec: str) -> None:
        job = await self.spark.api.start_pull(spec)
        self.spark.notify(f"Pulling {job.spec}…")

    def action_load(self) -> None:
        if (model := self._selected()) is not None:
            self.spark.notify(f"Loading {model}…")
            self.spark.run_action_worker(lambda: self._load(model), "load")

    async def _load(self, model: str) -> None:
        runner = await self.spark.api.load(model)
        self.spark.notify(f"{runner.model} is loaded ({'+'.join(runner.devices) or 'cpu'}).")

    def action_unload(self) -> None:
        if (model := self._selected()) is not None:
            self.spark.run_action_worker(lambda: self._unload(model), "unload")

    async def _unload(self, model: str) -> None:
        stopped = await self.spark.api.unload(model)
        self.spark.notify(f"Unloaded {model}." if stopped else f"{model} was not loaded.")

    def action_copy(self) -> None:
        if (model := self._selected()) is not None:
            question = f"Copy {model} as (the same files, its own settings)"
            self.ask(AskDialog(question, lambda answer: self._copy(model, answer.text), "new model id"))

    async def _copy(self, model: str, new_id: str) -> None:
        copied = await self.spark.api.copy_model(model, new_id)
        self.spark.notify(f"Copied {model} to {copied.id}.")

    def action_attach(self) -> None:
        if (model := self._selected()) is not None:
            question = f"Attach a LoRA adapter from the Hugging Face Hub to {model} (then a scale, if not 1)"
            example = "org/repo or org/repo/file.gguf, e.g. me/sql-lora-GGUF 0.5"
            self.ask(AskDialog(question, lambda answer: self._attach_adapter(model, answer.text), example))

    async def _attach_adapter(self, model: str, text: str) -> None:
        spec, _, scale = text.partition(" ")
        try:
            value = float(scale) if scale.strip() else None
        except ValueError:
            raise ValueError(f"The scale must be a number, not {scale.strip()!r}.") from None
        job = await self.spark.api.start_pull(spec, attach_to=model, scale=value)
        self.spark.notify(f"Pulling {job.spec} for {model}…")

    def action_detach(self) -> None:
        if (model := self._selected()) is not None:
            self.confirm(f"Take the LoRA adapters off {model}?", lambda: self._detach_adapters(model), "detach")

    async def _detach_adapters(self, model: str) -> None:
        await self.spark.api.detach_adapters(model)
        self.spark.notify(f"{model} answers with its own weights now.")

    def action_remove(self) -> None:
        if (model := self._selected()) is None:
            return
        question = f"Remove {model}? Files Spark downloaded are deleted, unless a copy still uses them."
        self.confirm(question, lambda: self._remove(model), "remove")

    async def _remove(self, model: str) -> None:
        removed = await self.spark.api.remove_model(model)
        self.spark.notify(f"Removed {model}" + (" and its files." if removed.files_deleted else "."))

    def action_cancel(self) -> None:
        """Cancel the pull under the cursor of the pulls table, else the newest one running."""
        running = [j for j in self.jobs if j.state in RUNNING]
        selected = self.query_one("#pulls", Table).selected_key()
        job = next((j for j in running if j.id == selected), running[0] if running else None)
        if job is None:
            self.spark.notify("No pull is running.", severity="warning")
            return
        self.spark.run_action_worker(lambda: self._cancel(job), "cancel")

    async def _cancel(self, job: wire.PullJob) -> None:
        done = await self.spark.api.cancel_pull(job.id)
        self.spark.notify(f"Pull of {done.spec}: {done.state}.")


def _model_cells(m: wire.Model) -> list[str | Text]:
    kind = "rerank" if m.rerank else "embed" if m.embedding else "vision" if m.vision else m.architecture
    kind += "+lora" if m.lora else ""
    return [
        m.id,
        kind,
        m.quantization,
        text.size(m.size_bytes),
        str(m.context_length or "-"),
        Text("● loaded", "green") if m.loaded else Text("-", "dim"),
    ]


def _pull_cells(j: wire.PullJob) -> list[str | Text]:
    state = Text(j.error, "red") if j.error else text.state(j.state)
    rate = f"{text.size(int(j.rate))}/s" if j.rate else "-"
    eta = f"{j.eta_seconds:.0f}s" if j.eta_seconds is not None and j.state in RUNNING else "-"
    name = f"{j.spec} (LoRA for {j.attach_to})" if j.attach_to else j.model or j.spec
    return [name, text.pull_progress(j), state, rate, eta]
