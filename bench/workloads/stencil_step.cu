// No torch, no Python: a plain CUDA program whose step is a 1-D stencil, an axpy and a block
// reduction, as nvcc builds it. Prints a checksum.
//   nvcc -O2 -arch=sm_90 -o stencil_step stencil_step.cu
//   ./stencil_step [n] [block] [seconds]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

__global__ void stencil(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1) out[i] = 0.25f * in[i - 1] + 0.5f * in[i] + 0.25f * in[i + 1];
}
__global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
__global__ void block_sum(const float* x, float* partial, int n) {
  extern __shared__ float s[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.f;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 1 << 22;
  int block = argc > 2 ? atoi(argv[2]) : 256;
  double seconds = argc > 3 ? atof(argv[3]) : 30.0;
  int grid = (n + block - 1) / block;
  float *a, *b, *partial;
  cudaMalloc(&a, n * sizeof(float));
  cudaMalloc(&b, n * sizeof(float));
  cudaMalloc(&partial, grid * sizeof(float));
  cudaMemset(a, 0, n * sizeof(float));
  cudaMemset(b, 0, n * sizeof(float));
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  long steps = 0;
  float host = 0.f;
  while (std::chrono::steady_clock::now() < end) {
    stencil<<<grid, block>>>(a, b, n);
    axpy<<<grid, block>>>(0.5f, b, a, n);
    block_sum<<<grid, block, block * sizeof(float)>>>(a, partial, n);
    if (++steps % 100 == 0) cudaMemcpy(&host, partial, sizeof(float), cudaMemcpyDeviceToHost);
    if (steps == 3) {
      cudaDeviceSynchronize();
      printf("ready\n");
      fflush(stdout);
    }
  }
  cudaDeviceSynchronize();
  printf("result steps=%ld checksum=%.4f\n", steps, host);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
