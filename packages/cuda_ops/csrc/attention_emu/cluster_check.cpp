// cluster_check.cpp: the warp emulator's thread-block clusters (emu.h's launch_cluster) checked
// on small kernels built from cluster.cuh's primitives: the right exchanges run and give the
// right values, and each wrong one is reported as what it is (a race between CTAs, a read
// before the mbarrier wait, more bytes than the mbarrier expects, a CTA gone while another still
// reads it). window_mlp_check.cpp relies on these checks. Built and run by tests/test_decode.py:
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
  kPull,             // write, barrier, read the next CTA's words, barrier before exiting
  kPullNoBarrier,    // the same without the barrier between the writes and the reads
  kPullNoFinalWait,  // arrive after the reads but exit without waiting: others may still read
  kPush,             // st.async every CTA's words into every CTA, wait on the mbarrier, read
  kPushNoWait,       // the same, reading without waiting on the mbarrier
  kPushTooMuch,      // the same, the mbarrier expecting half the bytes sent
};

struct Args {
  uint32_t* out;  // (kCtas, kCtas * 4): what each CTA read
  Mode mode;
};

// Each CTA's four words: rank * 100 + i. CTA r reads the next CTA's words (pull) or receives
// every CTA's (push) and writes what it has to out's row r.
__global__ void exchange_kernel(const Args a) {
  GS_DYNAMIC_SHARED(smem);
  uint32_t* mine = reinterpret_cast<uint32_t*>(smem);  // 4 words (16 bytes)
  uint32_t* all = mine + 4;                            // kCtas x 4 words, pushed by the cluster
  uint64_t* bar = reinterpret_cast<uint64_t*>(all + 4 * kCtas);
  const int r = gs::cluster_rank(), tid = threadIdx.x;
  const bool push = a.mode >= kPush;
  if (push && tid == 0) {
    const unsigned bytes = 16 * kCtas;
    gs::mbar_init_expect(bar, a.mode == kPushTooMuch ? bytes / 2 : bytes);
    gs::fence_mbarrier_init();
  }
  if (push) gs::cluster_arrive_relaxed();
  if (tid < 4) gs::attn::sts(mine + tid, uint32_t(r * 100 + tid));
  __syncthreads();
  if (push) {
    gs::cluster_wait();  // the mbarriers exist
    if (tid < kCtas) {
      const uint4 v = gs::attn::lds(reinterpret_cast<const uint4*>(mine));
      gs::st_async_u4(all + 4 * r, tid, v, bar);
    }
    if (a.mode != kPushNoWait) gs::mbar_wait(bar, 0);
    if (tid < 4 * kCtas) a.out[r * 4 * kCtas + tid] = gs::attn::lds(all + tid);
    return;
  }
  if (a.mode != kPullNoBarrier) {
    gs::cluster_arrive();
    gs::cluster_wait();
  }
  if (tid == 0) {
    const uint4 v = gs::load_cluster_u4(mine, (r + 1) % kCtas);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    for (int i = 0; i < 4; ++i) a.out[r * 4 * kCtas + i] = w[i];
  }
  gs::cluster_arrive();
  if (a.mode != kPullNoFinalWait) gs::cluster_wait();
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
        const uint32_t want =
            c.mode == kPush ? uint32_t((i / 4) * 100 + i % 4)
                            : (i < 4 ? uint32_t(((r + 1) % kCtas) * 100 + i) : 0xdeadbeefu);
        ok = ok && out[r * 4 * kCtas + i] == want;
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
      {"pull", kPull, nullptr},
      {"pull without the barrier", kPullNoBarrier, "race on shared byte"},
      {"pull, exit without the final wait", kPullNoFinalWait, "may still read"},
      {"push", kPush, nullptr},
      {"push, read before the mbarrier wait", kPushNoWait, "before waiting for the mbarrier"},
      {"push, more bytes than expected", kPushTooMuch, "more bytes than"},
  };
  bool all = true;
  for (const Case& c : cases) all = run_case(c) && all;
  return all ? 0 : 1;
}
