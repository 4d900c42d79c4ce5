"""Checks on the images a report writes."""

from pathlib import Path

import numpy as np
from PIL import Image


def assert_varied_png(path: Path) -> None:
    """A PNG larger than 100 x 100 pixels that is not one flat colour."""
    with Image.open(path) as image:
        assert image.format == "PNG"
        pixels = np.asarray(image.convert("RGB"), dtype=float)
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100
    assert pixels.std() > 0
