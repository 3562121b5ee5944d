"""Definition-backed dispatch: central definitions, providers, the gate and contract checks.

Every carrier here is test-only: ``Vendor`` keeps its slots in NumPy arrays through a
``StorageProvider`` and executes a few central definitions and one custom operation through
kernel patterns. Kernels count their entries so tests can prove that refusals come first.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.sdk import DefinitionOperation, carrier_definition
from conveyor.types.policy import enumerate_plans


class ArrayStorage(cv.StorageProvider):
    """Slots in a flat NumPy array; records released handles."""

    def __init__(self) -> None:
        self.released: list[int] = []

    def supports_dtype(self, dtype: cv.DType) -> bool:
        return dtype in (cv.float32, cv.float64, cv.int64, cv.bool)

    def physical_size(self, size: int, dtype: cv.DType) -> int:
        return size * np.dtype(dtype.numpy).itemsize

    def allocate(self, size: int, dtype: cv.DType, **options: Any) -> Any:
        return np.zeros(size, dtype.numpy)

    def release(self, handle: Any) -> None:
        self.released.append(id(handle))

    def read(self, handle: Any, index: int) -> Any:
        return handle[index].item()

    def write(self, handle: Any, index: int, value: Any) -> None:
        handle[index] = value

    def export_span(self, handle: Any, layout: cv.Layout, dtype: cv.DType) -> Any:
        item = handle.itemsize
        view = np.ndarray(
            layout.shape,
            handle.dtype,
            buffer=handle,
            offset=layout.offset * item,
            strides=tuple(s * item for s in layout.strides),
        )
        return view.copy()

    def import_span(self, handle: Any, layout: cv.Layout, dtype: cv.DType, values: Any) -> None:
        item = handle.itemsize
        view = np.ndarray(
            layout.shape,
            handle.dtype,
            buffer=handle,
            offset=layout.offset * item,
            strides=tuple(s * item for s in layout.strides),
        )
        view[...] = values


STORAGE = ArrayStorage()
FLOATS = (cv.float32, cv.float64)
ENTRIES: list[str] = []


def _values(x: Any) -> Any:
    return x.carrier.export_span(x.layout) if isinstance(x, cv.Tensor) else x


def _plans(name: str, scalars: bool = False) -> list[cv.OperationPlan]:
    return [
        p
        for p in enumerate_plans(name)
        if p.compute in FLOATS
        and all(o.dtype in FLOATS for o in p.operands if not o.weak)
        and (scalars or not any(o.weak for o in p.operands))
    ]


def _binary(function: Any) -> Any:
    def kernel(ctx: cv.KernelExecutionInterface) -> cv.ProviderResult:
        ENTRIES.append(ctx.invocation.operation)
        out = ctx.allocate_result(0)
        a, b = (_values(x) for x in ctx.operands)
        out.carrier.import_span(out.layout, np.asarray(function(a, b), out.dtype.numpy))
        return cv.ProviderResult(out)

    return kernel


def _twice(ctx: cv.KernelExecutionInterface) -> cv.ProviderResult:
    ENTRIES.append(ctx.invocation.operation)
    out = ctx.allocate_result(0)
    out.carrier.import_span(out.layout, _values(ctx.operands[0]) * 2)
    return cv.ProviderResult(out)


def _resolve_twice(call: cv.BoundCall) -> cv.ResolvedInvocation:
    (x,) = call.operands
    return call.resolved([cv.ResultSpec(dtype=x.dtype, shape=x.shape)])


TWICE = cv.define_operation("testing.twice", roles=("input",), resolve=_resolve_twice)


class Vendor(cv.Carrier):
    """A definition-backed sibling carrier with add, mul and testing.twice kernels."""


class Facet(cv.CarrierFacet):
    def hello(self) -> str:
        return f"hello from {type(self.carrier).__name__}"


class OtherFacet(cv.CarrierFacet):
    pass


cv.register_carrier_definition(
    Vendor,
    cv.CarrierDefinition(
        storage=STORAGE,
        kernels=cv.KernelProvider(
            [
                cv.KernelPattern(operation="add", kernel=_binary(np.add), plans=_plans("add")),
                cv.KernelPattern(
                    operation="mul", kernel=_binary(np.multiply), plans=_plans("mul", True)
                ),
                cv.KernelPattern(operation="testing.twice", kernel=_twice),
            ]
        ),
        facets=(Facet,),
    ),
)


class StorageOnly(cv.Carrier):
    """A definition-backed carrier with real storage and no kernel or composite provider."""


cv.register_carrier_definition(StorageOnly, cv.CarrierDefinition(storage=STORAGE))


def vendor(values: Any, dtype: cv.DType = cv.float32) -> cv.Tensor:
    return cv.tensor(values, dtype, carrier=Vendor)


@pytest.fixture(autouse=True)
def _clear_entries() -> None:
    ENTRIES.clear()


class TestDispatchFromAnInstanceDefinitionBacked:
    """Scenario 'Dispatch from an instance' on a definition-backed carrier."""

    def test_definition_backed_dispatch_returns_fresh_bound_operation(self) -> None:
        """dispatch_op returns a fresh DefinitionOperation on the central definition."""
        carrier = vendor([1.0]).carrier
        first, second = carrier.dispatch_op("add"), carrier.dispatch_op("add")
        assert isinstance(first, DefinitionOperation) and first is not second
        assert first.definition is second.definition is cv.operation_definition("add")
        assert (first._operation_name, first._dispatch_carrier_class) == ("add", Vendor)
        assert first._dispatch_carrier is carrier

    def test_definition_backed_dispatch_executes_with_exact_metadata(self) -> None:
        """Forward resolves, runs the kernel and returns the exact declared result."""
        x, y = vendor([[1.0, 2.0]]), vendor([[10.0], [20.0]])
        op = x.carrier.dispatch_op("add")
        out = op.forward(x, y)
        assert isinstance(out, cv.Tensor) and type(out.carrier) is Vendor
        assert out.shape == (2, 2) and out.dtype is cv.float32
        np.testing.assert_array_equal(out.numpy(), [[11.0, 12.0], [21.0, 22.0]])
        assert op.invocation is not None and op.invocation.plan is op.plan
        assert ENTRIES == ["add"]

    def test_public_function_and_operator_dispatch_definition(self) -> None:
        """cv.mul and the * operator reach the kernel, scalars on either side."""
        x = vendor([1.0, 2.0])
        np.testing.assert_array_equal((x * 3.0).numpy(), [3.0, 6.0])
        np.testing.assert_array_equal((3.0 * x).numpy(), [3.0, 6.0])
        np.testing.assert_array_equal(cv.mul(x, x).numpy(), [1.0, 4.0])


class TestDispatchCustomDefinitionBackedOperation:
    """Scenario 'Dispatch a custom definition-backed operation'."""

    def test_custom_operation_dispatches_through_central_definition(self) -> None:
        """A registered custom name dispatches fresh operations using the central definition."""
        carrier = vendor([1.0]).carrier
        op = carrier.dispatch_op("testing.twice")
        assert isinstance(op, DefinitionOperation) and op.definition is TWICE
        assert op is not carrier.dispatch_op("testing.twice")

    def test_provider_prepares_only_the_resolved_invocation(self) -> None:
        """The kernel runs on the immutable invocation the central resolve produced."""
        x = vendor([1.0, 2.5])
        op = x.carrier.dispatch_op("testing.twice")
        out = op.forward(x)
        np.testing.assert_array_equal(out.numpy(), [2.0, 5.0])
        invocation = op.invocation
        assert isinstance(invocation, cv.ResolvedInvocation)
        assert invocation.results == (cv.ResultSpec(dtype=cv.float32, shape=(2,)),)
        with pytest.raises(AttributeError):
            invocation.results = ()  # type: ignore[misc]  # frozen on purpose

    def test_calling_definition_dispatches_on_operand_carrier(self) -> None:
        """A definition is callable like a public function."""
        np.testing.assert_array_equal(TWICE(vendor([3.0])).numpy(), [6.0])

    def test_resolution_failure_happens_before_provider(self) -> None:
        """Binding refuses a wrong operand count before the kernel is entered."""
        x = vendor([1.0])
        with pytest.raises(TypeError, match=r"testing\.twice on Vendor: expected 1 operand"):
            x.carrier.dispatch_op("testing.twice").forward(x, x)
        assert ENTRIES == []

    def test_non_differentiable_custom_operation_attaches_no_node(self) -> None:
        """A NON_DIFFERENTIABLE definition never becomes an autograd node."""
        x = vendor([1.0])
        x.requires_grad = True
        out = TWICE(x)
        assert out.autograd_ctx is None and not out.requires_grad

    def test_carrier_without_pattern_refuses_custom_name(self) -> None:
        """A carrier whose providers do not cover a defined name refuses it at dispatch."""
        cv.define_operation("testing.uncovered", roles=("input",), resolve=_resolve_twice)
        with pytest.raises(NotImplementedError) as info:
            vendor([1.0]).carrier.dispatch_op("testing.uncovered")
        assert str(info.value) == (
            "testing.uncovered on Vendor: the carrier's kernel and composite providers cover "
            "no invocation of this operation"
        )


class TestDispatchStorageOnlyCarrier:
    """Scenario 'Dispatch a storage-only carrier'."""

    @pytest.mark.parametrize("name", ["add", "matmul", "exp", "testing.twice"])
    def test_storage_only_refuses_computational_name(self, name: str) -> None:
        """NotImplementedError identifying the name, with the exact message."""
        carrier = StorageOnly.allocate(2, cv.float32)
        with pytest.raises(NotImplementedError) as info:
            carrier.dispatch_op(name)
        assert type(info.value) is NotImplementedError
        assert str(info.value) == (
            f"{name} on StorageOnly: the carrier's definition is storage-only (no kernel or "
            f"composite provider), so it executes no computational operation; move the tensor "
            f"to a compute carrier with cv.move"
        )

    def test_storage_only_still_stores(self) -> None:
        """Storage goes through the provider after the framework's checks."""
        carrier = StorageOnly.allocate(2, cv.float64)
        carrier.write(1, 2.5)
        assert carrier.read(1) == 2.5 and carrier.size == 2 and carrier.dtype is cv.float64
        with pytest.raises(IndexError, match=r"read on StorageOnly: index 2 out of range"):
            carrier.read(2)
        carrier.release()
        with pytest.raises(RuntimeError, match="read on StorageOnly: the carrier was released"):
            carrier.read(0)

    def test_unknown_name_not_implemented(self) -> None:
        """A name with no central definition is refused with NotImplementedError."""
        with pytest.raises(NotImplementedError) as info:
            vendor([1.0]).carrier.dispatch_op("frobnicate")
        assert str(info.value) == (
            "frobnicate on Vendor: no central operation definition has this name"
        )

    def test_unsupported_dtype_refused_at_allocate(self) -> None:
        """The storage provider's dtype support is checked before allocate."""
        with pytest.raises(TypeError) as info:
            StorageOnly.allocate(1, cv.int8)
        assert str(info.value) == (
            "allocate on StorageOnly: the storage provider does not store int8; choose another "
            "dtype or carrier"
        )


class TestCapabilityGate:
    """The gate is derived from kernel patterns and runs before any provider work."""

    def test_capabilities_derived_from_patterns(self) -> None:
        """The advertised plans are exactly the patterns' plans."""
        caps = vendor([1.0]).carrier.operation_capabilities()
        assert caps.names == frozenset({"add", "mul"})
        assert len(caps) == len(_plans("add")) + len(_plans("mul", True))
        assert cv.definition_capabilities(Vendor) is caps

    def test_unadvertised_plan_refused_before_allocation(self) -> None:
        """An int64 add raises UnsupportedOperationPlan before the kernel or any allocation."""
        x = cv.tensor([1, 2], cv.int64, carrier=Vendor)
        before = len(STORAGE.released)
        with pytest.raises(cv.UnsupportedOperationPlan) as info:
            x.carrier.dispatch_op("add").forward(x, x)
        assert info.value.operation == "add" and info.value.carrier is Vendor
        assert "the carrier implements add but not this plan" in str(info.value)
        assert ENTRIES == [] and len(STORAGE.released) == before

    def test_mixed_carriers_refused_at_binding(self) -> None:
        """Mixed carriers are refused at binding with TypeError naming both classes."""
        x = vendor([1.0])
        y = cv.tensor([1.0], cv.float32, carrier=StorageOnly)
        with pytest.raises(TypeError, match="operand other lives on StorageOnly"):
            x.carrier.dispatch_op("add").forward(x, y)
        assert ENTRIES == []


def _liar(name: str, make: Any, plans: list[cv.OperationPlan] | None = None) -> type[cv.Carrier]:
    """A fresh definition-backed class whose only kernel returns ``make(ctx)``."""

    def kernel(ctx: cv.KernelExecutionInterface) -> Any:
        ENTRIES.append("liar")
        return make(ctx)

    cls = type("Liar", (cv.Carrier,), {})
    pattern = cv.KernelPattern(operation=name, kernel=kernel, plans=plans or ())
    cv.register_carrier_definition(
        cls, cv.CarrierDefinition(storage=STORAGE, kernels=cv.KernelProvider([pattern]))
    )
    return cls


def _fresh(ctx: cv.KernelExecutionInterface, dtype: cv.DType, shape: tuple[int, ...]) -> Any:
    carrier = type(ctx.carrier).allocate(int(np.prod(shape)), dtype)
    return cv.Tensor(carrier, cv.Layout(shape))


_LIES = {
    "not a result": (
        lambda ctx: [ctx.allocate_result(0)],
        "it returned list, not a ProviderResult or a Tensor",
    ),
    "count": (
        lambda ctx: cv.ProviderResult((ctx.allocate_result(0), ctx.allocate_result(0))),
        "it returned 2 result(s), the invocation declares 1",
    ),
    "dtype": (
        lambda ctx: cv.ProviderResult(_fresh(ctx, cv.float64, (2,))),
        "result 0 has dtype float64, expected float32",
    ),
    "shape": (
        lambda ctx: cv.ProviderResult(_fresh(ctx, cv.float32, (1, 2))),
        "result 0 has shape (1, 2), expected (2,)",
    ),
    "layout": (
        lambda ctx: cv.ProviderResult(
            cv.Tensor(type(ctx.carrier).allocate(4, cv.float32), cv.Layout((2,), (2,)))
        ),
        "result 0 has layout Layout(shape=(2,), strides=(2,), offset=0), expected "
        "Layout(shape=(2,), strides=(1,), offset=0)",
    ),
    "carrier class": (
        lambda ctx: cv.ProviderResult(cv.tensor([1.0, 2.0], cv.float32, carrier=StorageOnly)),
        "result 0 lives on StorageOnly, expected Liar",
    ),
    "aliasing": (
        lambda ctx: cv.ProviderResult(ctx.operands[0]),
        "result 0 aliases an operand or another result; it must be fresh",
    ),
    # A kernel may return its one result without the wrapper: checked all the same.
    "bare dtype": (
        lambda ctx: _fresh(ctx, cv.float64, (2,)),
        "result 0 has dtype float64, expected float32",
    ),
    "bare shape": (
        lambda ctx: ctx.allocate_result(0).reshape((1, 2)),
        "result 0 has shape (1, 2), expected (2,)",
    ),
    "bare layout": (
        lambda ctx: cv.Tensor(type(ctx.carrier).allocate(4, cv.float32), cv.Layout((2,), (2,))),
        "result 0 has layout Layout(shape=(2,), strides=(2,), offset=0), expected "
        "Layout(shape=(2,), strides=(1,), offset=0)",
    ),
    "bare carrier class": (
        lambda ctx: cv.tensor([1.0, 2.0], cv.float32, carrier=StorageOnly),
        "result 0 lives on StorageOnly, expected Liar",
    ),
    "bare aliasing": (
        lambda ctx: ctx.operands[0],
        "result 0 aliases an operand or another result; it must be fresh",
    ),
}


class TestProviderContract:
    """A result contradicting the invocation raises ProviderContractError and publishes nothing."""

    @pytest.mark.parametrize("lie", sorted(_LIES))
    def test_lying_provider_raises_contract_error(self, lie: str) -> None:
        """Count, dtype, shape, layout, carrier class and aliasing are all checked."""
        make, reason = _LIES[lie]
        cls = _liar("relu", make, _plans("relu"))
        x = cv.tensor([1.0, -2.0], cv.float32, carrier=cls)
        x.requires_grad = True
        released = len(STORAGE.released)
        op = x.carrier.dispatch_op("relu")
        with pytest.raises(cv.ProviderContractError) as info:
            op.forward(x)
        error = info.value
        assert isinstance(error, RuntimeError)
        assert (error.operation, error.carrier) == ("relu", cls)
        assert str(error) == (
            f"relu on Liar: the provider broke its contract: {reason}; nothing was published"
        )
        assert ENTRIES == ["liar"]
        # Nothing published: the input is untouched, and results the framework allocated for
        # the kernel were released.
        np.testing.assert_array_equal(x.numpy(), [1.0, -2.0])
        assert x.autograd_ctx is None
        if lie in ("not a result", "count", "bare shape"):
            assert len(STORAGE.released) > released

    def test_bare_result_is_published(self) -> None:
        """A kernel's one result returned itself (no ProviderResult) is checked and published."""
        cls = _liar("relu", lambda ctx: ctx.allocate_result(0), _plans("relu"))
        x = cv.tensor([1.0, -2.0], cv.float32, carrier=cls)
        out = cv.relu(x)
        assert type(out.carrier) is cls and out.shape == (2,) and out.dtype is cv.float32
        assert out.carrier is not x.carrier

    def test_alias_result_must_alias_declared_operand(self) -> None:
        """A view definition's result must share the operand's carrier."""
        cls = _liar("unsqueeze", lambda ctx: cv.ProviderResult(_fresh(ctx, cv.float32, (1, 2))))
        x = cv.tensor([1.0, 2.0], cv.float32, carrier=cls)
        with pytest.raises(cv.ProviderContractError, match="result 0 has layout"):
            cv.unsqueeze(x, axes=0)

    def test_honest_alias_result_is_published(self) -> None:
        """A view returns the declared alias of its operand."""
        cls = _liar("unsqueeze", lambda ctx: cv.ProviderResult(ctx.alias_result(0)))
        x = cv.tensor([1.0, 2.0], cv.float32, carrier=cls)
        out = cv.unsqueeze(x, axes=0)
        assert out.carrier is x.carrier and out.shape == (1, 2)

    def test_completion_is_awaited_before_publishing(self) -> None:
        """A provider's completion is waited for before the result is validated and returned."""
        calls: list[str] = []

        def make(ctx: cv.KernelExecutionInterface) -> cv.ProviderResult:
            completion = cv.ProviderCompletion(lambda: False, lambda: calls.append("wait"))
            return cv.ProviderResult(ctx.allocate_result(0), completion=completion)

        cls = _liar("relu", make, _plans("relu"))
        cv.relu(cv.tensor([1.0], cv.float32, carrier=cls))
        assert calls == ["wait"]


class TestGradients:
    """Gradients come from the central VJP, never from a provider."""

    def test_mul_gradient_uses_central_vjp(self) -> None:
        """d(x*y)/dx = y through gradients.vjp on the definition-backed carrier."""
        x, y = vendor([1.0, 2.0]), vendor([3.0, 4.0])
        x.requires_grad = y.requires_grad = True
        out = cv.mul(x, y)
        assert isinstance(out.autograd_ctx, DefinitionOperation)
        out.backward(vendor([1.0, 1.0]))
        assert x.grad is not None and y.grad is not None
        np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])
        np.testing.assert_array_equal(y.grad.numpy(), [1.0, 2.0])
        assert type(x.grad.carrier) is Vendor

    def test_mutating_saved_operand_is_detected(self) -> None:
        """A saved operand written after forward fails backward with RuntimeError."""
        x, y = vendor([1.0, 2.0]), vendor([3.0, 4.0])
        x.requires_grad = True
        out = cv.mul(x, y)
        y.carrier.write(0, 9.0)
        with pytest.raises(RuntimeError, match="modified in place after forward"):
            out.backward(vendor([1.0, 1.0]))

    def test_add_checks_saved_operands_like_the_definition_free_path(self) -> None:
        """Every tensor operand of a differentiable name is version-checked, as Generic does."""
        x, y = vendor([1.0, 2.0]), vendor([3.0, 4.0])
        x.requires_grad = True
        out = cv.add(x, y)
        y.carrier.write(0, 9.0)
        with pytest.raises(RuntimeError, match="add on Vendor: a tensor saved for backward"):
            out.backward(vendor([1.0, 1.0]))
        assert x.grad is None


class TestDefineOperation:
    """define_operation: namespaced names, reserved namespace, duplicates."""

    @pytest.mark.parametrize("name", ["twice", "Testing.twice", "testing.", "testing..x"])
    def test_unnamespaced_name_refused(self, name: str) -> None:
        with pytest.raises(ValueError) as info:
            cv.define_operation(name, roles=("input",), resolve=_resolve_twice)
        assert str(info.value) == (
            f"define_operation: {name!r} is not a namespaced name; custom operations are named "
            f"'namespace.operation' in lower-case identifiers, e.g. 'acme.scale'"
        )

    def test_reserved_namespace_refused(self) -> None:
        with pytest.raises(ValueError) as info:
            cv.define_operation("conveyor.add2", roles=("input",), resolve=_resolve_twice)
        assert str(info.value) == (
            "define_operation: 'conveyor.add2' uses the reserved namespace 'conveyor'; use your "
            "distribution's name"
        )

    def test_duplicate_refused(self) -> None:
        with pytest.raises(ValueError) as info:
            cv.define_operation("testing.twice", roles=("input",), resolve=_resolve_twice)
        assert str(info.value) == (
            "define_operation: 'testing.twice' is already defined; operation names are defined "
            "exactly once"
        )

    def test_non_callable_resolve_refused(self) -> None:
        with pytest.raises(TypeError, match="resolve must be callable"):
            cv.define_operation("testing.bad", roles=("input",), resolve=None)  # type: ignore[arg-type]  # the error under test

    def test_central_definitions_exist(self) -> None:
        """The issue's central names, plus what their VJPs need, have definitions."""
        for name in ("add", "mul", "elementwise_mul", "relu", "reduce_sum", "matmul"):
            definition = cv.operation_definition(name)
            assert definition is not None and definition.differentiable
        assert cv.operation_definition("lt").vjp is cv.NON_DIFFERENTIABLE  # type: ignore[union-attr]  # defined


class TestRegistration:
    """register_carrier_definition and register_kernel_pack: exact class, once, before use."""

    def test_second_registration_refused(self) -> None:
        with pytest.raises(ValueError) as info:
            cv.register_carrier_definition(Vendor, cv.CarrierDefinition(storage=STORAGE))
        assert str(info.value) == (
            "register_carrier_definition: Vendor has already a definition; register exactly "
            "once, before the class is first used"
        )

    def test_subclass_inherits_no_definition(self) -> None:
        """A subclass of a definition-backed class is definition-free until it registers."""

        class Child(Vendor):
            pass

        with pytest.raises(NotImplementedError) as info:
            Child.allocate(1, cv.float32)
        assert str(info.value) == (
            "Child does not implement the storage hook _allocate: its base Vendor is "
            "definition-backed, but definitions are not inherited; register a "
            "CarrierDefinition for Child"
        )
        assert carrier_definition(Child) is None

    def test_kernel_pack_before_first_use_counts(self) -> None:
        """A pack registered before the first observation adds its patterns."""
        cls = type("Packed", (cv.Carrier,), {})
        cv.register_carrier_definition(
            cls, cv.CarrierDefinition(storage=STORAGE, kernels=cv.KernelProvider([]))
        )
        pattern = cv.KernelPattern(operation="testing.twice", kernel=_twice)
        cv.register_kernel_pack(cv.KernelPack(name="extra", carrier=cls, patterns=[pattern]))
        x = cv.tensor([2.0], cv.float32, carrier=cls)
        np.testing.assert_array_equal(TWICE(x).numpy(), [4.0])
        with pytest.raises(ValueError) as info:
            cv.register_kernel_pack(cv.KernelPack(name="late", carrier=cls, patterns=[]))
        assert str(info.value) == (
            "register_kernel_pack 'late': Packed is sealed (it was already used); register "
            "kernel packs before the carrier's first use"
        )

    def test_kernel_pack_for_definition_free_class_refused(self) -> None:
        cls = type("Plain", (cv.Carrier,), {})
        with pytest.raises(ValueError, match="Plain is not definition-backed"):
            cv.register_kernel_pack(cv.KernelPack(name="p", carrier=cls, patterns=[]))

    def test_planned_pattern_without_plans_refused_at_seal(self) -> None:
        cls = _liar("relu", lambda ctx: None)
        with pytest.raises(ValueError, match="must list the exact plans it executes"):
            cls.allocate(1, cv.float32)


class TestComposite:
    """A composite provider is prepared only after the gate, and may decline."""

    def _composite(self, prepare: Any) -> type[cv.Carrier]:
        cls = type("Composite", (cv.Carrier,), {})
        provider = cv.CompositeProvider(
            capabilities=_plans("relu"), result_carriers=(Vendor,), prepare=prepare
        )
        cv.register_carrier_definition(
            cls, cv.CarrierDefinition(storage=STORAGE, composite=provider)
        )
        return cls

    def test_composite_executes_into_result_carrier(self) -> None:
        calls: list[cv.ResolvedInvocation] = []

        def prepare(carrier: cv.Carrier, invocation: cv.ResolvedInvocation) -> Any:
            calls.append(invocation)
            values = np.maximum(invocation.operands[0].numpy(), 0)
            return cv.PreparedComposite(lambda: cv.ProviderResult(vendor(values)))

        cls = self._composite(prepare)
        out = cv.relu(cv.tensor([-1.0, 2.0], cv.float32, carrier=cls))
        assert type(out.carrier) is Vendor and len(calls) == 1
        np.testing.assert_array_equal(out.numpy(), [0.0, 2.0])

    def test_gate_runs_before_prepare(self) -> None:
        calls: list[object] = []
        cls = self._composite(lambda carrier, invocation: calls.append(invocation))
        x = cv.tensor([1], cv.int64, carrier=cls)
        with pytest.raises(cv.UnsupportedOperationPlan):
            cv.relu(x)
        assert calls == []

    def test_unsupported_is_not_implemented(self) -> None:
        cls = self._composite(lambda carrier, invocation: cv.Unsupported("tiles are evicted"))
        with pytest.raises(NotImplementedError) as info:
            cv.relu(cv.tensor([1.0], cv.float32, carrier=cls))
        assert str(info.value) == "relu on Composite: tiles are evicted"


class TestFacets:
    """carrier.facet(T) and require_facet(T)."""

    def test_facet_offered(self) -> None:
        carrier = vendor([1.0]).carrier
        found = carrier.facet(Facet)
        assert isinstance(found, Facet) and found.hello() == "hello from Vendor"
        assert isinstance(carrier.require_facet(cv.CarrierFacet), Facet)

    def test_facet_missing(self) -> None:
        carrier = vendor([1.0]).carrier
        assert carrier.facet(OtherFacet) is None
        with pytest.raises(NotImplementedError) as info:
            carrier.require_facet(OtherFacet)
        assert str(info.value) == (
            "OtherFacet on Vendor: the carrier does not offer this facet; use a carrier whose "
            "CarrierDefinition lists it"
        )


class TestStorageIdentity:
    """The framework checks the handle belongs to a live instance before the provider runs."""

    def test_instance_without_storage_refused(self) -> None:
        with pytest.raises(RuntimeError, match="this instance has no storage"):
            Vendor().read(0)

    def test_storage_handle_is_own(self) -> None:
        x = vendor([5.0])
        assert cv.storage_handle(x.carrier)[0] == 5.0
        x.carrier.release()
        with pytest.raises(
            RuntimeError, match="storage_handle on Vendor: the carrier was released"
        ):
            cv.storage_handle(x.carrier)


PUBLIC = [
    "BoundCall",
    "CarrierDefinition",
    "CarrierFacet",
    "CompositeProvider",
    "KernelExecutionInterface",
    "KernelPack",
    "KernelPattern",
    "KernelProvider",
    "NON_DIFFERENTIABLE",
    "OperationDefinition",
    "PreparedComposite",
    "ProviderCompletion",
    "ProviderContractError",
    "ProviderResult",
    "ResolvedInvocation",
    "ResultSpec",
    "StorageProvider",
    "TransferProvider",
    "TransferRoute",
    "Unsupported",
    "adopt_storage",
    "define_operation",
    "definition_capabilities",
    "operation_definition",
    "register_carrier_definition",
    "register_kernel_pack",
    "storage_handle",
]


@pytest.mark.parametrize("name", PUBLIC)
def test_extension_api_is_public(name: str) -> None:
    """Each extension API name is exported in conveyor.__all__."""
    assert name in cv.__all__ and hasattr(cv, name)
