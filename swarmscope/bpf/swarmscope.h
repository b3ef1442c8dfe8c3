/* swarmscope.h — shared definitions for the programs in bpf/ (compiled by BCC).
 *
 * Rule for this file and every program: use BPF helpers and tracepoint arguments only. The
 * kernel headers BCC compiles against may be older than the running kernel, so reading a
 * kernel struct field returns silent garbage (see docs/platform.md#bcc-and-the-kernel-header-tree).
 *
 * Counting idiom (BCC refuses map methods inside macros, so it is written out each time):
 *     u64 zero = 0, *v = map.lookup_or_try_init(&key, &zero);
 *     if (v) *v += 1;
 * on a BPF_PERCPU_HASH: per-CPU slots lose no increments without atomics (BCC's increment()
 * on a shared hash does, and on a per-CPU hash never creates keys); user space sums the CPUs.
 */
#ifndef SWARMSCOPE_H
#define SWARMSCOPE_H

/* Upper bound of distinct keys (cgroups, syscalls, ...) any counting map holds. */
#ifndef SS_MAX_KEYS
#define SS_MAX_KEYS 65536
#endif

#endif
