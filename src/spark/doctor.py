"""`spark doctor`: Spark explains its own environment, one check at a time.

Each check answers OK, WARN or FAIL with what it saw and, when something is
off, the fix. The facts come from the things themselves: llama.cpp's own
build report, NVML, psutil, the file system, the running server's address
file and its settings (read through its admin API: a server started with other
SPARK_* variables than this shell has is judged by its own), and a short real
generation.
"""

from __future__ import annotations

import os
import platform
import socket
import stat
import sys
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import closing, suppress
from pathlib import Path
from typing import Any, Literal

import msgspec
import psutil

import spark
from spark.errors import PlacementRefused, SparkError
from spark.library import Library
from spark.library.disk import free_bytes
from spark.library.entry import ModelEntry
from spark.placement import Device, detect_devices, estimate_load, model_shape, plan_placement
from spark.runners.options import load_options
from spark.server.admin_auth import admin_token_path
from spark.server.discovery import ServerInfo, read_server_info
from spark.server.local_admin import AdminClient, local_server
from spark.server.routes.settings import SettingsView
from spark.settings import ENV_PREFIX, Settings, config_path
from spark.types import ChatRequest, Done, Message, PromptDone, SamplingParams, TextDelta
from spark.units import format_bytes

Status = Literal["ok", "warn", "fail"]

CUDA_REINSTALL = 'CMAKE_ARGS="-DGGML_CUDA=on" ./install.sh'
BUSY_PROCESS_PERCENT = 50.0  # a process using more than half a core competes with llama.cpp's spinning threads
SELF_TEST_TOKENS = 16
_LOOPBACK = ("127.0.0.1", "::1", "localhost")


class Check(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One finding: its topic, OK/WARN/FAIL, what was seen, and the fix when it is not OK."""

    name: str
    status: Status
    message: str
    fix: str = ""


class Report(msgspec.Struct, frozen=True):
    """Everything `spark doctor` found; `failed` when any check FAILs."""

    checks: list[Check]

    @property
    def failed(self) -> bool:
        return any(c.status == "fail" for c in self.checks)


def _ok(name: str, message: str) -> Check:
    return Check(name=name, status="ok", message=message)


def _warn(name: str, message: str, fix: str = "") -> Check:
    return Check(name=name, status="warn", message=message, fix=fix)


def _fail(name: str, message: str, fix: str = "") -> Check:
    return Check(name=name, status="fail", message=message, fix=fix)


# --- versions and the llama.cpp build --------------------------------------------


def check_versions() -> Iterator[Check]:
    yield _ok("python", f"Python {platform.python_version()} ({sys.executable})")
    yield _ok("spark", f"Spark {spark.__version__}")
    try:
        import llama_cpp
    except Exception as e:  # a missing or broken build: every model needs it
        yield _fail("llama-cpp-python", f"cannot import llama_cpp: {e}", "re-run ./install.sh")
        return
    yield _ok("llama-cpp-python", f"llama-cpp-python {llama_cpp.__version__}")


def build_features(system_info: str) -> dict[str, dict[str, str]]:
    """llama.cpp's `llama_print_system_info()` as {backend: {feature: value}}.

    The report reads `CPU : SSE3 = 1 | AVX2 = 1 | ... | CUDA : ARCHS = 890 | ...`:
    a word followed by ` : ` starts a backend, `NAME = VALUE` pairs follow.
    """
    backends: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for part in system_info.split("|"):
        piece = part.strip()
        if not piece:
            continue
        if " : " in piece:
            backend, _, piece = piece.partition(" : ")
            current = backends.setdefault(backend.strip(), {})
        name, _, value = piece.partition("=")
        if current is not None and name.strip():
            current[name.strip()] = value.strip()
    return backends


def cpu_flags() -> set[str]:
    """The CPU's feature flags as the kernel reports them (empty where it does not)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.partition(":")[2].split())
    return set()


def check_build(system_info: str | None = None, flags: set[str] | None = None) -> Iterator[Check]:
    """What llama.cpp was compiled with, from its own report, and whether this CPU can use it well."""
    if system_info is None:
        try:
            import llama_cpp

            system_info = llama_cpp.llama_print_system_info().decode("utf-8", "replace")
        except Exception as e:
            yield _fail("llama.cpp build", f"cannot read llama.cpp's build report: {e}", "re-run ./install.sh")
            return
    backends = build_features(system_info)
    cpu = backends.get("CPU", {})
    on = [name for name, value in cpu.items() if value == "1"]
    gpu = [b for b in backends if b != "CPU"]
    yield _ok(
        "llama.cpp build",
        f"backends: {', '.join(['CPU', *gpu])}; CPU features: {', '.join(on) or 'none reported'}",
    )
    flags = cpu_flags() if flags is None else flags
    if platform.machine() in ("x86_64", "AMD64") and flags and "avx2" not in flags:
        yield _warn(
            "cpu",
            "this CPU has no AVX2: llama.cpp's fast kernels cannot run, so generation is several times slower",
            "use a machine with AVX2 (most x86-64 CPUs since 2013) or a GPU build",
        )


# --- GPUs -----------------------------------------------------------------------------


class Gpu(msgspec.Struct, frozen=True):
    name: str
    total_bytes: int
    driver: str


def nvml_gpus() -> list[Gpu]:
    """The NVIDIA GPUs NVML sees, with the driver version; [] without a driver or NVML."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return []
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else str(driver)
        found = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            found.append(Gpu(name, int(pynvml.nvmlDeviceGetMemoryInfo(handle).total), driver))
        return found
    except pynvml.NVMLError:
        return []
    finally:
        with suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def check_gpus(gpus: list[Gpu], gpu_build: bool) -> Iterator[Check]:
    if not gpus:
        yield _ok("gpu", "no NVIDIA GPU found (NVML): models run on the CPU")
        return
    for i, g in enumerate(gpus):
        yield _ok(f"gpu {i}", f"{g.name}, {format_bytes(g.total_bytes)}, driver {g.driver}")
    if not gpu_build:
        yield _warn(
            "gpu build",
            f"{len(gpus)} NVIDIA GPU{'s' if len(gpus) > 1 else ''} found, but llama.cpp was built for the CPU only",
            f"rebuild with CUDA (needs the CUDA toolkit): {CUDA_REINSTALL}",
        )


def gpu_offload_supported() -> bool:
    try:
        import llama_cpp

        return bool(llama_cpp.llama_supports_gpu_offload())
    except Exception:
        return False


# --- memory, disk, models ----------------------------------------------------------------


def check_memory(settings: Settings, devices: list[Device], library: Library) -> Iterator[Check]:
    cpu = devices[0]
    ram = f"RAM: {format_bytes(cpu.free_bytes)} available of {format_bytes(cpu.total_bytes)} ({cpu.limit})"
    if cpu.free_bytes < 1024**3:
        yield _warn("memory", ram, "free memory (close programs or unload models with `spark stop MODEL`)")
    else:
        yield _ok("memory", ram)
    folder = settings.models_dir
    free = free_bytes(folder)
    disk = f"{format_bytes(free)} free for models in {folder}"
    if free < 2 * 1024**3:
        yield _warn("disk", disk, "free disk space or set SPARK_HOME to a larger disk")
    else:
        yield _ok("disk", disk)
    models = library.list()
    yield from _missing_files(models)
    yield from _largest_fits(settings, devices, models)


def _missing_files(models: list[ModelEntry]) -> Iterator[Check]:
    """Installed models whose files are gone (moved or deleted): each fails at its first request."""
    for entry in models:
        adapters = [a.path for a in entry.lora if not Path(a.path).is_file()]
        files = [p for p in entry.shards if not Path(p).is_file()]
        if files:
            fix = f"put it back, or `spark rm {entry.id}` and pull it again"
            yield _warn(f"model {entry.id}", f"its file {', '.join(files)} is missing", fix)
        elif entry.mmproj_path and not Path(entry.mmproj_path).is_file():
            fix = f"put it back, or `spark detach {entry.id} --projector`"
            yield _warn(f"model {entry.id}", f"its vision projector {entry.mmproj_path} is missing", fix)
        elif adapters:
            fix = f"put it back, or `spark detach {entry.id}`"
            yield _warn(f"model {entry.id}", f"its LoRA adapter {', '.join(adapters)} is missing", fix)


def _largest_fits(settings: Settings, devices: list[Device], models: list[ModelEntry]) -> Iterator[Check]:
    """Per device, the largest installed model that fits there now (with nothing else unloaded)."""
    if not models:
        yield _warn("models", "no model installed", "spark pull bartowski/SmolLM2-135M-Instruct-GGUF")
        return
    best: dict[str, tuple[int, str]] = {}
    refused: list[str] = []
    by_id = {entry.id: entry for entry in models}
    for entry in models:
        try:
            draft = by_id.get(entry.settings.draft_model or "")
            estimate = estimate_load(model_shape(entry.info), load_options(entry, settings, draft))
            plan = plan_placement(estimate, devices, [])
        except PlacementRefused:
            refused.append(entry.id)
            continue
        except SparkError:
            continue
        where = next((d for d in plan.devices if d != "cpu"), "cpu")
        if estimate.total_bytes > best.get(where, (-1, ""))[0]:
            best[where] = (estimate.total_bytes, entry.id)
    for device in devices:
        if device.id in best:
            size, model_id = best[device.id]
            yield _ok(
                f"fits on {device.id}",
                f"largest installed model that fits now: {model_id} (needs {format_bytes(size)})",
            )
    if refused:
        yield _warn(
            "models",
            f"{len(refused)} installed model{'s' if len(refused) > 1 else ''} do not fit now: {', '.join(refused)}",
            "see the arithmetic with `spark show MODEL`; a smaller context, KV type q8_0 or a smaller quant helps",
        )


# --- folders and secrets -------------------------------------------------------------------


def _writable(path: Path) -> bool:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return os.access(probe, os.W_OK)


def check_folders(settings: Settings) -> Iterator[Check]:
    folders = {"config": settings.config_dir, "data": settings.data_dir, "cache": settings.cache_dir}
    for name, path in folders.items():
        if not _writable(path):
            yield _fail(f"{name} folder", f"{path} is not writable", "fix its owner or permissions, or set SPARK_HOME")
        elif not path.exists():
            yield _ok(f"{name} folder", f"{path} (created when first needed)")
        else:
            yield _ok(f"{name} folder", str(path))
    yield from _secret_file(admin_token_path(settings), "admin token")
    config = config_path()
    if config.is_file() and _holds_secret(config):
        yield from _secret_file(config, "config.toml (holds a password or token)")


def _holds_secret(config: Path) -> bool:
    try:
        data = tomllib.loads(config.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return False
    return bool(data.get("admin_password") or data.get("hf_token"))


def _secret_file(path: Path, what: str) -> Iterator[Check]:
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        yield _fail(what, f"{path} can be read by other users (mode {stat.filemode(mode)})", f"chmod 600 {path}")
    else:
        yield _ok(what, f"{path} is private (mode {stat.filemode(mode)})")


# --- the server and its port -----------------------------------------------------------------


class SettingsSeen(msgspec.Struct, frozen=True, kw_only=True):
    """The settings the admin-password and threads checks judge: the running server's, read through
    its admin API, or this shell's when no server runs (or its settings cannot be read)."""

    whose: str  # said with each finding that uses them
    server: ServerInfo | None  # the running server
    problem: str = ""  # why the running server's settings could not be read
    host: str  # the address the server listens on (or would)
    threads: int  # 0: one per physical core
    config_file: str  # the config.toml those settings read
    admin_password: str = ""  # where it is set (a variable or a config file); "" when not set
    password_twice: bool = False  # set both in the environment and in config.toml: the environment wins


def settings_seen(settings: Settings, env: dict[str, str] | None = None) -> SettingsSeen:
    """The running server's settings when one runs (a server started with SPARK_ADMIN_PASSWORD has
    one whatever this shell's environment says), else this shell's (`env`, the environment)."""
    env = dict(os.environ) if env is None else env
    info = read_server_info(settings)
    if info is None:
        return _local_seen(settings, env, "this shell's settings; no server is running", None)
    try:
        return _server_seen(settings, info)
    except SparkError as e:
        return _local_seen(settings, env, "this shell's settings: the running server's cannot be read", info, e.message)


def _server_seen(settings: Settings, info: ServerInfo) -> SettingsSeen:
    """The running server's settings, from GET /api/settings with its local admin token (`SparkError`
    when that fails)."""
    found = local_server(settings)
    if found is None:
        raise SparkError("it has stopped")
    try:
        view = msgspec.json.decode(AdminClient(*found).get("/api/settings"), type=SettingsView)
    except (SparkError, msgspec.DecodeError) as e:
        raise SparkError(f"GET {info.url}/api/settings failed: {e}") from None
    values = {s.name: s for s in view.settings}
    if not {"admin_password", "threads"} <= set(values):  # a server of another version
        raise SparkError(f"GET {info.url}/api/settings does not give admin_password and threads")
    password = values["admin_password"]
    config = Path(view.config_file)
    where = {"env": f"{ENV_PREFIX}ADMIN_PASSWORD", "config.toml": str(config)}.get(password.source, "an argument")
    return SettingsSeen(
        whose="the running server's settings",
        server=info,
        host=info.host,
        threads=int(values["threads"].value or 0),
        config_file=str(config),
        admin_password=where if password.is_set else "",
        password_twice=password.source == "env" and config.is_file() and _holds_key(config, "admin_password"),
    )


def _local_seen(
    settings: Settings, env: dict[str, str], whose: str, server: ServerInfo | None, problem: str = ""
) -> SettingsSeen:
    var = f"{ENV_PREFIX}ADMIN_PASSWORD"
    config = config_path(env)
    in_env = bool(env.get(var))
    in_config = config.is_file() and _holds_key(config, "admin_password")
    return SettingsSeen(
        whose=whose,
        server=server,
        problem=problem,
        host=server.host if server is not None else settings.host,
        threads=settings.threads,
        config_file=str(config),
        admin_password=(var if in_env else str(config)) if settings.admin_password else "",
        password_twice=in_env and in_config,
    )


def check_server(settings: Settings, seen: SettingsSeen) -> Iterator[Check]:
    info = seen.server
    if info is not None:
        yield _ok("server", f"running (pid {info.pid}) on {info.url}, listening on {info.host}:{info.port}")
        if seen.problem:
            yield _warn(
                "server settings",
                f"the running server's settings cannot be read ({seen.problem}): the checks below judge this shell's",
                "run `spark doctor` as the user that started the server",
            )
    else:
        taken_by = port_owner(settings.host, settings.port)
        if taken_by is None:
            yield _ok("server", f"not running; port {settings.port} on {settings.host} is free")
        else:
            yield _fail(
                "port",
                f"port {settings.port} on {settings.host} is taken by {taken_by}",
                "stop that program, or serve on another port: "
                f"SPARK_PORT={free_port_near(settings.host, settings.port)} spark serve",
            )
    yield from _admin_password(seen)


def _can_bind(host: str, port: int) -> bool:
    """Whether a server could listen on host:port now."""
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with closing(socket.socket(family, socket.SOCK_STREAM)) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        return True
    except OSError:
        return False


def port_owner(host: str, port: int) -> str | None:
    """None when host:port can be listened on; else who holds it ("pid 123 (nginx)" when it can tell)."""
    if _can_bind(host, port):
        return None
    with suppress(psutil.Error, OSError):
        for conn in psutil.net_connections(kind="inet"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                return f"pid {conn.pid} ({psutil.Process(conn.pid).name()})"
    return "another program"


def free_port_near(host: str, port: int) -> int:
    """The first port after `port` that host can listen on now (one the system picks when the next
    hundred are all taken)."""
    for candidate in range(port + 1, min(port + 100, 65535) + 1):
        if _can_bind(host, candidate):
            return candidate
    family = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0][0]
    with closing(socket.socket(family, socket.SOCK_STREAM)) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _admin_password(seen: SettingsSeen) -> Iterator[Check]:
    var = f"{ENV_PREFIX}ADMIN_PASSWORD"
    if not seen.admin_password:
        if seen.host not in _LOOPBACK:
            yield _warn(
                "admin password",
                f"the server listens on {seen.host} (beyond this machine) and no admin password is set "
                f"({seen.whose}): the admin API and console can only be used from the server's machine",
                f"set one: {var}='choose-a-password' spark serve",
            )
        else:
            yield _ok(
                "admin password",
                f"not set ({seen.whose}): the admin API and console work from this machine only",
            )
        return
    if seen.password_twice:
        yield _warn(
            "admin password",
            f"set both in {var} and in {seen.config_file} ({seen.whose}): the environment wins",
            "keep one of the two",
        )
    else:
        yield _ok("admin password", f"set in {seen.admin_password} ({seen.whose})")


def _holds_key(config: Path, key: str) -> bool:
    try:
        return key in tomllib.loads(config.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return False


# --- CPU load and threads ---------------------------------------------------------------------


def busy_processes(interval: float = 0.5) -> list[tuple[int, str, float]]:
    """Other processes using more than `BUSY_PROCESS_PERCENT` of a core, as (pid, name, percent)."""
    me = os.getpid()
    procs = [p for p in psutil.process_iter(["pid", "name", "cmdline"]) if p.pid != me]
    for p in procs:
        with suppress(psutil.Error):
            p.cpu_percent(None)
    time.sleep(interval)
    busy = []
    for p in procs:
        with suppress(psutil.Error):
            percent = p.cpu_percent(None)
            if percent > BUSY_PROCESS_PERCENT:
                command = " ".join(p.info["cmdline"] or []) or p.info["name"] or "?"
                busy.append((p.pid, command[:60], percent))
    return sorted(busy, key=lambda b: -b[2])


def check_load(seen: SettingsSeen, busy: list[tuple[int, str, float]], cores: int | None = None) -> Iterator[Check]:
    cores = cores or psutil.cpu_count(logical=False) or os.cpu_count() or 1
    threads = seen.threads or cores
    if threads > cores:
        yield _warn(
            "threads",
            f"threads = {threads} ({seen.whose}) but this machine has {cores} physical cores: "
            "llama.cpp's threads spin and oversubscribed cores make generation much slower",
            f"SPARK_THREADS={cores} (or 0 for one thread per physical core)",
        )
    else:
        per_runner = f"{threads} thread{'s' if threads > 1 else ''} per runner"
        yield _ok("threads", f"{per_runner}, {cores} physical cores ({seen.whose})")
    if busy:
        top = ", ".join(f"{name} (pid {pid}, {pct:.0f} %)" for pid, name, pct in busy[:5])
        yield _warn(
            "cpu load",
            f"other processes are busy: {top}; llama.cpp's threads spin, so shared cores slow generation badly",
            "stop them, or lower SPARK_THREADS to leave them a core",
        )
    else:
        yield _ok("cpu load", "no other process is busy")


# --- a short real generation -----------------------------------------------------------------


def self_test(settings: Settings, library: Library) -> Iterator[Check]:
    """Load the default model (or the smallest installed one) and generate a few tokens."""
    models = library.list()
    if not models:
        yield _warn("self-test", "skipped: no model installed", "spark pull bartowski/SmolLM2-135M-Instruct-GGUF")
        return
    default = next((m for m in models if m.id == settings.default_model), None)
    entry = default or min(models, key=lambda m: m.size_bytes)
    if entry.info.is_embedding:
        yield _warn("self-test", f"skipped: {entry.id} is an embedding model", "")
        return
    from spark.embedded import Spark

    request = ChatRequest(
        model=entry.id,
        messages=[Message("user", "Count from one to ten.")],
        sampling=SamplingParams(max_tokens=SELF_TEST_TOKENS, temperature=0.0),
    )
    try:
        started = time.perf_counter()
        with Spark(settings) as s:
            first: float | None = None
            prompt_rate = 0.0
            done: Done | None = None
            for event in s.events(request):
                if isinstance(event, PromptDone) and event.seconds > 0:
                    prompt_rate = event.evaluated_tokens / event.seconds
                elif isinstance(event, TextDelta) and first is None:
                    first = time.perf_counter()
                elif isinstance(event, Done):
                    done = event
            ended = time.perf_counter()
    except SparkError as e:
        yield _fail("self-test", f"{entry.id} failed: {e.message}", "see docs/troubleshooting.md")
        return
    if done is None or first is None:
        yield _fail("self-test", f"{entry.id} generated nothing", "see docs/troubleshooting.md")
        return
    tokens = done.usage.completion_tokens
    decode_rate = (tokens - 1) / (ended - first) if tokens > 1 and ended > first else 0.0
    yield _ok(
        "self-test",
        f"{entry.id}: loaded and answered in {ended - started:.1f} s; prompt {prompt_rate:.0f} tokens/s, "
        f"decode {decode_rate:.1f} tokens/s ({tokens} tokens)",
    )


# --- all together ------------------------------------------------------------------------------


def run_checks(settings: Settings, *, self_test_model: bool = True) -> Report:
    """Every check, in the order `spark doctor` prints them."""
    checks: list[Check] = [*check_versions(), *check_build()]
    checks += check_gpus(nvml_gpus(), gpu_offload_supported())
    seen = settings_seen(settings)
    with Library(settings) as library:
        steps: list[Callable[[], Iterator[Check]]] = [
            lambda: check_memory(settings, detect_devices(settings), library),
            lambda: check_folders(settings),
            lambda: check_server(settings, seen),
            lambda: check_load(seen, busy_processes()),
        ]
        if self_test_model:
            steps.append(lambda: self_test(settings, library))
        for step in steps:
            try:
                checks += step()
            except Exception as e:  # one broken check must not hide the others
                checks.append(_fail("doctor", f"a check failed unexpectedly: {type(e).__name__}: {e}"))
    return Report(checks)


def report_json(report: Report) -> bytes:
    out: dict[str, Any] = {"spark": spark.__version__, "failed": report.failed, "checks": report.checks}
    return msgspec.json.format(msgspec.json.encode(out), indent=2)
