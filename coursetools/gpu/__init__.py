"""The GPU-evidence tooling: what measures the course's claims on a GPU machine (README.md, docs/gpu.md)."""
