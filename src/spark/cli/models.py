"""Model library commands: `spark pull`, `search`, `ls`, `show`, `rm`."""

from __future__ import annotations

import difflib
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Self

import msgspec
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from spark.cli.columns import rows_table
from spark.errors import DownloadError, InvalidRequest, ModelNotFound, SparkError
from spark.library import DownloadProgress, Hub, HubSpec, Library, ModelEntry, PullPlan, parse_pull_spec, pull_adapter
from spark.library import pull as pull_model
from spark.library.jobs import FINISHED_STATES, PullJob
from spark.library.metadata import read_gguf_info
from spark.settings import load_settings
from spark.units import format_bytes

if TYPE_CHECKING:
    from spark.server.local_admin import AdminClient

SERVER_POLL_SECONDS = 0.25  # how often a pull run by the server is looked at


def get_installed(lib: Library, model: str) -> ModelEntry:
    """`lib.get(model)`, with the error saying how to find or get a model from the command line."""
    try:
        return lib.get(model)
    except ModelNotFound as e:
        ids = [m.id for m in lib.list()]
        wanted = model.strip().lower()
        close = [i for i in ids if i.startswith(wanted)] or difflib.get_close_matches(wanted, ids, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        # same error type, worded for the command line rather than the HTTP API
        e.message = f"model '{model}' is not installed; {hint}see `spark ls`, or get it with `spark pull`"
        raise


def format_count(n: int | None) -> str:
    """135M, 1.2B, 7B: parameter counts the way model names write them."""
    if n is None:
        return "-"
    for unit, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= size:
            value = n / size
            return f"{value:.0f}{unit}" if value >= 100 or value == int(value) else f"{value:.1f}{unit}"
    return str(n)


def _kind(e: ModelEntry) -> str:
    """What kind of model `e` is, where not a chat model: " (reranker)", " (embedding)", " (vision)"."""
    kinds = (
        (e.info.is_reranker, " (reranker)"),
        (e.info.is_embedding, " (embedding)"),
        (e.info.has_vision, " (vision)"),
    )
    return next((label for flag, label in kinds if flag), "")


def _short_source(source: str) -> str:
    """`hf:org/repo/file.gguf` -> `hf:org/repo` (the id already tells the file); the bundled model's
    package -> `bundled`, so its row fits an 80-column terminal (`spark show` names the package)."""
    if source.startswith("hf:"):
        return "/".join(source.split("/")[:2])
    return "bundled" if source.startswith("bundled:") else source


class _PullProgress:
    """Renders download progress events as one rich progress bar per file."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            DownloadColumn(binary_units=True),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=console,
        )
        self.tasks: dict[str, TaskID] = {}

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        if self.tasks:
            self.progress.stop()

    def update(self, event: DownloadProgress) -> None:
        task = self.tasks.get(event.filename)
        if task is None:
            if not self.tasks:
                self.progress.start()  # only once there is something to show
            task = self.tasks[event.filename] = self.progress.add_task(event.filename, total=event.total)
        self.progress.update(task, completed=event.completed, total=event.total)


def pull(
    spec: Annotated[
        str,
        typer.Argument(
            help="org/repo, org/repo:QUANT, org/repo/file.gguf, a huggingface.co URL, or a local .gguf path.",
            show_default=False,
        ),
    ],
    quant: Annotated[
        str | None,
        typer.Option(
            "--quant",
            "-q",
            help="Quantization to pull from a repository, e.g. Q4_K_M or Q8_0.",
        ),
    ] = None,
    copy: Annotated[
        bool,
        typer.Option(
            "--copy",
            help="For a local file: copy it into Spark's models folder instead of using it in place.",
        ),
    ] = False,
) -> None:
    """Download a GGUF model from Hugging Face (or add a local file) to the library.

    While a Spark server runs on this machine, a Hub pull runs as a job of that
    server (listed by GET /api/pulls; Ctrl+C here cancels it); with no server
    running, this command downloads the model itself. A local file is added
    here either way.
    """
    console = Console()
    settings = load_settings()
    if _is_hub_spec(spec, quant, settings.hf_endpoint) and (client := _server()) is not None:
        _pull_on_server(client, spec, quant, console)
        return

    def show_plan(plan: PullPlan) -> None:
        console.print(plan.describe(), highlight=False)

    with Library(settings) as lib, _PullProgress(console) as progress:
        result = pull_model(lib, spec, quant=quant, copy=copy, progress=progress.update, on_plan=show_plan)
    if result.already_installed:
        _already_installed(console, result.entry)
    else:
        _added(console, result.entry)


def _is_hub_spec(spec: str, quant: str | None, endpoint: str) -> bool:
    """Whether `spec` names a model on the Hub (errors are left to the local pull to report)."""
    try:
        return isinstance(parse_pull_spec(spec, quant=quant, endpoint=endpoint), HubSpec)
    except SparkError:
        return False


def _server() -> AdminClient | None:
    from spark.server.local_admin import connect  # the runners' types: loaded only to ask a server

    return connect(load_settings())


def _pull_on_server(client: AdminClient, spec: str, quant: str | None, console: Console) -> None:
    """Start the pull as a job of the running server and follow it until it ends (Ctrl+C cancels it)."""
    job = follow_pull(
        client, "/api/pulls", spec, quant, console, f"A Spark server is running (pid {client.server.pid})"
    )
    assert job.model is not None
    with Library(load_settings()) as lib:
        entry = lib.get(job.model)
    if job.already_installed:
        _already_installed(console, entry)
    else:
        _added(console, entry)


def follow_pull(client: AdminClient, jobs: str, spec: str, quant: str | None, console: Console, where: str) -> PullJob:
    """Start a pull job at `jobs` (`/api/pulls`, or a node's through its central) and follow it with
    a progress bar until it is done; Ctrl+C cancels it. `DownloadError` when it fails."""
    job = msgspec.json.decode(client.post(jobs, {"spec": spec, "quant": quant}), type=PullJob)
    console.print(f"{where}: pulling {spec} as its job {job.id}.", highlight=False)
    progress = _PullProgress(console)
    try:
        with progress:
            while job.state not in FINISHED_STATES:
                if job.bytes_total is not None:
                    progress.update(DownloadProgress(job.model or spec, job.bytes_done, job.bytes_total))
                time.sleep(SERVER_POLL_SECONDS)
                job = msgspec.json.decode(client.get(f"{jobs}/{job.id}"), type=PullJob)
            if job.state == "done" and job.bytes_total is not None and not job.already_installed:
                progress.update(DownloadProgress(job.model or spec, job.bytes_done, job.bytes_total))
    except KeyboardInterrupt:
        client.delete(f"{jobs}/{job.id}")
        console.print(f"Cancelled the pull job {job.id}; nothing was added.", highlight=False)
        raise typer.Exit(130) from None
    if job.state != "done" or job.model is None:
        raise DownloadError(f"the pull job {job.id} {job.state}: {job.error or 'no reason given'}")
    return job


def _already_installed(console: Console, entry: ModelEntry) -> None:
    console.print(f"[bold]{entry.id}[/bold] is already installed ({format_bytes(entry.size_bytes)}).", highlight=False)


def _added(console: Console, entry: ModelEntry) -> None:
    extra = ", with vision projector" if entry.mmproj_path else ""
    info = entry.info
    # an embedding model or a reranker answers over HTTP only
    next_step = (
        "Use it with POST /v1/rerank."
        if info.is_reranker
        else "Use it with POST /v1/embeddings."
        if info.is_embedding
        else f"Try: spark run {entry.id}"
    )
    console.print(
        f"[green]Added[/green] [bold]{entry.id}[/bold] ({format_bytes(entry.size_bytes)}, "
        f"{info.quantization}{extra}). {next_step}",
        highlight=False,
    )


def search(
    query: Annotated[str, typer.Argument(help="Words to look for in repository names.", show_default=False)],
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=1000, help="Most results to show.")] = 20,
) -> None:
    """Search Hugging Face for GGUF models, most downloaded first.

    Asks the Hub from this machine, not the server (the admin API's search, which lists files too, stops at 100)."""
    console = Console()
    found = Hub(load_settings()).search(query, limit=limit)
    if not found:
        console.print(f"No GGUF models found for '{query}'.", highlight=False)
        return
    table = Table("repository", "downloads", "likes", "params", "arch", "updated", box=None)
    table.columns[0].overflow = "fold"
    for m in found:
        table.add_row(
            m.id,
            f"{m.downloads:,}",
            f"{m.likes:,}",
            format_count(m.parameters),
            m.architecture or "-",
            m.last_modified.date().isoformat() if m.last_modified else "-",
        )
    console.print(table)
    console.print(f"[dim]Pull one with: spark pull {found[0].id}[/dim]", highlight=False)


def list_models(
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print model ids only, one a line.")] = False,
) -> None:
    """List installed models (this machine's local library; no server needed)."""
    console = Console()
    with Library(load_settings()) as lib:
        entries = lib.list()
    if quiet:
        for e in entries:
            print(e.id)
        return
    if not entries:
        console.print("No models installed. Get one with: spark pull org/repo")
        return
    rows = [
        {
            "ID": e.id + _kind(e) + (" (+LoRA)" if e.lora else ""),
            "SIZE": format_bytes(e.size_bytes),
            "QUANT": e.info.quantization,
            "PARAMS": format_count(e.info.parameter_count),
            "CONTEXT": f"{e.info.context_length:,}" if e.info.context_length else "-",
            "SOURCE": _short_source(e.source),
        }
        for e in entries
    ]
    # a local file's path is cut first (the id says which file), then the least telling columns go
    table = rows_table(rows, ("PARAMS", "CONTEXT", "QUANT"), console.width, cut={"SOURCE": 24})
    console.print(table)


def show(
    model: Annotated[str, typer.Argument(help="Model id, as `spark ls` shows it.", show_default=False)],
    template: Annotated[bool, typer.Option("--template", help="Print the whole chat template.")] = False,
) -> None:
    """Show a model's metadata, files, projector and settings (from this machine's local library)."""
    console = Console()
    with Library(load_settings()) as lib:
        e = get_installed(lib, model)
    if template:
        console.print(e.info.chat_template or "(this model has no chat template)", markup=False, highlight=False)
        return
    i = e.info
    rows: list[tuple[str, str]] = [
        ("id", e.id),
        ("name", i.name or "-"),
        ("architecture", i.architecture),
        ("parameters", f"{format_count(i.parameter_count)} ({i.parameter_count:,})"),
        ("quantization", i.quantization),
        ("size", format_bytes(e.size_bytes)),
        ("training context", f"{i.context_length:,}" if i.context_length else "-"),
        ("layers", str(i.n_layers)),
        ("embedding length", str(i.n_embd)),
        ("attention heads", f"{i.n_heads} (KV heads {i.n_kv_heads}, head dim K {i.head_dim_k} / V {i.head_dim_v})"),
    ]
    if i.sliding_window:
        rows.append(("sliding window", f"{i.sliding_window:,}"))
    first_line = (i.chat_template or "").strip().splitlines()[0][:60] if i.chat_template else ""
    rows += [
        ("vocabulary", f"{i.vocab_size:,}"),
        ("kind", "reranker" if i.is_reranker else "embedding" if i.is_embedding else "chat / completion"),
        ("chat template", f"yes ({len(i.chat_template or '')} chars: {first_line}...)" if i.chat_template else "no"),
        ("tool calling", "yes" if i.supports_tools else "no"),
        ("vision projector", e.mmproj_path or "none"),
        ("LoRA adapters", "\n".join(f"{a.path} (scale {a.scale:g})" for a in e.lora) or "none"),
        ("files", "\n".join(e.shards)),
        ("source", e.source),
        ("owned by spark", "yes (deleted by spark rm)" if e.owned else "no (spark rm keeps the file)"),
        ("added", datetime.fromtimestamp(e.added_at).isoformat(sep=" ", timespec="seconds")),
    ]
    s = e.settings
    rows += [
        ("system prompt", s.system_prompt if s.system_prompt is not None else "(default)"),
        ("context length", str(s.context_length) if s.context_length else "(server setting)"),
        ("parallel", str(s.parallel) if s.parallel else "(server setting)"),
        ("draft model", s.draft_model or "none (n-gram lookup)"),
    ]
    sampling = msgspec.to_builtins(s.sampling)
    rows.append(("sampling", ", ".join(f"{k}={v}" for k, v in sampling.items()) or "(defaults)"))
    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in rows:
        table.add_row(key, value)
    console.print(table, markup=False, highlight=False)


def attach(
    model: Annotated[str, typer.Argument(help="Model id, as `spark ls` shows it.", show_default=False)],
    file: Annotated[
        str,
        typer.Argument(
            help="A vision projector (mmproj-*.gguf) or a LoRA adapter: a local GGUF file, or one on "
            "Hugging Face (org/repo, org/repo:QUANT, org/repo/file.gguf).",
            show_default=False,
        ),
    ],
    scale: Annotated[
        float | None, typer.Option("--scale", help="How strongly a LoRA adapter applies (1 when not given).")
    ] = None,
    copy: Annotated[
        bool,
        typer.Option("--copy", help="Copy a local file into Spark's models folder instead of using it in place."),
    ] = False,
) -> None:
    """Attach a vision projector (the model reads images) or a LoRA adapter (applied to its weights).

    A LoRA adapter changes the model's answers: `spark cp` the model first to keep the plain one.
    `spark detach` takes adapters (or, with --projector, the projector) off again."""
    console = Console()
    settings = load_settings()
    with Library(settings) as lib:
        model_id = get_installed(lib, model).id
        local = Path(file).expanduser()
        if not local.exists() and _is_hub_spec(file, None, settings.hf_endpoint):
            with _PullProgress(console) as progress:
                entry = pull_adapter(
                    lib,
                    model_id,
                    file,
                    scale=scale,
                    progress=progress.update,
                    on_plan=lambda plan: console.print(plan.describe(), highlight=False),
                )
        else:
            entry = lib.attach(model_id, local, scale=scale, copy=copy)
    if not local.exists() or read_gguf_info(local).is_adapter:
        adapter = entry.lora[-1]  # the one attached last, the same file again included
        done = f"Attached LoRA adapter {adapter.path} to {entry.id} at scale {adapter.scale:g}"
        console.print(f"{done}: it answers with it from its next load.", highlight=False)
    else:
        console.print(f"Attached {entry.mmproj_path} to {entry.id}: it reads images now.", highlight=False)


def detach(
    model: Annotated[str, typer.Argument(help="Model id, as `spark ls` shows it.", show_default=False)],
    projector: Annotated[
        bool,
        typer.Option("--projector", help="Take the vision projector off instead: the model reads no images."),
    ] = False,
) -> None:
    """Take a model's LoRA adapters off, or with --projector its vision projector.

    Spark's own copies of the files are deleted; `spark attach` puts them back."""
    with Library(load_settings()) as lib:
        model_id = get_installed(lib, model).id
        if projector:
            entry, path = lib.detach_projector(model_id)
            if path is None:
                raise InvalidRequest(f"{entry.id} has no vision projector: there is nothing to detach", param="model")
            Console().print(
                f"Took the vision projector {path} off {entry.id}: it reads no images now.", highlight=False
            )
            return
        entry, paths = lib.detach_adapters(model_id)
    if not paths:
        hint = (
            f" (its vision projector comes off with `spark detach {entry.id} --projector`)" if entry.mmproj_path else ""
        )
        raise InvalidRequest(f"{entry.id} has no LoRA adapter: there is nothing to detach{hint}", param="model")
    Console().print(f"Took {len(paths)} LoRA adapter(s) off {entry.id}: {', '.join(paths)}", highlight=False)


def cp(
    source: Annotated[str, typer.Argument(help="The installed model to copy.", show_default=False)],
    destination: Annotated[str, typer.Argument(help="The copy's model id.", show_default=False)],
) -> None:
    """Copy a model under another id: the same files, with settings of its own.

    The copy can have another system prompt, other sampling, or the model name a client asks for."""
    with Library(load_settings()) as lib:
        entry = lib.copy(get_installed(lib, source).id, destination)
    Console().print(
        f"Copied {source} to {entry.id}: the same files, its own settings (spark show {entry.id}).", highlight=False
    )


def rm(
    model: Annotated[list[str], typer.Argument(help="Model ids to remove.", show_default=False)],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Remove models from this machine's local library, deleting the files Spark downloaded or copied.

    It acts on the local files, not through a running server: a server that has
    the model loaded keeps it until it unloads (DELETE /api/models/ID unloads first).
    """
    console = Console()
    with Library(load_settings()) as lib:
        entries = [get_installed(lib, m) for m in model]  # every id checked before anything is removed
        for e in entries:
            if sharing := lib.sharing(e.id):
                users = f"{', '.join(sharing)} {'uses' if len(sharing) == 1 else 'use'}"
                what = f"remove {e.id} from the library (its files stay: {users} them)"
            elif e.owned:
                what = f"delete {e.id} ({format_bytes(e.size_bytes)} in {Path(e.path).parent})"
            else:
                what = f"remove {e.id} from the library (its file {e.path} is kept)"
            if not yes and not typer.confirm(f"{what[0].upper()}{what[1:]}?", default=False):
                console.print(f"Kept {e.id}.", highlight=False)
                continue
            lib.remove(e.id)
            console.print(f"Removed {e.id}.", highlight=False)
