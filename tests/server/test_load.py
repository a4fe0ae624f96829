"""Many clients at once on one model (a real `spark serve`): those past the queue bound are refused at
once with the API's overloaded status and Retry-After, the others finish, /health answers throughout.

bench/load.py runs the same driver and prints the figures.
"""

from __future__ import annotations

from pathlib import Path

from traffic import REFUSED_STATUS, percentile, prepare_home, run_load, spark_serve

CLIENTS = 200
SLOTS, QUEUE = 2, 4


def test_clients_past_the_queue_are_refused_at_once_the_rest_finish(tmp_path: Path, slow_llama: Path) -> None:
    key, (model,) = prepare_home(tmp_path / "home", slow_llama)
    with spark_serve(
        tmp_path / "home", SPARK_PARALLEL=str(SLOTS), SPARK_MAX_QUEUE=str(QUEUE), SPARK_CONTEXT_LENGTH="512"
    ) as served:
        # long answers keep the admitted streams going for seconds: 200+ /health probes here
        report = run_load(served, key, model, CLIENTS, max_tokens=400)
    print(report.table())
    failed = [o for o in report.outcomes if o.kind == "failed"]
    assert not failed, failed[:3]
    assert report.count("ok") >= SLOTS + QUEUE, "every request the queue admitted was answered"
    refused = [o for o in report.outcomes if o.kind == "refused"]
    assert refused, "more clients than slots and queue: some were refused"
    assert {o.status for o in refused} <= set(REFUSED_STATUS.values())
    assert all(o.retry_after == "1" for o in refused), "every refusal says when to retry"
    assert all("overloaded" in o.detail for o in refused)
    assert report.health and not report.health_failures, "/health answered throughout"
    # within 100 ms (99 % of the probes, every 5 ms: one may meet a pause of this shared machine)
    p99 = percentile(report.health, 99)
    assert len(report.health) >= 50 and p99 is not None and p99 < 0.100, report.table()
    assert report.rss_after - report.rss_before < 64 * 2**20, f"the server's memory stays bounded: {report.table()}"
