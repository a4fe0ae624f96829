"""Spark: a local LLM server toolkit for GGUF models."""

from spark.errors import (
    ContextLengthExceeded,
    InvalidRequest,
    ModelNotFound,
    Overloaded,
    PlacementRefused,
    RunnerFailed,
    SparkError,
)
from spark.settings import Settings, load_settings

__version__ = "0.1.0"

__all__ = [
    "ContextLengthExceeded",
    "InvalidRequest",
    "ModelNotFound",
    "Overloaded",
    "PlacementRefused",
    "RunnerFailed",
    "Settings",
    "SparkError",
    "load_settings",
]
