"""CPU kernels against Generic (the oracle), family by family, under hypothesis.

Shapes include 0-sized and broadcast ones; values include NaN, +-inf, +-0, subnormals and the
dtype's extremes (``tests.generic.oracle.arrays``). Every family also runs with the chunked,
multi-threaded path forced on (``PARALLEL_MIN`` lowered), which must not change any result.

Tolerances (``tolerance``) say where CPU may differ from Generic: bit-exact by default; float32
and float64 transcendental functions and activations run natively (NumPy's SIMD loops and the
in-place formulas of ``cpu_activations``), within a few ulps or a 1e-6 absolute floor;
``conv_general`` contracts in another order, within a summation bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import conveyor as cv
from conveyor.types.policy import operation_spec
from conveyor_generic import CPU, Generic
from conveyor_generic.kernels import cpu_runtime as rt
from conveyor_generic.kernels.cpu_elementwise import _BLEND_MIN as BLEND
from tests.generic.oracle import (
    BINARY,
    HYPOTHESIS,
    UNARY,
    arrays,
    assert_matches,
    clamp_operands,
    homogeneous_dtypes,
    resolve,
    run,
    scalars,
    shapes,
    sum_atol,
)

# One test per name with the dtype drawn among those its plans accept (every plan also runs
# in test_cpu.py), and a drawn choice between the serial and the forced-threaded path.
SAMPLE = settings(HYPOTHESIS, max_examples=40)

# Names whose float32 / float64 result comes from NumPy's native loops or CPU's own formulas.
APPROXIMATE = frozenset(
    [
        "rsqrt",
        "exp",
        "exp2",
        "log",
        "log2",
        "sin",
        "cos",
        "tanh",
        "sigmoid",
        "gelu",
        "silu",
        "softplus",
        "elu",
        "leaky_relu",
        "erf",
    ]
)
NATIVE = (cv.float32, cv.float64, cv.complex128)


def tolerance(
    name: str, plan: cv.OperationPlan, operands: list[Any], fields: dict[str, Any]
) -> tuple[float, Any]:
    """(ulps, atol) within which CPU must match Generic for this call."""
    if name in APPROXIMATE and plan.compute in NATIVE:
        return 8.0, 1e-6
    if name == "conv_general":
        # Another contraction order: bound the difference by the sum of |terms| per output.
        x, w = (np.abs(v.astype(plan.compute.numpy)).astype(np.float64) for v in operands)
        (magnitude,) = run(Generic, name, [x, w], fields)
        depth = int(np.prod(w.shape)) // max(w.shape[0], 1)
        return 4.0, sum_atol(magnitude, depth, plan.compute)
    return 0.0, 0.0


@contextmanager
def threads(threaded: bool) -> Iterator[None]:
    """Force the chunked path: every kernel split across three threads, even tiny ones."""
    saved = rt.PARALLEL_MIN, rt.THREADS
    if threaded:
        rt.PARALLEL_MIN, rt.THREADS = 2, 3
    try:
        yield
    finally:
        rt.PARALLEL_MIN, rt.THREADS = saved


def compare(
    name: str, operands: list[Any], fields: dict[str, Any], *, threaded: bool = False
) -> None:
    """Run ``name`` on CPU and on Generic and require matching outputs (or the same refusal)."""
    try:
        plan = resolve(name, operands, fields)
    except TypeError:
        for carrier in (CPU, Generic):
            with pytest.raises(TypeError):
                run(carrier, name, operands, fields)
        return
    try:
        want = run(Generic, name, operands, fields)
    except (ValueError, IndexError) as exc:
        with pytest.raises(type(exc)) as refused, threads(threaded):
            run(CPU, name, operands, fields)
        assert str(refused.value) == str(exc).replace("on Generic", "on CPU")
        return
    with threads(threaded):
        got = run(CPU, name, operands, fields)
    ulps, atol = tolerance(name, plan, operands, fields)
    for a, b, dtype in zip(got, want, plan.outputs, strict=True):
        assert_matches(a, b, dtype, ulps=ulps, atol=atol)


def dtypes(name: str) -> st.SearchStrategy[cv.DType]:
    return st.sampled_from(homogeneous_dtypes(name))


FIELDS: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "gelu": st.fixed_dictionaries({"approximate": st.sampled_from(["none", "tanh"])}),
    "elu": st.fixed_dictionaries({"alpha": st.floats(0.1, 3.0)}),
    "leaky_relu": st.fixed_dictionaries({"negative_slope": st.floats(0.0, 2.0)}),
}


@pytest.mark.parametrize("name", UNARY)
@SAMPLE
@given(data=st.data())
def test_unary(name: str, data: st.DataObject) -> None:
    """Unary functions and activations match Generic over the full value range."""
    x = data.draw(arrays(data.draw(dtypes(name)), data.draw(shapes())))
    fields = data.draw(FIELDS.get(name, st.just({})))
    compare(name, [x], fields, threaded=data.draw(st.booleans()))


@pytest.mark.parametrize("name", BINARY)
@SAMPLE
@given(data=st.data())
def test_binary(name: str, data: st.DataObject) -> None:
    """Binary names broadcast, take weak scalars on either side and match Generic."""
    dtype = data.draw(dtypes(name))
    pair = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4))
    operands: list[Any] = [data.draw(arrays(dtype, s)) for s in pair.input_shapes]
    if operation_spec(name).scalar_roles:
        side = data.draw(st.sampled_from([None, 0, 1]))
        if side is not None:
            kind = data.draw(st.sampled_from([bool, int, float, complex]))
            operands[side] = data.draw(scalars(kind))
    compare(name, operands, {}, threaded=data.draw(st.booleans()))


@pytest.mark.parametrize("carrier", [CPU, Generic], ids=["CPU", "Generic"])
@pytest.mark.parametrize("big", [10**400, -(10**400)], ids=["plus", "minus"])
def test_a_weak_int_beyond_float64_is_an_infinity_of_the_float_plan(
    carrier: type[cv.Carrier], big: int
) -> None:
    """An int no float64 holds rounds to an infinity of its sign, as a huge float does (it
    raised OverflowError before: the sign was taken with copysign, which converts too)."""
    x = cv.tensor(np.array([1.0, -2.0], np.float32), carrier=carrier)
    want = np.float32(np.inf) if big > 0 else np.float32(-np.inf)
    np.testing.assert_array_equal(cv.add(x, big).numpy(), [want, want])
    np.testing.assert_array_equal(cv.sub(big, x).numpy(), [want, want])


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "lt", "maximum", "pow"])
@pytest.mark.parametrize("dtype", [cv.float16, cv.float32, cv.float64], ids=str)
def test_a_tensor_and_a_weak_scalar_match_generic_bit_for_bit(name: str, dtype: cv.DType) -> None:
    """The direct path for a floating tensor and a weak float or int, on either side, rounds
    the scalar as the general path does: results equal Generic's to the bit."""
    x = np.array([1.5, -0.0, np.inf, -np.inf, np.nan, 65504.0, 1e-45, -3.0]).astype(dtype.numpy)
    for value in (2.0, 0.1, -0.0, 1e300, -1e300, math.nan, 3, -(2**53), 2**53 + 1, 10**400):
        for operands in ([x, value], [value, x]):
            (got,) = run(CPU, name, operands, {})
            (want,) = run(Generic, name, operands, {})
            assert got.dtype == want.dtype
            assert got.tobytes() == want.tobytes(), (value, operands[0] is x, got, want)


def _mixed_pairs() -> list[tuple[str, cv.DType, cv.DType]]:
    from conveyor.types.policy import enumerate_plans

    found = []
    for name in ("add", "mul", "div", "pow", "maximum", "rem", "lt"):
        pairs = sorted(
            {
                (p.operands[0].dtype.name, p.operands[1].dtype.name)
                for p in enumerate_plans(name)
                if not any(o.weak for o in p.operands)
                and p.operands[0].dtype is not p.operands[1].dtype
            }
        )
        found += [(name, cv.dtype(a), cv.dtype(b)) for a, b in pairs]
    return found


@settings(SAMPLE, max_examples=60)
@given(data=st.data())
def test_mixed_dtypes(data: st.DataObject) -> None:
    """Operands of different dtypes convert per the plan first, as Generic converts them."""
    name, left, right = data.draw(st.sampled_from(_mixed_pairs()))
    pair = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3))
    a = data.draw(arrays(left, pair.input_shapes[0]))
    b = data.draw(arrays(right, pair.input_shapes[1]))
    compare(name, [a, b], {}, threaded=data.draw(st.booleans()))


@settings(SAMPLE, max_examples=40)
@given(data=st.data())
def test_select(data: st.DataObject) -> None:
    """select reads the chosen branch; scalars may stand for either branch."""
    dtype = data.draw(dtypes("select"))
    trio = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=4))
    condition = data.draw(arrays(cv.bool, trio.input_shapes[0]))
    operands: list[Any] = [condition, *(data.draw(arrays(dtype, s)) for s in trio.input_shapes[1:])]
    side = data.draw(st.sampled_from([None, 1, 2]))
    if side is not None:
        operands[side] = data.draw(scalars(data.draw(st.sampled_from([bool, int, float]))))
    compare("select", operands, {}, threaded=data.draw(st.booleans()))


@pytest.mark.parametrize("shapes", [((BLEND + 5,),) * 3, ((2, BLEND),) + ((1, BLEND),) * 2])
@pytest.mark.parametrize("dtype", homogeneous_dtypes("select"), ids=str)
def test_select_on_either_side_of_the_blend_size_copies_bits_like_generic(
    dtype: cv.DType, shapes: tuple[tuple[int, ...], ...]
) -> None:
    """np.where below ``_BLEND_MIN`` elements, the bit blend from there: both copy the chosen
    element's bytes exactly (NaN payloads, -0.0), as Generic does, with and without broadcasting."""
    rng = np.random.default_rng(11)
    condition = rng.random(shapes[0]) < 0.5
    if dtype is cv.bool:
        branches = [rng.random(s) < 0.5 for s in shapes[1:]]
    else:  # random bytes: every bit pattern, NaNs with payloads and -0.0 among them
        wide = [(*s[:-1], s[-1] * dtype.itemsize) for s in shapes[1:]]
        branches = [rng.integers(0, 256, w, np.uint8).view(dtype.numpy) for w in wide]
    operands: list[Any] = [condition, *branches]
    for size in (BLEND - 1, BLEND + 5):  # a cut below the blend size, and the whole
        cut = [x[..., : size // 2] if x.ndim == 2 else x[:size] for x in operands]
        (got,) = run(CPU, "select", cut, {})
        (want,) = run(Generic, "select", cut, {})
        assert got.tobytes() == want.tobytes()


@settings(SAMPLE, max_examples=40)
@given(data=st.data())
def test_clamp(data: st.DataObject) -> None:
    """Each bound is a tensor, a scalar or absent; crossed bounds give the upper one."""
    dtype = data.draw(dtypes("clamp"))
    operands = clamp_operands(data, dtype)
    compare("clamp", operands, {}, threaded=data.draw(st.booleans()))


@pytest.mark.parametrize("name", ["reduce_sum", "reduce_prod", "reduce_max", "reduce_min"])
@SAMPLE
@given(data=st.data())
def test_reductions(name: str, data: st.DataObject) -> None:
    """Sums, products and extrema over any axes, kept or dropped, match Generic exactly."""
    dtype = data.draw(dtypes(name))
    x = data.draw(arrays(dtype, data.draw(shapes())))
    axes = data.draw(st.sampled_from([None, 0, -1, (0, -1), ()]))
    fields: dict[str, Any] = {"axis": axes, "keepdims": data.draw(st.booleans())}
    if name in ("reduce_sum", "reduce_prod") and dtype.is_floating:
        fields["accumulator_dtype"] = data.draw(st.sampled_from([None, cv.float32, cv.float64]))
    compare(name, [x], fields, threaded=data.draw(st.booleans()))


@pytest.mark.parametrize("name", ["argmax", "argmin", "cumsum"])
@SAMPLE
@given(data=st.data())
def test_scans_and_arg_reductions(name: str, data: st.DataObject) -> None:
    x = data.draw(arrays(data.draw(dtypes(name)), data.draw(shapes())))
    fields = {"axis": data.draw(st.sampled_from([None, 0, -1]))}
    if name != "cumsum":
        fields["keepdims"] = data.draw(st.booleans())
    compare(name, [x], fields, threaded=data.draw(st.booleans()))


@pytest.mark.parametrize("name", ["sort", "topk"])
@settings(SAMPLE, max_examples=30)
@given(data=st.data())
def test_sorting(name: str, data: st.DataObject) -> None:
    """Stable order, NaN last ascending (first descending), ties by position, -0.0 == 0.0."""
    shape = data.draw(shapes(min_dims=1))
    x = data.draw(arrays(data.draw(dtypes(name)), shape))
    if data.draw(st.booleans()) and x.size:  # many ties
        x = np.take(x, np.arange(x.size).reshape(x.shape) % 3)
    axis = data.draw(st.sampled_from([0, -1]))
    if name == "sort":
        fields: dict[str, Any] = {"axis": axis, "descending": data.draw(st.booleans())}
    else:
        k = data.draw(st.integers(0, shape[axis]))
        fields = {"k": k, "axis": axis, "largest": data.draw(st.booleans())}
    compare(name, [x], fields, threaded=data.draw(st.booleans()))


@pytest.mark.parametrize("dtype", [cv.int8, cv.uint32, cv.float16, cv.bfloat16, cv.float32])
@pytest.mark.parametrize("threaded", [False, True])
def test_topk_of_a_long_lane_uses_candidates(dtype: cv.DType, threaded: bool) -> None:
    """The per-core candidate path keeps ties by position and NaN as the largest."""
    rng = np.random.default_rng(5)
    x = rng.integers(-3, 4, 5000).astype(dtype.numpy)
    if dtype.is_floating:
        x[[7, 4000, 4001]] = np.nan
        x[[5, 6]] = [-0.0, 0.0]
    for k in (1, 3, 10, 4999):
        for largest in (True, False):
            compare("topk", [x], {"k": k, "largest": largest}, threaded=threaded)
    for descending in (False, True):
        compare("sort", [x], {"descending": descending}, threaded=threaded)


@SAMPLE
@given(data=st.data())
def test_matmul(data: st.DataObject) -> None:
    """Batched, broadcast and 1-D operands, every accepted dtype, through BLAS where it can."""
    dtype = data.draw(dtypes("matmul"))
    n, k, m = (data.draw(st.integers(0, 4)) for _ in range(3))
    batch = data.draw(st.sampled_from([(), (2,), (1, 3)]))
    left = data.draw(st.sampled_from([(n, k), (k,), (*batch, n, k)]))
    right = data.draw(st.sampled_from([(k, m), (k,), (*batch[-1:], k, m)]))
    a = data.draw(arrays(dtype, left, bound=100.0))
    b = data.draw(arrays(dtype, right, bound=100.0))
    compare("matmul", [a, b], {}, threaded=data.draw(st.booleans()))


@settings(SAMPLE, max_examples=30)
@given(data=st.data())
def test_conv_general(data: st.DataObject) -> None:
    """Strides, padding, both dilations, groups and permuted layouts, 1-d and 2-d."""
    dtype = data.draw(dtypes("conv_general"))
    dims = data.draw(st.integers(1, 2))
    groups = data.draw(st.integers(1, 2))
    per_in, per_out = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    batch = data.draw(st.integers(0, 2))
    spatial = [data.draw(st.integers(1, 5)) for _ in range(dims)]
    taps = [data.draw(st.integers(1, 3)) for _ in range(dims)]
    # Finite values: with inf * 0 terms, whether NaN appears depends on the BLAS kernel.
    x = data.draw(arrays(dtype, (batch, per_in * groups, *spatial), bound=10.0, finite=True))
    w = data.draw(arrays(dtype, (per_out * groups, per_in, *taps), bound=10.0, finite=True))
    steps = st.lists(st.integers(1, 2), min_size=dims, max_size=dims).map(tuple)
    pads = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=dims, max_size=dims)
    fields: dict[str, Any] = {
        "window_strides": data.draw(steps),
        "padding": tuple(data.draw(pads)),
        "lhs_dilation": data.draw(steps),
        "rhs_dilation": data.draw(steps),
        "feature_group_count": groups,
    }
    if dims == 2 and data.draw(st.booleans()):
        fields["dimension_numbers"] = ("NHWC", "HWIO", "NCHW")
        x = np.ascontiguousarray(np.moveaxis(x, 1, -1))
        w = np.ascontiguousarray(np.transpose(w, (2, 3, 1, 0)))
    compare("conv_general", [x, w], fields, threaded=data.draw(st.booleans()))


@pytest.mark.parametrize("name", ["gather", "scatter", "scatter_add"])
@SAMPLE
@given(data=st.data())
def test_indexing(name: str, data: st.DataObject) -> None:
    """torch.gather-style indices, out-of-range ones refused with Generic's message."""
    shape = data.draw(shapes(min_dims=1, max_dims=3))
    dtype = data.draw(dtypes(name))
    x = data.draw(arrays(dtype, shape))
    axis = data.draw(st.integers(0, len(shape) - 1))
    index_shape = tuple(data.draw(st.integers(0, e)) for e in shape)
    index = data.draw(
        hnp.arrays(np.int64, index_shape, elements=st.integers(-1, max(shape[axis], 1)))
    )
    operands: list[Any] = [x, index]
    if name != "gather":
        operands.append(data.draw(arrays(dtype, index_shape)))
    compare(name, operands, {"axis": axis})


class TestThreadedPathIsUsed:
    def test_large_elementwise_work_is_split(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Above PARALLEL_MIN the kernel body runs once per core, on more than one thread."""
        import threading

        seen: set[int] = set()
        original = rt.run_parallel

        def spy(tasks: Any) -> None:
            def wrap(task: Any) -> Any:
                def run_task() -> Any:
                    seen.add(threading.get_ident())
                    return task()

                return run_task

            original([wrap(t) for t in tasks])

        monkeypatch.setattr(rt, "PARALLEL_MIN", 16)
        monkeypatch.setattr(rt, "THREADS", 2)
        monkeypatch.setattr(rt, "run_parallel", spy)
        x = cv.tensor(np.linspace(-3, 3, 64, dtype=np.float32), carrier=CPU)
        np.testing.assert_allclose(cv.exp(x).numpy(), np.exp(x.numpy()), rtol=1e-6)
        assert len(seen) == 2
