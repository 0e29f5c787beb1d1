"""The openai SDK against the HTTP API served over TLS, trusting one certificate.

    python openai_tls_client.py PORT CA_FILE PROMPT MAX_TOKENS

Prints one JSON object: the completion text, the streamed text, and what the
SDK raises when it does not trust the certificate.
"""
import json
import ssl
import sys

import openai


def main():
    port, ca_file, prompt, max_tokens = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    base_url = "https://127.0.0.1:%s/v1" % port
    trusted = ssl.create_default_context(cafile=ca_file)
    client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0,
                           http_client=openai.DefaultHttpxClient(verify=trusted))
    out = {}
    r = client.completions.create(model="fake-model", prompt=prompt, max_tokens=max_tokens, temperature=0)
    out["text"] = r.choices[0].text
    stream = client.completions.create(model="fake-model", prompt=prompt, max_tokens=max_tokens, temperature=0,
                                       stream=True)
    out["streamed"] = "".join(c.choices[0].text for c in stream if c.choices)
    # The system's trust store does not know the self-signed certificate.
    try:
        openai.OpenAI(base_url=base_url, api_key="none", max_retries=0,
                      http_client=openai.DefaultHttpxClient(verify=ssl.create_default_context())).models.list()
        out["untrusted"] = "served"
    except openai.APIConnectionError as e:
        out["untrusted"] = type(e).__name__
    print(json.dumps(out))


if __name__ == "__main__":
    main()
