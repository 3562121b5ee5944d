"""The definition-backed path: bound per call signature like CPU's, with every check kept, and
the zero-copy kernel interface (``KernelExecutionInterface.arrays`` / ``array``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.sdk import policy_capabilities
from tests.conformance.reference_vendor import _ArrayStorage
from tests.generic.test_hot_path import python_calls

# The steady-state tiny cv.add on a definition-backed carrier whose kernel is one ufunc over
# ctx.arrays() returning its result itself: the public function, _forward (its result specs kept
# per call shape, the interface built and the result checked inline), the kernel, the result
# allocation (allocate_result, the provider's allocate and its dtype.numpy, publish), arrays and
# array (CPU's is 5). Was 22 (with bind, resolve and their records), then 14 (with the
# interface's constructor, the default flat_array, the ProviderResult, _publish and the sealed
# table's fresh). Lower it as the path gets faster, raise it only with a reason.
VENDOR_TINY_ADD_PYTHON_CALLS = 9

_UFUNCS = {"add": np.add, "mul": np.multiply, "elementwise_mul": np.multiply, "exp": np.exp}
# What the kernels saw: kernels append here when a test asks them to (``_SPY``).
_SPY: list[tuple[Any, ...]] = []
# Set by a test to make the next kernel call return a wrong result.
_BREAK: list[str] = []


def _kernel(ctx: cv.KernelExecutionInterface) -> cv.Tensor:
    arrays = ctx.arrays()
    _SPY.append(arrays)
    out = ctx.allocate_result(0)
    _UFUNCS[ctx.invocation.operation](*arrays, out=ctx.array(out))
    if _BREAK:
        _BREAK.pop()
        out = ctx.allocate_result(0).reshape((1, -1))  # a result of the wrong shape
    return out  # the one result itself, as the guide's kernels return it


def _contiguous_kernel(ctx: cv.KernelExecutionInterface) -> cv.ProviderResult:
    arrays = ctx.arrays(contiguous=True)
    _SPY.append(arrays)
    out = ctx.allocate_result(0)
    np.negative(*arrays, out=ctx.array(out))
    return cv.ProviderResult([out])


class Ufuncs(cv.Carrier):
    """A vendor carrier written from the guide: NumPy storage, one ufunc per kernel."""


cv.register_carrier_definition(
    Ufuncs,
    cv.CarrierDefinition(
        storage=_ArrayStorage(),
        kernels=cv.KernelProvider(
            [
                cv.KernelPattern(operation=name, kernel=_kernel, plans=policy_capabilities([name]))
                for name in _UFUNCS
            ]
            + [
                cv.KernelPattern(
                    operation="neg", kernel=_contiguous_kernel, plans=policy_capabilities(["neg"])
                )
            ]
        ),
    ),
)


class _OpaqueStorage(_ArrayStorage):
    """Storage whose handle is not an array: the kernel interface has no view to give."""

    def allocate(self, size: int, dtype: cv.DType, **options: Any) -> Any:
        return [super().allocate(size, dtype)]

    def read(self, handle: Any, index: int) -> Any:
        return super().read(handle[0], index)

    def write(self, handle: Any, index: int, value: Any) -> None:
        super().write(handle[0], index, value)

    def export_span(self, handle: Any, layout: cv.Layout, dtype: cv.DType) -> Any:
        return super().export_span(handle[0], layout, dtype)

    def import_span(self, handle: Any, layout: cv.Layout, dtype: cv.DType, values: Any) -> None:
        super().import_span(handle[0], layout, dtype, values)


class Opaque(cv.Carrier):
    """A vendor carrier whose storage is not NumPy-addressable."""


cv.register_carrier_definition(
    Opaque,
    cv.CarrierDefinition(
        storage=_OpaqueStorage(),
        kernels=cv.KernelProvider(
            [cv.KernelPattern(operation="add", kernel=_kernel, plans=policy_capabilities(["add"]))]
        ),
    ),
)


def _on(carrier: type[cv.Carrier], values: Any) -> cv.Tensor:
    return cv.move(cv.tensor(np.asarray(values, np.float32), carrier="cpu"), carrier)


@pytest.fixture(autouse=True)
def _clean() -> Any:
    _SPY.clear()
    _BREAK.clear()
    yield
    _SPY.clear()
    _BREAK.clear()


class TestBoundPath:
    def test_steady_state_tiny_add_on_a_vendor_carrier_makes_at_most_the_budgeted_calls(
        self,
    ) -> None:
        a, b = _on(Ufuncs, np.arange(8)), _on(Ufuncs, np.ones(8))
        for _ in range(3):
            cv.add(a, b)  # binds the record
        calls = python_calls(lambda: cv.add(a, b))
        assert len(calls) <= VENDOR_TINY_ADD_PYTHON_CALLS, calls
        assert "dispatch_op" not in calls  # the bound path builds the operation itself

    def test_bound_calls_still_validate_the_provider_result(self) -> None:
        a, b = _on(Ufuncs, np.arange(4)), _on(Ufuncs, np.ones(4))
        for _ in range(3):
            cv.add(a, b)
        _BREAK.append("shape")
        with pytest.raises(cv.ProviderContractError, match=r"add on Ufuncs.*shape"):
            cv.add(a, b)
        np.testing.assert_array_equal(cv.add(a, b).numpy(), [1, 2, 3, 4])  # and recovers

    def test_bound_calls_give_fresh_results_and_see_writes_to_the_operands(self) -> None:
        a, b = _on(Ufuncs, np.arange(4)), _on(Ufuncs, np.ones(4))
        first = cv.add(a, b)
        a[...] = 2.0
        second = cv.add(a, b)
        assert second.carrier is not first.carrier
        np.testing.assert_array_equal(first.numpy(), [1, 2, 3, 4])
        np.testing.assert_array_equal(second.numpy(), [3, 3, 3, 3])

    def test_bound_calls_of_new_shapes_resolve_their_own_result_specs(self) -> None:
        row, column = _on(Ufuncs, np.arange(3)), _on(Ufuncs, np.arange(2).reshape(2, 1))
        assert cv.add(row, row).shape == (3,)
        out = cv.add(column, row)
        assert out.shape == (2, 3)
        np.testing.assert_array_equal(out.numpy(), np.arange(2).reshape(2, 1) + np.arange(3))

    def test_tracked_bound_calls_differentiate_like_cpu(self) -> None:
        values = np.linspace(-1, 1, 5, dtype=np.float32)
        grads = []
        for carrier in ("cpu", Ufuncs):
            x = _on(carrier, values) if carrier is Ufuncs else cv.tensor(values, carrier="cpu")  # type: ignore[arg-type]
            x.requires_grad = True
            for _ in range(3):  # the later calls run bound
                x.grad = None
                y = (x * x).exp()
                y.backward(cv.ones_like(y))
            assert x.grad is not None
            grads.append(x.grad.numpy())
        np.testing.assert_allclose(grads[1], grads[0], rtol=1e-6)

    def test_a_released_operand_is_refused_even_after_its_view_was_kept(self) -> None:
        a, b = _on(Ufuncs, np.arange(4)), _on(Ufuncs, np.ones(4))
        for _ in range(3):
            cv.add(a, b)
        a.carrier.release()
        with pytest.raises(RuntimeError, match="released"):
            cv.add(a, b)


class TestKernelArrays:
    @pytest.mark.parametrize(
        ("label", "make"),
        [
            ("offset slice", lambda t: t[1:]),
            ("transposed", lambda t: t.reshape((3, 4)).T),
            ("negative step", lambda t: t[::-1][1:]),
            ("zero strides", lambda t: cv.broadcast_to(t[:1], shape=(11,))),
        ],
    )
    def test_operands_are_views_with_their_layout_applied(self, label: str, make: Any) -> None:
        values = np.arange(12, dtype=np.float32)
        base = _on(Ufuncs, values)
        operand = make(base)
        expected = make(cv.tensor(values, carrier="cpu")).numpy()
        out = cv.add(operand, 1.0)
        np.testing.assert_array_equal(out.numpy(), expected + 1, err_msg=label)
        (seen, _) = _SPY[-1]
        assert np.shares_memory(seen, cv.storage_handle(base.carrier)), label  # no copy
        assert not seen.flags.writeable, label

    def test_empty_views_with_an_offset_past_the_end_read_as_empty(self) -> None:
        x = _on(Ufuncs, np.zeros((0, 3)))[:, ::-1]
        out = cv.add(x, 1.0)
        assert out.shape == (0, 3)
        (seen, _) = _SPY[-1]
        assert seen.shape == (0, 3) and not seen.flags.writeable

    def test_transposed_matrix_operand_keeps_its_strides(self) -> None:
        values = np.arange(6, dtype=np.float32).reshape(2, 3)
        x = _on(Ufuncs, values).T
        out = cv.mul(x, x)
        np.testing.assert_array_equal(out.numpy(), values.T * values.T)
        (seen, _) = _SPY[-1]
        assert seen.strides == (4, 12)

    def test_contiguous_operands_are_copied_only_when_needed(self) -> None:
        values = np.arange(6, dtype=np.float32).reshape(2, 3)
        x = _on(Ufuncs, values)
        cv.neg(x)
        (seen,) = _SPY[-1]
        assert np.shares_memory(seen, cv.storage_handle(x.carrier))  # already contiguous
        out = cv.neg(x.T)
        (seen,) = _SPY[-1]
        assert seen.flags.c_contiguous and not seen.flags.writeable
        assert not np.shares_memory(seen, cv.storage_handle(x.carrier))
        np.testing.assert_array_equal(out.numpy(), -values.T)

    def test_array_of_an_operand_is_refused_and_nothing_is_kept(self) -> None:
        seen: list[Any] = []

        def writes_operand(ctx: cv.KernelExecutionInterface) -> cv.ProviderResult:
            seen.append(ctx.allocate_result(0))
            ctx.array(ctx.operands[0])  # raises: operands are read through arrays()
            raise AssertionError("unreachable")

        class Writes(cv.Carrier):
            pass

        cv.register_carrier_definition(
            Writes,
            cv.CarrierDefinition(
                storage=_ArrayStorage(),
                kernels=cv.KernelProvider(
                    [
                        cv.KernelPattern(
                            operation="add",
                            kernel=writes_operand,
                            plans=policy_capabilities(["add"]),
                        )
                    ]
                ),
            ),
        )
        a = _on(Writes, np.arange(3))
        with pytest.raises(ValueError, match="allocate_result only"):
            cv.add(a, a)
        assert seen[0].carrier.released  # the allocated result was released
        np.testing.assert_array_equal(a.numpy(), [0, 1, 2])

    def test_storage_without_an_array_is_refused_naming_the_carrier(self) -> None:
        a = _on(Opaque, np.arange(3))
        with pytest.raises(NotImplementedError, match=r"add on Opaque: .*flat_array"):
            cv.add(a, a)
        np.testing.assert_array_equal(a.numpy(), [0, 1, 2])

    def test_operand_views_cannot_be_written(self) -> None:
        a = _on(Ufuncs, np.arange(3))
        cv.add(a, a)
        (seen, _) = _SPY[-1]
        with pytest.raises(ValueError, match="read-only"):
            seen[0] = 5.0
        np.testing.assert_array_equal(a.numpy(), [0, 1, 2])


class _CountingStorage(_ArrayStorage):
    """Array storage that records which allocation each handle came from."""

    def __init__(self, *, uninitialized: bool) -> None:
        self.kinds: list[str] = []
        if not uninitialized:
            self.allocate_uninitialized = super().allocate_uninitialized  # type: ignore[method-assign]

    def allocate(self, size: int, dtype: cv.DType, **options: Any) -> Any:
        self.kinds.append("zeros")
        return super().allocate(size, dtype, **options)

    def allocate_uninitialized(self, size: int, dtype: cv.DType) -> Any:
        self.kinds.append("empty")
        return np.full(size, np.nan, dtype.numpy)  # whatever was there: the kernel overwrites


def _overwriting_kernel(ctx: cv.KernelExecutionInterface) -> cv.ProviderResult:
    out = ctx.allocate_result(0, initialized=False)
    np.add(*ctx.arrays(), out=ctx.array(out))
    return cv.ProviderResult(out)


def _accumulating_kernel(ctx: cv.KernelExecutionInterface) -> cv.ProviderResult:
    out = ctx.allocate_result(0)  # zero-filled: the kernel adds into it
    view = ctx.array(out)
    for x in ctx.arrays():
        view += x
    return cv.ProviderResult(out)


def _counting_class(name: str, storage: _CountingStorage, kernel: Any) -> type[cv.Carrier]:
    cls = type(name, (cv.Carrier,), {})
    cv.register_carrier_definition(
        cls,
        cv.CarrierDefinition(
            storage=storage,
            kernels=cv.KernelProvider(
                [
                    cv.KernelPattern(
                        operation="add", kernel=kernel, plans=policy_capabilities(["add"])
                    )
                ]
            ),
        ),
    )
    return cls


class TestUninitializedResults:
    @pytest.mark.parametrize(
        ("uninitialized", "kernel", "kinds"),
        [
            # Written whole: the zero fill is skipped after the first result of a dtype, which
            # goes through the public allocate (supports_dtype asked).
            (True, _overwriting_kernel, ["zeros", "empty", "empty"]),
            # A provider without the hook is given zero-filled storage.
            (False, _overwriting_kernel, ["zeros", "zeros", "zeros"]),
            # Results the kernel asks initialized stay zero-filled.
            (True, _accumulating_kernel, ["zeros", "zeros", "zeros"]),
        ],
        ids=["written-whole-skips-the-fill", "no-hook-zero-fills", "asked-initialized-zero-fills"],
    )
    def test_which_results_skip_the_zero_fill(
        self, uninitialized: bool, kernel: Any, kinds: list[str]
    ) -> None:
        storage = _CountingStorage(uninitialized=uninitialized)
        Counted = _counting_class("Counted", storage, kernel)
        a, b = _on(Counted, np.arange(4)), _on(Counted, np.ones(4))
        storage.kinds.clear()
        for _ in range(3):
            np.testing.assert_array_equal(cv.add(a, b).numpy(), [1, 2, 3, 4])
        assert storage.kinds == kinds


class TestCallShapeRecords:
    def test_a_custom_definition_resolves_on_every_call(self) -> None:
        resolved: list[tuple[int, ...]] = []

        def resolve(call: cv.BoundCall) -> cv.ResolvedInvocation:
            (x,) = call.operands
            resolved.append(x.shape)
            return call.resolved([cv.ResultSpec(dtype=x.dtype, shape=x.shape)])

        op = cv.define_operation("vendorfastpath.double", roles=("input",), resolve=resolve)

        def double(ctx: cv.KernelExecutionInterface) -> cv.ProviderResult:
            out = ctx.allocate_result(0, initialized=False)
            (x,) = ctx.arrays()
            np.multiply(x, 2, out=ctx.array(out))
            return cv.ProviderResult(out)

        class Doubles(cv.Carrier):
            pass

        cv.register_carrier_definition(
            Doubles,
            cv.CarrierDefinition(
                storage=_ArrayStorage(),
                kernels=cv.KernelProvider(
                    [cv.KernelPattern(operation="vendorfastpath.double", kernel=double)]
                ),
            ),
        )
        x = _on(Doubles, np.arange(3))
        for _ in range(3):
            out = op(x)
            np.testing.assert_array_equal(out.numpy(), [0, 2, 4])
        assert resolved == [(3,)] * 3

    def test_gather_checks_the_index_range_on_every_bound_call(self) -> None:
        def gather(ctx: cv.KernelExecutionInterface) -> cv.ProviderResult:
            out = ctx.allocate_result(0, initialized=False)
            x, index = ctx.arrays()
            ctx.array(out)[...] = np.take_along_axis(x, index, axis=ctx.invocation.options.axis)
            return cv.ProviderResult(out)

        class Gathers(cv.Carrier):
            pass

        cv.register_carrier_definition(
            Gathers,
            cv.CarrierDefinition(
                storage=_ArrayStorage(),
                kernels=cv.KernelProvider(
                    [
                        cv.KernelPattern(
                            operation="gather", kernel=gather, plans=policy_capabilities(["gather"])
                        )
                    ]
                ),
            ),
        )
        x = _on(Gathers, np.arange(4))
        inside = cv.move(cv.tensor(np.array([0, 3]), carrier="cpu"), Gathers)
        outside = cv.move(cv.tensor(np.array([0, -1]), carrier="cpu"), Gathers)  # same shape
        for _ in range(3):
            np.testing.assert_array_equal(cv.gather(x, inside, axis=0).numpy(), [0, 3])
        with pytest.raises(IndexError, match="out of range"):
            cv.gather(x, outside, axis=0)  # NumPy would read it from the end

    def test_options_and_shapes_each_resolve_their_own_specs(self) -> None:
        a = _on(Ufuncs, np.arange(6).reshape(2, 3))
        for _ in range(2):
            assert cv.add(a, a).shape == (2, 3)
            assert cv.add(a, 1.0).shape == (2, 3)
            assert cv.add(a[0], a).shape == (2, 3)
            assert cv.add(a[:, :1], a[0]).shape == (2, 3)
            assert cv.exp(a[0]).shape == (3,)
        np.testing.assert_array_equal(cv.add(a[:, :1], a[0]).numpy(), [[0, 1, 2], [3, 4, 5]])
