"""The OpenAI Agents SDK (`agents`) with its default model, the Responses
API, runs a tool-using agent through a running Understudy.

Usage: python3 openai_agents.py BASE_URL MODE
MODE is `weather`: an agent with a get_weather function tool is asked for
the weather in Oslo; it calls the tool, gets its result, and answers.
Prints one JSON object with what the run produced, for the Rust test.
"""
import json
import os
import sys

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import (  # noqa: E402
    Agent,
    Runner,
    function_tool,
    set_default_openai_api,
    set_default_openai_client,
    set_tracing_disabled,
)
from openai import AsyncOpenAI  # noqa: E402

client = AsyncOpenAI(base_url=sys.argv[1] + "/v1", api_key="sk-understudy-sdk-test", max_retries=0)
set_default_openai_client(client, use_for_tracing=False)
set_default_openai_api("responses")
set_tracing_disabled(True)

calls = []


@function_tool
def get_weather(city: str) -> str:
    """The current weather in a city."""
    calls.append(city)
    return f"21 degrees and sunny in {city}"


agent = Agent(
    name="Weather agent",
    instructions="Answer weather questions with the get_weather tool.",
    tools=[get_weather],
    model="default",
)
result = Runner.run_sync(agent, "What is the weather in Oslo?")
print(json.dumps({
    "final": result.final_output,
    "tool_calls": calls,
    "items": [item.type for item in result.new_items],
    "responses": [r.response_id for r in result.raw_responses],
}))
