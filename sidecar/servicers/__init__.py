"""One servicer per RPC. Each converts the proto request into backend calls (offloading CPU-heavy
native work) and the results back into the proto response; errors are raised as `SidecarError`s and
mapped to statuses by `sidecar.rpc`.
"""
