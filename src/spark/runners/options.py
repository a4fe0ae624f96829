"""How a model is loaded: its own settings first, then the server's (`LoadOptions`), and what changed."""

from __future__ import annotations

import math

import msgspec

from spark.errors import InvalidRequest
from spark.library import ModelEntry, check_flash_attention
from spark.settings import Settings
from spark.types import LoadOptions, SamplingParams

FALLBACK_CONTEXT = 4096  # when neither the settings nor the model file give a context length
_PLACEMENT_FIELDS = ("n_gpu_layers", "main_gpu", "tensor_split")  # set by the plan, not by settings


def load_options(entry: ModelEntry, settings: Settings, draft: ModelEntry | None = None) -> LoadOptions:
    """How to load `entry`: its own settings first, then the server's, capped at its training context;
    `draft` is its draft model (`Library.draft_for`), used when speculative decoding is on."""
    kv_type = entry.settings.kv_type or settings.kv_type
    flash_attention = entry.settings.flash_attention or settings.flash_attention
    check_flash_attention(flash_attention, kv_type)
    speculative = settings.speculative if entry.settings.speculative is None else entry.settings.speculative
    return LoadOptions(
        model_id=entry.id,
        path=entry.path,
        n_ctx=context_window(entry, settings),
        n_parallel=parallel_slots(entry, settings),
        n_threads=settings.threads,
        kv_type=kv_type,
        speculative=speculative,
        draft_path=draft.path if draft is not None and speculative else None,
        flash_attention=flash_attention,
        embedding=entry.info.is_embedding,
        mmproj_path=entry.mmproj_path,
        lora=entry.lora,
        system_prompt=entry.settings.system_prompt,
        sampling=_default_sampling(entry.settings.sampling, settings),
        snapshot_ram_bytes=settings.snapshot_ram_bytes,
        snapshot_disk_bytes=settings.snapshot_disk_bytes,
        snapshot_dir=str(settings.snapshots_dir),
    )


def context_window(entry: ModelEntry, settings: Settings) -> int:
    """The tokens one request to `entry` can hold (prompt and answer): its own `context_length`, else
    the server's, else its training context, never more than that."""
    return capped_context(entry.settings.context_length or settings.context_length, entry.info.context_length)


def capped_context(asked: int | None, trained: int) -> int:
    """The context `asked` for (else the training context, else `FALLBACK_CONTEXT`), never more than
    the `trained` one (0: the file does not say)."""
    n_ctx = asked or trained or FALLBACK_CONTEXT
    return min(n_ctx, trained) if trained else n_ctx


def check_keep_alive(seconds: float) -> None:
    """Refuse a keep-alive that is no number of seconds (`InvalidRequest`)."""
    if math.isnan(seconds):
        raise InvalidRequest("keep_alive must be a number of seconds (negative: keep loaded)", param="keep_alive")


def parallel_slots(entry: ModelEntry, settings: Settings) -> int:
    """How many requests `entry` answers at once: its own setting, else the server's."""
    return entry.settings.parallel or settings.parallel


def _default_sampling(model: SamplingParams, settings: Settings) -> SamplingParams:
    """A model's sampling defaults with the server's default answer length (`default_max_tokens`)
    where the model sets none, never past `max_tokens_limit`."""
    max_tokens = model.max_tokens or settings.default_max_tokens or None
    if max_tokens is not None and settings.max_tokens_limit:
        max_tokens = min(max_tokens, settings.max_tokens_limit)
    return msgspec.structs.replace(model, max_tokens=max_tokens)


def settings_changes(old: LoadOptions, new: LoadOptions) -> str:
    """What differs between two sets of load options, placement aside, e.g. `n_ctx 512 -> 1024`."""
    changes = []
    for name in LoadOptions.__struct_fields__:
        if name in _PLACEMENT_FIELDS:
            continue
        before, after = getattr(old, name), getattr(new, name)
        if before != after:
            plain = all(isinstance(v, (int, float, str, bool)) or v is None for v in (before, after))
            changes.append(f"{name} {before} -> {after}" if plain and name != "system_prompt" else f"{name} changed")
    return ", ".join(changes)
