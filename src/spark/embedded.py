"""`spark.Spark`: the Python API for scripts, running models without a server (docs/python.md).

The same machinery as the server is underneath: a `Scheduler` starts one
runner process per model, a child of the script. Spark owns a private event loop in a background
thread so that scripts can stay synchronous:

    with spark.Spark() as s:
        print(s.chat("smollm2-135m-instruct-q4_1", "What is the capital of France?").text)
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Generator, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

import msgspec

from spark.collect import collect_chat, embedding_result, unfinished
from spark.errors import Cancelled, InvalidRequest, ModelNotFound, from_info
from spark.library import Library
from spark.runners.retries import HoldBack
from spark.runners.scheduler import Scheduler
from spark.settings import Settings, load_settings
from spark.types import (
    MAX_LOGPROBS,
    Answer,
    ChatRequest,
    ChatResult,
    CompletionRequest,
    Detokenize,
    EmbeddingRequest,
    EmbeddingResult,
    Event,
    Failed,
    Message,
    Request,
    SamplingParams,
    TextDelta,
    Tokenize,
)

MessagesLike = str | Sequence[Message | Mapping[str, Any]]


def to_messages(messages: MessagesLike) -> list[Message]:
    """A prompt string or a list of Message / OpenAI-style dicts, as Messages."""
    if isinstance(messages, str):
        return [Message(role="user", content=messages)]
    if not isinstance(messages, Sequence):
        raise InvalidRequest(
            f"messages must be a prompt (str) or a list of messages, not {type(messages).__name__}", param="messages"
        )
    out = []
    for i, m in enumerate(messages):
        if isinstance(m, Message):
            out.append(m)
            continue
        if not isinstance(m, Mapping):
            raise InvalidRequest(
                f"messages[{i}] must be a Message or a dict such as {{'role': 'user', 'content': 'hi'}}, "
                f"not {type(m).__name__}",
                param=f"messages[{i}]",
            )
        try:
            out.append(msgspec.convert(dict(m), Message))
        except msgspec.ValidationError as e:
            raise InvalidRequest(f"messages[{i}]: {e}", param=f"messages[{i}]") from None
    return out


def to_sampling(options: Mapping[str, Any]) -> SamplingParams:
    """Keyword sampling options (temperature=..., max_tokens=..., stop=...) as SamplingParams."""
    unknown = set(options) - set(SamplingParams.__struct_fields__)
    if unknown:
        name = sorted(unknown)[0]
        raise InvalidRequest(f"unknown sampling option '{name}'", param=name)
    seed = options.get("seed")
    if isinstance(seed, int) and not -(2**63) <= seed < 2**64:  # as the HTTP APIs take it
        raise InvalidRequest(f"seed must be a 64-bit number, not {seed}", param="seed")
    stop = options.get("stop")
    if isinstance(stop, str):
        options = {**options, "stop": [stop]}
    try:
        return msgspec.convert(dict(options), SamplingParams)
    except msgspec.ValidationError as e:  # e.g. "Expected `float`, got `str` - at `$.temperature`"
        param = str(e).rpartition("at `$.")[2].rstrip("`").split("[")[0] or None
        raise InvalidRequest(f"sampling options: {e}", param=param) from None


def _here(e: ModelNotFound) -> ModelNotFound:
    """`e` worded for a script: there is no server here to ask GET /v1/models of."""
    e.message = f"The model '{e.model}' is not installed (see `spark ls`, or Spark().library.list())."
    return e


def _checked_logprobs(n: int | None) -> int | None:
    if n is not None and not 0 <= n <= MAX_LOGPROBS:
        raise InvalidRequest(f"logprobs must be from 0 to {MAX_LOGPROBS}", param="logprobs")
    return n


class Spark:
    """Runs models embedded in this process tree. Use as a context manager, or call close().

    One Spark may be used by several threads at once: each call waits for its own answer."""

    def __init__(self, settings: Settings | None = None, **overrides: Any) -> None:
        """`settings`, else the environment's and config.toml's with `overrides` (settings by name,
        e.g. threads=4) over them; `SettingsError` for an unknown name or a bad value."""
        self.settings = settings if settings is not None else load_settings(**overrides)
        self.library = Library(self.settings)
        self._loop = asyncio.new_event_loop()
        self._stopped = False  # the loop is stopped (by close): nothing submitted would ever run
        self._thread = threading.Thread(target=self._loop.run_forever, name="spark-loop", daemon=True)
        self._thread.start()
        self.scheduler: Scheduler = self._call(self._make_scheduler())
        self._closed = False

    async def _make_scheduler(self) -> Scheduler:
        return Scheduler(self.settings, self.library)

    def _call(self, coro: Any) -> Any:
        try:
            return self._submit(coro).result()
        except ModelNotFound as e:
            raise _here(e) from None

    def _submit(self, coro: Any) -> Future[Any]:
        """`coro` run on the background loop; `RuntimeError` once this Spark is closed (its loop is gone)."""
        if self._stopped:
            coro.close()
            raise RuntimeError("This Spark is closed: make another one (`with spark.Spark() as s:`).")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    # --- generation -----------------------------------------------------------
    def events(self, request: Request, *, whole: bool = False) -> Generator[Event, None, None]:
        """Every event of one request, as it happens. Closing the iterator cancels the request; a
        failure is raised as its `SparkError`, never yielded as a `Failed` event.

        `whole`: the caller uses the answer only once it is complete, so a runner crash retries
        it even after it made output; its output then comes only at its end, the final attempt's."""
        out: queue.Queue[Event | BaseException | None] = queue.Queue()
        hold = HoldBack() if whole else None

        async def pump() -> None:
            try:
                on_retry = hold.retried if hold is not None else None
                async for event in self.scheduler.stream(request, whole=whole, on_retry=on_retry):
                    for passed in hold.passed(event) if hold is not None else (event,):
                        out.put(passed)
            except BaseException as e:  # delivered to the caller's thread, re-raised there
                out.put(e)
            finally:
                out.put(None)

        task: Future[None] = self._submit(pump())
        try:
            while (item := out.get()) is not None:
                if isinstance(item, asyncio.CancelledError):
                    raise Cancelled("the request was cancelled (Spark is shutting down)")
                if isinstance(item, BaseException):
                    raise _here(item) if isinstance(item, ModelNotFound) else item
                if isinstance(item, Failed):
                    error = from_info(item.error)
                    raise _here(error) if isinstance(error, ModelNotFound) else error
                yield item
        finally:
            if not task.done():
                task.cancel()  # cancels the request in its runner

    def stream(self, model: str, messages: MessagesLike, **sampling: Any) -> Iterator[str]:
        """Chat, yielding the answer's text as it is generated (options as for `chat`); closing the
        iterator early cancels the request."""
        request = ChatRequest(model=model, messages=to_messages(messages), sampling=to_sampling(sampling), stream=True)
        for event in self.events(request):
            if isinstance(event, TextDelta):
                yield event.text

    def chat(
        self,
        model: str,
        messages: MessagesLike,
        *,
        logprobs: int | None = None,
        prediction: str | None = None,
        **sampling: Any,
    ) -> ChatResult:
        """One chat turn: `messages` is a prompt string or a list of messages (dicts with role and
        content, or `Message`); `sampling` options are SamplingParams' fields (temperature=0, ...),
        those not given the model's own defaults.

        `logprobs` (0 to 20): the result's `logprobs` holds each answer token's log probability
        with that many likeliest alternatives. `prediction`: text the answer is expected to repeat
        mostly (the code being edited), drafted from; the usage counts how much of it was kept."""
        request = ChatRequest(
            model=model,
            messages=to_messages(messages),
            sampling=to_sampling(sampling),
            logprobs=_checked_logprobs(logprobs),
            prediction=prediction or None,
        )
        return collect_chat(self.events(request, whole=True))

    def complete(
        self,
        model: str,
        prompt: str | list[int],
        *,
        suffix: str | None = None,
        logprobs: int | None = None,
        echo: bool = False,
        **sampling: Any,
    ) -> ChatResult:
        """Raw text completion, without the chat template (max_tokens defaults to 16); `prompt` is
        text or the model's token ids. With `suffix`, fill in the middle: the answer goes between
        `prompt` and `suffix` (a code model with FIM tokens). `logprobs` as for `chat`; with `echo`
        the text (and the log probabilities) begin with the prompt's."""
        sampling.setdefault("max_tokens", 16)
        request = CompletionRequest(
            model=model,
            prompt=prompt,
            sampling=to_sampling(sampling),
            logprobs=_checked_logprobs(logprobs),
            suffix=suffix,
            echo=echo,
        )
        return collect_chat(self.events(request, whole=True))

    def embed(self, model: str, input: str | Sequence[str], *, dimensions: int | None = None) -> EmbeddingResult:
        """Embedding vectors of unit length, one per input string (from an embedding model, or a chat
        model's hidden states pooled by mean); `dimensions` keeps the first that many values of each."""
        texts: list[str | list[int]] = [input] if isinstance(input, str) else list(input)
        return self._embeddings(EmbeddingRequest(model=model, input=texts, dimensions=dimensions))

    def rerank(self, model: str, query: str, documents: Sequence[str]) -> list[float]:
        """Each document's relevance to `query`, in the documents' order, by a reranking model (its raw
        score: higher is more relevant)."""
        result = self._embeddings(EmbeddingRequest(model=model, input=list(documents), query=query))
        return [scores[0] for scores in result.vectors]

    def _embeddings(self, request: EmbeddingRequest) -> EmbeddingResult:
        for event in self.events(request, whole=True):
            if (result := embedding_result(event)) is not None:
                return result
        raise unfinished()

    # --- tokens -----------------------------------------------------------------
    def tokenize(self, model: str, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """The tokens of `text` on `model` (`add_special`: with BOS where the model adds one;
        `parse_special`: special tokens written as text are read as those tokens)."""
        question = Tokenize(model=model, content=text, add_special=add_special, parse_special=parse_special)
        answer: Answer = self._call(self.scheduler.ask(question))
        return answer.tokens

    def detokenize(self, model: str, tokens: Sequence[int]) -> str:
        """The text of `tokens` on `model`."""
        answer: Answer = self._call(self.scheduler.ask(Detokenize(model=model, tokens=list(tokens))))
        return answer.text

    # --- lifecycle --------------------------------------------------------------
    def close(self) -> None:
        """Stop every runner process and the background loop."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self.scheduler.close())
        finally:
            self._stopped = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def __enter__(self) -> Spark:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
