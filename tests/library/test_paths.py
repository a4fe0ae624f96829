"""Names from outside never become paths outside Spark's folders: Hub listings with `..` or absolute
file names, model ids with separators or `..`, symlinks in the models folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fakehub import FakeHub
from spark.errors import InvalidRequest, ModelNotFound, SparkError
from spark.library import Library, pull
from spark.settings import load_settings


@pytest.mark.parametrize("name", ["../../escaped.gguf", "/tmp/escaped-abs.gguf", "sub/../../../escaped.gguf"])
def test_hub_file_names_cannot_leave_the_model_folder(
    fake_hub: FakeHub, hub_files: dict[str, bytes], tmp_path: Path, name: str
) -> None:
    fake_hub.add_repo("evil/Escape-GGUF", {name: hub_files["f32"]})
    settings = load_settings()
    with Library(settings) as library:
        try:
            entry = pull(library, "evil/Escape-GGUF").entry
        except SparkError:  # refusing the name is fine too; writing outside is not
            entry = None
    models = settings.models_dir.resolve()
    if entry is not None:
        assert Path(entry.path).resolve().is_relative_to(models), entry.path
        assert Path(entry.path).read_bytes() == hub_files["f32"]
    written = [*tmp_path.rglob("escaped*"), *Path("/tmp").glob("escaped*")]
    assert all(p.resolve().is_relative_to(models) for p in written), written


@pytest.mark.parametrize("model_id", ["../x", "a/b", "..", "a/../../b", "/etc/passwd", "a\\b", "x\x00y"])
def test_model_ids_with_separators_or_dots_are_refused(model_id: str, tiny_llama: Path) -> None:
    with Library(load_settings()) as library:
        with pytest.raises(InvalidRequest):
            library.owned_dir(model_id)
        with pytest.raises(InvalidRequest):
            library.add_local(tiny_llama, model_id=model_id)
        with pytest.raises(ModelNotFound):
            library.get(model_id)


def test_a_symlinked_model_folder_is_neither_written_nor_deleted_through(tiny_llama: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep me")
    with Library(load_settings()) as library:
        entry = library.add_local(tiny_llama, copy=True, model_id="linked")
        folder = library.owned_dir("linked")
        # someone swaps the model's folder for a link to elsewhere
        for child in folder.iterdir():
            (outside / child.name).write_bytes(child.read_bytes())
            child.unlink()
        folder.rmdir()
        os.symlink(outside, folder)
        for act in (lambda: library.owned_dir("linked"), lambda: library.remove(entry.id)):
            with pytest.raises(InvalidRequest):  # refused: nothing is done through the link
                act()
    assert (outside / "precious.txt").read_text() == "keep me"
    assert (outside / Path(entry.path).name).exists(), "nothing outside the models folder was deleted"


def test_a_model_file_swapped_for_a_link_is_removed_as_a_link(tiny_llama: Path, tmp_path: Path) -> None:
    """Removing a model whose own file became a link to a file elsewhere deletes the link alone."""
    precious = tmp_path / "precious.gguf"
    precious.write_bytes(b"keep me")
    with Library(load_settings()) as library:
        entry = library.add_local(tiny_llama, copy=True, model_id="swapped")
        own = Path(entry.path)
        own.unlink()
        os.symlink(precious, own)
        library.remove(entry.id)
        assert not own.is_symlink() and not own.exists()
    assert precious.read_bytes() == b"keep me"
