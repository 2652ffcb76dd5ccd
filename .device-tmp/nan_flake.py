import torch, math, time
import kernels
from guard.measure import measure
from guard.store.suite import Case, Shape
from guard.base.stats import Threshold
fn = kernels.get("triton_flash").loader()
shapes = [(1, 32, 4, 16384, 128, "bfloat16"), (1, 32, 8, 4096, 128, "bfloat16"), (1, 16, 16, 16384, 128, "float16")]
for b, h, kv, s, d, dt in shapes:
    case = Case("x", "triton_flash", Shape(b, h, s, d, None, kv), dt, False, Threshold.parse("median:2%"), True)
    bad_runs = 0
    t0 = time.time()
    for i in range(25):
        q, k, v = measure.make_inputs(case, 1000 + i, "cuda")
        out = measure.call_kernel(fn, q, k, v, False, True)
        bad = int((~torch.isfinite(out)).sum())
        if bad:
            bad_runs += 1
            rows = (~torch.isfinite(out)).any(-1).nonzero()
            print(f"  {case.shape} {dt} run {i}: {bad} non-finite, rows {rows[:3].tolist()} ... {rows[-1].tolist()}", flush=True)
    print(f"{(b,h,kv,s,d,dt)}: {bad_runs} of 25 calls with NaN/Inf ({time.time()-t0:.1f} s)", flush=True)
