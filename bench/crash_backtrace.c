/* crash_backtrace.c - a diagnostic LD_PRELOAD for bench/window_stress.py on hosts without gdb: on
 * SIGSEGV, SIGABRT, SIGBUS or SIGILL it writes the crashing thread's native stack (library + offset
 * of each frame) to stderr, then lets the signal kill the process as it would have. Never part of the
 * shim or of any job gitmd launches.
 *   gcc -shared -fPIC -O1 -o crash_backtrace.so crash_backtrace.c
 */
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static void on_crash(int sig)
{
    void *frames[64];
    int n = backtrace(frames, 64);
    static const char head[] = "\n== native stack of the crashing thread ==\n";
    write(2, head, sizeof head - 1);
    backtrace_symbols_fd(frames, n, 2);
    signal(sig, SIG_DFL);
    raise(sig);
}

__attribute__((constructor)) static void install(void)
{
    void *warm[2];
    backtrace(warm, 2); /* loads libgcc's unwinder now, not inside the handler */
    static char stack[1 << 16];
    stack_t ss = {.ss_sp = stack, .ss_size = sizeof stack};
    sigaltstack(&ss, NULL);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_crash;
    sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
    int sigs[] = {SIGSEGV, SIGABRT, SIGBUS, SIGILL};
    for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
}
