"""`spark doctor` on this machine, for real: the bundled model's self-test, JSON, the exit status."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from spark.server.admin_auth import admin_token_path, write_admin_token
from spark.settings import load_settings


def run_doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spark", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "300"},  # one line per finding
    )


@pytest.mark.slow  # the self-test answers with the bundled SmolLM2
def test_doctor_checks_this_machine_and_runs_the_bundled_model() -> None:
    done = run_doctor("--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["failed"] is False
    checks = {c["name"]: c for c in report["checks"]}
    assert {"python", "spark", "llama-cpp-python", "llama.cpp build", "gpu", "memory", "disk", "server"} <= set(checks)
    assert {"config folder", "data folder", "cache folder", "admin password", "threads", "cpu load"} <= set(checks)
    assert checks["threads"]["message"].startswith("1 thread per runner")  # SPARK_THREADS=1 in tests
    test = checks["self-test"]
    assert test["status"] == "ok" and test["message"].startswith("smollm2-135m-instruct-q4_1: loaded and answered")
    assert all(c["status"] in ("ok", "warn") for c in report["checks"])
    assert all(c["fix"] for c in report["checks"] if c["status"] != "ok")


def test_a_failed_check_prints_its_fix_and_exits_1() -> None:
    settings = load_settings()
    write_admin_token(settings)
    admin_token_path(settings).chmod(0o644)
    done = run_doctor("--no-self-test")
    assert done.returncode == 1
    assert "FAIL" in done.stdout and f"fix: chmod 600 {admin_token_path(settings)}" in done.stdout
    assert "self-test" not in done.stdout
