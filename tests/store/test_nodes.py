"""The fleet's node table: join tokens kept only as hashes, route secrets replaced at each join."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from spark.errors import InvalidRequest, NodeNotFound
from spark.store.db import Database
from spark.store.nodes import JOIN_TOKEN_PREFIX, NodeTable


def test_a_node_is_stored_without_its_token(tmp_path: Path) -> None:
    db = Database(tmp_path / "spark.db")
    table = NodeTable(db)
    record, token = table.create("gpu-box")
    assert token.startswith(JOIN_TOKEN_PREFIX) and record.url is None and not record.draining
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert token.encode() not in raw
    assert table.verify(token) == record
    assert table.verify("spark-join-" + "x" * 43) is None and table.verify("") is None
    assert table.verify("x" * 1000) is None
    assert [n.name for n in table.list()] == ["gpu-box"]


def test_joining_records_the_url_and_a_fresh_secret(tmp_path: Path) -> None:
    table = NodeTable(Database(tmp_path / "spark.db"))
    table.create("gpu")
    first = table.joined("gpu", "http://10.0.0.2:8080")
    second = table.joined("gpu", "http://10.0.0.2:8080")
    assert first.url == "http://10.0.0.2:8080" and first.joined_at is not None
    assert first.route_secret and second.route_secret and first.route_secret != second.route_secret
    assert table.set_draining("gpu", True).draining


def test_bad_names_duplicates_and_unknown_nodes(tmp_path: Path) -> None:
    table = NodeTable(Database(tmp_path / "spark.db"))
    with pytest.raises(InvalidRequest, match="not a valid node name") as bad:
        table.create("../etc")
    assert bad.value.param == "name"
    table.create("gpu")
    with pytest.raises(InvalidRequest, match="already exists"):
        table.create("gpu")
    for call in (lambda: table.get("cpu"), lambda: table.remove("cpu"), lambda: table.joined("cpu", "http://x")):
        with pytest.raises(NodeNotFound):
            call()
    table.remove("gpu")
    assert table.list() == []


def test_the_token_hash_is_unique(tmp_path: Path) -> None:
    db = Database(tmp_path / "spark.db")
    NodeTable(db).create("a")
    with pytest.raises(sqlite3.IntegrityError):
        db.execute("INSERT INTO nodes (name, token_hash, added_at) SELECT 'b', token_hash, 0 FROM nodes")
