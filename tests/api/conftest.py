"""The official SDKs, pointed at an in-process handler instead of a server.

`httpx.MockTransport` hands each request the SDK builds to a function and the
SDK parses whatever bytes that function answers with, so the translators are
checked against the clients people really use, without sockets.
"""

from __future__ import annotations

from collections.abc import Callable

import anthropic
import httpx
import httpx2
import openai
import pytest

Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture
def openai_client() -> Callable[[Handler], openai.OpenAI]:
    def make(handler: Handler) -> openai.OpenAI:
        return openai.OpenAI(
            api_key="sk-test",
            base_url="http://spark.test/v1",
            max_retries=0,
            http_client=httpx.Client(transport=httpx.MockTransport(handler)),
        )

    return make


@pytest.fixture
def anthropic_client() -> Callable[[Handler], anthropic.Anthropic]:
    """The anthropic SDK runs on httpx2; handlers are written against httpx all the same."""

    def adapt(handler: Handler) -> Callable[[httpx2.Request], httpx2.Response]:
        def answer(request: httpx2.Request) -> httpx2.Response:
            response = handler(
                httpx.Request(
                    request.method, str(request.url), headers=list(request.headers.items()), content=request.read()
                )
            )
            return httpx2.Response(
                response.status_code, headers=list(response.headers.items()), content=response.read()
            )

        return answer

    def make(handler: Handler) -> anthropic.Anthropic:
        transport = httpx2.MockTransport(adapt(handler))
        return anthropic.Anthropic(
            api_key="sk-test",
            base_url="http://spark.test",
            max_retries=0,
            http_client=httpx2.Client(transport=transport),
        )

    return make
