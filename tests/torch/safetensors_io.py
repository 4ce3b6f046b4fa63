"""safetensors read and write with numpy, for the reference scripts.

By hand (struct + json), because Debian's python3-torch comes without the safetensors module.
bf16 and f16 tensors are read as float32.
"""
import json
import struct

import numpy as np

_DTYPES = {"F32": np.dtype("<f4"), "F64": np.dtype("<f8"), "I32": np.dtype("<i4"), "I64": np.dtype("<i8"),
           "F16": np.dtype("<f2")}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short for a safetensors header")
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        shape = tuple(int(d) for d in info["shape"])
        if info["dtype"] == "BF16":
            bits = np.frombuffer(body[begin:end], dtype="<u2").astype(np.uint32) << 16
            out[name] = bits.view(np.float32).reshape(shape).copy()
            continue
        array = np.frombuffer(body[begin:end], dtype=_DTYPES[info["dtype"]]).reshape(shape)
        out[name] = array.astype(np.float32) if info["dtype"] == "F16" else array.copy()
    return out


def write_safetensors(path, tensors, metadata=None):
    """metadata: the header's "__metadata__" (string to string; transformers wants {"format": "pt"})."""
    names = {v.str: k for k, v in _DTYPES.items()}  # "<f4" -> "F32"
    header, chunks, offset = ({"__metadata__": metadata} if metadata else {}), [], 0
    for name, array in tensors.items():
        array = np.ascontiguousarray(array)
        little = array.dtype.newbyteorder("<")
        raw = array.astype(little, copy=False).tobytes()
        header[name] = {"dtype": names[little.str], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    blob = json.dumps(header).encode("utf-8")
    blob += b" " * (-len(blob) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for raw in chunks:
            f.write(raw)
