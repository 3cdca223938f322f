"""The GPU's mma.sync ceiling: back-to-back m16n8k8 and m16n8k16 MMAs in registers, every SM busy.

    python scripts/mma_ceiling.py --out mma_ceiling.json               # on the GPU machine
    python scripts/mma_ceiling.py --arch sm_90a --compile-only         # anywhere with nvcc

The mma space (docs/space.md) issues mma.sync; on Hopper cuBLAS reaches its speed with wgmma, which
no MetaSchedule rule emits, so a tuned kernel is judged against what mma.sync itself can do on the
same GPU. Each warp keeps ``CHAINS`` independent accumulators and issues ``ITERS`` rounds of MMAs on
them with operands that stay in registers (no memory traffic in the loop); the grid holds
``BLOCKS_PER_SM`` blocks of ``WARPS`` warps per SM. Prints one JSON object: TFLOP/s for each shape
(m16n8k8, m16n8k16) and accumulator (fp32, fp16), the best of ``--repeat`` timed launches. Needs
only nvcc and the CUDA runtime (no TVM), so it runs on a bare GPU machine.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

CHAINS = 8
ITERS = 4096
WARPS = 4
BLOCKS_PER_SM = 4

SOURCE = r"""
#include <cstdio>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define CHAINS %(chains)d
#define ITERS %(iters)d

template <int K, bool F32>
__global__ void __launch_bounds__(%(threads)d) mma_loop(float* sink, unsigned seed) {
  unsigned a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = seed * (threadIdx.x + i + 1);
  for (int i = 0; i < 2; ++i) b[i] = seed ^ (threadIdx.x + 7 * i);
  float acc[CHAINS][4];
  unsigned hacc[CHAINS][2];
  for (int c = 0; c < CHAINS; ++c) { for (int i = 0; i < 4; ++i) acc[c][i] = 0.f; hacc[c][0] = hacc[c][1] = 0u; }
  for (int it = 0; it < ITERS; ++it) {
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) {
      if (K == 8 && F32)
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%%0,%%1,%%2,%%3}, {%%4,%%5}, {%%6}, {%%0,%%1,%%2,%%3};\n"
                     : "+f"(acc[c][0]), "+f"(acc[c][1]), "+f"(acc[c][2]), "+f"(acc[c][3]) : "r"(a[0]), "r"(a[1]), "r"(b[0]));
      if (K == 16 && F32)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%%0,%%1,%%2,%%3}, {%%4,%%5,%%6,%%7}, {%%8,%%9}, {%%0,%%1,%%2,%%3};\n"
                     : "+f"(acc[c][0]), "+f"(acc[c][1]), "+f"(acc[c][2]), "+f"(acc[c][3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
      if (K == 8 && !F32)
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f16.f16.f16.f16 {%%0,%%1}, {%%2,%%3}, {%%4}, {%%0,%%1};\n"
                     : "+r"(hacc[c][0]), "+r"(hacc[c][1]) : "r"(a[0]), "r"(a[1]), "r"(b[0]));
      if (K == 16 && !F32)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%%0,%%1}, {%%2,%%3,%%4,%%5}, {%%6,%%7}, {%%0,%%1};\n"
                     : "+r"(hacc[c][0]), "+r"(hacc[c][1]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
  }
  float total = 0.f;
  for (int c = 0; c < CHAINS; ++c) total += acc[c][0] + acc[c][3] + __uint_as_float(hacc[c][0] ^ hacc[c][1]);
  if (total == 1234.5f) sink[threadIdx.x] = total;
}

template <int K, bool F32>
double tflops(int sms, int repeat, float* sink) {
  dim3 grid(sms * %(blocks_per_sm)d), block(%(threads)d);
  cudaEvent_t start, stop;
  cudaEventCreate(&start); cudaEventCreate(&stop);
  mma_loop<K, F32><<<grid, block>>>(sink, 3u);
  float best = 1e30f;
  for (int r = 0; r < repeat; ++r) {
    cudaEventRecord(start);
    mma_loop<K, F32><<<grid, block>>>(sink, 3u + r);
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0.f;
    cudaEventElapsedTime(&ms, start, stop);
    if (ms < best) best = ms;
  }
  double warps = double(grid.x) * (%(threads)d / 32);
  double flops = warps * ITERS * CHAINS * 2.0 * 16 * 8 * K;
  return flops / (best * 1e-3) / 1e12;
}

int main(int argc, char** argv) {
  int repeat = argc > 1 ? atoi(argv[1]) : 10;
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  float* sink;
  cudaMalloc(&sink, 4096);
  double r[4] = {tflops<8, true>(prop.multiProcessorCount, repeat, sink), tflops<16, true>(prop.multiProcessorCount, repeat, sink),
                 tflops<8, false>(prop.multiProcessorCount, repeat, sink), tflops<16, false>(prop.multiProcessorCount, repeat, sink)};
  cudaError_t err = cudaDeviceSynchronize();
  printf("{\"device\": \"%%s\", \"sms\": %%d, \"clock_mhz\": %%d, \"error\": \"%%s\", "
         "\"m16n8k8_f32_tflops\": %%.2f, \"m16n8k16_f32_tflops\": %%.2f, \"m16n8k8_f16_tflops\": %%.2f, "
         "\"m16n8k16_f16_tflops\": %%.2f}\n", prop.name, prop.multiProcessorCount, clock_khz / 1000,
         cudaGetErrorString(err), r[0], r[1], r[2], r[3]);
  return err == cudaSuccess ? 0 : 1;
}
"""


def source() -> str:
    return SOURCE % {"chains": CHAINS, "iters": ITERS, "threads": 32 * WARPS, "blocks_per_sm": BLOCKS_PER_SM}


def device_arch() -> str:
    """``sm_XY`` of GPU 0 (nvidia-smi), ``sm_90a`` for a Hopper part (mma.sync needs no ``a``, but it does no harm)."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                         text=True, check=True).stdout.split()[0]
    arch = "sm_" + out.replace(".", "")
    return arch + "a" if arch == "sm_90" else arch


def compile_binary(arch: str, folder: str) -> str:
    path = os.path.join(folder, "mma_ceiling.cu")
    with open(path, "w") as f:
        f.write(source())
    binary = os.path.join(folder, "mma_ceiling")
    digits = re.sub(r"[^0-9a]", "", arch)
    subprocess.run(["nvcc", "-O3", "-gencode", f"arch=compute_{digits},code=sm_{digits}", "-o", binary, path],
                   check=True)
    return binary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default=None, help="sm_XY (default: GPU 0's)")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--compile-only", action="store_true", help="compile and stop (no GPU needed)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    args = parser.parse_args()
    arch = args.arch or device_arch()
    with tempfile.TemporaryDirectory() as folder:
        binary = compile_binary(arch, folder)
        if args.compile_only:
            print(json.dumps({"arch": arch, "compiled": True}))
            return 0
        proc = subprocess.run([binary, str(args.repeat)], capture_output=True, text=True)
    result = json.loads(proc.stdout) if proc.stdout.strip() else {"error": proc.stderr.strip()}
    result.update(arch=arch, chains=CHAINS, iters=ITERS, warps=WARPS, blocks_per_sm=BLOCKS_PER_SM,
                  command=" ".join(["python", *sys.argv]))
    text = json.dumps(result)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
