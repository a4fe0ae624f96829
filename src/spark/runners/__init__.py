"""Runner processes: one child process per loaded model, and the server side that drives them.

Runs in the server:
    spark.runners.scheduler   model -> runner: placement, load once, queue, keep-alive
    spark.runners.supervisor  one runner process: start, heartbeat, crash and hang handling
Runs in the runner process (`spark-runner`, `python -m spark.runners.child`):
    spark.runners.child       the process's main loop around one `spark.engine.Engine`
Both sides:
    spark.runners.protocol    the frames on the Unix socket between them

Nothing is imported here: the runner process imports `spark.runners.protocol`
and must not pay for the scheduler's imports (library, store).
"""
