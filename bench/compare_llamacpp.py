#!/usr/bin/env python3
"""llmk against llama.cpp on identical llama-110m weights, precision pairs
interleaved in one run (issues 17 and 37).

  compare_llamacpp.py --llamacpp LLAMA_CPP_BUILD [--threads 2] [--rounds 3]
                      [--config CONFIG.json] [--seqs 0]

Given a llama.cpp build folder (llama-bench, llama-batched-bench and
llama-quantize in it or in its bin/), it
  1. writes llmk's llama-110m dummy weights (bench/write_dummy_weights.py) as
     a safetensors folder and an F32 GGUF, and makes BF16, Q8_0, Q4_0, Q4_K,
     Q5_K and Q6_K GGUFs from it with llama-quantize --pure (every matrix in
     the named type, as llmk's int8 and int4 plugins quantize every linear
     layer), and a Q4_K_M (llama-quantize's own mix). Pairs f32, bf16, int8
     and int4 give llmk the safetensors folder with a plugin of that
     precision; the same-file pairs (q8_0, q4_k, q5_k, q6_k, q4_k_m) give
     both engines the same GGUF file, which llmk computes on as stored
     (linear.gguf);
  2. checks that llmk gives the same 64 greedy tokens from its built-in dummy
     weights, the safetensors folder and the F32 GGUF;
  3. measures, for each pair and round, both engines back to back (which one
     goes first alternates between rounds), with the same thread count:
       batch-1 decode tok/s         llama-bench tg (from an empty context);
                                    llmk bench, one request of N tokens
                                    after a BOS, 1 / mean TPOT
       prompt-length prefill tok/s  llama-bench pp; llmk bench, one request
                                    at a time, prompt tokens / median TTFT
       aggregate decode at 32 seqs  llama-batched-bench S_TG (every prompt
                                    prefilled in one batch first, then
                                    decode alone); llmk bench, 32 requests
                                    at once with a step budget that holds
                                    every prompt (the same order: one
                                    prefill step, then decode steps), the
                                    sum over requests of
                                    (output - 1) / (e2e - TTFT)
       the same, default scheduler  llmk bench with the default budget (512
                                    tokens a step): prompts are prefilled in
                                    chunks beside the first requests'
                                    decodes, which that slows; llmk only
       whole batch (32 x (P + N))   llama-batched-bench T; llmk bench's
                                    duration with the default scheduler
     llmk runs warm (`llmk bench --warmup`), with an f16 KV cache in kv.paged
     (llama.cpp's default KV type is f16); llama.cpp runs with its flash
     attention (-fa, unless --no-flash-attn), its faster CPU attention at
     32 sequences (about 2x on this project's machine, docs/PERFORMANCE.md). Both engines use OpenMP and
     inherit the environment: on a machine shared with other work, run with
     OMP_WAIT_POLICY=passive (spinning barriers collapse both under load).
     --config runs another Llama shape the same way (a config.json, e.g.
     bench/configs/tinyllama-1.1b.json: weights of a realistic size, files
     named after the config); --seqs 0 leaves out the batched measures (at
     a billion parameters and more they take most of a round).
  4. prints the table (medians over rounds, llmk / llama.cpp and their
     ratio), the CPU model and flags, and writes every raw figure as JSON.

W8A8 int8 keeps o_proj in float by default and so reads more weight bytes
per token than Q8_0; the row "int8, float_layers []" is the plugin's
documented option that quantizes o_proj too and reads no more.
"""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (pair, llmk label, llmk linear plugin, its options, GGUF type, llama.cpp label,
#  what llmk reads: the safetensors folder, or the very GGUF file llama.cpp reads)
VARIANTS = [
    ("f32", "F32", "linear.dense", {}, "F32", "F32", "hf"),
    ("bf16", "BF16 compute", "linear.dense", {"weight_dtype": "bf16", "bf16_activations": True}, "BF16", "BF16", "hf"),
    ("int8", "W8A8 int8 (o_proj f32, default)", "linear.int8", {}, "Q8_0", "Q8_0", "hf"),
    ("int8", "W8A8 int8, float_layers []", "linear.int8", {"float_layers": []}, "Q8_0", "Q8_0", "hf"),
    ("int4", "int4 (group 128)", "linear.int4", {}, "Q4_0", "Q4_0", "hf"),
    # The same GGUF file in both engines; llmk computes on its blocks (linear.gguf, its default for them).
    ("q8_0", "the Q8_0 file", "linear.dense", {}, "Q8_0", "Q8_0", "gguf"),
    ("q4_k", "the Q4_K file", "linear.dense", {}, "Q4_K", "Q4_K", "gguf"),
    ("q5_k", "the Q5_K file", "linear.dense", {}, "Q5_K", "Q5_K", "gguf"),
    ("q6_k", "the Q6_K file", "linear.dense", {}, "Q6_K", "Q6_K", "gguf"),
    ("q4_k_m", "the Q4_K_M file", "linear.dense", {}, "Q4_K_M", "Q4_K_M", "gguf"),
]
GGUF_TYPES = ("BF16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K", "Q4_K_M")

INTERESTING_FLAGS = re.compile(r"^(avx2|fma|f16c|avx512.*|amx.*|avx_vnni.*|avx_ne_convert|sha_ni)$")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, **kw):
    """Runs cmd, returns its stdout; on failure shows the tail of its output."""
    log("$ " + " ".join(str(c) for c in cmd))
    p = subprocess.run([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout


def find_tool(build, name):
    for cand in (build / "bin" / name, build / name):
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    sys.exit(f"{name} is not in {build} or {build / 'bin'}: build llama.cpp's tools there first")


def cpu_info():
    model, flags = "unknown", []
    try:
        out = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name":
                model = value.strip()
            elif key.strip() == "Flags":
                flags = [f for f in value.split() if INTERESTING_FLAGS.match(f)]
    except OSError:
        pass
    return {"model": model, "flags": flags, "cores": os.cpu_count(), "load_average": os.getloadavg()}


def llamacpp_commit(build, bench_json):
    commit = bench_json.get("build_commit", "")
    src = None
    cache = build / "CMakeCache.txt"
    if cache.is_file():
        m = re.search(r"^CMAKE_HOME_DIRECTORY:INTERNAL=(.*)$", cache.read_text(), re.M)
        if m:
            src = Path(m.group(1))
    if src is not None and (src / ".git").exists():
        p = subprocess.run(["git", "-C", str(src), "log", "-1", "--format=%H %cs"], stdout=subprocess.PIPE, text=True)
        if p.returncode == 0 and p.stdout.strip():
            return p.stdout.strip()
    return commit


# ---- weights -----------------------------------------------------------------

def prepare_weights(work, quantize, threads, tokenizer, name, config, types):
    hf, f32 = work / "hf", work / f"{name}-f32.gguf"
    if not (hf / "model.safetensors").is_file() or not f32.is_file():
        cmd = [sys.executable, ROOT / "bench/write_dummy_weights.py", work, "--gguf-name", f32.name]
        if tokenizer:
            cmd += ["--tokenizer", tokenizer]
        if config:
            cmd += ["--config", config]
        run(cmd)
    ggufs = {"F32": f32}
    for qtype in types:
        out = work / f"{name}-{qtype.lower()}.gguf"
        if not out.is_file():
            # --pure: every matrix in the named type; a mix (Q4_K_M) is llama-quantize's own recipe.
            pure = [] if qtype.endswith("_M") else ["--pure"]
            run([quantize, *pure, f32, out, qtype, threads])
        ggufs[qtype] = out
    return hf, ggufs


def verify_weights(llmk, hf, f32_gguf, work, preset):
    """Same greedy tokens from llmk's own dummy weights, the safetensors folder
    and the F32 GGUF: the files hold llmk's weights (a random model's top-two
    margins are small, so a wrong tensor changes the tokens early)."""
    batch = work / "verify.jsonl"
    batch.write_text(json.dumps({"prompt": "Once upon a time", "max_tokens": 64, "ignore_eos": True}) + "\n")
    common = ["generate", "--threads", "1", "--batch-file", batch, "--temperature", "0"]
    sources = {
        "dummy": ["--load-format", "dummy", "--preset", preset, "--tokenizer", hf / "tokenizer.model"],
        "safetensors": ["--model", hf],
        "gguf": ["--model", f32_gguf, "--tokenizer", hf / "tokenizer.model"],
    }
    results = {}
    for name, args in sources.items():
        line = run([llmk, *common, *args]).strip().splitlines()[-1]
        j = json.loads(line)
        j.pop("timings", None)
        j.pop("id", None)
        results[name] = j
    same = results["dummy"] == results["safetensors"] == results["gguf"]
    ids = results["safetensors"].get("token_ids")
    log(f"weights check: dummy, safetensors and GGUF give {'the same' if same else 'DIFFERENT'} outputs ({ids})")
    if not same:
        sys.exit("the written weights are not llmk's dummy weights: " + json.dumps(results)[:2000])
    return {"identical": same, "token_ids": ids}


# ---- llama.cpp -----------------------------------------------------------------

def llama_bench(tool, model, threads, prompt_len, decode_len, reps, flash_attn):
    out = run([tool, "-m", model, "-t", threads, "-p", prompt_len, "-n", decode_len, "-r", reps, "-o", "json",
               "-fa", int(flash_attn)])
    tests = json.loads(out)
    res = {"raw": tests}
    for t in tests:
        if t.get("n_prompt", 0) > 0 and t.get("n_gen", 0) == 0:
            res["prefill_tok_s"] = t["avg_ts"]
        elif t.get("n_gen", 0) > 0 and t.get("n_prompt", 0) == 0:
            res["decode_tok_s"] = t["avg_ts"]
    return res


def llama_batched(tool, model, threads, prompt_len, decode_len, num_seqs, flash_attn):
    ctx = num_seqs * (prompt_len + decode_len) + 16
    out = run([tool, "-m", model, "-t", threads, "-c", ctx, "-b", 2048, "-ub", 512, "-npp", prompt_len,
               "-ntg", decode_len, "-npl", num_seqs, "--output-format", "jsonl"] + (["-fa"] if flash_attn else []))
    rows = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    if not rows:
        sys.exit("llama-batched-bench printed no JSON line:\n" + out[-2000:])
    r = rows[-1]
    return {"aggregate_decode_tok_s": r["speed_tg"], "batch_s": r["t"], "batch_prefill_tok_s": r["speed_pp"], "raw": r}


# ---- llmk -------------------------------------------------------------------------

def decode_rate_sum(j):
    """The sum over requests of their decode rates, (output - 1) / (e2e - TTFT)."""
    rate = 0.0
    for r in j["requests"]:
        if r["output_tokens"] > 1 and r["e2e_s"] > r["ttft_s"]:
            rate += (r["output_tokens"] - 1) / (r["e2e_s"] - r["ttft_s"])
    return rate


def llmk_bench(llmk, hf, threads, plugin, options, workload, json_path, extra_sets=None):
    sets = {
        "plugins.linear": plugin,
        "plugins.linear_options": json.dumps(options, separators=(",", ":")),
        "plugins.kv_allocator": "kv.paged",
        "kv_cache.dtype": "f16",
        "kv_cache.capacity_tokens": 16384,
        "kv_cache.prefault": "true",
        "kv_cache.enable_prefix_caching": "false",
    }
    sets.update(extra_sets or {})
    cmd = [llmk, "bench", "--model", hf, "--threads", threads, "--no-progress", "--json", json_path]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    cmd += workload
    run(cmd)
    return json.loads(Path(json_path).read_text())


def llmk_measure(llmk, hf, threads, plugin, options, a, tmp):
    res = {}
    # Prefill: one prompt at a time, a single output token.
    j = llmk_bench(llmk, hf, threads, plugin, options,
                   ["--num-prompts", 4, "--max-concurrency", 1, "--input-len", a.prompt_len, "--output-len", 1,
                    "--warmup", 1], tmp / "prefill.json")
    ttft = statistics.median(r["ttft_s"] for r in j["requests"])
    res["prefill_tok_s"] = a.prompt_len / ttft
    res["prefill_ttft_s"] = ttft
    # Batch-1 decode: a BOS, then decode_len tokens.
    j = llmk_bench(llmk, hf, threads, plugin, options,
                   ["--num-prompts", 2, "--max-concurrency", 1, "--input-len", 1, "--output-len", a.decode_len,
                    "--warmup", 1], tmp / "decode.json")
    tpot = j["tpot_s"]["mean"]
    res["decode_tok_s"] = 1.0 / tpot
    res["decode_tpot_s"] = tpot
    if a.seqs == 0:
        return res
    # 32 sequences at once: prompt_len prompt tokens, decode_len outputs each.
    batch = ["--num-prompts", a.seqs, "--max-concurrency", a.seqs, "--input-len", a.prompt_len,
             "--output-len", a.decode_len, "--warmup", 2]
    j = llmk_bench(llmk, hf, threads, plugin, options, batch, tmp / "batch.json")
    res["aggregate_decode_interleaved_tok_s"] = decode_rate_sum(j)
    res["batch_s"] = j["duration_s"]
    res["batch_output_tok_s"] = j["output_tokens_per_s"]
    res["mean_batch_seqs"] = j.get("server", {}).get("mean_batch_seqs")
    # Again with every prompt in one step, as llama-batched-bench orders it:
    # each request's decode then runs beside decodes only.
    j = llmk_bench(llmk, hf, threads, plugin, options, batch, tmp / "batch_prefill_first.json",
                   {"scheduler.max_num_batched_tokens": max(512, a.seqs * a.prompt_len)})
    res["aggregate_decode_tok_s"] = decode_rate_sum(j)
    res["prefill_first_batch_s"] = j["duration_s"]
    return res


# ---- report -------------------------------------------------------------------------

def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(v, digits=0):
    return "-" if v is None else f"{v:.{digits}f}"


def spread(values, digits=0):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    lo, hi = min(values), max(values)
    return fmt(lo, digits) if len(values) == 1 or fmt(lo, digits) == fmt(hi, digits) else f"{fmt(lo, digits)}-{fmt(hi, digits)}"


def table(results, a):
    # (llmk's key, column, lower is better, llama.cpp's key): llmk's decode
    # rate with chunked prefill beside it is set against the same S_TG.
    metrics = [("decode_tok_s", "batch-1 decode tok/s", False, "decode_tok_s"),
               ("prefill_tok_s", f"{a.prompt_len}-token prefill tok/s", False, "prefill_tok_s"),
               ("aggregate_decode_tok_s", f"aggregate decode at {a.seqs} seqs tok/s", False,
                "aggregate_decode_tok_s"),
               ("aggregate_decode_interleaved_tok_s", "the same, llmk's default scheduler", False,
                "aggregate_decode_tok_s"),
               ("batch_s", f"whole batch ({a.seqs} x {a.prompt_len}+{a.decode_len}) s", True, "batch_s")]
    if a.seqs == 0:
        metrics = metrics[:2]
    head = "| precision, llmk / llama.cpp |"
    sep = "|---|"
    for _, name, lower_better, _ in metrics:
        head += f" {name} | {'llama.cpp / llmk' if lower_better else 'ratio'} |"
        sep += "---|---|"
    lines = [head, sep]
    for v in results:
        row = f"| {v['llmk_label']} / {v['llamacpp_label']} |"
        for key, _, lower_better, their_key in metrics:
            mine = [r.get(key) for r in v["llmk"]]
            theirs = [r.get(their_key) for r in v["llamacpp"]]
            m, t = med(mine), med(theirs)
            digits = 2 if lower_better else 0
            ratio = None
            if m and t:
                ratio = t / m if lower_better else m / t
            row += f" {spread(mine, digits)} / {spread(theirs, digits)} | {fmt(ratio, 2)}x |"
        lines.append(row)
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--llamacpp", type=Path, required=True, help="llama.cpp build folder")
    ap.add_argument("--llmk", type=Path, default=ROOT / "build/bin/llmk", help="the llmk binary")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds over all pairs")
    ap.add_argument("--pairs", default="f32,bf16,int8,int4",
                    help="subset of f32,bf16,int8,int4 and the same-file pairs q8_0,q4_k,q5_k,q6_k,q4_k_m")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--decode-len", type=int, default=128)
    ap.add_argument("--seqs", type=int, default=32, help="concurrent sequences of the batched measure (0: none)")
    ap.add_argument("--reps", type=int, default=3, help="llama-bench repetitions per round (it averages them)")
    ap.add_argument("--config", type=Path,
                    help="a Llama config.json to run instead of llama-110m (e.g. bench/configs/tinyllama-1.1b.json)")
    ap.add_argument("--work", type=Path,
                    help="weights and scratch files, kept between runs (default build/compare-llamacpp, "
                         "with --config build/compare-llamacpp-NAME)")
    ap.add_argument("--tokenizer", type=Path, help="tokenizer.model for the GGUF vocabulary")
    ap.add_argument("--json", type=Path, help="raw results (default WORK/results.json)")
    ap.add_argument("--no-flash-attn", action="store_true",
                    help="run llama.cpp without its flash-attention path (-fa, on by default)")
    ap.add_argument("--skip-verify", action="store_true", help="skip the identical-weights check")
    a = ap.parse_args()

    build = a.llamacpp.resolve()
    tools = {n: find_tool(build, n) for n in ("llama-bench", "llama-batched-bench", "llama-quantize")}
    if not a.llmk.is_file():
        sys.exit(f"no llmk binary at {a.llmk} (build the llmk target, or pass --llmk)")
    if a.seqs < 0:
        sys.exit(f"--seqs must be 0 (no batched measures) or more, got {a.seqs}")
    if a.config and not a.config.is_file():
        sys.exit(f"--config: no such file {a.config}")
    name = a.config.stem if a.config else "llama-110m"
    a.work = a.work or ROOT / ("build/compare-llamacpp" + (f"-{name}" if a.config else ""))
    pairs = a.pairs.split(",")
    for p in pairs:
        if p not in {v[0] for v in VARIANTS}:
            sys.exit(f"--pairs: unknown pair '{p}' (" + ", ".join(dict.fromkeys(v[0] for v in VARIANTS)) + ")")
    a.work.mkdir(parents=True, exist_ok=True)
    tmp = a.work / "tmp"
    tmp.mkdir(exist_ok=True)

    cpu = cpu_info()
    types = [t for t in GGUF_TYPES if any(v[0] in pairs and v[4] == t for v in VARIANTS)]  # those the pairs read
    hf, ggufs = prepare_weights(a.work, tools["llama-quantize"], a.threads, a.tokenizer, name,
                                a.config.resolve() if a.config else None, types)
    check = None if a.skip_verify else verify_weights(a.llmk, hf, ggufs["F32"], a.work,
                                                      str(a.config.resolve()) if a.config else "llama-110m")

    variants = [dict(pair=p, llmk_label=ll, plugin=pl, options=o, gguf=str(ggufs[g]), llamacpp_label=lc,
                     llmk_model=str(hf) if src == "hf" else str(ggufs[g]), llmk=[], llamacpp=[])
                for p, ll, pl, o, g, lc, src in VARIANTS if p in pairs]
    llamacpp_cache = {}  # (round, gguf) -> figures: int8's two llmk rows share one llama.cpp run per round
    commit = ""
    started = time.time()
    for rnd in range(a.rounds):
        for v in variants:
            order = ["llmk", "llamacpp"] if (rnd % 2 == 0) else ["llamacpp", "llmk"]
            for engine in order:
                if engine == "llmk":
                    log(f"round {rnd + 1}: llmk {v['llmk_label']}")
                    fig = llmk_measure(a.llmk, v["llmk_model"], a.threads, v["plugin"], v["options"], a, tmp)
                    fig["round"] = rnd + 1
                    v["llmk"].append(fig)
                    continue
                key = (rnd, v["gguf"])
                if key not in llamacpp_cache:
                    log(f"round {rnd + 1}: llama.cpp {v['llamacpp_label']}")
                    b = llama_bench(tools["llama-bench"], v["gguf"], a.threads, a.prompt_len, a.decode_len, a.reps,
                                    not a.no_flash_attn)
                    c = {"aggregate_decode_tok_s": None, "batch_s": None, "raw": None}
                    if a.seqs > 0:
                        c = llama_batched(tools["llama-batched-bench"], v["gguf"], a.threads, a.prompt_len,
                                          a.decode_len, a.seqs, not a.no_flash_attn)
                    if b["raw"]:
                        commit = commit or llamacpp_commit(build, b["raw"][0])
                    fig = {"decode_tok_s": b.get("decode_tok_s"), "prefill_tok_s": b.get("prefill_tok_s"),
                           "aggregate_decode_tok_s": c["aggregate_decode_tok_s"], "batch_s": c["batch_s"],
                           "round": rnd + 1, "llama_bench": b["raw"], "batched_bench": c["raw"]}
                    llamacpp_cache[key] = fig
                v["llamacpp"].append(llamacpp_cache[key])

    text = table(variants, a)
    header = [f"model: {name}" + (f" ({a.config})" if a.config else "") + ", dummy weights, identical in both engines",
              f"CPU: {cpu['model']} ({cpu['cores']} logical cores), flags: {' '.join(cpu['flags'])}",
              f"load average at start: {' '.join(f'{x:.2f}' for x in cpu['load_average'])}, "
              f"at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
              f"llama.cpp: {commit or 'unknown commit'} ({build})",
              f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')} for both engines; "
              f"llama.cpp flash attention {'off' if a.no_flash_attn else 'on (-fa)'}",
              f"threads {a.threads}, rounds {a.rounds} (interleaved; cells give the range over rounds, "
              f"ratios compare medians), {time.time() - started:.0f} s"]
    print("\n".join(header))
    print()
    print(text)
    out = a.json or (a.work / "results.json")
    out.write_text(json.dumps({"cpu": cpu, "llamacpp_build": str(build), "llamacpp_commit": commit,
                               "threads": a.threads, "rounds": a.rounds,
                               "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                               "llamacpp_flash_attn": not a.no_flash_attn, "prompt_len": a.prompt_len,
                               "decode_len": a.decode_len, "seqs": a.seqs, "model": name, "weights_check": check,
                               "platform": platform.platform(), "variants": variants, "table": text}, indent=1))
    log(f"raw figures: {out}")


if __name__ == "__main__":
    main()
