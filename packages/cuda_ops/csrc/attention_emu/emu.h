// emu.h: a host emulator of the few CUDA features the attention kernels use, so their exact
// device code (built with -DGS_ATTN_EMULATE) runs and is checked on a machine without a GPU.
//
// Every CUDA thread of a block is a fiber (ucontext) on one OS thread; blocks run one after the
// other. Fibers run until they reach a collective (__syncthreads, __syncwarp, shuffles, mma,
// ldmatrix), where they wait for the block or warp, picked in a fresh random order each round so
// that results cannot depend on one lucky interleaving. Warp collectives compute what the PTX
// ISA specifies from all 32 lanes' operands: mma.m16n8k16 and ldmatrix with their fragment
// layouts, shuffles by lane. cp.async copies land when the issuing thread waits for their group
// (the latest moment the hardware allows), so a missing wait reads stale data. Shared memory
// has a shadow that reports a race — a read of bytes another thread wrote, or a write of bytes
// another thread read or wrote, with no barrier in between — and ldmatrix / cp.async addresses
// are checked for bounds and alignment. A mismatched barrier (deadlock) is reported, not hung.
// Thread-block clusters (launch_cluster): the CTAs of a cluster run together, their threads
// interleaved, and drift apart; barrier.cluster (cluster_arrive / cluster_wait) orders accesses
// as __syncthreads does (an access between a thread's arrive and its wait counts in the epoch
// current when it happens: the split barrier is modelled no finer). mbarriers with transaction
// counts (mbar_init_expect, mbar_wait) and st.async into another CTA's shared memory: a store to
// an mbarrier not yet initialized, beyond the bytes it expects, or into an exited CTA is an
// error, and so is a thread's read of bytes st.async delivered before that thread has waited for
// the phase they complete.
// Warpgroup MMA (wgmma.mma_async, sm_90a): the 128 threads of a warpgroup issue it together;
// it runs when they wait for its group (wgmma.wait_group, the latest moment the hardware allows),
// reading then the A fragment registers, the accumulators and the shared-memory operands named
// by their descriptors (the canonical layouts: no swizzling, or 128-byte), so a kernel that touches them
// before the wait computes a wrong result. An issue needs a wgmma.fence since the thread's last
// wait, and the operands' bytes must have been published to the async proxy: their writer ran
// fence.proxy.async after writing them, in an earlier block epoch (or is the reading thread).
// Floating point: products and sums in fp32 (the tensor cores' exact rounding is not modelled),
// ex2.approx as exp2f. Errors throw emu::Error.
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#define __global__ inline  // kernels live in headers: one definition across files
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint2 {
  unsigned x, y;
};
struct uint4 {
  unsigned x, y, z, w;
};
struct float2 {
  float x, y;
};
struct float4 {
  float x, y, z, w;
};
inline dim3 threadIdx, blockIdx, blockDim, gridDim;

inline int min(int a, int b) { return a < b ? a : b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }  // the device's MUFU.RSQ
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

namespace emu {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Copy {
  void* dst;
  const void* src;
  int size, src_bytes;
};

struct Barrier {
  int n = 0, count = 0;
  long gen = 0;
};

// Per shared byte: the last writer and the last reader(s), with the block and warp barrier
// generations they acted in (an epoch ends when a barrier releases).
struct Shadow {
  int writer = -1;
  long w_epoch = -1, w_wepoch = -1, w_cepoch = -1;
  int reader = -1, r_warp = -1;  // reader -2: several threads, all of warp r_warp (-1: several)
  long r_epoch = -1, r_wepoch = -1, r_cepoch = -1;
  long async_bar = -1, async_phase = -1;  // st.async: the mbarrier (offset) and phase it completes
  long w_proxy = -1;  // the writer's count of fence.proxy.async at the write
};

// One wgmma.mma_async as issued: where its fragments live until the wait runs it
struct WgmmaOp {
  float* d;
  int n;              // N of m64nNk16
  const uint32_t* a;  // four A fragment registers, or null: A from shared memory (adesc)
  uint64_t adesc, bdesc;
  bool tnsp_b, scale_d;
};

// An mbarrier: arrivals still pending and transaction bytes still expected in the current phase
struct MBar {
  int expected = 0, pending = 0;
  long tx = 0, phase = 0;  // phase: phases completed so far
};

struct Fiber {
  ucontext_t ctx;
  std::unique_ptr<char[]> stack;  // not value-initialized: pages are touched only where used
  bool done = false;
  long arrived = -1;  // the cluster barrier's generation at this thread's arrive, -1: none open
  std::map<size_t, long> seen;  // mbarrier offset -> the phases this thread has seen complete
  std::vector<Copy> open;                  // issued, not yet committed
  std::vector<std::vector<Copy>> groups;   // committed, oldest first
  std::vector<long> proxy_fences;                  // fence.proxy.async: the block epoch of each
  bool wg_fenced = false;                          // a wgmma.fence since the last wait
  std::vector<WgmmaOp> wg_open;                    // wgmma issued, not yet committed
  std::vector<std::vector<WgmmaOp>> wg_groups;     // committed, oldest first
};

struct WarpSlots {
  uint32_t w[32][8];
  const void* addr[32];
};

struct WarpgroupSlots {
  const uint32_t* a[128];  // each thread's A fragment registers of the wgmma being run
};

struct Block {
  int n = 0;
  int alive = 0;  // threads not yet exited
  int rank = 0;   // in its cluster
  dim3 idx;       // its blockIdx
  std::map<size_t, MBar> mbars;  // by shared-memory offset
  std::vector<Fiber> fibers;
  std::vector<unsigned char> smem;
  std::vector<Shadow> shadow;
  Barrier block_bar;  // block_bar.gen: the block epoch
  std::vector<Barrier> warp_bar;  // warp_bar[w].gen: warp w's epoch
  std::vector<WarpSlots> slots;
  std::vector<Barrier> wg_bar;  // per warpgroup of 128 threads (wgmma)
  std::vector<WarpgroupSlots> wg_slots;
};

// The CTAs of the cluster being run (launch_cluster) and barrier.cluster over all their threads
struct Cluster {
  std::vector<Block>* blocks = nullptr;
  Barrier bar;
};

inline ucontext_t g_scheduler;
inline Block* g_block = nullptr;
inline Cluster* g_cluster = nullptr;  // null outside launch_cluster
inline int g_cur = 0;
inline long g_progress = 0;
inline std::mt19937 g_rng(12345);
inline std::function<void()> g_body;
inline std::string g_error;  // set by a fiber that failed; the scheduler rethrows it

inline void yield() { swapcontext(&g_block->fibers[g_cur].ctx, &g_scheduler); }
inline int lane() { return g_cur % 32; }
inline int warp() { return g_cur / 32; }

inline void wait_at(Barrier& b) {
  const long gen = b.gen;
  ++g_progress;
  if (++b.count >= b.n) {
    b.count = 0;
    ++b.gen;
    return;
  }
  while (b.gen == gen) yield();
}
inline void warp_sync() { wait_at(g_block->warp_bar[warp()]); }
inline void block_sync() { wait_at(g_block->block_bar); }
inline long epoch() { return g_block->block_bar.gen; }
inline long cluster_epoch() { return g_cluster ? g_cluster->bar.gen : 0; }
inline long warp_epoch() { return g_block->warp_bar[warp()].gen; }

[[noreturn]] inline void fail(const std::string& what) {
  throw Error("emu: block (" + std::to_string(blockIdx.x) + "," + std::to_string(blockIdx.y) +
              "," + std::to_string(blockIdx.z) + ") thread " + std::to_string(g_cur) + ": " +
              what);
}

// barrier.cluster.arrive / .wait: every thread of every CTA of the cluster arrives, then waits
// for the others (an exited thread counts as arrived)
inline void cluster_arrive() {
  if (!g_cluster) fail("barrier.cluster outside a cluster launch");
  Fiber& f = g_block->fibers[g_cur];
  if (f.arrived >= 0) fail("barrier.cluster.arrive twice without a wait between");
  Barrier& b = g_cluster->bar;
  f.arrived = b.gen;
  ++g_progress;
  if (++b.count >= b.n) {
    b.count = 0;
    ++b.gen;
  }
}
inline void cluster_wait() {
  Fiber& f = g_block->fibers[g_cur];
  if (f.arrived < 0) fail("barrier.cluster.wait without an arrive before it");
  while (g_cluster->bar.gen == f.arrived) yield();
  f.arrived = -1;
}
inline int cluster_rank() { return g_block->rank; }

inline size_t smem_offset(const void* p, size_t n, size_t align) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  const unsigned char* base = g_block->smem.data();
  if (c < base || c + n > base + g_block->smem.size())
    fail("shared-memory access outside the dynamic allocation");
  const size_t off = static_cast<size_t>(c - base);
  if (off % align) fail("misaligned shared-memory access (" + std::to_string(align) + " bytes)");
  return off;
}

// The race rule: another thread's access in this block epoch is a conflict unless both are in
// one warp and a warp collective came between. `other_warp` is other's warp (-1: several).
// A cluster barrier between the two accesses orders them too.
inline bool conflicts(int other, int other_warp, long ep, long wep, long cep) {
  if (other == -1 || other == g_cur || ep != epoch() || cep != cluster_epoch()) return false;
  return other_warp != warp() || wep == warp_epoch();
}
inline bool conflicts_writer(const Shadow& s) {
  return conflicts(s.writer, s.writer < 0 ? -1 : s.writer / 32, s.w_epoch, s.w_wepoch,
                   s.w_cepoch);
}
inline bool conflicts_reader(const Shadow& s) {
  return conflicts(s.reader, s.r_warp, s.r_epoch, s.r_wepoch, s.r_cepoch);
}

inline void shared_access(const void* p, size_t n, bool write) {
  const size_t off = smem_offset(p, n, 1);
  Block& B = *g_block;
  for (size_t i = off; i < off + n; ++i) {
    Shadow& s = B.shadow[i];
    if (conflicts_writer(s))
      fail(std::string(write ? "write-after-write" : "read-after-write") +
           " race on shared byte " + std::to_string(i) + " (other thread " +
           std::to_string(s.writer) + ")");
    if (write) {
      if (conflicts_reader(s)) fail("write-after-read race on shared byte " + std::to_string(i));
      s.writer = g_cur;
      s.w_proxy = static_cast<long>(B.fibers[g_cur].proxy_fences.size());
      s.w_epoch = epoch();
      s.w_wepoch = warp_epoch();
      s.w_cepoch = cluster_epoch();
    } else {
      if (s.async_bar >= 0) {
        const auto& seen = B.fibers[g_cur].seen;
        const auto it = seen.find(static_cast<size_t>(s.async_bar));
        if (it == seen.end() || it->second <= s.async_phase)
          fail("read of shared byte " + std::to_string(i) + ", which st.async delivered, before "
               "waiting for the mbarrier phase it completes");
      }
      const bool several = s.r_epoch == epoch() && s.reader != g_cur && s.reader != -1;
      s.r_warp = several && s.r_warp != warp() ? -1 : warp();
      s.reader = several ? -2 : g_cur;
      s.r_epoch = epoch();
      s.r_wepoch = warp_epoch();
      s.r_cepoch = cluster_epoch();
    }
  }
}

inline unsigned char* dynamic_shared() { return g_block->smem.data(); }

// --- mbarriers and st.async -------------------------------------------------------------------
inline void mbar_complete_if_done(MBar& m) {
  if (m.pending == 0 && m.tx == 0) {
    ++m.phase;
    m.pending = m.expected;
  }
}
// mbarrier.init with one arrival, then that arrival expecting `bytes` of transactions
inline void mbar_init_expect(uint64_t* bar, unsigned bytes) {
  const size_t off = smem_offset(bar, 8, 8);
  shared_access(bar, 8, true);
  MBar& m = g_block->mbars[off] = MBar{1, 0, static_cast<long>(bytes), 0};
  mbar_complete_if_done(m);
}
// mbarrier.try_wait.parity in a loop: until the phase of that parity has completed
inline void mbar_wait(uint64_t* bar, unsigned parity) {
  const size_t off = smem_offset(bar, 8, 8);
  auto it = g_block->mbars.find(off);
  if (it == g_block->mbars.end()) fail("mbarrier wait on shared memory that is no mbarrier");
  ++g_progress;
  while ((it->second.phase & 1) == static_cast<long>(parity & 1)) yield();
  g_block->fibers[g_cur].seen[off] = it->second.phase;
}
// st.async of n bytes into CTA rank's shared memory at local's offset, completing n bytes of
// rank's mbarrier at local_bar's offset
inline void st_async(void* local, int rank, const void* src, size_t n, uint64_t* local_bar) {
  if (!g_cluster) fail("st.async outside a cluster launch");
  const size_t off = smem_offset(local, n, n), bar = smem_offset(local_bar, 8, 8);
  std::vector<Block>& blocks = *g_cluster->blocks;
  if (rank < 0 || rank >= static_cast<int>(blocks.size()))
    fail("cluster rank " + std::to_string(rank) + " outside the cluster");
  Block& other = blocks[rank];
  if (other.alive == 0) fail("st.async into CTA " + std::to_string(rank) + " after it exited");
  auto it = other.mbars.find(bar);
  if (it == other.mbars.end())
    fail("st.async to CTA " + std::to_string(rank) + "'s mbarrier before it was initialized "
         "(no cluster barrier between its mbarrier.init and this store?)");
  MBar& m = it->second;
  // beyond the bytes expected: in a phase whose arrivals are in, or in one no arrival has
  // announced yet after a completed one (the kernels here use each phase once)
  const bool announced_all = m.pending == 0, unannounced = m.phase > 0 && m.pending == m.expected;
  if (m.tx < static_cast<long>(n) && (announced_all || unannounced))
    fail("st.async of more bytes than CTA " + std::to_string(rank) + "'s mbarrier expects");
  for (size_t i = off; i < off + n; ++i) {
    other.shadow[i].async_bar = static_cast<long>(bar);
    other.shadow[i].async_phase = m.phase;
  }
  std::memcpy(other.smem.data() + off, src, n);
  m.tx -= static_cast<long>(n);
  ++g_progress;
  mbar_complete_if_done(m);
}

// --- cp.async ----------------------------------------------------------------------------------
inline void cp_async(void* dst, const void* src, int size, int src_bytes) {
  smem_offset(dst, size, size);
  if (reinterpret_cast<uintptr_t>(src) % size) fail("misaligned cp.async source");
  if (src_bytes < 0 || src_bytes > size) fail("cp.async src-size out of range");
  // the hardware may write at any time from now on: nobody else may still be reading it
  Block& B = *g_block;
  const size_t off = smem_offset(dst, size, size);
  for (size_t i = off; i < off + size; ++i)
    if (conflicts_reader(B.shadow[i]))
      fail("cp.async overwrites shared byte " + std::to_string(i) + " still read this epoch");
  B.fibers[g_cur].open.push_back({dst, src, size, src_bytes});
}
inline void cp_async_commit() {
  Fiber& f = g_block->fibers[g_cur];
  f.groups.push_back(std::move(f.open));
  f.open.clear();
}
inline void cp_async_wait(int keep) {
  Fiber& f = g_block->fibers[g_cur];
  while (static_cast<int>(f.groups.size()) > keep) {
    for (const Copy& c : f.groups.front()) {
      shared_access(c.dst, c.size, true);
      std::memcpy(c.dst, c.src, c.src_bytes);
      std::memset(static_cast<char*>(c.dst) + c.src_bytes, 0, c.size - c.src_bytes);
    }
    f.groups.erase(f.groups.begin());
  }
}

// --- warp collectives ----------------------------------------------------------------------------
template <typename T> T shfl(T v, int src_lane) {
  static_assert(sizeof(T) == 4, "32-bit shuffles only");
  WarpSlots& S = g_block->slots[warp()];
  std::memcpy(&S.w[lane()][0], &v, 4);
  warp_sync();
  T out;
  std::memcpy(&out, &S.w[src_lane & 31][0], 4);
  warp_sync();
  return out;
}

inline float bf16_bits_to_float(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}
inline uint16_t half_of(uint32_t w, int hi) { return static_cast<uint16_t>(hi ? w >> 16 : w); }

inline void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  WarpSlots& S = g_block->slots[warp()];
  const int me = lane();
  for (int i = 0; i < 4; ++i) S.w[me][i] = a[i];
  S.w[me][4] = b0;
  S.w[me][5] = b1;
  warp_sync();
  auto A = [&](int row, int col) {  // A fragment layout (attention_mma.cuh)
    const int src = (row & 7) * 4 + ((col & 7) >> 1), reg = (row >> 3) + 2 * (col >> 3);
    return bf16_bits_to_float(half_of(S.w[src][reg], col & 1));
  };
  auto Bm = [&](int k, int n) {  // B fragment layout
    const int src = n * 4 + ((k & 7) >> 1), reg = 4 + (k >> 3);
    return bf16_bits_to_float(half_of(S.w[src][reg], k & 1));
  };
  const int g = me >> 2, t = me & 3;
  float out[4];
  for (int r = 0; r < 4; ++r) {
    const int row = g + 8 * (r >> 1), col = 2 * t + (r & 1);
    float acc = 0.0f;
    for (int k = 0; k < 16; ++k) acc += A(row, k) * Bm(k, col);
    out[r] = d[r] + acc;
  }
  warp_sync();
  for (int r = 0; r < 4; ++r) d[r] = out[r];
}

inline void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row, bool trans) {
  WarpSlots& S = g_block->slots[warp()];
  const int me = lane();
  smem_offset(row, 16, 16);
  S.addr[me] = row;
  warp_sync();
  for (int m = 0; m < 4; ++m) {  // each lane reads the 16-byte rows it needs, checked for races
    auto elem = [&](int mrow, int col) {
      const uint16_t* p = static_cast<const uint16_t*>(S.addr[8 * m + mrow]) + col;
      shared_access(p, 2, false);
      return *p;
    };
    uint16_t lo, hi;
    if (!trans) {
      lo = elem(me / 4, 2 * (me % 4));
      hi = elem(me / 4, 2 * (me % 4) + 1);
    } else {
      lo = elem(2 * (me % 4), me / 4);
      hi = elem(2 * (me % 4) + 1, me / 4);
    }
    r[m] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
  warp_sync();
}

inline uint16_t to_bf16(float f) {  // round to nearest even (NaN not needed here)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline uint32_t pack_bf16(float lo, float hi) {
  return static_cast<uint32_t>(to_bf16(lo)) | (static_cast<uint32_t>(to_bf16(hi)) << 16);
}
inline float exp2_approx(float x) { return std::exp2(x); }

// --- warpgroup MMA (wgmma) ----------------------------------------------------------------------
inline void fence_proxy_async() {
  g_block->fibers[g_cur].proxy_fences.push_back(epoch());
}
inline void wgmma_fence() { g_block->fibers[g_cur].wg_fenced = true; }

// One bf16 element of a shared-memory operand by its descriptor: row mn (M or N), column k,
// in the canonical layouts (PTX ISA, "Shared Memory Matrix Layout"). Without swizzling: 8 x 8
// core matrices of 128 contiguous bytes; K-major: 16-byte rows along k, core matrices LBO apart
// along k and SBO apart along mn; MN-major: 16-byte rows along mn, LBO along k, SBO along mn.
// 128-byte swizzling: rows of 128 bytes (64 elements along k, K-major; along mn, MN-major), 8
// of them an atom of 1,024 bytes whose 16-byte chunks are permuted (Swizzle<3,4,3>: address
// bits 4-6 ^= bits 7-9); K-major atoms SBO apart along mn, MN-major ones LBO apart along mn and
// SBO along k. The dynamic shared memory's start counts as 1,024-byte aligned (its offset 0).
inline float wgmma_operand(uint64_t desc, int mn, int k, bool mn_major) {
  const unsigned mode = static_cast<unsigned>(desc >> 62);
  if (mode != 0 && mode != 1)
    fail("wgmma descriptor with 64- or 32-byte swizzling: only none and 128 B are emulated");
  if ((desc >> 49) & 7) fail("wgmma descriptor with a base offset: not emulated");
  const size_t start = (desc & 0x3FFF) << 4, lbo = ((desc >> 16) & 0x3FFF) << 4,
               sbo = ((desc >> 32) & 0x3FFF) << 4;
  size_t off;
  if (mode == 0)
    off = mn_major ? start + (mn % 8) * 2 + (mn / 8) * sbo + (k % 8) * 16 + (k / 8) * lbo
                   : start + (mn % 8) * 16 + (mn / 8) * sbo + (k % 8) * 2 + (k / 8) * lbo;
  else
    off = mn_major ? start + (mn % 64) * 2 + (mn / 64) * lbo + (k % 8) * 128 + (k / 8) * sbo
                   : start + (mn % 8) * 128 + (mn / 8) * sbo + k * 2;
  if (mode == 1) off ^= ((off >> 7) & 7) << 4;
  Block& B = *g_block;
  if (off + 2 > B.smem.size()) fail("wgmma operand outside the dynamic shared memory");
  const Shadow& s = B.shadow[off];
  if (s.writer >= 0 && s.writer != g_cur) {
    // the writer's first fence after the write, and a barrier after that fence
    const std::vector<long>& fences = B.fibers[s.writer].proxy_fences;
    if (static_cast<long>(fences.size()) <= s.w_proxy || fences[s.w_proxy] >= epoch())
      fail("wgmma reads shared byte " + std::to_string(off) + ", written by thread " +
           std::to_string(s.writer) + " with no fence.proxy.async and barrier between");
  }
  const unsigned char* p = B.smem.data() + off;
  shared_access(p, 2, false);
  uint16_t b;
  std::memcpy(&b, p, 2);
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

inline void wg_sync() { wait_at(g_block->wg_bar[g_cur / 128]); }

// D (64 x N) = A (64 x 16) B (16 x N) [+ D], each thread its own accumulators: warp w of the
// warpgroup rows 16w.., in mma.m16n8k16's C layout repeated over N / 8 column blocks.
inline void wgmma_run(const WgmmaOp& op) {
  const int wg = g_cur / 128, me = g_cur % 128;
  if (g_block->n < 128 * (wg + 1)) fail("wgmma in a warpgroup of fewer than 128 threads");
  WarpgroupSlots& S = g_block->wg_slots[wg];
  S.a[me] = op.a;
  wg_sync();
  auto A = [&](int row, int k) {
    if (!op.a) return wgmma_operand(op.adesc, row, k, false);
    // A fragment: warp row / 16, mma.m16n8k16's layout within (attention_mma.cuh)
    const int r = row % 16, src = 32 * (row / 16) + (r & 7) * 4 + ((k & 7) >> 1);
    if (!S.a[src]) fail("wgmma: threads of one warpgroup disagree on where A is");
    const uint32_t w = S.a[src][(r >> 3) + 2 * (k >> 3)];
    return __uint_as_float(k & 1 ? w & 0xFFFF0000u : w << 16);
  };
  const int w = me / 32, g = (me % 32) >> 2, t = me & 3;
  std::vector<float> out(op.n / 2);
  for (int j = 0; j < op.n / 8; ++j)
    for (int r = 0; r < 4; ++r) {
      const int row = 16 * w + g + 8 * (r >> 1), col = 8 * j + 2 * t + (r & 1);
      float acc = 0.0f;
      for (int k = 0; k < 16; ++k) acc += A(row, k) * wgmma_operand(op.bdesc, col, k, op.tnsp_b);
      out[4 * j + r] = (op.scale_d ? op.d[4 * j + r] : 0.0f) + acc;
    }
  wg_sync();
  std::copy(out.begin(), out.end(), op.d);
}

inline void wgmma_issue(const WgmmaOp& op) {
  Fiber& f = g_block->fibers[g_cur];
  if (!f.wg_fenced) fail("wgmma.mma_async without a wgmma.fence since the last wait");
  f.wg_open.push_back(op);
}
inline void wgmma_commit() {
  Fiber& f = g_block->fibers[g_cur];
  f.wg_groups.push_back(std::move(f.wg_open));
  f.wg_open.clear();
}
inline void wgmma_wait(int keep) {
  Fiber& f = g_block->fibers[g_cur];
  while (static_cast<int>(f.wg_groups.size()) > keep) {
    const std::vector<WgmmaOp> group = std::move(f.wg_groups.front());
    f.wg_groups.erase(f.wg_groups.begin());
    for (const WgmmaOp& op : group) wgmma_run(op);
  }
  f.wg_fenced = false;
}

// --- launch --------------------------------------------------------------------------------------
inline void fiber_main() {
  try {
    g_body();
  } catch (const std::exception& e) {  // never unwind across fibers: hand it to the scheduler
    g_error = e.what();
  }
  Block& B = *g_block;
  B.fibers[g_cur].done = true;
  --B.alive;
  ++g_progress;
  if (g_cluster) {  // and at every later cluster barrier
    Barrier& cb = g_cluster->bar;
    --cb.n;
    if (B.fibers[g_cur].arrived == cb.gen) --cb.count;  // its open arrive: now counted by n
    if (cb.count >= cb.n && cb.count > 0) {
      cb.count = 0;
      ++cb.gen;
    }
  }
  // an exited thread counts as arrived at every later barrier of its block and warp
  --B.block_bar.n;
  if (B.block_bar.count >= B.block_bar.n && B.block_bar.count > 0) {
    B.block_bar.count = 0;
    ++B.block_bar.gen;
  }
  for (Barrier* b : {&B.warp_bar[g_cur / 32], &B.wg_bar[g_cur / 128]}) {
    --b->n;
    if (b->count >= b->n && b->count > 0) {
      b->count = 0;
      ++b->gen;
    }
  }
  swapcontext(&B.fibers[g_cur].ctx, &g_scheduler);
}

inline void init_block(Block& B, dim3 block, size_t smem_bytes, dim3 idx, int rank) {
  B.n = B.alive = static_cast<int>(block.x);
  B.idx = idx;
  B.rank = rank;
  B.fibers = std::vector<Fiber>(B.n);
  B.smem.assign(smem_bytes, 0xA5);  // garbage, not zeros: reading unwritten bytes shows
  B.shadow.assign(smem_bytes, Shadow{});
  B.block_bar.n = B.n;
  const int warps = (B.n + 31) / 32;
  B.warp_bar.resize(warps);
  for (int w = 0; w < warps; ++w) B.warp_bar[w].n = std::min(32, B.n - 32 * w);
  B.slots.resize(warps);
  const int groups = (B.n + 127) / 128;
  B.wg_bar.resize(groups);
  for (int w = 0; w < groups; ++w) B.wg_bar[w].n = std::min(128, B.n - 128 * w);
  B.wg_slots.resize(groups);
  constexpr size_t kStack = 256 * 1024;
  for (int i = 0; i < B.n; ++i) {
    Fiber& f = B.fibers[i];
    f.stack.reset(new char[kStack]);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.get();
    f.ctx.uc_stack.ss_size = kStack;
    f.ctx.uc_link = &g_scheduler;
    makecontext(&f.ctx, fiber_main, 0);
  }
}

// Every thread of the blocks (one, or the CTAs of a cluster) to its end, in a fresh random order
// each round. The CTAs of a cluster also drift apart, as on a GPU: now and then one is frozen
// for up to 2,048 rounds (until the others cannot go on without it), so that it lags far behind.
inline void run_blocks(std::vector<Block>& blocks) {
  std::vector<std::pair<int, int>> order;  // (block, thread)
  for (int b = 0; b < static_cast<int>(blocks.size()); ++b)
    for (int i = 0; i < blocks[b].n; ++i) order.push_back({b, i});
  int alive = static_cast<int>(order.size());
  g_error.clear();
  std::vector<long> frozen_until(blocks.size(), 0);
  for (long round = 0; alive > 0; ++round) {
    const long before = g_progress;
    if (blocks.size() > 1 && g_rng() % 16 == 0)
      frozen_until[g_rng() % blocks.size()] = round + 1 + long(g_rng() % 2048);
    bool any_frozen = false;
    for (long f : frozen_until) any_frozen = any_frozen || f > round;
    std::shuffle(order.begin(), order.end(), g_rng);
    for (auto [b, i] : order) {
      Block& B = blocks[b];
      if (B.fibers[i].done || frozen_until[b] > round) continue;
      g_block = &B;
      g_cur = i;
      threadIdx = dim3(static_cast<unsigned>(i));
      blockIdx = B.idx;
      swapcontext(&g_scheduler, &B.fibers[i].ctx);
      if (!g_error.empty()) {
        g_block = nullptr;
        throw Error(g_error);
      }
      if (B.fibers[i].done) --alive;
    }
    if (alive > 0 && g_progress == before && any_frozen) {  // they wait for a frozen CTA
      std::fill(frozen_until.begin(), frozen_until.end(), 0);
      continue;
    }
    if (alive > 0 && g_progress == before)
      throw Error("emu: deadlock in block (" + std::to_string(blockIdx.x) + "," +
                  std::to_string(blockIdx.y) + "," + std::to_string(blockIdx.z) +
                  "): threads wait at barriers that not all threads reach");
  }
  g_block = nullptr;
}

// kernel<<<grid, block, smem>>>(args...): every block in order, each thread a fiber.
template <typename... P, typename... A>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem_bytes, A&&... args) {
  gridDim = grid;
  blockDim = block;
  g_body = [&] { kernel(args...); };
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::vector<Block> one(1);
        init_block(one[0], block, smem_bytes, dim3(x, y, z), 0);
        run_blocks(one);
      }
}

// The same with clusters of cluster_x CTAs along x (grid.x a multiple of it): the CTAs of a
// cluster run together, rank = blockIdx.x % cluster_x; clusters one after the other.
template <typename... P, typename... A>
void launch_cluster(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem_bytes,
                    unsigned cluster_x, A&&... args) {
  if (cluster_x == 0 || grid.x % cluster_x)
    throw Error("emu: the grid's x extent is not a multiple of the cluster's");
  gridDim = grid;
  blockDim = block;
  g_body = [&] { kernel(args...); };
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x0 = 0; x0 < grid.x; x0 += cluster_x) {
        std::vector<Block> blocks(cluster_x);
        Cluster cluster;
        cluster.blocks = &blocks;
        cluster.bar.n = static_cast<int>(cluster_x * block.x);
        for (unsigned r = 0; r < cluster_x; ++r)
          init_block(blocks[r], block, smem_bytes, dim3(x0 + r, y, z), static_cast<int>(r));
        g_cluster = &cluster;
        try {
          run_blocks(blocks);
        } catch (...) {
          g_cluster = nullptr;
          throw;
        }
        g_cluster = nullptr;
      }
}

}  // namespace emu

inline void __syncthreads() { emu::block_sync(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_sync(); }
template <typename T> T __shfl_xor_sync(unsigned, T v, int mask) {
  return emu::shfl(v, emu::lane() ^ mask);
}
template <typename T> T __shfl_sync(unsigned, T v, int src) { return emu::shfl(v, src); }
// one OS thread runs every fiber, so a plain add is atomic
inline float atomicAdd(float* p, float v) {
  const float old = *p;
  *p = old + v;
  return old;
}
