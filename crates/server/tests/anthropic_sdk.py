"""The official `anthropic` Python package drives a running Understudy through
its Messages API, exactly as an application would (only base_url changes).

Usage: python3 anthropic_sdk.py BASE_URL MODE
MODE is one of:
  text      a two-turn conversation, not streamed, then the same streamed;
            count_tokens; models.list
  tools     a two-turn get_weather tool loop, not streamed, then streamed
  image     a base64 image, then a follow-up turn with it in the history
  errors    every target down; a wrong key
  thinking  extended thinking over two turns, not streamed: the second turn
            replays the first answer's content (its signed thinking block
            included) as the assistant turn, as Anthropic's docs say to
  thinking-stream
            the same, streamed, with the stream events the SDK saw
  thinking-tools, thinking-tools-stream
            a three-turn get_weather tool loop with extended thinking on,
            each answer replayed as the SDK returned it (whoever served it)
A mode may end in "@MODEL" (thinking-tools@claude-sonnet-4-5): the turns
of the tool loops ask for that model rather than "default".
Prints one JSON object with what the SDK saw, for the Rust test to check.
"""
import base64
import json
import sys

import anthropic

URL = sys.argv[1]
client = anthropic.Anthropic(base_url=URL, api_key="sk-understudy-sdk-test", max_retries=0)
# "MODE@MODEL": the tool loops ask for MODEL (else "default").
mode, _, MODEL = sys.argv[2].partition("@")
MODEL = MODEL or "default"

TOOLS = [{
    "name": "get_weather",
    "description": "The current weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}]

PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def turn_plain(messages, max_tokens=512, **extra):
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=max_tokens, messages=messages, **extra
    )
    msg = raw.parse()
    return raw.headers.get("x-understudy-provider"), msg


def turn_stream(messages, max_tokens=512, **extra):
    texts = []
    with client.messages.stream(model=MODEL, max_tokens=max_tokens, messages=messages, **extra) as stream:
        provider = stream.response.headers.get("x-understudy-provider")
        for text in stream.text_stream:
            texts.append(text)
        msg = stream.get_final_message()
    return provider, msg, texts


def describe(provider, msg):
    return {
        "provider": provider,
        "id": msg.id,
        "model": msg.model,
        "stop_reason": msg.stop_reason,
        "usage": {"input_tokens": msg.usage.input_tokens, "output_tokens": msg.usage.output_tokens},
        "content": [block.to_dict() for block in msg.content],
    }


def reply_of(msg):
    """The assistant turn to send back, as the SDK's docs do."""
    return {"role": "assistant", "content": [block.to_dict() for block in msg.content]}


def text():
    out = {}
    system = [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}]
    for name, turn in [("plain", turn_plain), ("stream", turn_stream)]:
        messages = [{"role": "user", "content": "Tell me a joke about gateways."}]
        turns = []
        for follow_up in ["Another one, please.", None]:
            result = turn(messages, system=system)
            turns.append(describe(result[0], result[1]))
            if name == "stream":
                turns[-1]["text_stream"] = result[2]
            if follow_up:
                messages += [reply_of(result[1]), {"role": "user", "content": follow_up}]
        out[name] = turns
    count = client.messages.with_raw_response.count_tokens(
        model="default", messages=[{"role": "user", "content": "Tell me a joke about gateways."}]
    )
    out["count_tokens"] = {"input_tokens": count.parse().input_tokens,
                           "estimate": count.headers.get("x-understudy-estimate")}
    out["models"] = [m.id for m in client.models.list()]
    return out


def tools():
    out = {}
    for name, turn in [("plain", turn_plain), ("stream", turn_stream)]:
        messages = [{"role": "user", "content": "What is the weather in Oslo and Paris?"}]
        result = turn(messages, tools=TOOLS)
        provider, msg = result[0], result[1]
        first = describe(provider, msg)
        results = []
        for block in msg.content:
            if block.type == "tool_use":
                results.append({
                    "type": "tool_result",
                    "tool_use_id": block.id,
                    "content": json.dumps({"city": block.input["city"], "celsius": 21}),
                })
        messages += [reply_of(msg), {"role": "user", "content": results}]
        result = turn(messages, tools=TOOLS)
        out[name] = [first, describe(result[0], result[1])]
    return out


def image():
    data = base64.b64encode(PIXEL).decode()
    messages = [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}},
        {"type": "text", "text": "What is in this picture?"},
    ]}]
    provider, msg = turn_plain(messages)
    first = describe(provider, msg)
    messages += [reply_of(msg), {"role": "user", "content": "And what colour is it?"}]
    provider, msg = turn_plain(messages)
    return {"turns": [first, describe(provider, msg)]}


def errors():
    out = {}
    try:
        client.messages.create(model="default", max_tokens=64,
                               messages=[{"role": "user", "content": "hi"}])
        out["down"] = "no error"
    except anthropic.APIStatusError as e:
        out["down"] = {"class": type(e).__name__, "status": e.status_code, "type": e.body["error"]["type"]}
    stranger = anthropic.Anthropic(base_url=URL, api_key="sk-not-a-client-key", max_retries=0)
    try:
        stranger.messages.create(model="default", max_tokens=64,
                                 messages=[{"role": "user", "content": "hi"}])
        out["wrong_key"] = "no error"
    except anthropic.APIStatusError as e:
        out["wrong_key"] = {"class": type(e).__name__, "status": e.status_code, "type": e.body["error"]["type"]}
    try:
        client.messages.create(model="default", messages=[{"role": "user", "content": "hi"}],
                               max_tokens=64, tools=[{"type": "web_search_20250305", "name": "web_search"}])
        out["server_tool"] = "no error"
    except anthropic.APIStatusError as e:
        out["server_tool"] = {"class": type(e).__name__, "status": e.status_code, "type": e.body["error"]["type"]}
    return out


THINKING = {"type": "enabled", "budget_tokens": 1024}


def thinking_turns(streamed):
    """Two turns with extended thinking; the second replays the first
    answer's content, thinking block and signature included."""
    messages = [{"role": "user", "content": "What is 27 * 453?"}]
    turns = []
    for follow_up in ["And divided by 3?", None]:
        kwargs = dict(model="default", max_tokens=2048, thinking=THINKING, messages=messages)
        if streamed:
            seen = []
            with client.messages.stream(**kwargs) as stream:
                provider = stream.response.headers.get("x-understudy-provider")
                for event in stream:
                    if event.type in ("thinking", "signature", "text"):
                        seen.append(event.type)
                msg = stream.get_final_message()
            turns.append(describe(provider, msg))
            turns[-1]["events"] = seen
        else:
            raw = client.messages.with_raw_response.create(**kwargs)
            msg = raw.parse()
            turns.append(describe(raw.headers.get("x-understudy-provider"), msg))
        if follow_up:
            messages = messages + [reply_of(msg), {"role": "user", "content": follow_up}]
    return {"turns": turns, "anthropic_version": client.default_headers.get("anthropic-version")}


def thinking_tools(streamed):
    """A tool loop with thinking on: every assistant turn goes back as the
    SDK returned it, thinking blocks (when there are any) included."""
    messages = [{"role": "user", "content": "What is the weather in Oslo?"}]
    turns = []
    for _ in range(3):
        # (max_tokens must exceed the thinking budget.)
        kwargs = dict(thinking=THINKING, tools=TOOLS, max_tokens=2048)
        if streamed:
            provider, msg, _texts = turn_stream(messages, **kwargs)
        else:
            provider, msg = turn_plain(messages, **kwargs)
        turns.append(describe(provider, msg))
        calls = [b for b in msg.content if b.type == "tool_use"]
        if not calls:
            break
        messages = messages + [reply_of(msg), {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": c.id, "content": "-3 degrees"} for c in calls
        ]}]
    return {"turns": turns}


result = {
    "text": text,
    "tools": tools,
    "image": image,
    "errors": errors,
    "thinking": lambda: thinking_turns(False),
    "thinking-stream": lambda: thinking_turns(True),
    "thinking-tools": lambda: thinking_tools(False),
    "thinking-tools-stream": lambda: thinking_tools(True),
}[mode]()
print(json.dumps(result))
