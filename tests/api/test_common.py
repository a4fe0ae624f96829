"""Shared translation helpers: msgspec errors -> params, images, keep-alive, framing."""

from __future__ import annotations

import base64
import gzip
import re
import zlib

import msgspec
import pytest

from spark.api import common
from spark.errors import InvalidRequest
from spark.types import ImagePart, Tool, ToolChoice

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


class Inner(msgspec.Struct):
    content: str


class Body(msgspec.Struct):
    model: str
    messages: list[Inner] = []
    bias: dict[int, float] = {}
    temperature: common.Probability | None = None


DECODER = msgspec.json.Decoder(Body)


def invalid(body: bytes) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        common.decode_body(DECODER, body)
    return info.value


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"model": 1}', "model"),
        (b'{"model": "m", "messages": [{"content": 5}]}', "messages[0].content"),
        (b'{"model": "m", "messages": [{}]}', "messages[0].content"),
        (b'{"messages": []}', "model"),
        (b'{"model": "m", "bias": {"x": 1}}', "bias"),
        (b'{"model": "m", "bias": {"1": "x"}}', "bias"),
        (b'{"model": "m", "temperature": 1.5}', "temperature"),
    ],
)
def test_validation_errors_name_the_param(body: bytes, param: str) -> None:
    error = invalid(body)
    assert error.param == param
    assert param in error.message
    assert error.status == 400


def test_missing_field_reads_like_openai() -> None:
    assert invalid(b'{"model": "m", "messages": [{}]}').message == (
        "Missing required parameter: 'messages[0].content'."
    )


def test_bad_json_and_wrong_top_level_type() -> None:
    error = invalid(b'{"model": ')
    assert error.message.startswith("body is not valid JSON: ")
    assert error.param is None
    error = invalid(b"[1, 2]")
    assert error.param is None and "object" in error.message


def test_data_url_image() -> None:
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert common.image_from_url(url, "p", common.NO_FETCH) == ImagePart(PNG, "image/png")


@pytest.mark.parametrize(
    "url",
    [
        "data:image/png,rawbytes",  # not base64
        "data:text/plain;base64,aGVsbG8=",  # not an image
        "data:image/png;base64,!!!notbase64",
        "data:image/png;base64,",
        "ftp://example.com/cat.png",
        "cat.png",
    ],
)
def test_bad_image_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        common.image_from_url(url, "messages[0].content[1].image_url.url", common.NO_FETCH)
    assert info.value.param == "messages[0].content[1].image_url.url"


def test_remote_images_need_a_fetcher() -> None:
    with pytest.raises(InvalidRequest, match="does not fetch remote images") as info:
        common.image_from_url("https://example.com/cat.png", "img", common.NO_FETCH)
    assert info.value.param == "img"
    seen = []

    def fetch(url: str, param: str) -> ImagePart:
        seen.append((url, param))
        return ImagePart(PNG)

    assert common.image_from_url("https://example.com/cat.png", "img", common.Fetch(image=fetch)) == ImagePart(PNG)
    assert seen == [("https://example.com/cat.png", "img")]


def test_keep_alive() -> None:
    assert common.keep_alive_seconds(None) is None
    assert common.keep_alive_seconds("5m") == 300
    assert common.keep_alive_seconds(-1) == -1
    with pytest.raises(InvalidRequest) as info:
        common.keep_alive_seconds("soon")
    assert info.value.param == "keep_alive"


def test_max_tokens_limit() -> None:
    common.check_max_tokens(100, "max_tokens", 100)
    common.check_max_tokens(10**6, "max_tokens", None)
    with pytest.raises(InvalidRequest, match="at most 100") as info:
        common.check_max_tokens(101, "max_completion_tokens", 100)
    assert info.value.param == "max_completion_tokens"


def test_tool_checks() -> None:
    tools = [Tool("a"), Tool("b")]
    common.check_tools(tools, "tools[{}].name", "tools[{}].parameters")
    with pytest.raises(InvalidRequest) as info:
        common.check_tools([*tools, Tool("a")], "tools[{}].name", "tools[{}].parameters")
    assert info.value.param == "tools[2].name"
    with pytest.raises(InvalidRequest, match="Invalid parameters schema for tool 'c': 'required' must be") as info:
        common.check_tools([*tools, Tool("c", parameters={"required": "x"})], "tools[{}].name", "tools[{}].parameters")
    assert info.value.param == "tools[2].parameters"
    common.check_tool_choice(ToolChoice("auto"), None)
    common.check_tool_choice(ToolChoice("required", "b"), tools)
    for choice, given in ((ToolChoice("required"), None), (ToolChoice("required", "zz"), tools)):
        with pytest.raises(InvalidRequest) as info:
            common.check_tool_choice(choice, given)
        assert info.value.param == "tool_choice"


def test_call_arguments() -> None:
    assert common.call_arguments(" ") == "{}"
    for sent in ('{"a": 1}', '{"city": "Par'):  # a call cut short comes back as it was answered
        assert common.call_arguments(sent) == sent


def test_ids_and_frames() -> None:
    assert common.new_request_id() != common.new_request_id()
    assert common.new_tool_call_id("call_").startswith("call_")
    assert common.sse(b"{}") == b"data: {}\n\n"
    assert common.sse(b"{}", "ping") == b"event: ping\ndata: {}\n\n"


@pytest.mark.parametrize(
    ("body", "deep"),
    [
        (b'{"a":' * 200 + b"1" + b"}" * 200, False),
        (b'{"a":' * 201 + b"1" + b"}" * 201, True),
        (b"[" * 100_000 + b"]" * 100_000, True),
        (b"[1," * 300 + b"]" * 300, True),
        (b'{"s": "' + b"[{" * 5000 + b'", "t": "\\"[[[\\\\", "u": [[1], {"v": [2]}]}', False),  # brackets in strings
        (b'{"m": [' + b",".join([b'{"role": "user", "content": "hi"}'] * 5000) + b"]}", False),  # long, not deep
        (b"[1]," * 250 + b"]", False),  # unbalanced: left to the JSON decoder
    ],
    ids=["200-levels", "201-levels", "100k-arrays", "mixed-300", "brackets-in-strings", "wide", "unbalanced"],
)
def test_body_nesting_is_bounded(body: bytes, deep: bool) -> None:
    if deep:
        with pytest.raises(InvalidRequest, match="nested more than 200 levels"):
            common.check_depth(body)
    else:
        common.check_depth(body)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"a": [1, {"b": -9223372036854775809}]}', "a[1].b"),
        (b'{"seed": 18446744073709551616}', "seed"),
        (b'{"a": 9223372036854775807, "b": -9223372036854775808, "c": 18446744073709551615}', None),
        (b'{"s": "12345678901234567890123"}', None),  # digits in a string
        (b"[" + b"9" * 6000 + b"]", None),  # so long that it decodes as a float
    ],
    ids=["below-int64", "above-uint64", "edges", "in-a-string", "huge"],
)
def test_integers_beyond_64_bits_are_refused_by_name(body: bytes, param: str | None) -> None:
    if param is None:
        common.check_integers(body)
    else:
        with pytest.raises(InvalidRequest, match="does not fit in 64 bits") as caught:
            common.check_integers(body)
        assert caught.value.param == param


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"\xff\xfemodel": "m"}', "invalid UTF-8 (byte 2)"),  # in a key no field reads
        (b'{"model": "m", "extra": "\xc3"}', "invalid UTF-8 (byte 25)"),
        (gzip.compress(b'{"model": "m"}', mtime=0), "body is gzip-compressed"),
        (zlib.compress(b'{"model": "m"}'), "body is deflate-compressed"),
    ],
)
def test_a_body_that_is_not_utf8_is_refused(body: bytes, words: str) -> None:
    with pytest.raises(InvalidRequest, match=re.escape(words)):
        common.check_body(body)
    common.check_body('{"model": "é"}'.encode())


def test_tool_names_follow_the_apis_rule_where_one_is_given() -> None:
    def check(name: str, names: re.Pattern[str] | None) -> None:
        common.check_tools([Tool(name, "", {})], "tools[{}].name", "tools[{}].parameters", names=names)

    for name in ("get_weather", "a-b_9", "x" * 64):
        check(name, common.OPENAI_TOOL_NAME)
    check("x" * 128, common.ANTHROPIC_TOOL_NAME)
    for name, names in (
        ("x" * 65, common.OPENAI_TOOL_NAME),
        ("get.weather", common.OPENAI_TOOL_NAME),
        ("x" * 129, common.ANTHROPIC_TOOL_NAME),
        ("", common.ANTHROPIC_TOOL_NAME),
    ):
        with pytest.raises(InvalidRequest, match="does not match pattern") as refused:
            check(name, names)
        assert refused.value.param == "tools[0].name"
    check("get.weather", None)  # Ollama's API takes any name


def test_an_uploaded_image_is_read_by_id_and_another_file_is_not_one() -> None:
    uploads = {
        "file-png": common.UploadedFile("cat.png", "image/png", PNG),
        "file-txt": common.UploadedFile("a.txt", "text/plain", b"hi"),
    }
    fetch = common.Fetch(file=lambda file_id, param: uploads[file_id])
    assert common.image_from_file("file-png", "input[0].content[0].file_id", fetch) == ImagePart(PNG, "image/png")
    with pytest.raises(InvalidRequest, match="is not an image") as info:
        common.image_from_file("file-txt", "input[0].content[0].file_id", fetch)
    assert info.value.param == "input[0].content[0].file_id"
    with pytest.raises(InvalidRequest, match="send the file inline"):
        common.image_from_file("file-png", "p", common.NO_FETCH)


@pytest.mark.parametrize(
    ("wire", "names"),
    [
        (None, None),
        (
            ["Top-K", "nucleus", "temp", "typ", "minp", "top_n_sigma"],
            ["top_k", "top_p", "temperature", "typ_p", "min_p", "top_n_sigma"],
        ),
        ("edkt", ["penalties", "dry", "top_k", "temperature"]),  # llama-server's letters
        (["infill", "tfs_z", "xtc", "adaptive_p"], ["xtc"]),  # samplers Spark lacks and unknown names left out
        ([], []),
    ],
)
def test_sampler_orders_are_read_in_each_of_llama_servers_spellings(
    wire: list[str] | str | None, names: list[str] | None
) -> None:
    assert common.sampler_names(wire) == names
