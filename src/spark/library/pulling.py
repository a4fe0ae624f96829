"""`spark pull`: choose the files of a Hub repository, download them, add the model.

`plan_pull` decides what a spec means (which quantization, which shards, which
vision projector) without downloading anything, so front ends can show the
choice first; `run_pull` downloads a plan and registers the model. `pull` does
both, and also takes local files. Progress goes to a callback; rendering it is
the front end's business.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

import msgspec

from spark.errors import DownloadError, InvalidRequest, ModelFileError, ModelNotFound, SparkError
from spark.library.catalog import Library
from spark.library.disk import ensure_free_space
from spark.library.download import ProgressFn, download_file, open_client, part_path, read_start
from spark.library.entry import ModelEntry
from spark.library.hub import Hub, HubFile
from spark.library.metadata import GGUFInfo, read_gguf_info, read_remote_gguf_info
from spark.library.naming import (
    QUANT_PREFERENCE,
    is_projector_filename,
    model_id_from_filename,
    quant_from_filename,
    shard_name,
    split_info,
)
from spark.library.spec import SPEC_FORMS, HubSpec, LocalSpec, exists_here, parse_pull_spec
from spark.units import format_bytes

_PROJECTOR_PREFERENCE = ("F16", "BF16", "Q8_0", "F32")
_LISTED = 12  # files named in "this repository has ..." messages


class Variant(msgspec.Struct, frozen=True):
    """One downloadable model in a repository: a single file or a set of shards."""

    files: list[HubFile]
    quant: str | None

    @property
    def name(self) -> str:
        return self.files[0].path

    @property
    def size(self) -> int | None:
        sizes = [f.size for f in self.files]
        return None if None in sizes else sum(s for s in sizes if s is not None)


class PullPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What a pull will download, decided before any byte is fetched."""

    repo: str
    revision: str
    model_id: str
    files: list[HubFile]  # the model file, or its shards in order
    mmproj: HubFile | None
    quant: str | None
    default_pick: bool  # the quantization was chosen by Spark, not asked for
    available_quants: list[str]  # every quantization the repository offers, preferred first

    @property
    def total_bytes(self) -> int | None:
        sizes = [f.size for f in [*self.files, *([self.mmproj] if self.mmproj else [])]]
        return None if None in sizes else sum(s for s in sizes if s is not None)

    @property
    def source(self) -> str:
        return f"hf:{self.repo}/{self.files[0].path}"

    def describe(self) -> str:
        """One line for the user: what was picked and what else there is."""
        what = f"{self.repo}/{self.files[0].path}"
        if len(self.files) > 1:
            what += f" (+{len(self.files) - 1} more shards)"
        size = self.total_bytes
        text = f"pulling {what}" + (f", {format_bytes(size)}" if size is not None else "")
        if self.default_pick:
            others = [q for q in self.available_quants if q != self.quant]
            text += f"; picked {self.quant or 'the only model file'}"
            if others:
                text += f" (also available: {', '.join(others)}; choose with --quant or {self.repo}:QUANT)"
        if self.mmproj:
            text += f"; with vision projector {self.mmproj.path}"
        return text


class PullResult(msgspec.Struct, frozen=True, kw_only=True):
    entry: ModelEntry
    plan: PullPlan | None  # None for a local file
    already_installed: bool = False


def pull(
    library: Library,
    spec: str,
    *,
    quant: str | None = None,
    copy: bool = False,
    progress: ProgressFn | None = None,
    on_plan: Callable[[PullPlan], None] | None = None,
    hub: Hub | None = None,
) -> PullResult:
    """Pull `spec` (see `spark.library.spec`) into the library.

    A Hub spec is planned (`on_plan` sees the plan before downloading), downloaded
    with resume and checksum verification, and registered; a local path is added
    with `Library.add_local` (`copy` copies it). An installed model id is a no-op.
    """
    text = spec.strip()
    if text and not any(c in text for c in "/:") and not text.lower().endswith(".gguf") and not exists_here(text):
        # a bare word: only an installed model id makes sense
        try:
            return PullResult(entry=library.get(text), plan=None, already_installed=True)
        except ModelNotFound:
            raise InvalidRequest(
                f"'{text}' is not an installed model nor a model spec; give {SPEC_FORMS}", param="spec"
            ) from None
    hub = hub or Hub(library.settings)
    parsed = parse_pull_spec(spec, quant=quant, endpoint=hub.endpoint)
    if isinstance(parsed, LocalSpec):
        return PullResult(entry=library.add_local(parsed.path, copy=copy), plan=None)
    plan = plan_pull(hub, parsed)
    existing = installed_for(library, plan)
    if existing is not None:
        return PullResult(entry=existing, plan=plan, already_installed=True)
    if on_plan:
        on_plan(plan)
    return PullResult(entry=run_pull(library, hub, plan, progress=progress), plan=plan)


def installed_for(library: Library, plan: PullPlan) -> ModelEntry | None:
    """The installed model `plan` would add, when it is installed with its files in place.

    A model from the same source whose files are gone is forgotten (to be pulled
    again); `InvalidRequest` when another model already has the plan's id.
    """
    existing = library.get(plan.model_id) if library.exists(plan.model_id) else None
    if existing is not None and existing.source == plan.source:
        if all(Path(p).is_file() for p in existing.shards):
            return existing
        library.remove(existing.id)  # its files are gone: pull them again
        existing = None
    if existing is not None:
        raise InvalidRequest(
            f"a model named '{existing.id}' is already installed (from {existing.source}); "
            f"remove it first with `spark rm {existing.id}`",
            param="spec",
        )
    return None


def plan_pull(hub: Hub, spec: HubSpec) -> PullPlan:
    """Decide which files of `spec.repo` make up the model (`DownloadError` when none fit)."""
    files = hub.files(spec.repo, spec.revision)
    ggufs = [f for f in files if f.path.lower().endswith(".gguf")]
    if not ggufs:
        raise DownloadError(
            f"repository '{spec.repo}' has no GGUF files (it has: {_listing([f.path for f in files])}); "
            "Spark runs GGUF models, try `spark search` for a GGUF version"
        )
    variants = group_variants([f for f in ggufs if not is_projector_filename(f.path)])
    if not variants:
        raise DownloadError(f"repository '{spec.repo}' has only vision projector files, no model")
    available = _ordered_quants({v.quant for v in variants if v.quant})

    default_pick = False
    if spec.filename:
        variant = _variant_for_file(variants, ggufs, spec)
    elif spec.quant:
        matches = [v for v in variants if v.quant == spec.quant]
        if not matches:
            raise DownloadError(
                f"repository '{spec.repo}' has no {spec.quant} file; available quantizations: "
                f"{', '.join(available) or 'none recognised'} (files: {_names(variants)})"
            )
        variant = matches[0]
    else:
        variant, default_pick = default_variant(variants), True

    projectors = [f for f in ggufs if is_projector_filename(f.path)]
    return PullPlan(
        repo=spec.repo,
        revision=spec.revision,
        model_id=model_id_from_filename(PurePosixPath(variant.name).name),
        files=variant.files,
        mmproj=pick_projector(projectors),
        quant=variant.quant,
        default_pick=default_pick,
        available_quants=available,
    )


def run_pull(library: Library, hub: Hub, plan: PullPlan, *, progress: ProgressFn | None = None) -> ModelEntry:
    """Download the plan's files into the model's folder, verify them, then register the model.

    Nothing is registered until every file is complete and checked: files are
    written as `*.part` and renamed only at the end.
    """
    folder = library.owned_dir(plan.model_id)
    folder.mkdir(parents=True, exist_ok=True)
    try:
        return _download_and_register(library, hub, plan, folder, progress)
    except BaseException:
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()  # nothing worth keeping (a partial download is kept for resuming)
        raise


def _download_and_register(
    library: Library, hub: Hub, plan: PullPlan, folder: Path, progress: ProgressFn | None
) -> ModelEntry:
    with _pull_lock(folder, plan.model_id):
        dests = _download(hub, plan, folder, progress)
        shards = dests[: len(plan.files)]
        problem = None
        try:
            info = read_gguf_info(shards[0])
        except ModelFileError as e:
            problem = f"the downloaded file is not a usable model: {e.message}"
        else:
            if info.is_adapter:
                problem = (
                    f"{plan.files[0].path} is a LoRA adapter, not a model: attach it to its model with "
                    f"`spark attach MODEL {plan.repo}/{plan.files[0].path}`"
                )
        if problem is not None:
            for d in dests:
                d.unlink(missing_ok=True)
            raise DownloadError(problem)
        mmproj = dests[-1] if plan.mmproj else None
        if mmproj is not None and not _is_projector(mmproj):
            mmproj.unlink(missing_ok=True)  # a file named like a projector that is none: leave it out
            mmproj = None
        return library.register(
            plan.model_id,
            shards,
            info,
            source=plan.source,
            owned=True,
            mmproj=mmproj,
            mmproj_owned=mmproj is not None,
        )


def _download(hub: Hub, plan: PullPlan, folder: Path, progress: ProgressFn | None) -> list[Path]:
    """Download the plan's files (projector last) into `folder`, resuming, verified; their paths.
    Call with the folder's `_pull_lock` held."""
    wanted = [*plan.files, *([plan.mmproj] if plan.mmproj else [])]
    dests = [folder / PurePosixPath(f.path).name for f in wanted]
    # files finished and renamed by an earlier pull that stopped before registering
    done = [d.exists() and d.stat().st_size == f.size for f, d in zip(wanted, dests, strict=True)]
    remaining = sum(
        max(0, (f.size or 0) - _size(part_path(d))) for f, d, ok in zip(wanted, dests, done, strict=True) if not ok
    )
    ensure_free_space(folder, remaining, f"{plan.repo}/{plan.files[0].path}")
    with open_client(hub.headers()) as client:
        for f, dest, ok in zip(wanted, dests, done, strict=True):
            if ok:
                continue
            download_file(
                client,
                hub.file_url(plan.repo, plan.revision, f.path),
                dest,
                size=f.size,
                sha256=f.sha256,
                progress=progress,
            )
    for dest in dests:
        if part_path(dest).exists():
            os.replace(part_path(dest), dest)
    return dests


def remote_info(hub: Hub, repo: str, revision: str, file: HubFile) -> GGUFInfo:
    """The metadata in the header of a GGUF file on the Hub, read without downloading the file."""
    with open_client(hub.headers()) as client:
        url, name = hub.file_url(repo, revision, file.path), PurePosixPath(file.path).name
        return read_remote_gguf_info(lambda n: read_start(client, url, n, name), name, file.size or 0)


def pull_adapter(
    library: Library,
    model_id: str,
    spec: str,
    *,
    scale: float | None = None,
    progress: ProgressFn | None = None,
    on_plan: Callable[[PullPlan], None] | None = None,
    hub: Hub | None = None,
) -> ModelEntry:
    """Attach the LoRA adapter `spec` names to the model (`Library.attach_adapter`): a local file, or
    a file on the Hub (org/repo[:QUANT] or org/repo/file.gguf), downloaded into the model's folder
    (Spark's own: it goes when the adapter is detached or the model removed)."""
    hub = hub or Hub(library.settings)
    parsed = parse_pull_spec(spec, endpoint=hub.endpoint)
    scale = 1.0 if scale is None else scale
    if isinstance(parsed, LocalSpec):
        return library.attach_adapter(model_id, parsed.path, scale=scale)
    model_id = library.get(model_id).id
    plan = msgspec.structs.replace(plan_pull(hub, parsed), model_id=model_id, mmproj=None)
    first = plan.files[0]
    info = remote_info(hub, plan.repo, plan.revision, first)  # its header first: no model is downloaded for nothing
    if not info.is_adapter or len(plan.files) > 1:
        raise DownloadError(f"{plan.repo}/{first.path} is not a LoRA adapter (a model? pull it with `spark pull`)")
    if on_plan:
        on_plan(plan)
    folder = library.owned_dir(model_id)
    folder.mkdir(parents=True, exist_ok=True)
    with _pull_lock(folder, model_id):
        (path,) = _download(hub, plan, folder, progress)
        try:
            return library.attach_adapter(model_id, path, scale=scale)
        except SparkError:
            path.unlink(missing_ok=True)  # not an adapter for this model: nothing of it stays
            with contextlib.suppress(OSError):
                folder.rmdir()
            raise


# --- choosing files -----------------------------------------------------------


def group_variants(files: list[HubFile]) -> list[Variant]:
    """Group model files: every single file, and every complete shard set, by name."""
    singles: list[Variant] = []
    sets: dict[tuple[str, str, int], dict[int, HubFile]] = {}
    for f in files:
        split = split_info(f.path)
        if split is None:
            singles.append(Variant([f], quant_from_filename(f.path)))
        else:
            stem, number, count = split
            sets.setdefault((str(PurePosixPath(f.path).parent), stem, count), {})[number] = f
    for (_, _, count), parts in sets.items():
        if sorted(parts) == list(range(1, count + 1)):
            ordered = [parts[i] for i in range(1, count + 1)]
            singles.append(Variant(ordered, quant_from_filename(ordered[0].path)))
    return sorted(singles, key=lambda v: v.name)


def _variant_for_file(variants: list[Variant], ggufs: list[HubFile], spec: HubSpec) -> Variant:
    wanted = spec.filename or ""
    for v in variants:
        if any(f.path == wanted for f in v.files):
            return v
    if any(f.path == wanted for f in ggufs):
        if is_projector_filename(wanted):
            raise DownloadError(
                f"{wanted} is a vision projector; pull the model ({spec.repo}) and the projector comes with it"
            )
        split = split_info(wanted)
        if split:
            stem, _, count = split
            first = shard_name(stem, 1, count)
            raise DownloadError(f"'{spec.repo}' is missing shards of {first}; the split model is incomplete")
    raise DownloadError(
        f"file '{wanted}' not found in repository '{spec.repo}'; its GGUF files are: {_names(variants)}"
    )


def default_variant(variants: list[Variant]) -> Variant:
    """What `spark pull org/repo` picks: the preferred quantization, else the smallest file."""
    rank = {q: i for i, q in enumerate(QUANT_PREFERENCE)}
    known = [v for v in variants if v.quant in rank]
    if known:
        return min(known, key=lambda v: (rank[v.quant or ""], v.name))
    return min(variants, key=lambda v: (v.size if v.size is not None else float("inf"), v.name))


def pick_projector(projectors: list[HubFile]) -> HubFile | None:
    """The vision projector a pull attaches: F16 first, then BF16, Q8_0, F32."""
    if not projectors:
        return None
    rank = {q: i for i, q in enumerate(_PROJECTOR_PREFERENCE)}
    return min(projectors, key=lambda f: (rank.get(quant_from_filename(f.path) or "", len(rank)), f.path))


def _ordered_quants(quants: set[str]) -> list[str]:
    rank = {q: i for i, q in enumerate(QUANT_PREFERENCE)}
    return sorted(quants, key=lambda q: (rank.get(q, len(rank)), q))


def _names(variants: list[Variant]) -> str:
    return _listing([v.name for v in variants])


def _listing(names: list[str]) -> str:
    if not names:
        return "no files"
    return ", ".join(names[:_LISTED]) + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")


# --- helpers ------------------------------------------------------------------


@contextmanager
def _pull_lock(folder: Path, model_id: str) -> Iterator[None]:
    """An exclusive lock on a model's folder, so two pulls never write the same files."""
    path = folder / ".pull.lock"
    with path.open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DownloadError(f"'{model_id}' is already being pulled by another process") from None
        try:
            yield
        finally:
            path.unlink(missing_ok=True)


def _is_projector(path: Path) -> bool:
    try:
        return read_gguf_info(path).is_projector
    except ModelFileError:
        return False


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
