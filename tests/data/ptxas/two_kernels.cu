// Two kernels for tests/test_registers.py: one spills under __launch_bounds__, one has static shared memory.
extern "C" __global__ void __launch_bounds__(1024, 2) squeezed(float* out, const float* in) {
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = in[threadIdx.x * 64 + i];
  for (int k = 0; k < 100; ++k) {
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = acc[i] * acc[(i + k) & 63] + 1.0f;
  }
#pragma unroll
  for (int i = 0; i < 64; ++i) out[threadIdx.x * 64 + i] = acc[i];
}
extern "C" __global__ void staged(float* out, const float* in) {
  __shared__ float tile[256];
  tile[threadIdx.x] = in[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = tile[255 - threadIdx.x];
}
