"""The openai SDK's chat completions with tools against llmk's HTTP API.

    python openai_tools_client.py PORT scripted   stdin: {"tools": [...], "prompts": [...]}
    python openai_tools_client.py PORT serve      stdin: {"tools": [...], "bad_tools": [[...], ...]}
    python openai_tools_client.py PORT held       stdin: {"tools": [...], "named": NAME, "unsatisfiable_tools": [...]}

scripted prints, per prompt, {"whole": ..., "streamed": ..., "accumulated": ...}:
the message of a non-streaming request; the chunks joined by hand (content,
and tool_calls by index: id, type and name once, arguments appended); and
the SDK's own stream accumulator's final message (ChatCompletionStreamState).
Each message is {"content" (null when empty), "tool_calls": [{"id", "type",
"name", "arguments"}], "finish_reason"}.

serve prints {"auto": message, "auto_streamed": message, "bad": [{"status",
"param", "message"}], "after": message}: tools with tool_choice auto,
streamed and not; each bad tool list's refusal; then a plain request
answered after them.

held prints {"required", "required_streamed", "named", "named_streamed":
message, "conflict": {"status", "param", "message"}}: tool_choice
"required", and naming the job's "named" tool, streamed and not; then the
refusals of tool_choice "required" beside response_format json_object
("conflict") and of the named tool when no arguments satisfy its
parameters ("unsatisfiable").
"""
import json
import sys

import openai
from openai.lib.streaming.chat import ChatCompletionStreamState


def message_json(message, finish_reason):
    calls = [
        {"id": c.id, "type": c.type, "name": c.function.name, "arguments": c.function.arguments}
        for c in (message.tool_calls or [])
    ]
    # An empty content is no content (a stream's chunks may carry "" before calls).
    return {"content": message.content or None, "tool_calls": calls, "finish_reason": finish_reason}


def refusal(create):
    try:
        create()
        return {"status": 200}
    except openai.APIStatusError as e:
        err = e.body if isinstance(e.body, dict) else {}
        err = err.get("error", err)
        return {"status": e.status_code, "param": err.get("param"), "message": err.get("message")}


def whole(client, model, messages, tools, **kw):
    if tools is not None:
        kw["tools"] = tools
    r = client.chat.completions.create(model=model, messages=messages, **kw)
    return message_json(r.choices[0].message, r.choices[0].finish_reason)


def streamed(client, model, messages, tools, **kw):
    state = ChatCompletionStreamState(input_tools=tools)
    content, calls, finish = None, [], None
    for chunk in client.chat.completions.create(model=model, messages=messages, tools=tools, stream=True, **kw):
        state.handle_chunk(chunk)
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        delta = choice.delta
        if delta.content:
            content = (content or "") + delta.content
        for tc in delta.tool_calls or []:
            if tc.id is not None:
                assert tc.index == len(calls), (tc.index, len(calls))
                calls.append({"id": tc.id, "type": tc.type, "name": tc.function.name, "arguments": ""})
            calls[tc.index]["arguments"] += tc.function.arguments or ""
        if choice.finish_reason is not None:
            finish = choice.finish_reason
    try:
        final = state.get_final_completion().choices[0]
    except openai.LengthFinishReasonError:  # the SDK refuses to finish a stream cut by max_tokens
        final = state.current_completion_snapshot.choices[0]
    return (
        {"content": content, "tool_calls": calls, "finish_reason": finish},
        message_json(final.message, final.finish_reason),
    )


def main():
    port, mode = int(sys.argv[1]), sys.argv[2]
    job = json.load(sys.stdin)
    client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % port, api_key="none", max_retries=0, timeout=60)
    model = client.models.list().data[0].id
    out = {}
    if mode == "scripted":
        out["runs"] = []
        for prompt in job["prompts"]:
            messages = [{"role": "user", "content": prompt}]
            s, acc = streamed(client, model, messages, job["tools"])
            out["runs"].append({"whole": whole(client, model, messages, job["tools"]), "streamed": s,
                                "accumulated": acc})
    elif mode == "held":
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        # Long enough for the calls' JSON to close (finish_reason tool_calls).
        kw = {"max_tokens": 160, "temperature": 0}
        named = {"type": "function", "function": {"name": job["named"]}}
        out["required"] = whole(client, model, messages, job["tools"], tool_choice="required", **kw)
        out["required_streamed"], _ = streamed(client, model, messages, job["tools"], tool_choice="required", **kw)
        out["named"] = whole(client, model, messages, job["tools"], tool_choice=named, **kw)
        out["named_streamed"], _ = streamed(client, model, messages, job["tools"], tool_choice=named, **kw)
        out["conflict"] = refusal(lambda: client.chat.completions.create(
            model=model, messages=messages, tools=job["tools"], tool_choice="required",
            response_format={"type": "json_object"}, max_tokens=16))
        out["unsatisfiable"] = refusal(lambda: client.chat.completions.create(
            model=model, messages=messages, tools=job["unsatisfiable_tools"], tool_choice=named, max_tokens=16))
    else:
        messages = [{"role": "user", "content": "What is the weather in Paris?"}]
        kw = {"max_tokens": 16, "temperature": 0}
        out["auto"] = whole(client, model, messages, job["tools"], tool_choice="auto", **kw)
        out["auto_streamed"], _ = streamed(client, model, messages, job["tools"], tool_choice="auto", **kw)
        out["bad"] = [
            refusal(lambda: client.chat.completions.create(model=model, messages=messages, tools=bad, **kw))
            for bad in job["bad_tools"]
        ]
        out["after"] = whole(client, model, messages, None, **kw)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
