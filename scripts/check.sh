#!/usr/bin/env bash
# The code-health gate (CI runs it before the tests): formatting, lint with import order, strict types.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${SPARK_VENV:-.venv}/bin
"$BIN/ruff" format --check src tests bench scripts
"$BIN/ruff" check src tests bench scripts
"$BIN/mypy"
