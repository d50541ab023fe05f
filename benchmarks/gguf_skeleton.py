"""A GGUF file's skeleton, and a file of the same shape rebuilt from it with random weights: how a benchmark carries
a model of real size to a machine that cannot build it (a GPU machine without NeMo, reached with a few MiB).

    python benchmarks/gguf_skeleton.py save MODEL.gguf SKELETON.json   # header bytes + each tensor's statistics
    python benchmarks/gguf_skeleton.py build SKELETON.json OUT.gguf    # the same header, random tensors

The skeleton keeps the source's header verbatim (every metadata key, the tokenizer's tables, each tensor's name,
type, shape and offset) and, per tensor, the mean and standard deviation of its values; ``build`` writes that
header and, at each tensor's offset, normal values of that mean and deviation in the stored type (quantized by
gguf-py where the type is a block type); tensors of up to 16 KiB (norms, biases, a codec's quantizer levels) are
kept whole. A norm of ones stays ones; a weight initialised at random by the source
model's own code keeps its scale, so activations stay in range (a codec's snake parameters, say). What the file
says is the source's; only the numbers are new.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from pathlib import Path

import numpy as np

VERBATIM_BYTES = 16 * 1024  # tensors up to this size are kept whole


def save(source: Path, out: Path) -> None:
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(source)
    with source.open("rb") as f:
        header = f.read(reader.data_offset)
    tensors = []
    for t in reader.tensors:
        values = dequantize(t.data, t.tensor_type).astype(np.float64)
        entry = {
            "name": t.name, "type": int(t.tensor_type), "shape": [int(n) for n in t.data.shape],
            "offset": int(t.data_offset) - reader.data_offset, "bytes": int(t.n_bytes),
            "mean": float(values.mean()), "std": float(values.std()),
        }  # fmt: skip
        if t.n_bytes <= VERBATIM_BYTES:  # norms, biases, a codec's derived buffers: kept as they are
            entry["data"] = base64.b64encode(np.ascontiguousarray(t.data).tobytes()).decode()
        tensors.append(entry)
    out.write_text(json.dumps({
        "source": source.name, "data_offset": reader.data_offset, "size": source.stat().st_size,
        "header": base64.b64encode(header).decode(), "tensors": tensors,
    }))  # fmt: skip
    print(f"{out}: {len(tensors)} tensors, header {len(header)} bytes, {out.stat().st_size / 2**20:.1f} MiB")


def build(skeleton: Path, out: Path, seed: int = 0) -> Path:
    """The file ``skeleton`` describes, at ``out``, with random tensors (seeded)."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import quantize

    spec = json.loads(skeleton.read_text())
    rng = np.random.default_rng(seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as f:
        f.write(base64.b64decode(spec["header"]))
        start = spec["data_offset"]
        for t in spec["tensors"]:
            if "data" in t:
                f.seek(start + t["offset"])
                f.write(base64.b64decode(t["data"]))
                continue
            qtype = GGMLQuantizationType(t["type"])
            block, size = GGML_QUANT_SIZES[qtype]
            shape = list(t["shape"])
            if qtype not in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):  # gguf-py reads these as bytes
                shape[-1] = shape[-1] // size * block
            values = rng.standard_normal(shape, dtype=np.float32) * t["std"] + t["mean"]
            if qtype == GGMLQuantizationType.F32:
                data = values.astype(np.float32).tobytes()
            elif qtype == GGMLQuantizationType.F16:
                data = values.astype(np.float16).tobytes()
            else:
                data = quantize(values, qtype).tobytes()
            if len(data) != t["bytes"]:
                raise ValueError(f"{t['name']}: {len(data)} bytes made, the file holds {t['bytes']}")
            f.seek(start + t["offset"])
            f.write(data)
        f.truncate(spec["size"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="verb", required=True)
    s = sub.add_parser("save")
    s.add_argument("source", type=Path)
    s.add_argument("out", type=Path)
    b = sub.add_parser("build")
    b.add_argument("skeleton", type=Path)
    b.add_argument("out", type=Path)
    b.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.verb == "save":
        save(args.source, args.out)
    else:
        print(build(args.skeleton, args.out, args.seed), file=sys.stderr)


if __name__ == "__main__":
    main()
