"""Preparing requests on the caller's thread: chat template, tokens, limits and output plan.

`Preparer.prepare` turns a request into a job the decode loop can run at
once, or raises the typed error (`InvalidRequest`, `ContextLengthExceeded`)
before anything is queued.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from spark.engine import embeddings, harmony
from spark.engine.adapters import request_scales
from spark.engine.native import Model
from spark.engine.output import OutputPlan, completion_plan, plan_output, tools_enabled
from spark.engine.reasoning import think_syntax
from spark.engine.sampling import resolve
from spark.engine.slots import Scales
from spark.engine.template import FALLBACK_TURN_END, ChatTemplate
from spark.engine.toolcalls import calls_as_text, describe_tools, tool_syntax
from spark.engine.vision import IMAGE_TOKEN, Projector, PromptMedia
from spark.errors import ContextLengthExceeded, InvalidRequest
from spark.types import (
    Answer,
    ChatRequest,
    CompletionRequest,
    Detokenize,
    EmbeddingRequest,
    Event,
    GenerationRequest,
    ImagePart,
    LoadOptions,
    Message,
    Question,
    RenderPrompt,
    Request,
    SamplingParams,
    Tokenize,
)

Emit = Callable[[Event], None]
_HARMONY_EFFORTS = {"minimal": "low", "xhigh": "high", "max": "high"}


@dataclass(slots=True, eq=False)
class GenerationJob:
    """A chat or completion request waiting for a slot."""

    request_id: str
    request: GenerationRequest
    emit: Emit
    prompt: list[int]
    params: SamplingParams
    plan: OutputPlan
    media: PromptMedia | None  # the prompt's images, if it has any
    echo: tuple[str, int] | None = None  # echo: the prompt's text, where its tokens start (after an added BOS)
    prediction: list[int] | None = None  # the tokens of a chat's predicted answer
    lora: Scales | None = None  # the request's own LoRA scales (None: as attached)
    turn_ends: tuple[str, ...] = ()  # stop strings the template's turn end added (not the client's)

    def close(self) -> None:
        """Free the prompt's images, for a job that ends before it runs."""
        if self.media is not None:
            self.media.close()


@dataclass(slots=True, eq=False)
class EmbeddingJob:
    """An embedding request waiting for its turn."""

    request_id: str
    request: EmbeddingRequest
    emit: Emit
    inputs: list[list[int]]  # tokens of each input text

    def close(self) -> None:
        """Nothing to free (`GenerationJob.close`'s counterpart)."""


Job = GenerationJob | EmbeddingJob


class Preparer:
    """Prepares the requests of one loaded model (its template, tokens, context per slot)."""

    def __init__(self, model: Model, options: LoadOptions, *, n_ctx: int, projector: Projector | None) -> None:
        self._model = model
        self._options = options
        self._n_ctx = n_ctx
        self._embedding = options.embedding
        self.ranks = options.embedding and embeddings.ranks(model)  # a reranker: scores, not vectors
        self._rerank_template = model.chat_template("rerank") if self.ranks else None
        self._projector = projector
        self.template = ChatTemplate(
            model.chat_template(),
            bos_token=model.token_text(model.bos),
            eos_token=model.token_text(model.eos),
        )
        self._bos_text = model.token_text(model.bos)
        source = None if self.template.is_fallback else self.template.source
        self.tools = tool_syntax(source, lambda: self.template.call_shape)
        self.harmony = self.tools.family == "harmony"
        self.think = harmony.THINK if self.harmony else think_syntax(source)
        # ChatML's end in a vocabulary whose end token it is not (a base model with no template of its
        # own) is text: without a stop string the answer would write the next turns until max_tokens
        ends_turn = model.tokenize(FALLBACK_TURN_END, add_special=False, parse_special=True)
        fallback_stops = self.template.is_fallback and not (len(ends_turn) == 1 and model.is_eog(ends_turn[0]))
        self._turn_stops = [FALLBACK_TURN_END] if fallback_stops else []

    def marker_pieces(self) -> dict[int, bytes]:
        """The text of each marker the output parsers look for that is a control token here: llama.cpp
        renders those as nothing, so the engine renders them from their text instead."""
        model, out = self._model, {}
        for marker in [*self.tools.markers, *(self.think.markers if self.think else ())]:
            ids = model.tokenize(marker, add_special=False, parse_special=True)
            if len(ids) == 1 and not model.piece(ids[0]):
                out[ids[0]] = marker.encode()
        return out

    def _too_long(self, n_prompt: int, param: str, request: Request | None = None) -> ContextLengthExceeded:
        return ContextLengthExceeded(
            n_prompt, self._n_ctx, param, trained=self._model.n_ctx_train, tools=self._tool_cost(request)
        )

    def _tool_cost(self, request: Request | None) -> tuple[int, int]:
        """How many tools a chat defines and how many prompt tokens their definitions take (rendered
        once more without them: only for a prompt too long, to say where its length comes from)."""
        if not (isinstance(request, ChatRequest) and request.tools and tools_enabled(request)):
            return 0, 0

        def count(chat: ChatRequest) -> int:
            return len(self._model.tokenize(self._render(chat)[0], add_special=False, parse_special=True))

        bare = msgspec.structs.replace(request, tools=None, tool_choice=None)
        return len(request.tools), max(0, count(request) - count(bare))

    def prompt(self, request: ChatRequest | CompletionRequest) -> tuple[list[int], PromptMedia | None, str]:
        """The prompt's tokens, its images (if any) and its text."""
        if self._embedding:
            kind = "a reranking model (POST /v1/rerank)" if self.ranks else "an embedding model"
            raise InvalidRequest(f"{self._options.model_id} is {kind}; it cannot generate text", param="model")
        images: list[ImagePart] = []
        if isinstance(request, ChatRequest):
            text, images = self._render(request)
            param = "messages"
        elif isinstance(request.prompt, list):
            if request.suffix is not None:
                raise InvalidRequest("'suffix' needs a text prompt, not token ids", param="suffix")
            tokens = self.checked_tokens(request.prompt, "prompt")
            return tokens, None, b"".join(map(self._model.piece, tokens)).decode("utf-8", "replace")
        elif request.suffix is not None:
            if request.echo:
                raise InvalidRequest("'echo' cannot go with 'suffix': the answer goes between two texts", param="echo")
            return self._infill(request), None, request.prompt
        else:
            text = request.prompt
            param = "prompt"
        model = self._model
        # Templates often write the BOS text themselves: never add a second one.
        add_bos = model.add_bos and model.bos >= 0 and not (self._bos_text and text.startswith(self._bos_text))
        if images:
            assert self._projector is not None
            media = self._projector.tokenize(text, images, add_special=add_bos)
            if media.tokens[-1] == IMAGE_TOKEN:
                media.close()
                raise InvalidRequest("the chat template put no text after the last image", param="messages")
            return media.tokens, media, text
        tokens = model.tokenize(text, add_special=False, parse_special=True)
        if add_bos:
            tokens.insert(0, model.bos)
        if not tokens:
            if model.bos < 0:
                raise InvalidRequest("the prompt is empty", param=param)
            tokens = [model.bos]
        return tokens, None, text

    def checked_tokens(self, tokens: list[int], param: str) -> list[int]:
        """Token ids a client sent, used as given once each is known to be in the vocabulary (an id
        past it would read past llama.cpp's tables)."""
        if not tokens:
            raise InvalidRequest(f"'{param}' holds no tokens", param=param)
        n_vocab = self._model.n_vocab
        for i, token in enumerate(tokens):
            if not 0 <= token < n_vocab:
                raise InvalidRequest(
                    f"'{param}' holds token id {token} (at {i}), outside this model's vocabulary of {n_vocab}",
                    param=param,
                )
        return tokens

    def _infill(self, request: CompletionRequest) -> list[int]:
        """Fill in the middle, as llama-server's /infill: the prefix and the suffix after the model's
        FIM tokens (prefix-suffix-middle order), the user's text never read as special tokens. Other
        files' chunks come first, in the repository form where the model has its tokens; the oldest
        are left out when they do not fit beside the answer's room."""
        model = self._model
        if model.fim is None:
            raise InvalidRequest(
                f"{self._options.model_id} has no fill-in-the-middle tokens: filling in the middle needs a "
                "code model trained for it (e.g. Qwen2.5-Coder, StarCoder2, CodeLlama)",
                param="suffix",
            )
        assert isinstance(request.prompt, str) and request.suffix is not None

        def text(s: str) -> list[int]:
            return model.tokenize(s, add_special=False, parse_special=False)

        pre, suf, mid = model.fim
        bos = [model.bos] if model.add_bos and model.bos >= 0 else []
        middle = [pre, *text(request.prompt), suf, *text(request.suffix), mid]
        if not request.files:
            return bos + middle
        # Qwen2.5-Coder's repository form: <|repo_name|>name, then <|file_sep|>path and text per file
        # and for the current one; a model without those tokens gets the chunks between plain markers.
        header = [model.fim_repo, *text("myproject\n")] if model.fim_repo is not None else []
        current = [model.fim_file, *text("filename\n")] if model.fim_file is not None else []
        chunks = [
            [model.fim_file, *text(f"{chunk.filename}\n"), *text(chunk.text)]
            if model.fim_file is not None
            else text(f"\n\n--- snippet ---\n\n{chunk.text}")
            for chunk in request.files
        ]
        answer = request.sampling.max_tokens if request.sampling.max_tokens is not None else self._n_ctx // 4
        room = self._n_ctx - len(bos) - len(header) - len(current) - len(middle) - answer
        kept: list[list[int]] = []
        for chunk in reversed(chunks):  # the newest chunks are last: keep those
            if len(chunk) > room:
                break
            kept.insert(0, chunk)
            room -= len(chunk)
        return bos + header + [t for chunk in kept for t in chunk] + current + middle

    def _render(self, request: ChatRequest) -> tuple[str, list[ImagePart]]:
        """The chat's prompt text, and its image parts in order."""
        if not request.messages:
            raise InvalidRequest("messages must not be empty", param="messages")
        images = [
            p for m in request.messages if isinstance(m.content, list) for p in m.content if isinstance(p, ImagePart)
        ]
        if images and self._projector is None:
            raise InvalidRequest(
                f"model {self._options.model_id} cannot read images (no vision projector attached)",
                param="messages",
            )
        messages, tools = request.messages, request.tools if tools_enabled(request) else None
        prefill = _prefill(messages)
        if prefill is not None:
            messages = messages[:-1]
        if not self.tools.renders_tools:
            messages = (
                describe_tools(messages, tools, self._options.system_prompt) if tools else calls_as_text(messages)
            )
            tools = None
        elif not self.template.renders_calls:
            messages = calls_as_text(messages, self.tools.family)
        variables: dict[str, object] = {}
        if request.reasoning is not None:
            variables["enable_thinking"] = request.reasoning.enabled
            effort: str | None = request.reasoning.effort
            if self.harmony:  # gpt-oss always reasons, with one of three efforts
                effort = _HARMONY_EFFORTS.get(effort or "", effort) if request.reasoning.enabled else "low"
            if effort is not None:
                variables["reasoning_effort"] = effort
        if prefill is not None:
            # the answer is already under way: no thinking block opens before it (Anthropic refuses a
            # prefill with thinking; llama-server too)
            variables["enable_thinking"] = False
        text = self.template.render(
            messages,
            tools=tools,
            system_prompt=self._options.system_prompt,
            image_marker=self._projector.marker if self._projector else "",
            variables=variables,
        )
        if self.harmony and prefill is not None:
            return text + harmony.FINAL + prefill, images  # the answer's message, under way
        thinking_off = prefill is not None or (request.reasoning is not None and not request.reasoning.enabled)
        if thinking_off and not self.harmony and self.think is not None and self.think.opened_by(text):
            # a template that opens the thinking block whatever it is told (DeepSeek-R1's): closed empty,
            # so that the answer (or the prefill, its start) is not thinking, as llama-server does
            text += f"\n{self.think.close}\n\n"
        return text + (prefill or ""), images

    def answer(self, question: Question) -> Answer:
        """The answer to a question about tokens: a request's prompt token count, a text's tokens (each
        with its bytes, a special token as its text), tokens' text, or the prompt text a chat renders to.
        Raises `InvalidRequest` for an embedding request or a token outside the vocabulary."""
        model = self._model
        if isinstance(question, Tokenize):
            ids = model.tokenize(
                question.content, add_special=question.add_special, parse_special=question.parse_special
            )
            return Answer(tokens=ids, pieces=[self._shown(t) for t in ids])
        if isinstance(question, Detokenize):
            ids = self.checked_tokens(question.tokens, "tokens") if question.tokens else []
            return Answer(text=b"".join(map(self._shown, ids)).decode("utf-8", "replace"))
        if isinstance(question, EmbeddingRequest):
            raise InvalidRequest("Token counts are for chat and completion requests, not embeddings.")
        tokens, media, text = self.prompt(question.chat if isinstance(question, RenderPrompt) else question)
        if media is not None:
            media.close()
        return Answer(text=text) if isinstance(question, RenderPrompt) else Answer(n_tokens=len(tokens))

    def _shown(self, token: int) -> bytes:
        """A token as llama-server's /tokenize and /detokenize show it: control tokens as their text."""
        return self._model.piece(token) or self._model.token_text(token).encode()

    def _prediction(self, request: GenerationRequest) -> list[int] | None:
        """The tokens of a chat's predicted answer (None without one)."""
        if not isinstance(request, ChatRequest) or not request.prediction:
            return None
        tokens = self._model.tokenize(request.prediction, add_special=False, parse_special=False)
        if len(tokens) > self._n_ctx:  # no answer can hold it: surely not what the client meant
            raise InvalidRequest(
                f"prediction has {len(tokens)} tokens; an answer holds at most {self._n_ctx} in this model's context",
                param="prediction",
            )
        return tokens

    def prepare(self, request_id: str, request: Request, emit: Emit) -> Job:
        """The job for `request`; raises a `SparkError` for a request that cannot run here."""
        if isinstance(request, EmbeddingRequest):
            return EmbeddingJob(request_id, request, emit, self._embedding_inputs(request))
        tokens, media, text = self.prompt(request)
        echoed = None
        if isinstance(request, CompletionRequest) and request.echo:
            added_bos = isinstance(request.prompt, str) and tokens[0] == self._model.bos
            echoed = text, int(added_bos and not (self._bos_text and text.startswith(self._bos_text)))
        try:
            if len(tokens) > self._n_ctx:
                param = "prompt" if isinstance(request, CompletionRequest) else "messages"
                raise self._too_long(len(tokens), param, request)
            # a request may ask for no answer at all (max_tokens 0): an echo's point is the prompt's
            # log probabilities; llama-server's `n_predict: 0` and Anthropic's `max_tokens: 0` cache
            # the prompt for the next request (each API's own bounds say which may)
            params = resolve(request.sampling, self._options.sampling, self._model.n_vocab, self._n_ctx)
            own = params.stop or ()
            chat = isinstance(request, ChatRequest)
            turn_ends = tuple(s for s in self._turn_stops if s not in own) if chat else ()
            if turn_ends:
                params = msgspec.structs.replace(params, stop=[*own, *turn_ends])
            plan = (
                plan_output(request, text, self.think, self.tools)
                if isinstance(request, ChatRequest)
                else completion_plan(request)
            )
            prediction = self._prediction(request)
            lora = request_scales(self._options.lora, request.lora)
        except BaseException:
            if media is not None:
                media.close()
            raise
        return GenerationJob(
            request_id, request, emit, tokens, params, plan, media, echoed, prediction, lora, turn_ends=turn_ends
        )

    def _embedding_inputs(self, request: EmbeddingRequest) -> list[list[int]]:
        if not (self._embedding or request.generative):
            raise InvalidRequest(
                f"{self._options.model_id} generates text; /v1/embeddings takes an embedding model "
                "(`embedding` in GET /v1/models' details). Ollama's /ollama/api/embed and Spark's Python API "
                "also embed with a chat model, its hidden states pooled by mean.",
                param="model",
            )
        if request.query is not None or self.ranks:
            return self._rerank_inputs(request)
        if not request.input:
            raise InvalidRequest("input must hold at least one text", param="input")
        n_embd = self._model.n_embd_out
        if request.dimensions is not None and not 1 <= request.dimensions <= n_embd:
            raise InvalidRequest(
                f"dimensions must be between 1 and {n_embd} for this model, not {request.dimensions}",
                param="dimensions",
            )
        model = self._model
        inputs = []
        for i, item in enumerate(request.input):
            param = "input" if len(request.input) == 1 else f"input[{i}]"
            if isinstance(item, list):
                tokens = self.checked_tokens(item, param)
            else:
                tokens = model.tokenize(item, add_special=True, parse_special=False)
            if not tokens:
                if model.bos < 0:
                    raise InvalidRequest("input holds an empty text", param="input")
                tokens = [model.bos]
            if len(tokens) > self._n_ctx:
                if not request.truncate:
                    raise self._too_long(len(tokens), param)
                # the end is cut, but a closing control token (BERT's SEP, an EOS) the model pools by stays
                end = tokens[-1:] if model.is_control(tokens[-1]) else []
                tokens = tokens[: self._n_ctx - len(end)] + end
            inputs.append(tokens)
        return inputs

    def _rerank_inputs(self, request: EmbeddingRequest) -> list[list[int]]:
        """Each document read with the query, as the reranker scores it."""
        model_id = self._options.model_id
        if request.query is None:
            raise InvalidRequest(
                f"{model_id} is a reranking model: it scores documents against a query (POST /v1/rerank), "
                "and gives no embeddings",
                param="model",
            )
        if not self.ranks:
            raise InvalidRequest(
                f"{model_id} is not a reranking model (one whose GGUF pools by rank, e.g. bge-reranker)",
                param="model",
            )
        inputs = []
        for i, document in enumerate(request.input):
            param = f"documents[{i}]"
            if not isinstance(document, str):
                raise InvalidRequest("a document must be a text", param=param)
            tokens = embeddings.rerank_pair(self._model, self._rerank_template, request.query, document)
            if len(tokens) > self._n_ctx:
                raise self._too_long(len(tokens), param)
            inputs.append(tokens)
        return inputs


def _prefill(messages: list[Message]) -> str | None:
    """The start of the answer when the conversation ends with it: a last assistant message without tool
    calls, which the answer continues (Anthropic's prefill; llama-server and Ollama do the same on
    OpenAI's route). The template then renders the turns before it and opens the assistant's turn."""
    last = messages[-1]
    if last.role != "assistant" or last.tool_calls or len(messages) < 2:
        return None
    return last.text()
