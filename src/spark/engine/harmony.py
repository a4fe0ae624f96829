"""OpenAI's harmony format (gpt-oss): an answer is a run of messages, each on a channel.

After the generation prompt `<|start|>assistant` such a model writes, for example:

    <|channel|>analysis<|message|>The user wants the weather. Call the tool.<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}

or, once it has the result, `...<|start|>assistant<|channel|>final<|message|>It is sunny.` The
recipient may also stand before the channel (`<|start|>assistant to=functions.get_weather<|channel|>
commentary json<|message|>`). `<|return|>` and `<|call|>` end generation (llama.cpp counts them as
end-of-generation tokens, and not `<|end|>`). `HarmonyParser` turns the analysis channel into
reasoning, the final channel (and commentary to no one: a preamble) into content, and a message to
one of the request's functions into a tool call; a message to another recipient (the model's
built-in browser or python tools, which Spark does not run) is dropped, as llama-server does.
`harmony_grammar` writes the grammars that force a call or a JSON answer in this format.
"""

from __future__ import annotations

import json
import re
from typing import Literal

from spark.engine.grammar import Grammar, Rules, SchemaConverter, finish, literal
from spark.engine.reasoning import ThinkSyntax, think_prefix
from spark.engine.text import partial_marker
from spark.engine.toolcalls import HARMONY_MARKERS, args_rule, chosen_tools, new_call_id
from spark.types import Event, ReasoningDelta, TextDelta, Tool, ToolCallDelta

START, CHANNEL, MESSAGE, CONSTRAIN, END, CALL, RETURN = HARMONY_MARKERS
ANALYSIS = f"{CHANNEL}analysis{MESSAGE}"
FINAL = f"{CHANNEL}final{MESSAGE}"
# The thinking block as the engine's budget sees it: closing it means ending the analysis message
# and starting the next one, whose channel the model (or a grammar) then chooses.
THINK = ThinkSyntax(open=ANALYSIS, close=f"{END}{START}assistant")
# A call begins where a message header names a function (llama-server's triggers, as one pattern);
# a lazy grammar takes over from the recipient on.
CALL_START = f"(?:^|{re.escape(START)}assistant)(?:{re.escape(CHANNEL)}(?:commentary|analysis))?( to=functions\\.)"

_BODY_ENDS = (END, CALL, RETURN, START)  # a message's end, or the next one's start where <|end|> is missing
_HEADER_STARTS = (START, CHANNEL, CONSTRAIN, " to=", "to=")
_MAX_HEADER = 256  # characters: past this, what the model writes is no header
_RECIPIENT = re.compile(r"to=(\S+?)(?=<\||\s|$)")
_CHANNEL_NAME = re.compile(re.escape(CHANNEL) + r"(\w+)")

Kind = Literal["reasoning", "content", "call", "drop"]


class HarmonyParser:
    """Splits a harmony answer, as it streams, into reasoning, content and tool calls.

    `tool_names` are the functions a call may name (none: calls are dropped, not offered);
    with `max_calls` the output is `complete` once that many calls are whole. `opened`: the
    prompt already opened a final message (a prefill), so the output starts as content.
    """

    def __init__(self, tool_names: frozenset[str], *, max_calls: int | None = None, opened: bool = False) -> None:
        self._names = tool_names
        self._max_calls = max_calls
        self._buf = ""
        self._in_header = not opened
        self._kind: Kind = "content"
        self._n_calls = 0
        self._n_whole = 0
        self._args = ""  # the current call's arguments so far

    @property
    def in_reasoning(self) -> bool:
        return not self._in_header and self._kind == "reasoning"

    @property
    def made_tool_calls(self) -> bool:
        return self._n_calls > 0

    @property
    def complete(self) -> bool:
        return self._max_calls is not None and self._n_whole >= self._max_calls

    @property
    def call_ended(self) -> bool:
        if self._n_whole and self._in_header:
            return True
        if self._in_header or self._kind != "call":
            return False
        try:
            json.loads(self._args)
        except ValueError:
            return False
        return True

    def feed(self, text: str) -> list[Event]:
        """Events for more output text."""
        if self.complete:
            return []
        self._buf += text
        out: list[Event] = []
        while self._buf and (self._read_header(out) if self._in_header else self._read_body(out)):
            pass
        return out

    def finish(self) -> list[Event]:
        """Events for what is held back when generation ends (a call is whole at `<|call|>`)."""
        out: list[Event] = []
        if not self._in_header:
            self._emit(self._buf, out)
            if self._kind == "call" and not self._args:
                self._emit("{}", out)
        elif self._buf.strip() and not self._buf.lstrip().startswith(_HEADER_STARTS):
            out.append(TextDelta(self._buf))
        self._buf = ""
        return out

    def _read_header(self, out: list[Event]) -> bool:
        """Read a message's header up to `<|message|>`; True when the body starts."""
        buf = self._buf
        end = buf.find(MESSAGE)
        if end < 0:
            head = buf.lstrip()
            looks_like_header = any(head.startswith(s) or s.startswith(head) for s in _HEADER_STARTS)
            if head and (not looks_like_header or len(buf) > _MAX_HEADER):
                self._start("content")  # a model writing plain text: all of it is content
                return True
            return False
        header, self._buf = buf[:end], buf[end + len(MESSAGE) :]
        recipient = _RECIPIENT.search(header)
        channels = _CHANNEL_NAME.findall(header)
        name = recipient.group(1) if recipient else "assistant"
        if name != "assistant":
            function = name.removeprefix("functions.")
            if name.startswith("functions.") and function in self._names and not self.complete:
                self._n_calls += 1
                out.append(ToolCallDelta(self._n_calls - 1, id=new_call_id("harmony"), name=function))
                self._start("call")
            else:
                self._start("drop")
        else:
            self._start("reasoning" if channels and channels[-1] == "analysis" else "content")
        return True

    def _start(self, kind: Kind) -> None:
        self._in_header, self._kind, self._args = False, kind, ""

    def _read_body(self, out: list[Event]) -> bool:
        """Read a message's body; True when it ended (the next header starts)."""
        buf = self._buf
        ends = [(i, m) for m in _BODY_ENDS if (i := buf.find(m)) >= 0]
        if not ends:
            keep = partial_marker(buf, _BODY_ENDS)
            self._emit(buf[: len(buf) - keep], out)
            self._buf = buf[len(buf) - keep :]
            return False
        i, marker = min(ends)
        self._emit(buf[:i], out)
        self._buf = buf[i if marker == START else i + len(marker) :]
        if self._kind == "call":
            if not self._args:
                self._emit("{}", out)
            self._n_whole += 1
        self._in_header = True
        return not self.complete

    def _emit(self, text: str, out: list[Event]) -> None:
        if not text:
            return
        if self._kind == "reasoning":
            out.append(ReasoningDelta(text))
        elif self._kind == "content":
            out.append(TextDelta(text))
        elif self._kind == "call":
            self._args += text
            out.append(ToolCallDelta(self._n_calls - 1, arguments=text))


def opened_final(prompt: str) -> bool:
    """Whether the rendered prompt ends inside a message (a prefill after `<|channel|>final<|message|>`)."""
    return prompt.rfind(MESSAGE) > max(prompt.rfind(START), prompt.rfind(END))


def harmony_grammar(
    tools: list[Tool] | None,
    *,
    forced: bool,
    only: str | None = None,
    schema: dict[str, object] | None = None,
    json_out: bool = False,
    think: bool = True,
    format_param: str = "response_format",
    strict: bool = False,
) -> Grammar | None:
    """The grammar for a harmony answer: a forced call (`only` names its tool), a JSON answer
    (`schema`, or any object), either of them, or with tools offered and nothing forced a lazy
    grammar that constrains a call once its header names a function. Analysis may come first, unless
    `think` is off (thinking turned off: the answer comes at once). `format_param` names the JSON
    format's request field in errors; `strict` refuses a schema keyword the grammar cannot enforce."""
    if not (forced or json_out or tools):
        return None
    rules = Rules()
    param = "tool_choice" if forced else format_param if json_out else "tools"
    calls = None
    if tools:
        chosen = chosen_tools(tools, only)
        constraint = rules.add("constraint", f'" " {literal(CONSTRAIN)}? "json"')
        channel = rules.add("channel", f'{literal(CHANNEL)} ( "commentary" | "analysis" )')
        alts = [
            f"{literal(t.name)} {channel}? {constraint}? {literal(MESSAGE)} {args_rule(rules, t, f'args-{i}')}"
            for i, t in enumerate(chosen)
        ]
        calls = rules.add("call", f'" to=functions." ( {" | ".join(alts)} )')
    if not (forced or json_out):
        assert calls is not None
        return finish(rules, calls, param, trigger_patterns=(CALL_START,))
    if forced and calls is not None:
        answer = f'{literal(CHANNEL)} "commentary" {calls}'
    else:
        body = SchemaConverter(rules, schema, format_param, strict=strict).rule(schema, "json") if schema else None
        header = f'{literal(CHANNEL)} "final" ( " " {literal(CONSTRAIN)}? "json" )? {literal(MESSAGE)}'
        answer = f"{header} {body or rules.primitive('object')}"
    return finish(rules, f"{think_prefix(rules, THINK, opened=False)} {answer}" if think else answer, param)
