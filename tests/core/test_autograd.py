"""Autograd: grad mode, the backward engine, saved-input checks and gradient validation."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import conveyor as cv
from tests.core.carriers import ArrayCarrier
from tests.core.more_carriers import ProbeCarrier, probe_tensor


def arr(values: Any, dtype: cv.DType = cv.float32, *, requires_grad: bool = False) -> cv.Tensor:
    return cv.tensor(values, dtype=dtype, carrier=ArrayCarrier, requires_grad=requires_grad)


def in_thread(func: Callable[[], Any]) -> Any:
    """Run ``func`` in a fresh thread and return its result (re-raising its exception)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = func()
        except BaseException as exc:  # handed back to the calling thread
            box["error"] = exc

    worker = threading.Thread(target=target)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


class TestLeafAccumulation:
    def test_two_backward_calls_accumulate_into_grad(self) -> None:
        """A leaf's .grad is the sum of the gradients of every backward pass that reached it."""
        x = arr([1.0, 2.0, 3.0], requires_grad=True)

        (x * 2.0).sum().backward()
        (x * 5.0).sum().backward()

        np.testing.assert_array_equal(x.grad.numpy(), [7.0, 7.0, 7.0])

    def test_tensor_used_twice_sums_both_contributions(self) -> None:
        """A tensor feeding two operands of one expression receives both gradients, summed."""
        x = arr([1.0, 2.0, 3.0], requires_grad=True)

        (x * x + x).sum().backward()

        np.testing.assert_array_equal(x.grad.numpy(), [3.0, 5.0, 7.0])

    def test_leaf_without_requires_grad_gets_no_grad(self) -> None:
        """Only leaves that require grad receive a gradient."""
        x = arr([1.0, 2.0], requires_grad=True)
        c = arr([3.0, 4.0])

        (x * c).sum().backward()

        assert c.grad is None
        np.testing.assert_array_equal(x.grad.numpy(), [3.0, 4.0])


class TestBroadcastReduction:
    def test_row_broadcast_gradient_is_summed_over_rows(self) -> None:
        """(2,3) + (3,): the (3,) operand's gradient sums over the broadcast leading axis."""
        a = arr(np.ones((2, 3)), requires_grad=True)
        b = arr([1.0, 2.0, 3.0], requires_grad=True)

        (a + b).sum().backward()

        assert a.grad.shape == (2, 3)
        assert b.grad.shape == (3,)
        np.testing.assert_array_equal(a.grad.numpy(), np.ones((2, 3)))
        np.testing.assert_array_equal(b.grad.numpy(), [2.0, 2.0, 2.0])

    def test_both_operands_widened_gradients_keep_their_shapes(self) -> None:
        """(2,1) + (1,3): each gradient sums over the axis its operand was widened along."""
        a = arr([[1.0], [2.0]], requires_grad=True)
        b = arr([[1.0, 2.0, 3.0]], requires_grad=True)
        weights = arr(np.arange(6.0).reshape(2, 3))

        ((a + b) * weights).sum().backward()

        np.testing.assert_array_equal(a.grad.numpy(), [[3.0], [12.0]])
        np.testing.assert_array_equal(b.grad.numpy(), [[3.0, 5.0, 7.0]])


class TestGradientDtype:
    def test_mixed_precision_add_gives_each_leaf_its_own_dtype(self) -> None:
        """float32 + float64 computes in float64, but each leaf's grad has the leaf's dtype."""
        a = arr([1.0, 2.0], cv.float32, requires_grad=True)
        b = arr([3.0, 4.0], cv.float64, requires_grad=True)

        out = (a * b).sum()
        out.backward()

        assert out.dtype is cv.float64
        assert a.grad.dtype is cv.float32
        assert b.grad.dtype is cv.float64
        np.testing.assert_array_equal(a.grad.numpy(), [3.0, 4.0])
        np.testing.assert_array_equal(b.grad.numpy(), [1.0, 2.0])

    def test_engine_casts_output_dtype_gradient_back_to_input_dtype(self) -> None:
        """A backward that returns gradients in the output dtype is cast back by the engine."""
        a = probe_tensor([1.0, 2.0], cv.float32)
        b = probe_tensor([3.0, 4.0], cv.float64)
        a.requires_grad = True
        b.requires_grad = True

        out = a.carrier.dispatch_op("pair_sum").forward(a, b)
        out.backward(probe_tensor([1.0, 1.0], cv.float64))

        assert out.dtype is cv.float64
        assert a.grad.dtype is cv.float32
        assert b.grad.dtype is cv.float64
        np.testing.assert_array_equal(a.grad.numpy(), [1.0, 1.0])


class TestRetainGrad:
    def test_non_leaf_without_retain_grad_keeps_no_grad(self) -> None:
        """An intermediate result does not keep its gradient by default."""
        x = arr([1.0, 2.0], requires_grad=True)
        y = x * 3.0

        y.sum().backward()

        assert y.grad is None

    def test_retained_non_leaf_receives_its_gradient(self) -> None:
        """retain_grad() on an intermediate result keeps d(output)/d(intermediate) in .grad."""
        x = arr([1.0, 2.0], requires_grad=True)
        y = x * 3.0
        y.retain_grad()

        (y * y).sum().backward()

        np.testing.assert_array_equal(y.grad.numpy(), [6.0, 12.0])
        np.testing.assert_array_equal(x.grad.numpy(), [18.0, 36.0])

    def test_retained_gradient_accumulates_across_passes(self) -> None:
        """A retained non-leaf accumulates over backward passes, like a leaf (as in PyTorch)."""
        x = arr([1.0, 2.0], requires_grad=True)
        y = x * 3.0
        y.retain_grad()
        out = y.sum()

        out.backward(retain_graph=True)
        out.backward()

        np.testing.assert_array_equal(y.grad.numpy(), [2.0, 2.0])
        np.testing.assert_array_equal(x.grad.numpy(), [6.0, 6.0])


class TestRetainGraph:
    def test_retain_graph_allows_a_second_backward(self) -> None:
        """With retain_graph=True the saved state survives, so a second pass works and adds up."""
        x = arr([1.0, 2.0], requires_grad=True)
        out = (x * x).sum()

        out.backward(retain_graph=True)
        out.backward()

        np.testing.assert_array_equal(x.grad.numpy(), [4.0, 8.0])

    def test_second_backward_without_retain_graph_raises(self) -> None:
        """Without retain_graph the first pass releases saved state; a second pass says so."""
        x = arr([1.0, 2.0], requires_grad=True)
        out = (x * x).sum()
        out.backward()

        with pytest.raises(RuntimeError, match="retain_graph=True") as info:
            out.backward()

        assert "already released" in str(info.value)
        np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


class TestSavedInputMutation:
    def test_write_through_setitem_raises_at_backward(self) -> None:
        """Writing into a saved intermediate through __setitem__ makes backward refuse."""
        x = arr([1.0, 2.0], requires_grad=True)
        y = x * 2.0
        out = y.exp().sum()
        y[0] = 5.0

        with pytest.raises(RuntimeError, match="modified in place after forward") as info:
            out.backward()

        assert "exp on ArrayCarrier" in str(info.value)
        assert x.grad is None

    def test_write_through_carrier_raises_at_backward(self) -> None:
        """Writing a saved leaf's storage with carrier.write makes backward refuse."""
        x = arr([1.0, 2.0], requires_grad=True)
        out = x.exp().sum()
        x.carrier.write(0, 3.0)

        with pytest.raises(RuntimeError, match="modified in place after forward"):
            out.backward()

        assert x.grad is None

    def test_mutation_in_one_branch_leaves_every_grad_untouched(self) -> None:
        """A refused pass publishes nothing, not even the gradients of unaffected branches."""
        x = arr([1.0, 2.0], requires_grad=True)
        w = arr([3.0, 4.0], requires_grad=True)
        y = arr([1.0, 2.0], requires_grad=True)
        h = y * 2.0
        h.retain_grad()
        out = h.exp().sum() + (x * w).sum()
        h[0] = 5.0

        with pytest.raises(RuntimeError, match="modified in place"):
            out.backward()

        assert (x.grad, w.grad, y.grad, h.grad) == (None, None, None, None)

    def test_write_into_unsaved_tensor_is_allowed(self) -> None:
        """Writing a tensor that no recorded operation saved does not affect backward."""
        x = arr([1.0, 2.0], requires_grad=True)
        out = (x * 2.0).sum()
        unrelated = arr([0.0, 0.0])
        unrelated[0] = 1.0

        out.backward()

        np.testing.assert_array_equal(x.grad.numpy(), [2.0, 2.0])


class TestGradMode:
    def test_grad_is_enabled_by_default(self) -> None:
        """Grad mode starts on."""
        assert cv.is_grad_enabled() is True

    def test_no_grad_turns_recording_off_and_restores(self) -> None:
        """no_grad() disables recording inside the block and restores the previous mode."""
        with cv.no_grad():
            assert cv.is_grad_enabled() is False
        assert cv.is_grad_enabled() is True

    def test_no_grad_works_as_decorator(self) -> None:
        """no_grad() also decorates a function."""

        @cv.no_grad()
        def probe() -> bool:
            return cv.is_grad_enabled()

        assert probe() is False
        assert cv.is_grad_enabled() is True

    def test_enable_grad_inside_no_grad_turns_recording_on(self) -> None:
        """enable_grad() re-enables recording inside no_grad and restores on exit."""
        with cv.no_grad():
            with cv.enable_grad():
                assert cv.is_grad_enabled() is True
            assert cv.is_grad_enabled() is False

    def test_set_grad_enabled_call_sets_mode(self) -> None:
        """Calling set_grad_enabled(False) switches the mode immediately."""
        cv.set_grad_enabled(False)
        assert cv.is_grad_enabled() is False
        cv.set_grad_enabled(True)
        assert cv.is_grad_enabled() is True

    def test_set_grad_enabled_context_restores_previous_mode(self) -> None:
        """As a context manager, set_grad_enabled restores the mode it found."""
        with cv.set_grad_enabled(False):
            assert cv.is_grad_enabled() is False
        assert cv.is_grad_enabled() is True

    def test_no_grad_does_not_leak_into_other_threads(self) -> None:
        """Grad mode is per thread: another thread still records while this one is in no_grad."""
        with cv.no_grad():
            assert in_thread(cv.is_grad_enabled) is True

    def test_set_grad_enabled_in_other_thread_does_not_change_this_one(self) -> None:
        """set_grad_enabled(False) in another thread leaves this thread's mode on."""

        def switch_off() -> bool:
            cv.set_grad_enabled(False)
            return cv.is_grad_enabled()

        assert in_thread(switch_off) is False
        assert cv.is_grad_enabled() is True

    def test_no_grad_in_other_thread_still_records_here(self) -> None:
        """Operations of this thread attach nodes while another thread sits in no_grad."""
        entered, release = threading.Event(), threading.Event()

        def hold_no_grad() -> None:
            with cv.no_grad():
                entered.set()
                release.wait(5)

        worker = threading.Thread(target=hold_no_grad)
        worker.start()
        try:
            entered.wait(5)
            y = arr([1.0], requires_grad=True) * 2.0
        finally:
            release.set()
            worker.join()

        assert y.autograd_ctx is not None


class TestGraphRecording:
    def test_no_node_attached_under_no_grad(self) -> None:
        """Results computed under no_grad are leaves that do not require grad."""
        x = arr([1.0, 2.0], requires_grad=True)

        with cv.no_grad():
            y = x * 2.0

        assert y.autograd_ctx is None
        assert y.requires_grad is False
        assert y.is_leaf

    def test_result_records_dispatched_operation(self) -> None:
        """With grad on, a result's autograd_ctx is the operation that produced it."""
        x = arr([1.0, 2.0], requires_grad=True)

        y = x * 2.0

        assert y.requires_grad is True
        assert y.autograd_ctx._operation_name == "mul"
        assert y.autograd_ctx._dispatch_carrier_class is ArrayCarrier

    def test_inputs_without_requires_grad_attach_no_node(self) -> None:
        """An operation whose inputs need no gradient attaches no node."""
        y = arr([1.0, 2.0]) * 2.0

        assert y.autograd_ctx is None
        assert y.requires_grad is False

    def test_argmax_output_attaches_no_node(self) -> None:
        """argmax returns int64 indices, which are not differentiable and get no node."""
        x = arr([[1.0, 5.0, 2.0]], requires_grad=True)

        idx = cv.argmax(x, axis=1)

        assert idx.dtype is cv.int64
        assert idx.autograd_ctx is None
        assert idx.requires_grad is False
        np.testing.assert_array_equal(idx.numpy(), [1])

    def test_backward_on_tensor_without_graph_raises(self) -> None:
        """backward() of a tensor that does not require grad is a RuntimeError."""
        y = arr([1.0])

        with pytest.raises(RuntimeError, match="does not require grad"):
            y.backward()


class TestImplicitGradient:
    def test_single_element_result_needs_no_gradient(self) -> None:
        """A one-element result, of any rank, backpropagates with an implied gradient of one."""
        x = arr([[2.0]], requires_grad=True)

        (x * 3.0).backward()

        np.testing.assert_array_equal(x.grad.numpy(), [[3.0]])

    def test_multi_element_result_needs_explicit_gradient(self) -> None:
        """A result with more than one element refuses to imply its gradient."""
        x = arr([1.0, 2.0], requires_grad=True)
        y = x * 3.0

        with pytest.raises(RuntimeError, match=r"single-element tensor.*shape \(2,\)"):
            y.backward()

        assert x.grad is None

    def test_explicit_gradient_weights_the_result(self) -> None:
        """An explicit gradient is the cotangent of the result."""
        x = arr([1.0, 2.0], requires_grad=True)

        (x * 3.0).backward(arr([1.0, 10.0]))

        np.testing.assert_array_equal(x.grad.numpy(), [3.0, 30.0])

    def test_gradient_of_wrong_shape_raises(self) -> None:
        """An explicit gradient must have the result's shape."""
        y = arr([1.0, 2.0], requires_grad=True) * 3.0

        with pytest.raises(ValueError, match=r"gradient shape \(3,\) does not match \(2,\)"):
            y.backward(arr([1.0, 1.0, 1.0]))


class TestRequiresGrad:
    def test_int_tensor_cannot_require_grad(self) -> None:
        """Setting requires_grad on an integer tensor is a RuntimeError naming its dtype."""
        t = arr([1, 2], cv.int64)

        with pytest.raises(RuntimeError, match=r"only floating and complex.*int64"):
            t.requires_grad = True

        assert t.requires_grad is False

    def test_int_constructor_with_requires_grad_raises(self) -> None:
        """A constructor asked for an integer tensor that requires grad refuses."""
        with pytest.raises(RuntimeError, match="int32"):
            cv.tensor([1, 2], dtype=cv.int32, carrier=ArrayCarrier, requires_grad=True)

    def test_non_leaf_requires_grad_cannot_be_set(self) -> None:
        """requires_grad is a leaf property; a result refuses and points to detach()."""
        y = arr([1.0], requires_grad=True) * 2.0

        with pytest.raises(RuntimeError, match="detach"):
            y.requires_grad = False


class TestBackwardResultValidation:
    def test_wrong_gradient_count_raises_value_error(self) -> None:
        """A backward returning more gradients than tensor inputs is a ValueError."""
        x = probe_tensor([1.0, 2.0], cv.float32)
        x.requires_grad = True
        y = x.carrier.dispatch_op("bad_count").forward(x)

        with pytest.raises(ValueError, match=r"bad_count on ProbeCarrier: .*2 gradient\(s\) for 1"):
            y.backward(probe_tensor([1.0, 1.0], cv.float32))

        assert x.grad is None

    def test_non_tensor_gradient_raises_type_error(self) -> None:
        """A backward returning a NumPy array in place of a Tensor is a TypeError."""
        x = probe_tensor([1.0, 2.0], cv.float32)
        x.requires_grad = True
        y = x.carrier.dispatch_op("bad_item").forward(x)

        with pytest.raises(TypeError, match=r"bad_item on ProbeCarrier: .*ndarray, not a Tensor"):
            y.backward(probe_tensor([1.0, 1.0], cv.float32))

        assert x.grad is None

    def test_non_sequence_result_raises_type_error(self) -> None:
        """A backward returning a dict instead of a tuple of gradients is a TypeError."""
        x = probe_tensor([1.0, 2.0], cv.float32)
        x.requires_grad = True
        y = x.carrier.dispatch_op("bad_container").forward(x)

        with pytest.raises(TypeError, match="backward returned dict"):
            y.backward(probe_tensor([1.0, 1.0], cv.float32))

    def test_well_formed_result_is_accumulated(self) -> None:
        """A backward returning one Tensor per input reaches the leaf (control for the above)."""
        x = probe_tensor([1.0, 2.0], cv.float32)
        x.requires_grad = True
        y = x.carrier.dispatch_op("scale").forward(x)

        y.backward(probe_tensor([1.0, 2.0], cv.float32))

        assert type(x.grad.carrier) is ProbeCarrier
        np.testing.assert_array_equal(x.grad.numpy(), [3.0, 6.0])


def _composite(x: cv.Tensor, w: cv.Tensor, b: cv.Tensor) -> cv.Tensor:
    """sum(exp(-(x @ w)) * relu(x @ w + b)) + sum(x * x), from ArrayCarrier's operations."""
    h = x @ w
    return (cv.exp(-h) * cv.relu(h + b)).sum() + (x * x).sum()


def _composite_numpy(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> float:
    h = x @ w
    return float((np.exp(-h) * np.maximum(h + b, 0)).sum() + (x * x).sum())


class TestNumericGradient:
    def test_composite_gradients_match_finite_differences(self) -> None:
        """Gradients of a small composite expression agree with central finite differences."""
        rng = np.random.default_rng(7)
        values = {
            "x": rng.uniform(-1, 1, (2, 3)),
            "w": rng.uniform(-1, 1, (3, 4)),
            "b": rng.uniform(-1, 1, (4,)),
        }
        pre = values["x"] @ values["w"] + values["b"]
        assert np.abs(pre).min() > 1e-3  # no relu kink within reach of the finite differences
        leaves = {k: arr(v, cv.float64, requires_grad=True) for k, v in values.items()}

        _composite(leaves["x"], leaves["w"], leaves["b"]).backward()

        eps = 1e-6
        for name, value in values.items():
            expected = np.zeros_like(value)
            for i in np.ndindex(value.shape):
                up, down = dict(values), dict(values)
                up[name], down[name] = value.copy(), value.copy()
                up[name][i] += eps
                down[name][i] -= eps
                expected[i] = (_composite_numpy(**up) - _composite_numpy(**down)) / (2 * eps)
            grad = leaves[name].grad
            assert grad.dtype is cv.float64
            np.testing.assert_allclose(grad.numpy(), expected, rtol=1e-6, atol=1e-8)
