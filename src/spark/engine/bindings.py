"""llama-cpp-python's ctypes bindings, without its high-level package.

`import llama_cpp` runs the package's `__init__`, which imports its own
server-side classes (`Llama`, chat formats, caches) and numpy with them:
some 20 MiB in every runner that Spark never uses, since the engine calls
the C API directly. This module imports only the two binding modules,
`llama_cpp.llama_cpp` (llama.h) and `llama_cpp.mtmd_cpp` (libmtmd), under
their usual names. Where the full package is already imported (a script
that uses it too), that one is used.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import re
import sys
import types
from pathlib import Path


@functools.cache
def bindings_version() -> str:
    """The installed llama-cpp-python's version (its package's `__version__`).

    Read from the package's source rather than with `importlib.metadata`, which
    would add a megabyte of imports (email, zipfile, csv) to every runner.
    """
    init = Path(sys.modules["llama_cpp.llama_cpp"].__file__ or "").with_name("__init__.py").read_text(encoding="utf-8")
    found = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", init, re.MULTILINE)
    return found.group(1) if found else "unknown"


def _package_without_init() -> None:
    """Put an empty `llama_cpp` package in `sys.modules` so that its submodules import alone."""
    if "llama_cpp" in sys.modules:
        return
    spec = importlib.util.find_spec("llama_cpp")  # finds the package; runs none of its code
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError("llama-cpp-python is not installed (re-run ./install.sh)")
    package = types.ModuleType("llama_cpp")
    package.__path__ = list(spec.submodule_search_locations)
    package.__spec__ = importlib.machinery.ModuleSpec("llama_cpp", None, is_package=True)
    package.__spec__.submodule_search_locations = package.__path__
    package.__file__ = spec.origin
    sys.modules["llama_cpp"] = package
    # What the real package has besides its classes, for code that imports `llama_cpp` after us:
    # the C API at top level (its `from .llama_cpp import *`) and `__version__`.
    from llama_cpp import llama_cpp as c_api

    package.__dict__.update({k: v for k, v in vars(c_api).items() if not k.startswith("_")})
    package.__dict__["__version__"] = bindings_version()


_package_without_init()

from llama_cpp import llama_cpp as lc  # noqa: E402
from llama_cpp import mtmd_cpp as mt  # noqa: E402

__all__ = ["bindings_version", "lc", "mt"]
