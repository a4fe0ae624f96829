"""OpenAI's Responses API (`POST /v1/responses`): bodies -> spark.types, events -> JSON / SSE.

The Responses API is OpenAI's newer shape of a chat turn: `input` is a string
or a list of items (messages, earlier function calls and their outputs,
earlier reasoning), `instructions` is the system message, tools are flat
function definitions (or namespaces of them), and the answer is a list of output items (reasoning,
message, function calls). A request may continue a stored response
(`previous_response_id`): the server puts the stored conversation before its
input, and the request is then read like any other.

`requests` reads bodies into `spark.types.ChatRequest` (and what the answer
echoes), `tools` their tools; `objects` writes the response object and the stream's events;
`POST /v1/responses/compact` sums a conversation up into one `compaction` item
(`parse_compact`, `compacted_body`), which a later request's input reads back;
`stored` continues a stored conversation and writes the stored-response routes' bodies.
"""

from spark.api.openai.responses_api.objects import ResponseStream, compacted_body, input_tokens_body, response_body
from spark.api.openai.responses_api.requests import (
    CompactCall,
    Echo,
    ResponsesCall,
    parse_compact,
    parse_responses,
    used_sampling,
)

__all__ = [
    "CompactCall",
    "Echo",
    "ResponseStream",
    "ResponsesCall",
    "compacted_body",
    "input_tokens_body",
    "parse_compact",
    "parse_responses",
    "response_body",
    "used_sampling",
]
