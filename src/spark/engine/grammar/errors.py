"""The errors of grammar building: a GBNF text llama.cpp would refuse, a schema we cannot enforce."""

from __future__ import annotations

from spark.errors import InvalidRequest


class GrammarError(ValueError):
    """A GBNF text that llama.cpp would refuse (or misread)."""


class SchemaError(InvalidRequest):
    """A JSON schema that is invalid, or that this server cannot enforce."""
