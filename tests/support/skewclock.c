/* A host clock set wrong, for tests: LD_PRELOAD'ed into a relay child, it moves the wall clock
   (CLOCK_REALTIME, gettimeofday, time) by SKEWCLOCK_SECONDS and leaves the monotonic clocks, which
   every timeout and sleep uses, alone.  With SKEWCLOCK_FILE, the seconds are the 8-byte native
   integer at the start of that file, mapped and read at every call: a test sets the clock right
   (or wrong) while the process runs, as NTP would.  Debian's libfaketime 0.9.10 cannot stand in
   for it: with Python 3.11 its timed condition waits hang, or its sleeps fail with EINVAL. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long skew_seconds(void) {
    static int read_yet;
    static long seconds;
    static volatile int64_t *shared;
    if (!read_yet) {  /* first asked at the interpreter's start, before any thread */
        const char *text = getenv("SKEWCLOCK_SECONDS");
        const char *path = getenv("SKEWCLOCK_FILE");
        seconds = text ? strtol(text, NULL, 10) : 0;
        if (path) {
            int fd = open(path, O_RDONLY);
            if (fd >= 0) {
                void *mapped = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
                if (mapped != MAP_FAILED)
                    shared = mapped;
                close(fd);
            }
        }
        read_yet = 1;
    }
    return shared ? (long)*shared : seconds;
}

static int is_wall(clockid_t clock) {
    return clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE || clock == CLOCK_TAI;
}

int clock_gettime(clockid_t clock, struct timespec *now) {
    static int (*real)(clockid_t, struct timespec *);
    if (!real)
        real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
    int result = real(clock, now);
    if (result == 0 && is_wall(clock))
        now->tv_sec += skew_seconds();
    return result;
}

int gettimeofday(struct timeval *restrict now, void *restrict zone) {
    static int (*real)(struct timeval *restrict, void *restrict);
    if (!real)
        real = (int (*)(struct timeval *restrict, void *restrict))dlsym(RTLD_NEXT, "gettimeofday");
    int result = real(now, zone);
    if (result == 0 && now)
        now->tv_sec += skew_seconds();
    return result;
}

time_t time(time_t *out) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (out)
        *out = now.tv_sec;
    return now.tv_sec;
}
