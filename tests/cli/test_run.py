"""`spark run`: one-shot answers and the interactive REPL, driven through a real terminal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
from rich.console import Console

from spark.cli.run import HELP, Repl
from spark.embedded import Spark
from spark.library import BUNDLED_ID, Library
from spark.settings import load_settings
from tiny_pdf import make_pdf


def spark_cmd(*args: str, input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spark", *args], input=input, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def tiny_model(tiny_llama: Path) -> str:
    return Library(load_settings()).add_local(tiny_llama).id


def test_one_shot_answer_from_the_real_model(smollm2: Path) -> None:
    out = spark_cmd("run", "smollm2-135m-instruct-q4_1", "What is the capital of France?")  # as the README does
    assert out.returncode == 0, out.stderr
    assert "Paris" in out.stdout
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert f"Both answer `{out.stdout.strip()}`" in readme  # the README's words are what it prints


def test_prompt_from_stdin(tiny_model: str) -> None:
    out = spark_cmd("run", tiny_model, "--max-tokens", "5", "--seed", "1", input="hello there\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip(), "an answer was printed"
    again = spark_cmd("run", tiny_model, "--max-tokens", "5", "--seed", "1", input="hello there\n")
    assert again.stdout == out.stdout, "same seed, same answer"


def test_a_piped_pdf_is_read_as_its_text(smollm2: Path) -> None:
    notes = make_pdf("Team meeting notes", "The next meeting is in Lisbon on Friday.")
    run = [sys.executable, "-m", "spark", "run", "smollm2-135m-instruct-q4_1", "Where is the next meeting?"]
    out = subprocess.run(run, input=notes, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert b"Lisbon" in out.stdout
    scanned = subprocess.run(run, input=make_pdf(""), capture_output=True, timeout=120)
    assert scanned.returncode == 1 and b"'standard input': the PDF has no text layer" in scanned.stderr
    assert b"Traceback" not in scanned.stderr


def test_unknown_model_is_one_clear_line() -> None:
    out = spark_cmd("run", "no-such-model", "hi")
    assert out.returncode == 1
    assert "model 'no-such-model' is not installed" in out.stderr
    assert "Traceback" not in out.stderr
    near = spark_cmd("run", "smollm2", "hi")  # as `spark show` and the others: the id it may mean
    assert near.returncode == 1 and "did you mean smollm2-135m-instruct-q4_1?" in near.stderr


def test_nothing_piped_and_no_prompt_is_an_error_not_a_chat(tiny_model: str) -> None:
    out = spark_cmd("run", tiny_model, input="\n")
    assert out.returncode == 1 and out.stdout == "" and ">>>" not in out.stderr
    assert "nothing to answer" in out.stderr
    huge = spark_cmd("run", tiny_model, "hi", "--seed", str(10**20))
    assert huge.returncode == 1 and "seed must be a 64-bit number" in huge.stderr and "Traceback" not in huge.stderr


def _repl(model: str) -> pexpect.spawn:
    child = pexpect.spawn(
        sys.executable,
        ["-m", "spark", "run", model],
        env=dict(os.environ, TERM="dumb"),
        encoding="utf-8",
        timeout=60,
        dimensions=(40, 200),
        # as from a terminal: a test run started in the background inherits SIGINT ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    child.expect_exact(">>> ")
    return child


def test_repl_as_a_user_would_try_it(tiny_model: str) -> None:
    child = _repl(tiny_model)
    child.sendline("/?")
    child.expect_exact("/set parameter")
    child.expect_exact(">>> ")
    assert max(len(line) for line in HELP.splitlines()) <= 80  # fits the terminal it is read in
    child.sendline("/set parameter num_predict 6")
    child.expect_exact("Set parameter 'num_predict' to '6'.")
    child.sendline("/set parameter bogus 1")
    child.expect_exact("Unknown parameter 'bogus'")
    child.sendline("/set parameter temperature -1")  # refused when set, not at every message after
    child.expect_exact("Not set: temperature must be between 0.0 and 100.0, not -1.0.")
    child.sendline("/set system You are terse.")
    child.expect_exact("Set the system message.")
    child.sendline("/set verbose")
    child.expect_exact(">>> ")
    child.sendline("Hello")
    child.expect(r"answer 6 tokens, finish: length")
    child.expect_exact(">>> ")
    # A second turn carries the first one: its prompt is longer, and the history was reused.
    child.sendline("And again")
    child.expect(r"prompt (\d+) tokens \((\d+) cached\)")
    assert int(child.match.group(2)) > 0
    child.expect_exact(">>> ")
    child.sendline('"""First line')
    child.expect_exact("... ")
    child.sendline('second line"""')
    child.expect(r"answer 6 tokens")
    child.expect_exact(">>> ")
    child.sendline("/show parameters")
    child.expect(r"max_tokens\s+6\s+set here \(model default: 2048\)")
    child.sendline("/show system")
    child.expect_exact("You are terse.")
    child.sendline("/show info")
    child.expect_exact("llama")
    child.sendline("/clear")
    child.expect_exact("Cleared the conversation.")
    child.sendline("/nonsense")
    child.expect_exact("Unknown command")
    child.sendline("/set")  # known commands alone say how they are used
    child.expect_exact("Usage: /set parameter NAME VALUE")
    child.sendline("/show")
    child.expect_exact("Usage: /show info | parameters | system")
    child.sendline("/set parameter num_predict")  # the name alone: the model's default again
    child.expect_exact("Parameter 'num_predict' is the model's default again.")
    child.sendline("/show parameters")
    child.expect(r"max_tokens\s+2048\s+default_max_tokens setting")
    child.expect_exact(">>> ")  # readline has the terminal: a Ctrl-D typed before would be lost
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0


def test_show_parameters_lists_the_model_s_defaults_and_the_session_s_values(smollm2: Path) -> None:
    """The bundled model's own settings are shown with those /set changed, each marked, in 80 columns."""
    console = Console(width=80, record=True)
    with Spark(load_settings()) as spark:
        repl = Repl(spark, BUNDLED_ID, console)
        repl.command("/show parameters")
        repl.command("/set parameter temperature 0.7")
        repl.command("/set parameter top_k 40")
        repl.command("/set system Be terse.")
        repl.command("/show parameters")
        repl.command("/show system")
        repl.system = None
        repl.command("/show system")
    lines = console.export_text().splitlines()
    assert lines[:5] == [
        "  system               You are a helpful assistant. Keep your ans… model default",
        "  temperature          0.0        model default",
        "  dry_multiplier       0.8        model default",
        "  dry_allowed_length   4          model default",
        "  max_tokens           200        model default",
    ]
    assert lines[8:] == [
        "  system               Be terse.  set here (model default: You are a helpf…)",
        "  temperature          0.7        set here (model default: 0.0)",
        "  dry_multiplier       0.8        model default",
        "  dry_allowed_length   4          model default",
        "  max_tokens           200        model default",
        "  top_k                40         set here",
        "Be terse.",
        "(set here)",
        "You are a helpful assistant. Keep your answers short and to the point. Answer in",
        "English.",
        "(the model's default)",
    ]
    assert max(len(line) for line in lines) <= 80


def test_repl_ctrl_c_stops_the_answer_and_bye_exits(smollm2: Path) -> None:
    child = _repl("smollm2-135m-instruct-q4_1")
    child.sendline("/set parameter num_predict 2000")  # longer than the model's default, to be stopped
    # one line at a time: typed ahead, the story would be echoed before the REPL printed this, and
    # the words awaited below could be this line's (Ctrl+C would then meet the prompt, not the answer)
    child.expect_exact("Set parameter 'num_predict' to '2000'.")
    child.expect_exact(">>> ")
    child.sendline("Write a very long story about a dragon, with many chapters.")
    child.expect_exact("chapters.")  # the prompt's own echo, so that the words below are the answer's
    child.expect(r"\w+ \w+ \w+")  # the answer is streaming
    child.sendintr()
    child.expect_exact("(stopped)")
    child.expect_exact(">>> ")
    # the REPL answers again, whole and right (the stopped story neither continues nor leaks into it)
    child.sendline("/clear")
    child.expect_exact("Cleared the conversation.")
    child.expect_exact(">>> ")
    child.sendline("/set parameter num_predict 30")
    child.expect_exact("Set parameter 'num_predict' to '30'.")
    child.expect_exact(">>> ")
    child.sendline("What is the capital of France?")
    child.expect_exact("France?")
    child.expect_exact(">>> ")
    assert "Paris" in child.before and "dragon" not in child.before.lower(), child.before
    child.sendline("/bye")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
