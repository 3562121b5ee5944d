"""NumPy protocols: NumPy calls on tensors return Tensors on the tensor's carrier, or refuse."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.lib.numpy_protocols import handled_functions, handled_ufuncs

CARRIERS = ["cpu", "generic"]


@pytest.fixture(params=CARRIERS)
def carrier(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _positive(values: Any) -> Any:
    return np.abs(values) + 0.5


UFUNC_CASES = [
    (np.exp, 1),
    (np.log, 1),
    (np.sqrt, 1),
    (np.sin, 1),
    (np.tanh, 1),
    (np.arctan, 1),
    (np.log1p, 1),
    (np.negative, 1),
    (np.absolute, 1),
    (np.floor, 1),
    (np.isnan, 1),
    (np.add, 2),
    (np.subtract, 2),
    (np.multiply, 2),
    (np.divide, 2),
    (np.maximum, 2),
    (np.greater, 2),
    (np.arctan2, 2),
    (np.hypot, 2),
    (np.floor_divide, 2),
    (np.remainder, 2),
    (np.power, 2),
]


class TestArrayUfunc:
    @pytest.mark.parametrize(
        ("ufunc", "arity"), UFUNC_CASES, ids=[u.__name__ for u, _ in UFUNC_CASES]
    )
    def test_ufunc_returns_a_tensor_equal_to_numpy(
        self, carrier: str, ufunc: Any, arity: int
    ) -> None:
        """np.<ufunc>(tensor, ...) runs on the tensor's carrier and matches NumPy's values."""
        values = _positive(np.linspace(-2, 2, 6))
        t = cv.tensor(values, cv.float64, carrier)
        operands = [t] * arity

        result = ufunc(*operands)

        assert isinstance(result, cv.Tensor)
        assert type(result.carrier) is type(t.carrier)
        np.testing.assert_allclose(result.numpy(), ufunc(*[values] * arity), rtol=1e-12)

    def test_mixed_ndarray_and_tensor_operands(self, carrier: str) -> None:
        """ndarray operands are copied onto the tensor's carrier in either position."""
        t = cv.tensor([1.0, 2.0], cv.float64, carrier)
        a = np.array([3.0, 4.0])

        for result in (np.add(a, t), np.add(t, a), a + t, np.maximum(a, t)):
            assert isinstance(result, cv.Tensor)
        np.testing.assert_array_equal(np.subtract(a, t).numpy(), [2.0, 2.0])

    def test_unhandled_ufunc_runs_in_numpy_with_a_warning(self, carrier: str) -> None:
        """A ufunc without a Conveyor equivalent runs in NumPy, said by a warning, never silent."""
        t = cv.tensor([1.0, 2.0], carrier=carrier)

        with pytest.warns(cv.NumPyFallbackWarning, match="np.spacing on"):
            got = np.spacing(t)
        assert isinstance(got, cv.Tensor) and type(got.carrier) is type(t.carrier)
        np.testing.assert_array_equal(got.numpy(), np.spacing(np.float32([1.0, 2.0])))

    def test_ufunc_methods_run_in_numpy_and_out_is_refused(self, carrier: str) -> None:
        """reduce/accumulate run in NumPy with a warning; out= (a caller's array) is refused."""
        t = cv.tensor([1.0, 2.0], carrier=carrier)

        with pytest.warns(cv.NumPyFallbackWarning, match="np.add.accumulate on"):
            assert np.add.accumulate(t).tolist() == [1.0, 3.0]
        with pytest.raises(TypeError):
            np.exp(t, out=np.empty(2, np.float32))

    def test_every_handled_ufunc_is_a_ufunc(self) -> None:
        """The table holds only real ufuncs, each with a callable."""
        assert all(isinstance(u, np.ufunc) and callable(f) for u, f in handled_ufuncs().items())


FUNCTION_CASES: list[tuple[str, Any]] = [
    ("sum", lambda m, x: m.sum(x, axis=0)),
    ("mean", lambda m, x: m.mean(x)),
    ("std", lambda m, x: m.std(x, ddof=1)),
    ("var", lambda m, x: m.var(x, axis=1, keepdims=True)),
    ("max", lambda m, x: m.max(x, axis=1)),
    ("prod", lambda m, x: m.prod(x)),
    ("any", lambda m, x: m.any(x > 2)),
    ("all", lambda m, x: m.all(x > -9, axis=0)),
    ("argmax", lambda m, x: m.argmax(x)),
    ("cumsum", lambda m, x: m.cumsum(x, axis=1)),
    ("sort", lambda m, x: m.sort(x)),
    ("concatenate", lambda m, x: m.concatenate([x, x], axis=1)),
    ("stack", lambda m, x: m.stack([x, x])),
    ("where", lambda m, x: m.where(x > 1, x, 0.0)),
    ("reshape", lambda m, x: m.reshape(x, (3, 2))),
    ("transpose", lambda m, x: m.transpose(x)),
    ("flip", lambda m, x: m.flip(x, axis=0)),
    ("roll", lambda m, x: m.roll(x, 1, axis=1)),
    ("pad", lambda m, x: m.pad(x, 1)),
    ("tile", lambda m, x: m.tile(x, (2, 1))),
    ("repeat", lambda m, x: m.repeat(x, 2, axis=0)),
    ("einsum", lambda m, x: m.einsum("ij,kj->ik", x, x)),
    ("tensordot", lambda m, x: m.tensordot(x, x, axes=([1], [1]))),
    ("outer", lambda m, x: m.outer(x[0], x[1])),
    ("dot", lambda m, x: m.dot(x, m.transpose(x))),
    ("clip", lambda m, x: m.clip(x, 0.0, 2.0)),
    ("round", lambda m, x: m.round(x * 10)),
    ("zeros_like", lambda m, x: m.zeros_like(x)),
    ("take", lambda m, x: m.take(x, [2, 0], axis=1)),
    ("diff", lambda m, x: m.diff(x, axis=1)),
    ("cumprod", lambda m, x: m.cumprod(x, axis=1)),
    ("triu", lambda m, x: m.triu(x)),
    ("isclose", lambda m, x: m.isclose(x, x + 1e-9)),
]


class TestArrayFunction:
    @pytest.mark.parametrize(("name", "call"), FUNCTION_CASES, ids=[n for n, _ in FUNCTION_CASES])
    def test_numpy_function_returns_a_tensor_equal_to_numpy(
        self, carrier: str, name: str, call: Any
    ) -> None:
        """np.<function>(tensor, ...) gives a Tensor on the same carrier with NumPy's values."""
        values = np.array([[1.5, -2.0, 3.0], [0.5, 2.5, -1.0]])
        t = cv.tensor(values, cv.float64, carrier)

        got = call(np, t)
        want = call(np, values)

        assert isinstance(got, cv.Tensor)
        assert type(got.carrier) is type(t.carrier)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)

    def test_allclose_returns_a_bool(self, carrier: str) -> None:
        """np.allclose on tensors returns a Python bool."""
        t = cv.tensor([1.0, 2.0], carrier=carrier)

        assert np.allclose(t, t) is True

    def test_unhandled_function_runs_in_numpy_with_a_warning(self, carrier: str) -> None:
        """A function without an equivalent (np.gradient) runs in NumPy on a host copy, with a
        warning naming it, and its array result comes back onto the carrier."""
        t = cv.tensor(np.array([1.0, 4.0, 9.0]), carrier=carrier)

        with pytest.warns(cv.NumPyFallbackWarning, match="np.gradient on"):
            got = np.gradient(t)
        assert isinstance(got, cv.Tensor) and type(got.carrier) is type(t.carrier)
        assert got.tolist() == np.gradient(np.array([1.0, 4.0, 9.0])).tolist()

    def test_numpy_only_arguments_raise_type_error(self, carrier: str) -> None:
        """Arguments the adapter does not take (out=, dtype=) make NumPy raise TypeError."""
        t = cv.tensor([1.0, 2.0], carrier=carrier)

        with pytest.raises(TypeError):
            np.sum(t, dtype=np.float64)

    def test_every_handled_function_is_public_numpy(self) -> None:
        """The table's keys are NumPy's public functions (numpy, numpy.fft, numpy.linalg)."""
        public = [np, np.fft, np.linalg]

        assert all(
            any(getattr(m, f.__name__, None) is f for m in public) for f in handled_functions()
        )

    def test_fft_and_linalg_functions(self, carrier: str) -> None:
        """np.fft and np.linalg functions with an equivalent return tensors equal to NumPy's."""
        values = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
        t = cv.tensor(values, cv.float64, carrier)

        cases = [
            (np.fft.fft, (t,), {"norm": "ortho"}),
            (np.fft.rfft, (t,), {"n": 4}),
            (np.fft.irfft, (np.fft.rfft(t),), {}),
            (np.fft.fftn, (t,), {}),
            (np.linalg.inv, (t,), {}),
            (np.linalg.det, (t,), {}),
            (np.linalg.solve, (t, t[:, 0]), {}),
            (np.linalg.cholesky, (t,), {}),
        ]
        for function, args, kwargs in cases:
            got = function(*args, **kwargs)
            host = [a.numpy() for a in args]
            assert isinstance(got, cv.Tensor)
            np.testing.assert_allclose(
                got.numpy(), function(*host, **kwargs), rtol=1e-10, atol=1e-12
            )


class TestInterchange:
    def test_asarray_does_not_copy_a_tensor(self, carrier: str) -> None:
        """cv.asarray returns the tensor itself when dtype and carrier already match."""
        t = cv.tensor([1.0], carrier=carrier)

        assert cv.asarray(t) is t
        assert cv.asarray(t, copy=True) is not t
        with pytest.raises(
            ValueError, match="copy=False, but a different dtype or carrier needs a copy"
        ):
            cv.asarray(t, dtype=cv.float64, copy=False)

    def test_from_numpy_keeps_the_dtype(self, carrier: str) -> None:
        """from_numpy keeps NumPy's dtype (float64 stays float64) and copies."""
        a = np.arange(4.0)

        t = cv.from_numpy(a, carrier)
        a[0] = 99

        assert t.dtype is cv.float64
        np.testing.assert_array_equal(t.numpy(), [0, 1, 2, 3])
        with pytest.raises(TypeError, match=r"from_numpy: expected a numpy\.ndarray, got list"):
            cv.from_numpy([1.0])  # type: ignore[arg-type]  # the refusal under test

    def test_from_dlpack_round_trip(self, carrier: str) -> None:
        """A DLPack producer (an ndarray, a CPU tensor) becomes a tensor on the given carrier."""
        t = cv.from_dlpack(np.arange(3, dtype=np.int32), carrier=carrier)
        back = cv.from_dlpack(cv.tensor([1.5, 2.5], carrier="cpu"), carrier=carrier)

        assert t.dtype is cv.int32
        np.testing.assert_array_equal(back.numpy(), [1.5, 2.5])
