"""What a runner process takes before it loads a model, measured once per server process.

A loaded model's real memory is its runner's resident size less this
baseline: the interpreter and the imports a runner has (llama.cpp's library
among them) when its `Load` arrives. The estimate's counterpart is
`MemoryEstimate.runtime_bytes`, a rounded-up constant.
"""

from __future__ import annotations

import asyncio
import sys

from spark.errors import RunnerFailed

# What `python -m spark.runners.child` has imported and initialised when it starts loading a model.
_PROBE = (
    "import psutil, spark.runners.child, spark.engine.engine\n"
    "from spark.engine.native import init_backend\n"
    "init_backend()\n"
    "print(psutil.Process().memory_info().rss)\n"
)

_measured: int | None = None


async def idle_runner_bytes() -> int:
    """Resident bytes of a runner process that has not loaded a model yet.

    Measured in a short-lived child process the first time, then remembered.
    Raises `RunnerFailed` when the child cannot run.
    """
    global _measured
    if _measured is None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _PROBE,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await proc.communicate()
        except BaseException:
            proc.kill()  # cancelled: leave no child behind
            await proc.wait()
            raise
        if proc.returncode != 0 or not out.strip().isdigit():
            tail = err.decode(errors="replace").strip()[-500:]
            raise RunnerFailed(f"measuring an idle runner process failed (exit {proc.returncode}): {tail}")
        _measured = int(out)
    return _measured
