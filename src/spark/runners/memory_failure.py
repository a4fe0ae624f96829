"""A model's load that memory failed: the same load is refused at once while no more memory is free."""

from __future__ import annotations

import msgspec

from spark.placement import Plan
from spark.types import LoadOptions
from spark.units import format_bytes


class MemoryFailure(msgspec.Struct, frozen=True):
    """A load that memory failed, although the plan let it through (the machine had less to give
    than it said: a cgroup, an address-space limit, another program)."""

    options: LoadOptions
    free_bytes: dict[str, int]  # the plan's free memory per device then
    message: str

    def repeats(self, options: LoadOptions, plan: Plan) -> bool:
        """Whether loading with `options` under `plan` would meet the same end: the same options, and
        no device has a tenth more free than then."""
        return options == self.options and all(
            plan.free_bytes.get(d, 0) <= self.free_bytes.get(d, 0) * 1.1 for d in plan.devices
        )

    def explain(self, model_id: str, plan: Plan) -> str:
        free = ", ".join(f"{d}: {format_bytes(plan.free_bytes.get(d, 0))} free" for d in plan.devices)
        return (
            f"{model_id} failed to load for lack of memory with the same settings and no more memory "
            f"free than now ({free}); change its settings and it is tried again. It failed with: {self.message}"
        )
