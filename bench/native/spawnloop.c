/* spawnloop.c — the reference for the exec-storm bench: the plainest vfork + execve + waitpid loop.
 *
 *   spawnloop /path/to/tiny 1.0   ->  {"execs":5012,"failed":0,"elapsed_ns":1000123456}
 *
 * One process, one child at a time, no threads, no options: what "exec as fast as you can"
 * costs with nothing in between. The bench runs one copy per CPU and compares it with the
 * worker path (execstorm driven from Python). Counting rule as execstorm: exit status 0 = exec.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: spawnloop BINARY SECONDS\n");
        return 2;
    }
    char *child_argv[] = {argv[1], NULL};
    char *child_env[] = {NULL};
    long long t0 = now_ns(), end = t0 + (long long)(atof(argv[2]) * 1e9);
    long long execs = 0, failed = 0;
    while (now_ns() < end) {
        pid_t pid = vfork();
        if (pid == 0) {
            execve(argv[1], child_argv, child_env);
            _exit(127);
        }
        int st;
        if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            failed++;
        else
            execs++;
    }
    printf("{\"execs\":%lld,\"failed\":%lld,\"elapsed_ns\":%lld}\n", execs, failed, now_ns() - t0);
    return 0;
}
