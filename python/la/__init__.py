"""Python side of the ``la`` linear-attention compiler.

``la.reference`` holds the fp64 NumPy reference recurrences that every
execution test compares against; ``la.testing`` holds input generators and
the accuracy metric.
"""

from . import reference
