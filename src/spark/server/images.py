"""What a request reaches beyond its body: remote images (when allowed), the files its key
uploaded, and the image size limit.

By default nothing leaves the machine: the API parsers refuse http(s) image
URLs. With `allow_remote_images` the server fetches them here, bounded in time
and size, before the request reaches a model. A file named by id is read from
the Files API's table, for the key that uploaded it. Parsing that may take a
while (fetching, reading a file, or a PDF's text) runs off the event loop.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import anyio.to_thread
from litestar import Request
from litestar.types import Scope

from spark.api.common import Fetch, FileReader, ImageFetcher, UploadedFile
from spark.errors import InvalidRequest
from spark.server.auth import owner
from spark.server.state import state_of
from spark.settings import Settings
from spark.types import ChatRequest, ImagePart

if TYPE_CHECKING:  # imported where used: a server that never calls out does not load httpx
    import httpx

FETCH_TIMEOUT_SECONDS = 10.0
# A body holding either may carry a PDF to read: its media type, or "%PDF-" in base64
PDF_MARKERS = (b"application/pdf", b"JVBERi0")
MAX_REDIRECTS = 5
_UPLOADS_STATE = "spark.uploads"  # the request names uploaded files

T = TypeVar("T")


def image_fetcher(settings: Settings) -> ImageFetcher | None:
    """A fetcher for remote image URLs when the settings allow them, else None (refused).

    Unless `allow_private_image_hosts`, every hop (the URL and each redirect) must resolve to
    public addresses only, and the connection goes to the address that was checked, so a request
    can make the server reach neither itself nor its network (SSRF), not even by DNS rebinding.
    """
    if not settings.allow_remote_images:
        return None
    import httpx

    limit = settings.max_image_bytes
    private_ok = settings.allow_private_image_hosts

    def fetch(url: str, param: str) -> ImagePart:
        try:
            with httpx.Client(timeout=FETCH_TIMEOUT_SECONDS) as client:
                for _ in range(MAX_REDIRECTS + 1):
                    target = httpx.URL(url)
                    request = (
                        client.build_request("GET", target)
                        if private_ok
                        else client.build_request(
                            "GET",
                            _pinned(target, param),
                            headers={"host": target.netloc.decode()},
                            extensions={"sni_hostname": target.host},
                        )
                    )
                    response = client.send(request, stream=True)
                    try:
                        if response.is_redirect and "location" in response.headers:
                            url = str(target.join(response.headers["location"]))
                            continue
                        return _read_image(response, param, limit)
                    finally:
                        response.close()
        except httpx.HTTPError as e:
            raise InvalidRequest(
                f"'{param}': the image could not be fetched ({type(e).__name__}).", param=param
            ) from None
        raise InvalidRequest(f"'{param}': the image URL redirects more than {MAX_REDIRECTS} times.", param=param)

    return fetch


def _read_image(response: httpx.Response, param: str, limit: int) -> ImagePart:
    if response.status_code != 200:
        raise InvalidRequest(f"'{param}': fetching the image gave HTTP {response.status_code}.", param=param)
    media_type = response.headers.get("content-type", "").split(";")[0].strip()
    if not media_type.startswith("image/"):
        raise InvalidRequest(
            f"'{param}': the URL is not an image (content type '{media_type or 'none'}').", param=param
        )
    declared = response.headers.get("content-length", "")
    if limit and declared.isdigit() and int(declared) > limit:
        raise _too_large(param, limit)
    data = bytearray()
    for chunk in response.iter_bytes():  # counted while reading: a length header may lie or be absent
        data += chunk
        if limit and len(data) > limit:
            raise _too_large(param, limit)
    return ImagePart(bytes(data), media_type)


def public_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether `address` is on the public internet (not loopback, private, link-local, reserved...)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


def _pinned(url: httpx.URL, param: str) -> httpx.URL:
    """`url` with its host replaced by the public address it resolves to; `InvalidRequest` when it
    resolves to any address that is not public (the Host header and TLS still name the host)."""
    if url.scheme not in ("http", "https") or not url.host:
        raise InvalidRequest(f"'{param}': the image URL must be http(s) with a host name.", param=param)
    try:
        infos = socket.getaddrinfo(
            url.host, url.port or (443 if url.scheme == "https" else 80), type=socket.SOCK_STREAM
        )
    except (socket.gaierror, UnicodeError):
        raise InvalidRequest(f"'{param}': the image host '{url.host}' could not be resolved.", param=param) from None
    addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
    if not addresses or not all(public_address(a) for a in addresses):
        raise InvalidRequest(
            f"'{param}': the image host '{url.host}' is a loopback, private or link-local address; this server "
            "fetches images from public hosts only (SPARK_ALLOW_PRIVATE_IMAGE_HOSTS).",
            param=param,
        )
    return url.copy_with(host=str(addresses[0]))


def file_reader(request: Request[Any, Any, Any]) -> FileReader:
    """Reads the files the request's key uploaded (another key's are not there for it), and marks
    the request as one that reads them (`uploads_read`)."""
    state, who, scope = state_of(request), owner(request), request.scope

    def read(file_id: str, param: str) -> UploadedFile:
        scope.setdefault("state", {})[_UPLOADS_STATE] = True
        found = state.files.content(file_id, who)
        if found is None:
            raise InvalidRequest(f"'{param}': no file '{file_id}' was uploaded with this API key.", param=param)
        stored, data = found
        return UploadedFile(stored.filename, stored.media_type, data)

    return read


def uploads_read(scope: Scope) -> bool:
    """Whether the request in `scope` may read files uploaded to this server (so is served here)."""
    return bool(scope.get("state", {}).get(_UPLOADS_STATE))


def _unfetched(url: str, param: str) -> ImagePart:
    return ImagePart(b"")


async def parse_with_images(
    request: Request[Any, Any, Any], parse: Callable[..., T], body: bytes, *, check_only: bool = False, **kwargs: object
) -> T:
    """`parse(body, **kwargs)` with what the request may reach: remote image URLs fetched when
    allowed (with `check_only`, allowed but not fetched), files its key uploaded, and every image
    within the size limit. A body that may fetch images, name a file or hold a PDF (whose text is
    extracted while parsing) is parsed in a worker thread, off the event loop."""
    state = state_of(request)
    image = image_fetcher(state.settings)
    if image is not None and check_only:
        image = _unfetched
    kwargs["fetch"] = Fetch(image, file_reader(request))
    if image is None and not any(marker in body for marker in (*PDF_MARKERS, b"file_id")):
        parsed = parse(body, **kwargs)  # a file named only by a stored earlier item is read here: rare
    else:
        parsed = await anyio.to_thread.run_sync(partial(parse, body, **kwargs))
    chat = getattr(parsed, "request", parsed)
    if isinstance(chat, ChatRequest):
        check_image_sizes(chat, state.settings.max_image_bytes)
    return parsed


def check_image_sizes(request: ChatRequest, limit: int) -> None:
    """Refuse any image over `limit` bytes (0: no limit)."""
    if not limit:
        return
    for message in request.messages:
        if isinstance(message.content, list):
            for part in message.content:
                if isinstance(part, ImagePart) and len(part.data) > limit:
                    raise _too_large("messages", limit)


def _too_large(param: str, limit: int) -> InvalidRequest:
    return InvalidRequest(
        f"'{param}': an image is larger than this server's limit of {limit / 2**20:.1f} MiB (SPARK_MAX_IMAGE_SIZE).",
        param=param,
    )
