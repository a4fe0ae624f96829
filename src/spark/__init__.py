"""Spark: a local LLM server toolkit for GGUF models.

Scripts use `spark.Spark` (no server: each model runs in a runner process that
is a child of the script) and the typed requests, results and errors
re-exported here; docs/python.md shows them.
"""

from typing import TYPE_CHECKING, Any

from spark.errors import (
    ContextLengthExceeded,
    InvalidRequest,
    ModelNotFound,
    Overloaded,
    PlacementRefused,
    RunnerFailed,
    SettingsError,
    SparkError,
)
from spark.settings import Settings, load_settings
from spark.types import (
    ChatRequest,
    ChatResult,
    CompletionRequest,
    EmbeddingRequest,
    EmbeddingResult,
    Message,
    SamplingParams,
    Usage,
)

if TYPE_CHECKING:
    from spark.embedded import Spark

__version__ = "0.1.0"

__all__ = [
    "ChatRequest",
    "ChatResult",
    "CompletionRequest",
    "ContextLengthExceeded",
    "EmbeddingRequest",
    "EmbeddingResult",
    "InvalidRequest",
    "Message",
    "ModelNotFound",
    "Overloaded",
    "PlacementRefused",
    "RunnerFailed",
    "SamplingParams",
    "Settings",
    "SettingsError",
    "Spark",
    "SparkError",
    "Usage",
    "load_settings",
]


def __getattr__(name: str) -> Any:
    # `Spark` pulls in the library and the runners; load them only when a script uses it,
    # so `import spark` stays cheap for the CLI and the runner processes.
    if name == "Spark":
        from spark.embedded import Spark

        return Spark
    raise AttributeError(f"module 'spark' has no attribute {name!r}")
