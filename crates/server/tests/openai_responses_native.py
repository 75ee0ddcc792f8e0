"""The official `openai` Python package drives `/v1/responses` through a
running Understudy whose primary speaks the Responses API itself (a native
target), the way Codex and the Agents SDK do with `store: false`: the
reasoning items come back with `encrypted_content` and go in the next
turn's input as the SDK dumped them.

Usage: python3 openai_responses_native.py BASE_URL loop
  loop   three turns of a get_weather tool loop: the first streamed
         (responses.stream), the others plain; every output item, the
         reasoning ones included, sent back in the next turn's input
Prints one JSON object with what the SDK saw, for the Rust test to check.
"""
import json
import sys

from openai import OpenAI

client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="sk-understudy-sdk-test", max_retries=0)

TOOLS = [{
    "type": "function",
    "name": "get_weather",
    "description": "The current weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}]
COMMON = dict(model="default", tools=TOOLS, store=False, include=["reasoning.encrypted_content"])


def summary(provider, resp, types):
    return {
        "provider": provider,
        "id": resp.id,
        "text": resp.output_text,
        "output_types": [item.type for item in resp.output],
        "reasoning_ids": [item.id for item in resp.output if item.type == "reasoning"],
        "calls": [
            {"call_id": item.call_id, "name": item.name, "arguments": item.arguments}
            for item in resp.output if item.type == "function_call"
        ],
        "types": types,
    }


def results(resp):
    return [
        {"type": "function_call_output", "call_id": item.call_id,
         "output": json.dumps({"celsius": 21})}
        for item in resp.output if item.type == "function_call"
    ]


def loop():
    items = [{"role": "user", "content": "What is the weather in Oslo?"}]
    turns = []
    with client.responses.stream(input=items, **COMMON) as stream:
        types = [event.type for event in stream]
        resp = stream.get_final_response()
    turns.append(summary(None, resp, types))
    for _ in range(2):
        items += [item.model_dump(exclude_none=True) for item in resp.output]
        items += results(resp)
        raw = client.responses.with_raw_response.create(input=items, **COMMON)
        resp = raw.parse()
        turns.append(summary(raw.headers.get("x-understudy-provider"), resp, None))
    return {"turns": turns}


print(json.dumps({"loop": loop}[sys.argv[2]]()))
