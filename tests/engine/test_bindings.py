"""The engine uses llama.cpp's C API alone: a runner holds neither numpy nor llama-cpp-python's own classes
(nor importlib.metadata, for its version)."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

CODE = """
import sys
import spark.engine.engine, spark.engine.embeddings, spark.engine.snapshot_disk
print(sorted({"numpy", "llama_cpp.llama", "llama_cpp.llama_chat_format", "importlib.metadata"} & set(sys.modules)))
"""


def test_the_engine_imports_neither_numpy_nor_the_high_level_package() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_bindings_report_the_installed_version() -> None:
    from importlib.metadata import version

    from spark.engine.bindings import bindings_version, lc

    assert bindings_version() == version("llama-cpp-python")
    assert lc.llama_max_devices() >= 1


def test_llama_cpp_imported_after_the_engine_still_has_its_c_api_and_version() -> None:
    code = (
        "import spark.engine.bindings, llama_cpp\n"
        "from spark.doctor import check_build, check_versions\n"
        "print(llama_cpp.__version__, bool(llama_cpp.llama_print_system_info()))\n"
        "print([c.status for c in [*check_versions(), *check_build()]].count('fail'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    from importlib.metadata import version

    assert out.stdout.split() == [version("llama-cpp-python"), "True", "0"]


def test_llama_cpp_log_lines_keep_their_level_but_the_pooling_spark_asks_for(caplog: pytest.LogCaptureFixture) -> None:
    from spark.engine.native import LogBridge

    bridge = LogBridge(logging.getLogger("spark.test.llama"), keep_errors=True)
    with caplog.at_level(logging.DEBUG, logger="spark.test.llama"):
        bridge._log(3, b"llama_init_from_model: model default pooling_type is [-1], but [1] was specified\n", None)
        bridge._log(3, b"llama_kv_cache: something odd\n", None)
        bridge._log(4, b"failed to allocate\n", None)
    assert [(r.levelno, r.message[:30]) for r in caplog.records] == [
        (logging.DEBUG, "llama_init_from_model: model d"),
        (logging.WARNING, "llama_kv_cache: something odd"),
        (logging.ERROR, "failed to allocate"),
    ]
    assert bridge.recent_errors() == "failed to allocate"
