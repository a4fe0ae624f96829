"""Streamed Responses API answers still being made: what `GET /v1/responses/{id}` shows of one
before its end is stored.

A streamed response's id reaches its client in the first event, so the client may ask for it
while the answer streams (OpenAI answers it `in_progress`, with the output so far). Each entry
follows the stream's encoder by a weak reference: once the stream is over (answered and stored,
or the client gone), the encoder is freed and the entry with it.
"""

from __future__ import annotations

import weakref

from spark.api.openai import ResponseStream


class Answering:
    """The streamed responses being answered, by id, each with the owner that may read it."""

    def __init__(self) -> None:
        self._live: dict[str, tuple[str, weakref.ref[ResponseStream]]] = {}

    def add(self, encoder: ResponseStream, owner: str) -> None:
        """Follow the response `encoder` makes, for `owner`, for as long as its stream lasts."""
        self._forget_gone()
        self._live[encoder.id] = (owner, weakref.ref(encoder))

    def snapshot(self, response_id: str, owner: str) -> bytes | None:
        """The response object as it stands, or None when no stream of `owner`'s makes it now."""
        self._forget_gone()
        owned, ref = self._live.get(response_id, ("", None))
        encoder = ref() if ref is not None and owned == owner else None
        return None if encoder is None else encoder.snapshot()

    def _forget_gone(self) -> None:
        for response_id in [i for i, (_, ref) in self._live.items() if ref() is None]:
            del self._live[response_id]
