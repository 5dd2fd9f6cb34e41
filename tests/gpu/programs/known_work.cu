// known_work.cu - an unmodified non-torch CUDA program with an exactly known amount of work:
//   known_work TRIGGER_FILE END_FILE KERNELS COPIES
// Prints "ready" once CUDA is up, waits for TRIGGER_FILE, then launches KERNELS kernels, COPIES
// pageable and COPIES pinned host-to-device copies, one cudaMalloc/cudaFree of 64 MiB and one
// cudaDeviceSynchronize; prints "done <checksum>", then waits for END_FILE (or 60 s).
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

__global__ void gitm_probe_kernel(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] = x[i] * 0.5f + 1.0f;
}

#define CHECK(e)                                                                                   \
    do {                                                                                           \
        cudaError_t err = (e);                                                                     \
        if (err != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s: %s\n", #e, cudaGetErrorString(err));                              \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static void wait_file(const char *path, int seconds)
{
    for (int i = 0; i < seconds * 100 && access(path, F_OK) != 0; i++)
        usleep(10000);
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s TRIGGER END KERNELS COPIES\n", argv[0]);
        return 2;
    }
    int kernels = atoi(argv[3]), copies = atoi(argv[4]);
    const int n = 1 << 20;
    float *d, *pinned, *pageable = (float *)malloc(n * sizeof(float));
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(cudaMallocHost(&pinned, n * sizeof(float)));
    for (int i = 0; i < n; i++)
        pageable[i] = pinned[i] = (float)(i % 7);
    CHECK(cudaMemset(d, 0, n * sizeof(float)));
    CHECK(cudaDeviceSynchronize());
    printf("ready\n");
    fflush(stdout);
    wait_file(argv[1], 60);
    for (int i = 0; i < copies; i++) {
        CHECK(cudaMemcpy(d, pageable, n * sizeof(float), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(d, pinned, n * sizeof(float), cudaMemcpyHostToDevice));
    }
    for (int i = 0; i < kernels; i++)
        gitm_probe_kernel<<<(n + 255) / 256, 256>>>(d, n);
    float *extra;
    CHECK(cudaMalloc(&extra, 64 << 20));
    CHECK(cudaFree(extra));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(pinned, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += pinned[i];
    printf("done %.6e\n", sum);
    fflush(stdout);
    wait_file(argv[2], 60);
    return 0;
}
