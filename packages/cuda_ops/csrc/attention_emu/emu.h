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
// Floating point: products and sums in fp32 (the tensor cores' exact rounding is not modelled),
// ex2.approx as exp2f. Errors throw emu::Error.
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
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
  long w_epoch = -1, w_wepoch = -1;
  int reader = -1, r_warp = -1;  // reader -2: several threads, all of warp r_warp (-1: several)
  long r_epoch = -1, r_wepoch = -1;
};

struct Fiber {
  ucontext_t ctx;
  std::vector<char> stack;
  bool done = false;
  std::vector<Copy> open;                  // issued, not yet committed
  std::vector<std::vector<Copy>> groups;   // committed, oldest first
};

struct WarpSlots {
  uint32_t w[32][8];
  const void* addr[32];
};

struct Block {
  int n = 0;
  std::vector<Fiber> fibers;
  std::vector<unsigned char> smem;
  std::vector<Shadow> shadow;
  Barrier block_bar;  // block_bar.gen: the block epoch
  std::vector<Barrier> warp_bar;  // warp_bar[w].gen: warp w's epoch
  std::vector<WarpSlots> slots;
};

inline ucontext_t g_scheduler;
inline Block* g_block = nullptr;
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
inline long warp_epoch() { return g_block->warp_bar[warp()].gen; }

[[noreturn]] inline void fail(const std::string& what) {
  throw Error("emu: block (" + std::to_string(blockIdx.x) + "," + std::to_string(blockIdx.y) +
              "," + std::to_string(blockIdx.z) + ") thread " + std::to_string(g_cur) + ": " +
              what);
}

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
inline bool conflicts(int other, int other_warp, long ep, long wep) {
  if (other == -1 || other == g_cur || ep != epoch()) return false;
  return other_warp != warp() || wep == warp_epoch();
}
inline bool conflicts_writer(const Shadow& s) {
  return conflicts(s.writer, s.writer < 0 ? -1 : s.writer / 32, s.w_epoch, s.w_wepoch);
}
inline bool conflicts_reader(const Shadow& s) {
  return conflicts(s.reader, s.r_warp, s.r_epoch, s.r_wepoch);
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
      s.w_epoch = epoch();
      s.w_wepoch = warp_epoch();
    } else {
      const bool several = s.r_epoch == epoch() && s.reader != g_cur && s.reader != -1;
      s.r_warp = several && s.r_warp != warp() ? -1 : warp();
      s.reader = several ? -2 : g_cur;
      s.r_epoch = epoch();
      s.r_wepoch = warp_epoch();
    }
  }
}

inline unsigned char* dynamic_shared() { return g_block->smem.data(); }

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

// --- launch --------------------------------------------------------------------------------------
inline void fiber_main() {
  try {
    g_body();
  } catch (const std::exception& e) {  // never unwind across fibers: hand it to the scheduler
    g_error = e.what();
  }
  Block& B = *g_block;
  B.fibers[g_cur].done = true;
  ++g_progress;
  // an exited thread counts as arrived at every later barrier of its block and warp
  --B.block_bar.n;
  if (B.block_bar.count >= B.block_bar.n && B.block_bar.count > 0) {
    B.block_bar.count = 0;
    ++B.block_bar.gen;
  }
  Barrier& wb = B.warp_bar[g_cur / 32];
  --wb.n;
  if (wb.count >= wb.n && wb.count > 0) {
    wb.count = 0;
    ++wb.gen;
  }
  swapcontext(&B.fibers[g_cur].ctx, &g_scheduler);
}

inline void run_block(dim3 block, size_t smem_bytes) {
  Block B;
  B.n = static_cast<int>(block.x);
  B.fibers.resize(B.n);
  B.smem.assign(smem_bytes, 0xA5);  // garbage, not zeros: reading unwritten bytes shows
  B.shadow.assign(smem_bytes, Shadow{});
  B.block_bar.n = B.n;
  const int warps = (B.n + 31) / 32;
  B.warp_bar.resize(warps);
  for (int w = 0; w < warps; ++w) B.warp_bar[w].n = std::min(32, B.n - 32 * w);
  B.slots.resize(warps);
  g_block = &B;
  g_error.clear();
  for (int i = 0; i < B.n; ++i) {
    Fiber& f = B.fibers[i];
    f.stack.resize(256 * 1024);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = &g_scheduler;
    makecontext(&f.ctx, fiber_main, 0);
  }
  std::vector<int> order(B.n);
  for (int i = 0; i < B.n; ++i) order[i] = i;
  int alive = B.n;
  while (alive > 0) {
    const long before = g_progress;
    std::shuffle(order.begin(), order.end(), g_rng);
    for (int i : order) {
      if (B.fibers[i].done) continue;
      g_cur = i;
      threadIdx = dim3(static_cast<unsigned>(i));
      swapcontext(&g_scheduler, &B.fibers[i].ctx);
      if (!g_error.empty()) {
        g_block = nullptr;
        throw Error(g_error);
      }
      if (B.fibers[i].done) --alive;
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
        blockIdx = dim3(x, y, z);
        run_block(block, smem_bytes);
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
