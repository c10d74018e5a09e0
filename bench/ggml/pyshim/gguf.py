"""A stand-in for the `gguf` package's writer, enough for the ggml port's converter.

The port's converter builds its file with `GGUFWriter(path, arch)`, `add_uint32`,
`add_float32`, `add_string`, `add_array`, `add_tensor(name, float32 array)`, then
`write_header_to_file`, `write_kv_data_to_file`, `write_tensors_to_file` and `close`.
That package is not in Debian, so bench/ggml/compare.sh puts this directory first on
PYTHONPATH instead; it is written from the GGUF format description (ggml's docs/gguf.md),
version 3:

    "GGUF", u32 version, u64 tensor count, u64 key/value count
    key/value pairs: string key, u32 value type, value
    tensor infos: string name, u32 dimensions, u64 sizes (innermost first), u32 ggml type,
                  u64 offset into the data section
    zero padding to the alignment (32), then each tensor's bytes, each padded to 32

Strings are a u64 byte count and UTF-8 bytes; an array is a u32 element type, a u64
count and the elements. Python ints in arrays are written as int32, floats as float32
(what the port's loader reads). The header can only be written once every tensor's
shape is known, and a float32 copy of the 3B model is 15 GB, so tensors are streamed to a
side file as they arrive and copied behind the header at the end.
"""

import os
import struct

import numpy as np

GGUF_VERSION = 3
ALIGNMENT = 32

# value types of the format
_UINT32, _INT32, _FLOAT32, _BOOL, _STRING, _ARRAY = 4, 5, 6, 7, 8, 9
_GGML_TYPE_F32 = 0


def _string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _scalar(vtype, v):
    if vtype == _UINT32:
        return struct.pack("<I", v)
    if vtype == _INT32:
        return struct.pack("<i", v)
    if vtype == _FLOAT32:
        return struct.pack("<f", v)
    if vtype == _BOOL:
        return struct.pack("<?", v)
    if vtype == _STRING:
        return _string(v)
    raise ValueError(f"gguf shim: value type {vtype} not provided")


def _element_type(v):
    if isinstance(v, bool):  # before int: bool is an int in Python
        return _BOOL
    if isinstance(v, int):
        return _INT32
    if isinstance(v, float):
        return _FLOAT32
    if isinstance(v, str):
        return _STRING
    raise ValueError(f"gguf shim: array element {v!r} of type {type(v).__name__} not provided")


def _pad(n):
    return -n % ALIGNMENT


class GGUFWriter:
    def __init__(self, path, arch):
        self._path = path
        self._kv = []  # encoded key/value pairs
        self._infos = []  # (name, shape, offset)
        self._data_path = path + ".data.part"
        self._data = open(self._data_path, "wb")
        self._data_size = 0
        self._out = None
        self.add_string("general.architecture", arch)

    def _add(self, key, vtype, payload):
        self._kv.append(_string(key) + struct.pack("<I", vtype) + payload)

    def add_uint32(self, key, v):
        self._add(key, _UINT32, _scalar(_UINT32, v))

    def add_int32(self, key, v):
        self._add(key, _INT32, _scalar(_INT32, v))

    def add_float32(self, key, v):
        self._add(key, _FLOAT32, _scalar(_FLOAT32, v))

    def add_bool(self, key, v):
        self._add(key, _BOOL, _scalar(_BOOL, v))

    def add_string(self, key, v):
        self._add(key, _STRING, _string(v))

    def add_array(self, key, values):
        values = list(values)
        if not values:
            raise ValueError(f"gguf shim: {key}: empty arrays have no element type")
        etype = _element_type(values[0])
        if any(_element_type(v) != etype for v in values):
            raise ValueError(f"gguf shim: {key}: mixed element types")
        if etype == _STRING:
            body = b"".join(_string(v) for v in values)
        else:
            fmt = {_INT32: "i", _FLOAT32: "f", _BOOL: "?"}[etype]
            body = struct.pack(f"<{len(values)}{fmt}", *values)
        self._add(key, _ARRAY, struct.pack("<IQ", etype, len(values)) + body)

    def add_tensor(self, name, array):
        """Appends a float32 tensor to the side file; its shape is written innermost first."""
        a = np.ascontiguousarray(array)
        if a.dtype != np.float32:
            raise ValueError(f"gguf shim: tensor {name}: dtype {a.dtype}, only float32 is provided")
        self._infos.append((name, a.shape, self._data_size))
        a.tofile(self._data)
        self._data.write(b"\0" * _pad(a.nbytes))
        self._data_size += a.nbytes + _pad(a.nbytes)

    def write_header_to_file(self):
        self._out = open(self._path, "wb")
        self._out.write(b"GGUF" + struct.pack("<IQQ", GGUF_VERSION, len(self._infos), len(self._kv)))

    def write_kv_data_to_file(self):
        for kv in self._kv:
            self._out.write(kv)
        for name, shape, offset in self._infos:
            dims = list(reversed(shape))
            self._out.write(_string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, _GGML_TYPE_F32, offset))
        self._out.write(b"\0" * _pad(self._out.tell()))

    def write_tensors_to_file(self):
        self._data.close()
        self._out.flush()
        with open(self._data_path, "rb") as src:
            left = self._data_size
            while left > 0:
                n = os.copy_file_range(src.fileno(), self._out.fileno(), min(left, 1 << 30))
                if n == 0:
                    raise IOError(f"gguf shim: {self._data_path} ended {left} bytes early")
                left -= n
        os.remove(self._data_path)

    def close(self):
        if self._out is not None:
            self._out.close()
        if not self._data.closed:
            self._data.close()
