"""Images: remote URLs are refused unless allowed (then fetched, bounded), and sizes are limited."""

from __future__ import annotations

import base64
import ipaddress
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

import tiny_gguf
from server.helpers import LiveServer, live_server, server_settings, wait_for
from spark.library import Library
from spark.server import images

PNG = tiny_gguf.tiny_png()


class _Images(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []
    endless_sent: ClassVar[list[int]] = []  # bytes sent before each reader of the endless image hung up

    def do_GET(self) -> None:
        _Images.hits.append(self.path)
        if self.path == "/loop":
            self.path = "/redirect?to=/loop"
        if self.path.startswith("/redirect?to="):
            self.send_response(302)
            self.send_header("location", self.path.removeprefix("/redirect?to="))
            self.end_headers()
            return
        if self.path == "/endless.png":  # no length header, and no end: only a reader that stops gets an answer
            self.send_response(200)
            self.send_header("content-type", "image/png")
            self.end_headers()
            sent = 0
            try:
                while True:
                    self.wfile.write(PNG)
                    sent += len(PNG)
            except OSError:  # the reader hung up
                _Images.endless_sent.append(sent)
            return
        body, kind = (PNG, "image/png") if self.path == "/cat.png" else (b"<html></html>", "text/html")
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def image_host() -> Iterator[str]:
    """A local web server with one PNG (no network needed)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Images)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _chat(model: str, url: str) -> dict[str, object]:
    return {
        "model": model,
        "max_tokens": 2,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": url}},
                ],
            }
        ],
    }


def test_remote_images_are_refused_by_default(live: LiveServer, image_host: str) -> None:
    _Images.hits.clear()
    with live.http() as http:
        r = http.post("/v1/chat/completions", json=_chat("any", image_host + "/cat.png"))
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages[0].content[1].image_url.url"
    assert "does not fetch remote images" in r.json()["error"]["message"]
    assert _Images.hits == [], "nothing was fetched"


def test_allowed_remote_images_are_fetched_and_limited(
    tmp_path_factory: pytest.TempPathFactory, image_host: str, tiny_llama: Path, tiny_mmproj: Path
) -> None:
    settings = server_settings(
        tmp_path_factory.mktemp("images"),
        SPARK_ALLOW_REMOTE_IMAGES="true",
        SPARK_ALLOW_PRIVATE_IMAGE_HOSTS="true",  # the image host is on loopback
        SPARK_MAX_IMAGE_SIZE=str(len(PNG) + 10),
    )
    model = Library(settings).add_local(tiny_llama, model_id="tiny-vision", mmproj=tiny_mmproj).id
    with live_server(settings) as server, server.http() as http:
        _Images.hits.clear()
        ok = http.post("/v1/chat/completions", json=_chat(model, image_host + "/cat.png"))
        assert ok.status_code == 200, ok.text
        assert _Images.hits == ["/cat.png"]
        without = http.post(
            "/v1/chat/completions",
            json={"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "What is this?"}]},
        )
        assert ok.json()["usage"]["prompt_tokens"] > without.json()["usage"]["prompt_tokens"], "the image was read"

        endless = http.post("/v1/chat/completions", json=_chat(model, image_host + "/endless.png"))
        assert endless.status_code == 400 and "larger than this server's limit" in endless.json()["error"]["message"]
        wait_for(lambda: bool(_Images.endless_sent), 10, "Spark to hang up on the endless image")

        not_image = http.post("/v1/chat/completions", json=_chat(model, image_host + "/page.html"))
        assert not_image.status_code == 400 and "not an image" in not_image.json()["error"]["message"]

        big = base64.b64encode(PNG + b"\0" * 64).decode()
        too_large = http.post("/v1/chat/completions", json=_chat(model, f"data:image/png;base64,{big}"))
        assert too_large.status_code == 400
        assert "larger than this server's limit" in too_large.json()["error"]["message"]

        anthropic_big = http.post(
            "/v1/messages",
            json={
                "model": model,
                "max_tokens": 2,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": big}}
                        ],
                    }
                ],
            },
        )
        assert anthropic_big.status_code == 400
        assert "SPARK_MAX_IMAGE_SIZE" in anthropic_big.json()["error"]["message"]


@pytest.fixture(scope="module")
def public_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server that fetches remote images, from public hosts only (the default)."""
    settings = server_settings(tmp_path_factory.mktemp("ssrf"), SPARK_ALLOW_REMOTE_IMAGES="true")
    with live_server(settings) as server:
        yield server


def _refused_as_private(server: LiveServer, url: str) -> str:
    with server.http() as http:
        r = http.post("/v1/chat/completions", json=_chat("any", url))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "messages[0].content[1].image_url.url"
    return str(r.json()["error"]["message"])


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1:{port}",
        "localhost:{port}",
        "[::1]:{port}",
        "[::ffff:127.0.0.1]:{port}",
        "169.254.169.254",
        "10.1.2.3",
        "192.168.0.1:{port}",
        "[fe80::1]",
        "0.0.0.0:{port}",
        "100.64.0.1",
    ],
)
def test_private_and_local_hosts_are_never_fetched(public_only: LiveServer, image_host: str, host: str) -> None:
    port = image_host.rsplit(":", 1)[1]
    _Images.hits.clear()
    message = _refused_as_private(public_only, f"http://{host.format(port=port)}/cat.png")
    assert "public hosts only" in message or "could not be resolved" in message, message
    assert _Images.hits == [], "nothing was fetched"


def test_redirects_to_private_hosts_are_refused(
    public_only: LiveServer, image_host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 127.0.0.1 stands in for a public web server; every other address keeps the real rule
    real = images.public_address
    monkeypatch.setattr(images, "public_address", lambda a: a == ipaddress.ip_address("127.0.0.1") or real(a))
    port = image_host.rsplit(":", 1)[1]
    for target in (
        f"http://127.0.0.2:{port}/cat.png",
        "http://169.254.169.254/latest/meta-data",
        f"http://[::1]:{port}/",
    ):
        _Images.hits.clear()
        message = _refused_as_private(public_only, f"{image_host}/redirect?to={target}")
        assert "public hosts only" in message, message
        assert _Images.hits == [f"/redirect?to={target}"], "the redirect was not followed"
    # a redirect loop ends after a few hops
    _Images.hits.clear()
    message = _refused_as_private(public_only, f"{image_host}/redirect?to=/redirect?to=/loop")
    assert "redirects more than 5 times" in message, message
    assert len(_Images.hits) == 6
