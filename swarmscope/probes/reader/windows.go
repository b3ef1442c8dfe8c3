package main

// Windows: OpenWindow snapshots, CloseWindow deltas, as probes/agent.py's _open / _close
// (open windows survive a reconnect; an OpenWindow sent again is acked again without a new
// snapshot; a CloseWindow sent again gets the first answer).

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"golang.org/x/sys/unix"

	"swarmscope.dev/probereader/pb"
)

type window struct {
	runID, windowID string
	nodes           []node
	nodeErrors      map[string]string
	start           uint64
	span            *tracepb.Span
	before          map[string]snapshot
	errors          map[string]string // by program ("options" for bad options)
}

type closed struct {
	readings []*pb.Reading
	trace    []byte
}

type windows struct {
	a      *agent
	open_  map[[2]string]*window
	order  [][2]string // open windows, oldest first
	closed map[[2]string]closed
	corder [][2]string
}

func newWindows(a *agent) *windows {
	return &windows{a: a, open_: map[[2]string]*window{}, closed: map[[2]string]closed{}}
}

func joinErrors(m map[string]string) string {
	ks := sortedKeys(m)
	parts := make([]string, 0, len(ks))
	for _, k := range ks {
		parts = append(parts, m[k])
	}
	return strings.Join(parts, "; ")
}

// cgroup2Mount: where cgroup v2 is mounted, the shortest such path (/sys/fs/cgroup, or
// /sys/fs/cgroup/unified on a hybrid host), as swarmscope.core.sys.cgroups.cgroup2_mount.
func cgroup2Mount() (string, error) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return "", err
	}
	best := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[2] == "cgroup2" && (best == "" || len(f[1]) < len(best)) {
			best = f[1]
		}
	}
	if best == "" {
		return "", fmt.Errorf("cgroup v2 is not mounted")
	}
	return best, nil
}

// resolveCgroup: the id (inode) of a cgroup path, absolute under the v2 mount or relative to
// it; one that leaves the mount is refused (swarmscope.core.sys.cgroups.resolve_cgroup_id).
func resolveCgroup(p string) (uint64, error) {
	base, err := cgroup2Mount()
	if err != nil {
		return 0, err
	}
	full := p
	if p != base && !strings.HasPrefix(p, base+"/") {
		full = filepath.Join(base, strings.TrimLeft(p, "/"))
	}
	real, err := filepath.EvalSymlinks(full)
	if err != nil {
		return 0, fmt.Errorf("no cgroup at %s: %v", full, err)
	}
	if real != base && !strings.HasPrefix(real, base+"/") {
		return 0, fmt.Errorf("cgroup path %q is outside the cgroup mount %s", p, base)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(real, &st); err != nil {
		return 0, fmt.Errorf("no cgroup at %s: %v", real, err)
	}
	return st.Ino, nil
}

func (ws *windows) open(cmd *pb.OpenWindow) *pb.WindowAck {
	key := [2]string{cmd.GetRunId(), cmd.GetWindowId()}
	if again, ok := ws.open_[key]; ok { // sent again after a reconnect: keep the first snapshot
		err := joinErrors(again.errors)
		return &pb.WindowAck{RunId: key[0], WindowId: key[1], Ok: err == "", Error: err, UnixNs: again.start}
	}
	start := uint64(time.Now().UnixNano())
	w := &window{runID: key[0], windowID: key[1], start: start, nodeErrors: map[string]string{},
		span: newWindowSpan(cmd, ws.a.c, start), before: map[string]snapshot{}, errors: map[string]string{}}
	infos := cmd.GetNodes()
	if len(infos) == 0 {
		infos = []*pb.NodeInfo{{Name: ws.a.c.node}}
	}
	for _, n := range infos {
		id := n.GetCgroupId()
		if id == 0 && n.GetCgroupPath() != "" {
			var err error
			if id, err = resolveCgroup(n.GetCgroupPath()); err != nil {
				w.nodeErrors[n.GetName()] = fmt.Sprintf("node %s: %v", n.GetName(), err)
			}
		}
		w.nodes = append(w.nodes, node{n.GetName(), id})
	}
	names := cmd.GetPrograms()
	if len(names) == 0 {
		names = ws.a.order
	}
	// No carried program takes per-window options: any key fails the ack, naming it, and
	// nothing is read (readings under settings not asked for would be mislabelled).
	if len(cmd.GetOptions()) > 0 {
		var probs []string
		reading := map[string]bool{}
		for _, n := range names {
			reading[n] = true
		}
		for _, k := range sortedKeys(cmd.GetOptions()) {
			prog, _, _ := strings.Cut(k, ".")
			if !reading[prog] {
				probs = append(probs, k+": program "+prog+" is not read in this window")
			} else {
				probs = append(probs, k+": program "+prog+" takes no per-window options on this probe")
			}
		}
		w.errors["options"] = "bad options: " + strings.Join(probs, "; ")
		names = nil
	}
	measurable := w.measurable()
	for _, name := range names {
		p, ok := ws.a.progs[name]
		if !ok {
			w.errors[name] = fmt.Sprintf("%s: not loaded on this probe (loaded: %s)", name, strings.Join(ws.a.order, ", "))
			continue
		}
		if err := p.openWindow(measurable); err != nil {
			w.errors[name] = fmt.Sprintf("%s: snapshot at open failed: %v", name, err)
			continue
		}
		s, err := p.snapshot()
		if err != nil {
			w.errors[name] = fmt.Sprintf("%s: snapshot at open failed: %v", name, err)
			continue
		}
		w.before[name] = s
	}
	ws.open_[key] = w
	ws.order = append(ws.order, key)
	for len(ws.order) > maxOpenWindows { // a controller that died mid-window: drop the oldest
		old := ws.order[0]
		ws.order = ws.order[1:]
		delete(ws.open_, old)
	}
	ws.a.openN.Store(int32(len(ws.order)))
	err := joinErrors(w.errors)
	if err != "" {
		fmt.Fprintf(os.Stderr, "probe: window %s opened with errors: %s\n", key[1], err)
	}
	return &pb.WindowAck{RunId: key[0], WindowId: key[1], Ok: err == "", Error: err, UnixNs: start}
}

func (w *window) measurable() []node {
	var out []node
	for _, n := range w.nodes {
		if _, bad := w.nodeErrors[n.name]; !bad {
			out = append(out, n)
		}
	}
	return out
}

func (ws *windows) close(cmd *pb.CloseWindow) ([]*pb.Reading, []byte) {
	key := [2]string{cmd.GetRunId(), cmd.GetWindowId()}
	if c, ok := ws.closed[key]; ok { // sent again after a reconnect: the same answer
		return c.readings, nil // the spans went with the first answer
	}
	readings, trace := ws.readClose(key)
	ws.closed[key] = closed{readings, trace}
	ws.corder = append(ws.corder, key)
	for len(ws.corder) > maxClosedWindow {
		delete(ws.closed, ws.corder[0])
		ws.corder = ws.corder[1:]
	}
	return readings, trace
}

func (ws *windows) readClose(key [2]string) ([]*pb.Reading, []byte) {
	end := uint64(time.Now().UnixNano())
	w, ok := ws.open_[key]
	if !ok {
		return []*pb.Reading{{RunId: key[0], WindowId: key[1], ProbeId: ws.a.c.probeID, Node: ws.a.c.node,
			EndUnixNs: end, Error: "window was never opened on this probe"}}, nil
	}
	delete(ws.open_, key)
	for i, k := range ws.order {
		if k == key {
			ws.order = append(ws.order[:i], ws.order[i+1:]...)
			break
		}
	}
	ws.a.openN.Store(int32(len(ws.order)))
	counters := map[string]map[string]uint64{}
	samples := map[string][]*pb.Sample{}
	for _, n := range w.nodes {
		counters[n.name] = map[string]uint64{}
	}
	errs := map[string]string{}
	for k, v := range w.errors {
		errs[k] = v
	}
	measurable := w.measurable()
	for _, name := range ws.a.order {
		before, ok := w.before[name]
		if !ok {
			continue
		}
		p := ws.a.progs[name]
		after, err := p.snapshot()
		var per map[string]map[string]uint64
		if err == nil {
			per, err = deltaByNode(before, after, measurable, p.counters())
		}
		if err != nil {
			errs[name] = fmt.Sprintf("%s: read at close failed: %v", name, err)
			continue
		}
		for n, cs := range per {
			for k, v := range cs {
				counters[n][k] = v
			}
		}
		for n, ss := range p.samples(w.start, measurable) {
			for _, x := range ss {
				samples[n] = append(samples[n], &pb.Sample{Series: x.series, StartNs: x.start, EndNs: x.end})
			}
		}
	}
	progErr := joinErrors(errs)
	readings := make([]*pb.Reading, 0, len(w.nodes))
	for _, n := range w.nodes {
		e := progErr
		if ne, bad := w.nodeErrors[n.name]; bad && progErr != "" {
			e = ne + "; " + progErr
		} else if bad {
			e = ne
		}
		readings = append(readings, &pb.Reading{RunId: w.runID, WindowId: w.windowID, ProbeId: ws.a.c.probeID,
			Node: n.name, Counters: counters[n.name], Samples: samples[n.name], StartUnixNs: w.start,
			EndUnixNs: end, Error: e})
	}
	annotate(w.span, readings, end)
	for _, r := range readings {
		if r.GetError() != "" {
			w.span.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "a reading has an error"}
			break
		}
	}
	w.span.EndTimeUnixNano = end
	return readings, encodeSpans(ws.a.c, w.span)
}

// cpuMeter: this process's CPU % since the last sample (psutil's cpu_percent) and its RSS.
type cpuMeter struct {
	lastTicks uint64
	lastWall  time.Time
}

var clkTck = 100.0 // sysconf(_SC_CLK_TCK) on every Linux ABI Go supports

func (m *cpuMeter) sample() (float64, uint64) {
	now := time.Now()
	var ticks, rss uint64
	if b, err := os.ReadFile("/proc/self/stat"); err == nil {
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 21 {
			u, _ := strconv.ParseUint(f[11], 10, 64)
			st, _ := strconv.ParseUint(f[12], 10, 64)
			pages, _ := strconv.ParseUint(f[21], 10, 64)
			ticks, rss = u+st, pages*uint64(os.Getpagesize())
		}
	}
	pct := 0.0
	if !m.lastWall.IsZero() {
		if wall := now.Sub(m.lastWall).Seconds(); wall > 0 {
			pct = 100 * float64(ticks-m.lastTicks) / clkTck / wall
		}
	}
	m.lastTicks, m.lastWall = ticks, now
	return pct, rss
}

func kernelRelease() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
}
