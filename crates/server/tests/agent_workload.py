"""An agent workload driven through the official `anthropic` Python package,
shaped as Claude Code's requests are, against a running Understudy (or any
Messages API base URL): N concurrent sessions of T turns each.

Usage: python3 agent_workload.py BASE_URL [--sessions N] [--turns T]
         [--system-tokens S] [--turn-tokens P] [--model M] [--no-stream]

Every session shares one system prompt and tool list of about S tokens
(default 10 000); its first user message is its own; each turn adds about
P tokens (default 500): the assistant's answer, as the SDK returned it, and
a new user message making up the rest. As Claude Code sends them (its
captured requests): three system blocks, `cache_control` (ephemeral, no
TTL: five minutes on an API key) on the last two and on the last block of
the last message only; `x-claude-code-session-id` and a
`metadata.user_id` naming the session; streamed (`--no-stream`: not).

A token here is a word (the simulators count a text's words, a tool's
definition a quarter of its JSON's bytes), so the sizes are the
simulators' counts.

Prints one JSON line of totals: `input_tokens` (uncached), `cache_read`,
`cache_write`, `total_input` (all three), `read_share`, `requests`, and
`providers` (per session, the provider that served each turn, from the
gateway's `x-understudy-provider` header), `errors`.
"""
import argparse
import json
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

import anthropic

# A Claude Code-like tool: name, description, input_schema (no `type`).
TOOL_NAMES = ["Bash", "Read", "Edit", "Write", "Glob", "Grep", "WebFetch", "Task",
              "TodoWrite", "NotebookEdit", "WebSearch", "BashOutput"]


def words(tag, n):
    return " ".join(f"{tag}{i}" for i in range(n))


def tools(budget):
    """Tools of about `budget` tokens (a quarter of their JSON's bytes)."""
    per_tool = max(budget // len(TOOL_NAMES), 20)
    out = []
    for name in TOOL_NAMES:
        tool = {
            "name": name,
            "description": "",
            "input_schema": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "what to run"}},
                "required": ["command"],
            },
        }
        # Pad the description until the tool is about `per_tool` tokens.
        while len(json.dumps(tool, separators=(",", ":"))) // 4 < per_tool:
            tool["description"] += f"{name.lower()} does one careful thing. "
        out.append(tool)
    return out


def system(budget):
    """Claude Code's three system blocks: a short billing header without a
    marker, then the identity and the instructions, each marked."""
    return [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.328; cc_entrypoint=sdk-cli"},
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude.",
         "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": words("rule", budget), "cache_control": {"type": "ephemeral"}},
    ]


def marked(messages):
    """The conversation as sent: a marker on the last block of the last
    message only (earlier turns carry none)."""
    out = []
    for i, m in enumerate(messages):
        content = [dict(b) for b in m["content"]]
        if i == len(messages) - 1:
            content[-1]["cache_control"] = {"type": "ephemeral"}
        out.append({"role": m["role"], "content": content})
    return out


def answer_words(msg):
    return sum(len(b.text.split()) for b in msg.content if b.type == "text")


def session(client, args, index, shared):
    sid = str(uuid.uuid4())
    headers = {"x-claude-code-session-id": sid}
    metadata = {"user_id": json.dumps({"device_id": "d" * 64, "account_uuid": "",
                                       "session_id": sid})}
    messages = [{"role": "user", "content": [
        {"type": "text", "text": f"Session {index}: " + words(f"s{index}w", 200)}]}]
    served, totals, errors = [], [0, 0, 0, 0], []
    for turn in range(args.turns):
        request = dict(model=args.model, max_tokens=32000, system=shared["system"],
                       tools=shared["tools"], messages=marked(messages), metadata=metadata,
                       extra_headers=headers)
        try:
            if args.stream:
                with client.messages.stream(**request) as stream:
                    provider = stream.response.headers.get("x-understudy-provider")
                    msg = stream.get_final_message()
            else:
                raw = client.messages.with_raw_response.create(**request)
                provider, msg = raw.headers.get("x-understudy-provider"), raw.parse()
        except anthropic.APIError as e:
            errors.append(f"session {index} turn {turn}: {e}")
            served.append(None)
            continue
        served.append(provider)
        u = msg.usage
        read, write = u.cache_read_input_tokens or 0, u.cache_creation_input_tokens or 0
        totals[0] += u.input_tokens
        totals[1] += read
        totals[2] += write
        totals[3] += 1
        rest = max(args.turn_tokens - answer_words(msg), 50)
        messages += [
            {"role": "assistant", "content": [b.to_dict() for b in msg.content if b.type == "text"]
             or [{"type": "text", "text": "ok"}]},
            {"role": "user", "content": [{"type": "text", "text": words(f"s{index}t{turn}w", rest)}]},
        ]
    return served, totals, errors


def main():
    p = argparse.ArgumentParser()
    p.add_argument("base_url")
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--turns", type=int, default=30)
    p.add_argument("--system-tokens", type=int, default=10000)
    p.add_argument("--turn-tokens", type=int, default=500)
    p.add_argument("--model", default="default")
    p.add_argument("--api-key", default="sk-understudy-workload")
    p.add_argument("--no-stream", dest="stream", action="store_false")
    args = p.parse_args()
    client = anthropic.Anthropic(base_url=args.base_url, api_key=args.api_key, max_retries=0,
                                 timeout=120)
    # Tools about a third of the shared prefix, the system prompt the rest.
    shared = {"tools": tools(args.system_tokens // 3),
              "system": system(args.system_tokens - args.system_tokens // 3)}
    with ThreadPoolExecutor(max_workers=args.sessions) as pool:
        runs = list(pool.map(lambda i: session(client, args, i, shared), range(args.sessions)))
    uncached = sum(r[1][0] for r in runs)
    read = sum(r[1][1] for r in runs)
    write = sum(r[1][2] for r in runs)
    total = uncached + read + write
    out = {
        "sessions": args.sessions,
        "turns": args.turns,
        "requests": sum(r[1][3] for r in runs),
        "input_tokens": uncached,
        "cache_read": read,
        "cache_write": write,
        "total_input": total,
        "read_share": read / total if total else 0.0,
        "providers": [r[0] for r in runs],
        "errors": [e for r in runs for e in r[2]],
    }
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
