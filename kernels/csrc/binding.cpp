// Torch binding of the FlashAttention-2 forward kernel in flash_fwd.cu.
//
// flash_fwd(q, k, v, causal, scale) -> out, for (batch, heads, seq, head_dim) CUDA
// tensors of dtype float16 or bfloat16, head_dim 64 or 128, k/v heads dividing q heads.
// kernels/cuda_flash.py validates the same things first and raises ValueError; the
// checks here keep the extension safe when it is called directly.
//
// FLASH_HOST_SYNTAX_ONLY: CPU-only torch wheels ship no c10/cuda configuration
// headers, so tests/test_cuda_flash.py compiles this file with that macro defined and
// the current stream replaced by a stub; everything else is type-checked as built.

#include <torch/extension.h>

#include <c10/core/DeviceGuard.h>

#include <cmath>
#include <cstdint>

#include "flash_fwd.h"

#ifdef FLASH_HOST_SYNTAX_ONLY
namespace {
cudaStream_t current_stream(c10::DeviceIndex /*device*/) { return nullptr; }
}  // namespace
#else
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAStream.h>
namespace {
cudaStream_t current_stream(c10::DeviceIndex device) {
  return c10::cuda::getCurrentCUDAStream(device).stream();
}
}  // namespace
#endif

namespace {

void check_input(const torch::Tensor& t, const char* name, const torch::Tensor& q) {
  TORCH_CHECK(t.is_cuda(), "flash_fwd: ", name, " must be a CUDA tensor, got device ",
              t.device());
  TORCH_CHECK(t.device() == q.device(), "flash_fwd: ", name, " is on ", t.device(),
              " but q is on ", q.device());
  TORCH_CHECK(t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16, "flash_fwd: ",
              name, " must be float16 or bfloat16, got ", t.scalar_type());
  TORCH_CHECK(t.scalar_type() == q.scalar_type(), "flash_fwd: ", name, " has dtype ",
              t.scalar_type(), " but q has ", q.scalar_type());
  TORCH_CHECK(t.dim() == 4, "flash_fwd: ", name,
              " must have 4 dims (batch, heads, seq, head_dim), got ", t.dim());
  TORCH_CHECK(t.size(3) == 64 || t.size(3) == 128, "flash_fwd: ", name,
              " head_dim must be 64 or 128, got ", t.size(3));
  TORCH_CHECK(t.size(0) <= 65535 && t.size(1) <= 65535, "flash_fwd: ", name,
              " batch and heads must be at most 65535 (grid limits)");
  TORCH_CHECK(t.size(2) <= INT32_MAX, "flash_fwd: ", name, " seq is too long");
}

// The kernel copies K/V rows with 16-byte cp.async and reads Q in 4-byte words: it
// needs a unit last stride, the other strides multiples of 8 elements and a 16-byte
// aligned pointer. Anything else (a slice along head_dim, an odd storage offset) is
// copied into a fresh contiguous tensor, which satisfies all three.
torch::Tensor kernel_ready(const torch::Tensor& t) {
  const bool ok = t.stride(3) == 1 && t.stride(0) % 8 == 0 && t.stride(1) % 8 == 0 &&
                  t.stride(2) % 8 == 0 &&
                  reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0;
  if (ok) return t;
  auto fresh = torch::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
  fresh.copy_(t);
  return fresh;
}

}  // namespace

// Which kernel runs: the Hopper one where it is built and the GPU is sm_90, else the
// mma.sync one. kAuto picks by shape; the others force one (benchmarks compare them).
enum class KernelPath : int64_t { kAuto = 0, kMmaSync = 1, kHopper = 2 };

namespace {

bool tma_ready(const torch::Tensor& t) {
  return t.stride(3) == 1 && t.stride(0) % 8 == 0 && t.stride(1) % 8 == 0 &&
         t.stride(2) % 8 == 0 && reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0;
}

bool use_hopper(const torch::Tensor& q, KernelPath path) {
#ifdef FLASH_SM90
  const auto props = at::cuda::getDeviceProperties(q.device().index());
  const bool hopper = props->major == 9 && props->minor == 0;
  TORCH_CHECK(path != KernelPath::kHopper || hopper,
              "flash_fwd: the Hopper kernel needs an sm_90 GPU, this one is sm_", props->major,
              props->minor);
  return hopper && path != KernelPath::kMmaSync;
#else
  TORCH_CHECK(path != KernelPath::kHopper,
              "flash_fwd: this extension was built without the Hopper kernel");
  (void)q;
  return false;
#endif
}

}  // namespace

torch::Tensor flash_fwd(torch::Tensor q, torch::Tensor k, torch::Tensor v, bool causal,
                        double scale, c10::optional<torch::Tensor> out_arg, int64_t path_arg) {
  TORCH_CHECK(path_arg >= 0 && path_arg <= 2, "flash_fwd: path must be 0 (auto), 1 (mma.sync) ",
              "or 2 (Hopper), got ", path_arg);
  const auto path = static_cast<KernelPath>(path_arg);
  check_input(q, "q", q);
  check_input(k, "k", q);
  check_input(v, "v", q);
  TORCH_CHECK(k.size(3) == q.size(3) && v.size(3) == q.size(3),
              "flash_fwd: q, k and v must share head_dim, got ", q.size(3), ", ", k.size(3),
              ", ", v.size(3));
  TORCH_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0),
              "flash_fwd: q, k and v must share batch, got ", q.size(0), ", ", k.size(0), ", ",
              v.size(0));
  TORCH_CHECK(k.size(1) == v.size(1), "flash_fwd: k and v must share heads, got ", k.size(1),
              " and ", v.size(1));
  TORCH_CHECK(k.size(1) >= 1 && q.size(1) % k.size(1) == 0, "flash_fwd: q heads (",
              q.size(1), ") must be a multiple of k/v heads (", k.size(1), ")");
  TORCH_CHECK(k.size(2) == v.size(2), "flash_fwd: k and v must share seq, got ", k.size(2),
              " and ", v.size(2));
  TORCH_CHECK(std::isfinite(scale), "flash_fwd: scale must be finite, got ", scale);

  torch::Tensor result;
  if (out_arg.has_value()) {
    result = *out_arg;
    TORCH_CHECK(result.device() == q.device(), "flash_fwd: out is on ", result.device(),
                " but q is on ", q.device());
    TORCH_CHECK(result.scalar_type() == q.scalar_type(), "flash_fwd: out has dtype ",
                result.scalar_type(), " but q has ", q.scalar_type());
    TORCH_CHECK(result.sizes() == q.sizes(), "flash_fwd: out has shape ", result.sizes(),
                " but q has ", q.sizes());
  } else {
    result = torch::empty(q.sizes(), q.options().memory_format(at::MemoryFormat::Contiguous));
  }
  if (result.numel() == 0) return result;  // batch, heads or seq_q is 0: nothing to launch

  const c10::DeviceGuard guard(q.device());
  if (k.size(2) == 0) return result.zero_();  // no key: the empty sum (mma.sync writes 0 too)
  q = kernel_ready(q);
  k = kernel_ready(k);
  v = kernel_ready(v);
  // The kernels write O with 16-byte stores (TMA on Hopper): an `out` they cannot write
  // gets the result through a fresh tensor.
  auto out = tma_ready(result) ? result : torch::empty(q.sizes(), q.options());
  const bool hopper = use_hopper(q, path);

  FlashFwdParams p{};
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.o = out.data_ptr();
  p.q_batch_stride = q.stride(0);
  p.q_head_stride = q.stride(1);
  p.q_row_stride = q.stride(2);
  p.k_batch_stride = k.stride(0);
  p.k_head_stride = k.stride(1);
  p.k_row_stride = k.stride(2);
  p.v_batch_stride = v.stride(0);
  p.v_head_stride = v.stride(1);
  p.v_row_stride = v.stride(2);
  p.o_batch_stride = out.stride(0);
  p.o_head_stride = out.stride(1);
  p.o_row_stride = out.stride(2);
  p.batch = static_cast<int>(q.size(0));
  p.heads = static_cast<int>(q.size(1));
  p.heads_kv = static_cast<int>(k.size(1));
  p.seq_q = static_cast<int>(q.size(2));
  p.seq_k = static_cast<int>(k.size(2));
  p.head_dim = static_cast<int>(q.size(3));
  p.scale_log2 = static_cast<float>(scale * 1.4426950408889634);  // log2(e)
  p.causal = causal;
  p.is_bf16 = q.scalar_type() == at::kBFloat16;

  const cudaStream_t stream = current_stream(q.device().index());
#ifdef FLASH_SM90
  const bool sm90 = hopper && (path == KernelPath::kHopper || flash_fwd_hopper_pays(p));
  const cudaError_t err = sm90 ? flash_fwd_sm90_launch(p, stream) : flash_fwd_launch(p, stream);
#else
  (void)hopper;
  const cudaError_t err = flash_fwd_launch(p, stream);
#endif
  TORCH_CHECK(err == cudaSuccess, "flash_fwd: kernel launch failed: ", cudaGetErrorString(err));
  if (!out.is_same(result)) result.copy_(out);
  return result;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "FlashAttention-2 forward (mma.sync, fp16/bf16, head_dim 64/128)";
  m.def("flash_fwd", &flash_fwd, "FlashAttention-2 forward", py::arg("q"), py::arg("k"),
        py::arg("v"), py::arg("causal"), py::arg("scale"), py::arg("out") = py::none(),
        py::arg("path") = 0);
}
