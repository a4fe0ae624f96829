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
