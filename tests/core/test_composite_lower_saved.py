"""CompositeProvider.lower_saved: how the central VJP reads a composite's saved outer operands."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv
from tests.core.test_definitions import STORAGE, Vendor, _plans, vendor


def _composite(lower_saved: Any) -> type[cv.Carrier]:
    """A definition-backed composite computing ``mul`` into Vendor results."""

    def prepare(carrier: cv.Carrier, invocation: cv.ResolvedInvocation) -> Any:
        a, b = (x.numpy() for x in invocation.operands)
        return cv.PreparedComposite(lambda: cv.ProviderResult(vendor(a * b)))

    cls = type("Lowering", (cv.Carrier,), {})
    provider = cv.CompositeProvider(
        capabilities=_plans("mul"),
        result_carriers=(Vendor,),
        prepare=prepare,
        lower_saved=lower_saved,
    )
    cv.register_carrier_definition(cls, cv.CarrierDefinition(storage=STORAGE, composite=provider))
    return cls


class TestLowerSaved:
    def test_vjp_reads_lowered_operands_only_during_backward(self) -> None:
        """The central mul VJP runs on lowered (Vendor) operands; engine checks do not lower."""
        calls: list[cv.Tensor] = []

        def lower(carrier: cv.Carrier, tensor: cv.Tensor) -> cv.Tensor:
            calls.append(tensor)
            return vendor(tensor.numpy())

        cls = _composite(lower)
        a = cv.tensor([1.0, 2.0], cv.float32, carrier=cls, requires_grad=True)
        b = cv.tensor([3.0, 5.0], cv.float32, carrier=cls, requires_grad=True)
        out = cv.mul(a, b)
        assert calls == []
        out.backward(vendor([1.0, 1.0]))
        assert [t is a or t is b for t in calls] == [True, True]
        assert a.grad is not None and b.grad is not None
        np.testing.assert_array_equal(a.grad.numpy(), [3.0, 5.0])
        np.testing.assert_array_equal(b.grad.numpy(), [1.0, 2.0])

    def test_non_callable_lower_saved_refused(self) -> None:
        with pytest.raises(
            TypeError, match="CompositeProvider: lower_saved must be callable, got 3"
        ):
            cv.CompositeProvider(
                capabilities=(), result_carriers=(Vendor,), prepare=lambda c, i: None, lower_saved=3
            )
