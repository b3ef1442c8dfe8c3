package main

// The relay's downstream fleet: probes and windows, with controller/fleet.py's rules
// (fleet_live.py for liveness, fleet_state.py for pacing and the reading table). One mutex
// guards everything; waits sleep on a broadcast channel (wake) or a poll, as fleet.py's
// Condition does. Windows are per probe id: a probe that reconnects mid-window is sent what its
// old session missed; one that moved here mid-window is added by a widening OpenWindow.

import (
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"swarmscope.dev/relayd/pb"
)

const (
	maxPendingHellos = 100_000
	helloTTL         = 30 * time.Second
)

// outbox: a probe's commands down its stream, unbounded (nil ends the stream).
type outbox struct {
	mu     sync.Mutex
	items  []*pb.Command
	signal chan struct{}
}

func newOutbox() *outbox { return &outbox{signal: make(chan struct{}, 1)} }

func (o *outbox) put(c ...*pb.Command) {
	o.mu.Lock()
	o.items = append(o.items, c...)
	o.mu.Unlock()
	select {
	case o.signal <- struct{}{}:
	default:
	}
}

func (o *outbox) take() []*pb.Command {
	o.mu.Lock()
	defer o.mu.Unlock()
	items := o.items
	o.items = nil
	return items
}

type probe struct {
	id, host, sid            string
	connected                bool
	lastSeen, disconnectedAt time.Time
	liveness                 time.Duration
	out                      *outbox
}

type rowKey struct{ pid, node string }

type window struct {
	runID, id string
	template  *pb.OpenWindow
	nodeInfo  map[string][]*pb.NodeInfo
	nodes     map[string]map[string]bool
	expected  map[string]bool
	acks      map[string]*pb.WindowAck
	done      map[string]bool
	raw       map[rowKey]*pb.Reading
	order     []rowKey // raw's keys as they came (a resent reading replaces, not adds)
	spans     [][]byte
	closing   bool
	closeCmd  *pb.Command
}

type hello struct {
	nonce []byte
	t     time.Time
}

type change struct {
	host   string
	joined bool
}

type fleet struct {
	c        *config
	mu       sync.Mutex
	wake     chan struct{} // closed (and replaced) by notify: fleet.py's notify_all
	probes   map[string]*probe
	sessions map[string]*probe
	hellos   map[string]hello
	helloQ   []string // server nonces, oldest first (some already taken)
	windows  map[string]*window
	seq      uint64
	prunedAt time.Time
	grace    time.Duration // reconnect grace (= --liveness, not paced: how long a reconnect takes)
	prune    time.Duration
	// Roster changes since the last Roster: the last change of each probe wins (a probe that left
	// and came back within one Roster is announced as added only).
	changes  map[string]change
	rejected int
}

func newFleet(c *config) *fleet {
	return &fleet{
		c: c, wake: make(chan struct{}), probes: map[string]*probe{}, sessions: map[string]*probe{},
		hellos: map[string]hello{}, windows: map[string]*window{}, changes: map[string]change{},
		grace: c.liveness, prune: max(60*time.Second, 10*c.liveness),
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "relayd: "+format+"\n", args...)
}

// notify wakes every waiter (lock held).
func (f *fleet) notify() {
	close(f.wake)
	f.wake = make(chan struct{})
}

// sleep releases the lock until notify or d (lock held on entry and return).
func (f *fleet) sleep(d time.Duration) {
	ch := f.wake
	f.mu.Unlock()
	t := time.NewTimer(d)
	select {
	case <-ch:
	case <-t.C:
	}
	t.Stop()
	f.mu.Lock()
}

// pollEvery: fleet_state.poll_s.
func pollEvery(pending int) time.Duration {
	if pending < 1000 {
		return 250 * time.Millisecond
	}
	return time.Second
}

// pace: fleet_state.pace: the interval (seconds, handed out as it is computed: the same float
// as the Python fleet's) keeping `sessions` heartbeats under budget a second, and the liveness.
func pace(floor, liveness float64, sessions int, budget float64) (float64, time.Duration) {
	if budget <= 0 || floor <= 0 {
		return floor, seconds(liveness)
	}
	interval := math.Max(floor, float64(sessions)/budget)
	return interval, seconds(liveness * interval / floor)
}

func (f *fleet) nextSeq() uint64 {
	f.seq++
	return f.seq
}

// -- liveness (fleet_live.py; lock held) -----------------------------------------------------

func (f *fleet) alive(p *probe, now time.Time) bool {
	return p.connected && now.Sub(p.lastSeen) <= p.liveness
}

func (f *fleet) gone(pid string, now time.Time) bool {
	p := f.probes[pid]
	if p == nil {
		return true
	}
	if p.connected {
		return now.Sub(p.lastSeen) > p.liveness
	}
	since := p.disconnectedAt
	if since.IsZero() {
		since = p.lastSeen
	}
	return now.Sub(since) > f.grace
}

func (f *fleet) pruneGone(now time.Time) {
	if now.Sub(f.prunedAt) < min(time.Second, f.prune/10) {
		return
	}
	f.prunedAt = now
	for pid, p := range f.probes {
		since := p.disconnectedAt
		if since.IsZero() {
			since = p.lastSeen
		}
		if !p.connected && now.Sub(since) > f.prune {
			delete(f.probes, pid)
			delete(f.sessions, p.sid)
			logf("probe %s@%s pruned: gone for %.0fs", pid, p.host, now.Sub(since).Seconds())
		}
	}
	for sid, p := range f.sessions {
		if f.probes[p.id] != p && !p.connected {
			delete(f.sessions, sid)
		}
	}
}

// live: the live probes, as the roster announces them (lock held).
func (f *fleet) live(now time.Time) []*probe {
	f.pruneGone(now)
	var out []*probe
	for _, p := range f.probes {
		if f.alive(p, now) {
			out = append(out, p)
		}
	}
	return out
}

func (f *fleet) name(pid string) string {
	if p := f.probes[pid]; p != nil {
		return p.id + "@" + p.host
	}
	return pid
}

func (f *fleet) watch(p *probe, joined bool) {
	f.changes[p.id] = change{p.host, joined}
}

// drain: the Roster of the changes since the last one (nil: none).
func (f *fleet) drain() *pb.Roster {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.changes) == 0 {
		return nil
	}
	r := &pb.Roster{}
	for pid, ch := range f.changes {
		if ch.joined {
			r.Added = append(r.Added, &pb.RosterEntry{ProbeId: pid, Host: ch.host})
		} else {
			r.Removed = append(r.Removed, pid)
		}
	}
	f.changes = map[string]change{}
	return r
}

// fullRoster: every live probe, the first message to a new upstream; pending changes dropped.
func (f *fleet) fullRoster() *pb.Roster {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.changes = map[string]change{}
	r := &pb.Roster{}
	for _, p := range f.live(time.Now()) {
		r.Added = append(r.Added, &pb.RosterEntry{ProbeId: p.id, Host: p.host})
	}
	return r
}

func (f *fleet) shutdownProbes(reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cmd := &pb.Command{Seq: f.nextSeq(), Kind: &pb.Command_Shutdown{Shutdown: &pb.Shutdown{Reason: reason}}}
	for _, p := range f.probes {
		p.out.put(cmd, nil)
	}
}

// -- messages from probes --------------------------------------------------------------------

func (f *fleet) handle(p *probe, m *pb.ProbeMessage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p.lastSeen = time.Now()
	switch k := m.GetKind().(type) {
	case *pb.ProbeMessage_Ack:
		win := f.windows[k.Ack.GetWindowId()]
		if win != nil && win.expected[p.id] && !win.closing {
			win.acks[p.id] = k.Ack
			// Wake the waiter only when the last ack is in (fleet.py: O(N) wakes, not O(N^2)).
			if len(win.acks) >= len(win.expected) {
				f.notify()
			}
		}
	case *pb.ProbeMessage_Reading:
		f.take(p, k.Reading.GetWindowId(), []*pb.Reading{k.Reading})
	case *pb.ProbeMessage_Done:
		win := f.take(p, k.Done.GetWindowId(), k.Done.GetBatch())
		if win == nil {
			return
		}
		if len(k.Done.GetTrace()) > 0 && !win.done[p.id] { // once per probe, resends aside
			win.spans = append(win.spans, k.Done.GetTrace())
		}
		win.done[p.id] = true
		if len(win.done) >= len(win.expected) && f.allDone(win) {
			f.notify()
		}
	}
}

func (f *fleet) allDone(win *window) bool {
	for pid := range win.expected {
		if !win.done[pid] {
			return false
		}
	}
	return true
}

// take keeps the readings a window asked this probe for (fleet.py's _take and accept).
func (f *fleet) take(p *probe, wid string, readings []*pb.Reading) *window {
	win := f.windows[wid]
	if win == nil || !win.expected[p.id] {
		f.rejected += len(readings)
		return nil
	}
	for _, r := range readings {
		if !win.nodes[p.id][r.GetNode()] || r.GetRunId() != win.runID {
			f.rejected++
			logf("probe %s sent a reading for node %q, not asked in window %s", p.id, r.GetNode(), wid)
			continue
		}
		k := rowKey{p.id, r.GetNode()}
		if _, seen := win.raw[k]; !seen {
			win.order = append(win.order, k)
		}
		win.raw[k] = r // keyed by node: a close answered twice counts once
	}
	return win
}

// resend: a probe's new session gets the commands of its open windows its old one missed.
func (f *fleet) resend(p *probe) {
	for _, win := range f.windows {
		if !win.expected[p.id] {
			continue
		}
		if win.closing && win.closeCmd != nil && !win.done[p.id] {
			p.out.put(win.closeCmd)
		} else if !win.closing && win.acks[p.id] == nil {
			p.out.put(f.openCmd(win, p.id))
		}
	}
}

func (f *fleet) ended(p *probe) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.connected {
		p.connected = false
		p.disconnectedAt = time.Now()
		if f.probes[p.id] == p {
			f.watch(p, false)
		}
	}
	f.notify()
}
