"""`spark doctor`'s checks, each with the environment faked where it must be (no GPU here)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from spark import doctor
from spark.doctor import (
    CUDA_REINSTALL,
    Check,
    Gpu,
    build_features,
    busy_processes,
    check_build,
    check_folders,
    check_gpus,
    check_load,
    check_memory,
    check_server,
    free_port_near,
    nvml_gpus,
    port_owner,
    self_test,
    settings_seen,
)
from spark.library import Library
from spark.placement import Device
from spark.server.admin_auth import admin_token_path, write_admin_token
from spark.server.discovery import remove_server_info, write_server_info
from spark.settings import config_path, load_settings

CPU_ONLY = (
    "CPU : SSE3 = 1 | SSSE3 = 1 | AVX = 1 | AVX2 = 1 | F16C = 1 | FMA = 1 | AVX512 = 0 | LLAMAFILE = 1 | "
    "OPENMP = 1 | REPACK = 1 | "
)
WITH_CUDA = "CUDA : ARCHS = 890 | USE_GRAPHS = 1 | PEER_MAX_BATCH_SIZE = 128 | " + CPU_ONLY


def by_name(checks: list[Check] | Iterator[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_the_build_report_is_read_from_llama_cpp_itself() -> None:
    features = build_features(WITH_CUDA)
    assert set(features) == {"CUDA", "CPU"}
    assert features["CPU"]["AVX2"] == "1" and features["CPU"]["AVX512"] == "0"
    assert features["CUDA"]["ARCHS"] == "890"
    found = by_name(check_build(WITH_CUDA, {"avx2"}))["llama.cpp build"]
    assert found.status == "ok"
    assert "backends: CPU, CUDA" in found.message and "AVX2" in found.message and "AVX512," not in found.message
    real = by_name(check_build())["llama.cpp build"]  # this machine's own build
    assert real.status == "ok" and real.message.startswith("backends: CPU")


def test_a_cpu_without_avx2_is_a_warning_on_x86(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor.platform, "machine", lambda: "x86_64")
    cpu = by_name(check_build(CPU_ONLY, {"sse3", "avx", "fma"}))["cpu"]
    assert cpu.status == "warn" and "no AVX2" in cpu.message
    assert "cpu" not in by_name(check_build(CPU_ONLY, {"sse3", "avx", "avx2"}))


class _FakeNVML(types.ModuleType):
    """What `pynvml` answers on a machine with two GPUs."""

    class NVMLError(Exception):
        pass

    def __init__(self, gpus: list[tuple[str, int]]) -> None:
        super().__init__("pynvml")
        self.gpus = gpus

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"565.57.01"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self.gpus[handle][0]

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(total=self.gpus[handle][1], free=self.gpus[handle][1] // 2)


def test_gpus_come_from_nvml_and_a_cpu_only_build_gets_the_reinstall_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNVML([("NVIDIA RTX 4090", 24 * 2**30), ("NVIDIA T4", 16 * 2**30)]))
    gpus = nvml_gpus()
    assert gpus == [Gpu("NVIDIA RTX 4090", 24 * 2**30, "565.57.01"), Gpu("NVIDIA T4", 16 * 2**30, "565.57.01")]
    checks = by_name(check_gpus(gpus, gpu_build=False))
    assert checks["gpu 0"].message == "NVIDIA RTX 4090, 24.0 GiB, driver 565.57.01"
    assert checks["gpu build"].status == "warn" and checks["gpu build"].fix.endswith(CUDA_REINSTALL)
    assert "gpu build" not in by_name(check_gpus(gpus, gpu_build=True))


def test_no_gpu_is_fine() -> None:
    assert [c.status for c in check_gpus([], gpu_build=False)] == ["ok"]


def _library_with(path: Path) -> Library:
    library = Library(load_settings())
    library.add_local(path, model_id="tiny")
    return library


def test_memory_says_the_largest_model_that_fits_and_which_do_not(tiny_llama: Path) -> None:
    settings = load_settings()
    with _library_with(tiny_llama) as library:
        roomy = [Device(id="cpu", kind="cpu", name="CPU RAM", total_bytes=2**34, free_bytes=2**33)]
        checks = by_name(check_memory(settings, roomy, library))
        assert checks["memory"].status == "ok" and "8.0 GiB available of 16.0 GiB" in checks["memory"].message
        assert checks["disk"].status == "ok"
        assert "largest installed model that fits now: smollm2-135m-instruct-q4_1" in checks["fits on cpu"].message
        tight = [Device(id="cpu", kind="cpu", name="CPU RAM", total_bytes=2**20, free_bytes=2**19)]
        checks = by_name(check_memory(settings, tight, library))
        assert checks["memory"].status == "warn"
        assert checks["models"].status == "warn" and "tiny" in checks["models"].message
        assert "fits on cpu" not in checks


def test_a_model_whose_file_or_adapter_is_gone_is_named_with_the_fix(
    tiny_llama: Path, tiny_lora: Path, tiny_mmproj: Path, tmp_path: Path
) -> None:
    settings = load_settings()
    roomy = [Device(id="cpu", kind="cpu", name="CPU RAM", total_bytes=2**34, free_bytes=2**33)]
    moved = shutil.copyfile(tiny_llama, tmp_path / "moved.gguf")
    adapter = shutil.copyfile(tiny_lora, tmp_path / "adapter.gguf")
    projector = shutil.copyfile(tiny_mmproj, tmp_path / "mmproj.gguf")
    with _library_with(tiny_llama) as library:
        library.add_local(moved, model_id="moved")
        library.add_local(tiny_llama, model_id="seeing", mmproj=projector)
        library.attach("tiny", adapter)
        assert not any(name.startswith("model ") for name in by_name(check_memory(settings, roomy, library)))
        moved.unlink()
        adapter.unlink()
        projector.unlink()
        checks = by_name(check_memory(settings, roomy, library))
    assert checks["model seeing"].message == f"its vision projector {projector} is missing"
    assert checks["model seeing"].fix == "put it back, or `spark detach seeing --projector`"
    assert checks["model moved"].status == "warn" and str(moved) in checks["model moved"].message
    assert checks["model moved"].fix == "put it back, or `spark rm moved` and pull it again"
    assert "its LoRA adapter" in checks["model tiny"].message and checks["model tiny"].fix.endswith(
        "`spark detach tiny`"
    )


def test_secrets_readable_by_others_fail_with_the_chmod(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings()
    write_admin_token(settings)
    assert by_name(check_folders(settings))["admin token"].status == "ok"
    token = admin_token_path(settings)
    token.chmod(0o644)
    found = by_name(check_folders(settings))["admin token"]
    assert found.status == "fail" and found.fix == f"chmod 600 {token}"

    config = config_path()
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('# mine\nadmin_password = "hunter2"\n')
    config.chmod(0o644)
    found = by_name(check_folders(settings))["config.toml (holds a password or token)"]
    assert found.status == "fail" and found.fix == f"chmod 600 {config}"
    config.chmod(0o600)
    assert by_name(check_folders(settings))["config.toml (holds a password or token)"].status == "ok"


def test_an_unwritable_folder_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings()
    monkeypatch.setattr(doctor.os, "access", lambda path, mode: False)
    assert all(by_name(check_folders(settings))[f"{n} folder"].status == "fail" for n in ("config", "data", "cache"))


def test_a_taken_port_names_who_holds_it() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert port_owner("127.0.0.1", port) == f"pid {os.getpid()} ({doctor.psutil.Process().name()})"
        settings = load_settings(port=port)
        found = by_name(check_server(settings, settings_seen(settings, env={})))["port"]
        assert found.status == "fail" and f"SPARK_PORT={free_port_near('127.0.0.1', port)} spark serve" in found.fix
    assert port_owner("127.0.0.1", port) is None


def _two_listeners() -> tuple[socket.socket, socket.socket]:
    """Listening sockets on two ports in a row."""
    for _ in range(50):
        first = socket.socket()
        first.bind(("127.0.0.1", 0))
        second = socket.socket()
        try:
            second.bind(("127.0.0.1", first.getsockname()[1] + 1))
        except OSError:
            first.close()
            second.close()
            continue
        first.listen()
        second.listen()
        return first, second
    raise AssertionError("no two free ports in a row")


def test_the_port_suggested_instead_of_a_taken_one_is_free() -> None:
    first, second = _two_listeners()
    with first, second:
        port = first.getsockname()[1]
        found = by_name(check_server(load_settings(port=port), settings_seen(load_settings(), env={})))["port"]
        suggested = free_port_near("127.0.0.1", port)
        assert suggested > port + 1 and port_owner("127.0.0.1", suggested) is None  # port + 1 is taken too
        assert f"SPARK_PORT={suggested} spark serve" in found.fix


def test_a_running_server_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings()
    write_server_info(settings, "127.0.0.1", 8123)
    try:
        found = by_name(check_server(settings, settings_seen(settings, env={})))["server"]
        assert found.status == "ok" and "http://127.0.0.1:8123" in found.message and str(os.getpid()) in found.message
    finally:
        remove_server_info(settings)


def test_a_running_server_whose_settings_cannot_be_read_is_judged_by_this_shells() -> None:
    settings = load_settings(threads=3)
    write_server_info(settings, "127.0.0.1", 8123)  # no admin token: another user's server, say
    try:
        seen = settings_seen(settings, env={})
        checks = by_name([*check_server(settings, seen), *check_load(seen, busy=[], cores=4)])
    finally:
        remove_server_info(settings)
    assert checks["server settings"].status == "warn" and "admin.token" in checks["server settings"].message
    assert checks["threads"].message == "3 threads per runner, 4 physical cores (this shell's settings: " + (
        "the running server's cannot be read)"
    )
    with socket.socket() as gone:  # a port nothing listens on: the server does not answer
        gone.bind(("127.0.0.1", 0))
        port = gone.getsockname()[1]
    write_server_info(settings, "127.0.0.1", port)
    write_admin_token(settings)
    try:
        seen = settings_seen(settings, env={})
    finally:
        remove_server_info(settings)
    assert seen.problem.startswith(f"GET http://127.0.0.1:{port}/api/settings failed")
    assert seen.threads == 3 and seen.whose == "this shell's settings: the running server's cannot be read"


def test_serving_the_network_without_an_admin_password_warns() -> None:
    exposed = load_settings(host="0.0.0.0", port=1)  # port 1: a check that must not be able to bind it
    found = by_name(check_server(exposed, settings_seen(exposed, env={})))["admin password"]
    assert found.status == "warn" and "SPARK_ADMIN_PASSWORD" in found.fix
    local = load_settings(port=1)
    found = by_name(check_server(local, settings_seen(local, env={})))["admin password"]
    assert found.status == "ok"
    assert found.message == (
        "not set (this shell's settings; no server is running): the admin API and console work from this machine only"
    )


def test_an_admin_password_both_in_env_and_config_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    config = config_path()
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('admin_password = "from-config"\n')
    monkeypatch.setenv("SPARK_ADMIN_PASSWORD", "from-env")
    settings = load_settings()
    found = by_name(check_server(settings, settings_seen(settings, env=dict(os.environ))))["admin password"]
    assert found.status == "warn" and "the environment wins" in found.message
    monkeypatch.delenv("SPARK_ADMIN_PASSWORD")
    settings = load_settings()
    found = by_name(check_server(settings, settings_seen(settings, env=dict(os.environ))))["admin password"]
    assert found.status == "ok" and str(config) in found.message


def test_threads_beyond_the_cores_and_busy_processes_warn() -> None:
    checks = by_name(check_load(settings_seen(load_settings(threads=8), env={}), busy=[], cores=2))
    assert checks["threads"].status == "warn" and "SPARK_THREADS=2" in checks["threads"].fix
    assert checks["cpu load"].status == "ok"
    seen = settings_seen(load_settings(threads=0), env={})
    checks = by_name(check_load(seen, busy=[(42, "stress --cpu 2", 180.0)], cores=2))
    assert checks["threads"].status == "ok"
    assert checks["cpu load"].status == "warn" and "stress --cpu 2 (pid 42, 180 %)" in checks["cpu load"].message


def test_a_spinning_process_is_seen() -> None:
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        # on a machine busy with other tests a half-second window may give the spinner too little of a core
        seen = any(spinner.pid in [pid for pid, _, _ in busy_processes(interval=0.5)] for _ in range(6))
        assert seen
    finally:
        spinner.kill()
        spinner.wait()


def test_the_self_test_generates_with_a_real_model(tiny_llama: Path) -> None:
    settings = load_settings(default_model="tiny")
    with _library_with(tiny_llama) as library:
        found = by_name(self_test(settings, library))["self-test"]
    assert found.status == "ok", found
    assert found.message.startswith("tiny: loaded and answered") and "decode" in found.message


def test_the_self_test_says_when_a_model_cannot_load(tmp_path: Path, tiny_llama: Path) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(tiny_llama.read_bytes())
    settings = load_settings(default_model="broken")
    with Library(settings) as library:
        library.add_local(broken, model_id="broken")
        with broken.open("r+b") as f:  # damaged after it was added: llama.cpp cannot load it
            f.truncate(1 << 16)
        found = by_name(self_test(settings, library))["self-test"]
    assert found.status == "fail" and found.message.startswith("broken failed:")
