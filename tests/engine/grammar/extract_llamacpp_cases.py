"""Extract llama.cpp's JSON-schema-to-grammar test cases into llamacpp_schema_cases.json.

Run once by hand against a llama.cpp source tree (the one vendored in the
llama-cpp-python sdist); the tests only read the JSON file it writes:

    python tests/engine/grammar/extract_llamacpp_cases.py \\
        LLAMA_CPP/tests/test-json-schema-to-grammar.cpp LLAMA_CPP_COMMIT

The cases are the `test({...})` calls of `test_all` (status, name, schema,
expected grammar), plus the recursive document checked in `main()`.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("llamacpp_schema_cases.json")
LICENSE = (
    "MIT License. Copyright (c) 2023-2026 The ggml authors. Permission is hereby granted, free of charge, to any "
    'person obtaining a copy of this software and associated documentation files (the "Software"), to deal in the '
    "Software without restriction, including without limitation the rights to use, copy, modify, merge, publish, "
    "distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is "
    "furnished to do so, subject to the following conditions: The above copyright notice and this permission "
    'notice shall be included in all copies or substantial portions of the Software. THE SOFTWARE IS PROVIDED "AS '
    'IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF '
    "MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR "
    "COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT "
    "OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE "
    "SOFTWARE."
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"'}


def string_literal(src: str, i: int) -> tuple[str, int]:
    """The C++ string literal(s) at `src[i:]` (raw `R\"\"\"(...)\"\"\"` or quoted, adjacent ones joined)."""
    out: list[str] = []
    while True:
        while src[i] in " \t\r\n":
            i += 1
        if src.startswith('R"""(', i):
            end = src.index(')"""', i)
            out.append(src[i + 5 : end])
            i = end + 4
        elif src[i] == '"':
            i += 1
            while src[i] != '"':
                if src[i] == "\\":
                    out.append(_ESCAPES[src[i + 1]])
                    i += 2
                else:
                    out.append(src[i])
                    i += 1
            i += 1
        else:
            return "".join(out), i


def dedent(grammar: str) -> str:
    """The grammar without the indentation and blank lines of the C++ source (as the test's `trim`)."""
    lines = [line.strip() for line in grammar.splitlines() if line.strip()]
    return "\n".join(lines) + "\n" if lines else ""


def extract(src: str) -> list[dict[str, Any]]:
    body = src[src.index("static void test_all") : src.index("int main()")]
    cases = []
    for m in re.finditer(r"test\(\{\s*(SUCCESS|FAILURE)\s*,", body):
        name, i = string_literal(body, m.end())
        schema, i = string_literal(body, i + 1)
        grammar, i = string_literal(body, i + 1)
        if not re.match(r"\s*\}\);", body[i:]):
            raise ValueError(f"unexpected text after case {name!r}: {body[i : i + 60]!r}")
        cases.append(
            {"name": name, "status": m.group(1).lower(), "schema": json.loads(schema), "grammar": dedent(grammar)}
        )
    recursive = re.search(r'auto schema = common_json::parse\(R"""\((.*?)\)"""\);', src, re.S)
    if recursive is None:
        raise ValueError("the recursive document of main() is missing")
    cases.append(
        {
            "name": "parsed document (recursive $ref)",
            "status": "success",
            "schema": json.loads(recursive.group(1)),
            "grammar": "",
        }
    )
    names = [c["name"] for c in cases]
    if len(set(names)) != len(names):
        raise ValueError("case names are not unique")
    return cases


def main(source: str, commit: str) -> None:
    doc = {
        "origin": (
            "llama.cpp tests/test-json-schema-to-grammar.cpp: the test() cases of test_all and the recursive "
            "document checked in main(), from the llama.cpp vendored in the llama-cpp-python 0.3.36 sdist "
            f"(llama.cpp commit {commit}), extracted by extract_llamacpp_cases.py beside this file. Schemas are "
            "kept as JSON; expected grammars lose their indentation, as the C++ test's trim() does."
        ),
        "license": LICENSE,
        "cases": extract(Path(source).read_text()),
    }
    OUT.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
