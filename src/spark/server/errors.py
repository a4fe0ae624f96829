"""Every error a request can meet, answered in its API's shape: the one place that maps them.

`SparkError`s carry their own status; Litestar's own errors (unknown route,
wrong method, body too large, ...) become the matching `SparkError`; anything
else is a bug, logged with its traceback and answered as a generic 500.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

import msgspec
from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.status_codes import (
    HTTP_404_NOT_FOUND,
    HTTP_405_METHOD_NOT_ALLOWED,
    HTTP_413_REQUEST_ENTITY_TOO_LARGE,
)
from litestar.types import ExceptionHandlersMap, Scope

from spark.api import anthropic, ollama, openai
from spark.api.common import invalid_from_validation
from spark.errors import (
    InvalidRequest,
    MethodNotAllowed,
    Overloaded,
    RequestTooLarge,
    RouteNotFound,
    SparkError,
)
from spark.server.family import OLLAMA_PREFIX, api_family
from spark.server.recorder import keeps_content, recorder_of
from spark.server.request_ids import request_ids
from spark.server.state import state_of
from spark.units import format_bytes

log = logging.getLogger("spark.server")

RETRY_AFTER_SECONDS = 1  # an overloaded model's queue moves on within about this long

AnyRequest = Request[Any, Any, Any]


_ERROR_BODIES = {"openai": openai.error_body, "anthropic": anthropic.error_body, "ollama": ollama.error_body}


def error_response(scope: Scope, error: SparkError, headers: dict[str, str] | None = None) -> Response[bytes]:
    """`error` as the request's API writes errors (OpenAI's, Anthropic's or Ollama's body and status)."""
    if (recorder := recorder_of(scope)) is not None:
        recorder.failed(error)
    encode = _ERROR_BODIES[api_family(scope)]
    status, body = encode(error)
    if isinstance(error, Overloaded):
        headers = {**(headers or {}), "retry-after": str(RETRY_AFTER_SECONDS)}
    return Response(body, status_code=status, media_type=MediaType.JSON, headers=headers)


def internal_error(scope: Scope) -> SparkError:
    """The error a client sees for a bug: no details, but the id to find it in the log."""
    return SparkError(
        f"The server failed to handle this request (request id {request_ids(scope).header}); its log has the details."
    )


def log_unexpected(scope: Scope, exc: BaseException) -> None:
    """Log a bug with its traceback; for a zero-retention request without the exception's message,
    which may quote the request's content."""
    where = (scope.get("method"), scope["path"], request_ids(scope).header)
    if keeps_content(scope):
        log.error("unexpected error in %s %s (request id %s)", *where, exc_info=exc)
    else:
        log.error(
            "unexpected %s in %s %s (request id %s; its message is withheld: zero-retention key)\n%s",
            type(exc).__name__,
            *where,
            "".join(traceback.format_tb(exc.__traceback__)).rstrip(),
        )


def _spark_error(request: AnyRequest, exc: SparkError) -> Response[bytes]:
    return error_response(request.scope, exc)


def _http_error(request: AnyRequest, exc: HTTPException) -> Response[Any]:
    method, path = request.method, request.scope["path"]
    error: SparkError
    # imported here: the console's own modules import the server's, which import this one
    from spark.server.console.signin import page_not_found

    if exc.status_code == HTTP_404_NOT_FOUND and (page := page_not_found(request)) is not None:
        return page  # a browser at a mistyped console address: a page, not an API's JSON
    if exc.status_code == HTTP_404_NOT_FOUND:
        if path.startswith(("/v1/v1/", OLLAMA_PREFIX + "/v1/v1/")):  # an SDK that adds /v1 to a base URL with it
            where = "the base URL has /v1 once too often: Anthropic's SDKs add /v1 themselves, so give them no /v1"
        elif path.startswith(("/v1/", OLLAMA_PREFIX + "/")):
            where = "docs/compatibility.md lists the routes Spark serves"
        else:
            where = f"the OpenAI and Anthropic APIs are under /v1, Ollama's under {OLLAMA_PREFIX}/api"
        if path.startswith(OLLAMA_PREFIX + "/api/"):
            where += "; models are pulled and managed with `spark pull` and the admin API"
        error = RouteNotFound(f"There is no route {method} {path} on this server ({where}).")
    elif exc.status_code == HTTP_405_METHOD_NOT_ALLOWED:
        error = MethodNotAllowed(f"{path} does not accept {method} requests.")
    elif exc.status_code == HTTP_413_REQUEST_ENTITY_TOO_LARGE:
        limit = format_bytes(state_of(request).settings.max_body_bytes or 0)
        error = RequestTooLarge(
            f"The request body is larger than this server accepts ({limit}, the max_body_size setting)."
        )
    elif isinstance(exc, ValidationException):
        error = _invalid_input(exc)
    elif exc.status_code < 500:
        error = InvalidRequest(exc.detail)
    else:
        log_unexpected(request.scope, exc)
        error = internal_error(request.scope)
    return error_response(request.scope, error, headers=exc.headers)


def _invalid_input(exc: ValidationException) -> InvalidRequest:
    """Litestar's check of a typed body, query or path parameter (the admin API's), naming the field.

    Litestar names the parameter (`key`, "data" for the whole body) and passes on msgspec's
    message, which for the body names a missing field; the one reader of msgspec's text
    (`invalid_from_validation`) turns that into the field's name.
    """
    problems = exc.extra if isinstance(exc.extra, list) else []
    first = problems[0] if problems and isinstance(problems[0], dict) else {}
    message, key = first.get("message"), first.get("key")
    if not isinstance(message, str):
        return InvalidRequest(exc.detail)
    where = "$" if key in (None, "data") else f"$.{key}"
    return invalid_from_validation(msgspec.ValidationError(f"{message} - at `{where}`"))


def _unexpected(request: AnyRequest, exc: Exception) -> Response[bytes]:
    log_unexpected(request.scope, exc)
    return error_response(request.scope, internal_error(request.scope))


EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    SparkError: _spark_error,
    HTTPException: _http_error,
    Exception: _unexpected,
}
