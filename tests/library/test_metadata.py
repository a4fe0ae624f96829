"""GGUF metadata from real files: the tiny generated models, shards, broken files, SmolLM2."""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import gguf
import numpy as np
import pytest

import tiny_gguf
from spark.errors import ModelFileError
from spark.library.metadata import adapter_mismatch, read_gguf_info, read_remote_gguf_info


def test_tiny_llama(tiny_llama: Path) -> None:
    info = read_gguf_info(tiny_llama)
    assert info.architecture == "llama"
    assert info.name == "tiny-llama-random"
    assert info.quantization == "F32"
    assert (info.n_layers, info.n_embd, info.n_heads, info.n_kv_heads) == (2, 64, 4, 2)
    assert info.kv_heads_by_layer == [2, 2]
    assert (info.head_dim_k, info.head_dim_v) == (16, 16)  # n_embd / n_heads
    assert info.context_length == 512
    assert info.vocab_size == 512
    assert info.merges == 512 - 256 - len(tiny_gguf.SPECIAL_TOKENS)  # byte tokens, merges, specials
    assert info.chat_template is not None and "<|im_start|>" in info.chat_template
    assert not info.supports_tools
    assert not info.is_embedding and not info.is_projector
    assert info.file_size == tiny_llama.stat().st_size
    # every F32 element is 4 bytes; parameters are counted over all tensors
    assert info.tensor_bytes == 4 * info.parameter_count
    assert info.embedding_bytes == 512 * 64 * 4
    assert info.output_bytes == 512 * 64 * 4 + 64 * 4  # output.weight + output_norm
    assert len(info.layer_bytes) == 2 and info.layer_bytes[0] == info.layer_bytes[1]
    assert info.embedding_bytes + info.output_bytes + sum(info.layer_bytes) == info.tensor_bytes
    assert info.kv_elements_per_token() == 2 * 2 * (16 + 16)


def test_tools_template_is_detected(tiny_llama_tools: Path) -> None:
    assert read_gguf_info(tiny_llama_tools).supports_tools


def test_embedding_model(tiny_bert: Path) -> None:
    info = read_gguf_info(tiny_bert)
    assert info.architecture == "bert"
    assert info.is_embedding
    assert info.chat_template is None


def test_pooling_marks_embeddings_for_any_architecture(tmp_path: Path) -> None:
    # a llama-architecture file with pooling set (like Qwen3-Embedding) is an embedding model
    path = tmp_path / "emb.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_pooling_type(gguf.PoolingType.LAST)
    w.add_tensor("token_embd.weight", np.zeros((4, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert read_gguf_info(path).is_embedding


def test_projector(tiny_mmproj: Path) -> None:
    info = read_gguf_info(tiny_mmproj)
    assert info.architecture == "clip"
    assert info.is_projector
    assert info.n_layers == 0


@pytest.mark.parametrize(("weight_type", "quant"), [("q8_0", "Q8_0"), ("f16", "F16")])
def test_quantization_comes_from_file_type(tmp_path: Path, weight_type: str, quant: str) -> None:
    path = tiny_gguf.write_tiny_llama(tmp_path / "m.gguf", weight_type=weight_type)  # type: ignore[arg-type]
    info = read_gguf_info(path)
    assert info.quantization == quant
    assert info.tensor_bytes < 4 * info.parameter_count


def test_quantization_without_file_type_is_derived_from_tensors(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    data = np.zeros((8, 64), dtype=np.float32)
    w.add_tensor(
        "blk.0.attn_q.weight",
        gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0),
        raw_dtype=gguf.GGMLQuantizationType.Q8_0,
    )
    w.add_tensor("blk.0.attn_norm.weight", np.ones(64, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    info = read_gguf_info(path)
    assert info.quantization == "Q8_0"
    assert info.layer_bytes == [8 * 64 // 32 * 34 + 64 * 4]


def test_split_model_reads_every_shard(tmp_path: Path, tiny_llama: Path) -> None:
    shards = tiny_gguf.write_tiny_llama_split(tmp_path / "Tiny-F32.gguf")
    info = read_gguf_info(shards[0])
    whole = read_gguf_info(tiny_llama)
    assert info.file_size == sum(p.stat().st_size for p in shards)
    assert info.parameter_count == whole.parameter_count
    assert info.tensor_bytes == whole.tensor_bytes
    assert info.layer_bytes == whole.layer_bytes
    assert info.chat_template == whole.chat_template


def test_later_shard_or_missing_shard_is_an_error(tmp_path: Path) -> None:
    shards = tiny_gguf.write_tiny_llama_split(tmp_path / "Tiny-F32.gguf")
    with pytest.raises(ModelFileError, match="shard 2 of 3; give the first shard"):
        read_gguf_info(shards[1])
    shards[2].unlink()
    with pytest.raises(ModelFileError, match="incomplete: missing Tiny-F32-00003-of-00003.gguf"):
        read_gguf_info(shards[0])


def test_renamed_shard_without_its_siblings_is_an_error(tmp_path: Path) -> None:
    shards = tiny_gguf.write_tiny_llama_split(tmp_path / "Tiny-F32.gguf")
    lone = tmp_path / "lone.gguf"
    shards[0].rename(lone)
    with pytest.raises(ModelFileError, match="shard 1 of a 3-part model"):
        read_gguf_info(lone)


@pytest.mark.parametrize("keep", [0.001, 0.05, 0.5, 0.999])
def test_truncated_file(tmp_path: Path, tiny_llama: Path, keep: float) -> None:
    path = tiny_gguf.write_truncated(tiny_llama, tmp_path / "cut.gguf", keep=keep)
    with pytest.raises(ModelFileError, match="truncated|not a GGUF"):
        read_gguf_info(path)


def test_not_gguf_files(tmp_path: Path) -> None:
    text = tmp_path / "notes.gguf"
    text.write_text("hello, I am not a model\n" * 10)
    with pytest.raises(ModelFileError, match="does not start with 'GGUF'"):
        read_gguf_info(text)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(ModelFileError, match="not a GGUF model file"):
        read_gguf_info(empty)
    with pytest.raises(ModelFileError, match="no such file"):
        read_gguf_info(tmp_path / "missing.gguf")
    with pytest.raises(ModelFileError, match="is a folder"):
        read_gguf_info(tmp_path)


def test_corrupt_header_counts_and_versions(tmp_path: Path) -> None:
    huge = tmp_path / "huge.gguf"
    huge.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 2**60, 2**60) + b"\0" * 64)
    with pytest.raises(ModelFileError, match="corrupt"):
        read_gguf_info(huge)
    future = tmp_path / "future.gguf"
    future.write_bytes(b"GGUF" + struct.pack("<IQQ", 9, 0, 0) + b"\0" * 64)
    with pytest.raises(ModelFileError, match="version 9"):
        read_gguf_info(future)
    # a string claiming to be longer than the file
    long_key = tmp_path / "long.gguf"
    long_key.write_bytes(b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 2**40) + b"abc")
    with pytest.raises(ModelFileError, match="truncated or corrupt"):
        read_gguf_info(long_key)


def test_real_smollm2(smollm2: Path) -> None:
    info = read_gguf_info(smollm2)
    assert info.architecture == "llama"
    assert info.quantization == "Q4_1"
    assert 134_000_000 < info.parameter_count < 136_000_000
    assert (info.n_layers, info.n_embd, info.n_heads, info.n_kv_heads) == (30, 576, 9, 3)
    assert info.context_length == 8192
    assert info.vocab_size == 49152
    assert info.merges == 48900
    assert info.output_bytes < 10_000  # output tied to the token embeddings
    assert info.chat_template is not None and "<|im_start|>" in info.chat_template


def test_remote_header_is_read_from_the_first_bytes_growing_until_it_is_in(tiny_llama: Path) -> None:
    data = tiny_llama.read_bytes()
    asked: list[int] = []

    def read_start(n: int) -> bytes:
        asked.append(n)
        return data[:n]

    info = read_remote_gguf_info(read_start, tiny_llama.name, len(data), first_read=64)
    assert info == read_gguf_info(tiny_llama)
    assert asked[0] == 64 and all(b == 4 * a for a, b in itertools.pairwise(asked))
    assert asked[-1] < len(data)  # the header, not the whole file


def test_remote_file_that_is_no_gguf_is_refused(tiny_llama: Path) -> None:
    with pytest.raises(ModelFileError, match="not a GGUF"):
        read_remote_gguf_info(lambda n: b"<html>" + b"x" * n, "page.gguf", 10_000)
    short = tiny_llama.read_bytes()[:100]
    with pytest.raises(ModelFileError, match="header is longer than 100 bytes"):
        read_remote_gguf_info(lambda n: short[:n], "cut.gguf", 1_000_000, first_read=64)


def test_adapter_mismatch_finds_what_llama_cpp_would_refuse(tiny_llama: Path, tmp_path: Path) -> None:
    """The shapes llama.cpp checks when it loads an adapter (`llama_adapter_lora_init`), from the
    headers: A (n_in, rank) and B (rank, n_out), flipped for the token embeddings."""
    fits = tiny_gguf.write_tiny_lora(tmp_path / "fits.gguf", token_embd=512)
    assert read_gguf_info(fits).is_adapter and adapter_mismatch(fits, tiny_llama) is None
    cases = {
        "wide": ({"n_embd": 128}, "its blk.0.attn_q.weight is made for a weight of another shape"),
        "deep": ({"n_layer": 3}, "the model has no tensor blk.2.attn_q.weight"),
        "vocab": ({"token_embd": 513}, "its token_embd.weight is made for a weight of another shape"),
    }
    for name, (shape, why) in cases.items():
        assert adapter_mismatch(tiny_gguf.write_tiny_lora(tmp_path / f"{name}.gguf", **shape), tiny_llama) == why
    half = gguf.GGUFWriter(str(tmp_path / "half.gguf"), "llama")
    half.add_type(gguf.GGUFType.ADAPTER)
    half.add_tensor("blk.0.attn_q.weight.lora_a", np.zeros((4, 64), dtype=np.float32))
    tiny_gguf._finish(half)
    assert adapter_mismatch(tmp_path / "half.gguf", tiny_llama) == "its blk.0.attn_q.weight lacks lora_a or lora_b"
    assert not read_gguf_info(tiny_llama).is_adapter
