"""The engine: runs a model inside a runner process (llama.cpp context, slots, sampling, templates).

`EngineInfo` is importable without loading llama.cpp (the server decodes it
from runner messages); `Engine` loads llama.cpp on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spark.engine.info import EngineInfo

if TYPE_CHECKING:
    from spark.engine.engine import Engine

__all__ = ["Engine", "EngineInfo"]


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from spark.engine.engine import Engine

        return Engine
    raise AttributeError(f"module 'spark.engine' has no attribute {name!r}")
