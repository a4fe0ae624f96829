"""`python -m spark.server [OVERRIDES]`: the API server, as `spark serve` starts it.

`spark serve` checks its options, then replaces its own process with this one
(same process id, same terminal), so that the serving process holds none of
the command line's libraries (typer, rich and pydantic: some 10 MiB).
OVERRIDES is a JSON object of settings given as options (`{"port": 9000}`);
they stay "arguments" in the settings' sources.
"""

from __future__ import annotations

import sys

import msgspec

from spark.errors import SparkError
from spark.server.run import serve
from spark.settings import load_settings


def main(argv: list[str]) -> int:
    overrides = msgspec.json.decode(argv[0]) if argv else {}
    try:
        serve(load_settings(**overrides))
    except SparkError as e:
        print(f"Error: {e.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
