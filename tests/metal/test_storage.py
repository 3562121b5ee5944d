"""The Metal storage contract, run on this machine over a CPU torch buffer.

``TorchStorage`` is exactly the storage code of ``Metal``; only the device differs (a class
attribute), so a private CPU twin checks element access, bulk spans, versions and release.
"""

from __future__ import annotations

import numpy as np
import pytest

import conveyor as cv
from conveyor_metal._storage import TorchStorage


class _CPUTwin(TorchStorage):
    """Metal's storage on the CPU device (test only)."""

    _device = "cpu"


class TestTorchStorage:
    """Allocation, element and span access, versions and release over one flat buffer."""

    def test_allocate_is_zero_filled(self) -> None:
        carrier = _CPUTwin.allocate(5, cv.float32)
        assert carrier.size == 5 and carrier.dtype is cv.float32
        np.testing.assert_array_equal(carrier.export_span(cv.Layout((5,))), np.zeros(5))

    def test_write_then_read_bumps_version(self) -> None:
        carrier = _CPUTwin.allocate(3, cv.int32)
        carrier.write(1, 7)
        assert carrier.read(1) == 7 and carrier.version == 1

    def test_strided_span_round_trips_in_bulk(self) -> None:
        carrier = _CPUTwin.allocate(12, cv.float16)
        layout = cv.Layout((3, 2), (1, 4), offset=1)  # a transposed, offset view
        values = np.arange(6, dtype=np.float16).reshape(3, 2)
        carrier.import_span(layout, values)
        np.testing.assert_array_equal(carrier.export_span(layout), values)
        assert carrier.version == 1

    def test_bfloat16_span_keeps_its_bits(self) -> None:
        carrier = _CPUTwin.allocate(2, cv.bfloat16)
        values = np.array([1.5, -2.0], dtype=cv.bfloat16.numpy)
        carrier.import_span(cv.Layout((2,)), values)
        assert carrier.export_span(cv.Layout((2,))).tolist() == values.tolist()

    def test_empty_span_exports_empty(self) -> None:
        carrier = _CPUTwin.allocate(0, cv.bool)
        assert carrier.export_span(cv.Layout((0, 3))).shape == (0, 3)

    def test_float64_is_refused_before_allocation(self) -> None:
        with pytest.raises(TypeError, match="float64 cannot be stored in a Metal buffer"):
            _CPUTwin.allocate(3, cv.float64)

    def test_unknown_argument_is_refused(self) -> None:
        with pytest.raises(TypeError, match="unexpected argument"):
            _CPUTwin.allocate(3, cv.float32, pinned=True)

    def test_released_carrier_refuses_access(self) -> None:
        carrier = _CPUTwin.allocate(3, cv.float32)
        carrier.release()
        assert carrier.size == 0
        with pytest.raises(RuntimeError, match="released"):
            carrier.read(0)
