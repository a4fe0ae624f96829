"""One central and two nodes, real `spark serve` processes on loopback ports, shared by a module.

central: its own model `central-llama`.
alpha:   `shared-llama`, `alpha-llama`.
beta:    `shared-llama`, `beta-llama`, and `slow-llama` (one slot; generates for as long as asked).
Both nodes also have `spread-llama`: slow too, with 4 slots, so that streams overlap.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet.helpers import Fleet, Server, stop_all
from runners.helpers import control_token_bias
from server.helpers import add_slow_model, server_settings
from spark.library import Library, ModelSettings
from spark.store.db import Database
from spark.store.keys import KeyTable
from spark.types import SamplingParams


def _install(home: Path, tiny_llama: Path, ids: list[str]) -> None:
    with Library(server_settings(home)) as library:
        for model_id in ids:
            library.add_local(tiny_llama, model_id=model_id)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, tiny_llama: Path, slow_llama: Path) -> Iterator[Fleet]:
    central = Server("central", tmp_path_factory.mktemp("central"))
    _install(central.home, tiny_llama, ["central-llama"])
    keys = KeyTable(Database(server_settings(central.home).db_path))
    key, zr_key = keys.create("tests")[1], keys.create("private", zero_retention=True)[1]
    nodes = {name: Server(name, tmp_path_factory.mktemp(name)) for name in ("alpha", "beta")}
    servers = [central, *nodes.values()]
    try:
        central.spawn()  # it starts while the nodes' libraries are filled
        _install(nodes["alpha"].home, tiny_llama, ["shared-llama", "alpha-llama"])
        _install(nodes["beta"].home, tiny_llama, ["shared-llama", "beta-llama"])
        with Library(server_settings(nodes["beta"].home)) as library:
            add_slow_model(library, slow_llama)
        for node in nodes.values():
            with Library(server_settings(node.home)) as library:
                library.add_local(slow_llama, model_id="spread-llama")
                banned = SamplingParams(logit_bias=control_token_bias(slow_llama))
                library.update_settings("spread-llama", ModelSettings(context_length=4096, parallel=4, sampling=banned))
        central.wait_healthy()
        fleet = Fleet(central, nodes, key, zr_key)
        with central.admin() as admin:
            for name, node in nodes.items():
                created = admin.post("/api/nodes", json={"name": name})
                assert created.status_code == 201, created.text
                node.args = ["--join", central.url, "--token", created.json()["token"]]
        for node in nodes.values():
            node.spawn()
        for name, node in nodes.items():
            node.wait_healthy()
            fleet.wait_state(name, "ready")
        yield fleet
    finally:
        stop_all(servers)
