"""Pure translation between the public wire APIs (OpenAI, Anthropic) and `spark.types`.

No I/O and no models here: the server decodes bodies with these modules, runs
the canonical request, and encodes the events it gets back.
"""
