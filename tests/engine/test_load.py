"""Loading: bad files, bad options, what info() reports."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Literal

import msgspec
import pytest

import tiny_gguf
from engine.helpers import Collector
from spark.engine import Engine
from spark.errors import ModelFileError, RunnerFailed
from spark.types import CompletionRequest, Done, FlashAttention, LoadOptions, LoraAdapter, SamplingParams

KVType = Literal["f16", "q8_0", "q4_0"]


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


@pytest.mark.parametrize(
    ("mode", "kv_type", "enabled"),
    [("auto", "f16", True), ("on", "f16", True), ("off", "f16", False), ("auto", "q8_0", True)],
)
def test_flash_attention(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: FlashAttention, kv_type: KVType, enabled: bool
) -> None:
    """The context gets the attention the setting says (llama.cpp's own log lines; auto is on for
    the CPU), and answers. A quantized KV cache loads at all only with flash attention."""
    model = tiny_gguf.write_tiny_llama(tmp_path / "model.gguf", n_head=2)  # heads of 32: a q8_0 cache fits
    options = LoadOptions(model_id="t", path=str(model), n_threads=1, n_ctx=256, flash_attention=mode, kv_type=kv_type)
    with caplog.at_level(logging.DEBUG, logger="spark.engine"), Engine(options) as e:
        answer = Collector()
        e.submit("r", CompletionRequest(model="t", prompt="Hello", sampling=SamplingParams(max_tokens=4)), answer)
        assert isinstance(answer.wait(), Done) and answer.text
    said = [m for r in caplog.records if re.search(r"flash_attn +=|Flash Attention (en|dis)abled", m := r.getMessage())]
    assert said and said[-1].endswith("enabled" if enabled else "disabled"), said


def _greedy(options: LoadOptions, prompt: str = "Hello there") -> str:
    with Engine(options) as e:
        answer = Collector()
        sampling = SamplingParams(max_tokens=8, temperature=0.0)
        e.submit("r", CompletionRequest(model="t", prompt=prompt, sampling=sampling), answer)
        assert isinstance(answer.wait(), Done)
    return answer.text


def test_lora_adapters_change_the_answer_by_their_scale(tiny_llama: Path, tiny_lora: Path, tmp_path: Path) -> None:
    """An adapter applies to every decode at its scale: scale 0 answers as the plain model, the
    adapter at 1 and at 0.5 each answer otherwise; two adapters apply together."""
    options = LoadOptions(model_id="t", path=str(tiny_llama), n_threads=1, n_ctx=256)
    plain = _greedy(options)
    with_lora = [
        _greedy(msgspec.structs.replace(options, lora=[LoraAdapter(path=str(tiny_lora), scale=s)]))
        for s in (0.0, 1.0, 0.5)
    ]
    assert with_lora[0] == plain
    assert with_lora[1] != plain and with_lora[2] != plain and with_lora[1] != with_lora[2]
    other = tiny_gguf.write_tiny_lora(tmp_path / "other.gguf", seed=5)
    both = [LoraAdapter(path=str(tiny_lora)), LoraAdapter(path=str(other), scale=0.0)]
    assert _greedy(msgspec.structs.replace(options, lora=both)) == with_lora[1]


def test_a_lora_adapter_llama_cpp_refuses_fails_the_load(tiny_llama: Path, tmp_path: Path) -> None:
    wide = tiny_gguf.write_tiny_lora(tmp_path / "wide.gguf", n_embd=128)  # made for another shape
    options = LoadOptions(
        model_id="t", path=str(tiny_llama), n_threads=1, n_ctx=256, lora=[LoraAdapter(path=str(wide))]
    )
    with pytest.raises(ModelFileError, match=f"could not load the LoRA adapter {wide}") as e:
        Engine(options)
    assert e.value.param == "lora"
