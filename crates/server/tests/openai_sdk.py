"""The official `openai` Python package against a running Understudy.

Usage: python3 openai_sdk.py BASE_URL
Prints one JSON object with what the SDK parsed, for the Rust test to check.
"""
import json
import sys

from openai import OpenAI

client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="sk-understudy-sdk-test", max_retries=0)

plain = client.chat.completions.create(
    model="default",
    messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}],
    temperature=0.5,
)
raw = client.chat.completions.with_raw_response.create(
    model="default", messages=[{"role": "user", "content": "Say hello again"}]
)
headers = raw.headers

chunks = client.chat.completions.create(
    model="default",
    messages=[{"role": "user", "content": "Stream hello"}],
    stream=True,
    stream_options={"include_usage": True},
)
streamed_text = ""
streamed_models = set()
usage = None
for chunk in chunks:
    streamed_models.add(chunk.model)
    if chunk.choices and chunk.choices[0].delta.content:
        streamed_text += chunk.choices[0].delta.content
    if chunk.usage:
        usage = chunk.usage.completion_tokens

print(json.dumps({
    "text": plain.choices[0].message.content,
    "model": plain.model,
    "finish_reason": plain.choices[0].finish_reason,
    "completion_tokens": plain.usage.completion_tokens,
    "provider_header": headers.get("x-understudy-provider"),
    "fell_back_header": headers.get("x-understudy-fell-back"),
    "streamed_text": streamed_text,
    "streamed_models": sorted(streamed_models),
    "streamed_usage": usage,
}))
