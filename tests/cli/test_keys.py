"""`spark keys create / ls / rm`, run as a user would."""

from __future__ import annotations

import re

from typer.testing import CliRunner, Result

from spark.cli import app
from spark.errors import InvalidRequest, KeyNotFound
from spark.settings import load_settings
from spark.store.db import Database
from spark.store.keys import KEY_PREFIX, KeyTable

runner = CliRunner()


def spark(*args: str) -> Result:
    return runner.invoke(app, list(args), env={"COLUMNS": "200"})


def test_create_ls_rm() -> None:
    created = spark("keys", "create", "laptop")
    assert created.exit_code == 0, created.output
    secret = created.stdout.strip()
    assert re.fullmatch(re.escape(KEY_PREFIX) + r"[A-Za-z0-9_-]{43}", secret), "stdout holds only the key"
    assert "cannot be shown again" in created.stderr
    assert spark("keys", "create", "ci", "--zero-retention").exit_code == 0

    listing = spark("keys", "list")
    assert listing.exit_code == 0, listing.output
    assert secret not in listing.output, "the key is printed once, at creation"
    rows = {line.split()[0]: line.rstrip() for line in listing.output.splitlines()[1:] if line.strip()}
    assert secret[:13] + "…" in rows["laptop"] and "never" in rows["laptop"] and rows["laptop"].endswith("no")
    assert rows["ci"].endswith("yes")

    settings = load_settings()
    assert KeyTable(Database(settings.db_path)).verify(secret) is not None
    data = b"".join(p.read_bytes() for p in settings.data_dir.iterdir() if p.name.startswith("spark.db"))
    assert secret[:13].encode() in data and secret.encode() not in data, "only a hash is stored"

    removed = spark("keys", "revoke", "laptop")
    assert removed.exit_code == 0 and "Revoked the key 'laptop'" in removed.output
    assert KeyTable(Database(settings.db_path)).verify(secret) is None
    assert "laptop" not in spark("keys", "ls").output, "ls is an alias of list"


def test_errors_name_the_problem() -> None:
    assert spark("keys", "create", "dup").exit_code == 0
    for args, error, message in (
        (("keys", "create", "dup"), InvalidRequest, "already exists"),
        (("keys", "create", "bad name"), InvalidRequest, "not a valid key name"),
        (("keys", "rm", "nobody"), KeyNotFound, "no key named 'nobody'"),
        (("keys", "rename", "nobody", "someone"), KeyNotFound, "no key named 'nobody'"),
        (("keys", "rename", "dup", "bad name"), InvalidRequest, "not a valid key name"),
    ):
        result = spark(*args)
        assert isinstance(result.exception, error) and message in str(result.exception)


def test_ls_without_keys_says_how_to_create_one() -> None:
    result = spark("keys", "ls")
    assert result.exit_code == 0 and "spark keys create NAME" in result.output


def test_rename_keeps_the_key_and_its_use() -> None:
    import time

    from spark.store.requests import RequestRecord, RequestTable

    secret = spark("keys", "create", "old-name").stdout.strip()
    db = Database(load_settings().db_path)
    record = RequestRecord(
        id="r1",
        request_id="req_r1",
        started_at=time.time() - 60,
        route="/v1/chat/completions",
        status=200,
        duration_ms=5.0,
        key_name="old-name",
        prompt_tokens=7,
        completion_tokens=3,
    )
    RequestTable(db).insert_many([record])

    renamed = spark("keys", "rename", "old-name", "new-name")
    assert renamed.exit_code == 0 and "Renamed the key 'old-name' to 'new-name'" in renamed.output
    assert KeyTable(db).verify(secret) is not None and KeyTable(db).verify(secret).name == "new-name"  # type: ignore[union-attr]
    listing = spark("keys", "list").output
    row = next(line.split() for line in listing.splitlines() if line.startswith("new-name"))
    assert row[-3:] == ["1", "10", "no"], "requests and tokens of the last 24 h follow the key"
    assert "old-name" not in listing


def test_list_fits_80_columns_with_whole_prefixes() -> None:
    for name in ("laptop-of-someone", "ci"):
        assert spark("keys", "create", name).exit_code == 0
    lines = runner.invoke(app, ["keys", "list"], env={"COLUMNS": "80"}).output.splitlines()
    assert len(lines) == 3 and all(len(line) <= 80 for line in lines), lines  # a line a key, none wrapped
    assert lines[0].split()[-2:] == ["ZERO", "RETENTION"], "the usage columns go first"
    prefixes = [line.split()[1] for line in lines[1:]]
    assert all(len(p) > len("sk-spark-…") for p in prefixes) and len(set(prefixes)) == 2  # told apart
    for name in ("laptop-of-someone", "ci"):
        spark("keys", "revoke", name)


def test_help_says_the_keys_are_local() -> None:
    assert "local database" in spark("keys", "--help").output
    assert "server" in spark("ps", "--help").output and "server" in spark("stop", "--help").output
    assert "local database" in spark("log", "--help").output
