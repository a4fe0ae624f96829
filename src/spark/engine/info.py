"""What a loaded engine reports about itself (sent from the runner to the server)."""

from __future__ import annotations

from typing import Literal

import msgspec


class EngineInfo(msgspec.Struct, frozen=True):
    """The model and context as loaded; `n_ctx_per_slot` is the usable context of one request."""

    model_id: str
    n_ctx_per_slot: int
    n_slots: int
    n_ctx_train: int
    n_vocab: int
    n_embd: int
    n_params: int
    model_bytes: int
    embedding: bool
    n_threads: int
    n_batch: int
    chat_template: str  # the template in use (the fallback when the model has none)
    chat_template_source: Literal["gguf", "fallback"]
    bos_token: str
    eos_token: str
