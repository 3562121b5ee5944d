"""Helpers of the Metal tests: operands of a plan, test layouts, the Generic oracle, tolerances.

``cases(plan)`` gives the operands a plan is checked on: contiguous, strided + broadcast,
empty and 0-d, each through ``Operand`` values over flat CPU torch buffers (the Metal engine
reads tensors only through a flat buffer and a layout). ``reference`` runs the same plan on
Generic; ``assert_close`` compares with a tolerance sized by dtype and function.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

import conveyor as cv
from conveyor.engine.tensor import Tensor
from conveyor_generic import Generic
from conveyor_metal._engine import Engine, Operand
from conveyor_metal._storage import _numpy, _tensor

_TRANSCENDENTAL = frozenset(
    {
        *("exp", "exp2", "log", "log2", "sin", "cos", "erf", "sqrt", "rsqrt", "recip", "div"),
        *("pow", "sigmoid", "tanh", "gelu", "silu", "softplus", "elu", "rem"),
    }
)


def operand(
    values: np.ndarray[Any, Any], dtype: cv.DType, layout: cv.Layout | None = None
) -> Operand:
    """``values`` as a flat CPU buffer; ``layout`` (default: contiguous) views it."""
    flat = _tensor(np.ascontiguousarray(values).reshape(-1), dtype)
    return Operand(flat, layout or cv.Layout(values.shape))


def values_of(op: Operand, dtype: cv.DType) -> np.ndarray[Any, Any]:
    """The logical values an operand views (for the Generic side)."""
    if op.layout.size == 0:
        return np.empty(op.layout.shape, dtype.numpy)
    return _numpy(
        op.buffer.as_strided(op.layout.shape, op.layout.strides, op.layout.offset).contiguous(),
        dtype,
    )


def random_values(
    shape: tuple[int, ...], dtype: cv.DType, rng: np.random.Generator, name: str
) -> np.ndarray[Any, Any]:
    """Values for ``name`` in ``dtype``: in the function's domain, with special values mixed in."""
    size = math.prod(shape)
    if dtype.is_bool:
        return rng.random(shape) < 0.5
    if dtype.is_integer:
        high = 7 if name in ("rem", "div") else 50
        return rng.integers(-high, high, size=shape).astype(dtype.numpy)
    x = rng.standard_normal(size) * 3
    if name in ("log", "log2", "sqrt", "rsqrt"):
        x = np.abs(x) + 0.01
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.5, -2.5, 0.5])
    if size >= 2 * len(specials):
        x[: len(specials)] = specials
    return x.reshape(shape).astype(dtype.numpy)


def _scalar(operand_plan: cv.OperandPlan) -> Any:
    dtype = operand_plan.dtype
    assert dtype is not None
    if dtype.is_bool:
        return True
    if dtype.is_integer:
        return 3
    return 1.5


_REDUCTIONS = frozenset(
    {"reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "argmax", "argmin", "cumsum"}
)


def cases(plan: cv.OperationPlan, seed: int = 0) -> Iterator[tuple[str, list[Any], Any]]:
    """(label, operands, options) cases: contiguous, strided + broadcast, empty and 0-d."""
    rng = np.random.default_rng(seed)
    name = plan.operation
    if name in _REDUCTIONS:
        yield from _reduction_cases(plan, rng)
        return
    if name in _INDEXING:
        yield from _indexing_cases(plan, rng)
        return
    if name == "matmul":
        yield from _matmul_cases(plan, rng)
        return
    if name == "conv_general":
        yield from _conv_cases(plan, rng)
        return
    if name in ("sort", "topk"):
        yield from _sorting_cases(plan, rng)
        return
    options = cv.OperationExecutionOptions(name)

    def build(shape: tuple[int, ...], strided: bool) -> list[Any]:
        out: list[Any] = []
        first = True
        for o in plan.operands:
            if o.convert_to is None or o.dtype is None:
                out.append(None)
            elif o.weak:
                out.append(_scalar(o))
            elif strided and first and len(shape) == 2:
                # A transposed view: the buffer holds shape[::-1], read with swapped strides.
                base = random_values(shape[::-1], o.dtype, rng, name)
                out.append(operand(base, o.dtype, cv.Layout(shape, (1, shape[0]))))
                first = False
            elif strided and len(shape) == 2:
                row = random_values(shape[1:], o.dtype, rng, name)  # broadcast over axis 0
                out.append(operand(row, o.dtype))
            else:
                first = False
                out.append(operand(random_values(shape, o.dtype, rng, name), o.dtype))
        return out

    yield "contiguous", build((5, 65), strided=False), options
    yield "strided-broadcast", build((5, 65), strided=True), options
    yield "empty", build((0, 3), strided=False), options
    yield "0-d", build((), strided=False), options


def _reduction_cases(
    plan: cv.OperationPlan, rng: np.random.Generator
) -> Iterator[tuple[str, list[Any], Any]]:
    name = plan.operation
    dtype = plan.operands[0].dtype
    assert dtype is not None
    keep = {} if name == "cumsum" else {"keepdims": True}

    def opts(**fields: Any) -> Any:
        return cv.OperationExecutionOptions(name, **fields)

    # A (5, 300) row-major input (rows longer than a threadgroup) and its transposed view.
    data = random_values((5, 300), dtype, rng, name)
    transposed = operand(random_values((300, 5), dtype, rng, name).copy(), dtype)
    transposed = type(transposed)(transposed.buffer, cv.Layout((5, 300), (1, 5)))
    yield "all", [operand(data, dtype)], opts()
    yield "last-axis", [operand(data, dtype)], opts(axis=1)
    yield "first-axis-strided", [transposed], opts(axis=0, **keep)
    yield "last-axis-strided", [transposed], opts(axis=-1)
    yield "3-d", [operand(random_values((3, 4, 70), dtype, rng, name), dtype)], opts(axis=1)
    yield "empty-rows", [operand(random_values((0, 3), dtype, rng, name), dtype)], opts(axis=1)
    yield "0-d", [operand(random_values((), dtype, rng, name), dtype)], opts()


_INDEXING = frozenset({"gather", "scatter", "scatter_add"})


def index_operands(
    plan: cv.OperationPlan,
    rng: np.random.Generator,
    x: Operand,
    index_shape: tuple[int, ...],
    axis: int,
    src_shape: tuple[int, ...] | None = None,
) -> list[Any]:
    """Input ``x``, a random in-range index of ``index_shape`` and (scatter) a ``src``."""
    dtype, index_dtype = plan.operands[0].dtype, plan.operands[1].dtype
    assert dtype is not None and index_dtype is not None
    extent = x.layout.shape[axis] if x.layout.shape else 1
    entries = rng.integers(0, max(extent, 1), size=index_shape).astype(index_dtype.numpy)
    out: list[Any] = [x, operand(entries, index_dtype)]
    if len(plan.operands) == 3:
        shape = index_shape if src_shape is None else src_shape
        out.append(operand(random_values(shape, dtype, rng, plan.operation), dtype))
    return out


def _indexing_cases(
    plan: cv.OperationPlan, rng: np.random.Generator
) -> Iterator[tuple[str, list[Any], Any]]:
    name = plan.operation
    dtype, index_dtype = plan.operands[0].dtype, plan.operands[1].dtype
    assert dtype is not None and index_dtype is not None

    def opts(axis: int) -> Any:
        return cv.OperationExecutionOptions(name, axis=axis)

    def values(shape: tuple[int, ...]) -> Operand:
        return operand(random_values(shape, dtype, rng, name), dtype)

    # 1-d: more index entries than input elements (duplicate targets), past one threadgroup.
    yield "1-d", index_operands(plan, rng, values((257,)), (300,), 0), opts(0)
    # 2-d: an index smaller than the input off the axis, a src larger than the index.
    yield "2-d", index_operands(plan, rng, values((5, 65)), (4, 70), 1, (6, 71)), opts(-1)
    # Strided: a transposed input and src, an index broadcast along axis 1 (stride 0).
    x = values((65, 5))
    x = Operand(x.buffer, cv.Layout((5, 65), (1, 5)))
    strided = index_operands(plan, rng, x, (7, 1), 0)
    column = strided[1]
    strided[1] = Operand(column.buffer, column.layout.broadcast_to((7, 65)))
    if len(strided) == 3:
        src = values((65, 7))
        strided[2] = Operand(src.buffer, cv.Layout((7, 65), (1, 7)))
    yield "strided-broadcast", strided, opts(0)
    yield "empty-index", index_operands(plan, rng, values((4, 3)), (0, 3), 0), opts(0)
    yield "empty-input", index_operands(plan, rng, values((0, 3)), (0, 3), 1), opts(1)
    yield "0-d", index_operands(plan, rng, values(()), (), 0), opts(0)


def _tied(shape: tuple[int, ...], dtype: cv.DType, rng: np.random.Generator) -> Any:
    """Values drawn from a few, so most are tied: signed zeros, infinities and NaN for floats."""
    if not dtype.is_floating:
        return (
            random_values(shape, dtype, rng, "sort") % 3
            if dtype.is_integer
            else rng.random(shape) < 0.5
        )
    pool = np.array([np.nan, -0.0, 0.0, 1.0, -1.0, np.inf, -np.inf, 2.5])
    return rng.choice(pool, size=shape).astype(dtype.numpy)


def _sorting_cases(
    plan: cv.OperationPlan, rng: np.random.Generator
) -> Iterator[tuple[str, list[Any], Any]]:
    """Rows shorter and longer than a tile (512), strided, broadcast, tied, empty and 0-d.

    ``sort`` alternates ascending and descending, ``topk`` largest and smallest, with ``k``
    from none to the whole axis.
    """
    name = plan.operation
    dtype = plan.operands[0].dtype
    assert dtype is not None

    def opts(axis: int, k: int, flip: bool) -> Any:
        if name == "sort":
            return cv.OperationExecutionOptions(name, axis=axis, descending=flip)
        return cv.OperationExecutionOptions(name, axis=axis, k=k, largest=not flip)

    def fresh(shape: tuple[int, ...]) -> Operand:
        return operand(random_values(shape, dtype, rng, name), dtype)

    transposed = fresh((300, 5))
    transposed = Operand(transposed.buffer, cv.Layout((5, 300), (1, 5)))
    row = fresh((65,))
    yield "last-axis", [fresh((5, 300))], opts(-1, 5, False)
    yield "last-axis-flipped", [fresh((5, 300))], opts(1, 300, True)
    yield "first-axis-strided", [transposed], opts(0, 3, True)
    yield "last-axis-strided", [transposed], opts(-1, 299, False)
    yield "ties", [operand(_tied((4, 65), dtype, rng), dtype)], opts(-1, 10, False)
    yield "ties-flipped", [operand(_tied((4, 65), dtype, rng), dtype)], opts(-1, 65, True)
    yield "broadcast-rows", [Operand(row.buffer, cv.Layout((3, 65), (0, 1)))], opts(-1, 7, True)
    yield "broadcast-axis", [Operand(row.buffer, cv.Layout((4, 7), (1, 0), 2))], opts(1, 4, False)
    yield "long-rows", [fresh((2, 1000))], opts(-1, 600, True)
    yield "long-1-d", [operand(_tied((4097,), dtype, rng), dtype)], opts(0, 4097, False)
    yield "3-d", [fresh((3, 4, 70))], opts(-1, 70, False)
    for size in (1, 7, 64, 65, 257):
        yield f"1-d-{size}", [fresh((size,))], opts(0, size // 2, size % 2 == 1)
    yield "empty-rows", [fresh((0, 3))], opts(1, 2, False)
    yield "empty-axis", [fresh((3, 0))], opts(-1, 0, True)
    yield "0-d", [fresh(())], opts(-1, 1, False)
    yield "0-d-none", [fresh(())], opts(0, 0, True)


def _matmul_cases(
    plan: cv.OperationPlan, rng: np.random.Generator
) -> Iterator[tuple[str, list[Any], Any]]:
    """Past one tile in M, N and K; transposed, offset and batch-broadcast operands; 1-D; empty."""
    dtype = plan.operands[0].dtype
    assert dtype is not None
    options = cv.OperationExecutionOptions("matmul")

    def make(*shape: int) -> Operand:
        return operand(random_values(shape, dtype, rng, "matmul"), dtype)

    transposed = make(70, 65)  # its (65, 70) transpose, read in place
    transposed = Operand(transposed.buffer, cv.Layout((65, 70), (1, 65)))
    offset = operand(random_values((3 + 70 * 66,), dtype, rng, "matmul"), dtype)
    offset = Operand(offset.buffer, cv.Layout((70, 66), offset=3))
    yield "2-d", [make(65, 70), make(70, 66)], options
    yield "transposed-offset", [transposed, offset], options
    yield "batch-broadcast", [make(3, 7, 33), make(33, 65)], options
    yield "two-batch-axes", [make(2, 1, 7, 9), make(3, 9, 5)], options
    yield "1-d-left", [make(33), make(2, 33, 7)], options
    yield "1-d-right", [make(7, 33), make(33)], options
    yield "1-d-both", [make(65), make(65)], options
    yield "empty", [make(0, 3), make(3, 5)], options
    yield "empty-contraction", [make(4, 0), make(0, 5)], options


def _conv_cases(
    plan: cv.OperationPlan, rng: np.random.Generator
) -> Iterator[tuple[str, list[Any], Any]]:
    """1-d past one tile; 2-d with groups, strides, padding and both dilations; 3-d; layouts."""
    dtype = plan.operands[0].dtype
    assert dtype is not None

    def make(*shape: int) -> Operand:
        return operand(random_values(shape, dtype, rng, "conv_general"), dtype)

    def opts(**fields: Any) -> Any:
        return cv.OperationExecutionOptions("conv_general", **fields)

    every = opts(
        window_strides=(2, 1),
        padding=((1, 2), (0, 1)),
        lhs_dilation=(1, 2),
        rhs_dilation=(2, 1),
        feature_group_count=2,
    )
    transposed = make(3, 2, 9, 10)  # its (2, 3, 9, 10) axis swap, read in place
    transposed = Operand(transposed.buffer, cv.Layout((3, 2, 9, 10)).permute((1, 0, 2, 3)))
    yield "1-d", [make(2, 3, 70), make(4, 3, 5)], opts()
    yield "2-d-every-option", [make(1, 4, 9, 10), make(6, 2, 3, 2)], every
    yield "2-d-transposed-input", [transposed, make(5, 3, 2, 2)], opts(padding=((1, 1), (1, 1)))
    layouts = opts(dimension_numbers=("NHWC", "HWIO", "NCHW"), window_strides=(1, 2))
    yield "channels-last", [make(2, 7, 6, 3), make(3, 2, 3, 4)], layouts
    three = opts(window_strides=(1, 2, 1), padding=((1, 0), (0, 1), (2, 2)), lhs_dilation=(1, 1, 2))
    yield "3-d", [make(1, 2, 4, 5, 3), make(3, 2, 2, 3, 2)], three
    yield "empty-batch", [make(0, 3, 7), make(2, 3, 3)], opts()
    yield "no-input-channels", [make(1, 0, 7), make(2, 0, 3)], opts()


def reference(plan: cv.OperationPlan, options: Any, operands: Sequence[Any]) -> Any:
    """The plan run on Generic with the same logical operands."""
    inputs = []
    for value, o in zip(operands, plan.operands, strict=True):
        if isinstance(value, Operand):
            assert o.dtype is not None
            inputs.append(cv.tensor(values_of(value, o.dtype), dtype=o.dtype, carrier=Generic))
        else:
            inputs.append(value)
    op = Generic.allocate(0, cv.float32).dispatch_op(plan.operation)
    result = op.forward(*inputs, options=options)
    results = result if isinstance(result, tuple) else (result,)
    assert all(isinstance(r, Tensor) for r in results)
    assert tuple(r.dtype for r in results) == plan.outputs
    arrays = tuple(r.numpy() for r in results)
    return arrays if len(arrays) > 1 else arrays[0]


def run(engine: Engine, plan: cv.OperationPlan, options: Any, operands: Sequence[Any]) -> Any:
    """The plan run through ``engine``: its result as NumPy (a tuple for several outputs)."""
    from conveyor_metal._calls import run_plan

    arrays = []
    results = run_plan(engine, plan, options, operands, "Metal")
    for (buffer, layout), dtype in zip(results, plan.outputs, strict=True):
        view = buffer.as_strided(layout.shape, layout.strides, layout.offset)
        arrays.append(_numpy(view.contiguous(), dtype).reshape(layout.shape))
    return tuple(arrays) if len(arrays) > 1 else arrays[0]


def assert_close(name: str, got: Any, want: Any) -> None:
    """Equal shapes and dtypes; exact for bool/int and sorting, a dtype- and function-sized
    tolerance else. Tuples (several outputs) are compared output by output."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert_close(name, g, w)
        return
    assert got.shape == want.shape and got.dtype == want.dtype, (
        got.shape,
        want.shape,
        got.dtype,
        want.dtype,
    )
    if got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
        return
    if name in ("sort", "topk"):  # values are gathered, never computed: bit for bit
        np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))
        return
    if name in ("matmul", "conv_general"):
        # Another summation order over up to 70 products of magnitude ~10 (and float16 output
        # rounding after it): absolute error far below these bounds, relative to the sums.
        rtol, atol = (2e-3, 1e-2) if got.dtype == np.float16 else (1e-5, 1e-3)
        np.testing.assert_allclose(
            got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True
        )
        return
    if name in ("reduce_sum", "cumsum"):
        # Another summation order: error bounded by eps times the sum of magnitudes.
        scale = 1e-2 if got.dtype == np.float16 else 2e-5
        np.testing.assert_allclose(
            got.astype(np.float64), want.astype(np.float64), rtol=scale, atol=scale, equal_nan=True
        )
        return
    if got.dtype.name == "bfloat16":
        # Computed in float32 and rounded once (Generic: float64, rounded once): within an ulp
        # (2**-8) for arithmetic, a few for the float32 transcendental functions.
        rtol, atol = (1.6e-2, 1e-3) if name in _TRANSCENDENTAL else (4e-3, 1e-5)
    elif got.dtype == np.float16:
        rtol, atol = (1e-2, 1e-3) if name in _TRANSCENDENTAL else (1e-3, 1e-4)
    else:
        rtol, atol = (2e-5, 1e-6) if name in _TRANSCENDENTAL else (1e-6, 0.0)
    np.testing.assert_allclose(
        got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True
    )


def plan_id(plan: cv.OperationPlan) -> str:
    """A readable test id: name and operand dtypes (weak scalars marked)."""
    parts = [
        "none" if o.dtype is None else (f"weak-{o.dtype.name}" if o.weak else o.dtype.name)
        for o in plan.operands
    ]
    return f"{plan.operation}({','.join(parts)})"


def cpu_engine(cache: Any) -> Engine:
    """An engine running kernels through the C target on CPU torch buffers."""
    from conveyor_metal._launch import CLauncher

    return Engine("cpu", CLauncher(cache / "c-libraries"), cache / "sources")


__all__ = ["assert_close", "cases", "cpu_engine", "operand", "plan_id", "reference", "run", "torch"]
