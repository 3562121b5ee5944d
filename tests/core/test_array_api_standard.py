"""The corners of the Array API standard that data-apis/array-api-tests found failing.

Each is checked against array-api-strict (the standard's reference namespace) or NumPy: the
spectral linalg functions, complex input of the composed functions, Python scalars in the
binary composed functions, ``finfo`` of complex dtypes, ``vecdot`` of narrow integers, the
inspection namespace, DLPack's signature and ``from_dlpack``'s refusals.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import array_api_strict as xps
import numpy as np
import pytest

import conveyor as cv
import conveyor.array_api as xp

RNG = np.random.default_rng(11)
TALL = RNG.standard_normal((2, 5, 3))
SQUARE = RNG.standard_normal((3, 3)) + 3 * np.eye(3)


def _agree(got: Any, want: Any, tolerance: float = 1e-9) -> None:
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=tolerance, atol=tolerance)


class TestSpectralLinalg:
    def test_svd_svdvals_pinv_rank_and_norms_match_strict(self) -> None:
        a, s = xp.asarray(TALL), xps.asarray(TALL)
        _agree(xp.linalg.svdvals(a), xps.linalg.svdvals(s))
        assert [t.shape for t in xp.linalg.svd(a)] == [t.shape for t in xps.linalg.svd(s)]
        got = xp.linalg.svd(a, full_matrices=False)
        _agree(got.U * got.S[..., None, :] @ got.Vh, TALL)
        _agree(xp.linalg.pinv(a), xps.linalg.pinv(s))
        _agree(xp.linalg.matrix_rank(a), xps.linalg.matrix_rank(s))
        low_rank = xp.asarray(np.outer([1.0, 2.0, 3.0], [1.0, 1.0]))
        assert int(xp.linalg.matrix_rank(low_rank)) == 1
        for order in (2, -2, "nuc"):
            _agree(
                xp.linalg.matrix_norm(a, ord=order, keepdims=True),
                xps.linalg.matrix_norm(s, ord=order, keepdims=True),
            )

    def test_eigh_and_eigvalsh_match_strict(self) -> None:
        symmetric = SQUARE + SQUARE.T
        got, want = xp.linalg.eigh(xp.asarray(symmetric)), xps.linalg.eigh(xps.asarray(symmetric))
        _agree(got.eigenvalues, want.eigenvalues)
        _agree(xp.linalg.eigvalsh(xp.asarray(symmetric)), want.eigenvalues)
        vectors = np.asarray(got.eigenvectors)
        _agree(vectors * np.asarray(got.eigenvalues) @ vectors.T, symmetric)

    def test_matrix_power_of_a_negative_exponent_inverts(self) -> None:
        _agree(xp.linalg.matrix_power(xp.asarray(SQUARE), -1), np.linalg.inv(SQUARE))
        _agree(xp.linalg.matrix_power(xp.asarray(SQUARE), -3), np.linalg.matrix_power(SQUARE, -3))

    def test_empty_matrices_invert_and_factor(self) -> None:
        empty = xp.zeros((0, 0), dtype=xp.float64)
        assert xp.linalg.inv(empty).shape == (0, 0)
        assert xp.linalg.cholesky(empty).shape == (0, 0)
        assert xp.linalg.svdvals(xp.zeros((2, 0, 3))).shape == (2, 0)

    def test_vecdot_of_narrow_integers_keeps_their_dtype(self) -> None:
        a = np.array([200, 3], np.uint8)
        got = xp.vecdot(xp.asarray(a), xp.asarray(np.array([2, 1], np.uint8)))
        want = xps.vecdot(xps.asarray(a), xps.asarray(np.array([2, 1], np.uint8)))
        assert got.dtype is xp.uint8 and int(got) == int(want) == (400 + 3) % 256


class TestComplexComposedFunctions:
    @pytest.mark.parametrize(
        "name", ["acos", "acosh", "asin", "asinh", "atan", "atanh", "expm1", "sinh", "tan"]
    )
    def test_complex_input_matches_strict(self, name: str) -> None:
        values = np.array([0.5 + 0.25j, -2 + 1j, 0j, complex(0, math.nan), 1e-9 + 1e-9j])
        got = getattr(xp, name)(xp.asarray(values.astype(np.complex64)))
        want = getattr(xps, name)(xps.asarray(values.astype(np.complex64)))
        assert got.dtype is xp.complex64
        _agree(got, want, 2e-6)

    def test_standard_special_value_of_acos(self) -> None:
        """acos(+0 + NaN j) is pi/2 + NaN j."""
        got = complex(xp.acos(xp.asarray(complex(0.0, math.nan))))
        assert got.real == pytest.approx(math.pi / 2) and math.isnan(got.imag)


class TestScalarOperands:
    @pytest.mark.parametrize("name", ["atan2", "copysign", "hypot", "nextafter"])
    def test_python_scalar_on_either_side_matches_strict(self, name: str) -> None:
        values = np.array([1.5, -2.0, 0.0], np.float32)
        for args, ref in (
            ((xp.asarray(values), 2.0), (xps.asarray(values), 2.0)),
            ((-1, xp.asarray(values)), (-1.0, xps.asarray(values))),
        ):
            got, want = getattr(xp, name)(*args), getattr(xps, name)(*ref)
            assert got.dtype is xp.float32
            _agree(got, want, 1e-6)


class TestDataTypesAndInspection:
    def test_finfo_of_complex_reports_its_real_dtype(self) -> None:
        assert xp.finfo(xp.complex64).dtype is xp.float32
        assert xp.finfo(xp.complex128).dtype is xp.float64
        assert xp.finfo(xp.complex64).eps == xps.finfo(xps.complex64).eps

    def test_every_listed_device_creates_arrays_of_every_dtype(self) -> None:
        info = xp.__array_namespace_info__()
        devices = info.devices()
        names = {d.__name__ for d in devices}
        assert {"CPU", "Generic"} <= names and "BlockDeviceCarrier" not in names
        for device in devices:
            if device.__name__ == "DaskCarrier":
                continue  # creating one starts a cluster: tests/dask runs it on its own
            for name, dtype in info.dtypes(device=device).items():
                assert xp.empty(1, dtype=dtype, device=device).dtype is dtype, name


class TestDLPack:
    def test_dunder_dlpack_has_the_standards_keywords(self) -> None:
        parameters = inspect.signature(cv.Tensor.__dlpack__).parameters
        assert list(parameters) == ["self", "stream", "max_version", "dl_device", "copy"]
        assert all(p.kind is p.KEYWORD_ONLY for n, p in parameters.items() if n != "self")
        t = cv.tensor([1.0, 2.0])
        assert np.from_dlpack(t).tolist() == [1.0, 2.0]
        capsule = t.__dlpack__(max_version=(1, 0), dl_device=(1, 0), copy=True)
        assert capsule is not None

    def test_from_dlpack_of_a_non_producer_is_a_type_error(self) -> None:
        with pytest.raises(TypeError) as info:
            xp.from_dlpack([1, 2])
        assert str(info.value) == (
            "from_dlpack: list is not a DLPack producer (it has no __dlpack__); pass a NumPy "
            "array, a PyTorch CPU tensor or another DLPack exporter, or build the tensor from "
            "Python data with cv.tensor(...)"
        )

    def test_from_dlpack_without_a_copy_is_a_buffer_error(self) -> None:
        with pytest.raises(BufferError, match="from_dlpack: copy=False, but carriers own"):
            xp.from_dlpack(np.arange(3.0), copy=False)

    @pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "float32", "complex128"])
    def test_from_dlpack_round_trips_dtypes_shapes_and_views(self, dtype: str) -> None:
        values = np.arange(12).reshape(3, 4).astype(dtype)[::-1, 1::2]
        got = xp.from_dlpack(values)
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got.numpy(), values)
        assert xp.from_dlpack(got).tolist() == values.tolist()


class TestSliceBounds:
    def test_single_element_integer_tensor_bounds_a_slice(self) -> None:
        """scikit-learn slices with a 0-d integer tensor; Python's __index__ rule applies."""
        x = cv.tensor(np.arange(10.0))
        assert x[: cv.tensor(3)].tolist() == [0.0, 1.0, 2.0]
        assert x[np.int64(1) : cv.tensor(7) : cv.tensor(3)].tolist() == [1.0, 4.0]

    def test_float_and_bool_bounds_are_refused(self) -> None:
        x = cv.tensor(np.arange(4.0))
        with pytest.raises(TypeError, match="option key must be a basic index"):
            x[: cv.tensor(2.0)]
        with pytest.raises(TypeError, match="option key must be a basic index"):
            x[:True]
