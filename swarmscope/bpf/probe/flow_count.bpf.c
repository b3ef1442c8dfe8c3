/* flow_count.bpf.c — packets and bytes per IPv4 5-tuple (saddr, daddr, sport, dport, proto),
 * counted with XDP on a receiving interface; the kernel truth of the flow storm. Never changes
 * traffic (always XDP_PASS).
 *
 * One loaded object per interface (the loader keeps them apart, so ifindexes that repeat across
 * network namespaces never mix). The flow table is sized by the loader (-DFLOW_MAX) above the
 * number of flows a window can create; a flow that cannot be inserted anyway (table full) is
 * counted in `drops`, which the run treats as a failure, never as a figure. Ports are read for
 * TCP and UDP first fragments only (0 otherwise); non-IPv4 frames are counted in `other`.
 * Bytes are the frame length seen by XDP (Ethernet header included).
 */
#include "swarmscope.h"
#include <uapi/linux/bpf.h>
#include "flow_key.h"

#ifndef FLOW_MAX
#define FLOW_MAX 262144
#endif

struct flow_val {
    u64 packets;
    u64 bytes;
};

struct flow_tot {
    u64 packets; /* IPv4 packets counted into a flow */
    u64 bytes;
    u64 flows;   /* flows created (the table is drained per window by the loader) */
    u64 drops;   /* IPv4 packets whose flow could not be inserted: a failed run */
    u64 other;   /* non-IPv4 frames (ARP, IPv6 neighbour discovery) */
};

BPF_HASH(flows, struct flow_key, struct flow_val, FLOW_MAX);
BPF_PERCPU_ARRAY(flow_tot, struct flow_tot, 1);

int flow_count_xdp(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *data_end = (void *)(long)ctx->data_end;
    u32 zero = 0;
    struct flow_tot *t = flow_tot.lookup(&zero);
    if (!t)
        return XDP_PASS;
    u64 len = data_end - data;
    struct flow_key k = {};
    if (flow_key_parse(data, data_end, &k) != 0) {
        t->other += 1;
        return XDP_PASS;
    }
    struct flow_val *v = flows.lookup(&k);
    if (!v) {
        struct flow_val init = {1, len};
        /* insert = BPF_NOEXIST: a CPU racing us to the same new key makes one of us fail
         * with -EEXIST, and that one adds to the entry the other made. */
        if (flows.insert(&k, &init) == 0) {
            t->flows += 1;
            t->packets += 1;
            t->bytes += len;
            return XDP_PASS;
        }
        v = flows.lookup(&k);
        if (!v) { /* the table is full */
            t->drops += 1;
            return XDP_PASS;
        }
    }
    __sync_fetch_and_add(&v->packets, 1);
    __sync_fetch_and_add(&v->bytes, len);
    t->packets += 1;
    t->bytes += len;
    return XDP_PASS;
}
