"""The Nodes page: standalone until a node is added; nodes added, drained and removed; records drawn."""

from __future__ import annotations

from typing import Any

from server.console.helpers import HOSTILE_NAME, screenshot, sign_in, signed_in_client
from server.helpers import LiveServer
from spark.server.console.render import render_fragment

NODES = [
    {
        "name": "gpu-box",
        "url": "http://10.0.0.5:8080",
        "state": "ready",
        "reason": None,
        "models": ["qwen3-8b-q4_k_m"],
        "runners": ["qwen3-8b-q4_k_m"],
        "slots_busy": 1,
        "slots_free": 3,
        "queued": 0,
        "decode_tokens_per_second": 41.5,
        "last_report_at": 1_800_000_000.0,
        "added_at": 1_790_000_000.0,
    },
    {
        "name": HOSTILE_NAME,
        "url": None,
        "state": "pending",
        "reason": "never joined",
        "models": [],
        "runners": [],
        "slots_busy": 0,
        "slots_free": 0,
        "queued": 0,
        "decode_tokens_per_second": None,
        "last_report_at": None,
        "added_at": 1_790_000_000.0,
    },
]


def test_a_node_is_added_its_token_shown_once_then_drained_and_removed(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/nodes")
    assert "This server is standalone." in page.locator(".standalone").inner_text()
    page.get_by_label("Name").fill("gpu-box")
    page.get_by_role("button", name="Add node", exact=True).click()
    token = page.locator("#join-token").inner_text()
    assert len(token) > 20
    row = page.locator("tr[data-node='gpu-box']")
    row.wait_for()
    assert "pending" in row.inner_text()
    page.reload()
    assert token not in page.content()  # shown once, at creation
    page.get_by_role("button", name="Drain gpu-box").click()
    page.locator("tr[data-node='gpu-box'] .badge", has_text="draining").wait_for()
    assert page.get_by_role("button", name="Undrain gpu-box").count() == 1
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Remove gpu-box").click()
    page.locator(".standalone").wait_for()
    assert page.locator("tr[data-node='gpu-box']").count() == 0


def test_a_node_action_on_an_unknown_node_is_answered_not_failed(console: LiveServer) -> None:
    with signed_in_client(console) as client:
        csrf = client.get("/nodes").text.split('name="csrf" value="')[1].split('"')[0]
        r = client.post("/nodes/no-such-box/drain", data={"csrf": csrf}, headers={"HX-Request": "true"})
        assert r.status_code == 404 and "no-such-box" in r.text
        r = client.post("/nodes/no-such-box/explode", data={"csrf": csrf}, headers={"HX-Request": "true"})
        assert r.status_code == 404 and "drain, undrain or remove" in r.text


def test_the_fleets_nodes_are_drawn_with_their_state_and_load() -> None:
    html = render_fragment("nodes_table.html", csrf="t", fleet=True, nodes=NODES, error="", message="")
    assert "gpu-box" in html and "http://10.0.0.5:8080" in html and "41.5" in html and "1 / 3" in html
    assert "never joined" in html and "not joined yet" in html
    assert 'aria-label="Drain gpu-box"' in html and 'aria-label="Remove gpu-box"' in html
    assert HOSTILE_NAME not in html and "&lt;script&gt;" in html  # a node's name is shown, never run
    draining = [{**NODES[0], "state": "draining"}]
    assert 'aria-label="Undrain gpu-box"' in render_fragment(
        "nodes_table.html", csrf="t", fleet=True, nodes=draining, error="", message=""
    )


def test_screenshots_of_the_nodes_page(browser: Any, console: LiveServer) -> None:
    for shot in screenshot(browser, console, "/nodes", "nodes"):
        assert shot.stat().st_size > 5_000
