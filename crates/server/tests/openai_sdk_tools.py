"""The official `openai` Python package drives tools, structured output and
images through a running Understudy.

Usage: python3 openai_sdk_tools.py BASE_URL MODE
MODE is one of:
  loop          a three-turn get_weather tool loop, not streamed
  loop-stream   the same loop, streamed
  parse         chat.completions.parse with a Pydantic model, pinned to each
                protocol's provider, then through the default route
  image         a data: URL image pinned to each provider
Prints one JSON object with what the SDK saw, for the Rust test to check.
"""
import json
import sys

from openai import OpenAI
from pydantic import BaseModel

client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="sk-understudy-sdk-test", max_retries=0)
mode = sys.argv[2]

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}]


def turn_plain(messages):
    raw = client.chat.completions.with_raw_response.create(
        model="default", messages=messages, tools=TOOLS, parallel_tool_calls=True
    )
    resp = raw.parse()
    msg = resp.choices[0].message
    calls = [
        {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
        for c in (msg.tool_calls or [])
    ]
    return raw.headers.get("x-understudy-provider"), resp.choices[0].finish_reason, msg.content, calls


def turn_stream(messages):
    raw = client.chat.completions.with_raw_response.create(
        model="default", messages=messages, tools=TOOLS, stream=True
    )
    provider = raw.headers.get("x-understudy-provider")
    calls = {}
    text = ""
    finish = None
    for chunk in raw.parse():
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        if choice.delta.content:
            text += choice.delta.content
        for d in choice.delta.tool_calls or []:
            call = calls.setdefault(d.index, {"id": None, "name": None, "arguments": "", "fragments": 0})
            if d.id:
                call["id"] = d.id
            if d.function and d.function.name:
                call["name"] = d.function.name
            if d.function and d.function.arguments:
                call["arguments"] += d.function.arguments
                call["fragments"] += 1
        if choice.finish_reason:
            finish = choice.finish_reason
    return provider, finish, text or None, [calls[i] for i in sorted(calls)]


def tool_loop(stream):
    messages = [{"role": "user", "content": "What is the weather in six cities?"}]
    turns = []
    for _ in range(3):
        provider, finish, content, calls = (turn_stream if stream else turn_plain)(messages)
        for c in calls:
            c["parsed"] = json.loads(c["arguments"])  # every call's arguments must parse
        turns.append({"provider": provider, "finish_reason": finish, "calls": calls})
        messages.append({
            "role": "assistant",
            "content": content,
            "tool_calls": [
                {"id": c["id"], "type": "function",
                 "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in calls
            ],
        })
        for c in calls:
            messages.append({
                "role": "tool",
                "tool_call_id": c["id"],
                "content": json.dumps({"city": c["parsed"].get("city"), "celsius": 21}),
            })
    return {"turns": turns}


class Weather(BaseModel):
    city: str
    celsius: float


def parse():
    out = {}
    for model in ["claude", "gemini", "openai", "default"]:
        raw = client.chat.completions.with_raw_response.parse(
            model=model,
            messages=[{"role": "user", "content": "The weather in Oslo as JSON"}],
            response_format=Weather,
        )
        resp = raw.parse()
        parsed = resp.choices[0].message.parsed
        out[model] = {
            "provider": raw.headers.get("x-understudy-provider"),
            "fell_back": raw.headers.get("x-understudy-fell-back"),
            "city": parsed.city,
            "celsius": parsed.celsius,
        }
    return out


def image():
    pixel = (
        "data:image/png;base64,"
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    )
    out = {}
    for model in ["claude", "gemini", "openai"]:
        resp = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": pixel}},
            ]}],
        )
        out[model] = resp.choices[0].message.content
    return out


result = {"loop": lambda: tool_loop(False), "loop-stream": lambda: tool_loop(True),
          "parse": parse, "image": image}[mode]()
print(json.dumps(result))
