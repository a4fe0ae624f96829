"""The model library: installed models, their GGUF metadata and settings, and Hub pulls.

lib = Library(load_settings())
lib.add_local("~/models/qwen2.5-0.5b-instruct-q4_k_m.gguf")
pull(lib, "bartowski/SmolLM2-360M-Instruct-GGUF:Q8_0")
lib.list()
"""

from spark.library.bundled import BUNDLED_ID, bundled_model_path
from spark.library.catalog import Library
from spark.library.download import DownloadProgress, ProgressFn
from spark.library.entry import (
    ModelEntry,
    ModelSettings,
    check_flash_attention,
    check_model_settings,
    check_sampling,
)
from spark.library.hub import Hub, HubFile, HubModel
from spark.library.metadata import GGUFInfo, read_gguf_info
from spark.library.naming import check_model_id, model_id_from_filename
from spark.library.pulling import PullPlan, PullResult, plan_pull, pull, pull_adapter, run_pull
from spark.library.spec import HubSpec, LocalSpec, parse_pull_spec

__all__ = [
    "BUNDLED_ID",
    "DownloadProgress",
    "GGUFInfo",
    "Hub",
    "HubFile",
    "HubModel",
    "HubSpec",
    "Library",
    "LocalSpec",
    "ModelEntry",
    "ModelSettings",
    "ProgressFn",
    "PullPlan",
    "PullResult",
    "bundled_model_path",
    "check_flash_attention",
    "check_model_id",
    "check_model_settings",
    "check_sampling",
    "model_id_from_filename",
    "parse_pull_spec",
    "plan_pull",
    "pull",
    "pull_adapter",
    "read_gguf_info",
    "run_pull",
]
