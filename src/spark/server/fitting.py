"""Would a model fit on this server now? `spark.placement.fit.judge` fed with the server's runners and settings.

Shared by the library routes (an installed model, with its own settings) and
the Hub routes (a file not downloaded yet, with the server's settings). The
functions read files or probe devices: call them in a thread.
"""

from __future__ import annotations

from spark.library import Library, ModelEntry
from spark.library.metadata import GGUFInfo, read_gguf_info
from spark.placement import LoadedModel, detect_devices, estimate_load, estimate_memory, model_shape
from spark.placement.fit import Fit, judge
from spark.runners.options import capped_context, load_options
from spark.runners.scheduler import RunnerState
from spark.settings import Settings


def loaded_models(states: list[RunnerState], *, leave_out: str | None = None) -> list[LoadedModel]:
    """The runners as the planner counts them (those holding memory), maybe without one model."""
    return [
        LoadedModel(
            model_id=s.model,
            device_bytes=dict(s.device_bytes),
            busy=s.idle_seconds is None or s.status != "ready",
            last_used=s.last_used,
        )
        for s in states
        if s.status not in ("failed", "stopped") and s.model != leave_out
    ]


def installed_fit(settings: Settings, library: Library, entry: ModelEntry, loaded: list[LoadedModel]) -> Fit:
    """Where an installed model would go now with its own settings (and draft model), read from its
    file as a load reads it."""
    options = load_options(entry, settings, library.draft_for(entry))
    estimate = estimate_load(model_shape(read_gguf_info(entry.path)), options)
    return judge(estimate, detect_devices(settings), loaded, max_loaded_models=settings.max_loaded_models)


def remote_fit(settings: Settings, info: GGUFInfo, projector_bytes: int, loaded: list[LoadedModel]) -> Fit:
    """Where a model with `info` (not downloaded yet) would go now with the server's settings."""
    estimate = estimate_memory(
        model_shape(info),
        n_ctx=capped_context(settings.context_length, info.context_length),
        n_parallel=settings.parallel,
        kv_type=settings.kv_type,
        embedding=info.is_embedding,
        mmproj_bytes=0 if info.is_embedding else projector_bytes,
    )
    return judge(estimate, detect_devices(settings), loaded, max_loaded_models=settings.max_loaded_models)
