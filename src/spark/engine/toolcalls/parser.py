"""Parsing tool calls from streamed output, for every family (see `spark.engine.toolcalls`).

Besides its family's own syntax, every parser reads the calls small models
write whatever their template says: a bare JSON call object
(`{"name": ..., "arguments": {...}}`, or `"parameters"`), several in a row or
in a JSON array, inside a markdown code fence, a tag such as `<tool_call>` or
another family's marker, `<function=name>{...}</function>`, with text before
them. A bare call counts only when it names one of the request's tools;
anything else comes out as text, exactly as written.

Text streams as it comes: the parser holds back only what could still
become a call (a possible marker at the end of the text, or a JSON value
that still reads like a call). Each call streams as a `ToolCallDelta` with
its id and name, then argument fragments.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from spark.engine.text import may_start, partial_marker, skim
from spark.engine.toolcalls.jsonscan import WS, JsonScanner
from spark.engine.toolcalls.reader import Action, CallReader
from spark.engine.toolcalls.syntax import (
    FENCE,
    GEMMA_CALL,
    GEMMA_CALL_END,
    GLM_PARAMETERS,
    HERMES_CLOSE,
    HERMES_OPEN,
    LFM2_CALLS,
    LFM2_CALLS_END,
    MISTRAL_ARGS,
    MISTRAL_CALL_ID,
    MISTRAL_CALLS,
    PYTHON_TAG,
    WRAPPER_TAGS,
    XML_PARAMETERS,
    ParameterTags,
    ToolSyntax,
    new_call_id,
)
from spark.engine.toolcalls.written import gemma_call, is_text, parameter, python_call, python_calls
from spark.types import Event, TextDelta, ToolCallDelta

_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
_FENCE_INFO = re.compile(r"[A-Za-z0-9_+-]{0,20}[ \t]{0,4}\r?")  # what may follow ``` on its line
_MAX_WRAPPERS = 2  # e.g. a code fence around a tag
# `<function=get_weather>{...}</function>` or `<function name="get_weather">{...}</function>`
# (llama.cpp reads both for Hermes 2 Pro and Llama 3.1 models).
FUNCTION_TAG, FUNCTION_CLOSE = "<function", "</function>"
_FUNCTION_NAME = re.compile(r'=([A-Za-z0-9_.:-]{1,64})|\s+name="([A-Za-z0-9_.:-]{1,64})"\s*')
_MAX_FUNCTION_TAG = 80
# modes in which what is held when the output ends is text: no call began
_TEXT_MODES = ("text", "open", "fence", "tag", "function", "mistral", "mistral_name", "mistral_id", "shape", "named")
_PARAMETER_NAME = re.compile(r"[A-Za-z0-9_.:$-]{1,64}")
_MAX_PARAMETER_KEY = 80


def _string_body(text: str) -> str:
    """`text` as it is written inside a JSON string."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def _closing_tag(tag: str) -> str:
    return "<|/" + tag[2:] if tag.startswith("<|") else "</" + tag[1:]


class ToolCallParser:
    """Turns streamed content into `TextDelta`s and `ToolCallDelta`s for one family.

    With `max_calls`, the parser is `complete` once that many calls are whole
    (their arguments read to the end) and drops anything fed after that. With
    `required` (the names of the tools a grammar makes the answer call), an
    answer cut short before its first call was announced is still that call,
    where only one of them fits what was written.
    `call_ended` says that the text so far ends with a whole call (and at most
    the whitespace, closing tags or fences that may follow one).
    """

    def __init__(
        self,
        syntax: ToolSyntax,
        names: Iterable[str],
        *,
        max_calls: int | None = None,
        schemas: Mapping[str, Mapping[str, Any]] | None = None,
        required: frozenset[str] = frozenset(),
    ) -> None:
        self._syntax = syntax
        self._max_calls = max_calls
        self._required = required
        self._n_whole = 0
        self._names = frozenset(names)
        self._schemas = schemas or {}  # each tool's parameters: how a parameter's text reads
        self._buf = ""
        self._mode = "text"
        # What starts a call, or may: the family's markers, then what any model may write.
        family = {
            "hermes": (HERMES_OPEN,),
            "xml": (HERMES_OPEN,),
            "glm": (HERMES_OPEN,),
            "llama3": (PYTHON_TAG,),
            "mistral": (MISTRAL_CALLS,),
            "gemma": (GEMMA_CALL,),
            "lfm2": (LFM2_CALLS,),
        }
        self._shape = syntax.shape if syntax.family == "template" else None
        self._markers = (self._shape.opener,) if self._shape else family.get(syntax.family, ())
        self._wrappers = tuple(t for t in WRAPPER_TAGS if t not in self._markers)
        # Other families' markers before JSON: a model may write them under another template.
        self._foreign = tuple(m for m in (PYTHON_TAG, MISTRAL_CALLS) if m not in self._markers)
        self._openers = (*self._markers, *self._wrappers, *self._foreign, FUNCTION_TAG, FENCE, "{", "[")
        self._long_openers = tuple(o for o in self._openers if len(o) > 1)
        self._reader: CallReader | None = None
        self._eager = False  # calls of the current group follow a marker
        self._held = ""  # text read since the current group began, given back if it holds no call
        self._closers: list[str] = []  # closing tags, fences or brackets the group may still write
        self._mistral_name = ""
        self._mistral_id: str | None = None
        self._scanner: JsonScanner | None = None  # arguments of a call named outside its JSON
        self._function = ""  # the call whose parameters are being read
        self._tags = XML_PARAMETERS  # and how they are written
        self._value_began = False  # a string parameter's first text is read
        self._args_sent = False
        self._n_calls = 0
        self._said_anything = False  # leading whitespace before a call is not content
        self._call_ended = False
        self._events: list[Event] = []

    @property
    def made_calls(self) -> bool:
        return self._n_calls > 0

    @property
    def complete(self) -> bool:
        """Whether `max_calls` calls are whole: the output should end here."""
        return self._mode == "done"

    @property
    def call_ended(self) -> bool:
        """Whether the output so far ends with a whole call: it may end here."""
        return self._call_ended

    # --- events ---

    def _text(self, text: str) -> None:
        if not text:
            return
        self._said_anything = True
        self._call_ended = False
        last = self._events[-1] if self._events else None
        if isinstance(last, TextDelta):
            self._events[-1] = TextDelta(last.text + text)
        else:
            self._events.append(TextDelta(text))

    def _call_start(self, name: str, call_id: str | None) -> None:
        self._n_calls += 1
        self._args_sent = False
        self._said_anything = True
        self._call_ended = False
        self._held = ""  # a call: what led to it is syntax, not content
        cid = call_id if call_id and self._syntax.family == "mistral" else new_call_id(self._syntax.family)
        self._events.append(ToolCallDelta(self._n_calls - 1, id=cid, name=name))

    def _args(self, text: str) -> None:
        self._args_sent = True
        last = self._events[-1] if self._events else None
        if isinstance(last, ToolCallDelta) and last.index == self._n_calls - 1 and last.id is None:
            self._events[-1] = ToolCallDelta(last.index, arguments=last.arguments + text)
        else:
            self._events.append(ToolCallDelta(self._n_calls - 1, arguments=text))

    def _apply(self, actions: list[Action]) -> None:
        for action in actions:
            if action[0] == "start":
                self._call_start(action[1], action[2])
            else:
                self._args(action[1])

    def _call_whole(self) -> None:
        """The current call's arguments are complete; with `max_calls` of them, stop reading."""
        self._n_whole += 1
        self._call_ended = True
        self._mode = "after"
        if self._max_calls is not None and self._n_whole >= self._max_calls:
            self._buf, self._mode = "", "done"

    def _give_back(self, text: str = "") -> None:
        """The current group holds no (further) call: what it read is text."""
        self._text(self._held + text)
        self._held, self._closers, self._reader = "", [], None
        self._mode = "text"

    # --- feeding ---

    def feed(self, text: str) -> list[Event]:
        """Events for more content."""
        self._buf += text
        while self._buf and getattr(self, f"_on_{self._mode}")():
            pass
        events, self._events = self._events, []
        return events

    def finish(self) -> list[Event]:
        """Events for what is still held back when generation ends."""
        mode, buf = self._mode, self._buf
        self._buf = ""
        reader = self._reader
        # A call cut short keeps the arguments as far as they got, never made-up `{}`: a client must
        # see that they are not whole (as OpenAI's calls cut by max_tokens).
        if (name := self._cut_call(reader, buf)) is not None:  # a call's syntax, never text
            self._call_start(name, None)
            if reader and reader.args_text():
                self._args(reader.args_text())
        elif mode == "object" and reader is not None and reader.started:
            if not reader.streamed and reader.args_text():  # cut short: send what there is
                self._args(reader.args_text())
        elif mode == "object":
            self._give_back("".join(reader.raw if reader else []) + buf)
        elif mode in _TEXT_MODES:
            self._give_back(buf)
        elif mode == "gemma":
            self._read_gemma(buf, "")
        elif mode == "lfm2":
            self._read_whole(python_calls(buf), buf, "")
        elif mode == "python":
            call = python_call(buf)
            if call is None:
                self._give_back(buf)
            else:
                self._call_start(call[0], None)
                self._args(call[1])
        elif mode == "args" and not self._args_sent:
            self._args("{}")
        elif mode == "value":  # cut short: the text so far
            self._args(_string_body(self._value_so_far(buf)) + '"}')
        elif mode == "params":
            self._args("}" if self._args_sent else "{}")
        elif mode == "glm":
            self._give_back(buf)
        events, self._events = self._events, []
        return events

    def _cut_call(self, reader: CallReader | None, buf: str) -> str | None:
        """The required call an answer cut short was writing before it was announced, where one fits."""
        if not self._required or self._n_calls or not (reader or self._held.strip() or buf.strip()):
            return None
        so_far = reader.name_so_far() if reader else ""
        fits = [name for name in self._required if name.startswith(so_far)]
        return fits[0] if len(fits) == 1 else None

    # Each `_on_<mode>` reads from the start of `_buf`; True means "call again".

    def _on_text(self) -> bool:
        buf, lead = self._buf, ""
        if not self._said_anything:  # leading whitespace: dropped if a call follows
            head = buf.lstrip(WS)
            if not head:
                return False
            lead, buf = buf[: len(buf) - len(head)], head
        hits = [(buf.find(o), -len(o), o) for o in self._openers if o in buf]
        at, _, opener = min(hits) if hits else (len(buf), 0, "")
        keep = len(buf) - at
        partial = partial_marker(buf, self._long_openers)
        if not hits or partial > keep:  # a longer opener may be starting before the one found
            keep, opener = max(keep, partial), ""
        elif any(o != opener and o.startswith(buf[at:]) for o in self._long_openers):
            opener = ""  # the opener may be the start of a longer one: wait
        before = buf[: len(buf) - keep]
        if before:
            self._text(lead + before)
            lead = ""
        if not opener:
            self._buf = lead + buf[len(buf) - keep :]
            return False
        self._buf, self._closers = buf[at + len(opener) :], []
        self._eager = opener in self._markers
        if opener in ("{", "["):
            self._held, self._buf = lead, opener + self._buf
            self._mode = "open"
            return True
        self._held = lead + opener
        if self._shape and opener == self._shape.opener:
            self._mode = "shape"
        elif opener == FENCE:
            self._mode = "fence"
        elif opener == FUNCTION_TAG:
            self._mode = "function"
        elif opener in (HERMES_OPEN, *self._wrappers):
            self._closers.append(_closing_tag(opener))
            self._mode = "open"
        elif opener in self._foreign:
            self._mode = "open"
        elif opener in (GEMMA_CALL, LFM2_CALLS):
            self._mode = "gemma" if opener == GEMMA_CALL else "lfm2"
        else:
            self._mistral_name, self._mistral_id = "", None
            self._mode = "tag" if opener == PYTHON_TAG else "mistral"
        return True

    def _on_shape(self) -> bool:
        """After the word that starts a template's learned calls: the rest of its opening text."""
        shape = self._shape
        assert shape is not None
        taken = skim(self._buf, shape.open[shape.open.index(shape.opener) + len(shape.opener) :])
        if taken == -1:
            return False
        if taken is None:
            self._give_back()
            return True
        self._held += self._buf[:taken]
        self._buf = self._buf[taken:]
        self._closers = [shape.close.strip()] if shape.json_calls and shape.close.strip() else []
        self._mode = "open" if shape.json_calls else "named"
        return True

    def _on_named(self) -> bool:
        """A call in a template's learned shape: its name, the text after it, then its arguments."""
        shape = self._shape
        assert shape is not None
        found = _NAME.match(self._buf)
        rest = self._buf[found.end() :] if found else ""
        taken = skim(rest, shape.name_close) if rest else -1
        head = rest[taken:].lstrip(WS) if taken is not None and taken >= 0 else ""
        tags = shape.params
        name = found.group() if found else ""
        if shape.numbered:  # `name:0`: the name, without its number
            name, colon, number = name.rpartition(":")
            name = name if colon and number.isdigit() else ""
        if found is None or taken is None or (head and name not in self._names):
            self._give_back()
            return True
        if not head:
            if len(found.group()) < 64:
                return False  # the name, or what follows it, is still coming
            self._give_back()
            return True
        if (tags is None and head[0] != "{") or (
            tags and not may_start(head, tags.key_open) and not skim(head, tags.end)
        ):
            self._give_back()
            return True
        if tags and not head.startswith(tags.key_open) and skim(head, tags.end) == -1:
            return False
        self._buf = head
        self._call_start(name, None)
        self._closers = [shape.close.strip(), shape.end.strip()]
        if tags is None:
            self._scanner, self._mode = JsonScanner(), "args"
        else:
            self._start_params(name, tags)
        return True

    def _on_gemma(self) -> bool:
        """After `<|tool_call>`: the call, read whole at `<tool_call|>`."""
        body, end, rest = self._buf.partition(GEMMA_CALL_END)
        if not end:
            return False
        self._buf = rest
        self._read_gemma(body, end)
        return True

    def _on_lfm2(self) -> bool:
        """After `<|tool_call_start|>`: the list of calls, read whole at `<|tool_call_end|>`."""
        body, end, rest = self._buf.partition(LFM2_CALLS_END)
        if not end:
            return False
        self._buf = rest
        self._read_whole(python_calls(body), body, end)
        return True

    def _read_gemma(self, body: str, end: str) -> None:
        call = gemma_call(body)
        self._read_whole(None if call is None else [call], body, end)

    def _read_whole(self, calls: list[tuple[str, str]] | None, body: str, end: str) -> None:
        """The calls read from `body` (and its closing tag `end`, if it came), or the text they are
        when it holds none or one names no tool of the request."""
        if not calls or any(name not in self._names for name, _ in calls):
            self._give_back(body + end)
            return
        for name, args in calls:
            if self._mode == "done":
                break
            self._call_start(name, None)
            self._args(args)
            self._call_whole()

    def _on_fence(self) -> bool:
        """After ```: the info string (`json`, ...) and the end of its line."""
        line, nl, rest = self._buf.partition("\n")
        if not _FENCE_INFO.fullmatch(line):
            self._give_back()
            return True
        if not nl:
            return False
        self._held += line + nl
        self._buf = rest
        self._closers.append(FENCE)
        self._mode = "open"
        return True

    def _on_function(self) -> bool:
        """After `<function`: `=name>` or ` name="name">`, then the arguments object."""
        tag, gt, rest = self._buf.partition(">")
        if not gt:
            if len(tag) > _MAX_FUNCTION_TAG:
                self._give_back()
                return True
            return False
        found = _FUNCTION_NAME.fullmatch(tag)
        name = found and (found.group(1) or found.group(2))
        head = rest.lstrip(WS)
        tags = XML_PARAMETERS
        params = may_start(head, tags.key_open) or may_start(head, tags.end)
        if not name or name not in self._names or (head and head[0] != "{" and not params):
            self._give_back()
            return True
        if not head or (head[0] != "{" and not head.startswith((tags.key_open, tags.end))):
            return False  # the arguments have not begun
        self._buf = head
        self._call_start(name, None)
        self._closers.append(tags.end)
        if head[0] == "{":
            self._scanner, self._mode = JsonScanner(), "args"
        else:
            self._start_params(name, tags)
        return True

    def _start_params(self, name: str, tags: ParameterTags) -> None:
        self._function, self._tags, self._mode = name, tags, "params"

    def _on_glm(self) -> bool:
        """After `<tool_call>` in the glm family: the function's name, then its parameters."""
        tags = GLM_PARAMETERS
        found = _NAME.match(self._buf)
        rest = self._buf[found.end() :].lstrip(WS) if found else ""
        if found is None or not (may_start(rest, tags.key_open) or may_start(rest, tags.end)):
            self._give_back()
            return True
        if not rest.startswith((tags.key_open, tags.end)):
            return False  # the name or the tag after it is still coming
        if found.group() not in self._names:
            self._give_back()
            return True
        self._buf = rest
        self._call_start(found.group(), None)
        self._start_params(found.group(), tags)
        return True

    def _on_params(self) -> bool:
        """The arguments as tags (`<parameter=key>value</parameter>`, GLM's `<arg_key>`...) up to their end.
        Each is sent once whole (its text read by the tool's schema), the object closed at the end."""
        tags = self._tags
        head = self._buf.lstrip(WS)
        self._buf = head
        end = skim(head, tags.end)
        if end:
            if end == -1:
                return False
            self._buf = head[end:]
            self._closers.pop()
            self._args("}" if self._args_sent else "{}")
            self._call_whole()
            return True
        if not head.startswith(tags.key_open):
            if not head or may_start(head, tags.key_open):
                return False
            return self._params_broke()
        # `<｜DSML｜parameter name="key" string="false">`: a quoted key's tag ends after any attributes
        attributes = tags.key_close.startswith('"') and tags.key_close.endswith(">")
        key, found, rest = head[len(tags.key_open) :].partition('"' if attributes else tags.key_close)
        if found and attributes:
            more, found, rest = rest.partition(">")
            key += "" if found and "<" not in more else "<"  # a tag cut short: no key
        if not found:
            return len(key) > _MAX_PARAMETER_KEY and self._params_broke()
        if not _PARAMETER_NAME.fullmatch(key):
            return self._params_broke()
        rest = rest.lstrip(WS) if tags.value_open else rest
        if not rest.startswith(tags.value_open):
            return False if may_start(rest, tags.value_open) else self._params_broke()
        schema = self._schemas.get(self._function, {}).get("properties", {}).get(key)
        head = (", " if self._args_sent else "{") + json.dumps(key, ensure_ascii=False) + ": "
        if is_text(schema):  # a string streams as it comes (a file a coding model writes, say)
            self._args(head + '"')
            self._buf, self._mode, self._value_began = rest[len(tags.value_open) :], "value", False
            return True
        value, close, rest = rest[len(tags.value_open) :].partition(tags.value_close)
        if not close:
            return False
        value = value.removeprefix("\n").removesuffix("\n")
        self._args(head + json.dumps(parameter(value, schema), ensure_ascii=False))
        self._buf = rest
        return True

    def _on_value(self) -> bool:
        """A string parameter's text up to its closing tag, sent as it comes; a newline at either end is
        the template's, not the value's."""
        buf = self._buf if self._value_began else self._buf.removeprefix("\n")
        self._value_began = True
        text, close, rest = buf.partition(self._tags.value_close)
        if close:
            self._args(_string_body(text.removesuffix("\n")) + '"')
            self._buf, self._mode = rest, "params"
            return True
        text = self._value_so_far(buf)
        if text:
            self._args(_string_body(text))
        self._buf = buf[len(text) :]
        return False

    def _value_so_far(self, buf: str) -> str:
        """The text of `buf` that is surely a string parameter's: not a closing tag begun, nor a newline
        that may be the template's before it."""
        return buf[: len(buf) - partial_marker(buf, (self._tags.value_close,))].removesuffix("\n")

    def _params_broke(self) -> bool:
        """A call whose arguments broke off: it ends with what it has, the rest is text."""
        self._args("}" if self._args_sent else "{}")
        self._closers, self._mode = [], "text"
        return True

    def _on_open(self) -> bool:
        """Inside the wrappers of a group: the next call, an array of them, or another wrapper."""
        head = self._buf.lstrip(WS)
        self._held += self._buf[: len(self._buf) - len(head)]
        self._buf = head
        if not head:
            return False
        in_array = "]" in self._closers
        if self._syntax.family == "glm" and self._closers == [HERMES_CLOSE] and head[0] not in "{[<`":
            self._mode = "glm"
            return True
        if not in_array and may_start(head, FUNCTION_TAG) and self._closers:
            if len(head) < len(FUNCTION_TAG):
                return False
            self._held += FUNCTION_TAG
            self._buf, self._mode = head[len(FUNCTION_TAG) :], "function"
            return True
        if head[0] == "{":
            self._reader = CallReader(eager=self._eager, names=self._names)
            self._mode = "object"
            return True
        if head[0] == "[" and not in_array:
            self._held += "["
            self._buf = head[1:]
            self._closers.append("]")
            return True
        if not in_array and len(self._closers) < _MAX_WRAPPERS:
            for tag in (FENCE, *WRAPPER_TAGS):
                if head.startswith(tag):
                    self._held += tag
                    self._buf = head[len(tag) :]
                    if tag == FENCE:
                        self._mode = "fence"
                    else:
                        self._closers.append(_closing_tag(tag))
                    return True
                if tag.startswith(head):
                    return False  # may still become this wrapper
        self._give_back()
        return True

    def _on_object(self) -> bool:
        reader = self._reader
        assert reader is not None
        for i, ch in enumerate(self._buf):
            n = len(reader.raw)
            self._apply(reader.push(ch))
            rest = self._buf[i + (len(reader.raw) > n) :]
            if reader.failed:
                self._buf = rest
                if reader.started:  # a call that broke: the rest is text
                    self._held, self._closers, self._reader, self._mode = "", [], None, "text"
                else:
                    self._give_back("".join(reader.raw))
                return True
            if reader.done:
                self._buf, self._reader = rest, None
                self._call_whole()
                return True
        self._buf = ""
        return False

    def _on_done(self) -> bool:
        self._buf = ""  # nothing after the last call allowed is output
        return False

    def _on_after(self) -> bool:
        """After a call: its closing tags and fences, a separator, the next call, or text."""
        head = self._buf.lstrip(WS)
        self._buf = head
        if not head:
            return False
        shape = self._shape
        if shape and shape.next.strip() and self._closers == [shape.close.strip()]:
            taken = skim(head, shape.next)
            if taken == -1:
                return False  # may still become the next call
            if taken is not None:
                self._held, self._buf, self._mode = "", head[taken:], "named"
                return True
        closer = self._closers[-1] if self._closers else None
        taken = skim(head, closer) if closer is not None else None
        if taken == -1:
            return False  # may still become the closer
        if taken is not None:
            self._buf = head[taken:]
            self._closers.pop()
            return True
        if head[0] in ",;" and (closer == "]" or not self._closers):
            self._held, self._buf, self._mode = head[0], head[1:], "open"
            return True
        if head[0] in "{[" and closer != "]" and not any(may_start(head, o) for o in self._long_openers):
            self._held, self._mode = "", "open"
            return True
        self._closers, self._mode = [], "text"
        return True

    def _on_tag(self) -> bool:
        head = self._buf.lstrip(WS)
        if not head:
            return False
        self._held += self._buf[: len(self._buf) - len(head)]
        self._buf = head
        self._mode = "open" if head[0] in "{[" else "python"
        return True

    def _on_python(self) -> bool:
        return False  # the call is read whole when generation ends

    def _on_mistral(self) -> bool:
        head = self._buf.lstrip(WS)
        if not head:
            return False
        self._held += self._buf[: len(self._buf) - len(head)]
        self._buf = head
        self._mode = "open" if head[0] in "{[" else "mistral_name"
        return True

    def _on_mistral_name(self) -> bool:
        return self._mistral_until((MISTRAL_ARGS, MISTRAL_CALL_ID, "{"))

    def _on_mistral_id(self) -> bool:
        return self._mistral_until((MISTRAL_ARGS, "{"))

    def _mistral_until(self, ends: tuple[str, ...]) -> bool:
        """Read a call's name (or its id) up to the marker that ends it (or the arguments' brace)."""
        found = [(self._buf.find(m), m) for m in ends if m in self._buf]
        if not found:
            keep = partial_marker(self._buf, ends)
            if _NAME.fullmatch(self._buf[: len(self._buf) - keep].strip() or "x"):
                return False
            self._give_back()
            return True
        at, marker = min(found)
        value = self._buf[:at].strip()
        if not _NAME.fullmatch(value):
            self._give_back()
            return True
        end = at + len(marker) if marker != "{" else at
        self._held += self._buf[:end]
        self._buf = self._buf[end:]
        if self._mode == "mistral_name":
            self._mistral_name = value
        else:
            self._mistral_id = value
        if marker == MISTRAL_CALL_ID:
            self._mode = "mistral_id"
        else:
            self._call_start(self._mistral_name, self._mistral_id)
            self._scanner, self._mode = JsonScanner(), "args"
        return True

    def _on_args(self) -> bool:
        scanner = self._scanner
        assert scanner is not None
        for i, ch in enumerate(self._buf):
            if ch in WS and scanner.depth == 0:
                continue
            scanner.push(ch)
            if scanner.failed:
                if not self._args_sent:
                    self._args("{}")
                self._buf, self._mode = self._buf[i:], "text"
                return True
            self._args(ch)
            if scanner.done:
                self._buf = self._buf[i + 1 :]
                self._call_whole()
                return True
        self._buf = ""
        return False
