import json

import numpy as np

from calibft.artifacts.figures import _smooth, save_figure, training_curves


def test_training_curves_are_written_as_pdf_and_png(tmp_path):
    logs = {}
    for model in ("a", "b"):
        for recipe in ("soft", "hard"):
            path = tmp_path / f"{model}_{recipe}.jsonl"
            path.write_text("".join(json.dumps({"step": s, "loss": 3.0 / s}) + "\n" for s in range(1, 40)))
            logs[(model, recipe)] = path
    figure = training_curves(logs, {"a": "Model A"})
    assert [ax.get_title() for ax in figure.axes if ax.get_visible()] == ["Model A", "b"]
    assert len(figure.axes[0].get_lines()) == 4  # smoothed and raw, per recipe
    pdf, png = save_figure(figure, "training_curves", tmp_path / "figures")
    assert pdf.read_bytes()[:4] == b"%PDF" and png.read_bytes()[:4] == b"\x89PNG"
    assert b"/CreationDate" not in pdf.read_bytes()  # the same results, the same bytes


def test_smoothing_is_a_trailing_mean():
    values = np.array([1.0, 3.0, 5.0, 7.0])
    np.testing.assert_allclose(_smooth(values, 2), [1.0, 2.0, 4.0, 6.0])
