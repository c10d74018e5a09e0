"""Reading and writing the safetensors format without the safetensors package.

A file is: 8 bytes little-endian header length N, N bytes of JSON
({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}),
then the tensors' bytes, offsets relative to the end of the header. A sharded
checkpoint adds model.safetensors.index.json whose "weight_map" names each tensor's file.

Writing streams tensor by tensor so that a multi-gigabyte checkpoint never sits in
memory whole: the caller supplies the shapes first and the data one tensor at a time.
"""

import json
import os
import struct

import numpy as np
import torch

DTYPES = {  # safetensors name -> (torch dtype, element size)
    "F32": (torch.float32, 4),
    "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2),
}
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"


def tensor_bytes(t, dtype):
    """Little-endian bytes of t converted to dtype ("F32", "F16" or "BF16")."""
    torch_dtype, _ = DTYPES[dtype]
    t = t.detach().to(torch_dtype).contiguous().cpu()
    if torch_dtype == torch.bfloat16:
        # numpy has no bfloat16: reinterpret the 16-bit patterns.
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    return t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()


def _header(specs, dtype):
    """JSON header bytes for [(name, shape)] laid out in the given order, padded with
    spaces so the data starts 8-byte aligned (as the reference implementation does)."""
    _, size = DTYPES[dtype]
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in specs:
        nbytes = int(np.prod(shape, dtype=np.int64)) * size
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    raw += b" " * (-(8 + len(raw)) % 8)
    return raw, offset


def write_file(path, specs, dtype, make_tensor):
    """Writes one safetensors file. specs: [(name, shape)]; make_tensor(name, shape)
    returns the tensor, called once per tensor in order."""
    header, total = _header(specs, dtype)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)))
        f.write(header)
        for name, shape in specs:
            t = make_tensor(name, shape)
            if tuple(t.shape) != tuple(shape):
                raise ValueError(f"{name}: made shape {tuple(t.shape)}, want {tuple(shape)}")
            f.write(tensor_bytes(t, dtype))
    return total


def shard_name(k, n):
    return f"model-{k + 1:05d}-of-{n:05d}.safetensors"


def write_checkpoint_weights(out_dir, specs, dtype, make_tensor, shards=1):
    """Writes model.safetensors, or `shards` files split at about equal byte counts plus
    model.safetensors.index.json. Returns {file name: bytes written}."""
    if shards <= 1:
        write_file(os.path.join(out_dir, SINGLE_FILE), specs, dtype, make_tensor)
        return {SINGLE_FILE: os.path.getsize(os.path.join(out_dir, SINGLE_FILE))}
    _, size = DTYPES[dtype]
    sizes = [int(np.prod(s, dtype=np.int64)) * size for _, s in specs]
    total, groups, acc = sum(sizes), [[] for _ in range(shards)], 0
    for spec, nbytes in zip(specs, sizes):
        k = min(shards - 1, acc * shards // total)
        groups[k].append(spec)
        acc += nbytes
    if any(not g for g in groups):
        raise ValueError(f"cannot split {len(specs)} tensors into {shards} non-empty shards")
    weight_map, written = {}, {}
    for k, group in enumerate(groups):
        name = shard_name(k, shards)
        write_file(os.path.join(out_dir, name), group, dtype, make_tensor)
        written[name] = os.path.getsize(os.path.join(out_dir, name))
        weight_map.update({n: name for n, _ in group})
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(out_dir, INDEX_FILE), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return written


def read_file(path):
    """Returns {name: float32 torch tensor} of one safetensors file."""
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", buf[:8])
    if 8 + n > len(buf):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(buf[8:8 + n])
    data = memoryview(buf)[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] not in DTYPES:
            raise ValueError(f"{path}: tensor {name}: dtype {e['dtype']} not supported")
        begin, end = e["data_offsets"]
        raw = np.frombuffer(data[begin:end], dtype="<i2" if e["dtype"] != "F32" else "<f4")
        if e["dtype"] == "BF16":
            t = torch.from_numpy(raw.copy()).view(torch.bfloat16)
        elif e["dtype"] == "F16":
            t = torch.from_numpy(raw.copy()).view(torch.float16)
        else:
            t = torch.from_numpy(raw.copy())
        out[name] = t.reshape(e["shape"]).to(torch.float32)
    return out


def read_checkpoint_weights(ckpt_dir):
    """Returns {name: float32 tensor} of a checkpoint directory, single file or sharded."""
    index_path = os.path.join(ckpt_dir, INDEX_FILE)
    if not os.path.exists(index_path):
        return read_file(os.path.join(ckpt_dir, SINGLE_FILE))
    with open(index_path) as f:
        weight_map = json.load(f)["weight_map"]
    out = {}
    for name in sorted(set(weight_map.values())):
        for k, v in read_file(os.path.join(ckpt_dir, name)).items():
            if k in out:
                raise ValueError(f"{ckpt_dir}: tensor {k} is in two shards")
            out[k] = v
    missing = set(weight_map) - set(out)
    if missing:
        raise ValueError(f"{ckpt_dir}: index lists tensors no shard holds: {sorted(missing)[:5]}")
    return out
