"""conveyor.engine.move: routes per exact carrier pair, lowered and differentiable movement.

The core behaviour is tested on test-only carriers with a stub plugin host, so that what the
installed plugins contribute cannot change the outcome; the storage routes are tested with the
real host and the shipped carriers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from conveyor.engine.move import MoveRoute, move, move_route, move_routes, register_move_route
from tests.core.carriers import ArrayCarrier


class _Source(ArrayCarrier):
    """A second test-only carrier class (routes are per exact class)."""


class _Target(ArrayCarrier):
    """A third one, the destination of the registered routes."""


class _Elsewhere(ArrayCarrier):
    """A class no route reaches."""


def _bulk(source: cv.Tensor, destination: type[cv.Carrier], **options: Any) -> cv.Tensor:
    carrier = destination.allocate(source.size, source.dtype, **options)
    carrier.import_span(cv.Layout((source.size,)), source.numpy().reshape(-1))
    return cv.Tensor(carrier, cv.Layout(source.shape))


# The module, not the function ``cv.move`` that shadows its name on the package.
move_module = importlib.import_module("conveyor.engine.move")
register_move_route(source=_Source, destination=_Target, copy=_bulk)
register_move_route(source=_Target, destination=_Source, copy=_bulk)


def _on(cls: type[ArrayCarrier], values: Any, dtype: cv.DType = cv.float32) -> cv.Tensor:
    array = np.asarray(values, dtype.numpy)
    carrier = cls.allocate(array.size, dtype)
    carrier.array[...] = array.reshape(-1)
    return cv.Tensor(carrier, cv.Layout(array.shape))


class _StubHost:
    """Stands in for the plugin host: contributes ``routes`` and resolves ``names``."""

    def __init__(self, routes: tuple[object, ...], names: dict[str, type]) -> None:
        self.routes, self.names = routes, names

    def move_routes(self) -> tuple[object, ...]:
        return self.routes

    def carrier(self, name: str) -> type:
        return self.names[name]


@pytest.fixture
def stub_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Replace the default host ``conveyor.engine.move`` reads with a stub contributing routes."""

    def install(*routes: object, **names: type) -> None:
        monkeypatch.setattr(cv.plugins, "host", lambda: _StubHost(routes, names))

    install()
    yield install
    monkeypatch.setattr(move_module, "_merged", None)


class TestMoveRoute:
    """MoveRoute: a frozen, keyword-only record validated at construction."""

    def test_fields_are_validated(self) -> None:
        """Non-carrier classes and non-callables are TypeErrors naming the field."""
        with pytest.raises(TypeError, match=r"source must be a conveyor.Carrier subclass"):
            MoveRoute(source=int, destination=_Target, copy=_bulk)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="destination must be"):
            MoveRoute(source=_Source, destination=_Target(), copy=_bulk)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="copy must be callable"):
            MoveRoute(source=_Source, destination=_Target, copy=3)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            MoveRoute(_Source, _Target, _bulk)  # type: ignore[misc]

    def test_record_is_frozen(self) -> None:
        """Routes are values."""
        route = MoveRoute(source=_Source, destination=_Target, copy=_bulk)
        with pytest.raises(AttributeError):
            route.copy = _bulk  # type: ignore[misc]


class TestRegistration:
    """register_move_route and the conveyor_move_routes hook share one table."""

    def test_registered_route_is_found(self, stub_host: Callable[..., None]) -> None:
        """A registered route is the one move_route returns for its exact pair."""
        assert move_route(_Source, _Target).copy is _bulk
        assert (_Source, _Target) in move_routes()

    def test_duplicate_registration_is_value_error(self, stub_host: Callable[..., None]) -> None:
        """A pair may be registered once."""
        with pytest.raises(ValueError, match="route from _Source to _Target is already"):
            register_move_route(source=_Source, destination=_Target, copy=_bulk)

    def test_hook_routes_are_collected_lazily(self, stub_host: Callable[..., None]) -> None:
        """Routes a plugin contributes are used from the next move on."""
        with pytest.raises(NotImplementedError):
            move(_on(_Source, [1.0]), _Elsewhere)
        stub_host(MoveRoute(source=_Source, destination=_Elsewhere, copy=_bulk))
        assert type(move(_on(_Source, [1.0]), _Elsewhere).carrier) is _Elsewhere

    def test_hook_route_duplicating_a_registered_one_is_value_error(
        self, stub_host: Callable[..., None]
    ) -> None:
        """A contributed route for a registered pair is refused when the table is built."""
        stub_host(MoveRoute(source=_Source, destination=_Target, copy=_bulk))
        with pytest.raises(ValueError, match="already registered"):
            move(_on(_Source, [1.0]), _Target)

    def test_hook_item_of_another_type_is_type_error(self, stub_host: Callable[..., None]) -> None:
        """A hook must contribute MoveRoute records."""
        stub_host((_Source, _Elsewhere, _bulk))
        with pytest.raises(TypeError, match=r"contribute conveyor.MoveRoute records"):
            move(_on(_Source, [1.0]), _Elsewhere)


class TestMove:
    """move(tensor, destination, **allocate_options)."""

    def test_copies_values_shape_and_dtype(self, stub_host: Callable[..., None]) -> None:
        """The result is a contiguous destination tensor with the source's values."""
        source = _on(_Source, np.arange(6).reshape(2, 3), cv.int32)
        out = move(source.T, _Target)
        assert type(out.carrier) is _Target and out.dtype is cv.int32
        assert out.numpy().tolist() == [[0, 3], [1, 4], [2, 5]]
        assert out.layout.is_contiguous

    def test_missing_route_names_both_classes(self, stub_host: Callable[..., None]) -> None:
        """No route: NotImplementedError naming source and destination; nothing allocated."""
        source = _on(_Source, [1.0])
        before = _Elsewhere.allocations
        with pytest.raises(NotImplementedError, match="move from _Source to _Elsewhere: no move"):
            move(source, _Elsewhere)
        assert _Elsewhere.allocations == before

    def test_destination_by_registered_name(self, stub_host: Callable[..., None]) -> None:
        """A string destination is resolved through the plugin host."""
        stub_host(target=_Target)
        assert type(move(_on(_Source, [2.0]), "target").carrier) is _Target

    @pytest.mark.parametrize("destination", [_Target.allocate(1, cv.float32), 3, None])
    def test_destination_of_another_kind_is_type_error(
        self, stub_host: Callable[..., None], destination: object
    ) -> None:
        """Only a class or a name is a destination; an instance gets a hint."""
        with pytest.raises(TypeError, match="must be a Carrier class or a registered carrier"):
            move(_on(_Source, [1.0]), destination)  # type: ignore[arg-type]

    def test_non_tensor_is_type_error(self, stub_host: Callable[..., None]) -> None:
        """Only tensors move."""
        with pytest.raises(TypeError, match="move: expected a Tensor"):
            move(np.ones(3), _Target)  # type: ignore[arg-type]

    def test_same_class_is_an_independent_copy(self, stub_host: Callable[..., None]) -> None:
        """A move to the source's own class copies: writing the result leaves the source."""
        source = _on(_Elsewhere, [1.0, 2.0])
        out = move(source, _Elsewhere)
        assert out.carrier is not source.carrier
        out.carrier.write(0, 9.0)
        assert source.numpy().tolist() == [1.0, 2.0]

    def test_options_go_to_the_route(self, stub_host: Callable[..., None]) -> None:
        """Keyword options reach the route, which passes them to the destination's allocate."""
        seen: list[dict[str, Any]] = []

        def recording(source: cv.Tensor, destination: type[cv.Carrier], **options: Any) -> Any:
            seen.append(options)
            return _bulk(source, destination)

        stub_host(MoveRoute(source=_Source, destination=_Elsewhere, copy=recording))
        move(_on(_Source, [1.0]), _Elsewhere, directory="/data")
        assert seen == [{"directory": "/data"}]

    def test_route_returning_wrong_result_is_refused(self, stub_host: Callable[..., None]) -> None:
        """A route must return a destination tensor of the source's shape and dtype."""
        stub_host(
            MoveRoute(source=_Source, destination=_Elsewhere, copy=lambda s, d: s),
            MoveRoute(
                source=_Elsewhere,
                destination=_Source,
                copy=lambda s, d: _on(_Source, [1.0, 2.0, 3.0]),
            ),
        )
        with pytest.raises(TypeError, match="must return a _Elsewhere Tensor"):
            move(_on(_Source, [1.0]), _Elsewhere)
        with pytest.raises(ValueError, match=r"returned shape \(3,\) float32, expected \(1,\)"):
            move(_on(_Elsewhere, [1.0]), _Source)


class TestDifferentiableMove:
    """The public move is differentiable; otherwise movement creates no autograd node."""

    def test_no_node_without_requires_grad(self, stub_host: Callable[..., None]) -> None:
        """A plain move's result is a leaf."""
        out = move(_on(_Source, [1.0]), _Target)
        assert out.grad_fn is None and not out.requires_grad

    def test_no_node_under_no_grad(self, stub_host: Callable[..., None]) -> None:
        """Grad mode off: no node even for an input that requires grad."""
        source = _on(_Source, [1.0])
        source.requires_grad = True
        with cv.no_grad():
            assert move(source, _Target).grad_fn is None

    def test_gradient_moves_back_to_the_source_class(self, stub_host: Callable[..., None]) -> None:
        """backward through a move delivers the gradient on the source's class."""
        source = _on(_Source, [1.0, 2.0])
        source.requires_grad = True
        out = move(source, _Target)
        assert out.requires_grad and out.grad_fn is not None
        assert out.grad_fn._operation_name == "move"
        assert out.grad_fn._dispatch_carrier_class is _Source
        out.backward(_on(_Target, [3.0, 4.0]))
        assert source.grad is not None and type(source.grad.carrier) is _Source
        assert source.grad.numpy().tolist() == [3.0, 4.0]

    def test_writing_the_source_after_a_move_keeps_the_gradient_valid(
        self, stub_host: Callable[..., None]
    ) -> None:
        """A move saves no input values, so an in-place write does not block backward."""
        source = _on(_Source, [1.0, 2.0])
        source.requires_grad = True
        moved = move(source, _Target)
        source.carrier.write(0, 7.0)
        moved.backward(_on(_Target, [1.0, 1.0]))
        assert source.grad is not None

    def test_profiling_records_the_move(self, stub_host: Callable[..., None]) -> None:
        """Movement runs through the operation lifecycle, so profilers see it."""
        with cv.profile() as profiler:
            move(_on(_Source, [1.0]), _Target)
        assert [(r.operation, r.carrier) for r in profiler.records] == [("move", _Source)]
