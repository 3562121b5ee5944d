"""Moves for vendors: a contributed route is taken; without one the generic bulk span path copies;
where neither can, the refusal names both classes and the hook to implement.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.types.dtypes import CONCRETE_DTYPES
from conveyor_generic import CPU, Generic
from tests.conformance.reference_vendor import ReferenceVendor, _ArrayStorage


class StorageVendor(cv.Carrier):
    """Only a storage provider: no kernels, no transfer routes."""


cv.register_carrier_definition(StorageVendor, cv.CarrierDefinition(storage=_ArrayStorage()))

ROUTE_CALLS: list[str] = []


class _CountingTransfer(cv.TransferProvider):
    def transfer(self, source: cv.Tensor, destination: type[cv.Carrier], **options: Any) -> Any:
        ROUTE_CALLS.append(f"{type(source.carrier).__name__}->{destination.__name__}")
        carrier = destination.allocate(source.size, source.dtype, **options)
        if source.size:
            values = source.carrier.export_span(source.layout).reshape(-1)
            carrier.import_span(cv.Layout((source.size,)), values)
        return cv.Tensor(carrier, cv.Layout(source.shape))


class RoutedVendor(cv.Carrier):
    """A storage provider plus its own transfer routes to and from CPU."""


_ROUTE = _CountingTransfer()
cv.register_carrier_definition(
    RoutedVendor,
    cv.CarrierDefinition(
        storage=_ArrayStorage(),
        transfers=[
            cv.TransferRoute(source=RoutedVendor, destination=CPU, provider=_ROUTE),
            cv.TransferRoute(source=CPU, destination=RoutedVendor, provider=_ROUTE),
        ],
    ),
)


class Bare(cv.Carrier):
    """A definition-free carrier with storage but no span hooks."""

    @classmethod
    def _allocate(cls, size: int, dtype: cv.DType, **kwargs: Any) -> Bare:
        return cls()

    def _storage_size(self) -> int:
        return 0

    def _storage_dtype(self) -> cv.DType:
        return cv.float32


class TestGenericBulkSpanPath:
    """A vendor with only a storage provider moves to and from CPU and Generic."""

    @pytest.mark.parametrize("dtype", CONCRETE_DTYPES, ids=lambda d: d.name)
    @pytest.mark.parametrize("other", [CPU, Generic], ids=lambda c: c.__name__)
    def test_round_trip_bit_exact(self, dtype: cv.DType, other: type[cv.Carrier]) -> None:
        raw = np.random.default_rng(3).integers(0, 256, 12 * dtype.itemsize, dtype=np.uint8)
        values = raw.view(dtype.numpy).reshape(3, 4)
        source = cv.tensor(values, dtype, carrier=StorageVendor)
        there = cv.move(source.T, other)
        back = cv.move(there, StorageVendor)
        want = np.ascontiguousarray(values.T).view(np.uint8)
        assert type(there.carrier) is other and type(back.carrier) is StorageVendor
        assert np.array_equal(np.ascontiguousarray(there.numpy()).view(np.uint8), want)
        assert np.array_equal(np.ascontiguousarray(back.numpy()).view(np.uint8), want)

    def test_route_is_the_span_copy(self) -> None:
        assert cv.move_route(StorageVendor, CPU).copy is cv.move.__globals__["span_copy"]
        assert (
            cv.move_route(ReferenceVendor, StorageVendor).copy
            is cv.move_route(CPU, StorageVendor).copy
        )

    def test_gradient_moves_back(self) -> None:
        x = cv.tensor([1.0, 2.0], cv.float64, carrier=ReferenceVendor, requires_grad=True)
        y = cv.move(x, CPU)
        (y * 3.0).sum().backward()
        assert x.grad is not None and type(x.grad.carrier) is ReferenceVendor
        assert x.grad.numpy().tolist() == [3.0, 3.0]


class TestContributedRoute:
    """A TransferRoute in the definition is what cv.move takes."""

    def test_route_taken_both_ways(self) -> None:
        ROUTE_CALLS.clear()
        x = cv.tensor([[1.0, 2.0]], cv.float32, carrier=RoutedVendor)
        there = cv.move(x, CPU)
        back = cv.move(there, RoutedVendor)
        assert ROUTE_CALLS == ["RoutedVendor->CPU", "CPU->RoutedVendor"]
        assert back.numpy().tolist() == [[1.0, 2.0]]

    def test_uncovered_pair_still_has_the_span_path(self) -> None:
        """Routes only to CPU; Generic is reached through the generic span path."""
        ROUTE_CALLS.clear()
        x = cv.tensor([5.0], cv.float32, carrier=RoutedVendor)
        assert cv.move(x, Generic).numpy().tolist() == [5.0]
        assert ROUTE_CALLS == []


class TestNoRoute:
    """Without a route or span hooks the refusal names both classes and the hook."""

    def test_refusal_names_both_classes_and_the_hook(self) -> None:
        with pytest.raises(NotImplementedError) as info:
            cv.move_route(Bare, StorageVendor)
        assert str(info.value) == (
            "move from Bare to StorageVendor: no move route joins these carriers; contribute a "
            "TransferRoute (CarrierDefinition transfers, the conveyor_move_routes hook or "
            "conveyor.register_move_route), or implement the storage span hooks Bare._export "
            "and give one side a CarrierDefinition with a StorageProvider so the generic bulk "
            "span path can copy, or move through a carrier both have routes to (e.g. 'cpu')"
        )

    def test_refused_move_allocates_nothing(self) -> None:
        calls: list[int] = []
        original = StorageVendor._allocate

        def counting(cls: type, size: int, dtype: cv.DType, **kwargs: Any) -> Any:
            calls.append(size)
            return original.__func__(cls, size, dtype, **kwargs)  # type: ignore[attr-defined]  # classmethod

        source = cv.Tensor(Bare(), cv.Layout((0,)))
        StorageVendor._allocate = classmethod(counting)  # type: ignore[method-assign,assignment]  # counting probe
        try:
            with pytest.raises(NotImplementedError, match="move from Bare to StorageVendor"):
                cv.move(source, StorageVendor)
        finally:
            StorageVendor._allocate = original  # type: ignore[method-assign]  # restore
        assert calls == []
