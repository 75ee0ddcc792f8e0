"""The official `openai` and `anthropic` Python packages ask a running
Understudy for their own routing, as OpenRouter's and LiteLLM's users send
it: `models` and the `provider` object through the openai SDK's
`extra_body`, `fallbacks` through the anthropic SDK's.

Usage: python3 caller_routing_sdk.py BASE_URL MODE
MODE is one of:
  openai-models     model "groq" with extra_body {"models": ["backup"]}
  openai-provider   model "default" with extra_body
                    {"provider": {"order": ["groq", "backup"], "sort": "price"}}
  anthropic-fallbacks
                    model "groq" with extra_body {"fallbacks": [{"model": "backup"}]}
Each mode asks once per client key: `allowed` (its record allows caller
routing), `plain` (a record that does not), `scoped` (allowed, but its
`models` leave out "claude", which that request names).
Prints one JSON object: per key, who served and the model the SDK parsed,
or the error's status and message.
"""
import json
import sys

URL = sys.argv[1]
MODE = sys.argv[2]
KEYS = {
    "allowed": "sk-allowed-0123456789",
    "plain": "sk-plain-0123456789",
    "scoped": "sk-scoped-0123456789",
}
MESSAGES = [{"role": "user", "content": "Say hello"}]


def openai_call(key, extra):
    from openai import OpenAI, APIStatusError

    client = OpenAI(base_url=URL + "/v1", api_key=KEYS[key], max_retries=0)
    model = "default" if MODE == "openai-provider" else "groq"
    try:
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=MESSAGES, extra_body=extra
        )
    except APIStatusError as e:
        return {"status": e.status_code, "message": e.message, "type": type(e).__name__}
    done = raw.parse()
    return {
        "status": raw.status_code,
        "provider": raw.headers.get("x-understudy-provider"),
        "model": done.model,
        "text": done.choices[0].message.content,
    }


def anthropic_call(key, extra):
    import anthropic

    client = anthropic.Anthropic(base_url=URL, api_key=KEYS[key], max_retries=0)
    try:
        raw = client.messages.with_raw_response.create(
            model="groq", max_tokens=64, messages=MESSAGES, extra_body=extra
        )
    except anthropic.APIStatusError as e:
        return {"status": e.status_code, "message": e.message, "type": type(e).__name__}
    done = raw.parse()
    return {
        "status": raw.status_code,
        "provider": raw.headers.get("x-understudy-provider"),
        "model": done.model,
        "text": done.content[0].text,
    }


out = {}
for key in KEYS:
    if MODE == "openai-models":
        names = ["claude"] if key == "scoped" else ["backup"]
        out[key] = openai_call(key, {"models": names})
    elif MODE == "openai-provider":
        extra = {"provider": {"order": ["groq", "backup"], "sort": "price"}}
        if key == "scoped":
            extra["models"] = ["claude"]
        out[key] = openai_call(key, extra)
    elif MODE == "anthropic-fallbacks":
        name = "claude" if key == "scoped" else "backup"
        out[key] = anthropic_call(key, {"fallbacks": [{"model": name}]})
    else:
        raise SystemExit("unknown mode " + MODE)
print(json.dumps(out))
