"""Names of model files and models: ids, shard sets and quantization tags."""

from __future__ import annotations

import re
from pathlib import Path

from spark.errors import InvalidRequest, ModelFileError

MODEL_ID_RE = re.compile(r"[a-z0-9][a-z0-9._:-]*")
MAX_ID_LENGTH = 128

# llama.cpp's gguf-split naming: `<stem>-00001-of-00003.gguf`
_SPLIT_RE = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)

# Quantization labels as they appear in file names, longest alternatives first.
_QUANT_RE = re.compile(
    r"(?<![A-Za-z0-9])("
    r"IQ[1-4]_(?:XXS|XS|NL|S|M)"
    r"|Q[2-6]_K(?:_XL|_[SML])?"
    r"|Q[4-8]_[01]"
    r"|TQ[12]_0|MXFP4|NVFP4|BF16|F16|F32"
    r")(?![A-Za-z0-9_])",
    re.IGNORECASE,
)

# Default pick for `spark pull org/repo`: the usual best size/quality trade-off first.
QUANT_PREFERENCE = (
    "Q4_K_M",
    "Q4_K_S",
    "Q4_0",
    "Q5_K_M",
    "Q5_K_S",
    "Q5_0",
    "Q8_0",
    "Q6_K",
    "Q4_1",
    "Q5_1",
    "IQ4_XS",
    "IQ4_NL",
    "Q3_K_L",
    "Q3_K_M",
    "Q3_K_S",
    "Q3_K_XL",
    "Q4_K_XL",
    "Q5_K_XL",
    "Q6_K_XL",
    "Q2_K",
    "Q2_K_L",
    "Q2_K_XL",
    "IQ3_M",
    "IQ3_S",
    "IQ3_XS",
    "IQ3_XXS",
    "IQ2_M",
    "IQ2_S",
    "IQ2_XS",
    "IQ2_XXS",
    "IQ1_M",
    "IQ1_S",
    "F16",
    "BF16",
    "F32",
)


def split_info(filename: str) -> tuple[str, int, int] | None:
    """(stem, shard number, shard count) for a split GGUF name, else None."""
    m = _SPLIT_RE.match(Path(filename).name)
    if not m:
        return None
    return m.group("stem"), int(m.group("no")), int(m.group("count"))


def shard_name(stem: str, number: int, count: int) -> str:
    return f"{stem}-{number:05d}-of-{count:05d}.gguf"


def shard_paths(path: Path) -> list[Path]:
    """All shards of the model whose first shard (or only file) is `path`.

    Raises `ModelFileError` when `path` is not the first shard or a shard is missing.
    """
    info = split_info(path.name)
    if info is None:
        return [path]
    stem, number, count = info
    if number != 1:
        first = path.with_name(shard_name(stem, 1, count))
        raise ModelFileError(f"{path} is shard {number} of {count}; give the first shard ({first.name}) instead")
    shards = [path.with_name(shard_name(stem, i, count)) for i in range(1, count + 1)]
    missing = [p.name for p in shards if not p.is_file()]
    if missing:
        raise ModelFileError(f"split model {path.name} is incomplete: missing {', '.join(missing)}")
    return shards


def model_id_from_filename(filename: str) -> str:
    """The id a model file gets: lowercase, without `.gguf` or the shard suffix, dots kept.

    `Qwen2.5-0.5B-Instruct-Q4_K_M.gguf` -> `qwen2.5-0.5b-instruct-q4_k_m`, as the
    Hub and Ollama write it, so people can type what they see. Characters an id
    may not hold (spaces, brackets, ...) become dashes.
    """
    name = Path(filename).name
    info = split_info(name)
    if info is not None:
        name = info[0]
    elif name.lower().endswith(".gguf"):
        name = name[: -len(".gguf")]
    text = re.sub(r"[^a-z0-9._:-]+", "-", name.lower())
    text = re.sub(r"-{2,}", "-", re.sub(r"\.{2,}", ".", text))
    text = text.strip("-_:.")[:MAX_ID_LENGTH].rstrip("-_:.")
    if not text:
        raise InvalidRequest(f"cannot derive a model id from the file name '{filename}'", param="model_id")
    return text


def legacy_model_id(model_id: str) -> str:
    """The id an older Spark gave the same file (dots as dashes): ids stored before dots were
    kept, and scripts written against them, still find the model through it."""
    return re.sub(r"-{2,}", "-", model_id.replace(".", "-"))


def check_model_id(model_id: str, param: str = "model") -> str:
    """`model_id` if it is a valid id (safe as a single path component), else `InvalidRequest`."""
    if (
        not isinstance(model_id, str)
        or len(model_id) > MAX_ID_LENGTH
        or not MODEL_ID_RE.fullmatch(model_id)
        or ".." in model_id
    ):
        raise InvalidRequest(
            f"'{model_id}' is not a valid model id (lowercase letters, digits and . _ : -, "
            f"starting with a letter or digit, at most {MAX_ID_LENGTH} characters)",
            param=param,
        )
    return model_id


def quant_from_filename(filename: str) -> str | None:
    """The quantization label in a file name (`model.Q4_K_M.gguf` -> `Q4_K_M`), uppercase."""
    name = Path(filename).name
    info = split_info(name)
    stem = info[0] if info else name
    found = _QUANT_RE.findall(stem)
    return found[-1].upper() if found else None


def is_projector_filename(filename: str) -> bool:
    """Whether a repo file is a vision projector (`mmproj-*.gguf` and the like)."""
    return "mmproj" in Path(filename).name.lower()
