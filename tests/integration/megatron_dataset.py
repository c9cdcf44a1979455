"""An independent reader and writer of Megatron's indexed dataset, written with numpy from the
format description (megatron/core/datasets/indexed_dataset.py in Megatron-LM), sharing no code with the project."""
import struct

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}


def write(prefix, documents, dtype_code):
    dtype = DTYPES[dtype_code]
    arrays = [np.asarray(d, dtype=dtype) for d in documents]
    with open(prefix + ".bin", "wb") as f:
        for a in arrays:
            f.write(a.tobytes())
    sizes = np.array([len(a) for a in arrays], dtype=np.int32)
    pointers = np.concatenate([[0], np.cumsum(sizes[:-1].astype(np.int64) * np.dtype(dtype).itemsize)]).astype(np.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(MAGIC + struct.pack("<Q", 1) + struct.pack("<B", dtype_code))
        f.write(struct.pack("<Q", len(arrays)) + struct.pack("<Q", len(arrays) + 1))
        f.write(sizes.tobytes() + pointers[: len(arrays)].tobytes() + np.arange(len(arrays) + 1, dtype=np.int64).tobytes())


def read(prefix):
    index = open(prefix + ".idx", "rb").read()
    assert index[:9] == MAGIC, "bad magic"
    version, = struct.unpack("<Q", index[9:17])
    assert version == 1
    dtype = DTYPES[index[17]]
    count, documents = struct.unpack("<QQ", index[18:34])
    sizes = np.frombuffer(index, np.int32, count, 34)
    pointers = np.frombuffer(index, np.int64, count, 34 + 4 * count)
    doc_index = np.frombuffer(index, np.int64, documents, 34 + 12 * count)
    tokens = np.fromfile(prefix + ".bin", dtype)
    itemsize = np.dtype(dtype).itemsize
    return [tokens[p // itemsize: p // itemsize + s].tolist() for s, p in zip(sizes, pointers)], doc_index.tolist(), dtype
