"""plot.png from a run's logs with matplotlib: both panels drawn (the loss and val-MSE curves in their colours, the
gap curves), and a directory without logs is an error naming it."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from vdt_py.errors import VdtError
from vdt_py.plot import plot_run


def colour_pixels(img: np.ndarray, rgb: tuple[int, int, int], tol: int = 40) -> int:
    return int((np.abs(img[..., :3].astype(int) - np.array(rgb)).sum(-1) < tol).sum())


def test_plot_draws_both_panels(tmp_path):
    (tmp_path / "train_log.csv").write_text("step,loss,mse\n" + "".join(f"{s},{1.0 / s:.4f},0\n" for s in range(1, 41)))
    (tmp_path / "val_log.csv").write_text("step,timestep,mse,mse_uncond,mse_nulltext,gap_uncond,gap_nulltext,n\n" + "".join(
        f"{s},{t},{0.5 / s:.4f},0,0,{0.01 * s:.4f},{0.005 * s:.4f},4\n" for s in (10, 20, 30, 40) for t in (200, 800)))
    img = np.asarray(Image.open(plot_run(str(tmp_path), str(tmp_path / "plot.png"))).convert("RGB"))
    assert img.shape == (650, 800, 3)
    for rgb in ((31, 119, 180), (214, 39, 40), (255, 127, 14), (44, 160, 44)):   # tab: blue, red, orange, green
        assert colour_pixels(img, rgb) > 50, rgb
    # The gaps are drawn below the loss panel.
    top, bottom = img[:325], img[325:]
    assert colour_pixels(top, (214, 39, 40)) > 50 and colour_pixels(bottom, (255, 127, 14)) > 50


def test_plot_without_logs_names_the_directory(tmp_path):
    with pytest.raises(VdtError, match=str(tmp_path)):
        plot_run(str(tmp_path), str(tmp_path / "p.png"))
