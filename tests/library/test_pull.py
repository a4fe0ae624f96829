"""Pulling from a (fake, local) Hugging Face Hub: choosing files, downloading, failures."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakehub import FakeHub
from spark.errors import DownloadError, InvalidRequest, ModelFileError
from spark.library import DownloadProgress, Hub, Library, PullPlan, pull, pull_adapter
from spark.settings import load_settings


@pytest.fixture
def lib(fake_hub: FakeHub) -> Iterator[Library]:
    library = Library(load_settings())
    yield library
    library.close()


def _files(lib: Library, model_id: str) -> list[str]:
    folder = lib.owned_dir(model_id)
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_default_quant_is_picked_and_said(lib: Library, fake_hub: FakeHub, hub_files: dict[str, bytes]) -> None:
    plans: list[PullPlan] = []
    events: list[DownloadProgress] = []
    result = pull(lib, "tiny/TinyLlama-GGUF", on_plan=plans.append, progress=events.append)
    entry = result.entry
    assert entry.id == "tinyllama-q4_k_m"
    assert entry.source == "hf:tiny/TinyLlama-GGUF/TinyLlama-Q4_K_M.gguf"
    assert entry.owned
    assert Path(entry.path).read_bytes() == hub_files["f32"]
    assert _files(lib, entry.id) == ["TinyLlama-Q4_K_M.gguf"]  # no .part, no lock left
    assert lib.get(entry.id) == entry

    (plan,) = plans
    assert plan.quant == "Q4_K_M" and plan.default_pick
    assert plan.available_quants == ["Q4_K_M", "Q8_0", "F16"]
    line = plan.describe()
    assert "picked Q4_K_M" in line and "also available: Q8_0, F16" in line
    assert events[-1] == DownloadProgress("TinyLlama-Q4_K_M.gguf", len(hub_files["f32"]), len(hub_files["f32"]))
    assert all(e.completed <= len(hub_files["f32"]) for e in events)


def test_pull_again_is_a_no_op(lib: Library, fake_hub: FakeHub) -> None:
    first = pull(lib, "tiny/TinyLlama-GGUF:Q8_0")
    second = pull(lib, "tiny/TinyLlama-GGUF:Q8_0")
    assert second.already_installed and second.entry == first.entry
    assert len(fake_hub.file_requests("TinyLlama-Q8_0.gguf")) == 1
    assert pull(lib, "tinyllama-q8_0").already_installed  # an installed id
    Path(first.entry.path).unlink()  # files gone behind Spark's back: pulled again
    third = pull(lib, "tiny/TinyLlama-GGUF:Q8_0")
    assert not third.already_installed and Path(third.entry.path).is_file()


@pytest.mark.parametrize(
    ("spec", "quant", "model_id", "content"),
    [
        ("tiny/TinyLlama-GGUF:q8_0", None, "tinyllama-q8_0", "q8_0"),
        ("tiny/TinyLlama-GGUF", "F16", "tinyllama-f16", "f16"),
        ("tiny/TinyLlama-GGUF/TinyLlama-Q8_0.gguf", None, "tinyllama-q8_0", "q8_0"),
        ("https://huggingface.co/tiny/TinyLlama-GGUF/blob/main/TinyLlama-F16.gguf", None, "tinyllama-f16", "f16"),
        ("https://hf.co/tiny/TinyLlama-GGUF/resolve/main/TinyLlama-Q8_0.gguf", None, "tinyllama-q8_0", "q8_0"),
        ("https://huggingface.co/tiny/TinyTools-GGUF", None, "tinytools.q8_0", "tools"),
        ("hf.co/tiny/TinyLlama-GGUF:F16", None, "tinyllama-f16", "f16"),
    ],
)
def test_spec_forms(
    lib: Library, hub_files: dict[str, bytes], spec: str, quant: str | None, model_id: str, content: str
) -> None:
    entry = pull(lib, spec, quant=quant).entry
    assert entry.id == model_id
    assert Path(entry.path).read_bytes() == hub_files[content]


def test_tools_model_metadata(lib: Library) -> None:
    entry = pull(lib, "tiny/TinyTools-GGUF").entry
    assert entry.info.supports_tools
    assert entry.info.quantization == "Q8_0"


def test_split_model_downloads_every_shard(lib: Library, hub_files: dict[str, bytes]) -> None:
    plans: list[PullPlan] = []
    entry = pull(lib, "tiny/Split-GGUF:Q8_0", on_plan=plans.append).entry
    assert entry.id == "tiny-split-q8_0"
    assert [Path(p).name for p in entry.shards] == [f"Tiny-Split-Q8_0-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert [Path(p).read_bytes() for p in entry.shards] == [hub_files[f"shard{i}"] for i in (1, 2, 3)]
    assert entry.info.file_size == sum(len(hub_files[f"shard{i}"]) for i in (1, 2, 3))
    assert "+2 more shards" in plans[0].describe()
    # naming a later shard pulls the whole set
    lib.remove(entry.id)
    again = pull(lib, "tiny/Split-GGUF/Q8_0/Tiny-Split-Q8_0-00002-of-00003.gguf").entry
    assert len(again.shards) == 3


def test_projector_is_downloaded_and_attached(lib: Library, hub_files: dict[str, bytes]) -> None:
    entry = pull(lib, "tiny/Vision-GGUF").entry
    assert entry.mmproj_path is not None
    assert Path(entry.mmproj_path).name == "mmproj-TinyVision-F16.gguf"  # F16 preferred over F32
    assert Path(entry.mmproj_path).read_bytes() == hub_files["mmproj"]
    assert entry.mmproj_owned and entry.info.has_vision
    lib.remove(entry.id)
    assert not Path(entry.mmproj_path).exists()


def test_dropped_connection_is_resumed_within_one_pull(
    lib: Library, fake_hub: FakeHub, hub_files: dict[str, bytes]
) -> None:
    fake_hub.drop_after["TinyLlama-Q8_0.gguf"] = 50_000
    entry = pull(lib, "tiny/TinyLlama-GGUF:Q8_0").entry
    assert Path(entry.path).read_bytes() == hub_files["q8_0"]
    gets = fake_hub.file_requests("TinyLlama-Q8_0.gguf")
    assert len(gets) == 2
    assert "range" not in gets[0]
    assert gets[1]["range"] == "bytes=50000-"


def test_interrupted_pull_keeps_part_and_next_pull_resumes(
    lib: Library, fake_hub: FakeHub, hub_files: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("spark.library.download.RETRIES", 0)
    fake_hub.drop_after["TinyLlama-F16.gguf"] = 70_000
    with pytest.raises(DownloadError, match="interrupted .* run the same pull again to resume"):
        pull(lib, "tiny/TinyLlama-GGUF:F16")
    assert not lib.exists("tinyllama-f16")  # never registered half a file
    part = lib.owned_dir("tinyllama-f16") / "TinyLlama-F16.gguf.part"
    assert part.stat().st_size == 70_000

    entry = pull(lib, "tiny/TinyLlama-GGUF:F16").entry
    assert Path(entry.path).read_bytes() == hub_files["f16"]
    assert not part.exists()
    assert fake_hub.file_requests("TinyLlama-F16.gguf")[-1]["range"] == "bytes=70000-"


def test_checksum_mismatch_deletes_partial(lib: Library, fake_hub: FakeHub) -> None:
    fake_hub.wrong_sha.add("TinyLlama-Q8_0.gguf")
    with pytest.raises(DownloadError, match="checksum mismatch for TinyLlama-Q8_0.gguf"):
        pull(lib, "tiny/TinyLlama-GGUF:Q8_0")
    assert not lib.exists("tinyllama-q8_0")
    assert _files(lib, "tinyllama-q8_0") == []


def test_unknown_repository(lib: Library) -> None:
    with pytest.raises(DownloadError, match="repository 'nobody/Nothing-GGUF' not found on the Hub"):
        pull(lib, "nobody/Nothing-GGUF")


def test_repository_without_gguf_lists_what_it_has(lib: Library) -> None:
    with pytest.raises(DownloadError, match=r"has no GGUF files \(it has: README.md, config.json, model.safetensors\)"):
        pull(lib, "tiny/NoGGUF")


def test_unknown_quant_lists_available(lib: Library) -> None:
    with pytest.raises(DownloadError, match="no Q2_K file; available quantizations: Q4_K_M, Q8_0, F16"):
        pull(lib, "tiny/TinyLlama-GGUF:Q2_K")


def test_unknown_file(lib: Library) -> None:
    with pytest.raises(DownloadError, match="file 'Other.gguf' not found .* TinyLlama-F16.gguf"):
        pull(lib, "tiny/TinyLlama-GGUF/Other.gguf")
    with pytest.raises(DownloadError, match="vision projector"):
        pull(lib, "tiny/Vision-GGUF/mmproj-TinyVision-F16.gguf")


def test_unknown_revision(lib: Library) -> None:
    with pytest.raises(DownloadError, match="revision 'nope' not found"):
        pull(lib, "https://huggingface.co/tiny/TinyLlama-GGUF/tree/nope")


def test_disk_full_is_refused_before_downloading(
    lib: Library, fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("spark.library.disk.free_bytes", lambda folder: 10_000_000)
    with pytest.raises(DownloadError, match=r"not enough disk space .* needs 558\.4 KiB .* only 9\.5 MiB is free"):
        pull(lib, "tiny/TinyLlama-GGUF")
    assert fake_hub.file_requests(".gguf") == []


def test_private_repository_needs_token(lib: Library, fake_hub: FakeHub, hub_files: dict[str, bytes]) -> None:
    with pytest.raises(DownloadError, match="not found on the Hub .*hf_token"):
        pull(lib, "private/Secret-GGUF")
    with Library(load_settings(hf_token="hf_secret")) as authed:
        entry = pull(authed, "private/Secret-GGUF").entry
    assert Path(entry.path).read_bytes() == hub_files["q8_0"]
    assert fake_hub.file_requests("Secret-Q4_0.gguf")[0]["authorization"] == "Bearer hf_secret"


def test_broken_file_on_the_hub_is_not_registered(lib: Library) -> None:
    with pytest.raises(DownloadError, match="not a usable model: .* truncated"):
        pull(lib, "tiny/Broken-GGUF")
    assert not lib.exists("broken-q4_k_m")
    assert _files(lib, "broken-q4_k_m") == []


def test_a_lora_adapter_on_the_hub_is_not_registered_as_a_model(lib: Library) -> None:
    attach = "spark attach MODEL tiny/TinyLlama-SQL-LoRA-GGUF/TinyLlama-SQL-LoRA-F32.gguf"
    with pytest.raises(DownloadError, match=f"is a LoRA adapter, not a model: attach it to its model with `{attach}`"):
        pull(lib, "tiny/TinyLlama-SQL-LoRA-GGUF")
    assert not lib.exists("tinyllama-sql-lora-f32")
    assert _files(lib, "tinyllama-sql-lora-f32") == []


def test_a_lora_adapter_on_the_hub_is_downloaded_into_the_models_folder_and_attached(
    lib: Library, fake_hub: FakeHub, tiny_lora: Path
) -> None:
    model = pull(lib, "tiny/TinyLlama-GGUF:Q8_0").entry.id
    plans: list[PullPlan] = []
    entry = pull_adapter(lib, model, "tiny/TinyLlama-SQL-LoRA-GGUF", scale=0.5, on_plan=plans.append)
    (adapter,) = entry.lora
    assert Path(adapter.path) == lib.owned_dir(model) / "TinyLlama-SQL-LoRA-F32.gguf" and adapter.scale == 0.5
    assert [f.path for f in plans[0].files] == ["TinyLlama-SQL-LoRA-F32.gguf"]
    lib.detach_adapters(model)
    assert not Path(adapter.path).exists()
    # a local file is attached where it is, as `Library.attach_adapter` does
    assert pull_adapter(lib, model, str(tiny_lora)).lora[0].path == str(tiny_lora)


def test_a_model_or_an_adapter_for_another_model_is_not_attached_from_the_hub(lib: Library, fake_hub: FakeHub) -> None:
    model = pull(lib, "tiny/TinyLlama-GGUF:Q8_0").entry.id
    before = _files(lib, model)
    with pytest.raises(DownloadError, match="TinyLlama-F16.gguf is not a LoRA adapter"):
        pull_adapter(lib, model, "tiny/TinyLlama-GGUF:F16")
    (read,) = fake_hub.file_requests("TinyLlama-F16.gguf")  # its header only
    assert "bytes=0-" in {k.lower(): v for k, v in read.items()}.get("range", "")
    with pytest.raises(ModelFileError, match="does not fit"):
        pull_adapter(lib, model, "tiny/Wide-LoRA-GGUF")  # downloaded, checked, refused
    assert _files(lib, model) == before and lib.get(model).lora == []


def test_id_taken_by_another_model(lib: Library, tmp_path: Path, hub_files: dict[str, bytes]) -> None:
    local = tmp_path / "TinyLlama-Q8_0.gguf"
    local.write_bytes(hub_files["q8_0"])
    lib.add_local(local)
    with pytest.raises(InvalidRequest, match="already installed \\(from local:"):
        pull(lib, "tiny/TinyLlama-GGUF:Q8_0")


def test_local_path_pull(lib: Library, tiny_llama: Path) -> None:
    assert not pull(lib, str(tiny_llama)).entry.owned
    lib.remove("tiny-llama-chatml")
    assert pull(lib, str(tiny_llama), copy=True).entry.owned


def test_unreachable_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    with (
        Library(load_settings(hf_endpoint="http://127.0.0.1:9")) as lib,
        pytest.raises(DownloadError, match="cannot reach the Hub at http://127.0.0.1:9"),
    ):
        pull(lib, "tiny/TinyLlama-GGUF")


def test_search(fake_hub: FakeHub) -> None:
    hub = Hub(load_settings())
    found = hub.search("tiny", limit=3)
    assert [m.id for m in found] == ["tiny/TinyLlama-GGUF", "tiny/TinyTools-GGUF", "tiny/Vision-GGUF"]
    assert found[0].downloads == 5000 and found[0].likes == 42
    assert found[0].parameters == 139584 and found[0].architecture == "llama"
    assert found[1].parameters is None
    assert hub.search("no-such-thing") == []
    # the Hub was asked for GGUF repositories matching the words, most downloaded first, with their GGUF summary
    first, second = fake_hub.searches
    assert first["search"] == ["tiny"] and first["filter"] == ["gguf"]
    assert first["sort"] == ["downloads"] and first["limit"] == ["3"]
    assert {"downloads", "likes", "gguf"} <= set(first["expand"])
    assert second["search"] == ["no-such-thing"] and second["limit"] == ["20"]


def test_search_without_the_hub_fails_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(DownloadError, match="cannot reach the Hub at http://127.0.0.1:9 while searching"):
        Hub(load_settings(hf_endpoint="http://127.0.0.1:9")).search("llama")
    assert time.monotonic() - started < 5  # not huggingface_hub's 20 s of retries


def test_repo_file_listing(fake_hub: FakeHub, hub_files: dict[str, bytes]) -> None:
    files = {f.path: f for f in Hub(load_settings()).files("tiny/TinyLlama-GGUF")}
    q8 = files["TinyLlama-Q8_0.gguf"]
    assert q8.size == len(hub_files["q8_0"])
    assert q8.sha256 == hashlib.sha256(hub_files["q8_0"]).hexdigest()
