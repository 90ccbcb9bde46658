// What a CUDA program sees of the machine's GPUs: their count, and each one's name and UUID (as nvidia-smi prints
// it), after a real allocation and kernel on each. check-gpus runs it under every lease on a machine with real GPUs
// (scripts/device-check.sh): `nvcc -o cuda-probe cuda-probe.cu`.
#include <cstdio>
#include <cuda_runtime.h>

__global__ void fill(int *p, int v) { p[threadIdx.x] = v + threadIdx.x; }

int main() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    printf("devices: 0 (%s)\n", cudaGetErrorString(err));
    return 0;
  }
  printf("devices: %d\n", n);
  for (int d = 0; d < n; d++) {
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, d);
    printf("device %d: %s GPU-", d, prop.name);
    const unsigned char *u = reinterpret_cast<const unsigned char *>(prop.uuid.bytes);
    for (int i = 0; i < 16; i++) printf(i == 4 || i == 6 || i == 8 || i == 10 ? "-%02x" : "%02x", u[i]);
    cudaSetDevice(d);
    int *p = nullptr, host[32] = {0};
    bool ok = cudaMalloc(&p, sizeof host) == cudaSuccess;
    if (ok) {
      fill<<<1, 32>>>(p, 1000 * d);
      ok = cudaMemcpy(host, p, sizeof host, cudaMemcpyDeviceToHost) == cudaSuccess && host[31] == 1000 * d + 31;
      cudaFree(p);
    }
    printf(" kernel %s\n", ok ? "ran" : "failed");
  }
  return 0;
}
