"""JSON schema to GBNF.

The converter enforces what it accepts (numeric bounds, string formats,
lengths, patterns). What it cannot guarantee depends on the request: a strict
one (OpenAI's `strict: true`, Anthropic's structured outputs) is refused with
`SchemaError` (an `InvalidRequest`), because its client relies on every
keyword holding; any other has the keyword left out, the grammar enforcing the
looser schema, as llama.cpp's json-schema-to-grammar does for llama-server and
Ollama. An invalid schema, or one no value can match, is refused either way.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from spark.engine.grammar.errors import SchemaError
from spark.engine.grammar.gbnf import HEX, Grammar, Rules, finish, literal, repeat
from spark.engine.grammar.numeric import int_range, number_range
from spark.engine.grammar.regex import RegexConverter
from spark.json_schema import MAX_SCHEMA_DEPTH, schema_problem

# Keywords that constrain values but that this converter cannot enforce.
_UNSUPPORTED = {
    "not": "'not'",
    "if": "'if'/'then'/'else'",
    "then": "'if'/'then'/'else'",
    "else": "'if'/'then'/'else'",
    "dependentSchemas": "'dependentSchemas'",
    "dependentRequired": "'dependentRequired'",
    "dependencies": "'dependencies'",
    "patternProperties": "'patternProperties'",
    "propertyNames": "'propertyNames'",
    "contains": "'contains'",
    "minContains": "'minContains'",
    "maxContains": "'maxContains'",
    "$dynamicRef": "'$dynamicRef'",
    "$recursiveRef": "'$recursiveRef'",
}
# Keywords that say nothing about which values are valid.
_ANNOTATIONS = {
    "title",
    "description",
    "default",
    "examples",
    "example",
    "$schema",
    "$id",
    "$anchor",
    "$comment",
    "$defs",
    "definitions",
    "deprecated",
    "readOnly",
    "writeOnly",
    "contentMediaType",
    "contentEncoding",
    "contentSchema",
    "discriminator",
    "nullable",
}
_LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")

# Dates with days every month has, so no calendar knowledge is needed (29 February is left
# out), in years 1000-9999 (year 0 is no date to Python).
_DATE = (
    '[1-9] [0-9]{3} "-" ( ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] )'
    ' | ( "0" [13-9] | "1" [0-2] ) "-" ( "29" | "30" )'
    ' | ( "0" [13578] | "1" [02] ) "-31" )'
)
_TIME = (
    '( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )?'
    ' ( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )'
)
_LABEL = "[a-z0-9] ( [a-z0-9-]{0,20} [a-z0-9] )?"
_HOSTNAME = f'( {_LABEL} "." ){{0,3}} [a-z]{{2,10}}'
_SEGMENT = "[a-zA-Z0-9._~-]{1,30}"
_URI = f'( "https" | "http" ) "://" {_HOSTNAME} ( "/" {_SEGMENT} ){{0,8}} "/"? ( "?" {_SEGMENT} "=" {_SEGMENT} )?'
_IPV4_OCTET = '( "25" [0-5] | "2" [0-4] [0-9] | "1" [0-9] [0-9] | [1-9] [0-9] | [0-9] )'
_POINTER = '( "/" ( [a-zA-Z0-9._ -] | "~" [01] ){0,20} ){0,8}'
# Grammars for string formats; each is the string's content, without the quotes.
# Every one produces only valid values, and the (min, max) length of what it produces.
_FORMATS: dict[str, tuple[str, int, int | None]] = {
    "date": (_DATE, 10, 10),
    "time": (_TIME, 9, 21),
    "date-time": (f'{_DATE} "T" {_TIME}', 20, 32),
    "duration": ('"P" ( [0-9]{1,4} "D" ( "T" [0-9]{1,2} "H" )? | "T" [0-9]{1,2} [HMS] )', 3, 12),
    "uuid": (f'{HEX}{{8}} "-" {HEX}{{4}} "-" {HEX}{{4}} "-" {HEX}{{4}} "-" {HEX}{{12}}', 36, 36),
    "email": (f'[a-zA-Z0-9_+-]{{1,30}} ( "." [a-zA-Z0-9_+-]{{1,30}} ){{0,2}} "@" {_HOSTNAME}', 6, None),
    "hostname": (_HOSTNAME, 2, None),
    "ipv4": (f'{_IPV4_OCTET} "." {_IPV4_OCTET} "." {_IPV4_OCTET} "." {_IPV4_OCTET}', 7, 15),
    "ipv6": (f'{HEX}{{1,4}} ( ":" {HEX}{{1,4}} ){{7}}', 15, 39),
    "uri": (_URI, 10, None),
    "json-pointer": (_POINTER, 0, None),
    # No digit after a 0: jsonschema's checker reads any such digit as a leading zero.
    "relative-json-pointer": (f'( "0" | [1-9]{{1,3}} "0"? ) ( "#" | {_POINTER} )', 1, None),
    "regex": ("[a-zA-Z0-9 ]{0,40}", 0, 40),
}
for _alias, _same in (
    ("idn-email", "email"),
    ("idn-hostname", "hostname"),
    ("uri-reference", "uri"),
    ("iri", "uri"),
    ("iri-reference", "uri"),
    ("uri-template", "uri"),
):
    _FORMATS[_alias] = _FORMATS[_same]


def schema_grammar(
    schema: dict[str, Any] | None, *, param: str = "response_format", prefix: str = "", strict: bool = True
) -> Grammar:
    """The grammar of JSON output matching `schema` (None: any JSON object).

    `prefix` is GBNF put before the JSON (e.g. an optional reasoning block).
    Raises `InvalidRequest(param)` for an invalid schema, or, when `strict`,
    one with keywords the grammar cannot enforce (otherwise they are left out).
    """
    rules = Rules()
    value = (
        rules.primitive("object")
        if schema is None
        else SchemaConverter(rules, schema, param, strict=strict).rule(schema, "json")
    )
    return finish(rules, f"{prefix} {value}".strip(), param)


@dataclass(slots=True)
class SchemaConverter:
    """Writes GBNF rules for JSON schemas into `rules` (one converter per document)."""

    rules: Rules
    document: dict[str, Any] | bool
    param: str
    # False: a keyword that cannot be enforced is left out instead of refused (see the module's doc)
    strict: bool = field(default=True, kw_only=True)
    _refs: dict[str, str] = field(default_factory=dict)
    _depth: int = 0

    def __post_init__(self) -> None:
        problem = schema_problem(self.document)
        if problem is not None:
            raise SchemaError(f"invalid JSON schema in {self.param}: {problem}", param=self.param)

    def error(self, why: str) -> SchemaError:
        return SchemaError(f"unsupported JSON schema in {self.param}: {why}", param=self.param)

    def loosen(self, why: str) -> None:
        """A keyword cannot be enforced: refused when strict, else the caller leaves it out."""
        if self.strict:
            raise self.error(why)

    def rule(self, schema: Any, hint: str) -> str:
        """The name of a rule matching exactly values valid under `schema` (or a subset of them)."""
        if self._depth >= MAX_SCHEMA_DEPTH:
            raise self.error(f"'{hint[:80]}' is nested more than {MAX_SCHEMA_DEPTH} levels deep")
        self._depth += 1
        try:
            return self._rule(schema, hint)
        finally:
            self._depth -= 1

    def _rule(self, schema: Any, hint: str) -> str:
        if schema is True or schema == {}:
            return self.rules.primitive("value")
        if schema is False:
            raise self.error(f"'{hint}' allows no value at all (schema false)")
        if not isinstance(schema, dict):
            raise self.error(f"'{hint}' is not a schema (expected an object, got {type(schema).__name__})")
        unsupported = [key for key in schema if key in _UNSUPPORTED]
        if unsupported:
            self.loosen(f"the keyword {_UNSUPPORTED[unsupported[0]]} (at '{hint}') cannot be enforced")
            return self.rule({k: v for k, v in schema.items() if k not in _UNSUPPORTED}, hint)
        if "$ref" in schema:
            return self._ref(schema, hint)
        if "allOf" in schema:
            return self.rule(self._merge_all(schema, hint), hint)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return self._any_of(schema, key, hint)
        if "const" in schema or "enum" in schema:
            return self._enum(schema, hint)
        types = schema.get("type")
        if isinstance(types, list):
            if not types:
                raise self.error(f"'{hint}' has an empty type list")
            alts = [self.rule({**schema, "type": t}, f"{hint}-{t}") for t in dict.fromkeys(types)]
            return self.rules.add(hint, " | ".join(alts))
        if types is None:
            types = _implied_type(schema)
            if types is None:
                return self.rules.primitive("value")
        builders = {
            "object": self._object,
            "array": self._array,
            "string": self._string,
            "number": self._number,
            "integer": self._integer,
            "boolean": self._boolean,
            "null": self._null,
        }
        build = builders.get(types) if isinstance(types, str) else None
        if build is None:
            raise self.error(f"'{hint}' has an unknown type {types!r}")
        return build(schema, hint)

    # --- references and combinations ---

    def _resolve(self, ref: Any, hint: str) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise self.error(f"'{hint}' has $ref {ref!r}; only references inside the schema (#/...) work")
        node: Any = self.document
        for escaped in ref[1:].split("/")[1:] if ref != "#" else []:
            part = escaped.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise self.error(f"'{hint}' has $ref {ref!r}, which points at nothing")
        return node

    def _ref(self, schema: dict[str, Any], hint: str) -> str:
        ref = schema["$ref"]
        rest = {k: v for k, v in schema.items() if k != "$ref" and k not in _ANNOTATIONS}
        if rest:
            return self.rule({"allOf": [{"$ref": ref}, rest]}, hint)
        if ref in self._refs:
            return self._refs[ref]
        target = self._resolve(ref, hint)
        name = self.rules.reserve(ref.rsplit("/", 1)[-1] or "root")
        self._refs[ref] = name  # recursive schemas refer to the rule being defined
        self.rules.define(name, self.rule(target, name))
        return name

    def _deref(self, schema: Any, hint: str, seen: frozenset[str] = frozenset()) -> Any:
        """`schema` with a top-level $ref replaced by its target (for merging)."""
        while isinstance(schema, dict) and "$ref" in schema:
            ref = schema["$ref"]
            if ref in seen:
                raise self.error(f"'{hint}' combines a recursive $ref with allOf")
            seen = seen | {ref}
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            target = self._resolve(ref, hint)
            schema = self._merge([target, rest], hint) if rest else target
        return schema

    def _merge_all(self, schema: dict[str, Any], hint: str) -> dict[str, Any]:
        parts = schema["allOf"]
        if not isinstance(parts, list) or not parts:
            raise self.error(f"'{hint}' has an allOf that is not a non-empty list")
        rest = {k: v for k, v in schema.items() if k != "allOf"}
        return self._merge([*parts, rest], hint)

    def _merge(self, parts: Sequence[Any], hint: str) -> dict[str, Any]:
        """One schema equivalent to all of `parts` together, or an error when that is beyond us."""
        out: dict[str, Any] = {}
        resolved: list[dict[str, Any]] = []
        for raw in parts:
            part = self._deref(raw, hint)
            if part is True:
                continue
            if part is False or not isinstance(part, dict):
                raise self.error(f"'{hint}' has an allOf member that allows nothing or is not a schema")
            if "allOf" in part:
                part = self._merge_all(part, hint)
            resolved.append(part)
            for key, value in part.items():
                if key in _ANNOTATIONS:
                    continue
                if key not in out:
                    out[key] = value
                elif key == "properties":
                    merged = dict(out[key])
                    for name, sub in value.items():
                        merged[name] = {"allOf": [merged[name], sub]} if name in merged else sub
                    out[key] = merged
                elif key == "required":
                    out[key] = list(dict.fromkeys([*out[key], *value]))
                elif key == "type":
                    a = set(out[key] if isinstance(out[key], list) else [out[key]])
                    b = set(value if isinstance(value, list) else [value])
                    both = a & b | ({"integer"} if "number" in a | b and "integer" in a | b else set())
                    if not both:
                        raise self.error(f"'{hint}' combines incompatible types {sorted(a)} and {sorted(b)}")
                    out[key] = sorted(both) if len(both) > 1 else both.pop()
                elif key in _LOWER_BOUNDS and _is_number(value) and _is_number(out[key]):
                    out[key] = max(out[key], value)
                elif key in _UPPER_BOUNDS and _is_number(value) and _is_number(out[key]):
                    out[key] = min(out[key], value)
                elif key == "enum":
                    out[key] = [v for v in out[key] if any(_same_json(v, w) for w in value)]
                elif key == "items":
                    out[key] = {"allOf": [out[key], value]}
                elif not _same_json(out[key], value):  # the first value stays when not strict
                    self.loosen(f"'{hint}' combines two different '{key}' values in allOf")
        closed = [p for p in resolved if p.get("additionalProperties") is False]
        for p in closed:
            allowed = set(p.get("properties", {}))
            if any(set(other.get("properties", {})) - allowed for other in resolved):
                self.loosen(f"'{hint}' combines additionalProperties false with properties of another allOf member")
                break
        return out

    def _any_of(self, schema: dict[str, Any], key: str, hint: str) -> str:
        branches = schema[key]
        if not isinstance(branches, list) or not branches:
            raise self.error(f"'{hint}' has a {key} that is not a non-empty list")
        rest = {k: v for k, v in schema.items() if k != key and k not in _ANNOTATIONS}
        if rest:  # keywords beside anyOf apply to every branch
            branches = [self._merge([rest, b], hint) for b in branches]
        if key == "oneOf" and self.strict:  # not strict: read as anyOf
            resolved = [self._deref(b, hint) for b in branches]
            for i, a in enumerate(resolved):
                for b in resolved[i + 1 :]:
                    if not _disjoint(a, b):
                        raise self.error(f"'{hint}' has oneOf branches that can match the same value; use anyOf")
        alts = [self.rule(b, f"{hint}-{i}") for i, b in enumerate(branches)]
        return self.rules.add(hint, " | ".join(alts))

    def _enum(self, schema: dict[str, Any], hint: str) -> str:
        values = [schema["const"]] if "const" in schema else schema["enum"]
        if not isinstance(values, list):
            raise self.error(f"'{hint}' has an enum that is not a list")
        rest = {k: v for k, v in schema.items() if k not in ("const", "enum")}
        kept = [v for v in values if _plain_valid(v, rest)]
        if not kept:
            raise self.error(f"'{hint}' allows no value: no enum/const value matches its other keywords")
        alts = [literal(json.dumps(v, ensure_ascii=False, separators=(",", ":"))) for v in kept]
        return self.rules.add(hint, " | ".join(dict.fromkeys(alts)))

    # --- types ---

    def _null(self, schema: dict[str, Any], hint: str) -> str:
        return self.rules.primitive("null")

    def _boolean(self, schema: dict[str, Any], hint: str) -> str:
        return self.rules.primitive("boolean")

    def _integer(self, schema: dict[str, Any], hint: str) -> str:
        self._no_multiple_of(schema, hint, integer=True)
        lo, lo_x, hi, hi_x = self._bounds(schema, hint)
        if lo is None and hi is None:
            return self.rules.primitive("integer")
        ilo = None if lo is None else (math.floor(lo) + 1 if lo_x else math.ceil(lo))
        ihi = None if hi is None else (math.ceil(hi) - 1 if hi_x else math.floor(hi))
        if ilo is not None and ihi is not None and ilo > ihi:
            raise self.error(f"'{hint}' allows no integer (range {lo}..{hi})")
        return self.rules.add(hint, int_range(ilo, ihi))

    def _number(self, schema: dict[str, Any], hint: str) -> str:
        self._no_multiple_of(schema, hint, integer=False)
        lo, lo_x, hi, hi_x = self._bounds(schema, hint)
        if lo is None and hi is None:
            return self.rules.primitive("number")
        alts = number_range(lo, lo_x, hi, hi_x)
        if not alts:
            self.loosen(
                f"'{hint}' has the range {lo}..{hi}, too narrow for this server to generate (it writes "
                "integers and decimals whose integer part stays inside the range)"
            )
            return self.rules.primitive("number")
        return self.rules.add(hint, " | ".join(alts))

    def _no_multiple_of(self, schema: dict[str, Any], hint: str, *, integer: bool) -> None:
        m = schema.get("multipleOf")
        if m is not None and not (integer and m == 1):
            self.loosen(f"'multipleOf' (at '{hint}') cannot be enforced")

    def _bounds(self, schema: dict[str, Any], hint: str) -> tuple[Fraction | None, bool, Fraction | None, bool]:
        """(low, low exclusive, high, high exclusive) as exact fractions, the tighter bound winning."""

        def num(key: str) -> Fraction | None:
            v = schema.get(key)
            if v is None or isinstance(v, bool):
                return None
            if not isinstance(v, (int, float)) or not math.isfinite(v):
                raise self.error(f"'{key}' (at '{hint}') must be a finite number")
            return Fraction(str(v)) if isinstance(v, float) else Fraction(v)

        lo, lo_x = num("minimum"), schema.get("exclusiveMinimum") is True  # draft 4 form
        hi, hi_x = num("maximum"), schema.get("exclusiveMaximum") is True
        xlo, xhi = num("exclusiveMinimum"), num("exclusiveMaximum")
        if xlo is not None and (lo is None or xlo >= lo):
            lo, lo_x = xlo, True
        if xhi is not None and (hi is None or xhi <= hi):
            hi, hi_x = xhi, True
        if lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_x or hi_x))):
            raise self.error(f"'{hint}' allows no number (range {float(lo)}..{float(hi)})")
        return lo, lo_x, hi, hi_x

    def _string(self, schema: dict[str, Any], hint: str) -> str:
        lo = schema.get("minLength", 0)
        hi = schema.get("maxLength")
        for key, v in (("minLength", lo), ("maxLength", hi)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise self.error(f"'{key}' (at '{hint}') must be a non-negative integer")
        if hi is not None and hi < lo:
            raise self.error(f"'{hint}' has maxLength below minLength")
        quote = literal('"')
        fmt = schema.get("format")
        # Not strict, as llama.cpp: a pattern wins over a format, either over length limits.
        if "pattern" in schema:
            if fmt in _FORMATS:
                self.loosen(f"'{hint}' combines 'format' and 'pattern'")
            if "minLength" in schema or hi is not None:
                self.loosen(f"'{hint}' combines 'pattern' with length limits")
            try:
                body = RegexConverter(self.param, hint).convert(schema["pattern"])
            except SchemaError:
                if self.strict or not _compiles(schema["pattern"]):  # an invalid regex is refused either way
                    raise
                return self.rules.primitive("string")
            return self.rules.add(hint, f"{quote} {body} {quote}")
        if fmt in _FORMATS:
            body, flo, fhi = _FORMATS[fmt]
            if flo < lo or (hi is not None and (fhi is None or fhi > hi)):
                self.loosen(f"'{hint}' combines format '{fmt}' with length limits it cannot guarantee")
            return self.rules.add(f"{hint}-{fmt}", f"{quote} {body} {quote}")
        if lo == 0 and hi is None:
            return self.rules.primitive("string")
        char = self.rules.primitive("char")
        return self.rules.add(hint, f"{quote} {repeat(char, lo, hi, param=self.param)} {quote}")

    def _array(self, schema: dict[str, Any], hint: str) -> str:
        if schema.get("uniqueItems") is True and schema.get("maxItems", 2) > 1:
            self.loosen(f"'uniqueItems' (at '{hint}') cannot be enforced")
        self.rules.primitive("ws")
        lo = schema.get("minItems", 0)
        hi = schema.get("maxItems")
        prefix = schema.get("prefixItems")
        items = schema.get("items", True)
        if isinstance(items, list):  # draft 7 tuple form
            prefix, items = items, schema.get("additionalItems", True)
        if prefix is not None and not isinstance(prefix, list):
            raise self.error(f"'{hint}' has prefixItems that is not a list of schemas")
        if schema.get("unevaluatedItems") is False and "items" not in schema:
            items = False
        prefix = prefix or []
        if items is False:
            hi = len(prefix) if hi is None else min(hi, len(prefix))
        if hi is not None and hi < lo:
            raise self.error(f"'{hint}' allows no array (minItems {lo} > maxItems {hi})")
        elems = [self.rule(p, f"{hint}-{i}") for i, p in enumerate(prefix)]
        rest = self.rule(items, f"{hint}-item") if items is not False else None

        def tail(i: int) -> str:
            """Elements i, i+1, ... each after a comma."""
            if hi is not None and i >= hi:
                return ""
            if i < len(elems):
                seq = f'ws "," ws {elems[i]} {tail(i + 1)}'.strip()
                return f"( {seq} )" + ("?" if i >= lo else "")
            assert rest is not None
            more = self.rules.add(f"{hint}-more", f'ws "," ws {rest}')
            return repeat(more, max(0, lo - i), None if hi is None else hi - i, param=self.param)

        if hi == 0:
            body = '"[" ws "]"'
        else:
            first = elems[0] if elems else rest
            seq = f"{first} {tail(1)}".strip()
            body = f'"[" ws ( {seq} ){"" if lo > 0 else "?"} ws "]"'
        return self.rules.add(hint, body)

    def _object(self, schema: dict[str, Any], hint: str) -> str:
        self.rules.primitive("ws")
        props = schema.get("properties", {})
        required = schema.get("required", [])
        if not isinstance(props, dict) or not isinstance(required, list):
            raise self.error(f"'{hint}' has properties that is not an object or required that is not a list")
        extra = schema.get("additionalProperties", True)
        if schema.get("unevaluatedProperties") is False and "additionalProperties" not in schema:
            extra = False
        names = [n for n in props if props[n] is not False]
        for name in required:
            if name not in props and extra is False:
                raise self.error(f"'{hint}' requires '{name}', which additionalProperties forbids")
            if props.get(name) is False:
                raise self.error(f"'{hint}' requires '{name}', whose schema is false")
        n_min = schema.get("minProperties", 0)
        n_max = schema.get("maxProperties")
        if not names and not required and extra is not False:
            # A free-form map: any keys, values matching additionalProperties. Keys may repeat
            # (the last one wins when parsed), so only an upper bound on their number holds.
            if n_min > 1 or (n_max is not None and n_max < n_min):
                self.loosen(f"'minProperties' (at '{hint}') cannot be enforced for free-form keys")
                n_min = 0
            value = self.rule(extra, f"{hint}-value")
            pair = self.rules.add(f"{hint}-kv", f'{self.rules.primitive("string")} ws ":" ws {value}')
            if n_max == 0:
                return self.rules.add(hint, '"{" ws "}"')
            more = self.rules.add(f"{hint}-more", f'ws "," ws {pair}')
            rest = repeat(more, 0, None if n_max is None else n_max - 1, param=self.param)
            return self.rules.add(hint, f'"{{" ws ( {pair} {rest} ws ){"" if n_min else "?"} "}}"')
        req = list(dict.fromkeys(required))
        opt = [n for n in names if n not in req]
        if n_min > len(req) or (n_max is not None and n_max < len(req) + len(opt)):
            self.loosen(f"'minProperties'/'maxProperties' (at '{hint}') cannot be enforced here")

        def kv(name: str) -> str:
            sub = props.get(name, extra if extra is not True else {})
            value = self.rule(sub, f"{hint}-{name}")
            key = literal(json.dumps(name, ensure_ascii=False))
            return self.rules.add(f"{hint}-{name}-kv", f'{key} ws ":" ws {value}')

        parts = [kv(n) for n in req]
        body = ' ws "," ws '.join(parts)
        opt_rules = [kv(n) for n in opt]
        if opt_rules and parts:
            body += "".join(f' ( ws "," ws {r} )?' for r in opt_rules)
        elif opt_rules:
            # Any ordered subset of the optional properties, the first without a comma.
            names_from: list[str] = [""] * len(opt_rules)
            for i in range(len(opt_rules) - 1, -1, -1):
                later = "".join(f' ( ws "," ws {r} )?' for r in opt_rules[i + 1 :])
                alt = f"{opt_rules[i]}{later}"
                if i + 1 < len(opt_rules):
                    alt += f" | {names_from[i + 1]}"
                names_from[i] = self.rules.add(f"{hint}-from-{i}", alt)
            body = f"{names_from[0]}?"
        return self.rules.add(hint, f'"{{" ws {body} ws "}}"' if body else '"{" ws "}"')


def _implied_type(schema: dict[str, Any]) -> str | None:
    """The type a typeless schema's keywords talk about (None: they constrain nothing)."""
    keys = schema.keys()
    if keys & {"properties", "required", "additionalProperties", "minProperties", "maxProperties"}:
        return "object"
    if keys & {"items", "prefixItems", "minItems", "maxItems", "uniqueItems"}:
        return "array"
    if keys & {"minLength", "maxLength", "pattern", "format"}:
        return "string"
    if keys & {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}:
        return "number"
    return None


def _compiles(pattern: Any) -> bool:
    try:
        re.compile(pattern)
    except (re.error, TypeError):
        return False
    return True


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _same_json(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) and _json_type(a) == _json_type(b)


def _plain_valid(value: Any, schema: dict[str, Any]) -> bool:
    """Whether an enum/const value also passes the simple keywords beside it."""
    t = schema.get("type")
    if t is not None:
        types = t if isinstance(t, list) else [t]
        vt = _json_type(value)
        if vt not in types and not (vt == "integer" and "number" in types):
            return False
    if isinstance(value, str):
        if not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", len(value)):
            return False
        if "pattern" in schema and not re.search(schema["pattern"], value):
            return False
    if _is_number(value):
        checks = (
            ("minimum", operator.ge),
            ("maximum", operator.le),
            ("exclusiveMinimum", operator.gt),
            ("exclusiveMaximum", operator.lt),
        )
        for key, holds in checks:
            bound = schema.get(key)
            if bound is not None and _is_number(bound) and not holds(value, bound):
                return False
    return True


def _value_types(schema: Any) -> set[str] | None:
    """The JSON types a schema can accept, when its keywords say so (None: unknown)."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return {_json_type(schema["const"])}
    if "enum" in schema and isinstance(schema["enum"], list):
        return {_json_type(v) for v in schema["enum"]}
    t = schema.get("type")
    if t is None:
        return None
    types = set(t if isinstance(t, list) else [t])
    return types | {"integer"} if "number" in types else types


def _enum_values(schema: Any) -> list[Any] | None:
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return [schema["const"]]
    values = schema.get("enum")
    return values if isinstance(values, list) else None


def _disjoint(a: Any, b: Any) -> bool:
    """Whether no value can match both schemas (proved from types, consts or a tag property)."""
    ta, tb = _value_types(a), _value_types(b)
    if ta is not None and tb is not None and not ta & tb:
        return True
    va, vb = _enum_values(a), _enum_values(b)
    if va is not None and vb is not None:
        return not any(_same_json(x, y) for x in va for y in vb)
    if isinstance(a, dict) and isinstance(b, dict):
        pa, pb = a.get("properties", {}), b.get("properties", {})
        for name in set(a.get("required", [])) & set(b.get("required", [])):
            ea, eb = _enum_values(pa.get(name)), _enum_values(pb.get(name))
            if ea is not None and eb is not None and not any(_same_json(x, y) for x in ea for y in eb):
                return True
    return False
