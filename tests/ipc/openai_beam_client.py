"""The openai SDK's beam search requests against `llmk serve` (vLLM's extra
fields, sent through extra_body).

    python openai_beam_client.py PORT     stdin: {"cases": [...]} (tests/beam_reference.py's)

prints {"completions": [[{"text", "finish_reason"}, ...] per case],
"chat": {"text", "finish_reason"}, "bad": {name: {"status", "param"}}}:
every case as a /v1/completions request over its prompt's token ids (best_of
as the width, or n alone as newer vLLM takes it), one chat request with
beam search, and the status and named field of requests the server must
refuse.
"""
import json
import sys

import openai


def beam_body(case, width_field):
    body = {"use_beam_search": True, "length_penalty": case["length_penalty"],
            "early_stopping": case["early_stopping"], "stop_token_ids": case["stop_token_ids"]}
    if width_field == "best_of":
        body["best_of"] = case["width"]
    return body


def refused(call):
    try:
        call()
    except openai.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        error = body.get("error", body) if isinstance(body, dict) else {}
        return {"status": e.status_code, "param": error.get("param")}
    return {"status": 200, "param": None}


def main():
    port = int(sys.argv[1])
    job = json.load(sys.stdin)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
    model = client.models.list().data[0].id
    out = {"completions": []}
    for i, case in enumerate(job["cases"]):
        # Newer vLLM: n is the width and every beam comes back; older: best_of is the width.
        width_field = "n" if case["n"] == case["width"] and i % 2 == 0 else "best_of"
        r = client.completions.create(model=model, prompt=case["prompt"], max_tokens=case["max_tokens"],
                                      n=case["n"], temperature=0, extra_body=beam_body(case, width_field))
        out["completions"].append([{"text": c.text, "finish_reason": c.finish_reason}
                                   for c in sorted(r.choices, key=lambda c: c.index)])
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Tell me a story."}],
                                       max_tokens=8, n=2, extra_body={"use_beam_search": True, "best_of": 3})
    out["chat"] = [{"text": c.message.content, "finish_reason": c.finish_reason} for c in r.choices]

    def completion(**extra):
        return lambda: client.completions.create(model=model, prompt="Once", max_tokens=4, n=extra.pop("n", 1),
                                                 temperature=extra.pop("temperature", 0), extra_body=extra)

    out["bad"] = {
        "temperature": refused(completion(use_beam_search=True, best_of=2, temperature=0.7)),
        "stream": refused(lambda: list(client.completions.create(
            model=model, prompt="Once", max_tokens=4, stream=True, extra_body={"use_beam_search": True, "best_of": 2}))),
        "n above the width": refused(completion(use_beam_search=True, best_of=2, n=3)),
        "early_stopping": refused(completion(use_beam_search=True, best_of=2, early_stopping="sometimes")),
        "length_penalty alone": refused(completion(length_penalty=2.0)),
        "top_p": refused(completion(use_beam_search=True, best_of=2, top_p=0.5)),
        "width past the bound": refused(completion(use_beam_search=True, best_of=11)),
        "best_of without beams": refused(completion(best_of=2)),
    }
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
