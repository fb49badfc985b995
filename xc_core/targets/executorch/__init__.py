"""ExecuTorch as a target family: one module per backend delegate, sharing common.py (lowering, read-back,
partitioner reasons, boundaries). Importing the package registers its targets."""
from . import xnnpack, vulkan, coreml, ethos_u  # noqa: F401,I001  (registration order = display order)
