"""OpenAI's Responses API (`POST /v1/responses`): bodies -> spark.types, events -> JSON / SSE.

The Responses API is OpenAI's newer shape of a chat turn: `input` is a string
or a list of items (messages, earlier function calls and their outputs,
earlier reasoning), `instructions` is the system message, tools are flat
function definitions, and the answer is a list of output items (reasoning,
message, function calls). Spark serves it stateless, as Ollama and
llama-server do: the client sends the whole conversation each time, so
`previous_response_id` and stored conversations are refused with a 400 that
says so, and nothing is stored (`store` reads back false).

`requests` reads bodies into `spark.types.ChatRequest` (and what the answer
echoes); `objects` writes the response object and the stream's events.
"""

from spark.api.openai.responses_api.objects import ResponseStream, input_tokens_body, response_body
from spark.api.openai.responses_api.requests import Echo, ResponsesCall, parse_responses

__all__ = ["Echo", "ResponseStream", "ResponsesCall", "input_tokens_body", "parse_responses", "response_body"]
