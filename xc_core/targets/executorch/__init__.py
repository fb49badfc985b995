"""ExecuTorch as a target family: one module per backend delegate, sharing common.py (lowering, read-back,
partitioner reasons, boundaries). Importing the package registers the three targets."""
from . import xnnpack, vulkan, coreml  # noqa: F401,I001  (registration order = display order)
