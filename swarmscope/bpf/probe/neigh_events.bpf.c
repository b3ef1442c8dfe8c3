/* neigh_events.bpf.c — count kernel neighbor-table writes (neigh:neigh_create and
 * neigh:neigh_update tracepoints), per writing tgid, with first/last timestamps.
 *
 * RTM_NEWNEIGH is processed in the sender's sendmsg(), so the tgid is the writer's. Only
 * tracepoint arguments are read. ne_totals is keyed by {tgid, kind (0 create, 1 update), the
 * writer's cgroup v2 id, device name (the tracepoint's `dev` string)} with per-CPU
 * {count, first_ns, last_ns}; with -DSS_FAMILY=2 only IPv4 entries are counted. Entries the
 * kernel writes on its own (ARP replies in softirq) carry whatever task was current.
 */
#include "swarmscope.h"

struct ne_key {
    u32 tgid;
    u32 kind;
    u64 cgroup;
    char dev[16];  /* IFNAMSIZ */
};

struct ne_total {
    u64 count;
    u64 first_ns;
    u64 last_ns;
};

BPF_PERCPU_HASH(ne_totals, struct ne_key, struct ne_total, 4096);

/* One write of `kind` on k->dev (the tracepoint's, read by the caller) by the current task:
 * count it under (tgid, kind, cgroup, dev) and stamp its first/last time. */
static inline int ne_count(struct ne_key *k, u32 kind, u64 now)
{
    k->tgid = bpf_get_current_pid_tgid() >> 32;
    k->kind = kind;
    k->cgroup = bpf_get_current_cgroup_id();
    struct ne_total zero = {}, *t = ne_totals.lookup_or_try_init(k, &zero);
    if (t) {
        t->count += 1;
        if (t->first_ns == 0)
            t->first_ns = now;
        t->last_ns = now;
    }
    return 0;
}

TRACEPOINT_PROBE(neigh, neigh_create)
{
#ifdef SS_FAMILY
    if (args->family != SS_FAMILY)
        return 0;
#endif
    u64 now = bpf_ktime_get_ns();
    struct ne_key k = {};
    TP_DATA_LOC_READ_STR(k.dev, dev, sizeof(k.dev));
    return ne_count(&k, 0, now);
}

TRACEPOINT_PROBE(neigh, neigh_update)
{
#ifdef SS_FAMILY
    if (args->family != SS_FAMILY)
        return 0;
#endif
    u64 now = bpf_ktime_get_ns();
    struct ne_key k = {};
    TP_DATA_LOC_READ_STR(k.dev, dev, sizeof(k.dev));
    return ne_count(&k, 1, now);
}
