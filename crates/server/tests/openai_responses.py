"""The official `openai` Python package drives the Responses API
(`/v1/responses`) through a running Understudy.

Usage: python3 openai_responses.py BASE_URL MODE
MODE is one of:
  text          responses.create with a string input
  stream        responses.stream (events and the accumulated final response)
  loop          a three-turn get_weather tool loop, the history sent as items
  loop-stream   the same loop through responses.stream
  previous      the same loop continued with previous_response_id, then the
                stored response read back, its input items listed, deleted
  parse         responses.parse with a Pydantic model
  image         a data: URL image
  first         one stored text turn (for the fleet test)
  second=ID     one turn continuing previous_response_id ID (the fleet test)
Prints one JSON object with what the SDK saw, for the Rust test to check.
"""
import json
import sys

import openai
from openai import OpenAI
from pydantic import BaseModel

client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="sk-understudy-sdk-test", max_retries=0)
mode = sys.argv[2]

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
QUESTION = "What is the weather in six cities?"


def calls_of(resp):
    return [
        {"id": item.id, "call_id": item.call_id, "name": item.name, "arguments": item.arguments,
         "parsed": json.loads(item.arguments)}
        for item in resp.output if item.type == "function_call"
    ]


def result_items(calls):
    return [
        {"type": "function_call_output", "call_id": c["call_id"],
         "output": json.dumps({"city": c["parsed"].get("city"), "celsius": 21})}
        for c in calls
    ]


def turn_plain(**kwargs):
    raw = client.responses.with_raw_response.create(model="default", tools=TOOLS, **kwargs)
    resp = raw.parse()
    return raw.headers.get("x-understudy-provider"), resp, None


def turn_stream(**kwargs):
    with client.responses.stream(model="default", tools=TOOLS, **kwargs) as stream:
        types = [event.type for event in stream]
        resp = stream.get_final_response()
    return None, resp, types


def summary(provider, resp, types):
    return {
        "provider": provider,
        "id": resp.id,
        "status": resp.status,
        "model": resp.model,
        "text": resp.output_text,
        "calls": calls_of(resp),
        "types": types,
        "usage": resp.usage.model_dump() if resp.usage else None,
    }


def tool_loop(stream):
    items = [{"role": "user", "content": QUESTION}]
    turns = []
    for _ in range(3):
        provider, resp, types = (turn_stream if stream else turn_plain)(input=items)
        turns.append(summary(provider, resp, types))
        items += [item.model_dump(exclude_none=True) for item in resp.output]
        items += result_items(turns[-1]["calls"])
    return {"turns": turns}


def previous():
    turns = []
    provider, resp, types = turn_plain(input=QUESTION)
    turns.append(summary(provider, resp, types))
    for _ in range(2):
        provider, resp, types = turn_plain(
            input=result_items(turns[-1]["calls"]), previous_response_id=resp.id
        )
        turns.append(summary(provider, resp, types))
    stored = client.responses.retrieve(resp.id)
    listed = client.responses.input_items.list(resp.id, order="asc")
    client.responses.delete(turns[0]["id"])
    try:
        client.responses.retrieve(turns[0]["id"])
        gone = False
    except openai.NotFoundError:
        gone = True
    return {
        "turns": turns,
        "stored": {"id": stored.id, "calls": calls_of(stored), "text": stored.output_text},
        "input_items": [i.type for i in listed.data],
        "deleted_is_gone": gone,
    }


class Weather(BaseModel):
    city: str
    celsius: float


def parse():
    raw = client.responses.with_raw_response.parse(
        model="default", input="The weather in Oslo as JSON", text_format=Weather
    )
    resp = raw.parse()
    return {
        "provider": raw.headers.get("x-understudy-provider"),
        "fell_back": raw.headers.get("x-understudy-fell-back"),
        "city": resp.output_parsed.city,
        "celsius": resp.output_parsed.celsius,
    }


PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="


def image():
    raw = client.responses.with_raw_response.create(
        model="default",
        input=[{"role": "user", "content": [
            {"type": "input_text", "text": "What is in this image?"},
            {"type": "input_image", "image_url": "data:image/png;base64," + PIXEL, "detail": "auto"},
        ]}],
    )
    resp = raw.parse()
    return {"provider": raw.headers.get("x-understudy-provider"), "text": resp.output_text}


def text():
    raw = client.responses.with_raw_response.create(
        model="default", input="Say hello", instructions="Be brief.", max_output_tokens=100
    )
    resp = raw.parse()
    return {
        **summary(raw.headers.get("x-understudy-provider"), resp, None),
        "fell_back": raw.headers.get("x-understudy-fell-back"),
    }


def stream_text():
    with client.responses.stream(model="default", input="Say hello") as stream:
        types = []
        deltas = ""
        for event in stream:
            types.append(event.type)
            if event.type == "response.output_text.delta":
                deltas += event.delta
        resp = stream.get_final_response()
    return {**summary(None, resp, types), "deltas": deltas}


def second(previous_id):
    provider, resp, types = turn_plain(input="And tomorrow?", previous_response_id=previous_id)
    return summary(provider, resp, types)


def first():
    provider, resp, types = turn_plain(input="Remember: the city is Oslo.")
    return summary(provider, resp, types)


MODES = {
    "text": text,
    "stream": stream_text,
    "loop": lambda: tool_loop(False),
    "loop-stream": lambda: tool_loop(True),
    "previous": previous,
    "parse": parse,
    "image": image,
    "first": first,
}
if mode.startswith("second="):
    print(json.dumps(second(mode.split("=", 1)[1])))
else:
    print(json.dumps(MODES[mode]()))
