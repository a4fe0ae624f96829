"""The planner with simulated device inventories: GPUs, splits, CPU, evictions, refusals."""

from __future__ import annotations

import pytest

from spark.errors import PlacementRefused
from spark.placement.devices import Device
from spark.placement.estimate import GIB, MIB, MemoryEstimate
from spark.placement.planner import LoadedModel, plan_placement
from spark.types import LoadOptions
from spark.units import format_bytes

N_LAYERS = 32


def model(layer: int = 120 * MIB, kv: int = 16 * MIB, head: int = 200 * MIB, embd: int = 200 * MIB) -> MemoryEstimate:
    """A 7B-ish model: 32 layers of 136 MiB with their KV cache, about 5 GiB in all."""
    return MemoryEstimate(
        n_ctx=4096,
        n_parallel=1,
        kv_type="f16",
        layer_weights=[layer] * N_LAYERS,
        layer_kv=[kv] * N_LAYERS,
        embedding_weights=embd,
        output_weights=head,
        output_weights_gpu=head,
        compute_bytes=300 * MIB,
        host_compute_bytes=20 * MIB,
        host_bytes=40 * MIB,
        runtime_bytes=64 * MIB,
        gpu_context_bytes=384 * MIB,
    )


def cpu(free: float = 20, total: float = 32) -> Device:
    return Device(id="cpu", kind="cpu", name="CPU RAM", total_bytes=int(total * GIB), free_bytes=int(free * GIB))


def gpu(index: int, free: float, total: float = 24, name: str = "RTX 4090") -> Device:
    return Device(
        id=f"cuda:{index}",
        kind="cuda",
        name=name,
        index=index,
        total_bytes=int(total * GIB),
        free_bytes=int(free * GIB),
    )


def loaded(model_id: str, last_used: float, busy: bool = False, **device_gib: float) -> LoadedModel:
    return LoadedModel(
        model_id=model_id,
        busy=busy,
        last_used=last_used,
        device_bytes={d.replace("_", ":"): int(g * GIB) for d, g in device_gib.items()},
    )


def test_whole_model_on_one_gpu() -> None:
    est = model()
    plan = plan_placement(est, [cpu(), gpu(0, free=20)], [])
    assert plan.n_gpu_layers == -1 and plan.devices == ["cuda:0"]
    assert plan.tensor_split is None and plan.main_gpu == 0
    gpu_bytes, cpu_bytes = est.for_layers(-1)
    assert plan.device_bytes == {"cuda:0": gpu_bytes, "cpu": cpu_bytes}
    assert plan.evictions == []
    assert plan.explain() == f"cuda:0 whole model, uses {format_bytes(gpu_bytes)} of the 20.0 GiB free"


def test_partial_offload_takes_as_many_layers_as_fit() -> None:
    est = model()
    plan = plan_placement(est, [cpu(), gpu(0, free=3)], [])
    n = plan.n_gpu_layers
    assert 0 < n <= N_LAYERS
    assert plan.devices == ["cuda:0", "cpu"]
    assert plan.device_bytes["cuda:0"] <= 3 * GIB
    assert est.for_layers(n + 1)[0] > 3 * GIB  # one more layer would not fit
    assert plan.device_bytes["cuda:0"] + plan.device_bytes["cpu"] == sum(est.for_layers(n))
    assert f"cuda:0 {n}/{N_LAYERS + 1} layers + cpu" in plan.explain()
    assert "free on cuda:0" in plan.explain() and "free on cpu" in plan.explain()


def test_prefers_the_gpu_with_most_free_memory() -> None:
    plan = plan_placement(model(), [cpu(), gpu(0, free=8), gpu(1, free=20)], [])
    assert plan.devices == ["cuda:1"] and plan.n_gpu_layers == -1
    # with several GPUs llama.cpp must be told to use only this one
    assert plan.main_gpu == 1 and plan.tensor_split == [0.0, 1.0]


def test_two_uneven_gpus_split_in_proportion_to_free_memory() -> None:
    est = model()  # ~5.1 GiB on GPUs: fits neither alone, both together
    plan = plan_placement(est, [cpu(), gpu(0, free=4.5), gpu(1, free=2.5)], [])
    assert plan.n_gpu_layers == -1
    assert plan.devices == ["cuda:0", "cuda:1"]
    assert plan.tensor_split is not None
    a, b = plan.tensor_split
    assert a + b == pytest.approx(1.0)
    fixed = (est.compute_bytes + est.gpu_context_bytes + est.projector_bytes) / GIB
    assert a / b == pytest.approx((4.5 - fixed) / (2.5 - fixed))
    assert plan.device_bytes["cuda:0"] <= 4.5 * GIB and plan.device_bytes["cuda:1"] <= 2.5 * GIB
    assert plan.main_gpu == 0
    assert plan.explain().startswith(f"cuda:0+cuda:1 split {round(100 * a)}/{round(100 * b)}, ")
    opts = plan.load_options(LoadOptions(model_id="m", path="/m.gguf"))
    assert (opts.n_gpu_layers, opts.main_gpu, opts.tensor_split) == (-1, 0, plan.tensor_split)


def test_no_gpu_means_cpu() -> None:
    est = model()
    plan = plan_placement(est, [cpu(free=12)], [])
    assert plan.devices == ["cpu"] and plan.n_gpu_layers == 0 and plan.tensor_split is None
    assert plan.device_bytes == {"cpu": est.total_bytes}
    assert plan.explain() == f"cpu, uses {format_bytes(est.total_bytes)} of the 12.0 GiB free"
    opts = plan.load_options(LoadOptions(model_id="m", path="/m.gguf", n_gpu_layers=99))
    assert opts.n_gpu_layers == 0 and opts.model_id == "m"


def test_gpu_too_small_for_even_one_layer_falls_back_to_cpu() -> None:
    plan = plan_placement(model(), [cpu(free=12), gpu(0, free=0.5)], [])
    assert plan.devices == ["cpu"] and plan.n_gpu_layers == 0


def test_idle_models_are_evicted_least_recently_used_first() -> None:
    est = model()  # ~5.3 GiB on the CPU
    models = [
        loaded("a", last_used=100, cpu=3),
        loaded("b", last_used=50, cpu=3),
        loaded("c", last_used=200, cpu=3),
    ]
    plan = plan_placement(est, [cpu(free=1, total=10)], models, now=290)
    assert [e.model_id for e in plan.evictions] == ["b", "a"]
    assert plan.evictions[0].reason.startswith("idle 4m; frees 3.0 GiB on cpu")
    assert plan.devices == ["cpu"]
    assert "; evicted b (idle 4m" in plan.explain()


def test_a_busy_model_is_never_evicted() -> None:
    est = model()
    models = [loaded("old-but-busy", last_used=0, busy=True, cpu=3), loaded("newer", last_used=100, cpu=3)]
    plan = plan_placement(est, [cpu(free=3, total=10)], models, now=200)
    assert [e.model_id for e in plan.evictions] == ["newer"]
    with pytest.raises(PlacementRefused) as e:
        plan_placement(est, [cpu(free=1, total=10)], [models[0], loaded("x", 5, busy=True, cpu=3)], now=200)
    assert "old-but-busy busy, x busy" in e.value.message


def test_eviction_keeps_models_whose_memory_does_not_help() -> None:
    est = model()
    models = [
        loaded("on-cpu", last_used=10, cpu=0.5),  # least recently used, but freeing it does not help
        loaded("on-gpu", last_used=20, cuda_0=20),
    ]
    plan = plan_placement(est, [cpu(free=2, total=4), gpu(0, free=3)], models, now=30)
    assert [e.model_id for e in plan.evictions] == ["on-gpu"]
    assert plan.n_gpu_layers == -1 and plan.devices == ["cuda:0"]


def test_eviction_only_when_nothing_fits() -> None:
    # the CPU has room: no GPU model is unloaded to get a faster placement
    models = [loaded("on-gpu", last_used=0, cuda_0=20)]
    plan = plan_placement(model(), [cpu(free=12), gpu(0, free=2)], models)
    assert plan.evictions == [] and plan.n_gpu_layers >= 0


def test_refusal_shows_the_arithmetic() -> None:
    est = model()
    devices = [cpu(free=1.2, total=23.4), gpu(0, free=1.1, total=24, name="RTX 4090")]
    models = [
        loaded("a", last_used=1, busy=True, cuda_0=20, cpu=0.5),
        loaded("b", last_used=2, cuda_0=2),
    ]
    with pytest.raises(PlacementRefused) as e:
        plan_placement(est, devices, models, now=10)
    text = e.value.message
    assert text.startswith(est.describe() + "; ")
    assert "needs 5." in text and "GiB (weights " in text and "4096 tokens x 1 slot" in text
    assert "cpu: 1.2 GiB free of 23.4 GiB" in text
    assert "cuda:0 (RTX 4090): 1.1 GiB free of 24.0 GiB (3.1 GiB once idle models are unloaded)" in text
    assert "2 models loaded (a busy, b)" in text
    assert "1 model loaded (a busy)" in text
    assert e.value.status == 507 and e.value.code == "placement_refused"


def test_max_ram_bounds_the_cpu_through_its_total() -> None:
    # 20 GiB available, but max_ram made the total 8 GiB and a busy model holds 4 of it
    capped = Device(id="cpu", kind="cpu", name="CPU RAM", total_bytes=8 * GIB, free_bytes=20 * GIB)
    with pytest.raises(PlacementRefused) as e:
        plan_placement(model(), [capped], [loaded("big", last_used=0, busy=True, cpu=4)])
    assert "cpu: 4.0 GiB free of 8.0 GiB, 1 model loaded (big busy)" in e.value.message
    plan = plan_placement(model(), [capped], [loaded("big", last_used=0, busy=True, cpu=2)])
    assert plan.devices == ["cpu"] and plan.free_bytes["cpu"] == 6 * GIB


def test_max_loaded_models_evicts_lru_idle() -> None:
    models = [loaded("a", last_used=10, cpu=0.1), loaded("b", last_used=5, cpu=0.1), loaded("c", 20, cpu=0.1)]
    plan = plan_placement(model(), [cpu(free=20)], models, max_loaded_models=2, now=65)
    assert [e.model_id for e in plan.evictions] == ["b", "a"]
    assert plan.evictions[0].reason == "idle 1m; max_loaded_models is 2"
    # under the cap: nothing to do
    assert plan_placement(model(), [cpu(free=20)], models, max_loaded_models=4).evictions == []


def test_max_loaded_models_with_every_model_busy_is_refused() -> None:
    models = [loaded("a", 1, busy=True, cpu=0.1), loaded("b", 2, busy=True, cpu=0.1)]
    with pytest.raises(PlacementRefused) as e:
        plan_placement(model(), [cpu(free=20)], models, max_loaded_models=2)
    assert "max_loaded_models is 2" in e.value.message and "(a, b)" in e.value.message
