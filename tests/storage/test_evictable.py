"""Evictable and EvictableOperation: the two Evictable requirements of the dispatch spec, plus
evict / promote (idempotent, failure-atomic, bit-exact) and the capability snapshot."""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.types.dtypes import CONCRETE_DTYPES
from conveyor_generic import CPU
from conveyor_storage import (
    BlockDevice,
    BlockDeviceCarrier,
    Evictable,
    EvictableOperation,
    FileBacked,
)
from tests.core.carriers import ArrayCarrier, from_array
from tests.storage.carriers import (
    FlakySecondary,
    NarrowSecondary,
    ProbePrimary,
    ScarcePrimary,
)

PRIMARIES: list[type[cv.Carrier]] = [ArrayCarrier, CPU]

Make = Callable[..., cv.Tensor]


def _fill(carrier: cv.Carrier, values: np.ndarray) -> cv.Carrier:
    if values.size:
        carrier.import_span(cv.Layout((values.size,)), values.reshape(-1))
    return carrier


@pytest.fixture(params=PRIMARIES, ids=lambda c: c.__name__)
def primary(request: pytest.FixtureRequest) -> type[cv.Carrier]:
    """The primary class under test: the test-only ArrayCarrier and the shipped CPU."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def make(tmp_path: Path, primary: type[cv.Carrier]) -> Make:
    """An Evictable tensor holding ``values`` over ``primary`` and a FileBacked secondary."""

    def build(
        values: Any,
        dtype: cv.DType = cv.float32,
        *,
        secondary: Callable[[int, cv.DType], cv.Carrier] | None = None,
        primary_class: type[cv.Carrier] | None = None,
        requires_grad: bool = False,
    ) -> cv.Tensor:
        array = np.asarray(values, dtype.numpy)
        first = _fill((primary_class or primary).allocate(array.size, dtype), array)
        second = (secondary or (lambda n, d: FileBacked.allocate(n, d, directory=tmp_path)))(
            array.size, dtype
        )
        t = cv.Tensor(Evictable(first, second), cv.Layout(array.shape))
        if requires_grad:
            t.requires_grad = True
        return t

    return build


def _resident_mib() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * 4096 >> 20


def _counts() -> tuple[int, int]:
    return ArrayCarrier.allocations, ArrayCarrier.kernel_entries


class TestConstruction:
    """Evictable(primary, secondary, *, durable=False)."""

    def test_tiers_are_validated(self, tmp_path: Path) -> None:
        """Non-carriers, dtype or size mismatches, one object twice and released tiers refused."""
        p = ArrayCarrier.allocate(4, cv.float32)
        with pytest.raises(TypeError, match="secondary must be a Carrier instance"):
            Evictable(p, np.zeros(4))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="different dtypes"):
            Evictable(p, FileBacked.allocate(4, cv.float64, directory=tmp_path))
        with pytest.raises(ValueError, match="different sizes"):
            Evictable(p, FileBacked.allocate(5, cv.float32, directory=tmp_path))
        with pytest.raises(ValueError, match="two different carriers"):
            Evictable(p, p)
        gone = ArrayCarrier.allocate(4, cv.float32)
        gone.release()
        with pytest.raises(ValueError, match="already released"):
            Evictable(p, gone)

    def test_starts_promoted_with_the_primary_data(self, make: Make) -> None:
        """A new hierarchy is promoted and reads its primary's values."""
        t = make([[1, 2], [3, 4]])
        assert not t.carrier.is_evicted()
        assert t.numpy().tolist() == [[1, 2], [3, 4]]

    def test_closed_and_final(self) -> None:
        """Evictable is a closed shipped carrier."""
        with pytest.raises(TypeError, match="cannot subclass Evictable: it is a closed carrier"):
            type("Mine", (Evictable,), {})
        assert getattr(Evictable, "__final__", False)
        assert issubclass(Evictable, cv.DependentCarrier)


class TestEvictPromote:
    """evict() / promote(): idempotent, memory-freeing, version-neutral."""

    def test_round_trip_keeps_values_and_version(self, make: Make) -> None:
        """Evicting frees the primary; promoting restores the same values and version."""
        t = make(np.arange(6.0).reshape(2, 3))
        ev = t.carrier
        old_primary, version = ev.primary, t.version
        ev.evict()
        assert ev.is_evicted() and ev.primary is None and old_primary.released
        assert t.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]  # readable from the secondary
        ev.promote()
        assert not ev.is_evicted() and ev.primary is not old_primary
        assert t.numpy().tolist() == [[0, 1, 2], [3, 4, 5]] and t.version == version

    def test_evict_and_promote_are_idempotent(self, make: Make) -> None:
        """A second evict or promote does nothing."""
        ev = make([1.0, 2.0]).carrier
        ev.evict()
        secondary = ev.secondary
        ev.evict()
        assert ev.secondary is secondary and ev.is_evicted()
        ev.promote()
        primary = ev.primary
        ev.promote()
        assert ev.primary is primary

    def test_writes_while_evicted_require_promotion(self, make: Make) -> None:
        """Storage writes to an evicted hierarchy raise RuntimeError and change nothing."""
        t = make([1.0, 2.0])
        t.carrier.evict()
        with pytest.raises(RuntimeError, match="write on Evictable: the data is evicted"):
            t.carrier.write(0, 5.0)
        with pytest.raises(RuntimeError, match="import_span on Evictable: the data is evicted"):
            t.carrier.import_span(cv.Layout((2,)), np.zeros(2))
        assert t.numpy().tolist() == [1.0, 2.0]

    def test_first_eviction_writes_into_the_given_secondary(self, make: Make) -> None:
        """The constructor's secondary holds no committed data yet, so it is written in place."""
        t = make([1.0, 2.0, 3.0])
        given = t.carrier.secondary
        t.carrier.evict()
        assert t.carrier.secondary is given
        assert np.fromfile(given.path, "<f4").tolist() == [1.0, 2.0, 3.0]

    def test_files_being_written_are_hidden_partial_files_until_commit(
        self, make: Make, tmp_path: Path
    ) -> None:
        """In place or into a fresh sibling, the file is .partial during the copy, final after."""
        seen: list[list[str]] = []

        class Watched(ArrayCarrier):
            def _export(self, layout: cv.Layout) -> np.ndarray[Any, Any]:
                seen.append(sorted(p.name for p in tmp_path.iterdir()))
                return super()._export(layout)

        t = make([1.0, 2.0], primary_class=Watched)
        ev = t.carrier
        final = Path(ev.secondary.path)
        ev.evict()  # in place: the given secondary is renamed while it is overwritten
        assert seen[-1] == [f".{final.name}.partial"]
        assert [p.name for p in tmp_path.iterdir()] == [final.name]
        assert ev.secondary.path == str(final)
        ev.promote()
        t[0] = 5.0
        ev.evict()  # copy-on-write: the fresh sibling is hidden until it replaces the old file
        hidden, old = seen[-1]  # sorted: the hidden name first
        assert hidden.startswith(".conveyor-") and hidden.endswith(".partial")
        assert old == final.name
        assert not any(p.name.endswith(".partial") for p in tmp_path.iterdir())
        assert np.fromfile(ev.secondary.path, "<f4").tolist() == [5.0, 2.0]

    def test_unchanged_data_is_not_written_again(self, make: Make) -> None:
        """Promote then evict with no write in between reuses the committed copy."""
        t = make([1.0, 2.0])
        ev = t.carrier
        ev.evict()
        ev.promote()
        secondary, written = ev.secondary, ev.secondary.version
        ev.evict()
        assert ev.secondary is secondary and secondary.version == written

    def test_changed_data_goes_to_a_fresh_sibling(self, make: Make, tmp_path: Path) -> None:
        """After a write, eviction writes a new secondary and only then drops the old one."""
        t = make([1.0, 2.0])
        ev = t.carrier
        ev.evict()
        ev.promote()
        old = ev.secondary
        t[0] = 9.0
        ev.evict()
        assert ev.secondary is not old and old.released and not Path(old.path).exists()
        assert Path(ev.secondary.path).parent == tmp_path
        assert np.fromfile(ev.secondary.path, "<f4").tolist() == [9.0, 2.0]
        ev.promote()
        assert t.numpy().tolist() == [9.0, 2.0]

    def test_writes_into_the_primary_change_the_version(self, make: Make) -> None:
        """A write straight into the current primary is still a write to the hierarchy."""
        t = make([1.0, 2.0])
        before = t.version
        t.carrier.primary.write(0, 4.0)
        assert t.version != before

    def test_release_frees_both_tiers_and_their_files(self, make: Make) -> None:
        """release() releases primary and secondary; the secondary's file is deleted."""
        ev = make([1.0]).carrier
        ev.evict()
        path = Path(ev.secondary.path)
        ev.release()
        assert not path.exists()
        with pytest.raises(RuntimeError, match="evict on Evictable: the carrier was released"):
            ev.evict()

    def test_garbage_collected_hierarchy_deletes_its_files(self, make: Make) -> None:
        """A hierarchy nobody references releases its tiers."""
        ev = make([1.0, 2.0]).carrier
        ev.evict()
        path = Path(ev.secondary.path)
        del ev
        gc.collect()
        assert not path.exists()

    def test_garbage_collected_result_deletes_its_files(self, make: Make) -> None:
        """A result hierarchy evicted once also cleans up its secondary when collected."""
        t = make([1.0, 2.0])
        out = cv.mul(t, t)
        out.carrier.evict()
        path = Path(out.carrier.secondary.path)
        assert path.exists()
        del out
        gc.collect()
        assert not path.exists()

    def test_evicting_a_saved_input_frees_the_primary_memory(self, tmp_path: Path) -> None:
        """The primary's memory goes at eviction even while a graph still refers to it."""
        n = 64 << 20  # 256 MiB of float32
        primary = _fill(CPU.allocate(n, cv.float32), np.ones(n, np.float32))
        ev = Evictable(primary, FileBacked.allocate(n, cv.float32, directory=tmp_path))
        del primary
        x = cv.Tensor(ev, requires_grad=True)
        y = cv.neg(x)
        y.carrier.evict()
        gc.collect()
        before = _resident_mib()
        ev.evict()
        gc.collect()
        assert before - _resident_mib() > 200

    @pytest.mark.parametrize("dtype", CONCRETE_DTYPES, ids=lambda d: d.name)
    @pytest.mark.parametrize("tier", ["file", "block"])
    def test_every_dtype_round_trips_bit_exactly(
        self, make: Make, tmp_path: Path, dtype: cv.DType, tier: str
    ) -> None:
        """Every stored bit survives evict / promote, on a file and on a block device."""
        rng = np.random.default_rng(3)
        raw = rng.integers(0, 256, 37 * dtype.itemsize, dtype=np.uint8)
        values = raw.view(dtype.numpy) if dtype is not cv.bool else raw.astype(bool)
        device = BlockDevice.create_image(tmp_path / "d.img", 1 << 16, block_size=512)
        second = (lambda n, d: device.allocate(n, d)) if tier == "block" else None
        t = make(values, dtype, secondary=second)
        t.carrier.evict()
        assert t.numpy().tobytes() == values.tobytes()
        t.carrier.promote()
        assert t.numpy().tobytes() == values.tobytes()
        device.close()


class TestFailureAtomicity:
    """A failed evict or promote publishes nothing: data readable and unchanged."""

    def test_secondary_failing_half_way_leaves_the_data_promoted(self, make: Make) -> None:
        """A write error half-way through the first eviction changes nothing visible."""
        t = make(np.arange(8.0), secondary=lambda n, d: FlakySecondary.allocate(n, d))
        FlakySecondary.failing = True
        try:
            with pytest.raises(OSError, match="half-way"):
                t.carrier.evict()
            assert not t.carrier.is_evicted()
            assert t.numpy().tolist() == list(range(8))
            FlakySecondary.failing = False
            t.carrier.evict()  # the in-place secondary is rewritten completely later
            t.carrier.promote()
            assert t.numpy().tolist() == list(range(8))
        finally:
            FlakySecondary.failing = True

    def test_failed_copy_on_write_keeps_the_old_secondary(self, make: Make) -> None:
        """A failing fresh sibling is released; the old committed copy stays in place."""
        FlakySecondary.failing = False
        t = make(np.arange(4.0), secondary=lambda n, d: FlakySecondary.allocate(n, d))
        ev = t.carrier
        ev.evict()
        ev.promote()
        old = ev.secondary
        t[0] = 42.0
        FlakySecondary.failing = True
        with pytest.raises(OSError):
            ev.evict()
        assert ev.secondary is old and not old.released and not ev.is_evicted()
        assert t.numpy().tolist() == [42.0, 1.0, 2.0, 3.0]
        assert old.array.tolist() == [0.0, 1.0, 2.0, 3.0]

    def test_full_device_refuses_eviction_without_changes(self, make: Make, tmp_path: Path) -> None:
        """A small image with no room for the copy: MemoryError, data promoted and unchanged."""
        with BlockDevice.create_image(tmp_path / "small.img", 8192, block_size=4096) as device:
            t = make(np.arange(1024.0), secondary=lambda n, d: device.allocate(n, d))
            ev = t.carrier
            ev.evict()
            ev.promote()
            t[0] = -1.0  # the next eviction needs a second extent; the device has one left
            filler = device.allocate(1, cv.int8)
            with pytest.raises(MemoryError, match="no free extent"):
                ev.evict()
            assert not ev.is_evicted() and t.numpy()[:2].tolist() == [-1.0, 1.0]
            filler.release()
            ev.evict()
            assert t.numpy()[:2].tolist() == [-1.0, 1.0]

    def test_failed_promotion_keeps_the_data_evicted(self, make: Make) -> None:
        """When the new primary cannot be allocated the hierarchy stays evicted and intact."""
        t = make([5.0, 6.0], primary_class=ScarcePrimary)
        t.carrier.evict()
        ScarcePrimary.exhausted = True
        try:
            with pytest.raises(MemoryError, match="simulated"):
                t.carrier.promote()
        finally:
            ScarcePrimary.exhausted = False
        assert t.carrier.is_evicted() and t.numpy().tolist() == [5.0, 6.0]
        t.carrier.promote()
        assert t.numpy().tolist() == [5.0, 6.0]


class TestEvictableLowering:
    """Requirement: Evictable lowering requires compatible promoted hierarchies."""

    def test_dispatch_requires_a_promoted_primary(self, make: Make) -> None:
        """Dispatch on an evicted hierarchy raises RuntimeError requiring promotion."""
        ev = make([1.0]).carrier
        ev.evict()
        with pytest.raises(
            RuntimeError, match="add on Evictable: the data is evicted; call promote"
        ):
            ev.dispatch_op("add")

    def test_dispatch_returns_a_fresh_adapter_owning_a_fresh_primary_operation(
        self, make: Make, primary: type[cv.Carrier]
    ) -> None:
        """Each dispatch is a new EvictableOperation around a new primary operation."""
        ev = make([1.0]).carrier
        first, second = ev.dispatch_op("add"), ev.dispatch_op("add")
        assert type(first) is EvictableOperation and first is not second
        assert first.primary_operation is not second.primary_operation
        assert first._dispatch_carrier_class is Evictable and first._operation_name == "add"
        inner = first.primary_operation
        assert inner._dispatch_carrier_class is primary and inner._operation_name == "add"

    def test_adapter_construction(self) -> None:
        """EvictableOperation(op) builds the adapter; another value is a TypeError."""
        inner = ArrayCarrier.allocate(1, cv.float32).dispatch_op("add")
        assert EvictableOperation(inner).primary_operation is inner
        with pytest.raises(TypeError, match="primary_operation must be the Operation"):
            EvictableOperation("add")  # type: ignore[arg-type]

    def test_forward_is_single_use(self, make: Make) -> None:
        """A second forward raises RuntimeError."""
        a = make([1.0, 2.0])
        op = a.carrier.dispatch_op("neg")
        op.forward(a)
        with pytest.raises(RuntimeError, match="forward was already called"):
            op.forward(a)

    def test_lower_a_supported_outer_plan(self, make: Make, primary: type[cv.Carrier]) -> None:
        """Scenario: the adapter lowers once and restores a result of the same hierarchy kinds."""
        a, b = make([1.0, 2.0]), make([10.0, 20.0])
        out = cv.add(a, b)
        assert type(out.carrier) is Evictable
        assert out.carrier.tier_classes == (primary, FileBacked)
        assert out.numpy().tolist() == [11.0, 22.0]
        assert out.carrier.secondary is None  # empty until its first eviction
        assert out.carrier not in (a.carrier, b.carrier)
        out.carrier.evict()
        assert Path(out.carrier.secondary.path).parent == Path(a.carrier.secondary.path).parent

    def test_execute_through_a_composed_backend(
        self, make: Make, primary: type[cv.Carrier]
    ) -> None:
        """Scenario: the adapter is the only visible node; the nested operation ran lowered."""
        x = make([1.0, 2.0], requires_grad=True)
        with cv.profile() as profiler:
            y = cv.exp(x)
        node = y.grad_fn
        assert type(node) is EvictableOperation and node._dispatch_carrier_class is Evictable
        assert node._grad_inputs == (x,)  # the graph reaches x directly, not a primary tensor
        inner = node.primary_operation
        assert inner._forwarded and inner._dispatch_carrier_class is primary
        assert [(r.operation, r.carrier) for r in profiler.records] == [
            ("exp", primary),
            ("exp", Evictable),
        ]

    def test_array_primary_executes_exactly_once(self, make: Make) -> None:
        """One kernel entry on the primary per outer operation."""
        a = make([1.0, 2.0], primary_class=ArrayCarrier)
        before = _counts()[1]
        cv.mul(a, a)
        assert ArrayCarrier.kernel_entries == before + 1

    def test_view_result_reuses_the_same_evictable(self, make: Make) -> None:
        """A representation-preserving result over the same primary is the same Evictable."""
        t = make(np.arange(6.0))
        view = cv.reshape(t, shape=(2, 3))
        assert view.carrier is t.carrier
        assert view[1].carrier is t.carrier and view[1].numpy().tolist() == [3.0, 4.0, 5.0]
        t.carrier.evict()
        t.carrier.promote()
        assert view.numpy().tolist() == [[0, 1, 2], [3, 4, 5]]

    def test_refuse_mismatched_hierarchies(self, make: Make, tmp_path: Path) -> None:
        """Scenario: different exact primary or secondary classes fail before nested work."""
        a = make([1.0, 2.0], primary_class=ArrayCarrier)
        with BlockDevice.create_image(tmp_path / "d.img", 1 << 16) as device:
            b = make([1.0, 2.0], primary_class=ArrayCarrier, secondary=device.allocate)
            c = make([1.0, 2.0], primary_class=ProbePrimary)
            before = _counts()
            for other in (b, c):
                with pytest.raises(TypeError, match="operands belong to different hierarchies"):
                    a.carrier.dispatch_op("add").forward(a, other)
            assert _counts() == before

    def test_wrong_operand_carrier_is_type_error(self, make: Make) -> None:
        """A Tensor operand not backed by an Evictable is refused before nested work."""
        a = make([1.0, 2.0], primary_class=ArrayCarrier)
        plain = from_array(np.ones(2), cv.float32)
        before = _counts()
        with pytest.raises(
            TypeError, match="must be backed by one Evictable, got one on ArrayCarrier"
        ):
            a.carrier.dispatch_op("add").forward(a, plain)
        assert _counts() == before

    def test_missing_tensor_operand_is_type_error(self, make: Make) -> None:
        """An adapter call with no Tensor operand is refused."""
        ev = make([1.0]).carrier
        opts = cv.OperationExecutionOptions("reshape", shape=(1,))
        with pytest.raises(TypeError, match="expected at least one Tensor operand"):
            ev.dispatch_op("reshape").forward(3.0, options=opts)

    def test_evicted_operand_requires_promotion(self, make: Make) -> None:
        """An evicted operand fails with RuntimeError before nested work."""
        a, b = make([1.0], primary_class=ArrayCarrier), make([2.0], primary_class=ArrayCarrier)
        b.carrier.evict()
        before = _counts()
        with pytest.raises(RuntimeError, match="an operand is evicted; call promote"):
            cv.add(a, b)
        assert _counts() == before

    def test_plan_outside_the_outer_snapshot_is_refused_before_lowering(self) -> None:
        """A plan the primary runs but the secondary cannot store is refused up front."""
        wide = _fill(ArrayCarrier.allocate(2, cv.float64), np.ones(2))
        a = cv.Tensor(Evictable(wide, NarrowSecondary.allocate(2, cv.float64)))
        before = _counts()
        with pytest.raises(cv.UnsupportedOperationPlan, match="add on Evictable") as info:
            cv.add(a, a)
        assert info.value.carrier is Evictable and info.value.operation == "add"
        assert _counts() == before

    def test_name_the_primary_lacks_is_not_implemented(self, make: Make) -> None:
        """A name the primary cannot dispatch: NotImplementedError naming both carriers."""
        a = make([1.0, 2.0], primary_class=ArrayCarrier)
        with pytest.raises(
            NotImplementedError, match="sqrt on Evictable: the primary ArrayCarrier"
        ):
            cv.sqrt(a)

    def test_reject_an_abstract_category_before_lowering(self, make: Make) -> None:
        """Scenario: planning refuses a category dtype with TypeError before nested work."""
        a = make([1.0, 2.0], primary_class=ArrayCarrier)
        abstract = cv.Tensor._wrap(a.carrier, a.layout, cv.floating)
        before = _counts()
        with pytest.raises(TypeError, match="abstract"):
            a.carrier.dispatch_op("add").forward(abstract, abstract)
        assert _counts() == before

    def test_options_for_another_operation_are_refused(self, make: Make) -> None:
        """The adapter validates options like any dispatched operation."""
        a = make(np.ones((2, 2)))
        with pytest.raises(ValueError, match="validated for 'reduce_sum'"):
            a.carrier.dispatch_op("matmul").forward(
                a, a, options=cv.OperationExecutionOptions("reduce_sum")
            )

    def test_snapshot_is_the_storable_part_of_the_primary_plans(self) -> None:
        """The snapshot holds the primary's plans whose outputs both tiers store, once."""
        ev = Evictable(
            ArrayCarrier.allocate(1, cv.float32), NarrowSecondary.allocate(1, cv.float32)
        )
        storable = NarrowSecondary.storable_dtypes
        expected = {c for c in cv.declared_capabilities(ArrayCarrier) if set(c.outputs) <= storable}
        assert set(ev.operation_capabilities()) == expected
        assert 0 < len(expected) < len(cv.declared_capabilities(ArrayCarrier))
        assert ev.operation_capabilities() is ev.operation_capabilities()

    def test_multi_output_results_are_restored(self, make: Make) -> None:
        """Every output of the nested operation becomes an Evictable tensor."""
        a = make(np.array([[3.0, 1.0], [2.0, 5.0]]))
        out = cv.argmax(a, axis=1)
        assert type(out.carrier) is Evictable and out.numpy().tolist() == [0, 1]


class TestEvictableBackward:
    """Requirement: Evictable backward restores outer gradients."""

    def test_backpropagate_through_an_adapter(self, make: Make, primary: type[cv.Carrier]) -> None:
        """Scenario: gradients come back as Evictable hierarchies matching the inputs."""
        x = make([1.0, 2.0, 3.0], requires_grad=True)
        y = make([4.0, 5.0, 6.0], requires_grad=True)
        loss = cv.reduce_sum(cv.mul(x, y))
        for t in (x, y):  # evict and promote between forward and backward: refreshed inputs
            t.carrier.evict()
            t.carrier.promote()
        loss.carrier.evict()  # a result need not be promoted for backward
        loss.backward(make(1.0))
        assert x.grad is not None and y.grad is not None
        assert x.grad.numpy().tolist() == [4.0, 5.0, 6.0]
        assert y.grad.numpy().tolist() == [1.0, 2.0, 3.0]
        for g in (x.grad, y.grad):
            assert type(g.carrier) is Evictable and g.carrier.tier_classes == (primary, FileBacked)

    def test_reject_an_evicted_saved_input(self, make: Make) -> None:
        """Scenario: a saved input still evicted at backward raises RuntimeError."""
        x = make([1.0, 2.0], requires_grad=True)
        y = cv.mul(x, x)
        x.carrier.evict()
        with pytest.raises(RuntimeError, match="saved for backward is evicted; call promote"):
            y.backward(make([1.0, 1.0]))
        x.carrier.promote()
        y.backward(make([1.0, 1.0]))
        assert x.grad.numpy().tolist() == [2.0, 4.0]

    def test_mutated_saved_input_is_detected(self, make: Make) -> None:
        """A write into a saved input after forward fails the outer version check."""
        x = make([1.0, 2.0], requires_grad=True)
        y = cv.exp(x)
        x.detach()[0] = 3.0
        with pytest.raises(RuntimeError, match="modified in place"):
            y.backward(make([1.0, 1.0]))

    def test_write_straight_into_the_primary_is_detected(self, make: Make) -> None:
        """A write that bypasses the hierarchy still changes its version for backward."""
        x = make([1.0, 2.0], requires_grad=True)
        y = cv.exp(x)
        x.carrier.evict()
        x.carrier.promote()
        x.carrier.primary.write(0, 5.0)
        with pytest.raises(RuntimeError, match="modified in place"):
            y.backward(make([1.0, 1.0]))

    def test_gradient_of_another_carrier_is_type_error(self, make: Make, tmp_path: Path) -> None:
        """The gradient must be Evictable over the primary class, or a primary tensor."""
        x = make([1.0, 2.0], requires_grad=True)
        op = x.carrier.dispatch_op("neg")
        op.forward(x)
        stored = cv.Tensor(FileBacked.allocate(2, cv.float32, directory=tmp_path))
        for bad in (stored, np.ones(2), None):
            with pytest.raises(TypeError, match="the gradient must be an Evictable Tensor"):
                op.backward(bad)
        other = make([1.0, 1.0], primary_class=ProbePrimary)
        if type(x.carrier.primary) is not ProbePrimary:
            with pytest.raises(TypeError, match="the gradient must be"):
                op.backward(other)

    def test_primary_backed_gradient_is_accepted(
        self, make: Make, primary: type[cv.Carrier]
    ) -> None:
        """A gradient on the primary class is used as is, and the result is restored."""
        x = make([1.0, 2.0], requires_grad=True)
        op = x.carrier.dispatch_op("neg")
        op.forward(x)
        g = cv.Tensor(_fill(primary.allocate(2, cv.float32), np.array([1.0, 3.0], np.float32)))
        (grad,) = op.backward(g)
        assert type(grad.carrier) is Evictable and grad.numpy().tolist() == [-1.0, -3.0]

    def test_none_gradients_stay_none(self, make: Make) -> None:
        """A None from the nested backward stays None."""
        a = make([1.0], primary_class=ProbePrimary, requires_grad=True)
        b = make([2.0], primary_class=ProbePrimary, requires_grad=True)
        op = a.carrier.dispatch_op("first_none")
        op.forward(a, b)
        g = make([1.0], primary_class=ProbePrimary)
        first, second = op.backward(g)
        assert first is None and second is not None and second.numpy().tolist() == [1.0]

    def test_wrong_result_count_is_value_error(self, make: Make) -> None:
        """The nested backward must return one gradient per Tensor input."""
        a = make([1.0], primary_class=ProbePrimary, requires_grad=True)
        op = a.carrier.dispatch_op("too_many")
        op.forward(a, a)
        with pytest.raises(ValueError, match=r"returned 3 gradient.*for 2 Tensor input"):
            op.backward(make([1.0], primary_class=ProbePrimary))

    @pytest.mark.parametrize("name", ["not_tensor", "foreign"])
    def test_wrong_result_type_is_type_error(self, make: Make, name: str) -> None:
        """Anything but primary Tensors or None from the nested backward is a TypeError."""
        a = make([1.0], primary_class=ProbePrimary, requires_grad=True)
        op = a.carrier.dispatch_op(name)
        op.forward(a, a)
        with pytest.raises(TypeError, match="expected ProbePrimary Tensors or None"):
            op.backward(make([1.0], primary_class=ProbePrimary))

    def test_shared_gradient_storage_gets_separate_hierarchies(self, make: Make) -> None:
        """When the nested backward returns one tensor twice, each hierarchy owns a copy."""
        a = make([1.0], primary_class=ProbePrimary, requires_grad=True)
        b = make([2.0], primary_class=ProbePrimary, requires_grad=True)
        op = a.carrier.dispatch_op("twice")
        op.forward(a, b)
        g = make([5.0], primary_class=ProbePrimary)
        ga, gb = op.backward(g)
        assert ga.carrier is not gb.carrier
        assert ga.carrier.primary is not gb.carrier.primary is not g.carrier.primary
        ga.carrier.evict()
        assert gb.numpy().tolist() == [5.0] and g.numpy().tolist() == [5.0]

    def test_view_backward_through_the_same_hierarchy(self, make: Make) -> None:
        """A view's gradient reaches the base tensor."""
        x = make(np.arange(4.0), requires_grad=True)
        v = cv.reshape(x, shape=(2, 2))
        s = cv.reduce_sum(cv.mul(v, v))
        s.backward(make(1.0))
        assert x.grad.numpy().tolist() == [0.0, 2.0, 4.0, 6.0]


class TestEvictableAllocate:
    """Evictable.allocate(size, dtype, primary="cpu", secondary="file")."""

    def test_allocate_with_explicit_tiers(self) -> None:
        """Tiers by class: a zero-filled primary, an empty secondary allocated at eviction."""
        ev = Evictable.allocate(3, cv.int32, primary=ArrayCarrier, secondary=FileBacked)
        assert ev.tier_classes == (ArrayCarrier, FileBacked) and ev.secondary is None
        assert cv.Tensor(ev).numpy().tolist() == [0, 0, 0]
        ev.evict()
        assert type(ev.secondary) is FileBacked

    def test_bad_tier_and_unknown_argument(self) -> None:
        """Tiers must be classes or names; unknown keywords are refused."""
        with pytest.raises(TypeError, match="primary must be a Carrier class or name"):
            Evictable.allocate(1, cv.float32, primary=3)
        with pytest.raises(TypeError, match="unexpected argument"):
            Evictable.allocate(1, cv.float32, primary=ArrayCarrier, colour="red")

    def test_block_device_secondary_needs_its_device(self) -> None:
        """A block secondary class without a device fails at eviction, changing nothing."""
        ev = Evictable.allocate(1, cv.float32, primary=ArrayCarrier, secondary=BlockDeviceCarrier)
        with pytest.raises(TypeError, match="BlockDevice"):
            ev.evict()
        assert not ev.is_evicted()


def test_pickling_an_evictable_tensor_names_the_wrapper_and_says_move_to_cpu(
    tmp_path: Path,
) -> None:
    """Issue 25 item 14: the refusal names Evictable (not its secondary), and its advice works."""
    import pickle

    values = np.arange(6.0)
    t = cv.Tensor(
        Evictable(
            _fill(CPU.allocate(6, cv.float64), values),
            FileBacked.allocate(6, cv.float64, directory=tmp_path),
        )
    )
    version = t.version
    with pytest.raises(TypeError, match=r"^pickle on Evictable: .*cv\.move\(tensor, 'cpu'\)"):
        pickle.dumps(t)
    assert t.version == version and t.numpy().tolist() == values.tolist()
    assert pickle.loads(pickle.dumps(cv.move(t, "cpu"))).numpy().tolist() == values.tolist()
