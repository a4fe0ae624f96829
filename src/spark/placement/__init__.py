"""Placement by memory: the devices, what a model will need, and where it goes."""

from spark.placement.devices import Device, cpu_device, detect_devices, gpu_devices
from spark.placement.estimate import (
    MemoryEstimate,
    ModelShape,
    estimate_load,
    estimate_memory,
    model_shape,
)
from spark.placement.planner import Eviction, LoadedModel, Plan, plan_placement

__all__ = [
    "Device",
    "Eviction",
    "LoadedModel",
    "MemoryEstimate",
    "ModelShape",
    "Plan",
    "cpu_device",
    "detect_devices",
    "estimate_load",
    "estimate_memory",
    "gpu_devices",
    "model_shape",
    "plan_placement",
]
