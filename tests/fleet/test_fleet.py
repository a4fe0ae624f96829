"""A central and two nodes as real processes: join, listing, routing, affinity, spread, failures.

The tests share one fleet and run in order: the later ones kill and restart nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from fleet.helpers import Fleet, routed_step
from server.helpers import server_settings
from spark.fleet.report import ROUTE_HEADER
from spark.store.db import Database
from spark.store.nodes import NodeTable

pytestmark = pytest.mark.slow

USER = {"role": "user", "content": "Tell me about the sea and the ships that sail on it."}


def chat(
    fleet: Fleet, model: str, messages: list[dict[str, Any]], *, key: str | None = None, max_tokens: int = 8
) -> tuple[httpx.Response, dict[str, Any]]:
    """A chat through the central, answered as a whole; the response and the central's log record."""
    request_id = f"test-{uuid.uuid4().hex}"
    with fleet.http(key) as http:
        response = http.post(
            "/v1/chat/completions",
            json={"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0},
            headers={"x-request-id": request_id},
        )
    assert response.status_code == 200, response.text
    return response, fleet.logged(request_id)


def test_nodes_join_and_their_models_are_listed_once(fleet: Fleet) -> None:
    nodes = fleet.node_states()
    assert set(nodes) == {"alpha", "beta"}
    for name, node in nodes.items():
        assert node["state"] == "ready" and node["reason"] is None
        assert node["url"] == fleet.nodes[name].url
        assert node["last_report_at"] is not None and node["added_at"] > 0
        assert "shared-llama" in node["models"] and f"{name}-llama" in node["models"]
    with fleet.http() as http:
        listed = http.get("/v1/models").json()["data"]
    ids = [m["id"] for m in listed]
    assert len(ids) == len(set(ids))
    by_id = {m["id"]: m for m in listed}
    assert by_id["central-llama"]["owned_by"] == "spark"
    assert sorted(by_id["shared-llama"]["spark"]["nodes"]) == ["alpha", "beta"]
    assert by_id["beta-llama"]["owned_by"] == "beta"
    with fleet.http() as http:
        one = http.get("/v1/models/alpha-llama")
    assert one.status_code == 200 and one.json()["owned_by"] == "alpha"

    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
    shown = subprocess.run(
        [sys.executable, "-m", "spark", "nodes", "ls"],
        env={**env, "SPARK_HOME": str(fleet.central.home), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "alpha" in shown.stdout and "beta" in shown.stdout and "ready" in shown.stdout


def test_a_request_goes_to_the_node_that_has_its_model(fleet: Fleet) -> None:
    for model, node in (("alpha-llama", "alpha"), ("beta-llama", "beta"), ("central-llama", "local")):
        response, record = chat(fleet, model, [USER])
        assert response.json()["model"] == model
        assert record["node"] == node and record["status"] == 200
        if node != "local":
            step = routed_step(record)
            assert step["node"] == node and step["reason"] == "only place with the model"
            assert [t["outcome"] for t in step["tries"]] == ["ok"]
            assert step["node_request_id"]  # the node's own id of it
            assert record["completion_tokens"] == 8
            assert record["tokens_per_second"] is None, "a whole answer arrives at once: no speed to tell"


def test_questions_about_tokens_go_to_the_node_that_has_the_model(fleet: Fleet) -> None:
    text = "The sea and the ships that sail on it"
    with fleet.http() as http:
        tokens = http.post("/tokenize", json={"model": "alpha-llama", "content": text})
        assert tokens.status_code == 200, tokens.text
        ids = tokens.json()["tokens"]
        back = http.post("/detokenize", json={"model": "alpha-llama", "tokens": ids})
        prompt = http.post("/apply-template", json={"model": "beta-llama", "messages": [USER]})
        nowhere = http.post("/tokenize", json={"model": "nowhere-llama", "content": text})
    assert ids and back.json()["content"] == text
    assert prompt.status_code == 200 and USER["content"] in prompt.json()["prompt"]
    assert nowhere.status_code == 404 and nowhere.json()["error"]["code"] == "model_not_found"


def test_the_central_keeps_the_responses_and_conversations_its_nodes_answer(fleet: Fleet) -> None:
    client = openai.OpenAI(base_url=fleet.central.url + "/v1", api_key=fleet.key, max_retries=0, timeout=120)
    first = client.responses.create(model="alpha-llama", input=USER["content"], max_output_tokens=4)
    assert first.store is True and client.responses.retrieve(first.id).output_text == first.output_text
    asked: Any = {
        "model": "alpha-llama",
        "previous_response_id": first.id,
        "input": "And then?",
        "max_output_tokens": 4,
    }
    with client.responses.stream(**asked) as stream:
        final = list(stream)[-1].response  # type: ignore[union-attr]
    assert final.previous_response_id == first.id
    assert client.responses.retrieve(final.id).model_dump() == final.model_dump()
    # the node was sent the whole conversation, and kept none of it
    whole: Any = [
        {"role": "user", "content": USER["content"]},
        *[item.model_dump() for item in first.output],
        {"role": "user", "content": "And then?"},
    ]
    counted = client.responses.input_tokens.count(model="alpha-llama", input=whole).input_tokens
    assert final.usage is not None and final.usage.input_tokens == counted
    # a conversation too: the central reads it, sends it whole, and adds the node's answer
    talk = client.conversations.create(items=[{"role": "user", "content": USER["content"]}])
    then = client.responses.create(model="alpha-llama", conversation=talk.id, input="And then?", max_output_tokens=4)
    assert then.conversation is not None and then.conversation.id == talk.id
    items = list(client.conversations.items.list(talk.id, order="asc"))
    assert [item.id for item in items[2:]] == [item.id for item in then.output] and len(items) == 2 + len(then.output)
    whole = [whole[0], {"role": "user", "content": "And then?"}]
    counted = client.responses.input_tokens.count(model="alpha-llama", input=whole).input_tokens
    assert then.usage is not None and then.usage.input_tokens == counted
    for node in fleet.nodes.values():
        assert server_settings(node.home).db_path.exists()
        db = Database(server_settings(node.home).db_path)
        assert (
            db.execute("SELECT (SELECT count(*) FROM responses) + (SELECT count(*) FROM conversations)").fetchone()[0]
            == 0
        )


def test_the_central_keeps_the_chat_completions_its_nodes_answer(fleet: Fleet) -> None:
    client = openai.OpenAI(base_url=fleet.central.url + "/v1", api_key=fleet.key, max_retries=0, timeout=120)
    asked: Any = {"model": "alpha-llama", "messages": [USER], "max_tokens": 4, "store": True, "seed": 1}
    whole = client.chat.completions.create(**asked, metadata={"way": "whole"})
    assert client.chat.completions.retrieve(whole.id).choices[0].message.content == whole.choices[0].message.content
    chunks = list(client.chat.completions.create(**asked, stream=True, n=2, stream_options={"include_usage": True}))
    streamed = client.chat.completions.retrieve(chunks[0].id)  # added up from the relayed chunks
    for i in (0, 1):
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == i)
        assert streamed.choices[i].message.content == text and streamed.choices[i].finish_reason == "length"
    assert streamed.usage is not None and chunks[-1].usage is not None
    assert streamed.usage.completion_tokens == chunks[-1].usage.completion_tokens
    assert [c.id for c in client.chat.completions.list(metadata={"way": "whole"})] == [whole.id]
    for node in fleet.nodes.values():  # the nodes keep none of it
        db = Database(server_settings(node.home).db_path)
        assert db.execute("SELECT count(*) FROM chat_completions").fetchone()[0] == 0


def test_uploaded_files_and_background_answers_stay_with_the_central(fleet: Fleet) -> None:
    client = openai.OpenAI(base_url=fleet.central.url + "/v1", api_key=fleet.key, max_retries=0, timeout=120)
    notes = client.files.create(file=("notes.txt", b"The ship sails at dawn.", "text/plain"), purpose="user_data")
    reads: Any = [{"role": "user", "content": [{"type": "file", "file": {"file_id": notes.id}}]}]
    here = client.chat.completions.create(model="central-llama", messages=reads, max_tokens=2)
    assert here.usage is not None and here.usage.prompt_tokens > 10  # read here, where the file is
    with pytest.raises(openai.BadRequestError) as refused:  # the nodes do not have it
        client.chat.completions.create(model="alpha-llama", messages=reads, max_tokens=2)
    assert refused.value.param == "model" and "uploaded" in refused.value.message  # type: ignore[attr-defined]
    queued = client.responses.create(model="central-llama", input="hi", max_output_tokens=2, background=True)
    assert queued.background is True
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="alpha-llama", input="hi", background=True)
    assert refused.value.param == "background"  # type: ignore[attr-defined]


def test_an_anthropic_stream_is_relayed_and_its_numbers_logged(fleet: Fleet) -> None:
    request_id = f"test-{uuid.uuid4().hex}"
    body = {"model": "beta-llama", "messages": [USER], "max_tokens": 8, "stream": True}
    headers = {"x-api-key": fleet.key, "anthropic-version": "2023-06-01", "x-request-id": request_id}
    with (
        httpx.Client(base_url=fleet.central.url, timeout=60) as http,
        http.stream("POST", "/v1/messages", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        events = [line.removeprefix("event: ") for line in response.iter_lines() if line.startswith("event:")]
    assert events[0] == "message_start" and events[-1] == "message_stop"
    record = fleet.logged(request_id)
    assert record["node"] == "beta" and record["status"] == 200
    assert record["prompt_tokens"] > 0 and record["completion_tokens"] == 8
    assert record["finish_reason"] == "max_tokens" and record["ttft_ms"] is not None
    assert record["tokens_per_second"] > 0  # a stream's pieces come as the node makes them


def test_an_ollama_stream_is_relayed_line_by_line_and_its_numbers_logged(fleet: Fleet) -> None:
    request_id = f"test-{uuid.uuid4().hex}"
    body = {"model": "beta-llama", "messages": [USER], "options": {"num_predict": 8}}  # Ollama streams by default
    headers = {"authorization": f"Bearer {fleet.key}", "x-request-id": request_id}
    with (
        httpx.Client(base_url=fleet.central.url, timeout=60) as http,
        http.stream("POST", "/ollama/api/chat", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200 and response.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in response.iter_lines() if line]
    assert len(lines) > 1 and not any(line["done"] for line in lines[:-1])
    assert lines[-1]["done"] is True and lines[-1]["done_reason"] == "length" and lines[-1]["eval_count"] == 8
    record = fleet.logged(request_id)
    assert record["node"] == "beta" and record["status"] == 200
    assert record["prompt_tokens"] > 0 and record["completion_tokens"] == 8 and record["finish_reason"] == "length"
    with httpx.Client(base_url=fleet.central.url, timeout=60) as http:  # whole, from the node too
        whole = http.post("/ollama/api/generate", json={**body, "prompt": "Hi", "stream": False}, headers=headers)
    assert whole.status_code == 200 and whole.json()["eval_count"] == 8


def test_the_next_turn_lands_on_the_same_node_and_reuses_its_cache(fleet: Fleet) -> None:
    first = [{"role": "system", "content": f"Conversation {uuid.uuid4().hex}."}, USER]
    response, record = chat(fleet, "shared-llama", first, max_tokens=16)
    node = record["node"]
    assert node in ("alpha", "beta")
    answer = response.json()["choices"][0]["message"]["content"]
    second = [*first, {"role": "assistant", "content": answer}, {"role": "user", "content": "And then?"}]
    response, record = chat(fleet, "shared-llama", second)
    assert record["node"] == node and routed_step(record)["reason"] == "affinity"
    assert response.json()["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert record["cached_tokens"] > 0  # the central logs the node's numbers


def test_eight_concurrent_clients_spread_over_both_nodes(fleet: Fleet) -> None:
    # eight long streams held open at once (the client reads no further, so each stays in flight
    # on its node), then closed: the client going away cancels them on the nodes
    ids = [f"spread-{i}-{uuid.uuid4().hex}" for i in range(8)]
    with fleet.http() as http, ExitStack() as streams:
        responses = []
        for i, request_id in enumerate(ids):
            body = {
                "model": "spread-llama",
                "messages": [{"role": "user", "content": f"Client {i}: count to fifty."}],
                "max_tokens": 4000,
                "stream": True,
            }
            response = streams.enter_context(
                http.stream("POST", "/v1/chat/completions", json=body, headers={"x-request-id": request_id})
            )
            assert response.status_code == 200
            responses.append((response, response.iter_lines()))
            next(responses[-1][1])  # its first frame: it is running
        in_flight = {n: s["in_flight"] for n, s in fleet.node_states().items()}
    assert in_flight == {"alpha": 4, "beta": 4}
    deadline = time.monotonic() + 30
    while any(s["in_flight"] or s["slots_busy"] for s in fleet.node_states().values()):
        assert time.monotonic() < deadline, fleet.node_states()
        time.sleep(0.2)
    nodes = [fleet.logged(request_id)["node"] for request_id in ids]
    assert nodes.count("alpha") == 4 and nodes.count("beta") == 4, nodes


def test_zero_retention_content_is_kept_on_no_machine(fleet: Fleet) -> None:
    marker, control = f"ZRMARK{uuid.uuid4().hex}", f"KEPTMARK{uuid.uuid4().hex}"
    _, record = chat(fleet, "alpha-llama", [{"role": "user", "content": f"remember {marker}"}], key=fleet.zr_key)
    assert record["node"] == "alpha" and record["zero_retention"] and record["content"] is None
    chat(fleet, "alpha-llama", [{"role": "user", "content": f"remember {control}"}])
    for server in (fleet.central, *fleet.nodes.values()):
        with server.admin() as admin:  # the node's own log has both requests
            admin.get("/api/requests")
    time.sleep(1.5)  # the log writers' batches reach the files

    def found(text: str) -> list[Path]:
        hits = []
        for server in (fleet.central, *fleet.nodes.values()):
            for path in server.home.rglob("*"):
                if path.is_file() and text.encode() in path.read_bytes():
                    hits.append(path)
        return hits

    assert found(control), "the check can see content that is kept"
    assert found(marker) == []


def test_a_drained_node_gets_no_new_requests(fleet: Fleet) -> None:
    with fleet.central.admin() as admin:
        drained = admin.post("/api/nodes/alpha/drain")
        assert drained.status_code == 200 and drained.json()["state"] == "draining"
        try:
            for i in range(3):
                _, record = chat(fleet, "shared-llama", [{"role": "user", "content": f"drain {i}"}])
                assert record["node"] == "beta"
        finally:
            undrained = admin.post("/api/nodes/alpha/undrain")
        assert undrained.json()["state"] == "ready"


def test_a_pull_runs_on_the_node_the_central_names(fleet: Fleet) -> None:
    with fleet.central.admin() as admin:
        started = admin.post("/api/nodes/alpha/pulls", json={"spec": "org/repo"})
        assert started.status_code == 202, started.text
        job = started.json()
        with fleet.nodes["alpha"].admin() as node:  # the job is the node's own
            assert node.get(f"/api/pulls/{job['id']}").status_code == 200
        followed = admin.get(f"/api/nodes/alpha/pulls/{job['id']}")
        assert followed.status_code == 200 and followed.json()["id"] == job["id"]
        assert admin.get("/api/pulls").json() == []  # nothing ran on the central
        bad = admin.post("/api/nodes/alpha/pulls", json={"nope": 1})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "nope"
        # cancelling goes to the node too (this job failed at once: the Hub is offline here, and a
        # finished job is answered as it is; tests/server/test_pulls.py cancels a running one)
        deadline = time.monotonic() + 20
        while admin.get(f"/api/nodes/alpha/pulls/{job['id']}").json()["state"] != "failed":
            assert time.monotonic() < deadline, "the pull did not fail"
            time.sleep(0.1)
        cancelled = admin.delete(f"/api/nodes/alpha/pulls/{job['id']}")
        assert cancelled.status_code == 200 and cancelled.json()["id"] == job["id"], cancelled.text
        assert cancelled.json()["state"] == "failed"
        unknown = admin.delete("/api/nodes/alpha/pulls/pull_000000000000")
        assert unknown.status_code == 404, unknown.text
        assert admin.delete(f"/api/nodes/nobody/pulls/{job['id']}").status_code == 404

    # `spark nodes pull` follows the node's job to its end, and says how it ended
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
    shown = subprocess.run(
        [sys.executable, "-m", "spark", "nodes", "pull", "alpha", "org/repo"],
        env={**env, "SPARK_HOME": str(fleet.central.home), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 1, shown.stdout + shown.stderr
    assert "On the node 'alpha': pulling org/repo as its job pull_" in shown.stdout
    assert " failed: " in shown.stderr, shown.stderr


def test_a_killed_node_is_skipped_before_the_first_byte_and_comes_back(fleet: Fleet) -> None:
    first = [{"role": "system", "content": f"Failover {uuid.uuid4().hex}."}, USER]
    response, record = chat(fleet, "shared-llama", first)
    dead = record["node"]
    other = "beta" if dead == "alpha" else "alpha"
    fleet.nodes[dead].kill()
    second = [*first, {"role": "assistant", "content": response.json()["choices"][0]["message"]["content"]}, USER]
    _, record = chat(fleet, "shared-llama", second)
    step = routed_step(record)
    assert record["node"] == other
    assert [t["node"] for t in step["tries"]] == [dead, other]
    assert step["tries"][0]["outcome"].startswith("cannot connect") and step["tries"][1]["outcome"] == "ok"
    state = fleet.wait_state(dead, "unreachable")
    assert state["reason"]

    fleet.nodes[dead].start()  # same home, same token: it joins again
    fleet.wait_state(dead, "ready")
    _, record = chat(fleet, f"{dead}-llama", [USER])
    assert record["node"] == dead


def test_a_node_killed_during_a_stream_ends_it_with_an_error_event(fleet: Fleet) -> None:
    request_id = f"test-{uuid.uuid4().hex}"
    body = {"model": "slow-llama", "messages": [USER], "max_tokens": 4000, "stream": True}
    frames = []
    with (
        fleet.http() as http,
        http.stream("POST", "/v1/chat/completions", json=body, headers={"x-request-id": request_id}) as response,
    ):
        assert response.status_code == 200
        lines = response.iter_lines()
        for line in lines:
            if line.startswith("data:"):
                frames.append(line)
            if len(frames) == 5:
                fleet.nodes["beta"].kill()
                break
        frames.extend(line for line in lines if line.startswith("data:"))
    assert '"error"' in frames[-2] and "beta" in frames[-2], frames[-3:]
    assert frames[-1] == "data: [DONE]"
    record = fleet.logged(request_id)
    assert record["node"] == "beta" and record["error_type"] == "node_unavailable"
    assert [s["name"] for s in record["timeline"]].count("routed") == 1  # never sent again
    _, after = chat(fleet, "shared-llama", [USER])
    assert after["node"] == "alpha"


def test_a_removed_node_is_refused_and_gets_nothing(fleet: Fleet) -> None:
    alpha = fleet.nodes["alpha"]
    token = alpha.args[alpha.args.index("--token") + 1]
    secret = NodeTable(Database(server_settings(fleet.central.home).db_path)).get("alpha").route_secret
    assert secret is not None
    with fleet.central.admin() as admin:
        removed = admin.delete("/api/nodes/alpha")
        assert removed.json() == {"name": "alpha", "removed": True}
    assert "alpha" not in fleet.node_states()
    join = httpx.post(
        fleet.central.url + "/fleet/join", json={"url": alpha.url}, headers={"authorization": f"Bearer {token}"}
    )
    assert join.status_code == 401 and "revoked" in join.json()["error"]["message"]
    with fleet.http() as http:
        gone = http.post("/v1/chat/completions", json={"model": "alpha-llama", "messages": [USER]})
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "model_not_found"
    time.sleep(1.5)  # alpha's next report is refused: it no longer trusts the old route secret
    assert "refused this node's token" in alpha.log_path.read_text()
    pull = httpx.post(alpha.url + "/fleet/pulls", json={"spec": "org/repo"}, headers={ROUTE_HEADER: secret})
    assert pull.status_code == 401
    with httpx.Client(base_url=alpha.url, headers={ROUTE_HEADER: secret}) as direct:
        refused = direct.post("/v1/chat/completions", json={"model": "alpha-llama", "messages": [USER]})
    assert refused.status_code == 401
