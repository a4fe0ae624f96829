"""What a server process holds in memory: no package it does not use until asked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# each is imported on first use: the Hub client by a search or pull, httpx by a call out (a pull,
# a remote image, a fleet), pypdf by the first PDF in a request; numpy, gguf and llama.cpp only ever
# in runner processes; pydantic and attrs never (Spark's types are msgspec's)
NOT_AT_START = ("huggingface_hub", "gguf", "numpy", "llama_cpp", "pydantic", "attr", "httpx", "pypdf")

CODE = f"""
import sys
import spark.server.__main__  # what `spark serve` hands its process to
from spark.server.app import create_app
from spark.settings import load_settings

create_app(load_settings())
print(sorted(set({NOT_AT_START!r}) & {{m.split(".")[0] for m in sys.modules}}))
"""


def test_a_started_app_has_not_imported_what_only_hub_use_or_runners_need(spark_home: Path) -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
