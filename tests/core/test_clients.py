"""Libraries nobody on this project wrote, run on Conveyor tensors and compared with NumPy.

scikit-learn and SciPy read ``SCIPY_ARRAY_API`` when they are first imported, so their checks
run in a fresh interpreter with it set (another test may have imported SciPy already); the
child fits every estimator on the same data twice, as NumPy arrays and as Conveyor tensors,
and reports the largest difference and the types of the fitted arrays. einops and
array-api-extra need no switch and run here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import array_api_extra as xpx
import einops
import numpy as np
import pytest

import conveyor as cv
import conveyor.array_api as xp

pytest.importorskip("sklearn")  # a test extra; the suite's environment installs it

_SKLEARN = textwrap.dedent(
    """
    import json
    import numpy as np
    import sklearn
    import conveyor as cv
    import conveyor.array_api as xp
    from sklearn.decomposition import PCA
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
    from sklearn.linear_model import Ridge
    from sklearn.metrics import accuracy_score, mean_squared_error, r2_score
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import KernelCenterer, MaxAbsScaler, MinMaxScaler, StandardScaler

    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 5))
    y = (X[:, 0] + 0.3 * rng.standard_normal(60) > 0).astype(np.int64)
    target = X @ rng.standard_normal(5) + 0.1 * rng.standard_normal(60)
    kernel = X @ X.T

    def fitted(model, names):
        return [getattr(model, n) for n in names]

    def run(X, y, target, kernel):
        out = {}
        pca = PCA(n_components=3, svd_solver="full").fit(X)
        out["PCA"] = [pca.transform(X), *fitted(pca, ["components_", "explained_variance_"])]
        lda = LinearDiscriminantAnalysis().fit(X, y)
        out["LinearDiscriminantAnalysis"] = [lda.predict(X), lda.transform(X), lda.coef_]
        ridge = Ridge(solver="svd", alpha=0.5).fit(X, target)
        out["Ridge"] = [ridge.predict(X), ridge.coef_]
        for scaler in (StandardScaler, MinMaxScaler, MaxAbsScaler):
            out[scaler.__name__] = [scaler().fit_transform(X)]
        out["KernelCenterer"] = [KernelCenterer().fit_transform(kernel)]
        out["r2_score"] = [r2_score(target, target * 0.9)]
        out["mean_squared_error"] = [mean_squared_error(target, target * 0.9)]
        out["accuracy_score"] = [accuracy_score(y, lda.predict(X))]
        out["train_test_split"] = train_test_split(X, y, random_state=0)
        return out

    want = run(X, y, target, kernel)
    with sklearn.config_context(array_api_dispatch=True):
        got = run(xp.asarray(X), xp.asarray(y), xp.asarray(target), xp.asarray(kernel))
    report = {}
    for name, values in want.items():
        diffs, kinds = [], []
        for w, g in zip(values, got[name], strict=True):
            kinds.append(type(g).__name__)
            gap = np.abs(np.asarray(w, dtype=float) - np.asarray(g, dtype=float))
            diffs.append(float(np.max(gap, initial=0)))
        report[name] = {"difference": max(diffs), "types": kinds}
    print(json.dumps(report))
    """
)

_SCIPY = textwrap.dedent(
    """
    import json
    import numpy as np
    import scipy.fft
    import scipy.special
    import scipy.stats
    import conveyor.array_api as xp

    values = np.random.default_rng(1).standard_normal((4, 6))
    calls = {
        "special.logsumexp": lambda m, v: scipy.special.logsumexp(v, axis=1),
        "stats.zscore": lambda m, v: scipy.stats.zscore(v, axis=0),
        "stats.moment": lambda m, v: scipy.stats.moment(v, order=3, axis=1),
        "fft.fft": lambda m, v: scipy.fft.fft(v, axis=-1),
    }
    report = {}
    for name, call in calls.items():
        want = call(np, values)
        got = call(xp, xp.asarray(values))
        report[name] = {
            "difference": float(np.max(np.abs(want - np.asarray(got)))),
            "type": type(got).__name__,
        }
    print(json.dumps(report))
    """
)


def _child(program: str) -> dict[str, Any]:
    """Run ``program`` in a fresh interpreter with SciPy's array API switch on."""
    environment = {**os.environ, "SCIPY_ARRAY_API": "1"}
    done = subprocess.run(
        [sys.executable, "-c", program], env=environment, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


SKLEARN_NAMES = [
    "PCA",
    "LinearDiscriminantAnalysis",
    "Ridge",
    "StandardScaler",
    "MinMaxScaler",
    "MaxAbsScaler",
    "KernelCenterer",
    "r2_score",
    "mean_squared_error",
    "accuracy_score",
    "train_test_split",
]
SCALAR_RESULTS = {"r2_score", "mean_squared_error", "accuracy_score"}


@pytest.fixture(scope="module")
def sklearn_report() -> dict[str, Any]:
    return _child(_SKLEARN)


class TestScikitLearn:
    @pytest.mark.parametrize("name", SKLEARN_NAMES)
    def test_array_api_dispatch_matches_the_numpy_fit(
        self, sklearn_report: dict[str, Any], name: str
    ) -> None:
        """With array_api_dispatch, each estimator's results equal the NumPy fit to 1e-5."""
        assert sklearn_report[name]["difference"] <= 1e-5

    @pytest.mark.parametrize("name", sorted(set(SKLEARN_NAMES) - SCALAR_RESULTS))
    def test_every_fitted_array_is_a_conveyor_tensor(
        self, sklearn_report: dict[str, Any], name: str
    ) -> None:
        """Fitted attributes and transformed data stay Conveyor tensors."""
        assert set(sklearn_report[name]["types"]) == {"Tensor"}


class TestSciPy:
    def test_dispatched_functions_match_numpy_and_return_tensors(self) -> None:
        """logsumexp, zscore, moment and fft dispatch to the namespace and agree with NumPy."""
        report = _child(_SCIPY)
        assert set(report) == {"special.logsumexp", "stats.zscore", "stats.moment", "fft.fft"}
        for name, found in report.items():
            assert found["type"] == "Tensor", name
            assert found["difference"] <= 1e-9, name


VALUES = np.arange(24.0).reshape(2, 3, 4)


class TestEinops:
    @pytest.mark.parametrize(
        ("function", "args"),
        [
            (einops.rearrange, ("a b c -> c (a b)",)),
            (einops.rearrange, ("a b (c d) -> (a d) b c", {"d": 2})),
            (einops.reduce, ("a b c -> a c", "mean")),
            (einops.reduce, ("a b c -> b", "max")),
            (einops.repeat, ("a b c -> a b c r", {"r": 3})),
        ],
    )
    def test_main_api_runs_on_tensors_like_numpy(
        self, function: Any, args: tuple[Any, ...]
    ) -> None:
        """einops.rearrange / reduce / repeat accept a Conveyor tensor and return one."""
        kwargs = args[-1] if isinstance(args[-1], dict) else {}
        positional = args[:-1] if kwargs else args
        got = function(cv.tensor(VALUES), *positional, **kwargs)
        assert isinstance(got, cv.Tensor)
        np.testing.assert_allclose(got.numpy(), function(VALUES, *positional, **kwargs))

    def test_einsum_runs_on_tensors_like_numpy(self) -> None:
        """einops.einsum contracts Conveyor tensors as it contracts NumPy arrays."""
        got = einops.einsum(cv.tensor(VALUES), cv.tensor(VALUES), "a b c, a b c -> a")
        assert isinstance(got, cv.Tensor)
        np.testing.assert_allclose(got.numpy(), einops.einsum(VALUES, VALUES, "a b c, a b c -> a"))

    def test_backend_found_when_einops_is_imported_after_conveyor(self) -> None:
        """The backend is defined when einops loads, whatever the import order."""
        program = (
            "import numpy as np, conveyor as cv, einops\n"
            "print(einops.rearrange(cv.tensor(np.ones((2, 3))), 'a b -> b a').shape)"
        )
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "(3, 2)"


class TestArrayApiExtra:
    @pytest.mark.parametrize(
        ("name", "call"),
        [
            ("atleast_nd", lambda m, v: xpx.atleast_nd(v, ndim=3, xp=m)),
            ("cov", lambda m, v: xpx.cov(v, xp=m)),
            ("pad", lambda m, v: xpx.pad(v, 2, xp=m)),
            ("nunique", lambda m, v: xpx.nunique(v, xp=m)),
            ("setdiff1d", lambda m, v: xpx.setdiff1d(v, v[0], xp=m)),
        ],
    )
    def test_functions_match_numpy(self, name: str, call: Any) -> None:
        """Each array-api-extra function gives NumPy's result on the same data."""
        values = np.asarray([[3.0, 1.0, 2.0, 3.0], [0.5, 1.0, 4.0, 2.0]])
        got = call(xp, xp.asarray(values))
        assert isinstance(got, cv.Tensor), name
        np.testing.assert_allclose(np.asarray(got), np.asarray(call(np, values)))

    def test_expand_dims_matches_numpy(self) -> None:
        """expand_dims with a tuple of axes (deprecated there, still shipped) agrees too."""
        values = np.asarray([3.0, 1.0])
        with pytest.warns(DeprecationWarning):
            got = xpx.expand_dims(xp.asarray(values), axis=(0, 2), xp=xp)
        assert got.shape == np.expand_dims(values, (0, 2)).shape
