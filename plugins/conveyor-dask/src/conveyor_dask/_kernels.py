"""Kernels of DaskCarrier: every planned name as a dask.array graph over CPU's kernels.

Each kernel builds a graph from its operands' arrays and the accepted plan and returns it as
the result, lazily: nothing runs until the result is read or persisted (``_storage.settle``
says when else), so dask fuses a chain and streams its chunks. Binding, planning, the
capability gate and shape checks ran before the kernel, so those errors still surface at the
call; a task's own error (a ``gather`` index out of range) names its operation and surfaces
when the values are computed. The per-block work is CPU's kernel of the name under the plan
(``conveyor_generic.run_cpu_kernel``: float32 plans compute in float32, as on CPU), so
conversions, arithmetic, accumulator and output dtype are the plan's; dask supplies the
distribution:

- elementwise names and activations: ``blockwise`` over operands aligned as NumPy broadcasts;
- sums and products: a dask tree reduction in the plan's accumulator dtype, rounded once;
  maxima and minima: a dask tree reduction (exact in any order);
- ``matmul``: blocked ``dask.array.matmul`` on operands converted to the plan's dtype;
- ``argmax``, ``argmin``, ``cumsum``, ``sort``, ``topk``: the CPU kernel per lane block
  (the axis in one chunk, the other axes still chunked);
- ``conv_general``: the CPU kernel per batch chunk, with the whole weight;
- ``gather``, ``scatter``, ``scatter_add``, and whole-array forms (``axis=None``, empty or 0-d
  operands): the CPU kernel in one task on a worker, whose result is re-chunked there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np

import conveyor as cv
from conveyor.sdk import VIEW_OPERATIONS
from conveyor_dask import _storage
from conveyor_generic import (
    BINARY_KERNELS,
    KERNELS,
    UNARY_KERNELS,
    KernelIndexError,
    KernelValueError,
    conv_layouts,
    convert,
    lane_axes,
    reduced_axes,
    run_cpu_kernel,
)

if TYPE_CHECKING:
    import dask.array as da

__all__ = ["PLANNED", "VIEWS", "view"]

_Kernel = Callable[[cv.KernelExecutionInterface], cv.ProviderResult]
_Context = cv.KernelExecutionInterface


def _name(ctx: _Context) -> str:
    return ctx.invocation.operation


def _plan(ctx: _Context) -> cv.OperationPlan:
    plan = ctx.invocation.plan
    assert plan is not None  # only planned names reach these kernels
    return plan


def _options(ctx: _Context) -> cv.OperationExecutionOptions:
    return ctx.invocation.options or cv.OperationExecutionOptions(_name(ctx))


def _handle(x: cv.Tensor) -> _storage.Distributed:
    handle: _storage.Distributed = cv.storage_handle(x.carrier)
    return handle


def _operands(ctx: _Context) -> list[Any]:
    """Tensor operands as lazy dask arrays of their logical values; scalars and None as given."""
    return [
        _storage.logical(_handle(x), x.layout) if type(x) is cv.Tensor else x for x in ctx.operands
    ]


def _session(ctx: _Context) -> Any:
    return _handle(next(x for x in ctx.operands if type(x) is cv.Tensor)).session


def _fresh(ctx: _Context) -> str:
    return _storage.fresh_name(_name(ctx))


def _meta(ndim: int, dtype: cv.DType) -> np.ndarray[Any, Any]:
    return np.empty((0,) * ndim, dtype.numpy)


def _publish(ctx: _Context, arrays: Sequence[da.Array]) -> cv.ProviderResult:
    """Wrap ``arrays`` (one per result spec) as results: lazy graphs, or settled (eager mode)."""
    session = _session(ctx)
    specs = ctx.invocation.results
    shaped = [a.reshape(spec.shape) for a, spec in zip(arrays, specs, strict=True)]
    done, stored = _storage.settle(_name(ctx), shaped, session)
    outputs = []
    for index, array in enumerate(done):
        out = ctx.allocate_result(index)
        handle = _handle(out)
        handle.base = array
        handle.limit = _storage.chunk_bytes(specs[index].shape, specs[index].dtype, session)
        handle.origin, handle.stored = _name(ctx), stored
        outputs.append(out)
    return cv.ProviderResult(tuple(outputs))


def _translated(kernel: _Kernel) -> _Kernel:
    """``kernel`` with kernel refusals re-raised as Generic raises them, named here.

    Tasks name their own refusals (``run_cpu_kernel``); these are the ones raised while the
    graph is built (axis rules) or, in eager mode, a task's unnamed one.
    """

    def run(ctx: _Context) -> cv.ProviderResult:
        try:
            return kernel(ctx)
        except KernelIndexError as exc:
            msg = f"{_name(ctx)} on {type(ctx.carrier).__name__}: {exc}"
            raise IndexError(msg) from None
        except KernelValueError as exc:
            msg = f"{_name(ctx)} on {type(ctx.carrier).__name__}: {exc}"
            raise ValueError(msg) from None

    run.__name__ = run.__qualname__ = kernel.__name__
    return run


# Block functions are module-level, so tasks pickle them by reference, and the plan and options
# travel as arguments: pickling a closure's code for every call would cost more than a tiny op.


def _run(carrier: type, plan: cv.OperationPlan, options: Any, *operands: Any) -> Any:
    """CPU's kernel of ``plan`` on blocks (what every task runs); refusals name ``carrier``.

    CPU's, not the reference kernel: the reference widens float32 to float64 and back (``x *
    2.0`` on a 64 MiB block took 86 ms against NumPy's 14 ms), CPU computes the plan natively.
    """
    return run_cpu_kernel(carrier, plan, options, operands)


def _call(ctx: _Context) -> tuple[type, cv.OperationPlan, cv.OperationExecutionOptions]:
    return type(ctx.carrier), _plan(ctx), _options(ctx)


def _elementwise_block(
    *blocks: Any, call: tuple[Any, ...], template: list[Any], where: list[int]
) -> Any:
    values = list(template)
    for i, b in zip(where, blocks, strict=True):
        values[i] = b
    return _run(*call, *values)


def _convert_block(b: Any, plan: cv.OperationPlan, index: int) -> Any:
    return convert(plan, [b if i == index else None for i in range(len(plan.operands))])[index]


def _lane_block(b: Any, call: tuple[Any, ...], index: int) -> Any:
    found = _run(*call, b)
    return found[index] if isinstance(found, tuple) else found


# -- whole-array form: one task on a worker --


def _pick(parts: tuple[Any, ...], index: int) -> Any:
    return parts[index]


def _whole(ctx: _Context) -> cv.ProviderResult:
    """The kernel in one task over whole operands, its results re-chunked on the workers.

    A ``blockwise`` over operands in one chunk each, every axis its own index (so the task
    gets whole arrays), not ``dask.delayed``: a delayed call over dask arrays keeps only the
    keys of data stored on the cluster, not its futures, so the workers could forget that data
    while this lazy result still needs it ("lost dependencies").
    """
    import dask.array as da

    specs = ctx.invocation.results
    letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    pairs: list[Any] = [part for value in _call(ctx) for part in (value, None)]
    for x in _operands(ctx):
        if isinstance(x, da.Array):
            pairs += [x.rechunk(-1), "".join(next(letters) for _ in range(x.ndim))]
        else:
            pairs += [x, None]  # a scalar or None, passed as it is
    session = _session(ctx)

    def whole_result(function: Any, arguments: list[Any], spec: Any, **kwargs: Any) -> Any:
        index = "".join(next(letters) for _ in spec.shape)
        return da.blockwise(
            function,
            index,
            *arguments,
            new_axes=dict(zip(index, spec.shape, strict=True)),
            concatenate=True,
            dtype=spec.dtype.numpy,
            meta=_meta(len(spec.shape), spec.dtype),
            name=_fresh(ctx),
            **kwargs,
        )

    if len(specs) == 1:
        arrays = [whole_result(_run, pairs, specs[0])]
    else:  # one task computes the tuple (a 0-d object block); one more per result picks it
        parts = da.blockwise(
            _run,
            "",
            *pairs,
            concatenate=True,
            dtype=object,
            meta=np.empty((), object),
            name=_fresh(ctx),
        )
        arrays = [whole_result(_pick, [parts, ""], spec, index=i) for i, spec in enumerate(specs)]
    rechunked = []
    for array, spec in zip(arrays, specs, strict=True):
        limit = _storage.chunk_bytes(spec.shape, spec.dtype, session)
        rechunked.append(array.rechunk(_storage.chunks_for(spec.shape, spec.dtype.numpy, limit)))
    return _publish(ctx, rechunked)


# -- elementwise --


def _elementwise(ctx: _Context) -> cv.ProviderResult:
    """The CPU kernel block by block, over operands aligned the way NumPy broadcasts.

    Operands keep their own shapes and chunks: ``blockwise`` lines their axes up from the
    right, rechunks axes whose chunks differ to a common grid, and hands an operand's single
    block along every axis where it has extent 1, so each task broadcasts only its own blocks
    (``map_blocks`` would do none of that alignment and pair blocks of different shapes).
    """
    import dask.array as da

    spec = ctx.invocation.results[0]
    operands = _operands(ctx)
    where = [i for i, x in enumerate(operands) if isinstance(x, da.Array)]
    if spec.layout.size == 0 or not spec.shape:
        return _whole(ctx)
    ndim = len(spec.shape)
    out_index = tuple(range(ndim))
    pairs: list[Any] = []
    for i in where:
        pairs += [operands[i], out_index[ndim - operands[i].ndim :]]
    template = [None if i in where else x for i, x in enumerate(operands)]
    result = da.blockwise(
        _elementwise_block,
        out_index,
        *pairs,
        call=_call(ctx),
        template=template,
        where=where,
        dtype=spec.dtype.numpy,
        meta=_meta(ndim, spec.dtype),
        name=_fresh(ctx),
    )
    return _publish(ctx, [result])


# -- reductions --


def _converted(ctx: _Context, x: da.Array, index: int = 0) -> da.Array:
    """``x`` converted to operand ``index``'s ``convert_to`` dtype, block by block."""
    plan = _plan(ctx)
    target = plan.operands[index].convert_to
    assert target is not None  # a tensor operand of a plan always has one
    if target.numpy == x.dtype:
        return x  # nothing to convert: no layer (graph layers count toward the bound)
    return x.map_blocks(
        _convert_block,
        plan=plan,
        index=index,
        dtype=target.numpy,
        meta=_meta(x.ndim, target),
        name=_fresh(ctx),
    )


_TREE: Final[dict[str, str]] = {
    "reduce_sum": "sum",
    "reduce_prod": "prod",
    "reduce_max": "max",
    "reduce_min": "min",
}


def _reduction(ctx: _Context) -> cv.ProviderResult:
    import dask.array as da

    (x,) = _operands(ctx)
    options = _options(ctx)
    axes = reduced_axes(options.axis, x.ndim)
    if x.ndim == 0 or x.size == 0 or not axes:
        return _whole(ctx)  # identities and empty-axis refusals exactly as CPU
    name = _TREE[_name(ctx)]
    values = _converted(ctx, x)
    function = getattr(da, name)
    if name in ("sum", "prod"):
        result = function(values, axis=axes, keepdims=options.keepdims, dtype=values.dtype)
    else:
        result = function(values, axis=axes, keepdims=options.keepdims)
    return _publish(ctx, [result.astype(_plan(ctx).outputs[0].numpy)])


# -- lanes: the axis in one chunk --


def _lanes(ctx: _Context) -> cv.ProviderResult:
    (x,) = _operands(ctx)
    options = _options(ctx)
    if x.ndim == 0 or x.size == 0 or options.axis is None:
        return _whole(ctx)
    axis = lane_axes(options.axis, x.ndim)
    x = x.rechunk({axis: -1})
    arrays = []
    for index, spec in enumerate(ctx.invocation.results):
        chunks = list(x.chunks)
        dropped = len(spec.shape) < x.ndim
        if dropped:
            del chunks[axis]
        else:
            chunks[axis] = (spec.shape[axis],)
        arrays.append(
            x.map_blocks(
                _lane_block,
                call=_call(ctx),
                index=index,
                chunks=tuple(chunks),
                drop_axis=[axis] if dropped else [],
                dtype=spec.dtype.numpy,
                meta=_meta(len(spec.shape), spec.dtype),
                name=_fresh(ctx),
            )
        )
    return _publish(ctx, arrays)


# -- contraction --


def _matmul(ctx: _Context) -> cv.ProviderResult:
    import dask.array as da

    a, b = _operands(ctx)
    if a.size == 0 or b.size == 0:
        return _whole(ctx)
    product = da.matmul(_converted(ctx, a, 0), _converted(ctx, b, 1))
    return _publish(ctx, [product.astype(_plan(ctx).outputs[0].numpy)])


def _conv_general(ctx: _Context) -> cv.ProviderResult:
    """The CPU convolution per chunk of the batch axis, each with the whole weight."""
    import dask.array as da

    x, w = _operands(ctx)
    spec = ctx.invocation.results[0]
    if x.size == 0 or w.size == 0 or spec.layout.size == 0 or x.ndim < 3:
        return _whole(ctx)
    options = _options(ctx)
    lhs, _rhs, out = conv_layouts(options, x.ndim)
    batch_in, batch_out = lhs[0], out[0]  # where N sits in the input and in the result
    x = x.rechunk({a: (-1 if a != batch_in else "auto") for a in range(x.ndim)})
    w = w.rechunk(-1)
    # Index letters: "n" is the batch axis, shared; the others are private to each array.
    in_index = "".join("n" if a == batch_in else "abcdefg"[a] for a in range(x.ndim))
    w_index = "pqrstuv"[: w.ndim]
    out_index = "".join("n" if a == batch_out else "hijklmo"[a] for a in range(len(spec.shape)))
    new_axes = {out_index[a]: spec.shape[a] for a in range(len(spec.shape)) if a != batch_out}
    result = da.blockwise(
        _run,
        out_index,
        *(part for value in _call(ctx) for part in (value, None)),  # plain (not array) arguments
        x,
        in_index,
        w,
        w_index,
        new_axes=new_axes,
        concatenate=True,
        name=_fresh(ctx),
        dtype=spec.dtype.numpy,
        meta=_meta(len(spec.shape), spec.dtype),
    )
    return _publish(ctx, [result])


# -- views --


def view(ctx: _Context) -> cv.ProviderResult:
    """Views alias their operand; a reshape that cannot be a view copies in row-major order."""
    if ctx.invocation.results[0].alias is not None:
        return cv.ProviderResult(ctx.alias_result(0))
    (x,) = _operands(ctx)
    return _publish(ctx, [x])


_ELEMENTWISE: Final = (*BINARY_KERNELS, *UNARY_KERNELS, "select", "clamp")
_LANES: Final = ("argmax", "argmin", "cumsum", "sort", "topk")
# The linear-algebra names need whole matrices, so they run as one task per call too.
_WHOLE: Final = (
    "gather",
    "scatter",
    "scatter_add",
    "inv",
    "cholesky",
    "solve",
    "eigh",
    "qr",
    "svd",
)

PLANNED: Final[dict[str, _Kernel]] = {
    **{name: _translated(_elementwise) for name in _ELEMENTWISE},
    **{name: _translated(_reduction) for name in _TREE},
    **{name: _translated(_lanes) for name in _LANES},
    **{name: _translated(_whole) for name in _WHOLE},
    "matmul": _translated(_matmul),
    "conv_general": _translated(_conv_general),
}
"""Every planned dispatch name -> its kernel (the reference kernels' table, name for name)."""

VIEWS: Final = VIEW_OPERATIONS

# Every planned name the reference kernels know has a Dask kernel: keep the tables in step.
assert set(PLANNED) == set(KERNELS), sorted(set(KERNELS) ^ set(PLANNED))
