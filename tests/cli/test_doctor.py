"""`spark doctor` on this machine, for real: the bundled model's self-test, JSON, the exit status."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from spark.server.admin_auth import admin_token_path, write_admin_token
from spark.server.discovery import read_server_info
from spark.settings import load_settings
from traffic import stop_server


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


def test_a_running_server_is_judged_by_its_own_settings_not_the_shells() -> None:
    """A server started with an admin password and 2 threads; doctor run from a shell with neither."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server_env = {**os.environ, "SPARK_ADMIN_PASSWORD": "pw", "SPARK_THREADS": "2"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "spark", "serve", "--port", str(port)],
        env=server_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while (info := read_server_info(load_settings())) is None or info.pid != proc.pid:
            assert proc.poll() is None, f"the server exited: {proc.communicate()[0]}"
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)
        done = run_doctor("--json", "--no-self-test")
    finally:
        stop_server(proc)
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["admin password"] == {
        "name": "admin password",
        "status": "ok",
        "message": "set in SPARK_ADMIN_PASSWORD (the running server's settings)",
    }
    assert checks["threads"]["message"].startswith("2 threads per runner")
    assert checks["threads"]["message"].endswith("(the running server's settings)")


def test_without_a_server_the_shells_settings_are_judged_and_said_to_be() -> None:
    checks = {c["name"]: c for c in json.loads(run_doctor("--json", "--no-self-test").stdout)["checks"]}
    assert checks["admin password"]["message"] == (
        "not set (this shell's settings; no server is running): the admin API and console work from this machine only"
    )
    assert checks["threads"]["message"].endswith("(this shell's settings; no server is running)")
