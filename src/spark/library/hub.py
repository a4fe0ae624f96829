"""The Hugging Face Hub: searching GGUF models and listing a repository's files.

Talks to `settings.hf_endpoint` with `huggingface_hub.HfApi`; every failure
becomes a `DownloadError` that says what went wrong in the user's terms.
File downloads themselves are in `spark.library.download`. `huggingface_hub`
is imported on first use: a server that never searches or pulls does not hold it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from urllib.parse import quote

import msgspec

from spark import __version__
from spark.errors import DownloadError, HubRepoNotFound
from spark.settings import Settings


def _transport_errors() -> tuple[type[Exception], ...]:
    """Connection-level errors of the HTTP clients huggingface_hub may be built on."""
    import httpx

    errors: list[type[Exception]] = [httpx.HTTPError, OSError]
    try:
        import httpx2  # huggingface_hub >= 2 uses this fork of httpx

        errors.append(httpx2.HTTPError)
    except ImportError:
        pass
    return tuple(errors)


class HubModel(msgspec.Struct, frozen=True, kw_only=True):
    """One search result."""

    id: str
    downloads: int = 0
    likes: int = 0
    parameters: int | None = None  # from the Hub's GGUF summary, when it has one
    architecture: str | None = None
    context_length: int | None = None
    last_modified: datetime | None = None


class HubFile(msgspec.Struct, frozen=True, kw_only=True):
    """One file of a repository."""

    path: str  # relative to the repository root
    size: int | None = None
    sha256: str | None = None  # Git LFS checksum; None for small non-LFS files


class Hub:
    """The Hub at `settings.hf_endpoint`, authenticated with `settings.hf_token` when set."""

    def __init__(self, settings: Settings) -> None:
        from huggingface_hub import HfApi, get_token

        self.endpoint = settings.hf_endpoint.rstrip("/")
        self.token = settings.hf_token or get_token() or None
        self.api = HfApi(
            endpoint=self.endpoint,
            token=self.token or False,
            library_name="spark",
            library_version=__version__,
        )

    def search(self, query: str, *, limit: int = 20) -> list[HubModel]:
        """GGUF repositories matching `query`, most downloaded first."""
        from huggingface_hub import get_session

        with hub_errors(f"searching the Hub for '{query}'", self.endpoint):
            # huggingface_hub retries a list 5 times over 20 s when the Hub cannot be reached: ask once first
            get_session().head(self.endpoint, timeout=10)
            found = self.api.list_models(
                search=query or None,
                filter="gguf",
                sort="downloads",
                limit=limit,
                expand=["downloads", "likes", "gguf", "lastModified"],
            )
            results = []
            for m in found:
                summary = m.gguf if isinstance(m.gguf, dict) else {}
                results.append(
                    HubModel(
                        id=m.id,
                        downloads=m.downloads or 0,
                        likes=m.likes or 0,
                        parameters=_int_or_none(summary.get("total")),
                        architecture=summary.get("architecture"),
                        context_length=_int_or_none(summary.get("context_length")),
                        last_modified=m.last_modified,
                    )
                )
        return results

    def files(self, repo: str, revision: str = "main") -> list[HubFile]:
        """Every file of `repo` at `revision`, with sizes and LFS checksums."""
        with hub_errors(f"listing '{repo}'", self.endpoint, repo=repo, revision=revision):
            info = self.api.model_info(repo, revision=None if revision == "main" else revision, files_metadata=True)
        return [
            HubFile(path=s.rfilename, size=s.size, sha256=s.lfs.sha256 if s.lfs else None) for s in info.siblings or []
        ]

    def file_url(self, repo: str, revision: str, path: str) -> str:
        return f"{self.endpoint}/{repo}/resolve/{quote(revision, safe='')}/{quote(path)}"

    def headers(self) -> dict[str, str]:
        """Headers for file downloads (same token and user agent as the API calls)."""
        headers = {"User-Agent": f"spark/{__version__}"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers


@contextmanager
def hub_errors(doing: str, endpoint: str, *, repo: str | None = None, revision: str = "main") -> Iterator[None]:
    """Turn huggingface_hub and connection errors into a `DownloadError` about `doing`."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        yield
    except GatedRepoError:
        raise DownloadError(
            f"repository '{repo}' is gated: accept its terms on the Hub, then set hf_token "
            "(SPARK_HF_TOKEN) to a token of that account"
        ) from None
    except RepositoryNotFoundError:
        raise HubRepoNotFound(
            f"repository '{repo}' not found on the Hub (private repositories need hf_token / SPARK_HF_TOKEN)"
        ) from None
    except RevisionNotFoundError:
        raise DownloadError(f"revision '{revision}' not found in repository '{repo}'") from None
    except RemoteEntryNotFoundError:
        raise DownloadError(f"not found on the Hub while {doing}") from None
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else "an error"
        raise DownloadError(f"the Hub answered {status} while {doing}") from None
    except _transport_errors() as e:
        raise DownloadError(f"cannot reach the Hub at {endpoint} while {doing}: {e}") from None


def _int_or_none(value: object) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
