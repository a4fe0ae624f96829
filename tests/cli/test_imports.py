"""What the CLI loads to start: the commands that read files or call the server start fast."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# The server's frameworks load only in `spark serve` (and `spark tui`'s own process needs Textual):
# `spark --help`, `spark ls`, `spark ps` and `spark log` once took 0.7 s, half of it Litestar.
NOT_AT_START = ("litestar", "uvicorn", "textual", "llama_cpp", "numpy")

CODE = f"""
import sys
import spark.cli.app  # what the `spark` command loads before it runs any command
print(sorted(set({NOT_AT_START!r}) & {{m.split(".")[0] for m in sys.modules}}))
"""


def test_the_cli_starts_without_the_servers_frameworks(spark_home: Path) -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
