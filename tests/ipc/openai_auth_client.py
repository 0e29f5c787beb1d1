"""The openai SDK against `llmk serve`'s HTTP API with API keys.

    python openai_auth_client.py PORT GOOD_KEY BAD_KEY PROMPT MAX_TOKENS

Prints one JSON object: the completion text with the good key, and the
exception class and status code the SDK raises with the bad key.
"""
import json
import sys

import openai


def main():
    port, good, bad, prompt, max_tokens = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    base_url = "http://127.0.0.1:%s/v1" % port
    out = {}
    client = openai.OpenAI(base_url=base_url, api_key=good, max_retries=0)
    r = client.completions.create(model="fake-model", prompt=prompt, max_tokens=max_tokens, temperature=0)
    out["text"] = r.choices[0].text
    stream = client.completions.create(model="fake-model", prompt=prompt, max_tokens=max_tokens, temperature=0,
                                       stream=True)
    out["streamed"] = "".join(c.choices[0].text for c in stream if c.choices)
    try:
        openai.OpenAI(base_url=base_url, api_key=bad, max_retries=0).completions.create(
            model="fake-model", prompt=prompt, max_tokens=max_tokens)
        out["bad_key"] = "served"
    except openai.APIStatusError as e:
        out["bad_key"] = type(e).__name__
        out["bad_key_status"] = e.status_code
        out["bad_key_code"] = e.code
    print(json.dumps(out))


if __name__ == "__main__":
    main()
