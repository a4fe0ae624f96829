"""Typed domain errors.

Every error Spark raises on purpose is a `SparkError`. Each class carries the
HTTP status it maps to and a stable `code`; the API translators (`spark.api`)
turn the code into OpenAI's or Anthropic's error type. Errors cross the runner
socket as `ErrorInfo` and are rebuilt on the other side with `from_info`, so
nobody ever has to classify an error by its message.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec


class ErrorInfo(msgspec.Struct, frozen=True):
    """Serializable form of a `SparkError` (runner socket, admin API, log)."""

    code: str
    message: str
    param: str | None = None
    data: dict[str, Any] = {}


_BY_CODE: dict[str, type[SparkError]] = {}  # filled as each class is defined


class SparkError(Exception):
    """Base class: a message meant for the user, an HTTP status and a code.

    A subclass that sets its own `code` is registered under it, so `from_info` can rebuild it.
    """

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "code" in cls.__dict__:
            if cls.code in _BY_CODE:
                raise TypeError(f"error code {cls.code!r} is taken by {_BY_CODE[cls.code].__name__}")
            _BY_CODE[cls.code] = cls

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def data(self) -> dict[str, Any]:
        """Structured details beyond the message (rebuilt by `from_info`)."""
        return {}

    def info(self) -> ErrorInfo:
        return ErrorInfo(code=self.code, message=self.message, param=self.param, data=self.data())

    @classmethod
    def rebuild(cls, info: ErrorInfo) -> SparkError:
        """The error that `info()` serialized (classes with other constructor arguments override this)."""
        return cls(info.message, param=info.param)

    def __str__(self) -> str:
        return self.message


class InvalidRequest(SparkError):
    """Bad input from a client or a user; `param` names the offending field."""

    status = 400
    code = "invalid_request"


class Unauthorized(SparkError):
    """A missing, unknown or revoked API key (or console password)."""

    status = 401
    code = "unauthorized"


class SettingsError(SparkError):
    """A bad value in config.toml or a SPARK_* variable; `param` is the key."""

    status = 500
    code = "settings_error"


class Forbidden(SparkError):
    """A request the credentials allow but the circumstances do not (e.g. a cross-site change)."""

    status = 403
    code = "forbidden"


class ModelNotFound(SparkError):
    status = 404
    code = "model_not_found"

    def __init__(self, model: str) -> None:
        super().__init__(f"The model '{model}' does not exist on this server (see GET /v1/models).", param="model")
        self.model = model

    def data(self) -> dict[str, Any]:
        return {"model": self.model}

    @classmethod
    def rebuild(cls, info: ErrorInfo) -> SparkError:
        return cls(info.data.get("model", ""))


class ModelFileError(SparkError):
    """A file that is not a usable GGUF model (truncated, wrong magic, unreadable)."""

    status = 400
    code = "model_file_error"


class DownloadError(SparkError):
    """A pull that failed: repository or file missing, checksum mismatch, disk full."""

    status = 502
    code = "download_error"


class HubRepoNotFound(DownloadError):
    """A Hub repository that does not exist (or is private and no token lets us see it)."""

    status = 404
    code = "repo_not_found"


class ContextLengthExceeded(SparkError):
    status = 400
    code = "context_length_exceeded"

    def __init__(
        self, n_prompt: int, n_ctx: int, param: str = "messages", *, trained: int = 0, tools: tuple[int, int] = (0, 0)
    ) -> None:
        """`trained`: the model's training context (0 unknown), past which its context cannot be raised;
        `tools`: how many tools the request defines and how many of its prompt tokens their definitions take."""
        self.n_prompt = n_prompt
        self.n_ctx = n_ctx
        self.trained = trained
        self.tools = tools
        # OpenAI's wording, which clients (LangChain, LiteLLM) recognise a context overflow by.
        super().__init__(
            f"This model's maximum context length is {n_ctx} tokens per request. However, your request "
            f"has {n_prompt} prompt tokens. {self.remedy(param)}",
            param=param,
        )

    def remedy(self, param: str) -> str:
        """What the client can do: shorten `param` (or send fewer tools where their definitions take much of
        the prompt), or raise the model's context where it is below its training."""
        n_tools, tool_tokens = self.tools
        shorten = f"Shorten '{param}'"
        if lots := tool_tokens * 4 >= self.n_prompt:  # a quarter or more: a client's built-in tools (Open WebUI's)
            shorten += f" or send fewer tools (the definitions of its {n_tools} tools take {tool_tokens} of them)"
        if self.trained and self.n_ctx >= self.trained:
            return f"{shorten}: {self.n_ctx} tokens is as long as this model's context goes."
        most = f" (up to {self.trained}, what the model was trained for)" if self.trained else ""
        how = " on its page in Spark's console or with PATCH /api/models/MODEL/settings"
        return f"{shorten}{',' if lots else ''} or raise the model's context_length{most}{how}."

    def data(self) -> dict[str, Any]:
        return {"n_prompt": self.n_prompt, "n_ctx": self.n_ctx, "trained": self.trained, "tools": list(self.tools)}

    def named(self, param: str) -> ContextLengthExceeded:
        """The same error naming `param`: what an API calls the prompt (a Responses request's `input`)."""
        return ContextLengthExceeded(self.n_prompt, self.n_ctx, param, trained=self.trained, tools=self.tools)

    @classmethod
    def rebuild(cls, info: ErrorInfo) -> SparkError:
        data = info.data
        n_tools, tool_tokens = data.get("tools", (0, 0))
        return cls(
            int(data["n_prompt"]),
            int(data["n_ctx"]),
            info.param or "messages",
            trained=int(data.get("trained", 0)),
            tools=(int(n_tools), int(tool_tokens)),
        )


class PlacementRefused(SparkError):
    """The model fits on no device; the message is the arithmetic."""

    status = 507
    code = "placement_refused"


class Overloaded(SparkError):
    status = 503
    code = "overloaded"


class ShuttingDown(SparkError):
    """The server is stopping: a new request, or a stream still open when its grace period ran out."""

    status = 503
    code = "shutting_down"


class RunnerFailed(SparkError):
    """A runner process crashed, hung or could not load its model; `out_of_memory` when memory
    was what failed it (the planner then remembers the load)."""

    status = 502
    code = "runner_failed"

    def __init__(self, message: str, *, param: str | None = None, out_of_memory: bool = False) -> None:
        super().__init__(message, param=param)
        self.out_of_memory = out_of_memory

    def data(self) -> dict[str, Any]:
        return {"out_of_memory": True} if self.out_of_memory else {}

    @classmethod
    def rebuild(cls, info: ErrorInfo) -> SparkError:
        return cls(info.message, param=info.param, out_of_memory=bool(info.data.get("out_of_memory")))


class Cancelled(SparkError):
    status = 499
    code = "cancelled"


class RouteNotFound(SparkError):
    """An HTTP path the server does not serve."""

    status = 404
    code = "not_found"


class RequestNotFound(SparkError):
    """No logged request has the id asked for (admin API, `spark log ID`)."""

    status = 404
    code = "request_not_found"


class ResponseNotFound(SparkError):
    """No stored response has the id asked for (`GET`/`DELETE /v1/responses/{id}`): never stored,
    deleted, pruned, or another key's."""

    status = 404
    code = "response_not_found"


class ChatCompletionNotFound(SparkError):
    """No stored chat completion has the id asked for (`/v1/chat/completions/{id}`): made without
    `store`, deleted, pruned, or another key's."""

    status = 404
    code = "chat_completion_not_found"


class PreviousResponseNotFound(InvalidRequest):
    """A Responses request continues a response that is not stored (for its key)."""

    code = "previous_response_not_found"


class ThreadUnsupported(InvalidRequest):
    """A Messages API `thread` (a conversation the server keeps between requests), which Spark does not
    keep: under this code Anthropic's SDKs send the whole conversation again, without `thread`."""

    code = "thread_unsupported_request"


class FileNotFound(SparkError):
    """No uploaded file has the id asked for (`/v1/files/{id}`): never uploaded, deleted, or another key's."""

    status = 404
    code = "file_not_found"


class BatchNotFound(SparkError):
    """No batch has the id asked for (`/v1/batches/{id}`, `/v1/messages/batches/{id}`): never made,
    deleted, or another key's."""

    status = 404
    code = "batch_not_found"


class ConversationNotFound(SparkError):
    """No conversation (`/v1/conversations/{id}`, a Responses request's `conversation`) or no item
    of one has the id asked for: never made, deleted, or another key's."""

    status = 404
    code = "conversation_not_found"


class PullNotFound(SparkError):
    """No pull job has the id asked for (admin API)."""

    status = 404
    code = "pull_not_found"


class KeyNotFound(SparkError):
    """No API key has the name asked for (admin API, `spark keys`)."""

    status = 404
    code = "key_not_found"


class NodeNotFound(SparkError):
    """No fleet node has the name asked for (admin API, `spark nodes`)."""

    status = 404
    code = "node_not_found"


class NodeUnavailable(SparkError):
    """A fleet node could not take a routed request, or stopped answering during it."""

    status = 502
    code = "node_unavailable"


class NodeNotReady(NodeUnavailable):
    """The model asked for is only on fleet nodes that take no requests now (unreachable, not ready,
    draining): a client may try again shortly."""

    status = 503


class RunnerNotFound(SparkError):
    """The model asked for is installed but not loaded (admin API)."""

    status = 404
    code = "runner_not_found"


class NotImplementedRoute(SparkError):
    """A route of a compatible API that Spark does not serve, with what to use instead (Ollama's
    model management: models are the admin's)."""

    status = 501
    code = "not_implemented"


class MethodNotAllowed(SparkError):
    status = 405
    code = "method_not_allowed"


class RequestTooLarge(SparkError):
    """A request body over the server's `max_body_size`."""

    status = 413
    code = "request_too_large"


class RequestTimeout(SparkError):
    """A request still running when the server's `request_timeout` ran out."""

    status = 504
    code = "timeout"


_BY_CODE[SparkError.code] = SparkError


def from_info(info: ErrorInfo) -> SparkError:
    """Rebuild the typed error that `SparkError.info()` serialized (an unknown code gives a plain `SparkError`)."""
    return _BY_CODE.get(info.code, SparkError).rebuild(info)


def as_spark_error(exc: BaseException, where: str) -> SparkError:
    """`exc` itself when typed, else a `SparkError` naming the unexpected exception and `where` it arose."""
    if isinstance(exc, SparkError):
        return exc
    return SparkError(f"internal error in {where}: {type(exc).__name__}: {exc}")
