"""Images in requests: the size limit, and fetching remote image URLs when allowed.

By default nothing leaves the machine: the API parsers refuse http(s) image
URLs. With `allow_remote_images` the server fetches them here, bounded in time
and size, before the request reaches a model.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TypeVar

import anyio.to_thread
import httpx

from spark.api.common import ImageFetcher
from spark.errors import InvalidRequest
from spark.settings import Settings
from spark.types import ChatRequest, ImagePart

FETCH_TIMEOUT_SECONDS = 10.0

T = TypeVar("T")


def image_fetcher(settings: Settings) -> ImageFetcher | None:
    """A fetcher for remote image URLs when the settings allow them, else None (refused)."""
    if not settings.allow_remote_images:
        return None
    limit = settings.max_image_bytes

    def fetch(url: str, param: str) -> ImagePart:
        try:
            with httpx.stream("GET", url, timeout=FETCH_TIMEOUT_SECONDS, follow_redirects=True) as r:
                if r.status_code != 200:
                    raise InvalidRequest(f"'{param}': fetching the image gave HTTP {r.status_code}.", param=param)
                media_type = r.headers.get("content-type", "").split(";")[0].strip()
                if not media_type.startswith("image/"):
                    raise InvalidRequest(
                        f"'{param}': the URL is not an image (content type '{media_type or 'none'}').", param=param
                    )
                data = bytearray()
                for chunk in r.iter_bytes():
                    data += chunk
                    if limit and len(data) > limit:
                        raise _too_large(param, limit)
        except httpx.HTTPError as e:
            raise InvalidRequest(
                f"'{param}': the image could not be fetched ({type(e).__name__}).", param=param
            ) from None
        return ImagePart(bytes(data), media_type)

    return fetch


async def parse_with_images(settings: Settings, parse: Callable[..., T], body: bytes, **kwargs: object) -> T:
    """`parse(body, **kwargs)` with the server's image policy: remote URLs fetched when
    allowed (in a worker thread, off the event loop), and every image within the size limit."""
    fetch = image_fetcher(settings)
    if fetch is None:
        parsed = parse(body, **kwargs)
    else:
        parsed = await anyio.to_thread.run_sync(partial(parse, body, fetch_image=fetch, **kwargs))
    chat = getattr(parsed, "request", parsed)
    if isinstance(chat, ChatRequest):
        check_image_sizes(chat, settings.max_image_bytes)
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
