/* pkt_count.bpf.c — count packets and bytes per receiving interface with XDP, never changing
 * traffic (always XDP_PASS).
 *
 * Keyed by ingress ifindex (ifindexes are per network namespace; the loader maps them back to
 * the names it attached to). Besides the totals it splits by EtherType (IPv4, IPv6, ARP) so a
 * test, or a reader, can tell the load from neighbour-discovery noise. Reads only the packet
 * bytes and the uapi xdp_md context, never kernel structs.
 */
#include "swarmscope.h"
#include <uapi/linux/bpf.h>

struct pkt_val {
    u64 packets;
    u64 bytes;
    u64 ipv4;
    u64 ipv6;
    u64 arp;
};

BPF_PERCPU_HASH(pkt_count, u32, struct pkt_val, 4096);

int pkt_count_xdp(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *data_end = (void *)(long)ctx->data_end;
    u32 ifindex = ctx->ingress_ifindex;
    struct pkt_val zero = {}, *v = pkt_count.lookup_or_try_init(&ifindex, &zero);
    if (!v)
        return XDP_PASS;
    v->packets += 1;
    v->bytes += data_end - data;
    if (data + 14 <= data_end) {
        unsigned char *p = data;
        u16 proto = ((u16)p[12] << 8) | p[13];
        if (proto == 0x0800)
            v->ipv4 += 1;
        else if (proto == 0x86DD)
            v->ipv6 += 1;
        else if (proto == 0x0806)
            v->arp += 1;
    }
    return XDP_PASS;
}
