"""Per-operation overhead of the core, measured in one run against a plain Python call.

Measures: cached ``resolve_plan``; ``dispatch_op``; ``dispatch_op`` + ``forward`` (preflight:
options check, plan, capability gate) on a carrier whose operation does no work; the same with
grad tracking; and a plain Python function call as the unit. Target: dispatch + forward under
5 us on the 2-core reference machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import conveyor as cv
from conveyor.sdk import enumerate_plans


class _NoWorkCarrier(cv.Carrier):
    """Storage of a fixed size whose operations return a prepared tensor: pure overhead."""

    def __init__(self) -> None:
        super().__init__()
        self.result: cv.Tensor | None = None

    def _storage_size(self) -> int:
        return 4

    def _storage_dtype(self) -> cv.DType:
        return cv.float32

    def _dispatch_op(self, operation_name: str) -> cv.Operation:
        return _NoWork()


class _NoWork(cv.Operation):
    def _forward(self, *inputs: Any, options: Any) -> cv.Tensor:
        carrier = self._dispatch_carrier
        assert isinstance(carrier, _NoWorkCarrier) and carrier.result is not None
        return carrier.result

    def backward(self, gradient: Any) -> tuple[Any, ...]:
        return (gradient, gradient)


cv.register_operation_capabilities(
    _NoWorkCarrier, [cv.OperationCapability.from_plan(p) for p in enumerate_plans("add")]
)


def _best_per_call(
    cases: list[tuple[str, Callable[[], object]]], rounds: int = 15, number: int = 5000
) -> list[tuple[str, float]]:
    """Best seconds per call of each case, measured in interleaved rounds.

    Interleaving makes every case see the same background load, so the ratios stay honest on
    a busy machine; the minimum over rounds approaches the unloaded cost.
    """
    best = dict.fromkeys((name for name, _ in cases), float("inf"))
    for _ in range(rounds):
        for name, fn in cases:
            start = time.perf_counter()
            for _ in range(number):
                fn()
            best[name] = min(best[name], (time.perf_counter() - start) / number)
    return [(name, best[name]) for name, _ in cases]


def _plain(a: object, b: object) -> object:
    return a


def main() -> None:
    carrier = _NoWorkCarrier()
    x = cv.Tensor(carrier, cv.Layout((4,)))
    carrier.result = cv.Tensor(carrier, cv.Layout((4,)))
    y = cv.Tensor(carrier, cv.Layout((4,)), requires_grad=True)
    cv.resolve_plan("add", cv.float32, cv.float32)

    rows = _best_per_call(
        [
            ("plain Python call", lambda: _plain(x, x)),
            ("resolve_plan (cached)", lambda: cv.resolve_plan("add", cv.float32, cv.float32)),
            ("dispatch_op", lambda: carrier.dispatch_op("add")),
            ("dispatch_op + forward", lambda: carrier.dispatch_op("add").forward(x, x)),
            ("dispatch_op + forward (grad)", lambda: carrier.dispatch_op("add").forward(y, x)),
            ("cv.add (public function)", lambda: cv.add(x, x)),
        ]
    )
    unit = rows[0][1]
    print(f"{'measurement':<32} {'us/call':>9} {'x plain call':>13}")
    for name, seconds in rows:
        print(f"{name:<32} {seconds * 1e6:>9.3f} {seconds / unit:>13.1f}")
    target = dict(rows)["dispatch_op + forward"] * 1e6
    verdict = "meets" if target < 5 else "misses"
    print(f"\ndispatch + forward preflight: {target:.2f} us ({verdict} the 5 us target)")


if __name__ == "__main__":
    main()
