#!/usr/bin/env python3
"""Splits a GGUF file into parts by tensors, and joins parts back into one file.

The port's quantizer (`locate-anything-cli quantize`) reads its whole input into memory
and builds the whole output there too: for the 3B model that is 15.3 GB of f32 plus
about 8 GB of output, more than a 24 GB machine has beside other work. compare.sh
therefore splits the f32 GGUF into parts of a few GB (every part keeps all the metadata),
quantizes each part with the port's quantizer, and joins the quantized parts: the
quantized bytes are the port's own, only the container is cut and glued.

    gguf_parts.py split IN.gguf OUT_PREFIX N      writes OUT_PREFIX.1.gguf .. OUT_PREFIX.N.gguf
    gguf_parts.py join OUT.gguf PART.gguf ...     tensors in the order of the parts

The format (ggml's docs/gguf.md): "GGUF", u32 version, u64 tensor count, u64 key/value
count; key/value pairs (string key, u32 type, value); tensor infos (string name, u32
dimensions, u64 sizes, u32 ggml type, u64 offset into the data section); zero padding to
the alignment (general.alignment, else 32); the tensors' bytes, each starting at a
multiple of the alignment. A tensor's bytes are copied with the padding that follows
them (up to the next tensor or the end of the file), so no ggml type table is needed.
"""

import os
import struct
import sys

_SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _UINT32 = 8, 9, 4


class _Cursor:
    def __init__(self, f):
        self.f = f

    def read(self, n):
        b = self.f.read(n)
        if len(b) != n:
            raise ValueError("GGUF file ends early")
        return b

    def u32(self):
        return struct.unpack("<I", self.read(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.read(8))[0]

    def string(self):
        return self.read(self.u64()).decode("utf-8")

    def skip_value(self, vtype):
        if vtype == _STRING:
            self.read(self.u64())
        elif vtype == _ARRAY:
            etype, n = self.u32(), self.u64()
            if etype in _SCALAR_SIZES:
                self.read(_SCALAR_SIZES[etype] * n)
            else:
                for _ in range(n):
                    self.skip_value(etype)
        elif vtype in _SCALAR_SIZES:
            self.read(_SCALAR_SIZES[vtype])
        else:
            raise ValueError(f"unknown GGUF value type {vtype}")


class Gguf:
    """The header of one GGUF file: raw key/value bytes, tensor infos, data layout."""

    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            c = _Cursor(f)
            if c.read(4) != b"GGUF":
                raise ValueError(f"{path}: not a GGUF file")
            self.version = c.u32()
            n_tensors, n_kv = c.u64(), c.u64()
            self.alignment = 32
            self.kv = []  # raw bytes of each pair, copied as they are
            for _ in range(n_kv):
                start = f.tell()
                key = c.string()
                vtype = c.u32()
                if key == "general.alignment" and vtype == _UINT32:
                    self.alignment = c.u32()
                else:
                    c.skip_value(vtype)
                end = f.tell()
                f.seek(start)
                self.kv.append(f.read(end - start))
            self.tensors = []  # [name, dims, ggml type, offset, padded size]
            for _ in range(n_tensors):
                name = c.string()
                dims = [c.u64() for _ in range(c.u32())]
                self.tensors.append([name, dims, c.u32(), c.u64(), 0])
            self.data_start = _align(f.tell(), self.alignment)
        ends = sorted(t[3] for t in self.tensors)[1:] + [os.path.getsize(path) - self.data_start]
        by_offset = sorted(self.tensors, key=lambda t: t[3])
        for t, end in zip(by_offset, ends):
            t[4] = end - t[3]


def _align(n, a):
    return n + (-n % a)


def _string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def write(path, version, alignment, kv, tensors):
    """Writes a GGUF file from raw key/value bytes and [(source Gguf, tensor info)]."""
    with open(path, "wb") as out:
        out.write(b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kv)))
        for pair in kv:
            out.write(pair)
        offset = 0
        for _, (name, dims, gtype, _, size) in tensors:
            out.write(_string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, gtype, offset))
            offset += size
        out.write(b"\0" * (-out.tell() % alignment))
        out.flush()
        for src, (_, _, _, src_offset, size) in tensors:
            with open(src.path, "rb") as f:
                f.seek(src.data_start + src_offset)
                left = size
                while left > 0:
                    n = os.copy_file_range(f.fileno(), out.fileno(), min(left, 1 << 30))
                    if n == 0:
                        raise ValueError(f"{src.path}: tensor data ends early")
                    left -= n


def split(src_path, prefix, n):
    src = Gguf(src_path)
    total = sum(t[4] for t in src.tensors)
    parts, acc = [[] for _ in range(n)], 0
    for t in src.tensors:  # contiguous runs of about total/n bytes, in file order
        parts[min(n - 1, acc * n // total)].append((src, t))
        acc += t[4]
    for i, part in enumerate(parts, 1):
        if part:
            write(f"{prefix}.{i}.gguf", src.version, src.alignment, src.kv, part)
            print(f"{prefix}.{i}.gguf: {len(part)} tensors")


def join(out_path, part_paths):
    parts = [Gguf(p) for p in part_paths]
    first = parts[0]
    if any(p.kv != first.kv or p.alignment != first.alignment for p in parts):
        raise ValueError("the parts' metadata differ: not parts of one file")
    tensors = [(p, t) for p in parts for t in p.tensors]
    write(out_path, first.version, first.alignment, first.kv, tensors)
    print(f"{out_path}: {len(tensors)} tensors from {len(parts)} parts")


def main(argv):
    if len(argv) == 4 and argv[0] == "split":
        split(argv[1], argv[2], int(argv[3]))
    elif len(argv) >= 3 and argv[0] == "join":
        join(argv[1], argv[2:])
    else:
        sys.exit("usage: gguf_parts.py split IN.gguf OUT_PREFIX N | join OUT.gguf PART.gguf ...")


if __name__ == "__main__":
    main(sys.argv[1:])
