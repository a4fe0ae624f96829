"""Runner processes: one child process per loaded model, and the server side that drives them.

Runs in the server:
    spark.runners.scheduler   model -> runner: placement, load once, queue, keep-alive
    spark.runners.options     how a model is loaded (its settings, then the server's)
    spark.runners.supervisor  one runner process: start, heartbeat, crash and hang handling
    spark.runners.spawn       starting a runner process and taking its connection
    spark.runners.spare       the warm spare runner, started ahead of a cold load
    spark.runners.sockets     the Unix sockets runners connect to
    spark.runners.stats       a runner's recent prompt and decode speed
Runs in the runner process (`spark-runner`, `python -m spark.runners.child`):
    spark.runners.child       the process's main loop around one `spark.engine.Engine`
Both sides:
    spark.runners.protocol    the frames on the Unix socket between them

Nothing is imported here: the runner process imports `spark.runners.protocol`
and must not pay for the scheduler's imports (library, store).
"""
