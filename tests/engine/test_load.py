"""Loading: bad files, bad options, what info() reports."""

from __future__ import annotations

from pathlib import Path

import pytest

import tiny_gguf
from spark.engine import Engine
from spark.errors import ModelFileError, RunnerFailed
from spark.types import LoadOptions


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="cannot read"):
        Engine(LoadOptions(model_id="x", path=str(tmp_path / "nope.gguf"), n_threads=1))


def test_not_a_gguf_file(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"<html>not a model</html>")
    with pytest.raises(ModelFileError, match="not a GGUF"):
        Engine(LoadOptions(model_id="x", path=str(path), n_threads=1))


def test_truncated_gguf(tiny_llama: Path, tmp_path: Path) -> None:
    path = tiny_gguf.write_truncated(tiny_llama, tmp_path / "cut.gguf", keep=0.5)
    with pytest.raises(ModelFileError, match="could not load"):
        Engine(LoadOptions(model_id="x", path=str(path), n_threads=1))


def test_bad_options(tiny_llama: Path) -> None:
    with pytest.raises(RunnerFailed, match="n_parallel"):
        Engine(LoadOptions(model_id="x", path=str(tiny_llama), n_parallel=0))
    # a context llama.cpp refuses for a reason other than memory says llama.cpp's reason
    with pytest.raises(RunnerFailed, match="could not create a context of 19200 tokens: .*n_seq_max must be <= 256"):
        Engine(LoadOptions(model_id="x", path=str(tiny_llama), n_threads=1, n_ctx=64, n_parallel=300))


def test_info(tiny_llama: Path) -> None:
    with Engine(LoadOptions(model_id="tiny", path=str(tiny_llama), n_threads=1, n_ctx=256, n_parallel=3)) as e:
        info = e.info()
    assert (info.model_id, info.n_ctx_per_slot, info.n_slots) == ("tiny", 256, 3)
    assert (info.n_vocab, info.n_embd, info.n_ctx_train) == (512, 64, 512)
    assert info.chat_template_source == "gguf" and "<|im_start|>" in info.chat_template
    assert info.eos_token == "<|im_end|>" and not info.embedding
    assert info.n_threads == 1 and info.n_params > 0 and info.model_bytes > 0
