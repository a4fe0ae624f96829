"""GGUF metadata: what a model file is, read from its header once at import time.

The header is parsed here with the format tables of `spark.library.ggml`, not
with `gguf.GGUFReader`: that reader decodes every vocabulary string into numpy
views, which takes 5-10 s for a 50k-token vocab on a busy machine (and the
`gguf` package imports numpy, which the server otherwise never needs). Large arrays
(vocab, merges) are skipped, so reading any model's metadata takes milliseconds,
and every bounds problem is reported as a `ModelFileError`.
"""

from __future__ import annotations

import math
import mmap
import re
import struct
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from spark.errors import ModelFileError
from spark.library import ggml
from spark.library.naming import shard_paths

# Architectures that only make embeddings, whatever their metadata says.
EMBEDDING_ARCHITECTURES = frozenset(
    {
        "bert",
        "nomic-bert",
        "nomic-bert-moe",
        "jina-bert-v2",
        "jina-bert-v3",
        "modern-bert",
        "neo-bert",
        "t5encoder",
        "roberta",
        "xlm-roberta",
        "eurobert",
    }
)
PROJECTOR_ARCHITECTURES = frozenset({"clip", "mmproj"})
RANK_POOLING = 4  # `<arch>.pooling_type` of a reranker (llama.cpp's LLAMA_POOLING_TYPE_RANK)

FIRST_REMOTE_READ = 1 << 20  # the first read of a remote header: most fit, vocabulary included
MAX_REMOTE_READ = 64 << 20
_MAX_DECODED_ARRAY = 4096  # longer arrays (vocab, merges, scores) are skipped, not decoded
_TOOLS_RE = re.compile(r"\btools\b")


class GGUFInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What Spark knows about a model from its GGUF header (all shards together)."""

    architecture: str
    name: str | None = None
    quantization: str  # Q4_K_M, Q8_0, F16, ...
    parameter_count: int
    file_size: int  # bytes, all shards
    context_length: int = 0  # training context; 0 when the file does not say
    n_embd: int = 0
    n_layers: int = 0
    n_heads: int = 0
    n_kv_heads: int = 0  # the largest per-layer value
    kv_heads_by_layer: list[int] = []  # one entry per layer (models may vary it by layer)
    head_dim_k: int = 0
    head_dim_v: int = 0
    n_ff: int = 0  # feed-forward width a token passes through (MoE: expert width x experts used); 0: unknown
    sliding_window: int | None = None  # None when the file names no window (0 when it says 0)
    sliding_window_pattern: int | list[bool] | None = None  # as the file gives it: a period or per-layer flags
    vocab_size: int = 0
    merges: int = 0  # BPE merge rules (the tokenizer keeps a map of them)
    chat_template: str | None = None
    supports_tools: bool = False
    is_embedding: bool = False
    is_reranker: bool = False  # an embedding model whose head scores query-document pairs (rank pooling)
    is_projector: bool = False
    is_adapter: bool = False  # a LoRA adapter for models of `architecture`, not a model
    activated: bool = False  # an activated LoRA (aLoRA): meant to apply only from its invocation tokens on
    # tensor bytes, for memory estimates
    embedding_bytes: int = 0  # token_embd
    output_bytes: int = 0  # output head and its norm (0 + norm when tied to the embeddings)
    layer_bytes: list[int] = []  # per repeating block blk.N
    tensor_bytes: int = 0  # every tensor
    has_vision: bool = False  # a projector is attached (set by the library entry)

    def kv_elements_per_token(self) -> int:
        """K and V elements one token occupies in the cache, summed over layers."""
        return sum(self.kv_heads_by_layer) * (self.head_dim_k + self.head_dim_v)


class _Tensor(msgspec.Struct, frozen=True):
    name: str
    shape: tuple[int, ...]  # ggml's order: ne0 (a row's length) first
    n_elements: int
    type_id: int
    offset: int  # from the start of the data section


class _Header(msgspec.Struct, frozen=True):
    fields: dict[str, Any]
    tensors: list[_Tensor]
    data_start: int
    file_size: int


_SCALARS: dict[int, str] = {
    ggml.VALUE_UINT8: "B",
    ggml.VALUE_INT8: "b",
    ggml.VALUE_UINT16: "H",
    ggml.VALUE_INT16: "h",
    ggml.VALUE_UINT32: "I",
    ggml.VALUE_INT32: "i",
    ggml.VALUE_FLOAT32: "f",
    ggml.VALUE_BOOL: "?",
    ggml.VALUE_UINT64: "Q",
    ggml.VALUE_INT64: "q",
    ggml.VALUE_FLOAT64: "d",
}


class _Skipped:
    """Stands for an array too long to be worth decoding."""

    def __init__(self, length: int) -> None:
        self.length = length


def _array_length(value: object) -> int:
    """The length of an array field, decoded or skipped (0: not an array, or absent)."""
    return value.length if isinstance(value, _Skipped) else len(value) if isinstance(value, list) else 0


class _HeaderCut(Exception):
    """The header goes on past the bytes read so far (reading a remote file's beginning); never
    raised for a whole file."""


class _Cursor:
    """Bounds-checked reads from a memory-mapped GGUF file, or the first bytes of one."""

    def __init__(self, buf: bytes | mmap.mmap, path: str | Path, endian: str, size: int) -> None:
        self.buf, self.path, self.endian, self.pos, self.size = buf, path, endian, 0, size

    def _need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            if n >= 0 and len(self.buf) < self.size:
                raise _HeaderCut(f"{self.path}: the header is longer than the {len(self.buf)} bytes read")
            raise ModelFileError(
                f"{self.path} is truncated or corrupt: its header runs past the end of the file ({len(self.buf)} bytes)"
            )

    def unpack(self, code: str) -> Any:
        fmt = self.endian + code
        size = struct.calcsize(fmt)
        self._need(size)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        n = self.unpack("Q")
        self._need(n)
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def value(self, type_id: int) -> Any:
        if type_id == ggml.VALUE_STRING:
            return self.string()
        if type_id in _SCALARS:
            return self.unpack(_SCALARS[type_id])
        if type_id == ggml.VALUE_ARRAY:
            item_type = self.unpack("I")
            length = self.unpack("Q")
            if length > _MAX_DECODED_ARRAY:
                self.skip_array(item_type, length)
                return _Skipped(length)
            return [self.value(item_type) for _ in range(length)]
        raise ModelFileError(f"{self.path} is corrupt: unknown metadata value type {type_id}")

    def skip_array(self, item_type: int, length: int) -> None:
        if item_type in _SCALARS:
            size = struct.calcsize(self.endian + _SCALARS[item_type]) * length
            self._need(size)
            self.pos += size
        elif item_type == ggml.VALUE_STRING:
            # a vocabulary holds ~100k strings: keep this loop tight
            unpack, buf, pos, end = struct.Struct(self.endian + "Q").unpack_from, self.buf, self.pos, len(self.buf)
            for _ in range(length):
                if pos + 8 > end:
                    pos = end + 1  # reported as truncated just below
                    break
                pos += 8 + unpack(buf, pos)[0]
            self._need(pos - self.pos)
            self.pos = pos
        else:
            for _ in range(length):
                self.value(item_type)


def _read_header(path: Path) -> _Header:
    try:
        size = path.stat().st_size
        if size < 24:
            raise ModelFileError(f"{path} is not a GGUF model file (only {size} bytes)")
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(buf, path, size)
    except FileNotFoundError:
        raise ModelFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ModelFileError(f"{path} is a folder, not a GGUF file") from None
    except PermissionError:
        raise ModelFileError(f"{path}: permission denied") from None
    except OSError as e:
        raise ModelFileError(f"{path} cannot be read: {e.strerror or e}") from None


def _parse(buf: bytes | mmap.mmap, path: str | Path, size: int) -> _Header:
    if buf[:4] != b"GGUF":
        raise ModelFileError(f"{path} is not a GGUF model file (it does not start with 'GGUF')")
    (version,) = struct.unpack_from("<I", buf, 4)
    endian = "<"
    if version & 0xFFFF == 0:  # written on a big-endian machine
        endian, version = ">", struct.unpack_from(">I", buf, 4)[0]
    if version not in (2, 3):
        raise ModelFileError(f"{path} uses GGUF version {version}; Spark reads versions 2 and 3")
    cur = _Cursor(buf, path, endian, size)
    cur.pos = 8
    n_tensors, n_kv = cur.unpack("Q"), cur.unpack("Q")
    # every entry takes at least 8 bytes, so larger counts mean a corrupt header
    if n_tensors > size // 8 or n_kv > size // 8:
        raise ModelFileError(f"{path} is corrupt: its header claims {n_tensors} tensors and {n_kv} keys")

    fields: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string()
        fields[key] = cur.value(cur.unpack("I"))

    tensors = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.unpack("I")
        if n_dims > 8:
            raise ModelFileError(f"{path} is corrupt: tensor {name} has {n_dims} dimensions")
        shape = tuple(cur.unpack("Q") for _ in range(n_dims))
        tensors.append(_Tensor(name, shape, math.prod(shape), cur.unpack("I"), cur.unpack("Q")))

    alignment = fields.get("general.alignment", ggml.DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0:
        raise ModelFileError(f"{path} is corrupt: general.alignment is {alignment!r}")
    data_start = -(-cur.pos // alignment) * alignment
    header = _Header(fields, tensors, data_start, size)
    end = data_start + max((t.offset + _tensor_bytes(t, header) for t in tensors), default=0)
    if end > size:
        raise ModelFileError(
            f"{path} is truncated: its tensors need {end} bytes but the file has {size} "
            "(an interrupted download or copy?)"
        )
    return header


def _tensor_bytes(t: _Tensor, header: _Header) -> int:
    known = ggml.TENSOR_TYPES.get(t.type_id)
    if known is None:
        # a type newer than the tables: the distance to the next tensor is its size
        later = [o.offset for o in header.tensors if o.offset > t.offset]
        return (min(later) if later else header.file_size - header.data_start) - t.offset
    _, block, type_size = known
    return t.n_elements // block * type_size


def _type_name(type_id: int) -> str:
    known = ggml.TENSOR_TYPES.get(type_id)
    return known[0] if known is not None else f"TYPE{type_id}"


def _quantization(fields: dict[str, Any], weights: Counter[str]) -> str:
    file_type = fields.get("general.file_type")
    if isinstance(file_type, int):
        name = ggml.FILE_TYPES.get(file_type, "")
        if name and name != "GUESSED":
            return name.removeprefix("MOSTLY_").removeprefix("ALL_")
    # no usable file type: the type holding most of the weight bytes
    return weights.most_common(1)[0][0] if weights else "unknown"


def _per_layer(value: Any, n_layers: int) -> list[int]:
    if isinstance(value, list):
        return [int(v) for v in value[:n_layers]] + [0] * max(0, n_layers - len(value))
    return [int(value or 0)] * n_layers


def _uint(fields: dict[str, Any], key: str) -> int:
    value = fields.get(key)
    if isinstance(value, list):
        return max((int(v) for v in value), default=0)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _ff_width(fields: dict[str, Any], arch: str) -> int:
    """Feed-forward width one token goes through: for mixture-of-experts, the experts it is
    routed to plus any shared experts (Mixtral-style files give the expert width as
    `feed_forward_length`)."""
    dense = _uint(fields, f"{arch}.feed_forward_length")
    used = _uint(fields, f"{arch}.expert_used_count")
    if not used:
        return dense
    expert = _uint(fields, f"{arch}.expert_feed_forward_length") or dense
    shared = _uint(fields, f"{arch}.expert_shared_feed_forward_length") or (
        _uint(fields, f"{arch}.expert_shared_count") * expert
    )
    return expert * used + shared


def _swa_pattern(value: Any) -> int | list[bool] | None:
    if isinstance(value, list):
        return [bool(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def read_gguf_info(path: str | Path) -> GGUFInfo:
    """Metadata of the GGUF model at `path` (the first shard of a split model reads them all).

    Raises `ModelFileError` for a missing, truncated, non-GGUF or incomplete split file.
    """
    path = Path(path)
    shards = shard_paths(path) if path.is_file() else [path]
    return _info([_read_header(p) for p in shards], path)


def adapter_mismatch(adapter: str | Path, model: str | Path) -> str | None:
    """Why the LoRA adapter at `adapter` cannot apply to the model at `model` (a tensor the model
    lacks or holds in another size, as llama.cpp finds when it loads them), from the headers alone;
    None when it fits."""
    base = {t.name: t.shape for p in shard_paths(Path(model)) for t in _read_header(p).tensors}
    pairs: dict[str, dict[str, tuple[int, ...]]] = {}
    for t in _read_header(Path(adapter)).tensors:
        name, _, part = t.name.rpartition(".")
        if part in ("lora_a", "lora_b"):
            pairs.setdefault(name, {})[part] = (*t.shape, 1, 1)
    for name, parts in pairs.items():
        if name not in base:
            return f"the model has no tensor {name}"
        if len(parts) < 2:
            return f"its {name} lacks lora_a or lora_b"
        a, b, (n_in, n_out, *_) = parts["lora_a"], parts["lora_b"], (*base[name], 1)
        # ggml's shapes, as llama.cpp checks them: A is (n_in, rank) and B (rank, n_out), except for
        # the token embeddings, whose pair is flipped
        if name == "token_embd.weight":
            fits = (b[1], a[1]) == (n_in, n_out)
        else:
            fits = (a[0], b[1]) == (n_in, n_out) and a[1] == b[0]
        if not fits:
            return f"its {name} is made for a weight of another shape"
    return None


def read_remote_gguf_info(
    read_start: Callable[[int], bytes], name: str, size: int, *, first_read: int = FIRST_REMOTE_READ
) -> GGUFInfo:
    """Metadata of a GGUF file elsewhere (on the Hub), from its first bytes only.

    `read_start(n)` returns the file's first n bytes (or all of it, when shorter);
    `size` is the whole file's. Reads grow fourfold until the header is in, up
    to `MAX_REMOTE_READ`. For a split model only the first shard's tensors are
    counted. Raises `ModelFileError` when it is no GGUF or its header is too long.
    """
    n = first_read
    while True:
        buf = read_start(min(n, size))
        try:
            return _info([_parse(buf, name, size)], name, whole=False)
        except _HeaderCut:
            if n >= min(size, MAX_REMOTE_READ) or len(buf) < min(n, size):
                raise ModelFileError(f"{name}: its header is longer than {len(buf)} bytes; not read") from None
            n *= 4


def _info(headers: list[_Header], path: str | Path, *, whole: bool = True) -> GGUFInfo:
    """The model's metadata from its shards' headers (`whole`: every shard is there)."""
    first = headers[0]
    fields = first.fields
    arch = fields.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelFileError(f"{path} has no general.architecture; it is not a model llama.cpp can load")

    count = fields.get("split.count")
    if whole and isinstance(count, int) and count > 1 and len(headers) != count:
        raise ModelFileError(
            f"{path} is shard 1 of a {count}-part model; name it like "
            f"'<name>-00001-of-{count:05d}.gguf' and keep all parts side by side"
        )

    params = 0
    embedding = output = total = 0
    n_layers = _uint(fields, f"{arch}.block_count")
    layers = [0] * n_layers
    weights: Counter[str] = Counter()
    for header in headers:
        for t in header.tensors:
            nbytes = _tensor_bytes(t, header)
            params += t.n_elements
            total += nbytes
            if len(t.shape) >= 2:
                weights[_type_name(t.type_id)] += nbytes
            if t.name.startswith("token_embd."):
                embedding += nbytes
            elif t.name.startswith(("output.", "output_norm.")):
                output += nbytes
            elif t.name.startswith("blk."):
                index = t.name.split(".", 2)[1]
                if index.isdigit() and int(index) < n_layers:
                    layers[int(index)] += nbytes

    n_embd = _uint(fields, f"{arch}.embedding_length")
    n_heads = _uint(fields, f"{arch}.attention.head_count")
    kv_raw = fields.get(f"{arch}.attention.head_count_kv", fields.get(f"{arch}.attention.head_count"))
    kv_by_layer = _per_layer(kv_raw, n_layers)
    head_dim = n_embd // n_heads if n_heads else 0
    template = fields.get("tokenizer.chat_template")
    template = template if isinstance(template, str) and template.strip() else None
    tool_template = fields.get("tokenizer.chat_template.tool_use")
    pooling = fields.get(f"{arch}.pooling_type")
    vocab = _uint(fields, f"{arch}.vocab_size") or _array_length(fields.get("tokenizer.ggml.tokens"))
    sliding_key = f"{arch}.attention.sliding_window"
    name = fields.get("general.name")

    return GGUFInfo(
        architecture=arch,
        name=name if isinstance(name, str) and name else None,
        quantization=_quantization(fields, weights),
        parameter_count=params,
        file_size=sum(h.file_size for h in headers),
        context_length=_uint(fields, f"{arch}.context_length"),
        n_embd=n_embd,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=max(kv_by_layer, default=0),
        kv_heads_by_layer=kv_by_layer,
        head_dim_k=_uint(fields, f"{arch}.attention.key_length") or head_dim,
        head_dim_v=_uint(fields, f"{arch}.attention.value_length") or head_dim,
        n_ff=_ff_width(fields, arch),
        sliding_window=_uint(fields, sliding_key) if sliding_key in fields else None,
        sliding_window_pattern=_swa_pattern(fields.get(f"{arch}.attention.sliding_window_pattern")),
        vocab_size=vocab,
        merges=_array_length(fields.get("tokenizer.ggml.merges")),
        chat_template=template,
        supports_tools=bool((template and _TOOLS_RE.search(template)) or isinstance(tool_template, str)),
        is_embedding=(
            arch in EMBEDDING_ARCHITECTURES
            or (isinstance(pooling, int) and pooling > 0)
            or fields.get(f"{arch}.attention.causal") is False
        ),
        is_reranker=pooling == RANK_POOLING,
        is_projector=arch in PROJECTOR_ARCHITECTURES,
        is_adapter=fields.get("general.type") == "adapter" and fields.get("adapter.type") == "lora",
        activated="adapter.alora.invocation_tokens" in fields,
        embedding_bytes=embedding,
        output_bytes=output,
        layer_bytes=layers,
        tensor_bytes=total,
    )
