#!/usr/bin/env python3
"""The same Llama forward written plainly in PyTorch, as the GPU baseline.

Random BF16 weights of a preset's shapes (the ones bench_gpu's dummy
presets use), a preallocated KV cache per layer, torch's own
scaled_dot_product_attention, no CUDA graphs, no fusion: what a user gets by
writing the model in PyTorch. Prints the same figures as bench_gpu (decode
at batch 1 and 64, a 2048-token prefill) as JSON on the last line.

    python3 bench/cuda/torch_baseline.py [--preset llama2-7b] [--steps 32]

Run by scripts/gpu-check.sh on a machine with a GPU and PyTorch (the lent
GPU machines have it); CI only checks that it compiles.
"""
import argparse
import json
import time

PRESETS = {
    # hidden, layers, heads, kv heads, intermediate, vocab, rope theta
    "llama2-7b": (4096, 32, 32, 32, 11008, 32000, 10000.0),
    "llama3-8b": (4096, 32, 32, 8, 14336, 128256, 500000.0),
}


def main():
    import torch
    import torch.nn.functional as F

    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="llama2-7b", choices=sorted(PRESETS))
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=128)
    args = ap.parse_args()
    hidden, layers, heads, kv_heads, inter, vocab, theta = PRESETS[args.preset]
    head_dim = hidden // heads
    dev, dt = "cuda", torch.bfloat16
    torch.manual_seed(0)

    def w(*shape):
        return (torch.randn(*shape, device=dev, dtype=torch.float32) * 0.02).to(dt)

    model = [dict(wq=w(heads * head_dim, hidden), wk=w(kv_heads * head_dim, hidden),
                  wv=w(kv_heads * head_dim, hidden), wo=w(hidden, heads * head_dim),
                  wg=w(inter, hidden), wu=w(inter, hidden), wd=w(hidden, inter),
                  n1=torch.ones(hidden, device=dev, dtype=dt), n2=torch.ones(hidden, device=dev, dtype=dt))
             for _ in range(layers)]
    embed, head, norm = w(vocab, hidden), w(vocab, hidden), torch.ones(hidden, device=dev, dtype=dt)
    max_len = max(2048, args.prompt + args.steps) + 8
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=dev, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(max_len, device=dev, dtype=torch.float32), inv)
    cos, sin = freqs.cos().to(dt), freqs.sin().to(dt)

    def rms(x, g):
        return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(dt) * g

    def rope(x, pos):  # x: [b, h, t, d]
        c, s = cos[pos][None, None], sin[pos][None, None]
        x1, x2 = x[..., : head_dim // 2], x[..., head_dim // 2:]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)

    def forward(tokens, start, cache):  # tokens: [b, t]
        b, t = tokens.shape
        pos = torch.arange(start, start + t, device=dev)
        x = embed[tokens]
        for layer, (kc, vc) in zip(model, cache):
            h = rms(x, layer["n1"])
            q = (h @ layer["wq"].T).view(b, t, heads, head_dim).transpose(1, 2)
            k = (h @ layer["wk"].T).view(b, t, kv_heads, head_dim).transpose(1, 2)
            v = (h @ layer["wv"].T).view(b, t, kv_heads, head_dim).transpose(1, 2)
            q, k = rope(q, pos), rope(k, pos)
            kc[:b, :, start:start + t] = k
            vc[:b, :, start:start + t] = v
            keys, values = kc[:b, :, : start + t], vc[:b, :, : start + t]
            if kv_heads != heads:
                keys = keys.repeat_interleave(heads // kv_heads, dim=1)
                values = values.repeat_interleave(heads // kv_heads, dim=1)
            a = F.scaled_dot_product_attention(q, keys, values, is_causal=(t > 1))
            x = x + a.transpose(1, 2).reshape(b, t, hidden) @ layer["wo"].T
            h = rms(x, layer["n2"])
            x = x + (F.silu(h @ layer["wg"].T) * (h @ layer["wu"].T)) @ layer["wd"].T
        return rms(x[:, -1], norm) @ head.T

    def cache_for(batch, length):
        return [(torch.empty(batch, kv_heads, length, head_dim, device=dev, dtype=dt),
                 torch.empty(batch, kv_heads, length, head_dim, device=dev, dtype=dt)) for _ in range(layers)]

    def timed(fn):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    out = {"preset": args.preset, "device": torch.cuda.get_device_name(0)}
    with torch.inference_mode():
        for batch in (1, 64):
            cache = cache_for(batch, max_len)
            prompt = torch.randint(0, vocab, (batch, args.prompt), device=dev)
            forward(prompt, 0, cache)
            token = torch.randint(0, vocab, (batch, 1), device=dev)

            def decode():
                for step in range(args.steps):
                    forward(token, args.prompt + step, cache)

            decode()  # warm-up
            out[f"decode_b{batch}_tok_s"] = batch * args.steps / timed(decode)
            del cache
        cache = cache_for(1, 2048)
        prompt = torch.randint(0, vocab, (1, 2048), device=dev)
        forward(prompt, 0, cache)
        seconds = min(timed(lambda: forward(prompt, 0, cache)) for _ in range(3))
        params = sum(t.numel() for layer in model for k, t in layer.items() if k.startswith("w")) + 2 * vocab * hidden
        out["prefill_2048_tflops"] = 2.0 * params * 2048 / seconds / 1e12
    print(json.dumps(out))


if __name__ == "__main__":
    main()
