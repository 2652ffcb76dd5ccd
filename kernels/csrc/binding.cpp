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

torch::Tensor flash_fwd(torch::Tensor q, torch::Tensor k, torch::Tensor v, bool causal,
                        double scale) {
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

  auto out = torch::empty(q.sizes(), q.options().memory_format(at::MemoryFormat::Contiguous));
  if (out.numel() == 0) return out;  // batch, heads or seq_q is 0: nothing to launch

  const c10::DeviceGuard guard(q.device());
  q = kernel_ready(q);
  k = kernel_ready(k);
  v = kernel_ready(v);

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

  const cudaError_t err = flash_fwd_launch(p, current_stream(q.device().index()));
  TORCH_CHECK(err == cudaSuccess, "flash_fwd: kernel launch failed: ", cudaGetErrorString(err));
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "FlashAttention-2 forward (mma.sync, fp16/bf16, head_dim 64/128)";
  m.def("flash_fwd", &flash_fwd, "FlashAttention-2 forward", py::arg("q"), py::arg("k"),
        py::arg("v"), py::arg("causal"), py::arg("scale"));
}
