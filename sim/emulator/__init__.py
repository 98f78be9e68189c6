"""The Kubernetes API server emulator: plain HTTP, JSON, enough of the real semantics that the official
client and kubectl work against it unchanged. `server` is the entry point (`ApiServer`,
`ApiServerThread`); the other modules are its parts, from the HTTP shell (`handlers`, `watch`,
`render`) down to storage (`store`) and the per-resource rules (`registry`, `strategy`, `validation`)."""
