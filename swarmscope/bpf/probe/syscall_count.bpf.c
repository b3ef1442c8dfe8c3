/* syscall_count.bpf.c — count system calls per (cgroup v2 id, syscall nr), in the kernel.
 *
 * Attached to raw_syscalls:sys_enter (every syscall, no kprobes needed). A per-CPU hash keyed
 * by (cgroup, nr) loses no increments. With -DSS_FILTER_SYSCALLS=1 only the syscall numbers
 * whose slot in `syscall_filter` the loader set to 1 are counted (cheap: one array lookup per
 * syscall instead of a hash update). Negative ids (seccomp/ptrace-skipped calls) and numbers
 * >= SS_MAX_SYSCALL are not counted.
 */
#include "swarmscope.h"

#ifndef SS_MAX_SYSCALL
#define SS_MAX_SYSCALL 1024
#endif

struct sc_key {
    u64 cgroup;
    u64 nr;
};

BPF_PERCPU_HASH(syscall_count, struct sc_key, u64, SS_MAX_KEYS);
BPF_ARRAY(syscall_filter, u8, SS_MAX_SYSCALL);

TRACEPOINT_PROBE(raw_syscalls, sys_enter)
{
    long id = args->id;
    if (id < 0 || id >= SS_MAX_SYSCALL)
        return 0;
#ifdef SS_FILTER_SYSCALLS
    int idx = id;
    u8 *want = syscall_filter.lookup(&idx);
    if (!want || !*want)
        return 0;
#endif
    struct sc_key key = {};
    key.cgroup = bpf_get_current_cgroup_id();
    key.nr = id;
    u64 zero = 0, *v = syscall_count.lookup_or_try_init(&key, &zero);
    if (v)
        *v += 1;
    return 0;
}
