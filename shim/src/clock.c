/*
 * clock.c - gitmd's clock library (libgitm_clock.so): the injection library of a run that gets no
 * capture window (a launch trial's arm, a run the observation backoff rests), loaded by the CUDA
 * driver through CUDA_INJECTION64_PATH in place of the shim.
 *
 * Workflow in brief:
 *   1. InitializeInjection (once per process, inside cuInit): append "cuda <pid> <CLOCK_MONOTONIC ns>"
 *      to the file its launcher named in GITMD_CLOCK_FILE, and return.
 *   2. That is all. The launcher (gitmctl run) reads the earliest stamp after the job exits and
 *      reports the run's length from CUDA's initialisation to its exit: the same milestones as the
 *      shim's ring (created in InitializeInjection) and the daemon's last exit give a captured run.
 *
 * Why: without it such runs could only be timed by their launcher, exec to exit, and for a Python
 * program that holds its interpreter's start and imports, which no launch lever touches and which
 * vary most: timm's runs spent 7-11 s of 13-20 s before CUDA, and their wall times moved 2.4 s
 * between runs where their CUDA lifetimes moved 0.9 s (H200, 2026-12-04/05). A lever's gain is
 * seconds of the CUDA part; measured on the wall it drowns.
 *
 * Nothing else: no CUPTI (not even loaded), no thread, no signal handler, no CUDA call, no
 * allocation. The file is only appended to: opened without creating it (its launcher made it, a
 * private file), without following a link and without waiting on a pipe; any error is ignored and
 * the job runs on. Loaded with no GITMD_CLOCK_FILE (a launcher that does not read it) it does
 * nothing at all.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define CLOCK_VAR "GITMD_CLOCK_FILE"

__attribute__((visibility("default"))) int InitializeInjection(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return 1;
    const char *path = getenv(CLOCK_VAR);
    if (!path || !*path)
        return 1;
    char line[64];
    int n = snprintf(line, sizeof line, "cuda %ld %llu\n", (long)getpid(),
                     (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec);
    if (n <= 0 || (size_t)n >= sizeof line)
        return 1;
    int fd = open(path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0)
        return 1;
    ssize_t w;
    do
        w = write(fd, line, (size_t)n); /* one short line, O_APPEND: whole, after the other processes' */
    while (w < 0 && errno == EINTR);
    close(fd);
    return 1; /* always: the job never depends on this library */
}
