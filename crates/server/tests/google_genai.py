"""The official `google-genai` Python package drives a running Understudy
through its Gemini API (`/v1beta/models/...`), exactly as an application
would: only `http_options.base_url` changes.

Usage: python3 google_genai.py BASE_URL MODE
MODE is one of:
  text        generate_content, not streamed, with a system instruction,
              temperature and max_output_tokens
  stream      generate_content_stream
  tools       a two-round get_weather loop with automatic function calling
              off: each round's function calls answered by hand with
              function_response parts, the model's turn sent back as the
              SDK returned it (thought signatures included)
  structured  response_schema = a Pydantic model; response.parsed
  image       an inline PNG (Part.from_bytes), then a follow-up turn with
              it in the history
  count       count_tokens
  models      models.list, then models.get of the first
  wrong_key   a key the gateway does not know: Google's error shape
  all         every mode above but wrong_key, in that order
Each mode has its own prompt, so that a simulator can tell which one a
request belongs to. Every mode asserts what the SDK must see, and prints
one JSON object with what it saw (the answers' text, finish reasons, model
versions, usage, and the `x-understudy-provider` header where the SDK
exposes it, which 3.6.1 does not) for the Rust test to check.
"""
import json
import sys

from google import genai
from google.genai import errors, types
from pydantic import BaseModel

URL = sys.argv[1]
MODE = sys.argv[2]
KEY = "sk-understudy-sdk-test"
MODEL = "default"

# No SDK retries: failover is the gateway's to do.
client = genai.Client(
    api_key=KEY,
    http_options=types.HttpOptions(base_url=URL, retry_options=types.HttpRetryOptions(attempts=1)),
)

# A 1x1 PNG.
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c63f8cfc0f00f0004850180848a8c21"
    "0000000049454e44ae426082"
)

WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="The current weather in a city",
    parameters_json_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)


class Recipe(BaseModel):
    name: str
    minutes: int
    ingredients: list[str]


def provider(response):
    """The gateway's `x-understudy-provider` header, when the SDK kept the
    HTTP response's headers."""
    http = getattr(response, "sdk_http_response", None)
    headers = (http.headers or {}) if http else {}
    lowered = {k.lower(): v for k, v in headers.items()}
    return lowered.get("x-understudy-provider")


def text_of(response):
    """The answer's text parts, joined (None when it has none), read from
    the parts rather than `response.text`, which warns on function calls."""
    content = response.candidates[0].content
    texts = [p.text for p in (content.parts or []) if p.text and not p.thought] if content else []
    return "".join(texts) if texts else None


def describe(response):
    candidate = response.candidates[0]
    usage = response.usage_metadata
    return {
        "provider": provider(response),
        "text": text_of(response),
        "finish_reason": candidate.finish_reason.value if candidate.finish_reason else None,
        "model_version": response.model_version,
        "usage": {
            "prompt": usage.prompt_token_count if usage else None,
            "candidates": usage.candidates_token_count if usage else None,
            "total": usage.total_token_count if usage else None,
        },
        "function_calls": [
            {"id": c.id, "name": c.name, "args": c.args} for c in (response.function_calls or [])
        ],
    }


def check_answer(seen):
    assert seen["finish_reason"] == "STOP", seen
    assert seen["usage"]["total"], seen
    assert seen["text"], seen


def text():
    response = client.models.generate_content(
        model=MODEL,
        contents="Tell me a joke about gateways.",
        config=types.GenerateContentConfig(
            system_instruction="Be brief.", temperature=0.5, max_output_tokens=256
        ),
    )
    seen = describe(response)
    check_answer(seen)
    return seen


def stream():
    pieces, last, http_provider = [], None, None
    for chunk in client.models.generate_content_stream(
        model=MODEL,
        contents="Stream a joke about gateways.",
        config=types.GenerateContentConfig(system_instruction="Be brief."),
    ):
        http_provider = http_provider or provider(chunk)
        piece = text_of(chunk) if chunk.candidates else None
        if piece:
            pieces.append(piece)
        last = chunk
    assert last is not None, "the stream had no chunk"
    seen = describe(last)
    seen["provider"] = http_provider
    seen["pieces"] = pieces
    seen["text"] = "".join(pieces)
    assert seen["finish_reason"] == "STOP", seen
    assert len(pieces) >= 2, f"the answer came in one piece: {pieces}"
    return seen


def tools():
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[WEATHER])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    contents = [types.Content(role="user", parts=[types.Part(text="What is the weather in Oslo, then in Paris?")])]
    rounds = []
    for _ in range(3):
        response = client.models.generate_content(model=MODEL, contents=contents, config=config)
        seen = describe(response)
        rounds.append(seen)
        calls = response.function_calls or []
        if not calls:
            break
        # The model's turn goes back as the SDK returned it (its parts'
        # thought signatures included), then one function_response per call.
        contents.append(response.candidates[0].content)
        contents.append(types.Content(role="user", parts=[
            types.Part.from_function_response(
                name=c.name, response={"city": c.args["city"], "celsius": 21}
            )
            for c in calls
        ]))
    assert len(rounds) == 3, f"two rounds of calls, then an answer: {rounds}"
    for r, city in zip(rounds, ["Oslo", "Paris"]):
        calls = r["function_calls"]
        assert [(c["name"], c["args"]) for c in calls] == [("get_weather", {"city": city})], r
    check_answer(rounds[2])
    assert not rounds[2]["function_calls"], rounds[2]
    return {"rounds": rounds}


def structured():
    response = client.models.generate_content(
        model=MODEL,
        contents="A quick pancake recipe.",
        config=types.GenerateContentConfig(
            response_mime_type="application/json", response_schema=Recipe
        ),
    )
    seen = describe(response)
    check_answer(seen)
    parsed = response.parsed
    assert isinstance(parsed, Recipe), f"parsed is {parsed!r}: {seen}"
    seen["parsed"] = parsed.model_dump()
    return seen


def image():
    first = types.Content(role="user", parts=[
        types.Part.from_bytes(data=PIXEL, mime_type="image/png"),
        types.Part(text="What is in this picture?"),
    ])
    response = client.models.generate_content(model=MODEL, contents=[first])
    turns = [describe(response)]
    contents = [
        first,
        response.candidates[0].content,
        types.Content(role="user", parts=[types.Part(text="And what colour is it?")]),
    ]
    response = client.models.generate_content(model=MODEL, contents=contents)
    turns.append(describe(response))
    for t in turns:
        check_answer(t)
    return {"turns": turns}


def count():
    response = client.models.count_tokens(model=MODEL, contents="Count the tokens of this.")
    assert isinstance(response.total_tokens, int) and response.total_tokens > 0, response
    return {"total_tokens": response.total_tokens}


def models():
    names = [m.name for m in client.models.list()]
    assert names, "no model listed"
    one = client.models.get(model=names[0])
    assert one.name == names[0], (one.name, names)
    return {"names": names, "get": one.name}


def wrong_key():
    """A key the gateway does not know gets Google's error shape."""
    stranger = genai.Client(
        api_key="sk-not-a-client-key",
        http_options=types.HttpOptions(base_url=URL, retry_options=types.HttpRetryOptions(attempts=1)),
    )
    try:
        stranger.models.generate_content(model=MODEL, contents="hi")
    except errors.APIError as e:
        return {"code": e.code, "status": e.status}
    return "no error"


MODES = {
    "text": text,
    "stream": stream,
    "tools": tools,
    "structured": structured,
    "image": image,
    "count": count,
    "models": models,
    "wrong_key": wrong_key,
}

if MODE == "all":
    result = {name: MODES[name]() for name in
              ["text", "stream", "tools", "structured", "image", "count", "models"]}
else:
    result = MODES[MODE]()
print(json.dumps(result))
