"""The fields other OpenAI-compatible servers hold an answer to, read as one constraint.

llama-server's `grammar` and `json_schema`, vLLM's `structured_outputs` (0.10 on) and older
`guided_*` fields, SGLang's `regex`, `ebnf` and `json_schema` (a JSON string there): clients such as
outlines send them in `extra_body`. Each becomes what the engine already enforces: a JSON schema
(never strict: a keyword the grammar cannot enforce is left out, as those servers do), a GBNF
grammar (vLLM's and SGLang's EBNF is llama.cpp's GBNF for grammars rooted at `root`; any other is
refused naming its field), or a regular expression over the whole answer (a choice is one of
literal alternatives).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import msgspec

from spark.api.common import LlamaSampling, refuse
from spark.errors import InvalidRequest


class StructuredOutputs(msgspec.Struct, frozen=True, kw_only=True):
    """vLLM's `structured_outputs`: one constraint; its backend hints (`disable_fallback`,
    `whitespace_pattern`, ...) mean nothing to llama.cpp's grammars and are not read."""

    json: dict[str, Any] | str | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    structural_tag: Any = None


class ConstraintFields(LlamaSampling, frozen=True, kw_only=True):
    """The constraint fields chat and text completion bodies share (beside llama-server's sampling
    fields: a Struct has one base with fields)."""

    grammar: str | None = None  # llama-server's GBNF
    json_schema: dict[str, Any] | str | None = None  # llama-server's object, SGLang's JSON string
    structured_outputs: StructuredOutputs | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    regex: str | None = None  # SGLang's
    ebnf: str | None = None  # SGLang's


class Constraint(msgspec.Struct, frozen=True):
    """What one request's fields hold the answer to, and the field that said so.

    kind "json": JSON matching `schema` (None: any JSON object); "grammar": the GBNF `text`;
    "regex": the whole answer matches the regular expression `text`.
    """

    param: str
    kind: Literal["json", "grammar", "regex"]
    schema: dict[str, Any] | None = None
    text: str = ""


def constraint(wire: ConstraintFields, response_format: bool = False) -> Constraint | None:
    """The one constraint of `wire` (None: free text). `response_format` says the body's own
    `response_format` asks for JSON: it comes first, and any of these fields beside it is a second
    constraint. Two constraints: `InvalidRequest` naming the second."""
    found = ["response_format"] if response_format else []
    so = wire.structured_outputs
    fields: list[tuple[str, Any, Literal["json", "grammar", "regex", "choice"]]] = [
        ("json_schema", None if wire.json_schema == "" else wire.json_schema, "json"),
        ("grammar", wire.grammar or None, "grammar"),  # "" (what front ends send unset): none, as llama-server
    ]
    if so is not None:
        refuse(
            so.structural_tag is not None,
            "structured_outputs.structural_tag",
            "'structured_outputs.structural_tag' is not supported by this server: send 'json', 'regex', "
            "'choice' or 'grammar'.",
        )
        fields += [
            ("structured_outputs.json", so.json, "json"),
            ("structured_outputs.regex", so.regex, "regex"),
            ("structured_outputs.choice", so.choice, "choice"),
            ("structured_outputs.grammar", so.grammar, "grammar"),
            ("structured_outputs.json_object", {} if so.json_object else None, "json"),
        ]
    fields += [
        ("guided_json", wire.guided_json, "json"),
        ("guided_regex", wire.guided_regex, "regex"),
        ("guided_choice", wire.guided_choice, "choice"),
        ("guided_grammar", wire.guided_grammar, "grammar"),
        ("regex", wire.regex, "regex"),
        ("ebnf", wire.ebnf, "grammar"),
    ]
    out: Constraint | None = None
    for param, value, kind in fields:
        if value is None:
            continue
        found.append(param)
        refuse(
            len(found) > 1,
            param,
            f"'{param}' and '{found[0]}' both constrain the answer: send one of them.",
        )
        if kind == "json":
            out = Constraint(param, "json", _schema(value, param) or None)
        elif kind == "choice":
            refuse(not value, param, f"'{param}' must list at least one string.")
            out = Constraint(param, "regex", text="|".join(re.escape(c) for c in value))
        else:
            out = Constraint(param, kind, text=value)
    return out


def _schema(value: dict[str, Any] | str, param: str) -> dict[str, Any]:
    """A schema sent as an object, or as its JSON text (SGLang's and vLLM's string form)."""
    if isinstance(value, dict):
        return value
    try:
        schema = json.loads(value)
    except ValueError:
        schema = None
    if not isinstance(schema, dict):
        raise InvalidRequest(f"'{param}' must be a JSON schema: an object, or its JSON text.", param=param)
    return schema
