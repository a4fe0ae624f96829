"""The library of installed models: what is installed, where its files are, its settings.

Metadata is read from the GGUF once, when a model is added, and kept in the
database with the model. Model ids come from users and clients, so they are
validated before use and never joined into a path unchecked: Spark's own files
for a model live in `models_dir/<id>/`, and only files inside `models_dir` are
ever deleted.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

import msgspec

from spark.errors import InvalidRequest, ModelFileError, ModelNotFound
from spark.library.bundled import (
    BUNDLED_ID,
    BUNDLED_SETTINGS,
    BUNDLED_SOURCE,
    EARLIER_BUNDLED_SETTINGS,
    bundled_model_path,
)
from spark.library.disk import ensure_free_space
from spark.library.entry import ModelEntry, ModelSettings, check_model_settings
from spark.library.metadata import GGUFInfo, adapter_mismatch, read_gguf_info
from spark.library.naming import (
    MODEL_ID_RE,
    check_model_id,
    legacy_model_id,
    model_id_from_filename,
    shard_paths,
)
from spark.settings import Settings
from spark.store import Database, ModelRecord, ModelTable, get_meta, set_meta
from spark.types import DRAFT_VOCAB_SLACK, MAX_LORA_SCALE, LoraAdapter

# meta key set when the user removes the bundled model, so it is not re-added
_BUNDLED_REMOVED = "library.bundled_removed"


class Library:
    """Installed models, backed by the SQLite store in `settings.db_path`."""

    def __init__(self, settings: Settings, *, db: Database | None = None) -> None:
        self.settings = settings
        self.models_dir = settings.models_dir
        self.models_dir.mkdir(parents=True, exist_ok=True)
        self._own_db = db is None
        self.db = db if db is not None else Database(settings.db_path)
        self.table = ModelTable(self.db)
        self._register_bundled()

    def close(self) -> None:
        """Close the database if this library opened it."""
        if self._own_db:
            self.db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # --- reading ------------------------------------------------------------
    def list(self) -> list[ModelEntry]:
        """Every installed model, by id."""
        return [_entry(r) for r in self.table.all()]

    def get(self, model_id: str) -> ModelEntry:
        """The model `model_id` (case-insensitive); `ModelNotFound` when not installed."""
        return _entry(self._record(model_id))

    def draft_for(self, entry: ModelEntry) -> ModelEntry | None:
        """The model that drafts for `entry` (its `draft_model` setting), if it names one."""
        return self.get(entry.settings.draft_model) if entry.settings.draft_model else None

    def exists(self, model_id: str) -> bool:
        """Whether `model_id` (or the id an older Spark gave the same model) is installed."""
        return self._find(model_id) is not None

    # --- adding -------------------------------------------------------------
    def add_local(
        self,
        path: str | Path,
        *,
        copy: bool = False,
        model_id: str | None = None,
        mmproj: str | Path | None = None,
    ) -> ModelEntry:
        """Add the GGUF model at `path` (first shard of a split model).

        The file is checked first. Without `copy` the library points at the file
        where it is and never deletes it; with `copy` it is copied into the models
        folder and owned by Spark. `mmproj` attaches a vision projector.
        """
        source_path = _existing_file(path)
        shards = shard_paths(source_path)
        info = read_gguf_info(source_path)
        if info.is_projector or info.is_adapter:
            kind = "a vision projector (mmproj)" if info.is_projector else "a LoRA adapter"
            raise ModelFileError(f"{source_path} is {kind}, not a model; attach it to a model instead", param="path")
        new_id = (
            check_model_id(model_id.strip().lower(), "model_id")
            if model_id
            else model_id_from_filename(source_path.name)
        )
        self._check_free_id(new_id)
        projector = _check_projector(mmproj) if mmproj is not None else None
        if not copy:
            return self.register(new_id, shards, info, source=f"local:{source_path}", owned=False, mmproj=projector)

        folder = self.owned_dir(new_id)
        needed = sum(p.stat().st_size for p in shards) + (projector.stat().st_size if projector else 0)
        ensure_free_space(self.models_dir, needed, f"copying {source_path.name}", ModelFileError)
        folder.mkdir(parents=True, exist_ok=True)
        try:
            copies = [_copy_into(p, folder) for p in shards]
            projector_copy = _copy_into(projector, folder) if projector else None
            return self.register(
                new_id,
                copies,
                info,
                source=f"local:{source_path}",
                owned=True,
                mmproj=projector_copy,
                mmproj_owned=projector_copy is not None,
            )
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise

    def register(
        self,
        model_id: str,
        shards: Sequence[Path],
        info: GGUFInfo,
        *,
        source: str,
        owned: bool,
        mmproj: Path | None = None,
        mmproj_owned: bool = False,
    ) -> ModelEntry:
        """Record checked model files under `model_id` (used by `add_local` and pulls)."""
        check_model_id(model_id, "model_id")
        size = sum(p.stat().st_size for p in shards) + (mmproj.stat().st_size if mmproj else 0)
        record = ModelRecord(
            id=model_id,
            path=str(shards[0]),
            shards=[str(p) for p in shards],
            mmproj_path=str(mmproj) if mmproj else None,
            mmproj_owned=mmproj_owned,
            size_bytes=size,
            info=msgspec.to_builtins(msgspec.structs.replace(info, has_vision=mmproj is not None)),
            settings=msgspec.to_builtins(ModelSettings()),
            source=source,
            owned=owned,
            added_at=time.time(),
        )
        if not self.table.insert(record):
            self._check_free_id(model_id)  # names the model that took the id meanwhile
            raise InvalidRequest(f"the model id '{model_id}' is taken", param="model_id")
        return _entry(record)

    def copy(self, model_id: str, new_id: str) -> ModelEntry:
        """Install the model `model_id` again as `new_id` (Ollama's `cp`): the same files, its own
        settings (a copy of the model's to start with). The files stay while any model uses them."""
        new_id = check_model_id(new_id.strip().lower(), "id")
        with self.db.transaction():
            record = self._record(model_id)
            self._check_free_id(new_id, "id")
            copied = msgspec.structs.replace(record, id=new_id, source=f"copy:{record.id}", added_at=time.time())
            self.table.insert(copied)
        return _entry(copied)

    def sharing(self, model_id: str) -> tuple[str, ...]:
        """The other installed models that use any of this model's files (its copies, its original)."""
        record = self._record(model_id)
        mine = _files(record)
        return tuple(sorted(r.id for r in self.table.all() if r.id != record.id and mine & _files(r)))

    # --- changing -----------------------------------------------------------
    def update_settings(self, model_id: str, settings: ModelSettings) -> ModelEntry:
        """Replace the model's own settings (`InvalidRequest` naming a bad field)."""
        with self.db.transaction():
            record = self._record(model_id)
            check_model_settings(settings, _entry(record).info)
            if settings.draft_model is not None:
                draft_id = self._check_draft(record, settings.draft_model)
                settings = msgspec.structs.replace(settings, draft_model=draft_id)
            updated = msgspec.structs.replace(record, settings=msgspec.to_builtins(settings))
            self.table.update(updated)
        return _entry(updated)

    def attach_projector(self, model_id: str, path: str | Path, *, copy: bool = False) -> ModelEntry:
        """Attach the vision projector (mmproj GGUF) at `path` to the model, replacing any other.

        With `copy` the file is copied into the model's folder and owned by Spark.
        """
        projector = _check_projector(path)
        record = self._record(model_id)
        owned = copy or _is_inside(projector, self.owned_dir(record.id))
        if copy:
            ensure_free_space(self.models_dir, projector.stat().st_size, f"copying {projector.name}", ModelFileError)
            self.owned_dir(record.id).mkdir(parents=True, exist_ok=True)
            projector = _copy_into(projector, self.owned_dir(record.id))
        old = Path(record.mmproj_path) if record.mmproj_path and record.mmproj_owned else None
        info = msgspec.structs.replace(_entry(record).info, has_vision=True)
        size = sum(_size(Path(p)) for p in record.shards) + projector.stat().st_size
        updated = msgspec.structs.replace(
            record,
            mmproj_path=str(projector),
            mmproj_owned=owned,
            size_bytes=size,
            info=msgspec.to_builtins(info),
        )
        self.table.update(updated)
        if old is not None and old != projector:
            self._delete_unused([old])
        return _entry(updated)

    def attach(self, model_id: str, path: str | Path, *, scale: float | None = None, copy: bool = False) -> ModelEntry:
        """Attach the file at `path` to the model: a LoRA adapter (at `scale`, default 1) with
        `attach_adapter`, else a vision projector with `attach_projector`; any other file (a model) is
        refused as neither."""
        info = read_gguf_info(_existing_file(path))
        if info.is_adapter:
            return self.attach_adapter(model_id, path, scale=1.0 if scale is None else scale, copy=copy)
        if not info.is_projector:
            raise ModelFileError(
                f"{path} is neither a vision projector (mmproj) nor a LoRA adapter: only those attach to a model",
                param="path",
            )
        if scale is not None:
            raise InvalidRequest(f"{path} is no LoRA adapter: a scale applies to LoRA adapters only", param="scale")
        return self.attach_projector(model_id, path, copy=copy)

    def attach_adapter(self, model_id: str, path: str | Path, *, scale: float = 1.0, copy: bool = False) -> ModelEntry:
        """Apply the LoRA adapter at `path` to the model's weights at `scale` (after those already
        attached; the same file again changes its scale). With `copy` the file is copied into the
        model's folder and owned by Spark. Make a copy of the model first (`copy`) to keep the plain one."""
        check_scale(scale)
        adapter = _existing_file(path)
        info = read_gguf_info(adapter)
        if not info.is_adapter:
            raise ModelFileError(f"{adapter} is not a LoRA adapter file", param="lora")
        if info.activated:
            raise ModelFileError(
                f"{adapter} is an activated LoRA (aLoRA), meant to apply only from its invocation tokens on; "
                "Spark applies an adapter to every token",
                param="lora",
            )
        record = self._record(model_id)
        architecture = _entry(record).info.architecture
        if info.architecture != architecture:
            raise ModelFileError(
                f"{adapter} is a LoRA adapter for {info.architecture} models, not for {record.id} ({architecture})",
                param="lora",
            )
        if (why := adapter_mismatch(adapter, record.path)) is not None:
            raise ModelFileError(f"{adapter} does not fit {record.id}: {why} (made for another model?)", param="lora")
        same = {str(adapter)}  # the file, and its copy: attached again, either replaces the other
        if copy:
            folder = self.owned_dir(record.id)
            ensure_free_space(self.models_dir, adapter.stat().st_size, f"copying {adapter.name}", ModelFileError)
            folder.mkdir(parents=True, exist_ok=True)
            adapter = _copy_into(adapter, folder)
            same.add(str(adapter))
        with self.db.transaction():
            record = self._record(model_id)
            kept = [a for a in record.lora if a["path"] not in same]
            updated = msgspec.structs.replace(
                record,
                lora=[*kept, {"path": str(adapter), "scale": scale}],
                size_bytes=record.size_bytes - _size_of(record.lora, same) + adapter.stat().st_size,
            )
            self.table.update(updated)
        return _entry(updated)

    def detach_adapters(self, model_id: str) -> tuple[ModelEntry, tuple[str, ...]]:
        """Take every LoRA adapter off the model; the entry and the files it used. Spark's own copies
        (in its models folder) are deleted once no model uses them."""
        with self.db.transaction():
            record = self._record(model_id)
            paths = tuple(a["path"] for a in record.lora)
            updated = msgspec.structs.replace(
                record, lora=[], size_bytes=record.size_bytes - sum(_size(Path(p)) for p in paths)
            )
            self.table.update(updated)
        self._delete_unused([Path(p) for p in paths])  # Spark's own (in its models folder) and unused only
        return _entry(updated), paths

    def detach_projector(self, model_id: str) -> tuple[ModelEntry, str | None]:
        """Take the vision projector off the model (it reads no images from its next load); the entry
        and the file it used (None when it had none). Spark's own copy is deleted once no model uses it."""
        with self.db.transaction():
            record = self._record(model_id)
            path = record.mmproj_path
            if path is None:
                return _entry(record), None
            info = msgspec.structs.replace(_entry(record).info, has_vision=False)
            updated = msgspec.structs.replace(
                record,
                mmproj_path=None,
                mmproj_owned=False,
                size_bytes=record.size_bytes - _size(Path(path)),
                info=msgspec.to_builtins(info),
            )
            self.table.update(updated)
        if record.mmproj_owned:
            self._delete_unused([Path(path)])
        return _entry(updated), path

    def remove(self, model_id: str) -> None:
        """Forget the model and delete the files Spark owns that no other model uses (a copy's); a
        user's own files are kept. A model that drafts for another is kept (`InvalidRequest`) until
        that one's draft_model changes."""
        record = self._record(model_id)
        users = sorted(e.id for e in self.list() if e.settings.draft_model == record.id)
        if users:
            raise InvalidRequest(
                f"{record.id} is the draft model of {', '.join(users)}: change their draft_model first",
                param="model",
            )
        self.table.delete(record.id)
        if record.source == BUNDLED_SOURCE:
            set_meta(self.db, _BUNDLED_REMOVED, "1")
        owned = [Path(shard) for shard in record.shards] if record.owned else []
        if record.mmproj_path and record.mmproj_owned:
            owned.append(Path(record.mmproj_path))
        owned += [Path(a["path"]) for a in record.lora]  # a user's own file is outside the models folder: kept
        self._delete_unused(owned)
        folder = self.owned_dir(record.id)
        shared = any(_is_inside(Path(p), folder) for p in self._used_paths())
        if folder.is_dir() and not shared and (record.owned or not any(folder.iterdir())):
            shutil.rmtree(folder, ignore_errors=True)  # also drops partial downloads

    # --- paths --------------------------------------------------------------
    def owned_dir(self, model_id: str) -> Path:
        """The folder for Spark's own files of `model_id` (the id is checked first)."""
        folder = self.models_dir / check_model_id(model_id)
        if not _is_inside(folder, self.models_dir):
            raise InvalidRequest(f"'{model_id}' is not a valid model id", param="model")
        return folder

    # --- internals ----------------------------------------------------------
    def _record(self, model_id: str) -> ModelRecord:
        record = self._find(model_id)
        if record is None:
            raise ModelNotFound(str(model_id))
        return record

    def _find(self, model_id: object) -> ModelRecord | None:
        """The model with this id (or, for an Ollama client's `NAME:latest`, NAME), else the one whose
        id reads the same with dots as dashes (ids stored before dots were kept, and old names for newer ids)."""
        key = _lookup_key(model_id)
        if key is None:
            return None
        record = self.table.get(key) or self.table.get(key.removesuffix(":latest"))
        if record is None:
            alias = legacy_model_id(key)
            matches = [i for i in self.table.ids() if legacy_model_id(i) == alias]
            record = self.table.get(matches[0]) if len(matches) == 1 else None
        return record

    def _check_draft(self, record: ModelRecord, draft_id: str) -> str:
        """The id of the installed model `draft_id` if it can draft for `record`'s model, else
        `InvalidRequest` naming draft_model (the vocabularies are compared token by token at load)."""
        found = self._find(draft_id)
        if found is None:
            raise InvalidRequest(f"draft_model: no model '{draft_id}' is installed", param="draft_model")
        target, draft = _entry(record).info, _entry(found).info
        why = None
        if found.id == record.id:
            why = "a model cannot draft for itself"
        elif target.is_embedding or draft.is_embedding:
            why = "embedding models do not generate"
        elif abs(target.vocab_size - draft.vocab_size) > DRAFT_VOCAB_SLACK:
            why = f"its vocabulary has {draft.vocab_size} tokens, this model's {target.vocab_size}"
        if why:
            raise InvalidRequest(f"draft_model {found.id} cannot draft for {record.id}: {why}", param="draft_model")
        return found.id

    def _check_free_id(self, model_id: str, param: str = "model_id") -> None:
        existing = self._find(model_id)
        if existing is not None:
            raise InvalidRequest(
                f"a model named '{existing.id}' is already installed (from {existing.source}); "
                "remove it first or choose another id",
                param=param,
            )

    def _used_paths(self) -> set[str]:
        """The files the installed models use (copies share their original's)."""
        return {p for r in self.table.all() for p in _files(r)}

    def _delete_unused(self, paths: Sequence[Path]) -> None:
        """Delete those of Spark's own files `paths` that no installed model uses, and their folder
        once it is empty (the original's folder, when its last copy goes)."""
        used = self._used_paths()
        for path in paths:
            if str(path) in used or not _is_inside(path, self.models_dir):
                continue
            path.unlink(missing_ok=True)
            if path.parent != self.models_dir and _is_inside(path.parent, self.models_dir):
                with contextlib.suppress(OSError):  # not empty: other files stay
                    path.parent.rmdir()

    def _register_bundled(self) -> None:
        """Add the bundled SmolLM2 on first use, and follow it when its package moves."""
        path = bundled_model_path()
        if path is None:
            return
        record = self.table.get(BUNDLED_ID)
        if record is not None:
            if record.source != BUNDLED_SOURCE:
                return
            changes: dict[str, object] = {}
            if record.path != str(path):
                changes.update(path=str(path), shards=[str(path)])
            # settings nobody changed follow Spark's current choice for the bundled model
            if any(record.settings == msgspec.to_builtins(s) for s in EARLIER_BUNDLED_SETTINGS):
                changes["settings"] = msgspec.to_builtins(BUNDLED_SETTINGS)
            if changes:
                self.table.update(msgspec.structs.replace(record, **changes))
            return
        if get_meta(self.db, _BUNDLED_REMOVED) == "1":
            return
        try:
            info = read_gguf_info(path)
        except ModelFileError:
            return  # a damaged package install should not break the library
        self.table.insert(
            ModelRecord(
                id=BUNDLED_ID,
                path=str(path),
                shards=[str(path)],
                mmproj_path=None,
                mmproj_owned=False,
                size_bytes=info.file_size,
                info=msgspec.to_builtins(info),
                settings=msgspec.to_builtins(BUNDLED_SETTINGS),
                source=BUNDLED_SOURCE,
                owned=False,
                added_at=time.time(),
            )
        )


def _lookup_key(model_id: object) -> str | None:
    """A user-typed id as stored (lowercase), or None when no model can have it."""
    if not isinstance(model_id, str):
        return None
    key = model_id.strip().lower()
    return key if MODEL_ID_RE.fullmatch(key) and ".." not in key else None


def _entry(record: ModelRecord) -> ModelEntry:
    return ModelEntry(
        id=record.id,
        path=record.path,
        shards=record.shards,
        mmproj_path=record.mmproj_path,
        mmproj_owned=record.mmproj_owned,
        lora=[LoraAdapter(path=a["path"], scale=a["scale"]) for a in record.lora],
        size_bytes=record.size_bytes,
        info=msgspec.convert(record.info, GGUFInfo),
        settings=msgspec.convert(record.settings, ModelSettings, strict=False),  # JSON keys are text
        source=record.source,
        owned=record.owned,
        added_at=record.added_at,
    )


def check_scale(scale: float) -> None:
    """Refuse a LoRA adapter's scale that is no number within `MAX_LORA_SCALE` (`InvalidRequest`)."""
    if not math.isfinite(scale) or not -MAX_LORA_SCALE <= scale <= MAX_LORA_SCALE:
        raise InvalidRequest(
            f"scale must be between {-MAX_LORA_SCALE:g} and {MAX_LORA_SCALE:g}, not {scale}", param="scale"
        )


def _files(record: ModelRecord) -> set[str]:
    """Every file `record` uses: its shards, projector and LoRA adapters."""
    return {p for p in (*record.shards, record.mmproj_path, *(a["path"] for a in record.lora)) if p}


def _size_of(lora: list[dict[str, Any]], paths: set[str]) -> int:
    """The size of those of the adapters `lora` whose file is one of `paths`."""
    return sum(_size(Path(a["path"])) for a in lora if a["path"] in paths)


def _existing_file(path: str | Path) -> Path:
    p = Path(path).expanduser().absolute()
    if not p.exists():
        raise ModelFileError(f"{path}: no such file", param="path")
    if not p.is_file():
        raise ModelFileError(f"{path} is not a file", param="path")
    return p


def _check_projector(path: str | Path) -> Path:
    p = _existing_file(path)
    if not read_gguf_info(p).is_projector:
        raise ModelFileError(f"{p} is not a vision projector (mmproj) file", param="mmproj")
    return p


def _copy_into(path: Path, folder: Path) -> Path:
    """Copy `path` into `folder` through a temporary name, so no half file is ever seen."""
    dest = folder / path.name
    tmp = dest.with_name(dest.name + ".part")
    shutil.copyfile(path, tmp)
    os.replace(tmp, dest)
    return dest


def _is_inside(path: Path, folder: Path) -> bool:
    resolved, root = path.resolve(), folder.resolve()
    return resolved != root and resolved.is_relative_to(root)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
