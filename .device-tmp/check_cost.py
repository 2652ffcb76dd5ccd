import time, torch, functools
from guard.store.suite import load_suite
from guard.measure import measure, fingerprint
import kernels
suite = load_suite("suites/default.yaml")
want = {"b1-h32-s4096-d128-kv8-full-bfloat16","b1-h16-s16384-d128-full","b4-h32-s4096-d128-full","b2-h8-s2048-d128-full"}
cases = [c for c in (*suite.cases, *suite.surface) if c.kernel == "gluon_flash" and c.name in want]
fn = kernels.get("gluon_flash").loader()
def t(f):
    torch.cuda.synchronize(); t0=time.perf_counter(); r=f(); torch.cuda.synchronize(); return r, time.perf_counter()-t0
for c in cases:
    tol = suite.tolerances[c.dtype]
    (q,k,v), a = t(lambda: measure.make_inputs(c, 1, "cuda"))
    rows, b = t(lambda: measure.sampled_rows(q, k, 1))
    _, s = t(lambda: kernels.get("sdpa").loader()(q, k, v, causal=c.causal))
    _, y = t(lambda: measure.Yardstick.of(q, k, v, c.causal, tol, 1))
    _, kc = t(lambda: measure.call_kernel(fn, q, k, v, c.causal, True))
    _, ch = t(lambda: measure.check(fn, c, tol, 2, "cuda", True))
    _, fp = t(lambda: fingerprint.take(functools.partial(measure.check, fn, c, tol, 3, "cuda", True), "kernels"))
    print(f"{c.name:<40} inputs {a:.3f} rows {b:.3f} sdpa {s:.3f} yard {y:.3f} call {kc:.3f} check {ch:.3f} check+fp {fp:.3f}", flush=True)
