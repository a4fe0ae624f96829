"""What `spark pull SPEC` means: a Hub repository, file or URL, or a local file."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import msgspec

from spark.errors import InvalidRequest, ModelFileError

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")  # the Hub's: at most 96 characters
_MAX_FILE_NAME = 255  # bytes in one part of a file's path, on the file systems models are saved to
_QUANT_TAG_RE = re.compile(r"[A-Za-z0-9_]+")
_HUB_HOSTS = {"huggingface.co", "www.huggingface.co", "hf.co"}

SPEC_FORMS = (
    "org/repo, org/repo:Q4_K_M, org/repo/file.gguf, a https://huggingface.co/... URL, or the path of a .gguf file"
)


class HubSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A model on the Hub: a repository, maybe narrowed to a file or a quantization."""

    repo: str
    revision: str = "main"
    filename: str | None = None  # path inside the repository
    quant: str | None = None  # uppercase, e.g. Q8_0


class LocalSpec(msgspec.Struct, frozen=True):
    path: str


def parse_pull_spec(spec: str, *, quant: str | None = None, endpoint: str = "") -> HubSpec | LocalSpec:
    """Parse a pull spec; `quant` (from `--quant`) must agree with a `:QUANT` tag in it.

    Raises `InvalidRequest` (param "spec" or "quant") for something that is none
    of the accepted forms, and `ModelFileError` for a local path that does not exist.
    """
    text = spec.strip()
    if not text:
        raise InvalidRequest(f"nothing to pull; give {SPEC_FORMS}", param="spec")
    wanted = _check_quant(quant, "quant") if quant else None

    if re.match(r"https?://", text, re.IGNORECASE):
        parsed = _parse_url(text, endpoint)
    elif _looks_local(text):
        if wanted:
            raise InvalidRequest("--quant applies to Hub repositories, not local files", param="quant")
        return LocalSpec(str(Path(text).expanduser()))
    else:
        text = re.sub(r"^(https?://)?(www\.)?(hf\.co|huggingface\.co)/", "", text, flags=re.IGNORECASE)
        parsed = _parse_repo_path(text)

    if wanted and parsed.quant and wanted != parsed.quant:
        raise InvalidRequest(f"--quant {wanted} contradicts the :{parsed.quant} in '{spec}'", param="quant")
    if wanted and parsed.filename:
        raise InvalidRequest(
            "--quant cannot be combined with a file name; the file already fixes the quantization",
            param="quant",
        )
    if wanted:
        parsed = msgspec.structs.replace(parsed, quant=wanted)
    return parsed


def _looks_local(text: str) -> bool:
    """Whether `text` names a local file: a path by its form, or a name that exists here. `org/repo` and
    `org/repo:QUANT` always name the Hub's repository: what lies in the current folder must not change
    what a command pulls (nor make a server look at its own folders)."""
    if text.startswith(("/", "./", "../", "~", "\\")):
        return True
    if text.count("/") == 1 and not text.lower().endswith(".gguf"):
        return False
    if exists_here(text):
        return True
    if text.lower().endswith(".gguf") and text.count("/") < 2:
        # `model.gguf` or `dir/model.gguf`: no Hub spec looks like this
        raise ModelFileError(f"{text}: no such file", param="spec")
    return False


def exists_here(text: str) -> bool:
    """Whether `text` is the path of something that exists (relative to the current folder); False
    for a name no path can have (longer than the system allows, say)."""
    try:
        return Path(text).exists()
    except (OSError, ValueError):  # ENAMETOOLONG; a NUL byte
        return False


def _parse_repo_path(text: str) -> HubSpec:
    tag = None
    head, sep, tail = text.rpartition(":")
    if sep and "/" not in tail:
        text, tag = head, _check_quant(tail, "spec")
    parts = text.strip("/").split("/")
    if len(parts) < 2 or not all(parts):
        raise InvalidRequest(f"'{_shown(text)}' is not a model spec; give {SPEC_FORMS}", param="spec")
    repo = _check_repo("/".join(parts[:2]))
    if len(parts) == 2:
        return HubSpec(repo=repo, quant=tag)
    filename = "/".join(parts[2:])
    if tag:
        raise InvalidRequest(f"give a file name or a :QUANT tag, not both ('{text}:{tag}')", param="spec")
    return HubSpec(repo=repo, filename=_check_filename(filename))


def _parse_url(url: str, endpoint: str) -> HubSpec:
    parts = urlsplit(url)
    hosts = set(_HUB_HOSTS)
    if endpoint:
        hosts.add(urlsplit(endpoint).netloc.lower())
    if parts.netloc.lower() not in hosts:
        raise InvalidRequest(
            f"{url} is not a Hugging Face URL (expected a host among {', '.join(sorted(hosts))})",
            param="spec",
        )
    segments = [unquote(s) for s in parts.path.strip("/").split("/") if s]
    if len(segments) < 2:
        raise InvalidRequest(f"{url} does not name a repository", param="spec")
    repo = _check_repo("/".join(segments[:2]))
    rest = segments[2:]
    if not rest:
        return HubSpec(repo=repo)
    if rest[0] in ("blob", "resolve") and len(rest) >= 3:
        return HubSpec(repo=repo, revision=rest[1], filename=_check_filename("/".join(rest[2:])))
    if rest[0] == "tree" and len(rest) == 2:
        return HubSpec(repo=repo, revision=rest[1])
    raise InvalidRequest(
        f"{url} is not a repository or file URL (use .../org/repo or .../org/repo/blob/main/file.gguf)",
        param="spec",
    )


def _check_repo(repo: str) -> str:
    if not all(_NAME_RE.fullmatch(p) and ".." not in p for p in repo.split("/")):
        raise InvalidRequest(
            f"'{_shown(repo)}' is not a valid Hugging Face repository id (org/name, each at most 96 letters, "
            "digits, '.', '_' or '-')",
            param="spec",
        )
    return repo


def _check_filename(filename: str) -> str:
    if not filename.lower().endswith(".gguf"):
        raise InvalidRequest(f"'{_shown(filename)}' is not a .gguf file; Spark runs GGUF models", param="spec")
    parts = filename.split("/")
    if any(p in ("", ".", "..") or len(p.encode()) > _MAX_FILE_NAME for p in parts):
        raise InvalidRequest(f"'{_shown(filename)}' is not a valid file path in a repository", param="spec")
    return filename


def _shown(text: str, most: int = 100) -> str:
    """`text` for a message, cut short when it is long."""
    return text if len(text) <= most else text[:most] + "…"


def _check_quant(tag: str, param: str) -> str:
    tag = tag.strip()
    if not _QUANT_TAG_RE.fullmatch(tag):
        raise InvalidRequest(f"'{tag}' is not a quantization tag (like Q4_K_M or Q8_0)", param=param)
    return tag.upper()
