"""CPU: dispatch scenarios, every plan against Generic, storage, zero-copy interop, gradients.

The kernel families are compared with Generic under hypothesis in ``test_cpu_kernels.py``;
here every plan the policy resolves runs once on small fixed operands on both carriers.
"""

from __future__ import annotations

import gc
import typing
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.engine import functional as F
from conveyor.engine.functional import VIEW_OPERATIONS
from conveyor.types.dtypes import from_numpy
from conveyor.types.policy import enumerate_plans, operation_spec, registered_operations
from conveyor_generic import CPU, Generic
from conveyor_generic.cpu import from_dlpack, to_dlpack
from tests.generic.gradcheck import GRADIENT_CASES, GradientCase, check_gradient
from tests.generic.oracle import assert_matches, make_tensor, run
from tests.generic.test_cpu_kernels import tolerance


def address(array: np.ndarray[Any, Any]) -> int:
    return int(array.__array_interface__["data"][0])


def buffer_of(t: cv.Tensor) -> np.ndarray[Any, Any]:
    """The flat NumPy buffer behind a CPU tensor (white-box: alignment and sharing checks)."""
    return t.carrier._array  # type: ignore[attr-defined, no-any-return]  # ArrayStorage


@pytest.fixture
def carrier() -> CPU:
    return CPU.allocate(4, cv.float32)


class TestDispatch:
    def test_supported_name_twice_gives_two_fresh_operations(self, carrier: CPU) -> None:
        """Each dispatch returns a distinct operation carrying the name and exactly CPU."""
        first, second = carrier.dispatch_op("add"), carrier.dispatch_op("add")
        assert first is not second
        for op in (first, second):
            assert op._operation_name == "add"
            assert op._dispatch_carrier_class is CPU

    @pytest.mark.parametrize("name", [*registered_operations(), *VIEW_OPERATIONS])
    def test_every_registered_and_view_name_dispatches(self, carrier: CPU, name: str) -> None:
        op = carrier.dispatch_op(name)
        assert isinstance(op, cv.Operation)
        assert op._operation_name == name and op._dispatch_carrier_class is CPU

    @pytest.mark.parametrize("name", ["conv", "Add", "softmax", ""])
    def test_unknown_name_is_refused(self, carrier: CPU, name: str) -> None:
        with pytest.raises(
            NotImplementedError, match=rf"{name} on CPU: the carrier does not implement"
        ):
            carrier.dispatch_op(name)

    def test_operations_are_single_use(self) -> None:
        x = cv.tensor([1.0, 2.0], carrier=CPU)
        op = x.carrier.dispatch_op("neg")
        op.forward(x)
        with pytest.raises(RuntimeError, match="forward was already called"):
            op.forward(x)

    def test_operand_on_another_carrier_is_refused(self) -> None:
        """A CPU operation fed a Generic tensor directly names both carriers and cv.move."""
        x = cv.tensor([1.0], carrier=CPU)
        y = cv.tensor([1.0], carrier=Generic)
        op = x.carrier.dispatch_op("add")
        with pytest.raises(TypeError, match=r"add on CPU: operand lives on Generic.*cv\.move"):
            op.forward(x, y)

    def test_kernel_refusals_carry_the_carrier_name(self) -> None:
        x = cv.tensor(np.ones((2, 3)), carrier=CPU)
        with pytest.raises(ValueError, match=r"matmul on CPU: operand shapes .* do not contract"):
            cv.matmul(x, x)
        with pytest.raises(IndexError, match=r"gather on CPU: index 5 is out of range"):
            cv.gather(x, cv.tensor([[5]], carrier=CPU), axis=1)
        with pytest.raises(ValueError, match=r"reduce_max on CPU: cannot take max over axis 0"):
            cv.reduce_max(cv.zeros((0, 2), carrier=CPU), axis=0)


class TestClosed:
    def test_subclassing_is_refused(self) -> None:
        with pytest.raises(
            TypeError,
            match=r"cannot subclass CPU: it is a closed carrier\. Subclass conveyor\.Carrier",
        ):

            class Mine(CPU):  # type: ignore[misc]  # final on purpose
                pass

    def test_closed_and_final(self) -> None:
        assert cv.is_closed_carrier(CPU)
        assert getattr(CPU, "__final__", False) is True

    def test_registered_as_cpu(self) -> None:
        assert type(cv.tensor([1.0], carrier="cpu").carrier) is CPU


class TestCapabilities:
    def test_advertises_exactly_every_policy_plan(self) -> None:
        caps = CPU.allocate(0, cv.float32).operation_capabilities()
        expected = {cv.OperationCapability.from_plan(p) for p in enumerate_plans()}
        assert set(caps) == expected
        assert caps.names == frozenset(registered_operations())


# -- every plan, once, against Generic ------------------------------------------------------

_SAMPLE: dict[Any, Any] = {cv.bool: True, cv.int64: 3, cv.float64: -1.5, cv.complex128: 1.5 - 0.5j}
_FIELDS: dict[str, dict[str, Any]] = {
    "gather": {"axis": 1},
    "scatter": {"axis": 1},
    "scatter_add": {"axis": 1},
    "topk": {"k": 2},
    "reduce_sum": {"axis": 1},
    "cumsum": {"axis": 0},
}


# Linear-algebra names that need square (invertible, positive-definite) matrices.
_SQUARE = ("inv", "cholesky", "eigh", "solve")


def _shape(name: str, role: str) -> tuple[int, ...]:
    if name == "matmul" and role == "other":
        return (4, 3)
    if name in _SQUARE:
        return (3, 3) if role == "input" else (3, 2)
    if name == "conv_general":
        return (2, 3, 5) if role == "input" else (2, 3, 2)
    if role == "index":
        return (3, 2)
    return (3, 4)


def _values(dtype: cv.DType, shape: tuple[int, ...], role: str, rng: Any) -> Any:
    if role == "index":
        return rng.integers(0, 3, shape).astype(dtype.numpy)
    if dtype.is_bool:
        return rng.random(shape) < 0.5
    if dtype.is_integer:
        return rng.integers(1, 5, shape).astype(dtype.numpy)
    values = rng.standard_normal(shape) * 2
    if dtype.is_complex:
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dtype.numpy)


def _plan_operands(plan: cv.OperationPlan, rng: Any) -> tuple[list[Any], dict[str, Any]]:
    name = plan.operation
    operands = [
        None
        if o.dtype is None
        else _SAMPLE[o.dtype]
        if o.weak
        else _values(o.dtype, _shape(name, o.role), o.role, rng)
        for o in plan.operands
    ]
    if name in _SQUARE:
        operands[0] = _positive_definite(operands[0])
    fields = dict(_FIELDS.get(name, {}))
    if plan.accumulator_dtype is not None and operation_spec(name).accepts_accumulator:
        keys = [o.dtype if not o.weak else _SAMPLE[o.dtype] for o in plan.operands]
        if cv.resolve_plan(name, *keys).accumulator_dtype is not plan.accumulator_dtype:
            fields["accumulator_dtype"] = plan.accumulator_dtype
    return operands, fields


def _positive_definite(a: Any) -> Any:
    """``a a^H + 4 I`` in ``a``'s dtype; bool and integer matrices become unit lower triangular."""
    if a.dtype.kind not in "fc" and a.dtype.name != "bfloat16":  # solve's promoted bool / int
        return np.tril(np.ones(a.shape)).astype(a.dtype)
    wide = a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
    return (wide @ np.conj(wide.T) + 4 * np.eye(a.shape[0])).astype(a.dtype)


@pytest.mark.parametrize("name", registered_operations())
def test_every_plan_executes_like_generic(name: str) -> None:
    """Each plan CPU advertises runs, keeps the plan's output dtypes and matches Generic."""
    rng = np.random.default_rng(0)
    for plan in enumerate_plans(name):
        operands, fields = _plan_operands(plan, rng)
        assert (
            cv.resolve_plan(
                name,
                *(from_numpy(v.dtype) if isinstance(v, np.ndarray) else v for v in operands),
                options=cv.OperationExecutionOptions(name, **fields) if fields else None,
            )
            == plan
        )
        got = run(CPU, name, operands, fields)
        want = run(Generic, name, operands, fields)
        for a, b, dtype in zip(got, want, plan.outputs, strict=True):
            ulps, atol = tolerance(name, plan, operands, fields)
            assert_matches(a, b, dtype, ulps=ulps, atol=atol)


# -- storage --------------------------------------------------------------------------------


class TestStorage:
    @pytest.mark.parametrize("size", [0, 1, 3, 100, 4096, 300_000])
    def test_allocated_and_result_buffers_are_64_byte_aligned(self, size: int) -> None:
        """allocate, every result size class and wrap all start on a cache line."""
        x = cv.Tensor(CPU.allocate(size, cv.float32))
        results = [x, cv.add(x, 1.0), cv.exp(x), cv.reduce_sum(x, axis=0, keepdims=True)]
        results.append(CPU.wrap(np.arange(size, dtype=np.float64), cv.float64))
        for t in results:
            assert address(buffer_of(t)) % 64 == 0

    def test_results_of_every_family_are_aligned(self) -> None:
        x = cv.tensor(np.arange(12.0).reshape(3, 4), carrier=CPU)
        outputs = [
            cv.matmul(x, cv.permute(x, axes=(1, 0))),
            *cv.sort(x),
            *cv.topk(x, k=2),
            cv.gather(x, cv.tensor([[0, 1]], carrier=CPU), axis=1),
            cv.conv_general(cv.reshape(x, shape=(1, 3, 4)), cv.ones((2, 3, 2), carrier=CPU)),
            cv.select(cv.lt(x, 5.0), x, 0.0),
            cv.gelu(x),
        ]
        for t in outputs:
            assert address(buffer_of(t)) % 64 == 0

    def test_results_own_fresh_storage(self) -> None:
        x = cv.tensor([1.0, 2.0], carrier=CPU)
        y = cv.add(x, 0.0)
        assert y.carrier is not x.carrier
        y[0] = 5.0
        np.testing.assert_array_equal(x.numpy(), [1.0, 2.0])

    def test_dead_large_results_are_recycled(self) -> None:
        """A large result's buffer returns to the pool and the next same-size result reuses it."""
        x = cv.zeros(1 << 19, carrier=CPU)  # 2 MiB
        y = cv.add(x, 1.0)
        first = address(buffer_of(y))
        del y
        gc.collect()
        z = cv.add(x, 2.0)
        assert address(buffer_of(z)) == first
        np.testing.assert_array_equal(z.numpy()[:3], [2.0, 2.0, 2.0])

    def test_exported_buffers_are_never_recycled(self) -> None:
        """While NumPy still holds a view of a dead result, its memory is not reused."""
        x = cv.zeros(1 << 19, carrier=CPU)
        y = cv.add(x, 1.0)
        kept = np.asarray(y)
        del y
        gc.collect()
        z = cv.add(x, 2.0)
        assert not np.shares_memory(kept, np.asarray(z))
        np.testing.assert_array_equal(kept[:3], [1.0, 1.0, 1.0])

    def test_released_operand_is_refused(self) -> None:
        x = cv.tensor([1.0, 2.0], carrier=CPU)
        x.carrier.release()
        with pytest.raises(RuntimeError, match="released"):
            cv.neg(x)


# -- zero-copy interop ----------------------------------------------------------------------


class _Exporter:
    """Stands in for the core's ``Tensor.__dlpack__`` hook: delegates to the carrier's."""

    def __init__(self, t: cv.Tensor) -> None:
        self.t = t

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.t.carrier._dlpack(self.t.layout, **kwargs)  # type: ignore[attr-defined]

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.t.carrier._dlpack_device()  # type: ignore[attr-defined, no-any-return]


class TestZeroCopy:
    def test_array_is_a_read_only_view(self) -> None:
        t = cv.tensor(np.arange(6.0).reshape(2, 3), carrier=CPU)
        view = np.asarray(t)
        assert np.shares_memory(view, buffer_of(t))
        assert not view.flags.writeable
        strided = np.asarray(cv.permute(t, axes=(1, 0)))
        assert np.shares_memory(strided, buffer_of(t))
        np.testing.assert_array_equal(strided, np.arange(6.0).reshape(2, 3).T)

    @pytest.mark.parametrize("source", [[1, 2], 3.0, "abc"])
    def test_from_dlpack_non_producer_type_error(self, source: Any) -> None:
        """from_dlpack refuses what is not a DLPack producer with TypeError, as documented."""
        with pytest.raises(TypeError) as info:
            from_dlpack(source)
        assert str(info.value).startswith(
            f"from_dlpack: {type(source).__name__} is not a DLPack producer (no __dlpack__); "
        )

    def test_from_dlpack_of_numpy_shares_memory(self) -> None:
        source = np.arange(12, dtype=np.float32).reshape(3, 4)
        t = from_dlpack(source)
        assert type(t.carrier) is CPU and t.dtype is cv.float32 and t.shape == (3, 4)
        assert np.shares_memory(np.asarray(t), source)
        source[0, 0] = 42.0
        assert t.numpy()[0, 0] == 42.0
        np.testing.assert_array_equal(cv.add(t, 1.0).numpy(), source + 1)

    @pytest.mark.parametrize(
        "make",
        [
            lambda a: a[:, ::2],
            lambda a: a[::-1],
            lambda a: a.T,
            lambda a: a[:0],
            lambda a: a[1],
        ],
    )
    def test_from_dlpack_keeps_strided_views(self, make: Any) -> None:
        base = np.arange(20, dtype=np.int32).reshape(4, 5)
        source = make(base)
        t = from_dlpack(source)
        np.testing.assert_array_equal(t.numpy(), source)
        if source.size:
            assert np.shares_memory(np.asarray(t), base)
        np.testing.assert_array_equal(cv.neg(t).numpy(), -source)

    def test_dlpack_export_shares_memory_and_is_read_only(self) -> None:
        t = cv.tensor(np.arange(6.0), carrier=CPU)
        out = np.from_dlpack(_Exporter(t))
        assert np.shares_memory(out, buffer_of(t))
        assert not out.flags.writeable
        sliced = np.from_dlpack(_Exporter(t[1::2]))
        np.testing.assert_array_equal(sliced, [1.0, 3.0, 5.0])
        assert np.shares_memory(sliced, buffer_of(t))

    def test_dlpack_export_copy_and_device(self) -> None:
        t = cv.tensor([1.0, 2.0], carrier=CPU)
        copied = np.from_dlpack(_Exporter(t), copy=True)
        assert not np.shares_memory(copied, buffer_of(t))
        assert t.carrier._dlpack_device() == (1, 0)  # type: ignore[attr-defined]
        with pytest.raises(BufferError, match=r"__dlpack__ on CPU: .*device"):
            t.carrier._dlpack(t.layout, dl_device=(2, 0))  # type: ignore[attr-defined]

    def test_numpy_from_dlpack_of_a_tensor(self) -> None:
        t = cv.tensor(np.arange(4.0), carrier=CPU)
        out = np.from_dlpack(t)
        assert np.shares_memory(out, buffer_of(t))

    def test_torch_round_trip_without_copies(self) -> None:
        torch = pytest.importorskip("torch", reason="PyTorch is an optional benchmark peer")
        source = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        t = from_dlpack(source)
        source[0, 0] = 7.0
        assert t.numpy()[0, 0] == 7.0
        back = torch.from_dlpack(to_dlpack(t))
        assert back.data_ptr() == source.data_ptr()
        result = cv.mul(t, 2.0)
        exported = torch.from_dlpack(to_dlpack(result))
        assert exported.data_ptr() == address(buffer_of(result))
        assert torch.equal(exported, source * 2)
        versioned = torch.from_dlpack(_Exporter(result))  # what Tensor.__dlpack__ will do
        assert versioned.data_ptr() == address(buffer_of(result))


# -- gradients ------------------------------------------------------------------------------


@pytest.mark.parametrize("case", GRADIENT_CASES, ids=lambda c: c.id)
def test_gradient_matches_finite_differences(case: GradientCase) -> None:
    """Analytic gradients on CPU (shared VJPs over CPU kernels) equal central differences."""
    check_gradient(CPU, case)


def test_backward_runs_on_cpu_and_matches_generic() -> None:
    """A small composite graph gives the same gradients on both carriers."""
    rng = np.random.default_rng(3)
    values = [rng.standard_normal((4, 3)), rng.standard_normal((3, 2))]
    grads = []
    for carrier in (CPU, Generic):
        a, b = (make_tensor(v, cv.float64, carrier, requires_grad=True) for v in values)
        loss = F.reduce_sum(F.gelu(F.matmul(a, b)) * F.sigmoid(F.matmul(a, b)))
        loss.backward()
        assert type(a.grad.carrier) is carrier  # type: ignore[union-attr]
        grads.append([a.grad.numpy(), b.grad.numpy()])  # type: ignore[union-attr]
    for got, want in zip(*grads, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_cpu_type_hints() -> None:
    assert typing.get_type_hints(CPU._dispatch_op)["return"] is cv.Operation
