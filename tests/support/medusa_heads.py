"""Medusa heads for the tests, in the format the Medusa reference saves
(medusa_lm_head.safetensors with tensors "{i}.{j}.linear.weight",
"{i}.{j}.linear.bias" and "{i}.{num_layers}.weight", config.json with
medusa_num_heads and medusa_num_layers), written with NumPy alone.

  random DIR HEADS LAYERS HIDDEN VOCAB SEED DTYPE < {"x": [[...], ...]}
      random heads; prints {"logits": [head][row][vocab]}, the float64
      forward of each head on each row of x (x + SiLU(W x + b) per block,
      then the output map), from the weights as stored (DTYPE f32, f16 or
      bf16 rounding included).

  fit DIR HEADS HIDDEN VOCAB HIDDEN_FILE < {"sequences": [[ids...], ...]}
      heads fitted by least squares on a model's own hidden states:
      HIDDEN_FILE holds float32 rows [sum of lengths, HIDDEN], row t of a
      sequence the final-norm hidden state at its position t. Head i maps
      the state at t to the token at t + 2 + i (ridge regression onto one-hot
      targets); its one residual block is zero, so the identity. Prints
      {"rows": fitted rows, "top1": [training top-1 accuracy per head]}.
"""
import json
import struct
import sys

import numpy as np


def to_bf16_bits(a):
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16  # round to nearest even
    return rounded.astype(np.uint16)


def stored(a, dtype):
    """(bytes as the file holds them, the values they decode to in float64)."""
    a = np.asarray(a, dtype=np.float32)
    if dtype == "F32":
        return a.tobytes(), a.astype(np.float64)
    if dtype == "F16":
        h = a.astype(np.float16)
        return h.tobytes(), h.astype(np.float64)
    bits = to_bf16_bits(a)
    back = (bits.astype(np.uint32) << 16).view(np.float32)
    return bits.tobytes(), back.astype(np.float64)


def write_heads(directory, tensors, num_heads, num_layers, dtype):
    header, blobs, offset, decoded = {}, [], 0, {}
    for name, value in tensors:
        data, back = stored(value, dtype)
        header[name] = {"dtype": dtype, "shape": list(np.shape(value)), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
        decoded[name] = back
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(f"{directory}/medusa_lm_head.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    with open(f"{directory}/config.json", "w") as f:
        json.dump({"medusa_num_heads": num_heads, "medusa_num_layers": num_layers}, f)
    return decoded


def head_tensors(weights):
    """weights[i] = (blocks [(W, b), ...], out) -> the file's names in order."""
    out = []
    for i, (blocks, w_out) in enumerate(weights):
        for j, (w, b) in enumerate(blocks):
            out.append((f"{i}.{j}.linear.weight", w))
            out.append((f"{i}.{j}.linear.bias", b))
        out.append((f"{i}.{len(blocks)}.weight", w_out))
    return out


def forward(decoded, head, num_layers, x):
    y = np.asarray(x, dtype=np.float64)
    for j in range(num_layers):
        z = y @ decoded[f"{head}.{j}.linear.weight"].T + decoded[f"{head}.{j}.linear.bias"]
        y = y + z / (1.0 + np.exp(-z))
    return y @ decoded[f"{head}.{num_layers}.weight"].T


def random_heads(args):
    directory, heads, layers, hidden, vocab, seed, dtype = args
    heads, layers, hidden, vocab, seed = int(heads), int(layers), int(hidden), int(vocab), int(seed)
    rng = np.random.default_rng(seed)
    weights = []
    for _ in range(heads):
        blocks = [(rng.normal(0, 0.3, (hidden, hidden)), rng.normal(0, 0.3, hidden)) for _ in range(layers)]
        weights.append((blocks, rng.normal(0, 0.5, (vocab, hidden))))
    decoded = write_heads(directory, head_tensors(weights), heads, layers, dtype.upper())
    x = np.asarray(json.load(sys.stdin)["x"], dtype=np.float32).astype(np.float64)
    print(json.dumps({"logits": [forward(decoded, i, layers, x).tolist() for i in range(heads)]}))


def fit_heads(args):
    directory, heads, hidden, vocab, hidden_file = args
    heads, hidden, vocab = int(heads), int(hidden), int(vocab)
    sequences = json.load(sys.stdin)["sequences"]
    states = np.fromfile(hidden_file, dtype=np.float32).reshape(-1, hidden).astype(np.float64)
    weights, top1, first = [], [], 0
    rows = [[] for _ in range(heads)]
    targets = [[] for _ in range(heads)]
    for ids in sequences:
        for i in range(heads):
            for t in range(len(ids) - 2 - i):
                rows[i].append(first + t)
                targets[i].append(ids[t + 2 + i])
        first += len(ids)
    assert first == states.shape[0], (first, states.shape)
    for i in range(heads):
        h = states[rows[i]]
        y = np.zeros((len(rows[i]), vocab))
        y[np.arange(len(rows[i])), targets[i]] = 1.0
        w = np.linalg.solve(h.T @ h + 1e-3 * np.eye(hidden), h.T @ y)  # [hidden, vocab]
        top1.append(float(np.mean(np.argmax(h @ w, axis=1) == np.asarray(targets[i]))))
        blocks = [(np.zeros((hidden, hidden)), np.zeros(hidden))]
        weights.append((blocks, w.T))
    write_heads(directory, head_tensors(weights), heads, 1, "F32")
    print(json.dumps({"rows": len(rows[0]), "top1": top1}))


if __name__ == "__main__":
    {"random": random_heads, "fit": fit_heads}[sys.argv[1]](sys.argv[2:])
