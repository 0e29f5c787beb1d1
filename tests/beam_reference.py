#!/usr/bin/env python3
"""float64 NumPy beam search on stories260K, the reference for llmk's beam
search (tests/core/test_scheduler_beam.cpp, docs/beam_search.md).

  beam_reference.py MODEL_DIR      prints JSON: one result per case of CASES

The forward is tests/arch_reference.py's (Hugging Face Llama semantics, the
whole sequence recomputed per call, float64 throughout). The search is
written from its definition in docs/beam_search.md, over the whole
vocabulary (llmk reads each beam's best 2W tokens only):

  each step, every (beam, token) pair scores cumulative(beam) +
  log_softmax(logits(beam))[token]; the best 2W pairs, walked best first
  (rank r): a pair whose token ends a hypothesis (EOS or a stop id) is
  finished when r < W, any other becomes a next beam, until W; a next beam
  at max_tokens is finished too and the search ends; else it ends when
  is_done(best pair's cumulative, generated) holds. A hypothesis of g
  generated tokens (its stop token counted) scores cumulative / g^lp; the
  best W are kept; the output is the best n by score.

Each result carries `margin`: the smallest gap, over the whole search, in a
comparison that decided something (adjacent pairs among the best 2W + 1 of
a step, a hypothesis against the worst it would replace, is_done's two
sides, the ranking of the kept hypotheses). llmk's float32 forward must
make the same decisions wherever the margin is well above its noise.
"""
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from arch_reference import forward  # noqa: E402

EOS = 2
PERIOD = 426  # "." in stories260K's vocabulary: a stop id that ends hypotheses early

PROMPTS = {
    "once": [1, 403, 407, 261, 378],                       # "Once upon a time"
    "tom": [1, 274, 287, 381, 261, 352, 266, 268, 388, 426],  # "Tom had a red ball."
    "sue": [1, 301, 425, 411, 336, 432, 313, 457, 303, 359, 337, 267, 414, 450, 436],
}

# (name, prompt, width, n, length_penalty, early_stopping, max_tokens, stop ids)
CASES = [
    ("w1-once", "once", 1, 1, 1.0, False, 12, []),
    ("w2-tom", "tom", 2, 2, 1.0, False, 12, []),
    ("w4-once", "once", 4, 2, 1.0, False, 10, []),
    # The three early_stopping rules end this search at three different points.
    ("w4-tom-stop-false", "tom", 4, 3, 1.0, False, 20, [PERIOD]),
    ("w4-tom-stop-true", "tom", 4, 3, 1.0, True, 20, [PERIOD]),
    ("w4-tom-stop-never", "tom", 4, 3, 1.0, "never", 20, [PERIOD]),
    ("w2-tom-lp2-never", "tom", 2, 2, 2.0, "never", 20, [PERIOD]),
    ("w2-sue-lp0-true", "sue", 2, 2, 0.0, True, 20, [PERIOD]),
]


def load_stories(model_dir):
    raw = Path(model_dir, "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    w = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        assert t["dtype"] == "F32", name
        w[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=np.float32).reshape(t["shape"])
    cfg = json.loads(Path(model_dir, "config.json").read_text())
    shape = dict(hidden=cfg["hidden_size"], heads=cfg["num_attention_heads"], kv_heads=cfg["num_key_value_heads"],
                 layers=cfg["num_hidden_layers"], eps=cfg["rms_norm_eps"])
    spec = dict(theta=cfg["rope_theta"], scaling=None, window=None, bias=False, tied=cfg["tie_word_embeddings"])
    return w, spec, shape


class Model:
    def __init__(self, model_dir):
        self.w, self.spec, self.shape = load_stories(model_dir)
        self.cache = {}

    def logprobs(self, ids):
        key = tuple(ids)
        if key not in self.cache:
            z = forward(self.w, self.spec, np.array(ids), self.shape)[-1]
            m = z.max()
            self.cache[key] = z - (m + math.log(np.exp(z - m).sum()))
        return self.cache[key]


def beam_search(model, prompt, width, n, lp, early, max_tokens, stop_ids):
    ends = set([EOS] + stop_ids)
    beams = [([], 0.0)]  # (generated tokens, cumulative)
    hyps = []  # (score, cumulative, tokens, reason)
    margin = math.inf

    def add(tokens, cum, reason):
        nonlocal margin
        score = cum / (max(1, len(tokens)) ** lp)
        if len(hyps) < width:
            hyps.append((score, cum, tokens, reason))
            return
        worst = min(range(len(hyps)), key=lambda i: hyps[i][0])
        margin = min(margin, abs(score - hyps[worst][0]))
        if score > hyps[worst][0]:
            hyps[worst] = (score, cum, tokens, reason)

    while True:
        cands = []
        for b, (tokens, cum) in enumerate(beams):
            lps = model.logprobs(prompt + tokens)
            for t in range(len(lps)):
                cands.append((cum + lps[t], b, t))
        cands.sort(key=lambda c: -c[0])
        top = cands[:2 * width + 1]
        margin = min(margin, min(top[i][0] - top[i + 1][0] for i in range(len(top) - 1)))
        top = top[:2 * width]
        generated = len(beams[0][0]) + 1
        nxt = []
        for r, (cum, b, t) in enumerate(top):
            if len(nxt) == width:
                break
            if t in ends:
                if r < width:
                    add(beams[b][0] + [t], cum, "stop")
                continue
            nxt.append((beams[b][0] + [t], cum))
        if not nxt or generated >= max_tokens:
            if generated >= max_tokens:
                for tokens, cum in nxt:
                    add(tokens, cum, "length")
            break
        if len(hyps) >= width:
            if early is True:
                break
            worst = min(h[0] for h in hyps)
            length = max_tokens if (early == "never" and lp > 0) else generated
            bound = top[0][0] / (length ** lp)
            if worst != bound:  # equal only when the worst hypothesis is the best pair itself (lp 0)
                margin = min(margin, abs(worst - bound))
            if worst >= bound:
                break
        beams = nxt
    hyps.sort(key=lambda h: -h[0])
    for i in range(min(n, len(hyps) - 1)):
        margin = min(margin, hyps[i][0] - hyps[i + 1][0])
    return [dict(tokens=[int(t) for t in h[2]], cumulative_logprob=float(h[1]), score=float(h[0]), reason=h[3])
            for h in hyps[:n]], margin


def greedy(model, prompt, max_tokens):
    out = []
    for _ in range(max_tokens):
        out.append(int(np.argmax(model.logprobs(prompt + out))))
    return out


def main():
    model = Model(sys.argv[1])
    results = []
    for name, prompt_name, width, n, lp, early, max_tokens, stop_ids in CASES:
        prompt = PROMPTS[prompt_name]
        outputs, margin = beam_search(model, prompt, width, n, lp, early, max_tokens, stop_ids)
        results.append(dict(name=name, prompt=prompt, width=width, n=n, length_penalty=lp,
                            early_stopping=early if isinstance(early, str) else bool(early), max_tokens=max_tokens,
                            stop_token_ids=stop_ids, outputs=outputs, margin=float(margin),
                            greedy=greedy(model, prompt, max_tokens) if width == 1 else []))
    json.dump(dict(cases=results), sys.stdout)


if __name__ == "__main__":
    main()
