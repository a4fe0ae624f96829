"""Model ids, shard names and quantization tags from file names."""

from __future__ import annotations

import pytest

from spark.errors import InvalidRequest
from spark.library.naming import (
    check_model_id,
    is_projector_filename,
    legacy_model_id,
    model_id_from_filename,
    quant_from_filename,
    split_info,
)


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("SmolLM2-135M-Instruct-Q8_0.gguf", "smollm2-135m-instruct-q8_0"),
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-instruct.q4_1"),
        ("Qwen2.5-7B-Instruct-Q4_K_M-00001-of-00003.gguf", "qwen2.5-7b-instruct-q4_k_m"),
        ("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "qwen2.5-coder-0.5b-instruct-q4_k_m"),
        ("..Odd..Name...gguf", "odd.name"),
        ("/some/dir/Model.GGUF", "model"),
        ("My Model (v2).gguf", "my-model-v2"),
        ("model", "model"),
    ],
)
def test_id_from_filename(filename: str, expected: str) -> None:
    assert model_id_from_filename(filename) == expected
    assert check_model_id(expected) == expected


def test_legacy_id_reads_dots_as_dashes() -> None:
    assert legacy_model_id("qwen2.5-coder-0.5b-instruct-q4_k_m") == "qwen2-5-coder-0-5b-instruct-q4_k_m"
    assert legacy_model_id("model.-x") == "model-x"  # runs of dashes collapsed, as the old ids were


def test_id_from_unusable_filename_is_an_error() -> None:
    with pytest.raises(InvalidRequest, match="cannot derive a model id"):
        model_id_from_filename("(((.gguf")


@pytest.mark.parametrize(
    "bad", ["../etc/passwd", "..", "a/b", "a\\b", "Upper", "-lead", ".hidden", "a..b", "", "x" * 200, "a b"]
)
def test_unsafe_ids_are_refused(bad: str) -> None:
    with pytest.raises(InvalidRequest) as e:
        check_model_id(bad)
    assert e.value.param == "model"


@pytest.mark.parametrize("good", ["smollm2-135m-instruct-q4_1", "llama3:8b", "a.b_c-d", "0x"])
def test_valid_ids(good: str) -> None:
    assert check_model_id(good) == good


def test_split_names() -> None:
    assert split_info("Big-Q4_K_M-00002-of-00005.gguf") == ("Big-Q4_K_M", 2, 5)
    assert split_info("dir/x-00001-of-00001.gguf") == ("x", 1, 1)
    assert split_info("plain.gguf") is None


@pytest.mark.parametrize(
    ("filename", "quant"),
    [
        ("Llama-3.2-1B-Instruct-Q4_K_M.gguf", "Q4_K_M"),
        ("model.q8_0.gguf", "Q8_0"),
        ("gemma-3-4b-it-UD-Q4_K_XL.gguf", "Q4_K_XL"),
        ("Phi-3-mini-4k-instruct-IQ4_XS.gguf", "IQ4_XS"),
        ("big-BF16-00001-of-00002.gguf", "BF16"),
        ("tinyllama-f16.gguf", "F16"),
        ("no-tag-here.gguf", None),
        ("Q4_K_Mish.gguf", None),
    ],
)
def test_quant_from_filename(filename: str, quant: str | None) -> None:
    assert quant_from_filename(filename) == quant


def test_projector_names() -> None:
    assert is_projector_filename("mmproj-model-f16.gguf")
    assert is_projector_filename("sub/Model-MMPROJ.gguf")
    assert not is_projector_filename("model-Q4_0.gguf")
