"""A Hub repository's downloadable models, with the metadata a memory estimate needs, before any pull.

One listing call gives the repository's files and sizes; the header of one
model file (the one `spark pull` would pick, when it is a single file) is read
with Range requests, a megabyte or a few. The other quantizations of the same
repository share its architecture, so their metadata is that header's with the
tensor sizes scaled to their own file size: exact for the file read, close for
the rest (quantizations differ a little from layer to layer).
"""

from __future__ import annotations

import msgspec

from spark.errors import DownloadError, ModelFileError
from spark.library.hub import Hub, HubFile
from spark.library.metadata import GGUFInfo
from spark.library.naming import is_projector_filename
from spark.library.pulling import Variant, default_variant, group_variants, pick_projector, remote_info


class RepoModels(msgspec.Struct, frozen=True, kw_only=True):
    """The models of one repository and the header read for them."""

    repo: str
    variants: list[Variant]  # by name
    default: str | None  # the variant `spark pull org/repo` picks
    projector: HubFile | None  # the vision projector a pull attaches
    reference: GGUFInfo | None  # metadata of the variant named `reference_name`
    reference_name: str | None
    reference_whole: bool = True  # False: the first shard of a split model (only its tensors counted)
    note: str | None = None  # why there is no reference


def read_repo(hub: Hub, repo: str, revision: str = "main") -> RepoModels:
    """List `repo`'s models and read one header (`DownloadError` when the repository cannot be listed)."""
    files = hub.files(repo, revision)
    ggufs = [f for f in files if f.path.lower().endswith(".gguf")]
    variants = group_variants([f for f in ggufs if not is_projector_filename(f.path)])
    projector = pick_projector([f for f in ggufs if is_projector_filename(f.path)])
    if not variants:
        note = "this repository has no GGUF model files" if not ggufs else "only vision projector files"
        return RepoModels(
            repo=repo, variants=[], default=None, projector=projector, reference=None, reference_name=None, note=note
        )
    default = default_variant(variants)
    singles = [v for v in variants if len(v.files) == 1 and v.files[0].size]
    chosen = default if len(default.files) == 1 and default.files[0].size else min(singles, key=_size, default=default)
    first = chosen.files[0]
    try:
        info = remote_info(hub, repo, revision, first)
    except (DownloadError, ModelFileError) as e:
        return RepoModels(
            repo=repo,
            variants=variants,
            default=default.name,
            projector=projector,
            reference=None,
            reference_name=None,
            note=f"could not read the header of {first.path}: {e.message}",
        )
    return RepoModels(
        repo=repo,
        variants=variants,
        default=default.name,
        projector=projector,
        reference=info,
        reference_name=chosen.name,
        reference_whole=len(chosen.files) == 1,
    )


def variant_info(models: RepoModels, variant: Variant) -> GGUFInfo | None:
    """The metadata `variant` is estimated with: the header read, its tensor sizes scaled to its files."""
    ref = models.reference
    size = variant.size
    if ref is None or not size or not ref.file_size:
        return None
    if variant.name == models.reference_name and models.reference_whole:
        return ref
    ratio = size / ref.file_size if models.reference_whole else 1.0
    embedding = round(ref.embedding_bytes * ratio)
    output = round(ref.output_bytes * ratio)
    n = max(ref.n_layers, 1)
    if models.reference_whole:
        layers = [round(b * ratio) for b in ref.layer_bytes]
    else:  # only the first shard's layers were seen: share the rest of the size out evenly
        layers = [max(0, size - embedding - output) // n] * ref.n_layers
    return msgspec.structs.replace(
        ref,
        quantization=variant.quant or ref.quantization,
        file_size=size,
        embedding_bytes=embedding,
        output_bytes=output,
        layer_bytes=layers,
        tensor_bytes=embedding + output + sum(layers),
        parameter_count=ref.parameter_count,
    )


def _size(variant: Variant) -> int:
    return variant.size or 0
