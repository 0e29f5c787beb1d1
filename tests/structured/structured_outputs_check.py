"""Structured outputs through the openai SDK against one `llmk serve`.

    structured_outputs_check.py --llmk BIN --model GGUF

Starts the server, then: every schema under tests/structured/schemas as a strict
json_schema response_format (greedy, and one sampled with a seed), each
reply validated with the jsonschema package; json_object replies parse as
JSON objects (or, cut by max_tokens, begin one); a regex's replies match it (re.fullmatch); an EBNF grammar's
and a choice's replies are among its texts; bad grammars get a 400 that
names the field, and the server keeps serving. Prints one line per failure
and exits 1 if there was any.
"""
import argparse
import concurrent.futures
import glob
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import jsonschema
import openai

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_TOKENS = 160
failures = []


def fail(what):
    failures.append(what)
    print("FAIL:", what, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(llmk, model, port, log):
    args = [llmk, "serve", "--model", model, "--http", f"127.0.0.1:{port}", "--no-zmq",
            "--set", "executor.num_threads=1", "--set", "kv_cache.capacity_tokens=16384"]
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llmk serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("llmk serve did not become ready in 120 s")


def chat(client, prompt, **kwargs):
    kwargs.setdefault("temperature", 0)
    kwargs.setdefault("max_tokens", MAX_TOKENS)
    reply = client.chat.completions.create(model=client.model_name, messages=[{"role": "user", "content": prompt}],
                                           **kwargs)
    return reply.choices[0].message.content, reply.choices[0].finish_reason


def check_schema(client, path, **sampling):
    name = os.path.splitext(os.path.basename(path))[0]
    with open(path) as f:
        schema = json.load(f)
    prompt = f"Give an example of a {name.split('_', 1)[1].replace('_', ' ')} as JSON."
    text, finish = chat(client, prompt, response_format={
        "type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}, **sampling)
    try:
        value = json.loads(text)
        jsonschema.validate(value, schema)
    except (ValueError, jsonschema.ValidationError) as e:
        fail(f"{name} {sampling}: {text!r} (finish {finish}): {e}")
        return
    if finish != "stop":
        fail(f"{name}: finish_reason {finish} for a complete value {text!r}")


def expect_400(client, what, field, **kwargs):
    try:
        chat(client, "Say something.", max_tokens=8, **kwargs)
    except openai.BadRequestError as e:
        message = str(e)
        error = e.body if isinstance(e.body, dict) else {}
        error = error.get("error", error)
        if field not in message:
            fail(f"{what}: the 400 does not name '{field}': {message}")
        elif error.get("param") != field:
            fail(f"{what}: the 400's param is {error.get('param')!r}, not '{field}': {message}")
        return
    except Exception as e:  # noqa: BLE001 - any other outcome is the failure being reported
        fail(f"{what}: expected a 400, got {type(e).__name__}: {e}")
        return
    fail(f"{what}: expected a 400, got a reply")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--llmk", required=True)
    p.add_argument("--model", required=True)
    a = p.parse_args()
    port = free_port()
    with tempfile.TemporaryFile() as log:
        proc = start_server(a.llmk, a.model, port, log)
        try:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="-", max_retries=0, timeout=300)
            client.model_name = client.models.list().data[0].id
            run_checks(client)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            if failures:
                log.seek(0)
                sys.stdout.write(log.read().decode(errors="replace")[-4000:])
    print(f"{len(failures)} failures")
    return 1 if failures else 0


def run_checks(client):
    schemas = sorted(glob.glob(os.path.join(HERE, "schemas", "*.json")))
    if len(schemas) != 20:
        fail(f"expected 20 schemas, found {len(schemas)}")
    jobs = [(check_schema, (client, s), {}) for s in schemas]
    # Sampled rows take the mask too.
    jobs.append((check_schema, (client, schemas[0]), {"temperature": 1.0, "seed": 7}))
    jobs.append((check_schema, (client, schemas[7]), {"temperature": 0.8, "top_p": 0.9, "seed": 11}))
    jobs += [(check_json_object, (client,), {}), (check_regex, (client,), {}), (check_grammar, (client,), {}),
             (check_choice, (client,), {}), (check_stream, (client,), {})]
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        for f in [pool.submit(fn, *args, **kw) for fn, args, kw in jobs]:
            try:
                f.result()
            except Exception as e:  # noqa: BLE001 - reported as a failure
                fail(f"{type(e).__name__}: {e}")
    check_bad_inputs(client)


def is_json_object_prefix(text):
    """Whether text can begin a JSON object: a complete object, or an opened
    one whose brackets nest, whose strings hold no raw control characters and
    whose other characters are JSON's (a lexical check, not a parse)."""
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        pass
    if not text.startswith("{"):
        return False
    stack, in_string, escaped = [], False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            elif ord(ch) < 0x20:
                return False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append(ch)
        elif ch in "}]":
            if not stack or stack.pop() != {"}": "{", "]": "["}[ch] or not stack:
                return False  # mismatched, or the object closed with text after it
        elif ch not in " \t\n\r,:-+.0123456789eEtruefalsn":
            return False
    return bool(stack)


def check_json_object(client):
    # Free-form strings let a small model repeat itself until max_tokens (a
    # frequency penalty makes that rarer): a text cut by the length limit
    # must still have begun an object.
    text, finish = chat(client, "Describe a cat in a small JSON object.", response_format={"type": "json_object"},
                        frequency_penalty=1.0)
    if finish == "length":
        if not is_json_object_prefix(text):
            fail(f"json_object: a cut text that is not the beginning of a JSON object: {text!r}")
        return
    try:
        if not isinstance(json.loads(text), dict):
            fail(f"json_object: not an object: {text!r}")
    except ValueError as e:
        fail(f"json_object: {text!r} (finish {finish}): {e}")


REGEX = r"[A-Z][a-z]{2,7}-[0-9]{3}"


def check_regex(client):
    for body in ({"structured_outputs": {"regex": REGEX}}, {"guided_regex": REGEX}):
        text, _ = chat(client, "Make up a product code.", extra_body=body)
        if not re.fullmatch(REGEX, text):
            fail(f"regex {body}: {text!r} does not match {REGEX}")


GRAMMAR = r'''root ::= "(" num " " op " " num ")"
num ::= [1-9] [0-9]?
op ::= "+" | "-" | "*"'''


def check_grammar(client):
    text, _ = chat(client, "Write a small arithmetic expression.", extra_body={"structured_outputs": {"grammar": GRAMMAR}})
    if not re.fullmatch(r"\([1-9][0-9]? [+*-] [1-9][0-9]?\)", text):
        fail(f"grammar: {text!r} is not a text of the grammar")


def check_choice(client):
    choices = ["positive", "negative", "neutral"]
    text, _ = chat(client, "Is 'what a lovely day' positive or negative?", extra_body={"guided_choice": choices})
    if text not in choices:
        fail(f"choice: {text!r} not in {choices}")


def check_stream(client):
    with open(os.path.join(HERE, "schemas", "02_color_enum.json")) as f:
        schema = json.load(f)
    stream = client.chat.completions.create(
        model=client.model_name, messages=[{"role": "user", "content": "Pick a color."}], temperature=0,
        max_tokens=MAX_TOKENS, stream=True,
        response_format={"type": "json_schema", "json_schema": {"name": "color", "schema": schema, "strict": True}})
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError) as e:
        fail(f"stream: {text!r}: {e}")


def check_bad_inputs(client):
    def schema_format(schema):
        return {"type": "json_schema", "json_schema": {"name": "bad", "schema": schema, "strict": True}}
    expect_400(client, "an invalid schema", "response_format.json_schema.schema",
               response_format=schema_format({"type": "objekt"}))
    expect_400(client, "an unsatisfiable schema", "response_format.json_schema.schema",
               response_format=schema_format({"type": "integer", "minimum": 5, "maximum": 1}))
    expect_400(client, "a bad regex", "structured_outputs.regex", extra_body={"structured_outputs": {"regex": "a(("}})
    expect_400(client, "a bad grammar", "guided_grammar", extra_body={"guided_grammar": "root ::= (\"a\""})
    expect_400(client, "an undefined rule", "structured_outputs.grammar",
               extra_body={"structured_outputs": {"grammar": "root ::= missing"}})
    expect_400(client, "an unknown response_format type", "response_format", response_format={"type": "xml"})
    expect_400(client, "two constraints", "guided_regex",
               response_format={"type": "json_object"}, extra_body={"guided_regex": "a"})
    # Nothing else was affected: a plain request and a structured one still work.
    text, finish = chat(client, "Say hello.", max_tokens=8)
    if not text or finish not in ("stop", "length"):
        fail(f"after the bad requests a plain reply was {text!r} ({finish})")
    check_json_object(client)


if __name__ == "__main__":
    sys.exit(main())
