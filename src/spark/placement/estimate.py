"""How much memory a model will take once loaded, from its GGUF metadata alone.

The arithmetic follows the vendored llama.cpp (llama-cpp-python 0.3.36) and the
context parameters `spark.engine` creates: one KV stream per slot
(`kv_unified = false`), flash attention on unless the options turn it off
(llama.cpp's "auto" picks it on CPU and CUDA), the model memory-mapped.

- Weights: per repeating layer, the output head and the token embeddings. The
  embeddings always stay in host memory. The head is the last of n_layers + 1
  offloadable units (layers go from the last one down: the first GPU layer
  this llama.cpp offloads is the head). A head tied to the embeddings costs
  nothing extra on the CPU (the mapping is shared) but is copied when offloaded.
- KV cache, per layer: cells x n_head_kv x (k_len + v_len) x bytes per element,
  with cells = n_ctx rounded up to 256 for each slot. Sliding-window layers hold
  min(n_ctx, window + n_ubatch) cells (rounded up to 256), as the engine creates
  them (llama-server's default), unless the context keeps full-size SWA caches
  (`swa_full`, llama.cpp's context default, which a draft model's context keeps).
  The engine then keeps up to `SWA_CHECKPOINTS` checkpoints per slot in host
  memory, each the window of every sliding-window layer (`spark.engine.checkpoints`).
- Compute buffers: the larger of the layer phase (activations
  4 x (3 n_ff + 4 n_embd) bytes per micro-batch token, plus the f16 attention
  mask n_ubatch x cells) and the output phase (logits for n_parallel outputs:
  one per slot, all the engine asks for; llama.cpp reserves that much when the
  context sets `n_outputs_max = n_parallel`, and otherwise n_ubatch rows it never
  touches on the CPU). Without flash attention the layer phase also holds the
  f32 attention scores, n_ubatch x cells x n_head.
  Calibrated against llama.cpp's `sched_reserve` sizes and the resident memory
  of SmolLM2-135M and the tiny test models; it matches SmolLM2 within a few
  percent and over-counts non-gated FFNs (BERT) by up to 2x.
- Host buffers: the logits (or, for embeddings, per-token embeddings and
  logits) output buffer, the vocabulary (about 320 bytes per token plus 2 MiB
  for the tokenizer) and llama.cpp's fixed cost (4 MiB: backend, thread pool).
- Grammar sampler: a request held to a grammar (JSON mode, a JSON schema, a forced
  tool call, a client's GBNF or regex) checks every vocabulary token against it for
  each token it samples. llama.cpp's grammar_apply decodes every token's text to code
  points and walks the grammar one code point at a time, with new candidate lists at
  each step: inside a JSON string, where nearly every token can follow, that takes
  about 850 bytes per vocabulary token at the peak, which glibc then keeps for the next
  request (malloc_trim would hand it back, but the next grammar token needs it again:
  the peak is what must fit). It does not grow with slots (the engine samples slots one
  after another) or with requests.
- LoRA adapters: their files' size (llama.cpp reads their tensors into memory).
- The runner process itself and, when a vision projector is attached, its
  file plus its compute. The projector's compute depends on the image size its
  header declares, which is not read here: a quarter of the file, at least
  16 MiB, is a rule of thumb (the tiny test projector needs 0.02 MiB).
"""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Literal

import msgspec

from spark.errors import InvalidRequest
from spark.library.metadata import GGUFInfo, read_gguf_info
from spark.types import FlashAttention, LoadOptions

KvType = Literal["f16", "q8_0", "q4_0"]

MIB = 2**20
GIB = 2**30

# (block size, bytes per block) of each KV cache type, as ggml stores it
KV_BLOCKS: dict[str, tuple[int, int]] = {"f16": (1, 2), "q8_0": (32, 34), "q4_0": (32, 18)}

# RSS of a runner before it loads a model: 35 MiB measured for Python with the engine's
# imports (llama.cpp's bindings, msgspec, Jinja) on Linux x86-64, rounded up generously for
# thread stacks, socket buffers and other platforms.
RUNNER_BYTES = 64 * MIB
LLAMA_FIXED_BYTES = 4 * MIB  # ggml contexts, thread pool, first decode (measured 1.5-3 MiB)
# The tokenizer: each token's text, its entry in the text-to-id map and its cached piece; each BPE
# merge rule a map node holding two strings. Measured: Gemma 3 (262k tokens, no merges) 41.9 MiB,
# SmolLM2 (49k tokens, 49k merges) 16.8 MiB, MiniLM (31k tokens) 4.9 MiB, a 512-token model 2.7 MiB.
TOKENIZER_FIXED_BYTES = 2 * MIB
VOCAB_BYTES_PER_TOKEN = 170
VOCAB_BYTES_PER_MERGE = 150
# Peak RSS a runner gains on grammar requests, per vocabulary token: measured 620 (a two-word
# GBNF) to 840 (a JSON schema) with SmolLM2-135M (49k tokens: +30 to +39 MiB), 650 to 690 with
# Gemma 3 270M (262k tokens: +164 to +171 MiB), the same for 1 to 4 slots and after many requests.
GRAMMAR_BYTES_PER_TOKEN = 850
# What a CUDA context, cuBLAS and llama.cpp's kernels take on each GPU a runner
# uses; typical of CUDA 12 with lazy module loading (not measurable here).
GPU_CONTEXT_BYTES = 384 * MIB
PROJECTOR_FIXED_BYTES = 4 * MIB  # the clip context (measured 3.5 MiB)
PROJECTOR_MIN_COMPUTE = 16 * MIB  # and at least a quarter of the file

KV_PAD = 256  # llama.cpp pads context sizes and SWA caches to this many cells
UBATCH_MAX = 512  # the engine's micro-batch for generation
SWA_CHECKPOINTS = 3  # per slot, as `spark.engine.checkpoints.PER_SLOT` keeps

# Architectures whose context has no KV cache at all (llama_model::create_memory).
NO_KV_ARCHITECTURES = frozenset(
    {
        "bert",
        "modern-bert",
        "nomic-bert",
        "nomic-bert-moe",
        "neo-bert",
        "jina-bert-v2",
        "jina-bert-v3",
        "eurobert",
        "gemma-embedding",
        "wavtokenizer-dec",
        "dream",
        "llada",
        "llada-moe",
        "rnd1",
    }
)


class _SwaRule(msgspec.Struct, frozen=True):
    """How llama.cpp lays out sliding-window layers for one architecture."""

    pattern: int  # every `pattern`-th layer is full attention (0: all SWA)
    dense_first: bool = False  # the full layer opens each group instead of closing it
    default_window: int = 0  # used when the file names no window
    fixed_window: int = 0  # llama.cpp ignores the file's window and uses this
    needs_window: bool = False  # no window key (or 0) means no SWA at all


# From the architectures' load_arch_hparams in llama.cpp's src/models/*.cpp.
SWA_RULES: dict[str, _SwaRule] = {
    "gemma2": _SwaRule(2, default_window=4096),
    "gemma3": _SwaRule(6, needs_window=True),
    "gemma3n": _SwaRule(5),
    "cohere2": _SwaRule(4),
    "llama4": _SwaRule(4, fixed_window=8192),  # chunked attention, 3 chunked : 1 full
    "gpt-oss": _SwaRule(2),
    "olmo2": _SwaRule(4, needs_window=True),
    "smallthinker": _SwaRule(4, dense_first=True, fixed_window=4096, needs_window=True),
}


class ModelShape(msgspec.Struct, frozen=True, kw_only=True):
    """What the estimate needs to know about a model; build it with `model_shape`."""

    architecture: str
    n_layers: int
    n_embd: int
    n_ff: int
    n_vocab: int
    n_merges: int = 0  # BPE merge rules
    context_length: int = 0  # training context; 0 when unknown
    n_heads: int = 0  # query heads (0: unknown, then as many as the most KV heads)
    kv_heads: list[int]  # per layer
    head_dim_k: int
    head_dim_v: int
    sliding_window: int = 0
    swa_layers: list[bool] = []  # per layer: attends only to the sliding window
    layer_bytes: list[int]  # weights of each repeating layer
    output_bytes: int  # output head and norm as stored (just the norm when tied)
    output_tied: bool = False  # the head reuses the token embeddings
    embedding_bytes: int
    is_embedding: bool = False

    @property
    def has_kv_cache(self) -> bool:
        return self.architecture not in NO_KV_ARCHITECTURES


def swa_layers(
    architecture: str, n_layers: int, window: int, pattern: int | list[bool] | None
) -> tuple[int, list[bool]]:
    """(window, which layers use it) as llama.cpp decides, from the file's
    `sliding_window` and `sliding_window_pattern` values (0 / None when absent).

    Unknown architectures get SWA only when the file gives both a window and a
    pattern; otherwise every layer is counted as full attention, which can only
    over-estimate.
    """
    rule = SWA_RULES.get(architecture)
    if rule is None:
        if not window or pattern is None:
            return 0, [False] * n_layers
        rule = _SwaRule(0)
    if rule.needs_window and not window:
        return 0, [False] * n_layers
    window = rule.fixed_window or window or rule.default_window
    if not window:
        return 0, [False] * n_layers
    if isinstance(pattern, list):
        flags = [bool(p) for p in pattern[:n_layers]]
        return window, flags + [False] * (n_layers - len(flags))
    n = rule.pattern if pattern is None else pattern
    if rule.dense_first:
        return window, [n == 0 or i % n != 0 for i in range(n_layers)]
    return window, [n == 0 or i % n < n - 1 for i in range(n_layers)]


def model_shape(info: GGUFInfo, *, n_ff: int | None = None, swa_pattern: int | list[bool] | None = None) -> ModelShape:
    """The estimate's input from a model's GGUF metadata.

    `n_ff` is the feed-forward width a token goes through (`feed_forward_length`;
    for mixture-of-experts, expert width x experts used), `info.n_ff` unless
    given; when neither says, 4 x n_embd, the usual transformer ratio, is
    assumed. `swa_pattern` is the file's `<arch>.attention.sliding_window_pattern`
    value, `info.sliding_window_pattern` unless given.
    """
    if info.is_projector:
        raise InvalidRequest(f"{info.name or info.architecture} is a vision projector, not a model", param="model")
    n_layers = info.n_layers
    kv_heads = list(info.kv_heads_by_layer) or [info.n_kv_heads] * n_layers
    pattern = swa_pattern if swa_pattern is not None else info.sliding_window_pattern
    window, swa = swa_layers(info.architecture, n_layers, info.sliding_window or 0, pattern)
    # an untied head is a vocab x n_embd matrix; a tied one leaves only its norm (and bias)
    tied = not info.is_embedding and info.output_bytes <= 8 * info.n_embd
    return ModelShape(
        architecture=info.architecture,
        n_layers=n_layers,
        n_embd=info.n_embd,
        n_ff=n_ff or info.n_ff or 4 * info.n_embd,
        n_vocab=info.vocab_size,
        n_merges=info.merges,
        context_length=info.context_length,
        n_heads=info.n_heads,
        kv_heads=kv_heads,
        head_dim_k=info.head_dim_k,
        head_dim_v=info.head_dim_v,
        sliding_window=window,
        swa_layers=swa,
        layer_bytes=list(info.layer_bytes),
        output_bytes=info.output_bytes,
        output_tied=tied,
        embedding_bytes=info.embedding_bytes,
        is_embedding=info.is_embedding,
    )


class MemoryEstimate(msgspec.Struct, frozen=True, kw_only=True):
    """Every part of a loaded model's memory, in bytes.

    `total_bytes` is the model on the CPU alone; `for_layers` and
    `device_bytes` split it between GPUs and the host for a given offload.
    """

    n_ctx: int  # tokens per slot, as llama.cpp sizes it
    n_parallel: int
    kv_type: str
    layer_weights: list[int]
    layer_kv: list[int]  # all slots together
    embedding_weights: int
    output_weights: int  # the head when it stays on the CPU
    output_weights_gpu: int  # the head when offloaded (a copy of the embeddings when tied)
    compute_bytes: int  # compute buffer of each device that runs layers
    host_compute_bytes: int  # what stays on the host when every layer is offloaded
    host_bytes: int  # output buffer, vocabulary, llama.cpp's fixed cost, sliding-window checkpoints
    grammar_bytes: int = 0  # a grammar sampler's working set over the vocabulary (host; none for embeddings)
    projector_bytes: int = 0  # vision projector weights and compute
    draft_bytes: int = 0  # the draft model: weights, its KV cache and buffers (beside the projector)
    adapter_bytes: int = 0  # LoRA adapters' weights (beside the projector)
    runtime_bytes: int = RUNNER_BYTES  # the runner process
    gpu_context_bytes: int = GPU_CONTEXT_BYTES  # per GPU in use
    measured_extra_bytes: int = 0  # host memory an earlier run measured beyond the estimate (in host_bytes)

    @property
    def n_layers(self) -> int:
        return len(self.layer_weights)

    @property
    def weights_bytes(self) -> int:
        return self.embedding_weights + sum(self.layer_weights) + self.output_weights

    @property
    def kv_bytes(self) -> int:
        return sum(self.layer_kv)

    @property
    def buffers_bytes(self) -> int:
        return self.compute_bytes + self.host_bytes + self.runtime_bytes

    @property
    def total_bytes(self) -> int:
        """Everything, with the model on the CPU."""
        return self.weights_bytes + self.kv_bytes + self.buffers_bytes + self.grammar_bytes + self._extras_bytes

    @property
    def _extras_bytes(self) -> int:
        """What goes beside the model's first layers: projector, draft model, adapters."""
        return self.projector_bytes + self.draft_bytes + self.adapter_bytes

    def for_layers(self, n_gpu_layers: int) -> tuple[int, int]:
        """(GPU bytes, CPU bytes) with `n_gpu_layers` offloaded to one GPU (-1: all)."""
        gpus, cpu = self.device_bytes(n_gpu_layers, [1.0])
        return gpus[0], cpu

    def layer_devices(self, n_gpu_layers: int, split: list[float]) -> list[int | None]:
        """The GPU (position in `split`) of each layer and then of the output head;
        None for the CPU. Mirrors llama.cpp's layer assignment in load_tensors."""
        n = self.n_layers
        ngl = n + 1 if n_gpu_layers < 0 else n_gpu_layers
        start = max(n + 1 - ngl, 0)
        active = min(ngl, n + 1)
        total = sum(split)
        if active <= 0 or total <= 0:
            return [None] * (n + 1)
        bounds, acc = [], 0.0
        for s in split:
            acc += s
            bounds.append(acc / total)
        out: list[int | None] = []
        for il in range(n + 1):
            if il < start:
                out.append(None)
                continue
            # std::upper_bound over the cumulative split points
            out.append(min(bisect.bisect_right(bounds, (il - start) / active), len(split) - 1))
        return out

    def device_bytes(self, n_gpu_layers: int, split: list[float]) -> tuple[list[int], int]:
        """(bytes on each GPU in `split`, bytes on the CPU) for that offload.

        `split` is llama.cpp's tensor_split: the share of offloaded layers per GPU.
        """
        where = self.layer_devices(n_gpu_layers, split)
        gpus = [0] * len(split)
        cpu = self.embedding_weights + self.host_bytes + self.grammar_bytes + self.runtime_bytes
        for il, device in enumerate(where[:-1]):
            part = self.layer_weights[il] + self.layer_kv[il]
            if device is None:
                cpu += part
            else:
                gpus[device] += part
        head = where[-1]
        if head is None:
            cpu += self.output_weights
        else:
            gpus[head] += self.output_weights_gpu
        used = [k for k in range(len(split)) if gpus[k]]
        for k in used:
            gpus[k] += self.compute_bytes + self.gpu_context_bytes
        cpu += self.compute_bytes if not used or None in where else self.host_compute_bytes
        if used:
            gpus[used[0]] += self._extras_bytes
        else:
            cpu += self._extras_bytes
        return gpus, cpu

    def with_measurement(self, measured_host_bytes: int) -> MemoryEstimate:
        """This estimate, raised to what an earlier run of the same model and options measured on the
        host (the runner process excluded) where that was more: a model that outgrew its estimate
        (or was killed for memory) is planned at its real size the next time."""
        extra = measured_host_bytes - (self.total_bytes - self.runtime_bytes)
        if extra <= 0:
            return self
        return msgspec.structs.replace(self, host_bytes=self.host_bytes + extra, measured_extra_bytes=extra)

    def describe(self) -> str:
        """`needs 5.1 GiB (weights 4.4 + KV cache 0.5 for 4096 tokens x 1 slot + buffers 0.2)`."""
        unit, name = (GIB, "GiB") if self.total_bytes >= GIB else (MIB, "MiB")

        def fmt(n: int) -> str:
            return f"{n / unit:.1f}"

        slots = f"{self.n_parallel} slot" + ("s" if self.n_parallel != 1 else "")
        parts = [f"weights {fmt(self.weights_bytes)}"]
        if self.kv_bytes:
            kv = "" if self.kv_type == "f16" else f" {self.kv_type}"
            parts.append(f"KV cache{kv} {fmt(self.kv_bytes)} for {self.n_ctx} tokens x {slots}")
        parts.append(f"buffers {fmt(self.buffers_bytes - self.measured_extra_bytes)}")
        if self.grammar_bytes:
            parts.append(f"grammar sampler {fmt(self.grammar_bytes)}")
        if self.measured_extra_bytes:
            parts.append(f"{fmt(self.measured_extra_bytes)} more measured when it last ran")
        if self.projector_bytes:
            parts.append(f"vision projector {fmt(self.projector_bytes)}")
        if self.draft_bytes:
            parts.append(f"draft model {fmt(self.draft_bytes)}")
        if self.adapter_bytes:
            parts.append(f"LoRA adapters {fmt(self.adapter_bytes)}")
        return f"needs {fmt(self.total_bytes)} {name} ({' + '.join(parts)})"


def _pad(n: int, to: int = KV_PAD) -> int:
    return -(-n // to) * to


def _row_bytes(n_elements: int, kv_type: str) -> int:
    block, size = KV_BLOCKS[kv_type]
    return -(-n_elements // block) * size


def estimate_memory(
    shape: ModelShape,
    *,
    n_ctx: int,
    n_parallel: int = 1,
    kv_type: KvType = "f16",
    flash_attention: FlashAttention = "auto",
    n_batch: int = 512,
    embedding: bool = False,
    mmproj_bytes: int = 0,
    swa_full: bool = False,
) -> MemoryEstimate:
    """Memory for `shape` loaded as the engine loads it.

    `n_ctx` is tokens per slot (0: the training context; never past it), as in
    `LoadOptions`. The context reserves logits for `n_parallel` outputs per
    micro-batch (`n_outputs_max`), one per slot. `swa_full` is llama.cpp's
    context flag: SWA layers keep the whole context (a draft model's context)
    rather than their window, a micro-batch and the checkpoints of the window.
    """
    if kv_type not in KV_BLOCKS:
        raise InvalidRequest(f"kv_type must be one of {', '.join(KV_BLOCKS)}, not {kv_type!r}", param="kv_type")
    if n_parallel < 1:
        raise InvalidRequest(f"n_parallel must be at least 1, not {n_parallel}", param="n_parallel")
    if n_ctx < 0 or n_batch < 1:
        raise InvalidRequest(f"bad context size {n_ctx} or batch {n_batch}", param="n_ctx" if n_ctx < 0 else "n_batch")
    train = shape.context_length
    per_slot = min(n_ctx or train, train) if train > 0 else n_ctx
    if per_slot <= 0:
        raise InvalidRequest("the model states no training context: give a context length", param="n_ctx")

    embed = embedding or shape.is_embedding
    # llama_context: n_batch is clipped to the (unpadded) context for causal models,
    # then n_ctx is padded to 256 and split into one stream per slot.
    if embed:
        n_batch = n_ubatch = max(n_batch, per_slot)
    else:
        n_batch = min(per_slot * n_parallel, n_batch)
        n_ubatch = min(n_batch, UBATCH_MAX)
    cells = _pad(_pad(per_slot * n_parallel) // n_parallel)
    swa_cells = cells if swa_full else min(cells, _pad(shape.sliding_window + n_ubatch))

    layer_kv = []
    window_bytes = 0  # one checkpoint: the window of every sliding-window layer
    for il in range(shape.n_layers):
        heads = shape.kv_heads[il] if il < len(shape.kv_heads) else 0
        if not shape.has_kv_cache or heads == 0:
            layer_kv.append(0)
            continue
        swa = il < len(shape.swa_layers) and shape.swa_layers[il]
        row = _row_bytes(heads * shape.head_dim_k, kv_type) + _row_bytes(heads * shape.head_dim_v, kv_type)
        layer_kv.append(n_parallel * (swa_cells if swa else cells) * row)
        window_bytes += min(shape.sliding_window, cells) * row if swa else 0

    any_swa = any(shape.swa_layers) and shape.has_kv_cache
    kv_span = cells if shape.has_kv_cache else n_ubatch  # attention sees the batch itself without a cache
    mask = 2 * n_ubatch * (kv_span + (swa_cells if any_swa else 0))
    layer_phase = n_ubatch * 4 * (3 * shape.n_ff + 4 * shape.n_embd) + mask
    if flash_attention == "off":  # the f32 attention scores of a micro-batch against the whole cache
        layer_phase += 4 * n_ubatch * kv_span * (shape.n_heads or max(shape.kv_heads, default=0))
    output_phase = 0 if embed else 4 * (shape.n_vocab * n_parallel + 2 * shape.n_embd * n_ubatch)
    compute = max(layer_phase, output_phase)
    host_compute = n_ubatch * shape.n_embd * 12  # inputs and the gathered outputs

    outputs = (shape.n_vocab + shape.n_embd) * n_batch if embed else shape.n_vocab * n_parallel
    vocab = TOKENIZER_FIXED_BYTES + VOCAB_BYTES_PER_TOKEN * shape.n_vocab + VOCAB_BYTES_PER_MERGE * shape.n_merges
    host = 4 * outputs + vocab + LLAMA_FIXED_BYTES
    if not swa_full and not embed:
        host += n_parallel * SWA_CHECKPOINTS * window_bytes

    projector = 0
    if mmproj_bytes:
        projector = mmproj_bytes + max(mmproj_bytes // 4, PROJECTOR_MIN_COMPUTE) + PROJECTOR_FIXED_BYTES

    return MemoryEstimate(
        n_ctx=per_slot,
        n_parallel=n_parallel,
        kv_type=kv_type,
        layer_weights=list(shape.layer_bytes),
        layer_kv=layer_kv,
        embedding_weights=shape.embedding_bytes,
        output_weights=shape.output_bytes,
        output_weights_gpu=shape.output_bytes + (shape.embedding_bytes if shape.output_tied else 0),
        compute_bytes=compute,
        host_compute_bytes=host_compute,
        host_bytes=host,
        grammar_bytes=0 if embed else GRAMMAR_BYTES_PER_TOKEN * shape.n_vocab,
        projector_bytes=projector,
    )


def estimate_load(shape: ModelShape, options: LoadOptions) -> MemoryEstimate:
    """`estimate_memory` for a runner's `LoadOptions` (reads the projector's and adapters' file sizes
    and the draft model's header)."""
    mmproj = _file_size(options.mmproj_path, "the vision projector", "mmproj_path") if options.mmproj_path else 0
    adapters = sum(_file_size(a.path, "the LoRA adapter", "lora") for a in options.lora)
    estimate = estimate_memory(
        shape,
        n_ctx=options.n_ctx,
        n_parallel=options.n_parallel,
        kv_type=options.kv_type,
        flash_attention=options.flash_attention,
        n_batch=options.n_batch,
        embedding=options.embedding,
        mmproj_bytes=mmproj,
    )
    if adapters:
        estimate = msgspec.structs.replace(estimate, adapter_bytes=adapters)
    if not options.draft_path:
        return estimate
    # the draft model runs in the same process, with a context of the same slots and length
    draft = estimate_memory(
        model_shape(read_gguf_info(options.draft_path)),
        n_ctx=estimate.n_ctx,
        n_parallel=options.n_parallel,
        kv_type=options.kv_type,
        flash_attention=options.flash_attention,
        n_batch=options.n_batch,
        swa_full=True,  # as the engine's draft context
    )
    # its drafts are not held to the request's grammar: only the target's vocabulary is checked
    own = draft.total_bytes - draft.runtime_bytes - draft.grammar_bytes
    return msgspec.structs.replace(estimate, draft_bytes=own)


def _file_size(path: str, what: str, param: str) -> int:
    try:
        return Path(path).stat().st_size
    except OSError as e:
        raise InvalidRequest(f"cannot read {what} {path}: {e.strerror or e}", param=param) from None
