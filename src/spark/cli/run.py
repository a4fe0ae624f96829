"""`spark run MODEL [PROMPT]`: answer one prompt, or chat in a REPL like `ollama run`."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Generator
from typing import Any

import msgspec
import typer
from rich.console import Console

from spark.api.documents import PDF_MAGIC, pdf_text
from spark.cli.models import get_installed
from spark.embedded import Spark, to_sampling
from spark.errors import SparkError
from spark.library import check_sampling
from spark.runners.options import load_options
from spark.settings import load_settings
from spark.types import ChatRequest, Done, Message, SlotInfo, TextDelta

# Ollama's parameter names, then OpenAI's, mapped to SamplingParams fields.
PARAMETERS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "temperature": ("temperature", float),
    "top_p": ("top_p", float),
    "top_k": ("top_k", int),
    "min_p": ("min_p", float),
    "seed": ("seed", int),
    "num_predict": ("max_tokens", int),
    "max_tokens": ("max_tokens", int),
    "repeat_penalty": ("repeat_penalty", float),
    "repetition_penalty": ("repeat_penalty", float),
    "presence_penalty": ("presence_penalty", float),
    "frequency_penalty": ("frequency_penalty", float),
    "repeat_last_n": ("repeat_last_n", int),
    "dry_multiplier": ("dry_multiplier", float),
    "dry_base": ("dry_base", float),
    "dry_allowed_length": ("dry_allowed_length", int),
    "dry_penalty_last_n": ("dry_penalty_last_n", int),
    "typical_p": ("typical_p", float),
    "top_n_sigma": ("top_n_sigma", float),
    "xtc_probability": ("xtc_probability", float),
    "xtc_threshold": ("xtc_threshold", float),
    "dynatemp_range": ("dynatemp_range", float),
    "dynatemp_exponent": ("dynatemp_exponent", float),
    "mirostat": ("mirostat", int),
    "mirostat_tau": ("mirostat_tau", float),
    "mirostat_eta": ("mirostat_eta", float),
    "stop": ("stop", str),
}

HELP = """Available commands:
  /set parameter NAME VALUE   set a sampling parameter (NAME alone: back to
                              the model's default); NAME is one of:
                              temperature, top_p, top_k, min_p, seed,
                              num_predict, repeat_penalty, repeat_last_n,
                              presence_penalty, frequency_penalty,
                              dry_multiplier, dry_base, dry_allowed_length,
                              dry_penalty_last_n, typical_p, top_n_sigma,
                              xtc_probability, xtc_threshold, dynatemp_range,
                              dynatemp_exponent, mirostat, mirostat_tau,
                              mirostat_eta, stop (each adds a stop string)
  /set system TEXT            set the system message
  /set verbose | quiet        show or hide timing after each answer
  /show info | parameters | system
                              the model; each parameter in effect, marked
                              model default or set here; the system message
  /clear                      forget the conversation
  /bye                        exit (or Ctrl+D)
  /?                          this help

Use \"\"\" to begin and end a multi-line message. Ctrl+C stops an answer."""


class Repl:
    """The interactive chat loop; input and output are injectable for tests."""

    def __init__(self, spark: Spark, model: str, console: Console, read: Callable[[str], str] = input) -> None:
        self.spark = spark
        self.model = model
        self.console = console
        self.read = read
        self.system: str | None = None
        self.options: dict[str, Any] = {}
        self.history: list[Message] = []
        self.verbose = False

    def loop(self) -> None:
        self.console.print('[dim]Send a message (/? for help, """ for several lines, Ctrl+D to exit)[/dim]')
        while True:
            try:
                line = self._read_message()
            except EOFError:
                self.console.print()
                return
            except KeyboardInterrupt:
                self.console.print("\n[dim]Use Ctrl+D or /bye to exit.[/dim]")
                continue
            if line is None or not line.strip():
                continue
            if line.startswith("/"):
                if self.command(line.strip()) == "bye":
                    return
                continue
            self.ask(line)

    def _read_message(self) -> str | None:
        line = self.read(">>> ")
        if not line.lstrip().startswith('"""'):
            return line
        text = line.lstrip()[3:]
        lines = []
        while not text.rstrip().endswith('"""'):
            lines.append(text)
            text = self.read("... ")
        lines.append(text.rstrip()[:-3])
        return "\n".join(lines).strip("\n")

    def command(self, line: str) -> str | None:
        words = line.split(maxsplit=3)
        name = words[0].lower()
        if name in ("/bye", "/exit", "/quit"):
            return "bye"
        if name in ("/?", "/help"):
            self.console.print(HELP, highlight=False, markup=False)
        elif name == "/clear":
            self.history.clear()
            self.console.print("Cleared the conversation.")
        elif name == "/set":
            self._set(words[1:])
        elif name == "/show":
            self._show(words[1] if len(words) >= 2 else "")
        else:
            self.console.print(f"Unknown command '{line}'. Type /? for help.", markup=False)
        return None

    def _set(self, words: list[str]) -> None:
        what = words[0].lower() if words else ""
        if what == "system" and len(words) >= 2:
            self.system = " ".join(words[1:])
            self.console.print("Set the system message.")
        elif what == "parameter" and len(words) >= 2:
            key = words[1].lower()
            if key not in PARAMETERS:
                self.console.print(f"Unknown parameter '{key}'. Known: {', '.join(PARAMETERS)}", markup=False)
                return
            field, kind = PARAMETERS[key]
            if len(words) == 2:  # the parameter alone: back to the model's own
                self.options.pop(field, None)
                self.console.print(f"Parameter '{key}' is the model's default again.", markup=False)
                return
            value = words[2]
            try:
                parsed = kind(value)
            except ValueError:
                self.console.print(f"'{value}' is not a valid value for {key}.", markup=False)
                return
            if field == "stop":
                parsed = [*self.options.get("stop", []), parsed]
            try:  # checked as a model's own defaults are: else every message would fail
                check_sampling(to_sampling({**self.options, field: parsed}))
            except SparkError as e:
                self.console.print(f"Not set: {e.message}.", markup=False)
                return
            self.options[field] = parsed
            self.console.print(f"Set parameter '{key}' to '{value}'.", markup=False)
        elif what in ("verbose", "quiet"):
            self.verbose = what == "verbose"
            self.console.print(f"Set '{what}' mode.")
        else:
            self.console.print("Usage: /set parameter NAME VALUE | /set system TEXT | /set verbose | /set quiet")

    def _show(self, what: str) -> None:
        if what == "parameters":
            for line in parameter_lines(self._defaults(), {**self.options, "system": self.system}):
                self.console.print(line, markup=False, highlight=False)
        elif what == "system":
            model_default = self._defaults().get("system")
            if self.system:
                self.console.print(f"{self.system}\n(set here)", markup=False)
            elif model_default:
                self.console.print(f"{model_default[0]}\n(the model's default)", markup=False)
            else:
                self.console.print("(no system message: the chat template's own default, if any, is used)")
        elif what == "info":
            entry = self.spark.library.get(self.model)
            info = entry.info
            for label, value in (
                ("model", entry.id),
                ("architecture", info.architecture),
                ("parameters", info.parameter_count),
                ("quantization", info.quantization),
                ("context length", info.context_length),
                ("file", entry.path),
            ):
                self.console.print(f"  {label:<16} {value}", markup=False)
        else:
            self.console.print("Usage: /show info | parameters | system")

    def _defaults(self) -> dict[str, tuple[Any, str]]:
        """What the model answers with when the session sets nothing, by name (`system`, then
        SamplingParams'), each with where it comes from: the model's own settings, or the
        `default_max_tokens` setting for an answer's length the model does not set."""
        entry = self.spark.library.get(self.model)
        options = load_options(entry, self.spark.settings)
        own = msgspec.to_builtins(entry.settings.sampling)
        system = {"system": options.system_prompt} if options.system_prompt else {}
        return {
            name: (value, "model default" if name in own or name == "system" else "default_max_tokens setting")
            for name, value in {**system, **msgspec.to_builtins(options.sampling)}.items()
        }

    def ask(self, text: str) -> bool:
        """Send one user message and stream the answer; Ctrl+C stops it. False on failure."""
        messages = ([Message(role="system", content=self.system)] if self.system else []) + [
            *self.history,
            Message(role="user", content=text),
        ]
        request = ChatRequest(model=self.model, messages=messages, sampling=to_sampling(self.options), stream=True)
        answer: list[str] = []
        try:
            done = stream_answer(self.spark, request, self.console, answer.append)
        except KeyboardInterrupt:
            self.console.print("\n[dim](stopped)[/dim]")
            return False
        except SparkError as e:
            self.console.print(f"[red]Error:[/red] {e.message}", highlight=False)
            return False
        self.history += [Message(role="user", content=text), Message(role="assistant", content="".join(answer))]
        if self.verbose and done is not None:
            u = done.usage
            self.console.print(
                f"[dim]prompt {u.prompt_tokens} tokens ({u.cached_tokens} cached), "
                f"answer {u.completion_tokens} tokens, finish: {done.finish_reason}[/dim]"
            )
        return True


def parameter_lines(defaults: dict[str, tuple[Any, str]], session: dict[str, Any], width: int = 80) -> list[str]:
    """`/show parameters`: each parameter in effect and where it comes from (`defaults`: value and
    source by name; `session`: what /set set, None for unset), as Ollama's lists the model's own and
    the user's, each line within `width`."""
    session = {k: v for k, v in session.items() if v is not None}
    if not defaults and not session:
        return ["  (none set: llama.cpp's sampling defaults apply)"]
    lines = []
    for name in {**defaults, **session}:
        if name in session:
            value = session[name]
            mark = f"set here (model default: {_cut(_text(defaults[name][0]), 16)})" if name in defaults else "set here"
        else:
            value, mark = defaults[name]
        head = f"  {name:<20} "
        text = _cut(_text(value), width - len(head) - len(mark) - 1)
        lines.append(f"{head}{text:<10} {mark}")
    return lines


def _text(value: Any) -> str:
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


def _cut(text: str, width: int) -> str:
    """`text` on one line of at most `width` characters (cut with an ellipsis)."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def stream_answer(spark: Spark, request: ChatRequest, console: Console, sink: Callable[[str], None]) -> Done | None:
    """Print the answer as it streams; a spinner covers the model load and prompt."""
    events: Generator[Any, None, None] = spark.events(request)
    done: Done | None = None
    try:
        with console.status("[dim]thinking…[/dim]", spinner="dots"):
            first = next((e for e in events if not isinstance(e, SlotInfo)), None)
        for event in [first] if first is not None else []:
            done = _show_event(event, sink) or done
        for event in events:
            done = _show_event(event, sink) or done
    finally:
        events.close()
    sys.stdout.write("\n")
    sys.stdout.flush()
    return done


def _show_event(event: Any, sink: Callable[[str], None]) -> Done | None:
    if isinstance(event, TextDelta):
        sys.stdout.write(event.text)
        sys.stdout.flush()
        sink(event.text)
    elif isinstance(event, Done):
        return event
    return None


def run(
    model: str = typer.Argument(..., help="Model id (see `spark ls`)."),
    prompt: list[str] = typer.Argument(
        None, help="Prompt; piped input (text, or a PDF's text) follows it; without either a chat opens."
    ),
    system: str = typer.Option(None, "--system", help="System message."),
    temperature: float = typer.Option(None, "--temperature", help="Sampling temperature."),
    seed: int = typer.Option(None, "--seed", help="Random seed (same seed, same answer)."),
    max_tokens: int = typer.Option(None, "--max-tokens", help="Longest answer, in tokens."),
    verbose: bool = typer.Option(False, "--verbose", help="Show token counts after each answer."),
) -> None:
    """Run a model: answer PROMPT, or chat interactively."""
    settings = load_settings()
    console = Console(stderr=True)
    text = " ".join(prompt or [])
    if not sys.stdin.isatty():
        piped = _piped_text(sys.stdin.buffer.read())
        text = f"{text}\n\n{piped}".strip() if text else piped.strip()
        if not text:  # no chat can be read from a pipe either
            raise SparkError("nothing to answer: no prompt, and the input piped in is empty")
    options = {
        k: v for k, v in (("temperature", temperature), ("seed", seed), ("max_tokens", max_tokens)) if v is not None
    }
    with Spark(settings) as spark:
        get_installed(spark.library, model)  # else the error says which model was meant, as other commands'
        repl = Repl(spark, model, console)
        repl.system, repl.options, repl.verbose = system, options, verbose
        if text:
            if not repl.ask(text):
                raise typer.Exit(1)
            return
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        _enable_history(settings.data_dir / "history")
        repl.loop()


def _piped_text(data: bytes) -> str:
    """What was piped in: a PDF's text (`spark run MODEL "Summarise" < report.pdf`), else UTF-8 text."""
    if data.startswith(PDF_MAGIC):
        return pdf_text(data, "standard input")
    return data.decode("utf-8", errors="replace")


def _enable_history(path: os.PathLike[str]) -> None:
    """Arrow-key history across sessions, when readline is available."""
    try:
        import atexit
        import readline
    except ImportError:
        return
    try:
        readline.read_history_file(path)
    except OSError:
        pass
    readline.set_history_length(1000)
    atexit.register(readline.write_history_file, path)
