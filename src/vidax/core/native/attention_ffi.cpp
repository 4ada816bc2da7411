// XLA FFI handler of vidax's fused CPU attention, and the Python module that hands it to JAX.
//
// jax.ffi.register_ffi_target("vidax_attention_f32", _attention.handler(), platform="cpu") makes the
// handler callable from jitted code (vidax/core/attention.py, implementation "cpu_flash"). The work is
// one task per (batch, head), shared out over XLA's own intra-op thread pool (the FFI ThreadPool
// context): no second pool competes with XLA's for the cores.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "attention_problem.h"
#include "xla/ffi/api/ffi.h"

namespace nb = nanobind;
namespace ffi = xla::ffi;

namespace vidax_attention {
namespace {

using HeadFn = void (*)(const Problem&, int64_t, int64_t, float*);

struct Isa {
  HeadFn fn;
  const char* name;
};

// The widest kernel this CPU runs. VIDAX_CPU_ATTENTION_ISA=avx2 or =generic asks for a narrower one
// (tests run every compiled kernel this way); a wider one than the CPU has is never taken.
Isa detect() {
  const char* env = std::getenv("VIDAX_CPU_ATTENTION_ISA");
  const std::string want = env == nullptr ? "" : env;
#if defined(VIDAX_X86)
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx512 && (want.empty() || want == "avx512")) return {avx512::attention_head, "avx512"};
  if (avx2 && want != "generic") return {avx2::attention_head, "avx2"};
#endif
  return {generic::attention_head, "generic"};
}

const Isa& isa() {
  static const Isa chosen = detect();
  return chosen;
}

// Work shared by the caller and the pool tasks. Held by shared_ptr: a task the pool starts after the
// caller has returned finds no heads left and touches only this.
struct Shared {
  Problem problem;
  HeadFn fn;
  int64_t total;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
};

void work(const std::shared_ptr<Shared>& sh) {
  std::vector<float> scratch;
  for (int64_t t = sh->next.fetch_add(1); t < sh->total; t = sh->next.fetch_add(1)) {
    if (scratch.empty()) scratch.resize(scratch_floats(sh->problem));
    const int64_t b = t / sh->problem.heads, h = t % sh->problem.heads;
    sh->fn(sh->problem, b, h, scratch.data());
    sh->done.fetch_add(1, std::memory_order_release);
  }
}

ffi::Error Attention(ffi::ThreadPool pool, ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                     ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::S32> kv_lengths, ffi::ResultBuffer<ffi::F32> out,
                     float scale) {
  const auto qd = q.dimensions(), kd = k.dimensions(), vd = v.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4)
    return ffi::Error::InvalidArgument("vidax attention: q, k and v must be (B, S, H, D)");
  if (kd[0] != qd[0] || kd[2] != qd[2] || kd[3] != qd[3] || vd[0] != kd[0] || vd[1] != kd[1] || vd[2] != kd[2] ||
      vd[3] != kd[3])
    return ffi::Error::InvalidArgument("vidax attention: q (B, Sq, H, D) and k, v (B, Sk, H, D) disagree");
  if (kv_lengths.element_count() != size_t(qd[0]))
    return ffi::Error::InvalidArgument("vidax attention: kv_lengths must be (B,)");
  auto sh = std::make_shared<Shared>();
  sh->problem = Problem{q.typed_data(), k.typed_data(), v.typed_data(), out->typed_data(), kv_lengths.typed_data(),
                        qd[0], qd[1], kd[1], qd[2], qd[3], scale};
  sh->fn = isa().fn;
  sh->total = qd[0] * qd[2];
  if (sh->total == 0 || qd[1] == 0) return ffi::Error::Success();
  const int64_t helpers = std::min<int64_t>(pool.num_threads(), sh->total) - 1;
  for (int64_t i = 0; i < helpers; ++i) pool.Schedule([sh] { work(sh); });
  work(sh);
  // Heads a pool task has claimed are being computed on a running thread: wait for those only.
  while (sh->done.load(std::memory_order_acquire) < sh->total) std::this_thread::yield();
  return ffi::Error::Success();
}

}  // namespace
}  // namespace vidax_attention

XLA_FFI_DEFINE_HANDLER_SYMBOL(vidax_attention_f32, vidax_attention::Attention,
                              xla::ffi::Ffi::Bind()
                                  .Ctx<xla::ffi::ThreadPool>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Arg<xla::ffi::Buffer<xla::ffi::S32>>()
                                  .Ret<xla::ffi::Buffer<xla::ffi::F32>>()
                                  .Attr<float>("scale"));

NB_MODULE(_attention, m) {
  m.doc() = "vidax's fused CPU attention as an XLA FFI handler (see vidax/core/attention.py)";
  m.def("handler", [] { return nb::capsule(reinterpret_cast<void*>(vidax_attention_f32)); },
        "The XLA FFI handler of 'vidax_attention_f32' as a PyCapsule, for jax.ffi.register_ffi_target.");
  m.def("isa", [] { return std::string(vidax_attention::isa().name); },
        "The instruction set the kernel runs with on this CPU: 'avx512', 'avx2' or 'generic'.");
}
