/* execstorm.c — the exec storm driver: exec a tiny binary as often as possible, count exactly.
 *
 *   execstorm --binary ./tiny --duration-s 1 --concurrency 2 --cgroup /sys/fs/cgroup/unified/x
 *   -> {"execs":8123,"failed":0,"elapsed_ns":1000412345}
 *
 * Options: --binary PATH (required), --argv0 NAME (argv[0] and comm of the children; default
 * the binary's basename), --duration-s F, --concurrency C (children in flight = spawning
 * threads), --max-execs N (hard cap on attempts, so execs <= N), --cgroup DIR (cgroup v2 dir
 * this process moves itself into first, so every child is counted under that cgroup id),
 * --pids-cgroup DIR (v1 pids controller dir, same move), --rate R (execs per second for the
 * whole storm, paced on a fixed schedule; 0 = as fast as possible). A paced storm lets one
 * machine emulate many nodes that each exec at a modest rate, so the total grows with the
 * node count as it does on real nodes.
 *
 * How: C threads, each a vfork + execve + waitpid loop. vfork shares the address space (no
 * page-table copy) and suspends only the calling thread until the exec, so C threads keep C
 * execs in flight. (glibc's posix_spawn does the same clone but adds a stack mmap and ~64
 * sigaction calls per spawn: 10-50 % slower in alternating runs here.) The vfork child runs
 * only async-signal-safe syscalls (sigprocmask, execve, _exit) and, like glibc's posix_spawn,
 * reports a failed execve's errno through the shared memory. "execs" counts children that
 * exited 0: the exec really happened (a failed execve exits 127). Everything else is
 * "failed". SIGTERM/SIGINT stop the storm early; in-flight children are still reaped and
 * counted, and the JSON line is still printed (exactly one line, on stdout).
 *
 * Caveats: comm is the basename of the *path* exec'ed, not argv[0]; for --argv0 we exec
 * through a symlink named NAME in a private temp dir (removed at exit), so tracers that
 * print only comm see NAME (the kernel truncates comm to 15 characters). Exit codes: 0 ok,
 * 1 runtime error (JSON still printed), 2 usage or set-up error (no JSON).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static const char *exec_path;
static char *child_argv[2];
static sigset_t child_mask; /* empty: children must not inherit our blocked stop signals */
static long long max_execs = LLONG_MAX;
static struct timespec deadline, start;
static double rate; /* execs/s for the whole storm; 0 = unpaced */

static atomic_llong claimed, n_execs, n_failed;
static atomic_int stop_flag, running, fatal_errno;

static void die(const char *what, int err)
{
    fprintf(stderr, "execstorm: %s: %s\n", what, strerror(err));
    exit(2);
}

static int past(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

static long long ns_since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)(now.tv_sec - t0->tv_sec) * 1000000000LL + (now.tv_nsec - t0->tv_nsec);
}

/* Move this whole process into a cgroup (v1 or v2): children inherit it from the start. */
static void join_cgroup(const char *dir)
{
    char path[PATH_MAX], buf[32];
    if (snprintf(path, sizeof path, "%s/cgroup.procs", dir) >= (int)sizeof path)
        die("cgroup path too long", ENAMETOOLONG);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        die(path, errno);
    int n = snprintf(buf, sizeof buf, "%d\n", (int)getpid());
    if (write(fd, buf, (size_t)n) != n)
        die(path, errno);
    close(fd);
}

static void *spawner(void *arg)
{
    (void)arg;
    while (!atomic_load_explicit(&stop_flag, memory_order_relaxed) && !past(&deadline)) {
        long long k = atomic_fetch_add(&claimed, 1);
        if (k >= max_execs)
            break;
        if (rate > 0) { /* exec k is due at start + k/rate: sleep until then (absolute) */
            long long due = (long long)((double)k * 1e9 / rate);
            struct timespec at = start;
            at.tv_sec += due / 1000000000LL;
            at.tv_nsec += due % 1000000000LL;
            if (at.tv_nsec >= 1000000000L) {
                at.tv_sec++;
                at.tv_nsec -= 1000000000L;
            }
            if (at.tv_sec > deadline.tv_sec || (at.tv_sec == deadline.tv_sec && at.tv_nsec >= deadline.tv_nsec))
                break;
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL) == EINTR)
                ;
            if (atomic_load_explicit(&stop_flag, memory_order_relaxed))
                break;
        }
        volatile int exec_err = 0; /* written by the vfork child, which shares our memory */
        pid_t pid = vfork();
        if (pid == 0) {
            sigprocmask(SIG_SETMASK, &child_mask, NULL);
            execve(exec_path, child_argv, environ);
            exec_err = errno;
            _exit(127);
        }
        int rc = pid < 0 ? errno : exec_err;
        if (pid > 0 && rc != 0) /* execve failed: reap the child that exited 127 */
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
        if (rc != 0) {
            atomic_fetch_add(&n_failed, 1);
            if (rc == EAGAIN) { /* pids limit or RLIMIT_NPROC: back off a little, keep going */
                struct timespec ms = {0, 1000000};
                nanosleep(&ms, NULL);
                continue;
            }
            /* ENOENT, EACCES, ENOEXEC...: every next attempt fails the same way. */
            int zero = 0;
            atomic_compare_exchange_strong(&fatal_errno, &zero, rc);
            atomic_store(&stop_flag, 1);
            break;
        }
        int st;
        while (waitpid(pid, &st, 0) < 0) {
            if (errno != EINTR) {
                st = -1;
                break;
            }
        }
        if (st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0)
            atomic_fetch_add(&n_execs, 1);
        else
            atomic_fetch_add(&n_failed, 1);
    }
    atomic_fetch_sub(&running, 1);
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: execstorm --binary PATH [--argv0 NAME] [--duration-s F] "
                    "[--concurrency C] [--max-execs N] [--cgroup DIR] [--pids-cgroup DIR] [--rate R]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    /* Stop signals go to the main thread only (sigtimedwait, no handlers: nothing can run in
     * a vfork child but its own code); children get an empty mask. Blocked first thing, so a
     * stop that comes before any spawn still ends with a JSON line (of zeros), not a kill. */
    sigset_t stopset;
    sigemptyset(&stopset);
    sigaddset(&stopset, SIGTERM);
    sigaddset(&stopset, SIGINT);
    sigemptyset(&child_mask);
    pthread_sigmask(SIG_BLOCK, &stopset, NULL);

    const char *binary = NULL, *argv0 = NULL, *cgroup = NULL, *pids_cgroup = NULL;
    double duration_s = 1.0;
    long concurrency = 1;
    static const struct option longopts[] = {
        {"binary", required_argument, 0, 'b'},      {"argv0", required_argument, 0, 'a'},
        {"duration-s", required_argument, 0, 'd'},  {"concurrency", required_argument, 0, 'c'},
        {"max-execs", required_argument, 0, 'm'},   {"cgroup", required_argument, 0, 'g'},
        {"pids-cgroup", required_argument, 0, 'p'}, {"rate", required_argument, 0, 'r'},
        {0, 0, 0, 0},
    };
    int o;
    char *end;
    while ((o = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        errno = 0;
        switch (o) {
        case 'b': binary = optarg; break;
        case 'a': argv0 = optarg; break;
        case 'g': cgroup = optarg; break;
        case 'p': pids_cgroup = optarg; break;
        case 'd':
            duration_s = strtod(optarg, &end);
            if (*end || errno || !(duration_s > 0 && duration_s <= 3600))
                usage();
            break;
        case 'c':
            concurrency = strtol(optarg, &end, 10);
            if (*end || errno || concurrency < 1 || concurrency > 1024)
                usage();
            break;
        case 'm':
            max_execs = strtoll(optarg, &end, 10);
            if (*end || errno || max_execs < 0)
                usage();
            break;
        case 'r':
            rate = strtod(optarg, &end);
            if (*end || errno || !(rate >= 0 && rate <= 1e7))
                usage();
            break;
        default: usage();
        }
    }
    if (!binary || optind != argc)
        usage();
    if (access(binary, X_OK) != 0)
        die(binary, errno);
    const char *base = strrchr(binary, '/') ? strrchr(binary, '/') + 1 : binary;
    if (!argv0)
        argv0 = base;
    if (!*argv0 || strchr(argv0, '/'))
        usage();

    /* Cgroups first: the exec of execstorm itself happened outside the node, its children
     * must all happen inside. (Before the symlink, so a failure here leaves nothing behind.) */
    if (pids_cgroup)
        join_cgroup(pids_cgroup);
    if (cgroup)
        join_cgroup(cgroup);

    /* comm comes from the exec'ed path: exec through a symlink named argv0 when it differs. */
    char tmpdir[PATH_MAX] = "", link[PATH_MAX] = "";
    exec_path = binary;
    if (strcmp(argv0, base) != 0) {
        char target[PATH_MAX];
        const char *t = getenv("TMPDIR");
        if (!realpath(binary, target))
            die(binary, errno);
        snprintf(tmpdir, sizeof tmpdir, "%s/execstorm.XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(tmpdir))
            die("mkdtemp", errno);
        snprintf(link, sizeof link, "%s/%s", tmpdir, argv0);
        if (symlink(target, link) != 0) {
            int e = errno;
            rmdir(tmpdir);
            die("symlink", e);
        }
        exec_path = link;
    }
    child_argv[0] = (char *)argv0;
    child_argv[1] = NULL;


    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    start = t0;
    deadline = t0;
    long long dns = (long long)(duration_s * 1e9);
    deadline.tv_sec += dns / 1000000000LL;
    deadline.tv_nsec += dns % 1000000000LL;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }

    pthread_t *threads = calloc((size_t)concurrency, sizeof *threads);
    pthread_attr_t tattr;
    pthread_attr_init(&tattr);
    pthread_attr_setstacksize(&tattr, 256 * 1024);
    long started = 0;
    atomic_store(&running, (int)concurrency);
    for (; started < concurrency; started++) {
        if (pthread_create(&threads[started], &tattr, spawner, NULL) != 0) {
            atomic_fetch_sub(&running, (int)(concurrency - started));
            break;
        }
    }
    if (started == 0)
        die("pthread_create", EAGAIN);
    if (started < concurrency) /* e.g. the pids limit: fewer in flight, counts still exact */
        fprintf(stderr, "execstorm: only %ld of %ld spawner threads started\n", started, concurrency);

    /* Wait for: a stop signal, the deadline, or every spawner done (max-execs, fatal error). */
    while (atomic_load(&running) > 0) {
        struct timespec slice = {0, 10 * 1000000};
        int sig = sigtimedwait(&stopset, NULL, &slice);
        if (sig == SIGTERM || sig == SIGINT) {
            atomic_store(&stop_flag, 1);
            break;
        }
    }
    for (long i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    long long elapsed = ns_since(&t0);

    if (link[0]) {
        unlink(link);
        rmdir(tmpdir);
    }
    printf("{\"execs\":%lld,\"failed\":%lld,\"elapsed_ns\":%lld}\n", (long long)atomic_load(&n_execs),
           (long long)atomic_load(&n_failed), elapsed);
    fflush(stdout);
    int fe = atomic_load(&fatal_errno);
    if (fe) {
        fprintf(stderr, "execstorm: spawning %s failed: %s\n", exec_path, strerror(fe));
        return 1;
    }
    return 0;
}
