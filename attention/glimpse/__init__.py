"""Glimpses: a sensor that reads a small part of an image, and the models that learn where to look (Mnih et
al. 2014, RAM; patch-grid hard and soft attention; DRAW and spatial-transformer readers, differentiable).
conv.py, sensor.py, networks.py, readers.py, ram.py; every name is also here, as attention.glimpse.X.
"""
from .conv import Conv2d, conv2d  # noqa: F401
from .networks import (GistPolicy, GlimpseClassifier, HardGlimpseNet, SoftGlimpseNet,  # noqa: F401
                       SpatialLocationHead)
from .readers import (DrawReader, ReaderGlimpseNet, SpatialTransformerReader,  # noqa: F401
                      draw_filterbank)
from .ram import RecurrentAttentionModel  # noqa: F401
from .sensor import PatchGrid, avg_pool, extract_patches, glimpse_sensor, loc_to_pixels  # noqa: F401

__all__ = ("Conv2d", "conv2d", "GistPolicy", "GlimpseClassifier", "HardGlimpseNet", "SoftGlimpseNet",
           "SpatialLocationHead", "DrawReader", "ReaderGlimpseNet", "SpatialTransformerReader", "draw_filterbank",
           "RecurrentAttentionModel", "PatchGrid", "avg_pool", "extract_patches",
           "glimpse_sensor", "loc_to_pixels")
