"""Fixtures and reference results for tests/core/test_tokenizer_json*.cpp.

  make OUT_DIR [SPM_MODEL]
                      trains two small byte-level BPE tokenizers with the
                      `tokenizers` library and writes them with the exact
                      pre-tokenizer, normalizer, decoder, post-processor and
                      added-token configuration of Llama 3 and Qwen2(.5):
                      OUT_DIR/llama3/tokenizer.json, OUT_DIR/qwen2/tokenizer.json;
                      with SPM_MODEL also OUT_DIR/llama2/tokenizer.json (convert-spm),
                      OUT_DIR/llama2_flags (the same with added tokens of every
                      flag) and OUT_DIR/llama2_metaspace (the layout transformers
                      writes with legacy=False: Metaspace, prepend_scheme first);
                      OUT_DIR/metaspace_{always,first,never}_{split,nosplit}:
                      small BPE models trained and saved with a Metaspace
                      pre-tokenizer and decoder of that kind, byte fallback, and
                      added tokens of every flag
  pretok BASE_JSON PRE OUT_JSON
                      BASE_JSON with the pre-tokenizer (and normalizer,
                      ignore_merges, BOS) that llama.cpp's tokenizer.ggml.pre
                      name PRE stands for, as a Sequence of Split (Isolated)
                      and ByteLevel (no regex of its own)
  convert-spm MODEL OUT_JSON
                      writes the Hugging Face form of a sentencepiece BPE model
                      (Llama 2's tokenizer.json layout), reading the model's
                      protobuf directly (no sentencepiece or transformers).
  gguf-json GGUF OUT_JSON
                      a byte-level BPE GGUF file's vocabulary (tokens, types,
                      merges) as a tokenizer.json with SmolLM2's own
                      pre-tokenizer (Digits with individual digits, then
                      ByteLevel with its regex), control tokens special
  reference TOKENIZER_JSON REQUEST_JSON OUT_JSON
                      REQUEST_JSON: {"texts": [...], "id_lists": [[...], ...]}
                      OUT_JSON: {"encode": [[ids without BOS], ...],
                                 "encode_bos": [[ids with the post-processor], ...],
                                 "decode": [text of each encode list, ...],
                                 "decode_ids": [text of each id list, ...]}
Decoding uses `tokenizers`' default (special tokens skipped).
"""
import json
import os
import random
import struct
import sys

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def training_corpus():
    """A seeded multilingual corpus: prose, code, CJK, emoji, numbers."""
    rng = random.Random(1234)
    english = ("the quick brown fox jumps over lazy dog and then it's time to sleep while we're "
               "reading books about tokenizers they'll never know what I've done today you'd say "
               "Hello World THE END Once upon a time there was a little girl named Lily").split()
    code = ["def main():\n    return 0\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
            "#include <vector>\nint main() { std::vector<int> v; }\n", "if x == None:\n    raise ValueError('bad')\n",
            "SELECT name, count(*) FROM users WHERE id > 42;\n", "const f = (a, b) => a + b;  // add\n"]
    cjk = ["你好世界", "这是一个测试", "我们今天去公园", "日本語のテキスト", "こんにちは", "한국어 문장입니다", "東京都"]
    other = ["café", "naïve", "Zürich", "Ångström", "Привет мир", "Γειά σου", "مرحبا بالعالم", "नमस्ते दुनिया",
             "emoji 😀🎉👍", "👨‍👩‍👧", "🇫🇷", "e\u0301", "½ ² ③"]
    def syllable_word():
        return "".join(rng.choice("bcdfghklmnprstvwz") + rng.choice("aeiouy") + rng.choice(["", "n", "r", "st", "ng"])
                       for _ in range(rng.randint(1, 4)))
    def cyrillic_word():
        return "".join(rng.choice("бвгдклмнпрст") + rng.choice("аеиоуя") for _ in range(rng.randint(1, 4)))
    def cjk_run():
        return "".join(chr(0x4E00 + int(rng.expovariate(1 / 300)) % 2000) for _ in range(rng.randint(2, 8)))
    lines = []
    for _ in range(12000):
        kind = rng.random()
        if kind < 0.12:
            lines.append(" ".join(syllable_word() for _ in range(rng.randint(3, 12))).capitalize() + ".")
        elif kind < 0.18:
            lines.append(" ".join(cyrillic_word() for _ in range(rng.randint(3, 8))))
        elif kind < 0.24:
            lines.append(cjk_run())
        elif kind < 0.45:
            lines.append(" ".join(rng.choice(english) for _ in range(rng.randint(3, 14))) + rng.choice([".", "!", "?", ",", ""]))
        elif kind < 0.6:
            lines.append(rng.choice(code))
        elif kind < 0.75:
            lines.append("".join(rng.choice(cjk) for _ in range(rng.randint(1, 4))))
        elif kind < 0.9:
            lines.append(" ".join(rng.choice(other) for _ in range(rng.randint(1, 5))))
        else:
            lines.append(str(rng.randint(0, 10 ** rng.randint(1, 12))) + " " + str(round(rng.random() * 1000, 3)))
    return lines


def train(pattern, normalizer, vocab_size):
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(training_corpus(), trainer)
    return tok


# Added tokens with each flag (tests/data/tokenizer_corpus.json uses them).
def flagged_tokens():
    return [AddedToken("<sp>", special=True, normalized=False),
            AddedToken("[L]", special=True, lstrip=True, normalized=False),
            AddedToken("[R]", special=False, rstrip=True, normalized=False),
            AddedToken("word", special=False, single_word=True, normalized=False),
            AddedToken("<n x>", special=False, normalized=True),
            AddedToken("[LR]", special=True, lstrip=True, rstrip=True, normalized=True)]


def add_flagged_tokens(tok):
    for t in flagged_tokens():
        (tok.add_special_tokens if t.special else tok.add_tokens)([t])


METASPACE_SCHEMES = ["always", "first", "never"]


def make_metaspace(out_dir, scheme, split):
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme, split=split)
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tok.train_from_iterator(training_corpus(), trainer)
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    for b in range(256):
        vocab.setdefault("<0x%02X>" % b, len(vocab))
    tok = Tokenizer.from_str(json.dumps(j))
    add_flagged_tokens(tok)
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme=scheme, split=split)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    name = "metaspace_%s_%s" % (scheme, "split" if split else "nosplit")
    write(out_dir, name, json.loads(tok.to_str()), {"bos_token": "<s>", "eos_token": "</s>"})


# Regexes of llama.cpp's pre-tokenizer names (its src/llama-vocab.cpp), by
# group; the names of a group are aliases.
GPT2_WORDS = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3_ADAPTED = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_ADAPTED = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
BLOOM = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
DEEPSEEK_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
DEEPSEEK_LETTERS = (
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
    "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f"
    "\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
    "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d"
    "\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4"
    "\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d"
    "\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a"
    "\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2"
    "\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+")
TEKKEN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?"
          r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
# (names, regexes, options): ignore_merges, nfc (normalizer), no_bos.
PRE_TOKENIZERS = [
    (["llama3", "llama-v3", "llama-bpe", "falcon3"], [LLAMA3_ADAPTED], {"ignore_merges"}),
    (["dbrx", "smaug-bpe"], [LLAMA3_ADAPTED], set()),
    (["qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"], [QWEN2_ADAPTED], {"nfc"}),
    (["deepseek-llm"], ["[\r\n]", DEEPSEEK_LETTERS, "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
                        "\\s+$", DEEPSEEK_CJK, "\\p{N}+"], set()),
    (["deepseek-v3"], ["\\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
                       r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
                       r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"], set()),
    (["deepseek-coder"], ["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", DEEPSEEK_CJK, "\\p{N}"], set()),
    (["falcon"], [r"[\p{P}\$\+<=>\^~\|`]+", GPT2_WORDS, "[0-9][0-9][0-9]"], set()),
    (["starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"], ["\\p{N}", GPT2_WORDS], set()),
    (["gpt2", "gpt-2", "mpt", "olmo", "jais", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es",
      "jina-v2-de", "jina-v2-code", "roberta-bpe"], [GPT2_WORDS], set()),
    (["poro-chat", "bloom", "gpt3-finnish"], [BLOOM], set()),
    (["chatglm-bpe"], [LLAMA3_ADAPTED], {"no_bos"}),
    (["viking"], [BLOOM, "\\p{N}"], set()),
    (["tekken"], [TEKKEN], {"ignore_merges"}),
    (["chameleon"], ["<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", "\\p{N}",
                     "[\\p{P}!-/:-@\\[-`{-~]", GPT2_WORDS], set()),
    (["default"], [r"[\p{P}\$\+<=>\^~\|]+", GPT2_WORDS, "\\p{N}+"], set()),
]


def pretok(base_json, pre, out_json):
    names, regexes, options = next(g for g in PRE_TOKENIZERS if pre in g[0])
    j = json.load(open(base_json, encoding="utf-8"))
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False} for r in regexes] + [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    j["normalizer"] = {"type": "NFC"} if "nfc" in options else None
    j["model"]["ignore_merges"] = "ignore_merges" in options
    if "no_bos" in options:
        j["post_processor"] = None
    os.makedirs(os.path.dirname(out_json), exist_ok=True)
    with open(out_json, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    Tokenizer.from_file(out_json)


def gguf_json(gguf_file, out_json):
    import gguf
    reader = gguf.GGUFReader(gguf_file)

    def array(name):
        field = reader.fields[name]
        return [field.parts[i] for i in field.data]
    tokens = [bytes(p).decode("utf-8") for p in array("tokenizer.ggml.tokens")]
    types = [int(p[0]) for p in array("tokenizer.ggml.token_type")]
    merges = [bytes(p).decode("utf-8") for p in array("tokenizer.ggml.merges")]
    vocab = {t: i for i, t in enumerate(tokens)}  # added tokens too, as SmolLM2's file has them
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges]))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tok.post_processor = processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True)
    j = json.loads(tok.to_str())
    j["added_tokens"] = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": kind == 3}
                         for i, (t, kind) in enumerate(zip(tokens, types)) if kind in (3, 4)]
    os.makedirs(os.path.dirname(out_json), exist_ok=True)
    with open(out_json, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    Tokenizer.from_file(out_json)


def make_llama3(out_dir):
    tok = train(LLAMA3_PATTERN, None, 4000)
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
                "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
                "<|eot_id|>", "<|python_tag|>"]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    j = json.loads(tok.to_str())
    j["model"]["ignore_merges"] = True  # as Llama 3 ships it
    write(out_dir, "llama3", j, {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"})


def make_qwen2(out_dir):
    tok = train(QWEN2_PATTERN, normalizers.NFC(), 3500)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False)
                            for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|fim_prefix|>"]])
    # Qwen2.5 ships these as added tokens that are not special: decode keeps them.
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in ["<tool_call>", "</tool_call>"]])
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    j = json.loads(tok.to_str())
    # As Qwen2 ships it (the Python constructor keeps its own defaults).
    j["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    write(out_dir, "qwen2", j, {"bos_token": None, "eos_token": "<|im_end|>"})


def write(out_dir, name, tokenizer_json, tokenizer_config):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json, f, ensure_ascii=False)
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config, f)
    # Round trip through the library: the file must load as written.
    Tokenizer.from_file(os.path.join(d, "tokenizer.json"))


def read_varint(buf, pos):
    value, shift = 0, 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def spm_pieces(model_file):
    """(piece, score, type) of a sentencepiece ModelProto: field 1 holds the
    pieces, each with piece=1 (string), score=2 (float), type=3 (enum)."""
    buf = open(model_file, "rb").read()
    pos, pieces = 0, []
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = read_varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            n, pos = read_varint(buf, pos)
            if field == 1:
                sub, p, piece, score, kind = buf[pos:pos + n], 0, "", 0.0, 1
                while p < len(sub):
                    k, p = read_varint(sub, p)
                    if k == (1 << 3 | 2):
                        m, p = read_varint(sub, p)
                        piece = sub[p:p + m].decode("utf-8")
                        p += m
                    elif k == (2 << 3 | 5):
                        score = struct.unpack("<f", sub[p:p + 4])[0]
                        p += 4
                    elif k == (3 << 3 | 0):
                        kind, p = read_varint(sub, p)
                    else:
                        raise ValueError("unexpected field in SentencePiece")
                pieces.append((piece, score, kind))
            pos += n
        else:
            raise ValueError("unexpected wire type")
    return pieces


def convert_spm(model_file, out_json, legacy=True, flags=False):
    """The layout Hugging Face ships for Llama 2 (legacy): merges are every
    split of a piece into two pieces, ordered by the merged piece's score.
    legacy=False: as transformers writes it without legacy (no normalizer;
    Metaspace with prepend_scheme first, not split). flags: with the added
    tokens of flagged_tokens()."""
    pieces = spm_pieces(model_file)
    vocab = {p: i for i, (p, _, _) in enumerate(pieces)}
    merges = []
    for merged, score, _ in pieces:
        local = []
        for k in range(1, len(merged)):
            left, right = merged[:k], merged[k:]
            if left in vocab and right in vocab:
                local.append((left, right, score))
        local.sort(key=lambda m: (vocab[m[0]], vocab[m[1]]))
        merges.extend(local)
    merges.sort(key=lambda m: m[2], reverse=True)
    unk = next(p for p, _, kind in pieces if kind == 2)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(a, b) for a, b, _ in merges], unk_token=unk, fuse_unk=True,
                               byte_fallback=True))
    controls = [p for p, _, kind in pieces if kind in (2, 3)]
    tok.add_special_tokens([AddedToken(p, special=True, normalized=False) for p in controls])
    if legacy:
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=False)
    if flags:
        add_flagged_tokens(tok)
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(" ", 1, 0)])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)])
    os.makedirs(os.path.dirname(out_json), exist_ok=True)
    tok.save(out_json)
    with open(os.path.join(os.path.dirname(out_json), "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>"}, f)


def reference(tokenizer_json, request_json, out_json):
    tok = Tokenizer.from_file(tokenizer_json)
    request = json.load(open(request_json, encoding="utf-8"))
    out = {"encode": [], "encode_bos": [], "decode": [], "decode_ids": []}
    for text in request["texts"]:
        ids = tok.encode(text, add_special_tokens=False).ids
        out["encode"].append(ids)
        out["encode_bos"].append(tok.encode(text, add_special_tokens=True).ids)
        out["decode"].append(tok.decode(ids))
    for ids in request.get("id_lists", []):
        out["decode_ids"].append(tok.decode(ids))
    with open(out_json, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make_llama3(sys.argv[2])
        make_qwen2(sys.argv[2])
        for scheme in METASPACE_SCHEMES:
            for split in (True, False):
                make_metaspace(sys.argv[2], scheme, split)
        if len(sys.argv) > 3:
            convert_spm(sys.argv[3], os.path.join(sys.argv[2], "llama2", "tokenizer.json"))
            convert_spm(sys.argv[3], os.path.join(sys.argv[2], "llama2_flags", "tokenizer.json"), flags=True)
            convert_spm(sys.argv[3], os.path.join(sys.argv[2], "llama2_metaspace", "tokenizer.json"), legacy=False)
    elif sys.argv[1] == "convert-spm":
        convert_spm(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "gguf-json":
        gguf_json(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "pretok":
        pretok(sys.argv[2], sys.argv[3], sys.argv[4])
    elif sys.argv[1] == "reference":
        reference(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit("usage: make OUT_DIR | convert-spm MODEL OUT_JSON | pretok BASE_JSON PRE OUT_JSON | gguf-json GGUF OUT"
                 " | reference TOKENIZER_JSON REQUEST OUT")
