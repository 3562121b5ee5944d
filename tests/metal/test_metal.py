"""The Metal carrier class: closed, sealed capabilities, the gate before any kernel work."""

from __future__ import annotations

import pytest

import conveyor as cv
from conveyor.engine.tensor import Tensor
from conveyor_metal import Metal, metal
from conveyor_metal._surface import FAMILIES, advertised_plans

torch = pytest.importorskip("torch")


def _metal_tensor(values: list[float], dtype: cv.DType) -> Tensor:
    """A Metal tensor over a CPU buffer: dispatch and the gate run, no kernel can launch."""
    import numpy as np

    from conveyor_metal._storage import _tensor

    buffer = _tensor(np.asarray(values, dtype=dtype.numpy), dtype)
    return Tensor._wrap(Metal._from_buffer(buffer, dtype), cv.Layout((len(values),)), dtype)


class TestMetalClass:
    """Metal is importable, closed and final, and advertises exactly its kernels' plans."""

    def test_metal_is_exported(self) -> None:
        import conveyor_metal

        assert conveyor_metal.__all__ == ["Metal"]

    def test_subclassing_metal_is_refused(self) -> None:
        with pytest.raises(TypeError, match="closed carrier"):
            type("Mine", (Metal,), {})

    def test_capabilities_are_exactly_the_advertised_plans(self) -> None:
        plans = advertised_plans()
        carrier = Metal._from_buffer(torch.zeros(1), cv.float32)
        assert all(carrier.supports_operation_plan(p) for p in plans)
        assert len(carrier.operation_capabilities()) == len(plans)

    def test_every_advertised_name_dispatches_fresh_operations(self) -> None:
        carrier = Metal._from_buffer(torch.zeros(1), cv.float32)
        for name in FAMILIES:
            first, second = carrier.dispatch_op(name), carrier.dispatch_op(name)
            assert first is not second and first._dispatch_carrier_class is Metal

    def test_unadvertised_name_is_refused(self) -> None:
        """Every planned name without a Metal family (and an unknown one) is refused."""
        from conveyor.types.policy import enumerate_plans

        carrier = Metal._from_buffer(torch.zeros(1), cv.float32)
        unadvertised = sorted({p.operation for p in enumerate_plans()} - set(FAMILIES))
        for name in [*unadvertised, "no_such_name"]:
            with pytest.raises(
                NotImplementedError,
                match=f"^{name} on Metal: the carrier does not implement this operation$",
            ):
                carrier.dispatch_op(name)


class TestGateBeforeKernelWork:
    """An unadvertised plan is refused before any lowering, allocation or launch."""

    def test_int16_add_refused_before_engine_exists(self) -> None:
        x = _metal_tensor([1, 2], cv.int16)
        before = list(metal._ENGINE)
        with pytest.raises(cv.UnsupportedOperationPlan) as info:
            cv.add(x, x)
        assert "Metal" in str(info.value)
        assert before == metal._ENGINE  # no engine made: nothing lowered or launched

    def test_views_share_the_buffer(self) -> None:
        x = _metal_tensor([1.0, 2.0, 3.0, 4.0], cv.float32)
        y = cv.reshape(x, shape=(2, 2))
        assert y.carrier is x.carrier and y.shape == (2, 2)
        z = cv.permute(y, axes=(1, 0))
        assert z.carrier is x.carrier and z.layout.strides == (1, 2)
