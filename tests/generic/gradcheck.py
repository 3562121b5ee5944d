"""The numeric gradient check, shared by every carrier of the distribution.

``GRADIENT_CASES`` holds at least one case per differentiable planned name, with inputs away
from kinks and ties (finite differences cannot see a convention). ``check_gradient(carrier,
case)`` runs the case in float64 on ``carrier``, backpropagates random output weights and
compares every input gradient with central differences of the same carrier's forward.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

import conveyor as cv
from conveyor.engine import functional as F
from tests.generic.oracle import dtype_of, make_tensor

_Build = Callable[[np.random.Generator], tuple[list[Any], dict[str, Any]]]


class GradientCase(NamedTuple):
    """One finite-difference scenario: float64 arrays are differentiated, int64 are indices."""

    id: str
    name: str
    build: _Build


def _away(rng: np.random.Generator, shape: tuple[int, ...], low: float, high: float) -> Any:
    """Values with ``low <= |x| <= high`` and random signs (away from a kink at 0)."""
    return rng.choice([-1.0, 1.0], size=shape) * rng.uniform(low, high, size=shape)


def _distinct(rng: np.random.Generator, shape: tuple[int, ...]) -> Any:
    """A shuffled ladder: every pair of values differs by at least 0.25."""
    count = int(np.prod(shape))
    return rng.permutation(np.arange(count) * 0.25 - count * 0.1).reshape(shape)


def _case(id: str, name: str | None = None) -> Callable[[_Build], _Build]:
    def register(build: _Build) -> _Build:
        GRADIENT_CASES.append(GradientCase(id, name or id, build))
        return build

    return register


GRADIENT_CASES: list[GradientCase] = []

_SMOOTH = ("neg", "sin", "cos", "exp", "exp2", "tanh", "sigmoid", "silu", "softplus", "erf")
for _name in _SMOOTH:
    GRADIENT_CASES.append(
        GradientCase(_name, _name, lambda rng: ([rng.standard_normal((2, 3)) * 1.5], {}))
    )
for _name in ("recip",):
    GRADIENT_CASES.append(
        GradientCase(_name, _name, lambda rng: ([_away(rng, (2, 3), 0.5, 2)], {}))
    )
for _name in ("sqrt", "rsqrt", "log", "log2"):
    GRADIENT_CASES.append(
        GradientCase(_name, _name, lambda rng: ([rng.uniform(0.5, 3.0, (2, 3))], {}))
    )
for _name, _fields in (
    ("abs", {}),
    ("relu", {}),
    ("leaky_relu", {"negative_slope": 0.2}),
    ("elu", {"alpha": 1.3}),
):
    GRADIENT_CASES.append(
        GradientCase(_name, _name, lambda rng, f=_fields: ([_away(rng, (2, 3), 0.1, 2)], f))
    )
GRADIENT_CASES.append(
    GradientCase("gelu", "gelu", lambda rng: ([rng.standard_normal((2, 3)) * 2], {}))
)
GRADIENT_CASES.append(
    GradientCase(
        "gelu-tanh",
        "gelu",
        lambda rng: ([rng.standard_normal((2, 3)) * 2], {"approximate": "tanh"}),
    )
)


@_case("add")
def _add(rng: np.random.Generator) -> Any:
    return [rng.standard_normal((2, 3)), rng.standard_normal(3)], {}


@_case("add-scalar", "add")
def _add_scalar(rng: np.random.Generator) -> Any:
    return [rng.standard_normal((2, 3)), 2.5], {}


@_case("sub")
def _sub(rng: np.random.Generator) -> Any:
    return [rng.standard_normal((2, 1)), rng.standard_normal((2, 3))], {}


@_case("sub-scalar-left", "sub")
def _sub_scalar(rng: np.random.Generator) -> Any:
    return [1.5, rng.standard_normal((2, 3))], {}


@_case("mul")
def _mul(rng: np.random.Generator) -> Any:
    return [rng.standard_normal((2, 3)), rng.standard_normal(3)], {}


@_case("mul-scalar", "mul")
def _mul_scalar(rng: np.random.Generator) -> Any:
    return [rng.standard_normal((2, 3)), -3.0], {}


@_case("elementwise_mul")
def _elementwise_mul(rng: np.random.Generator) -> Any:
    return [rng.standard_normal((2, 3)), rng.standard_normal((2, 3))], {}


@_case("div")
def _div(rng: np.random.Generator) -> Any:
    return [rng.standard_normal((2, 3)), _away(rng, (3,), 0.5, 2)], {}


@_case("div-scalar-numerator", "div")
def _div_scalar(rng: np.random.Generator) -> Any:
    return [2.0, _away(rng, (2, 3), 0.5, 2)], {}


@_case("pow")
def _pow(rng: np.random.Generator) -> Any:
    return [rng.uniform(0.5, 2.0, (2, 3)), rng.uniform(-2.0, 2.0, (2, 3))], {}


@_case("pow-scalar-exponent", "pow")
def _pow_exponent(rng: np.random.Generator) -> Any:
    return [rng.uniform(0.5, 2.0, (2, 3)), 3.0], {}


@_case("pow-scalar-base", "pow")
def _pow_base(rng: np.random.Generator) -> Any:
    return [1.7, rng.uniform(-2.0, 2.0, (2, 3))], {}


def _apart(rng: np.random.Generator) -> list[Any]:
    other = rng.standard_normal(3)
    return [other + _away(rng, (2, 3), 0.2, 1.0), other]


@_case("maximum")
def _maximum(rng: np.random.Generator) -> Any:
    return _apart(rng), {}


@_case("minimum")
def _minimum(rng: np.random.Generator) -> Any:
    return _apart(rng), {}


@_case("rem")
def _rem(rng: np.random.Generator) -> Any:
    divisor = _away(rng, (3,), 1.0, 2.0)
    quotient = rng.integers(-3, 3, (2, 3)) + rng.uniform(0.1, 0.9, (2, 3))
    return [quotient * divisor, divisor], {}


@_case("clamp")
def _clamp(rng: np.random.Generator) -> Any:
    lo = np.array([-0.5, -1.0, 0.0])
    hi = np.array([[0.5], [1.5]])
    x = rng.uniform(-2.0, 2.0, (2, 3))
    x = np.where(np.abs(x - lo) < 0.1, x + 0.2, x)
    x = np.where(np.abs(x - hi) < 0.1, x + 0.2, x)
    return [x, lo, hi], {}


@_case("clamp-scalar-lo", "clamp")
def _clamp_scalar(rng: np.random.Generator) -> Any:
    x = rng.uniform(-2.0, 2.0, (2, 3))
    return [np.where(np.abs(x + 0.3) < 0.1, 0.5, x), -0.3, None], {}


@_case("clamp-crossed-bounds", "clamp")
def _clamp_crossed(rng: np.random.Generator) -> Any:
    return [rng.standard_normal((2, 3)), np.full(3, 1.0), np.full(3, -1.0)], {}


@_case("select")
def _select(rng: np.random.Generator) -> Any:
    condition = rng.random((2, 3)) < 0.5
    return [condition, rng.standard_normal((2, 3)), rng.standard_normal(3)], {}


@_case("reduce_sum")
def _sum(rng: np.random.Generator) -> Any:
    return [rng.standard_normal((2, 3, 2))], {"axis": (0, 2), "keepdims": True}


@_case("reduce_sum-all", "reduce_sum")
def _sum_all(rng: np.random.Generator) -> Any:
    return [rng.standard_normal((2, 3))], {}


@_case("reduce_prod")
def _prod(rng: np.random.Generator) -> Any:
    return [_away(rng, (2, 3), 0.5, 1.5)], {"axis": 1}


@_case("reduce_prod-zeros", "reduce_prod")
def _prod_zeros(rng: np.random.Generator) -> Any:
    # Row 0 has one zero (its gradient is the product of the others), row 1 two, row 2 none.
    x = _away(rng, (3, 4), 0.5, 1.5)
    x[0, 1] = x[1, 0] = x[1, 3] = 0.0
    return [x], {"axis": -1, "keepdims": True}


@_case("reduce_prod-all", "reduce_prod")
def _prod_all(rng: np.random.Generator) -> Any:
    return [_away(rng, (2, 2), 0.5, 1.5)], {}


@_case("reduce_max")
def _max(rng: np.random.Generator) -> Any:
    return [_distinct(rng, (3, 4))], {"axis": 1}


@_case("reduce_min")
def _min(rng: np.random.Generator) -> Any:
    return [_distinct(rng, (3, 4))], {"axis": None, "keepdims": True}


@_case("cumsum")
def _cumsum(rng: np.random.Generator) -> Any:
    return [rng.standard_normal((2, 4))], {"axis": 1}


@_case("cumsum-flat", "cumsum")
def _cumsum_flat(rng: np.random.Generator) -> Any:
    return [rng.standard_normal((3, 2))], {"axis": None}


@_case("sort")
def _sort(rng: np.random.Generator) -> Any:
    return [_distinct(rng, (2, 4))], {}


@_case("sort-descending", "sort")
def _sort_descending(rng: np.random.Generator) -> Any:
    return [_distinct(rng, (3, 2))], {"axis": 0, "descending": True}


@_case("topk")
def _topk(rng: np.random.Generator) -> Any:
    return [_distinct(rng, (2, 5))], {"k": 2}


@_case("topk-smallest", "topk")
def _topk_smallest(rng: np.random.Generator) -> Any:
    return [_distinct(rng, (4, 2))], {"k": 1, "axis": 0, "largest": False}


_MATMUL_SHAPES = {
    "matmul": ((2, 3), (3, 4)),
    "matmul-1d-1d": ((3,), (3,)),
    "matmul-1d-2d": ((3,), (3, 2)),
    "matmul-2d-1d": ((2, 3), (3,)),
    "matmul-batched": ((2, 2, 3), (3, 4)),
    "matmul-broadcast": ((2, 1, 2, 3), (3, 3, 2)),
    "matmul-1d-batched": ((3,), (2, 3, 2)),
}
for _id, (_a, _b) in _MATMUL_SHAPES.items():
    GRADIENT_CASES.append(
        GradientCase(
            _id,
            "matmul",
            lambda rng, a=_a, b=_b: ([rng.standard_normal(a), rng.standard_normal(b)], {}),
        )
    )


def _spd(rng: np.random.Generator, n: int = 3) -> Any:
    """A symmetric positive-definite matrix with distinct eigenvalues."""
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return q @ np.diag(np.arange(1.0, n + 1.0) * 1.5) @ q.T


GRADIENT_CASES += [
    GradientCase("inv", "inv", lambda rng: ([_spd(rng)], {})),
    GradientCase("solve", "solve", lambda rng: ([_spd(rng), rng.standard_normal((3, 2))], {})),
    GradientCase("solve-vector", "solve", lambda rng: ([_spd(rng), rng.standard_normal(3)], {})),
    GradientCase("cholesky", "cholesky", lambda rng: ([_spd(rng)], {})),
    GradientCase("cholesky-upper", "cholesky", lambda rng: ([_spd(rng)], {"upper": True})),
    GradientCase("eigh", "eigh", lambda rng: ([_spd(rng)], {})),
    GradientCase(
        "svd", "svd", lambda rng: ([rng.standard_normal((4, 3))], {"full_matrices": False})
    ),
    GradientCase("qr", "qr", lambda rng: ([rng.standard_normal((4, 3))], {})),
]
# Names that read one triangle of a symmetric input: their VJP is the symmetrised gradient,
# while a difference in one element moves only that triangle, so the differences are
# symmetrised before comparing.
_SYMMETRIC = frozenset({"cholesky", "eigh"})
#: The complex-only names: their rules are holomorphic derivatives, checked on complex input in
#: tests/generic/test_linalg_operations.py (this check differentiates float64 operands).
COMPLEX_ONLY = frozenset(
    {"tan", "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh", "atanh", "expm1", "log1p"}
)

_CONV: dict[str, tuple[tuple[int, ...], tuple[int, ...], dict[str, Any]]] = {
    "conv_general": ((2, 2, 5), (3, 2, 3), {}),
    "conv_general-strided-padded-2d": (
        (1, 2, 5, 4),
        (2, 2, 2, 3),
        {"window_strides": (2, 1), "padding": ((1, 0), (2, 1))},
    ),
    "conv_general-dilated": (
        (1, 1, 5),
        (2, 1, 2),
        {"lhs_dilation": (2,), "rhs_dilation": (2,), "padding": ((3, 1),), "window_strides": (2,)},
    ),
    "conv_general-groups": ((2, 4, 5), (6, 2, 2), {"feature_group_count": 2, "padding": ((1, 1),)}),
    "conv_general-nhwc": (
        (1, 4, 5, 2),
        (2, 3, 2, 3),
        {"dimension_numbers": ("NHWC", "HWIO", "NHWC"), "window_strides": (1, 2)},
    ),
    "conv_general-permuted-layouts": (
        (3, 2, 4),
        (4, 2, 3),
        {"dimension_numbers": ("WNC", "IWO", "CWN"), "feature_group_count": 1},
    ),
}
for _id, (_x, _w, _fields) in _CONV.items():
    GRADIENT_CASES.append(
        GradientCase(
            _id,
            "conv_general",
            lambda rng, x=_x, w=_w, f=_fields: (
                [rng.standard_normal(x), rng.standard_normal(w)],
                f,
            ),
        )
    )


@_case("gather")
def _gather(rng: np.random.Generator) -> Any:
    return [rng.standard_normal((3, 4)), rng.integers(0, 3, (2, 4))], {"axis": 0}


@_case("gather-smaller-index", "gather")
def _gather_small(rng: np.random.Generator) -> Any:
    return [rng.standard_normal((3, 4)), rng.integers(0, 4, (2, 6))], {"axis": 1}


@_case("scatter")
def _scatter(rng: np.random.Generator) -> Any:
    # Distinct targets per column: with duplicates only the last write is differentiable.
    index = np.stack([rng.permutation(3)[:2] for _ in range(3)], axis=1)
    return [rng.standard_normal((3, 4)), index, rng.standard_normal((2, 4))], {"axis": 0}


@_case("scatter_add")
def _scatter_add(rng: np.random.Generator) -> Any:
    index = rng.integers(0, 4, (3, 2))
    return [rng.standard_normal((3, 4)), index, rng.standard_normal((3, 3))], {"axis": 1}


def _tensor(value: Any, carrier: type, grad: bool) -> Any:
    if isinstance(value, np.ndarray):
        dtype = dtype_of(value)
        return make_tensor(value, dtype, carrier, requires_grad=grad and dtype is cv.float64)
    return value


def _first(result: Any) -> Any:
    return result[0] if isinstance(result, tuple) else result


def check_gradient(
    carrier: type,
    case: GradientCase,
    *,
    seed: int = 0,
    eps: float = 1e-6,
    rtol: float = 1e-5,
    function: Callable[..., Any] | None = None,
) -> None:
    """Analytic gradients of ``case`` on ``carrier`` equal central finite differences.

    ``function`` (default: the public function named ``case.name``) lets composed functions
    that are not dispatch names use the same check.
    """
    rng = np.random.default_rng(seed)
    operands, fields = case.build(rng)
    function = function or getattr(F, case.name)
    tensors = [_tensor(v, carrier, True) for v in operands]
    out = _first(function(*tensors, **fields))
    weights = rng.standard_normal(out.shape)
    out.backward(make_tensor(weights, cv.float64, carrier))

    def loss(values: list[Any]) -> float:
        with cv.no_grad():
            result = _first(function(*(_tensor(v, carrier, False) for v in values), **fields))
        return float(np.sum(result.numpy() * weights))

    for i, value in enumerate(operands):
        if not (isinstance(value, np.ndarray) and value.dtype == np.float64):
            continue
        numeric = np.zeros(value.shape)
        for j in np.ndindex(*value.shape):
            shifted = [v.copy() if isinstance(v, np.ndarray) else v for v in operands]
            shifted[i][j] = value[j] + eps
            up = loss(shifted)
            shifted[i][j] = value[j] - eps
            numeric[j] = (up - loss(shifted)) / (2 * eps)
        if case.name in _SYMMETRIC and i == 0:
            numeric = (numeric + numeric.T) / 2
        grad = tensors[i].grad
        analytic = np.zeros(value.shape) if grad is None else np.asarray(grad.numpy())
        np.testing.assert_allclose(
            analytic, numeric, rtol=rtol, atol=1e-6, err_msg=f"{case.id}: operand {i}"
        )
