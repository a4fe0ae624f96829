"""Thin handles over llama.cpp's C API: backend, log bridge, model, context, batch.

Only what the engine needs, each with an explicit `close()`. llama.cpp's own
log lines go to the `spark.engine.llama` logger; the last error lines are kept
so that a failed load can say why.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from llama_cpp import llama_cpp as lc

from spark.errors import ModelFileError, RunnerFailed

log = logging.getLogger("spark.engine.llama")

# ggml_log_level: 1 debug, 2 info, 3 warn, 4 error, 5 continues the previous line.
_GGML_LEVELS = {1: logging.DEBUG, 2: logging.DEBUG, 3: logging.WARNING, 4: logging.ERROR}
_recent_errors: collections.deque[str] = collections.deque(maxlen=8)
_last_level = logging.DEBUG
_backend_lock = threading.Lock()
_backend_ready = False


@lc.llama_log_callback
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    global _last_level
    py_level = _last_level if level == 5 else _GGML_LEVELS.get(level, logging.DEBUG)
    _last_level = py_level
    line = text.decode("utf-8", errors="replace").rstrip("\n")
    if py_level >= logging.ERROR and line:
        _recent_errors.append(line)
    if line and log.isEnabledFor(py_level):
        log.log(py_level, "%s", line)


def init_backend() -> None:
    """Initialise llama.cpp once per process and route its logging to Python."""
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            lc.llama_log_set(_log_callback, ctypes.c_void_p(0))
            lc.llama_backend_init()
            _backend_ready = True


def _recent_error_text() -> str:
    text = " / ".join(_recent_errors)
    _recent_errors.clear()
    return text


KV_TYPES = {"f16": lc.GGML_TYPE_F16, "q8_0": lc.GGML_TYPE_Q8_0, "q4_0": lc.GGML_TYPE_Q4_0}


class Model:
    """A loaded GGUF model and its vocabulary."""

    def __init__(
        self,
        path: str,
        *,
        n_gpu_layers: int = 0,
        main_gpu: int = 0,
        tensor_split: list[float] | None = None,
    ) -> None:
        """Load `path`; raises `ModelFileError` for a file llama.cpp cannot use."""
        init_backend()
        _check_gguf(path)
        params = lc.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.main_gpu = main_gpu
        if tensor_split:
            n_dev = lc.llama_max_devices()
            split = (ctypes.c_float * n_dev)(*tensor_split[:n_dev])
            params.tensor_split = split
        _recent_errors.clear()
        ptr = lc.llama_model_load_from_file(os.fsencode(path), params)
        if not ptr:
            why = _recent_error_text() or "unsupported architecture or damaged file"
            raise ModelFileError(f"llama.cpp could not load {path}: {why}", param="path")
        self.ptr = ptr
        self.vocab = lc.llama_model_get_vocab(ptr)
        self.n_vocab = lc.llama_vocab_n_tokens(self.vocab)
        self.n_embd = lc.llama_model_n_embd(ptr)
        # Width of pooled embeddings; older models report 0 and use n_embd.
        self.n_embd_out = lc.llama_model_n_embd_out(ptr) or self.n_embd
        self.n_params = lc.llama_model_n_params(ptr)
        self.size_bytes = lc.llama_model_size(ptr)
        self.n_ctx_train = lc.llama_model_n_ctx_train(ptr)
        self.bos = lc.llama_vocab_bos(self.vocab)
        self.eos = lc.llama_vocab_eos(self.vocab)
        self.add_bos = bool(lc.llama_vocab_get_add_bos(self.vocab))
        # Per-token answers cached: these run once per generated token.
        self._pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}
        self._piece_buf = ctypes.create_string_buffer(256)

    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as text, or None when the key is absent."""
        size = 1024
        while True:
            buf = ctypes.create_string_buffer(size)
            n = lc.llama_model_meta_val_str(self.ptr, key.encode(), buf, size)
            if n < 0:
                return None
            if n < size:
                return buf.value.decode("utf-8", errors="replace")
            size = n + 1

    def chat_template(self) -> str | None:
        """The model's default chat template (`tokenizer.chat_template`), if any."""
        raw = lc.llama_model_chat_template(self.ptr, None)
        return raw.decode("utf-8", errors="replace") if raw else None

    def token_text(self, token: int) -> str:
        """The vocabulary's text of a token (e.g. "<s>"), or "" for no token."""
        if token < 0:
            return ""
        raw = lc.llama_vocab_get_text(self.vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """Token ids of `text` (`add_special` adds BOS/EOS as the model asks)."""
        data = text.encode("utf-8")
        n_max = len(data) + 8
        buf = (lc.llama_token * n_max)()
        n = lc.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        if n < 0:
            n_max = -n
            buf = (lc.llama_token * n_max)()
            n = lc.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        return buf[:n]

    def piece(self, token: int) -> bytes:
        """The bytes a generated token stands for (control tokens render as nothing)."""
        cached = self._pieces.get(token)
        if cached is not None:
            return cached
        buf = self._piece_buf
        n = lc.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lc.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
        out = buf.raw[:n]
        self._pieces[token] = out
        return out

    def is_eog(self, token: int) -> bool:
        """Whether the token ends generation (EOS, EOT, ...)."""
        eog = self._eog.get(token)
        if eog is None:
            eog = self._eog[token] = bool(lc.llama_vocab_is_eog(self.vocab, token))
        return eog

    def grammar_sampler(
        self,
        text: str,
        root: str,
        *,
        trigger_patterns: Sequence[str] = (),
        trigger_tokens: Sequence[int] = (),
    ) -> lc.llama_sampler_p | None:
        """A grammar sampler over this vocabulary, or None when llama.cpp refuses the grammar.

        With trigger patterns or tokens the grammar is lazy: it applies from the
        first trigger on (a pattern's first capture group starts it).
        """
        if not trigger_patterns and not trigger_tokens:
            ptr = lc.llama_sampler_init_grammar(self.vocab, text.encode(), root.encode())
        else:
            c_patterns = (ctypes.c_char_p * max(1, len(trigger_patterns)))(*(p.encode() for p in trigger_patterns))
            c_tokens = (lc.llama_token * max(1, len(trigger_tokens)))(*trigger_tokens)
            ptr = lc.llama_sampler_init_grammar_lazy_patterns(
                self.vocab,
                text.encode(),
                root.encode(),
                c_patterns,
                len(trigger_patterns),
                c_tokens,
                len(trigger_tokens),
            )
        return ptr or None

    def close(self) -> None:
        if self.ptr:
            lc.llama_model_free(self.ptr)
            self.ptr = None


def _check_gguf(path: str) -> None:
    p = Path(path)
    try:
        with p.open("rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelFileError(f"cannot read the model file {path}: {e.strerror}", param="path") from None
    if magic != b"GGUF":
        raise ModelFileError(f"{path} is not a GGUF model file", param="path")


def create_context(
    model: Model,
    *,
    n_ctx: int,
    n_seq_max: int,
    n_batch: int,
    n_ubatch: int,
    n_threads: int,
    kv_type: str,
    embedding: bool,
    pooling: int = lc.LLAMA_POOLING_TYPE_UNSPECIFIED,
) -> ctypes.c_void_p:
    """A llama.cpp context; raises `RunnerFailed` when it cannot be created (e.g. out of memory)."""
    params = lc.llama_context_default_params()
    params.n_ctx = n_ctx
    params.n_seq_max = n_seq_max
    params.n_batch = n_batch
    params.n_ubatch = n_ubatch
    params.n_threads = n_threads
    params.n_threads_batch = n_threads
    params.type_k = KV_TYPES[kv_type]
    params.type_v = KV_TYPES[kv_type]
    params.embeddings = embedding
    params.pooling_type = pooling
    params.no_perf = True
    # One KV stream per slot (llama-server's default): slots never compete for cells.
    params.kv_unified = False
    _recent_errors.clear()
    ctx = lc.llama_init_from_model(model.ptr, params)
    if not ctx:
        why = _recent_error_text() or "out of memory?"
        raise RunnerFailed(f"llama.cpp could not create a context of {n_ctx} tokens: {why}")
    return ctx


class Batch:
    """A reusable `llama_batch` whose arrays are numpy buffers we own (one sequence per token)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.n = 0
        self.token = np.zeros(capacity, dtype=np.int32)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.ones(capacity, dtype=np.int32)
        self.seq = np.zeros(capacity, dtype=np.int32)
        self.logits = np.zeros(capacity, dtype=np.int8)
        int_p = ctypes.POINTER(ctypes.c_int32)
        base = self.seq.ctypes.data
        self._seq_ptrs = (int_p * capacity)(*(ctypes.cast(base + 4 * i, int_p) for i in range(capacity)))
        self._struct = lc.llama_batch(
            n_tokens=0,
            token=self.token.ctypes.data_as(int_p),
            embd=None,
            pos=self.pos.ctypes.data_as(int_p),
            n_seq_id=self.n_seq_id.ctypes.data_as(int_p),
            seq_id=self._seq_ptrs,
            logits=self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8)),
        )

    @property
    def room(self) -> int:
        return self.capacity - self.n

    def clear(self) -> None:
        self.n = 0

    def add(self, token: int, pos: int, seq: int, output: bool) -> int:
        """Append one token; returns its index (the output row when `output`)."""
        i = self.n
        self.token[i] = token
        self.pos[i] = pos
        self.seq[i] = seq
        self.logits[i] = output
        self.n = i + 1
        return i

    def add_run(self, tokens: Sequence[int], pos: int, seq: int, output: Literal["none", "last", "all"]) -> int:
        """Append consecutive tokens of one sequence from position `pos`.

        `output` says which of them produce logits/embeddings; returns the last index.
        """
        i, j = self.n, self.n + len(tokens)
        self.token[i:j] = tokens
        self.pos[i:j] = np.arange(pos, pos + len(tokens), dtype=np.int32)
        self.seq[i:j] = seq
        self.logits[i:j] = 1 if output == "all" else 0
        if output == "last":
            self.logits[j - 1] = 1
        self.n = j
        return j - 1

    def decode(self, ctx: ctypes.c_void_p) -> int:
        """`llama_decode` on the tokens added since `clear()` (the GIL is released meanwhile)."""
        self._struct.n_tokens = self.n
        return lc.llama_decode(ctx, self._struct)
