"""What the GPU notebook test (tests/gpu/test_solutions_on_gpu.py) and gpu_evidence.py share: the probe that reads a
lesson's SUMMARY after its notebook ran, a cell's text, and the CUDA-event timing of tests/gpu/test_fp8_gpu.py."""

from __future__ import annotations

SUMMARY_MARK = "GPU_EVIDENCE_SUMMARY "
# run after the notebook's own cells: the lesson's SUMMARY dict (lessons 05-08 keep one), as JSON on one line
SUMMARY_PROBE = (
    "import json as _json\n"
    f"print({SUMMARY_MARK!r} + _json.dumps({{str(k): str(v) for k, v in globals().get('SUMMARY', {{}}).items()}}))"
)


def cell_text(cell) -> str:
    """A code cell's printed and displayed text (its stream outputs and text/plain results), in order."""
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        elif "data" in output:
            parts.append(output["data"].get("text/plain", ""))
    return "".join(parts)


def cuda_ms(fn, warmup=3, repeats=10) -> float:
    """Milliseconds per call of `fn` on the GPU (CUDA events), after `warmup` calls."""
    import torch

    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats
