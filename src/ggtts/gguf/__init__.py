"""Everything about the GGUF file format, nothing about any model."""

from ggtts.gguf.read import GGUFFile, TensorInfo, dequantizable_types
from ggtts.gguf.write import ModelWriter, OutType, choose_type

__all__ = ["GGUFFile", "ModelWriter", "OutType", "TensorInfo", "choose_type", "dequantizable_types"]
