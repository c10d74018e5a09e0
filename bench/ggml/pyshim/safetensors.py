"""A stand-in for the `safetensors` package, enough for the ggml port's converter.

The port's converter (scripts/convert_locateanything_to_gguf.py) reads the checkpoint
with `safe_open(path, framework="pt")`, `keys()` and `get_tensor(name).float().numpy()`.
That package is not in Debian, so bench/ggml/compare.sh puts this directory first on
PYTHONPATH instead. It needs numpy only (the converter itself also imports torch).

The format: 8 bytes little-endian header length N, N bytes of JSON
({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}), then
the tensors' bytes, offsets counted from the end of the header. The file is memory-mapped
and each tensor widened to float32 only when asked for, so a multi-gigabyte shard never
sits in memory whole. A tensor comes back as a small stand-in with the two methods the
converter calls, `float()` and `numpy()`, so this module needs numpy only.
"""

import json
import struct

import numpy as np

_DTYPES = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}


class _Tensor:
    """A float32 numpy array behind the two torch.Tensor methods the converter uses."""

    def __init__(self, array):
        self._array = array
        self.shape = array.shape

    def float(self):
        return self

    def numpy(self):
        return self._array


class _File:
    def __init__(self, path):
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            self._header = json.loads(f.read(n))
        self._header.pop("__metadata__", None)
        self._data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
        self._path = path

    def keys(self):
        return list(self._header)

    def get_tensor(self, name):
        """The tensor widened to float32 (exact from bf16 and f16)."""
        e = self._header[name]
        if e["dtype"] not in _DTYPES:
            raise ValueError(f"{self._path}: tensor {name}: dtype {e['dtype']} not supported")
        begin, end = e["data_offsets"]
        raw = self._data[begin:end].view(_DTYPES[e["dtype"]])
        if e["dtype"] == "BF16":
            # bf16 is the top half of a float32: shift the 16 bits into place.
            arr = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            arr = raw.astype(np.float32)
        return _Tensor(arr.reshape(e["shape"]))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._data = None
        return False


def safe_open(path, framework="pt", device="cpu"):
    if framework != "pt":
        raise ValueError(f"safe_open: only framework='pt' is provided here, not {framework!r}")
    return _File(path)
