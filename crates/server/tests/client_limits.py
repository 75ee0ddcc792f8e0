"""The official `openai` and `anthropic` Python packages, with their default
retries (two), against a client record whose budget is spent: each must
send the request once (the gateway answers 402 with `x-should-retry:
false`), and each must raise the status as its own error.

Usage: python3 client_limits.py BASE_URL CLIENT_KEY
Prints one JSON object with what the SDKs saw, for the Rust test to check.
"""
import json
import sys
import time

import anthropic
import openai

URL, KEY = sys.argv[1], sys.argv[2]
out = {}

started = time.monotonic()
try:
    openai.OpenAI(base_url=URL + "/v1", api_key=KEY).chat.completions.create(
        model="default", messages=[{"role": "user", "content": "hi"}]
    )
    out["openai_status"] = 200
except openai.APIStatusError as e:
    out["openai_status"] = e.status_code
    out["openai_error"] = e.body
out["openai_seconds"] = round(time.monotonic() - started, 2)

started = time.monotonic()
try:
    anthropic.Anthropic(base_url=URL, api_key=KEY).messages.create(
        model="default", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
    )
    out["anthropic_status"] = 200
except anthropic.APIStatusError as e:
    out["anthropic_status"] = e.status_code
    out["anthropic_error"] = e.body
out["anthropic_seconds"] = round(time.monotonic() - started, 2)

print(json.dumps(out))
