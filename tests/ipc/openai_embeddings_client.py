"""The openai SDK's embeddings against `llmk serve`.

    python openai_embeddings_client.py PORT vectors   stdin: {"texts": [...], "ids": [[...], ...]}
    python openai_embeddings_client.py PORT beside    stdin: {"prompts": [...], "max_tokens": N, "text": "..."}

vectors prints {"float_last": [...], "base64_last": [...], "float_mean16": [...],
"base64_raw": [...]}: the texts' vectors with encoding_format float (last
pooling, unit length), the id lists' vectors as the SDK fetches them by
default (it asks for base64 and decodes them), the texts' mean pooling
truncated to 16 dimensions, and the texts' vectors as explicit base64
strings.

beside prints {"texts": [...], "embeddings": N}: streams a greedy completion
of every prompt at once while requesting embeddings of `text` until they
end; the streamed texts and how many embeddings finished meanwhile.
"""
import json
import sys
import threading

import openai


def vectors(client, model, job):
    out = {}
    r = client.embeddings.create(model=model, input=job["texts"], encoding_format="float")
    out["float_last"] = [d.embedding for d in sorted(r.data, key=lambda d: d.index)]
    out["prompt_tokens"] = r.usage.prompt_tokens
    r = client.embeddings.create(model=model, input=job["ids"])
    out["base64_last"] = [list(d.embedding) for d in sorted(r.data, key=lambda d: d.index)]
    r = client.embeddings.create(model=model, input=job["texts"], encoding_format="float", dimensions=16,
                                 extra_body={"pooling": "mean"})
    out["float_mean16"] = [d.embedding for d in sorted(r.data, key=lambda d: d.index)]
    r = client.embeddings.create(model=model, input=job["texts"], encoding_format="base64")
    out["base64_raw"] = [d.embedding for d in sorted(r.data, key=lambda d: d.index)]
    return out


def beside(client, model, job):
    texts = [None] * len(job["prompts"])

    def generate(i):
        stream = client.completions.create(model=model, prompt=job["prompts"][i], max_tokens=job["max_tokens"],
                                           temperature=0, stream=True, extra_body={"ignore_eos": True})
        texts[i] = "".join(c.choices[0].text for c in stream if c.choices)

    threads = [threading.Thread(target=generate, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    count = 0
    while any(t.is_alive() for t in threads):
        client.embeddings.create(model=model, input=job["text"], encoding_format="float")
        count += 1
    for t in threads:
        t.join()
    return {"texts": texts, "embeddings": count}


def main():
    port, mode = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url="http://127.0.0.1:%s/v1" % port, api_key="none", max_retries=0)
    model = client.models.list().data[0].id
    job = json.load(sys.stdin)
    json.dump(vectors(client, model, job) if mode == "vectors" else beside(client, model, job), sys.stdout)


if __name__ == "__main__":
    main()
