"""A handler module whose init phase raises."""

raise RuntimeError("cannot reach the config store")


def handler(event, context):  # pragma: no cover - never reached
    return {}
