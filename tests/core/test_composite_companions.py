"""CompositeProvider.companions: tensors of declared classes may stand beside a composite's own.

Core tests with test-only carriers: the public functions dispatch a mixed call on the carrier
whose composite declares the other class, whichever side it is on; without the declaration,
or with an undeclared class, mixed carriers are refused as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv
from tests.core.test_definitions import STORAGE, Vendor, _plans, vendor


def _composite(companions: tuple[type, ...]) -> type[cv.Carrier]:
    """A definition-backed composite computing ``mul`` and ``add`` into Vendor results."""
    seen: list[tuple[str, ...]] = []

    def prepare(carrier: cv.Carrier, invocation: cv.ResolvedInvocation) -> Any:
        seen.append(tuple(type(x.carrier).__name__ for x in invocation.operands))
        a, b = (x.numpy() for x in invocation.operands)
        op = np.multiply if invocation.operation == "mul" else np.add
        return cv.PreparedComposite(lambda: cv.ProviderResult(vendor(op(a, b))))

    cls = type("Hosting", (cv.Carrier,), {"seen": seen})
    provider = cv.CompositeProvider(
        capabilities=_plans("mul") + _plans("add"),
        result_carriers=(Vendor,),
        prepare=prepare,
        companions=companions,
    )
    cv.register_carrier_definition(cls, cv.CarrierDefinition(storage=STORAGE, composite=provider))
    return cls


class TestCompanions:
    @pytest.mark.parametrize("host_first", [True, False])
    def test_declared_class_dispatches_on_the_composite(self, host_first: bool) -> None:
        """A Vendor tensor beside the composite's, on either side, reaches its prepare."""
        cls = _composite((Vendor,))
        outer = cv.tensor([1.0, 2.0], cv.float32, carrier=cls)
        dense = vendor([3.0, 5.0])
        args = (outer, dense) if host_first else (dense, outer)
        for _ in range(2):  # the second call takes the bound fast path
            out = cv.mul(*args)
            np.testing.assert_array_equal(out.numpy(), [3.0, 10.0])
        names = ("Hosting", "Vendor") if host_first else ("Vendor", "Hosting")
        assert cls.seen == [names, names]  # type: ignore[attr-defined]
        # the same pair of classes keeps dispatching like this; a same-class call still works
        np.testing.assert_array_equal(cv.add(outer, outer).numpy(), [2.0, 4.0])

    def test_undeclared_mix_is_refused_as_before(self) -> None:
        """Without companions the public functions refuse mixed carriers before dispatch."""
        cls = _composite(())
        outer = cv.tensor([1.0, 2.0], cv.float32, carrier=cls)
        with pytest.raises(TypeError, match=r"mul: operands live on different carriers \(Hosting "):
            cv.mul(outer, vendor([3.0, 5.0]))
        assert cls.seen == []  # type: ignore[attr-defined]

    def test_companions_default_to_none(self) -> None:
        provider = cv.CompositeProvider(
            capabilities=(), result_carriers=(Vendor,), prepare=lambda c, i: None
        )
        assert provider.companions == ()
