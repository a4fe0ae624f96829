"""OpenAI's Responses API (`POST /v1/responses`): bodies -> spark.types, events -> JSON / SSE.

The Responses API is OpenAI's newer shape of a chat turn: `input` is a string
or a list of items (messages, earlier function calls and their outputs,
earlier reasoning), `instructions` is the system message, tools are flat
function definitions, and the answer is a list of output items (reasoning,
message, function calls). A request may continue a stored response
(`previous_response_id`): the server puts the stored conversation before its
input, and the request is then read like any other.

`requests` reads bodies into `spark.types.ChatRequest` (and what the answer
echoes); `objects` writes the response object and the stream's events;
`stored` continues a stored conversation and writes the stored-response routes' bodies.
"""

from spark.api.openai.responses_api.objects import ResponseStream, input_tokens_body, response_body
from spark.api.openai.responses_api.requests import Echo, ResponsesCall, parse_responses

__all__ = ["Echo", "ResponseStream", "ResponsesCall", "input_tokens_body", "parse_responses", "response_body"]
