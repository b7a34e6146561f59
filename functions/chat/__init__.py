"""The chat agent: an LLM chat agent with a tool call that streams its answer (Server-Sent Events)."""
