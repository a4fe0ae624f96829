"""What a console change answers: the page's part drawn again with what the admin API did.

Shared by every page that changes something: the part (a table, a list)
is drawn again from the admin API after the change, with the change's
outcome or the admin API's error (and its status, which htmx swaps in too).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from litestar import Request, Response

from spark.server.console.inprocess import ApiAnswer
from spark.server.console.render import render
from spark.server.console.sessions import Session


class PartContext(Protocol):
    """The context of a page's part, with a change's outcome (`message`) or its `error`."""

    def __call__(
        self, request: Request[Any, Any, Any], *, message: str = "", error: str = ""
    ) -> Awaitable[dict[str, Any]]: ...


async def after_change(
    request: Request[Any, Any, Any],
    session: Session,
    answer: ApiAnswer,
    template: str,
    context: PartContext,
    done: str,
    **extra: Any,
) -> Response[str]:
    """The part `template` drawn again after a change the admin API answered with `answer`."""
    values = await (context(request, message=done) if answer.ok else context(request, error=answer.error))
    return render(request, template, session=session, status_code=answer.status, **extra, **values)


async def after_live_change(
    request: Request[Any, Any, Any],
    session: Session,
    answer: ApiAnswer,
    part: str,
    part_id: str,
    context: PartContext,
    done: str,
) -> Response[str]:
    """After a change to a live part (drawn by the template `part` in the element `part_id`): the
    outcome where the form's answer goes, and the part now, swapped into its element out of band
    (the outcome is kept out of the part, which its event stream draws again)."""
    return await after_change(request, session, answer, "live_changed.html", context, done, part=part, part_id=part_id)


async def shown_once(
    request: Request[Any, Any, Any],
    session: Session,
    answer: ApiAnswer,
    template: str,
    trigger: str,
    secret: Callable[[], Awaitable[dict[str, Any]]],
) -> Response[str]:
    """What a creation answered, with its secret (`secret()`, only on success) shown this once;
    `trigger` (an htmx event) tells the page to draw its list again."""
    if not answer.ok:
        return render(request, template, session=session, status_code=answer.status, error=answer.error)
    return render(request, template, session=session, headers={"HX-Trigger": trigger}, error="", **await secret())
