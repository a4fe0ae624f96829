"""What the OpenAI and Anthropic translators share.

Body decoding with typed errors, inline images, tool checks, keep-alive,
ids and SSE framing. Pure functions: no I/O here (a remote image is only
fetched through a hook the server may pass).
"""

from __future__ import annotations

import base64
import binascii
import re
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Annotated, Any, Literal, TypeVar

import msgspec

from spark.errors import InvalidRequest, SettingsError
from spark.json_schema import schema_problem
from spark.types import (
    MAX_LORA_SCALE,
    SAMPLER_ORDER,
    ChatRequest,
    CompletionRequest,
    ContentPart,
    ImagePart,
    TextPart,
    Tool,
    ToolChoice,
    Usage,
)
from spark.units import parse_duration

# OpenAI's metadata: 16 pairs at most, keys up to 64 characters and values up to 512
Metadata = Annotated[
    dict[Annotated[str, msgspec.Meta(max_length=64)], Annotated[str, msgspec.Meta(max_length=512)]],
    msgspec.Meta(max_length=16),
]

T = TypeVar("T")
G = TypeVar("G", bound=ChatRequest | CompletionRequest)

MAX_STOP_SEQUENCES = 16
"""More than OpenAI's 4: a local server has no reason to be stricter, but every stop
string is matched against each generated token, so the list stays bounded."""

MAX_MESSAGES = 4096
"""Messages in one request: the chat template renders every one, so the list stays bounded
(far more than a context of tokens holds)."""

NonEmptyStr = Annotated[str, msgspec.Meta(min_length=1)]
PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
StopList = Annotated[list[NonEmptyStr], msgspec.Meta(max_length=MAX_STOP_SEQUENCES)]
Probability = Annotated[float, msgspec.Meta(ge=0, le=1)]
PositiveFloat = Annotated[float, msgspec.Meta(gt=0)]
LastN = Annotated[int, msgspec.Meta(ge=-1)]  # a look-back window: -1 is the whole context, 0 off
# A token id as an object key (logit_bias): keys are text to `check_integers`, so the 64 bits are checked here.
TokenKey = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
TokenArrays = list[str | int | list[int]]  # texts and token arrays, or one token array (see prompt_list)

ImageFetcher = Callable[[str, str], ImagePart]
"""Resolves a remote image: called with (url, param), returns the image or raises a
SparkError. Only the server decides to fetch; without a fetcher such images are refused."""


class UploadedFile(msgspec.Struct, frozen=True):
    """A file uploaded through the Files API, as a request naming it by id reads it."""

    filename: str
    media_type: str
    data: bytes


FileReader = Callable[[str, str], UploadedFile]
"""Reads a file the request's key uploaded: called with (file_id, param), returns it or raises
`InvalidRequest` naming `param`."""


class Fetch(msgspec.Struct, frozen=True):
    """What a request may reach beyond its own body: remote images (only where the server allows
    them) and the files its key uploaded. What is missing here is refused, naming the parameter."""

    image: ImageFetcher | None = None
    file: FileReader | None = None


NO_FETCH = Fetch()


class ModelEntry(msgspec.Struct, frozen=True):
    """One model as GET /v1/models lists it."""

    id: str
    created: int  # unix seconds: when it was installed
    loaded: bool = False
    info: dict[str, Any] = {}  # Spark's details (size, quantization, context length, ...)
    owned_by: str = "spark"  # on a fleet central, which servers have it ("spark", "spark,gpu-box", ...)


class LlamaSampling(msgspec.Struct, frozen=True, kw_only=True):
    """llama-server's sampling fields, which both APIs accept as extensions of their bodies."""

    min_p: Probability | None = None
    repeat_penalty: PositiveFloat | None = None
    repeat_last_n: LastN | None = None
    dry_multiplier: Annotated[float, msgspec.Meta(ge=0)] | None = None
    dry_base: Annotated[float, msgspec.Meta(ge=1)] | None = None
    dry_allowed_length: Annotated[int, msgspec.Meta(ge=0)] | None = None
    dry_penalty_last_n: LastN | None = None
    typical_p: Probability | None = None
    top_n_sigma: float | None = None
    xtc_probability: Probability | None = None
    xtc_threshold: Probability | None = None
    dynatemp_range: Annotated[float, msgspec.Meta(ge=0)] | None = None
    dynatemp_exponent: Annotated[float, msgspec.Meta(ge=0)] | None = None
    mirostat: Literal[0, 1, 2] | None = None
    mirostat_tau: Annotated[float, msgspec.Meta(ge=0)] | None = None
    mirostat_eta: Annotated[float, msgspec.Meta(ge=0)] | None = None
    samplers: list[str] | str | None = None  # names, or one letter each ("edkypmxt")
    dry_sequence_breakers: list[str] | None = None
    ignore_eos: bool | None = None

    def llama_sampling(self) -> dict[str, Any]:
        """These fields as `SamplingParams` keywords (`samplers` by Spark's names for them)."""
        fields = {f: getattr(self, f) for f in LlamaSampling.__struct_fields__}
        return {**fields, "samplers": sampler_names(self.samplers)}


# llama-server's other names for its samplers, and its one-letter names
_SAMPLER_ALIASES = {
    **{name: name for name in SAMPLER_ORDER},
    **{name.replace("_", "-"): name for name in SAMPLER_ORDER},
    **{name.replace("_", ""): name for name in SAMPLER_ORDER},
    "nucleus": "top_p",
    "temp": "temperature",
    "typ": "typ_p",
}
_SAMPLER_LETTERS = dict(zip("edskypmxt", SAMPLER_ORDER, strict=True))


def sampler_names(wire: list[str] | str | None) -> list[str] | None:
    """llama-server's `samplers` (names in any of its spellings, or a string of letters) as Spark's
    names, in order; names of samplers Spark lacks (infill, adaptive_p) and unknown ones are left
    out, as llama-server leaves unknown ones out."""
    if wire is None:
        return None
    found = (
        [_SAMPLER_LETTERS.get(c) for c in wire]
        if isinstance(wire, str)
        else [_SAMPLER_ALIASES.get(n.lower()) for n in wire]
    )
    return [name for name in found if name is not None]


class LoraScale(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One entry of llama-server's per-request `lora`: an adapter of the model by its index."""

    id: Annotated[int, msgspec.Meta(ge=0)]
    scale: Annotated[float, msgspec.Meta(ge=-MAX_LORA_SCALE, le=MAX_LORA_SCALE)]


def lora_scales(wire: list[LoraScale] | None) -> dict[int, float] | None:
    """A request's `lora` as `ChatRequest.lora` takes it (the last entry of an id wins)."""
    return None if wire is None else {entry.id: entry.scale for entry in wire}


# --- decoding -----------------------------------------------------------------

MAX_JSON_DEPTH = 200
"""Nesting of arrays and objects in a request body. Free-form fields (JSON schemas, tool
arguments) are handed on to the runner and walked recursively, so nesting stays bounded."""

_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'[]{}"\\')


def check_depth(body: bytes, limit: int = MAX_JSON_DEPTH) -> None:
    """`InvalidRequest` when `body` nests arrays and objects more than `limit` deep.

    Works on the bytes with C-speed operations only: everything but brackets, quotes and
    backslashes is dropped, escapes and strings are removed, then each pass removes the empty
    pairs (at least one level); brackets left after `limit` passes are nested deeper than that.
    A body with fewer brackets than `limit` cannot be that deep and is not scanned at all.
    """
    if body.count(b"[") + body.count(b"{") <= limit:
        return
    shape = body.translate(None, delete=_NOT_STRUCTURE)
    shape = shape.replace(b"\\\\", b"").replace(b'\\"', b"").replace(b"\\", b"")
    shape = b"".join(shape.split(b'"')[::2])  # what lies outside strings
    if re.search(rb"[\[{]{%d}" % (limit + 1), shape):  # the usual attack: a long run of openings
        raise InvalidRequest(f"body is nested more than {limit} levels deep.")
    for _ in range(limit):
        if not shape:
            return
        shorter = shape.replace(b"[]", b"").replace(b"{}", b"")
        if len(shorter) == len(shape):
            return  # unbalanced: the JSON decoder says what is wrong
        shape = shorter
    if shape:
        raise InvalidRequest(f"body is nested more than {limit} levels deep.")


_INT_RANGE = (-(2**63), 2**64 - 1)
_LONG_NUMBER = re.compile(rb"\d{19}")  # the shortest integer that can fall outside 64 bits


def check_integers(body: bytes) -> None:
    """`InvalidRequest` naming the first integer in `body` that does not fit in 64 bits.

    Python decodes such numbers, but the runner's protocol (and llama.cpp) cannot carry them.
    Bodies without a 19-digit run, nearly all of them, are not decoded twice.
    """
    if not _LONG_NUMBER.search(body):
        return
    try:
        todo: list[tuple[str, Any]] = [("", msgspec.json.decode(body))]
    except msgspec.DecodeError:
        return  # the typed decoder says what is wrong
    while todo:
        path, value = todo.pop()
        if isinstance(value, dict):
            todo.extend((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
        elif isinstance(value, list):
            todo.extend((f"{path}[{i}]", v) for i, v in enumerate(value))
        elif isinstance(value, int) and not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            param = path or None
            raise InvalidRequest(f"{path or 'body'}: an integer does not fit in 64 bits.", param=param)


# the first bytes of compressed data, none of them UTF-8: a client that sent Content-Encoding
_COMPRESSED = {b"\x1f\x8b": "gzip", b"\x28\xb5": "zstd", b"\x78\x01": "deflate", b"\x78\x9c": "deflate"}


def check_utf8(body: bytes) -> None:
    """`InvalidRequest` when `body` is not UTF-8, object keys and fields nobody reads included (the
    typed decoder checks only the strings it keeps); a compressed body is named as such."""
    if body.isascii():
        return
    try:
        body.decode()
    except UnicodeDecodeError as e:
        encoding = _COMPRESSED.get(body[:2])
        if encoding is not None:
            raise InvalidRequest(
                f"body is {encoding}-compressed: this server takes request bodies uncompressed (no Content-Encoding)."
            ) from None
        raise InvalidRequest(f"body is not valid JSON: invalid UTF-8 (byte {e.start}).") from None


def check_body(body: bytes) -> None:
    """The checks every JSON body passes before a typed decoder reads it: UTF-8, nesting, 64-bit integers."""
    check_utf8(body)
    check_depth(body)
    check_integers(body)


_MISSING_FIELD = "Object missing required field `"
_UNKNOWN_FIELD = "Object contains unknown field `"


def decode_body(decoder: msgspec.json.Decoder[T], body: bytes, *, plain: bool = False) -> T:
    """Decode a request body, raising `InvalidRequest` that names the offending param; with `plain`, a
    value of the wrong type is told in words, with the value given (see `invalid_from_validation`)."""
    check_body(body)
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as e:
        raise invalid_from_validation(e, body if plain else None) from None
    except msgspec.DecodeError as e:
        raise InvalidRequest(f"body is not valid JSON: {e}") from None
    except RecursionError:  # msgspec's own guard against stack exhaustion
        raise InvalidRequest("body is nested too deeply.") from None


_WRONG_TYPE = re.compile(r"Expected `(?P<wanted>[^`]+)`, got `[^`]+`")
# msgspec's JSON types, as a person filling a form reads them
_TYPE_WORDS = {
    "int": "a whole number",
    "float": "a number",
    "str": "text",
    "bool": "true or false",
    "array": "a list",
    "object": "an object",
}


def invalid_from_validation(error: msgspec.ValidationError, body: bytes | None = None) -> InvalidRequest:
    """Translate msgspec's location (`$.messages[0].content`) into a param name.

    The one place that reads msgspec's text; it converts the path msgspec
    reports into the request's own field names. Given the request's `body`, a
    value of the wrong type is said plainly with the value ("context_length must
    be a whole number, not 'abc'"), for the admin API whose forms people fill in.
    """
    what, _, where = str(error).partition(" - at `")
    where = where.removesuffix("`")
    # A bad mapping key reads "key` in `$.logit_bias": name the mapping.
    where = where.removeprefix("key` in `")
    path = where.removeprefix("$").removeprefix(".").replace("[...]", "")
    if what.startswith(_MISSING_FIELD):
        field = what.removeprefix(_MISSING_FIELD).removesuffix("`")
        param = f"{path}.{field}" if path else field
        return InvalidRequest(f"Missing required parameter: '{param}'.", param=param)
    if what.startswith(_UNKNOWN_FIELD):  # bodies that forbid unknown fields
        field = what.removeprefix(_UNKNOWN_FIELD).removesuffix("`")
        param = f"{path}.{field}" if path else field
        return InvalidRequest(f"Unknown parameter: '{param}'.", param=param)
    if not path:
        return InvalidRequest(f"Invalid request body: {what}.")
    if body is not None and (wrong := _WRONG_TYPE.fullmatch(what)):
        wanted = [_TYPE_WORDS.get(t, t) for t in wrong["wanted"].split(" | ") if t != "null"]
        value = _value_at(msgspec.json.decode(body), path)
        shown = f"'{value}'" if isinstance(value, str) else msgspec.json.encode(value).decode()
        shown = shown if len(shown) <= 40 else shown[:39] + "…"
        return InvalidRequest(f"{path} must be {' or '.join(wanted)}, not {shown}", param=path)
    return InvalidRequest(f"Invalid '{path}': {what}.", param=path)


def _value_at(document: Any, path: str) -> Any:
    """The value at `path` (`sampling.stop[0]`) of a decoded JSON document (None where there is none)."""
    for part in re.findall(r"[^.\[\]]+", path):
        if isinstance(document, dict):
            document = document.get(part)
        elif isinstance(document, list) and part.isdigit() and int(part) < len(document):
            document = document[int(part)]
        else:
            return None
    return document


# --- content ------------------------------------------------------------------


def joined(texts: Iterable[str]) -> str:
    """Several text parts or blocks as one string, a newline between them.

    Chat templates render a message's content as one string; gluing parts
    together without a separator would run sentences into each other.
    """
    return "\n".join(texts)


def collapsed(parts: list[ContentPart]) -> str | list[ContentPart]:
    """Content as a plain string when it is all text; with images, the parts as they are."""
    texts = [p.text for p in parts if isinstance(p, TextPart)]
    return joined(texts) if len(texts) == len(parts) else parts


def decode_base64(data: str, param: str) -> bytes:
    """Bytes of base64 `data` (whitespace tolerated); empty or malformed data is refused."""
    try:
        raw = base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest(f"'{param}' is not valid base64 data.", param=param) from None
    if not raw:
        raise InvalidRequest(f"'{param}' holds no data.", param=param)
    return raw


def image_from_base64(data: str, media_type: str, param: str) -> ImagePart:
    return ImagePart(data=decode_base64(data, param), media_type=media_type)


def split_data_url(url: str, param: str, example: str) -> tuple[str, str]:
    """The media type and the base64 payload of a `data:<type>;base64,<payload>` URL; any other
    form is refused, the message showing `example` (e.g. "image/png")."""
    header, comma, payload = url.partition(",")
    media_type, *attrs = header.removeprefix("data:").split(";")
    if not comma or not attrs or attrs[-1] != "base64":
        raise InvalidRequest(f"'{param}' must be a base64 data URL (data:{example};base64,...).", param=param)
    return media_type, payload


def uploaded_file(file_id: str, param: str, fetch: Fetch) -> UploadedFile:
    """The uploaded file `file_id` (named by `param`)."""
    if fetch.file is None:
        raise InvalidRequest(f"'{param}': files uploaded by id are not read here; send the file inline.", param=param)
    return fetch.file(file_id, param)


def image_from_file(file_id: str, param: str, fetch: Fetch) -> ImagePart:
    """An image uploaded through the Files API."""
    file = uploaded_file(file_id, param, fetch)
    if not file.media_type.startswith("image/"):
        raise InvalidRequest(
            f"'{param}': the file '{file_id}' ({file.filename}, {file.media_type}) is not an image.", param=param
        )
    return ImagePart(file.data, file.media_type)


def image_from_url(url: str, param: str, fetch: Fetch) -> ImagePart:
    """An image from a `data:image/...;base64,` URL, or a remote one through `fetch.image`."""
    if url.startswith("data:"):
        media_type, payload = split_data_url(url, param, "image/png")
        if not media_type.startswith("image/"):
            raise InvalidRequest(
                f"'{param}' has media type '{media_type or '(none)'}'; expected an image/* type.",
                param=param,
            )
        return image_from_base64(payload, media_type, param)
    if url.startswith(("http://", "https://")):
        if fetch.image is None:
            raise InvalidRequest(
                f"'{param}': this server does not fetch remote images; send the image inline as base64 data.",
                param=param,
            )
        return fetch.image(url, param)
    raise InvalidRequest(f"'{param}' must be a data URL or an http(s) URL.", param=param)


# --- lists and times ----------------------------------------------------------


def page_of(
    items: Sequence[T], ids: Sequence[str | None], *, limit: int, after: str | None = None, before: str | None = None
) -> tuple[list[T], bool]:
    """The page of `items` (whose ids are `ids`, in list order): the `limit` after the id `after`, or
    the `limit` before the id `before`; and whether more lie beyond it."""
    if before is not None:
        end = ids.index(before) if before in ids else 0
        start = max(0, end - limit)
        return list(items[start:end]), start > 0
    start = ids.index(after) + 1 if after in ids else 0
    page = list(items[start : start + limit])
    return page, start + len(page) < len(items)


def page_body(
    data: list[dict[str, Any]], has_more: bool, *, openai: bool = True, next_page: str | None = None
) -> bytes:
    """A page of a list, as both APIs write it: `data`, `first_id`, `last_id`, `has_more` (and
    OpenAI's `"object": "list"`, or with `openai` false, Anthropic's `next_page` cursor)."""
    body: dict[str, Any] = {"object": "list"} if openai else {}
    body.update(
        data=data,
        first_id=data[0]["id"] if data else None,
        last_id=data[-1]["id"] if data else None,
        has_more=has_more,
    )
    if not openai:
        body["next_page"] = next_page
    return msgspec.json.encode(body)


def rfc3339(at: float) -> str:
    """A Unix time as Anthropic writes times: `2026-12-06T03:09:22Z`."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


# --- shared checks ------------------------------------------------------------


def refuse(condition: bool, param: str, message: str) -> None:
    """`InvalidRequest` naming `param` when `condition` holds."""
    if condition:
        raise InvalidRequest(message, param=param)


def prompt_list(value: str | TokenArrays, param: str) -> list[str | list[int]]:
    """OpenAI's prompt or input forms as a list: a string, a token array, or a list of strings and
    token arrays."""
    if isinstance(value, str):
        return [value]
    if value and all(isinstance(v, int) for v in value):
        return [value]  # type: ignore[list-item]  # checked: all int
    refuse(
        any(isinstance(v, int) for v in value),
        param,
        f"'{param}' mixes token ids with texts or token arrays: send one token array, or a list of them.",
    )
    return value  # type: ignore[return-value]  # checked: no int


def keep_alive_seconds(value: float | str | None) -> float | None:
    """The `keep_alive` extension as seconds ("5m", 300, -1 for forever)."""
    if value is None:
        return None
    try:
        return parse_duration(value, "keep_alive")
    except SettingsError as e:
        raise InvalidRequest(e.message, param="keep_alive") from None


def check_max_tokens(value: int | None, param: str, limit: int | None) -> None:
    """Refuse a token budget above the server's limit."""
    if value is not None and limit is not None and value > limit:
        raise InvalidRequest(f"'{param}' is {value}, but this server allows at most {limit}.", param=param)


OPENAI_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
"""What OpenAI's APIs take as a function tool's name."""
ANTHROPIC_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")
"""What Anthropic's Messages API takes as a custom tool's name."""


def check_tools(tools: list[Tool], name_param: str, schema_param: str, *, names: re.Pattern[str] | None = None) -> None:
    """Refuse tool names that do not match `names` (when given: the API's own rule) or are used twice,
    and malformed parameter schemas; the params are format strings taking the tool's index."""
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if names is not None and not names.fullmatch(tool.name):
            raise InvalidRequest(
                f"Invalid '{name_param.format(i)}': string does not match pattern. Expected a string that "
                f"matches the pattern '^{names.pattern}$'.",
                param=name_param.format(i),
            )
        if tool.name in seen:
            raise InvalidRequest(f"Tool name '{tool.name}' is used twice.", param=name_param.format(i))
        seen.add(tool.name)
        problem = schema_problem(tool.parameters)
        if problem is not None:
            raise InvalidRequest(
                f"Invalid parameters schema for tool '{tool.name}': {problem}.", param=schema_param.format(i)
            )


def allowed_tools(tools: list[Tool], names: Sequence[str], param: str) -> list[Tool]:
    """The tools OpenAI's `allowed_tools` tool choice lets the answer call (`names`, each one of
    `tools`, at `param[i]`): only they are offered to the model."""
    known = {t.name for t in tools}
    for i, name in enumerate(names):
        if name not in known:
            raise InvalidRequest(f"'{param}[{i}]' names '{name}', which is not among the tools.", param=f"{param}[{i}]")
    return [t for t in tools if t.name in names]


def check_tool_choice(choice: ToolChoice | None, tools: list[Tool] | None) -> None:
    """A forced tool call needs tools, and a named one must be among them."""
    if choice is None or choice.mode != "required":
        return
    if not tools:
        raise InvalidRequest("'tool_choice' requires a call, but no tools were given.", param="tool_choice")
    if choice.name is not None and choice.name not in {t.name for t in tools}:
        raise InvalidRequest(f"'tool_choice' names '{choice.name}', which is not among the tools.", param="tool_choice")


def call_arguments(text: str) -> str:
    """An earlier tool call's arguments as the client sends them back; empty means no arguments.

    Text that is not a JSON object (a call the model's answer cut short, sent back with the rest of
    the conversation) reaches the chat template as the text the model wrote: refusing it would
    leave the conversation unable to go on."""
    return text if text.strip() else "{}"


# --- ids and framing ----------------------------------------------------------


def new_request_id() -> str:
    """A fresh request id (24 hex digits); responses prefix it (chatcmpl-, msg_, ...)."""
    return secrets.token_hex(12)


def new_tool_call_id(prefix: str) -> str:
    """An id for a tool call the model made without one."""
    return prefix + secrets.token_hex(12)


def sse(payload: bytes, event: str | None = None) -> bytes:
    """One server-sent event frame."""
    if event is None:
        return b"data: " + payload + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + payload + b"\n\n"


# --- reading answers (a fleet central relays a node's answer and logs its numbers) --------


def _count(value: object) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def usage_in(payload: object) -> Usage | None:
    """The token counts in an OpenAI, Anthropic or Ollama answer, or in one of their stream events
    (Anthropic's `message_start` nests them in its message, the Responses API's events in
    their response); None when it carries none.

    Anthropic's `input_tokens` excludes the cached prompt tokens, so the prompt is their sum;
    the Responses API's includes them (`input_tokens_details.cached_tokens`).
    """
    if not isinstance(payload, dict):
        return None
    if "eval_count" in payload or "prompt_eval_count" in payload:  # Ollama's last line
        return Usage(_count(payload.get("prompt_eval_count")), _count(payload.get("eval_count")))
    usage = payload.get("usage")
    for holder in (payload.get("message"), payload.get("response")):
        if not isinstance(usage, dict) and isinstance(holder, dict):
            usage = holder.get("usage")
    if not isinstance(usage, dict):
        return None
    if isinstance(details := usage.get("input_tokens_details"), dict):
        cached = _count(details.get("cached_tokens"))
        return Usage(_count(usage.get("input_tokens")), _count(usage.get("output_tokens")), cached)
    if "input_tokens" in usage or "output_tokens" in usage:
        cached = _count(usage.get("cache_read_input_tokens"))
        return Usage(_count(usage.get("input_tokens")) + cached, _count(usage.get("output_tokens")), cached)
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return Usage(_count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens")), cached)


def finish_reason_in(payload: object) -> str | None:
    """The finish reason an OpenAI, Anthropic or Ollama answer or stream event gives, if any."""
    if not isinstance(payload, dict):
        return None
    if isinstance(payload.get("done_reason"), str):
        return str(payload["done_reason"])
    choices = payload.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        reason = choices[0].get("finish_reason")
        return reason if isinstance(reason, str) else None
    for holder in (payload, payload.get("delta")):
        if isinstance(holder, dict) and isinstance(holder.get("stop_reason"), str):
            return str(holder["stop_reason"])
    response = payload.get("response")
    if isinstance(response, dict) and response.get("object") == "response":
        return {"completed": "stop", "incomplete": "length"}.get(str(response.get("status")))
    return None


def choice_requests(request: G, n: int, prompts: Sequence[str | list[int]] = ()) -> list[G]:
    """One request per choice (OpenAI's `n`), for each of a batch's `prompts` (completions) in turn:
    choice `p * n + i` is prompt p's i-th. With a seed, the i-th samples with seed + i, so that a
    prompt's choices differ and each stays reproducible; without one, each draws its own."""
    bases = [msgspec.structs.replace(request, prompt=p) for p in prompts] if prompts else [request]
    seed = request.sampling.seed
    return [
        base
        if seed is None
        else msgspec.structs.replace(base, sampling=msgspec.structs.replace(base.sampling, seed=seed + i))
        for base in bases
        for i in range(n)
    ]
