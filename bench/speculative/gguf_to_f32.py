"""Writes a copy of a GGUF file with every tensor dequantized to F32.

The speculative-decoding figures of docs/PERFORMANCE.md run SmolLM2-135M-
Instruct both as shipped (Q4_1) and as F32, whose decode step reads four
times the bytes. Usage: gguf_to_f32.py IN.gguf OUT.gguf (the project venv's
gguf package, with gguf.quants).
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize


def main(src: str, dst: str) -> None:
    reader = GGUFReader(src)
    writer = GGUFWriter(dst, reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue  # written by GGUFWriter itself
        kind = field.types[0]
        if kind == GGUFValueType.ARRAY:
            writer.add_key_value(name, field.contents(), kind, sub_type=field.types[-1])
        else:
            writer.add_key_value(name, field.contents(), kind)
    for tensor in reader.tensors:
        values = dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        writer.add_tensor(tensor.name, values.reshape([int(d) for d in reversed(tensor.shape)]))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: gguf_to_f32.py IN.gguf OUT.gguf")
    main(sys.argv[1], sys.argv[2])
