"""Tool calls: each template family's call syntax, parsed from the output as it streams,
and the grammars that force or constrain calls.

Families, recognised from the chat template's text:

- hermes (Hermes 2/3, Qwen 2.5/3, ...): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
- xml (Qwen3-Coder, Qwen3.5, Nemotron 3): `<tool_call><function=name><parameter=key>value</parameter>...
  </function></tool_call>`, each value read by the tool's schema (a string as written, else JSON)
- glm (GLM 4.5+): `<tool_call>name<arg_key>key</arg_key><arg_value>value</arg_value></tool_call>`, read as xml's
- llama3 (Llama 3.1+): an answer that is `{"name": ..., "parameters": {...}}`, or
  `<|python_tag|>` followed by such JSON or by `tool.call(key=value, ...)`
- mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}]`, or the newer
  `[TOOL_CALLS]name[ARGS]{...}` (optionally `[CALL_ID]id` before `[ARGS]`)
- gemma (Gemma 4): `<|tool_call>call:name{key:<|"|>text<|"|>,n:2}<tool_call|>`, read whole at its end
- lfm2 (LFM2, LFM2.5): `<|tool_call_start|>[name(key="text", n=2), ...]<|tool_call_end|>`, read whole
- harmony (gpt-oss): a message to a function, `<|channel|>commentary to=functions.name<|message|>{...}`,
  parsed with the rest of the format by `spark.engine.harmony`
- template: any other template that renders calls in a syntax of its own (DeepSeek, MiniMax, Seed-OSS,
  Nemotron 2, Command R7B, Kimi K2, ...), learned once per template by rendering probe calls (`learned`)
- generic: any other template; an answer that is `{"name": ..., "arguments": {...}}`.
  A template that does not render tools at all gets them described in the system message.

Whatever the family, the parser also reads the calls small models write instead: bare
JSON call objects naming one of the request's tools (alone, in a row, in an array, after
text), in a markdown code fence or a tag such as `<tool_call>`. Anything else stays text.
The engine ends an answer after a whole call unless the model's own next token goes on.

Modules:

- `syntax`: which family a template uses, and the prompt side (tool lists, earlier calls)
- `learned`: the syntax of a template of no known family, learned from what it renders
- `reader`: one JSON call object read a character at a time
- `jsonscan`: JSON checked one character at a time
- `parser`: the streaming parser of every family's calls
- `written`: calls and values in syntaxes other than JSON (Python, Gemma 4, parameter tags), read whole
- `grammar`: the grammars that force or constrain calls
"""

from spark.engine.toolcalls.grammar import args_rule, call_rule, chosen_tools, lazy_grammar
from spark.engine.toolcalls.parser import ToolCallParser
from spark.engine.toolcalls.syntax import (
    HARMONY_MARKERS,
    HERMES_CLOSE,
    HERMES_OPEN,
    JSON_START,
    MISTRAL_ARGS,
    MISTRAL_CALL_ID,
    MISTRAL_CALLS,
    PYTHON_TAG,
    ToolSyntax,
    calls_as_text,
    describe_tools,
    new_call_id,
    tool_syntax,
)
from spark.engine.toolcalls.written import gemma_call, python_call, python_calls

__all__ = [
    "HARMONY_MARKERS",
    "HERMES_CLOSE",
    "HERMES_OPEN",
    "JSON_START",
    "MISTRAL_ARGS",
    "MISTRAL_CALLS",
    "MISTRAL_CALL_ID",
    "PYTHON_TAG",
    "ToolCallParser",
    "ToolSyntax",
    "args_rule",
    "call_rule",
    "calls_as_text",
    "chosen_tools",
    "describe_tools",
    "gemma_call",
    "lazy_grammar",
    "new_call_id",
    "python_call",
    "python_calls",
    "tool_syntax",
]
