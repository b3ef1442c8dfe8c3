package main

// The programs the native reader carries, read from the loader's pins. exec_count: the Python
// module probes/programs/exec_count.py documents the semantics this mirrors (counts per
// cgroup, first/last exec time since the cgroup's window opened, the open time written into
// exec_open / exec_open_any before the open snapshot). neigh_events: as
// probes/programs/neigh_events.py (creates/updates per writer cgroup, in total and per device;
// its family filter is compiled in by the loader). syscall_count: as
// probes/programs/syscall_count.py with its start-up filter only (the launcher wrote it into
// the pinned filter map; a per-window filter would need the loader, so options are refused).
// pkt_count: as probes/programs/pkt_count.py, attached by the loader through pinned XDP links;
// host-level counters (cgroup key 0) per start-up interface.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// snapshot: cgroup id -> counter -> cumulative value.
type snapshot map[uint64]map[string]uint64

func (s snapshot) add(cgroup uint64, counter string, v uint64) {
	m := s[cgroup]
	if m == nil {
		m = map[string]uint64{}
		s[cgroup] = m
	}
	m[counter] += v
}

// eachPerCPU calls fn with every key of a per-CPU map and its values, one per possible CPU.
func eachPerCPU[K, V any](m *ebpf.Map, prog string, fn func(K, []V)) error {
	var key K
	var vals []V
	it := m.Iterate()
	for it.Next(&key, &vals) {
		fn(key, vals)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("%s: reading the map failed: %w", prog, err)
	}
	return nil
}

// countersOnly: the window hooks of a program that only counts (no open time, no samples).
type countersOnly struct{}

func (countersOnly) openWindow([]node) error                    { return nil }
func (countersOnly) samples(uint64, []node) map[string][]sample { return nil }

type sample struct {
	series     string
	start, end uint64
}

type program interface {
	name() string
	counters() []string
	openWindow(nodes []node) error
	snapshot() (snapshot, error)
	samples(startUnixNs uint64, nodes []node) map[string][]sample
	close()
}

type node struct {
	name     string
	cgroupID uint64
}

// struct exec_stat {count, first, last} in bpf/exec_count.bpf.c.
type execStat struct{ Count, First, Last uint64 }

type execCount struct {
	counts, open, openAny *ebpf.Map
	opens                 map[uint64]uint64      // cgroup id (0 = host) -> open time, CLOCK_MONOTONIC
	times                 map[uint64][][2]uint64 // per-CPU (first, last) as the last snapshot read
}

func openPrograms(pins [][2]string, sc syscallSettings, ifaces map[uint32]string) (map[string]program, error) {
	out := map[string]program{}
	for _, pin := range pins {
		var p program
		var err error
		switch name, dir := pin[0], pin[1]; name {
		case "exec_count":
			p, err = openExecCount(dir)
		case "neigh_events":
			p, err = openNeighEvents(dir)
		case "syscall_count":
			p, err = openSyscallCount(dir, sc)
		case "pkt_count":
			p, err = openPktCount(dir, ifaces)
		case "bpf_stats": // no pins: it reads every program on the node
			p, err = openBpfStats()
		default:
			err = fmt.Errorf("program %q is not carried by the native reader (exec_count, neigh_events, syscall_count, pkt_count, bpf_stats)", name)
		}
		if err != nil {
			closePrograms(out)
			return nil, err
		}
		out[pin[0]] = p
	}
	return out, nil
}

func closePrograms(progs map[string]program) {
	for _, p := range progs {
		p.close()
	}
}

func pinnedMap(dir, name string, keySize, valueSize uint32) (*ebpf.Map, error) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, "map_"+name), nil)
	if err != nil {
		return nil, fmt.Errorf("opening pinned map %s: %w", name, err)
	}
	// A C struct changed without its reader must fail loudly, not read garbage.
	if m.KeySize() != keySize || m.ValueSize() != valueSize {
		m.Close()
		return nil, fmt.Errorf("map %s: kernel layout key %d / value %d bytes, reader expects %d / %d",
			name, m.KeySize(), m.ValueSize(), keySize, valueSize)
	}
	return m, nil
}

func openExecCount(dir string) (*execCount, error) {
	e := &execCount{opens: map[uint64]uint64{}, times: map[uint64][][2]uint64{}}
	var err error
	if e.counts, err = pinnedMap(dir, "exec_count", 8, 24); err != nil {
		return nil, err
	}
	if e.open, err = pinnedMap(dir, "exec_open", 8, 8); err != nil {
		e.close()
		return nil, err
	}
	if e.openAny, err = pinnedMap(dir, "exec_open_any", 4, 8); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *execCount) name() string       { return "exec_count" }
func (e *execCount) counters() []string { return []string{"exec"} }

func monotonicNs() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) // the BPF clock: bpf_ktime_get_ns
	return uint64(ts.Nano())
}

func (e *execCount) openWindow(nodes []node) error {
	now := monotonicNs()
	for _, n := range nodes {
		var err error
		if n.cgroupID == 0 { // the host: every cgroup without an open time of its own
			err = e.openAny.Update(uint32(0), now, ebpf.UpdateAny)
		} else {
			err = e.open.Update(n.cgroupID, now, ebpf.UpdateAny)
		}
		if err != nil {
			return fmt.Errorf("exec_count: writing the open time failed: %w", err)
		}
		e.opens[n.cgroupID] = now
	}
	return nil
}

func (e *execCount) snapshot() (snapshot, error) {
	out := snapshot{}
	times := map[uint64][][2]uint64{}
	err := eachPerCPU(e.counts, "exec_count", func(cg uint64, vals []execStat) {
		ts := make([][2]uint64, 0, len(vals))
		out.add(cg, "exec", 0) // present even when every CPU's count is 0
		for _, v := range vals {
			out.add(cg, "exec", v.Count)
			ts = append(ts, [2]uint64{v.First, v.Last})
		}
		times[cg] = ts
	})
	if err != nil {
		return nil, err
	}
	e.times = times
	return out, nil
}

// samples: one exec.window sample (first, last exec time) per node with an exec in the window.
func (e *execCount) samples(startUnixNs uint64, nodes []node) map[string][]sample {
	out := map[string][]sample{}
	for _, n := range nodes {
		opened, ok := e.opens[n.cgroupID]
		if !ok {
			opened = startUnixNs - (uint64(time.Now().UnixNano()) - monotonicNs())
		}
		var cpus [][2]uint64
		if n.cgroupID == 0 {
			keys := make([]uint64, 0, len(e.times))
			for k := range e.times {
				keys = append(keys, k)
			}
			sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
			for _, k := range keys {
				cpus = append(cpus, e.times[k]...)
			}
		} else {
			cpus = e.times[n.cgroupID]
		}
		if first, last, ok := windowTimes(cpus, opened); ok {
			out[n.name] = []sample{{"exec.window", first, last}}
		}
	}
	return out
}

// windowTimes: (first, last) over per-CPU times of execs at or after opened. A CPU whose last
// exec is before opened ran none in the window; one whose first is before it but last is not
// missed the restart (exec_count.py's caveat): its last is its first.
func windowTimes(cpus [][2]uint64, opened uint64) (uint64, uint64, bool) {
	var first, last uint64
	found := false
	for _, c := range cpus {
		if c[1] < opened {
			continue
		}
		f := c[0]
		if f < opened {
			f = c[1]
		}
		if !found || f < first {
			first = f
		}
		if !found || c[1] > last {
			last = c[1]
		}
		found = true
	}
	return first, last, found
}

func (e *execCount) close() {
	for _, m := range []*ebpf.Map{e.counts, e.open, e.openAny} {
		if m != nil {
			m.Close()
		}
	}
}

// deltaByNode mirrors probes/programs/base.py delta_by_node: a node with a cgroup id gets that
// key's delta, cgroup 0 (the host) the delta of the sums; every counter is present.
func deltaByNode(before, after snapshot, nodes []node, names []string) (map[string]map[string]uint64, error) {
	total := func(s snapshot) map[string]uint64 {
		t := map[string]uint64{}
		for _, cs := range s {
			for k, v := range cs {
				t[k] += v
			}
		}
		return t
	}
	out := map[string]map[string]uint64{}
	for _, n := range nodes {
		var b, a map[string]uint64
		what := fmt.Sprintf("node %s (cgroup %d)", n.name, n.cgroupID)
		if n.cgroupID == 0 {
			b, a, what = total(before), total(after), fmt.Sprintf("node %s (host)", n.name)
		} else {
			b, a = before[n.cgroupID], after[n.cgroupID]
		}
		d := map[string]uint64{}
		for k, v := range a {
			if v < b[k] {
				return nil, errors.New(what + ": counter " + k + " went backwards")
			}
			d[k] = v - b[k]
		}
		for _, c := range names {
			if _, ok := d[c]; !ok {
				d[c] = 0
			}
		}
		out[n.name] = d
	}
	return out, nil
}

// struct ne_key {tgid, kind, cgroup, dev} and struct ne_total {count, first_ns, last_ns} in
// bpf/neigh_events.bpf.c.
type neighKey struct {
	Tgid, Kind uint32
	Cgroup     uint64
	Dev        [16]byte
}

type neighTotal struct{ Count, First, Last uint64 }

var neighKinds = map[uint32]string{0: "create", 1: "update"}

type neighEvents struct {
	countersOnly
	totals *ebpf.Map
}

func openNeighEvents(dir string) (*neighEvents, error) {
	m, err := pinnedMap(dir, "ne_totals", 32, 24)
	if err != nil {
		return nil, fmt.Errorf("neigh_events: %w", err)
	}
	return &neighEvents{totals: m}, nil
}

func (n *neighEvents) name() string       { return "neigh_events" }
func (n *neighEvents) counters() []string { return []string{"neigh.create", "neigh.update"} }
func (n *neighEvents) close()             { n.totals.Close() }

func (n *neighEvents) snapshot() (snapshot, error) {
	out := snapshot{}
	err := eachPerCPU(n.totals, "neigh_events", func(key neighKey, vals []neighTotal) {
		var count uint64
		for _, v := range vals {
			count += v.Count
		}
		if count == 0 {
			return
		}
		kind, ok := neighKinds[key.Kind]
		if !ok {
			kind = strconv.FormatUint(uint64(key.Kind), 10)
		}
		dev := unix.ByteSliceToString(key.Dev[:])
		if dev == "" {
			dev = "?"
		}
		out.add(key.Cgroup, "neigh."+kind, count)
		out.add(key.Cgroup, "neigh."+kind+".dev."+dev, count)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// syscallSettings: where the syscall names are (asm/unistd_64.h) and the start-up filter's
// numbers (nil: every syscall), as the launcher passes them.
type syscallSettings struct {
	unistd string
	filter []uint64
}

// struct sc_key {cgroup, nr} in bpf/syscall_count.bpf.c; the value is a per-CPU u64.
type scKey struct{ Cgroup, Nr uint64 }

type syscallCount struct {
	countersOnly
	counts *ebpf.Map
	names  map[uint64]string
	fixed  []string // with a filter every counter is known up front (explicit zeros)
}

func openSyscallCount(dir string, sc syscallSettings) (*syscallCount, error) {
	m, err := pinnedMap(dir, "syscall_count", 16, 8)
	if err != nil {
		return nil, fmt.Errorf("syscall_count: %w", err)
	}
	s := &syscallCount{counts: m, names: map[uint64]string{}}
	if b, err := os.ReadFile(sc.unistd); err == nil { // without the header: sys.<nr>
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) == 3 && f[0] == "#define" && strings.HasPrefix(f[1], "__NR_") {
				if nr, err := strconv.ParseUint(f[2], 10, 64); err == nil {
					s.names[nr] = f[1][len("__NR_"):]
				}
			}
		}
	}
	for _, nr := range sc.filter {
		s.fixed = append(s.fixed, s.counterName(nr))
	}
	return s, nil
}

func (s *syscallCount) counterName(nr uint64) string {
	if n, ok := s.names[nr]; ok {
		return "sys." + n
	}
	return "sys." + strconv.FormatUint(nr, 10)
}

func (s *syscallCount) name() string       { return "syscall_count" }
func (s *syscallCount) counters() []string { return s.fixed }
func (s *syscallCount) close()             { s.counts.Close() }

func (s *syscallCount) snapshot() (snapshot, error) {
	out := snapshot{}
	err := eachPerCPU(s.counts, "syscall_count", func(key scKey, vals []uint64) {
		for _, v := range vals {
			out.add(key.Cgroup, s.counterName(key.Nr), v)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// struct pkt_val {packets, bytes, ipv4, ipv6, arp} in bpf/pkt_count.bpf.c, keyed by ifindex.
type pktVal struct{ Packets, Bytes, IPv4, IPv6, ARP uint64 }

type pktCount struct {
	countersOnly
	counts *ebpf.Map
	ifaces map[uint32]string // ifindex (in the interfaces' netns) -> name
	names  []string
}

func openPktCount(dir string, ifaces map[uint32]string) (*pktCount, error) {
	if len(ifaces) == 0 {
		return nil, fmt.Errorf("pkt_count: no interfaces (--pkt-iface IFINDEX=NAME)")
	}
	m, err := pinnedMap(dir, "pkt_count", 4, 40)
	if err != nil {
		return nil, fmt.Errorf("pkt_count: %w", err)
	}
	p := &pktCount{counts: m, ifaces: ifaces}
	idx := make([]uint32, 0, len(ifaces))
	for i := range ifaces {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	for _, i := range idx {
		for _, f := range []string{"packets", "bytes", "ipv4", "ipv6", "arp"} {
			p.names = append(p.names, "if."+ifaces[i]+"."+f)
		}
	}
	return p, nil
}

func (p *pktCount) name() string       { return "pkt_count" }
func (p *pktCount) counters() []string { return p.names }
func (p *pktCount) close()             { p.counts.Close() }

func (p *pktCount) snapshot() (snapshot, error) {
	out := snapshot{}
	for _, n := range p.names {
		out.add(0, n, 0) // every counter, explicit zeros
	}
	err := eachPerCPU(p.counts, "pkt_count", func(ifindex uint32, vals []pktVal) {
		dev, ok := p.ifaces[ifindex]
		if !ok {
			return // an ifindex we did not attach to (cannot happen unless reused)
		}
		for _, v := range vals {
			for f, n := range map[string]uint64{"packets": v.Packets, "bytes": v.Bytes, "ipv4": v.IPv4, "ipv6": v.IPv6, "arp": v.ARP} {
				out.add(0, "if."+dev+"."+f, n)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
