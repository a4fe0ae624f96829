"""Server side of runner processes: the socket protocol, the supervisor, the scheduler.

    from spark.runners.scheduler import Scheduler      # model -> runner, load once
    from spark.runners.supervisor import RunnerProcess  # one runner process
    from spark.runners.protocol import encode_frame, FrameDecoder

Nothing is imported here: the runner process imports `spark.runners.protocol`
and must not pay for the scheduler's imports (library, store).
"""
