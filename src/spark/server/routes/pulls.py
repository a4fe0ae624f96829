"""The admin API's pull jobs (docs/admin-api.md, "Library and pulls"): Hub downloads run by the server.

`POST /api/pulls` starts one and answers at once (202) with the job; `GET
/api/pulls` lists them, newest first; `GET /api/pulls/{id}` shows one with its
progress; `DELETE /api/pulls/{id}` cancels it. The jobs themselves live in the
core (`spark.library.jobs`); these handlers only translate.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.params import FromPath

from spark.api.common import decode_body
from spark.library.jobs import PullJob, PullJobs
from spark.server.responses import json_response
from spark.server.state import state_of


class PullRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`spec`: org/repo, org/repo:QUANT, org/repo/file.gguf or a Hub URL; `quant` narrows a repository;
    `attach_to`: the installed model `spec`'s LoRA adapter is for, applied at `scale` (default 1)."""

    spec: str
    quant: str | None = None
    attach_to: str | None = None
    scale: float | None = None

    def start(self, jobs: PullJobs) -> PullJob:
        """Start this pull as a job of `jobs` (blocking: call it in a thread)."""
        return jobs.start(self.spec, self.quant, attach_to=self.attach_to, scale=self.scale)


_decoder = msgspec.json.Decoder(PullRequest)
_encode = msgspec.json.Encoder().encode


@post("/pulls", status_code=202)
async def start_pull(request: Request[Any, Any, Any]) -> Response[bytes]:
    body = decode_body(_decoder, await request.body())
    jobs = state_of(request).pulls
    job = await asyncio.to_thread(body.start, jobs)
    return Response(_encode(job), status_code=202, media_type="application/json")


@get("/pulls")
async def list_pulls(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(_encode(state_of(request).pulls.list()))


@get("/pulls/{job_id:str}")
async def get_pull(request: Request[Any, Any, Any], job_id: FromPath[str]) -> Response[bytes]:
    return json_response(_encode(state_of(request).pulls.get(job_id)))


@delete("/pulls/{job_id:str}", status_code=200)
async def cancel_pull(request: Request[Any, Any, Any], job_id: FromPath[str]) -> Response[bytes]:
    jobs = state_of(request).pulls
    return json_response(_encode(await asyncio.to_thread(jobs.cancel, job_id)))


PULL_ROUTES = [start_pull, list_pulls, get_pull, cancel_pull]
