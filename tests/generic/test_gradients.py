"""Gradients: every VJP in conveyor.engine.gradients, numerically and at its conventions."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.engine import functional as F
from conveyor.engine.gradients import differentiable_operations, vjp
from conveyor.types.policy import operation_spec, registered_operations
from conveyor_generic import Generic
from tests.generic.gradcheck import COMPLEX_ONLY, GRADIENT_CASES, GradientCase, check_gradient
from tests.generic.oracle import make_tensor


def g64(values: Any, *, grad: bool = True) -> cv.Tensor:
    return cv.tensor(values, dtype=cv.float64, carrier=Generic, requires_grad=grad)


def grad_of(x: cv.Tensor) -> Any:
    assert x.grad is not None
    return x.grad.numpy()


class TestRuleTable:
    def test_every_differentiable_name_has_a_rule(self) -> None:
        """The rule table covers exactly the planned names whose spec is differentiable."""
        expected = sorted(n for n in registered_operations() if operation_spec(n).differentiable)
        assert list(differentiable_operations()) == expected

    def test_every_differentiable_name_has_a_gradient_case(self) -> None:
        """The numeric check below reaches every differentiable name with real operands at
        least once (the complex-only names are checked on complex input elsewhere)."""
        assert {case.name for case in GRADIENT_CASES} == set(differentiable_operations()) - (
            COMPLEX_ONLY
        )

    def test_case_ids_are_unique(self) -> None:
        ids = [case.id for case in GRADIENT_CASES]
        assert len(ids) == len(set(ids))

    def test_vjp_of_non_differentiable_name_is_refused(self) -> None:
        """vjp names the operation and the carrier when the name has no rule."""
        x = g64([1.0, 2.0])
        op = x.carrier.dispatch_op("floor")
        op.forward(x)
        with pytest.raises(NotImplementedError, match=r"floor on Generic: .*no gradient rule"):
            vjp(op, g64([1.0, 1.0], grad=False))


@pytest.mark.parametrize("case", GRADIENT_CASES, ids=lambda c: c.id)
def test_gradient_matches_finite_differences(case: GradientCase) -> None:
    """Analytic gradients on Generic equal central differences in float64."""
    check_gradient(Generic, case)


def backward_of(result: cv.Tensor, weights: Any = None) -> None:
    gradient = np.ones(result.shape) if weights is None else np.asarray(weights, np.float64)
    result.backward(make_tensor(gradient, result.dtype, Generic))


class TestConventions:
    """The values docs/gradients.md fixes at kinks, ties and zeros."""

    @pytest.mark.parametrize(
        ("name", "fields", "expected"),
        [
            ("relu", {}, 0.0),
            ("abs", {}, 0.0),
            ("leaky_relu", {"negative_slope": 0.25}, 0.25),
            ("elu", {"alpha": 1.5}, 1.5),
            ("gelu", {}, 0.5),
            ("gelu", {"approximate": "tanh"}, 0.5),
            ("silu", {}, 0.5),
        ],
    )
    def test_derivative_at_zero(self, name: str, fields: dict[str, Any], expected: float) -> None:
        """Activations with a kink at 0 take the documented one-sided value there."""
        x = g64([0.0, 0.0])
        backward_of(getattr(F, name)(x, **fields))
        np.testing.assert_allclose(grad_of(x), [expected, expected])

    @pytest.mark.parametrize("name", ["maximum", "minimum"])
    def test_binary_extremum_ties_split_in_halves(self, name: str) -> None:
        """Where both operands are equal, each receives half of the gradient."""
        a, b = g64([1.0, 2.0, 3.0]), g64([1.0, 5.0, 0.0])
        backward_of(getattr(F, name)(a, b), [2.0, 2.0, 2.0])
        wins = [0.0, 0.0, 2.0] if name == "maximum" else [0.0, 2.0, 0.0]
        np.testing.assert_allclose(grad_of(a), [1.0, *wins[1:]])
        np.testing.assert_allclose(grad_of(b), [1.0, *(2.0 - w for w in wins[1:])])

    def test_binary_extremum_nan_operand_takes_the_gradient(self) -> None:
        """A NaN operand is the result, so it alone receives the gradient."""
        a, b = g64([np.nan, 1.0]), g64([1.0, np.nan])
        backward_of(F.maximum(a, b))
        np.testing.assert_array_equal(grad_of(a), [1.0, 0.0])
        np.testing.assert_array_equal(grad_of(b), [0.0, 1.0])

    @pytest.mark.parametrize("name", ["reduce_max", "reduce_min"])
    def test_reduction_extremum_splits_evenly_among_ties(self, name: str) -> None:
        """Every element equal to the result gets an equal share."""
        x = g64([[3.0, 1.0, 3.0, 3.0], [1.0, 2.0, 1.0, 0.0]])
        backward_of(getattr(F, name)(x, axis=1))
        if name == "reduce_max":
            expected = [[1 / 3, 0, 1 / 3, 1 / 3], [0, 1, 0, 0]]
        else:
            expected = [[0, 1, 0, 0], [0, 0, 0, 1]]
        np.testing.assert_allclose(grad_of(x), expected)

    def test_reduction_extremum_nan_result_goes_to_the_nans(self) -> None:
        """A NaN maximum sends its gradient to the NaN elements, split evenly."""
        x = g64([1.0, np.nan, 5.0, np.nan])
        backward_of(F.reduce_max(x))
        np.testing.assert_array_equal(grad_of(x), [0.0, 0.5, 0.0, 0.5])

    def test_clamp_passes_gradient_on_the_bounds(self) -> None:
        """x receives the gradient where lo <= x <= hi, bounds included."""
        x = g64([-2.0, -1.0, 0.0, 1.0, 2.0])
        backward_of(F.clamp(x, -1.0, 1.0))
        np.testing.assert_array_equal(grad_of(x), [0.0, 1.0, 1.0, 1.0, 0.0])

    def test_clamp_bound_tensors_receive_what_they_chose(self) -> None:
        """lo and hi tensors get the gradient where they are the result."""
        x, lo, hi = g64([-2.0, 0.0, 2.0]), g64([-1.0, -1.0, -1.0]), g64([1.0, 1.0, 1.0])
        backward_of(F.clamp(x, lo, hi))
        np.testing.assert_array_equal(grad_of(x), [0.0, 1.0, 0.0])
        np.testing.assert_array_equal(grad_of(lo), [1.0, 0.0, 0.0])
        np.testing.assert_array_equal(grad_of(hi), [0.0, 0.0, 1.0])

    def test_pow_exponent_gradient_is_zero_at_zero_base(self) -> None:
        """d(a**b)/db is 0 where a == 0 and b >= 0 (log(0) would give NaN)."""
        a, b = g64([0.0, 0.0, 2.0]), g64([2.0, 0.0, 3.0])
        backward_of(F.pow(a, b))
        np.testing.assert_allclose(grad_of(b), [0.0, 0.0, 8.0 * np.log(2.0)])
        np.testing.assert_allclose(grad_of(a), [0.0, 0.0, 12.0])

    def test_pow_base_gradient_is_zero_for_zero_exponent(self) -> None:
        """d(a**0)/da is 0 even at a == 0."""
        a = g64([0.0, 3.0])
        backward_of(F.pow(a, 0.0))
        np.testing.assert_array_equal(grad_of(a), [0.0, 0.0])

    def test_prod_with_one_zero_is_the_product_of_the_others(self) -> None:
        """No division by the zero: its gradient is the product of the rest; others get 0."""
        x = g64([[2.0, 0.0, 3.0], [0.0, 0.0, 5.0], [2.0, 4.0, 0.5]])
        backward_of(F.reduce_prod(x, axis=1))
        np.testing.assert_allclose(grad_of(x), [[0, 6, 0], [0, 0, 0], [2, 1, 8]])

    def test_rem_divisor_gradient_is_minus_floor_of_quotient(self) -> None:
        a, b = g64([7.0, -7.0]), g64([2.0, 2.0])
        backward_of(F.rem(a, b))
        np.testing.assert_array_equal(grad_of(a), [1.0, 1.0])
        np.testing.assert_array_equal(grad_of(b), [-3.0, 4.0])

    def test_scatter_duplicates_each_receive_the_written_gradient(self) -> None:
        """As in PyTorch: every src entry aimed at a position gets that position's gradient."""
        x, src = g64([0.0, 0.0]), g64([1.0, 2.0])
        index = cv.tensor([0, 0], dtype=cv.int64, carrier=Generic)
        backward_of(F.scatter(x, index, src, axis=0), [5.0, 7.0])
        np.testing.assert_array_equal(grad_of(x), [0.0, 7.0])
        np.testing.assert_array_equal(grad_of(src), [5.0, 5.0])

    def test_sort_values_gradient_returns_to_the_source_positions(self) -> None:
        x = g64([3.0, 1.0, 2.0])
        values, _ = F.sort(x)
        backward_of(values, [10.0, 20.0, 30.0])
        np.testing.assert_array_equal(grad_of(x), [30.0, 10.0, 20.0])

    def test_topk_gradient_reaches_only_the_chosen(self) -> None:
        x = g64([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]])
        values, _ = F.topk(x, k=2)
        backward_of(values, [[1.0, 2.0], [3.0, 4.0]])
        np.testing.assert_array_equal(grad_of(x), [[1.0, 0.0, 2.0], [0.0, 3.0, 4.0]])

    def test_complex_rules_transpose_the_jvp_without_conjugation(self) -> None:
        """mul: the gradient for z in z * w is g * w (JAX's convention, no conj)."""
        z = cv.tensor([1 + 2j], dtype=cv.complex128, carrier=Generic, requires_grad=True)
        w = cv.tensor([3 - 1j], dtype=cv.complex128, carrier=Generic)
        product = F.mul(z, w)
        product.backward(cv.tensor([1 + 0j], dtype=cv.complex128, carrier=Generic))
        np.testing.assert_allclose(grad_of(z), [3 - 1j])

    def test_complex_abs_gradient_is_conj_over_modulus(self) -> None:
        z = cv.tensor([3 + 4j, 0j], dtype=cv.complex128, carrier=Generic, requires_grad=True)
        backward_of(F.abs(z))
        np.testing.assert_allclose(grad_of(z), [(3 - 4j) / 5, 0])


class TestGradientRouting:
    def test_half_precision_gradient_keeps_the_input_dtype(self) -> None:
        x = cv.tensor([1.0, 2.0], dtype=cv.float16, carrier=Generic, requires_grad=True)
        F.reduce_sum(F.mul(x, x)).backward()
        assert x.grad is not None and x.grad.dtype is cv.float16
        np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])

    def test_integer_and_index_inputs_get_none(self) -> None:
        """backward returns None for integer tensors, indices and the select condition."""
        w = g64([1.0, 2.0])
        ints = cv.tensor([3, 4], dtype=cv.int32, carrier=Generic)
        op = w.carrier.dispatch_op("mul")
        out = op.forward(ints, w)
        grads = op.backward(cv.tensor([1.0, 1.0], dtype=out.dtype, carrier=Generic))
        assert grads[0] is None
        np.testing.assert_array_equal(grads[1].numpy(), [3.0, 4.0])

        condition = cv.tensor([True, False], carrier=Generic)
        op = w.carrier.dispatch_op("select")
        op.forward(condition, w, 0.0)
        grads = op.backward(cv.tensor([1.0, 1.0], dtype=cv.float64, carrier=Generic))
        assert len(grads) == 2 and grads[0] is None
        np.testing.assert_array_equal(grads[1].numpy(), [1.0, 0.0])

    def test_broadcast_gradients_are_summed_back(self) -> None:
        """The engine reduces broadcast rule results to each input's shape."""
        a, b = g64([[1.0, 2.0], [3.0, 4.0]]), g64([10.0, 20.0])
        F.reduce_sum(F.mul(a, b)).backward()
        np.testing.assert_array_equal(grad_of(b), [4.0, 6.0])


_NON_DIFFERENTIABLE = [n for n in registered_operations() if not operation_spec(n).differentiable]


@pytest.mark.parametrize("name", _NON_DIFFERENTIABLE)
def test_non_differentiable_outputs_attach_no_node(name: str) -> None:
    """Comparisons, rounding, sign and arg-reductions never join the autograd graph."""
    x = g64([[1.5, -2.5], [0.5, 3.0]])
    operands = (x, 0.5) if operation_spec(name).roles == ("input", "other") else (x,)
    result = getattr(F, name)(*operands)
    assert result.grad_fn is None and not result.requires_grad


@pytest.mark.parametrize("name", ["sort", "topk"])
def test_sort_indices_output_attaches_no_node(name: str) -> None:
    x = g64([3.0, 1.0, 2.0])
    fields = {"k": 2} if name == "topk" else {}
    values, indices = getattr(F, name)(x, **fields)
    assert values.requires_grad and values.grad_fn is not None
    assert indices.grad_fn is None and not indices.requires_grad
    assert indices.dtype is cv.int64


def test_tensor_keeps_0d_shape() -> None:
    """cv.tensor of a Python scalar or a 0-d array is 0-d, as in NumPy and PyTorch."""
    assert cv.tensor(3.0, carrier=Generic).shape == ()


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "fields"),
    [
        ((0, 2, 4), (3, 2, 2), {}),
        ((1, 2, 0), (3, 2, 2), {"padding": ((1, 1),)}),
        ((1, 2, 1), (3, 2, 3), {}),
        ((2, 0, 3), (2, 0, 2), {}),
    ],
    ids=["empty-batch", "empty-input-padded", "window-does-not-fit", "no-channels"],
)
def test_conv_gradients_of_empty_problems_have_the_input_shapes(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], fields: dict[str, Any]
) -> None:
    """Zero-sized batches, inputs and outputs give zero gradients of the right shapes."""
    x = g64(np.ones(x_shape))
    w = g64(np.ones(w_shape))
    out = F.conv_general(x, w, **fields)
    backward_of(out)
    assert x.grad is not None and x.grad.shape == x_shape
    assert w.grad is not None and w.grad.shape == w_shape
    np.testing.assert_array_equal(w.grad.numpy(), 0.0)


def test_complex_gradient_into_a_real_input_is_silent() -> None:
    """A real leaf that met a complex tensor receives the real part of its gradient, quietly."""
    x = cv.tensor([1.0, 2.0], dtype=cv.float32, carrier=Generic, requires_grad=True)
    w = cv.tensor([1 + 2j, 3j], dtype=cv.complex64, carrier=Generic)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.mul(x, w).backward(cv.tensor([1 + 0j, 1 + 0j], dtype=cv.complex64, carrier=Generic))
    np.testing.assert_array_equal(grad_of(x), [1.0, 0.0])
