"""sidecar: a gRPC preprocessing service for LLM routers and engines.

Routers call `Render` / `Tokenize` to get the exact token ids (and KV block hashes) the engine will
compute; engines call `ParseStream` once per decode step to turn new token ids into content,
reasoning and tool calls. The hot paths run in a Rust library (`native/`) loaded through cffi.
"""

__version__ = "0.1.0"
