"""A GGUF that holds an architecture and nothing else: its family is known from it (shared by the tests)."""

from __future__ import annotations

from pathlib import Path


def skeleton_gguf(path: Path) -> Path:
    """A GGUF at ``path`` whose architecture is ``path``'s stem, with no metadata or tensors besides."""
    import gguf

    writer = gguf.GGUFWriter(str(path), path.stem)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
