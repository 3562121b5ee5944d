"""The planned linear-algebra names and the complex plans of the composed functions.

Generic is checked against NumPy (hypothesis over dtypes, batch shapes with empty extents and
views: transposed, offset and negatively strided operands), CPU against Generic, every VJP
against central finite differences, and every refusal for its type, its message and that
nothing was published.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conveyor as cv
from conveyor.engine import functional as F
from conveyor.sdk import enumerate_plans
from conveyor_generic import CPU, Generic

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
LINALG = ("inv", "cholesky", "solve", "qr", "eigh", "svd")
COMPLEX = ("tan", "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "expm1")
COMPLEX += ("log1p",)
DTYPES = [cv.float16, cv.float32, cv.float64, cv.complex64, cv.complex128]
# Results are rounded once from float64 / complex128 to the plan dtype.
TOLERANCE = {"float16": 2e-2, "float32": 2e-5, "complex64": 2e-5, "float64": 1e-10}
TOLERANCE["complex128"] = 1e-10


def _wide(dtype: cv.DType) -> Any:
    return np.complex128 if dtype.is_complex else np.float64


def _view(values: np.ndarray[Any, Any], how: str, carrier: Any) -> cv.Tensor:
    """``values`` as a tensor whose layout is a transposed, offset or reversed view."""
    if how == "transposed":
        base = cv.tensor(np.ascontiguousarray(np.swapaxes(values, -1, -2)), carrier=carrier)
        return base.mT
    if how == "offset":
        padded = np.concatenate([np.zeros((1, *values.shape[1:]), values.dtype), values])
        return (
            cv.tensor(padded, carrier=carrier)[1:]
            if values.ndim > 2
            else cv.tensor(values, carrier=carrier)
        )
    if how == "reversed":
        base = cv.tensor(np.ascontiguousarray(values[..., ::-1, :]), carrier=carrier)
        return base[..., ::-1, :]
    return cv.tensor(values, carrier=carrier)


def _matrices(dtype: cv.DType, square: bool) -> st.SearchStrategy[np.ndarray[Any, Any]]:
    """Well-conditioned stacks: a random matrix plus a multiple of the identity."""

    @st.composite
    def matrices(draw: Any) -> np.ndarray[Any, Any]:
        batch = draw(st.lists(st.integers(0, 3), max_size=2).map(tuple))
        m = draw(st.integers(0, 6))
        n = m if square else draw(st.integers(0, 6))
        seed = draw(st.integers(0, 2**16))
        rng = np.random.default_rng(seed)
        values = rng.uniform(-1, 1, (*batch, m, n))
        if dtype.is_complex:
            values = values + 1j * rng.uniform(-1, 1, (*batch, m, n))
        if square:
            # Strictly diagonally dominant (off-diagonal moduli are at most sqrt(2)), so the
            # Hermitian part is positive definite for every seed: 3 * I was not, for complex 6x6.
            values = values + (2 * m + 1) * np.eye(m)
        return values.astype(dtype.numpy)

    return matrices()


def _close(got: cv.Tensor, want: Any, dtype: cv.DType) -> None:
    tolerance = TOLERANCE[dtype.name]
    np.testing.assert_allclose(
        np.asarray(got, dtype=_wide(dtype)), want, rtol=tolerance, atol=tolerance
    )


def _hermitian(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return (values + np.conj(np.swapaxes(values, -1, -2))) / 2


class TestAgainstNumPy:
    """Generic computes what NumPy's LAPACK computes, rounded once to the plan dtype."""

    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    @pytest.mark.parametrize("how", ["plain", "transposed", "offset", "reversed"])
    def test_inv_and_solve_match_numpy(self, dtype: cv.DType, how: str) -> None:
        @SETTINGS
        @given(values=_matrices(dtype, square=True))
        def check(values: np.ndarray[Any, Any]) -> None:
            a = _view(values, how, Generic)
            wide = values.astype(_wide(dtype))
            inverse = F.inv(a)
            assert inverse.dtype is dtype and inverse.shape == values.shape
            _close(inverse, np.linalg.inv(wide) if values.size else wide, dtype)
            rhs = np.ones((*values.shape[:-1], 2), dtype.numpy)
            x = F.solve(a, cv.tensor(rhs, carrier=Generic))
            want = np.linalg.solve(wide, rhs.astype(wide.dtype)) if values.size else rhs
            _close(x, want, dtype)
            vector = np.ones(values.shape[-1], dtype.numpy)
            if values.ndim == 2:
                got = F.solve(a, cv.tensor(vector, carrier=Generic))
                want = np.linalg.solve(wide, vector.astype(wide.dtype)) if values.size else vector
                _close(got, want, dtype)

        check()

    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    def test_hermitian_decompositions_match_numpy(self, dtype: cv.DType) -> None:
        @SETTINGS
        @given(values=_matrices(dtype, square=True))
        def check(values: np.ndarray[Any, Any]) -> None:
            spd = _hermitian(values.astype(_wide(dtype)))
            a = cv.tensor(spd.astype(dtype.numpy), carrier=Generic)
            rounded = spd.astype(dtype.numpy).astype(_wide(dtype))
            for upper in (False, True):
                _close(F.cholesky(a, upper=upper), np.linalg.cholesky(rounded, upper=upper), dtype)
            w, v = F.eigh(a)
            assert w.dtype is (cv.float32 if dtype is cv.complex64 else w.dtype)
            _close(w, np.linalg.eigh(rounded)[0], dtype)
            # Eigenvectors are unique up to phase: check the reconstruction instead.
            back = np.asarray(v, _wide(dtype)) * np.asarray(w, np.float64)[..., None, :]
            back = back @ np.conj(np.swapaxes(np.asarray(v, _wide(dtype)), -1, -2))
            np.testing.assert_allclose(back, rounded, atol=TOLERANCE[dtype.name] * 40)

        check()

    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    @pytest.mark.parametrize("full", [False, True])
    def test_svd_and_qr_reconstruct_and_match_numpy(self, dtype: cv.DType, full: bool) -> None:
        @SETTINGS
        @given(values=_matrices(dtype, square=False))
        def check(values: np.ndarray[Any, Any]) -> None:
            a = _view(values, "transposed", Generic)
            wide = values.astype(_wide(dtype))
            u, s, vh = F.svd(a, full_matrices=full)
            k = min(values.shape[-2:])
            assert s.shape == (*values.shape[:-2], k)
            if values.size:
                _close(s, np.linalg.svd(wide, compute_uv=False), dtype)
                back = (
                    np.asarray(u, _wide(dtype))[..., :k] * np.asarray(s, np.float64)[..., None, :]
                )
                back = back @ np.asarray(vh, _wide(dtype))[..., :k, :]
                np.testing.assert_allclose(back, wide, atol=TOLERANCE[dtype.name] * 40)
            mode = "complete" if full else "reduced"
            q, r = F.qr(a, mode=mode)
            if values.size:
                want_q, want_r = np.linalg.qr(wide, mode=mode)
                _close(q, want_q, dtype)
                _close(r, want_r, dtype)

        check()

    @pytest.mark.parametrize("name", COMPLEX)
    @pytest.mark.parametrize("dtype", [cv.complex64, cv.complex128], ids=str)
    def test_complex_plans_match_numpy_with_special_values(
        self, name: str, dtype: cv.DType
    ) -> None:
        """The complex plans are NumPy's C99 functions, special values included."""
        special = [0.0, -0.0, 1.0, -1.0, 0.5, np.inf, -np.inf, np.nan, 1e30]
        parts = np.array([complex(a, b) for a in special for b in special])
        values = parts.astype(dtype.numpy)
        numpy_name = {"asin": "arcsin", "acos": "arccos", "atan": "arctan"}
        numpy_name |= {"asinh": "arcsinh", "acosh": "arccosh", "atanh": "arctanh"}
        with np.errstate(all="ignore"):
            want = getattr(np, numpy_name.get(name, name))(values.astype(np.complex128))
        got = getattr(cv, name)(cv.tensor(values, carrier=Generic))
        assert got.dtype is dtype
        np.testing.assert_allclose(
            np.asarray(got, np.complex128), want.astype(dtype.numpy), rtol=TOLERANCE[dtype.name]
        )


class TestCPUAgainstGeneric:
    """CPU runs the reference kernels: the same values, bit for bit."""

    @pytest.mark.parametrize("dtype", [cv.float32, cv.float64, cv.complex128], ids=str)
    def test_every_linalg_name_agrees(self, dtype: cv.DType) -> None:
        values = np.random.default_rng(4).uniform(-1, 1, (2, 4, 4)) + 4 * np.eye(4)
        spd = _hermitian(values).astype(dtype.numpy)
        for name, options in [("inv", {}), ("cholesky", {}), ("eigh", {}), ("qr", {})]:
            options |= {}
            got = getattr(F, name)(cv.tensor(spd, carrier=CPU), **options)
            want = getattr(F, name)(cv.tensor(spd, carrier=Generic), **options)
            for g, w in zip(
                *(x if isinstance(x, tuple) else (x,) for x in (got, want)), strict=True
            ):
                assert type(g.carrier) is CPU
                np.testing.assert_array_equal(g.numpy(), w.numpy())
        rhs = cv.tensor(spd[..., :1], carrier=CPU)
        np.testing.assert_array_equal(
            F.solve(cv.tensor(spd, carrier=CPU), rhs).numpy(),
            F.solve(cv.tensor(spd, carrier=Generic), cv.move(rhs, Generic)).numpy(),
        )
        for g, w in zip(
            F.svd(cv.tensor(spd, carrier=CPU)), F.svd(cv.tensor(spd, carrier=Generic)), strict=True
        ):
            np.testing.assert_array_equal(g.numpy(), w.numpy())


# -- gradients -------------------------------------------------------------------------------


def _numeric(f: Callable[[np.ndarray[Any, Any]], float], a: np.ndarray[Any, Any]) -> Any:
    grad = np.zeros_like(a)
    for index in np.ndindex(a.shape):
        step = np.zeros_like(a)
        step[index] = 1e-6
        grad[index] = (f(a + step) - f(a - step)) / 2e-6
    return grad


def _symmetric(x: Any) -> Any:
    return (x + np.swapaxes(x, -1, -2)) / 2 if isinstance(x, np.ndarray) else (x + x.mT) * 0.5


RNG = np.random.default_rng(7)
B = RNG.standard_normal((3, 3))
SPD = B @ B.T + 3 * np.eye(3)
W33, W3, W32 = RNG.standard_normal((3, 3)), RNG.standard_normal(3), RNG.standard_normal((3, 2))


def _t(values: Any) -> cv.Tensor:
    return cv.tensor(values, dtype=cv.float64, carrier=Generic)


def _signed(u: Any, vh: Any) -> tuple[Any, Any]:
    """Singular vectors with a fixed sign (the first row of U positive), on either side."""
    if isinstance(u, np.ndarray):
        sign = np.sign(u[0])
        return u * sign, vh * sign[:, None]
    sign = F.sign(u[0])
    return u * sign, vh * F.unsqueeze(sign, axes=(1,))


GRADIENT_CASES: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any], Any]] = {
    "inv": (
        lambda x: (F.inv(x) * _t(W33)).sum(),
        lambda a: (np.linalg.inv(a) * W33).sum(),
        SPD,
    ),
    "solve-matrix": (
        lambda x: (F.solve(x, _t(W32)) * _t(W32)).sum(),
        lambda a: (np.linalg.solve(a, W32) * W32).sum(),
        SPD,
    ),
    "solve-vector-rhs": (
        lambda x: (F.solve(_t(SPD), x) * _t(W3)).sum(),
        lambda b: (np.linalg.solve(SPD, b) * W3).sum(),
        W3,
    ),
    "cholesky-lower": (
        lambda x: (F.cholesky(_symmetric(x)) * _t(W33)).sum(),
        lambda a: (np.linalg.cholesky(_symmetric(a)) * W33).sum(),
        SPD,
    ),
    "cholesky-upper": (
        lambda x: (F.cholesky(_symmetric(x), upper=True) * _t(W33)).sum(),
        lambda a: (np.linalg.cholesky(_symmetric(a), upper=True) * W33).sum(),
        SPD,
    ),
    "eigh": (
        lambda x: (
            (F.eigh(_symmetric(x))[0] * _t(W3)).sum()
            + (_signed(F.eigh(_symmetric(x))[1].mT, F.eigh(_symmetric(x))[1])[0] * _t(W33)).sum()
        ),
        lambda a: (
            (np.linalg.eigh(_symmetric(a))[0] * W3).sum()
            + (
                _signed(np.linalg.eigh(_symmetric(a))[1].T, np.linalg.eigh(_symmetric(a))[1])[0]
                * W33
            ).sum()
        ),
        SPD,
    ),
    "qr-tall": (
        lambda x: (F.qr(x)[0] * _t(W32)).sum() + (F.qr(x)[1] * _t(W33[:2, :2])).sum(),
        lambda a: (np.linalg.qr(a)[0] * W32).sum() + (np.linalg.qr(a)[1] * W33[:2, :2]).sum(),
        W32 + 0.5,
    ),
}
for shape in ((4, 3), (3, 4), (3, 3)):
    k = min(shape)
    wu, ws, wvh = (
        RNG.standard_normal((shape[0], k)),
        RNG.standard_normal(k),
        RNG.standard_normal((k, shape[1])),
    )

    def _svd_cv(x: Any, wu: Any = wu, ws: Any = ws, wvh: Any = wvh) -> Any:
        u, s, vh = F.svd(x, full_matrices=False)
        u, vh = _signed(u, vh)
        return (u * _t(wu)).sum() + (s * _t(ws)).sum() + (vh * _t(wvh)).sum()

    def _svd_np(a: Any, wu: Any = wu, ws: Any = ws, wvh: Any = wvh) -> Any:
        u, s, vh = np.linalg.svd(a, full_matrices=False)
        u, vh = _signed(u, vh)
        return (u * wu).sum() + (s * ws).sum() + (vh * wvh).sum()

    GRADIENT_CASES[f"svd-{shape[0]}x{shape[1]}"] = (_svd_cv, _svd_np, RNG.standard_normal(shape))


class TestGradients:
    @pytest.mark.parametrize("case", sorted(GRADIENT_CASES))
    def test_vjp_matches_finite_differences(self, case: str) -> None:
        """Each VJP is the derivative NumPy's own function has, by central differences."""
        forward, reference, point = GRADIENT_CASES[case]
        x = _t(point).requires_grad_()
        forward(x).backward()
        np.testing.assert_allclose(x.grad.numpy(), _numeric(reference, point), atol=1e-6)

    @pytest.mark.parametrize("name", COMPLEX)
    def test_complex_plan_vjp_is_the_holomorphic_derivative(self, name: str) -> None:
        """The complex plans' VJPs are f'(z) (the transpose convention, no conjugation)."""
        values = np.array([0.3 + 0.2j, -0.4 + 0.1j, 1.7 - 0.3j])
        z = cv.tensor(values, carrier=Generic).requires_grad_()
        getattr(cv, name)(z).sum().backward()
        step = 1e-7
        plain = getattr(
            np,
            {"asin": "arcsin", "acos": "arccos", "atan": "arctan"}.get(
                name, {"asinh": "arcsinh", "acosh": "arccosh", "atanh": "arctanh"}.get(name, name)
            ),
        )
        derivative = (plain(values + step) - plain(values - step)) / (2 * step)
        np.testing.assert_allclose(z.grad.numpy(), derivative, rtol=1e-6)

    def test_complex_decomposition_gradient_is_refused(self) -> None:
        """A complex eigh's gradient needs conjugation: NotImplementedError saying so."""
        z = cv.tensor(np.eye(2) + 0j, carrier=Generic).requires_grad_()
        w, _ = F.eigh(z)
        with pytest.raises(NotImplementedError, match="eigh: the gradient of a complex eigh needs"):
            w.sum().backward()
        assert z.grad is None

    def test_full_matrices_gradient_of_a_wide_matrix_is_refused(self) -> None:
        """U of a non-square full SVD has arbitrary extra columns: its gradient is refused."""
        x = _t(np.ones((2, 3))).requires_grad_()
        u, _, _ = F.svd(x)
        with pytest.raises(NotImplementedError, match="use full_matrices=False"):
            u.sum().backward()
        assert x.grad is None


# -- refusals ----------------------------------------------------------------------------------


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts Generic results published (its kernels' output wrapping)."""
    count: list[int] = []
    original = Generic.wrap.__func__  # type: ignore[attr-defined]  # a classmethod's function

    def counting(cls: Any, values: Any, dtype: cv.DType) -> Any:
        count.append(1)
        return original(cls, values, dtype)

    monkeypatch.setattr(Generic, "wrap", classmethod(counting))
    return count


class TestRefusals:
    @pytest.mark.parametrize("name", ["inv", "cholesky", "eigh"])
    def test_non_square_input_is_refused_before_publishing(
        self, name: str, published: list[int]
    ) -> None:
        x = cv.tensor(np.ones((2, 3)), carrier=Generic)
        published.clear()
        with pytest.raises(ValueError) as info:
            getattr(F, name)(x)
        assert str(info.value) == (
            f"{name} on Generic: input of shape (2, 3) is not a stack of square matrices (the "
            f"last two axes); pass an array of shape (..., n, n)"
        )
        assert published == []

    def test_one_dimensional_input_is_refused(self) -> None:
        with pytest.raises(ValueError, match=r"svd on Generic: input of shape \(3,\) is not a"):
            F.svd(cv.tensor(np.ones(3), carrier=Generic))

    def test_singular_matrix_is_refused(self, published: list[int]) -> None:
        x = cv.tensor(np.ones((2, 2)), carrier=Generic)
        published.clear()
        with pytest.raises(ValueError) as info:
            F.inv(x)
        assert str(info.value) == (
            "inv on Generic: a matrix is singular, so it has no inverse; use "
            "conveyor.array_api.linalg.pinv for a least-squares inverse"
        )
        with pytest.raises(ValueError, match="solve on Generic: a matrix is singular"):
            F.solve(x, cv.tensor(np.ones(2), carrier=Generic))
        assert published == []

    def test_indefinite_matrix_has_no_cholesky_factor(self) -> None:
        with pytest.raises(ValueError) as info:
            F.cholesky(cv.tensor(-np.eye(2), carrier=Generic))
        assert str(info.value) == (
            "cholesky on Generic: a matrix is not positive definite, so it has no Cholesky factor"
        )

    def test_mismatched_right_hand_side_is_refused(self) -> None:
        a = cv.tensor(np.eye(3), carrier=Generic)
        with pytest.raises(ValueError) as info:
            F.solve(a, cv.tensor(np.ones((2, 1)), carrier=Generic))
        assert str(info.value) == (
            "solve on Generic: operand shapes (3, 3) and (2, 1) do not fit: other must be of "
            "shape (3,) or (..., 3, k); reshape other"
        )

    @pytest.mark.parametrize("name", LINALG)
    def test_integer_input_is_refused_by_the_policy(self, name: str) -> None:
        operands = (cv.int64, cv.int64) if name == "solve" else (cv.int64,)
        with pytest.raises(TypeError) as info:
            cv.resolve_plan(name, *operands)
        assert "accepts floating or complex dtypes" in str(info.value)

    @pytest.mark.parametrize("name", COMPLEX)
    def test_complex_plans_refuse_real_input(self, name: str) -> None:
        with pytest.raises(TypeError, match=f"{name} accepts complex dtypes"):
            cv.resolve_plan(name, cv.float32)

    def test_bad_options_are_refused(self) -> None:
        with pytest.raises(ValueError, match="option mode must be one of 'reduced', 'complete'"):
            F.qr(cv.tensor(np.eye(2), carrier=Generic), mode="r")
        with pytest.raises(TypeError, match="option full_matrices must be a bool"):
            F.svd(cv.tensor(np.eye(2), carrier=Generic), full_matrices=1)


class TestOtherCarriers:
    def test_metal_does_not_advertise_the_new_names(self) -> None:
        """Metal advertises no linalg or complex plan, so it refuses them before any work."""
        metal = pytest.importorskip("conveyor_metal")
        declared = cv.declared_capabilities(metal.Metal)
        for name in LINALG + COMPLEX:
            assert declared.of(name) == ()

    def test_generic_and_cpu_advertise_every_plan_of_the_new_names(self) -> None:
        """The reference and the performance carrier run every plan the policy resolves."""
        for cls in (Generic, CPU):
            declared = cv.declared_capabilities(cls)
            for name in LINALG + COMPLEX:
                assert len(declared.of(name)) == len(enumerate_plans(name)) > 0
