"""The lookup agent: a model-free, tool-calling agent (order status from a downstream service)."""
