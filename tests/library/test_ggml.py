"""Spark's copy of the GGUF format tables agrees with llama.cpp's own `gguf` package."""

from __future__ import annotations

import subprocess
import sys

import gguf

from spark.library import ggml


def test_the_tables_match_the_gguf_package() -> None:
    for value_type in gguf.GGUFValueType:
        assert getattr(ggml, f"VALUE_{value_type.name}") == value_type.value
    assert ggml.DEFAULT_ALIGNMENT == gguf.GGUF_DEFAULT_ALIGNMENT
    for tensor_type in gguf.GGMLQuantizationType:
        block, size = gguf.GGML_QUANT_SIZES[tensor_type]
        assert ggml.TENSOR_TYPES[tensor_type.value] == (tensor_type.name, block, size)
    assert {t.value: t.name for t in gguf.LlamaFileType} == ggml.FILE_TYPES


def test_reading_a_header_imports_neither_gguf_nor_numpy() -> None:
    code = "import sys, spark.library.metadata; print(sorted({'gguf', 'numpy'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
