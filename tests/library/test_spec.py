"""Parsing `spark pull SPEC`."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark.errors import InvalidRequest, ModelFileError
from spark.library.spec import HubSpec, LocalSpec, exists_here, parse_pull_spec


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("org/repo", HubSpec(repo="org/repo")),
        ("org/repo:q8_0", HubSpec(repo="org/repo", quant="Q8_0")),
        ("org/repo:Q4_K_M", HubSpec(repo="org/repo", quant="Q4_K_M")),
        ("org/repo/file.gguf", HubSpec(repo="org/repo", filename="file.gguf")),
        ("org/repo/sub/dir/m-00001-of-00002.gguf", HubSpec(repo="org/repo", filename="sub/dir/m-00001-of-00002.gguf")),
        ("hf.co/org/repo:Q4_0", HubSpec(repo="org/repo", quant="Q4_0")),
        ("huggingface.co/org/repo", HubSpec(repo="org/repo")),
        ("https://huggingface.co/org/repo", HubSpec(repo="org/repo")),
        ("https://huggingface.co/org/repo/", HubSpec(repo="org/repo")),
        ("https://huggingface.co/org/repo/tree/dev", HubSpec(repo="org/repo", revision="dev")),
        (
            "https://huggingface.co/org/repo/blob/main/m.Q4_K_M.gguf",
            HubSpec(repo="org/repo", filename="m.Q4_K_M.gguf"),
        ),
        (
            "https://huggingface.co/org/repo/resolve/v1.0/dir/m.gguf?download=true",
            HubSpec(repo="org/repo", revision="v1.0", filename="dir/m.gguf"),
        ),
        ("https://hf.co/org/Repo.v2_x-GGUF", HubSpec(repo="org/Repo.v2_x-GGUF")),
    ],
)
def test_hub_specs(spec: str, expected: HubSpec) -> None:
    assert parse_pull_spec(spec) == expected


def test_quant_option_agrees_with_tag() -> None:
    assert parse_pull_spec("org/repo", quant="q5_k_m") == HubSpec(repo="org/repo", quant="Q5_K_M")
    assert parse_pull_spec("org/repo:Q8_0", quant="q8_0") == HubSpec(repo="org/repo", quant="Q8_0")
    with pytest.raises(InvalidRequest, match="contradicts") as e:
        parse_pull_spec("org/repo:Q8_0", quant="Q4_0")
    assert e.value.param == "quant"
    with pytest.raises(InvalidRequest, match="file name"):
        parse_pull_spec("org/repo/f.gguf", quant="Q4_0")


def test_custom_endpoint_urls_are_accepted() -> None:
    spec = parse_pull_spec("http://127.0.0.1:8999/org/repo/blob/main/f.gguf", endpoint="http://127.0.0.1:8999")
    assert spec == HubSpec(repo="org/repo", filename="f.gguf")


def test_local_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    assert parse_pull_spec(str(model)) == LocalSpec(str(model))
    monkeypatch.chdir(tmp_path)
    assert parse_pull_spec("m.gguf") == LocalSpec("m.gguf")
    assert parse_pull_spec("./m.gguf") == LocalSpec("m.gguf")
    with pytest.raises(ModelFileError, match="no such file"):
        parse_pull_spec("absent.gguf")
    with pytest.raises(InvalidRequest, match="--quant"):
        parse_pull_spec(str(model), quant="Q4_0")


def test_a_hub_name_is_the_hubs_whatever_lies_in_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "org" / "repo").mkdir(parents=True)
    (tmp_path / "org" / "repo" / "f.gguf").write_bytes(b"GGUF")
    monkeypatch.chdir(tmp_path)
    assert parse_pull_spec("org/repo") == HubSpec(repo="org/repo")
    assert parse_pull_spec("org/repo:Q4_0") == HubSpec(repo="org/repo", quant="Q4_0")
    assert parse_pull_spec("org/repo/f.gguf") == LocalSpec("org/repo/f.gguf"), "a file path that exists is the file"


def test_names_no_path_can_have_are_specs_not_os_errors() -> None:
    with pytest.raises(InvalidRequest, match="not a model spec") as word:
        parse_pull_spec("a" * 300)  # looked for as a file: File name too long
    assert word.value.param == "spec" and len(word.value.message) < 300
    with pytest.raises(ModelFileError, match="no such file"):
        parse_pull_spec("a" * 300 + ".gguf")
    assert not exists_here("a" * 300) and not exists_here("a\0b")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "nothing to pull"),
        ("a" * 97 + "/repo", "not a valid Hugging Face repository id"),  # the Hub's names have at most 96
        ("org/" + "a" * 5000, "not a valid Hugging Face repository id"),
        ("org/repo/" + "b" * 256 + ".gguf", "not a valid file path"),
        ("justaword", "not a model spec"),
        ("org/repo/README.md", "not a .gguf file"),
        ("org/repo/../x.gguf", "not a valid file path"),
        ("org/../repo", "not a valid Hugging Face repository"),
        ("org/repo:Q4 K", "not a quantization tag"),
        ("org/repo/f.gguf:Q4_0", "not both"),
        ("https://example.com/org/repo", "not a Hugging Face URL"),
        ("https://huggingface.co/org", "does not name a repository"),
        ("https://huggingface.co/org/repo/discussions/3", "not a repository or file URL"),
    ],
)
def test_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        parse_pull_spec(spec)
