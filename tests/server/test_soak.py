"""A short soak (2 minutes; SPARK_SOAK_SECONDS for longer): mixed traffic on a real `spark serve` with a
runner killed every 40 s. No 5xx but the killed requests, no leaked runner, file descriptors and memory flat.

bench/soak.py runs the same driver for 30 minutes and prints the figures.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from traffic import prepare_home, run_soak, runners_gone, spark_serve

SECONDS = float(os.environ.get("SPARK_SOAK_SECONDS", "120"))


@pytest.mark.slow
def test_soak_with_runners_killed(tmp_path: Path, tiny_llama: Path, tiny_bert: Path) -> None:
    home = tmp_path / "home"
    key, (chat, embed) = prepare_home(home, tiny_llama, tiny_bert)
    with spark_serve(home, SPARK_PARALLEL="2", SPARK_CONTEXT_LENGTH="512") as served:
        report = run_soak(served, key, chat, embed, SECONDS, kill_every=SECONDS / 3)
        runners = served.runner_pids()
    print(report.table())
    assert not report.server_errors, report.server_errors[:5]
    assert report.kills >= 2 and sum(report.requests.values()) > 50
    # no runner leaked past its kills: one per model, and at most one spare waiting for a load
    assert len(runners) <= 3, f"runners left after the soak: {runners}"
    assert runners_gone(runners) == 0, "every runner exited with the server"
    assert report.fds[-1] <= report.fds[0] + 8, f"file descriptors grew: {report.fds}"
    assert report.rss[-1] <= report.rss[0] * 1.5 + 64 * 2**20, f"memory grew: {report.rss}"
