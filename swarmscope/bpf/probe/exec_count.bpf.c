/* exec_count.bpf.c — count exec() per cgroup v2 id, in the kernel, without losing increments,
 * and keep the first and last exec time of the current window per cgroup.
 *
 * Attached to the sched:sched_process_exec tracepoint (kprobes are not available on these
 * kernels). Keyed by bpf_get_current_cgroup_id(): a simulated node is a cgroup v2 child, a real
 * node's count is the sum over keys. A window is the delta of two snapshots of the counts.
 *
 * Times (bpf_ktime_get_ns, CLOCK_MONOTONIC) live in the same per-CPU value as the count: one
 * map lookup per exec, not two (bench/probes.py: a second per-CPU hash for the times cost ~6x
 * more than this). User space writes a window's open time into exec_open (key: the node's cgroup
 * id) or exec_open_any (a host node: every cgroup without its own) before the window's first
 * snapshot; an exec whose slot's `first` is older than that restarts `first`, so an earlier
 * window's times never count. The count is incremented before and regardless of the times.
 */
#include "swarmscope.h"

#ifdef SS_EXEC_COUNT_ONLY /* bench/probes.py: the count alone, as the reference cost */
BPF_PERCPU_HASH(exec_count, u64, u64, SS_MAX_KEYS);

TRACEPOINT_PROBE(sched, sched_process_exec)
{
    u64 cg = bpf_get_current_cgroup_id();
    u64 zero = 0, *v = exec_count.lookup_or_try_init(&cg, &zero);
    if (v)
        *v += 1;
    return 0;
}
#else
struct exec_stat {
    u64 count;
    u64 first; /* bpf_ktime of the first exec on this CPU since the window opened */
    u64 last;
};

BPF_PERCPU_HASH(exec_count, u64, struct exec_stat, SS_MAX_KEYS);
BPF_HASH(exec_open, u64, u64, SS_MAX_KEYS);
BPF_ARRAY(exec_open_any, u64, 1);

TRACEPOINT_PROBE(sched, sched_process_exec)
{
    u64 cg = bpf_get_current_cgroup_id();
    u64 now = bpf_ktime_get_ns();
    struct exec_stat init = {0, now, now}, *v = exec_count.lookup_or_try_init(&cg, &init);
    if (!v)
        return 0;
    /* Per-CPU slot: no other writer, so plain stores lose nothing. */
    v->count += 1;
    u64 *open = exec_open.lookup(&cg);
    if (!open) {
        int any = 0;
        open = exec_open_any.lookup(&any);
    }
    if (open && v->first < *open)
        v->first = now;
    v->last = now;
    return 0;
}
#endif
