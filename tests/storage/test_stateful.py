"""Random evict / promote / write / operate sequences never lose or change data (hypothesis).

A NumPy model shadows every Evictable tensor; after each step every tensor must read exactly its
model, whether it is promoted or evicted, and a refused step must change nothing.
"""

from __future__ import annotations

import shutil
import tempfile

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import conveyor as cv
from conveyor_generic import CPU as PRIMARY
from conveyor_storage import Evictable, FileBacked

SHAPE = (3, 4)
_values = st.lists(st.floats(-1e3, 1e3, allow_nan=False, width=32), min_size=12, max_size=12).map(
    lambda v: np.asarray(v, np.float32).reshape(SHAPE)
)


class EvictableMachine(RuleBasedStateMachine):
    """Tensors over Evictable(PRIMARY, FileBacked) and the NumPy values they must hold."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="conveyor-stateful-")
        self.tensors: list[cv.Tensor] = []
        self.models: list[np.ndarray] = []

    def _add(self, tensor: cv.Tensor, model: np.ndarray) -> None:
        self.tensors.append(tensor)
        self.models.append(model.astype(np.float32))

    @initialize(values=_values)
    def start(self, values: np.ndarray) -> None:
        primary = PRIMARY.allocate(values.size, cv.float32)
        primary.import_span(cv.Layout((values.size,)), values.reshape(-1))
        secondary = FileBacked.allocate(values.size, cv.float32, directory=self.directory)
        self._add(cv.Tensor(Evictable(primary, secondary), cv.Layout(SHAPE)), values)

    @rule(data=st.data())
    def evict(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.tensors) - 1))
        self.tensors[i].carrier.evict()
        assert self.tensors[i].carrier.is_evicted()

    @rule(data=st.data())
    def promote(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.tensors) - 1))
        self.tensors[i].carrier.promote()
        assert not self.tensors[i].carrier.is_evicted()

    @rule(data=st.data(), value=st.floats(-1e3, 1e3, allow_nan=False, width=32))
    def write(self, data: st.DataObject, value: float) -> None:
        i = data.draw(st.integers(0, len(self.tensors) - 1))
        row = data.draw(st.integers(0, SHAPE[0] - 1))
        t = self.tensors[i]
        if t.carrier.is_evicted():
            try:
                t[row] = value
            except RuntimeError:
                return
            raise AssertionError("a write to an evicted hierarchy was accepted")
        t[row] = value
        # Views share storage: every tensor on the same hierarchy sees the write.
        for j, other in enumerate(self.tensors):
            if other.carrier is t.carrier:
                self.models[j][row] = np.float32(value)

    @precondition(lambda self: len(self.tensors) < 8)
    @rule(data=st.data(), name=st.sampled_from(["add", "mul"]))
    def operate(self, data: st.DataObject, name: str) -> None:
        i = data.draw(st.integers(0, len(self.tensors) - 1))
        j = data.draw(st.integers(0, len(self.tensors) - 1))
        a, b = self.tensors[i], self.tensors[j]
        if a.carrier.is_evicted() or b.carrier.is_evicted():
            try:
                getattr(cv, name)(a, b)
            except RuntimeError:
                return
            raise AssertionError("an operation on an evicted operand was accepted")
        out = getattr(cv, name)(a, b)
        assert out.carrier.tier_classes == (PRIMARY, FileBacked)
        model = (
            self.models[i] + self.models[j] if name == "add" else self.models[i] * self.models[j]
        )
        self._add(out, model)

    @precondition(lambda self: len(self.tensors) < 8)
    @rule(data=st.data())
    def view(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.tensors) - 1))
        t = self.tensors[i]
        if t.carrier.is_evicted():
            return
        out = cv.reshape(cv.reshape(t, shape=(12,)), shape=SHAPE)
        assert out.carrier is t.carrier
        self.tensors.append(out)
        self.models.append(self.models[i])  # the same array object: views share writes

    @invariant()
    def every_tensor_reads_its_model(self) -> None:
        for t, model in zip(self.tensors, self.models, strict=True):
            assert t.numpy().tobytes() == model.tobytes()

    def teardown(self) -> None:
        for t in self.tensors:
            t.carrier.release()
        shutil.rmtree(self.directory, ignore_errors=True)


EvictableMachine.TestCase.settings = settings(
    max_examples=20, stateful_step_count=51, deadline=None, database=None
)
TestEvictableMachine = EvictableMachine.TestCase
