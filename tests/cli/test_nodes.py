"""`spark nodes add`'s join command: the URL a node joins this server at."""

from __future__ import annotations

import pytest

from spark.cli.nodes import join_command
from spark.fleet import member
from spark.server.discovery import ServerInfo, local_url


def info(host: str, port: int = 8080) -> ServerInfo:
    return ServerInfo(pid=1, host=host, port=port, url=local_url(host, port), started_at=0.0, version="0")


def test_a_central_on_every_address_names_this_machines_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(member, "address_toward", lambda url: "10.0.0.2")
    shown = join_command(info("0.0.0.0"), "spark-join-t")
    assert shown.startswith("  spark serve --host 0.0.0.0 --join http://10.0.0.2:8080 --token spark-join-t\n")
    monkeypatch.setattr(member, "address_toward", lambda url: "fd00::2")
    assert "--join http://[fd00::2]:8080 " in join_command(info("::"), "t")


def test_a_central_on_one_address_names_it() -> None:
    assert "--join http://192.168.1.5:9000 --token t\n" in join_command(info("192.168.1.5", 9000), "t")


def test_a_central_on_loopback_says_no_other_machine_reaches_it() -> None:
    shown = join_command(info("127.0.0.1"), "t")
    assert shown.startswith("  spark serve --join http://127.0.0.1:8080 --token t\n")
    assert "cannot reach it" in shown and "SPARK_HOST=0.0.0.0" in shown
