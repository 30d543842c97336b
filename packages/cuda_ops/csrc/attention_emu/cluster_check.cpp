// cluster_check.cpp: the warp emulator's thread-block clusters (emu.h's launch_cluster) checked
// on a small kernel built from cluster.cuh's primitives, window_mlp's exchange in miniature:
// every CTA pushes its words into every CTA by st.async and waits on its mbarrier. The right
// exchange runs and gives the right values, and each wrong one is reported as what it is (a
// store before the mbarrier is initialized, a read before the mbarrier wait, more bytes than
// the mbarrier expects). window_mlp_check.cpp relies on these checks. Built and run by
// tests/test_decode.py:
//
//   g++ -std=c++17 -O1 -DGS_ATTN_EMULATE -I csrc csrc/attention_emu/cluster_check.cpp
//   ./a.out
//
// One line a case ("ok  " or "FAIL"); exits 1 if any is off.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "../attention_mma.cuh"
#include "../cluster.cuh"

namespace {

constexpr int kCtas = 4, kThreads = 64;

enum Mode {
  kPush,          // st.async every CTA's words into every CTA, wait on the mbarrier, read
  kPushFirst,     // the same, each CTA storing before it initializes its own mbarrier (so the
                  // first store of all meets an mbarrier not yet initialized)
  kPushNoWait,    // reading without waiting on the mbarrier
  kPushTooMuch,   // the mbarrier expecting half the bytes sent
};

struct Args {
  uint32_t* out;  // (kCtas, kCtas * 4): what each CTA read
  Mode mode;
};

// Each CTA's four words: rank * 100 + i. CTA r receives every CTA's and writes them to out's
// row r.
__global__ void exchange_kernel(const Args a) {
  GS_DYNAMIC_SHARED(smem);
  uint32_t* mine = reinterpret_cast<uint32_t*>(smem);  // 4 words (16 bytes)
  uint32_t* all = mine + 4;                            // kCtas x 4 words, pushed by the cluster
  uint64_t* bar = reinterpret_cast<uint64_t*>(all + 4 * kCtas);
  const int r = gs::cluster_rank(), tid = threadIdx.x;
  auto init = [&] {
    if (tid == 0) {
      const unsigned bytes = 16 * kCtas;
      gs::mbar_init_expect(bar, a.mode == kPushTooMuch ? bytes / 2 : bytes);
      gs::fence_mbarrier_init();
    }
  };
  if (a.mode != kPushFirst) init();
  gs::cluster_arrive_relaxed();
  if (tid < 4) gs::attn::sts(mine + tid, uint32_t(r * 100 + tid));
  __syncthreads();
  if (a.mode != kPushFirst) gs::cluster_wait();  // the mbarriers exist
  if (tid < kCtas) {
    const uint4 v = gs::attn::lds(reinterpret_cast<const uint4*>(mine));
    gs::st_async_u4(all + 4 * r, tid, v, bar);
  }
  if (a.mode == kPushFirst) {
    init();
    __syncthreads();
    gs::cluster_wait();
  }
  if (a.mode != kPushNoWait) gs::mbar_wait(bar, 0);
  if (tid < 4 * kCtas) a.out[r * 4 * kCtas + tid] = gs::attn::lds(all + tid);
}

struct Case {
  const char* name;
  Mode mode;
  const char* error;  // a part of the message expected, or null: none, and the values right
};

bool run_case(const Case& c) {
  std::vector<uint32_t> out(kCtas * 4 * kCtas, 0xdeadbeefu);
  const size_t smem = (4 + 4 * kCtas) * 4 + 8;
  std::string error;
  try {
    emu::launch_cluster(&exchange_kernel, dim3(kCtas), dim3(kThreads), smem, kCtas,
                        Args{out.data(), c.mode});
  } catch (const emu::Error& e) {
    error = e.what();
  }
  bool ok;
  if (c.error) {
    ok = error.find(c.error) != std::string::npos;
  } else {
    ok = error.empty();
    for (int r = 0; r < kCtas; ++r)
      for (int i = 0; i < 4 * kCtas; ++i) {
        ok = ok && out[r * 4 * kCtas + i] == uint32_t((i / 4) * 100 + i % 4);
      }
  }
  std::printf("%s %s: %s%s\n", ok ? "ok  " : "FAIL", c.name,
              c.error ? "expected an error, got: " : "values and no error; ",
              error.empty() ? "none" : error.c_str());
  return ok;
}

}  // namespace

int main() {
  const Case cases[] = {
      {"push", kPush, nullptr},
      {"push before the mbarriers exist", kPushFirst, "before it was initialized"},
      {"push, read before the mbarrier wait", kPushNoWait, "before waiting for the mbarrier"},
      {"push, more bytes than expected", kPushTooMuch, "more bytes than"},
  };
  bool all = true;
  for (const Case& c : cases) all = run_case(c) && all;
  return all ? 0 : 1;
}
