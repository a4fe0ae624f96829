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


def test_a_folder_the_system_refuses_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    home = tmp_path / "a-file"
    home.write_text("not a folder")
    env = {"PATH": "/usr/bin:/bin", "SPARK_HOME": str(home), "COLUMNS": "80"}
    code = "from spark.cli import main; import sys; sys.argv = ['spark', 'ls']; main()"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip() == (
        f"Error: Not a directory: {home}/data/models (check SPARK_HOME and the folders' permissions)"
    )
