/* exec_stream.bpf.c — the reference per-event exec stream: one ring buffer record per exec.
 *
 * The tracer under test (targets/stream_tracer), not a swarmscope probe: it copies every
 * sched:sched_process_exec into a BPF ring buffer that user space must drain. When the ring
 * buffer is full the reservation fails and the event is gone; the drop is counted here, per
 * CPU (total) and per cgroup id, so "forwarded + dropped" accounts for every exec exactly.
 * Only helpers, no kernel struct reads (docs/platform.md). SS_RINGBUF_PAGES must be a power of 2.
 * With -DSS_FILTER_CGROUP=1 only execs in the cgroups user space put in `watch` are traced (as a
 * tracer watching one namespace's pods would); others are neither streamed nor counted.
 */
#include "swarmscope.h"

#ifndef SS_RINGBUF_PAGES
#define SS_RINGBUF_PAGES 16
#endif

struct ss_exec_event {
    u64 ts_ns;
    u64 cgroup_id;
    u32 pid;
    u32 tgid;
    char comm[16];
};

BPF_RINGBUF_OUTPUT(events, SS_RINGBUF_PAGES);
BPF_PERCPU_ARRAY(drops_total, u64, 1);
BPF_PERCPU_HASH(drops_by_cgroup, u64, u64, SS_MAX_KEYS);
BPF_HASH(watch, u64, u8, SS_MAX_KEYS);

TRACEPOINT_PROBE(sched, sched_process_exec)
{
    u64 cg = bpf_get_current_cgroup_id();
#if SS_FILTER_CGROUP
    if (!watch.lookup(&cg))
        return 0;
#endif
    struct ss_exec_event *e = events.ringbuf_reserve(sizeof(struct ss_exec_event));
    if (!e) {
        int idx = 0;
        u64 *t = drops_total.lookup(&idx);
        if (t)
            *t += 1;
        u64 zero = 0, *v = drops_by_cgroup.lookup_or_try_init(&cg, &zero);
        if (v)
            *v += 1;
        return 0;
    }
    u64 id = bpf_get_current_pid_tgid();
    e->ts_ns = bpf_ktime_get_ns();
    e->cgroup_id = cg;
    e->pid = (u32)id;
    e->tgid = id >> 32;
    bpf_get_current_comm(&e->comm, sizeof(e->comm));
    events.ringbuf_submit(e, 0);
    return 0;
}
