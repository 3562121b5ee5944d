"""Generic matmul and conv_general against float64 / wide-integer references.

matmul follows NumPy's ``@`` (1-D operands, broadcast batches); conv_general is checked against
a direct loop over output positions and taps (``reference.conv_reference``), for every
combination of strides, padding, both dilations, feature groups and dimension numbers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import conveyor as cv
from conveyor_generic import Generic
from conveyor_testkit._reference import wide
from tests.generic.oracle import (
    HYPOTHESIS,
    arrays,
    check,
    dtypes,
    resolve,
    run,
    sum_atol,
)
from tests.generic.reference import conv_reference


@st.composite
def matmul_shapes(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    m, k, n = (draw(st.integers(0, 4)) for _ in range(3))
    batch = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3))
    a_batch, b_batch = batch.input_shapes
    a = (k,) if draw(st.booleans()) and not a_batch else (*a_batch, m, k)
    b = (k,) if draw(st.booleans()) and not b_batch else (*b_batch, k, n)
    return a, b


@pytest.mark.parametrize("dtype", dtypes("matmul"))
@HYPOTHESIS
@given(data=st.data())
def test_matmul_matches_numpy(dtype: cv.DType, data: st.DataObject) -> None:
    """Batched, broadcast and 1-D products; integers wrap, floats accumulate once."""
    a_shape, b_shape = data.draw(matmul_shapes())
    a = data.draw(arrays(dtype, a_shape, bound=100.0, finite=True))
    b = data.draw(arrays(dtype, b_shape, bound=100.0, finite=True))
    fields: dict[str, Any] = {}
    if dtype.is_floating:
        fields["accumulator_dtype"] = data.draw(st.sampled_from([None, cv.float32, cv.float64]))
    plan = resolve("matmul", [a, b], fields)
    with np.errstate(all="ignore"):
        scale = np.matmul(
            np.abs(wide(a.astype(plan.compute.numpy))), np.abs(wide(b.astype(plan.compute.numpy)))
        )
    check(
        Generic, "matmul", [a, b], fields, atol=sum_atol(scale, a_shape[-1], plan.accumulator_dtype)
    )


_SPATIAL = "HWD"


@st.composite
def conv_problem(draw: st.DrawFn, dtype: cv.DType) -> tuple[Any, Any, dict[str, Any]]:
    n_sp = draw(st.sampled_from([1, 1, 2, 2, 0]))
    groups = draw(st.integers(1, 2))
    per_in, per_out = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    batch = draw(st.integers(0, 2))
    in_sp = [draw(st.integers(0, 5)) for _ in range(n_sp)]
    k_sp = [draw(st.integers(1, 3)) for _ in range(n_sp)]
    fields: dict[str, Any] = {"feature_group_count": groups}
    for name, low, high in (
        ("window_strides", 1, 2),
        ("lhs_dilation", 1, 2),
        ("rhs_dilation", 1, 2),
    ):
        if n_sp and draw(st.booleans()):
            fields[name] = tuple(draw(st.integers(low, high)) for _ in range(n_sp))
    if n_sp and draw(st.booleans()):
        fields["padding"] = tuple(
            (draw(st.integers(0, 3)), draw(st.integers(0, 2))) for _ in range(n_sp)
        )
    x_shape = (batch, groups * per_in, *in_sp)
    w_shape = (groups * per_out, per_in, *k_sp)
    x = draw(arrays(dtype, x_shape, bound=10.0, finite=True))
    w = draw(arrays(dtype, w_shape, bound=10.0, finite=True))
    if draw(st.booleans()):
        letters = _SPATIAL[:n_sp]
        lhs = "".join(draw(st.permutations(["N", "C", *letters])))
        rhs = "".join(draw(st.permutations(["O", "I", *letters])))
        out = "".join(draw(st.permutations(["N", "C", *letters])))
        fields["dimension_numbers"] = (lhs, rhs, out)
        x = np.transpose(x, [("N", "C", *letters).index(c) for c in lhs]).copy()
        w = np.transpose(w, [("O", "I", *letters).index(c) for c in rhs]).copy()
    return x, w, fields


@pytest.mark.parametrize("dtype", dtypes("conv_general"))
@HYPOTHESIS
@given(data=st.data())
def test_conv_general_matches_direct_loops(dtype: cv.DType, data: st.DataObject) -> None:
    """Grouped, strided, padded, dilated N-d correlation in any layout equals the direct loops."""
    x, w, fields = data.draw(conv_problem(dtype))
    plan = resolve("conv_general", [x, w], fields)
    cx, cw = _canonical(x, w, fields)
    scale = _canonical_out(conv_reference(np.abs(wide(cx)), np.abs(wide(cw)), fields), fields)
    terms = cw.shape[1] * int(np.prod(cw.shape[2:]))
    check(
        Generic, "conv_general", [x, w], fields, atol=sum_atol(scale, terms, plan.accumulator_dtype)
    )


def _canonical(x: Any, w: Any, fields: dict[str, Any]) -> tuple[Any, Any]:
    layouts = fields.get("dimension_numbers")
    if layouts is None:
        return x, w
    lhs, rhs, _ = layouts
    spatial = [c for c in lhs if c not in "NC"]
    return (
        np.transpose(x, [lhs.index(c) for c in ("N", "C", *spatial)]),
        np.transpose(w, [rhs.index(c) for c in ("O", "I", *spatial)]),
    )


def _canonical_out(values: Any, fields: dict[str, Any]) -> Any:
    layouts = fields.get("dimension_numbers")
    if layouts is None:
        return values
    lhs, _, out = layouts
    spatial = [c for c in lhs if c not in "NC"]
    return np.transpose(values, [("N", "C", *spatial).index(c) for c in out])


class TestRefusals:
    def test_matmul_inner_mismatch(self) -> None:
        with pytest.raises(
            ValueError, match=r"matmul on Generic: operand shapes \(2, 3\) and \(2, 3\)"
        ):
            run(Generic, "matmul", [np.zeros((2, 3)), np.zeros((2, 3))], {})

    def test_matmul_of_0d_operands(self) -> None:
        with pytest.raises(ValueError, match="at least 1-D"):
            run(Generic, "matmul", [np.zeros(3), np.zeros(())], {})

    def test_conv_channel_mismatch(self) -> None:
        with pytest.raises(ValueError, match=r"conv_general on Generic: input has 3 channels"):
            run(Generic, "conv_general", [np.zeros((1, 3, 4)), np.zeros((2, 2, 2))], {})

    def test_conv_option_length_mismatch(self) -> None:
        with pytest.raises(ValueError, match="window_strides has 2 entries for 1 spatial"):
            run(
                Generic,
                "conv_general",
                [np.zeros((1, 1, 4)), np.zeros((1, 1, 2))],
                {"window_strides": (1, 1)},
            )


class TestSemantics:
    def test_conv_is_correlation_not_convolution(self) -> None:
        """The kernel is not flipped: [1, 2] over [1, 0, 0] gives [1, 0]."""
        (out,) = run(
            Generic, "conv_general", [np.array([[[1.0, 0.0, 0.0]]]), np.array([[[1.0, 2.0]]])], {}
        )
        np.testing.assert_array_equal(out, [[[1.0, 0.0]]])

    def test_conv_padding_applies_after_lhs_dilation(self) -> None:
        """lhs_dilation 2 turns [1, 2] into [1, 0, 2]; padding (1, 1) then gives 5 positions."""
        (out,) = run(
            Generic,
            "conv_general",
            [np.array([[[1.0, 2.0]]]), np.array([[[1.0]]])],
            {"lhs_dilation": (2,), "padding": ((1, 1),)},
        )
        np.testing.assert_array_equal(out, [[[0.0, 1.0, 0.0, 2.0, 0.0]]])

    def test_float32_matmul_with_float64_accumulator_rounds_once(self) -> None:
        a = np.array([[1.0, 1e-8, -1.0]], np.float32)
        b = np.ones((3, 1), np.float32)
        (out,) = run(Generic, "matmul", [a, b], {"accumulator_dtype": cv.float64})
        assert out.dtype == np.float32 and out[0, 0] == np.float32(np.float64(np.float32(1e-8)))
