"""Thin handles over llama.cpp's C API: backend, log bridge, model, context, batch.

The rest of the engine calls llama.cpp through these (libmtmd aside, in
`vision`, and the sampler chains of `sampling`). Only what the engine needs,
each with an explicit `close()`. llama.cpp's own log lines go to the
`spark.engine.llama` logger; the last error lines are kept so that a failed
load can say why.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import logging
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeAlias, cast

from spark.engine.bindings import bindings_version, lc
from spark.errors import ModelFileError, RunnerFailed
from spark.types import LoraAdapter
from spark.units import format_bytes

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

log = logging.getLogger("spark.engine.llama")

# ggml_log_level: 1 debug, 2 info, 3 warn, 4 error, 5 continues the previous line.
_GGML_LEVELS = {1: logging.DEBUG, 2: logging.DEBUG, 3: logging.WARNING, 4: logging.ERROR}
# warnings about what Spark asks for on purpose (mean pooling where a model names none): not worth a warning
_EXPECTED = ("llama_init_from_model: model default pooling_type is",)
# A llama.cpp sampler as the bindings hand it out (typed for checkers only).
SamplerPointer: TypeAlias = "lc.llama_sampler_p"
AdapterPointer: TypeAlias = "ctypes._Pointer[ctypes.c_void_p]"  # a llama.cpp LoRA adapter
_DRY_PROTOTYPES = 8  # DRY samplers kept per model, one per parameter set
_backend_lock = threading.Lock()
_backend_ready = False


class LogBridge:
    """Routes a ggml log callback (llama.cpp's, libmtmd's) to a Python logger.

    `callback` is what the C library is given; it must stay referenced for as
    long as the library may call it. With `keep_errors`, the last error lines
    are kept for `recent_errors` (a failed load says why).
    """

    def __init__(self, logger: logging.Logger, *, keep_errors: bool = False) -> None:
        self._logger = logger
        self._last_level = logging.DEBUG
        self._errors: collections.deque[str] | None = collections.deque(maxlen=8) if keep_errors else None
        self.callback = lc.llama_log_callback(self._log)

    def _log(self, level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
        py_level = self._last_level if level == 5 else _GGML_LEVELS.get(level, logging.DEBUG)
        line = text.decode("utf-8", errors="replace").rstrip("\n")
        if line.startswith(_EXPECTED):
            py_level = logging.DEBUG
        self._last_level = py_level
        if self._errors is not None and py_level >= logging.ERROR and line:
            self._errors.append(line)
        if line and self._logger.isEnabledFor(py_level):
            self._logger.log(py_level, "%s", line)

    def clear_errors(self) -> None:
        if self._errors is not None:
            self._errors.clear()

    def recent_errors(self) -> str:
        """The error lines since `clear_errors`, joined (and cleared)."""
        text = " / ".join(self._errors or ())
        self.clear_errors()
        return text


_llama_log = LogBridge(log, keep_errors=True)


def init_backend() -> None:
    """Initialise llama.cpp once per process and route its logging to Python."""
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            lc.llama_log_set(_llama_log.callback, ctypes.c_void_p(0))
            lc.llama_backend_init()
            _backend_ready = True


def runtime_version() -> str:
    """The llama.cpp build in use (KV state files are only read back by the same one)."""
    return f"llama-cpp-python {bindings_version()}"


KV_TYPES = {"f16": lc.GGML_TYPE_F16, "q8_0": lc.GGML_TYPE_Q8_0, "q4_0": lc.GGML_TYPE_Q4_0}
FLASH_ATTENTION = {
    "auto": lc.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": lc.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": lc.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}


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
        # Mapped, not read: a load touches only the pages it needs, from the page cache that the
        # runner of the same file before it (or the last download) left warm; never locked.
        params.use_mmap = bool(lc.llama_supports_mmap())
        params.use_mlock = False
        if tensor_split:
            n_dev = lc.llama_max_devices()
            split = (ctypes.c_float * n_dev)(*tensor_split[:n_dev])
            params.tensor_split = split
        _llama_log.clear_errors()
        ptr = lc.llama_model_load_from_file(os.fsencode(path), params)
        if not ptr:
            why = _llama_log.recent_errors() or "unsupported architecture or damaged file"
            raise ModelFileError(f"llama.cpp could not load {path}: {why}", param="path")
        self.ptr = ptr
        self.vocab = lc.llama_model_get_vocab(ptr)
        self._dry: dict[tuple[object, ...], SamplerPointer] = {}  # DRY prototypes, see dry_sampler
        self._adapters: dict[str, AdapterPointer] = {}  # LoRA adapters by path, freed with the model
        self._dry_lock = threading.Lock()
        self.n_vocab = lc.llama_vocab_n_tokens(self.vocab)
        self.n_embd = lc.llama_model_n_embd(ptr)
        # Width of pooled embeddings; older models report 0 and use n_embd.
        self.n_embd_out = lc.llama_model_n_embd_out(ptr) or self.n_embd
        self.n_params = lc.llama_model_n_params(ptr)
        self.size_bytes = lc.llama_model_size(ptr)
        self.n_ctx_train = lc.llama_model_n_ctx_train(ptr)
        self.n_swa = lc.llama_model_n_swa(ptr)  # its sliding window of attention (0: none)
        self.bos = lc.llama_vocab_bos(self.vocab)
        self.eos = lc.llama_vocab_eos(self.vocab)
        self.sep = lc.llama_vocab_sep(self.vocab)
        self.add_bos = bool(lc.llama_vocab_get_add_bos(self.vocab))
        self.add_eos = bool(lc.llama_vocab_get_add_eos(self.vocab))
        self.add_sep = bool(lc.llama_vocab_get_add_sep(self.vocab))
        self.n_cls_out = lc.llama_model_n_cls_out(ptr)  # scores a reranker's head gives per sequence
        fim = (
            lc.llama_vocab_fim_pre(self.vocab),
            lc.llama_vocab_fim_suf(self.vocab),
            lc.llama_vocab_fim_mid(self.vocab),
        )
        # Fill-in-the-middle tokens (prefix, suffix, middle), None unless the vocabulary has all three.
        self.fim: tuple[int, int, int] | None = fim if min(fim) >= 0 else None
        # Repository-level FIM (Qwen2.5-Coder's <|repo_name|> and <|file_sep|>): each None when absent.
        self.fim_repo = _token_or_none(lc.llama_vocab_fim_rep(self.vocab))
        self.fim_file = _token_or_none(lc.llama_vocab_fim_sep(self.vocab))
        # Per-token answers cached: these run once per generated token.
        self._pieces: dict[int, bytes] = {}
        self._eog: dict[int, bool] = {}
        self._piece_buf = ctypes.create_string_buffer(256)

    @property
    def can_trim(self) -> bool:
        """Whether a sequence's last positions can be dropped (not for recurrent state, e.g. Mamba)."""
        return not (lc.llama_model_is_recurrent(self.ptr) or lc.llama_model_is_hybrid(self.ptr))

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

    @property
    def vocab_type(self) -> int:
        """llama.cpp's kind of tokenizer (SPM, BPE, WPM, ...)."""
        return int(lc.llama_vocab_type(self.vocab))

    def chat_template(self, name: str | None = None) -> str | None:
        """The model's default chat template (`tokenizer.chat_template`), or the one called `name`
        (`tokenizer.chat_template.NAME`), if any."""
        raw = lc.llama_model_chat_template(self.ptr, name.encode() if name else None)
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

    @functools.cached_property
    def eog_tokens(self) -> list[int]:
        """Every token that ends generation (read once: `is_eog` of each token of the vocabulary)."""
        return [t for t in range(self.n_vocab) if self.is_eog(t)]

    def is_control(self, token: int) -> bool:
        """Whether the token is a control token (BOS, EOS, SEP, ...), which renders as nothing."""
        return bool(lc.llama_vocab_is_control(self.vocab, token))

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
    ) -> SamplerPointer | None:
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

    def dry_sampler(
        self, multiplier: float, base: float, allowed_length: int, last_n: int, breakers: Sequence[str]
    ) -> SamplerPointer:
        """A fresh DRY sampler over this vocabulary (the caller owns it).

        Building one scans the whole vocabulary for the sequence breakers (a tenth of a
        second on a small model), so one per parameter set is kept and cloned.
        """
        key = (multiplier, base, allowed_length, last_n, tuple(breakers))
        with self._dry_lock:
            proto = self._dry.pop(key, None)
            if proto is None:
                c_breakers = (ctypes.c_char_p * max(1, len(breakers)))(*(b.encode() for b in breakers))
                proto = lc.llama_sampler_init_dry(
                    self.vocab, multiplier, base, allowed_length, last_n, c_breakers, len(breakers)
                )
            self._dry[key] = proto  # the most recently used last
            while len(self._dry) > _DRY_PROTOTYPES:
                lc.llama_sampler_free(self._dry.pop(next(iter(self._dry))))
            clone: SamplerPointer = lc.llama_sampler_clone(proto)
            return clone

    def adapter(self, path: str) -> AdapterPointer:
        """The LoRA adapter at `path`, loaded once for this model; `ModelFileError` when llama.cpp
        refuses it (no adapter, or one made for another architecture or shape)."""
        if (loaded := self._adapters.get(path)) is not None:
            return loaded
        _llama_log.clear_errors()
        ptr = lc.llama_adapter_lora_init(self.ptr, os.fsencode(path))
        if not ptr:
            why = _llama_log.recent_errors() or "not a LoRA adapter for this model"
            raise ModelFileError(f"llama.cpp could not load the LoRA adapter {path}: {why}", param="lora")
        self._adapters[path] = ptr = cast(AdapterPointer, ptr)
        return ptr

    def close(self) -> None:
        with self._dry_lock:
            for proto in self._dry.values():
                lc.llama_sampler_free(proto)
            self._dry.clear()
        if self.ptr:
            lc.llama_model_free(self.ptr)
            self.ptr = None


def _token_or_none(token: int) -> int | None:
    return token if token >= 0 else None


def _check_gguf(path: str) -> None:
    p = Path(path)
    try:
        with p.open("rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelFileError(f"cannot read the model file {path}: {e.strerror}", param="path") from None
    if magic != b"GGUF":
        raise ModelFileError(f"{path} is not a GGUF model file", param="path")


def holds_window(oldest: int, n: int, n_swa: int) -> bool:
    """Whether a sequence cut to its first `n` positions, the oldest it still holds being `oldest`
    (-1: none), holds what the token at position `n` attends to (`n_swa`: the model's sliding
    window, 0 for none). llama-server's rule, which errs safe by a position."""
    if n <= 0:
        return True
    return 0 <= oldest <= max(0, n - max(1, n_swa))


class Context:
    """A llama.cpp context: `n_seq_max` sequences in one KV memory, decoded in batches of `n_batch`.

    Sequences are addressed by id (the engine's slots). An encoder-only model
    (BERT) has no KV memory: the memory operations then do nothing.
    """

    def __init__(
        self,
        model: Model,
        *,
        n_ctx: int,
        n_seq_max: int,
        n_batch: int,
        n_ubatch: int,
        n_threads: int,
        kv_type: str,
        flash_attention: str,
        embedding: bool,
        mean_pooling: bool = False,
        lora: Sequence[LoraAdapter] = (),
        swa_full: bool = False,
    ) -> None:
        """Create the context; raises `RunnerFailed` when it cannot be created (e.g. out of memory).

        `mean_pooling` pools embeddings by mean; otherwise as the model says. `flash_attention`
        is auto (llama.cpp decides), on or off. `lora` adapters apply to every decode, at their scales
        (`ModelFileError` for one llama.cpp cannot load). `swa_full` gives sliding-window layers a
        cache as long as the context; without it (llama-server's and Ollama's choice) they keep
        their window and a micro-batch only, a fraction of the memory, and a sequence can be cut
        back only as far as that still holds (`keep`; further with a checkpoint, `save_window`).
        """
        params = lc.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_seq_max = n_seq_max
        params.n_batch = n_batch
        params.n_ubatch = n_ubatch
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.type_k = KV_TYPES[kv_type]
        params.type_v = KV_TYPES[kv_type]
        params.flash_attn_type = FLASH_ATTENTION[flash_attention]
        params.embeddings = embedding
        params.pooling_type = lc.LLAMA_POOLING_TYPE_MEAN if mean_pooling else lc.LLAMA_POOLING_TYPE_UNSPECIFIED
        params.no_perf = True
        params.swa_full = swa_full
        # One KV stream per slot (llama-server's default): slots never compete for cells.
        params.kv_unified = False
        _llama_log.clear_errors()
        ptr = lc.llama_init_from_model(model.ptr, params)
        if not ptr:
            raise _context_failure(n_ctx, n_seq_max, _llama_log.recent_errors())
        self.ptr = ctypes.c_void_p(ptr)
        self._memory = lc.llama_get_memory(ptr)
        self.n_batch: int = lc.llama_n_batch(ptr)
        self.n_swa = model.n_swa  # the model's sliding window (0: none)
        # Only the window of sliding-window layers is kept: cutting a sequence back may need a checkpoint.
        self.small_window = model.n_swa > 0 and not swa_full and model.can_trim
        self._whole_state = not model.can_trim
        if lora:
            try:
                self.set_adapters(model, lora)
            except BaseException:
                self.close()
                raise

    def set_adapters(self, model: Model, lora: Sequence[LoraAdapter]) -> None:
        """Apply these adapters of `model`, at their scales, to the decodes from now on (in place
        of those before; llama.cpp does nothing when they are the same)."""
        handles = (lc.llama_adapter_lora_p_ctypes * len(lora))(*(model.adapter(a.path) for a in lora))
        scales = (ctypes.c_float * len(lora))(*(a.scale for a in lora))
        if lc.llama_set_adapters_lora(self.ptr, handles, len(lora), scales) != 0:
            raise RunnerFailed("llama.cpp could not apply the LoRA adapters")

    def keep(self, seq: int, n: int) -> bool:
        """Cut sequence `seq` to its first `n` positions (a new prompt's shared start, or the
        tokens before rejected draft tokens).

        False when the memory cannot do it: recurrent models cannot cut a
        sequence, a sliding-window cache put back from a snapshot lacks the
        positions before its last window (see `restored_floor`), and a small
        sliding-window cache (`small_window`) holds only the last window and
        micro-batch of positions. The sequence must then be put back from a
        checkpoint (`restore_window`) or evaluated again from nothing (see `forget`).
        """
        mem = self._memory
        return bool(lc.llama_memory_seq_rm(mem, seq, n, -1)) and holds_window(
            lc.llama_memory_seq_pos_min(mem, seq), n, self.n_swa
        )

    def restored_floor(self, n_tokens: int) -> int:
        """The shortest cut (`keep`) that a sequence put back from a snapshot of `n_tokens`
        positions allows: 0 for any, `n_tokens` for none short of the whole.

        llama.cpp saves only the last window of a sliding-window cache (positions
        from `n_tokens - n_swa` on, however much the live cache held), and a
        recurrent state is whole or nothing: such a snapshot serves only a prompt
        that reuses all of it.
        """
        return n_tokens if self._whole_state or 0 < self.n_swa < n_tokens else 0

    def forget(self, seq: int) -> None:
        """Empty sequence `seq`."""
        lc.llama_memory_seq_rm(self._memory, seq, -1, -1)

    def clear(self) -> None:
        """Empty every sequence."""
        lc.llama_memory_clear(self._memory, True)

    def last_position(self, seq: int) -> int:
        """The last position sequence `seq` holds (-1 when empty)."""
        return int(lc.llama_memory_seq_pos_max(self._memory, seq))

    def save(self, seq: int) -> ctypes.Array[ctypes.c_uint8] | None:
        """The state (KV cells) of sequence `seq`, or None when llama.cpp gives none."""
        size = int(lc.llama_state_seq_get_size(self.ptr, seq))
        if size <= 0:
            return None
        data = (ctypes.c_uint8 * size)()
        written = lc.llama_state_seq_get_data(self.ptr, data, size, seq)
        if written != size:
            log.warning("saving the state of sequence %d gave %d of %d bytes; not kept", seq, written, size)
            return None
        return data

    def restore(self, seq: int, data: ctypes.Array[ctypes.c_uint8]) -> bool:
        """Put a state from `save` into sequence `seq` (which should be empty); False when refused."""
        return bool(lc.llama_state_seq_set_data(self.ptr, data, len(data), seq) != 0)

    def save_window(self, seq: int) -> ctypes.Array[ctypes.c_uint8] | None:
        """The state of sequence `seq`'s sliding-window layers alone (their last window: a
        checkpoint), or None when llama.cpp gives none."""
        flags = lc.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        size = int(lc.llama_state_seq_get_size_ext(self.ptr, seq, flags))
        if size <= 0:
            return None
        data = (ctypes.c_uint8 * size)()
        if lc.llama_state_seq_get_data_ext(self.ptr, data, size, seq, flags) != size:
            return None
        return data

    def restore_window(self, seq: int, data: ctypes.Array[ctypes.c_uint8], n: int) -> bool:
        """Put back a checkpoint (`save_window`) taken when sequence `seq` held its first `n`
        positions, and cut the sequence to those; False when llama.cpp refuses (then `forget` it).
        The other layers keep every position: they need only the cut."""
        flags = lc.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        if lc.llama_state_seq_set_data_ext(self.ptr, data, len(data), seq, flags) != len(data):
            return False
        return self.keep(seq, n)

    def logits(self, row: int, n_vocab: int) -> list[float]:
        """The logits of output row `row` of the last decode (a copy)."""
        return _floats(lc.llama_get_logits_ith(self.ptr, row), n_vocab)

    def logits_array(self, row: int, n_vocab: int) -> NDArray[np.float32]:
        """The logits of output row `row` of the last decode as a numpy view (valid until the next
        decode). numpy is imported here: only a draft model and log probabilities need it, so a
        runner without them never loads it."""
        import numpy as np

        return np.ctypeslib.as_array(lc.llama_get_logits_ith(self.ptr, row), shape=(n_vocab,))

    def top(self, row: int, n_vocab: int) -> tuple[int, float]:
        """The most likely token of output row `row` of the last decode and its probability."""
        import numpy as np

        logits = self.logits_array(row, n_vocab)
        best = int(logits.argmax())
        return best, float(1.0 / np.exp(logits - logits[best]).sum())

    def embedding(self, seq: int, n_embd: int) -> list[float] | None:
        """The pooled embedding of sequence `seq` after the last decode (a copy)."""
        ptr = lc.llama_get_embeddings_seq(self.ptr, seq)
        if not ptr:
            return None
        return _floats(ptr, n_embd)

    def close(self) -> None:
        if self.ptr:
            lc.llama_free(self.ptr)
            self.ptr = ctypes.c_void_p(None)


def _floats(ptr: ctypes._Pointer[ctypes.c_float], n: int) -> list[float]:
    """The `n` floats at `ptr`, copied into a list (a memoryview cast reads them at C speed)."""
    view = (ctypes.c_float * n).from_address(ctypes.addressof(ptr.contents))
    return cast("list[float]", memoryview(view).cast("B").cast("f").tolist())


class Batch:
    """A reusable `llama_batch` whose arrays are ctypes buffers we own (one sequence per token)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.n = 0
        self.token = (ctypes.c_int32 * capacity)()
        self.pos = (ctypes.c_int32 * capacity)()
        self.n_seq_id = (ctypes.c_int32 * capacity)(*([1] * capacity))
        self.seq = (ctypes.c_int32 * capacity)()
        self.logits = (ctypes.c_int8 * capacity)()
        int_p = ctypes.POINTER(ctypes.c_int32)
        base = ctypes.addressof(self.seq)
        self._seq_ptrs = (int_p * capacity)(*(ctypes.cast(base + 4 * i, int_p) for i in range(capacity)))
        self._struct = lc.llama_batch(
            n_tokens=0,
            token=ctypes.cast(self.token, int_p),
            embd=None,
            pos=ctypes.cast(self.pos, int_p),
            n_seq_id=ctypes.cast(self.n_seq_id, int_p),
            seq_id=self._seq_ptrs,
            logits=ctypes.cast(self.logits, ctypes.POINTER(ctypes.c_int8)),
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
        n = len(tokens)
        i, j = self.n, self.n + n
        self.token[i:j] = list(tokens)
        self.pos[i:j] = list(range(pos, pos + n))
        self.seq[i:j] = [seq] * n
        self.logits[i:j] = [1 if output == "all" else 0] * n
        if output == "last":
            self.logits[j - 1] = 1
        self.n = j
        return j - 1

    def decode(self, ctx: Context) -> int:
        """`llama_decode` on the tokens added since `clear()` (the GIL is released meanwhile)."""
        self._struct.n_tokens = self.n
        return int(lc.llama_decode(ctx.ptr, self._struct))


_FAILED_BUFFER = re.compile(r"failed to allocate (?:\w+ )*buffer of size (\d+)")


def _context_failure(n_ctx: int, n_seq_max: int, why: str) -> RunnerFailed:
    """Why a context could not be made, in a person's words: memory first, with what to change."""
    sizes = [int(n) for n in _FAILED_BUFFER.findall(why)]
    if not sizes and "memory" not in why and "alloc" not in why:
        return RunnerFailed(f"llama.cpp could not create a context of {n_ctx} tokens: {why or 'out of memory?'}")
    needed = f" (a buffer of {format_bytes(max(sizes))} could not be allocated)" if sizes else ""
    return RunnerFailed(
        f"not enough memory for a context of {n_ctx} tokens in {n_seq_max} slot(s){needed}: "
        "lower the model's context_length or parallel, or use kv_type q8_0. llama.cpp said: "
        + why.rsplit(" / ", 1)[-1],
        out_of_memory=True,
    )
