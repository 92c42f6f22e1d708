"""The old path of the 2-D convolution: conv2d and Conv2d are the engine's general layers now,
minigrad.nn.functional.conv2d and minigrad.nn.Conv2d (minigrad/nn/conv.py); the gist policy and RAM's spatial
location head are built from them. attention.glimpse.conv2d / Conv2d still name the same objects.
"""
from minigrad.nn import Conv2d
from minigrad.nn.functional import conv2d

__all__ = ("Conv2d", "conv2d")
