"""Estimate arithmetic on synthetic model shapes (the real models are in test_measured.py)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from spark.errors import InvalidRequest
from spark.library.metadata import GGUFInfo, read_gguf_info
from spark.placement.estimate import (
    GIB,
    GRAMMAR_BYTES_PER_TOKEN,
    MIB,
    SWA_CHECKPOINTS,
    TOKENIZER_FIXED_BYTES,
    VOCAB_BYTES_PER_MERGE,
    VOCAB_BYTES_PER_TOKEN,
    MemoryEstimate,
    ModelShape,
    estimate_load,
    estimate_memory,
    model_shape,
    swa_layers,
)
from spark.types import LoadOptions, LoraAdapter


def shape(**over: object) -> ModelShape:
    base: dict[str, object] = {
        "architecture": "llama",
        "n_layers": 4,
        "n_embd": 1024,
        "n_ff": 4096,
        "n_vocab": 32000,
        "context_length": 8192,
        "kv_heads": [8, 8, 4, 4],
        "head_dim_k": 128,
        "head_dim_v": 64,
        "layer_bytes": [100 * MIB] * 4,
        "output_bytes": 60 * MIB,
        "embedding_bytes": 50 * MIB,
    }
    base.update(over)
    return ModelShape(**base)  # type: ignore[arg-type]


def test_kv_cache_is_cells_times_heads_times_head_dims_times_bytes() -> None:
    est = estimate_memory(shape(), n_ctx=1024, n_parallel=2)
    # f16: 2 bytes per element; one stream of 1024 cells per slot
    assert est.layer_kv == [2 * 1024 * h * (128 + 64) * 2 for h in (8, 8, 4, 4)]
    assert est.kv_bytes == sum(est.layer_kv)
    assert est.n_ctx == 1024 and est.n_parallel == 2


def test_kv_cells_are_padded_like_llama_cpp() -> None:
    # n_ctx = pad(300 * 3, 256) = 1024, per slot pad(1024 / 3, 256) = 512 cells
    est = estimate_memory(shape(), n_ctx=300, n_parallel=3)
    assert est.layer_kv[0] == 3 * 512 * 8 * (128 + 64) * 2
    assert est.n_ctx == 300  # what a request may use is still what was asked


@pytest.mark.parametrize(("kv_type", "block_bytes"), [("q8_0", 34), ("q4_0", 18)])
def test_quantized_kv_types(kv_type: str, block_bytes: int) -> None:
    est = estimate_memory(shape(), n_ctx=2048, kv_type=kv_type)  # type: ignore[arg-type]
    # 32 elements per block: K row 8 x 128 = 1024 elements, V row 8 x 64 = 512
    row = (1024 // 32 + 512 // 32) * block_bytes
    assert est.layer_kv[0] == 2048 * row
    f16 = estimate_memory(shape(), n_ctx=2048)
    assert est.kv_bytes < f16.kv_bytes
    assert f"KV cache {kv_type}" in est.describe()


def test_context_defaults_to_and_is_capped_at_the_training_context() -> None:
    assert estimate_memory(shape(), n_ctx=0).n_ctx == 8192
    assert estimate_memory(shape(), n_ctx=100_000).n_ctx == 8192
    assert estimate_memory(shape(context_length=0), n_ctx=512).n_ctx == 512
    with pytest.raises(InvalidRequest) as e:
        estimate_memory(shape(context_length=0), n_ctx=0)
    assert e.value.param == "n_ctx"


def test_bad_arguments_name_the_parameter() -> None:
    with pytest.raises(InvalidRequest) as e:
        estimate_memory(shape(), n_ctx=512, kv_type="q5_1")  # type: ignore[arg-type]
    assert e.value.param == "kv_type" and "q5_1" in e.value.message
    with pytest.raises(InvalidRequest) as e:
        estimate_memory(shape(), n_ctx=512, n_parallel=0)
    assert e.value.param == "n_parallel"


def test_sliding_window_layers_hold_window_plus_ubatch() -> None:
    gemma2 = shape(
        architecture="gemma2",
        n_layers=6,
        kv_heads=[4] * 6,
        layer_bytes=[MIB] * 6,
        sliding_window=4096,
        swa_layers=[True, False] * 3,
        context_length=32768,
    )
    small = estimate_memory(gemma2, n_ctx=16384, n_batch=512, n_parallel=2)
    row = 4 * (128 + 64) * 2
    # SWA layers: pad(min(16384, 4096 + 512), 256) = 4608 cells; full layers: 16384
    assert small.layer_kv == [2 * 4608 * row, 2 * 16384 * row] * 3
    # llama.cpp's default keeps full-size SWA caches (as a draft model's context does)
    full = estimate_memory(gemma2, n_ctx=16384, n_batch=512, n_parallel=2, swa_full=True)
    assert full.layer_kv == [2 * 16384 * row] * 6
    # the small caches' checkpoints, in host memory: per slot, the window of the 3 SWA layers each
    assert small.host_bytes - full.host_bytes == 2 * SWA_CHECKPOINTS * 3 * 4096 * row
    # a window larger than the context changes nothing
    short = estimate_memory(gemma2, n_ctx=2048, swa_full=False)
    assert short.layer_kv == [2048 * row] * 6


def test_swa_patterns_per_architecture() -> None:
    assert swa_layers("gemma2", 4, 0, None) == (4096, [True, False, True, False])
    assert swa_layers("gemma3", 7, 1024, None) == (1024, [True] * 5 + [False, True])
    assert swa_layers("gemma3", 4, 0, None) == (0, [False] * 4)  # no window: no SWA
    assert swa_layers("cohere2", 4, 4096, None)[1] == [True, True, True, False]
    assert swa_layers("llama4", 4, 1234, None) == (8192, [True, True, True, False])
    assert swa_layers("smallthinker", 4, 2048, None) == (4096, [False, True, True, True])
    # the file's pattern wins over the architecture's default
    assert swa_layers("gemma3", 4, 512, 2)[1] == [True, False, True, False]
    assert swa_layers("gemma3", 3, 512, [True, False, True])[1] == [True, False, True]


def test_swa_for_other_architectures_needs_window_and_pattern() -> None:
    assert swa_layers("newarch", 6, 128, 3) == (128, [True, True, False] * 2)
    assert swa_layers("newarch", 3, 128, [False, True]) == (128, [False, True, False])
    # a window alone (e.g. Mistral's) is not used by llama.cpp: count full layers
    assert swa_layers("llama", 4, 4096, None) == (0, [False] * 4)


def test_embedding_architectures_have_no_kv_cache() -> None:
    bert = shape(architecture="bert", is_embedding=True, output_bytes=0, context_length=512)
    est = estimate_memory(bert, n_ctx=512)
    assert est.kv_bytes == 0
    assert "KV cache" not in est.describe()
    # embeddings need the whole input in one micro-batch: outputs for every token
    assert est.host_bytes > 4 * (32000 + 1024) * 512


def test_for_layers_moves_layers_then_the_head() -> None:
    est = MemoryEstimate(
        n_ctx=4096,
        n_parallel=1,
        kv_type="f16",
        layer_weights=[10, 10, 10, 10],
        layer_kv=[1, 1, 1, 1],
        embedding_weights=100,
        output_weights=40,
        output_weights_gpu=40,
        compute_bytes=7,
        host_compute_bytes=3,
        host_bytes=5,
        projector_bytes=0,
        runtime_bytes=1000,
        gpu_context_bytes=200,
    )
    assert est.total_bytes == 100 + 40 + 44 + 7 + 5 + 1000
    assert est.for_layers(0) == (0, est.total_bytes)
    # the head is the last of n_layers + 1 units, so it is offloaded first, then layer 3
    assert est.for_layers(1) == (40 + 7 + 200, 100 + 44 + 7 + 5 + 1000)
    assert est.for_layers(2) == (11 + 40 + 7 + 200, 100 + 33 + 7 + 5 + 1000)
    # a layer still on the CPU keeps a full compute buffer there
    assert est.for_layers(4) == (33 + 40 + 7 + 200, 100 + 11 + 7 + 5 + 1000)
    # all of them (-1 or anything past n_layers + 1): the host keeps a small buffer
    everything = (44 + 40 + 7 + 200, 100 + 3 + 5 + 1000)
    assert est.for_layers(5) == everything
    assert est.for_layers(-1) == everything
    assert est.for_layers(99) == everything


def test_tied_head_is_copied_only_when_offloaded() -> None:
    info = GGUFInfo(
        architecture="llama",
        quantization="Q4_1",
        parameter_count=1,
        file_size=1,
        context_length=2048,
        n_embd=576,
        n_layers=2,
        n_heads=9,
        n_kv_heads=3,
        kv_heads_by_layer=[3, 3],
        head_dim_k=64,
        head_dim_v=64,
        vocab_size=49152,
        embedding_bytes=30 * MIB,
        output_bytes=576 * 4,
        layer_bytes=[2 * MIB, 2 * MIB],
    )
    s = model_shape(info)
    assert s.output_tied
    est = estimate_memory(s, n_ctx=2048)
    assert est.output_weights == 576 * 4
    assert est.output_weights_gpu == 30 * MIB + 576 * 4
    gpu, cpu = est.for_layers(-1)
    assert gpu > 30 * MIB and cpu > 30 * MIB  # the embeddings stay on the host as well
    assert not model_shape(msgspec.structs.replace(info, output_bytes=20 * MIB)).output_tied


def test_layer_split_follows_llama_cpp_upper_bound() -> None:
    est = estimate_memory(shape(n_layers=7, kv_heads=[8] * 7, layer_bytes=[100 * MIB] * 7), n_ctx=512)
    # 8 units (7 layers + head), split 3:1 -> units 0-5 on GPU 0, 6-7 on GPU 1
    assert est.layer_devices(-1, [3.0, 1.0]) == [0, 0, 0, 0, 0, 0, 1, 1]
    # 4 offloaded units of 8: the first four stay on the CPU
    assert est.layer_devices(4, [1.0, 1.0]) == [None] * 4 + [0, 0, 1, 1]
    gpus, _ = est.device_bytes(-1, [3.0, 1.0])
    assert gpus[0] > gpus[1] > 0


def test_describe_shows_the_parts() -> None:
    big = shape(layer_bytes=[GIB] * 4, output_bytes=GIB // 2, embedding_bytes=GIB // 2)
    est = estimate_memory(big, n_ctx=4096)
    text = est.describe()
    assert text.startswith(f"needs {est.total_bytes / GIB:.1f} GiB (weights 5.0 + KV cache ")
    assert "for 4096 tokens x 1 slot + buffers " in text
    assert "4096 tokens x 4 slots" in estimate_memory(big, n_ctx=4096, n_parallel=4).describe()
    # under 1 GiB the parts are in MiB
    assert estimate_memory(shape(), n_ctx=512).describe().startswith("needs ")
    assert " MiB (weights 510.0 + " in estimate_memory(shape(), n_ctx=512).describe()


def test_a_grammar_sampler_takes_host_memory_per_vocabulary_token() -> None:
    """A grammar request walks every vocabulary token through the grammar: counted per token,
    on the host, once whatever the slots; an embedding model never samples."""
    small, big = shape(n_vocab=32000), shape(n_vocab=262144)
    for n_parallel in (1, 4):
        est = estimate_memory(small, n_ctx=1024, n_parallel=n_parallel)
        assert est.grammar_bytes == GRAMMAR_BYTES_PER_TOKEN * 32000
    est = estimate_memory(big, n_ctx=1024)
    assert est.grammar_bytes == GRAMMAR_BYTES_PER_TOKEN * 262144  # Gemma 3's vocabulary: 212 MiB
    assert est.buffers_bytes == est.compute_bytes + est.host_bytes + est.runtime_bytes
    assert est.total_bytes == est.weights_bytes + est.kv_bytes + est.buffers_bytes + est.grammar_bytes
    assert f"grammar sampler {est.grammar_bytes / MIB:.1f}" in est.describe()
    # it stays on the host when every layer is offloaded
    _, cpu = est.for_layers(-1)
    assert cpu - msgspec.structs.replace(est, grammar_bytes=0).for_layers(-1)[1] == est.grammar_bytes
    embed = estimate_memory(big, n_ctx=1024, embedding=True)
    assert embed.grammar_bytes == 0 and "grammar" not in embed.describe()


def test_the_tokenizer_is_counted_per_token_and_per_bpe_merge() -> None:
    """A BPE vocabulary keeps a map of its merge rules beside the tokens (Llama 3: 128k tokens,
    280k merges); a SentencePiece one has none (Gemma 3's 262k tokens: 42 MiB measured)."""
    spm = estimate_memory(shape(n_vocab=262144), n_ctx=1024)
    bpe = estimate_memory(shape(n_vocab=262144, n_merges=280000), n_ctx=1024)
    assert bpe.host_bytes - spm.host_bytes == VOCAB_BYTES_PER_MERGE * 280000
    tokens = VOCAB_BYTES_PER_TOKEN * 262144 + TOKENIZER_FIXED_BYTES
    assert 41.9 * MIB <= tokens <= 46 * MIB


def test_a_draft_model_adds_no_grammar_sampler(tiny_llama: Path) -> None:
    """Drafts are not held to the grammar: only the target model's vocabulary is checked."""
    opts = LoadOptions(model_id="m", path="m.gguf", n_ctx=512, n_parallel=2)
    plain = estimate_load(shape(), opts)
    est = estimate_load(shape(), msgspec.structs.replace(opts, draft_path=str(tiny_llama)))
    draft = estimate_memory(model_shape(read_gguf_info(tiny_llama)), n_ctx=512, n_parallel=2, swa_full=True)
    assert draft.grammar_bytes > 0
    assert est.draft_bytes == draft.total_bytes - draft.runtime_bytes - draft.grammar_bytes
    assert est.grammar_bytes == plain.grammar_bytes


def test_projector_is_its_file_plus_compute(tmp_path: Path) -> None:
    mmproj = tmp_path / "mmproj.gguf"
    mmproj.write_bytes(b"\0" * (3 * MIB))
    opts = LoadOptions(model_id="m", path="m.gguf", n_ctx=1024, mmproj_path=str(mmproj))
    est = estimate_load(shape(), opts)
    assert est.projector_bytes >= 3 * MIB + 16 * MIB
    assert "vision projector" in est.describe()
    plain = estimate_load(shape(), LoadOptions(model_id="m", path="m.gguf", n_ctx=1024))
    assert est.total_bytes - plain.total_bytes == est.projector_bytes
    with pytest.raises(InvalidRequest) as e:
        estimate_load(shape(), LoadOptions(model_id="m", path="m", mmproj_path=str(tmp_path / "nope")))
    assert e.value.param == "mmproj_path"


def test_lora_adapters_are_their_files(tmp_path: Path) -> None:
    adapters = [tmp_path / "a.gguf", tmp_path / "b.gguf"]
    for i, path in enumerate(adapters, 1):
        path.write_bytes(b"\0" * (i * MIB))
    lora = [LoraAdapter(path=str(p)) for p in adapters]
    est = estimate_load(shape(), LoadOptions(model_id="m", path="m.gguf", n_ctx=1024, lora=lora))
    plain = estimate_load(shape(), LoadOptions(model_id="m", path="m.gguf", n_ctx=1024))
    assert est.adapter_bytes == 3 * MIB and est.total_bytes - plain.total_bytes == 3 * MIB
    assert "LoRA adapters 3.0" in est.describe()
    assert est.for_layers(-1)[0] - plain.for_layers(-1)[0] == 3 * MIB  # beside the first layers, on the GPU
    missing = [LoraAdapter(path=str(tmp_path / "nope"))]
    with pytest.raises(InvalidRequest, match="cannot read the LoRA adapter") as e:
        estimate_load(shape(), LoadOptions(model_id="m", path="m", lora=missing))
    assert e.value.param == "lora"


def test_compute_buffer_grows_with_context_and_micro_batch() -> None:
    a = estimate_memory(shape(), n_ctx=2048, n_batch=512)
    b = estimate_memory(shape(), n_ctx=8192, n_batch=512)
    c = estimate_memory(shape(), n_ctx=2048, n_batch=64)
    # the f16 attention mask is n_ubatch x cells
    assert b.compute_bytes - a.compute_bytes == 2 * 512 * (8192 - 2048)
    assert c.compute_bytes < a.compute_bytes


def test_projector_file_is_not_a_model() -> None:
    info = GGUFInfo(architecture="clip", quantization="F16", parameter_count=1, file_size=1, is_projector=True)
    with pytest.raises(InvalidRequest):
        model_shape(info)


def test_without_flash_attention_the_compute_buffer_holds_the_scores() -> None:
    """f32 attention scores, n_ubatch x cells x query heads, on each device running layers."""
    on = estimate_memory(shape(n_heads=16), n_ctx=4096, n_parallel=2, flash_attention="on")
    off = estimate_memory(shape(n_heads=16), n_ctx=4096, n_parallel=2, flash_attention="off")
    scores = 4 * 512 * 4096 * 16
    assert off.compute_bytes - on.compute_bytes == scores
    assert off.total_bytes - on.total_bytes == scores
    assert off.for_layers(-1)[0] - on.for_layers(-1)[0] == scores
    assert estimate_memory(shape(n_heads=16), n_ctx=4096, n_parallel=2) == on  # auto: on, as llama.cpp picks
    # heads unknown: as many as the most KV heads (8 here)
    unknown = estimate_memory(shape(), n_ctx=4096, flash_attention="off").compute_bytes
    assert unknown - estimate_memory(shape(), n_ctx=4096).compute_bytes == 4 * 512 * 4096 * 8
