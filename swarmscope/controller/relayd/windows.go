package main

// A window's life at the relay: one OpenWindow from upstream opened on each host's probe and
// answered with one WindowAck per outcome; one CloseWindow answered with one WindowDone (the
// readings by column, the probes done, the probes missing). fleet.py's begin_open / wait_acks /
// begin_close / finish_close and fleet_state.fill_table, with relay.py's grouping.

import (
	"sort"
	"time"

	"swarmscope.dev/relayd/pb"
)

// -- windows ---------------------------------------------------------------------------------

func (f *fleet) openCmd(win *window, pid string) *pb.Command {
	t := win.template
	return &pb.Command{Seq: f.nextSeq(), Kind: &pb.Command_Open{Open: &pb.OpenWindow{
		RunId: t.RunId, WindowId: t.WindowId, Traceparent: t.Traceparent, Programs: t.Programs,
		Options: t.Options, Nodes: win.nodeInfo[pid],
	}}}
}

// open: one OpenWindow from upstream for all its hosts. Sent to each host's live probe here
// (in command order: an open that widens a window lands before its close); the acks are
// awaited in a goroutine, then answered with one WindowAck per outcome through emit.
func (f *fleet) open(cmd *pb.OpenWindow, emit func(*pb.ProbeMessage)) {
	byHost := map[string][]*pb.NodeInfo{}
	for _, n := range cmd.GetNodes() {
		byHost[n.GetHost()] = append(byHost[n.GetHost()],
			&pb.NodeInfo{Name: n.GetName(), CgroupId: n.GetCgroupId(), CgroupPath: n.GetCgroupPath()})
	}
	f.mu.Lock()
	now := time.Now()
	liveByHost := map[string]*probe{}
	for _, p := range f.live(now) {
		liveByHost[p.host] = p
	}
	win := f.windows[cmd.GetWindowId()]
	if win == nil {
		win = &window{runID: cmd.GetRunId(), id: cmd.GetWindowId(), nodeInfo: map[string][]*pb.NodeInfo{},
			nodes: map[string]map[string]bool{}, expected: map[string]bool{}, acks: map[string]*pb.WindowAck{},
			done: map[string]bool{}, raw: map[rowKey]*pb.Reading{}}
		f.windows[win.id] = win
	}
	win.template = &pb.OpenWindow{RunId: cmd.GetRunId(), WindowId: cmd.GetWindowId(),
		Traceparent: cmd.GetTraceparent(), Programs: cmd.GetPrograms(), Options: cmd.GetOptions()}
	var pids []string
	var lost []string
	for host, nodes := range byHost {
		p := liveByHost[host]
		if p == nil {
			lost = append(lost, host)
			continue
		}
		pids = append(pids, p.id)
		win.nodeInfo[p.id] = nodes
		names := map[string]bool{}
		for _, n := range nodes {
			names[n.GetName()] = true
		}
		win.nodes[p.id] = names
		win.expected[p.id] = true
		p.out.put(f.openCmd(win, p.id))
		if win.closing {
			p.out.put(win.closeCmd)
		}
	}
	f.mu.Unlock()
	if len(lost) > 0 {
		sort.Strings(lost)
		logf("window %s: hosts with no live probe here: %v", cmd.GetWindowId(), lost)
	}
	go f.answerOpen(cmd, win, pids, emit)
}

func (f *fleet) answerOpen(cmd *pb.OpenWindow, win *window, pids []string, emit func(*pb.ProbeMessage)) {
	deadline := time.Now().Add(f.c.windowTimeout)
	f.mu.Lock()
	for {
		now := time.Now()
		pending := 0
		for _, pid := range pids {
			if win.acks[pid] == nil && !f.gone(pid, now) {
				pending++
			}
		}
		left := deadline.Sub(now)
		if pending == 0 || left <= 0 || win.closing {
			break
		}
		f.sleep(min(left, pollEvery(pending)))
	}
	failed := map[string]string{}
	if !win.closing { // widened while closing: the close accounts for every probe
		for _, pid := range pids {
			ack := win.acks[pid]
			if ack == nil || !ack.GetOk() {
				why := "no acknowledgement"
				if ack != nil {
					why = ack.GetError()
				}
				failed[pid] = "window not opened: " + why
				delete(win.expected, pid)
			}
		}
	}
	var acked []string
	for _, pid := range pids {
		if _, bad := failed[pid]; !bad && win.acks[pid] != nil {
			acked = append(acked, pid)
		}
	}
	f.mu.Unlock()
	ack := func(ok bool, why string, probes []string) {
		emit(&pb.ProbeMessage{Kind: &pb.ProbeMessage_Ack{Ack: &pb.WindowAck{RunId: cmd.GetRunId(),
			WindowId: cmd.GetWindowId(), Ok: ok, Error: why, Probes: probes,
			UnixNs: uint64(time.Now().UnixNano())}}})
	}
	if len(acked) > 0 {
		ack(true, "", acked)
	}
	groups := map[string][]string{}
	for pid, why := range failed {
		groups[why] = append(groups[why], pid)
	}
	for why, probes := range groups {
		sort.Strings(probes)
		ack(false, why, probes)
	}
}

// close: the CloseWindow to every probe the window waits for; the WindowDone after every one
// is done or gone, or the window timeout (then naming the missing ones).
func (f *fleet) close(cmd *pb.CloseWindow, emit func(*pb.ProbeMessage)) {
	f.mu.Lock()
	win := f.windows[cmd.GetWindowId()]
	if win != nil && win.closing {
		f.mu.Unlock()
		return // a close already under way answers for every probe, widened ones too
	}
	if win != nil {
		win.closing = true
		win.closeCmd = &pb.Command{Seq: f.nextSeq(), Kind: &pb.Command_Close{Close: &pb.CloseWindow{
			RunId: win.runID, WindowId: win.id}}}
		for pid := range win.expected {
			if p := f.probes[pid]; p != nil {
				p.out.put(win.closeCmd)
			}
		}
	}
	f.mu.Unlock()
	go func() {
		done := &pb.WindowDone{RunId: cmd.GetRunId(), WindowId: cmd.GetWindowId()}
		if win != nil {
			f.finishClose(win, done)
		}
		emit(&pb.ProbeMessage{Kind: &pb.ProbeMessage_Done{Done: done}})
	}()
}

func (f *fleet) finishClose(win *window, done *pb.WindowDone) {
	deadline := time.Now().Add(f.c.windowTimeout)
	f.mu.Lock()
	for {
		now := time.Now()
		pending, silent := 0, true
		for pid := range win.expected {
			if !win.done[pid] {
				pending++
				if !f.gone(pid, now) {
					silent = false
				}
			}
		}
		left := deadline.Sub(now)
		if pending == 0 || silent || left <= 0 {
			break
		}
		f.sleep(min(left, pollEvery(pending)))
	}
	for pid := range win.expected {
		if !win.done[pid] {
			done.Missing = append(done.Missing, f.name(pid))
		}
	}
	if f.windows[win.id] == win {
		delete(f.windows, win.id) // nothing touches win after this: its readings are ours
	}
	f.mu.Unlock()
	sort.Strings(done.Missing)
	for pid := range win.done {
		done.Probes = append(done.Probes, pid)
	}
	sort.Strings(done.Probes)
	fillTable(done, win)
	for _, s := range win.spans {
		done.Trace = append(done.Trace, s...) // OTLP requests concatenated: protobuf merges them
	}
}

// fillTable: fleet_state.fill_table: the readings of done probes by column, or as they are in
// the batch when they carry gauges or samples.
func fillTable(done *pb.WindowDone, win *window) {
	t := &pb.ReadingTable{}
	cols := map[string]*pb.CounterColumn{}
	var names []string
	for _, k := range win.order {
		r := win.raw[k]
		if r == nil || !win.done[k.pid] {
			continue
		}
		if len(r.GetGauges()) > 0 || len(r.GetSamples()) > 0 {
			r.ProbeId = k.pid // the authenticated session's, not what the probe claimed
			done.Batch = append(done.Batch, r)
			continue
		}
		i := uint32(len(t.ProbeId))
		t.ProbeId = append(t.ProbeId, k.pid)
		t.Node = append(t.Node, r.GetNode())
		t.StartUnixNs = append(t.StartUnixNs, r.GetStartUnixNs())
		t.EndUnixNs = append(t.EndUnixNs, r.GetEndUnixNs())
		t.Error = append(t.Error, r.GetError())
		t.Pod = append(t.Pod, r.GetPod())
		for name, v := range r.GetCounters() {
			col := cols[name]
			if col == nil {
				col = &pb.CounterColumn{Name: name}
				cols[name] = col
				names = append(names, name)
			}
			col.Rows = append(col.Rows, i)
			col.Values = append(col.Values, v)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		t.Counters = append(t.Counters, cols[n])
	}
	done.Table = t
	done.Readings = uint32(len(done.Batch) + len(t.ProbeId))
}
