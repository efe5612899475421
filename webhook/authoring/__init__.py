"""Rule authoring tools: lint, the test-suite runner, explain and the shipped JSON Schemas.

Everything here is a library used by the thin `webhook.commands` modules; the engine
is called exactly as the server calls it.
"""
