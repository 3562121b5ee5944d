"""Demo step: the report folder, ``summary.json`` (every figure) and ``loss.png`` (the curves)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conveyor_demo._train import TrainResult

__all__ = ["PLOT_SIZE", "write_plot", "write_summary"]

PLOT_SIZE = (1000, 400)  # pixels of loss.png: two panels side by side
_DPI = 100


def write_summary(summary: dict[str, Any], directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "summary.json"
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path


def write_plot(results: Sequence[TrainResult], directory: Path) -> Path:
    """Training loss and test accuracy per epoch, one line per framework, drawn with matplotlib."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    from matplotlib import pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    figure, (loss_axes, accuracy_axes) = plt.subplots(
        1, 2, figsize=(PLOT_SIZE[0] / _DPI, PLOT_SIZE[1] / _DPI), dpi=_DPI
    )
    for result in results:
        epochs = range(1, len(result.losses) + 1)
        style = "-" if result.framework == "conveyor" else "--"
        loss_axes.plot(epochs, result.losses, style, label=result.framework)
        accuracy_axes.plot(epochs, result.accuracies, style, label=result.framework)
    loss_axes.set(title="training loss", xlabel="epoch", ylabel="cross-entropy")
    accuracy_axes.set(title="test accuracy", xlabel="epoch", ylabel="accuracy")
    for axes in (loss_axes, accuracy_axes):
        axes.grid(alpha=0.3)
        axes.legend()
    figure.tight_layout()
    path = directory / "loss.png"
    figure.savefig(path, dpi=_DPI)
    plt.close(figure)
    return path
