"""The Responses API's `truncation: "auto"` and Ollama's chat (`truncate`, on unless a body turns it
off): a conversation too long for the model's context loses its oldest turns, as OpenAI drops
items from the beginning of a conversation and Ollama its oldest messages.

What stays is the system (and developer) messages that open it and the turns from
a user message on, the fewest turns dropped that leave the answer room: a call
and its result are never parted. Which cut fits is found by counting the prompt
on the model (a binary search over the user messages), after the request failed
with `ContextLengthExceeded`, so a request that fits pays nothing.
"""

from __future__ import annotations

import msgspec

from spark.errors import ContextLengthExceeded
from spark.server.generation import count_tokens
from spark.server.recorder import RequestRecorder
from spark.server.state import ServerState
from spark.types import ChatRequest

_HEAD_ROLES = ("system", "developer")


async def fitted(
    state: ServerState, request: ChatRequest, error: ContextLengthExceeded, recorder: RequestRecorder | None
) -> ChatRequest:
    """`request` with the fewest oldest turns dropped that leave its prompt within the context
    `error` names, with room for the answer; `error` itself when not even the last turn fits."""
    messages = request.messages
    head = 0
    while head < len(messages) and messages[head].role in _HEAD_ROLES:
        head += 1
    cuts = [i for i in range(head + 1, len(messages)) if messages[i].role == "user"]
    room = error.n_ctx - min(request.sampling.max_tokens or error.n_ctx // 8, error.n_ctx // 2)
    best: ChatRequest | None = None
    low, high = 0, len(cuts) - 1
    while low <= high:  # more turns dropped, fewer tokens: the first cut that fits
        middle = (low + high) // 2
        candidate = msgspec.structs.replace(request, messages=[*messages[:head], *messages[cuts[middle] :]])
        if await count_tokens(state, candidate) <= room:
            best, high = candidate, middle - 1
        else:
            low = middle + 1
    if best is None:
        raise error
    if recorder is not None:
        recorder.truncated(len(messages) - len(best.messages), error)
    return best
